//! `repro run`: the hermetic boundary, seen from inside the guest.

use std::fs;

use crate::common::*;

#[test]
fn guest_sees_only_loopback_and_no_route() {
    let w = Workdir::new();
    let o = w.sh("cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '; echo --; ls /sys/class/net; echo --; tail -n +2 /proc/net/route | wc -l; ip -o link show | cut -d: -f2");
    assert_code(&o, 0);
    let out = stdout(&o);
    let parts: Vec<&str> = out.split("--\n").collect();
    assert_eq!(parts[0], "lo\n", "interfaces in /proc/net/dev: {out}");
    assert_eq!(parts[1], "lo\n", "interfaces in /sys/class/net: {out}");
    let rest: Vec<&str> = parts[2].lines().collect();
    assert_eq!(rest[0], "0", "routes: {out}");
    assert_eq!(rest[1].trim(), "lo", "ip link: {out}");
    // lo is up: a loopback server answers.
    let o = w.sh("python3 -c \"import socket;s=socket.socket();s.bind(('127.0.0.1',0));s.listen();c=socket.create_connection(s.getsockname());print('loopback ok')\"");
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "loopback ok\n");
}

/// A host in a network namespace made by this test answers the host, but the guest cannot reach it.
#[test]
fn guest_cannot_reach_a_host_in_a_test_network_namespace() {
    require_cmds(&["ip", "python3"]);
    let tag = format!("rpt{}", std::process::id() % 100000);
    let netns = format!("{tag}ns");
    let (veth_h, veth_n) = (format!("{tag}h"), format!("{tag}n"));
    let sh = |cmd: &str| std::process::Command::new("sh").arg("-c").arg(cmd).status().unwrap().success();
    struct Cleanup(String, String);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("ip netns pids {0} | xargs -r kill; ip netns del {0}; ip link del {1}", self.0, self.1))
                .status();
        }
    }
    let _c = Cleanup(netns.clone(), veth_h.clone());
    assert!(sh(&format!(
        "ip netns add {netns} && ip link add {veth_h} type veth peer name {veth_n} netns {netns} && \
         ip addr add 10.213.77.1/30 dev {veth_h} && ip link set {veth_h} up && \
         ip -n {netns} addr add 10.213.77.2/30 dev {veth_n} && ip -n {netns} link set {veth_n} up && \
         ip -n {netns} link set lo up"
    )));
    // A listener inside the test host.
    let mut server = std::process::Command::new("ip")
        .args(["netns", "exec", &netns, "python3", "-c"])
        .arg("import socket,time;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind(('10.213.77.2',7777));s.listen();s.settimeout(20)\ntry:\n  while True: s.accept()[0].close()\nexcept Exception: pass")
        .spawn()
        .unwrap();
    let probe = "import socket,sys\ns=socket.socket();s.settimeout(3)\ntry:\n  s.connect(('10.213.77.2',7777));print('connected')\nexcept OSError as e:\n  print('errno',e.errno)";
    let mut ok = false;
    for _ in 0..50 {
        let o = std::process::Command::new("python3").args(["-c", probe]).output().unwrap();
        if String::from_utf8_lossy(&o.stdout).trim() == "connected" {
            ok = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(ok, "the test host answers the host");
    let w = Workdir::new();
    let o = w.run(&["-q"], &["python3", "-c", probe]);
    let _ = server.kill();
    let _ = server.wait();
    assert_code(&o, 0);
    assert_eq!(stdout(&o).trim(), "errno 101", "ENETUNREACH inside the sandbox");
}

#[test]
fn identity_hostname_and_etc_files() {
    let w = Workdir::new();
    let o = w.sh("hostname; cat /proc/sys/kernel/domainname; echo $USER $HOME; cat /etc/hostname; cat /etc/hosts; grep -c nameserver /etc/resolv.conf");
    assert_code(&o, 0);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(&lines[..4], &["repro", "repro.invalid", "repro /home/repro", "repro"]);
    assert!(out.contains("127.0.0.1\tlocalhost"));
    assert!(out.contains("127.0.1.1\trepro.repro.invalid repro"));
}

#[test]
fn the_fixed_etc_files_are_read_only_and_the_run_directory_keeps_no_scratch() {
    let w = Workdir::new();
    // The init writes them into its own scratch tmpfs and binds them read-only: neither the guest's root nor a
    // remount-free write can change them, and their mode is the usual one.
    let o = w.sh("for f in hostname hosts resolv.conf; do echo x >> /etc/$f 2>/dev/null && echo \"$f written\"; \
         stat -c '%n %a' /etc/$f; done; grep -c . /etc/hostname");
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "/etc/hostname 644\n/etc/hosts 644\n/etc/resolv.conf 644\n1\n");
    // Nothing of the scratch is left in the run directory, nor anywhere on the host's side of it.
    let mut names: Vec<String> =
        fs::read_dir(w.last_run()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["changes", "changes.json", "run.json", "stderr", "stdout"]);
}

