//! `repro capture`, `replay`, `inspect`, `unpack`, `pack verify`: reproducer packs end to end.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::*;

/// A working directory plus a separate directory for packs and the cache (so neither shows in the guest's
/// listings of the working directory).
struct PackEnv {
    w: Workdir,
    aside: tempfile::TempDir,
}

impl PackEnv {
    fn new() -> PackEnv {
        PackEnv { w: Workdir::new(), aside: tempfile::Builder::new().prefix("repro-packs-").tempdir().unwrap() }
    }
    fn path(&self) -> &Path {
        self.w.path()
    }
    fn pack(&self, name: &str) -> PathBuf {
        self.aside.path().join(name)
    }
    fn cmd(&self, args: &[&str]) -> Output {
        let mut c = repro();
        c.current_dir(self.path()).env("XDG_CACHE_HOME", self.aside.path().join("cache")).args(args);
        c.output().expect("repro runs")
    }
    fn capture(&self, name: &str, opts: &[&str], cmd: &[&str]) -> Output {
        let p = self.pack(name);
        let mut args = vec!["capture", "-o", p.to_str().unwrap()];
        args.extend_from_slice(opts);
        args.push("--");
        args.extend_from_slice(cmd);
        self.cmd(&args)
    }
    fn replay(&self, name: &str, opts: &[&str]) -> Output {
        let p = self.pack(name);
        let mut args = vec!["replay", p.to_str().unwrap()];
        args.extend_from_slice(opts);
        self.cmd(&args)
    }
    fn write(&self, name: &str, content: &str) {
        fs::write(self.path().join(name), content).unwrap();
    }
}

const FAIL_PY: &str =
    "import json\nd = json.load(open('data.json'))\nif d['v'] != 4:\n    raise SystemExit(f'bad value {d[\"v\"]}')\n";

