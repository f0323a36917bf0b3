//! Processes: spawning in their own process group, hooks with timeouts, signals, /proc inspection.
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// A cancellation flag that sleepers can wait on.
#[derive(Clone, Default)]
pub struct Cancel {
    inner: Arc<(Mutex<Option<String>>, Condvar)>,
}

impl Cancel {
    pub fn cancel(&self, reason: &str) {
        let mut g = self.inner.0.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            *g = Some(reason.to_string());
        }
        self.inner.1.notify_all();
    }
    pub fn reason(&self) -> Option<String> {
        self.inner.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    pub fn is_cancelled(&self) -> bool {
        self.reason().is_some()
    }
    /// Sleeps for `d`; returns false early if cancelled.
    pub fn sleep(&self, d: Duration) -> bool {
        let deadline = far(d);
        let mut g = self.inner.0.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if g.is_some() {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            g = self.inner.1.wait_timeout(g, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

/// `now + d`, or a day from now when `d` does not fit (never a panic on an absurd duration).
fn far(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d).or_else(|| now.checked_add(Duration::from_secs(86_400))).unwrap_or(now)
}

/// A `bash -c script` command in its own process group, with `env` added.
pub fn shell(script: &str, env: &BTreeMap<String, String>, cwd: &Path) -> Command {
    let mut c = Command::new("bash");
    c.arg("-c").arg(script).current_dir(cwd).envs(env).process_group(0);
    c
}

/// The outcome of a hook.
#[derive(Debug, Clone)]
pub struct HookOutcome {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// stdout and stderr, interleaved.
    pub output: String,
    pub elapsed: Duration,
}

impl HookOutcome {
    pub fn ok(&self) -> bool {
        self.code == Some(0) && !self.timed_out
    }
    pub fn describe(&self) -> String {
        if self.timed_out {
            format!("timed out after {:.1}s", self.elapsed.as_secs_f64())
        } else if let Some(c) = self.code {
            format!("exit code {c}")
        } else if let Some(s) = self.signal {
            format!("killed by signal {s}")
        } else {
            "no exit status".into()
        }
    }
}

/// Runs `script` with bash in its own process group, capturing its output, killing it after `timeout`.
/// Anything the hook leaves running in its group is killed when it ends.
pub fn run_hook(
    script: &str,
    env: &BTreeMap<String, String>,
    cwd: &Path,
    timeout: Duration,
    cancel: Option<&Cancel>,
) -> std::io::Result<HookOutcome> {
    let started = Instant::now();
    let wrapped = format!("exec 2>&1\n{script}");
    let mut cmd = shell(&wrapped, env, cwd);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = cmd.spawn()?;
    crate::reaper_link::register_group(child.id() as i32);
    let pid = child.id() as i32;
    let Some(mut out) = child.stdout.take() else {
        kill_group(pid, Signal::SIGKILL);
        return Err(std::io::Error::other("the hook's stdout was not piped"));
    };
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        // A read error ends the output early; what was read is kept and the exit status tells the rest.
        let _ = out.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    });
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // The receiver waits for this unless run_hook already returned, which it does only after it.
        let _ = tx.send(child.wait());
    });
    let mut timed_out = false;
    let status: Option<ExitStatus> = loop {
        let step = Duration::from_millis(50).min(timeout.saturating_sub(started.elapsed()));
        match rx.recv_timeout(step) {
            Ok(s) => break s.ok(),
            Err(mpsc::RecvTimeoutError::Disconnected) => break None,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let cancelled = cancel.is_some_and(Cancel::is_cancelled);
                if started.elapsed() >= timeout || cancelled {
                    timed_out = true;
                    kill_group(pid, Signal::SIGKILL);
                    break rx.recv().ok().and_then(|s| s.ok());
                }
            }
        }
    };
    // Whatever the hook left behind in its group goes with it; the reaper need not remember the group (its id
    // may be reused by someone else's processes later).
    kill_group(pid, Signal::SIGKILL);
    crate::reaper_link::release_group(pid);
    // The reader only collects bytes; if it panicked the hook's output is reported as empty.
    let output = reader.join().unwrap_or_default();
    Ok(HookOutcome {
        code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        timed_out,
        output,
        elapsed: started.elapsed(),
    })
}

/// Sends `sig` to process group `pgid`; false if no such group.
pub fn kill_group(pgid: i32, sig: Signal) -> bool {
    if pgid <= 1 {
        return false;
    }
    killpg(Pid::from_raw(pgid), sig).is_ok()
}

pub fn kill_pid(pid: i32, sig: Signal) -> bool {
    if pid <= 1 {
        return false;
    }
    nix::sys::signal::kill(Pid::from_raw(pid), sig).is_ok()
}

/// Whether a zombie keeps a process group alive for [`group_alive`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zombies {
    /// No: the group is alive while a process in it still runs (read from /proc). For the harness, waiting
    /// for a group to end: a zombie has ended, its parent only has not collected it yet.
    Excluded,
    /// Yes: the group is alive while any process, zombies too, holds its id (signal 0 to the group). For the
    /// reaper, which may forget a group only once its id is free to be handed out again.
    Included,
}

