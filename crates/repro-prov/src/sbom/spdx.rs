//! SPDX 2.3 JSON (<https://spdx.github.io/spdx-spec/v2.3/>, `spdx-schema.json` of spdx-spec v2.3): the subset
//! `repro sbom --format spdx` writes, as typed structs with the schema's field names.
//!
//! The layout:
//! - the document `DESCRIBES` one package, the environment (`SPDXRef-Environment`, purpose `OTHER`, its version
//!   the identity), with the identity, source, architecture, kernel release, settings and unread paths as
//!   annotations named `repro:…`;
//! - each component is a package (purpose `APPLICATION` when one of its files was executed, `LIBRARY`
//!   otherwise) with its purl as a `PACKAGE-MANAGER` external reference, and the environment `DEPENDS_ON` it;
//!   `filesAnalyzed` is true and the package `CONTAINS` its used files — only those: the package comment says so,
//!   and no verification code is given (it would have to cover every file of the package);
//! - each used file is a file (`fileName` is its guest path made relative to the guest's root, `./usr/bin/sort`,
//!   as SPDX requires) with SHA1 (required by SPDX 2.3 for every file; not trusted by repro) and SHA256 checksums,
//!   and how it was used, its check and its BLAKE3 digest in the comment; a loose file (no package owns it) is a file
//!   the environment `DEPENDS_ON`;
//! - a file whose SHA-1 was not recorded (documents from before it was) cannot be an SPDX file: it is a package of
//!   purpose `FILE` with a SHA256 checksum instead.
//!
//! `documentNamespace` is `https://repro.invalid/spdx/environment/IDENTITY/UUID` (`.invalid` never resolves: it
//! only has to be unique), the UUID derived from the rest of the document's bytes.

use repro_model::provenance::{Check, Component, ComponentFile, EnvSource, Environment};
use serde::Serialize;

use super::{content_uuid, is_application, is_hex64, single_file, sorted_components, timestamp, uses_text, Ids};

/// The document.
#[derive(Debug, Serialize)]
pub struct Document {
    #[serde(rename = "spdxVersion")]
    pub spdx_version: &'static str,
    #[serde(rename = "dataLicense")]
    pub data_license: &'static str,
    #[serde(rename = "SPDXID")]
    pub spdx_id: &'static str,
    pub name: String,
    #[serde(rename = "documentNamespace")]
    pub document_namespace: String,
    #[serde(rename = "creationInfo")]
    pub creation_info: CreationInfo,
    pub comment: String,
    pub packages: Vec<Package>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<File>,
    pub relationships: Vec<Relationship>,
}

#[derive(Debug, Serialize)]
pub struct CreationInfo {
    /// `YYYY-MM-DDThh:mm:ssZ`: when the inputs were recorded.
    pub created: String,
    /// `Tool: repro-VERSION`.
    pub creators: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Package {
    #[serde(rename = "SPDXID")]
    pub spdx_id: String,
    pub name: String,
    #[serde(rename = "versionInfo", skip_serializing_if = "Option::is_none")]
    pub version_info: Option<String>,
    /// Always `NOASSERTION`: where the package came from is not what the run observed.
    #[serde(rename = "downloadLocation")]
    pub download_location: &'static str,
    #[serde(rename = "filesAnalyzed")]
    pub files_analyzed: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub checksums: Vec<Checksum>,
    #[serde(rename = "externalRefs", skip_serializing_if = "Vec::is_empty")]
    pub external_refs: Vec<ExternalRef>,
    #[serde(rename = "primaryPackagePurpose")]
    pub primary_package_purpose: Purpose,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub annotations: Vec<Annotation>,
}

/// `primaryPackagePurpose` (the values used here).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING-KEBAB-CASE")]
pub enum Purpose {
    Application,
    Library,
    File,
    Other,
}

#[derive(Debug, Serialize)]
pub struct File {
    #[serde(rename = "SPDXID")]
    pub spdx_id: String,
    #[serde(rename = "fileName")]
    pub file_name: String,
    pub checksums: Vec<Checksum>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Checksum {
    pub algorithm: Algorithm,
    #[serde(rename = "checksumValue")]
    pub checksum_value: String,
}

/// The checksum algorithms written. BLAKE3 is in SPDX 2.3's list, but spdx-tools 0.8.5 (the reference validator)
/// rejects a 256-bit BLAKE3 value (it asks for 256 hex digits): the BLAKE3 digest is in the file's comment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Algorithm {
    Sha1,
    Sha256,
}

#[derive(Debug, Serialize)]
pub struct ExternalRef {
    #[serde(rename = "referenceCategory")]
    pub reference_category: &'static str,
    #[serde(rename = "referenceType")]
    pub reference_type: &'static str,
    #[serde(rename = "referenceLocator")]
    pub reference_locator: String,
}

#[derive(Debug, Serialize)]
pub struct Annotation {
    #[serde(rename = "annotationDate")]
    pub annotation_date: String,
    #[serde(rename = "annotationType")]
    pub annotation_type: &'static str,
    pub annotator: String,
    pub comment: String,
}

#[derive(Debug, Serialize)]
pub struct Relationship {
    #[serde(rename = "spdxElementId")]
    pub spdx_element_id: String,
    #[serde(rename = "relationshipType")]
    pub relationship_type: RelationshipType,
    #[serde(rename = "relatedSpdxElement")]
    pub related_spdx_element: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RelationshipType {
    Describes,
    DependsOn,
    Contains,
}

const ENVIRONMENT_ID: &str = "SPDXRef-Environment";

/// An SPDX id from free text: `SPDXRef-` + `[A-Za-z0-9.-]+` (anything else becomes `-`), unique in the
/// document.
fn spdx_id(ids: &mut Ids, prefix: &str, text: &str) -> String {
    let mut clean: String =
        text.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '-' }).collect();
    clean.truncate(80);
    let clean = clean.trim_matches('-');
    let base = if clean.is_empty() { format!("SPDXRef-{prefix}") } else { format!("SPDXRef-{prefix}-{clean}") };
    ids.unique(base, "-")
}

