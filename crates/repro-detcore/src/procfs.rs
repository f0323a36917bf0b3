//! The per-process files of /proc whose figures the kernel takes from the scheduler and the memory manager:
//! `stat` (start time, CPU times, page faults, RSS, last CPU), `status` (memory sizes, context switches) and
//! `statm`, `io` (block I/O, which depends on the page cache), `schedstat` and `sched` (the scheduler's
//! accounting). The supervisor reads the real file and serves a copy with those fields pinned: the CPU times and
//! counters at zero (as times and getrusage answer), the memory figures fixed, the start time on the logical
//! clock. Everything else (pid, state, ppid, num_threads, signal masks...) stays the real value.

/// A per-process /proc file whose figures vary from run to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PidFile {
    Stat,
    Status,
    Statm,
    Io,
    Schedstat,
    Sched,
}

/// Fixed memory figures (kB) the `status` file reports; `stat` and `statm` derive theirs from them.
pub const FIXED_KB: [(&str, u64); 16] = [
    ("VmPeak", 262_144),
    ("VmSize", 262_144),
    ("VmLck", 0),
    ("VmPin", 0),
    ("VmHWM", 16_384),
    ("VmRSS", 16_384),
    ("RssAnon", 8_192),
    ("RssFile", 8_192),
    ("RssShmem", 0),
    ("VmData", 65_536),
    ("VmStk", 132),
    ("VmExe", 4_096),
    ("VmLib", 8_192),
    ("VmPTE", 128),
    ("VmSwap", 0),
    ("HugetlbPages", 0),
];

/// Counters the `status` file reports as zero.
const ZERO_COUNTERS: [&str; 2] = ["voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"];

fn fixed_kb(name: &str) -> u64 {
    FIXED_KB.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| *v)
}

const PAGE_KB: u64 = 4;

fn is_pid(s: &[u8]) -> bool {
    !s.is_empty() && s.len() <= 10 && s.iter().all(u8::is_ascii_digit)
}

impl PidFile {
    /// The pinned file at `path` (absolute, as the guest wrote it): `/proc/{self,thread-self,PID}/F` and
    /// `/proc/{self,PID}/task/TID/F` for F in stat, status, statm.
    pub fn for_path(path: &[u8]) -> Option<PidFile> {
        let rest = path.strip_prefix(b"/proc/")?;
        let parts: Vec<&[u8]> = rest.split(|&b| b == b'/').collect();
        let owner_ok = |p: &[u8]| p == b"self" || is_pid(p);
        let file = match parts.as_slice() {
            [owner, file] if owner_ok(owner) || *owner == b"thread-self" => file,
            [owner, b"task", tid, file] if owner_ok(owner) && is_pid(tid) => file,
            _ => return None,
        };
        match *file {
            b"stat" => Some(PidFile::Stat),
            b"status" => Some(PidFile::Status),
            b"statm" => Some(PidFile::Statm),
            b"io" => Some(PidFile::Io),
            b"schedstat" => Some(PidFile::Schedstat),
            b"sched" => Some(PidFile::Sched),
            _ => None,
        }
    }
}

/// Rewrites a `/proc/PID/stat` line: `start_ticks` for the start time (field 22), zero faults (10-13), CPU times
/// (14-17), last CPU (39), block I/O delay (42) and guest times (43-44), fixed vsize and rss (23-24). `None`
/// when the text is not a stat line.
pub fn rewrite_stat(real: &[u8], start_ticks: u64) -> Option<Vec<u8>> {
    let close = real.iter().rposition(|&b| b == b')')?;
    let (head, tail) = real.split_at(close + 1);
    let tail = std::str::from_utf8(tail).ok()?;
    let trailing_newline = tail.ends_with('\n');
    let mut fields: Vec<String> = tail.split_whitespace().map(str::to_string).collect();
    if fields.len() < 22 {
        return None;
    }
    // fields[0] is field 3 (state).
    let mut set = |n: usize, v: u64| {
        if let Some(f) = fields.get_mut(n - 3) {
            *f = v.to_string();
        }
    };
    for n in [10, 11, 12, 13, 14, 15, 16, 17, 39, 42, 43, 44] {
        set(n, 0);
    }
    set(22, start_ticks);
    set(23, fixed_kb("VmSize") * 1024);
    set(24, fixed_kb("VmRSS") / PAGE_KB);
    let mut out = head.to_vec();
    out.push(b' ');
    out.extend_from_slice(fields.join(" ").as_bytes());
    if trailing_newline {
        out.push(b'\n');
    }
    Some(out)
}

/// The pid a stat line is about (its first field).
pub fn stat_pid(real: &[u8]) -> Option<i32> {
    let end = real.iter().position(|&b| b == b' ')?;
    std::str::from_utf8(&real[..end]).ok()?.parse().ok()
}

