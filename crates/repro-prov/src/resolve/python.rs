//! Python distributions: the `RECORD` of each `*.dist-info` (and the `installed-files.txt` of each
//! `*.egg-info`) in the `site-packages` and `dist-packages` directories the used files are in.
//!
//! A RECORD is CSV (`path,sha256=<urlsafe base64, no padding>,size`) with paths relative to the directory it is
//! in, `..` for the scripts in `bin`: every path is resolved lexically, so a used script outside the directory
//! is found too when the run used the directory's modules. Name and version come from `METADATA` (`PKG-INFO`
//! for an egg), else from the directory's name.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use repro_model::provenance::{Check, ComponentKind};
use sha2::Digest as _;

use super::{normalize, parts, purl, read_soft, token, Contents, Found, Input, Label, RootFs};

/// The largest `RECORD` or `installed-files.txt` read.
const MAX_RECORD: u64 = 16 << 20;
/// The most bytes of them read in one call.
const MAX_RECORDS_TOTAL: u64 = 256 << 20;
/// How much of `METADATA` is read for its headers.
const MAX_METADATA: u64 = 1 << 20;
/// The most distribution directories looked at in one call.
const MAX_DISTS: usize = 100_000;
/// The most site directories looked at in one call.
const MAX_SITES: usize = 1_000;

const URL_SAFE: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// One `*.dist-info` or `*.egg-info` directory.
struct Dist {
    dir: PathBuf,
    /// The directory's name.
    dir_name: String,
    egg: bool,
}

/// What a distribution records for one path: its hash field (`sha256=…`), if any.
struct Claim {
    dist: usize,
    hash: Option<Vec<u8>>,
}

/// The site directories (`…/site-packages`, `…/dist-packages`) the normalised path `p` is in.
fn sites_of(p: &[u8], out: &mut BTreeSet<Vec<u8>>) {
    let mut prefix = Vec::with_capacity(p.len());
    for c in parts(p) {
        prefix.push(b'/');
        prefix.extend_from_slice(c);
        if c == b"site-packages" || c == b"dist-packages" {
            out.insert(prefix.clone());
        }
    }
}

/// The records of a CSV file (Python's `csv` dialect: `,` between fields, `"` around a field with a comma, a
/// quote or a line break in it, `""` for a quote). Lenient as Python's reader is; an unterminated quote drops
/// its record.
pub(crate) fn csv_records(data: &[u8]) -> Vec<Vec<Vec<u8>>> {
    let mut records = Vec::new();
    let mut record: Vec<Vec<u8>> = Vec::new();
    let mut field = Vec::new();
    let mut quoted = false;
    let mut i = 0;
    while i < data.len() {
        let b = data[i];
        if quoted {
            if b == b'"' {
                if data.get(i + 1) == Some(&b'"') {
                    field.push(b'"');
                    i += 1;
                } else {
                    quoted = false;
                }
            } else {
                field.push(b);
            }
        } else {
            match b {
                b'"' if field.is_empty() => quoted = true,
                b',' => record.push(std::mem::take(&mut field)),
                b'\n' | b'\r' => {
                    if b == b'\r' && data.get(i + 1) == Some(&b'\n') {
                        i += 1;
                    }
                    record.push(std::mem::take(&mut field));
                    if !(record.len() == 1 && record[0].is_empty()) {
                        records.push(std::mem::take(&mut record));
                    }
                    record.clear();
                }
                _ => field.push(b),
            }
        }
        i += 1;
    }
    if !quoted {
        record.push(field);
        if !(record.len() == 1 && record[0].is_empty()) {
            records.push(record);
        }
    }
    records
}

/// The `Name` and `Version` headers of a METADATA or PKG-INFO file (RFC 822 style, up to the first blank line).
fn metadata(data: &[u8]) -> (Option<String>, Option<String>) {
    let text = String::from_utf8_lossy(data);
    let (mut name, mut version) = (None, None);
    for line in text.lines() {
        if line.trim().is_empty() {
            break;
        }
        let Some((k, v)) = line.split_once(':') else { continue };
        if k.eq_ignore_ascii_case("name") && name.is_none() {
            name = token(v).map(str::to_string);
        } else if k.eq_ignore_ascii_case("version") && version.is_none() {
            version = token(v).map(str::to_string);
        }
    }
    (name, version)
}

