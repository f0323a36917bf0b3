//! Statements about a run directory made by hand (the run.json of a real `repro run`), signed and verified,
//! and each change a stranger could make to it. Packs are attested end to end in the `repro` integration tests
//! (crates/repro/tests/it/attest.rs), with packs `repro capture` writes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use repro_model::manifest::AccessKind;
use repro_model::provenance::{Check, Component, ComponentFile, ComponentKind, EnvSource, Environment, Settings};

use super::predicates::{self, Claim};
use super::*;
use crate::identity::hex;

const RUN_JSON: &str = include_str!("testdata/run.json");
const RUN_ID: &str = "20261203-192802.167-5e1681";

/// A run directory: stdout, stderr, run.json (exit `exit`), and one added file.
fn run_dir(root: &Path, exit: i32) -> PathBuf {
    let dir = root.join(RUN_ID);
    std::fs::create_dir_all(dir.join("changes/out")).unwrap();
    std::fs::write(dir.join("stdout"), "hi\n").unwrap();
    std::fs::write(dir.join("stderr"), "FAILED tests/test_a.py::test_one - assert 1 == 2\n").unwrap();
    let mut record: serde_json::Value = serde_json::from_str(RUN_JSON).unwrap();
    record["exit_status"] = exit.into();
    record["outcome"]["code"] = exit.into();
    std::fs::write(dir.join("run.json"), serde_json::to_vec_pretty(&record).unwrap()).unwrap();
    std::fs::write(dir.join("changes/out/f.txt"), "x\n").unwrap();
    let changes = serde_json::json!({"changes": [
        {"path": "out", "kind": "added", "file": "dir"},
        {"path": "out/f.txt", "kind": "added", "file": "file", "size": 2, "blake3": blake3::hash(b"x\n").to_hex().to_string()},
        {"path": "gone.txt", "kind": "deleted", "file": "file"}
    ]});
    std::fs::write(dir.join("changes.json"), changes.to_string()).unwrap();
    dir
}

fn file(path: &str, data: &[u8], uses: Vec<AccessKind>) -> ComponentFile {
    use sha2::Digest as _;
    ComponentFile {
        path: path.into(),
        uses,
        size: data.len() as u64,
        sha256: hex(&sha2::Sha256::digest(data)),
        blake3: blake3::hash(data).to_hex().to_string(),
        sha1: None,
        check: Check::Matches,
    }
}

/// An environment made by hand, its digests computed as repro-prov's env does.
fn environment() -> Environment {
    let files = vec![
        file("/usr/bin/dash", b"dash", vec![AccessKind::Exec]),
        file("/usr/lib/libc.so.6", b"libc", vec![AccessKind::Map]),
    ];
    let component = Component {
        kind: ComponentKind::Deb,
        name: "dash".into(),
        version: Some("0.5.12-2".into()),
        purl: Some("pkg:deb/debian/dash@0.5.12-2?arch=amd64".into()),
        digest: crate::identity::component_digest(&files),
        archive_sha256: None,
        files,
    };
    let settings = Settings {
        identity: BTreeMap::from([("cpus".into(), "1".into()), ("supervised".into(), "true".into())]),
        run: BTreeMap::from([("seed".into(), "0".into())]),
    };
    let components = vec![component];
    Environment {
        format: repro_model::provenance::PROVENANCE_FORMAT,
        repro_version: "0.1.0".into(),
        source: EnvSource::Run { run_id: RUN_ID.into() },
        recorded_at: "2026-12-03T19:28:02Z".into(),
        identity: crate::identity::identity("x86_64", "6.1.0", &settings, &components),
        arch: "x86_64".into(),
        kernel_release: "6.1.0".into(),
        settings,
        components,
        unread: Vec::new(),
    }
}

fn key(n: u8) -> PrivateKey {
    PrivateKey::from_seed(&[n; 32])
}

fn signed(dir: &Path, req: &Request, k: &PrivateKey) -> (Statement, Vec<u8>) {
    let target = target::load(dir).unwrap();
    let s = statement(&target, Some(&environment()), req).unwrap();
    let env = sign(&s, k).unwrap();
    (s, env.to_json())
}

fn refused(r: Result<Verified, ProvError>) -> String {
    match r {
        Ok(v) => panic!("verified: {:?}", v.checked),
        Err(e @ ProvError::Unverified { .. }) => {
            assert_eq!(e.exit_code(), 1);
            e.to_string()
        }
        Err(e) => panic!("not a verification failure: {}", crate::error::chain(&e)),
    }
}

fn against_run(dir: &Path) -> Against {
    Against { run: Some(dir.into()), ..Default::default() }
}

