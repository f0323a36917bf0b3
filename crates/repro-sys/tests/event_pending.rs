//! `ptrace::event_pending` sees a child's exit that no wait has collected, without collecting it. Its own test
//! binary: it looks at every child of the process, so no other test may start children beside it.

use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn an_uncollected_exit_is_pending_until_it_is_waited_for() {
    assert!(!repro_sys::ptrace::event_pending(), "no child yet");
    let mut child = Command::new("true").spawn().unwrap();
    let start = Instant::now();
    while !repro_sys::ptrace::event_pending() {
        assert!(start.elapsed() < Duration::from_secs(10), "the child's exit never showed");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(repro_sys::ptrace::event_pending(), "looking does not collect it");
    assert!(child.wait().unwrap().success(), "the exit is still there for the real wait");
    assert!(!repro_sys::ptrace::event_pending(), "collected");
}
