//! `REPRO_TRACE_STARTUP=1`: the moments a run's start-up phases end, on stderr, for `bench/startup.sh` and for
//! whoever profiles the start-up. Off (one environment lookup per process) unless the variable is set.
//!
//! The `repro` binary calls [`begin`] first: it replaces the `1` with its start time (CLOCK_MONOTONIC, in
//! nanoseconds), so that the processes a run starts with repro's environment (the init, the cleanup process;
//! never the guest, whose environment is the policy's) count from the same origin.

use std::fmt::Display;
use std::sync::OnceLock;

/// The variable that turns the trace on.
pub const VAR: &str = "REPRO_TRACE_STARTUP";

static ORIGIN: OnceLock<Option<u64>> = OnceLock::new();

fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// The origin from `value` of the variable: `1` starts a trace now (`now`), a number continues one begun by
/// another repro process; anything else (or nothing) is no trace.
fn origin_of(value: Option<&str>, now: u64) -> Option<u64> {
    match value? {
        "1" => Some(now),
        v => v.parse().ok(),
    }
}

/// Called by the `repro` binary before anything else, while it has a single thread (it sets the variable).
pub fn begin() {
    let now = now_ns();
    let value = std::env::var(VAR).ok();
    let origin = origin_of(value.as_deref(), now);
    if value.as_deref() == Some("1") {
        if let Some(o) = origin {
            // Single-threaded here (the first statement of main): nothing reads the environment concurrently.
            std::env::set_var(VAR, o.to_string());
        }
    }
    let _ = ORIGIN.set(origin);
}

fn origin() -> Option<u64> {
    *ORIGIN.get_or_init(|| origin_of(std::env::var(VAR).ok().as_deref(), now_ns()))
}

/// Whether this process traces its start-up.
pub fn enabled() -> bool {
    origin().is_some()
}

/// Says on stderr that `what` is done, in milliseconds since the trace's origin, with this process's id.
pub fn mark(what: impl Display) {
    if let Some(o) = origin() {
        let ms = now_ns().saturating_sub(o) as f64 / 1e6;
        eprintln!("[repro startup] {ms:8.3} ms  pid {:<6} {what}", std::process::id());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_origin_is_now_for_1_and_the_number_of_an_outer_trace() {
        assert_eq!(origin_of(Some("1"), 42), Some(42));
        assert_eq!(origin_of(Some("1234"), 42), Some(1234));
        assert_eq!(origin_of(Some("yes"), 42), None);
        assert_eq!(origin_of(Some(""), 42), None);
        assert_eq!(origin_of(None, 42), None);
    }
}