#[test]
fn a_run_directory_s_subjects_are_its_outputs() {
    let d = tempfile::tempdir().unwrap();
    let dir = run_dir(d.path(), 3);
    let t = target::load(&dir).unwrap();
    let names: Vec<&str> = t.subjects().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["stdout", "stderr", "run.json", "changes/out/f.txt"]);
    let f = &t.subjects()[3];
    assert_eq!(f.digest["blake3"], blake3::hash(b"x\n").to_hex().to_string());
    assert_eq!(f.digest["sha256"].len(), 64);
    assert_eq!(t.uri(), format!("urn:repro:run:{RUN_ID}"));
}

#[test]
fn a_runtime_trace_carries_the_inputs_the_identity_and_the_settings() {
    let d = tempfile::tempdir().unwrap();
    let dir = run_dir(d.path(), 0);
    let k = key(1);
    let (s, bytes) = signed(&dir, &Request::new(PredicateKind::RuntimeTrace), &k);
    let env = environment();
    let p = &s.predicate;
    assert_eq!(s.predicate_type, "https://in-toto.io/attestation/runtime-trace/v0.1");
    assert_eq!(p["monitor"]["type"], predicates::MONITOR_TYPE);
    assert_eq!(p["monitor"]["tracePolicy"]["identitySettings"]["cpus"], "1");
    assert_eq!(p["monitoredProcess"]["hostID"], format!("urn:repro:environment:{}", env.identity));
    assert_eq!(p["monitoredProcess"]["event"], format!("urn:repro:run:{RUN_ID}"));
    let files = p["monitorLog"]["fileAccess"].as_array().unwrap();
    assert_eq!(files.len(), 2);
    assert_eq!(files[0]["name"], "/usr/bin/dash");
    assert_eq!(files[0]["digest"]["sha256"], env.components[0].files[0].sha256);
    assert_eq!(files[0]["annotations"]["uses"], serde_json::json!(["exec"]));
    assert_eq!(files[0]["annotations"]["component"], "deb dash 0.5.12-2");
    assert_eq!(p["monitorLog"]["process"][0]["command"][0], "sh");
    assert_eq!(p["metadata"]["buildStartedOn"], "2026-12-03T19:28:02Z");
    assert_eq!(p["metadata"]["buildFinishedOn"], "2026-12-03T19:28:02.027Z");
    assert_eq!(p["reproEnvironment"]["identity"], env.identity);
    let v = verify(&bytes, Path::new("a.intoto.jsonl"), &k.public(), &against_run(&dir)).unwrap();
    assert_eq!(v.statement, s);
    assert_eq!(v.checked.len(), 4);
    let text = describe(&v).join("\n");
    assert!(text.contains(&env.identity) && text.contains("2 files in 1 components"), "{text}");
    // The same statement signs to the same bytes (ed25519 is deterministic).
    assert_eq!(signed(&dir, &Request::new(PredicateKind::RuntimeTrace), &k).1, bytes);
}

#[test]
fn a_runtime_trace_needs_an_environment() {
    let d = tempfile::tempdir().unwrap();
    let dir = run_dir(d.path(), 0);
    let t = target::load(&dir).unwrap();
    let e = statement(&t, None, &Request::new(PredicateKind::RuntimeTrace)).unwrap_err();
    assert!(matches!(e, ProvError::NoInputs { .. }), "{e}");
    // Through attest(): the run has no environment.json.
    let e = attest(&dir, &Request::new(PredicateKind::RuntimeTrace), &key(1)).unwrap_err();
    assert!(e.to_string().contains("--record-inputs"), "{e}");
    // The test result does not.
    let a = attest(&dir, &Request::new(PredicateKind::TestResult), &key(1)).unwrap();
    assert_eq!(a.statement.predicate["result"], "PASSED");
}

#[test]
fn a_test_result_follows_the_exit_status() {
    let d = tempfile::tempdir().unwrap();
    let dir = run_dir(d.path(), 1);
    let (s, _) = signed(&dir, &Request::new(PredicateKind::TestResult), &key(1));
    let p = &s.predicate;
    assert_eq!(p["result"], "FAILED");
    assert_eq!(p["failedTests"], serde_json::json!(["tests/test_a.py::test_one"]));
    assert_eq!(p["passedTests"], serde_json::json!([]));
    assert_eq!(p["configuration"][0]["name"], "run.json");
    assert_eq!(p["configuration"][0]["annotations"]["command"], "sh -c 'echo hi; echo err >&2; echo x > f.txt'");
    assert_eq!(p["configuration"][0]["annotations"]["environment"], environment().identity);
    assert_eq!(p["url"], format!("urn:repro:run:{RUN_ID}"));
    let d2 = tempfile::tempdir().unwrap();
    let (s, _) = signed(&run_dir(d2.path(), 0), &Request::new(PredicateKind::TestResult), &key(1));
    assert_eq!(s.predicate["result"], "PASSED");
    assert_eq!(s.predicate["failedTests"], serde_json::json!([]));
}

