//! Debian packages: the owner of a path from dpkg's `info/*.list`, its version and architecture from `status`,
//! the recorded md5 from `info/*.md5sums`, diversions from `diversions`, the purl's namespace and distro from
//! `os-release`.
//!
//! The `.list` files are read once per call and only the lines that are a candidate for one of the used files
//! are kept (a hash-set lookup per line, no allocation): a system's 100,000 and more listed paths cost one
//! pass.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use md5::{Digest as _, Md5};
use repro_model::provenance::{Check, ComponentKind};

use super::{purl, read_db, token, Contents, Found, Input, Label, RootFs};
use crate::ProvError;

/// The largest `status` read.
pub(super) const MAX_STATUS: u64 = 64 << 20;
/// The largest single `.list` or `.md5sums` file read.
const MAX_LIST: u64 = 64 << 20;
/// The most bytes of `.list` files read in one call.
const MAX_LISTS_TOTAL: u64 = 512 << 20;
/// The largest `diversions` and `os-release` read.
const MAX_SMALL: u64 = 16 << 20;

const INFO: &[u8] = b"/var/lib/dpkg/info";

/// The directories that usrmerge made links into `/usr`.
const MERGED: [&[u8]; 6] = [b"/bin", b"/sbin", b"/lib", b"/lib64", b"/lib32", b"/libx32"];

/// The other spelling of a path under usrmerge: `/bin/x` for `/usr/bin/x` and the reverse.
pub(super) fn usrmerge_alias(path: &[u8]) -> Option<Vec<u8>> {
    for dir in MERGED {
        if path.strip_prefix(dir).is_some_and(|rest| rest.first() == Some(&b'/')) {
            return Some([b"/usr", path].concat());
        }
        if let Some(rest) = path.strip_prefix(b"/usr".as_slice()) {
            if rest.strip_prefix(dir).is_some_and(|r| r.first() == Some(&b'/')) {
                return Some(rest.to_vec());
            }
        }
    }
    None
}

/// The paths dpkg may list a used file under, in the order tried: as it is, its directory canonical within the
/// root, then the usrmerge alias of each.
fn candidates(fs: &RootFs, raw: &[u8]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = vec![raw.to_vec()];
    if let Some(c) = fs.canonical(raw, false) {
        out.push(c);
    }
    let aliases: Vec<Vec<u8>> = out.iter().filter_map(|p| usrmerge_alias(p)).collect();
    out.extend(aliases);
    let mut seen = HashSet::new();
    out.retain(|p| seen.insert(p.clone()));
    out
}

/// One installed package instance, as `status` says.
struct Installed {
    version: String,
    arch: String,
}

/// `status`: the installed packages by (name, architecture).
fn parse_status(data: &[u8]) -> HashMap<(String, String), Installed> {
    let mut out = HashMap::new();
    let text = String::from_utf8_lossy(data);
    for stanza in text.split("\n\n") {
        let (mut name, mut status, mut version, mut arch) = (None, None, None, None);
        for line in stanza.lines() {
            if line.starts_with([' ', '\t']) {
                continue;
            }
            let Some((key, value)) = line.split_once(':') else { continue };
            let value = value.trim();
            match key {
                "Package" => name = token(value),
                "Status" => status = Some(value),
                "Version" => version = token(value),
                "Architecture" => arch = token(value),
                _ => {}
            }
        }
        // `WANT FLAG STATUS`: installed with no error flag, whatever is wanted of it (`hold` too).
        let installed = status.is_some_and(|s| {
            let w: Vec<&str> = s.split_whitespace().collect();
            w.len() == 3 && w[1] == "ok" && w[2] == "installed"
        });
        if let (true, Some(name), Some(version)) = (installed, name, version) {
            let arch = arch.unwrap_or("").to_string();
            out.insert((name.to_string(), arch.clone()), Installed { version: version.to_string(), arch });
        }
    }
    out
}

/// `diversions`: triples of lines (the diverted path, where the package's file went, the diverting package or
/// `:` for a local diversion).
struct Diversion {
    from: Vec<u8>,
    diverter: String,
}