/// Whether group `pgid` has a process left; whether a zombie counts is `zombies`.
pub fn group_alive(pgid: i32, zombies: Zombies) -> bool {
    match zombies {
        Zombies::Excluded => group_members(pgid).iter().any(|m| m.state != 'Z' && m.state != 'X'),
        Zombies::Included => killpg(Pid::from_raw(pgid), None).is_ok(),
    }
}

/// A process seen in /proc.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcInfo {
    pub pid: i32,
    pub pgid: i32,
    pub state: char,
    pub comm: String,
}

/// Parses `/proc/<pid>/stat`.
pub fn parse_stat(text: &str) -> Option<ProcInfo> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let comm = text[open + 1..close].to_string();
    let mut rest = text[close + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let _ppid = rest.next()?;
    let pgid = rest.next()?.parse().ok()?;
    Some(ProcInfo { pid, pgid, state, comm })
}

pub fn proc_info(pid: i32) -> Option<ProcInfo> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// All processes, from /proc.
pub fn all_processes() -> Vec<ProcInfo> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    rd.flatten().filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok()).filter_map(proc_info).collect()
}

pub fn group_members(pgid: i32) -> Vec<ProcInfo> {
    all_processes().into_iter().filter(|p| p.pgid == pgid).collect()
}

/// Polls `cond` every `interval` until it holds or `timeout` passes.
pub fn poll_until(timeout: Duration, interval: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = far(timeout);
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(interval.min(deadline.saturating_duration_since(Instant::now())));
    }
}

/// Spawns a long-running child in its own group with stdout/stderr appended to `log`.
pub fn spawn_logged(mut cmd: Command, log: &Path) -> std::io::Result<Child> {
    let f = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
    let f2 = f.try_clone()?;
    cmd.stdin(Stdio::null()).stdout(f).stderr(f2);
    let child = cmd.spawn()?;
    crate::reaper_link::register_group(child.id() as i32);
    Ok(child)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_spaces_and_parens_in_comm() {
        let p = parse_stat("1234 (a) b (c)) T 1 1200 1200 0 -1").unwrap();
        assert_eq!(p.pid, 1234);
        assert_eq!(p.comm, "a) b (c)");
        assert_eq!(p.state, 'T');
        assert_eq!(p.pgid, 1200);
    }

    #[test]
    fn hook_captures_output_and_code() {
        let d = tempfile::tempdir().unwrap();
        let mut env = BTreeMap::new();
        env.insert("X".to_string(), "42".to_string());
        let o = run_hook("echo out $X; echo err >&2; exit 3", &env, d.path(), Duration::from_secs(5), None).unwrap();
        assert_eq!(o.code, Some(3));
        assert!(o.output.contains("out 42") && o.output.contains("err"), "{}", o.output);
    }

    #[test]
    fn hook_timeout_kills_group() {
        let d = tempfile::tempdir().unwrap();
        // The hook's shell leads its own group: it writes its pid (the group's id) before it waits.
        let script = "echo $$ > pgid; sleep 30 & sleep 30";
        let o = run_hook(script, &BTreeMap::new(), d.path(), Duration::from_millis(200), None).unwrap();
        assert!(o.timed_out);
        assert!(!o.ok());
        let pgid: i32 = std::fs::read_to_string(d.path().join("pgid")).unwrap().trim().parse().unwrap();
        // The whole group (both sleeps) was killed, not only the shell: SIGKILL takes effect when each is next
        // scheduled, so it is gone soon after (a generous guard, not a speed claim; natively the sleeps live 30 s).
        let gone =
            poll_until(Duration::from_secs(10), Duration::from_millis(10), || !group_alive(pgid, Zombies::Excluded));
        assert!(gone, "the hook's process group {pgid} outlived the timeout");
    }

    #[test]
    fn a_zombie_keeps_a_group_alive_only_when_included() {
        // A child in its own group that exits at once and is not collected: a zombie holding the group's id.
        let mut child = Command::new("true").process_group(0).spawn().unwrap();
        let pgid = child.id() as i32;
        let ended = poll_until(Duration::from_secs(10), Duration::from_millis(5), || {
            group_members(pgid).iter().all(|m| m.state == 'Z' || m.state == 'X')
        });
        assert!(ended, "group {pgid} did not become a zombie");
        assert!(!group_alive(pgid, Zombies::Excluded), "the harness sees an ended group");
        assert!(group_alive(pgid, Zombies::Included), "the reaper still holds a group whose id is taken");
        child.wait().unwrap();
        assert!(!group_alive(pgid, Zombies::Included), "collected: the id is free");
        assert!(!group_alive(pgid, Zombies::Excluded));
    }

    #[test]
    fn cancel_wakes_sleepers() {
        let c = Cancel::default();
        let c2 = c.clone();
        let h = std::thread::spawn(move || c2.sleep(Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(20));
        c.cancel("test");
        assert!(!h.join().unwrap());
        assert_eq!(c.reason().as_deref(), Some("test"));
    }
}
