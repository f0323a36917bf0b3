//! The scheduler's decision log (`--sched-log`): at each decision among two or more ready guest threads, what each
//! was stopped at (the system call, a futex's operation and address, a descriptor) and where (the call's
//! instruction and, by a scan of the thread's stack, the program code that called the C library), for `repro race`.
//! Only a logging run pays for the /proc and memory reads.

use std::collections::HashMap;

use repro_model::sched::SchedReady;
use repro_sys::seccomp::Notification;

/// How many stack words are scanned for a return address into a program.
const STACK_WORDS: usize = 96;

/// Names of code locations already found, by thread and address.
#[derive(Default)]
pub(crate) struct Describer {
    names: HashMap<(i32, u64), String>,
}

impl Describer {
    /// Where notification `n`'s thread stands.
    pub(crate) fn ready(&mut self, task: u64, n: &Notification) -> SchedReady {
        let tid = n.pid as i32;
        let mut at = self.name(tid, n.ip);
        if let Some(caller) = caller(tid) {
            at = format!("{at} <- {}", self.name(tid, caller));
        }
        SchedReady { task, call: call(n.nr as i64, &n.args), at }
    }

    fn name(&mut self, tid: i32, addr: u64) -> String {
        self.names.entry((tid, addr)).or_insert_with(|| crate::sched::symbolize(tid, addr)).clone()
    }
}

/// A thread in a wait the waits scheduler parked (released when its condition is met), for the log: the call
/// and where it was made, from `/proc/TID/syscall`'s instruction pointer.
pub(crate) fn parked(task: u64, tid: i32, name: &str) -> SchedReady {
    let pc = std::fs::read_to_string(format!("/proc/{tid}/syscall")).ok().and_then(|sc| {
        sc.split_whitespace().nth(8).and_then(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).ok())
    });
    let mut at = pc.map_or_else(|| "an unknown address".to_string(), |pc| crate::sched::symbolize(tid, pc));
    if let Some(c) = caller(tid) {
        at = format!("{at} <- {}", crate::sched::symbolize(tid, c));
    }
    SchedReady { task, call: format!("{name} (a timed wait that can end)"), at }
}

/// Where task `parent`, stopped at its clone or fork, creates a task: the program code that called the C library
/// (found as for [`Describer::ready`]), or the call's instruction when there is none; for the log's `start` entries,
/// whose own location is the clone's instruction in the C library.
pub(crate) fn creator(parent: i32) -> Option<String> {
    let addr = caller(parent).or_else(|| {
        let sc = std::fs::read_to_string(format!("/proc/{parent}/syscall")).ok()?;
        sc.split_whitespace().nth(8).and_then(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).ok())
    })?;
    Some(crate::sched::symbolize(parent, addr))
}

/// The call with what tells it apart from another of its kind.
pub(crate) fn call(nr: i64, args: &[u64; 6]) -> String {
    let name = crate::decode::name(nr);
    match nr {
        libc::SYS_futex => {
            let op = match (args[1] & 0x7f) as i32 {
                libc::FUTEX_WAIT => "WAIT",
                libc::FUTEX_WAKE => "WAKE",
                libc::FUTEX_REQUEUE => "REQUEUE",
                libc::FUTEX_CMP_REQUEUE => "CMP_REQUEUE",
                libc::FUTEX_WAKE_OP => "WAKE_OP",
                libc::FUTEX_LOCK_PI => "LOCK_PI",
                libc::FUTEX_UNLOCK_PI => "UNLOCK_PI",
                libc::FUTEX_WAIT_BITSET => "WAIT_BITSET",
                libc::FUTEX_WAKE_BITSET => "WAKE_BITSET",
                _ => "op",
            };
            format!("futex({op}, {:#x})", args[0])
        }
        libc::SYS_getdents64
        | libc::SYS_fstat
        | libc::SYS_fstatfs
        | libc::SYS_epoll_wait
        | libc::SYS_epoll_pwait
        | libc::SYS_epoll_pwait2
        | libc::SYS_bind
        | libc::SYS_connect
        | libc::SYS_listen => format!("{name}(fd {})", args[0] as i32),
        libc::SYS_sched_yield => "sched_yield".into(),
        _ => name.to_string(),
    }
}