#[test]
fn environment_is_replaced_not_inherited() {
    let w = Workdir::new();
    let mut c = repro();
    c.current_dir(w.path()).env("HOST_ONLY", "leak").env("PASS_ME", "passed").args([
        "run",
        "-q",
        "--epoch",
        "2024-02-29T00:00:00Z",
        "--env",
        "PASS_ME",
        "--env",
        "SET_ME=x=y",
        "--",
        "/usr/bin/env",
    ]);
    let o = c.output().unwrap();
    assert_code(&o, 0);
    let mut got: Vec<String> = stdout(&o).lines().map(String::from).collect();
    got.sort();
    let expected = [
        "GODEBUG=randautoseed=0",
        "HOME=/home/repro",
        "LANG=C.UTF-8",
        "LC_ALL=C.UTF-8",
        "LOGNAME=repro",
        "MALLOC_ARENA_MAX=1",
        "PASS_ME=passed",
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONHASHSEED=0",
        "SET_ME=x=y",
        "SOURCE_DATE_EPOCH=1709164800",
        "TERM=dumb",
        "TZ=UTC",
        "USER=repro",
    ];
    assert_eq!(got, expected);
    // The effective environment is recorded.
    let rec: serde_json::Value = serde_json::from_slice(&fs::read(w.last_run().join("run.json")).unwrap()).unwrap();
    assert_eq!(rec["settings"]["env"]["PASS_ME"], "passed");
    assert_eq!(rec["settings"]["epoch"]["unix"], 1709164800);
    assert_eq!(rec["settings"]["epoch"]["source"], "flag");
}

#[test]
fn epoch_defaults_to_the_git_head_commit_time() {
    require_cmd("git");
    let w = Workdir::new();
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .current_dir(w.path())
            .args(["-c", "user.name=t", "-c", "user.email=t@t.invalid"])
            .args(args)
            .env("GIT_COMMITTER_DATE", "2023-12-02T00:00:00Z")
            .env("GIT_AUTHOR_DATE", "2023-12-02T00:00:00Z")
            .status()
            .unwrap()
            .success();
        assert!(ok);
    };
    git(&["init", "-q"]);
    fs::write(w.path().join("a"), "a").unwrap();
    git(&["add", "a"]);
    git(&["commit", "-qm", "a"]);
    let o = repro()
        .current_dir(w.path())
        .env_remove("SOURCE_DATE_EPOCH")
        .args(["run", "-q", "--", "sh", "-c", "echo $SOURCE_DATE_EPOCH"])
        .output()
        .unwrap();
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "1701475200\n");
    let o = repro()
        .current_dir(w.path())
        .env("SOURCE_DATE_EPOCH", "12345")
        .args(["run", "-q", "--", "sh", "-c", "echo $SOURCE_DATE_EPOCH"])
        .output()
        .unwrap();
    assert_eq!(stdout(&o), "12345\n");
}

#[test]
fn root_is_read_only_and_tmp_home_are_private() {
    let w = Workdir::new();
    let marker = w.path().join("host-tmp-marker");
    fs::write(&marker, "x").unwrap();
    let o = w.sh("touch /usr/repro-test 2>&1; touch /etc/repro-test 2>&1; ls -A /tmp | wc -l; ls -A $HOME | wc -l; echo hi > /tmp/t && cat /tmp/t; echo h > $HOME/h && cat $HOME/h; ls /dev | tr '\\n' ' '");
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("touch: cannot touch '/usr/repro-test': Read-only file system"), "{out}");
    assert!(out.contains("touch: cannot touch '/etc/repro-test': Read-only file system"), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    // The test's own directory lives under the host's /tmp: the guest's /tmp holds only the path down to it.
    assert_eq!(lines[3], "0", "$HOME is empty: {out}");
    assert_eq!(&lines[4..6], &["hi", "h"]);
    assert_eq!(lines[6], "fd full null ptmx pts random shm stderr stdin stdout tty urandom zero ");
    assert!(!std::path::Path::new("/usr/repro-test").exists());
}

