//! CycloneDX 1.6 JSON (<https://cyclonedx.org/docs/1.6/json/>): the subset `repro sbom --format cyclonedx`
//! writes, as typed structs whose fields are the schema's (`bom-1.6.schema.json`), in its order.
//!
//! The layout:
//! - `metadata.component` is the environment itself, of type `platform` ("a runtime environment which interprets
//!   or executes software": the programs, libraries and files the code under test ran on, which is not itself in
//!   the BOM), its version the identity, with `repro:*` properties for the identity, source, architecture, kernel
//!   release, the settings that enter the identity (`repro:setting:NAME`) and those recorded only
//!   (`repro:run-setting:NAME`), and the paths whose content could not be recorded (`repro:unread`);
//! - each package is a top-level component of type `application` when one of its files was executed (`exec`),
//!   `library` otherwise (mapped, or only read), scope `required` (the run used it), with its purl as `bom-ref`,
//!   and each of its used files as a nested component of type `file` with SHA-256 and BLAKE3 hashes; the
//!   package's own `hashes` are its archive's when its files were checked against one (a crate's `.crate`);
//! - a loose file (no package owns it) is a top-level component of type `file`, `bom-ref` `file:PATH`;
//! - `dependencies` has one entry: the environment depends on every top-level component. Nothing is said of the
//!   dependencies between packages (an entry with an empty `dependsOn` would claim there are none).

use repro_model::provenance::{Check, Component as EnvComponent, ComponentFile, EnvSource, Environment};
use serde::Serialize;

use super::{content_uuid, is_application, is_hex64, single_file, sorted_components, timestamp, uses_text, Ids};

/// The top-level BOM object.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Bom {
    /// Always `CycloneDX`.
    pub bom_format: &'static str,
    /// Always `1.6`.
    pub spec_version: &'static str,
    /// `urn:uuid:` + an RFC 9562 UUID (the schema's pattern): derived from this document's content.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serial_number: Option<String>,
    /// The version of this BOM (of this serial number): always 1, a document is never revised.
    pub version: u32,
    pub metadata: Metadata,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<Component>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<Dependency>,
}

/// `metadata`: when, by what tool, in which lifecycle phase, and about what.
#[derive(Debug, Serialize)]
pub struct Metadata {
    /// `date-time`: when the inputs were recorded (absent when the environment's `recorded_at` is not RFC 3339;
    /// its text is then the property `repro:recorded-at`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    /// The phase the data was captured in: a custom phase for a run (or a pack's run), `operations` for a host
    /// snapshot (the inventory of a deployed machine).
    pub lifecycles: Vec<Lifecycle>,
    /// The 1.5+ form (`components`), not the deprecated array of tools.
    pub tools: Tools,
    /// The component the BOM describes: the environment.
    pub component: Component,
}

/// One `metadata.lifecycles` entry: a pre-defined `phase`, or a custom `name` with a `description`.
#[derive(Debug, Serialize)]
pub struct Lifecycle {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<&'static str>,
}

/// `metadata.tools`.
#[derive(Debug, Serialize)]
pub struct Tools {
    pub components: Vec<Component>,
}

/// A `component` (the fields written, in the schema's order).
#[derive(Debug, Serialize)]
pub struct Component {
    #[serde(rename = "type")]
    pub kind: ComponentType,
    /// Unique in the BOM: the purl of a package, `file:PATH` for a file, `environment:IDENTITY` for the
    /// environment (`|2`, `|3`, … appended to a repeated one: `|` is not a character of a purl).
    #[serde(rename = "bom-ref", skip_serializing_if = "Option::is_none")]
    pub bom_ref: Option<String>,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hashes: Vec<Hash>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purl: Option<String>,
    /// Sub-components: a package's used files.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<Component>,
    /// Name-value pairs (names may repeat), all named `repro:…`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub properties: Vec<Property>,
}

/// `component.type` (the values used here).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ComponentType {
    Application,
    Library,
    Platform,
    File,
}

/// `component.scope`: `required`, "the component is required for runtime" (the run used it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    Required,
}

/// A `hash`: `alg` and `content` (hex).
#[derive(Debug, Serialize)]
pub struct Hash {
    pub alg: HashAlg,
    pub content: String,
}

/// `hash-alg` (the two the environment records; `BLAKE3` is in the enum since 1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum HashAlg {
    #[serde(rename = "SHA-256")]
    Sha256,
    #[serde(rename = "BLAKE3")]
    Blake3,
}

/// A `property`.
#[derive(Debug, Serialize)]
pub struct Property {
    pub name: String,
    pub value: String,
}

/// A `dependency`: `ref` depends on each of `dependsOn` (bom-refs).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Dependency {
    #[serde(rename = "ref")]
    pub reference: String,
    pub depends_on: Vec<String>,
}

fn prop(name: impl Into<String>, value: impl Into<String>) -> Property {
    Property { name: name.into(), value: value.into() }
}

