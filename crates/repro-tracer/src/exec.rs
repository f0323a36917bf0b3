//! The rare events handled at ptrace stops: a new program image (vDSO and AT_RANDOM) and the rdtsc trap.

use repro_sys::memory;
use repro_sys::ptrace::{Event, InjectError, Stopped, Tracee};
use repro_sys::shmem::PAGE;

use crate::state::{lock, SharedRef};

const AT_NULL: u64 = 0;
const AT_RANDOM: u64 = 25;
const AT_SYSINFO_EHDR: u64 = 33;

/// Locations in a new image's initial stack.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct AuxvSlots {
    /// Address of the value word of the AT_SYSINFO_EHDR entry.
    pub sysinfo_ehdr_value: Option<u64>,
    /// The AT_SYSINFO_EHDR value: where the kernel mapped its vDSO.
    pub sysinfo_ehdr: Option<u64>,
    /// Address the AT_RANDOM entry points at (16 bytes).
    pub random_bytes: Option<u64>,
}

/// Walks argc, argv, envp and the auxiliary vector of the initial stack at `sp`; `read_word` reads
/// one word. Gives up (returns what it found) after a bounded number of words.
pub(crate) fn find_auxv(sp: u64, mut read_word: impl FnMut(u64) -> Option<u64>) -> AuxvSlots {
    let mut slots = AuxvSlots::default();
    let Some(argc) = read_word(sp) else { return slots };
    if argc > 1 << 20 {
        return slots;
    }
    let mut a = sp + 8 * (argc + 2); // skip argc, argv[], NULL
    let mut budget = 1 << 20;
    while let Some(w) = read_word(a) {
        a += 8;
        budget -= 1;
        if w == 0 || budget == 0 {
            break;
        }
    }
    for _ in 0..512 {
        let (Some(key), Some(val)) = (read_word(a), read_word(a + 8)) else { break };
        match key {
            AT_NULL => break,
            AT_SYSINFO_EHDR => {
                slots.sysinfo_ehdr_value = Some(a + 8);
                slots.sysinfo_ehdr = Some(val);
            }
            AT_RANDOM => slots.random_bytes = Some(val),
            _ => {}
        }
        a += 16;
    }
    slots
}

/// A buffered reader of the initial stack (one process_vm_readv per 16 KiB).
struct StackReader {
    pid: i32,
    base: u64,
    buf: Vec<u8>,
}

impl StackReader {
    fn word(&mut self, addr: u64) -> Option<u64> {
        if addr < self.base || addr + 8 > self.base + self.buf.len() as u64 {
            self.base = addr & !7;
            self.buf.resize(16384, 0);
            let n = memory::read(self.pid, self.base, &mut self.buf).ok()?;
            self.buf.truncate(n);
            if addr + 8 > self.base + n as u64 {
                return None;
            }
        }
        let off = (addr - self.base) as usize;
        Some(u64::from_le_bytes(self.buf[off..off + 8].try_into().ok()?))
    }
}

/// What happened at an exec stop, for the trace loop.
#[derive(Debug, Default)]
pub(crate) struct ExecDone {
    /// The task ended while the vDSO was being installed: the loop handles this event instead.
    pub gone: Option<Event>,
    /// Signals that arrived during the installation, to send again once the task runs.
    pub deferred: Vec<i32>,
}

