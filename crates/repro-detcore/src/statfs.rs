//! statfs/fstatfs (and statvfs, which the C library builds on them): the figures of a file system the guest sees.
//!
//! The host's figures (free space of its disks, their size, their fsid) vary between runs and machines. The guest
//! sees the run's own: a writable file system (the run's writable layer: the overlay over the working directory,
//! /tmp, /home; also /dev and /dev/shm) reports the run's `--disk` limit as its size, and as used what the guest
//! wrote there (a function of what it did); a read-only one (the host's directories, bound read-only) reports
//! fixed figures and no free space. Pseudo file systems (/proc, /sys: no blocks) keep their zeros.
//! The type, the name length and the mount flags stay real (they are the sandbox's, the same in every run).

/// ST_RDONLY in `f_flags`.
pub const ST_RDONLY: u64 = 1;
/// The block size every pinned file system reports.
pub const BLOCK: u64 = 4096;
/// Blocks (of [`BLOCK`] bytes) of a read-only file system: 16 GiB.
pub const READ_ONLY_BLOCKS: u64 = 4 << 20;
/// Inodes of a read-only file system.
pub const READ_ONLY_FILES: u64 = 1 << 20;

/// The fields of `struct statfs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatfsFigures {
    pub fs_type: u64,
    pub bsize: u64,
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub fsid: u64,
    pub namelen: u64,
    pub frsize: u64,
    pub flags: u64,
}

/// The run's writable layer: its size and inode limit (`--disk`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskLimit {
    pub bytes: u64,
    pub inodes: u64,
}

/// The figures the guest sees for a file system whose real figures are `real`.
pub fn view(real: StatfsFigures, disk: DiskLimit) -> StatfsFigures {
    let mut v = StatfsFigures {
        fs_type: real.fs_type,
        namelen: real.namelen,
        flags: real.flags,
        bsize: BLOCK,
        frsize: BLOCK,
        fsid: 0,
        ..Default::default()
    };
    if real.blocks == 0 && real.files == 0 {
        // A pseudo file system (proc, sysfs, cgroup2...): nothing to pin but the block size.
        v.bsize = real.bsize;
        v.frsize = real.frsize;
        return v;
    }
    if real.flags & ST_RDONLY != 0 {
        v.blocks = READ_ONLY_BLOCKS;
        v.files = READ_ONLY_FILES;
        return v;
    }
    let unit = if real.frsize != 0 { real.frsize } else { real.bsize };
    let used_bytes = real.blocks.saturating_sub(real.bfree).saturating_mul(unit);
    v.blocks = disk.bytes / BLOCK;
    let used = used_bytes.div_ceil(BLOCK).min(v.blocks);
    v.bfree = v.blocks - used;
    v.bavail = v.bfree;
    v.files = disk.inodes;
    v.ffree = disk.inodes - real.files.saturating_sub(real.ffree).min(disk.inodes);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    const DISK: DiskLimit = DiskLimit { bytes: 2 << 30, inodes: 100_000 };

    fn fs(blocks: u64, bfree: u64, flags: u64) -> StatfsFigures {
        StatfsFigures {
            fs_type: 0x0102_1994,
            bsize: 4096,
            blocks,
            bfree,
            bavail: bfree,
            files: 500_000,
            ffree: 499_990,
            fsid: 0xdead_beef,
            namelen: 255,
            frsize: 4096,
            flags,
        }
    }

    #[test]
    fn writable_figures_are_the_disk_limit_less_what_was_written() {
        let a = view(fs(1_000_000, 999_000, 0), DISK);
        let b = view(fs(3_000_000, 2_999_000, 0), DISK);
        assert_eq!(a, b, "the host's size does not show");
        assert_eq!(a.blocks, (2 << 30) / 4096);
        assert_eq!(a.blocks - a.bfree, 1000);
        assert_eq!((a.files, a.ffree), (100_000, 99_990));
        assert_eq!((a.fs_type, a.namelen, a.fsid), (0x0102_1994, 255, 0));
        let full = view(fs(10, 0, 0), DiskLimit { bytes: 4096, inodes: 1 });
        assert_eq!((full.blocks, full.bfree, full.ffree), (1, 0, 0), "never more used than there is");
    }

    #[test]
    fn read_only_and_pseudo_file_systems() {
        let ro = view(fs(123, 45, ST_RDONLY | 0x400), DISK);
        assert_eq!((ro.blocks, ro.bfree, ro.bavail, ro.files, ro.ffree), (READ_ONLY_BLOCKS, 0, 0, READ_ONLY_FILES, 0));
        assert_eq!(ro.flags, ST_RDONLY | 0x400);
        let proc = StatfsFigures { fs_type: 0x9fa0, bsize: 4096, frsize: 4096, namelen: 255, ..Default::default() };
        assert_eq!(view(proc, DISK), proc);
    }
}
