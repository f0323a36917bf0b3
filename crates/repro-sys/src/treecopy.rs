//! Copying a tree someone else made (a guest's writable layer, a stranger's files) into a directory of the host,
//! as a parser of hostile input: both sides are reached only through [`Beneath`] descriptors (openat2 with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`), nothing the source holds is followed, and nothing already in the
//! target is written through.
//!
//! - Regular files are opened `O_RDONLY | O_NONBLOCK | O_NOFOLLOW` and checked with fstat; their data is written
//!   to a new file under an unpredictable name (`O_EXCL | O_NOFOLLOW`) in the target directory, then renamed over
//!   the final name. Holes stay holes (`SEEK_DATA`/`SEEK_HOLE`): a sparse file costs what it holds.
//! - Symbolic links are made again as links (their target is only written), also by a rename over the name.
//! - Directories are made (mode 0700 while filled, their own permission bits after), or entered when one is
//!   there; a link or a file in its place is not.
//! - Anything else (fifos, sockets, device nodes) is never opened: it is reported as skipped, as is whatever
//!   would go over the [`Limits`] (one file's logical size, the total bytes written, the number of entries, the
//!   depth, the free space of the target) or fails.
//!
//! Setuid, setgid and sticky bits are never copied; what is made belongs to the caller.
//!
//! A copier made [`Copier::following`] a root copies what a symbolic link leads to instead of the link, as long
//! as the link stays below that root (openat2 `RESOLVE_BENEATH`, [`Beneath::open_following`]): a link that
//! climbs out or is absolute is not followed (reported as [`Why::NotFollowed`]), nor is a link to a directory
//! the copy is inside of (a loop). The chaos harness copies an experiment's `files:` this way.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use nix::unistd::{lseek, Whence};

use crate::beneath::{Beneath, FileKind, Followed, Stat};

/// Bounds of one copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest logical size of one file (holes included); a larger one is skipped as too large.
    pub max_file_bytes: u64,
    /// The bytes of data written in all (holes not counted).
    pub max_total_bytes: u64,
    /// Entries made in all (files, links, directories).
    pub max_entries: u64,
    /// Directory depth below the source.
    pub max_depth: usize,
    /// Entries of one directory listed at most.
    pub max_dir_entries: usize,
    /// Bytes the target's filesystem must still have free after a file is written.
    pub keep_free: u64,
}

impl Limits {
    /// Bounds for a copy of a layer of `bytes` bytes and `inodes` inodes: no file and no total larger than the
    /// layer, no more entries than it has inodes, and 64 MiB left free on the target's filesystem.
    pub fn for_layer(bytes: u64, inodes: u64) -> Limits {
        Limits {
            max_file_bytes: bytes,
            max_total_bytes: bytes,
            max_entries: inodes,
            max_depth: MAX_DEPTH,
            max_dir_entries: inodes.min(usize::MAX as u64) as usize,
            keep_free: 64 << 20,
        }
    }
}

/// Directory depth a walk goes to: every level holds two descriptors.
pub const MAX_DEPTH: usize = 256;

/// Why an entry was not copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// A fifo, socket or device node: never opened, never copied.
    Special,
    /// A file whose logical size is over [`Limits::max_file_bytes`].
    TooLarge { size: u64, limit: u64 },
    /// The copy reached one of its bounds (`what`: bytes, entries, depth, directory entries).
    OverBudget { what: &'static str, limit: u64 },
    /// The target's filesystem would have less than [`Limits::keep_free`] left.
    NoSpace { needed: u64, free: u64 },
    /// Reading or writing it failed (a link or a file where a directory is expected, a permission...).
    Failed(String),
    /// A symbolic link a [`Copier::following`] copy did not follow: it leads out of the root, is absolute,
    /// dangles, or leads to a directory the copy is inside of.
    NotFollowed(String),
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Why::Special => write!(f, "not a regular file, directory or symbolic link"),
            Why::TooLarge { size, limit } => write!(f, "{size} bytes, over the limit of {limit}"),
            Why::OverBudget { what, limit } => write!(f, "over the copy's bound of {limit} {what}"),
            Why::NoSpace { needed, free } => {
                write!(f, "{needed} bytes needed, {free} free on the target's filesystem (keeping a margin)")
            }
            Why::Failed(m) => write!(f, "{m}"),
            Why::NotFollowed(m) => write!(f, "a symbolic link not followed: {m}"),
        }
    }
}