#[test]
fn writes_land_in_the_overlay_unless_kept() {
    let w = Workdir::new();
    fs::write(w.path().join("keep.txt"), "original\n").unwrap();
    fs::write(w.path().join("gone.txt"), "bye\n").unwrap();
    let script = "echo changed > keep.txt; rm gone.txt; mkdir -p sub; echo new > sub/new.txt; cat keep.txt";
    let o = w.sh(script);
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "changed\n");
    // The real directory is untouched.
    assert_eq!(fs::read_to_string(w.path().join("keep.txt")).unwrap(), "original\n");
    assert!(w.path().join("gone.txt").exists());
    assert!(!w.path().join("sub").exists());
    // The run directory has the changes.
    let run = w.last_run();
    assert_eq!(fs::read_to_string(run.join("changes/keep.txt")).unwrap(), "changed\n");
    assert_eq!(fs::read_to_string(run.join("changes/sub/new.txt")).unwrap(), "new\n");
    let changes: serde_json::Value = serde_json::from_slice(&fs::read(run.join("changes.json")).unwrap()).unwrap();
    let list: Vec<(String, String)> = changes["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["path"].as_str().unwrap().to_string(), c["kind"].as_str().unwrap().to_string()))
        .collect();
    let expect = [("gone.txt", "deleted"), ("keep.txt", "modified"), ("sub", "added"), ("sub/new.txt", "added")];
    assert_eq!(list, expect.map(|(a, b)| (a.to_string(), b.to_string())).to_vec());
    // --keep-changes copies them back.
    let o = w.run(&["-q", "--keep-changes"], &["sh", "-c", script]);
    assert_code(&o, 0);
    assert_eq!(fs::read_to_string(w.path().join("keep.txt")).unwrap(), "changed\n");
    assert!(!w.path().join("gone.txt").exists());
    assert_eq!(fs::read_to_string(w.path().join("sub/new.txt")).unwrap(), "new\n");
}

#[test]
fn state_directory_is_hidden_and_movable() {
    let w = Workdir::new();
    let o = w.sh("ls -A .repro | wc -l");
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "0\n", "the guest does not see the run directories");
    let state = tempfile::tempdir().unwrap();
    let o = repro()
        .current_dir(w.path())
        .env("REPRO_STATE_DIR", state.path())
        .args(["run", "-q", "--", "true"])
        .output()
        .unwrap();
    assert_code(&o, 0);
    assert_eq!(fs::read_dir(state.path().join("runs")).unwrap().count(), 1);
    let other = tempfile::tempdir().unwrap();
    let o = w.run(&["-q", "--state-dir", other.path().to_str().unwrap()], &["true"]);
    assert_code(&o, 0);
    assert_eq!(fs::read_dir(other.path().join("runs")).unwrap().count(), 1);
}

#[test]
fn binds_read_only_and_writable() {
    let w = Workdir::new();
    let data = tempfile::tempdir().unwrap();
    fs::write(data.path().join("in.txt"), "data\n").unwrap();
    let ro = format!("{}:/tmp/ro", data.path().display());
    let rw = format!("{}:/home/repro/rw:rw", data.path().display());
    let o = w.run(
        &["-q", "--bind", &ro, "--bind", &rw],
        &["sh", "-c", "cat /tmp/ro/in.txt; touch /tmp/ro/x 2>&1; echo out > /home/repro/rw/out.txt"],
    );
    assert_code(&o, 0);
    assert!(stdout(&o).contains("data\n"));
    assert!(stdout(&o).contains("Read-only file system"));
    assert_eq!(fs::read_to_string(data.path().join("out.txt")).unwrap(), "out\n");
}

#[test]
fn process_settings_umask_aslr_cpus_rlimits() {
    let w = Workdir::new();
    let o = w.sh("umask; cat /proc/self/personality; nproc; ulimit -n; ulimit -c");
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "0022\n00040000\n1\n1024\n0\n");
    if repro_sys_cpus() >= 2 {
        let o = w.run(&["-q", "--cpus", "2"], &["nproc"]);
        assert_eq!(stdout(&o), "2\n");
    }
}

fn repro_sys_cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

