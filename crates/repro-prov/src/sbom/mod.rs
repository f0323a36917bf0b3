//! `repro sbom`: the environment a run used as a software bill of materials, CycloneDX 1.6 JSON
//! ([`cyclonedx`]) or SPDX 2.3 JSON ([`spdx`]).
//!
//! Unlike a declared SBOM (made from a lockfile, a Dockerfile or a package list), it lists exactly the
//! components the run used, as repro's supervisor saw it use them: every package one of whose files was
//! executed, mapped or read, with those files and their hashes, and the files no package owns.
//!
//! Deterministic: the same environment gives the same bytes. Nothing of the moment or machine the SBOM is made
//! on enters it: its time is the environment's `recorded_at`, its serial number (CycloneDX) or namespace (SPDX)
//! is derived from the rest of the document's bytes.

pub mod cyclonedx;
pub mod spdx;

use std::collections::BTreeMap;

use repro_model::manifest::AccessKind;
use repro_model::provenance::{Component, ComponentFile, ComponentKind, Environment};
use serde::Serialize;

/// The formats `repro sbom --format` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// CycloneDX 1.6 JSON.
    CycloneDx,
    /// SPDX 2.3 JSON.
    Spdx,
}

impl Format {
    pub const NAMES: [&'static str; 2] = ["cyclonedx", "spdx"];

    pub fn name(self) -> &'static str {
        match self {
            Format::CycloneDx => "cyclonedx",
            Format::Spdx => "spdx",
        }
    }
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cyclonedx" | "cdx" => Ok(Format::CycloneDx),
            "spdx" => Ok(Format::Spdx),
            _ => Err(format!("unknown SBOM format {s:?}: expected cyclonedx or spdx")),
        }
    }
}

/// The SBOM of `env` in `format`.
pub fn write(env: &Environment, format: Format) -> Vec<u8> {
    match format {
        Format::CycloneDx => cyclonedx::write(env),
        Format::Spdx => spdx::write(env),
    }
}

/// Pretty JSON with a final newline. The document types here only hold strings, numbers and vectors: serializing
/// them cannot fail.
fn to_json<T: Serialize>(doc: &T) -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(doc).unwrap_or_default();
    out.push(b'\n');
    out
}