fn parse_diversions(data: &[u8]) -> (HashMap<Vec<u8>, String>, HashMap<Vec<u8>, Diversion>) {
    let mut by_from = HashMap::new();
    let mut by_to = HashMap::new();
    let lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    for t in lines.chunks_exact(3) {
        let (from, to, who) = (t[0], t[1], t[2]);
        if from.first() != Some(&b'/') || to.first() != Some(&b'/') {
            continue;
        }
        let Some(who) = std::str::from_utf8(who).ok().and_then(token) else { continue };
        by_from.insert(from.to_vec(), who.to_string());
        by_to.insert(to.to_vec(), Diversion { from: from.to_vec(), diverter: who.to_string() });
    }
    (by_from, by_to)
}

/// os-release: the purl namespace (`ID`, default `debian`) and the `distro` qualifier (`ID-VERSION_ID`).
fn os_release(fs: &RootFs) -> Result<(String, Option<String>), ProvError> {
    let mut data = None;
    for p in [b"/etc/os-release".as_slice(), b"/usr/lib/os-release"] {
        if let Some(host) = fs.host(p) {
            data = read_db(&host, MAX_SMALL, "os-release")?;
            if data.is_some() {
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(data.as_deref().unwrap_or_default()).into_owned();
    let field = |key: &str| {
        text.lines().find_map(|l| {
            let v = l.trim().strip_prefix(key)?.strip_prefix('=')?.trim();
            let v = v.trim_matches(|c| c == '"' || c == '\'').to_ascii_lowercase();
            (!v.is_empty()
                && v.len() <= 64
                && v.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'~')))
            .then_some(v)
        })
    };
    let id = field("ID").unwrap_or_else(|| "debian".into());
    let distro = field("VERSION_ID").map(|v| format!("{id}-{v}"));
    Ok((id, distro))
}

/// The owners found for the candidate paths: `list_names[i]` is the stem of a `.list` file (`bash`,
/// `libc6:amd64`), `owners[path]` the indexes of the stems listing `path`, in name order.
pub(super) struct Lists {
    pub(super) stems: Vec<String>,
    pub(super) owners: HashMap<Vec<u8>, Vec<usize>>,
}

pub(super) fn read_lists(info: &Path, wanted: &HashSet<Vec<u8>>) -> Result<Lists, ProvError> {
    let mut lists = Lists { stems: Vec::new(), owners: HashMap::new() };
    let entries = match std::fs::read_dir(info) {
        Ok(e) => e,
        Err(e) if super::is_missing(&e) => return Ok(lists),
        Err(source) => return Err(ProvError::Read { path: info.into(), source }),
    };
    let filter = Prefilter::new(wanted.iter());
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| ProvError::Read { path: info.into(), source })?;
        let name = entry.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".list")) else { continue };
        if token(stem).is_some() && entry.file_type().is_ok_and(|t| t.is_file()) {
            names.push(stem.to_string());
        }
    }
    names.sort();
    let mut total = 0u64;
    for stem in names {
        let path = info.join(format!("{stem}.list"));
        let Some(data) = read_db(&path, MAX_LIST, "dpkg file list")? else { continue };
        total += data.len() as u64;
        if total > MAX_LISTS_TOTAL {
            return Err(ProvError::TooLarge {
                path: info.into(),
                what: "dpkg file lists, together",
                limit: MAX_LISTS_TOTAL,
            });
        }
        let index = lists.stems.len();
        lists.stems.push(stem);
        let mut look = |line: &[u8]| {
            if filter.may_contain(line) && wanted.contains(line) {
                let owners = lists.owners.entry(line.to_vec()).or_default();
                if owners.last() != Some(&index) {
                    owners.push(index);
                }
            }
        };
        // `str::split` finds line ends with core's word-at-a-time memchr, many times faster than a byte loop in
        // an unoptimised build; a list that is not UTF-8 takes the byte loop.
        match std::str::from_utf8(&data) {
            Ok(text) => text.split('\n').for_each(|l| look(l.as_bytes())),
            Err(_) => data.split(|&b| b == b'\n').for_each(look),
        }
    }
    Ok(lists)
}

