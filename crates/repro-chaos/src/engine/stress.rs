//! The `stress` fault: stress-ng's CPU, memory and IO workers beside a target, in their own process group (the
//! run's reaper knows it), verified by counting the workers in /proc, stopped by SIGTERM to the group (SIGKILL
//! after 2 s) and verified gone. The workers run on the same host as the target, competing for its CPUs,
//! memory and disk: not inside its cgroup (the process driver makes none).
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;
use repro_model::timeline::Event;

use crate::engine::{Ctx, UndoAction};
use crate::flow::Stop;
use crate::model::*;
use crate::proc;

/// How long a stress without a duration may run at most (beyond the experiment's timeout): a bound for
/// stress-ng itself, should everything else fail to stop it.
const SLACK: Duration = Duration::from_secs(60);

/// A running stress-ng, for its undo.
#[derive(Debug, Clone, PartialEq)]
pub struct StressUndo {
    /// stress-ng's pid, which leads its process group.
    pub pgid: i32,
    pub log: PathBuf,
    pub started: Instant,
}

/// stress-ng's arguments for `spec`, stopping by itself after `bound`.
pub fn stress_args(spec: &StressSpec, bound: Duration) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    if spec.cpu_workers() > 0 {
        a.extend(["--cpu".into(), spec.cpu_workers().to_string()]);
    }
    if spec.io_workers() > 0 {
        a.extend(["--io".into(), spec.io_workers().to_string()]);
    }
    if let Some(b) = spec.bytes_per_vm_worker() {
        a.extend(["--vm".into(), spec.vm().to_string(), "--vm-bytes".into(), format!("{b}")]);
    }
    let secs = bound.as_secs() + u64::from(bound.subsec_nanos() > 0);
    a.extend(["--timeout".into(), format!("{}s", secs.max(1)), "--metrics-brief".into()]);
    a
}

/// The live (not zombie) stress-ng workers in group `pgid` (the main process excluded).
fn workers_running(pgid: i32) -> usize {
    proc::group_members(pgid)
        .iter()
        .filter(|p| p.pid != pgid && p.state != 'Z' && p.state != 'X' && p.comm.starts_with("stress-ng"))
        .count()
}

/// Reaps stress-ng's main process if it has ended (it is the harness's child).
fn reap(pid: i32) {
    // Not our child any more, or still running: nothing to reap now.
    let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
}

/// The stressor lines of `--metrics-brief` in the log, with the CPU time (user + system) its workers used:
/// "cpu 1736 (1.13s CPU), vm 15201 (0.42s CPU)".
pub fn bogo_ops(log: &str) -> String {
    let mut out = Vec::new();
    for line in log.lines().filter(|l| l.contains("metrc:")) {
        let Some((_, rest)) = line.split_once("] ") else { continue };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() >= 2 && f[1].parse::<u64>().is_ok() {
            let cpu = match (f.get(3).and_then(|t| t.parse::<f64>().ok()), f.get(4).and_then(|t| t.parse::<f64>().ok()))
            {
                (Some(u), Some(s)) => format!(" ({:.2}s CPU)", u + s),
                _ => String::new(),
            };
            out.push(format!("{} {}{cpu}", f[0], f[1]));
        }
    }
    out.join(", ")
}

fn tail(p: &Path) -> String {
    let text = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join("\n")
}

