//! Escape attempts: secrets (see main.rs for the rules these tests follow).
//!
//! A secret given to the guest (`--env API_TOKEN=...`), a credentials file it reads and credentials it prints
//! must not land in run records, packs or reports; the guest still gets the real value. Every file these tests
//! make is in their own temporary directories (the key of the markers and the caches too: `XDG_CONFIG_HOME`,
//! `XDG_CACHE_HOME`), never in the tester's home.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{assert_code, stderr, stdout};
use crate::harness::*;

const SECRET: &str = "hunter2-xyz";
/// sha256 of SECRET, as `sha256sum` prints it: how the guest shows it saw the value without printing it.
fn secret_sha() -> String {
    let o = Command::new("sh").args(["-c", &format!("printf %s {SECRET} | sha256sum")]).output().unwrap();
    String::from_utf8(o.stdout).unwrap().split_whitespace().next().expect("a digest").to_string()
}

/// A project directory with its own key and caches beside it, usable by `caller`.
struct Env {
    top: tempfile::TempDir,
    caller: Caller,
}

impl Env {
    fn new(caller: Caller) -> Env {
        let top = workdir(caller);
        for d in ["proj", "config", "cache", "out"] {
            let p = top.path().join(d);
            std::fs::create_dir(&p).unwrap();
            if caller == Caller::Unprivileged {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
            }
        }
        Env { top, caller }
    }
    fn proj(&self) -> PathBuf {
        self.top.path().join("proj")
    }
    fn pack(&self, name: &str) -> PathBuf {
        self.top.path().join("out").join(name)
    }
    /// `repro ARGS` in the project, bounded by `timeout 120`.
    fn repro(&self, args: &[&str], extra_env: &[(&str, &str)]) -> Output {
        let c = repro_as(self.caller, &self.proj());
        let mut t = Command::new("timeout");
        t.arg("120").arg(c.get_program()).args(c.get_args()).args(args);
        t.current_dir(self.proj())
            .env_remove("REPRO_STATE_DIR")
            .env_remove("API_TOKEN")
            .env("XDG_CONFIG_HOME", self.top.path().join("config"))
            .env("XDG_CACHE_HOME", self.top.path().join("cache"));
        for (k, v) in extra_env {
            t.env(k, v);
        }
        t.output().expect("repro runs")
    }
}

/// Every file under `dir` (recursively), with its bytes.
fn all_files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        // Tolerant: a run being torn down removes files while they are listed.
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file() {
                if let Ok(data) = std::fs::read(&p) {
                    out.push((p, data));
                }
            }
        }
    }
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The whole pack, decompressed (manifest, tar headers and every blob).
fn pack_bytes(p: &Path) -> Vec<u8> {
    zstd::decode_all(std::fs::File::open(p).expect("the pack")).expect("a zstd stream")
}

fn manifest(p: &Path) -> serde_json::Value {
    let bytes = pack_bytes(p);
    let mut ar = tar::Archive::new(bytes.as_slice());
    let mut first = ar.entries().unwrap().next().unwrap().unwrap();
    let mut s = String::new();
    std::io::Read::read_to_string(&mut first, &mut s).unwrap();
    serde_json::from_str(&s).unwrap()
}

fn run_json(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap()
}

fn runs(proj: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        std::fs::read_dir(proj.join(".repro/runs")).unwrap().flatten().map(|e| e.path()).collect();
    v.sort();
    v
}

/// The guest checks it got the real value (exit 1, the failure to capture) or not (exit 3), printing only its
/// digest.
fn token_script() -> String {
    format!(
        "cat /proc/self/environ > /dev/null; d=$(printf %s \"$API_TOKEN\" | sha256sum); echo \"saw $d\"; [ \"$d\" = \"{}  -\" ] || exit 3; exit 1",
        secret_sha()
    )
}

