//! The rare events handled at ptrace stops: a new program image (vDSO and AT_RANDOM) and the rdtsc trap.

use repro_detcore::ClockKind;
use repro_sys::memory;
use repro_sys::ptrace::{Stopped, Tracee};

use crate::{lock, SharedRef};

const AT_NULL: u64 = 0;
const AT_RANDOM: u64 = 25;
const AT_SYSINFO_EHDR: u64 = 33;

/// Locations in a new image's initial stack.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct AuxvSlots {
    /// Address of the value word of the AT_SYSINFO_EHDR entry.
    pub sysinfo_ehdr_value: Option<u64>,
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
            AT_SYSINFO_EHDR => slots.sysinfo_ehdr_value = Some(a + 8),
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

/// At the exec stop: disable the vDSO and rewrite AT_RANDOM.
pub(crate) fn on_exec(tracee: &Tracee<Stopped>, shared: &SharedRef) {
    let tid = tracee.tid();
    let mut sh = lock(shared);
    sh.stats.execs += 1;
    sh.live.insert(tid);
    let Ok(regs) = tracee.regs() else {
        sh.not_enforced.insert(format!(
            "could not read the registers of pid {tid} at exec; vDSO and AT_RANDOM left as the kernel set them"
        ));
        return;
    };
    let mut reader = StackReader { pid: tid, base: 0, buf: Vec::new() };
    let slots = find_auxv(stack_pointer(&regs), |a| reader.word(a));
    match slots.sysinfo_ehdr_value {
        // With AT_SYSINFO_EHDR = 0 the C library finds no vDSO and makes real syscalls, which the
        // seccomp filter mediates.
        Some(addr) => {
            if let Err(e) = memory::write(tid, addr, &0u64.to_le_bytes()) {
                sh.not_enforced.insert(format!("could not disable the vDSO of pid {tid}: {e}"));
            }
        }
        None => {
            // No vDSO entry (kernel booted with vdso=0, or an unreadable stack).
        }
    }
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
        sh.stats.rdtsc += 1;
        // A 1 GHz counter on the logical monotonic clock; it advances by the clock step like a read.
        let t = match sh.ctl.clock.read(ClockKind::Monotonic) {
            repro_detcore::ClockRead::Value(t) => t,
            repro_detcore::ClockRead::Stalled { .. } => {
                sh.ctl.note_event();
                sh.ctl.clock.peek(ClockKind::Monotonic)
            }
        };
        (t.sec as u64).wrapping_mul(1_000_000_000).wrapping_add(t.nsec as u64)
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