fn hashes(f: &ComponentFile) -> Vec<Hash> {
    let mut out = Vec::new();
    if is_hex64(&f.sha256) {
        out.push(Hash { alg: HashAlg::Sha256, content: f.sha256.clone() });
    }
    if is_hex64(&f.blake3) {
        out.push(Hash { alg: HashAlg::Blake3, content: f.blake3.clone() });
    }
    out
}

fn check_name(c: Check) -> &'static str {
    match c {
        Check::Matches => "matches",
        Check::Modified => "modified",
        Check::NotRecorded => "not-recorded",
        Check::Unknown => "unknown",
    }
}

/// A used file as a component of type `file`: its hashes, and how it was used, its size and its check as
/// properties.
fn file_component(f: &ComponentFile, ids: &mut Ids, extra: Vec<Property>) -> Component {
    let mut properties = vec![
        prop("repro:uses", uses_text(&f.uses)),
        prop("repro:size", f.size.to_string()),
        prop("repro:check", check_name(f.check)),
    ];
    properties.extend(extra);
    Component {
        kind: ComponentType::File,
        bom_ref: Some(ids.unique(format!("file:{}", f.path), "|")),
        name: f.path.clone(),
        version: None,
        description: None,
        scope: None,
        hashes: hashes(f),
        purl: None,
        components: Vec::new(),
        properties,
    }
}

/// A component of the environment: a package with its used files nested, or a loose file.
fn component(c: &EnvComponent, ids: &mut Ids) -> Component {
    let common = vec![prop("repro:kind", c.kind.name()), prop("repro:component-digest", c.digest.clone())];
    if let Some(f) = single_file(c) {
        let mut file = file_component(f, ids, common);
        file.scope = Some(Scope::Required);
        return file;
    }
    let base = match &c.purl {
        Some(p) => p.clone(),
        None => {
            format!("{}:{}{}", c.kind.name(), c.name, c.version.as_deref().map(|v| format!("@{v}")).unwrap_or_default())
        }
    };
    let bom_ref = ids.unique(base, "|");
    let mut properties = common;
    properties.push(prop("repro:used-files", c.files.len().to_string()));
    properties.extend(c.modified().map(|f| prop("repro:modified-file", f.path.clone())));
    let mut files: Vec<&ComponentFile> = c.files.iter().collect();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let kind = if c.kind == repro_model::provenance::ComponentKind::File {
        ComponentType::File
    } else if is_application(c) {
        ComponentType::Application
    } else {
        ComponentType::Library
    };
    Component {
        kind,
        bom_ref: Some(bom_ref),
        name: c.name.clone(),
        version: c.version.clone(),
        description: None,
        scope: Some(Scope::Required),
        // A package's hashes are its archive's (the `.crate` its files were checked against).
        hashes: c
            .archive_sha256
            .iter()
            .filter(|h| is_hex64(h))
            .map(|h| Hash { alg: HashAlg::Sha256, content: h.clone() })
            .collect(),
        purl: c.purl.clone(),
        components: files.into_iter().map(|f| file_component(f, ids, Vec::new())).collect(),
        properties,
    }
}

/// The environment as `metadata.component`.
fn environment_component(env: &Environment, bom_ref: String) -> Component {
    let mut properties = vec![
        prop("repro:identity", env.identity.clone()),
        prop("repro:source", crate::env::source_text(&env.source)),
        prop("repro:arch", env.arch.clone()),
        prop("repro:kernel-release", env.kernel_release.clone()),
    ];
    if timestamp(&env.recorded_at).is_none() {
        properties.push(prop("repro:recorded-at", env.recorded_at.clone()));
    }
    properties.extend(env.settings.identity.iter().map(|(k, v)| prop(format!("repro:setting:{k}"), v.clone())));
    properties.extend(env.settings.run.iter().map(|(k, v)| prop(format!("repro:run-setting:{k}"), v.clone())));
    properties.extend(env.unread.iter().map(|u| prop("repro:unread", format!("{}: {}", u.path, u.reason))));
    Component {
        kind: ComponentType::Platform,
        bom_ref: Some(bom_ref),
        name: "repro environment".to_string(),
        version: Some(env.identity.clone()),
        description: Some(
            "The inputs a sandboxed run used (the files it executed, mapped or read outside its working directory, \
             grouped into packages), the kernel and architecture, and the sandbox settings; the version is the \
             environment's identity."
                .to_string(),
        ),
        scope: None,
        hashes: Vec::new(),
        purl: None,
        components: Vec::new(),
        properties,
    }
}