#[test]
fn memory_limit_is_enforced() {
    let w = Workdir::new();
    let o =
        w.run(&["-q", "--memory", "64M"], &["python3", "-c", "b = bytearray(256 * 1024 * 1024); print('allocated')"]);
    assert_code(&o, 137);
    assert!(!stdout(&o).contains("allocated"));
    let rec: serde_json::Value = serde_json::from_slice(&fs::read(w.last_run().join("run.json")).unwrap()).unwrap();
    assert_eq!(rec["settings"]["memory_bytes"], 64 << 20);
    assert_eq!(rec["outcome"]["kind"], "signaled");
    assert_eq!(rec["outcome"]["name"], "SIGKILL");
    // Within the limit it runs.
    let o =
        w.run(&["-q", "--memory", "256M"], &["python3", "-c", "b = bytearray(32 * 1024 * 1024); print('allocated')"]);
    assert_code(&o, 0);
    // The guest is in the run's cgroup (the init joins it while it assembles the root) and sees it as the root
    // of its cgroup namespace (entered after the join): every controller's line ends in '/'.
    let o = w.run(&["-q"], &["sh", "-c", "cat /proc/self/cgroup; cat /proc/1/cgroup"]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(!out.is_empty() && out.lines().all(|l| l.ends_with(":/")), "{out}");
    let rec: serde_json::Value = serde_json::from_slice(&fs::read(w.last_run().join("run.json")).unwrap()).unwrap();
    if let Some(cg) = rec["enforcement"]["cgroup"].as_str() {
        // The host sees the guest's processes there while it runs: the record names the cgroup it was in.
        assert!(cg.contains(&format!("repro-{}", rec["id"].as_str().unwrap())), "{cg}");
    }
}

#[test]
fn exit_codes_and_signals_map_as_documented() {
    let w = Workdir::new();
    assert_code(&w.sh("exit 7"), 7);
    assert_code(&w.sh("exit 0"), 0);
    assert_code(&w.sh("kill -TERM $$"), 143);
    assert_code(&w.sh("kill -SEGV $$"), 139);
    let o = w.run(&[], &["no-such-command-xyz"]);
    assert_code(&o, 127);
    assert!(
        stderr(&o).contains("repro: cannot execute 'no-such-command-xyz': No such file or directory"),
        "{}",
        stderr(&o)
    );
    fs::write(w.path().join("script.sh"), "#!/bin/sh\necho hi\n").unwrap();
    let o = w.run(&[], &["./script.sh"]);
    assert_code(&o, 126);
    assert!(stderr(&o).contains("repro: cannot execute './script.sh': Permission denied"), "{}", stderr(&o));
    let rec: serde_json::Value = serde_json::from_slice(&fs::read(w.last_run().join("run.json")).unwrap()).unwrap();
    assert_eq!(rec["outcome"]["kind"], "exec-failed");
    assert_eq!(rec["exit_status"], 126);
}

#[test]
fn output_passes_through_and_is_saved() {
    let w = Workdir::new();
    let o = w.sh("echo to-stdout; echo to-stderr >&2");
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "to-stdout\n");
    assert!(stderr(&o).starts_with("to-stderr\n"));
    let run = w.last_run();
    assert_eq!(fs::read_to_string(run.join("stdout")).unwrap(), "to-stdout\n");
    assert_eq!(fs::read_to_string(run.join("stderr")).unwrap(), "to-stderr\n");
}

