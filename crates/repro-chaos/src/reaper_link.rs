//! The harness's side of the pipe to the current run's reaper (see [`crate::reaper`]): the one place that
//! holds it. [`crate::reaper::Reaper`] connects it and says `done`; whoever starts a process group (hooks,
//! watchers, targets, instances) tells it [`register_group`], and [`release_group`] once the harness killed a
//! finished hook's group. A leaf: it imports nothing of the crate.
use std::io::Write;
use std::process::ChildStdin;
use std::sync::Mutex;

/// The reaper of the run in progress (a harness runs one experiment at a time).
static CURRENT: Mutex<Option<ChildStdin>> = Mutex::new(None);

/// Tells the current run's reaper (if any) about a process group the run started.
pub fn register_group(pgid: i32) {
    let mut g = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(w) = g.as_mut() {
        // A reaper that is gone cannot be told; the run goes on (its own cleanup still runs).
        if writeln!(w, "pgid {pgid}").and_then(|()| w.flush()).is_err() {
            *g = None;
        }
    }
}

/// Tells the current run's reaper that a group it was told of is gone (a finished hook, whose group the harness
/// killed): it forgets it, so that a later process group that happens to get the same id is never killed.
pub fn release_group(pgid: i32) {
    let mut g = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(w) = g.as_mut() {
        if writeln!(w, "gone {pgid}").and_then(|()| w.flush()).is_err() {
            *g = None;
        }
    }
}

/// Makes `stdin` (the pipe to a reaper just started) the current run's.
pub(crate) fn connect(stdin: Option<ChildStdin>) {
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = stdin;
}

/// Says `done` to the current run's reaper (it has nothing to do) and closes the pipe.
pub(crate) fn done() {
    if let Some(mut w) = CURRENT.lock().unwrap_or_else(|e| e.into_inner()).take() {
        // Gone already: it has nothing to do either way.
        let _ = writeln!(w, "done").and_then(|()| w.flush());
    }
}
