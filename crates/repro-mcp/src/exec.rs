//! The executor: runs `repro <subcommand> --json ...` as a child in its own process group, reads its progress,
//! and stops the whole group on cancellation or timeout (SIGTERM, then SIGKILL).

use std::collections::{BTreeSet, VecDeque};
use std::future::Future;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::sync::mpsc::UnboundedSender;

use crate::config::Settings;
use crate::error::ExecError;
use crate::tools::{Plan, ProgressSource};

/// One progress notification.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: String,
}

/// What the child left.
#[derive(Debug)]
pub struct Output {
    /// Its exit status; `None` when a signal ended it.
    pub status: Option<i32>,
    pub stdout: Vec<u8>,
    /// The last lines of its stderr.
    pub stderr_tail: String,
}

/// How a call ended.
#[derive(Debug)]
pub enum Ended {
    Exited(Output),
    /// The client cancelled the request: the child's group was stopped.
    Cancelled,
    /// `timeout_secs` passed: the child's group was stopped.
    TimedOut(Duration),
}

/// How long a stopped group has between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_secs(10);
/// Lines of stderr kept for the result.
const TAIL_LINES: usize = 40;

/// Sends SIGTERM to a process group that is still running when the call's future is dropped (the session
/// ended), then SIGKILL if it outlives [`GRACE`].
struct GroupGuard {
    pgid: Pid,
    armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if killpg(self.pgid, Signal::SIGTERM).is_err() {
            return; // gone already
        }
        let start = std::time::Instant::now();
        while start.elapsed() < GRACE {
            std::thread::sleep(Duration::from_millis(50));
            // Signal 0: does the group still have a member?
            if killpg(self.pgid, None).is_err() {
                return;
            }
        }
        // The group outlived its grace period: nothing is left to do but kill it; ESRCH means it just ended.
        let _ = killpg(self.pgid, Signal::SIGKILL);
    }
}

/// Runs `plan` as a child of `settings.repro`; progress goes to `progress`, and `cancelled` resolving stops it.
pub async fn execute(
    settings: &Settings,
    plan: &Plan,
    cancelled: impl Future<Output = ()>,
    progress: UnboundedSender<Progress>,
) -> Result<Ended, ExecError> {
    let mut cmd = tokio::process::Command::new(&settings.repro);
    cmd.args(&plan.argv)
        .current_dir(&settings.cwd)
        .env("REPRO_STATE_DIR", &settings.state_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().map_err(|source| ExecError::Spawn { program: settings.repro.clone(), source })?;
    let pid = child.id().unwrap_or(0);
    let pgid = Pid::from_raw(pid as i32);
    let mut guard = GroupGuard { pgid, armed: true };

    let mut stdout = child.stdout.take();
    let out_task = tokio::spawn(async move {
        let mut buf = Vec::new();
        if let Some(s) = stdout.as_mut() {
            // A read error leaves what was read; the JSON check afterwards says whether it is whole.
            let _ = s.read_to_end(&mut buf).await;
        }
        buf
    });
    let stderr = child.stderr.take();
    let source = plan.progress.clone();
    let line_progress = progress.clone();
    let err_task = tokio::spawn(async move {
        let mut tail = VecDeque::new();
        let Some(stderr) = stderr else { return tail };
        let mut reader = BufReader::new(stderr);
        let mut steps = 0u64;
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let text = String::from_utf8_lossy(&line).trim_end().to_string();
            if let Some(p) = progress_of_line(&source, &text, &mut steps) {
                // The receiver is gone only when the call is over.
                let _ = line_progress.send(p);
            }
            if tail.len() == TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(text);
        }
        tail
    });

    let runs_dir = settings.state_dir.join("runs");
    let (poll, total) = match plan.progress {
        ProgressSource::NewRuns { total } => (true, total),
        _ => (false, None),
    };
    let baseline = if poll { run_names(&runs_dir) } else { BTreeSet::new() };
    let mut seen = 0u64;
    let mut ticker = tokio::time::interval(Duration::from_millis(50));
    let deadline = tokio::time::sleep(plan.timeout);
    tokio::pin!(deadline);
    tokio::pin!(cancelled);
    let poll_runs = |seen: &mut u64| {
        let now = run_names(&runs_dir).difference(&baseline).count() as u64;
        if now > *seen {
            *seen = now;
            let message = match total {
                Some(t) => format!("{now} of {t} runs started"),
                None => format!("{now} runs started"),
            };
            let _ = progress.send(Progress { progress: now as f64, total: total.map(|t| t as f64), message });
        }
    };
    let status = loop {
        tokio::select! {
            status = child.wait() => {
                break status.map_err(|source| ExecError::Wait { program: settings.repro.clone(), pid, source })?;
            }
            _ = &mut cancelled => {
                stop(&mut child, pgid).await;
                guard.armed = false;
                out_task.abort();
                err_task.abort();
                return Ok(Ended::Cancelled);
            }
            _ = &mut deadline => {
                stop(&mut child, pgid).await;
                guard.armed = false;
                out_task.abort();
                err_task.abort();
                return Ok(Ended::TimedOut(plan.timeout));
            }
            _ = ticker.tick(), if poll => poll_runs(&mut seen),
        }
    };
    if poll {
        poll_runs(&mut seen);
    }
    guard.armed = false;
    // A grandchild that kept the pipes open must not hold the answer back.
    let stdout = join_within(out_task).await;
    let tail = join_within(err_task).await;
    Ok(Ended::Exited(Output {
        status: status.code(),
        stdout: stdout.unwrap_or_default(),
        stderr_tail: tail.map(|t| t.into_iter().collect::<Vec<_>>().join("\n")).unwrap_or_default(),
    }))
}

