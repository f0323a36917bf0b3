//! Companions: files a capture packs although the failing run never touched them, because a fix of the failure
//! typically needs them and a pack holds only what its run used.
//!
//! A fix runs code the failing run never reached. Two cases come up at once when a pack is replayed with a fix
//! (`repro replay --with`, `repro repair`): once a Rust crate's unit tests pass, `cargo test` goes on to the
//! doc-tests and runs `rustdoc`; a Makefile recipe (or a `system(3)`, a `popen(3)`, Python's
//! `subprocess(shell=True)`) that gains a shell operator runs `/bin/sh`. The rules below name such files as
//! data: each adds executables, found where the run's own programs were, with a reason the manifest keeps
//! (`companions`). Their entries carry no access kind: provenance does not count them as used.
//!
//! What a rule adds must exist on the capturing host; its shared libraries are the ones its sibling already
//! mapped (rustdoc links the same librustc_driver and LLVM as rustc; the shell only libc), and its loader is
//! followed as for any executable. A fix that needs anything else is refused by the replay as before: the file
//! is absent from the pack.

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::closure::Access;
use crate::manifest::AccessKind;

/// When a rule applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Always: every run runs at least one program.
    Always,
    /// The run executed a file with one of these names: the rule's files are its siblings (same directory).
    Ran(&'static [&'static str]),
}

/// One companion rule.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub when: When,
    /// Absolute paths for [`When::Always`], file names beside the program that ran for [`When::Ran`].
    pub add: &'static [&'static str],
    pub reason: &'static str,
}

/// The rules repro applies (`repro capture --no-companions` applies none).
pub const RULES: &[Rule] = &[
    Rule {
        when: When::Always,
        add: &["/bin/sh"],
        reason: "the POSIX shell: make recipes with shell operators, system(3), popen(3) and shell=True run it",
    },
    Rule {
        when: When::Ran(&["cargo", "rustc"]),
        add: &["rustc", "rustdoc"],
        reason: "the Rust toolchain's compilers: cargo test runs the doc-tests with rustdoc once the unit tests pass",
    },
];

/// A companion to pack: its guest path and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Companion {
    pub path: PathBuf,
    pub reason: &'static str,
}

/// The companions `rules` name for `accesses`, each path once (the first rule naming it gives the reason), in
/// path order. `exists` says whether a guest path exists on the host (a rule's file that does not is skipped).
pub fn of(accesses: &[Access], rules: &[Rule], exists: &dyn Fn(&Path) -> bool) -> Vec<Companion> {
    let ran: BTreeSet<&Path> =
        accesses.iter().filter(|a| a.kinds.contains(&AccessKind::Exec)).map(|a| a.path.as_path()).collect();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    let mut push = |path: PathBuf, reason: &'static str| {
        if path.is_absolute() && seen.insert(path.clone()) && exists(&path) {
            out.push(Companion { path, reason });
        }
    };
    for rule in rules {
        match rule.when {
            When::Always => {
                for a in rule.add {
                    push(PathBuf::from(a), rule.reason);
                }
            }
            When::Ran(names) => {
                for program in &ran {
                    let named = program.file_name().is_some_and(|n| names.iter().any(|x| n.as_bytes() == x.as_bytes()));
                    let Some(dir) = program.parent().filter(|_| named) else { continue };
                    for a in rule.add {
                        push(dir.join(a), rule.reason);
                    }
                }
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec(p: &str) -> Access {
        Access { path: p.into(), kinds: vec![AccessKind::Exec] }
    }

    #[test]
    fn the_shell_always_and_rustdoc_beside_each_cargo_or_rustc_that_ran() {
        let accesses = [
            exec("/root/.cargo/bin/cargo"),
            exec("/opt/tc/bin/rustc"),
            Access { path: "/usr/bin/rustc".into(), kinds: vec![AccessKind::Stat] },
            exec("/usr/bin/make"),
        ];
        let got = of(&accesses, RULES, &|_| true);
        let paths: Vec<_> = got.iter().map(|c| c.path.to_str().unwrap()).collect();
        assert_eq!(
            paths,
            [
                "/bin/sh",
                "/opt/tc/bin/rustc",
                "/opt/tc/bin/rustdoc",
                "/root/.cargo/bin/rustc",
                "/root/.cargo/bin/rustdoc"
            ],
            "a rustc only stat'ed brings nothing; make brings nothing but the shell"
        );
        assert!(got[0].reason.contains("POSIX shell"));
    }

    #[test]
    fn a_file_the_host_lacks_is_skipped_and_a_relative_program_brings_nothing() {
        let accesses = [exec("cargo"), exec("/x/bin/cargo")];
        let got = of(&accesses, RULES, &|p| p != Path::new("/x/bin/rustdoc"));
        let paths: Vec<_> = got.iter().map(|c| c.path.to_str().unwrap()).collect();
        assert_eq!(paths, ["/bin/sh", "/x/bin/rustc"]);
        assert!(of(&[], &[], &|_| true).is_empty());
    }
}
