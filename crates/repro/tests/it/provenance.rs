//! `repro run --record-inputs`, `repro env`, `repro env snapshot`, `repro drift`, and the environment of a pack:
//! real runs of real programs, checked against what the test knows they used (and did not use).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::common::*;

/// The venv of pinned PyPI packages scripts/install-deps.sh makes (pip-installed, not Debian's).
pub(crate) fn pyvenv() -> PathBuf {
    let v = PathBuf::from(std::env::var("REPRO_PYVENV").unwrap_or_else(|_| "/var/cache/repro/pyvenv".into()));
    assert!(
        v.join("bin/python").exists(),
        "this test needs the venv {} (run scripts/install-deps.sh; CI's .ci/run does)",
        v.display()
    );
    v
}

fn repro_in(dir: &Path, args: &[&str]) -> Output {
    let mut c = repro();
    c.current_dir(dir).args(args);
    c.timeout(HANG_GUARD).output().expect("repro runs")
}

/// `repro env RUN --json` of the last run of `w`.
fn env_json(w: &Workdir) -> Value {
    let o = repro_in(w.path(), &["env", "last", "--json"]);
    assert_code(&o, 0);
    serde_json::from_slice(&o.stdout).expect("env --json is JSON")
}

fn components(env: &Value) -> Vec<(String, String, Option<String>)> {
    env["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap().to_string(),
                c["name"].as_str().unwrap().to_string(),
                c["version"].as_str().map(str::to_string),
            )
        })
        .collect()
}

fn has(env: &Value, kind: &str, name: &str) -> bool {
    components(env).iter().any(|(k, n, _)| k == kind && n == name)
}

fn dpkg_version(pkg: &str) -> String {
    let o = std::process::Command::new("dpkg-query").args(["-W", "-f=${Version}", pkg]).output().unwrap();
    String::from_utf8(o.stdout).unwrap()
}

fn dpkg_owner(path: &str) -> String {
    let o = std::process::Command::new("dpkg").args(["-S", path]).output().unwrap();
    let s = String::from_utf8(o.stdout).unwrap();
    s.split(':').next().unwrap().trim().to_string()
}

#[test]
fn a_shell_pipeline_lists_the_debian_packages_it_used_and_no_others() {
    require_cmds(&["dpkg", "dpkg-query", "seq", "sort", "tr"]);
    let w = Workdir::new();
    let o = w.run(&["-q", "--record-inputs"], &["sh", "-c", "seq 1 20 | sort -rn | tr 0-9 a-j"]);
    assert_code(&o, 0);
    assert!(w.last_run().join("environment.json").exists());
    let env = env_json(&w);
    let coreutils = dpkg_owner("/usr/bin/sort");
    for pkg in [coreutils.as_str(), "libc6"] {
        let c = components(&env).into_iter().find(|(k, n, _)| k == "deb" && n == pkg);
        let (_, _, version) = c.unwrap_or_else(|| panic!("deb {pkg} missing from {:?}", components(&env)));
        assert_eq!(version.as_deref(), Some(dpkg_version(pkg).as_str()), "{pkg}");
    }
    // Installed here, not used by the pipeline.
    for pkg in ["grep", "sed", "python3.11-minimal", "git"] {
        assert!(!has(&env, "deb", pkg), "deb {pkg} listed but not used: {:?}", components(&env));
    }
    // Every used file of a Debian package matches dpkg's md5sums on this host (nothing was modified).
    for c in env["components"].as_array().unwrap().iter().filter(|c| c["kind"] == "deb") {
        for f in c["files"].as_array().unwrap() {
            assert_ne!(f["check"], "modified", "{}", f["path"]);
        }
        assert!(c["purl"].as_str().unwrap().starts_with("pkg:deb/"), "{c}");
    }
    assert!(env["identity"].as_str().unwrap().starts_with("blake3:"));
}

