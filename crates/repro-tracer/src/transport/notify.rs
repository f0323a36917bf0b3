//! The notify loop: receives the seccomp user notifications, decodes each into a typed syscall, has the
//! handlers answer it, and writes the answer back.

use std::os::fd::AsRawFd;
use std::sync::Arc;

use repro_sys::seccomp::{Listener, ListenerState, Notification};

use crate::decode::decode;
use crate::guest::{PidfdCache, TaskGuest};
use crate::handlers::{dispatch, unix};
use crate::reply::{Refusal, Reply};
use crate::state::{lock, SharedRef};

/// Serves notifications until no guest task is left under the filter.
///
/// The receive ioctl is tried first (one syscall per notification on the hot path); it fails at once
/// when the filter has no task left or the task died, and only then is the listener polled to tell
/// the two apart.
pub(crate) fn serve(listener: Listener, shared: SharedRef) {
    let listener = Arc::new(listener);
    // Wake the supervisor on the guest's CPU: halves the round trip (Linux 6.6+). Without it (an older kernel)
    // answers are only slower, so a failure is ignored.
    let _ = listener.set_sync_wakeup();
    // The guest runs with rdtsc trapped; with the same setting here, switching between the guest and
    // this thread does not rewrite CR4 (a hypervisor exit each time in a VM; see repro_sys::tsc). Nothing
    // below reads the TSC (no clocks are read on this thread); a failure only costs speed.
    let _ = repro_sys::tsc::disable_for_this_thread();
    let mut pidfds = PidfdCache::default();
    let scheduling = lock(&shared).sched.as_ref().is_some_and(|s| s.active);
    // With the scheduler: the notifications of the guest's threads that wait for an answer, with their task ids.
    let mut held: Vec<(u64, Notification)> = Vec::new();
    let logging = lock(&shared).sched.as_ref().is_some_and(|s| s.log.is_some());
    let mut describer = crate::schedlog::Describer::default();
    // Calls the filter sends only while a capture records the paths used: answered at once, outside the
    // scheduler, so that a capture takes the same decisions as the runs that replay it.
    let mut bypass: Vec<u64> = if scheduling && lock(&shared).access.is_some() {
        crate::access::record_only_syscalls().into_iter().map(u64::from).collect()
    } else {
        Vec::new()
    };
    // The sends notified only for the host-socket guard (untaped): no new scheduling points.
    if scheduling && lock(&shared).tape.is_none() {
        bypass.extend([libc::SYS_sendto, libc::SYS_sendmsg, libc::SYS_sendmmsg].map(|n| n as u64));
    }
    loop {
        if held.is_empty() {
            let n = match listener.recv() {
                Ok(n) => n,
                Err(_) => match listener.wait(-1) {
                    Ok(ListenerState::Readable) | Ok(ListenerState::Timeout) => continue,
                    Ok(ListenerState::Hangup) | Err(_) => return,
                },
            };
            if !scheduling || passes_by(&bypass, &shared, &n) {
                serve_one(n, &listener, &shared, &mut pidfds);
                continue;
            }
            let (id, alone) = note(&shared, &n);
            held.push((id, n));
            if alone {
                // A single task: nothing to choose between (and no poll to pay for).
                let (_, n) = held.swap_remove(0);
                serve_one(n, &listener, &shared, &mut pidfds);
                continue;
            }
        }
        // Every guest thread is blocked now (they run SCHED_FIFO, this thread SCHED_OTHER on their CPU), unless the
        // kernel's real-time throttling let this thread run early (see `settle`): what is pending is all there is.
        // Take it, then let one thread go.
        let mut pending = Pending { listener: &listener, shared: &shared, pidfds: &mut pidfds, bypass: &bypass };
        pending.drain(&mut held);
        // One held thread needs no choice, but not while a tracee's ptrace stop or exit waits for the tracer
        // (which waits for the lock of the supervisor's state): it goes on when the tracer takes it.
        if held.len() > 1 || tracer_busy_elsewhere(&shared, &held) || repro_sys::ptrace::event_pending() {
            pending.settle(&mut held);
        }
        // Where each stands, read before the lock (only when logging, and only for a real choice).
        let mut ready: Vec<repro_model::sched::SchedReady> = if logging && held.len() > 1 {
            held.iter().map(|(id, n)| describer.ready(*id, n)).collect()
        } else {
            Vec::new()
        };
        let pick = {
            let mut sh = lock(&shared);
            let ids: Vec<u64> = held.iter().map(|(id, _)| *id).collect();
            sh.sched.as_mut().map_or(0, |s| {
                let pick = s.scheduler.pick(&ids);
                if ids.len() > 1 {
                    for (r, (_, n)) in ready.iter_mut().zip(&held) {
                        if s.starting.contains(&(n.pid as i32)) {
                            r.call = "start (a new thread or process)".into();
                            if let Some(at) = s.created_at.get(&(n.pid as i32)) {
                                r.at = format!("{} (created at {at})", r.at);
                            }
                        }
                    }
                    if let Some(log) = s.log.as_mut() {
                        log.total += 1;
                        if log.decisions.len() < repro_model::sched::SCHED_LOG_LIMIT {
                            ready.sort_by_key(|r| r.task);
                            log.decisions.push(repro_model::sched::SchedDecision {
                                step: s.scheduler.choices() - 1,
                                chosen: ids[pick],
                                default: s.scheduler.last_default(),
                                ready: std::mem::take(&mut ready),
                            });
                        }
                    }
                }
                let chosen = held[pick].1.pid as i32;
                if s.starting.remove(&chosen) {
                    s.created_at.remove(&chosen);
                }
                pick
            })
        };
        let (_, n) = held.swap_remove(pick);
        serve_one(n, &listener, &shared, &mut pidfds);
    }
}