/// `real` line by line (each with its newline), a line replaced where `f` returns a replacement. Bytes are kept
/// as they are: a task's name (in `status` and `sched`) is the guest's choice and need not be UTF-8.
fn map_lines(real: &[u8], mut f: impl FnMut(usize, &[u8]) -> Option<Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::with_capacity(real.len());
    for (i, line) in real.split_inclusive(|&b| b == b'\n').enumerate() {
        match f(i, line) {
            Some(r) => out.extend_from_slice(&r),
            None => out.extend_from_slice(line),
        }
    }
    out
}

/// The name of a `name: value` line (the bytes before the first ':').
fn field_name(line: &[u8]) -> &[u8] {
    line.split(|&b| b == b':').next().unwrap_or(line)
}

/// Rewrites a `/proc/PID/status` file: the memory lines to [`FIXED_KB`], the context switch counters to 0.
pub fn rewrite_status(real: &[u8]) -> Vec<u8> {
    map_lines(real, |_, line| {
        let name = field_name(line);
        if let Some((n, kb)) = FIXED_KB.iter().find(|(n, _)| n.as_bytes() == name) {
            Some(format!("{n}:\t{kb:>8} kB\n").into_bytes())
        } else {
            ZERO_COUNTERS.iter().find(|n| n.as_bytes() == name).map(|n| format!("{n}:\t0\n").into_bytes())
        }
    })
}

/// Rewrites `/proc/PID/io`: the block I/O counters (read_bytes, write_bytes, cancelled_write_bytes: they
/// depend on the page cache) to 0; the character and syscall counts are the guest's own doing and stay.
pub fn rewrite_io(real: &[u8]) -> Vec<u8> {
    map_lines(real, |_, line| {
        let name = field_name(line);
        [b"read_bytes".as_slice(), b"write_bytes", b"cancelled_write_bytes"]
            .contains(&name)
            .then(|| [name, b": 0\n"].concat())
    })
}

/// `/proc/PID/schedstat`: time on the CPU, time waiting, timeslices; none of it is the guest's doing.
pub fn schedstat() -> Vec<u8> {
    b"0 0 0\n".to_vec()
}

/// Rewrites `/proc/PID/sched`: the heading line (the task's name and pid) stays, every `name : value` figure
/// reads 0.
pub fn rewrite_sched(real: &[u8]) -> Vec<u8> {
    map_lines(real, |i, line| {
        let colon = line.iter().rposition(|&b| b == b':').filter(|_| i > 0)?;
        Some([&line[..colon], b": 0\n"].concat())
    })
}