#[test]
fn run_directory_is_complete_and_listed() {
    let w = Workdir::new();
    let o = w.run(&["--seed", "7"], &["sh", "-c", "echo hi; exit 3"]);
    assert_code(&o, 3);
    let run = w.last_run();
    for f in ["run.json", "stdout", "stderr", "changes.json", "changes"] {
        assert!(run.join(f).exists(), "{f} exists");
    }
    for f in [
        "INCOMPLETE",
        ".scratch",
        ".root",
        ".layer",
        ".etc",
        ".stage",
        ".work",
        "upper",
        ".init.json",
        ".init-result.json",
    ] {
        assert!(!run.join(f).exists(), "{f} is gone");
    }
    let id = run.file_name().unwrap().to_str().unwrap().to_string();
    assert!(stderr(&o).contains("repro: exit 3 in "), "{}", stderr(&o));
    let rec: serde_json::Value = serde_json::from_slice(&fs::read(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(rec["id"], id.as_str());
    assert_eq!(rec["exit_status"], 3);
    assert_eq!(rec["settings"]["seed"], 7);
    assert_eq!(rec["settings"]["command"], serde_json::json!(["sh", "-c", "echo hi; exit 3"]));
    assert_eq!(rec["repro_version"], env!("CARGO_PKG_VERSION"));
    let o = repro().current_dir(w.path()).args(["runs"]).output().unwrap();
    assert_code(&o, 0);
    assert!(stdout(&o).contains(&id) && stdout(&o).contains("exit 3"), "{}", stdout(&o));
    let o = repro().current_dir(w.path()).args(["show", "last", "--json"]).output().unwrap();
    assert_code(&o, 0);
    let shown: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(shown, rec);
    let o = repro().current_dir(w.path()).args(["show", &id[..22]]).output().unwrap();
    assert_code(&o, 0);
    assert!(stdout(&o).contains("outcome   exit 3"), "{}", stdout(&o));
    let o = repro().current_dir(w.path()).args(["show", "nope"]).output().unwrap();
    assert_code(&o, 2);
    assert!(stderr(&o).contains("no run matches 'nope'"));
    // --json: the record alone on stdout.
    let o = w.run(&["--json"], &["sh", "-c", "echo not-on-stdout"]);
    assert_code(&o, 0);
    let rec: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rec["stdout_bytes"], 14);
}

#[test]
fn bad_input_is_a_usage_error() {
    let w = Workdir::new();
    let cases: &[(&[&str], &str)] = &[
        (&["run"], "the following required arguments were not provided"),
        (&["run", "--no-such-option", "--", "true"], "unexpected argument '--no-such-option'"),
        (&["run", "--epoch", "soon", "--", "true"], "--epoch: 'soon' is not a date: expected Unix seconds"),
        (&["run", "--memory", "lots", "--", "true"], "--memory: 'lots' is not a size"),
        (
            &["run", "--bind", "/no/such/dir", "--", "true"],
            "--bind '/no/such/dir': host path '/no/such/dir' does not exist",
        ),
        (&["run", "--env", "1BAD", "--", "true"], "--env '1BAD': expected NAME or NAME=VALUE"),
        (&["run", "--cpus", "0", "--", "true"], "--cpus: expected a number of CPUs of at least 1"),
        (&["frobnicate"], "unrecognized subcommand 'frobnicate'"),
    ];
    for (args, msg) in cases {
        let o = repro().current_dir(w.path()).args(*args).output().unwrap();
        assert_code(&o, 2);
        assert!(stderr(&o).contains(msg), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}");
    }
    assert!(!w.path().join(".repro").exists(), "no run directory for a usage error");
    let o = repro().current_dir("/").args(["run", "--", "true"]).output().unwrap();
    assert_code(&o, 2);
    assert!(stderr(&o).contains("working directory: '/' cannot be the sandbox's writable directory"), "{}", stderr(&o));
}

/// Not root: the sandbox adds a user namespace; the boundary is the same, the memory limit is reported as not
/// enforced (an unprivileged user cannot create a cgroup here).
#[test]
fn unprivileged_user_gets_a_user_namespace() {
    require_cmd("setpriv");
    use std::os::unix::fs::PermissionsExt;
    let w = Workdir::new();
    // A copy of the binary and a directory that the unprivileged user can reach.
    let bin_dir = tempfile::tempdir().unwrap();
    fs::set_permissions(bin_dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let bin = bin_dir.path().join("repro");
    fs::copy(repro_path(), &bin).unwrap();
    fs::set_permissions(w.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let o = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .args([
            "run",
            "-q",
            "--",
            "sh",
            "-c",
            "hostname; ls /sys/class/net; echo made > new.txt; cat new.txt; touch /usr/x 2>&1; true",
        ])
        .current_dir(w.path())
        .output()
        .unwrap();
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.starts_with("repro\nlo\nmade\n"), "{out}");
    assert!(out.contains("Read-only file system"), "{out}");
    assert!(!w.path().join("new.txt").exists());
    let run = w.last_run();
    assert_eq!(fs::read_to_string(run.join("changes/new.txt")).unwrap(), "made\n");
    let rec: serde_json::Value = serde_json::from_slice(&fs::read(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(rec["settings"]["user_namespace"], true);
    let warned = rec["enforcement"]["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap().starts_with("memory limit not enforced"));
    assert_eq!(warned, rec["enforcement"]["cgroup"].is_null());
}
