//! Interoperability of repro's DSSE envelopes and in-toto statements with an independent implementation, both
//! ways: securesystemslib (Envelope, SSlibKey, CryptoSigner) over pyca/cryptography, and in-toto-attestation's
//! Statement v1 and predicate protobufs, driven by tests/dsse_interop.py in the venv scripts/install-deps.sh
//! makes ($REPRO_PYVENV, default /var/cache/repro/pyvenv).
//!
//! 1. repro signs (each predicate) -> Python verifies, parses and validates the statement;
//! 2. Python signs with a key repro generated -> repro verifies, subjects checked against the run;
//! 3. tampered payloads and wrong keys are refused in both directions, so neither side passes vacuously.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;
use repro_model::manifest::AccessKind;
use repro_model::provenance::{Check, Component, ComponentFile, ComponentKind, EnvSource, Environment, Settings};
use repro_prov::attest::{self, target, Against, PredicateKind, PrivateKey, PublicKey, Request, Statement};
use repro_prov::ProvError;
use sha2::Digest as _;

const RUN_JSON: &str = include_str!("../src/attest/testdata/run.json");
const RUN_ID: &str = "20261203-192802.167-5e1681";

fn python() -> PathBuf {
    let venv = PathBuf::from(std::env::var("REPRO_PYVENV").unwrap_or_else(|_| "/var/cache/repro/pyvenv".into()));
    let py = venv.join("bin/python");
    assert!(
        py.exists(),
        "this test needs the venv {} with securesystemslib and in-toto-attestation (.ci/python-packages): run \
         scripts/install-deps.sh",
        venv.display()
    );
    py
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/dsse_interop.py")
}

