//! Deterministic inode numbers and logical file times.
//!
//! Inode (and device) numbers are handed out in the order the guest first sees each file, so they depend
//! only on what the guest does. Timestamps of files that existed before the run depend on where the file
//! lives ([`FileOrigin`]): the host's installation (system and toolchain directories, binds) keeps its
//! times, which are inputs like the files' contents and do not change from run to run (caches such as
//! Python's `.pyc` files compare them: pinned, every module is compiled again on every run); the working
//! directory's are pinned to one instant just before the epoch (a checkout's times differ from clone to
//! clone). Timestamps written during the run are mapped, order-preservingly, to logical times: a file
//! changed later always looks newer than any other written during the run, so `make` still works.

use std::collections::{BTreeMap, HashMap};

use crate::clock::NSEC_PER_SEC;

/// A file's identity as the kernel reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileIdentity {
    pub dev: u64,
    pub ino: u64,
}

/// Hands out small, deterministic inode and device numbers.
#[derive(Debug, Clone, Default)]
pub struct InodeMap {
    inodes: HashMap<FileIdentity, u64>,
    devs: HashMap<u64, u64>,
}

/// First virtual inode number (small numbers look odd to some tools; 1 and 2 are special on ext*).
pub const FIRST_INODE: u64 = 1000;

impl InodeMap {
    /// The virtual inode number of a file.
    pub fn inode(&mut self, id: FileIdentity) -> u64 {
        let next = FIRST_INODE + self.inodes.len() as u64;
        *self.inodes.entry(id).or_insert(next)
    }

    /// The virtual device number of a device (as `makedev(0, n)` with n counting from 1... encoded plainly).
    pub fn dev(&mut self, dev: u64) -> u64 {
        let next = 0x100 + self.devs.len() as u64;
        *self.devs.entry(dev).or_insert(next)
    }
}

/// Where a file the guest looks at lives, which decides what its times look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOrigin {
    /// A pseudo file system (/proc, /sys, /dev...): its times follow the host's clock, not writes.
    Pseudo,
    /// The host's installation outside the working directory (read-only system directories, toolchains,
    /// `--bind` trees): a file that predates the run keeps its host modification time, and its access, change and
    /// birth times read as that too (the host's access time moves when anything reads the file; a replayed pack's
    /// root gets back the modification time only, which is all a pack records).
    Host,
    /// Everything else: the working directory, the sandbox's own files (its tmpfs root, /tmp, /home, the
    /// generated /etc files) and a replayed pack's root: times before the run are pinned.
    Run,
}

/// Access, modification and change times in nanoseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileTimes {
    pub atime: i128,
    pub mtime: i128,
    pub ctime: i128,
}

/// Maps real file timestamps to logical ones.
///
/// Keys are (file, real time): two files written within one tick of the host's coarse file clock carry
/// the same real time, yet must not look simultaneous in one run and ordered in the next, so ties
/// between different files are ordered by first observation (a later-seen file looks newer).
#[derive(Debug, Clone)]
pub struct FileTimeMap {
    run_start_real_ns: i128,
    pinned_ns: i128,
    /// (real time, tie-break sequence) -> logical time, in real-time order.
    ordered: BTreeMap<(i128, u64), i128>,
    by_file: HashMap<(FileIdentity, i128), i128>,
}

impl FileTimeMap {
    /// `run_start_real_ns`: real time when the run started (older timestamps are inputs and get pinned);
    /// `epoch_ns`: the logical epoch.
    pub fn new(run_start_real_ns: i128, epoch_ns: i128) -> Self {
        FileTimeMap {
            run_start_real_ns,
            pinned_ns: epoch_ns - NSEC_PER_SEC as i128,
            ordered: BTreeMap::new(),
            by_file: HashMap::new(),
        }
    }

    /// The logical time for real timestamp `real` of file `id`, seen when the logical realtime clock
    /// reads `now`.
    pub fn map(&mut self, id: FileIdentity, real: i128, now: i128) -> i128 {
        if real < self.run_start_real_ns {
            return self.pinned_ns;
        }
        if let Some(&l) = self.by_file.get(&(id, real)) {
            return l;
        }
        let seq = self.by_file.len() as u64;
        let key = (real, seq);
        let below = self.ordered.range(..key).next_back().map(|(_, &l)| l);
        let above = self.ordered.range(key..).next().map(|(_, &l)| l);
        let logical = match (below, above) {
            (None, None) => now.max(self.pinned_ns + 1),
            (Some(b), None) => now.max(b + 1000),
            (b, Some(a)) => {
                let lo = b.unwrap_or(self.pinned_ns);
                if a - lo >= 2 {
                    lo + (a - lo) / 2
                } else {
                    lo
                }
            }
        };
        self.ordered.insert(key, logical);
        self.by_file.insert((id, real), logical);
        logical
    }