impl Ctx {
    /// Starts stress-ng for `op` beside the victims, verifies its workers run, and holds it for the duration
    /// (or until the end-of-run sweep).
    pub(crate) fn start_stress(
        &self,
        op: &Operation,
        run: u32,
        names: &[String],
        containers: bool,
    ) -> Result<(), Stop> {
        let Some(spec) = op.stress.as_ref().map(|s| &s.value) else {
            return self.fail(&format!("{}: the stress fault needs `stress:`", op.name.value));
        };
        if containers {
            return self.fail(&format!(
                "{}: stress runs stress-ng beside a target of the process driver; this driver's targets are containers",
                op.name.value
            ));
        }
        let bound = match op.duration {
            Some(d) => d.0 + Duration::from_secs(10),
            None => self.exp.timeout.0 + SLACK,
        };
        let log = self.run_dir.join("logs").join(format!("stress-{}-{run}.log", op.name.value));
        let mut cmd = Command::new("stress-ng");
        cmd.args(stress_args(spec, bound)).current_dir(&self.run_dir).process_group(0);
        let child = match proc::spawn_logged(cmd, &log) {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return self.fail(&format!(
                    "{}: stress needs stress-ng on the host (Debian: apt-get install stress-ng)",
                    op.name.value
                ))
            }
            Err(e) => return self.fail(&format!("{}: stress-ng could not start: {e}", op.name.value)),
        };
        let pgid = child.id() as i32;
        // The child is reaped by pid (waitpid) in the undo; the handle has nothing more to give.
        drop(child);
        let undo = StressUndo { pgid, log: log.clone(), started: Instant::now() };
        let undo_id = self.undo.push(&op.name.value, &op.uses.value, run, UndoAction::StopStress(undo));
        let want = spec.workers() as usize;
        let mut exited = false;
        let running = proc::poll_until(Duration::from_secs(5), Duration::from_millis(10), || {
            reap(pgid);
            exited = proc::proc_info(pgid).is_none_or(|p| p.state == 'Z' || p.state == 'X');
            exited || workers_running(pgid) >= want
        });
        if !running || exited {
            let why = if exited { "stress-ng exited" } else { "its workers did not all start within 5 s" };
            return self.fail(&format!(
                "{}: the stress did not take effect: {why} (logs/{}): {}",
                op.name.value,
                log.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default(),
                tail(&log)
            ));
        }
        self.emit(Event::OperationVerified {
            operation: op.name.value.clone(),
            run,
            effect: format!("stress-ng: {} running (pgid {pgid})", spec.describe()),
            api: None,
            instances: Some(names.to_vec()),
            output: None,
            rules: None,
        });
        if let Some(d) = op.duration {
            self.hold_then_undo(d.0, &[undo_id])?;
        }
        Ok(())
    }

    /// Stops a stress-ng: SIGTERM to its group, SIGKILL after 2 s, verified gone. The detail says how long it
    /// ran and its bogo ops.
    pub(crate) fn stop_stress(&self, operation: &str, run: u32, s: &StressUndo) -> (bool, String) {
        let ran = s.started.elapsed();
        proc::kill_group(s.pgid, Signal::SIGTERM);
        let gone = || {
            reap(s.pgid);
            !proc::group_alive(s.pgid, proc::Zombies::Excluded)
        };
        let mut how = "SIGTERM";
        if !proc::poll_until(Duration::from_secs(2), Duration::from_millis(10), gone) {
            proc::kill_group(s.pgid, Signal::SIGKILL);
            self.emit(Event::OperationEscalated { operation: operation.to_string(), run, signal: "SIGKILL".into() });
            how = "SIGKILL";
            if !proc::poll_until(Duration::from_secs(5), Duration::from_millis(10), gone) {
                let msg = format!("{operation}: stress-ng (pgid {}) is still running after SIGKILL", s.pgid);
                self.harness_error(&msg);
                return (false, msg);
            }
        }
        let ops = bogo_ops(&std::fs::read_to_string(&s.log).unwrap_or_default());
        let mut detail = format!("stress-ng (pgid {}) stopped by {how} after {:.2}s", s.pgid, ran.as_secs_f64());
        if !ops.is_empty() {
            detail.push_str(&format!("; bogo ops: {ops}"));
        }
        (true, detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> StressSpec {
        serde_json::from_str(yaml).unwrap()
    }

    #[test]
    fn the_command_line_follows_the_parameters() {
        let s = spec(r#"{"cpu": 2, "memory": "128Mi"}"#);
        assert_eq!(
            stress_args(&s, Duration::from_millis(1500)),
            ["--cpu", "2", "--vm", "1", "--vm-bytes", "134217728", "--timeout", "2s", "--metrics-brief"]
        );
        let s = spec(r#"{"io": 3, "memory": "1Gi", "vm-workers": 4}"#);
        assert_eq!(
            stress_args(&s, Duration::from_secs(70)),
            ["--io", "3", "--vm", "4", "--vm-bytes", "268435456", "--timeout", "70s", "--metrics-brief"]
        );
        assert_eq!(
            stress_args(&spec(r#"{"cpu": 1}"#), Duration::ZERO),
            ["--cpu", "1", "--timeout", "1s", "--metrics-brief"]
        );
    }

    #[test]
    fn bogo_ops_from_metrics_brief() {
        let log = "stress-ng: info:  [32043] dispatching hogs: 2 cpu, 1 io, 1 vm\n\
stress-ng: metrc: [32043] stressor       bogo ops real time  usr time  sys time   bogo ops/s     bogo ops/s\n\
stress-ng: metrc: [32043]                           (secs)    (secs)    (secs)   (real time) (usr+sys time)\n\
stress-ng: metrc: [32043] cpu                1736      1.60      1.05      0.08      1085.02        1543.47\n\
stress-ng: metrc: [32043] vm                15201      1.58      0.20      0.22      9621.86       36319.72\n";
        assert_eq!(bogo_ops(log), "cpu 1736 (1.13s CPU), vm 15201 (0.42s CPU)");
        assert_eq!(bogo_ops("stress-ng: metrc: [1] cpu 12\n"), "cpu 12");
        assert_eq!(bogo_ops(""), "");
    }
}