#[test]
fn env_secrets_are_stored_as_markers_and_the_guest_gets_the_value() {
    for caller in CALLERS {
        let e = Env::new(caller);
        let env_arg = format!("API_TOKEN={SECRET}");
        let script = token_script();
        let run =
            |val: &str| e.repro(&["run", "-q", "--env", &format!("API_TOKEN={val}"), "--", "sh", "-c", &script], &[]);
        let o = run(SECRET);
        assert_code(&o, 1);
        assert!(stdout(&o).contains(&secret_sha()), "{caller:?}: the guest saw the real value: {}", stdout(&o));
        let pack = e.pack("t.repro");
        let o = e
            .repro(&["capture", "-q", "-o", pack.to_str().unwrap(), "--env", &env_arg, "--", "sh", "-c", &script], &[]);
        assert_code(&o, 1);
        assert!(!stderr(&o).contains(SECRET), "{}", stderr(&o));
        let o = run("another-value");
        assert_code(&o, 3);

        // No file of any run directory and no byte of the pack holds the value.
        for (p, data) in all_files(&e.proj().join(".repro")) {
            assert!(!contains(&data, SECRET.as_bytes()), "{caller:?}: {} holds the secret", p.display());
        }
        let bytes = pack_bytes(&pack);
        assert!(!contains(&bytes, SECRET.as_bytes()), "{caller:?}: the pack holds the secret");

        // The same value gives the same marker (in run.json and in the pack); another value another one.
        let r = runs(&e.proj());
        assert_eq!(r.len(), 3);
        let marker = |d: &Path| run_json(d)["settings"]["env"]["API_TOKEN"].as_str().unwrap().to_string();
        let (m1, m2, m3) = (marker(&r[0]), marker(&r[1]), marker(&r[2]));
        assert!(m1.starts_with("<redacted:blake3:") && m1.ends_with('>') && m1.len() == 26, "{m1}");
        assert_eq!(m1, m2, "{caller:?}: two runs with the same value compare");
        assert_ne!(m1, m3);
        assert_eq!(manifest(&pack)["command"]["env"]["API_TOKEN"], m1.as_str());
        assert_eq!(run_json(&r[0])["settings"]["env"]["TZ"], "UTC", "other variables are kept");

        // Reports: `repro show`, text and JSON.
        for args in [&["show", "last"][..], &["show", "last", "--json"]] {
            let o = e.repro(args, &[]);
            assert_code(&o, 0);
            assert!(!stdout(&o).contains(SECRET) && stdout(&o).contains(&m3), "{}", stdout(&o));
        }
    }
}

#[test]
fn replay_refuses_a_redacted_variable_until_it_is_supplied() {
    let e = Env::new(Caller::Root);
    let pack = e.pack("t.repro");
    let env_arg = format!("API_TOKEN={SECRET}");
    let o = e.repro(
        &["capture", "-q", "-o", pack.to_str().unwrap(), "--env", &env_arg, "--", "sh", "-c", &token_script()],
        &[],
    );
    assert_code(&o, 1);
    let p = pack.to_str().unwrap();
    // Without the value: refused before anything runs, naming the variable and how to supply it.
    let before = runs(&e.proj()).len();
    let o = e.repro(&["replay", p], &[]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("API_TOKEN") && stderr(&o).contains("--env"), "{}", stderr(&o));
    assert_eq!(runs(&e.proj()).len(), before, "nothing ran");
    // `--env NAME=VALUE`, and `--env NAME` from this environment: the guest gets the value, the failure reproduces.
    let o = e.repro(&["replay", p, "--env", &env_arg], &[]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains(&secret_sha()), "{}", stdout(&o));
    let o = e.repro(&["replay", p, "--env", "API_TOKEN"], &[("API_TOKEN", SECRET)]);
    assert_code(&o, 0);
    let o = e.repro(&["replay", p, "--env", "API_TOKEN"], &[]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("API_TOKEN"), "{}", stderr(&o));
    // A wrong value runs (the user supplied it) and does not reproduce.
    let o = e.repro(&["replay", p, "--env", "API_TOKEN=wrong"], &[]);
    assert_code(&o, 1);
    // The replays' run records hold the marker, not the value.
    for (f, data) in all_files(&e.proj().join(".repro")) {
        assert!(!contains(&data, SECRET.as_bytes()), "{} holds the secret", f.display());
    }
    // `repro explain PACK` refuses the same way, and `repro shrink` without the value in its environment.
    let o = e.repro(&["explain", "--vary", "seed", "--seeds", "1", "--control", "1", p], &[]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("API_TOKEN"), "{}", stderr(&o));
    let o = e.repro(&["shrink", p, "-o", e.pack("s.repro").to_str().unwrap()], &[]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("API_TOKEN"), "{}", stderr(&o));
}

