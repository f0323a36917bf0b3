//! `repro mcp`: the MCP server driven by the official Python SDK (`mcp` on PyPI, in the pinned venv of
//! .ci/python-packages) over stdio and streamable HTTP. The client's checks are in mcp_client.py; each test runs
//! one of its scenarios and checks what it reports against the state directory.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;
use crate::provenance::pyvenv;

fn client_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/mcp_client.py")
}

/// The venv's python, after checking the SDK imports (a missing SDK fails the test, naming the fix).
fn python() -> PathBuf {
    let py = pyvenv().join("bin/python");
    let o = Command::new(&py).args(["-c", "import mcp, mcp.client.streamable_http"]).output().expect("python runs");
    assert!(
        o.status.success(),
        "this test needs the MCP Python SDK in {} (pinned in .ci/python-packages; scripts/install-deps.sh \
         installs it): {}",
        py.display(),
        stderr(&o)
    );
    py
}

/// Runs scenario `name` of mcp_client.py against `server` (`stdio:REPRO[,ARG...]` or a URL) and returns its report.
fn scenario(name: &str, server: &str, w: &Workdir, extra: &[&str]) -> Value {
    let child = Command::new(python())
        .arg(client_script())
        .args([name, server, w.path().to_str().unwrap()])
        .args(extra)
        .current_dir(w.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python starts");
    let o = wait_bounded(child, &format!("mcp_client.py {name}"));
    assert!(o.status.success(), "mcp_client.py {name} failed ({}):\n{}\n{}", o.status, stdout(&o), stderr(&o));
    let last = stdout(&o).lines().last().unwrap_or_default().to_string();
    serde_json::from_str(&last).unwrap_or_else(|e| panic!("mcp_client.py {name}: not JSON ({e}): {last}"))
}

fn stdio_server(args: &[&str]) -> String {
    let mut s = format!("stdio:{}", repro_path().display());
    for a in args {
        s.push(',');
        s.push_str(a);
    }
    s
}

/// Every process whose command line holds `token`.
fn processes_with(token: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmd).contains(token) {
                found.push(format!("{}: {}", name.to_string_lossy(), String::from_utf8_lossy(&cmd).replace('\0', " ")));
            }
        }
    }
    found
}

#[test]
fn mcp_lists_every_tool_with_a_closed_schema() {
    let w = Workdir::new();
    let r = scenario("tools", &stdio_server(&[]), &w, &[]);
    assert_eq!(r["tools"].as_array().map(Vec::len), Some(11), "{r}");
    assert_eq!(r["templates"].as_array().map(Vec::len), Some(3), "{r}");
}

#[test]
fn mcp_runs_verifies_captures_and_replays() {
    let w = Workdir::new();
    // A file outside the working directory that only the server's --bind shows the guest.
    let outside = tempfile::tempdir().unwrap();
    let file = outside.path().join("bound.txt");
    std::fs::write(&file, "from the server's bind\n").unwrap();
    let bind = outside.path().to_str().unwrap().to_string();
    let r = scenario("runs", &stdio_server(&["--bind", &bind]), &w, &[file.to_str().unwrap()]);

    // The run the client saw is the one on disk, in the server's state directory.
    let dir = PathBuf::from(r["run"]["dir"].as_str().unwrap());
    assert!(dir.starts_with(w.path().join(".repro/runs")), "{}", dir.display());
    assert_eq!(std::fs::read_to_string(dir.join("stdout")).unwrap(), r["run"]["stdout"].as_str().unwrap());
    let record: Value = serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(record["id"], r["run"]["id"]);
    assert_eq!(record["settings"]["command"], serde_json::json!(["sh", "-c", "echo hi; date +%s"]));
    assert_eq!(r["bound_stdout"], "from the server's bind\n");
    for id in r["verify"].as_array().unwrap() {
        assert!(w.path().join(".repro/runs").join(id.as_str().unwrap()).join("run.json").is_file(), "{id}");
    }
    let pack = PathBuf::from(r["pack"].as_str().unwrap());
    assert!(pack.starts_with(w.path().join(".repro/packs")) && pack.is_file(), "{}", pack.display());
    let progress = r["replay_progress"].as_array().unwrap();
    assert!(!progress.is_empty(), "{r}");
    assert_eq!(progress.last().unwrap()["progress"], 3.0, "{r}");
}

#[test]
fn mcp_refuses_what_the_server_was_not_started_with() {
    let w = Workdir::new();
    let outside = tempfile::tempdir().unwrap();
    let file = outside.path().join("secret.txt");
    std::fs::write(&file, "not for the guest\n").unwrap();
    let r = scenario("refuse", &stdio_server(&[]), &w, &[file.to_str().unwrap()]);
    for field in ["bind", "env", "network", "state_dir"] {
        assert!(r[field].as_str().unwrap().contains(&format!("unknown field `{field}`")), "{field}: {r}");
    }
    assert_ne!(r["unbound_exit"], 0, "{r}");
    // No run the server made has a bind or a passed variable: the refused calls ran nothing.
    let runs = w.path().join(".repro/runs");
    let mut n = 0;
    for e in std::fs::read_dir(&runs).unwrap().flatten() {
        let rec: Value = serde_json::from_slice(&std::fs::read(e.path().join("run.json")).unwrap()).unwrap();
        assert_eq!(rec["settings"]["binds"], serde_json::json!([]), "{}", e.path().display());
        n += 1;
    }
    assert_eq!(n, 2, "only `cat` and `true` ran");
}