fn verify_report(root: &Path, ids: &[&str], exit: i32, identical: bool) -> PathBuf {
    let runs: Vec<_> = ids.iter().map(|id| serde_json::json!({"id": id, "dir": format!("/x/{id}"), "exit_status": exit, "not_enforced": [], "tasks_created": 0})).collect();
    let differences = if identical {
        serde_json::json!([])
    } else {
        serde_json::json!([{"kind": "output", "run": 2, "stream": "stdout", "line": 1, "byte_offset": 0, "context": [], "first": "a", "this": "b"}])
    };
    let doc = serde_json::json!({"differences": differences, "exit_status": 0, "identical": identical, "not_enforced": [], "runs": runs});
    let p = root.join("verify.json");
    std::fs::write(&p, doc.to_string()).unwrap();
    p
}

#[test]
fn a_vsa_says_n_of_n_in_the_environment() {
    let d = tempfile::tempdir().unwrap();
    let dir = run_dir(d.path(), 0);
    let report = verify_report(d.path(), &[RUN_ID, "r2", "r3"], 0, true);
    let mut req = Request::new(PredicateKind::Vsa);
    req.report = Some(report.clone());
    req.time_verified = Some("2026-12-03T20:00:00Z".into());
    let k = key(2);
    let (s, bytes) = signed(&dir, &req, &k);
    let p = &s.predicate;
    assert_eq!(s.predicate_type, "https://slsa.dev/verification_summary/v1");
    assert_eq!(p["verifier"]["id"], predicates::VERIFIER_ID);
    assert_eq!(p["timeVerified"], "2026-12-03T20:00:00Z");
    assert_eq!(p["resourceUri"], format!("urn:repro:run:{RUN_ID}"));
    assert_eq!(p["policy"]["uri"], predicates::POLICY_URI);
    assert_eq!(p["verificationResult"], "PASSED");
    assert_eq!(p["verifiedLevels"], serde_json::json!(["REPRO_FIX_VERIFIED"]));
    assert_eq!(p["inputAttestations"][0]["name"], "verify.json");
    let r = &p[predicates::REPRODUCTION_FIELD];
    assert_eq!((r["runs"].as_u64(), r["reproduced"].as_u64()), (Some(3), Some(3)));
    assert_eq!(r["environment"], environment().identity);
    assert!(r["summary"].as_str().unwrap().contains("3/3 runs passed in environment blake3:"), "{r}");
    let v = verify(&bytes, Path::new("vsa.jsonl"), &k.public(), &against_run(&dir)).unwrap();
    let text = describe(&v).join("\n");
    assert!(text.contains("PASSED (REPRO_FIX_VERIFIED)") && text.contains("3/3"), "{text}");

    // Runs that differ: FAILED, 2/3.
    let report = verify_report(d.path(), &[RUN_ID, "r2", "r3"], 0, false);
    req.report = Some(report);
    let (s, _) = signed(&dir, &req, &k);
    assert_eq!(s.predicate["verificationResult"], "FAILED");
    assert_eq!(s.predicate["verifiedLevels"], serde_json::json!(["FAILED"]));
    assert_eq!(s.predicate[predicates::REPRODUCTION_FIELD]["reproduced"], 2);
    // A report about other runs is refused; so is an edited one.
    req.report = Some(verify_report(d.path(), &["r1", "r2"], 0, true));
    let e = statement(&target::load(&dir).unwrap(), None, &req).unwrap_err();
    assert!(e.to_string().contains("not one of this verification's runs"), "{e}");
    let p = verify_report(d.path(), &[RUN_ID, "r2"], 0, true);
    let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    doc["differences"] = serde_json::json!([{"kind": "exit-status", "run": 2, "first": 0, "this": 1}]);
    std::fs::write(&p, doc.to_string()).unwrap();
    req.report = Some(p);
    let e = statement(&target::load(&dir).unwrap(), None, &req).unwrap_err();
    assert!(e.to_string().contains("edited report"), "{e}");
    // The claim can be forced: a failure claim about passing runs fails.
    req.report = Some(verify_report(d.path(), &[RUN_ID, "r2"], 0, true));
    req.claim = Some(Claim::Failure);
    let (s, _) = signed(&dir, &req, &k);
    assert_eq!(s.predicate["verificationResult"], "FAILED");
}