/// The BOM of `env`, without its serial number.
pub fn bom(env: &Environment) -> Bom {
    let mut ids = Ids::default();
    let env_ref = ids.unique(format!("environment:{}", env.identity), "|");
    let components: Vec<Component> = sorted_components(env).into_iter().map(|c| component(c, &mut ids)).collect();
    let lifecycle = match env.source {
        EnvSource::Snapshot { .. } => Lifecycle { phase: Some("operations"), name: None, description: None },
        EnvSource::Run { .. } | EnvSource::Pack { .. } => Lifecycle {
            phase: None,
            name: Some("run"),
            description: Some("the inputs a run used, as repro's supervisor observed them"),
        },
    };
    let tool = Component {
        kind: ComponentType::Application,
        bom_ref: None,
        name: "repro".to_string(),
        version: Some(env.repro_version.clone()),
        description: None,
        scope: None,
        hashes: Vec::new(),
        purl: None,
        components: Vec::new(),
        properties: Vec::new(),
    };
    let depends_on: Vec<String> = components.iter().filter_map(|c| c.bom_ref.clone()).collect();
    Bom {
        bom_format: "CycloneDX",
        spec_version: "1.6",
        serial_number: None,
        version: 1,
        metadata: Metadata {
            timestamp: timestamp(&env.recorded_at),
            lifecycles: vec![lifecycle],
            tools: Tools { components: vec![tool] },
            component: environment_component(env, env_ref.clone()),
        },
        components,
        dependencies: vec![Dependency { reference: env_ref, depends_on }],
    }
}

/// The CycloneDX 1.6 JSON of `env`; its serial number is the UUID of the rest of its bytes.
pub fn write(env: &Environment) -> Vec<u8> {
    let mut doc = bom(env);
    let unnamed = super::to_json(&doc);
    doc.serial_number = Some(format!("urn:uuid:{}", content_uuid("repro sbom cyclonedx 1.6", &unnamed)));
    super::to_json(&doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sbom::fixtures;

    fn parse(env: &Environment) -> serde_json::Value {
        serde_json::from_slice(&write(env)).unwrap()
    }

    #[test]
    fn snapshot_of_a_small_environment() {
        let text = String::from_utf8(write(&fixtures::small())).unwrap();
        insta::assert_snapshot!("cyclonedx_small", text);
    }

    #[test]
    fn packages_are_applications_or_libraries_and_files_are_nested_with_both_hashes() {
        let v = parse(&fixtures::small());
        let comps = v["components"].as_array().unwrap();
        let by_name = |n: &str| comps.iter().find(|c| c["name"] == n).unwrap();
        assert_eq!(by_name("coreutils")["type"], "application");
        assert_eq!(by_name("packageurl-python")["type"], "library");
        let libc = by_name("libc6");
        assert_eq!(libc["type"], "application", "ld.so was executed");
        assert_eq!(libc["bom-ref"], libc["purl"]);
        let files = libc["components"].as_array().unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!(files[0]["type"], "file");
        let algs: Vec<&str> =
            files[0]["hashes"].as_array().unwrap().iter().map(|h| h["alg"].as_str().unwrap()).collect();
        assert_eq!(algs, ["SHA-256", "BLAKE3"]);
        let props = libc["properties"].as_array().unwrap();
        assert!(props
            .iter()
            .any(|p| p["name"] == "repro:modified-file" && p["value"] == "/usr/lib/x86_64-linux-gnu/libc.so.6"));
        let loose = by_name("/opt/app/config.toml");
        assert_eq!(loose["type"], "file");
        assert_eq!(loose["bom-ref"], "file:/opt/app/config.toml");
        assert_eq!(loose["hashes"].as_array().unwrap().len(), 2);
        assert!(v["serialNumber"].as_str().unwrap().starts_with("urn:uuid:"));
        assert_eq!(v["metadata"]["timestamp"], "2026-12-03T20:15:02Z");
        assert_eq!(v["metadata"]["component"]["version"], fixtures::small().identity);
        let deps = v["dependencies"].as_array().unwrap();
        assert_eq!(deps.len(), 1);
        assert_eq!(deps[0]["dependsOn"].as_array().unwrap().len(), 4);
    }

    #[test]
    fn bom_refs_are_unique_even_for_repeated_purls_and_paths() {
        let v = parse(&fixtures::hostile());
        let mut refs = Vec::new();
        fn collect(c: &serde_json::Value, refs: &mut Vec<String>) {
            if let Some(r) = c["bom-ref"].as_str() {
                refs.push(r.to_string());
            }
            for s in c["components"].as_array().into_iter().flatten() {
                collect(s, refs);
            }
        }
        collect(&v["metadata"]["component"], &mut refs);
        for c in v["components"].as_array().unwrap() {
            collect(c, &mut refs);
        }
        let n = refs.len();
        refs.sort();
        refs.dedup();
        assert_eq!(refs.len(), n);
        assert!(refs.contains(&"pkg:npm/%40scope/x@1.0.0|2".to_string()), "{refs:?}");
    }

    #[test]
    fn an_unparsable_timestamp_is_left_out_and_recorded_as_a_property() {
        let mut env = fixtures::small();
        env.recorded_at = "not a time".into();
        let v = parse(&env);
        assert!(v["metadata"].get("timestamp").is_none());
        let props = v["metadata"]["component"]["properties"].as_array().unwrap();
        assert!(props.iter().any(|p| p["name"] == "repro:recorded-at" && p["value"] == "not a time"));
    }
}