/// At the exec stop: rewrite AT_RANDOM and replace the vDSO (or, when that fails, disable it).
pub(crate) fn on_exec(tracee: &Tracee<Stopped>, shared: &SharedRef) -> ExecDone {
    let tid = tracee.tid();
    let mut done = ExecDone::default();
    crate::rdrand::check_exec(tid, shared);
    repro_sys::startup::mark("supervisor: exec stop, program scanned for RDRAND");
    let slots = {
        let mut sh = lock(shared);
        sh.stats.execs += 1;
        sh.live.insert(tid);
        // A new image has no POSIX timers (the exec'ing task is now its process's leader); ITIMER_REAL stays.
        sh.ctl.timers.forget_process(tid, true);
        if let Some(log) = sh.access.as_mut() {
            log.note_maps(tid);
        }
        let Ok(regs) = tracee.regs() else {
            sh.not_enforced.insert(format!(
                "could not read the registers of pid {tid} at exec; vDSO and AT_RANDOM left as the kernel set them"
            ));
            return done;
        };
        let mut reader = StackReader { pid: tid, base: 0, buf: Vec::new() };
        let slots = find_auxv(stack_pointer(&regs), |a| reader.word(a));
        match slots.random_bytes {
            Some(addr) => {
                let bytes = sh.ctl.at_random(tid);
                if let Err(e) = memory::write(tid, addr, &bytes) {
                    sh.not_enforced.insert(format!("could not rewrite AT_RANDOM of pid {tid}: {e}"));
                }
            }
            None => {
                sh.not_enforced.insert(format!("no AT_RANDOM entry found in the auxiliary vector of pid {tid}"));
            }
        }
        slots
    };
    // No vDSO entry: the kernel was booted with vdso=0 (or the stack is unreadable); nothing to replace.
    let (Some(addr), Some(kernel_ehdr)) = (slots.sysinfo_ehdr_value, slots.sysinfo_ehdr) else { return done };
    // First the safe state: with AT_SYSINFO_EHDR = 0 the C library finds no vDSO and makes real
    // syscalls, which the filter mediates. Then try to install ours.
    if let Err(e) = memory::write(tid, addr, &0u64.to_le_bytes()) {
        lock(shared).not_enforced.insert(format!("could not replace or disable the vDSO of pid {tid}: {e}"));
        return done;
    }
    match install(tracee, shared, kernel_ehdr, &mut done.deferred) {
        Ok(ehdr) => {
            let mut sh = lock(shared);
            match memory::write(tid, addr, &ehdr.to_le_bytes()) {
                Ok(()) => sh.stats.vdso_replaced += 1,
                Err(e) => sh.vdso_fallback(format!("could not point AT_SYSINFO_EHDR at it: {e}")),
            }
        }
        Err(Failed::Gone(ev)) => done.gone = Some(ev),
        Err(Failed::Other(why)) => lock(shared).vdso_fallback(why),
    }
    repro_sys::startup::mark("supervisor: exec stop handled (AT_RANDOM, vDSO)");
    done
}

enum Failed {
    Gone(Event),
    Other(String),
}

impl From<InjectError> for Failed {
    fn from(e: InjectError) -> Self {
        match e {
            InjectError::Gone(ev) => Failed::Gone(ev),
            InjectError::Sys(e) => Failed::Other(format!("injecting a syscall failed: {e}")),
        }
    }
}

fn ok_or_errno(what: &str, r: i64) -> Result<u64, Failed> {
    if (-4095..0).contains(&r) {
        return Err(Failed::Other(format!(
            "{what} in the guest failed: {}",
            std::io::Error::from_raw_os_error(-r as i32)
        )));
    }
    Ok(r as u64)
}

/// Maps the data page and our image into the task (stopped at its exec event) with injected syscalls:
/// getcpu with magic arguments (the notify thread answers with the memfd, installed by ADDFD), mmap,
/// mprotect, close, and munmap of the kernel's vDSO. Returns the address of our ELF header. The
/// task's registers are restored before returning (except when it is gone).
#[cfg(target_arch = "x86_64")]
fn install(
    tracee: &Tracee<Stopped>,
    shared: &SharedRef,
    kernel_ehdr: u64,
    deferred: &mut Vec<i32>,
) -> Result<u64, Failed> {
    let tid = tracee.tid();
    let (kgadget, unmap, total, image_len, gadget) = {
        let sh = lock(shared);
        let Some(p) = sh.vdso.as_ref() else {
            let why = sh.vdso_unavailable.clone();
            return Err(Failed::Other(why.unwrap_or_else(|| "the replacement vDSO is unavailable".into())));
        };
        (kernel_ehdr + p.kernel.gadget, p.kernel.unmap, p.total_len(), p.image_len, p.gadget)
    };
    tracee.exec_to_syscall_exit(deferred)?;
    let saved = tracee.regs().map_err(InjectError::from)?;
    let call = |gadget: u64, nr: i64, args: [u64; 6], deferred: &mut Vec<i32>| {
        tracee.inject_syscall(&saved, gadget, nr, args, deferred)
    };
    lock(shared).vdso_fd_requests.insert(tid);
    let [m0, m1] = crate::vdso::FD_REQUEST_MAGIC;
    let fd = call(kgadget, libc::SYS_getcpu, [m0, m1, tid as u64, 0, 0, 0], deferred);
    lock(shared).vdso_fd_requests.remove(&tid);
    let result = (|| {
        let fd = ok_or_errno("receiving the vDSO memfd", fd?)?;
        let prot_rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        let mapped = call(kgadget, libc::SYS_mmap, [0, total, prot_rw, libc::MAP_SHARED as u64, fd, 0], deferred);
        let closed = call(kgadget, libc::SYS_close, [fd, 0, 0, 0, 0, 0], deferred);
        let base = ok_or_errno("mmap of the vDSO", mapped?)?;
        ok_or_errno("close of the vDSO memfd", closed?)?;
        let prot_rx = (libc::PROT_READ | libc::PROT_EXEC) as u64;
        let r = call(kgadget, libc::SYS_mprotect, [base + PAGE as u64, image_len, prot_rx, 0, 0, 0], deferred)?;
        if let Err(e) = ok_or_errno("mprotect of the vDSO", r) {
            call(kgadget, libc::SYS_munmap, [base, total, 0, 0, 0, 0], deferred)?;
            return Err(e);
        }
        // The kernel's own vDSO (and its vvar pages) go away, so a program that finds it through
        // /proc/self/maps cannot read the host clock through it. Best effort: it is harmless if it fails.
        let ours = base + PAGE as u64 + gadget;
        let lo = kernel_ehdr.wrapping_add(unmap.0 as u64);
        call(ours, libc::SYS_munmap, [lo, unmap.1, 0, 0, 0, 0], deferred)?;
        Ok(base + PAGE as u64)
    })();
    if matches!(result, Err(Failed::Gone(_))) {
        return result;
    }
    tracee.set_regs(saved).map_err(|e| Failed::Other(format!("restoring the registers failed: {e}")))?;
    result
}