#[test]
fn every_change_a_stranger_could_make_is_refused_with_its_reason() {
    let d = tempfile::tempdir().unwrap();
    let dir = run_dir(d.path(), 3);
    let k = key(3);
    let (_, bytes) = signed(&dir, &Request::new(PredicateKind::TestResult), &k);
    let p = Path::new("e.jsonl");
    assert!(verify(&bytes, p, &k.public(), &against_run(&dir)).is_ok());
    let env: Envelope = serde_json::from_slice(&bytes).unwrap();
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let payload: serde_json::Value = serde_json::from_slice(&b64.decode(&env.payload).unwrap()).unwrap();

    // The payload edited: a passing result.
    let mut edited = payload.clone();
    edited["predicate"]["result"] = "PASSED".into();
    let mut e2 = env.clone();
    e2.payload = b64.encode(serde_json::to_vec(&edited).unwrap());
    assert!(refused(verify(&e2.to_json(), p, &k.public(), &Against::default())).contains("does not verify"));
    // A subject's digest changed.
    let mut edited = payload.clone();
    edited["subject"][0]["digest"]["sha256"] = "0".repeat(64).into();
    let mut e2 = env.clone();
    e2.payload = b64.encode(serde_json::to_vec(&edited).unwrap());
    assert!(refused(verify(&e2.to_json(), p, &k.public(), &against_run(&dir))).contains("does not verify"));
    // The signature swapped for one of another statement by the same key.
    let other = dsse::sign(dsse::PAYLOAD_TYPE, b"{}", &k).unwrap();
    let mut e2 = env.clone();
    e2.signatures[0].sig = other.signatures[0].sig.clone();
    assert!(refused(verify(&e2.to_json(), p, &k.public(), &Against::default())).contains("does not verify"));
    // Another key.
    let r = refused(verify(&bytes, p, &key(4).public(), &Against::default()));
    assert!(r.contains("no signature by the key given"), "{r}");
    // A signature by another key over a statement about other outputs: the subjects do not match this run.
    let d2 = tempfile::tempdir().unwrap();
    let dir2 = run_dir(d2.path(), 3);
    std::fs::write(dir2.join("stdout"), "bye\n").unwrap();
    let (_, bytes2) = signed(&dir2, &Request::new(PredicateKind::TestResult), &k);
    let r = refused(verify(&bytes2, p, &k.public(), &against_run(&dir)));
    assert!(r.contains("the run's stdout: its sha256 is"), "{r}");
    // An output of the run changed after signing; one added; one removed.
    std::fs::write(dir.join("changes/out/f.txt"), "y\n").unwrap();
    let r = refused(verify(&bytes, p, &k.public(), &against_run(&dir)));
    assert!(r.contains("changes/out/f.txt"), "{r}");
    std::fs::write(dir.join("changes/out/f.txt"), "x\n").unwrap();
    std::fs::remove_file(dir.join("changes.json")).unwrap();
    let r = refused(verify(&bytes, p, &k.public(), &against_run(&dir)));
    assert!(r.contains("changes/out/f.txt, which the run does not have"), "{r}");
    // A file given by itself: matched by name and digest.
    let f = dir.join("stdout");
    let v = verify(&bytes, p, &k.public(), &Against { files: vec![f.clone()], ..Default::default() }).unwrap();
    assert_eq!(v.checked, ["stdout"]);
    std::fs::write(&f, "hi!\n").unwrap();
    let r = refused(verify(&bytes, p, &k.public(), &Against { files: vec![f], ..Default::default() }));
    assert!(r.contains("sha256") && r.contains("changed"), "{r}");
    let stray = d.path().join("stray.txt");
    std::fs::write(&stray, "s").unwrap();
    let r = refused(verify(&bytes, p, &k.public(), &Against { files: vec![stray], ..Default::default() }));
    assert!(r.contains("not a subject"), "{r}");
    // A run statement checked against a file that is no pack: its run.json, or another file.
    let r =
        refused(verify(&bytes, p, &k.public(), &Against { pack: Some(dir.join("run.json")), ..Default::default() }));
    assert!(r.contains("is the statement's subject 'run.json' but not a pack"), "{r}");
    let r = refused(verify(
        &bytes,
        p,
        &k.public(),
        &Against { pack: Some(d.path().join("stray.txt")), ..Default::default() },
    ));
    assert!(r.contains("none of the statement's 4 non-blob subjects"), "{r}");
}

#[test]
fn a_signed_payload_that_is_no_statement_is_refused() {
    let k = key(5);
    for (payload, want) in [
        (&b"not json"[..], "not an in-toto statement"),
        (
            br#"{"_type":"https://in-toto.io/Statement/v0.1","subject":[],"predicateType":"x","predicate":{}}"#,
            "Statement v1",
        ),
        (
            br#"{"_type":"https://in-toto.io/Statement/v1","subject":[],"predicateType":"x","predicate":{}}"#,
            "no subject",
        ),
    ] {
        let env = dsse::sign(dsse::PAYLOAD_TYPE, payload, &k).unwrap();
        let r = refused(verify(&env.to_json(), Path::new("e"), &k.public(), &Against::default()));
        assert!(r.contains(want), "{r}");
    }
}

mod never_panics {
    use super::*;
    use proptest::prelude::*;

