//! `repro drift A B`: what differs between the inputs two environments used, most likely to matter first —
//! executed programs and libraries, then the architecture and kernel, then the other files read, then the sandbox
//! settings that enter the identity; the run variables (seed, epoch) are listed last and never make two
//! environments differ.
//!
//! A side may be a signed statement (`repro attest`, read by [`crate::attest::read`]): a runtime trace lists
//! every file; a VSA or a test result only the components (with whether each was executed or mapped), so a
//! content change with such a side names no file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use repro_model::provenance::{
    AttestationSource, Check, Component, ComponentKind, Drift, DriftChange, DriftKind, DriftSide, Environment, Executed,
};

use crate::ProvError;

/// At most this many file names are listed for one content change.
const FILES_SHOWN: usize = 8;

/// One side of a drift: an environment and, when it was read from a DSSE envelope, what the envelope is.
#[derive(Debug, Clone)]
pub struct Side {
    pub environment: Environment,
    pub attestation: Option<AttestationSource>,
    /// Components known to have executed or mapped files although the environment lists none of their files
    /// (a component-level environment from a summary), by (kind, name, digest).
    pub executed: Executed,
}

impl From<Environment> for Side {
    fn from(environment: Environment) -> Side {
        Side { environment, attestation: None, executed: BTreeSet::new() }
    }
}

impl Side {
    /// Whether the environment lists each component's files (not a component-level summary).
    pub fn files_listed(&self) -> bool {
        self.attestation.as_ref().is_none_or(|a| a.files_listed)
    }
}

/// A side of `repro drift` (and the target of `repro env`): the environment of a run directory, a pack, an
/// environment document, or of a DSSE envelope `repro attest` wrote (with `keys`, its signature must verify by
/// one of them first; without, it is read unchecked and the side says so).
pub fn side_of(target: &Path, keys: &[&dyn crate::attest::Verifier]) -> Result<Side, ProvError> {
    match crate::open::classify(target)? {
        crate::open::Kind::Envelope(p) => {
            let a = crate::attest::read::read_file(&p, keys)?;
            Ok(Side { environment: a.environment, attestation: Some(a.source), executed: a.executed })
        }
        _ => Ok(crate::open::environment_of(target)?.into()),
    }
}

/// [`crate::env::describe`] of a side `repro env` read (an envelope too): what the attestation is, and for a summary (a VSA,
/// a test result) the components without their files, marked executed as the summary says.
pub fn describe_side(side: &Side) -> Vec<String> {
    let env = &side.environment;
    let mut out = if side.files_listed() {
        crate::env::describe(env)
    } else {
        let mut out = crate::env::header(env);
        out.push(format!("used       {} components (a summary: their files are not listed)", env.components.len()));
        for c in &env.components {
            let version = c.version.as_deref().map(|v| format!(" {v}")).unwrap_or_default();
            let executed = side.executed.contains(&(c.kind, c.name.clone(), c.digest.clone()));
            let exec = if executed { " [executed]" } else { "" };
            let purl = c.purl.as_deref().map(|p| format!("  {p}")).unwrap_or_default();
            out.push(format!("  {:<6} {}{version}{exec}{purl}", c.kind.name(), c.name));
        }
        out
    };
    if let Some(a) = &side.attestation {
        out.push(format!(
            "attested   {}",
            crate::attest::read::describe_source(a, &crate::env::source_text(&env.source))
        ));
    }
    out
}

/// Compares `a` with `b` (named as given on the command line).
pub fn compare(a: (&str, &Environment), b: (&str, &Environment)) -> Drift {
    let none = BTreeSet::new();
    compare_with((a.0, a.1, None, &none, true), (b.0, b.1, None, &none, true))
}

/// [`compare`] of two sides, either of which may be an attestation.
pub fn compare_sides(a: (&str, &Side), b: (&str, &Side)) -> Drift {
    fn side<'a>((n, s): (&'a str, &'a Side)) -> SideRef<'a> {
        (n, &s.environment, s.attestation.as_ref(), &s.executed, s.files_listed())
    }
    compare_with(side(a), side(b))
}

type SideRef<'a> = (&'a str, &'a Environment, Option<&'a AttestationSource>, &'a Executed, bool);

