//! Companions: a fix replayed over a pack (`repro replay --with`) needs files the failing run never touched:
//! rustdoc once a crate's unit tests pass, /bin/sh once a Makefile recipe gains a shell operator. A capture
//! packs them (the manifest says why); `--no-companions` shows the failure they prevent.

use std::fs;
use std::process::Output;

use crate::common::*;

fn capture(w: &Workdir, pack: &str, extra: &[&str], cmd: &[&str]) {
    let o = repro()
        .current_dir(w.path())
        .args(["capture", "-q", "-o", pack])
        .args(extra)
        .arg("--")
        .args(cmd)
        .timeout(HANG_GUARD)
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0), "the capture records a failure: {}", stderr(&o));
    assert!(w.path().join(pack).is_file(), "{}", stderr(&o));
}

fn replay_with(w: &Workdir, pack: &str, with: &[&str]) -> (Output, serde_json::Value) {
    let mut c = repro();
    c.current_dir(w.path()).args(["replay", "--json", pack]);
    for p in with {
        c.args(["--with", p]);
    }
    let o = c.timeout(HANG_GUARD).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    (o, v)
}

fn manifest(w: &Workdir, pack: &str) -> serde_json::Value {
    // A pack is a tar archive whose first member is its manifest (docs/pack-format.md).
    let o =
        std::process::Command::new("tar").current_dir(w.path()).args(["-xOf", pack, "manifest.json"]).output().unwrap();
    assert_code(&o, 0);
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn a_fixed_crate_runs_its_doc_tests_with_the_packed_rustdoc() {
    require_cmd("cargo");
    let w = Workdir::new();
    fs::write(w.path().join("Cargo.toml"), "[package]\nname = \"calc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n")
        .unwrap();
    fs::create_dir(w.path().join("src")).unwrap();
    let lib = |op: &str| {
        format!(
            "/// Adds.\npub fn add(a: i32, b: i32) -> i32 {{\n    a {op} b\n}}\n\n#[cfg(test)]\nmod tests {{\n    \
             #[test]\n    fn adds() {{\n        assert_eq!(super::add(2, 3), 5);\n    }}\n}}\n"
        )
    };
    fs::write(w.path().join("src/lib.rs"), lib("-")).unwrap();
    let cargo = ["cargo", "test", "--offline"];
    capture(&w, "full.repro", &[], &cargo);
    capture(&w, "bare.repro", &["--no-companions"], &cargo);
    let m = manifest(&w, "full.repro");
    let companions = m["companions"].as_array().expect("companions recorded");
    assert!(
        companions.iter().any(|c| c["path"].as_str().unwrap().ends_with("/bin/rustdoc")
            && c["reason"].as_str().unwrap().contains("doc-tests")),
        "{companions:?}"
    );
    assert!(manifest(&w, "bare.repro").get("companions").is_none());

    fs::write(w.path().join("src/lib.rs"), lib("+")).unwrap();
    let (o, v) = replay_with(&w, "full.repro", &["src/lib.rs"]);
    assert_eq!(v["runs"][0]["exit_status"], 0, "{}", stderr(&o));
    assert_eq!(v["reproduced"], 0);
    let (o, v) = replay_with(&w, "bare.repro", &["src/lib.rs"]);
    assert_eq!(v["runs"][0]["exit_status"], 101, "without companions the doc-tests cannot start: {}", stderr(&o));
    let guest_stderr =
        fs::read_to_string(std::path::Path::new(v["runs"][0]["run_dir"].as_str().unwrap()).join("stderr")).unwrap();
    assert!(guest_stderr.contains("could not execute process `rustdoc"), "{guest_stderr}");
}

#[test]
fn a_recipe_that_gains_a_shell_operator_runs_the_packed_shell() {
    require_cmd("make");
    let w = Workdir::new();
    fs::write(w.path().join("Makefile"), "check:\n\tgrep -q ok input.txt\n").unwrap();
    fs::write(w.path().join("input.txt"), "bad\n").unwrap();
    capture(&w, "full.repro", &[], &["make"]);
    capture(&w, "bare.repro", &["--no-companions"], &["make"]);
    // make runs a recipe without shell operators itself: the failing run never touched /bin/sh.
    let bare = manifest(&w, "bare.repro");
    let files = bare["files"].as_array().unwrap();
    assert!(!files.iter().any(|f| f["path"] == "/usr/bin/dash" || f["path"] == "/bin/dash"), "{files:?}");
    let m = manifest(&w, "full.repro");
    assert_eq!(m["companions"][0]["path"], "/bin/sh", "{}", m["companions"]);

    fs::write(w.path().join("Makefile"), "check:\n\tgrep -q ok input.txt && echo fixed\n").unwrap();
    fs::write(w.path().join("input.txt"), "ok\n").unwrap();
    let (o, v) = replay_with(&w, "full.repro", &["Makefile", "input.txt"]);
    assert_eq!(v["runs"][0]["exit_status"], 0, "{}", stderr(&o));
    let (_, v) = replay_with(&w, "bare.repro", &["Makefile", "input.txt"]);
    let tail = v["runs"][0]["signature"]["stderr_tail"].to_string();
    assert!(tail.contains("/bin/sh: No such file"), "{tail}");
}
