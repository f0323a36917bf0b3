//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]

use assert_cmd::Command;

/// A `repro` command built from this workspace.
pub fn repro() -> Command {
    Command::cargo_bin("repro").expect("the repro binary is built")
}