fn compare_with(a: SideRef<'_>, b: SideRef<'_>) -> Drift {
    let (an, ae, aa, ax, af) = a;
    let (bn, be, ba, bx, bf) = b;
    // File names (and the package-record checks of files) are compared only when both sides list their files.
    let files = af && bf;
    let mut changes = Vec::new();
    let key = |c: &Component| (c.kind, c.name.clone());
    let mut am: BTreeMap<(ComponentKind, String), Vec<&Component>> = BTreeMap::new();
    for c in &ae.components {
        am.entry(key(c)).or_default().push(c);
    }
    let mut bm: BTreeMap<(ComponentKind, String), Vec<&Component>> = BTreeMap::new();
    for c in &be.components {
        bm.entry(key(c)).or_default().push(c);
    }
    let keys: BTreeSet<_> = am.keys().chain(bm.keys()).cloned().collect();
    for k in keys {
        let subject = format!("{} {}", k.0.name(), k.1);
        match (am.get(&k), bm.get(&k)) {
            (Some(x), None) => changes.push(change(rank(x, ax), DriftKind::Removed, &subject, Some(versions(x)), None)),
            (None, Some(y)) => changes.push(change(rank(y, bx), DriftKind::Added, &subject, None, Some(versions(y)))),
            (Some(x), Some(y)) => {
                let r = rank(x, ax).min(rank(y, bx));
                if versions(x) != versions(y) {
                    changes.push(change(r, DriftKind::Version, &subject, Some(versions(x)), Some(versions(y))));
                } else if digests(x) != digests(y) {
                    let mut c = change(r, DriftKind::Content, &subject, None, None);
                    if files {
                        c.files = differing_files(x, y);
                    }
                    changes.push(c);
                }
                let (mx, my) = (modified(x), modified(y));
                if files && mx != my {
                    let list = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(", ");
                    let mut c = change(r, DriftKind::Modified, &subject, None, None);
                    c.a = (!mx.is_empty()).then(|| format!("modified: {}", list(&mx)));
                    c.b = (!my.is_empty()).then(|| format!("modified: {}", list(&my)));
                    changes.push(c);
                }
            }
            (None, None) => {}
        }
    }
    if ae.arch != be.arch {
        changes.push(change(1, DriftKind::Arch, "architecture", Some(ae.arch.clone()), Some(be.arch.clone())));
    }
    if ae.kernel_release != be.kernel_release {
        changes.push(change(
            1,
            DriftKind::Kernel,
            "kernel release",
            Some(ae.kernel_release.clone()),
            Some(be.kernel_release.clone()),
        ));
    }
    settings(&ae.settings.identity, &be.settings.identity, 3, DriftKind::Setting, &mut changes);
    settings(&ae.settings.run, &be.settings.run, 4, DriftKind::RunSetting, &mut changes);
    changes.sort_by(|x, y| (x.rank, &x.subject, x.kind).cmp(&(y.rank, &y.subject, y.kind)));
    Drift {
        same: ae.identity == be.identity,
        a: DriftSide {
            name: an.into(),
            source: ae.source.clone(),
            identity: ae.identity.clone(),
            attestation: aa.cloned(),
        },
        b: DriftSide {
            name: bn.into(),
            source: be.source.clone(),
            identity: be.identity.clone(),
            attestation: ba.cloned(),
        },
        changes,
    }
}

fn change(rank: u8, kind: DriftKind, subject: &str, a: Option<String>, b: Option<String>) -> DriftChange {
    DriftChange { rank, kind, subject: subject.into(), a, b, files: Vec::new() }
}

/// 0 when any of the components has an executed or mapped file (or, without files, is known to), else 2.
fn rank(cs: &[&Component], executed: &Executed) -> u8 {
    if cs.iter().any(|c| c.executed() || executed.contains(&(c.kind, c.name.clone(), c.digest.clone()))) {
        0
    } else {
        2
    }
}

fn versions(cs: &[&Component]) -> String {
    let v: Vec<&str> = cs.iter().map(|c| c.version.as_deref().unwrap_or("(no version)")).collect();
    v.join(", ")
}