/// An RFC 9562 UUID (version 8, "custom": the bits are blake3 of `domain` and `content`), as text.
fn content_uuid(domain: &str, content: &[u8]) -> String {
    let mut h = blake3::Hasher::new_derive_key(domain);
    h.update(content);
    let mut b = [0u8; 16];
    b.copy_from_slice(&h.finalize().as_bytes()[..16]);
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    let x: String = b.iter().map(|v| format!("{v:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &x[..8], &x[8..12], &x[12..16], &x[16..20], &x[20..])
}

/// `recorded_at` as an RFC 3339 UTC time without fractional seconds (`2026-12-03T20:15:02Z`, the form both
/// schemas accept), or `None` when it is not RFC 3339.
fn timestamp(recorded_at: &str) -> Option<String> {
    let t = time::OffsetDateTime::parse(recorded_at, &time::format_description::well_known::Rfc3339).ok()?;
    let t = t.to_offset(time::UtcOffset::UTC);
    let f = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    t.format(&f).ok()
}

fn is_hex64(s: &str) -> bool {
    crate::identity::is_hex(s, 64)
}

/// How a file was used, as text: `exec,map,open`.
fn uses_text(uses: &[AccessKind]) -> String {
    uses.iter().map(|k| k.name()).collect::<Vec<_>>().join(",")
}

/// Whether one of the component's files was executed: a program (of a package, or ld.so) rather than a library.
fn is_application(c: &Component) -> bool {
    c.files.iter().any(|f| f.uses.contains(&AccessKind::Exec))
}

/// The one file of a loose-file component (no package owns it): it stands in the SBOM as a file, not as a
/// package with one file.
fn single_file(c: &Component) -> Option<&ComponentFile> {
    match (c.kind, c.files.as_slice()) {
        (ComponentKind::File, [f]) => Some(f),
        _ => None,
    }
}

/// The components in the order both formats list them: packages that were executed or mapped first, then the
/// other packages, then the loose files; each group by (kind, name, version, purl). An environment document is
/// already sorted by (kind, name, version), but one from someone else need not be.
fn sorted_components(env: &Environment) -> Vec<&Component> {
    let mut out: Vec<&Component> = env.components.iter().collect();
    out.sort_by(|a, b| {
        let group = |c: &Component| (c.kind == ComponentKind::File, !c.executed());
        (group(a), a.kind, &a.name, &a.version, &a.purl).cmp(&(group(b), b.kind, &b.name, &b.version, &b.purl))
    });
    out
}

/// Unique identifiers within one document: a repeated one gets `SEP2`, `SEP3`, … appended (skipping any that a
/// stranger's names already took).
#[derive(Debug, Default)]
struct Ids {
    issued: std::collections::BTreeSet<String>,
    next: BTreeMap<String, u64>,
}

impl Ids {
    fn unique(&mut self, base: String, sep: &str) -> String {
        if self.issued.insert(base.clone()) {
            return base;
        }
        let n = self.next.entry(base.clone()).or_insert(2);
        loop {
            let candidate = format!("{base}{sep}{n}");
            *n += 1;
            if self.issued.insert(candidate.clone()) {
                return candidate;
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Environments for the SBOM tests: a small real-looking one and a hostile one.

    use repro_model::manifest::AccessKind;
    use repro_model::provenance::{
        Check, Component, ComponentFile, ComponentKind, EnvSource, Environment, Settings, UnreadFile,
    };

    fn file(path: &str, seed: u8, uses: Vec<AccessKind>, check: Check) -> ComponentFile {
        let data = [seed; 7];
        use sha2::Digest as _;
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        ComponentFile {
            path: path.into(),
            uses,
            size: data.len() as u64,
            sha256: hex(&sha2::Sha256::digest(data)),
            blake3: blake3::hash(&data).to_hex().to_string(),
            sha1: Some(hex(&sha1::Sha1::digest(data))),
            check,
        }
    }

    fn component(
        kind: ComponentKind,
        name: &str,
        version: Option<&str>,
        purl: Option<&str>,
        mut files: Vec<ComponentFile>,
    ) -> Component {
        files.sort();
        Component {
            kind,
            name: name.into(),
            version: version.map(Into::into),
            purl: purl.map(Into::into),
            digest: crate::identity::component_digest(&files),
            archive_sha256: None,
            files,
        }
    }

    fn environment(components: Vec<Component>) -> Environment {
        let mut settings = Settings::default();
        settings.identity.insert("env".into(), "PATH=/usr/bin:/bin".into());
        settings.identity.insert("cpus".into(), "1".into());
        settings.run.insert("seed".into(), "0".into());
        let identity = crate::identity::identity("x86_64", "6.1.0-test", &settings, &components);
        Environment {
            format: 1,
            repro_version: "0.1.0".into(),
            source: EnvSource::Run { run_id: "r-20261203-201502-0001".into() },
            recorded_at: "2026-12-03T20:15:02.123456Z".into(),
            arch: "x86_64".into(),
            kernel_release: "6.1.0-test".into(),
            settings,
            identity,
            components,
            unread: vec![UnreadFile { path: "/etc/shadow".into(), reason: "permission denied".into() }],
        }
    }

    /// coreutils (executed), libc6 (ld.so executed, libc mapped and modified), a Python distribution (read) and
    /// one loose file.
    pub fn small() -> Environment {
        use AccessKind::{Exec, Map, Open};
        environment(vec![
            component(
                ComponentKind::Deb,
                "coreutils",
                Some("9.1-1"),
                Some("pkg:deb/debian/coreutils@9.1-1?arch=amd64"),
                vec![file("/usr/bin/sort", 1, vec![Exec, Map], Check::Matches)],
            ),
            component(
                ComponentKind::Deb,
                "libc6",
                Some("2.36-9+deb12u9"),
                Some("pkg:deb/debian/libc6@2.36-9%2Bdeb12u9?arch=amd64"),
                vec![
                    file("/usr/lib64/ld-linux-x86-64.so.2", 2, vec![Exec, Map], Check::Matches),
                    file("/usr/lib/x86_64-linux-gnu/libc.so.6", 3, vec![Map, Open], Check::Modified),
                ],
            ),
            component(
                ComponentKind::Python,
                "packageurl-python",
                Some("0.16.0"),
                Some("pkg:pypi/packageurl-python@0.16.0"),
                vec![file("/venv/lib/python3.11/site-packages/packageurl/__init__.py", 4, vec![Open], Check::Matches)],
            ),
            component(
                ComponentKind::File,
                "/opt/app/config.toml",
                None,
                None,
                vec![file("/opt/app/config.toml", 5, vec![Open], Check::NotRecorded)],
            ),
        ])
    }

    /// Repeated purls and paths, names with characters SPDX ids do not allow, a file without SHA-1, an
    /// unparsable time.
    pub fn hostile() -> Environment {
        use AccessKind::Open;
        let mut no_sha1 = file("/weird path/ü\"<x>", 9, vec![Open], Check::Unknown);
        no_sha1.sha1 = None;
        let mut env = environment(vec![
            component(
                ComponentKind::Npm,
                "@scope/x",
                Some("1.0.0"),
                Some("pkg:npm/%40scope/x@1.0.0"),
                vec![file("/a/node_modules/@scope/x/index.js", 6, vec![Open], Check::NotRecorded)],
            ),
            component(
                ComponentKind::Npm,
                "@scope/x",
                Some("1.0.0"),
                Some("pkg:npm/%40scope/x@1.0.0"),
                vec![file("/b/node_modules/@scope/x/index.js", 7, vec![Open], Check::NotRecorded)],
            ),
            component(ComponentKind::File, "/weird path/ü\"<x>", None, None, vec![no_sha1]),
            component(
                ComponentKind::File,
                "/two/files",
                None,
                None,
                vec![
                    file("/two/files", 10, vec![Open], Check::NotRecorded),
                    file("/two/files", 11, vec![Open], Check::NotRecorded),
                ],
            ),
        ]);
        env.recorded_at = "yesterday".into();
        env
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_version_8_and_depend_on_the_content() {
        let a = content_uuid("d", b"one");
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "8");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "{a}");
        assert_eq!(a, content_uuid("d", b"one"));
        assert_ne!(a, content_uuid("d", b"two"));
        assert_ne!(a, content_uuid("e", b"one"));
    }

    #[test]
    fn timestamps_lose_their_fraction_and_offset() {
        assert_eq!(timestamp("2026-12-03T20:15:02.123456Z").as_deref(), Some("2026-12-03T20:15:02Z"));
        assert_eq!(timestamp("2026-12-03T21:15:02+01:00").as_deref(), Some("2026-12-03T20:15:02Z"));
        assert_eq!(timestamp("1970-01-01T00:00:00Z").as_deref(), Some("1970-01-01T00:00:00Z"));
        assert_eq!(timestamp("yesterday"), None);
    }

    #[test]
    fn ids_stay_unique_against_names_that_look_generated() {
        let mut ids = Ids::default();
        let a = ids.unique("x|2".into(), "|");
        let b = ids.unique("x".into(), "|");
        let c = ids.unique("x".into(), "|");
        let d = ids.unique("x".into(), "|");
        let all = [a, b, c, d];
        let mut sorted = all.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 4, "{all:?}");
    }

    #[test]
    fn loose_files_and_unexecuted_packages_come_last() {
        let env = fixtures::small();
        let names: Vec<&str> = sorted_components(&env).iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["coreutils", "libc6", "packageurl-python", "/opt/app/config.toml"]);
    }

    #[test]
    fn both_formats_are_deterministic() {
        for f in [Format::CycloneDx, Format::Spdx] {
            assert_eq!(write(&fixtures::small(), f), write(&fixtures::small(), f));
            assert_eq!(write(&fixtures::hostile(), f), write(&fixtures::hostile(), f));
        }
        let mut other = fixtures::small();
        other.components.pop();
        other.identity =
            crate::identity::identity(&other.arch, &other.kernel_release, &other.settings, &other.components);
        assert_ne!(write(&fixtures::small(), Format::CycloneDx), write(&other, Format::CycloneDx));
        assert_ne!(write(&fixtures::small(), Format::Spdx), write(&other, Format::Spdx));
    }
}