/// The `/proc/PID/statm` line the fixed figures give (size resident shared text lib data dt, in pages).
pub fn statm() -> Vec<u8> {
    let p = |kb: u64| kb / PAGE_KB;
    format!(
        "{} {} {} {} 0 {} 0\n",
        p(fixed_kb("VmSize")),
        p(fixed_kb("VmRSS")),
        p(fixed_kb("RssFile") + fixed_kb("RssShmem")),
        p(fixed_kb("VmExe")),
        p(fixed_kb("VmData") + fixed_kb("VmStk")),
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &[u8] = b"4242 (a b) c) S 1 4242 4242 0 -1 4194560 1234 0 5 0 17 3 0 0 20 0 3 0 98765 \
12345678 2222 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 5 0 0 7 0 0 0 0 0 0 0 0 0 0\n";

    fn field(line: &[u8], n: usize) -> String {
        let close = line.iter().rposition(|&b| b == b')').unwrap();
        let tail = std::str::from_utf8(&line[close + 1..]).unwrap();
        tail.split_whitespace().nth(n - 3).unwrap().to_string()
    }

    /// A task's name is the guest's choice (prctl PR_SET_NAME): bytes that are not UTF-8, ')' and ':' in it are
    /// kept as the kernel shows them; only the pinned figures change.
    #[test]
    fn a_name_that_is_not_utf8_is_kept_byte_for_byte() {
        let status = b"Name:\t\xff\xfe: x)\nVmRSS:\t  123 kB\nvoluntary_ctxt_switches:\t77\n";
        let out = rewrite_status(status);
        assert!(out.starts_with(b"Name:\t\xff\xfe: x)\n"), "{}", String::from_utf8_lossy(&out));
        assert!(!out.windows(3).any(|w| w == b"123") && !out.windows(2).any(|w| w == b"77"));
        let sched = b"\xff: name (42, #threads: 1)\n-------\nse.sum_exec_runtime   :   12.5\n";
        let out = rewrite_sched(sched);
        assert!(out.starts_with(b"\xff: name (42, #threads: 1)\n"));
        assert!(out.ends_with(b"se.sum_exec_runtime   : 0\n"));
        let stat = b"7 (\xff) x) S 1 7 7 0 -1 0 5 0 5 0 17 3 0 0 20 0 1 0 98765 1 1 0\n";
        let out = rewrite_stat(stat, 5).unwrap();
        assert!(out.starts_with(b"7 (\xff) x) S"));
        assert_eq!(field(&out, 22), "5");
    }

    proptest::proptest! {
        /// Any bytes (a name may hold anything but NUL): no panic; lines that are not pinned figures stay as
        /// they were, and the rewrite is the same for the same input.
        #[test]
        fn rewrites_never_panic_and_keep_other_lines(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400), t in 0u64..1 << 40) {
            let _ = rewrite_stat(&b, t);
            let _ = stat_pid(&b);
            for f in [rewrite_status, rewrite_io, rewrite_sched] {
                let out = f(&b);
                proptest::prop_assert_eq!(&out, &f(&b));
            }
            let out = rewrite_status(&b);
            for line in b.split_inclusive(|&c| c == b'\n') {
                let name = field_name(line);
                let pinned = FIXED_KB.iter().any(|(n, _)| n.as_bytes() == name)
                    || ZERO_COUNTERS.iter().any(|n| n.as_bytes() == name);
                if !pinned {
                    proptest::prop_assert!(out.windows(line.len()).any(|w| w == line));
                }
            }
        }
    }

    #[test]
    fn paths() {
        for p in ["/proc/self/stat", "/proc/thread-self/stat", "/proc/12/stat", "/proc/self/task/13/stat"] {
            assert_eq!(PidFile::for_path(p.as_bytes()), Some(PidFile::Stat), "{p}");
        }
        assert_eq!(PidFile::for_path(b"/proc/self/status"), Some(PidFile::Status));
        assert_eq!(PidFile::for_path(b"/proc/7/statm"), Some(PidFile::Statm));
        for p in ["/proc/stat", "/proc/self/stack", "/proc/x/stat", "/proc/self/task/x/stat", "/proc/self/fd/3"] {
            assert_eq!(PidFile::for_path(p.as_bytes()), None, "{p}");
        }
    }

    #[test]
    fn stat_fields_are_pinned_and_the_rest_kept() {
        let out = rewrite_stat(STAT, 777).unwrap();
        assert!(out.starts_with(b"4242 (a b) c) S 1 4242"), "the name with its parentheses is kept");
        assert_eq!(field(&out, 22), "777");
        for n in [10, 12, 14, 15, 39, 42] {
            assert_eq!(field(&out, n), "0", "field {n}");
        }
        assert_eq!(field(&out, 20), "3", "num_threads stays real");
        assert_eq!(field(&out, 24), "4096");
        assert!(out.ends_with(b"\n"));
        assert_eq!(stat_pid(STAT), Some(4242));
        assert_eq!(rewrite_stat(b"garbage", 1), None);
        assert_eq!(rewrite_stat(b"1 (x) S 1 2", 1), None);
    }

    #[test]
    fn status_figures_are_fixed() {
        let real = b"Name:\tpython3\nVmRSS:\t   12345 kB\nThreads:\t1\nvoluntary_ctxt_switches:\t17\n";
        let out = String::from_utf8(rewrite_status(real)).unwrap();
        assert_eq!(out, "Name:\tpython3\nVmRSS:\t   16384 kB\nThreads:\t1\nvoluntary_ctxt_switches:\t0\n");
        assert_eq!(statm(), b"65536 4096 2048 1024 0 16417 0\n");
    }

    #[test]
    fn io_and_scheduler_figures() {
        assert_eq!(PidFile::for_path(b"/proc/self/io"), Some(PidFile::Io));
        assert_eq!(PidFile::for_path(b"/proc/3/schedstat"), Some(PidFile::Schedstat));
        assert_eq!(PidFile::for_path(b"/proc/self/sched"), Some(PidFile::Sched));
        let io = rewrite_io(b"rchar: 77946\nwchar: 8\nread_bytes: 20480\nwrite_bytes: 4096\n");
        assert_eq!(io, b"rchar: 77946\nwchar: 8\nread_bytes: 0\nwrite_bytes: 0\n");
        let sched =
            rewrite_sched(b"python3 (2, #threads: 1)\n-----\nse.exec_start   :  4491496.572949\nnr_switches : 12\n");
        assert_eq!(sched, b"python3 (2, #threads: 1)\n-----\nse.exec_start   : 0\nnr_switches : 0\n");
        assert_eq!(schedstat(), b"0 0 0\n");
    }
}