fn digests<'a>(cs: &[&'a Component]) -> BTreeSet<&'a str> {
    cs.iter().map(|c| c.digest.as_str()).collect()
}

fn modified(cs: &[&Component]) -> BTreeSet<String> {
    cs.iter().flat_map(|c| c.files.iter()).filter(|f| f.check == Check::Modified).map(|f| f.path.clone()).collect()
}

/// The files whose content differs, or that only one side used; at most [`FILES_SHOWN`], then a count.
fn differing_files(x: &[&Component], y: &[&Component]) -> Vec<String> {
    let fx: BTreeMap<&str, &str> =
        x.iter().flat_map(|c| c.files.iter()).map(|f| (f.path.as_str(), f.sha256.as_str())).collect();
    let fy: BTreeMap<&str, &str> =
        y.iter().flat_map(|c| c.files.iter()).map(|f| (f.path.as_str(), f.sha256.as_str())).collect();
    let paths: BTreeSet<&str> = fx.keys().chain(fy.keys()).copied().collect();
    let mut out = Vec::new();
    for p in paths {
        let line = match (fx.get(p), fy.get(p)) {
            (Some(a), Some(b)) if a != b => format!("{p} (content)"),
            (Some(_), None) => format!("{p} (only in A)"),
            (None, Some(_)) => format!("{p} (only in B)"),
            _ => continue,
        };
        out.push(line);
    }
    if out.len() > FILES_SHOWN {
        let more = out.len() - FILES_SHOWN;
        out.truncate(FILES_SHOWN);
        out.push(format!("and {more} more"));
    }
    out
}

fn settings(
    a: &BTreeMap<String, String>,
    b: &BTreeMap<String, String>,
    rank: u8,
    kind: DriftKind,
    out: &mut Vec<DriftChange>,
) {
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for k in keys {
        let (x, y) = (a.get(k), b.get(k));
        if x != y {
            out.push(change(rank, kind, k, x.cloned(), y.cloned()));
        }
    }
}

