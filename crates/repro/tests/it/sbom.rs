//! `repro sbom`: SBOMs of real runs (a shell pipeline of Debian tools, a Python program importing a
//! pip-installed distribution, a Rust binary, a captured pack), checked by independent validators (the official
//! JSON schemas, cyclonedx-python-lib, spdx-tools) and against what the test knows the run used and did not use.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::*;
use crate::provenance::pyvenv;

const FORMATS: [&str; 2] = ["cyclonedx", "spdx"];

fn here() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it")
}

/// Runs the independent validators on `file`; `Ok(())` or the problems they printed.
fn validate(format: &str, file: &Path) -> Result<(), String> {
    let py = pyvenv().join("bin/python");
    let o = Command::new(py)
        .arg(here().join("sbom_validate.py"))
        .args([format, file.to_str().unwrap()])
        .arg(here().join("schemas/spdx-2.3.schema.json"))
        .output()
        .expect("python runs");
    match o.status.code() {
        Some(0) => Ok(()),
        Some(1) => Err(String::from_utf8_lossy(&o.stdout).into_owned()),
        _ => panic!("the validator itself failed: {}{}", stdout(&o), stderr(&o)),
    }
}

fn repro_in(dir: &Path, args: &[&str]) -> Output {
    let mut c = repro();
    c.current_dir(dir).args(args);
    c.timeout(HANG_GUARD).output().expect("repro runs")
}

/// `repro sbom TARGET --format F -o FILE` in `dir`, validated; returns its bytes.
fn sbom(dir: &Path, target: &str, format: &str) -> Vec<u8> {
    let out = dir.join(format!("sbom.{format}.json"));
    let o = repro_in(dir, &["sbom", target, "--format", format, "-o", out.to_str().unwrap()]);
    assert_code(&o, 0);
    let bytes = fs::read(&out).unwrap();
    if let Err(problems) = validate(format, &out) {
        panic!("{format} SBOM of {target} is invalid:\n{problems}\n{}", String::from_utf8_lossy(&bytes));
    }
    bytes
}