    /// A real statement's JSON, to mutate.
    fn statement_json() -> Vec<u8> {
        let d = tempfile::tempdir().unwrap();
        let dir = run_dir(d.path(), 3);
        let t = target::load(&dir).unwrap();
        statement(&t, Some(&environment()), &Request::new(PredicateKind::RuntimeTrace)).unwrap().to_json()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Whatever the key's holder signed (random bytes, or a statement with bytes changed), verify returns
        /// (an error, or a statement whose subjects were checked) and never panics.
        #[test]
        fn verify_never_panics_on_what_a_key_signed(
            random in proptest::collection::vec(any::<u8>(), 0..256),
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        ) {
            let k = key(9);
            let d = tempfile::tempdir().unwrap();
            let dir = run_dir(d.path(), 3);
            let against = Against { run: Some(dir.clone()), files: vec![dir.join("stdout")], ..Default::default() };
            let mut stmt = statement_json();
            for (i, b) in edits {
                let i = i % stmt.len();
                stmt[i] = b;
            }
            for payload in [random, stmt] {
                let env = dsse::sign(dsse::PAYLOAD_TYPE, &payload, &k).unwrap();
                let _ = verify(&env.to_json(), Path::new("e"), &k.public(), &against);
                let _ = verify(&payload, Path::new("e"), &k.public(), &against);
            }
        }
    }
}

/// The environment an envelope claims, as a side of `repro drift` (attest::read).
mod read_environment {
    use super::*;
    use crate::attest::read;
    use crate::drift::{self, Side};
    use repro_model::provenance::DriftKind;

    fn vsa_request(root: &Path) -> Request {
        let mut req = Request::new(PredicateKind::Vsa);
        req.report = Some(verify_report(root, &[RUN_ID, "r2"], 0, true));
        req.time_verified = Some("2026-12-03T20:00:00Z".into());
        req
    }

    /// An envelope of `kind` about a run directory in `environment()`.
    fn envelope(kind: PredicateKind, k: &PrivateKey) -> Vec<u8> {
        let d = tempfile::tempdir().unwrap();
        let dir = run_dir(d.path(), 0);
        let req = if kind == PredicateKind::Vsa { vsa_request(d.path()) } else { Request::new(kind) };
        signed(&dir, &req, k).1
    }