fn check_text(c: Check) -> &'static str {
    match c {
        Check::Matches => "matches its package's record",
        Check::Modified => "MODIFIED: differs from its package's record",
        Check::NotRecorded => "no package record to check",
        Check::Unknown => "could not be checked",
    }
}

fn file_comment(f: &ComponentFile) -> String {
    let blake3 = if is_hex64(&f.blake3) { format!("; blake3 {}", f.blake3) } else { String::new() };
    format!("used: {}; {} bytes; {}{blake3}", uses_text(&f.uses), f.size, check_text(f.check))
}

fn checksums(f: &ComponentFile) -> Vec<Checksum> {
    let mut out = Vec::new();
    if let Some(s) = f.sha1.as_ref().filter(|s| crate::identity::is_hex(s, 40)) {
        out.push(Checksum { algorithm: Algorithm::Sha1, checksum_value: s.clone() });
    }
    if is_hex64(&f.sha256) {
        out.push(Checksum { algorithm: Algorithm::Sha256, checksum_value: f.sha256.clone() });
    }
    out
}

/// The guest path as an SPDX file name: relative to the guest's root.
fn file_name(path: &str) -> String {
    format!("./{}", path.trim_start_matches('/'))
}

struct Builder {
    ids: Ids,
    packages: Vec<Package>,
    files: Vec<File>,
    relationships: Vec<Relationship>,
}

impl Builder {
    fn relate(&mut self, from: &str, kind: RelationshipType, to: &str) {
        self.relationships.push(Relationship {
            spdx_element_id: from.to_string(),
            relationship_type: kind,
            related_spdx_element: to.to_string(),
        });
    }

    /// A used file as an SPDX file, or (no SHA-1 recorded) as a package of purpose FILE; returns its id.
    fn file(&mut self, f: &ComponentFile) -> String {
        let sums = checksums(f);
        if sums.first().is_some_and(|c| c.algorithm == Algorithm::Sha1) {
            let id = spdx_id(&mut self.ids, "File", &f.path);
            self.files.push(File {
                spdx_id: id.clone(),
                file_name: file_name(&f.path),
                checksums: sums,
                comment: Some(file_comment(f)),
            });
            return id;
        }
        let id = spdx_id(&mut self.ids, "File", &f.path);
        self.packages.push(Package {
            spdx_id: id.clone(),
            name: f.path.clone(),
            version_info: None,
            download_location: "NOASSERTION",
            files_analyzed: false,
            checksums: sums,
            external_refs: Vec::new(),
            primary_package_purpose: Purpose::File,
            comment: Some(format!("{} (no SHA-1 was recorded, so it is not an SPDX file)", file_comment(f))),
            annotations: Vec::new(),
        });
        id
    }

