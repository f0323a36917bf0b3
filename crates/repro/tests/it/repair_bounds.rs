//! `repro repair` against agents that make absurd trees (issue 40): 100,000 files, a 1 GB sparse file, a symbolic
//! link out of the tree. Each is refused with a clear reason (or bounded), the repair ends under the hang guard,
//! and nothing lands outside the size- and inode-limited tmpfs the project and the state live on.

use std::fs;
use std::path::Path;
use std::time::Instant;

use serde_json::Value;

use crate::common::*;

/// The make-plain corpus project on `fs`, and a pack of its failing `make -s check`.
fn captured(fs: &SmallFs) -> (std::path::PathBuf, std::path::PathBuf) {
    require_cmd("make");
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/repair-corpus/make-plain/project");
    let project = fs.path().join("project");
    let st = std::process::Command::new("cp").arg("-r").arg(&corpus).arg(&project).status();
    assert!(st.unwrap().success());
    let pack = fs.path().join("failure.repro");
    let o = repro()
        .current_dir(&project)
        .args(["capture", "-o"])
        .arg(&pack)
        .args(["--", "/usr/bin/make", "-s", "check"])
        .timeout(HANG_GUARD)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "the planted bug fails: {}", stderr(&o));
    (project, pack)
}

/// One iteration of `agent` (a shell script body); the summary, the console and how long it took.
fn repair_once(project: &Path, pack: &Path, agent: &str) -> (Value, String, f64) {
    let script = project.parent().unwrap().join("agent.sh");
    fs::write(&script, agent).unwrap();
    let started = Instant::now();
    let o = repro()
        .current_dir(project)
        .arg("repair")
        .arg(pack)
        .args(["--json", "--max-iterations", "1", "--agent"])
        .arg(format!("sh {}", script.display()))
        .timeout(HANG_GUARD)
        .output()
        .unwrap();
    let secs = started.elapsed().as_secs_f64();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    assert_eq!(o.status.code(), Some(1), "refused, not an error: {}", stderr(&o));
    assert_eq!(v["outcome"], "iterations-exhausted", "{v:#}");
    assert!(v["patch"].is_null());
    (v, stderr(&o), secs)
}

fn refused(v: &Value) -> String {
    v["iterations"][0]["refused_because"].to_string()
}

#[test]
fn agents_that_make_absurd_trees_are_refused_with_a_reason() {
    let fs = SmallFs::mount("repro-repair-bounds-", "size=768m,nr_inodes=400000");
    let (project, pack) = captured(&fs);

    // 100,000 files: past the snapshot's limit, the iteration is refused naming it (not an error of the repair).
    let (v, _, secs) = repair_once(
        &project,
        &pack,
        "mkdir junk && cd junk && i=0; while [ $i -lt 100 ]; do mkdir d$i; (cd d$i && seq 1 1000 | xargs touch); \
         i=$((i+1)); done\n",
    );
    let why = refused(&v);
    assert!(why.contains("the working copy cannot be judged") && why.contains("more than 100000 entries"), "{v:#}");
    eprintln!("bounds | 100,000 files | {secs:.1} s | {why}");

    // A 1 GB sparse file: too large to diff, the diff-too-large gate fires (and the failure is still there).
    let (v, _, secs) = repair_once(&project, &pack, "truncate -s 1G big.bin\n");
    let why = refused(&v);
    assert!(why.contains("gate diff-too-large") && why.contains("big.bin"), "{v:#}");
    eprintln!("bounds | 1 GB sparse file | {secs:.1} s | {why}");

    // A link out of the tree: refused before any replay lays it over the pack (a replay would bind its target).
    let (v, _, secs) = repair_once(&project, &pack, "ln -s /etc/shadow leak.txt\nln -s ../../x tests/up\n");
    let why = refused(&v);
    assert!(why.contains("symbolic links out of the working tree") && why.contains("leak.txt -> /etc/shadow"), "{v:#}");
    assert!(why.contains("tests/up -> ../../x"), "{v:#}");
    assert!(v["iterations"][0]["replays"].as_array().unwrap().is_empty(), "no replay ran: {v:#}");
    eprintln!("bounds | symlink out of the tree | {secs:.1} s | {why}");

    // The project itself was never written.
    assert!(!project.join("junk").exists() && !project.join("big.bin").exists() && !project.join("leak.txt").exists());
}