/// Name and version from a directory name: `NAME-VERSION.dist-info`, `NAME-VERSION[-pyX.Y].egg-info`.
fn from_dir_name(dir_name: &str) -> (Option<String>, Option<String>) {
    let stem = dir_name.strip_suffix(".dist-info").or_else(|| dir_name.strip_suffix(".egg-info")).unwrap_or(dir_name);
    let mut it = stem.split('-');
    let name = it.next().and_then(token).map(str::to_string);
    let version = it.next().and_then(token).map(str::to_string);
    (name, version)
}

/// The check of a RECORD hash field against the used file.
fn check(hash: Option<&[u8]>, input: &Input, contents: &dyn Contents) -> Check {
    let Some(field) = hash.and_then(|h| std::str::from_utf8(h).ok()) else { return Check::NotRecorded };
    let Some((algo, b64)) = field.trim().split_once('=') else { return Check::NotRecorded };
    let Ok(want) = URL_SAFE.decode(b64.trim()) else { return Check::NotRecorded };
    let f = input.file;
    let have = match algo {
        "sha256" if want.len() == 32 => return compare_hex(&want, &f.sha256),
        "sha384" | "sha512" if want.len() == if algo == "sha384" { 48 } else { 64 } => {
            let Some(bytes) = contents.bytes(f) else { return Check::Unknown };
            if algo == "sha384" {
                sha2::Sha384::digest(&bytes).to_vec()
            } else {
                sha2::Sha512::digest(&bytes).to_vec()
            }
        }
        _ => return Check::NotRecorded,
    };
    if have == want {
        Check::Matches
    } else {
        Check::Modified
    }
}

fn compare_hex(want: &[u8], have_hex: &str) -> Check {
    let want_hex: String = want.iter().map(|b| format!("{b:02x}")).collect();
    if want_hex.eq_ignore_ascii_case(have_hex) {
        Check::Matches
    } else {
        Check::Modified
    }
}

/// Names the Python distribution of each used file not yet found.
pub(super) fn resolve(fs: &RootFs, inputs: &[Input], contents: &dyn Contents, found: &mut [Option<Found>]) {
    let mut wanted: HashMap<&[u8], Vec<usize>> = HashMap::new();
    // The sources of compiled files, for those their distribution does not list (see `pyc_source`).
    let mut sources: HashMap<Vec<u8>, Vec<usize>> = HashMap::new();
    let mut sites = BTreeSet::new();
    for (i, input) in inputs.iter().enumerate() {
        if let (None, Some(norm)) = (&found[i], input.norm.as_deref()) {
            wanted.entry(norm).or_default().push(i);
            if let Some(source) = super::pyc_source(norm) {
                sources.entry(source).or_default().push(i);
            }
            sites_of(norm, &mut sites);
        }
    }
    if sites.is_empty() {
        return;
    }
    let mut dists: Vec<Dist> = Vec::new();
    let mut claims: HashMap<Vec<u8>, Claim> = HashMap::new();
    let mut budget = MAX_RECORDS_TOTAL;
    for site in sites.iter().take(MAX_SITES) {
        let Some(host) = fs.host(site) else { continue };
        let Ok(entries) = std::fs::read_dir(&host) else { continue };
        let mut names: Vec<(String, bool)> = entries
            .filter_map(|e| {
                let e = e.ok()?;
                let name = e.file_name().into_string().ok()?;
                let egg = name.ends_with(".egg-info");
                (e.file_type().ok()?.is_dir() && (egg || name.ends_with(".dist-info"))).then_some((name, egg))
            })
            .collect();
        // dist-info before egg-info, each in name order.
        names.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        for (dir_name, egg) in names {
            if dists.len() >= MAX_DISTS || budget == 0 {
                break;
            }
            let dir = host.join(&dir_name);
            let list = if egg { "installed-files.txt" } else { "RECORD" };
            let Some(data) = read_soft(&dir.join(list), MAX_RECORD.min(budget), false) else { continue };
            budget -= data.len() as u64;
            let index = dists.len();
            // Paths are relative to the site directory (RECORD) or to the egg-info directory.
            let base: Vec<u8> = if egg { [site.as_slice(), b"/", dir_name.as_bytes()].concat() } else { site.clone() };
            let mut claim = |path: &[u8], hash: Option<Vec<u8>>| {
                if path.is_empty() || path.contains(&0) {
                    return;
                }
                let abs = if path.first() == Some(&b'/') {
                    normalize(path)
                } else {
                    normalize(&[base.as_slice(), b"/", path].concat())
                };
                if wanted.contains_key(abs.as_slice()) || sources.contains_key(&abs) {
                    claims.entry(abs).or_insert(Claim { dist: index, hash });
                }
            };
            if egg {
                for line in data.split(|&b| b == b'\n') {
                    claim(line.strip_suffix(b"\r").unwrap_or(line), None);
                }
            } else {
                for mut record in csv_records(&data) {
                    if record.is_empty() {
                        continue;
                    }
                    let hash = (record.len() > 1).then(|| std::mem::take(&mut record[1])).filter(|h| !h.is_empty());
                    claim(&record[0], hash);
                }
            }
            dists.push(Dist { dir, dir_name, egg });
        }
    }
    let mut labels: HashMap<usize, Option<Label>> = HashMap::new();
    let mut by_source = Vec::new();
    for (path, claim) in &claims {
        let label = labels.entry(claim.dist).or_insert_with(|| label(&dists[claim.dist])).clone();
        let Some(label) = label else { continue };
        for &i in wanted.get(path.as_slice()).map(Vec::as_slice).unwrap_or_default() {
            let check = check(claim.hash.as_deref(), &inputs[i], contents);
            found[i] = Some(Found { label: label.clone(), check });
        }
        for &i in sources.get(path).map(Vec::as_slice).unwrap_or_default() {
            by_source.push((i, label.clone()));
        }
    }
    for (i, label) in by_source {
        if found[i].is_none() {
            found[i] = Some(Found { label, check: Check::NotRecorded });
        }
    }
}