#[cfg(not(target_arch = "x86_64"))]
fn install(_: &Tracee<Stopped>, _: &SharedRef, _: u64, _: &mut Vec<i32>) -> Result<u64, Failed> {
    Err(Failed::Other("the replacement vDSO exists for x86_64 only".into()))
}

#[cfg(target_arch = "x86_64")]
fn stack_pointer(r: &repro_sys::ptrace::Regs) -> u64 {
    r.rsp
}

/// Emulates rdtsc/rdtscp at a SIGSEGV stop caused by PR_SET_TSC; false if the fault was something else.
#[cfg(target_arch = "x86_64")]
pub(crate) fn emulate_rdtsc(tracee: &Tracee<Stopped>, shared: &SharedRef) -> bool {
    let Ok(mut regs) = tracee.regs() else { return false };
    let Ok(word) = tracee.peek(regs.rip) else { return false };
    let b = word.to_le_bytes();
    let len = match b {
        [0x0f, 0x31, ..] => 2,
        [0x0f, 0x01, 0xf9, ..] => 3,
        _ => return false,
    };
    let ticks = {
        let mut sh = lock(shared);
        sh.sync_in();
        sh.stats.rdtsc += 1;
        let ticks = sh.ctl.rdtsc();
        sh.sync_out();
        ticks
    };
    regs.rax = ticks & 0xffff_ffff;
    regs.rdx = ticks >> 32;
    if len == 3 {
        regs.rcx = 0; // IA32_TSC_AUX: cpu 0
    }
    regs.rip += len;
    tracee.set_regs(regs).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_auxv_entries() {
        // argc=2, argv0, argv1, NULL, env0, NULL, (AT_PAGESZ 4096), (AT_RANDOM 0x5000), (AT_SYSINFO_EHDR 0x7000), AT_NULL
        let words: Vec<u64> = vec![2, 0x10, 0x20, 0, 0x30, 0, 6, 4096, 25, 0x5000, 33, 0x7000, 0, 0];
        let base = 0x1000u64;
        let slots = find_auxv(base, |a| words.get(((a - base) / 8) as usize).copied());
        assert_eq!(slots.random_bytes, Some(0x5000));
        assert_eq!(slots.sysinfo_ehdr_value, Some(base + 11 * 8));
        assert_eq!(slots.sysinfo_ehdr, Some(0x7000));
    }

    #[test]
    fn truncated_stack_is_not_a_panic() {
        let words: Vec<u64> = vec![3, 0x10];
        let slots = find_auxv(0, |a| words.get((a / 8) as usize).copied());
        assert_eq!(slots, AuxvSlots::default());
        let slots = find_auxv(0, |_| None);
        assert_eq!(slots, AuxvSlots::default());
        let huge = find_auxv(0, |_| Some(u64::MAX));
        assert_eq!(huge, AuxvSlots::default());
    }
}