/// The lines `repro drift` prints.
pub fn describe(d: &Drift) -> Vec<String> {
    let mut out = Vec::new();
    for (label, side) in [("A", &d.a), ("B", &d.b)] {
        out.push(format!("{label}  {}  {}", side.identity, side.name));
        if let Some(a) = &side.attestation {
            let about = crate::env::source_text(&side.source);
            out.push(format!("   {label}: {}", crate::attest::read::describe_source(a, &about)));
        }
    }
    let counted = d.changes.iter().filter(|c| c.kind != DriftKind::RunSetting).count();
    out.push(if d.same {
        "same environment (the run variables below do not enter the identity)".to_string()
    } else {
        format!(
            "{counted} difference{} among the inputs used, most likely to matter first:",
            if counted == 1 { "" } else { "s" }
        )
    });
    for c in &d.changes {
        let what = match c.kind {
            DriftKind::Added => "added",
            DriftKind::Removed => "removed",
            DriftKind::Version => "version",
            DriftKind::Content => "content",
            DriftKind::Modified => "modified",
            DriftKind::Arch => "arch",
            DriftKind::Kernel => "kernel",
            DriftKind::Setting => "setting",
            DriftKind::RunSetting => "run var",
        };
        let tag = match c.rank {
            0 => "executed",
            1 => "system",
            2 => "read",
            3 => "sandbox",
            _ => "not in identity",
        };
        let ab = match (&c.a, &c.b) {
            (Some(a), Some(b)) => format!(": {a} -> {b}"),
            (Some(a), None) => format!(": {a} (A only)"),
            (None, Some(b)) => format!(": {b} (B only)"),
            (None, None) => String::new(),
        };
        out.push(format!("  {what:<8} [{tag}] {}{ab}", c.subject));
        for f in &c.files {
            out.push(format!("           {f}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use repro_model::manifest::AccessKind;
    use repro_model::provenance::{ComponentFile, EnvSource, Settings, PROVENANCE_FORMAT};

    fn file(path: &str, sha: char, uses: AccessKind) -> ComponentFile {
        ComponentFile {
            path: path.into(),
            uses: vec![uses],
            size: 1,
            sha256: sha.to_string().repeat(64),
            blake3: sha.to_string().repeat(64),
            sha1: None,
            check: Check::Matches,
        }
    }

    fn comp(kind: ComponentKind, name: &str, version: &str, files: Vec<ComponentFile>) -> Component {
        let digest = crate::identity::component_digest(&files);
        Component {
            kind,
            name: name.into(),
            version: Some(version.into()),
            purl: None,
            digest,
            archive_sha256: None,
            files,
        }
    }

    fn env(components: Vec<Component>, kernel: &str, seed: &str) -> Environment {
        let mut settings = Settings::default();
        settings.identity.insert("cpus".into(), "1".into());
        settings.run.insert("seed".into(), seed.into());
        let identity = crate::identity::identity("x86_64", kernel, &settings, &components);
        Environment {
            format: PROVENANCE_FORMAT,
            repro_version: "0".into(),
            source: EnvSource::Run { run_id: "r".into() },
            recorded_at: "2026-01-01T00:00:00Z".into(),
            arch: "x86_64".into(),
            kernel_release: kernel.into(),
            settings,
            identity,
            components,
            unread: vec![],
        }
    }

    #[test]
    fn same_inputs_are_the_same_even_with_another_seed() {
        let c = || vec![comp(ComponentKind::Deb, "bash", "5.2", vec![file("/usr/bin/bash", 'a', AccessKind::Exec)])];
        let d = compare(("A", &env(c(), "6.1", "1")), ("B", &env(c(), "6.1", "2")));
        assert!(d.same);
        assert_eq!(d.changes.len(), 1);
        assert_eq!(d.changes[0].kind, DriftKind::RunSetting);
    }

    #[test]
    fn executed_changes_come_first_then_kernel_then_read_files() {
        let a = env(
            vec![
                comp(ComponentKind::Python, "attrs", "23.1", vec![file("/s/attrs/__init__.py", 'a', AccessKind::Open)]),
                comp(ComponentKind::Deb, "libc6", "2.36-9", vec![file("/lib/libc.so.6", 'b', AccessKind::Map)]),
                comp(ComponentKind::File, "/etc/x", "1", vec![file("/etc/x", 'c', AccessKind::Open)]),
            ],
            "6.1",
            "0",
        );
        let b = env(
            vec![
                comp(ComponentKind::Python, "attrs", "23.2", vec![file("/s/attrs/__init__.py", 'd', AccessKind::Open)]),
                comp(ComponentKind::Deb, "libc6", "2.36-9", vec![file("/lib/libc.so.6", 'e', AccessKind::Map)]),
                comp(ComponentKind::Deb, "curl", "7.88", vec![file("/usr/bin/curl", 'f', AccessKind::Exec)]),
            ],
            "6.8",
            "0",
        );
        let d = compare(("A", &a), ("B", &b));
        assert!(!d.same);
        let got: Vec<(u8, DriftKind, &str)> = d.changes.iter().map(|c| (c.rank, c.kind, c.subject.as_str())).collect();
        assert_eq!(
            got,
            vec![
                (0, DriftKind::Added, "deb curl"),
                (0, DriftKind::Content, "deb libc6"),
                (1, DriftKind::Kernel, "kernel release"),
                (2, DriftKind::Removed, "file /etc/x"),
                (2, DriftKind::Version, "python attrs"),
            ]
        );
        assert_eq!(d.changes[1].files, vec!["/lib/libc.so.6 (content)".to_string()]);
    }

    #[test]
    fn a_file_modified_after_installation_is_named() {
        let mut f = file("/usr/bin/bash", 'a', AccessKind::Exec);
        let a = env(vec![comp(ComponentKind::Deb, "bash", "5.2", vec![f.clone()])], "6.1", "0");
        f.check = Check::Modified;
        f.sha256 = "9".repeat(64);
        let b = env(vec![comp(ComponentKind::Deb, "bash", "5.2", vec![f])], "6.1", "0");
        let d = compare(("A", &a), ("B", &b));
        let kinds: Vec<DriftKind> = d.changes.iter().map(|c| c.kind).collect();
        assert_eq!(kinds, vec![DriftKind::Content, DriftKind::Modified]);
        assert_eq!(d.changes[1].b.as_deref(), Some("modified: /usr/bin/bash"));
    }
}