/// Whether notification `n` is a call the scheduler does not see (`bypass`); counted as the watchdog's sign of
/// progress only (no task id is given out: ids follow the order of the calls the scheduler sees).
fn passes_by(bypass: &[u64], shared: &SharedRef, n: &Notification) -> bool {
    // The tracer's own getcpu at an exec stop (exec::install), which it waits for: not a guest call.
    let injected = n.nr as i64 == libc::SYS_getcpu && {
        let sh = lock(shared);
        crate::handlers::process::is_vdso_fd_request(&sh, n.pid as i32, n.args[0], n.args[1], n.args[2])
    };
    if !injected && !bypass.contains(&u64::from(n.nr as u32)) {
        return false;
    }
    if let Some(s) = lock(shared).sched.as_mut() {
        s.progress += 1;
    }
    true
}

/// Whether the trace loop is handling a ptrace stop of a task that has no notification in `held`: that task runs
/// again when the tracer is done, at a moment of the host's timing (the tracer may block meanwhile, reading a
/// program at its exec), so no decision is taken until then.
fn tracer_busy_elsewhere(shared: &SharedRef, held: &[(u64, Notification)]) -> bool {
    lock(shared).tracer_busy.is_some_and(|t| !held.iter().any(|(_, n)| n.pid as i32 == t))
}

/// What takes the notifications that arrive before a decision.
struct Pending<'a> {
    listener: &'a Arc<Listener>,
    shared: &'a SharedRef,
    pidfds: &'a mut PidfdCache,
    bypass: &'a [u64],
}

