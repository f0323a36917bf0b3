//! The guest's file closure: from the paths the supervisor saw the guest use to the entries of a pack.
//!
//! Every accessed path is resolved component by component on the host, the way the kernel would in the guest:
//! each symbolic link met on the way becomes an entry and resolution continues at its target, so that
//! `/usr/bin/python3 -> python3.11` and `/lib64 -> usr/lib64` chains replay. Parents are directories. A file the
//! guest read, executed or mapped is packed with its content; one it only stat'ed keeps its size (a sparse file
//! on replay); names it only saw in a directory listing keep their type. Executed scripts add their `#!`
//! interpreter.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Read;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::archive::BlobSource;
use crate::manifest::{AccessKind, Digest, EntryKind, FileEntry};
use crate::store::DigestCache;
use crate::PackError;

/// One path the guest used and how. Paths are bytes: a name that is not UTF-8 is packed with its exact bytes
/// (`path_hex` in the manifest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub path: PathBuf,
    pub kinds: Vec<AccessKind>,
}

/// What to leave out and where guest paths live on the host.
#[derive(Debug, Clone, Default)]
pub struct ClosureOptions {
    /// Guest path prefixes that are not inputs (the sandbox's /proc, /sys, /dev, /tmp, /home, fixed /etc files).
    pub excluded: Vec<String>,
    /// Prefixes under which `excluded` does not apply (the working directory, bind mounts).
    pub exempt: Vec<String>,
    /// Prefixes that are never packed, not even when exempt (the state directory).
    pub hidden: Vec<String>,
    /// `(guest prefix, host prefix)`: where a guest path is read on the host (bind mounts); longest first.
    pub map: Vec<(String, String)>,
    /// Where the digests of host files are cached between captures ([`crate::store::DigestCache`]).
    pub digest_cache: Option<PathBuf>,
    /// Prefixes whose entries get no modification time (the working directory: its times are pinned in every
    /// run, and a checkout's differ from clone to clone); every other entry records its host's.
    pub untimed: Vec<String>,
}

fn trim_slashes(p: &[u8]) -> &[u8] {
    let n = p.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
    &p[..n]
}

fn under(path: &[u8], prefix: &[u8]) -> bool {
    let prefix = trim_slashes(prefix);
    prefix.is_empty() || path == prefix || (path.starts_with(prefix) && path.get(prefix.len()) == Some(&b'/'))
}

fn os(b: &[u8]) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(b))
}

impl ClosureOptions {
    pub(crate) fn skipped(&self, guest: &[u8]) -> bool {
        if self.hidden.iter().any(|h| under(guest, h.as_bytes())) {
            return true;
        }
        // The parents of an exempt path (the working directory under /tmp) are kept too.
        self.excluded.iter().any(|x| under(guest, x.as_bytes()))
            && !self.exempt.iter().any(|x| under(guest, x.as_bytes()) || under(x.as_bytes(), guest))
    }

    pub(crate) fn host(&self, guest: &[u8]) -> PathBuf {
        for (g, h) in &self.map {
            if under(guest, g.as_bytes()) {
                let mut p = trim_slashes(h.as_bytes()).to_vec();
                p.extend_from_slice(&guest[trim_slashes(g.as_bytes()).len()..]);
                return PathBuf::from(OsString::from_vec(p));
            }
        }
        os(guest)
    }
}

/// The result: entries by guest path (its exact bytes; for UTF-8 paths the order of their text) and the blobs
/// their contents are in.
#[derive(Debug, Default)]
pub struct Closure {
    pub entries: BTreeMap<Vec<u8>, FileEntry>,
    pub blobs: BTreeMap<Digest, BlobSource>,
}

const MAX_LINKS: u32 = 40;

fn rank(k: EntryKind) -> u8 {
    match k {
        EntryKind::Listed => 0,
        EntryKind::Sized => 1,
        EntryKind::File => 2,
        EntryKind::Dir | EntryKind::Symlink => 3,
    }
}

