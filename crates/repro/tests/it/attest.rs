//! `repro key gen`, `repro attest`, `repro attest verify`: a pack `repro capture` wrote and a recorded run,
//! signed and verified, and each change a stranger could make to the envelope or to what it is about (exit 1,
//! with the reason).

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::*;

/// A working directory plus a separate directory for packs, keys and the cache.
struct AttestEnv {
    w: Workdir,
    aside: tempfile::TempDir,
}

impl AttestEnv {
    fn new() -> AttestEnv {
        AttestEnv { w: Workdir::new(), aside: tempfile::Builder::new().prefix("repro-attest-").tempdir().unwrap() }
    }
    fn at(&self, name: &str) -> PathBuf {
        self.aside.path().join(name)
    }
    fn s(&self, name: &str) -> String {
        self.at(name).to_str().unwrap().to_string()
    }
    fn cmd(&self, args: &[&str]) -> Output {
        let mut c = repro();
        c.current_dir(self.w.path()).env("XDG_CACHE_HOME", self.at("cache")).args(args);
        c.timeout(HANG_GUARD).output().expect("repro runs")
    }
    fn key(&self, name: &str) -> String {
        let o = self.cmd(&["key", "gen", "--out", &self.s(name)]);
        assert_code(&o, 0);
        stdout(&o).trim().to_string()
    }
    fn capture(&self, name: &str, script: &str) {
        let o = self.cmd(&["capture", "-q", "-o", &self.s(name), "--", "sh", "-c", script]);
        assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    }
    /// `repro attest verify ENVELOPE --key PUB ARGS...`.
    fn verify(&self, envelope: &str, public: &str, args: &[&str]) -> Output {
        let mut a = vec!["attest", "verify", envelope, "--key", public];
        a.extend_from_slice(args);
        self.cmd(&a)
    }
}

/// Asserts exit 1 with `reason` on stderr.
fn refused(o: &Output, reason: &str) {
    assert_code(o, 1);
    let e = stderr(o);
    assert!(e.contains("not verified") && e.contains(reason), "expected '{reason}' in: {e}");
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (what a stranger's tools write).
fn b64_encode(data: &[u8]) -> String {
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn b64_decode(text: &str) -> Vec<u8> {
    let vals: Vec<u32> =
        text.bytes().filter(|&c| c != b'=').map(|c| B64.iter().position(|&x| x == c).unwrap() as u32).collect();
    let mut out = Vec::new();
    for chunk in vals.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, v)| n | v << (18 - 6 * i));
        out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8][..chunk.len() - 1]);
    }
    out
}

fn payload(envelope: &Path) -> (serde_json::Value, serde_json::Value) {
    let env: serde_json::Value = serde_json::from_slice(&fs::read(envelope).unwrap()).unwrap();
    let p = b64_decode(env["payload"].as_str().unwrap());
    (env, serde_json::from_slice(&p).unwrap())
}

fn with_payload(env: &serde_json::Value, statement: &serde_json::Value, out: &Path) {
    let mut env = env.clone();
    env["payload"] = b64_encode(&serde_json::to_vec(statement).unwrap()).into();
    fs::write(out, serde_json::to_vec(&env).unwrap()).unwrap();
}

#[test]
fn the_test_s_base64_is_base64() {
    for s in [&b""[..], b"f", b"fo", b"foo", b"foob", b"fooba", b"foobar"] {
        assert_eq!(b64_decode(&b64_encode(s)), s);
    }
    assert_eq!(b64_encode(b"foobar"), "Zm9vYmFy");
    assert_eq!(b64_encode(b"fo"), "Zm8=");
}