/// An entry left out, by its path relative to the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    pub rel: PathBuf,
    /// What it is (`None` when even its status could not be read).
    pub kind: Option<FileKind>,
    pub why: Why,
}

/// What a copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Entries made (files, links, directories).
    pub entries: u64,
    /// Data bytes written (holes not counted).
    pub bytes: u64,
    pub skipped: Vec<Skip>,
    /// The regular files written, by their path relative to the source and their size (only when
    /// [`Copier::recording_files`]).
    pub files: Vec<(PathBuf, u64)>,
}

/// One copy: the bounds and what has been done so far (the bounds hold over every call made with it).
#[derive(Debug)]
pub struct Copier {
    limits: Limits,
    report: Report,
    /// Directories whose mode is set once filled (deepest last).
    pending_modes: Vec<(PathBuf, u32)>,
    /// Links are followed below this root ([`Copier::following`]).
    follow: Option<Follow>,
    record_files: bool,
}

#[derive(Debug)]
struct Follow {
    root: Beneath,
    /// The source directories the copy is inside of (device, inode): a link to one of them is a loop.
    inside: Vec<(u64, u64)>,
}

/// A piece of a regular file's content, in order: data, or a hole (reads as zeros).
#[derive(Debug)]
pub enum Extent<'a> {
    Data(&'a [u8]),
    Hole(u64),
}

