//! Disabling the time-stamp counter for the supervisor's notify thread.
//!
//! The guest runs with `PR_SET_TSC(PR_TSC_SIGSEGV)` (rdtsc is trapped and emulated). On x86 the kernel
//! flips CR4.TSD whenever it switches between a task with the TSC disabled and one without, and in a
//! virtual machine every CR4 write exits to the hypervisor: measured here, that added ~11 µs to each
//! seccomp user-notification round trip (guest -> notify thread -> guest). Giving the notify thread
//! the same setting makes those switches free.
//!
//! The notify thread must then not execute rdtsc itself (the vDSO clock does). As a safety net, a
//! SIGSEGV handler re-enables the TSC for a thread that faults with it disabled and lets the
//! instruction run again; any other SIGSEGV goes to the previous handler.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
static REENABLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigsegv(_sig: libc::c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let mut state: libc::c_int = 0;
    // SAFETY: PR_GET_TSC writes one int to the pointer we pass; prctl is async-signal-safe.
    let r = unsafe { libc::prctl(libc::PR_GET_TSC, &mut state as *mut libc::c_int) };
    if r == 0 && state == libc::PR_TSC_SIGSEGV {
        // SAFETY: integer arguments only.
        unsafe { libc::prctl(libc::PR_SET_TSC, libc::PR_TSC_ENABLE, 0, 0, 0) };
        REENABLED.store(true, Ordering::Relaxed);
        return; // the faulting rdtsc runs again, now allowed
    }
    // Not ours: put the previous handler back; the fault repeats and reaches it.
    if let Some(prev) = PREVIOUS.get() {
        // SAFETY: `prev` is a sigaction the kernel gave us; restoring it is async-signal-safe.
        unsafe { libc::sigaction(libc::SIGSEGV, prev, std::ptr::null_mut()) };
    } else {
        // SAFETY: SIG_DFL is always a valid disposition.
        unsafe { libc::signal(libc::SIGSEGV, libc::SIG_DFL) };
    }
}

fn install_handler() -> io::Result<()> {
    if PREVIOUS.get().is_some() {
        return Ok(());
    }
    // SAFETY: sigaction is plain data; zeroed is a valid initial state.
    let mut prev: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = on_sigsegv as *const () as usize;
    act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
    // SAFETY: `act.sa_mask` is a valid sigset_t to initialise.
    unsafe { libc::sigemptyset(&mut act.sa_mask) };
    // SAFETY: reads the current action into `prev` without changing it.
    if unsafe { libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut prev) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // Set once: a second install keeps the first previous action, which is the one to chain to.
    let _ = PREVIOUS.set(prev);
    // SAFETY: installs a handler that only makes async-signal-safe calls.
    if unsafe { libc::sigaction(libc::SIGSEGV, &act, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Traps rdtsc in the calling thread (like the guest), with the safety-net handler installed.
pub fn disable_for_this_thread() -> io::Result<()> {
    install_handler()?;
    // SAFETY: integer arguments only; affects the calling thread.
    if unsafe { libc::prctl(libc::PR_SET_TSC, libc::PR_TSC_SIGSEGV, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Lets the calling thread read the TSC again.
pub fn enable_for_this_thread() -> io::Result<()> {
    // SAFETY: integer arguments only; affects the calling thread.
    if unsafe { libc::prctl(libc::PR_SET_TSC, libc::PR_TSC_ENABLE, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the safety net had to re-enable the TSC for some thread.
pub fn reenabled() -> bool {
    REENABLED.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_thread_that_reads_the_tsc_anyway_is_not_killed() {
        std::thread::spawn(|| {
            disable_for_this_thread().unwrap();
            // SAFETY: rdtsc has no memory effects.
            let t = unsafe { core::arch::x86_64::_rdtsc() };
            assert!(t > 0);
            assert!(reenabled());
            let _ = std::time::Instant::now();
            disable_for_this_thread().unwrap();
            enable_for_this_thread().unwrap();
            // SAFETY: as above.
            assert!(unsafe { core::arch::x86_64::_rdtsc() } > 0);
        })
        .join()
        .unwrap();
    }
}