    fn component(&mut self, c: &Component) {
        if let Some(f) = single_file(c) {
            let id = self.file(f);
            self.relate(ENVIRONMENT_ID, RelationshipType::DependsOn, &id);
            return;
        }
        let label = match &c.version {
            Some(v) => format!("{}-{}-{v}", c.kind.name(), c.name),
            None => format!("{}-{}", c.kind.name(), c.name),
        };
        let id = spdx_id(&mut self.ids, "Package", &label);
        let purpose = if is_application(c) { Purpose::Application } else { Purpose::Library };
        let mut comment = format!(
            "{} component; the run used {} of its files (the files it CONTAINS here, not all of the package's); \
             component digest {}",
            c.kind.name(),
            c.files.len(),
            c.digest
        );
        let modified: Vec<&str> = c.modified().map(|f| f.path.as_str()).collect();
        if !modified.is_empty() {
            comment.push_str(&format!("; MODIFIED files: {}", modified.join(", ")));
        }
        self.packages.push(Package {
            spdx_id: id.clone(),
            name: c.name.clone(),
            version_info: c.version.clone(),
            download_location: "NOASSERTION",
            // A package that CONTAINS files has them analyzed (SPDX 2.3, 7.8); the comment says which.
            files_analyzed: true,
            // A package's checksum is its archive's (the `.crate` its files were checked against).
            checksums: c
                .archive_sha256
                .iter()
                .filter(|h| is_hex64(h))
                .map(|h| Checksum { algorithm: Algorithm::Sha256, checksum_value: h.clone() })
                .collect(),
            external_refs: c
                .purl
                .iter()
                .map(|p| ExternalRef {
                    reference_category: "PACKAGE-MANAGER",
                    reference_type: "purl",
                    reference_locator: p.clone(),
                })
                .collect(),
            primary_package_purpose: purpose,
            comment: Some(comment),
            annotations: Vec::new(),
        });
        self.relate(ENVIRONMENT_ID, RelationshipType::DependsOn, &id);
        let mut files: Vec<&ComponentFile> = c.files.iter().collect();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        for f in files {
            let fid = self.file(f);
            self.relate(&id, RelationshipType::Contains, &fid);
        }
    }
}

/// The document of `env`, its namespace not yet set.
pub fn document(env: &Environment) -> Document {
    let created = timestamp(&env.recorded_at);
    let date = created.clone().unwrap_or_else(|| "1970-01-01T00:00:00Z".to_string());
    let tool = format!("Tool: repro-{}", env.repro_version);
    let annotation = |comment: String| Annotation {
        annotation_date: date.clone(),
        annotation_type: "OTHER",
        annotator: tool.clone(),
        comment,
    };
    let mut annotations = vec![
        annotation(format!("repro:identity={}", env.identity)),
        annotation(format!("repro:source={}", crate::env::source_text(&env.source))),
        annotation(format!("repro:arch={}", env.arch)),
        annotation(format!("repro:kernel-release={}", env.kernel_release)),
    ];
    annotations.extend(env.settings.identity.iter().map(|(k, v)| annotation(format!("repro:setting:{k}={v}"))));
    annotations.extend(env.settings.run.iter().map(|(k, v)| annotation(format!("repro:run-setting:{k}={v}"))));
    annotations.extend(env.unread.iter().map(|u| annotation(format!("repro:unread={}: {}", u.path, u.reason))));
    let mut b = Builder { ids: Ids::default(), packages: Vec::new(), files: Vec::new(), relationships: Vec::new() };
    b.ids.unique(ENVIRONMENT_ID.to_string(), "-");
    b.packages.push(Package {
        spdx_id: ENVIRONMENT_ID.to_string(),
        name: "repro environment".to_string(),
        version_info: Some(env.identity.clone()),
        download_location: "NOASSERTION",
        files_analyzed: false,
        checksums: Vec::new(),
        external_refs: Vec::new(),
        primary_package_purpose: Purpose::Other,
        comment: Some(
            "The inputs a sandboxed run used (the files it executed, mapped or read outside its working directory, \
             grouped into packages), the kernel and architecture, and the sandbox settings; the version is the \
             environment's identity."
                .to_string(),
        ),
        annotations,
    });
    b.relate("SPDXRef-DOCUMENT", RelationshipType::Describes, ENVIRONMENT_ID);
    for c in sorted_components(env) {
        b.component(c);
    }
    let what = match &env.source {
        EnvSource::Snapshot { .. } => "a host snapshot of the inputs a run used",
        EnvSource::Run { .. } | EnvSource::Pack { .. } => "the inputs a run used, as repro's supervisor observed them",
    };
    Document {
        spdx_version: "SPDX-2.3",
        data_license: "CC0-1.0",
        spdx_id: "SPDXRef-DOCUMENT",
        name: format!("repro environment {}", env.identity),
        document_namespace: String::new(),
        creation_info: CreationInfo {
            created: date.clone(),
            creators: vec![tool.clone()],
            comment: created.is_none().then(|| format!("recorded at {:?} (not an RFC 3339 time)", env.recorded_at)),
        },
        comment: format!(
            "{what}. File names are guest paths relative to the guest's root. SHA1 checksums are given because \
             SPDX 2.3 requires them; repro's digests are SHA256 and BLAKE3 (in each file's comment)."
        ),
        packages: b.packages,
        files: b.files,
        relationships: b.relationships,
    }
}

