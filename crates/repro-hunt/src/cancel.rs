//! Stopping everything on SIGINT or SIGTERM: every child run (`repro run --json`, `repro replay --json`) starts
//! in its own process group and is registered here while it lasts; a signal marks the search interrupted,
//! forwards SIGTERM to every registered group (a terminal's Ctrl-C reaches only the foreground group, which the
//! children left) and, if a group outlives [`KILL_AFTER`] or a second signal comes, SIGKILLs it. No new child
//! starts once the search is interrupted, so what was found so far is reported and the command exits 128 + the
//! signal.

use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::HuntError;

/// How long a child run has after SIGTERM to stop its guest and finish its run directory.
pub const KILL_AFTER: Duration = Duration::from_secs(3);

#[derive(Debug, Default)]
struct State {
    /// The first signal that interrupted the search.
    signal: Option<i32>,
    /// Process groups (= the pids of their leaders) of the child runs not yet reaped.
    groups: BTreeSet<i32>,
}

/// The interruption state shared by the orchestrator's threads and the signal thread.
#[derive(Debug, Default)]
pub struct Cancel {
    state: Mutex<State>,
}

impl Cancel {
    pub fn new() -> Arc<Cancel> {
        Arc::new(Cancel::default())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent under a panic elsewhere: a set of pids and a flag.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The signal that interrupted the search, if one did.
    pub fn signal(&self) -> Option<i32> {
        self.lock().signal
    }

    /// An error for a search stopped by `signal` (or a plain interruption when none is recorded).
    pub fn error(&self) -> HuntError {
        HuntError::Interrupted { signal: self.signal().unwrap_or(Signal::SIGINT as i32) }
    }

    /// Runs `cmd` to completion in its own process group, unless the search is interrupted: then it is not
    /// started, or (started) it gets SIGTERM and its output is discarded: both give [`HuntError::Interrupted`].
    pub fn output(&self, cmd: &mut Command, what: &str) -> Result<Output, HuntError> {
        cmd.process_group(0);
        let child = {
            let mut st = self.lock();
            if let Some(signal) = st.signal {
                return Err(HuntError::Interrupted { signal });
            }
            let child = cmd.spawn().map_err(|e| HuntError::Spawn { what: what.to_string(), source: e })?;
            // Registered before the lock is released: an interrupt either sees this group or ran before the
            // spawn (and the spawn was refused above).
            st.groups.insert(child.id() as i32);
            child
        };
        let pid = child.id() as i32;
        let out = child.wait_with_output();
        let signal = {
            let mut st = self.lock();
            st.groups.remove(&pid);
            st.signal
        };
        if let Some(signal) = signal {
            return Err(HuntError::Interrupted { signal });
        }
        out.map_err(|e| HuntError::Spawn { what: what.to_string(), source: e })
    }

    /// Marks the search interrupted by `signal` and sends SIGTERM to every child run's group. Returns whether
    /// this was the first interruption.
    pub fn interrupt(&self, signal: i32) -> bool {
        let mut st = self.lock();
        let first = st.signal.is_none();
        st.signal.get_or_insert(signal);
        signal_groups(&st.groups, Signal::SIGTERM);
        first
    }

    /// SIGKILLs every child run's group still registered.
    pub fn kill_all(&self) {
        signal_groups(&self.lock().groups, Signal::SIGKILL);
    }

    /// Child runs still registered (started and not yet reaped).
    pub fn running(&self) -> usize {
        self.lock().groups.len()
    }

    /// Turns SIGINT and SIGTERM into [`Cancel::interrupt`] until the guard is dropped: a first signal stops
    /// new runs and asks the running ones to stop; after [`KILL_AFTER`], or at a second signal, they are
    /// killed.
    pub fn install(self: &Arc<Self>) -> Result<SignalGuard, std::io::Error> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
        let handle = signals.handle();
        let cancel = Arc::clone(self);
        let thread = std::thread::spawn(move || {
            for sig in signals.forever() {
                if cancel.interrupt(sig) {
                    let cancel = Arc::clone(&cancel);
                    std::thread::spawn(move || {
                        std::thread::sleep(KILL_AFTER);
                        cancel.kill_all();
                    });
                } else {
                    cancel.kill_all();
                }
            }
        });
        Ok(SignalGuard { handle: Some(handle), thread: Some(thread) })
    }
}

fn signal_groups(groups: &BTreeSet<i32>, sig: Signal) {
    for g in groups {
        // A group whose members all exited (its leader not yet reaped) answers ESRCH: nothing left to stop.
        if let Err(e) = killpg(Pid::from_raw(*g), sig) {
            if e != nix::errno::Errno::ESRCH {
                eprintln!("[repro] cannot send {sig} to the run in process group {g}: {e}");
            }
        }
    }
}

/// Keeps the signal handler of [`Cancel::install`] installed.
pub struct SignalGuard {
    handle: Option<signal_hook::iterator::Handle>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.close();
        }
        if let Some(t) = self.thread.take() {
            // The thread only forwards signals; a panic in it has already been printed.
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_child_run_is_stopped_by_an_interrupt_and_no_new_one_starts() {
        let cancel = Cancel::new();
        let c2 = Arc::clone(&cancel);
        let t = std::thread::spawn(move || c2.output(Command::new("sleep").arg("30"), "sleep"));
        let start = Instant::now();
        while cancel.running() == 0 {
            assert!(start.elapsed() < Duration::from_secs(10), "the child never started");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(cancel.interrupt(15));
        assert!(!cancel.interrupt(2), "a second interrupt is not the first");
        let r = t.join().unwrap();
        assert!(matches!(r, Err(HuntError::Interrupted { signal: 15 })), "{r:?}");
        assert!(start.elapsed() < Duration::from_secs(10), "SIGTERM stopped the sleep");
        assert_eq!(cancel.running(), 0);
        assert_eq!(cancel.signal(), Some(15));
        let r = cancel.output(&mut Command::new("true"), "true");
        assert!(matches!(r, Err(HuntError::Interrupted { signal: 15 })), "{r:?}");
        assert_eq!(cancel.error().exit_code(), 143);
    }

    #[test]
    fn an_uninterrupted_child_gives_its_output() {
        let cancel = Cancel::new();
        let out = cancel.output(Command::new("echo").arg("hi").stdout(std::process::Stdio::piped()), "echo").unwrap();
        assert_eq!(out.stdout, b"hi\n");
        let e = cancel.output(&mut Command::new("/nonexistent/x"), "x").unwrap_err();
        assert!(e.to_string().starts_with("cannot run x"), "{e}");
    }
}
