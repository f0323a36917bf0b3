//! RDRAND/RDSEED in the code the guest runs: the program of each exec (at the ptrace exec stop) and each shared
//! library it opens are scanned ([`repro_detcore::rdrand`]), once per file and run (cached by device, inode,
//! size and modification time). A program that contains the instruction makes the run not reproducible; a
//! library gets a warning (see the detcore module for why). The files found clean go back to `repro run`, which
//! keeps them in the state directory and passes them to the next runs ([`ScanCache::with_clean`]).
//!
//! The key includes the change time: rewriting a file, even keeping its size and modification time, changes it.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use repro_detcore::rdrand::{self, Site, Verdict};
use repro_model::init::ScannedFile;

use crate::state::{lock, Shared, SharedRef};

/// The largest program header table and executable segment read (larger ones are not scanned: a warning).
const TABLE_MAX: usize = 1 << 16;
const SEGMENT_MAX: u64 = 1 << 30;

/// A file's identity and version.
type FileKey = (u64, u64, u64, i64, i64, i64, i64);

/// The scans made in this run: the sites of each file, and whether their functions were named.
#[derive(Debug, Default)]
pub(crate) struct ScanCache {
    by_file: HashMap<FileKey, (Vec<Site>, bool)>,
    /// The entries of `by_file` that came from earlier runs ([`ScanCache::with_clean`]).
    given: std::collections::HashSet<FileKey>,
}

fn key_of_scanned(f: &ScannedFile) -> FileKey {
    (f.dev, f.ino, f.size, f.mtime.0, f.mtime.1, f.ctime.0, f.ctime.1)
}

impl ScanCache {
    /// A cache that knows `clean` (files earlier runs found free of RDRAND/RDSEED).
    pub(crate) fn with_clean(clean: &[ScannedFile]) -> ScanCache {
        let given: std::collections::HashSet<FileKey> = clean.iter().map(key_of_scanned).collect();
        let by_file = given.iter().map(|k| (*k, (Vec::new(), true))).collect();
        ScanCache { by_file, given }
    }

    /// The files this run scanned and found clean (not those it was given).
    pub(crate) fn newly_clean(&self) -> Vec<ScannedFile> {
        let mut v: Vec<ScannedFile> = self
            .by_file
            .iter()
            .filter(|(k, (sites, _))| sites.is_empty() && !self.given.contains(*k))
            .map(|(k, _)| ScannedFile { dev: k.0, ino: k.1, size: k.2, mtime: (k.3, k.4), ctime: (k.5, k.6) })
            .collect();
        v.sort_by_key(|f| (f.dev, f.ino));
        v
    }
}

/// Code is read and searched this much at a time (with the decoder's window of the chunk before).
const CHUNK: usize = 4 << 20;
const OVERLAP: usize = 512;

fn key_of(m: &std::fs::Metadata) -> FileKey {
    (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec())
}