fn hash_file(p: &Path, md: &fs::Metadata, cache: &mut DigestCache) -> Result<(Digest, u64), PackError> {
    if let Some(d) = cache.lookup(p, md) {
        return Ok((d, md.size()));
    }
    let mut f = fs::File::open(p).map_err(|e| PackError::io("cannot read", p, e))?;
    let mut h = blake3::Hasher::new();
    let n = std::io::copy(&mut f, &mut h).map_err(|e| PackError::io("cannot read", p, e))?;
    let d = h.finalize().to_hex().to_string();
    if n == md.size() {
        cache.remember(p, md, &d);
    }
    Ok((d, n))
}

/// The interpreter of a `#!` script, if `p` is one.
fn shebang(p: &Path) -> Option<Vec<u8>> {
    let mut f = fs::File::open(p).ok()?;
    let mut head = [0u8; 256];
    let n = f.read(&mut head).ok()?;
    let head = &head[..n];
    let rest = head.strip_prefix(b"#!")?;
    let line = rest.split(|&b| b == b'\n').next()?;
    let interp = line.split(|b| b.is_ascii_whitespace()).find(|w| !w.is_empty())?;
    (interp.first() == Some(&b'/')).then(|| interp.to_vec())
}

/// The PT_INTERP of a 64-bit little-endian ELF executable (the dynamic loader the kernel opens by path).
fn elf_interpreter(p: &Path) -> Option<Vec<u8>> {
    use std::io::{Seek, SeekFrom};
    let mut f = fs::File::open(p).ok()?;
    let mut eh = [0u8; 64];
    f.read_exact(&mut eh).ok()?;
    if &eh[..4] != b"\x7fELF" || eh[4] != 2 || eh[5] != 1 {
        return None;
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as u64;
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
    let (phoff, phentsize, phnum) = (u64_at(&eh, 0x20), u16_at(&eh, 0x36), u16_at(&eh, 0x38));
    if phentsize < 56 || phnum > 256 {
        return None;
    }
    let mut ph = vec![0u8; (phentsize * phnum) as usize];
    f.seek(SeekFrom::Start(phoff)).ok()?;
    f.read_exact(&mut ph).ok()?;
    for i in 0..phnum as usize {
        let h = &ph[i * phentsize as usize..];
        if u32::from_le_bytes([h[0], h[1], h[2], h[3]]) == 3 {
            let (off, size) = (u64_at(h, 8), u64_at(h, 32).min(4096));
            let mut name = vec![0u8; size as usize];
            f.seek(SeekFrom::Start(off)).ok()?;
            f.read_exact(&mut name).ok()?;
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            return Some(name[..end].to_vec()).filter(|s| s.first() == Some(&b'/'));
        }
    }
    None
}

impl Closure {
    /// Builds the closure of `accesses`.
    pub fn build(accesses: &[Access], opts: &ClosureOptions) -> Result<Closure, PackError> {
        let mut c = Closure::default();
        let mut queue: VecDeque<(Vec<u8>, Vec<AccessKind>)> =
            accesses.iter().map(|a| (a.path.as_os_str().as_bytes().to_vec(), a.kinds.clone())).collect();
        let mut execs_seen = std::collections::HashSet::new();
        // No cache configured: an empty one that is never saved.
        let mut digests = opts.digest_cache.as_ref().map(DigestCache::load).unwrap_or_default();
        while let Some((path, kinds)) = queue.pop_front() {
            let Some(fin) = c.resolve(&path, opts)? else { continue };
            let host = opts.host(&fin);
            let Ok(md) = fs::symlink_metadata(&host) else { continue };
            let mode = md.permissions().mode() & 0o7777;
            let reads = kinds.iter().any(|k| k.reads());
            if md.is_dir() {
                c.add(&fin, EntryKind::Dir, mode, None, None, None, &kinds);
                if kinds.contains(&AccessKind::List) {
                    c.add_listing(&fin, &host, opts)?;
                }
            } else if md.is_file() {
                if reads {
                    let (d, size) = hash_file(&host, &md, &mut digests)?;
                    c.blobs.entry(d.clone()).or_insert_with(|| BlobSource::File(host.clone()));
                    c.add(&fin, EntryKind::File, mode, Some(size), Some(d), None, &kinds);
                    if kinds.contains(&AccessKind::Exec) && execs_seen.insert(fin.clone()) {
                        if let Some(interp) = shebang(&host).or_else(|| elf_interpreter(&host)) {
                            queue.push_back((interp, vec![AccessKind::Exec]));
                        }
                    }
                } else {
                    c.add(&fin, EntryKind::Sized, mode, Some(md.size()), None, None, &kinds);
                }
            }
            // Sockets, fifos and devices outside /dev are not packed.
        }
        digests.save();
        c.record_times(opts);
        Ok(c)
    }

    /// Records the host's modification time of every entry outside `opts.untimed` and not above it: the
    /// directories that lead to the working directory (`/tmp`, `/var/tmp`, `/root`) change whenever anything is
    /// made beside it, so two captures of the same run would differ.
    fn record_times(&mut self, opts: &ClosureOptions) {
        for (path, e) in self.entries.iter_mut() {
            if opts.untimed.iter().any(|u| under(path, u.as_bytes()) || under(u.as_bytes(), path)) {
                continue;
            }
            if let Ok(md) = fs::symlink_metadata(opts.host(path)) {
                e.mtime_ns = md.mtime().checked_mul(1_000_000_000).and_then(|s| s.checked_add(md.mtime_nsec()));
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        path: &[u8],
        kind: EntryKind,
        mode: u32,
        size: Option<u64>,
        blake3: Option<Digest>,
        target: Option<&OsStr>,
        access: &[AccessKind],
    ) {
        let (target, target_hex) = match target.map(repro_model::pathenc::encode) {
            Some((t, h)) => (Some(t), h),
            None => (None, None),
        };
        let e = self.entries.entry(path.to_vec()).or_insert_with(|| {
            let (text, path_hex) = repro_model::pathenc::encode(OsStr::from_bytes(path));
            FileEntry {
                path: text,
                path_hex,
                kind,
                mode,
                size,
                blake3: blake3.clone(),
                target: target.clone(),
                target_hex: target_hex.clone(),
                access: Vec::new(),
                mtime_ns: None,
            }
        });
        if rank(kind) > rank(e.kind) {
            e.kind = kind;
            e.size = size;
            e.blake3 = blake3;
            e.target = target;
            e.target_hex = target_hex;
            e.mode = mode;
        }
        for a in access {
            if !e.access.contains(a) {
                e.access.push(*a);
            }
        }
        e.access.sort();
    }

    fn add_listing(&mut self, dir: &[u8], host: &Path, opts: &ClosureOptions) -> Result<(), PackError> {
        let rd = fs::read_dir(host).map_err(|e| PackError::io("cannot list", host, e))?;
        let mut names: Vec<_> = rd.filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
        names.sort();
        for name in names {
            // A name that is not UTF-8 is kept with its exact bytes (`path_hex` in the manifest).
            let mut guest = trim_slashes(dir).to_vec();
            guest.push(b'/');
            guest.extend_from_slice(name.as_bytes());
            if opts.skipped(&guest) {
                continue;
            }
            let hp = host.join(&name);
            let Ok(md) = fs::symlink_metadata(&hp) else { continue };
            let mode = md.permissions().mode() & 0o7777;
            if md.file_type().is_symlink() {
                let t = fs::read_link(&hp).map_err(|e| PackError::io("cannot read the link", &hp, e))?;
                self.add(&guest, EntryKind::Symlink, 0o777, None, None, Some(t.as_os_str()), &[]);
            } else if md.is_dir() {
                self.add(&guest, EntryKind::Dir, mode, None, None, None, &[]);
            } else if md.is_file() {
                self.add(&guest, EntryKind::Listed, mode, None, None, None, &[]);
            }
        }
        Ok(())
    }

    /// Resolves `path` like the kernel, adding the directories and links met; returns the final guest path
    /// when it exists and is not excluded.
    fn resolve(&mut self, path: &[u8], opts: &ClosureOptions) -> Result<Option<Vec<u8>>, PackError> {
        if path.first() != Some(&b'/') {
            return Ok(None);
        }
        let mut todo: VecDeque<Vec<u8>> = comps(path);
        let mut done = b"/".to_vec();
        let mut links = 0;
        while let Some(c) = todo.pop_front() {
            if c == b".." {
                if let Some(i) = done.iter().rposition(|&b| b == b'/') {
                    done.truncate(i.max(1));
                }
                continue;
            }
            let mut cand = if done == b"/" { Vec::new() } else { done.clone() };
            cand.push(b'/');
            cand.extend_from_slice(&c);
            if opts.skipped(&cand) {
                return Ok(None);
            }
            let host = opts.host(&cand);
            let Ok(md) = fs::symlink_metadata(&host) else {
                // A parent of a bind mount's guest path need not exist on the host.
                if opts.map.iter().any(|(g, _)| under(g.as_bytes(), &cand)) {
                    self.add(&cand, EntryKind::Dir, 0o755, None, None, None, &[]);
                    done = cand;
                    continue;
                }
                return Ok(None);
            };
            if md.file_type().is_symlink() {
                links += 1;
                if links > MAX_LINKS {
                    return Ok(None);
                }
                let t = fs::read_link(&host).map_err(|e| PackError::io("cannot read the link", &host, e))?;
                let ts = t.as_os_str().as_bytes();
                self.add(&cand, EntryKind::Symlink, 0o777, None, None, Some(t.as_os_str()), &[]);
                let mut next = comps(ts);
                while let Some(x) = next.pop_back() {
                    todo.push_front(x);
                }
                if ts.first() == Some(&b'/') {
                    done = b"/".to_vec();
                }
            } else if md.is_dir() {
                self.add(&cand, EntryKind::Dir, md.permissions().mode() & 0o7777, None, None, None, &[]);
                done = cand;
            } else {
                if !todo.is_empty() {
                    return Ok(None);
                }
                done = cand;
            }
        }
        Ok(Some(done))
    }
}

/// The components of `p`, without empty and `.` ones (as the kernel resolves them); `..` is kept.
fn comps(p: &[u8]) -> VecDeque<Vec<u8>> {
    p.split(|&b| b == b'/').filter(|c| !c.is_empty() && *c != b".").map(|c| c.to_vec()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn acc(p: &Path, kinds: &[&str]) -> Access {
        Access { path: p.to_path_buf(), kinds: kinds.iter().map(|s| AccessKind::parse(s).unwrap()).collect() }
    }

    #[test]
    fn follows_link_chains_and_keeps_each_link() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        fs::create_dir_all(r.join("usr/lib")).unwrap();
        fs::write(r.join("usr/lib/libx.so.1.2"), b"ELF").unwrap();
        symlink("libx.so.1.2", r.join("usr/lib/libx.so.1")).unwrap();
        symlink("usr/lib", r.join("lib")).unwrap();
        fs::write(r.join("statted"), b"0123456789").unwrap();
        let c = Closure::build(
            &[
                acc(&r.join("lib/libx.so.1"), &["open"]),
                acc(&r.join("statted"), &["stat"]),
                acc(&r.join("nope"), &["open"]),
            ],
            &ClosureOptions::default(),
        )
        .unwrap();
        let key = |s: &str| format!("{}/{s}", r.display()).into_bytes();
        assert_eq!(c.entries[&key("lib")].kind, EntryKind::Symlink);
        assert_eq!(c.entries[&key("lib")].target.as_deref(), Some("usr/lib"));
        assert_eq!(c.entries[&key("usr/lib/libx.so.1")].kind, EntryKind::Symlink);
        let f = &c.entries[&key("usr/lib/libx.so.1.2")];
        assert_eq!((f.kind, f.size, f.access.clone()), (EntryKind::File, Some(3), vec![AccessKind::Open]));
        assert!(c.blobs.contains_key(f.blake3.as_ref().unwrap()));
        let s = &c.entries[&key("statted")];
        assert_eq!((s.kind, s.size, s.blake3.clone()), (EntryKind::Sized, Some(10), None));
        assert!(!c.entries.contains_key(&key("nope")));
        assert_eq!(c.entries[&key("usr")].kind, EntryKind::Dir);
    }

    #[test]
    fn listings_exclusions_and_shebangs() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        fs::create_dir_all(r.join("w/sub")).unwrap();
        fs::create_dir_all(r.join("w/.repro")).unwrap();
        fs::write(r.join("w/a.txt"), b"a").unwrap();
        fs::write(r.join("interp"), b"I").unwrap();
        fs::write(r.join("w/run.sh"), format!("#!{}/interp -x\necho\n", r.display())).unwrap();
        fs::create_dir_all(r.join("skip")).unwrap();
        fs::write(r.join("skip/x"), b"x").unwrap();
        let w = r.join("w").to_string_lossy().into_owned();
        let opts = ClosureOptions {
            excluded: vec![r.join("skip").to_string_lossy().into_owned()],
            hidden: vec![format!("{w}/.repro")],
            ..Default::default()
        };
        let c = Closure::build(
            &[acc(&r.join("w"), &["list"]), acc(&r.join("w/run.sh"), &["exec"]), acc(&r.join("skip/x"), &["open"])],
            &opts,
        )
        .unwrap();
        let key = |s: &str| format!("{}/{s}", r.display()).into_bytes();
        assert_eq!(c.entries[&key("w/a.txt")].kind, EntryKind::Listed);
        assert_eq!(c.entries[&key("w/sub")].kind, EntryKind::Dir);
        assert!(!c.entries.contains_key(&key("w/.repro")));
        assert_eq!(c.entries[&key("w/run.sh")].kind, EntryKind::File);
        assert_eq!(c.entries[&key("interp")].kind, EntryKind::File, "the #! interpreter is packed");
        assert!(!c.entries.contains_key(&key("skip/x")));
    }

    /// Names that are not UTF-8 are kept with their exact bytes, opened or listed, and through a link.
    #[test]
    fn names_that_are_not_utf8_are_kept() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        let raw = |s: &[u8]| r.join(OsStr::from_bytes(s));
        fs::create_dir_all(raw(b"w/d\xff")).unwrap();
        fs::write(raw(b"w/d\xff/data-\xfe.txt"), b"x").unwrap();
        fs::write(raw(b"w/listed-\xfd"), b"yy").unwrap();
        symlink(OsStr::from_bytes(b"d\xff"), raw(b"w/l\xfc")).unwrap();
        let c = Closure::build(
            &[acc(&raw(b"w/l\xfc/data-\xfe.txt"), &["open"]), acc(&r.join("w"), &["list"])],
            &ClosureOptions::default(),
        )
        .unwrap();
        let key = |s: &[u8]| [r.as_os_str().as_bytes(), b"/", s].concat();
        let f = &c.entries[&key(b"w/d\xff/data-\xfe.txt")];
        assert_eq!((f.kind, f.size), (EntryKind::File, Some(1)));
        assert_eq!(f.path, format!("{}/w/d\u{fffd}/data-\u{fffd}.txt", r.display()));
        assert_eq!(f.bytes().as_ref(), key(b"w/d\xff/data-\xfe.txt"));
        assert_eq!(c.entries[&key(b"w/d\xff")].kind, EntryKind::Dir);
        let l = &c.entries[&key(b"w/l\xfc")];
        assert_eq!(l.kind, EntryKind::Symlink);
        assert_eq!(l.target_bytes().unwrap().as_ref(), b"d\xff", "the link's target, exactly");
        let l = &c.entries[&key(b"w/listed-\xfd")];
        assert_eq!((l.kind, l.path_hex.is_some()), (EntryKind::Listed, true));
        assert_eq!(c.entries[&key(b"w")].path_hex, None, "a UTF-8 path has no path_hex");
    }

    #[test]
    fn elf_interpreter_of_a_real_program() {
        let sh = fs::canonicalize("/bin/sh").unwrap();
        let interp = elf_interpreter(&sh).expect("a dynamic /bin/sh");
        assert!(interp.starts_with(b"/lib"), "{interp:?}");
        assert_eq!(elf_interpreter(Path::new("/etc/hostname")), None);
    }

    #[test]
    fn bind_mapping_reads_from_the_host_path() {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir_all(d.path().join("host")).unwrap();
        fs::write(d.path().join("host/data"), b"bound").unwrap();
        let opts = ClosureOptions {
            map: vec![("/guest/mnt".into(), d.path().join("host").to_string_lossy().into_owned())],
            ..Default::default()
        };
        let host = opts.host(b"/guest/mnt/data");
        assert_eq!(fs::read(host).unwrap(), b"bound");
        assert!(under(b"/a/b", b"/a") && !under(b"/ab", b"/a") && under(b"/a", b"/a") && under(b"/x", b"/"));
    }
}