impl Pending<'_> {
    /// Takes the notifications pending now (answering those the scheduler does not see).
    fn drain(&mut self, held: &mut Vec<(u64, Notification)>) {
        while let Ok(ListenerState::Readable) = self.listener.wait(0) {
            match self.listener.recv() {
                Ok(n) if passes_by(self.bypass, self.shared, &n) => {
                    serve_one(n, self.listener, self.shared, self.pidfds)
                }
                Ok(n) => {
                    let (id, _) = note(self.shared, &n);
                    held.push((id, n));
                }
                Err(_) => break,
            }
        }
    }

    /// Waits until no guest thread is running before a decision.
    ///
    /// The guest's threads run SCHED_FIFO on this thread's CPU and this thread SCHED_OTHER, so it runs only when
    /// every guest thread has trapped (held here) or blocked, and the decision is taken on a quiet guest. The
    /// kernel's real-time throttling breaks that: once the real-time threads of a CPU (this run's and another run's
    /// sharing the CPU) used up `sched_rt_runtime_us` of a period, SCHED_OTHER threads run too, and a decision taken
    /// then would race the thread let go last, so that the interleaving followed the host's load (seen: a lost-update
    /// counter whose total changed with the load of the machine). Each guest thread not accounted for (held, parked
    /// by the waits scheduler, in a deferred call, or a spinner the watchdog reported) is looked at, and while one
    /// runs this thread waits for its next notification. One /proc read per such thread and decision; in the usual
    /// case every other thread is held or parked and nothing is read.
    fn settle(&mut self, held: &mut Vec<(u64, Notification)>) {
        loop {
            let unaccounted: Vec<i32> = {
                let sh = lock(self.shared);
                let reported = sh.sched.as_ref().map(|s| &s.reported);
                sh.live
                    .iter()
                    .copied()
                    .filter(|t| {
                        !held.iter().any(|(_, n)| n.pid as i32 == *t)
                            && !sh.parked.contains_key(t)
                            && !sh.deferred.contains(t)
                            && !reported.is_some_and(|r| r.contains(t))
                    })
                    .collect()
            };
            let running = tracer_busy_elsewhere(self.shared, held)
                || repro_sys::ptrace::event_pending()
                || unaccounted.iter().any(|t| crate::sched::goes_on_by_itself(*t));
            if !running {
                return;
            }
            // A thread still runs: it traps (a notification), blocks or ends soon, or the watchdog reports it.
            if let Ok(ListenerState::Hangup) = self.listener.wait(1) {
                return;
            }
            self.drain(held);
        }
    }
}

/// A notification arrived: the watchdog's sign of progress. Returns its task's id, and whether the guest has only
/// this one task.
fn note(shared: &SharedRef, n: &Notification) -> (u64, bool) {
    let mut sh = lock(shared);
    let alone = sh.live.len() <= 1;
    match sh.sched.as_mut() {
        Some(s) => {
            s.progress += 1;
            (s.task_id(n.pid as i32), alone)
        }
        None => (0, true),
    }
}

/// Answers one notification (or has a thread of its own answer it, for a call that blocks).
fn serve_one(n: Notification, listener: &Arc<Listener>, shared: &SharedRef, pidfds: &mut PidfdCache) {
    match handle(&n, listener, shared, pidfds) {
        Reply::Defer(call) => {
            let (l, s, id, tid) = (listener.clone(), shared.clone(), n.id, n.pid as i32);
            lock(shared).deferred.insert(tid);
            // The thread inherits this one's blocked signals (the init's signalfd set).
            let spawned = std::thread::Builder::new().name("repro-blocking-call".into()).spawn(move || {
                let reply = call(&s);
                lock(&s).deferred.remove(&tid);
                respond(&l, &s, id, reply)
            });
            if spawned.is_err() {
                lock(shared).deferred.remove(&tid);
                respond(listener, shared, n.id, Reply::Error(libc::EAGAIN));
            }
        }
        reply => respond(listener, shared, n.id, reply),
    }
}