/// A Bloom filter of one hash over the wanted paths (their length and last 8 bytes): most listed paths are
/// not wanted, and this rules them out without hashing the whole line.
struct Prefilter {
    bits: Vec<u64>,
}

impl Prefilter {
    const BITS: u32 = 18;

    fn new<'a>(paths: impl Iterator<Item = &'a Vec<u8>>) -> Self {
        let mut f = Prefilter { bits: vec![0; 1 << (Self::BITS - 6)] };
        for p in paths {
            let k = Self::key(p);
            f.bits[k >> 6] |= 1 << (k & 63);
        }
        f
    }

    fn key(line: &[u8]) -> usize {
        let n = line.len();
        let mut tail = [0u8; 8];
        let k = n.min(8);
        tail[..k].copy_from_slice(&line[n - k..]);
        let x = u64::from_le_bytes(tail) ^ (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - Self::BITS)) as usize
    }

    fn may_contain(&self, line: &[u8]) -> bool {
        let k = Self::key(line);
        self.bits[k >> 6] & (1 << (k & 63)) != 0
    }
}

/// The md5s `info/STEM.md5sums` records for the paths `wanted` (relative to `/`, as its `MD5  relative/path`
/// lines name them).
fn read_md5sums(path: &Path, wanted: &HashSet<&[u8]>) -> Result<HashMap<Vec<u8>, [u8; 16]>, ProvError> {
    let mut out = HashMap::new();
    let Some(data) = read_db(path, MAX_LIST, "dpkg md5sums")? else { return Ok(out) };
    let mut look = |line: &[u8]| {
        if line.len() < 35 || line[32] != b' ' || !matches!(line[33], b' ' | b'*') {
            return;
        }
        let rel = &line[34..];
        let rel = rel.strip_prefix(b"/").unwrap_or(rel);
        if wanted.contains(rel) {
            if let Some(md5) = unhex16(&line[..32]) {
                out.insert(rel.to_vec(), md5);
            }
        }
    };
    match std::str::from_utf8(&data) {
        Ok(text) => text.split('\n').for_each(|l| look(l.as_bytes())),
        Err(_) => data.split(|&b| b == b'\n').for_each(look),
    }
    Ok(out)
}

/// An absolute path without its leading `/`.
fn relative(path: &[u8]) -> &[u8] {
    path.strip_prefix(b"/").unwrap_or(path)
}

fn unhex16(h: &[u8]) -> Option<[u8; 16]> {
    let mut out = [0u8; 16];
    for (o, p) in out.iter_mut().zip(h.chunks_exact(2)) {
        let d = |c: u8| (c as char).to_digit(16);
        *o = (d(p[0])? * 16 + d(p[1])?) as u8;
    }
    Some(out)
}