/// Why a file could not be scanned (said in the run's "not enforced" line for a program).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ScanFileError {
    #[error("opening it: {0}")]
    Open(#[source] std::io::Error),
    #[error("its status: {0}")]
    Status(#[source] std::io::Error),
    #[error("a program header table of {0} bytes")]
    TableTooLarge(usize),
    #[error("reading the program headers: {0}")]
    Headers(#[source] std::io::Error),
    #[error(transparent)]
    Elf(#[from] rdrand::ScanError),
    #[error("an executable segment of {0} bytes")]
    SegmentTooLarge(u64),
    #[error("reading the code at {at:#x}: {source}")]
    Code { at: u64, source: std::io::Error },
}

/// The sites in the ELF file `f` (none for a file that is not ELF: a script's interpreter is an exec of its own);
/// `names`: name their functions from the symbol table (only a program's verdict depends on them).
fn scan(f: &File, names: bool) -> Result<Vec<Site>, ScanFileError> {
    let mut head = [0u8; 64];
    if f.read_exact_at(&mut head, 0).is_err() {
        return Ok(Vec::new()); // shorter than an ELF header: not ELF
    }
    let Ok((phoff, entsize, count)) = rdrand::program_headers(&head) else { return Ok(Vec::new()) };
    let len = entsize.saturating_mul(count);
    if len > TABLE_MAX {
        return Err(ScanFileError::TableTooLarge(len));
    }
    let mut table = vec![0u8; len];
    f.read_exact_at(&mut table, phoff).map_err(ScanFileError::Headers)?;
    let mut sites = Vec::new();
    for seg in rdrand::exec_segments(&table, entsize, count)? {
        if seg.size > SEGMENT_MAX {
            return Err(ScanFileError::SegmentTooLarge(seg.size));
        }
        scan_segment(f, seg, &mut sites)?;
    }
    sites.sort_by_key(|s| s.offset);
    sites.dedup_by_key(|s| s.offset);
    if names && !sites.is_empty() {
        name_functions(f, &head, &mut sites);
    }
    Ok(sites)
}

/// Searches segment `seg` of `f` in chunks of [`CHUNK`], each read with the [`OVERLAP`] bytes before it (an
/// instruction cut at a chunk's end is found whole in the next; sites found twice are merged by the caller).
fn scan_segment(f: &File, seg: rdrand::Segment, sites: &mut Vec<Site>) -> Result<(), ScanFileError> {
    let mut buf = vec![0u8; (seg.size as usize).min(CHUNK) + OVERLAP];
    let mut at = 0u64;
    while at < seg.size {
        let from = at.saturating_sub(OVERLAP as u64);
        let end = (at + CHUNK as u64).min(seg.size);
        let code = &mut buf[..(end - from) as usize];
        f.read_exact_at(code, seg.offset + from)
            .map_err(|source| ScanFileError::Code { at: seg.offset + from, source })?;
        let part = rdrand::Segment { offset: seg.offset + from, size: end - from, vaddr: seg.vaddr.wrapping_add(from) };
        sites.extend(rdrand::scan_code(code, part));
        if sites.len() >= rdrand::MAX_SITES {
            break;
        }
        at = end;
    }
    Ok(())
}

/// The largest symbol or string table read to name the functions of the sites found.
const SYMBOLS_MAX: u64 = 1 << 27;

/// Names the function of each site from the file's symbol tables; a file without them (stripped) or with
/// unreadable ones keeps the sites unnamed, which only makes the verdict the stricter one.
fn name_functions(f: &File, head: &[u8], sites: &mut [Site]) {
    let Ok((shoff, entsize, count)) = rdrand::section_headers(head) else { return };
    let len = entsize.saturating_mul(count);
    let mut table = vec![0u8; len.min(TABLE_MAX)];
    if len > TABLE_MAX || f.read_exact_at(&mut table, shoff).is_err() {
        return;
    }
    let read = |(off, size): (u64, u64)| {
        let mut b = vec![0u8; usize::try_from(size).ok().filter(|&n| n as u64 <= SYMBOLS_MAX)?];
        f.read_exact_at(&mut b, off).ok().map(|_| b)
    };
    for t in rdrand::symbol_tables(&table, entsize, count) {
        let (Some(symbols), Some(strings)) = (read(t.symbols), read(t.strings)) else { continue };
        for site in sites.iter_mut().filter(|s| s.function.is_none()) {
            site.function = rdrand::function_at(&symbols, &strings, site.vaddr);
        }
    }
}

/// Applies a finding to the run.
fn apply(sh: &mut Shared, v: Option<Verdict>) {
    match v {
        Some(Verdict::Refuse(why)) => {
            sh.not_enforced.insert(why);
        }
        Some(Verdict::Warn(w)) => sh.warn(w),
        None => {}
    }
}

/// The scan of `path` from the cache or the file (`names`: with the functions named); `Err` says why it could
/// not be scanned.
fn sites_of(cache: &mut ScanCache, path: &Path, names: bool) -> Result<Vec<Site>, ScanFileError> {
    // The guest names the file: O_NONBLOCK so that a FIFO (or a device) called `x.so` cannot block the
    // supervisor in open, and only a regular file is read (nothing else holds code the guest can map).
    use std::os::unix::fs::OpenOptionsExt;
    let f = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(ScanFileError::Open)?;
    let meta = f.metadata().map_err(ScanFileError::Status)?;
    if !meta.is_file() {
        return Ok(Vec::new());
    }
    let key = key_of(&meta);
    match cache.by_file.get(&key) {
        Some((s, named)) if *named || !names || s.is_empty() => return Ok(s.clone()),
        _ => {}
    }
    let s = scan(&f, names)?;
    if repro_sys::startup::enabled() {
        repro_sys::startup::mark(format!("supervisor: scanned {} for RDRAND ({} bytes)", path.display(), meta.len()));
    }
    cache.by_file.insert(key, (s.clone(), names));
    Ok(s)
}

/// At the exec stop of `tid`: the new program. A program that cannot be read for the scan is recorded as not
/// enforced (the guest may run it, the supervisor cannot look into it).
pub(crate) fn check_exec(tid: i32, shared: &SharedRef) {
    let exe = format!("/proc/{tid}/exe");
    // The name for the message; the scan itself goes through the link (the file that was executed).
    let name = std::fs::read_link(&exe).map_or_else(|_| exe.clone(), |p| p.to_string_lossy().into_owned());
    let mut cache = std::mem::take(&mut lock(shared).rdrand);
    // The functions' names matter only where they can change the verdict: a program outside the system's dirs.
    let names = !rdrand::SYSTEM_DIRS.iter().any(|d| name.starts_with(d));
    let found = sites_of(&mut cache, Path::new(&exe), names);
    let mut sh = lock(shared);
    // Scans other threads cached meanwhile are kept too.
    cache.by_file.extend(std::mem::take(&mut sh.rdrand.by_file));
    sh.rdrand = cache;
    match found {
        Ok(sites) => apply(&mut sh, rdrand::verdict(&name, true, &sites)),
        Err(e) => {
            sh.not_enforced.insert(format!("{name} could not be scanned for RDRAND/RDSEED: {e}"));
        }
    }
}

/// Whether an opened path names a shared library (`*.so`, `*.so.N...`).
pub(crate) fn is_library(path: &[u8]) -> bool {
    let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    name.ends_with(b".so") || name.windows(4).any(|w| w == b".so.")
}

/// A read-only open of a shared library at `path` (the supervisor's view of the guest's path).
pub(crate) fn check_library(sh: &mut Shared, path: &[u8]) {
    let shown = String::from_utf8_lossy(path).into_owned();
    let p = Path::new(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path));
    // A library that cannot be read here fails to open for the guest as well: there is nothing it runs.
    if let Ok(sites) = sites_of(&mut sh.rdrand, p, false) {
        apply(sh, rdrand::verdict(&shown, false, &sites));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::testing::shared;

    #[test]
    fn libraries_are_named_like_libraries() {
        assert!(is_library(b"/usr/lib/x86_64-linux-gnu/libcrypto.so.3"));
        assert!(is_library(b"/x/_ssl.cpython-311-x86_64-linux-gnu.so"));
        assert!(!is_library(b"/usr/bin/python3"));
        assert!(!is_library(b"/home/x.so.d/conf"));
    }

    /// The guest names the library: a FIFO called `x.so` (or a directory) must not block or fail the supervisor.
    #[test]
    fn a_fifo_or_directory_named_like_a_library_is_not_read() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("evil.so");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
        assert!(made.success());
        let dir = d.path().join("dir.so");
        std::fs::create_dir(&dir).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut cache = ScanCache::default();
            let r =
                (sites_of(&mut cache, &fifo, true).map(|s| s.len()), sites_of(&mut cache, &dir, true).map(|s| s.len()));
            let _ = tx.send(format!("{r:?}"));
        });
        // A hang guard, not a speed claim: a blocking open of the FIFO would never return.
        let got = rx.recv_timeout(std::time::Duration::from_secs(30)).expect("the scan of a FIFO returned");
        assert_eq!(got, "(Ok(0), Ok(0))");
    }

    #[test]
    fn files_are_scanned_once_and_findings_are_warnings() {
        let d = tempfile::tempdir().unwrap();
        // A minimal ELF file: one executable segment holding rdrand rax.
        let mut elf = vec![0u8; 0x200];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf[32..40].copy_from_slice(&64u64.to_le_bytes());
        elf[54..56].copy_from_slice(&56u16.to_le_bytes());
        elf[56..58].copy_from_slice(&1u16.to_le_bytes());
        elf[64..68].copy_from_slice(&1u32.to_le_bytes());
        elf[68..72].copy_from_slice(&5u32.to_le_bytes());
        elf[72..80].copy_from_slice(&0x100u64.to_le_bytes());
        elf[96..104].copy_from_slice(&0x10u64.to_le_bytes());
        elf[0x100..0x104].copy_from_slice(&[0x48, 0x0f, 0xc7, 0xf0]);
        let lib = d.path().join("librd.so");
        std::fs::write(&lib, &elf).unwrap();
        let mut sh = shared(1, 1000);
        let path = lib.as_os_str().as_encoded_bytes().to_vec();
        check_library(&mut sh, &path);
        check_library(&mut sh, &path);
        assert_eq!(sh.rdrand.by_file.len(), 1, "cached");
        let w: Vec<_> = sh.stats.warnings.iter().collect();
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("librd.so contains RDRAND at file offset 0x100"), "{w:?}");
        check_library(&mut sh, b"/nonexistent/libx.so");
        assert!(sh.not_enforced.is_empty(), "a library is never refused");
    }

    /// Clean files go to the next run, which does not read them again; a file changed since is read again (its
    /// change time moved, even with its size and modification time kept).
    #[test]
    fn clean_files_are_passed_on_and_not_read_again_while_unchanged() {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let lib = d.path().join("libclean.so");
        let mut elf = vec![0u8; 0x200];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        std::fs::write(&lib, &elf).unwrap();
        let path = lib.as_os_str().as_encoded_bytes().to_vec();
        let mut sh = shared(1, 1000);
        check_library(&mut sh, &path);
        let clean = sh.rdrand.newly_clean();
        let m = std::fs::metadata(&lib).unwrap();
        assert_eq!(
            clean,
            [ScannedFile {
                dev: m.dev(),
                ino: m.ino(),
                size: m.size(),
                mtime: (m.mtime(), m.mtime_nsec()),
                ctime: (m.ctime(), m.ctime_nsec())
            }]
        );
        // The next run is given it: nothing new, and the file is not read (it now holds RDRAND, unseen).
        let mut next = shared(1, 1000);
        next.rdrand = ScanCache::with_clean(&clean);
        let mtime = std::fs::File::options().write(true).open(&lib).unwrap().metadata().unwrap().modified().unwrap();
        let rdrand_at_0x100 = {
            // One executable segment holding rdrand rax, as in the test above.
            let mut e = elf.clone();
            e[32..40].copy_from_slice(&64u64.to_le_bytes());
            e[54..56].copy_from_slice(&56u16.to_le_bytes());
            e[56..58].copy_from_slice(&1u16.to_le_bytes());
            e[64..68].copy_from_slice(&1u32.to_le_bytes());
            e[68..72].copy_from_slice(&5u32.to_le_bytes());
            e[72..80].copy_from_slice(&0x100u64.to_le_bytes());
            e[96..104].copy_from_slice(&0x10u64.to_le_bytes());
            e[0x100..0x104].copy_from_slice(&[0x48, 0x0f, 0xc7, 0xf0]);
            e
        };
        check_library(&mut next, &path);
        assert!(next.rdrand.newly_clean().is_empty() && next.stats.warnings.is_empty());
        // Rewritten in place with the same size and modification time: the change time differs, so it is read.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&lib, &rdrand_at_0x100).unwrap();
        std::fs::File::options().write(true).open(&lib).unwrap().set_modified(mtime).unwrap();
        let now = std::fs::metadata(&lib).unwrap();
        assert_eq!((now.size(), now.mtime(), now.mtime_nsec()), (m.size(), m.mtime(), m.mtime_nsec()));
        check_library(&mut next, &path);
        assert_eq!(next.stats.warnings.len(), 1, "{:?}", next.stats.warnings);
        assert!(next.rdrand.newly_clean().is_empty(), "a file with RDRAND is not clean");
    }
}