#[test]
fn python_failure_is_captured_and_replayed_from_the_pack() {
    let e = PackEnv::new();
    e.write("fail.py", FAIL_PY);
    e.write("data.json", "{\"v\": 3}");
    let o = e.capture("py.repro", &[], &["python3", "fail.py"]);
    assert_code(&o, 1);
    assert!(stderr(&o).contains("bad value 3"), "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("[repro] pack: {}", e.pack("py.repro").display())), "{}", stderr(&o));

    let o = e.cmd(&["inspect", e.pack("py.repro").to_str().unwrap()]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("command    python3 fail.py"), "{out}");
    assert!(out.contains("stderr | bad value 3"), "{out}");
    assert!(out.contains("(working directory)") && out.contains("/usr "), "{out}");
    let o = e.cmd(&["inspect", "--json", e.pack("py.repro").to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["signature"]["exit_status"], 1);
    assert!(v["inputs"]["/usr"]["files"].as_u64().unwrap() > 5, "the interpreter and its libraries are packed");

    // The working tree changes; the pack keeps its own copy.
    e.write("data.json", "{\"v\": 4}");
    let o = e.replay("py.repro", &["--runs", "2"]);
    assert_code(&o, 0);
    assert!(stderr(&o).contains("[repro] reproduced 2/2: exit 1; stderr: bad value 3"), "{}", stderr(&o));

    // --with lays the current file over the pack's copy: the fix is checked against the recorded failure.
    let o = e.replay("py.repro", &["--with", "data.json"]);
    assert_code(&o, 1);
    let err = stderr(&o);
    assert!(err.contains("reproduced 0/1") && err.contains("exit status: recorded 1, got 0"), "{err}");
    let o = e.replay("py.repro", &["--with", "/etc/hostname"]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("--with /etc/hostname") && stderr(&o).contains("not inside"), "{}", stderr(&o));

    // unpack gives the files and the manifest.
    let dir = e.aside.path().join("unpacked");
    let o = e.cmd(&["unpack", e.pack("py.repro").to_str().unwrap(), dir.to_str().unwrap()]);
    assert_code(&o, 0);
    let root = dir.join("root").join(e.path().strip_prefix("/").unwrap());
    assert_eq!(fs::read_to_string(root.join("data.json")).unwrap(), "{\"v\": 3}");
    assert!(dir.join("manifest.json").is_file());
    assert!(fs::read_to_string(dir.join("stderr")).unwrap().contains("bad value 3"));
}

#[test]
fn success_writes_no_pack_unless_always() {
    let e = PackEnv::new();
    let o = e.capture("ok.repro", &[], &["sh", "-c", "echo fine"]);
    assert_code(&o, 0);
    assert!(!e.pack("ok.repro").exists());
    assert!(stderr(&o).contains("no pack written"), "{}", stderr(&o));
    let o = e.capture("ok.repro", &["--always", "-q"], &["sh", "-c", "echo fine"]);
    assert_code(&o, 0);
    let o = e.replay("ok.repro", &[]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("fine"));
}

#[test]
fn shell_pipeline_and_c_program() {
    require_cmd("gcc");
    let e = PackEnv::new();
    e.write("data.txt", "x1\nx2\ny\n");
    let script =
        "cat data.txt | grep -c x | { read n; if [ $n -lt 5 ]; then echo \"only $n matches\" >&2; exit 3; fi; }";
    let o = e.capture("sh.repro", &["-q"], &["sh", "-c", script]);
    assert_code(&o, 3);
    let o = e.replay("sh.repro", &[]);
    assert_code(&o, 0);
    assert!(stderr(&o).contains("reproduced 1/1: exit 3; stderr: only 2 matches"), "{}", stderr(&o));

    e.write("crash.c", "#include <stdio.h>\n#include <stdlib.h>\nint main(void){FILE*f=fopen(\"data.txt\",\"r\");char b[8];if(fgets(b,8,f)&&b[0]=='x'){fprintf(stderr,\"bad record %s\",b);abort();}return 0;}\n");
    let cc = std::process::Command::new("gcc").current_dir(e.path()).args(["-o", "crash", "crash.c"]).status().unwrap();
    assert!(cc.success());
    let o = e.capture("c.repro", &["-q"], &["./crash"]);
    assert_code(&o, 134);
    let o = e.replay("c.repro", &[]);
    assert_code(&o, 0);
    assert!(stderr(&o).contains("reproduced 1/1: exit 134; stderr: bad record x1"), "{}", stderr(&o));
}

#[test]
fn failures_that_depend_on_the_seed_and_the_date() {
    let e = PackEnv::new();
    let py = "import os,sys\nb = os.urandom(4).hex()\nsys.exit(f'draw {b}')\n";
    e.write("draw.py", py);
    let a = e.capture("s5.repro", &["-q", "--seed", "5"], &["python3", "draw.py"]);
    let b = e.capture("s6.repro", &["-q", "--seed", "6"], &["python3", "draw.py"]);
    assert_code(&a, 1);
    assert_ne!(stderr(&a), stderr(&b), "the seed changes the failure");
    let o = e.replay("s5.repro", &["--runs", "2"]);
    assert_code(&o, 0);
    let draw = stderr(&a).lines().next().unwrap().to_string();
    assert!(stderr(&o).contains(&format!("reproduced 2/2: exit 1; stderr: {draw}")), "{} / {draw}", stderr(&o));

    let sh = "d=$(date -u +%Y-%m-%d); case $d in 2024-02-29) echo \"leap day $d not handled\" >&2; exit 4;; esac";
    let o = e.capture("date.repro", &["-q", "--epoch", "2024-02-29T12:00:00Z"], &["sh", "-c", sh]);
    assert_code(&o, 4);
    let o = e.replay("date.repro", &[]);
    assert_code(&o, 0);
    assert!(stderr(&o).contains("stderr: leap day 2024-02-29 not handled"), "{}", stderr(&o));
}

#[test]
fn replay_stops_a_stuck_run_after_stuck_after() {
    // With STUCK set (a variation) the program reads a pipe whose writer it holds itself: the watchdog stops the
    // replay's run after --stuck-after and the replay exits 120, as `repro run` does.
    let e = PackEnv::new();
    e.write(
        "stuck.py",
        "import os, sys\nr, w = os.pipe()\nos.environ.get('STUCK') and os.read(r, 1)\nsys.exit('fails')\n",
    );
    let o = e.capture("stuck.repro", &["-q"], &["python3", "stuck.py"]);
    assert_code(&o, 1);
    assert_code(&e.replay("stuck.repro", &["--stuck-after", "1s"]), 0);
    let o = e.replay("stuck.repro", &["--stuck-after", "1s", "--env", "STUCK=1"]);
    assert_code(&o, 120);
    let err = stderr(&o);
    assert!(err.contains("[repro] run 1: stuck, stopped by the watchdog (exit 120): task "), "{err}");
    assert!(err.contains("in read on fd "), "{err}");
    let o = e.replay("stuck.repro", &["--stuck-after", "1s", "--env", "STUCK=1", "--json"]);
    assert_code(&o, 120);
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["exit_status"], 120, "{report}");
    assert!(report["runs"][0]["stuck"].as_str().is_some_and(|s| s.contains("pipe:[")), "{report}");
    let o = e.replay("stuck.repro", &["--stuck-after", "soon"]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("--stuck-after"), "{}", stderr(&o));
}

#[test]
fn two_captures_give_byte_identical_packs() {
    let e = PackEnv::new();
    e.write("fail.py", FAIL_PY);
    e.write("data.json", "{\"v\": 3}");
    assert_code(&e.capture("a.repro", &["-q"], &["python3", "fail.py"]), 1);
    assert_code(&e.capture("b.repro", &["-q"], &["python3", "fail.py"]), 1);
    let (a, b) = (fs::read(e.pack("a.repro")).unwrap(), fs::read(e.pack("b.repro")).unwrap());
    assert!(a == b, "packs differ ({} and {} bytes)", a.len(), b.len());
    // The first capture filled the frame and digest caches and the second used them; emptied, the third
    // capture compresses everything again and writes the same bytes.
    let o = e.cmd(&["pack", "cache", "--json"]);
    assert_code(&o, 0);
    let caches: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let files = |name: &str| {
        caches["caches"].as_array().unwrap().iter().find(|c| c["name"] == name).unwrap()["files"].as_u64().unwrap()
    };
    assert!(files("frames") > 10 && files("digests") == 1, "{caches}");
    let o = e.cmd(&["pack", "cache", "--clean"]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("frames") && stdout(&o).contains("removed"), "{}", stdout(&o));
    assert_code(&e.capture("c.repro", &["-q"], &["python3", "fail.py"]), 1);
    assert!(fs::read(e.pack("c.repro")).unwrap() == a, "a pack written without the caches differs");
}

#[test]
fn damaged_packs_are_rejected_with_exit_2() {
    let e = PackEnv::new();
    e.write("fail.py", FAIL_PY);
    e.write("data.json", "{\"v\": 3}");
    assert_code(&e.capture("p.repro", &["-q"], &["python3", "fail.py"]), 1);
    let p = e.pack("p.repro");
    let o = e.cmd(&["pack", "verify", p.to_str().unwrap()]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("ok"), "{}", stdout(&o));
    let bytes = fs::read(&p).unwrap();
    let t = e.pack("truncated.repro");
    fs::write(&t, &bytes[..bytes.len() * 2 / 3]).unwrap();
    for args in [vec!["pack", "verify", t.to_str().unwrap()], vec!["replay", t.to_str().unwrap()]] {
        let o = e.cmd(&args);
        assert_code(&o, 2);
        assert!(stderr(&o).contains("is truncated"), "{}", stderr(&o));
    }
    let mut flipped = bytes.clone();
    let i = flipped.len() / 2;
    flipped[i] ^= 0xff;
    let t = e.pack("flipped.repro");
    fs::write(&t, &flipped).unwrap();
    let o = e.cmd(&["pack", "verify", t.to_str().unwrap()]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains(&t.display().to_string()), "{}", stderr(&o));
    let o = e.cmd(&["inspect", e.pack("missing.repro").to_str().unwrap()]);
    assert_code(&o, 2);
}

/// The pack replays inside a root that has nothing but repro (no Python, no shell): the guest's root comes from
/// the pack alone.
#[test]
fn replay_inside_a_different_root() {
    require_cmds(&["ldd", "unshare", "busybox"]);
    let e = PackEnv::new();
    e.write("fail.py", FAIL_PY);
    e.write("data.json", "{\"v\": 3}");
    assert_code(&e.capture("p.repro", &["-q"], &["python3", "fail.py"]), 1);
    let root = e.aside.path().join("newroot");
    for d in ["proc", "dev", "sys", "oldroot", "tmp", "cache", "work", "lib64", "lib/x86_64-linux-gnu"] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    let exe = repro_path();
    fs::copy(&exe, root.join("repro")).unwrap();
    let ldd = std::process::Command::new("ldd").arg(&exe).output().unwrap();
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        let lib = line.split_whitespace().find(|w| w.starts_with('/')).map(str::to_string);
        if let Some(lib) = lib {
            let dest = root.join(lib.trim_start_matches('/'));
            fs::create_dir_all(dest.parent().unwrap()).unwrap();
            fs::copy(&lib, &dest).unwrap();
        }
    }
    fs::copy("/bin/busybox", root.join("busybox")).unwrap();
    fs::copy(e.pack("p.repro"), root.join("p.repro")).unwrap();
    assert!(!root.join("usr").exists(), "the new root has no /usr, hence no Python");
    let r = root.display();
    let script = format!(
        "set -e; mount --make-rprivate /; mount --bind {r} {r}; mount -t proc proc {r}/proc; mount --rbind /dev {r}/dev; \
         mount --rbind /sys {r}/sys; cd {r}; pivot_root . oldroot; \
         exec /busybox sh -c '/busybox umount -l /oldroot && cd /work && XDG_CACHE_HOME=/cache HOME=/work /repro replay --runs 2 /p.repro'"
    );
    let o = std::process::Command::new("unshare").args(["--mount", "--fork", "sh", "-c", &script]).output().unwrap();
    assert_code(&o, 0);
    assert!(stderr(&o).contains("[repro] reproduced 2/2: exit 1; stderr: bad value 3"), "{}", stderr(&o));
}