/// The SPDX 2.3 JSON of `env`; its namespace holds the UUID of the rest of its bytes.
pub fn write(env: &Environment) -> Vec<u8> {
    let mut doc = document(env);
    let unnamed = super::to_json(&doc);
    let hex: String = env.identity.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).take(80).collect();
    doc.document_namespace =
        format!("https://repro.invalid/spdx/environment/{hex}/{}", content_uuid("repro sbom spdx 2.3", &unnamed));
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
        insta::assert_snapshot!("spdx_small", text);
    }

    #[test]
    fn packages_contain_their_used_files_with_sha1_sha256_and_blake3() {
        let v = parse(&fixtures::small());
        let pkgs = v["packages"].as_array().unwrap();
        let by_name = |n: &str| pkgs.iter().find(|p| p["name"] == n).unwrap();
        assert_eq!(by_name("coreutils")["primaryPackagePurpose"], "APPLICATION");
        assert_eq!(by_name("packageurl-python")["primaryPackagePurpose"], "LIBRARY");
        let libc = by_name("libc6");
        assert_eq!(libc["externalRefs"][0]["referenceLocator"], "pkg:deb/debian/libc6@2.36-9%2Bdeb12u9?arch=amd64");
        assert!(libc["comment"].as_str().unwrap().contains("MODIFIED files: /usr/lib/x86_64-linux-gnu/libc.so.6"));
        let id = libc["SPDXID"].as_str().unwrap();
        let rels = v["relationships"].as_array().unwrap();
        let contained: Vec<&str> = rels
            .iter()
            .filter(|r| r["spdxElementId"] == id && r["relationshipType"] == "CONTAINS")
            .map(|r| r["relatedSpdxElement"].as_str().unwrap())
            .collect();
        assert_eq!(contained.len(), 2);
        let files = v["files"].as_array().unwrap();
        let f = files.iter().find(|f| f["SPDXID"] == contained[0]).unwrap();
        assert!(f["fileName"].as_str().unwrap().starts_with("./usr/lib"));
        let algs: Vec<&str> =
            f["checksums"].as_array().unwrap().iter().map(|c| c["algorithm"].as_str().unwrap()).collect();
        assert_eq!(algs, ["SHA1", "SHA256"]);
        assert!(f["comment"].as_str().unwrap().contains("; blake3 "));
        let loose = files.iter().find(|f| f["fileName"] == "./opt/app/config.toml").unwrap();
        assert!(rels.iter().any(|r| r["spdxElementId"] == ENVIRONMENT_ID
            && r["relationshipType"] == "DEPENDS_ON"
            && r["relatedSpdxElement"] == loose["SPDXID"]));
        assert_eq!(v["creationInfo"]["created"], "2026-12-03T20:15:02Z");
        assert!(v["documentNamespace"].as_str().unwrap().starts_with("https://repro.invalid/spdx/environment/blake3"));
    }

    #[test]
    fn ids_are_valid_and_unique_for_hostile_names() {
        let v = parse(&fixtures::hostile());
        let mut ids: Vec<String> = v["packages"]
            .as_array()
            .unwrap()
            .iter()
            .chain(v["files"].as_array().unwrap())
            .map(|e| e["SPDXID"].as_str().unwrap().to_string())
            .collect();
        for id in &ids {
            let rest = id.strip_prefix("SPDXRef-").unwrap();
            assert!(
                !rest.is_empty() && rest.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-'),
                "{id}"
            );
        }
        let n = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), n);
        // The file without SHA-1 is a package of purpose FILE.
        let p = v["packages"].as_array().unwrap().iter().find(|p| p["primaryPackagePurpose"] == "FILE").unwrap();
        assert_eq!(p["filesAnalyzed"], false);
        assert!(v["creationInfo"]["comment"].as_str().unwrap().contains("yesterday"));
    }
}
