//! The host-socket guard of a `--no-supervisor` run: the guest's own seccomp rules plus a user notification for
//! the calls that may name a pathname UNIX socket ([`crate::handlers::unix::notified`]), served by a thread of the
//! sandbox's init (non-dumpable, out of the guest's reach) with the supervisor's check
//! ([`crate::handlers::unix::guard`]): a host daemon's socket on a read-only mount answers EACCES, everything
//! else runs natively. A connect of an AF_UNIX socket is made by the guard ([`crate::handlers::unix::connect`]):
//! checked and connected in one, as supervised. Nothing else of the supervisor is involved: no determinism, no
//! ptrace.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use repro_sys::seccomp::{BpfFilter, Listener, ListenerState};

use crate::guest::{PidfdCache, TaskGuest};
use crate::handlers::unix;
use crate::reply::{Outcome, Refusal};

/// Errors of the guard.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// The filter could not be compiled.
    #[error("building the host-socket guard's seccomp filter: {0}")]
    Filter(#[source] std::io::Error),
}

/// The guest's filter for a `--no-supervisor` run: [`repro_sys::confine::guest_rules`] and the guard's
/// notifications. Install it with a listener ([`repro_sys::spawn::spawn_guest`]) and serve that with
/// [`serve_socket_guard`].
pub fn socket_guard_filter() -> Result<BpfFilter, GuardError> {
    let (notify, when) = unix::notified();
    let mut rules = repro_sys::confine::guest_rules();
    rules.add_notify(&notify, &when).and_then(|()| BpfFilter::compile(&rules)).map_err(GuardError::Filter)
}

/// Answers the guard's notifications until no task is left under the filter (the listener hangs up).
pub fn serve_socket_guard(listener: OwnedFd) {
    let listener = Arc::new(Listener::new(listener));
    // Wakes this thread on the guest's CPU (Linux 6.6+); without it answers are only slower.
    let _ = listener.set_sync_wakeup();
    let mut pidfds = PidfdCache::default();
    loop {
        let n = match listener.recv() {
            Ok(n) => n,
            Err(_) => match listener.wait(-1) {
                Ok(ListenerState::Readable) | Ok(ListenerState::Timeout) => continue,
                Ok(ListenerState::Hangup) | Err(_) => return,
            },
        };
        let mut guest = TaskGuest::new(n.pid as i32, Some((&listener, n.id)), &mut pidfds);
        if n.nr as i64 == libc::SYS_connect {
            if let Some(started) = unix::connect(&mut guest, &n.args) {
                let r = match started.map(unix::finished_soon) {
                    Err(e) => Err(Refusal::Errno(e)),
                    Ok(Ok(r)) => r,
                    // It blocks (a full backlog): a thread of its own waits, so the guard serves the others.
                    Ok(Err(c)) => {
                        let (l, id, tid) = (listener.clone(), n.id, n.pid as i32);
                        let waiter = std::thread::Builder::new().name("repro-connect".into()).spawn(move || {
                            let r = unix::finish(c, || l.id_valid(id) && !unix::interrupted(tid));
                            let _ = answer(&l, id, r);
                        });
                        match waiter {
                            Ok(_) => continue,
                            Err(_) => Err(Refusal::Errno(libc::EAGAIN)),
                        }
                    }
                };
                let _ = answer(&listener, n.id, r);
                continue;
            }
        }
        // A failed answer (ENOENT: the task was killed or its call interrupted) has nobody waiting for it.
        let _ = match unix::guard(&mut guest, n.nr as i64, &n.args) {
            Some(Err(Refusal::Errno(e))) => listener.respond_error(n.id, e),
            _ => listener.respond_continue(n.id),
        };
    }
}

/// Answers notification `id` with the result of a connect the guard made. A failed answer (ENOENT) has nobody
/// waiting for it.
fn answer(listener: &Listener, id: u64, r: Outcome) -> std::io::Result<()> {
    match r {
        Ok(v) => listener.respond_value(id, v),
        Err(Refusal::Errno(e)) => listener.respond_error(id, e),
        Err(Refusal::Native) => listener.respond_continue(id),
    }
}