#[test]
fn mcp_cancelling_a_hunt_stops_every_process() {
    let w = Workdir::new();
    let r = scenario("cancel", &stdio_server(&[]), &w, &[]);
    assert!(!r["progress"].as_array().unwrap().is_empty(), "{r}");
    assert!(r["processes_before"].as_u64().unwrap() > 0, "{r}");
    let token = r["token"].as_str().unwrap();
    // The client saw them go; the server (ended with the session) left none behind either.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut left = processes_with(token);
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        left = processes_with(token);
    }
    assert!(left.is_empty(), "processes of the cancelled hunt are left: {left:#?}");
}

/// `repro mcp --listen 127.0.0.1:0` in `w`, and the URL it printed.
fn http_server(w: &Workdir) -> (std::process::Child, String) {
    let mut server = Command::new(repro_path())
        .args(["mcp", "--no-config", "--listen", "127.0.0.1:0"])
        .current_dir(w.path())
        .env("REPRO_STATE_DIR", w.path().join(".repro"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("repro mcp starts");
    let stderr = server.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            // The receiver may be gone (the test ended): the rest of stderr is not needed.
            let _ = tx.send(line);
        }
    });
    let url = loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => {
                if let Some(u) = line.strip_prefix("repro mcp: listening on ") {
                    break u.to_string();
                }
            }
            Err(e) => {
                // Ignored: it may have exited; the panic says what is missing.
                let _ = server.kill();
                panic!("repro mcp --listen printed no address within 30 s: {e}");
            }
        }
    };
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"), "{url}");
    (server, url)
}

/// SIGTERM ends the server, with success.
fn stop(server: std::process::Child) {
    let term = Command::new("sh").args(["-c", &format!("kill -TERM {}", server.id())]).status().unwrap();
    assert!(term.success());
    let o = wait_bounded(server, "repro mcp --listen after SIGTERM");
    assert!(o.status.success(), "repro mcp after SIGTERM: {}", o.status);
}

#[test]
fn mcp_over_streamable_http() {
    let w = Workdir::new();
    let (server, url) = http_server(&w);
    let r = scenario("http", &url, &w, &[]);
    let id = r["run_id"].as_str().unwrap();
    assert_eq!(std::fs::read_to_string(w.path().join(".repro/runs").join(id).join("stdout")).unwrap(), "over-http\n");
    stop(server);
}

#[test]
fn mcp_cancelling_a_hunt_over_http_stops_every_process() {
    let w = Workdir::new();
    let (server, url) = http_server(&w);
    let r = scenario("cancel", &url, &w, &[]);
    assert!(r["processes_before"].as_u64().unwrap() > 0, "{r}");
    let token = r["token"].as_str().unwrap();
    // The server is still running: what the cancelled call started is gone all the same.
    assert!(processes_with(token).is_empty(), "processes of the cancelled hunt are left: {:#?}", processes_with(token));
    stop(server);
}

#[test]
fn mcp_explains_shrinks_attests_and_times_out() {
    let w = Workdir::new();
    let keys = w.path().join("mcp-key");
    let o = repro().arg("key").arg("gen").arg("--out").arg(&keys).output().unwrap();
    assert_code(&o, 0);
    let key = keys.with_extension("key");
    let r = scenario("analysis", &stdio_server(&["--attest-key", key.to_str().unwrap()]), &w, &[]);
    assert!(!r["explain_deciding"].as_array().unwrap().is_empty(), "{r}");
    let (pack, shrunk) = (r["pack"].as_str().unwrap(), r["shrunk"].as_str().unwrap());
    // The shrunk pack still fails the same way.
    let o = repro().args(["replay", shrunk, "--json"]).timeout(HANG_GUARD).output().unwrap();
    let rep: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    assert_eq!(rep["reproduced"], 1, "{rep:#}");
    // The envelope the tool returned verifies with the public key, against the pack.
    let env = w.path().join("test-result.dsse.json");
    std::fs::write(&env, serde_json::to_vec(&r["envelope"]).unwrap()).unwrap();
    let o = repro()
        .args(["attest", "verify"])
        .arg(&env)
        .arg("--key")
        .arg(keys.with_extension("pub"))
        .args(["--pack", pack])
        .output()
        .unwrap();
    assert_code(&o, 0);
    assert!(stdout(&o).contains("https://in-toto.io/attestation/test-result/v0.1"), "{}", stdout(&o));
    assert!(r["timeout_error"].as_str().unwrap().contains("timed out after 2 s"), "{r}");
}

#[test]
fn mcp_listens_on_loopback_only() {
    let o = repro().args(["mcp", "--listen", "0.0.0.0:0"]).timeout(HANG_GUARD).output().unwrap();
    assert_code(&o, 2);
    assert!(stderr(&o).contains("only a loopback address"), "{}", stderr(&o));
}