    /// The statement of an envelope, edited by `f`, signed again by `k` (a key's holder who lies).
    fn resigned(bytes: &[u8], k: &PrivateKey, f: impl Fn(&mut serde_json::Value)) -> Vec<u8> {
        use base64::Engine as _;
        let env: Envelope = serde_json::from_slice(bytes).unwrap();
        let mut s: serde_json::Value =
            serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(&env.payload).unwrap()).unwrap();
        f(&mut s);
        dsse::sign(dsse::PAYLOAD_TYPE, &serde_json::to_vec(&s).unwrap(), k).unwrap().to_json()
    }

    fn bad_input(r: Result<read::Attested, ProvError>) -> String {
        match r {
            Ok(a) => panic!("read: {:?}", a.source),
            Err(e) => {
                assert_eq!(e.exit_code(), 2, "{e}");
                let m = e.to_string();
                assert!(m.contains("e.dsse"), "names the file: {m}");
                m
            }
        }
    }

    /// A copy of `environment()` with other bytes for libc (the same version).
    fn other_libc() -> Environment {
        let mut env = environment();
        let c = &mut env.components[0];
        c.files[1] = file("/usr/lib/libc.so.6", b"libc, rebuilt", vec![AccessKind::Map]);
        c.digest = crate::identity::component_digest(&c.files);
        env.identity = crate::identity::identity(&env.arch, &env.kernel_release, &env.settings, &env.components);
        env
    }

    #[test]
    fn a_runtime_trace_gives_back_the_whole_environment() {
        let k = key(1);
        let bytes = envelope(PredicateKind::RuntimeTrace, &k);
        let p = Path::new("e.dsse");
        let a = read::read(&bytes, p, &[&k.public()]).unwrap();
        let want = Environment { repro_version: String::new(), ..environment() };
        assert_eq!(a.environment, want);
        assert_eq!(a.source.predicate, "runtime-trace");
        assert!(a.source.verified && a.source.files_listed);
        assert_eq!(a.source.key_id.as_deref(), Some(k.id()));
        // Against the environment itself: the same; against another libc: the file is named, executed first.
        let side = Side { environment: a.environment, attestation: Some(a.source), executed: a.executed };
        let d = drift::compare_sides(("e.dsse", &side), ("run", &environment().into()));
        assert!(d.same && d.changes.is_empty(), "{:?}", d.changes);
        let text = drift::describe(&d).join("\n");
        assert!(text.contains("A: runtime trace (signature verified: key"), "{text}");
        let d = drift::compare_sides(("e.dsse", &side), ("run", &other_libc().into()));
        assert!(!d.same);
        assert_eq!((d.changes[0].rank, d.changes[0].kind), (0, DriftKind::Content));
        assert_eq!(d.changes[0].files, vec!["/usr/lib/libc.so.6 (content)".to_string()]);
        // Unchecked: the same environment, and it says so.
        let a = read::read(&bytes, p, &[]).unwrap();
        assert!(!a.source.verified);
        assert_eq!(a.source.key_id.as_deref(), Some(k.id()));
        let words = read::describe_source(&a.source, "run r");
        assert!(words.starts_with("runtime trace (signature not checked: pass --key) of run r"), "{words}");
        let side = Side { environment: a.environment, attestation: Some(a.source), executed: a.executed };
        assert!(crate::drift::describe_side(&side).iter().any(|l| l.starts_with("attested   runtime trace")));
    }

    #[test]
    fn a_vsa_and_a_test_result_give_the_components_and_what_was_executed() {
        let k = key(2);
        for (kind, name) in [(PredicateKind::Vsa, "vsa"), (PredicateKind::TestResult, "test-result")] {
            let bytes = envelope(kind, &k);
            let a = read::read(&bytes, Path::new("e.dsse"), &[&k.public()]).unwrap();
            let env = environment();
            assert_eq!(a.source.predicate, name);
            assert!(a.source.verified && !a.source.files_listed);
            assert_eq!(a.environment.identity, env.identity);
            assert_eq!(a.environment.settings, env.settings);
            assert_eq!(a.environment.source, EnvSource::Run { run_id: RUN_ID.into() });
            let c = &a.environment.components[0];
            assert!(c.files.is_empty());
            assert_eq!((c.name.as_str(), &c.digest), ("dash", &env.components[0].digest));
            assert!(a.executed.contains(&(ComponentKind::Deb, "dash".into(), c.digest.clone())));
            let side = Side { environment: a.environment.clone(), attestation: Some(a.source), executed: a.executed };
            let d = drift::compare_sides(("e.dsse", &side), ("run", &env.into()));
            assert!(d.same, "{:?}", d.changes);
            // A content change: ranked as executed from the summary's flag, without file names.
            let d = drift::compare_sides(("e.dsse", &side), ("run", &other_libc().into()));
            assert!(!d.same);
            assert_eq!(
                (d.changes[0].rank, d.changes[0].kind, d.changes[0].subject.as_str()),
                (0, DriftKind::Content, "deb dash")
            );
            assert!(d.changes[0].files.is_empty(), "{:?}", d.changes[0].files);
            let text = drift::describe(&d).join("\n");
            assert!(text.contains("components only"), "{text}");
            let text = crate::drift::describe_side(&side).join("\n");
            assert!(text.contains("1 components (a summary") && text.contains("dash 0.5.12-2 [executed]"), "{text}");
        }
    }

    #[test]
    fn a_claimed_identity_that_is_not_its_components_is_refused() {
        let k = key(3);
        let p = Path::new("e.dsse");
        // A runtime trace: a file's bytes said to be others (the component's digest no longer matches); the
        // identity replaced by another one's everywhere.
        let trace = envelope(PredicateKind::RuntimeTrace, &k);
        let t = resigned(&trace, &k, |s| {
            s["predicate"]["monitorLog"]["fileAccess"][1]["digest"]["sha256"] = "0".repeat(64).into()
        });
        let m = bad_input(read::read(&t, p, &[&k.public()]));
        assert!(m.contains("components[0]") && m.contains("digest"), "{m}");
        let forged = other_libc().identity;
        let t = resigned(&trace, &k, |s| {
            s["predicate"]["reproEnvironment"]["identity"] = forged.clone().into();
            s["predicate"]["monitoredProcess"]["hostID"] = format!("urn:repro:environment:{forged}").into();
        });
        let m = bad_input(read::read(&t, p, &[&k.public()]));
        assert!(m.contains("is not the identity of its components"), "{m}");
        // A VSA: another version claimed for the same digest; a setting dropped.
        let vsa = envelope(PredicateKind::Vsa, &k);
        let field = predicates::REPRODUCTION_FIELD;
        let t = resigned(&vsa, &k, |s| {
            s["predicate"][field]["environmentSummary"]["components"][0]["version"] = "0.5.12-3".into()
        });
        let m = bad_input(read::read(&t, p, &[&k.public()]));
        assert!(m.contains("environmentSummary: identity"), "{m}");
        let t = resigned(&vsa, &k, |s| {
            s["predicate"][field]["environmentSummary"]["identitySettings"]
                .as_object_mut()
                .unwrap()
                .remove("supervised");
        });
        assert!(bad_input(read::read(&t, p, &[])).contains("is not the identity"));
        // The VSA's identity and its summary's disagree.
        let t = resigned(&vsa, &k, |s| s["predicate"][field]["environment"] = forged.clone().into());
        assert!(bad_input(read::read(&t, p, &[])).contains("but its summary is of"));
        // A test result: a component added to the summary.
        let tr = envelope(PredicateKind::TestResult, &k);
        let t = resigned(&tr, &k, |s| {
            let a = &mut s["predicate"]["configuration"][0]["annotations"][predicates::ENVIRONMENT_ANNOTATION];
            let mut c = a["components"][0].clone();
            c["name"] = "bash".into();
            a["components"].as_array_mut().unwrap().push(c);
        });
        assert!(bad_input(read::read(&t, p, &[&k.public()])).contains("is not the identity"));
    }

    #[test]
    fn an_attestation_without_an_environment_is_refused_with_what_was_expected() {
        let k = key(4);
        let p = Path::new("e.dsse");
        let d = tempfile::tempdir().unwrap();
        let dir = run_dir(d.path(), 0);
        let t = target::load(&dir).unwrap();
        for (req, want) in [
            (vsa_request(d.path()), "expected a VSA with the environment's summary"),
            (Request::new(PredicateKind::TestResult), "expected a test result with the environment's summary"),
        ] {
            let s = statement(&t, None, &req).unwrap();
            let bytes = sign(&s, &k).unwrap().to_json();
            let m = bad_input(read::read(&bytes, p, &[&k.public()]));
            assert!(m.contains("records no environment") && m.contains(want), "{m}");
        }
        let trace = envelope(PredicateKind::RuntimeTrace, &k);
        let t = resigned(&trace, &k, |s| {
            s["predicate"].as_object_mut().unwrap().remove("reproEnvironment");
        });
        assert!(bad_input(read::read(&t, p, &[])).contains("expected a runtime trace with its environment"));
        // Another predicate type; a payload that is no statement.
        let t = resigned(&trace, &k, |s| s["predicateType"] = "https://slsa.dev/provenance/v1".into());
        assert!(bad_input(read::read(&t, p, &[])).contains("expected a runtime trace"));
        let junk = dsse::sign(dsse::PAYLOAD_TYPE, b"[]", &k).unwrap().to_json();
        assert!(bad_input(read::read(&junk, p, &[&k.public()])).contains("not an in-toto statement"));
    }

    #[test]
    fn a_wrong_key_or_a_changed_payload_exits_1_with_the_reason() {
        let k = key(5);
        let p = Path::new("e.dsse");
        let bytes = envelope(PredicateKind::Vsa, &k);
        let unverified = |r: Result<read::Attested, ProvError>| match r {
            Err(e @ ProvError::Unverified { .. }) => {
                assert_eq!(e.exit_code(), 1);
                e.to_string()
            }
            Err(e) => panic!("not a verification failure: {e}"),
            Ok(_) => panic!("verified"),
        };
        let m = unverified(read::read(&bytes, p, &[&key(6).public()]));
        assert!(m.contains("e.dsse") && m.contains("no signature by the key given"), "{m}");
        // Either of two keys may have signed.
        assert!(read::read(&bytes, p, &[&key(6).public(), &k.public()]).unwrap().source.verified);
        let m = unverified(read::read(&bytes, p, &[&key(6).public(), &key(7).public()]));
        assert!(m.matches("no signature by the key given").count() == 2, "{m}");
        // The payload changed by someone without the key.
        let mut env: Envelope = serde_json::from_slice(&bytes).unwrap();
        let forged = resigned(&bytes, &key(8), |s| s["predicate"]["verificationResult"] = "FAILED".into());
        let f: Envelope = serde_json::from_slice(&forged).unwrap();
        env.payload = f.payload;
        assert!(unverified(read::read(&env.to_json(), p, &[&k.public()])).contains("does not verify"));
        // Unchecked, the same bytes read (and the side says the signature was not checked).
        assert!(!read::read(&env.to_json(), p, &[]).unwrap().source.verified);
    }

    #[test]
    fn an_envelope_is_told_apart_from_an_environment_document_by_content() {
        let k = key(9);
        let d = tempfile::tempdir().unwrap();
        let e = d.path().join("x.json");
        std::fs::write(&e, envelope(PredicateKind::RuntimeTrace, &k)).unwrap();
        assert!(matches!(crate::open::classify(&e).unwrap(), crate::open::Kind::Envelope(_)));
        let side = crate::drift::side_of(&e, &[&k.public()]).unwrap();
        assert!(side.attestation.unwrap().verified);
        // environment_of (what `repro sbom` and `attest` read) refuses a claim.
        assert!(crate::open::environment_of(&e).unwrap_err().to_string().contains("DSSE envelope"));
        let doc = d.path().join("env.json");
        std::fs::write(&doc, crate::env::to_json(&environment())).unwrap();
        assert!(matches!(crate::open::classify(&doc).unwrap(), crate::open::Kind::Document(_)));
        assert!(crate::drift::side_of(&doc, &[]).unwrap().attestation.is_none());
        for junk in [&b""[..], b"{", b"[]", b"{\"payloadType\": 1, \"payload\": 2}", b"{\"payload\": \"\"}"] {
            assert!(!crate::open::is_envelope(junk));
        }
        assert!(crate::open::is_envelope(b" {\"payloadType\": \"x\", \"payload\": \"\", \"signatures\": []}"));
    }

    mod never_panics {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

            /// Whatever a key's holder signed (a real statement with bytes changed), reading it as a drift side
            /// returns an environment or an error naming the file, with and without the key.
            #[test]
            fn reading_an_edited_statement_never_panics(
                which in 0usize..3,
                edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
            ) {
                let k = key(10);
                let kind = [PredicateKind::RuntimeTrace, PredicateKind::TestResult, PredicateKind::Vsa][which];
                let bytes = envelope(kind, &k);
                let env: Envelope = serde_json::from_slice(&bytes).unwrap();
                use base64::Engine as _;
                let mut payload = base64::engine::general_purpose::STANDARD.decode(&env.payload).unwrap();
                for (i, b) in edits {
                    let i = i % payload.len();
                    payload[i] = b;
                }
                let signed = dsse::sign(dsse::PAYLOAD_TYPE, &payload, &k).unwrap().to_json();
                for keys in [vec![], vec![&k.public() as &dyn Verifier]] {
                    if let Err(e) = read::read(&signed, Path::new("e.dsse"), &keys) {
                        prop_assert!(e.to_string().contains("e.dsse"), "{}", e);
                    }
                }
            }
        }
    }
}