/// The purls an SBOM lists.
fn purls(format: &str, doc: &Value) -> Vec<String> {
    let text = |v: &Value| v.as_str().unwrap().to_string();
    match format {
        "cyclonedx" => doc["components"].as_array().unwrap().iter().filter_map(|c| c.get("purl")).map(text).collect(),
        _ => doc["packages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p["externalRefs"].as_array().into_iter().flatten())
            .filter(|r| r["referenceType"] == "purl")
            .map(|r| text(&r["referenceLocator"]))
            .collect(),
    }
}

/// The (path, sha256) of every file an SBOM lists.
fn files(format: &str, doc: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    match format {
        "cyclonedx" => {
            fn walk(c: &Value, out: &mut Vec<(String, String)>) {
                if c["type"] == "file" {
                    let sha = c["hashes"].as_array().unwrap().iter().find(|h| h["alg"] == "SHA-256").unwrap();
                    out.push((c["name"].as_str().unwrap().into(), sha["content"].as_str().unwrap().into()));
                }
                for s in c["components"].as_array().into_iter().flatten() {
                    walk(s, out);
                }
            }
            for c in doc["components"].as_array().unwrap() {
                walk(c, &mut out);
            }
        }
        _ => {
            for f in doc["files"].as_array().into_iter().flatten() {
                let sha = f["checksums"].as_array().unwrap().iter().find(|c| c["algorithm"] == "SHA256").unwrap();
                let name = f["fileName"].as_str().unwrap().trim_start_matches('.').to_string();
                out.push((name, sha["checksumValue"].as_str().unwrap().into()));
            }
        }
    }
    out
}

fn dpkg_purl_prefix(pkg: &str) -> String {
    format!("pkg:deb/debian/{pkg}@")
}

fn dpkg_owner(path: &str) -> String {
    let o = Command::new("dpkg").args(["-S", path]).output().unwrap();
    String::from_utf8(o.stdout).unwrap().split(':').next().unwrap().trim().to_string()
}

#[test]
fn a_shell_pipelines_sboms_are_valid_list_its_debian_packages_and_no_others_and_are_deterministic() {
    require_cmds(&["dpkg", "seq", "sort", "tr"]);
    let w = Workdir::new();
    let o = w.run(&["-q", "--record-inputs"], &["sh", "-c", "seq 1 20 | sort -rn | tr 0-9 a-j"]);
    assert_code(&o, 0);
    let coreutils = dpkg_owner("/usr/bin/sort");
    for format in FORMATS {
        let bytes = sbom(w.path(), "last", format);
        let doc: Value = serde_json::from_slice(&bytes).unwrap();
        let purls = purls(format, &doc);
        for pkg in [coreutils.as_str(), "libc6"] {
            assert!(purls.iter().any(|p| p.starts_with(&dpkg_purl_prefix(pkg))), "{format}: {pkg} missing: {purls:?}");
        }
        for pkg in ["grep", "sed", "git", "python3.11-minimal"] {
            assert!(!purls.iter().any(|p| p.starts_with(&dpkg_purl_prefix(pkg))), "{format}: {pkg} listed: {purls:?}");
        }
        // Every file it lists has the sha256 of the host file the run used.
        let listed = files(format, &doc);
        assert!(listed.iter().any(|(p, _)| p == "/usr/bin/sort" || p.ends_with("/bin/sort")), "{listed:?}");
        for (path, sha) in &listed {
            let host = sha256_hex(&fs::read(path).unwrap());
            assert_eq!(&host, sha, "{format}: {path}");
        }
        // The same run gives the same bytes, to stdout too.
        let o = repro_in(w.path(), &["sbom", "last", "--format", format]);
        assert_code(&o, 0);
        assert_eq!(o.stdout, bytes, "{format}: a second SBOM of the same run differs");
        // The identity is in it.
        let env = repro_in(w.path(), &["env", "last", "--json"]);
        let identity = serde_json::from_slice::<Value>(&env.stdout).unwrap()["identity"].as_str().unwrap().to_string();
        assert!(String::from_utf8_lossy(&bytes).contains(&identity));
    }
}

fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn a_python_programs_sbom_lists_the_distribution_it_imported_and_not_one_it_did_not() {
    let venv = pyvenv();
    let w = Workdir::new();
    fs::write(w.path().join("p.py"), "import securesystemslib\nprint(securesystemslib.__name__)\n").unwrap();
    let py = venv.join("bin/python");
    let o = w.run(&["-q", "--record-inputs"], &[py.to_str().unwrap(), "p.py"]);
    assert_code(&o, 0);
    for format in FORMATS {
        let doc: Value = serde_json::from_slice(&sbom(w.path(), "last", format)).unwrap();
        let purls = purls(format, &doc);
        assert!(purls.iter().any(|p| p.starts_with("pkg:pypi/securesystemslib@")), "{format}: {purls:?}");
        assert!(!purls.iter().any(|p| p.starts_with("pkg:pypi/protobuf@")), "{format}: {purls:?}");
        assert!(purls.iter().any(|p| p.starts_with("pkg:deb/debian/python3.11")), "{format}: {purls:?}");
    }
}

#[test]
fn a_rust_binarys_sbom_lists_it_as_a_loose_file_with_its_hash() {
    require_cmd("rustc");
    let tool = tempfile::Builder::new().prefix("repro-tool-").tempdir().unwrap();
    fs::write(tool.path().join("hello.rs"), "fn main() { println!(\"hello\"); }\n").unwrap();
    let o = Command::new("rustc").current_dir(tool.path()).args(["-O", "hello.rs", "-o", "hello"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let w = Workdir::new();
    let bind = format!("{}:/run/tool", tool.path().display());
    let o = w.run(&["-q", "--record-inputs", "--bind", &bind], &["/run/tool/hello"]);
    assert_code(&o, 0);
    let want = sha256_hex(&fs::read(tool.path().join("hello")).unwrap());
    for format in FORMATS {
        let doc: Value = serde_json::from_slice(&sbom(w.path(), "last", format)).unwrap();
        let listed = files(format, &doc);
        assert!(listed.contains(&("/run/tool/hello".to_string(), want.clone())), "{format}: {listed:?}");
        assert!(!listed.iter().any(|(p, _)| p == "/run/tool/hello.rs"), "{format}: the unused source is listed");
    }
}

#[test]
fn a_packs_sbom_is_valid_and_a_run_without_recorded_inputs_is_refused() {
    let w = Workdir::new();
    let aside = tempfile::tempdir().unwrap();
    let pack = aside.path().join("p.repro");
    let mut c = repro();
    c.current_dir(w.path()).env("XDG_CACHE_HOME", aside.path().join("cache"));
    c.args(["capture", "-q", "-o", pack.to_str().unwrap(), "--", "sh", "-c", "cat /etc/os-release >/dev/null; exit 3"]);
    assert_code(&c.timeout(HANG_GUARD).output().unwrap(), 3);
    for format in FORMATS {
        let a = sbom(w.path(), pack.to_str().unwrap(), format);
        assert_eq!(a, sbom(w.path(), pack.to_str().unwrap(), format), "{format}: not deterministic");
        let doc: Value = serde_json::from_slice(&a).unwrap();
        assert!(purls(format, &doc).iter().any(|p| p.starts_with("pkg:deb/debian/libc6@")));
    }
    // A run recorded without --record-inputs has no environment: a clear error, exit 2, no file written.
    assert_code(&w.run(&["-q"], &["true"]), 0);
    let out = w.path().join("none.json");
    let o = repro_in(w.path(), &["sbom", "last", "--format", "spdx", "-o", out.to_str().unwrap()]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("--record-inputs"), "{}", stderr(&o));
    assert!(!out.exists());
    // An unknown format is a usage error naming the choices.
    let o = repro_in(w.path(), &["sbom", pack.to_str().unwrap(), "--format", "swid"]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("cyclonedx") && stderr(&o).contains("spdx"), "{}", stderr(&o));
}

/// The validators are not rubber stamps: a document broken in a way each of them checks is refused.
#[test]
fn the_validators_refuse_broken_sboms() {
    let w = Workdir::new();
    assert_code(&w.run(&["-q", "--record-inputs"], &["sh", "-c", "true"]), 0);
    let check = |format: &str, name: &str, edit: &dyn Fn(&mut Value)| {
        let mut doc: Value = serde_json::from_slice(&sbom(w.path(), "last", format)).unwrap();
        edit(&mut doc);
        let p = w.path().join(format!("broken-{name}.json"));
        fs::write(&p, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
        assert!(validate(format, &p).is_err(), "{format}: the validators accepted {name}");
    };
    check("cyclonedx", "hash", &|d| d["components"][0]["components"][0]["hashes"][0]["content"] = "xyz".into());
    check("cyclonedx", "type", &|d| d["metadata"]["component"]["type"] = "environment".into());
    check("cyclonedx", "format", &|d| d["bomFormat"] = "SPDX".into());
    check("spdx", "no-sha1", &|d| {
        let sums = d["files"][0]["checksums"].as_array_mut().unwrap();
        sums.retain(|c| c["algorithm"] != "SHA1");
    });
    check("spdx", "dangling", &|d| {
        d["relationships"].as_array_mut().unwrap().push(serde_json::json!({
            "spdxElementId": "SPDXRef-Environment", "relationshipType": "DEPENDS_ON",
            "relatedSpdxElement": "SPDXRef-Missing"}));
    });
    check("spdx", "created", &|d| d["creationInfo"]["created"] = "2026-12-04 10:00".into());
}
