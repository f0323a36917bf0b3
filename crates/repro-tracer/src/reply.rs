//! The typed answer a handler gives and the transport writes back.

use std::os::fd::OwnedFd;

use crate::state::SharedRef;

/// What to tell the kernel about a notified syscall.
pub(crate) enum Reply {
    /// Return this value.
    Value(i64),
    /// Fail with this errno.
    Error(i32),
    /// Let the syscall run natively (SECCOMP_USER_NOTIF_FLAG_CONTINUE).
    Continue,
    /// Install this descriptor in the guest and return its number.
    AddFd { fd: OwnedFd, cloexec: bool },
    /// A call that would block (a recv or accept while recording the network): it is made on a thread of its
    /// own, which answers when it returns, so that the notify thread goes on serving the guest's other tasks
    /// (one of which may be the peer it waits for).
    Defer(Box<dyn FnOnce(&SharedRef) -> Reply + Send>),
    /// A timed wait the supervisor holds: the waits scheduler (handlers::waits::schedule) answers it later, when
    /// the guest ends it or it times out in logical time. Nothing is sent now.
    Parked,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Value(v) => write!(f, "Value({v})"),
            Reply::Error(e) => write!(f, "Error({e})"),
            Reply::Continue => write!(f, "Continue"),
            Reply::AddFd { cloexec, .. } => write!(f, "AddFd(cloexec: {cloexec})"),
            Reply::Defer(_) => write!(f, "Defer"),
            Reply::Parked => write!(f, "Parked"),
        }
    }
}

impl Reply {
    /// A raw syscall result: a count, or a negative errno.
    pub(crate) fn from_raw(r: i64) -> Reply {
        if r < 0 {
            Reply::Error(-r as i32)
        } else {
            Reply::Value(r)
        }
    }
}

/// Why a handler gives no value: the guest gets an errno, or the call runs natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    Errno(i32),
    Native,
}

impl From<i32> for Refusal {
    fn from(errno: i32) -> Self {
        Refusal::Errno(errno)
    }
}

/// The outcome of a handler that answers with a value or an errno, or lets the call run.
pub(crate) type Outcome = Result<i64, Refusal>;