#[test]
fn a_repair_vsa_passes_only_when_the_replays_the_gates_and_the_contract_do() {
    use predicates::{RepairContractEvidence, RepairEvidence, VerificationResult};
    let d = tempfile::tempdir().unwrap();
    let dir = run_dir(d.path(), 0);
    let target = target::load(&dir).unwrap();
    let passing = predicates::read_evidence(&verify_report(d.path(), &[RUN_ID, "r2", "r3"], 0, true)).unwrap();
    let repair = RepairEvidence {
        repair: "20261204-162955.437-003ac4".into(),
        agent: "sh agent-fix.sh".into(),
        iteration: 2,
        iterations: 2,
        patch: ResourceDescriptor::file("fix.patch", "ab".into(), "cd".into()),
        lines_added: 1,
        lines_removed: 1,
        files_changed: 1,
        gates_passed: vec!["protected-path-changed".into(), "masking-construct".into()],
        gates_fired: vec![],
        gates_not_applicable: vec![],
        weak: None,
        contract: Some(RepairContractEvidence { passed: true, failed_steps: vec![] }),
    };
    let at = |e: &predicates::Evidence, r: RepairEvidence| {
        predicates::repair_vsa(&target, Some(&environment()), e, r, "2026-12-04T16:30:00Z".into())
    };
    let v = at(&passing, repair.clone());
    assert_eq!(v.verification_result, VerificationResult::Passed);
    assert_eq!(v.verified_levels, ["REPRO_REPAIR_VERIFIED"]);
    let summary = &v.reproduction.as_ref().unwrap().summary;
    assert!(summary.contains("3/3 runs passed") && summary.contains("2 gates passed"), "{summary}");
    assert!(summary.contains("iteration 2 of 2") && summary.contains("the contract's verify passed"), "{summary}");
    // Round trip through the statement's JSON: the extension is read back by `describe`.
    let s = Statement::new(target.subjects().to_vec(), predicates::VSA, &v);
    let k = key(5);
    let bytes = sign(&s, &k).unwrap().to_json();
    let text = describe(&verify(&bytes, Path::new("fix.dsse.json"), &k.public(), &Against::default()).unwrap());
    let text = text.join("\n");
    assert!(text.contains("PASSED (REPRO_REPAIR_VERIFIED)"), "{text}");
    assert!(text.contains("gates      passed: protected-path-changed, masking-construct"), "{text}");
    assert!(text.contains("patch      fix.patch sha256:ab (+1 -1 in 1 files)"), "{text}");
    assert!(text.contains("contract   verify passed"), "{text}");

    // A gate that fired, a contract that failed, or a replay that failed: FAILED.
    let fired = RepairEvidence { gates_fired: vec!["masking-construct".into()], ..repair.clone() };
    let v = at(&passing, fired);
    assert_eq!(
        (v.verification_result, v.verified_levels.as_slice()),
        (VerificationResult::Failed, &["FAILED".to_string()][..])
    );
    assert!(v.reproduction.unwrap().summary.contains("gates FIRED: masking-construct"));
    let contract = RepairEvidence {
        contract: Some(RepairContractEvidence { passed: false, failed_steps: vec!["lint".into()] }),
        ..repair.clone()
    };
    let v = at(&passing, contract);
    assert_eq!(v.verification_result, VerificationResult::Failed);
    assert!(v.reproduction.unwrap().summary.contains("the contract's verify FAILED (lint)"));
    let failing = predicates::read_evidence(&verify_report(d.path(), &[RUN_ID, "r2"], 1, true)).unwrap();
    assert_eq!(at(&failing, repair).verification_result, VerificationResult::Failed);
}
