//! Recording of the paths the guest uses, for reproducer packs (`DetConfig::record_access`).
//!
//! Paths come from the syscalls the filter already sends to the supervisor (open/openat, the stat family,
//! getdents64) plus, only while recording, execve/execveat, readlink/readlinkat, access/faccessat/faccessat2
//! and chdir, which are let through unchanged after their path is noted. At every exec stop the file-backed
//! mappings of the new image (the program and its ELF interpreter, which the kernel opens without a syscall of
//! the guest) are noted too. Relative paths are made absolute with the task's cwd or the directory descriptor.
//! Each path is stored once with a bit set of how it was used, so the cost is a hash-set insert per syscall.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::decode::{PathUse, Syscall};
use crate::guest::Guest;

const OPEN: u8 = 1;
const EXEC: u8 = 2;
const MAP: u8 = 4;
const STAT: u8 = 8;
const LIST: u8 = 16;
const READLINK: u8 = 32;
const CHDIR: u8 = 64;

const NAMES: [(u8, &str); 7] = [
    (OPEN, "open"),
    (EXEC, "exec"),
    (MAP, "map"),
    (STAT, "stat"),
    (LIST, "list"),
    (READLINK, "readlink"),
    (CHDIR, "chdir"),
];

/// A path the guest used and how: `open`, `exec`, `map`, `stat`, `list`, `readlink`, `chdir`. The path is the
/// exact bytes the guest passed (made absolute): a name that is not UTF-8 is kept as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessedPath {
    pub path: PathBuf,
    pub kinds: Vec<String>,
}

/// Syscalls the filter sends to the supervisor only while recording.
pub(crate) fn record_only_syscalls() -> Vec<u32> {
    [
        libc::SYS_execve,
        libc::SYS_execveat,
        libc::SYS_readlink,
        libc::SYS_readlinkat,
        libc::SYS_access,
        libc::SYS_faccessat,
        libc::SYS_faccessat2,
        libc::SYS_chdir,
    ]
    .iter()
    .map(|&n| n as u32)
    .collect()
}

/// Where the paths whose content the guest uses are streamed while it runs ([`crate::DetConfig::access_stream`]).
#[derive(Debug, Clone)]
pub struct AccessStream(pub Arc<std::fs::File>);

impl PartialEq for AccessStream {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
impl Eq for AccessStream {}

/// Kinds of use that need a path's content.
const CONTENT: u8 = OPEN | EXEC | MAP;

#[derive(Debug, Default)]
pub(crate) struct AccessLog {
    paths: HashMap<Vec<u8>, u8>,
    stream: Option<AccessStream>,
    /// A write to the stream failed (the capture loses its head start, not a path: the log keeps them all).
    pub stream_failed: bool,
}

impl AccessLog {
    pub(crate) fn new(stream: Option<AccessStream>) -> AccessLog {
        AccessLog { paths: HashMap::new(), stream, stream_failed: false }
    }

    fn add(&mut self, path: Vec<u8>, kind: u8) {
        let before = self.paths.get(&path).copied().unwrap_or(0);
        if kind & CONTENT != 0 && before & CONTENT == 0 && !path.contains(&b'\n') {
            if let Some(AccessStream(f)) = &self.stream {
                // One write per line, so a reader never sees half a path; a failed write only loses a head start.
                let mut line = path.clone();
                line.push(b'\n');
                if (&**f).write_all(&line).is_err() {
                    self.stream_failed = true;
                }
            }
        }
        self.paths.insert(path, before | kind);
    }

    /// The recorded paths, sorted.
    pub(crate) fn finish(&self) -> Vec<AccessedPath> {
        let mut v: Vec<AccessedPath> = self
            .paths
            .iter()
            .map(|(p, &k)| {
                let path = PathBuf::from(OsString::from_vec(p.clone()));
                let kinds = NAMES.iter().filter(|(b, _)| k & b != 0).map(|(_, n)| n.to_string()).collect();
                AccessedPath { path, kinds }
            })
            .collect();
        // By bytes (for UTF-8 paths the order of their text).
        v.sort_by(|a, b| a.path.as_os_str().as_encoded_bytes().cmp(b.path.as_os_str().as_encoded_bytes()));
        v
    }

    /// Notes the path of a notified syscall. Returns true when the syscall is one that is only notified for
    /// recording (the caller lets it run unchanged).
    pub(crate) fn note<G: Guest>(&mut self, g: &mut G, call: Syscall) -> bool {
        let (dirfd, addr, kind, record_only) = match call {
            Syscall::Open { dirfd, path, .. } => (dirfd, path, OPEN, false),
            Syscall::Stat { dirfd, path: Some(path), .. } => (dirfd, path, STAT, false),
            Syscall::Getdents64 { fd, .. } => {
                if let Some(p) = fd_path(g, fd) {
                    self.add(p, LIST);
                }
                return false;
            }
            Syscall::PathUse { dirfd, path, kind } => {
                let kind = match kind {
                    PathUse::Exec => EXEC,
                    PathUse::Readlink => READLINK,
                    PathUse::Access => STAT,
                    PathUse::Chdir => CHDIR,
                };
                (dirfd, path, kind, true)
            }
            _ => return false,
        };
        if addr != 0 {
            if let Ok(p) = g.read_cstr(addr, 4096) {
                if let Some(abs) = absolute(g, dirfd, &p) {
                    self.add(abs, kind);
                }
            }
        }
        record_only
    }

