//! The command line itself: help, version, completions.

use crate::common::*;

#[test]
fn version_and_help() {
    let o = repro().arg("--version").output().unwrap();
    assert_code(&o, 0);
    assert_eq!(stdout(&o), format!("repro {}\n", env!("CARGO_PKG_VERSION")));
    let o = repro().arg("--help").output().unwrap();
    assert_code(&o, 0);
    for cmd in ["run", "runs", "show", "doctor", "chaos", "completions"] {
        assert!(stdout(&o).contains(&format!("  {cmd}")), "{cmd} in help");
    }
    assert!(!stdout(&o).contains("__init"), "internal commands are hidden");
    let o = repro().args(["help", "run"]).output().unwrap();
    assert_code(&o, 0);
    assert!(stdout(&o).contains("--keep-changes"));
    assert!(stdout(&o).contains("HOST[:GUEST][:ro|rw]"));
}

#[test]
fn completions_for_each_shell() {
    for (shell, needle) in [("bash", "complete -F"), ("zsh", "#compdef repro"), ("fish", "complete -c repro")] {
        let o = repro().args(["completions", shell]).output().unwrap();
        assert_code(&o, 0);
        assert!(stdout(&o).contains(needle), "{shell}");
        assert!(stdout(&o).contains("keep-changes"), "{shell} completes run's options");
    }
    let o = repro().args(["completions", "tcsh"]).output().unwrap();
    assert_code(&o, 2);
}