    /// Maps all three times of a file.
    pub fn map_times(&mut self, id: FileIdentity, real: FileTimes, now: i128) -> FileTimes {
        // Map in time order so that the three keep their relative order even when first seen together.
        let mut order = [(real.atime, 0), (real.mtime, 1), (real.ctime, 2)];
        order.sort();
        let mut out = [0i128; 3];
        for (t, i) in order {
            out[i] = self.map(id, t, now);
        }
        FileTimes { atime: out[0], mtime: out[1], ctime: out[2] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn inodes_are_numbered_in_order_of_first_sight() {
        let mut m = InodeMap::default();
        let a = FileIdentity { dev: 5, ino: 999_999 };
        let b = FileIdentity { dev: 5, ino: 3 };
        assert_eq!(m.inode(a), FIRST_INODE);
        assert_eq!(m.inode(b), FIRST_INODE + 1);
        assert_eq!(m.inode(a), FIRST_INODE);
        assert_eq!(m.inode(FileIdentity { dev: 6, ino: 3 }), FIRST_INODE + 2);
        assert_eq!(m.dev(77), 0x100);
        assert_eq!(m.dev(12), 0x101);
        assert_eq!(m.dev(77), 0x100);
    }

    #[test]
    fn old_files_are_pinned_new_files_follow_the_logical_clock() {
        let start = 1_000 * NSEC_PER_SEC as i128;
        let epoch = 50 * NSEC_PER_SEC as i128;
        let mut m = FileTimeMap::new(start, epoch);
        let f = |ino| FileIdentity { dev: 1, ino };
        assert_eq!(m.map(f(1), 3, epoch), epoch - NSEC_PER_SEC as i128);
        assert_eq!(m.map(f(1), start - 1, epoch), epoch - NSEC_PER_SEC as i128);
        let now = epoch + 7;
        let a = m.map(f(1), start + 100, now);
        assert_eq!(a, now);
        let b = m.map(f(2), start + 200, now);
        assert!(b > a);
        // Seen later but written earlier: still ordered between its neighbours.
        let c = m.map(f(3), start + 150, now);
        assert!(a < c && c < b);
        let d = m.map(f(4), start + 10, now);
        assert!(d < a && d > epoch - NSEC_PER_SEC as i128);
        assert_eq!(m.map(f(3), start + 150, now + 1_000_000), c);
    }

    #[test]
    fn files_written_in_the_same_host_tick_are_ordered_by_first_sight() {
        let mut m = FileTimeMap::new(0, 0);
        let a = m.map(FileIdentity { dev: 1, ino: 1 }, 500, 10);
        let b = m.map(FileIdentity { dev: 1, ino: 2 }, 500, 10);
        assert!(b > a);
        assert_eq!(m.map(FileIdentity { dev: 1, ino: 1 }, 500, 99), a);
        // The same file's three times, equal on the host, stay equal.
        let t = m.map_times(FileIdentity { dev: 1, ino: 3 }, FileTimes { atime: 700, mtime: 700, ctime: 700 }, 10);
        assert!(t.atime == t.mtime && t.mtime == t.ctime);
    }

    proptest! {
        #[test]
        fn mapping_preserves_order(times in proptest::collection::vec(0i64..1_000_000, 1..100)) {
            let start = 0i128;
            let mut m = FileTimeMap::new(start, 1_000_000_000_000);
            let mut pairs = Vec::new();
            for (i, t) in times.iter().enumerate() {
                let l = m.map(FileIdentity { dev: 0, ino: *t as u64 }, *t as i128 * 1_000_000, 1_000_000_000_000 + i as i128);
                pairs.push((*t, l));
            }
            for (t1, l1) in &pairs {
                for (t2, l2) in &pairs {
                    if t1 < t2 { prop_assert!(l1 <= l2); }
                    if t1 == t2 { prop_assert_eq!(l1, l2); }
                }
            }
        }
    }
}