const NETRC: &str = "machine example.invalid login u password fake-netrc-pw-0451\n";
const GH_TOKEN: &str = "ghp_FAKEfakeFAKEfakeFAKEfakeFAKEfake0123";

/// A project whose guest reads a fake `.netrc` and a file holding a fake GitHub token, then fails.
fn credentials_project(e: &Env) -> Vec<String> {
    std::fs::write(e.proj().join(".netrc"), NETRC).unwrap();
    std::fs::write(e.proj().join("settings.ini"), format!("[gh]\ntoken = {GH_TOKEN}\n")).unwrap();
    std::fs::write(e.proj().join("plain.txt"), "nothing secret\n").unwrap();
    ["sh", "-c", "cat .netrc settings.ini plain.txt > /dev/null; echo read them; exit 1"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

fn capture(e: &Env, pack: &Path, opts: &[&str], cmd: &[String]) -> Output {
    let mut args = vec!["capture", "-q", "-o", pack.to_str().unwrap()];
    args.extend_from_slice(opts);
    args.push("--");
    args.extend(cmd.iter().map(String::as_str));
    e.repro(&args, &[])
}

#[test]
fn credential_files_are_left_out_of_the_pack_and_named() {
    for caller in CALLERS {
        credential_files_as(caller);
    }
}

fn credential_files_as(caller: Caller) {
    let e = Env::new(caller);
    let cmd = credentials_project(&e);
    let pack = e.pack("c.repro");
    let o = capture(&e, &pack, &[], &cmd);
    assert_code(&o, 1);
    let err = stderr(&o);
    let netrc = e.proj().join(".netrc");
    let ini = e.proj().join("settings.ini");
    assert!(err.contains(&format!("{}: a .netrc credentials file", netrc.display())), "{err}");
    assert!(err.contains(&format!("{}: a GitHub token (line 2)", ini.display())), "{err}");
    assert!(!err.contains(GH_TOKEN) && !err.contains("fake-netrc-pw"), "the warning never shows the secret: {err}");
    let bytes = pack_bytes(&pack);
    assert!(!contains(&bytes, GH_TOKEN.as_bytes()), "the token is in the pack");
    assert!(!contains(&bytes, b"fake-netrc-pw-0451"), "the .netrc is in the pack");
    let m = manifest(&pack);
    let excluded: Vec<&str> =
        m["secrets"]["excluded"].as_array().unwrap().iter().map(|x| x["path"].as_str().unwrap()).collect();
    assert_eq!(excluded, [netrc.to_str().unwrap(), ini.to_str().unwrap()]);
    let files: Vec<&str> = m["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert!(!files.contains(&netrc.to_str().unwrap()) && !files.contains(&ini.to_str().unwrap()));
    assert!(files.contains(&e.proj().join("plain.txt").to_str().unwrap()), "other files are packed");
    // A replay says which files the pack does not have (here the guest then fails to read them).
    let o = e.repro(&["replay", pack.to_str().unwrap()], &[]);
    assert!(stderr(&o).contains(&format!("[repro] not in this pack: {}", netrc.display())), "{}", stderr(&o));

    // `--secrets redact`: packed, each credential replaced.
    let red = e.pack("r.repro");
    assert_code(&capture(&e, &red, &["--secrets", "redact"], &cmd), 1);
    let bytes = pack_bytes(&red);
    assert!(!contains(&bytes, GH_TOKEN.as_bytes()) && !contains(&bytes, b"fake-netrc-pw-0451"));
    assert!(contains(&bytes, b"token = <redacted:GitHub token>"));

    // `--secrets keep`: packed as they are, loudly.
    let kept = e.pack("k.repro");
    let o = capture(&e, &kept, &["--secrets", "keep"], &cmd);
    assert_code(&o, 1);
    assert!(stderr(&o).contains("WARNING") && stderr(&o).contains("KEPT"), "{}", stderr(&o));
    let bytes = pack_bytes(&kept);
    assert!(contains(&bytes, GH_TOKEN.as_bytes()) && contains(&bytes, b"fake-netrc-pw-0451"));
}

#[test]
fn credentials_in_the_output_are_redacted_in_the_pack_and_the_replay_still_matches() {
    let e = Env::new(Caller::Root);
    // The key is put together at run time, so the command line itself holds no private key header.
    let script = "{ printf '%s%s\\n' '-----BEGIN RSA PRIV' 'ATE KEY-----'; printf 'MIIE%s\\n' fakekeymaterial0451; \
                  printf '%s%s\\n' '-----END RSA PRIV' 'ATE KEY-----'; } >&2; echo AKIA''IOSFODNN7EXAMPLE; exit 1";
    let cmd: Vec<String> = ["sh", "-c", script].iter().map(|s| s.to_string()).collect();
    let pack = e.pack("o.repro");
    let o = capture(&e, &pack, &[], &cmd);
    assert_code(&o, 1);
    assert!(stderr(&o).contains("[repro] secrets: stderr: a private key (line 1): redacted"), "{}", stderr(&o));
    assert!(stderr(&o).contains("[repro] secrets: stdout: an AWS access key id (line 1)"), "{}", stderr(&o));
    let bytes = pack_bytes(&pack);
    for s in [&b"PRIVATE KEY-----"[..], b"MIIEfakekeymaterial0451", b"AKIAIOSFODNN7EXAMPLE"] {
        assert!(!contains(&bytes, s), "{} in the pack", String::from_utf8_lossy(s));
    }
    let m = manifest(&pack);
    assert_eq!(m["secrets"]["output_redacted"], serde_json::json!(["stdout", "stderr"]));
    // The recorded signature is the redacted one and a replay, redacting its own output, matches it.
    let o = e.repro(&["replay", pack.to_str().unwrap()], &[]);
    assert_code(&o, 0);
    // Kept on request.
    let kept = e.pack("k.repro");
    assert_code(&capture(&e, &kept, &["--secrets", "keep"], &cmd), 1);
    assert!(contains(&pack_bytes(&kept), b"MIIEfakekeymaterial0451"));
}

#[test]
fn non_utf8_file_names_survive_keep_changes() {
    for caller in CALLERS {
        let e = Env::new(caller);
        // A directory and a file named with byte 0xff, made by the guest; one existing such file deleted.
        let name = OsStr::from_bytes(b"f\xff");
        std::fs::write(e.proj().join(name), "old").unwrap();
        if caller == Caller::Unprivileged {
            std::fs::set_permissions(e.proj().join(name), std::fs::Permissions::from_mode(0o666)).unwrap();
        }
        let script = "n=$(printf 'f\\377'); mkdir \"d$n\" && printf new > \"d$n/$n\" && rm \"$n\"";
        let o = e.repro(&["run", "-q", "--keep-changes", "--", "sh", "-c", script], &[]);
        assert_code(&o, 0);
        let dir = e.proj().join(OsStr::from_bytes(b"df\xff"));
        assert_eq!(std::fs::read(dir.join(name)).unwrap(), b"new", "{caller:?}");
        assert!(!e.proj().join(name).exists(), "{caller:?}: the deletion was applied");
        let r = runs(&e.proj());
        let changes: serde_json::Value =
            serde_json::from_slice(&std::fs::read(r[0].join("changes.json")).unwrap()).unwrap();
        let hex: Vec<&str> =
            changes["changes"].as_array().unwrap().iter().filter_map(|c| c["path_hex"].as_str()).collect();
        assert_eq!(hex, ["6466ff", "6466ff2f66ff", "66ff"], "{changes}");
    }
}

#[test]
fn hunt_and_explain_report_markers_not_values() {
    let e = Env::new(Caller::Root);
    // Fails (exit 1) with the secret value, passes with the other one.
    let script = format!("[ \"$(printf %s \"$API_TOKEN\" | sha256sum)\" = \"{}  -\" ] && exit 1; exit 0", secret_sha());
    let variant = format!("API_TOKEN={SECRET},plain-value");
    let base = ["--vary", "env", "--env-variant", variant.as_str(), "--jobs", "1"];
    for json in [false, true] {
        let mut args = vec!["hunt"];
        args.extend_from_slice(&base);
        if json {
            args.push("--json");
        }
        args.extend(["--", "sh", "-c", script.as_str()]);
        let o = e.repro(&args, &[]);
        assert_code(&o, 1);
        let out = stdout(&o);
        assert!(!out.contains(SECRET) && !stderr(&o).contains(SECRET), "{out}\n{}", stderr(&o));
        assert!(out.contains("API_TOKEN=<redacted:blake3:"), "{out}");
        if !json {
            assert!(
                out.lines().any(|l| l.contains("reproduce:") && l.contains("API_TOKEN=<redacted:blake3:")),
                "{out}"
            );
        }
    }
    let mut args = vec!["explain", "--control", "1"];
    args.extend_from_slice(&base);
    args.extend(["--json", "--", "sh", "-c", script.as_str()]);
    let o = e.repro(&args, &[]);
    assert!(!stdout(&o).contains(SECRET) && !stderr(&o).contains(SECRET), "{}", stdout(&o));
    assert!(stdout(&o).contains("API_TOKEN=<redacted:blake3:"), "{}", stdout(&o));
    for (p, data) in all_files(&e.proj().join(".repro")) {
        assert!(!contains(&data, SECRET.as_bytes()), "{} holds the secret", p.display());
    }
}

#[test]
fn a_killed_run_leaves_no_secret_behind() {
    let e = Env::new(Caller::Root);
    // The init's configuration holds the real environment while the guest runs: it is a memfd, so no file of the
    // run directory holds the value, neither while the guest runs nor after `repro run` itself is killed.
    let mut child = Command::new(crate::common::repro_path())
        .args(["run", "-q", "--env", &format!("API_TOKEN={SECRET}"), "--", "sh", "-c", "echo started; sleep 30"])
        .current_dir(e.proj())
        .env_remove("REPRO_STATE_DIR")
        .env("XDG_CONFIG_HOME", e.top.path().join("config"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("repro runs");
    let start = std::time::Instant::now();
    loop {
        let started = std::fs::read_dir(e.proj().join(".repro/runs"))
            .ok()
            .and_then(|mut r| r.next())
            .and_then(|d| d.ok())
            .map(|d| d.path().join("stdout"))
            .and_then(|p| std::fs::read_to_string(p).ok())
            .is_some_and(|o| o.contains("started"));
        if started {
            break;
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(20), "the run never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let leaks = |when: &str| {
        let found: Vec<PathBuf> = all_files(&e.proj().join(".repro"))
            .into_iter()
            .filter(|(_, d)| contains(d, SECRET.as_bytes()))
            .map(|(p, _)| p)
            .collect();
        assert!(found.is_empty(), "{when}: the secret is in {found:?}");
    };
    leaks("while the guest runs");
    child.kill().expect("kill repro");
    let _ = child.wait();
    leaks("after repro run was killed");
}
