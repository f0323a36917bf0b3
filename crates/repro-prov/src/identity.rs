//! The identity of an environment: the digest of each component's used files, and the identity digest over the
//! architecture, kernel release, identity settings and components (docs/provenance.md). A leaf: everything that
//! makes or checks an environment (derivation, package resolution, attestations, SBOMs) computes it here.

use std::collections::BTreeMap;

use repro_model::provenance::{Component, ComponentFile, Settings};
use serde::Serialize;

/// blake3 over a component's used files: the sorted `PATH SHA256` lines.
pub fn component_digest(files: &[ComponentFile]) -> String {
    let mut lines: Vec<String> = files.iter().map(|f| format!("{} {}\n", f.path, f.sha256)).collect();
    lines.sort();
    let mut h = blake3::Hasher::new();
    for l in &lines {
        h.update(l.as_bytes());
    }
    h.finalize().to_hex().to_string()
}

/// The exact bytes the identity digest is taken over (docs/provenance.md): a JSON object with the version of
/// this rule, the architecture, the kernel release, the identity settings and the (kind, name, version, digest)
/// of each component, sorted.
#[derive(Serialize)]
struct IdentityInput<'a> {
    v: u32,
    arch: &'a str,
    kernel_release: &'a str,
    settings: &'a BTreeMap<String, String>,
    components: Vec<(&'static str, &'a str, Option<&'a str>, &'a str)>,
}

/// The identity of an environment: `blake3:HEX` over [`IdentityInput`].
pub fn identity(arch: &str, kernel_release: &str, settings: &Settings, components: &[Component]) -> String {
    let mut list: Vec<_> =
        components.iter().map(|c| (c.kind.name(), c.name.as_str(), c.version.as_deref(), c.digest.as_str())).collect();
    list.sort();
    let input = IdentityInput { v: 1, arch, kernel_release, settings: &settings.identity, components: list };
    // Serializing plain strings, maps and tuples cannot fail.
    let bytes = serde_json::to_vec(&input).unwrap_or_default();
    format!("blake3:{}", blake3::hash(&bytes).to_hex())
}

/// Whether `s` is `n` lowercase hex digits.
pub(crate) fn is_hex(s: &str, n: usize) -> bool {
    s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Lowercase hex of `b`.
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