/// Names the dpkg owner of each used file not yet found.
pub(super) fn resolve(
    fs: &RootFs,
    inputs: &[Input],
    contents: &dyn Contents,
    found: &mut [Option<Found>],
) -> Result<(), ProvError> {
    let todo: Vec<usize> = (0..inputs.len()).filter(|&i| found[i].is_none() && inputs[i].raw.is_some()).collect();
    if todo.is_empty() {
        return Ok(());
    }
    let Some(info) = fs.host(INFO) else { return Ok(()) };
    if !info.is_dir() {
        return Ok(());
    }
    let db = |p: &[u8]| fs.host(p);
    let diversions = match db(b"/var/lib/dpkg/diversions") {
        Some(p) => read_db(&p, MAX_SMALL, "dpkg diversions")?.unwrap_or_default(),
        None => Vec::new(),
    };
    let (div_from, div_to) = parse_diversions(&diversions);
    // Each file's own candidates, then (for a compiled Python file, which dpkg does not list) its source's.
    let cands: Vec<(usize, [Vec<Vec<u8>>; 2])> = todo
        .iter()
        .map(|&i| {
            let raw = inputs[i].raw.as_deref().unwrap_or_default();
            let source = super::pyc_source(raw).map(|s| candidates(fs, &s)).unwrap_or_default();
            (i, [candidates(fs, raw), source])
        })
        .collect();
    let mut wanted: HashSet<Vec<u8>> = HashSet::new();
    for (_, tiers) in &cands {
        for c in tiers.iter().flatten() {
            if let Some(d) = div_to.get(c) {
                wanted.insert(d.from.clone());
            }
            wanted.insert(c.clone());
        }
    }
    let lists = read_lists(&info, &wanted)?;
    if lists.owners.is_empty() {
        return Ok(());
    }
    let status = match db(b"/var/lib/dpkg/status") {
        Some(p) => parse_status(&read_db(&p, MAX_STATUS, "dpkg status")?.unwrap_or_default()),
        None => HashMap::new(),
    };
    let mut by_name: HashMap<&str, &Installed> = HashMap::new();
    for ((name, _), inst) in &status {
        // A package installed for one architecture only is found by its bare name (its `.list` has no
        // `:ARCH`); for two, the `.list` names the architecture.
        by_name.entry(name.as_str()).and_modify(|v| *v = if v.arch <= inst.arch { *v } else { inst }).or_insert(inst);
    }
    let installed = |stem: &str| -> Option<&Installed> {
        match stem.split_once(':') {
            Some((name, arch)) => status.get(&(name.to_string(), arch.to_string())),
            None => by_name.get(stem).copied(),
        }
    };
    let package = |stem: usize| lists.stems[stem].split(':').next().unwrap_or_default();
    // The owner of one candidate path: `Some(Some((stem, listed path)))`, `Some(None)` when dpkg says no
    // package's file is there (a local diversion), `None` to try the next candidate.
    let owner_of = |c: &[u8]| -> Option<Option<(usize, Vec<u8>)>> {
        let first_installed = |path: &[u8], except: Option<&str>| {
            lists.owners.get(path)?.iter().copied().find(|&s| {
                except.is_none_or(|e| package(s) != e.split(':').next().unwrap_or(e))
                    && installed(&lists.stems[s]).is_some()
            })
        };
        if let Some(d) = div_to.get(c) {
            // The diverted package's own file, moved here.
            if let Some(s) = first_installed(&d.from, Some(&d.diverter)) {
                return Some(Some((s, d.from.clone())));
            }
        }
        if let Some(diverter) = div_from.get(c) {
            // Here is the diverting package's file (or, for a local diversion, nobody's).
            if diverter == ":" {
                return Some(None);
            }
            let d = diverter.split(':').next().unwrap_or(diverter);
            let s =
                lists.owners.get(c)?.iter().copied().find(|&s| package(s) == d && installed(&lists.stems[s]).is_some());
            return Some(s.map(|s| (s, c.to_vec())));
        }
        first_installed(c, None).map(|s| Some((s, c.to_vec())))
    };
    let (namespace, distro) = os_release(fs)?;
    // Each file's owner and the path it is listed under, then the md5s of those paths, one md5sums file each.
    let owned: Vec<(usize, usize, Vec<u8>, bool)> = cands
        .iter()
        .filter_map(|(i, [own, source])| {
            let of = |cs: &[Vec<u8>]| cs.iter().find_map(|c| owner_of(c)).flatten();
            match of(own) {
                Some((stem, listed)) => Some((*i, stem, listed, false)),
                None => of(source).map(|(stem, listed)| (*i, stem, listed, true)),
            }
        })
        .collect();
    let mut needed: HashMap<usize, HashSet<&[u8]>> = HashMap::new();
    for (_, stem, listed, by_source) in &owned {
        if !by_source {
            needed.entry(*stem).or_default().insert(relative(listed));
        }
    }
    let mut md5sums: HashMap<usize, HashMap<Vec<u8>, [u8; 16]>> = HashMap::new();
    for (stem, paths) in &needed {
        md5sums.insert(*stem, read_md5sums(&info.join(format!("{}.md5sums", lists.stems[*stem])), paths)?);
    }
    for (i, stem, listed, by_source) in &owned {
        let (i, stem) = (*i, *stem);
        let Some(inst) = installed(&lists.stems[stem]) else { continue };
        let name = package(stem);
        let recorded = if *by_source { None } else { md5sums.get(&stem).and_then(|m| m.get(relative(listed))) };
        let check = match recorded {
            None => Check::NotRecorded,
            Some(want) => match contents.bytes(inputs[i].file) {
                None => Check::Unknown,
                Some(bytes) if Md5::digest(&bytes).as_slice() == want => Check::Matches,
                Some(_) => Check::Modified,
            },
        };
        let mut qualifiers = vec![("arch", inst.arch.as_str())];
        if let Some(d) = &distro {
            qualifiers.push(("distro", d.as_str()));
        }
        let purl = purl::purl("deb", &[&namespace], name, Some(&inst.version), &qualifiers);
        found[i] = Some(Found {
            label: Label {
                kind: ComponentKind::Deb,
                name: name.to_string(),
                version: Some(inst.version.clone()),
                purl: Some(purl),
                archive_sha256: None,
            },
            check,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases() {
        assert_eq!(
            usrmerge_alias(b"/lib/x86_64-linux-gnu/libc.so.6").as_deref(),
            Some(b"/usr/lib/x86_64-linux-gnu/libc.so.6".as_slice())
        );
        assert_eq!(usrmerge_alias(b"/usr/bin/bash").as_deref(), Some(b"/bin/bash".as_slice()));
        assert_eq!(
            usrmerge_alias(b"/usr/lib64/ld-linux-x86-64.so.2").as_deref(),
            Some(b"/lib64/ld-linux-x86-64.so.2".as_slice())
        );
        assert_eq!(usrmerge_alias(b"/libfoo/x"), None);
        assert_eq!(usrmerge_alias(b"/usr/share/x"), None);
        assert_eq!(usrmerge_alias(b"/bin"), None);
        assert_eq!(usrmerge_alias(b"/usr/libexec/x"), None);
    }

    #[test]
    fn status_stanzas() {
        let s = b"Package: a\nStatus: install ok installed\nArchitecture: amd64\nVersion: 1:2.0+b1\nDescription: x\n more\n\n\
                  Package: b\nStatus: deinstall ok config-files\nVersion: 1\n\n\
                  Package: c\nStatus: hold ok installed\nArchitecture: all\nVersion: 3\n\n\
                  Package: d\nStatus: install reinstreq half-installed\nVersion: 4\n\n\
                  garbage\n\xff\xfe: \nPackage:\nVersion: 9\n";
        let st = parse_status(s);
        assert_eq!(st.len(), 2);
        assert_eq!(st[&("a".to_string(), "amd64".to_string())].version, "1:2.0+b1");
        assert_eq!(st[&("c".to_string(), "all".to_string())].version, "3");
    }

    #[test]
    fn diversion_triples() {
        let (from, to) =
            parse_diversions(b"/usr/bin/x\n/usr/bin/x.distrib\npkg\n/a\nrelative\npkg\n/b\n/b.local\n:\n/dangling\n");
        assert_eq!(from.len(), 2);
        assert_eq!(from[b"/usr/bin/x".as_slice()], "pkg");
        assert_eq!(to[b"/usr/bin/x.distrib".as_slice()].from, b"/usr/bin/x");
        assert_eq!(to[b"/b.local".as_slice()].diverter, ":");
    }

    #[test]
    fn md5sums_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.md5sums");
        std::fs::write(
            &p,
            b"0123456789abcdef0123456789abcdef  usr/bin/x\nshort\nzz23456789abcdef0123456789abcdef  usr/bin/y\n\
              0123456789abcdef0123456789abcdee  usr/share/a b\n",
        )
        .unwrap();
        let wanted: HashSet<&[u8]> = [b"usr/bin/x".as_slice(), b"usr/bin/y", b"usr/share/a b", b"usr/bin/z"].into();
        let m = read_md5sums(&p, &wanted).unwrap();
        assert_eq!(m.len(), 2);
        assert!(m.contains_key(b"usr/bin/x".as_slice()));
        assert!(m.contains_key(b"usr/share/a b".as_slice()));
    }
}
