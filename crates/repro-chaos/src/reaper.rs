//! `repro __chaos-reap`: a small process that outlives a killed `repro chaos run`.
//!
//! The run starts it with a pipe on its stdin and tells it, line by line, every process group it starts
//! (`pgid N`: targets, instances, hooks, watchers). When the run ends it writes `done` and closes the pipe; the
//! reaper then exits. If the pipe closes without `done` (the harness was SIGKILLed, or crashed), the reaper
//! kills every group it was told of (SIGCONT first, so nothing stays stopped, then SIGKILL), removes the run's
//! Docker containers (by the `repro.chaos.run` label) and writes what it did to `RUN/system/reaped.json`. The run
//! directory keeps its `INCOMPLETE` marker: there is no verdict.
//!
//! The network fault proxy lives inside the harness process, so no host network state is left behind.
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use nix::sys::signal::{SigSet, SigmaskHow, Signal};

use crate::proc::{group_alive, kill_group, Zombies};
use crate::reaper_link;

/// A started reaper; [`Reaper::finish`] when the run has stopped everything.
pub struct Reaper {
    child: Child,
}

impl Reaper {
    /// Starts `exe __chaos-reap --run-dir RUN --run-id ID [--docker]` in its own process group (a Ctrl-C is
    /// for the run, not for its reaper) and makes it the current one.
    pub fn start(exe: &Path, run_dir: &Path, run_id: &str, scratch: &Path, docker: bool) -> std::io::Result<Reaper> {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(exe);
        cmd.arg("__chaos-reap").arg("--run-dir").arg(run_dir).arg("--run-id").arg(run_id).arg("--scratch").arg(scratch);
        if docker {
            cmd.arg("--docker");
        }
        cmd.stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::null()).process_group(0);
        let mut child = cmd.spawn()?;
        let stdin = child.stdin.take();
        reaper_link::connect(stdin);
        Ok(Reaper { child })
    }

    /// The run stopped everything it started: the reaper has nothing to do.
    pub fn finish(self) {
        reaper_link::done();
        // It exits at once after `done` (even once this process is gone: `done` is in the pipe); collected on a
        // thread of its own so that the run does not wait for the reaper's start-up.
        let mut child = self.child;
        std::thread::spawn(move || {
            let _ = child.wait();
        });
    }
}

/// The reaper's arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReapArgs {
    pub run_dir: Option<PathBuf>,
    pub run_id: Option<String>,
    /// The run's scratch directory (removed).
    pub scratch: Option<PathBuf>,
    pub docker: bool,
}

impl ReapArgs {
    pub fn parse(args: &[String]) -> ReapArgs {
        let mut a = ReapArgs::default();
        let mut it = args.iter();
        while let Some(x) = it.next() {
            match x.as_str() {
                "--run-dir" => a.run_dir = it.next().map(PathBuf::from),
                "--run-id" => a.run_id = it.next().cloned(),
                "--scratch" => a.scratch = it.next().map(PathBuf::from),
                "--docker" => a.docker = true,
                _ => {}
            }
        }
        a
    }
}

/// What the reaper read: the groups still to kill, and whether the run said `done`. A group is forgotten when
/// the run says it is `gone`, or when `alive` says it has no process left as a later message arrives: a group
/// id is a process id, which the system hands out again once that group is empty.
pub fn read_messages(input: impl BufRead, alive: impl Fn(i32) -> bool) -> (Vec<i32>, bool) {
    let mut groups: std::collections::BTreeSet<i32> = std::collections::BTreeSet::new();
    let mut done = false;
    let num =
        |l: &str, prefix: &str| l.strip_prefix(prefix).and_then(|n| n.trim().parse::<i32>().ok()).filter(|n| *n > 1);
    for line in input.lines() {
        let Ok(line) = line else { break };
        let line = line.trim();
        groups.retain(|g| alive(*g));
        if line == "done" {
            done = true;
        } else if let Some(n) = num(line, "pgid ") {
            groups.insert(n);
        } else if let Some(n) = num(line, "gone ") {
            groups.remove(&n);
        }
    }
    (groups.into_iter().collect(), done)
}

/// The entry point of `repro __chaos-reap`: waits for the run to end, cleans up if it did not say `done`.
pub fn main(args: &ReapArgs) -> i32 {
    let mut mask = SigSet::empty();
    for s in [Signal::SIGHUP, Signal::SIGINT, Signal::SIGQUIT, Signal::SIGTERM, Signal::SIGPIPE] {
        mask.add(s);
    }
    // Without the mask a terminal signal could end the cleanup early; nothing else depends on it.
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), None);
    let (groups, done) = read_messages(std::io::stdin().lock(), |g| group_alive(g, Zombies::Included));
    if done {
        return 0;
    }
    let mut killed = Vec::new();
    for g in &groups {
        kill_group(*g, Signal::SIGCONT);
        if kill_group(*g, Signal::SIGKILL) {
            killed.push(*g);
        }
    }
    let mut containers = Vec::new();
    let mut errors = Vec::new();
    if let (true, Some(id)) = (args.docker, &args.run_id) {
        match crate::docker::Engine::connect() {
            Ok(eng) => match eng.list(crate::docker::RUN_LABEL, id) {
                Ok(list) => {
                    for (cid, name, _) in list {
                        match eng.remove(&cid) {
                            Ok(()) => containers.push(name),
                            Err(e) => errors.push(format!("container {name}: {e}")),
                        }
                    }
                }
                Err(e) => errors.push(format!("listing the run's containers: {e}")),
            },
            Err(e) => errors.push(format!("docker: {e}")),
        }
    }
    let mut scratch_removed = false;
    if let Some(s) = &args.scratch {
        // Only the harness's own scratch directory, named as the runner names it.
        let ours = s.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("repro-chaos-"));
        if ours && s.is_dir() {
            match std::fs::remove_dir_all(s) {
                Ok(()) => scratch_removed = true,
                Err(e) => errors.push(format!("{}: {e}", s.display())),
            }
        }
    }
    if let Some(dir) = &args.run_dir {
        let v = serde_json::json!({
            "scratch_removed": scratch_removed,
            "why": "the harness ended without finishing the run (killed or crashed)",
            "groups_told": groups,
            "groups_killed": killed,
            "containers_removed": containers,
            "errors": errors,
        });
        let path = dir.join("system/reaped.json");
        // The run directory may be gone too; then there is nobody to tell.
        let _ = crate::fsutil::write_json_atomic(&path, &v);
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_groups_and_done() {
        let all = |_: i32| true;
        let (g, done) = read_messages("pgid 12\npgid 12\npgid 1\npgid x\nnoise\npgid 40\n".as_bytes(), all);
        assert_eq!((g, done), (vec![12, 40], false), "pid 1 and junk are never groups to kill");
        assert!(read_messages("pgid 12\ndone\n".as_bytes(), all).1);
        // A group the run released, or one seen empty when a later message came, is forgotten.
        let (g, _) = read_messages("pgid 12\npgid 13\ngone 12\npgid 40\n".as_bytes(), all);
        assert_eq!(g, vec![13, 40]);
        let (g, _) = read_messages("pgid 12\npgid 13\npgid 40\n".as_bytes(), |p| p != 12);
        assert_eq!(g, vec![13, 40], "12 had ended by the time 40 was told");
        assert_eq!(
            ReapArgs::parse(&["--run-dir".into(), "/r".into(), "--run-id".into(), "x".into(), "--docker".into()]),
            ReapArgs { run_dir: Some("/r".into()), run_id: Some("x".into()), scratch: None, docker: true }
        );
    }
}
