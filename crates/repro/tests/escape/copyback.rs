//! Escape attempts through what the guest leaves in the working directory (see main.rs for the rules): the
//! collection of its changes and their copies (to the run directory, back with `--keep-changes`) read the
//! guest's layer as hostile input. A link planted where repro writes is never written through, a fifo never
//! blocks, a socket never ends the run without its record, a sparse file never takes more than the layer held.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::Value;

use crate::common::{stderr, stdout, wait_bounded};
#[allow(unused_imports)]
use crate::harness::*;

const CANARY_TEXT: &str = "canary: untouched\n";

/// The only run directory below `work`.
fn last_run(work: &Path) -> PathBuf {
    let runs = work.join(".repro/runs");
    let all: Vec<PathBuf> =
        fs::read_dir(&runs).unwrap_or_else(|e| panic!("{}: {e}", runs.display())).map(|e| e.unwrap().path()).collect();
    assert_eq!(all.len(), 1, "one run directory: {all:?}");
    all[0].clone()
}

fn json(p: &Path) -> Value {
    serde_json::from_slice(&fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

/// The `skipped` entries of the run's changes.json, as (path, file kind, reason).
fn skipped(run: &Path) -> Vec<(String, String, String)> {
    let c = json(&run.join("changes.json"));
    c["skipped"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    let f = |k: &str| s[k].as_str().unwrap_or_default().to_string();
                    (f("path"), f("file"), f("reason"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A tmpfs holding `work/` (the working directory), `canary/keep` (0666, in a 0777 directory: writable by both
/// callers, so that only repro's care keeps it unchanged) and `pid/` (bound into the guest).
fn world(caller: Caller) -> (Tmpfs, PathBuf) {
    let t = Tmpfs::mount("256m", 4096);
    let p = |n: &str| t.path().join(n);
    for d in ["work", "canary", "pid"] {
        fs::create_dir(p(d)).unwrap();
        let mode = if caller == Caller::Unprivileged || d == "canary" { 0o777 } else { 0o755 };
        fs::set_permissions(p(d), fs::Permissions::from_mode(mode)).unwrap();
    }
    fs::write(p("canary/keep"), CANARY_TEXT).unwrap();
    fs::set_permissions(p("canary/keep"), fs::Permissions::from_mode(0o666)).unwrap();
    let work = p("work");
    (t, work)
}

/// The guest plants a link named as repro's temporary file was (`.repro-keep-<repro's pid>`, the pid handed to
/// it through a read-only bind once repro started) pointing at a file outside the working directory, then
/// leaves a new file sorted after it. `--keep-changes` copies the file back: the outside file keeps its
/// content, the link comes back as a link, the new file as a file.
#[test]
fn keep_changes_never_writes_through_a_planted_link() {
    for caller in CALLERS {
        let (t, work) = world(caller);
        let canary = t.path().join("canary/keep");
        let pid_dir = t.path().join("pid");
        let script = format!(
            "i=0; while [ ! -s /run/pid/pid ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done
             p=$(cat /run/pid/pid); ln -s {c} .repro-keep-$p && ln -s {c} .repro-tmp-x && echo planted=$p
             echo guest-bytes > zz-payload",
            c = canary.display()
        );
        let mut c = repro_as(caller, &work);
        c.args(["run", "-q", "--keep-changes", "--bind"])
            .arg(format!("{}:/run/pid", pid_dir.display()))
            .args(["--", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = c.spawn().expect("repro starts");
        // setpriv execs repro: the child's pid is repro's in both cases.
        fs::write(pid_dir.join("pid"), child.id().to_string()).unwrap();
        let o = wait_bounded(child, "repro run --keep-changes");
        let ctx = format!("{caller:?}\nstdout: {}\nstderr: {}", stdout(&o), stderr(&o));
        assert_eq!(o.status.code(), Some(0), "{ctx}");
        assert!(stdout(&o).contains(&format!("planted={}", o_pid(&pid_dir))), "the link was planted: {ctx}");
        assert_eq!(fs::read_to_string(&canary).unwrap(), CANARY_TEXT, "the outside file was written: {ctx}");
        assert_eq!(fs::read_to_string(work.join("zz-payload")).unwrap(), "guest-bytes\n", "{ctx}");
        let link = work.join(format!(".repro-keep-{}", o_pid(&pid_dir)));
        assert_eq!(fs::read_link(&link).unwrap(), canary, "the link is kept as a link: {ctx}");
        // Nothing but what the guest made is left in the working directory (no temporary file).
        let mut names: Vec<String> =
            fs::read_dir(&work).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        let expected = [".repro", &format!(".repro-keep-{}", o_pid(&pid_dir)), ".repro-tmp-x", "zz-payload"];
        assert_eq!(names, expected, "{ctx}");
    }
}

fn o_pid(pid_dir: &Path) -> String {
    fs::read_to_string(pid_dir.join("pid")).unwrap()
}

/// A fifo left in the working directory: the run ends (bounded by `timeout`) with the guest's status, is
/// recorded, and the fifo is listed as skipped (never opened, never copied).
#[test]
fn a_fifo_left_behind_never_blocks_the_run() {
    for caller in CALLERS {
        let (_t, work) = world(caller);
        // Not `sh_as`: its `timeout` only sends SIGTERM, and a repro stuck opening the fifo stays; this kills it.
        let mut c = repro_as(caller, &work);
        c.args(["run", "-q", "--keep-changes", "--", "sh", "-c", "mkfifo f && mkdir d && mkfifo d/g && exit 7"]);
        let child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("repro starts");
        let o = wait_bounded(child, "repro run with a fifo left behind");
        let ctx = format!("{caller:?}\nstdout: {}\nstderr: {}", stdout(&o), stderr(&o));
        assert_eq!(o.status.code(), Some(7), "{ctx}");
        let run = last_run(&work);
        let record = json(&run.join("run.json"));
        assert_eq!(record["exit_status"], 7, "{ctx}");
        assert_eq!(record["changes"]["skipped"], 2, "{ctx}");
        let s = skipped(&run);
        assert!(s.contains(&("f".into(), "fifo".into(), "special-file".into())), "{s:?} {ctx}");
        assert!(s.contains(&("d/g".into(), "fifo".into(), "special-file".into())), "{s:?} {ctx}");
        assert!(!run.join("changes/f").exists() && !work.join("f").exists(), "{ctx}");
        assert!(work.join("d").is_dir(), "the directory is kept: {ctx}");
        assert!(stderr(&o).contains("not copied"), "said on stderr: {ctx}");
    }
}

/// A UNIX socket left in the working directory: the run's status is the guest's and the run is recorded.
#[test]
fn a_socket_left_behind_does_not_end_the_run_without_a_record() {
    crate::common::require_cmd("python3");
    for caller in CALLERS {
        let (_t, work) = world(caller);
        let script = "python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"s\")' && exit 5";
        let o = sh_as(caller, &work, &[], script);
        let ctx = format!("{caller:?}\nstdout: {}\nstderr: {}", stdout(&o), stderr(&o));
        assert_eq!(o.status.code(), Some(5), "{ctx}");
        let run = last_run(&work);
        assert_eq!(json(&run.join("run.json"))["exit_status"], 5, "{ctx}");
        assert_eq!(skipped(&run), vec![("s".into(), "socket".into(), "special-file".into())], "{ctx}");
    }
}

/// Bytes a directory takes on its filesystem (`du -sk`).
fn du_kib(p: &Path) -> u64 {
    let o = std::process::Command::new("du").arg("-sk").arg(p).output().expect("du runs");
    String::from_utf8_lossy(&o.stdout).split_whitespace().next().unwrap().parse().unwrap()
}

/// `--disk 16M`: a 1 GiB sparse file takes nothing in the layer and nothing in the run directory (recorded as
/// too large, not copied); a 12 MiB sparse file within the bound is copied with its holes (its record's hash is
/// over its logical content).
#[test]
fn a_sparse_file_never_inflates_the_run_directory() {
    for caller in CALLERS {
        let (_t, work) = world(caller);
        let script = "truncate -s 1G big && truncate -s 12M part && echo tail >> part && exit 0";
        let o = sh_as(caller, &work, &["--disk", "16M"], script);
        let ctx = format!("{caller:?}\nstdout: {}\nstderr: {}", stdout(&o), stderr(&o));
        assert_eq!(o.status.code(), Some(0), "{ctx}");
        let run = last_run(&work);
        let kib = du_kib(&run);
        assert!(kib < 1024, "the run directory takes {kib} KiB: {ctx}");
        assert_eq!(skipped(&run), vec![("big".into(), "file".into(), "too-large".into())], "{ctx}");
        let part = run.join("changes/part");
        let len = fs::metadata(&part).unwrap().len();
        assert_eq!(len, (12 << 20) + 5, "{ctx}");
        let changes = json(&run.join("changes.json"));
        let rec = changes["changes"].as_array().unwrap().iter().find(|c| c["path"] == "part").unwrap().clone();
        let mut expected = vec![0u8; 12 << 20];
        expected.extend_from_slice(b"tail\n");
        assert_eq!(rec["blake3"], blake3::hash(&expected).to_hex().to_string(), "{ctx}");
        assert_eq!(fs::read(&part).unwrap(), expected, "{ctx}");
        let big = changes["changes"].as_array().unwrap().iter().find(|c| c["path"] == "big").unwrap().clone();
        assert_eq!(big["size"], 1u64 << 30, "{ctx}");
    }
}
