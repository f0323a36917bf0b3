//! Rust crates: sources unpacked by Cargo under `…/registry/src/<index-dir>/<name>-<version>/`. Cargo records a
//! checksum of the `.crate` only, none of its files: every file's check is not-recorded. Git checkouts
//! (`…/git/checkouts/<repo>-<hash>/<rev>/`) name a repository, not a crate: they are left loose.

use repro_model::provenance::ComponentKind;

use super::{parts, purl, Label};

/// The crate a normalised path is a file of.
pub(super) fn resolve(norm: &[u8]) -> Option<Label> {
    let segs: Vec<&[u8]> = parts(norm).collect();
    let at = (0..segs.len().saturating_sub(4)).rev().find(|&i| segs[i] == b"registry" && segs[i + 1] == b"src")?;
    let dir = std::str::from_utf8(segs[at + 3]).ok()?;
    let (name, version) = split_name_version(dir)?;
    let purl = purl::purl("cargo", &[], name, Some(version), &[]);
    Some(Label { kind: ComponentKind::Cargo, name: name.into(), version: Some(version.into()), purl: Some(purl) })
}

/// `NAME-VERSION` split at the last `-` followed by a semantic version (a crate's name may have `-` in it, and
/// so may a pre-release).
pub(crate) fn split_name_version(dir: &str) -> Option<(&str, &str)> {
    let bytes = dir.as_bytes();
    (1..bytes.len()).rev().filter(|&i| bytes[i - 1] == b'-' && bytes[i].is_ascii_digit()).find_map(|i| {
        let (name, version) = (&dir[..i - 1], &dir[i..]);
        (is_crate_name(name) && is_semver(version)).then_some((name, version))
    })
}

fn is_crate_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.as_bytes()[0].is_ascii_alphabetic()
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `MAJOR.MINOR.PATCH[-PRE][+BUILD]` (semver 2.0.0).
pub(crate) fn is_semver(s: &str) -> bool {
    if s.len() > 256 {
        return false;
    }
    let (rest, build) = match s.split_once('+') {
        Some((r, b)) => (r, Some(b)),
        None => (s, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (rest, None),
    };
    let numeric = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && (n == "0" || !n.starts_with('0'));
    let ident = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let core: Vec<&str> = core.split('.').collect();
    core.len() == 3
        && core.iter().all(|n| numeric(n))
        && pre.is_none_or(|p| p.split('.').all(|x| ident(x) && (!x.bytes().all(|b| b.is_ascii_digit()) || numeric(x))))
        && build.is_none_or(|b| b.split('.').all(ident))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_versions() {
        assert_eq!(split_name_version("serde-1.0.228"), Some(("serde", "1.0.228")));
        assert_eq!(split_name_version("proc-macro2-1.0.86"), Some(("proc-macro2", "1.0.86")));
        assert_eq!(split_name_version("foo-2-1.0.0"), Some(("foo-2", "1.0.0")));
        assert_eq!(split_name_version("x-1.0.0-rc-1"), Some(("x", "1.0.0-rc-1")));
        assert_eq!(
            split_name_version("wasi-0.11.0+wasi-snapshot-preview1"),
            Some(("wasi", "0.11.0+wasi-snapshot-preview1"))
        );
        assert_eq!(split_name_version("noversion"), None);
        assert_eq!(split_name_version("-1.0.0"), None);
        assert_eq!(split_name_version("a-01.0.0"), None);
        assert_eq!(split_name_version("a-1.0"), None);
    }

    #[test]
    fn registry_paths() {
        let l =
            resolve(b"/root/.cargo/registry/src/index.crates.io-6f17d22bba15001f/serde-1.0.228/src/lib.rs").unwrap();
        assert_eq!((l.name.as_str(), l.version.as_deref()), ("serde", Some("1.0.228")));
        assert_eq!(l.purl.as_deref(), Some("pkg:cargo/serde@1.0.228"));
        // The directory itself, or a directory that is no crate, is not a crate's file.
        assert!(resolve(b"/c/registry/src/index/serde-1.0.228").is_none());
        assert!(resolve(b"/c/registry/src/index/not-a-crate/x.rs").is_none());
        assert!(resolve(b"/c/registry/cache/index/serde-1.0.228.crate").is_none());
        let l = resolve(b"/w/registry/src/a/registry/src/i/wasi-0.11.0+wasi-snapshot-preview1/src/lib.rs").unwrap();
        assert_eq!(l.purl.as_deref(), Some("pkg:cargo/wasi@0.11.0%2Bwasi-snapshot-preview1"));
    }
}