/// Answers one notification; the vDSO's shared clock page is synchronised with the controller around it.
fn handle(n: &Notification, listener: &Arc<Listener>, shared: &SharedRef, pidfds: &mut PidfdCache) -> Reply {
    let nr = n.nr as i64;
    if crate::sched::changes_policy(nr) {
        let mut sh = lock(shared);
        sh.count(crate::decode::name(nr));
        if sh.stats.warnings.len() < 8 {
            sh.stats.warnings.insert(crate::sched::POLICY_REFUSED.to_string());
        }
        return Reply::Value(0);
    }
    // Reads, writes and signals are notified only for the scheduler with `--sched-points io` (or, while the
    // network is taped, for the net handlers, and then there is no scheduler).
    let for_scheduler = || {
        repro_detcore::sched::decision_point(nr).is_some_and(|p| p != repro_detcore::sched::DecisionPoint::Sync)
            && lock(shared).sched.as_ref().is_some_and(|s| s.points == repro_model::SchedPoints::Io)
    };
    if crate::sched::only_a_scheduling_point(nr, &n.args) || for_scheduler() {
        // Notified only so that the scheduler chooses when it runs (see sched.rs): it runs natively now.
        return Reply::Continue;
    }
    let mut guest = TaskGuest::new(n.pid as i32, Some((listener, n.id)), pidfds);
    // A connect of an AF_UNIX socket is made here, on the address read once; not a taped socket's (a replayed inet
    // socket is an AF_UNIX socketpair end the tape answers for).
    if nr == libc::SYS_connect && !crate::handlers::net::is_taped(&lock(shared), &mut guest, n.args[0] as u32 as i32) {
        if let Some(started) = unix::connect(&mut guest, &n.args) {
            let r = match started.map(unix::finished_soon) {
                Err(e) => Err(Refusal::Errno(e)),
                Ok(Ok(r)) => r,
                // It blocks (a full backlog): a thread of its own waits, as the native call would.
                Ok(Err(c)) => {
                    let (l, id, tid) = (listener.clone(), n.id, n.pid as i32);
                    return Reply::Defer(Box::new(move |s| {
                        let r = unix::finish(c, || l.id_valid(id) && !unix::interrupted(tid));
                        crate::handlers::answered(&mut lock(s), nr, r)
                    }));
                }
            };
            return crate::handlers::answered(&mut lock(shared), nr, r);
        }
    }
    // First, before the tapes (which may make the call themselves): a host daemon's socket is not reached.
    if let Some(refused) = unix::guard(&mut guest, nr, &n.args) {
        return crate::handlers::answered(&mut lock(shared), nr, refused);
    }
    let call = decode(nr, n.args);
    let mut sh = lock(shared);
    sh.sync_in();
    let r = dispatch(&mut sh, &mut guest, nr, call);
    crate::handlers::timers::after_call(&mut sh);
    sh.sync_out();
    r
}

/// Sends the answer to notification `id`.
fn respond(listener: &Listener, shared: &SharedRef, id: u64, reply: Reply) {
    let r = match reply {
        Reply::Value(v) => listener.respond_value(id, v),
        Reply::Error(e) => listener.respond_error(id, e),
        Reply::Continue => {
            lock(shared).stats.continued += 1;
            listener.respond_continue(id)
        }
        // If the descriptor cannot be installed (EMFILE...), the syscall fails with that error
        // rather than leaving the task waiting for an answer.
        Reply::AddFd { fd, cloexec } => match listener.addfd_send(id, fd.as_raw_fd(), cloexec) {
            Err(e) if e.raw_os_error() != Some(libc::ENOENT) => {
                listener.respond_error(id, e.raw_os_error().unwrap_or(libc::EIO))
            }
            r => r.map(|_| ()),
        },
        // Not produced by a deferred call itself.
        Reply::Defer(_) => listener.respond_error(id, libc::EIO),
        // The waits scheduler answers it.
        Reply::Parked => Ok(()),
    };
    match r {
        // ENOENT: the task was killed or a signal interrupted the syscall (it will be restarted); nothing waits
        // for this answer any more.
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
        Err(e) => {
            let mut sh = lock(shared);
            if sh.stats.warnings.len() < 8 {
                sh.stats.warnings.insert(format!("answering a notified syscall failed: {e}"));
            }
        }
        Ok(()) => {}
    }
}