/// Runs the Python side: (exit code, stdout, stderr).
fn py(args: &[&Path]) -> (i32, String, String) {
    let o = Command::new(python()).arg(script()).args(args).output().expect("python runs");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn py_ok(args: &[&Path]) -> String {
    let (code, out, err) = py(args);
    assert_eq!(code, 0, "dsse_interop.py {args:?}: stdout {out}\nstderr {err}");
    out
}

fn py_refuses(args: &[&Path]) -> String {
    let (code, out, err) = py(args);
    assert_eq!(code, 1, "dsse_interop.py {args:?} should refuse: stdout {out}\nstderr {err}");
    assert!(err.contains("not verified"), "{err}");
    err
}

/// A run directory (the run.json of a real `repro run`, exit 1) with outputs and one added file.
fn run_dir(root: &Path) -> PathBuf {
    let dir = root.join(RUN_ID);
    std::fs::create_dir_all(dir.join("changes")).unwrap();
    std::fs::write(dir.join("stdout"), "hi\n").unwrap();
    std::fs::write(dir.join("stderr"), "FAILED tests/test_a.py::test_one - assert 1 == 2\n").unwrap();
    let mut record: serde_json::Value = serde_json::from_str(RUN_JSON).unwrap();
    record["exit_status"] = 1.into();
    record["outcome"]["code"] = 1.into();
    std::fs::write(dir.join("run.json"), serde_json::to_vec_pretty(&record).unwrap()).unwrap();
    std::fs::write(dir.join("changes/f.txt"), "x\n").unwrap();
    let changes = serde_json::json!({"changes": [{"path": "f.txt", "kind": "added", "file": "file", "size": 2,
        "blake3": blake3::hash(b"x\n").to_hex().to_string()}]});
    std::fs::write(dir.join("changes.json"), changes.to_string()).unwrap();
    dir
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn environment() -> Environment {
    let f = |path: &str, data: &[u8], uses| ComponentFile {
        path: path.into(),
        uses: vec![uses],
        size: data.len() as u64,
        sha256: hex(&sha2::Sha256::digest(data)),
        blake3: blake3::hash(data).to_hex().to_string(),
        sha1: None,
        check: Check::Matches,
    };
    let files = vec![f("/usr/bin/dash", b"dash", AccessKind::Exec), f("/etc/passwd", b"root:x:0:0", AccessKind::Open)];
    let components = vec![Component {
        kind: ComponentKind::Deb,
        name: "dash".into(),
        version: Some("0.5.12-2".into()),
        purl: Some("pkg:deb/debian/dash@0.5.12-2?arch=amd64".into()),
        digest: repro_prov::identity::component_digest(&files),
        archive_sha256: None,
        files,
    }];
    let settings = Settings {
        identity: BTreeMap::from([("cpus".into(), "1".into())]),
        run: BTreeMap::from([("seed".into(), "0".into())]),
    };
    Environment {
        format: repro_model::provenance::PROVENANCE_FORMAT,
        repro_version: "0.1.0".into(),
        source: EnvSource::Run { run_id: RUN_ID.into() },
        recorded_at: "2026-12-03T19:28:02Z".into(),
        identity: repro_prov::identity::identity("x86_64", "6.1.0", &settings, &components),
        arch: "x86_64".into(),
        kernel_release: "6.1.0".into(),
        settings,
        components,
        unread: Vec::new(),
    }
}

/// The three statements repro makes about the run: runtime trace, test result, VSA of a `run --verify`.
fn statements(root: &Path, dir: &Path) -> Vec<Statement> {
    let t = target::load(dir).unwrap();
    let env = environment();
    let report = root.join("verify.json");
    let runs: Vec<_> = [RUN_ID, "r2"]
        .iter()
        .map(|id| serde_json::json!({"id": id, "dir": "/x", "exit_status": 1, "not_enforced": [], "tasks_created": 0}))
        .collect();
    std::fs::write(
        &report,
        serde_json::json!({"identical": true, "runs": runs, "differences": [], "not_enforced": []}).to_string(),
    )
    .unwrap();
    let mut vsa = Request::new(PredicateKind::Vsa);
    vsa.report = Some(report);
    [Request::new(PredicateKind::RuntimeTrace), Request::new(PredicateKind::TestResult), vsa]
        .iter()
        .map(|r| attest::statement(&t, Some(&env), r).unwrap())
        .collect()
}

fn refused(r: Result<attest::Verified, ProvError>) -> String {
    match r {
        Err(e @ ProvError::Unverified { .. }) => e.to_string(),
        Err(e) => panic!("not a verification failure: {e}"),
        Ok(_) => panic!("verified"),
    }
}

/// The envelope with one byte of its decoded payload changed (re-encoded, so it is still a well-formed
/// envelope: only the signature can tell).
fn tampered(envelope: &[u8]) -> Vec<u8> {
    let mut v: serde_json::Value = serde_json::from_slice(envelope).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let payload = String::from_utf8(b64.decode(v["payload"].as_str().unwrap()).unwrap()).unwrap();
    let changed = payload.replacen("\"stdout\"", "\"stdouT\"", 1);
    assert_ne!(payload, changed);
    v["payload"] = b64.encode(changed).into();
    serde_json::to_vec(&v).unwrap()
}

#[test]
fn attest_envelopes_interoperate_with_securesystemslib_both_ways() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let dir = run_dir(root);
    let g = attest::generate(&root.join("signer")).unwrap();
    let other = attest::generate(&root.join("other")).unwrap();
    let key = PrivateKey::load(&g.private).unwrap();
    let public = PublicKey::load(&g.public).unwrap();
    let other_public = PublicKey::load(&other.public).unwrap();

    // The key id is securesystemslib's.
    assert_eq!(py_ok(&[Path::new("keyid"), &g.public]).trim(), g.key_id);

    for (i, s) in statements(root, &dir).iter().enumerate() {
        // 1. repro signs; Python verifies and validates the statement (and the test-result and VSA predicates
        //    against in-toto-attestation's protobufs).
        let env = attest::sign(s, &key).unwrap().to_json();
        let path = root.join(format!("repro-{i}.intoto.jsonl"));
        std::fs::write(&path, &env).unwrap();
        let out: serde_json::Value = serde_json::from_str(&py_ok(&[Path::new("verify"), &path, &g.public])).unwrap();
        assert_eq!(out["keyid"], g.key_id);
        assert_eq!(out["predicateType"], s.predicate_type);
        let names: Vec<&str> =
            out["subjects"].as_array().unwrap().iter().map(|x| x["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["stdout", "stderr", "run.json", "changes/f.txt"]);
        assert_eq!(out["subjects"][0]["digest"]["sha256"], s.subject[0].digest["sha256"]);
        assert_eq!(out["subjects"][0]["digest"]["blake3"], s.subject[0].digest["blake3"]);
        // ... and refuses it tampered, or with another key.
        let bad = root.join(format!("repro-{i}-tampered.jsonl"));
        std::fs::write(&bad, tampered(&env)).unwrap();
        py_refuses(&[Path::new("verify"), &bad, &g.public]);
        py_refuses(&[Path::new("verify"), &path, &other.public]);

        // 2. Python signs the same statement with the key repro generated; repro verifies it, subjects included.
        let stmt = root.join(format!("statement-{i}.json"));
        std::fs::write(&stmt, s.to_json()).unwrap();
        let by_py = root.join(format!("py-{i}.json"));
        assert_eq!(py_ok(&[Path::new("sign"), &g.private, &stmt, &by_py]).trim(), g.key_id);
        let against = Against { run: Some(dir.clone()), ..Default::default() };
        let v = attest::verify_file(&by_py, &public, &against).unwrap();
        assert_eq!(&v.statement, s);
        assert_eq!(v.key_id, g.key_id);
        assert_eq!(v.checked.len(), 4);
        // ... and refuses it tampered, or with another key.
        let bytes = std::fs::read(&by_py).unwrap();
        let r = refused(attest::verify(&tampered(&bytes), &by_py, &public, &Against::default()));
        assert!(r.contains("does not verify"), "{r}");
        let r = refused(attest::verify_file(&by_py, &other_public, &Against::default()));
        assert!(r.contains("no signature by the key given"), "{r}");
    }

    // Python signs with the other key: repro, given the first key's public half, refuses it.
    let stmt = root.join("statement-0.json");
    let by_other = root.join("py-other.json");
    py_ok(&[Path::new("sign"), &other.private, &stmt, &by_other]);
    let r = refused(attest::verify_file(&by_other, &public, &Against::default()));
    assert!(r.contains(&other.key_id), "{r}");
    assert!(attest::verify_file(&by_other, &other_public, &Against::default()).is_ok());
    // The run changed after Python signed: the subject no longer matches.
    std::fs::write(dir.join("stdout"), "changed\n").unwrap();
    let r = refused(attest::verify_file(
        &root.join("py-0.json"),
        &public,
        &Against { run: Some(dir), ..Default::default() },
    ));
    assert!(r.contains("the run's stdout"), "{r}");
}