/// Reads the first `len` bytes of `f` piece by piece, a hole reported by its length and never read
/// (`SEEK_DATA`/`SEEK_HOLE`; a filesystem without them gives one data piece). Returns the bytes of data read.
pub fn for_each_extent(f: &File, len: u64, mut each: impl FnMut(u64, Extent<'_>) -> io::Result<()>) -> io::Result<u64> {
    let mut buf = vec![0u8; 1 << 16];
    let mut pos = 0u64;
    let mut data = 0u64;
    while pos < len {
        let start = match lseek(f.as_fd(), pos as i64, Whence::SeekData) {
            Ok(o) => (o as u64).min(len),
            // ENXIO: nothing but a hole from `pos` to the end.
            Err(nix::errno::Errno::ENXIO) => len,
            Err(nix::errno::Errno::EINVAL) => pos,
            Err(e) => return Err(io::Error::from_raw_os_error(e as i32)),
        };
        if start > pos {
            each(pos, Extent::Hole(start - pos))?;
            pos = start;
            continue;
        }
        let end = match lseek(f.as_fd(), pos as i64, Whence::SeekHole) {
            Ok(o) => (o as u64).min(len),
            Err(_) => len,
        };
        let end = if end <= pos { len } else { end };
        while pos < end {
            let want = ((end - pos) as usize).min(buf.len());
            let n = f.read_at(&mut buf[..want], pos)?;
            if n == 0 {
                // The file shrank: what is left reads as zeros (its recorded length is what was asked).
                each(pos, Extent::Hole(len - pos))?;
                return Ok(data);
            }
            each(pos, Extent::Data(&buf[..n]))?;
            pos += n as u64;
            data += n as u64;
        }
    }
    Ok(data)
}

impl Copier {
    pub fn new(limits: Limits) -> Copier {
        Copier { limits, report: Report::default(), pending_modes: Vec::new(), follow: None, record_files: false }
    }

    /// Follows symbolic links while they stay below `root` (copying what they lead to under the link's name).
    /// Every `rel` given to this copier must then be relative to `root`.
    pub fn following(mut self, root: Beneath) -> io::Result<Copier> {
        let st = root.stat_self()?;
        self.follow = Some(Follow { root, inside: vec![(st.dev, st.ino)] });
        Ok(self)
    }

    /// Lists the regular files written in [`Report::files`].
    pub fn recording_files(mut self) -> Copier {
        self.record_files = true;
        self
    }

    /// A [`Copier::following`] copy of what `rel` (below the root, links in it followed while they stay below)
    /// leads to, into `to_name` of `dst` (a directory's content too). An error when `rel` itself leads nowhere
    /// below the root (missing: ENOENT; out through a link: EXDEV); what is not copied below it is in the
    /// report.
    pub fn copy_path(&mut self, rel: &Path, dst: &Beneath, to_name: &OsStr) -> io::Result<()> {
        let Some(follow) = &self.follow else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "copy_path needs a copier following links"));
        };
        let (st, what) = follow.root.open_following(rel)?;
        self.copy_followed(st, what, rel, dst, to_name, 0);
        Ok(())
    }

    fn copy_followed(&mut self, st: Stat, what: Followed, rel: &Path, dst: &Beneath, to_name: &OsStr, depth: usize) {
        if self.report.entries >= self.limits.max_entries {
            let limit = self.limits.max_entries;
            return self.skip(rel, Some(st.kind), Why::OverBudget { what: "entries", limit });
        }
        self.report.entries += 1;
        let r = match what {
            Followed::File(f) => self.copy_open_file(f, &st, dst, to_name, rel),
            Followed::Dir(from) => self.copy_dir_from(from, &st, dst, to_name, rel, depth),
            Followed::Other => Err(Why::Special),
        };
        if let Err(why) = r {
            self.report.entries -= 1;
            self.skip(rel, Some(st.kind), why);
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Records `rel` as skipped for `why`.
    pub fn skip(&mut self, rel: &Path, kind: Option<FileKind>, why: Why) {
        self.report.skipped.push(Skip { rel: rel.to_path_buf(), kind, why });
    }

    /// Copies every entry of `src` into `dst` (entries already in `dst` are replaced, directories merged).
    /// `rel` is where `src` is, for the report.
    pub fn copy_contents(&mut self, src: &Beneath, dst: &Beneath, rel: &Path, depth: usize) {
        let names = match src.list(self.limits.max_dir_entries) {
            Ok(n) => n,
            Err(e) => {
                let why = Why::Failed(format!("cannot list: {e}"));
                self.skip(rel, Some(FileKind::Dir), why);
                return;
            }
        };
        for name in names {
            self.copy_entry(src, &name, dst, &name, &rel.join(&name), true, depth);
        }
    }

    /// Copies the entry `name` of `src` to `to_name` in `dst`; a directory's content too when `recurse`. Whatever
    /// is not copied is in the report; nothing here fails the whole copy.
    #[allow(clippy::too_many_arguments)]
    pub fn copy_entry(
        &mut self,
        src: &Beneath,
        name: &OsStr,
        dst: &Beneath,
        to_name: &OsStr,
        rel: &Path,
        recurse: bool,
        depth: usize,
    ) {
        let st = match src.stat(name) {
            Ok(s) => s,
            Err(e) => return self.skip(rel, None, Why::Failed(format!("cannot read its status: {e}"))),
        };
        if !matches!(st.kind, FileKind::File | FileKind::Dir | FileKind::Symlink) {
            return self.skip(rel, Some(st.kind), Why::Special);
        }
        if st.kind == FileKind::Symlink {
            if let Some(follow) = &self.follow {
                return match follow.root.open_following(rel) {
                    Ok((st, what)) => self.copy_followed(st, what, rel, dst, to_name, depth),
                    Err(e) => self.skip(rel, Some(st.kind), Why::NotFollowed(leads_nowhere(&e))),
                };
            }
        }
        if self.report.entries >= self.limits.max_entries {
            let limit = self.limits.max_entries;
            return self.skip(rel, Some(st.kind), Why::OverBudget { what: "entries", limit });
        }
        // Counted before a directory's content is, so that the bound holds below it too.
        self.report.entries += 1;
        let r = match st.kind {
            FileKind::File => self.copy_file(src, name, &st, dst, to_name, rel),
            FileKind::Symlink => src.read_link(name).and_then(|t| dst.symlink_replace(&t, to_name)).map_err(fail),
            _ => self.copy_dir(src, name, &st, dst, to_name, rel, recurse, depth),
        };
        if let Err(why) = r {
            self.report.entries -= 1;
            self.skip(rel, Some(st.kind), why);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn copy_dir(
        &mut self,
        src: &Beneath,
        name: &OsStr,
        st: &Stat,
        dst: &Beneath,
        to_name: &OsStr,
        rel: &Path,
        recurse: bool,
        depth: usize,
    ) -> Result<(), Why> {
        if depth >= self.limits.max_depth {
            return Err(Why::OverBudget { what: "levels of directories", limit: self.limits.max_depth as u64 });
        }
        if recurse {
            let from = src.subdir(name, None).map_err(fail)?;
            self.copy_dir_from(from, st, dst, to_name, rel, depth)
        } else {
            dst.subdir(to_name, Some(0o700)).map_err(fail)?;
            self.pending_modes.push((rel.to_path_buf(), st.mode));
            Ok(())
        }
    }

    /// Makes `to_name` in `dst` and copies `from`'s content into it (`st` is `from`'s status).
    fn copy_dir_from(
        &mut self,
        from: Beneath,
        st: &Stat,
        dst: &Beneath,
        to_name: &OsStr,
        rel: &Path,
        depth: usize,
    ) -> Result<(), Why> {
        if depth >= self.limits.max_depth {
            return Err(Why::OverBudget { what: "levels of directories", limit: self.limits.max_depth as u64 });
        }
        if let Some(follow) = &mut self.follow {
            if follow.inside.contains(&(st.dev, st.ino)) {
                return Err(Why::NotFollowed("it leads to a directory the copy is inside of (a loop)".into()));
            }
            follow.inside.push((st.dev, st.ino));
        }
        let made = dst.subdir(to_name, Some(0o700)).map_err(fail);
        if let Ok(to) = &made {
            self.copy_contents(&from, to, rel, depth + 1);
        }
        if let Some(follow) = &mut self.follow {
            follow.inside.pop();
        }
        made?.chmod(st.mode).map_err(fail)
    }

    fn copy_file(
        &mut self,
        src: &Beneath,
        name: &OsStr,
        st: &Stat,
        dst: &Beneath,
        to_name: &OsStr,
        rel: &Path,
    ) -> Result<(), Why> {
        if st.size > self.limits.max_file_bytes {
            return Err(Why::TooLarge { size: st.size, limit: self.limits.max_file_bytes });
        }
        let f = src.open_file(name).map_err(fail)?;
        self.copy_open_file(f, st, dst, to_name, rel)
    }

    /// Copies the open regular file `f` (whose status was `st`) to `to_name` in `dst`.
    fn copy_open_file(&mut self, f: File, st: &Stat, dst: &Beneath, to_name: &OsStr, rel: &Path) -> Result<(), Why> {
        let limits = self.limits;
        let md = f.metadata().map_err(fail)?;
        let (size, allocated) = {
            use std::os::unix::fs::MetadataExt;
            (md.len(), md.blocks().saturating_mul(512).min(md.len()))
        };
        if size > limits.max_file_bytes {
            return Err(Why::TooLarge { size, limit: limits.max_file_bytes });
        }
        if self.report.bytes.saturating_add(allocated) > limits.max_total_bytes {
            return Err(Why::OverBudget { what: "bytes", limit: limits.max_total_bytes });
        }
        let (free, _) = dst.free_space().map_err(fail)?;
        if free < allocated.saturating_add(limits.keep_free) {
            return Err(Why::NoSpace { needed: allocated, free });
        }
        let (tmp, out) = dst.create_temp().map_err(fail)?;
        let budget = limits.max_total_bytes - self.report.bytes;
        let written = for_each_extent(&f, size, |at, e| match e {
            Extent::Data(d) => {
                if at.saturating_add(d.len() as u64) > size {
                    return Err(io::Error::other("the file grew while copied"));
                }
                out.write_all_at(d, at)
            }
            Extent::Hole(_) => Ok(()),
        })
        .and_then(|n| {
            if n > budget {
                return Err(io::Error::other(format!("over the copy's bound of {} bytes", limits.max_total_bytes)));
            }
            out.set_len(size)?;
            nix::sys::stat::fchmod(out.as_fd(), nix::sys::stat::Mode::from_bits_truncate(st.mode & 0o777))
                .map_err(|e| io::Error::from_raw_os_error(e as i32))?;
            Ok(n)
        })
        .and_then(|n| dst.rename_replace(&tmp, dst, to_name).map(|()| n));
        match written {
            Ok(n) => {
                self.report.bytes += n;
                if self.record_files {
                    self.report.files.push((rel.to_path_buf(), size));
                }
                Ok(())
            }
            Err(e) => {
                let _ = dst.remove(&tmp, false);
                Err(fail(e))
            }
        }
    }

    /// Sets the modes of the directories made without their content ([`Copier::copy_entry`] with `recurse`
    /// false), deepest first, once everything below them is written; `root` is the target the `rel` paths are
    /// below.
    pub fn set_pending_modes(&mut self, root: &Beneath) {
        let mut pending = std::mem::take(&mut self.pending_modes);
        pending.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
        for (rel, mode) in pending {
            if let Err(e) = walk_to(root, &rel, false).and_then(|d| d.chmod(mode)) {
                self.skip(&rel, Some(FileKind::Dir), Why::Failed(format!("cannot set its mode: {e}")));
            }
        }
    }

    /// What the copy did so far.
    pub fn report(&self) -> &Report {
        &self.report
    }

    pub fn finish(self) -> Report {
        self.report
    }
}

/// The directory `rel` below `root`, component by component (each one a directory, never a link; made with
/// mode 0700 when `create`).
pub fn walk_to(root: &Beneath, rel: &Path, create: bool) -> io::Result<Beneath> {
    walk_to_with(root, rel, create.then_some(0o700))
}

/// [`walk_to`], making missing directories with `create`'s mode.
pub fn walk_to_with(root: &Beneath, rel: &Path, create: Option<u32>) -> io::Result<Beneath> {
    let mut comps = rel.components().map(|c| c.as_os_str().to_os_string()).collect::<Vec<OsString>>().into_iter();
    let Some(first) = comps.next() else {
        return root.subdir_self();
    };
    let mut d = root.subdir(&first, create)?;
    for c in comps {
        d = d.subdir(&c, create)?;
    }
    Ok(d)
}

/// Why a link leads nowhere below the root, from [`Beneath::open_following`]'s error.
fn leads_nowhere(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EXDEV) => "it leads out of the directory copied (or is absolute)".into(),
        Some(libc::ENOENT) => "it leads to nothing".into(),
        Some(libc::ELOOP) => "too many levels of links".into(),
        _ => e.to_string(),
    }
}

fn fail(e: io::Error) -> Why {
    Why::Failed(match e.raw_os_error() {
        Some(libc::ELOOP) => "a symbolic link where a directory or file was expected: not followed".into(),
        _ => e.to_string(),
    })
}

/// Copies the whole tree `src` into the new directory `to_name` of `dst` (which must not exist), within
/// `limits`.
pub fn copy_tree(src: &Beneath, dst: &Beneath, to_name: &OsStr, limits: Limits) -> io::Result<Report> {
    dst.subdir(to_name, Some(0o700))?;
    let to = dst.subdir(to_name, None)?;
    let mut c = Copier::new(limits);
    c.copy_contents(src, &to, Path::new(""), 0);
    let mode = src.stat_self().map(|s| s.mode).unwrap_or(0o755);
    to.chmod(mode)?;
    Ok(c.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn limits() -> Limits {
        Limits { keep_free: 0, ..Limits::for_layer(8 << 20, 1000) }
    }

    #[test]
    fn copies_without_following_and_skips_what_is_not_a_file_dir_or_link() {
        let d = std::env::temp_dir().join(format!("repro-treecopy-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let (src, dst, outside) = (d.join("src"), d.join("dst"), d.join("outside"));
        for p in [&src, &dst, &outside] {
            std::fs::create_dir_all(p).unwrap();
        }
        std::fs::write(outside.join("canary"), "canary").unwrap();
        // The source: a file, a link out, a fifo, a sparse file within the bound and one over it, a directory.
        std::fs::write(src.join("payload"), "guest").unwrap();
        std::os::unix::fs::symlink(outside.join("canary"), src.join("out")).unwrap();
        let s = Beneath::open(&src).unwrap();
        s.mkfifo("fifo", 0o644).unwrap();
        let sparse = std::fs::File::create(src.join("sparse")).unwrap();
        sparse.set_len(4 << 20).unwrap();
        sparse.write_all_at(b"end", 4 << 20).unwrap();
        std::fs::File::create(src.join("huge")).unwrap().set_len(1 << 30).unwrap();
        std::fs::create_dir(src.join("sub")).unwrap();
        std::fs::write(src.join("sub/x"), "x").unwrap();
        // The target already holds links where the copy writes, aimed at the canary, and a link where a
        // directory goes.
        std::os::unix::fs::symlink(outside.join("canary"), dst.join("payload")).unwrap();
        std::os::unix::fs::symlink(&outside, dst.join("sub")).unwrap();
        let t = Beneath::open(&dst).unwrap();
        let mut c = Copier::new(limits());
        c.copy_contents(&s, &t, Path::new(""), 0);
        let r = c.finish();

        assert_eq!(std::fs::read_to_string(outside.join("canary")).unwrap(), "canary");
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1, "nothing made outside");
        assert_eq!(std::fs::read_to_string(dst.join("payload")).unwrap(), "guest", "the link was replaced");
        assert!(!std::fs::symlink_metadata(dst.join("payload")).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_link(dst.join("out")).unwrap(), outside.join("canary"), "a link stays a link");
        let sp = std::fs::metadata(dst.join("sparse")).unwrap();
        assert_eq!(sp.len(), (4 << 20) + 3);
        assert!(sp.blocks() * 512 < 1 << 20, "holes kept: {} bytes allocated", sp.blocks() * 512);
        assert_eq!(r.bytes, 3 + "guest".len() as u64, "only data is counted");
        let why = |n: &str| r.skipped.iter().find(|s| s.rel == Path::new(n)).map(|s| s.why.clone());
        assert_eq!(why("fifo"), Some(Why::Special));
        assert!(matches!(why("huge"), Some(Why::TooLarge { .. })), "{r:?}");
        assert!(matches!(why("sub"), Some(Why::Failed(_))), "a link where a directory goes: {r:?}");
        assert!(std::fs::symlink_metadata(dst.join("sub")).unwrap().file_type().is_symlink());
        assert!(!dst.join("fifo").exists() && !dst.join("huge").exists());
        let left: Vec<_> = std::fs::read_dir(&dst)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".repro-tmp-"))
            .collect();
        assert!(left.is_empty(), "temporary files left: {left:?}");

        // Bounds: a total of 4 bytes lets one file through, not the next; an entry bound stops the rest.
        let small = Limits { max_total_bytes: 4, max_entries: 2, ..limits() };
        let t2 = t.subdir("again", Some(0o755)).unwrap();
        let mut c = Copier::new(small);
        c.copy_contents(&s, &t2, Path::new(""), 0);
        let r = c.finish();
        assert_eq!(r.entries, 2, "{r:?}");
        assert!(r.skipped.iter().any(|s| matches!(s.why, Why::OverBudget { what: "bytes", .. })), "{r:?}");
        assert!(r.skipped.iter().any(|s| matches!(s.why, Why::OverBudget { what: "entries", .. })), "{r:?}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn following_copies_what_links_below_the_root_lead_to_and_nothing_out() {
        let d = std::env::temp_dir().join(format!("repro-treecopy-follow-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let (root, dst, outside) = (d.join("root"), d.join("dst"), d.join("outside"));
        for p in [root.join("lib"), root.join("other"), dst.clone(), outside.clone()] {
            std::fs::create_dir_all(p).unwrap();
        }
        std::fs::write(outside.join("canary"), "canary").unwrap();
        std::fs::write(root.join("a"), "aaa").unwrap();
        std::fs::write(root.join("other/o"), "o").unwrap();
        let link = |t: &Path, n: &str| std::os::unix::fs::symlink(t, root.join(n)).unwrap();
        link(Path::new("../a"), "lib/x");
        link(Path::new("../other"), "lib/sib");
        link(Path::new("../../outside/canary"), "lib/out");
        link(&outside.join("canary"), "lib/abs");
        link(Path::new(".."), "lib/loop");
        link(Path::new("missing"), "lib/dangling");
        Beneath::open(&root).unwrap().mkfifo("fifo", 0o644).unwrap();
        link(Path::new("../fifo"), "lib/tofifo");
        link(Path::new("lib"), "libs");

        let t = Beneath::open(&dst).unwrap();
        let mut c = Copier::new(limits()).following(Beneath::open(&root).unwrap()).unwrap().recording_files();
        c.copy_path(Path::new("libs"), &t, OsStr::new("lib")).unwrap();
        for (bad, errno) in [("lib/out", libc::EXDEV), ("lib/abs", libc::EXDEV), ("nope", libc::ENOENT)] {
            let e = c.copy_path(Path::new(bad), &t, OsStr::new("z")).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(errno), "{bad}: {e}");
        }
        let r = c.finish();
        assert_eq!(std::fs::read_to_string(dst.join("lib/x")).unwrap(), "aaa", "a link inside is followed");
        assert!(!std::fs::symlink_metadata(dst.join("lib/x")).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(dst.join("lib/sib/o")).unwrap(), "o");
        let mut files: Vec<_> = r.files.iter().map(|(p, n)| (p.display().to_string(), *n)).collect();
        files.sort();
        assert_eq!(files, [("libs/sib/o".to_string(), 1), ("libs/x".to_string(), 3)]);
        let why = |n: &str| r.skipped.iter().find(|s| s.rel == Path::new(n)).map(|s| s.why.clone());
        for n in ["libs/out", "libs/abs", "libs/loop", "libs/dangling"] {
            assert!(matches!(why(n), Some(Why::NotFollowed(_))), "{n}: {r:?}");
            assert!(std::fs::symlink_metadata(dst.join("lib").join(Path::new(n).file_name().unwrap())).is_err());
        }
        assert_eq!(why("libs/tofifo"), Some(Why::Special), "a fifo behind a link is never opened");
        assert_eq!(std::fs::read_to_string(outside.join("canary")).unwrap(), "canary");
        assert!(!dst.join("z").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn extents_report_holes_without_reading_them() {
        let f = tempfile_in_tmp();
        f.set_len(1 << 20).unwrap();
        f.write_all_at(b"abc", 512 << 10).unwrap();
        let (mut data, mut holes) = (0u64, 0u64);
        let n = for_each_extent(&f, 1 << 20, |_, e| {
            match e {
                Extent::Data(d) => data += d.len() as u64,
                Extent::Hole(h) => holes += h,
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(data + holes, 1 << 20);
        assert_eq!(n, data);
        assert!(data < 1 << 20, "a hole was read: {data} bytes of data");
    }

    fn tempfile_in_tmp() -> File {
        let p = std::env::temp_dir().join(format!("repro-extents-{}", std::process::id()));
        let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        f
    }
}
