//! The workload helpers of examples/chaos/lib (history.sh, history.py) write histories this crate reads.
use std::path::{Path, PathBuf};
use std::process::Command;

use repro_history::{check_kv, check_register, parse, LinearOptions, Outcome, Process, Validity};
use serde_json::json;

fn lib() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/chaos/lib")
}

fn run(program: &str, args: &[&str], history: &Path) {
    let out = Command::new(program)
        .args(args)
        .env("HISTORY_FILE", history)
        .env("PYTHONPATH", lib())
        .env("HELPERS", lib())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} (this test needs bash and python3 on PATH): {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn bash(script: &str, history: &Path) {
    run("bash", &["-c", &format!("set -eu; source \"$HELPERS/history.sh\"\n{script}")], history);
}

fn python(script: &str, history: &Path) {
    run("python3", &["-c", &format!("from history import History\nh = History()\n{script}")], history);
}

#[test]
fn shell_and_python_write_one_history() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("history.jsonl");
    bash(
        r#"history_op 0 invoke write 1
history_op 0 ok write 1
history_op web-1 invoke write "$(printf 'say "hi"\n\tand\\go\001')" k1
history_op web-1 ok write "$(printf 'say "hi"\n\tand\\go\001')" k1
history_op 2 invoke cas '[1, 2]'
history_op 2 fail cas '[1, 2]'
history_op 3 invoke write 42
"#,
        &file,
    );
    python(
        r#"h.invoke(0, "read")
h.ok(0, "read", 1)
h.invoke("web-1", "read", key="k1")
h.ok("web-1", "read", 'say "hi"\n\tand\\go\x01', key="k1")
h.invoke(4, "write", {"nested": ["é", None]})
h.info(4, "write", {"nested": ["é", None]})
"#,
        &file,
    );
    let text = std::fs::read_to_string(&file).unwrap();
    let h = parse("history.jsonl", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(h.ops.len(), 7, "{text}");
    let w = &h.ops[1];
    assert_eq!(w.process, Process::Name("web-1".into()));
    assert_eq!(w.value, json!("say \"hi\"\n\tand\\go\u{1}"));
    assert_eq!(w.key.as_deref(), Some("k1"));
    assert_eq!(h.ops[2].value, json!([1, 2]));
    assert_eq!(h.ops[2].outcome, Outcome::Fail);
    // Never completed: info.
    assert_eq!((h.ops[3].value.clone(), h.ops[3].outcome), (json!(42), Outcome::Info));
    // Process 0's read (python) after its write (bash): one clock, so the times are in order.
    let read = &h.ops[4];
    assert_eq!((read.process.clone(), read.result.clone()), (Process::Int(0), json!(1)));
    assert!(read.call >= h.ops[0].ret.unwrap());
    assert_eq!(h.ops[6].value, json!({"nested": ["é", null]}));
    let keyed = repro_history::History::from_ops("k", h.ops.iter().filter(|o| o.key.is_some()).cloned().collect());
    assert_eq!(check_kv(&keyed, &LinearOptions::default()).unwrap().valid, Validity::Valid);
    // Process 0's write (bash) and read (python), and the failed cas.
    let register = repro_history::History::from_ops(
        "r",
        h.ops.iter().filter(|o| matches!(o.process, Process::Int(0) | Process::Int(2))).cloned().collect(),
    );
    let c = check_register(&register, &LinearOptions::default()).unwrap();
    assert_eq!(c.valid, Validity::Valid, "{}", c.summary);
}

#[test]
fn concurrent_appends_do_not_interleave() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("history.jsonl");
    let python_writers: Vec<_> = (0..4)
        .map(|p| {
            let script = format!(
                "from history import History\nh = History()\nfor i in range(300):\n    \
                 h.invoke({p}, 'add', 'x' * 200 + str(i))\n    h.ok({p}, 'add', 'x' * 200 + str(i))\n"
            );
            Command::new("python3")
                .args(["-c", &script])
                .env("HISTORY_FILE", &file)
                .env("PYTHONPATH", lib())
                .spawn()
                .expect("cannot run python3 (this test needs it on PATH)")
        })
        .collect();
    let shell_writers: Vec<_> = (10..13)
        .map(|p| {
            let script = format!(
                "set -eu; source \"$HELPERS/history.sh\"; for i in $(seq 20); do history_op {p} invoke add \"s$i\"; \
                 history_op {p} ok add \"s$i\"; done"
            );
            Command::new("bash")
                .args(["-c", &script])
                .env("HISTORY_FILE", &file)
                .env("HELPERS", lib())
                .spawn()
                .expect("cannot run bash")
        })
        .collect();
    for mut c in python_writers.into_iter().chain(shell_writers) {
        assert!(c.wait().unwrap().success());
    }
    let text = std::fs::read_to_string(&file).unwrap();
    let h = parse("history.jsonl", &text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(h.ops.len(), 4 * 300 + 3 * 20);
    assert!(h.ops.iter().all(|o| o.outcome == Outcome::Ok));
}

#[test]
fn the_shell_helper_refuses_what_it_cannot_write_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("history.jsonl");
    let out = Command::new("bash")
        .args([
            "-c",
            "source \"$HELPERS/history.sh\"; history_op 0 invoke write \"$(head -c 5000 /dev/zero | tr '\\0' x)\"",
        ])
        .env("HISTORY_FILE", &file)
        .env("HELPERS", lib())
        .output()
        .expect("cannot run bash");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("over the 4096 bytes bash writes at once"));
    assert!(!file.exists() || std::fs::read_to_string(&file).unwrap().is_empty());
    let out = Command::new("bash")
        .args(["-c", "source \"$HELPERS/history.sh\"; history_op 0 okk write 1"])
        .env("HISTORY_FILE", &file)
        .env("HELPERS", lib())
        .output()
        .expect("cannot run bash");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TYPE must be invoke, ok, fail or info"));
}