/// The task's value if it ends within 5 s; else it is aborted.
async fn join_within<T>(task: tokio::task::JoinHandle<T>) -> Option<T> {
    let abort = task.abort_handle();
    match tokio::time::timeout(Duration::from_secs(5), task).await {
        Ok(Ok(v)) => Some(v),
        _ => {
            abort.abort();
            None
        }
    }
}

/// SIGTERM to the group (repro stops its runs, hunt its workers, and exits), SIGKILL after [`GRACE`]; then
/// SIGKILL to whatever else is left in the group.
async fn stop(child: &mut tokio::process::Child, pgid: Pid) {
    // ESRCH: the group is already gone.
    let _ = killpg(pgid, Signal::SIGTERM);
    if tokio::time::timeout(GRACE, child.wait()).await.is_err() {
        let _ = killpg(pgid, Signal::SIGKILL);
        // After SIGKILL the wait ends; an error here means it was reaped already.
        let _ = child.wait().await;
    }
    let _ = killpg(pgid, Signal::SIGKILL);
}

/// The run directories under `dir` (not those being created or removed).
fn run_names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| !n.starts_with('.')).collect()
        })
        .unwrap_or_default()
}

/// A progress notification from one stderr line of the child, if it is a progress line.
fn progress_of_line(source: &ProgressSource, line: &str, steps: &mut u64) -> Option<Progress> {
    match source {
        ProgressSource::HuntLines { total } => {
            let rest = line.strip_prefix("[hunt] ")?;
            let (n, after) = rest.split_once(' ')?;
            let n: u64 = n.parse().ok()?;
            after.starts_with("runs").then(|| Progress {
                progress: n as f64,
                total: Some(*total as f64),
                message: rest.to_string(),
            })
        }
        ProgressSource::ExplainLines => {
            let rest = line.strip_prefix("[explain] ")?;
            *steps += 1;
            Some(Progress { progress: *steps as f64, total: None, message: rest.to_string() })
        }
        ProgressSource::None | ProgressSource::NewRuns { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hunt_lines() {
        let s = ProgressSource::HuntLines { total: 50 };
        let mut n = 0;
        let p = progress_of_line(&s, "[hunt] 12 runs, 0 failing, 3.1 runs/s", &mut n).unwrap();
        assert_eq!((p.progress, p.total), (12.0, Some(50.0)));
        assert!(progress_of_line(&s, "[hunt] baseline epoch 2025-01-01", &mut n).is_none());
        assert!(progress_of_line(&s, "hello", &mut n).is_none());
    }

    #[test]
    fn explain_lines_count_steps() {
        let mut n = 0;
        let a = progress_of_line(&ProgressSource::ExplainLines, "[explain] control: 3 runs", &mut n).unwrap();
        let b = progress_of_line(&ProgressSource::ExplainLines, "[explain] seed: moved", &mut n).unwrap();
        assert!(b.progress > a.progress);
    }
}