/// A distribution's label: its PEP 503 name (so that `PyYAML` and `pyyaml` are one component) and version.
fn label(d: &Dist) -> Option<Label> {
    let meta = if d.egg { "PKG-INFO" } else { "METADATA" };
    let (name, version) = match read_soft(&d.dir.join(meta), MAX_METADATA, true) {
        Some(data) => metadata(&data),
        None => (None, None),
    };
    let (dir_name, dir_version) = from_dir_name(&d.dir_name);
    let name = purl::pep503(&name.or(dir_name)?);
    let version = version.or(dir_version);
    let purl = purl::purl("pypi", &[], &name, version.as_deref(), &[]);
    Some(Label { kind: ComponentKind::Python, name, version, purl: Some(purl), archive_sha256: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv() {
        let r = csv_records(b"a,b,c\r\n\"x,y\",\"q\"\"q\",\n\n\"multi\nline\",h\nlast");
        assert_eq!(r.len(), 4);
        assert_eq!(r[0], vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        assert_eq!(r[1], vec![b"x,y".to_vec(), b"q\"q".to_vec(), Vec::new()]);
        assert_eq!(r[2], vec![b"multi\nline".to_vec(), b"h".to_vec()]);
        assert_eq!(r[3], vec![b"last".to_vec()]);
        assert_eq!(csv_records(b"ok,1\n\"unterminated,2\n").len(), 1);
        assert!(csv_records(b"").is_empty());
    }

    #[test]
    fn metadata_headers() {
        let (n, v) = metadata(b"Metadata-Version: 2.1\nname: Foo_Bar\nVersion: 1.0+local\nSummary: x\n\nVersion: 9\n");
        assert_eq!((n.as_deref(), v.as_deref()), (Some("Foo_Bar"), Some("1.0+local")));
        let (n, v) = metadata(b"Summary: x\n\nName: late\n");
        assert_eq!((n, v), (None, None));
        assert_eq!(from_dir_name("PyYAML-6.0-py3.11.egg-info"), (Some("PyYAML".into()), Some("6.0".into())));
        assert_eq!(from_dir_name("six-1.17.0.dist-info"), (Some("six".into()), Some("1.17.0".into())));
    }
}