    /// Notes the file-backed mappings of a task (at its exec stop: the program and its ELF interpreter).
    pub(crate) fn note_maps(&mut self, tid: i32) {
        let Ok(maps) = std::fs::read(format!("/proc/{tid}/maps")) else { return };
        for line in maps.split(|&b| b == b'\n') {
            // address perms offset dev inode pathname
            let mut fields = line.splitn(6, |&b| b == b' ');
            let path = fields.nth(5).map(|p| p.trim_ascii_start());
            if let Some(p) = path {
                if p.first() == Some(&b'/') && !p.ends_with(b" (deleted)") {
                    self.add(p.to_vec(), MAP);
                }
            }
        }
    }
}

/// The path of a task's descriptor (none for a pipe, a socket...).
fn fd_path<G: Guest>(g: &mut G, fd: i32) -> Option<Vec<u8>> {
    let b = g.fd_target(fd).ok()?;
    (b.first() == Some(&b'/')).then_some(b)
}

/// `path` made absolute against the task's cwd or directory descriptor (`None` when that is unknown).
fn absolute<G: Guest>(g: &mut G, dirfd: i32, path: &[u8]) -> Option<Vec<u8>> {
    if path.first() == Some(&b'/') {
        return Some(path.to_vec());
    }
    if path.is_empty() {
        return None;
    }
    let base = if dirfd == libc::AT_FDCWD { g.cwd().ok()? } else { fd_path(g, dirfd)? };
    Some(join(&base, path))
}

fn join(base: &[u8], rel: &[u8]) -> Vec<u8> {
    let mut v = base.to_vec();
    if v.last() != Some(&b'/') {
        v.push(b'/');
    }
    v.extend_from_slice(rel.strip_prefix(b"./").unwrap_or(rel));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_are_joined() {
        assert_eq!(join(b"/a/b", b"c"), b"/a/b/c");
        assert_eq!(join(b"/", b"./c"), b"/c");
        let mut g = crate::guest::fake::FakeGuest::new(3);
        g.cwd_path = b"/work".to_vec();
        g.targets.insert(4, b"/etc".to_vec());
        g.targets.insert(5, b"pipe:[3]".to_vec());
        assert_eq!(absolute(&mut g, libc::AT_FDCWD, b"x").unwrap(), b"/work/x");
        assert_eq!(absolute(&mut g, 4, b"./passwd").unwrap(), b"/etc/passwd");
        assert_eq!(absolute(&mut g, 5, b"x"), None, "a pipe is no directory");
        assert_eq!(absolute(&mut g, libc::AT_FDCWD, b"/abs").unwrap(), b"/abs");
        assert_eq!(absolute(&mut g, libc::AT_FDCWD, b""), None);
    }

    #[test]
    fn notified_calls_note_their_paths() {
        use crate::decode::decode;
        let mut g = crate::guest::fake::FakeGuest::new(3);
        g.cwd_path = b"/w".to_vec();
        g.put(0x100, b"bin/tool\0").put(0x200, b"/lib/x.so\0");
        g.targets.insert(7, b"/data".to_vec());
        let mut log = AccessLog::default();
        assert!(log.note(&mut g, decode(libc::SYS_execve, [0x100, 0, 0, 0, 0, 0])), "record-only: let through");
        assert!(!log.note(&mut g, decode(libc::SYS_openat, [0, 0x200, 0, 0, 0, 0])), "mediated: handled further");
        assert!(!log.note(&mut g, decode(libc::SYS_getdents64, [7, 0, 0, 0, 0, 0])));
        assert!(!log.note(&mut g, decode(libc::SYS_clock_gettime, [0; 6])));
        let out: Vec<(String, Vec<String>)> =
            log.finish().into_iter().map(|a| (a.path.display().to_string(), a.kinds)).collect();
        let want = |p: &str, k: &str| (p.to_string(), vec![k.to_string()]);
        assert_eq!(out, [want("/data", "list"), want("/lib/x.so", "open"), want("/w/bin/tool", "exec")]);
    }

    #[test]
    fn kinds_accumulate_and_maps_are_read() {
        let mut log = AccessLog::default();
        log.add(b"/x".to_vec(), OPEN);
        log.add(b"/x".to_vec(), STAT);
        log.note_maps(std::process::id() as i32);
        log.add(b"/y\xff".to_vec(), OPEN);
        let out = log.finish();
        assert_eq!(out.iter().find(|a| a.path.as_os_str() == "/x").unwrap().kinds, ["open", "stat"]);
        let raw = out.iter().find(|a| a.path.as_os_str().as_encoded_bytes() == b"/y\xff");
        assert_eq!(raw.expect("a path that is not UTF-8 is kept, not dropped").kinds, ["open"]);
        let stream = tempfile::NamedTempFile::new().unwrap();
        let mut log = AccessLog::new(Some(AccessStream(Arc::new(stream.reopen().unwrap()))));
        log.add(b"/a".to_vec(), STAT);
        log.add(b"/a".to_vec(), OPEN);
        log.add(b"/a".to_vec(), MAP);
        log.add(b"/b".to_vec(), EXEC);
        log.add(b"/c\nd".to_vec(), OPEN);
        log.add(b"/e".to_vec(), LIST);
        assert_eq!(std::fs::read(stream.path()).unwrap(), b"/a\n/b\n", "content uses, once each, whole lines");
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert!(out.iter().any(|a| a.path == exe && a.kinds == ["map"]), "{out:?}");
    }
}