#[test]
fn a_python_program_lists_the_pip_installed_distribution_it_imported() {
    let venv = pyvenv();
    // securesystemslib is in the venv (the attestation interop tests use it); protobuf is too, and is not
    // imported.
    let w = Workdir::new();
    fs::write(w.path().join("p.py"), "import securesystemslib\nprint(securesystemslib.__name__)\n").unwrap();
    let py = venv.join("bin/python");
    let o = w.run(&["-q", "--record-inputs"], &[py.to_str().unwrap(), "p.py"]);
    assert_code(&o, 0);
    let env = env_json(&w);
    let dist = env["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "python" && c["name"].as_str().unwrap().eq_ignore_ascii_case("securesystemslib"))
        .unwrap_or_else(|| panic!("securesystemslib missing: {:?}", components(&env)))
        .clone();
    assert!(dist["purl"].as_str().unwrap().starts_with("pkg:pypi/securesystemslib@"), "{dist}");
    // Python read the compiled module (RECORD lists .pyc files without a hash); nothing differs from RECORD.
    let files = dist["files"].as_array().unwrap();
    assert!(!files.is_empty() && files.iter().all(|f| f["check"] != "modified"), "{dist}");
    assert!(files.iter().all(|f| f["path"].as_str().unwrap().contains("/site-packages/securesystemslib/")), "{dist}");
    assert!(!has(&env, "python", "protobuf"), "{:?}", components(&env));
    // The interpreter itself is Debian's.
    assert!(
        components(&env).iter().any(|(k, n, _)| k == "deb" && n.starts_with("python3.11")),
        "{:?}",
        components(&env)
    );
}

#[test]
fn a_rust_binary_outside_the_working_directory_is_a_loose_file_with_its_digest() {
    require_cmd("rustc");
    let tool = tempfile::Builder::new().prefix("repro-tool-").tempdir().unwrap();
    fs::write(tool.path().join("hello.rs"), "fn main() { println!(\"hello\"); }\n").unwrap();
    let o = std::process::Command::new("rustc")
        .current_dir(tool.path())
        .args(["-O", "hello.rs", "-o", "hello"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let w = Workdir::new();
    let bind = format!("{}:/run/tool", tool.path().display());
    let o = w.run(&["-q", "--record-inputs", "--bind", &bind], &["/run/tool/hello"]);
    assert_code(&o, 0);
    let env = env_json(&w);
    let f = env["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "file" && c["name"] == "/run/tool/hello")
        .unwrap_or_else(|| panic!("the binary is missing: {:?}", components(&env)))
        .clone();
    let data = fs::read(tool.path().join("hello")).unwrap();
    assert_eq!(f["files"][0]["blake3"].as_str().unwrap(), blake3::hash(&data).to_hex().as_str());
    assert!(f["files"][0]["uses"].as_array().unwrap().iter().any(|u| u == "exec"), "{f}");
    assert!(has(&env, "deb", "libc6"), "{:?}", components(&env));
    // The source next to it was not used.
    assert!(!has(&env, "file", "/run/tool/hello.rs"));
}

/// Two runs with different unrelated files beside what they use have the same identity; a run that reads a
/// changed file has another, and drift names the file.
#[test]
fn unrelated_files_do_not_change_the_identity_and_a_used_one_does() {
    let w = Workdir::new();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    fs::write(a.path().join("used"), "same\n").unwrap();
    fs::write(b.path().join("used"), "same\n").unwrap();
    for i in 0..50 {
        fs::write(a.path().join(format!("a{i}")), format!("{i}")).unwrap();
    }
    fs::write(b.path().join("other"), "unrelated").unwrap();
    let run = |dir: &Path, seed: &str| {
        let bind = format!("{}:/run/extra", dir.display());
        let o = w.run(&["-q", "--record-inputs", "--seed", seed, "--bind", &bind], &["cat", "/run/extra/used"]);
        assert_code(&o, 0);
        let id = w.last_run().file_name().unwrap().to_string_lossy().into_owned();
        (id, env_json(&w)["identity"].as_str().unwrap().to_string())
    };
    let (ra, ia) = run(a.path(), "1");
    let (rb, ib) = run(b.path(), "2");
    assert_eq!(ia, ib, "unrelated files (and the seed) changed the identity");
    let o = repro_in(w.path(), &["drift", &ra, &rb]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("same environment"), "{}", stdout(&o));

    fs::write(b.path().join("used"), "changed\n").unwrap();
    let (rc, ic) = run(b.path(), "1");
    assert_ne!(ia, ic);
    let o = repro_in(w.path(), &["drift", &ra, &rc, "--json"]);
    assert_code(&o, 1);
    let d: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(d["same"], false);
    let first = &d["changes"][0];
    assert_eq!((first["kind"].as_str(), first["subject"].as_str()), (Some("content"), Some("file /run/extra/used")));
}

#[test]
fn a_snapshot_of_this_host_matches_a_run_and_drift_names_a_modified_system_file() {
    let w = Workdir::new();
    let o = w.run(&["-q", "--record-inputs"], &["sh", "-c", "true"]);
    assert_code(&o, 0);
    let run = w.last_run();
    let snap = w.path().join("snap.json");
    let o = repro_in(w.path(), &["env", "snapshot", run.to_str().unwrap(), "-o", snap.to_str().unwrap()]);
    assert_code(&o, 0);
    let o = repro_in(w.path(), &["drift", run.to_str().unwrap(), snap.to_str().unwrap()]);
    assert_code(&o, 0);
    // A document that claims another identity than its components give is refused, naming the field.
    let mut doc: Value = serde_json::from_slice(&fs::read(&snap).unwrap()).unwrap();
    doc["components"][0]["files"][0]["sha256"] = Value::String("0".repeat(64));
    let forged = w.path().join("forged.json");
    fs::write(&forged, serde_json::to_vec(&doc).unwrap()).unwrap();
    let o = repro_in(w.path(), &["env", forged.to_str().unwrap()]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("components[0]") && stderr(&o).contains("digest"), "{}", stderr(&o));
}

#[test]
fn a_capture_carries_its_environment_and_a_forged_one_is_refused() {
    let w = Workdir::new();
    let aside = tempfile::tempdir().unwrap();
    let pack = aside.path().join("p.repro");
    let mut c = repro();
    c.current_dir(w.path()).env("XDG_CACHE_HOME", aside.path().join("cache"));
    c.args(["capture", "-q", "-o", pack.to_str().unwrap(), "--", "sh", "-c", "cat /etc/os-release >/dev/null; exit 3"]);
    let o = c.timeout(HANG_GUARD).output().unwrap();
    assert_code(&o, 3);
    let o = repro_in(w.path(), &["env", pack.to_str().unwrap(), "--json"]);
    assert_code(&o, 0);
    let env: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(env["source"]["kind"], "pack");
    assert!(has(&env, "deb", "libc6"), "{:?}", components(&env));
    // The same inputs as a recorded run of the same command.
    let o = w.run(&["-q", "--record-inputs"], &["sh", "-c", "cat /etc/os-release >/dev/null; exit 3"]);
    assert_code(&o, 3);
    let o = repro_in(w.path(), &["drift", pack.to_str().unwrap(), "last"]);
    assert_code(&o, 0);
}

/// `run --verify --record-inputs` records the first run's environment: the same identity as a recorded single run
/// of the same command, and a VSA of the verification says N/N in that environment.
#[test]
fn a_verification_records_its_environment_and_its_vsa_names_it() {
    let w = Workdir::new();
    let script = "cat /etc/os-release >/dev/null; echo boom >&2; exit 3";
    let o = w.run(&["-q", "--verify", "--runs", "2", "--record-inputs", "--json"], &["sh", "-c", script]);
    assert_code(&o, 0);
    let report = w.path().join("verify.json");
    fs::write(&report, &o.stdout).unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let first = v["runs"][0]["dir"].as_str().unwrap().to_string();
    assert!(Path::new(&first).join("environment.json").exists(), "the first run has no environment.json");
    let o = repro_in(w.path(), &["env", &first, "--json"]);
    assert_code(&o, 0);
    let verified: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(has(&verified, "deb", "libc6"), "{:?}", components(&verified));
    let o = w.run(&["-q", "--record-inputs"], &["sh", "-c", script]);
    assert_code(&o, 3);
    assert_eq!(env_json(&w)["identity"], verified["identity"], "a verified run and a single run differ");
    let o = repro_in(w.path(), &["drift", &first, "last"]);
    assert_code(&o, 0);

    let key = w.path().join("k");
    assert_code(&repro_in(w.path(), &["key", "gen", "--out", key.to_str().unwrap()]), 0);
    let vsa = w.path().join("vsa.dsse.json");
    let o = repro_in(
        w.path(),
        &[
            "attest",
            &first,
            "--key",
            &format!("{}.key", key.display()),
            "--predicate",
            "vsa",
            "--report",
            report.to_str().unwrap(),
            "--claim",
            "failure",
            "-o",
            vsa.to_str().unwrap(),
        ],
    );
    assert_code(&o, 0);
    let o = repro_in(
        w.path(),
        &["attest", "verify", vsa.to_str().unwrap(), "--key", &format!("{}.pub", key.display()), "--run", &first],
    );
    assert_code(&o, 0);
    let text = stdout(&o);
    let identity = verified["identity"].as_str().unwrap();
    assert!(text.contains(&format!("reproduced 2/2 times in environment {identity}")), "{text}");
}

/// A crate's source files (a real crate from this machine's Cargo registry, in a registry-shaped copy) are
/// checked against the `.crate` Cargo unpacked them from, and that archive against the working directory's
/// Cargo.lock: an edited source file, or an archive the lock does not pin, is named `modified`.
#[test]
fn registry_sources_are_checked_against_their_crate_archive_and_cargo_lock() {
    let home = std::env::var("CARGO_HOME").map(PathBuf::from).unwrap_or_else(|_| PathBuf::from("/root/.cargo"));
    let src_root = fs::read_dir(home.join("registry/src")).expect("a Cargo registry").next().unwrap().unwrap().path();
    let index = src_root.file_name().unwrap().to_owned();
    let cache = home.join("registry/cache").join(&index);
    // Any crate of the build with its archive cached and a src/lib.rs.
    let (name, lib) = fs::read_dir(&src_root)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| cache.join(format!("{n}.crate")).exists())
        .find_map(|n| {
            let lib = src_root.join(&n).join("src/lib.rs");
            lib.exists().then_some((n, lib))
        })
        .expect("a crate with its archive and src/lib.rs in the registry");
    let archive = fs::read(cache.join(format!("{name}.crate"))).unwrap();
    let archive_sha = {
        use sha2::Digest as _;
        sha2::Sha256::digest(&archive).iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    // The guest sees the copy at the host's path (a --bind at the same path), so the archive is found there.
    let t = tempfile::Builder::new().prefix("repro-cargo-").tempdir().unwrap();
    let dst = t.path().join("registry/src/index").join(&name).join("src");
    fs::create_dir_all(&dst).unwrap();
    fs::copy(&lib, dst.join("lib.rs")).unwrap();
    fs::create_dir_all(t.path().join("registry/cache/index")).unwrap();
    fs::write(t.path().join(format!("registry/cache/index/{name}.crate")), &archive).unwrap();
    let guest_lib = dst.join("lib.rs").to_str().unwrap().to_string();
    let bind = format!("{}:{}", t.path().display(), t.path().display());
    let w = Workdir::new();
    let crate_of = |w: &Workdir| {
        let o = w.run(&["-q", "--record-inputs", "--bind", &bind], &["cat", &guest_lib]);
        assert_code(&o, 0);
        let env = env_json(w);
        env["components"].as_array().unwrap().iter().find(|c| c["kind"] == "cargo").cloned().unwrap_or_else(|| {
            panic!("no crate in {:?}", components(&env));
        })
    };
    let c = crate_of(&w);
    assert_eq!(c["archive_sha256"].as_str(), Some(archive_sha.as_str()), "{c}");
    assert_eq!(c["files"][0]["check"], "matches", "{c}");
    assert!(c["purl"].as_str().unwrap().starts_with("pkg:cargo/"), "{c}");
    // The CycloneDX SBOM gives the package the archive's hash.
    let o = repro_in(w.path(), &["sbom", "last", "--format", "cyclonedx"]);
    assert_code(&o, 0);
    let bom: Value = serde_json::from_slice(&o.stdout).unwrap();
    let pkg = bom["components"].as_array().unwrap().iter().find(|x| x["purl"] == c["purl"]).unwrap().clone();
    assert_eq!(pkg["hashes"][0]["content"].as_str(), Some(archive_sha.as_str()), "{pkg}");

    // A Cargo.lock in the working directory that pins another archive for this crate.
    let (crate_name, version) = (c["name"].as_str().unwrap(), c["version"].as_str().unwrap());
    let lock = |sum: &str| {
        format!("version = 4\n\n[[package]]\nname = \"{crate_name}\"\nversion = \"{version}\"\nsource = \"registry+https://github.com/rust-lang/crates.io-index\"\nchecksum = \"{sum}\"\n")
    };
    fs::write(w.path().join("Cargo.lock"), lock(&archive_sha)).unwrap();
    assert_eq!(crate_of(&w)["files"][0]["check"], "matches");
    fs::write(w.path().join("Cargo.lock"), lock(&"0".repeat(64))).unwrap();
    assert_eq!(crate_of(&w)["files"][0]["check"], "modified", "an archive the lock does not pin");
    fs::remove_file(w.path().join("Cargo.lock")).unwrap();
    // A source file edited after unpacking.
    let mut text = fs::read(dst.join("lib.rs")).unwrap();
    text.extend_from_slice(b"\n// edited\n");
    fs::write(dst.join("lib.rs"), text).unwrap();
    assert_eq!(crate_of(&w)["files"][0]["check"], "modified", "an edited source file");
}
