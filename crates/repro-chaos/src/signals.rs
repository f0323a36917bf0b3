//! SIGINT and SIGTERM during a run: the first one cancels the flow through the interpreter (the undo and the
//! cleanup then get [`crate::flow::INTERRUPT_BUDGET`]); if the run is not finished at [`INTERRUPT_DEADLINE`],
//! or a second signal arrives, [`overrun`] kills what is left and exits 128 + the signal.
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use repro_model::timeline::Event;

use crate::common::INTERRUPTED_MARKER;
use crate::engine::Ctx;
use crate::flow::signal_name;
use crate::fsutil::write_atomic;
use crate::proc;

/// After a signal, if the undo and the cleanup are not done by then, every process group of the run is
/// killed and the harness exits.
pub const INTERRUPT_DEADLINE: Duration = Duration::from_millis(1700);

/// Turns SIGINT and SIGTERM into an interrupt of the run while it lasts (children keep default handling).
pub struct SignalGuard {
    handle: Option<signal_hook::iterator::Handle>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SignalGuard {
    /// Installs the handler; a run without it (the handler could not be registered) says so in its timeline.
    pub fn install(ctx: &Arc<Ctx>) -> SignalGuard {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let mut signals = match signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) {
            Ok(s) => s,
            Err(e) => {
                ctx.emit(Event::HarnessWarning {
                    target: None,
                    instance: None,
                    detail: format!("SIGINT/SIGTERM handler not installed ({e}): a signal ends the harness at once"),
                });
                return SignalGuard { handle: None, thread: None };
            }
        };
        let handle = signals.handle();
        let ctx = Arc::clone(ctx);
        let thread = std::thread::spawn(move || {
            for sig in signals.forever() {
                if !ctx.flow.interrupt(sig, &*ctx) {
                    overrun(&ctx, sig, "a second signal arrived during the cleanup");
                    continue;
                }
                let ctx = Arc::clone(&ctx);
                std::thread::spawn(move || {
                    std::thread::sleep(INTERRUPT_DEADLINE);
                    overrun(&ctx, sig, "the undo and cleanup did not finish in time");
                });
            }
        });
        SignalGuard { handle: Some(handle), thread: Some(thread) }
    }
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

/// The cleanup after a signal overran its deadline, or a second signal came: kill every process group the
/// run started (resumed first, so nothing stays stopped), mark the run directory interrupted (it keeps
/// `INCOMPLETE`: there is no verdict) and exit 128 + the signal. Nothing happens once the run directory is
/// final.
pub fn overrun(ctx: &Ctx, sig: i32, why: &str) {
    let finished = ctx.finished.lock().unwrap_or_else(|err| err.into_inner());
    if *finished {
        return;
    }
    let mut groups: Vec<i32> = ctx.groups.lock().unwrap_or_else(|err| err.into_inner()).clone();
    groups.extend(ctx.watcher_groups.lock().unwrap_or_else(|err| err.into_inner()).iter().copied());
    for t in ctx.targets.values() {
        if let Some((pid, _)) = t.pid() {
            groups.push(pid);
        }
    }
    for g in &groups {
        proc::kill_group(*g, Signal::SIGCONT);
        proc::kill_group(*g, Signal::SIGKILL);
    }
    let text = format!(
        "interrupted by {}: {why}; every process group of the run was killed; there is no verdict\n",
        signal_name(sig)
    );
    let marker = write_atomic(&ctx.run_dir.join(INTERRUPTED_MARKER), text.as_bytes()).err();
    ctx.emit(Event::harness_error(format!("interrupted by {}: {why}", signal_name(sig))));
    // Best effort on the way out: the process exits next whatever the disk says.
    let _ = ctx.tl.sync();
    let mut msg = format!("repro: interrupted by {}: {why}; killed the run's processes\n", signal_name(sig));
    if let Some(e) = marker {
        msg.push_str(&format!("repro: could not mark the run interrupted: {e}\n"));
    }
    // Nothing is left to tell if stderr is gone.
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), msg.as_bytes());
    std::process::exit(128 + sig);
}
