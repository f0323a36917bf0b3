//! npm packages: a file below the last `node_modules/NAME/` (or `node_modules/@SCOPE/NAME/`) of its path
//! belongs to the package whose `package.json` is in that directory (its `name` and `version`). npm records no
//! digest of installed files: every file's check is not-recorded. A directory without a readable package.json
//! (`.bin`, a half-installed package) is no package: its files are left to the next resolver.

use std::collections::HashMap;

use repro_model::provenance::ComponentKind;

use super::{parts, purl, read_soft, token, Label, RootFs};

/// The largest package.json read.
const MAX_PACKAGE_JSON: u64 = 1 << 20;

/// The package a normalised path is a file of; `cache` keeps each package directory's answer for one call.
pub(super) fn resolve(fs: &RootFs, norm: &[u8], cache: &mut HashMap<Vec<u8>, Option<Label>>) -> Option<Label> {
    let segs: Vec<&[u8]> = parts(norm).collect();
    let at = segs.iter().rposition(|s| *s == b"node_modules")?;
    let scoped = segs.get(at + 1)?.first() == Some(&b'@');
    let end = at + if scoped { 3 } else { 2 };
    // The package directory, and a file in it.
    if segs.len() <= end || segs[at + 1..end].iter().any(|s| s.first() == Some(&b'.') || (scoped && s.len() < 2)) {
        return None;
    }
    let mut dir = Vec::new();
    for s in &segs[..end] {
        dir.push(b'/');
        dir.extend_from_slice(s);
    }
    if let Some(l) = cache.get(&dir) {
        return l.clone();
    }
    let label = package(fs, &dir, &segs[at + 1..end]);
    cache.insert(dir, label.clone());
    label
}

fn package(fs: &RootFs, dir: &[u8], dir_name: &[&[u8]]) -> Option<Label> {
    let host = fs.host(&[dir, b"/package.json"].concat())?;
    let data = read_soft(&host, MAX_PACKAGE_JSON, false)?;
    let json: serde_json::Value = serde_json::from_slice(&data).ok()?;
    let text = |k: &str| json.get(k).and_then(serde_json::Value::as_str).and_then(token).map(str::to_string);
    let name = match text("name") {
        Some(n) => n,
        None => dir_name.iter().map(|s| std::str::from_utf8(s).ok()).collect::<Option<Vec<_>>>()?.join("/"),
    };
    let version = text("version");
    let (scope, bare) = match name.split_once('/') {
        Some((s, n)) if s.starts_with('@') && !n.is_empty() && !n.contains('/') => (Some(s), n),
        None if !name.is_empty() => (None, name.as_str()),
        _ => return None,
    };
    let purl = purl::purl("npm", scope.as_slice(), bare, version.as_deref(), &[]);
    Some(Label { kind: ComponentKind::Npm, name, version, purl: Some(purl), archive_sha256: None })
}
