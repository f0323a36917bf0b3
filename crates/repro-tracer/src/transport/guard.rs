//! The host-socket guard of a `--no-supervisor` run: the guest's own seccomp rules plus a user notification for
//! the calls that may name a pathname UNIX socket ([`crate::handlers::unix::notified`]), served by a thread of the
//! sandbox's init (non-dumpable, out of the guest's reach) with the supervisor's check
//! ([`crate::handlers::unix::guard`]): a host daemon's socket on a read-only mount answers EACCES, everything
//! else runs natively. Nothing else of the supervisor is involved: no determinism, no ptrace.

use std::os::fd::OwnedFd;

use repro_sys::seccomp::{BpfFilter, Listener, ListenerState};

use crate::guest::{PidfdCache, TaskGuest};
use crate::handlers::unix;
use crate::reply::Refusal;

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
    let listener = Listener::new(listener);
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
        // A failed answer (ENOENT: the task was killed or its call interrupted) has nobody waiting for it.
        let _ = match unix::guard(&mut guest, n.nr as i64, &n.args) {
            Some(Err(Refusal::Errno(e))) => listener.respond_error(n.id, e),
            _ => listener.respond_continue(n.id),
        };
    }
}