/// The first return address on thread `tid`'s stack that points into a program or library other than the C
/// library and the dynamic loader: the code that made the call (a heuristic: a stale word can be found first).
fn caller(tid: i32) -> Option<u64> {
    // "nr args... sp pc" while the thread is in a system call (it is: stopped at its notification).
    let sc = std::fs::read_to_string(format!("/proc/{tid}/syscall")).ok()?;
    let fields: Vec<&str> = sc.split_whitespace().collect();
    let sp = u64::from_str_radix(fields.get(7)?.trim_start_matches("0x"), 16).ok()?;
    let maps = std::fs::read_to_string(format!("/proc/{tid}/maps")).ok()?;
    let code = code_ranges(&maps);
    let mut buf = vec![0u8; STACK_WORDS * 8];
    repro_sys::memory::read_exact(tid, sp, &mut buf).ok()?;
    buf.chunks_exact(8)
        .map(|w| u64::from_ne_bytes(w.try_into().unwrap_or([0; 8])))
        .filter(|&a| code.iter().any(|&(lo, hi)| a >= lo && a < hi))
        .find(|&a| after_a_call(tid, a))
}

/// Whether `addr` follows a call instruction (a return address, not a function pointer or other stale word):
/// on x86-64 a `call rel32` (e8) five bytes before, or an indirect `call` (ff /2) two to seven bytes before.
#[cfg(target_arch = "x86_64")]
fn after_a_call(tid: i32, addr: u64) -> bool {
    let mut b = [0u8; 7];
    if repro_sys::memory::read_exact(tid, addr.wrapping_sub(7), &mut b).is_err() {
        return false;
    }
    is_call_before(&b)
}

/// `b`: the seven bytes before a candidate return address.
#[cfg(any(target_arch = "x86_64", test))]
fn is_call_before(b: &[u8; 7]) -> bool {
    b[2] == 0xe8 || (2..=7).any(|n| b[7 - n] == 0xff && (b[8 - n] >> 3) & 7 == 2)
}

/// Elsewhere every word in code counts (aarch64's return addresses are in the link register and frame records).
#[cfg(not(target_arch = "x86_64"))]
fn after_a_call(_tid: i32, _addr: u64) -> bool {
    true
}

/// The executable file mappings of a `/proc/PID/maps` text, but the C library's and the loader's.
fn code_ranges(maps: &str) -> Vec<(u64, u64)> {
    maps.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (range, perms) = (f.next()?, f.next()?);
            let path = f.nth(3)?;
            let file = path.rsplit('/').next()?;
            if !perms.contains('x') || !path.starts_with('/') || is_runtime(file) {
                return None;
            }
            let (lo, hi) = range.split_once('-')?;
            Some((u64::from_str_radix(lo, 16).ok()?, u64::from_str_radix(hi, 16).ok()?))
        })
        .collect()
}

/// The C library, its threads library and the dynamic loader: where every call passes, so never the caller.
fn is_runtime(file: &str) -> bool {
    ["libc.so", "libc-", "libpthread", "ld-linux", "ld-musl", "libc.musl"].iter().any(|p| file.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_name_the_futex_operation_and_the_descriptor() {
        let mut a = [0u64; 6];
        a[0] = 0x7f00_1000;
        a[1] = libc::FUTEX_WAKE as u64 | 128;
        assert_eq!(call(libc::SYS_futex, &a), "futex(WAKE, 0x7f001000)");
        a[0] = 4;
        assert_eq!(call(libc::SYS_connect, &a), "connect(fd 4)");
        assert_eq!(call(libc::SYS_sched_yield, &a), "sched_yield");
    }

    #[test]
    fn return_addresses_follow_a_call() {
        assert!(is_call_before(&[0, 0, 0xe8, 1, 2, 3, 4]), "call rel32");
        assert!(is_call_before(&[0, 0, 0, 0, 0, 0xff, 0xd0]), "call *%rax");
        assert!(is_call_before(&[0, 0, 0, 0, 0xff, 0x50, 0x08]), "call *0x8(%rax)");
        assert!(!is_call_before(&[0x55, 0x48, 0x89, 0xe5, 0x90, 0x90, 0x90]), "a function's first bytes");
        assert!(!is_call_before(&[0, 0, 0, 0, 0, 0xff, 0xe0]), "jmp *%rax");
    }

    #[test]
    fn code_ranges_leave_out_the_c_library_and_data() {
        let maps = "\
55d0a000-55d0b000 r-xp 00001000 fd:01 10 /usr/bin/race
55d0b000-55d0c000 r--p 00002000 fd:01 10 /usr/bin/race
7f10000-7f20000 r-xp 00028000 fd:01 11 /usr/lib/x86_64-linux-gnu/libc.so.6
7f30000-7f40000 r-xp 00001000 fd:01 12 /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
7f50000-7f60000 r-xp 00000000 00:00 0 
7ffd000-7ffe000 r-xp 00000000 00:00 0 [vdso]
";
        assert_eq!(code_ranges(maps), [(0x55d0a000, 0x55d0b000)]);
    }
}