/// A client of a loopback HTTP server; it fails when the body is not what it expects.
const HTTP_CLIENT: &str = "import sys, urllib.request\n\
port = int(sys.argv[1])\n\
body = urllib.request.urlopen(f'http://127.0.0.1:{port}/PATH', timeout=5).read().decode()\n\
print('body', body.strip())\n\
raise SystemExit(f'unexpected body {body.strip()}')\n";

#[test]
fn network_is_taped_and_replayed_without_the_server() {
    let e = PackEnv::new();
    let site = tempfile::tempdir().unwrap();
    fs::write(site.path().join("a.txt"), "alpha\n").unwrap();
    fs::write(site.path().join("b.txt"), "beta\n").unwrap();
    e.write("client.py", &HTTP_CLIENT.replace("PATH", "a.txt"));
    let server = HttpServer::start(site.path());
    let port = server.port.to_string();
    let o = e.capture("net.repro", &["--network", "record"], &["python3", "client.py", &port]);
    assert_code(&o, 1);
    assert!(stdout(&o).contains("body alpha"), "{}{}", stdout(&o), stderr(&o));
    let port_n = server.port;
    drop(server);
    assert!(std::net::TcpStream::connect(("127.0.0.1", port_n)).is_err(), "the server is stopped");

    let o = e.cmd(&["inspect", "--json", e.pack("net.repro").to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["tapes"]["network_mode"], "record");
    assert!(v["tapes"]["network_events"].as_u64().unwrap() >= 4, "{v}");

    // Replayed with no network at all: the answers come from the tape.
    let o = e.replay("net.repro", &["--runs", "2"]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("body alpha"), "{}", stdout(&o));
    assert!(stderr(&o).contains("[repro] reproduced 2/2: exit 1; stderr: unexpected body alpha"), "{}", stderr(&o));

    // A client that sends another request diverges at its first write.
    e.write("client.py", &HTTP_CLIENT.replace("PATH", "b.txt"));
    let o = e.replay("net.repro", &["--with", "client.py"]);
    assert_code(&o, 123);
    let err = stderr(&o);
    assert!(err.contains("[repro] replay diverged from the recording: the guest wrote"), "{err}");
    assert!(err.contains("socket 0 (call 3)") && err.contains("b.txt") && err.contains("a.txt"), "{err}");
    assert!(!stdout(&o).contains("body"), "the guest was stopped before it read anything");
}

#[test]
fn a_connection_missing_from_the_network_tape_stops_the_replay() {
    let e = PackEnv::new();
    let site = tempfile::tempdir().unwrap();
    fs::write(site.path().join("a.txt"), "alpha\n").unwrap();
    e.write("client.py", &HTTP_CLIENT.replace("PATH", "a.txt"));
    let server = HttpServer::start(site.path());
    let o = e.capture("net.repro", &["--network", "record"], &["python3", "client.py", &server.port.to_string()]);
    assert_code(&o, 1);
    drop(server);
    // The tape, as `repro unpack` shows it.
    let dir = e.aside.path().join("unpacked");
    assert_code(&e.cmd(&["unpack", e.pack("net.repro").to_str().unwrap(), dir.to_str().unwrap()]), 0);
    let tape: serde_json::Value = serde_json::from_slice(&fs::read(dir.join("tapes/network.json")).unwrap()).unwrap();
    assert_eq!(tape["tape"], "network");
    let ops: Vec<&str> = tape["events"].as_array().unwrap().iter().map(|e| e["op"].as_str().unwrap()).collect();
    assert_eq!(&ops[..3], ["socket", "connect", "write"], "{tape}");
    assert!(ops.contains(&"read"), "{tape}");
    // A client that opens a second connection after the recorded one: it is not on the tape.
    let second = "import socket\ns = socket.create_connection(('127.0.0.1', port))\ns.recv(10)\nprint('body'";
    e.write("client.py", &HTTP_CLIENT.replace("PATH", "a.txt").replace("print('body'", second));
    let o = e.replay("net.repro", &["--with", "client.py"]);
    assert_code(&o, 123);
    assert!(
        stderr(&o).contains("[repro] replay diverged from the recording: the guest called socket"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn proc_reads_are_served_from_the_tape_on_replay() {
    let e = PackEnv::new();
    // The page fault counter of /proc/vmstat changes all the time; the supervisor does not pin it.
    e.write("p.sh", "while read -r k v; do [ \"$k\" = pgfault ] && echo \"load $v\"; done < /proc/vmstat\nexit 5\n");
    let o = e.capture("proc.repro", &[], &["sh", "p.sh"]);
    assert_code(&o, 5);
    let recorded = stdout(&o).lines().find(|l| l.starts_with("load ")).unwrap().to_string();
    let o = e.cmd(&["inspect", "--json", e.pack("proc.repro").to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["tapes"]["proc_reads"].as_u64().unwrap() >= 1, "{v}");
    // Replay: the taped bytes are served, whatever the load is now.
    let dir = e.aside.path().join("u");
    assert_code(&e.cmd(&["unpack", e.pack("proc.repro").to_str().unwrap(), dir.to_str().unwrap()]), 0);
    let tape = fs::read_to_string(dir.join("tapes/proc.json")).unwrap();
    assert!(tape.contains("/proc/vmstat"), "{tape}");
    let o = e.replay("proc.repro", &["--runs", "2"]);
    assert_code(&o, 0);
    for line in stdout(&o).lines().filter(|l| l.starts_with("load ")) {
        assert_eq!(line, recorded);
    }
    assert!(stdout(&o).contains(&recorded), "{}", stdout(&o));
}

#[test]
fn a_replay_sees_the_installation_times_its_capture_saw() {
    // The capture records each installed file's modification time and the replay's root gets it back: the
    // guest sees the same times, and Python uses the same .pyc files instead of compiling the modules again
    // (their sources may be in the pack as sizes only).
    require_cmd("python3");
    let e = PackEnv::new();
    e.write(
        "t.py",
        "import json, os, sys\nprint(int(os.stat(json.__file__).st_mtime), int(os.stat(os.path.dirname(json.__file__)).st_mtime))\nsys.exit(3)\n",
    );
    let o = e.capture("t.repro", &[], &["/usr/bin/python3", "-v", "t.py"]);
    assert_code(&o, 3);
    let stale = |err: &str| err.lines().filter(|l| l.contains("bytecode is stale")).count();
    let captured = stderr(&o);
    let times = stdout(&o);
    let host = |p: &str| {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(p).unwrap().mtime()
    };
    let json_file = String::from_utf8(
        std::process::Command::new("/usr/bin/python3")
            .args(["-c", "import json; print(json.__file__)"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let json_file = json_file.trim();
    let dir = std::path::Path::new(json_file).parent().unwrap().to_str().unwrap().to_string();
    assert_eq!(times.trim(), format!("{} {}", host(json_file), host(&dir)), "the capture saw the host's times");
    let o = e.replay("t.repro", &["--runs", "2"]);
    assert_code(&o, 0);
    assert!(stderr(&o).contains("reproduced 2/2"), "{}", stderr(&o));
    let runs = e.path().join(".repro/runs");
    let mut dirs: Vec<_> = fs::read_dir(&runs).unwrap().map(|d| d.unwrap().path()).collect();
    dirs.sort();
    let last = dirs.last().unwrap();
    assert_eq!(fs::read_to_string(last.join("stdout")).unwrap(), times, "the replay saw the same times");
    let replayed = fs::read_to_string(last.join("stderr")).unwrap();
    assert_eq!(stale(&replayed), stale(&captured), "as many stale .pyc files as in the capture: {replayed}");
}
