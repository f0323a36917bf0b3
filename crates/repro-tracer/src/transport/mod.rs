//! The transports that carry the guest's syscalls to the handlers: the seccomp user notification (every
//! mediated syscall, `notify`) and ptrace (exec, fork and the rdtsc trap: `crate::exec` and the trace loop in
//! `lib.rs`).

pub(crate) mod guard;
pub(crate) mod notify;