#[test]
fn key_gen_writes_a_private_key_only_its_owner_reads_and_never_overwrites() {
    use std::os::unix::fs::PermissionsExt;
    let e = AttestEnv::new();
    let id = e.key("ci");
    assert!(id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    let private = e.at("ci.key");
    assert_eq!(fs::metadata(&private).unwrap().permissions().mode() & 0o077, 0);
    assert!(fs::read_to_string(&private).unwrap().starts_with("-----BEGIN PRIVATE KEY-----"));
    assert!(fs::read_to_string(e.at("ci.pub")).unwrap().starts_with("-----BEGIN PUBLIC KEY-----"));
    let before = fs::read(&private).unwrap();
    let o = e.cmd(&["key", "gen", "--out", &e.s("ci")]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("already exists"), "{}", stderr(&o));
    assert_eq!(fs::read(&private).unwrap(), before);
    // The wrong half of a key is named.
    e.capture("p.repro", "exit 3");
    let o = e.cmd(&["attest", &e.s("p.repro"), "--key", &e.s("ci.pub")]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("this is a public key"), "{}", stderr(&o));
    let o = e.verify(&e.s("p.repro"), &e.s("ci.key"), &[]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("this is a private key"), "{}", stderr(&o));
}

/// `src` rewritten with the blob of `old` content replaced by `new` (same size), renamed to its new blake3, and
/// the manifest's references to it changed to match: a well-formed pack that says something else.
fn forge_blob(src: &Path, dst: &Path, old: &[u8], new: &[u8]) {
    let old_id = blake3::hash(old).to_hex().to_string();
    let new_id = blake3::hash(new).to_hex().to_string();
    let dec = zstd::Decoder::new(fs::File::open(src).unwrap()).unwrap();
    let mut ar = tar::Archive::new(dec);
    let mut out = tar::Builder::new(Vec::new());
    let mut replaced = false;
    for entry in ar.entries().unwrap() {
        let mut entry = entry.unwrap();
        let mut name = entry.path().unwrap().to_string_lossy().into_owned();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        if name == "manifest.json" {
            data = String::from_utf8(data).unwrap().replace(&old_id, &new_id).into_bytes();
        } else if name == format!("blobs/{old_id}") {
            name = format!("blobs/{new_id}");
            data = new.to_vec();
            replaced = true;
        }
        let mut h = entry.header().clone();
        h.set_path(&name).unwrap();
        h.set_size(data.len() as u64);
        h.set_cksum();
        out.append(&h, &data[..]).unwrap();
    }
    assert!(replaced, "the pack has no blob {old_id}");
    fs::write(dst, zstd::encode_all(&out.into_inner().unwrap()[..], 3).unwrap()).unwrap();
}

#[test]
fn a_captured_pack_is_attested_verified_and_every_tamper_exits_1() {
    let e = AttestEnv::new();
    e.capture("p.repro", "echo boom >&2; exit 3");
    e.capture("other.repro", "echo bang >&2; exit 3");
    let id = e.key("k");
    e.key("stranger");
    let att = e.s("p.intoto.jsonl");

    // The default predicate: the runtime trace of the pack's run, with its environment.
    let o = e.cmd(&["attest", &e.s("p.repro"), "--key", &e.s("k.key"), "-o", &att]);
    assert_code(&o, 0);
    assert!(stderr(&o).contains(&id), "{}", stderr(&o));
    let (env, statement) = payload(&e.at("p.intoto.jsonl"));
    assert_eq!(env["signatures"][0]["keyid"], id.as_str());
    assert_eq!(statement["predicateType"], "https://in-toto.io/attestation/runtime-trace/v0.1");
    let subjects = statement["subject"].as_array().unwrap();
    assert_eq!(subjects[0]["name"], "p.repro");
    assert!(subjects.len() > 1 && subjects[1..].iter().all(|s| s["name"].as_str().unwrap().starts_with("blobs/")));
    let files = statement["predicate"]["monitorLog"]["fileAccess"].as_array().unwrap();
    assert!(
        files.iter().any(|f| f["name"].as_str().unwrap().ends_with("/dash") || f["name"] == "/usr/bin/sh"),
        "{files:?}"
    );
    let identity = statement["predicate"]["reproEnvironment"]["identity"].as_str().unwrap().to_string();
    assert!(identity.starts_with("blake3:"));

    let o = e.verify(&att, &e.s("k.pub"), &["--pack", &e.s("p.repro")]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains(&format!("signature by key {id}")) && out.contains(&identity), "{out}");
    assert!(out.contains(&format!("{} subjects match the pack", subjects.len())), "{out}");
    let o = e.verify(&att, &e.s("k.pub"), &["--pack", &e.s("p.repro"), "--json"]);
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verified"], true);
    assert_eq!(v["statement"], statement);

    // The payload edited (the command's exit status).
    let mut edited = statement.clone();
    edited["predicate"]["monitorLog"]["process"][0]["exitStatus"] = 0.into();
    with_payload(&env, &edited, &e.at("edited.jsonl"));
    refused(&e.verify(&e.s("edited.jsonl"), &e.s("k.pub"), &[]), "does not verify");
    // A subject's digest changed (to another pack's).
    let mut edited = statement.clone();
    edited["subject"][0]["digest"]["sha256"] = "0".repeat(64).into();
    with_payload(&env, &edited, &e.at("digest.jsonl"));
    refused(&e.verify(&e.s("digest.jsonl"), &e.s("k.pub"), &["--pack", &e.s("p.repro")]), "does not verify");
    // The signature swapped for the same key's signature of another statement.
    let o = e.cmd(&["attest", &e.s("other.repro"), "--key", &e.s("k.key"), "-o", &e.s("other.jsonl")]);
    assert_code(&o, 0);
    let (other_env, _) = payload(&e.at("other.jsonl"));
    let mut swapped = env.clone();
    swapped["signatures"] = other_env["signatures"].clone();
    fs::write(e.at("swapped.jsonl"), serde_json::to_vec(&swapped).unwrap()).unwrap();
    refused(&e.verify(&e.s("swapped.jsonl"), &e.s("k.pub"), &[]), "does not verify");
    // The wrong key.
    refused(&e.verify(&att, &e.s("stranger.pub"), &[]), "no signature by the key given");
    // A subject swapped: a true attestation, shown with another pack.
    refused(&e.verify(&att, &e.s("k.pub"), &["--pack", &e.s("other.repro")]), "not the attested pack");
    // A blob of the pack replaced (and the manifest made to match: still a well-formed pack).
    forge_blob(&e.at("p.repro"), &e.at("forged.repro"), b"boom\n", b"BOOM\n");
    assert_code(&e.cmd(&["inspect", &e.s("forged.repro")]), 0);
    refused(&e.verify(&att, &e.s("k.pub"), &["--pack", &e.s("forged.repro")]), "not the attested pack");
    // Garbage, and an envelope of another payload type.
    fs::write(e.at("garbage.jsonl"), b"{\"payload\": 1}").unwrap();
    refused(&e.verify(&e.s("garbage.jsonl"), &e.s("k.pub"), &[]), "not a DSSE envelope");
    let mut typed = env.clone();
    typed["payloadType"] = "application/json".into();
    fs::write(e.at("typed.jsonl"), serde_json::to_vec(&typed).unwrap()).unwrap();
    refused(&e.verify(&e.s("typed.jsonl"), &e.s("k.pub"), &[]), "in-toto statements only");
    let o = e.verify(&e.s("garbage.jsonl"), &e.s("k.pub"), &["--json"]);
    assert_code(&o, 1);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verified"], false);
}

#[test]
fn a_replay_becomes_a_vsa_that_says_n_of_n_in_the_environment() {
    let e = AttestEnv::new();
    e.capture("p.repro", "echo boom >&2; exit 3");
    e.key("k");
    let o = e.cmd(&["replay", &e.s("p.repro"), "--runs", "3", "--json"]);
    assert_code(&o, 0);
    fs::write(e.at("replay.json"), &o.stdout).unwrap();
    let o = e.cmd(&[
        "attest",
        &e.s("p.repro"),
        "--key",
        &e.s("k.key"),
        "--predicate",
        "vsa",
        "--report",
        &e.s("replay.json"),
        "-o",
        &e.s("vsa.jsonl"),
    ]);
    assert_code(&o, 0);
    assert!(stderr(&o).contains("verificationResult PASSED"), "{}", stderr(&o));
    let (_, s) = payload(&e.at("vsa.jsonl"));
    let p = &s["predicate"];
    assert_eq!(s["predicateType"], "https://slsa.dev/verification_summary/v1");
    assert_eq!(p["verificationResult"], "PASSED");
    assert_eq!(p["verifiedLevels"], serde_json::json!(["REPRO_FAILURE_REPRODUCED"]));
    assert_eq!(p["inputAttestations"][0]["name"], "replay.json");
    let r = &p["https://example.invalid/repro/vsa/reproduction/v1"];
    assert_eq!((r["runs"].as_u64(), r["reproduced"].as_u64()), (Some(3), Some(3)));
    let identity = r["environment"].as_str().unwrap();
    assert!(identity.starts_with("blake3:"), "{r}");
    let o = e.verify(&e.s("vsa.jsonl"), &e.s("k.pub"), &["--pack", &e.s("p.repro")]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("reproduced 3/3 times in environment blake3:") && out.contains("PASSED"), "{out}");
    // The report of another pack's replay is refused when attesting.
    e.capture("q.repro", "echo bang >&2; exit 3");
    let o = e.cmd(&[
        "attest",
        &e.s("q.repro"),
        "--key",
        &e.s("k.key"),
        "--predicate",
        "vsa",
        "--report",
        &e.s("replay.json"),
    ]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("a replay of another pack"), "{}", stderr(&o));
    // A VSA needs its evidence; --report belongs to it.
    let o = e.cmd(&["attest", &e.s("p.repro"), "--key", &e.s("k.key"), "--predicate", "vsa"]);
    assert_code(&o, 2);
    let o = e.cmd(&["attest", &e.s("p.repro"), "--key", &e.s("k.key"), "--report", &e.s("replay.json")]);
    assert_code(&o, 2);
}

#[test]
fn a_recorded_run_is_attested_by_its_outputs() {
    let e = AttestEnv::new();
    e.key("k");
    let o = e.cmd(&["run", "-q", "--record-inputs", "--", "sh", "-c", "echo hi > out.txt; echo hi; exit 1"]);
    assert_code(&o, 1);
    for (predicate, want) in [("runtime-trace", "runtime-trace/v0.1"), ("test-result", "test-result/v0.1")] {
        let out = e.s(&format!("{predicate}.jsonl"));
        let o = e.cmd(&["attest", "last", "--key", &e.s("k.key"), "--predicate", predicate, "-o", &out]);
        assert_code(&o, 0);
        let (_, s) = payload(Path::new(&out));
        assert!(s["predicateType"].as_str().unwrap().ends_with(want));
        let names: Vec<&str> = s["subject"].as_array().unwrap().iter().map(|x| x["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["stdout", "stderr", "run.json", "changes/out.txt"]);
        assert_code(&e.verify(&out, &e.s("k.pub"), &["--run", "last"]), 0);
    }
    let (_, s) = payload(&e.at("test-result.jsonl"));
    assert_eq!(s["predicate"]["result"], "FAILED");
    // One output changed after signing: named.
    let dir = e.w.last_run();
    fs::write(dir.join("changes/out.txt"), "ho\n").unwrap();
    refused(&e.verify(&e.s("test-result.jsonl"), &e.s("k.pub"), &["--run", "last"]), "changes/out.txt");
    let o = e.verify(&e.s("test-result.jsonl"), &e.s("k.pub"), &["--file", dir.join("stdout").to_str().unwrap()]);
    assert_code(&o, 0);
}

/// `repro drift ENVELOPE RUN`: a VSA of a real `run --verify` (its first run recorded with --record-inputs) and
/// a runtime trace, compared with later runs of the same command: the same environment exits 0; a run that used
/// one more file, or other bytes of the same file, exits 1 and names the change; a tampered envelope with --key
/// exits 1, a forged identity without it exits 2, and an unchecked side says so.
#[test]
fn drift_takes_a_signed_vsa_or_trace_as_a_side() {
    let e = AttestEnv::new();
    e.key("k");
    e.key("stranger");
    let extra = tempfile::tempdir().unwrap();
    fs::write(extra.path().join("used"), "v1\n").unwrap();
    fs::write(extra.path().join("more"), "more\n").unwrap();
    let bind = format!("{}:/run/extra", extra.path().display());
    let o = e.cmd(&[
        "run",
        "-q",
        "--verify",
        "--runs",
        "2",
        "--record-inputs",
        "--bind",
        &bind,
        "--json",
        "--",
        "cat",
        "/run/extra/used",
    ]);
    assert_code(&o, 0);
    fs::write(e.at("verify.json"), &o.stdout).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let first = v["runs"][0]["dir"].as_str().unwrap().to_string();
    let vsa = e.s("vsa.dsse");
    let o = e.cmd(&[
        "attest",
        &first,
        "--key",
        &e.s("k.key"),
        "--predicate",
        "vsa",
        "--report",
        &e.s("verify.json"),
        "-o",
        &vsa,
    ]);
    assert_code(&o, 0);
    let (_, s) = payload(&e.at("vsa.dsse"));
    let summary = &s["predicate"]["https://example.invalid/repro/vsa/reproduction/v1"]["environmentSummary"];
    assert!(summary["components"].as_array().is_some_and(|c| !c.is_empty()), "{summary}");
    let trace = e.s("trace.dsse");
    assert_code(&e.cmd(&["attest", &first, "--key", &e.s("k.key"), "-o", &trace]), 0);

    // The same command again: the same environment, from the VSA and from the trace.
    let run = |args: &[&str]| {
        let mut a = vec!["run", "-q", "--record-inputs", "--bind", &bind, "--"];
        a.extend_from_slice(args);
        assert_code(&e.cmd(&a), 0);
        e.w.last_run().to_str().unwrap().to_string()
    };
    let same = run(&["cat", "/run/extra/used"]);
    for side in [&vsa, &trace] {
        let o = e.cmd(&["drift", side, &same, "--key", &e.s("k.pub")]);
        assert_code(&o, 0);
        let out = stdout(&o);
        assert!(out.contains("same environment") && out.contains("signature verified: key"), "{out}");
    }
    let o = e.cmd(&["drift", &vsa, &same, "--key", &e.s("k.pub"), "--json"]);
    assert_code(&o, 0);
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(d["a"]["attestation"]["predicate"], "vsa");
    assert_eq!((d["a"]["attestation"]["verified"].as_bool(), d["b"].get("attestation")), (Some(true), None));
    // Without --key: read, and said to be unchecked.
    let o = e.cmd(&["drift", &vsa, &same]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("A: VSA (signature not checked: pass --key"), "{}", stdout(&o));

    // One more file used: named, exit 1.
    let more = run(&["cat", "/run/extra/used", "/run/extra/more"]);
    let o = e.cmd(&["drift", &vsa, &more, "--key", &e.s("k.pub"), "--json"]);
    assert_code(&o, 1);
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let kinds: Vec<(&str, &str)> = d["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] != "run-setting")
        .map(|c| (c["kind"].as_str().unwrap(), c["subject"].as_str().unwrap()))
        .collect();
    assert_eq!(kinds, [("added", "file /run/extra/more")], "{d}");
    // Other bytes of the same file: the component from the VSA (no file names), the file from the trace.
    fs::write(extra.path().join("used"), "v2\n").unwrap();
    let changed = run(&["cat", "/run/extra/used"]);
    let o = e.cmd(&["drift", &vsa, &changed, "--key", &e.s("k.pub")]);
    assert_code(&o, 1);
    let out = stdout(&o);
    assert!(out.contains("content  [read] file /run/extra/used") && out.contains("components only"), "{out}");
    let o = e.cmd(&["drift", &trace, &changed, "--key", &e.s("k.pub")]);
    assert_code(&o, 1);
    assert!(stdout(&o).contains("/run/extra/used (content)"), "{}", stdout(&o));

    // Tampered (the result flipped, the signature kept): exit 1 with the reason; so is another key's.
    let (env, statement) = payload(&e.at("vsa.dsse"));
    let mut edited = statement.clone();
    edited["predicate"]["verificationResult"] = "FAILED".into();
    with_payload(&env, &edited, &e.at("tampered.dsse"));
    let o = e.cmd(&["drift", &e.s("tampered.dsse"), &same, "--key", &e.s("k.pub")]);
    refused(&o, "does not verify");
    assert!(stderr(&o).contains("tampered.dsse"), "{}", stderr(&o));
    refused(&e.cmd(&["drift", &vsa, &same, "--key", &e.s("stranger.pub")]), "no signature by the key given");
    // An identity forged to match another run (read unchecked): bad input, exit 2, naming the file.
    let mut forged = statement.clone();
    forged["predicate"]["https://example.invalid/repro/vsa/reproduction/v1"]["environmentSummary"]["components"][0]
        ["version"] = "9".into();
    with_payload(&env, &forged, &e.at("forged.dsse"));
    let o = e.cmd(&["drift", &e.s("forged.dsse"), &same]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("forged.dsse") && stderr(&o).contains("is not the identity"), "{}", stderr(&o));
    // `repro env` reads an envelope too.
    let o = e.cmd(&["env", &vsa]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("attested   VSA (signature not checked"), "{}", stdout(&o));
}
