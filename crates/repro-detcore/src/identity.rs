//! Pinned identity: what uname, sysinfo, nproc and the /proc and /sys summaries say, the same on every
//! machine (only the architecture is the real one, since the guest's code is built for it).

use crate::clock::{LogicalClock, NSEC_PER_SEC};

/// Length of each field of `struct utsname` on Linux.
pub const UTS_FIELD_LEN: usize = 65;

/// The uname fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UtsName {
    pub sysname: String,
    pub nodename: String,
    pub release: String,
    pub version: String,
    pub machine: String,
    pub domainname: String,
}

impl UtsName {
    /// `struct utsname` as the kernel writes it: six NUL-padded fields of 65 bytes.
    pub fn to_bytes(&self) -> [u8; 6 * UTS_FIELD_LEN] {
        let mut out = [0u8; 6 * UTS_FIELD_LEN];
        let fields = [&self.sysname, &self.nodename, &self.release, &self.version, &self.machine, &self.domainname];
        for (i, f) in fields.iter().enumerate() {
            let b = f.as_bytes();
            let n = b.len().min(UTS_FIELD_LEN - 1);
            out[i * UTS_FIELD_LEN..i * UTS_FIELD_LEN + n].copy_from_slice(&b[..n]);
        }
        out
    }
}

/// The values of `struct sysinfo` (mem_unit is 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SysinfoValues {
    pub uptime: i64,
    pub loads: [u64; 3],
    pub totalram: u64,
    pub freeram: u64,
    pub sharedram: u64,
    pub bufferram: u64,
    pub totalswap: u64,
    pub freeswap: u64,
    pub procs: u16,
}

impl SysinfoValues {
    /// `struct sysinfo` for x86_64/aarch64 (112 bytes, mem_unit = 1).
    pub fn to_bytes(&self) -> [u8; 112] {
        let mut b = [0u8; 112];
        b[0..8].copy_from_slice(&self.uptime.to_le_bytes());
        for i in 0..3 {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&self.loads[i].to_le_bytes());
        }
        let words = [self.totalram, self.freeram, self.sharedram, self.bufferram, self.totalswap, self.freeswap];
        for (i, w) in words.iter().enumerate() {
            b[32 + 8 * i..40 + 8 * i].copy_from_slice(&w.to_le_bytes());
        }
        b[80..82].copy_from_slice(&self.procs.to_le_bytes());
        // pad (6 bytes), totalhigh 88..96, freehigh 96..104, mem_unit 104..108, padding to 112.
        b[104..108].copy_from_slice(&1u32.to_le_bytes());
        b
    }
}

/// Pinned machine identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub cpus: u32,
    pub uts: UtsName,
    pub mem_total: u64,
}

/// The kernel release every run reports.
pub const PINNED_RELEASE: &str = "6.1.0-repro";
/// The kernel version string every run reports.
pub const PINNED_VERSION: &str = "#1 SMP PREEMPT_DYNAMIC repro";
/// The host name every run reports.
pub const PINNED_NODENAME: &str = "repro";
const GIB: u64 = 1 << 30;

impl Identity {
    /// The identity of a machine with `cpus` CPUs (at least one) of architecture `machine`.
    pub fn new(cpus: u32, machine: &str) -> Self {
        Identity {
            cpus: cpus.max(1),
            uts: UtsName {
                sysname: "Linux".into(),
                nodename: PINNED_NODENAME.into(),
                release: PINNED_RELEASE.into(),
                version: PINNED_VERSION.into(),
                machine: machine.into(),
                domainname: "(none)".into(),
            },
            mem_total: 4 * GIB,
        }
    }

    /// sysinfo(2): uptime follows the logical monotonic clock, loads are zero, memory is pinned.
    pub fn sysinfo(&self, clock: &LogicalClock) -> SysinfoValues {
        SysinfoValues {
            uptime: clock.peek(crate::ClockKind::Monotonic).sec,
            loads: [0; 3],
            totalram: self.mem_total,
            freeram: self.mem_total / 2,
            sharedram: 0,
            bufferram: 0,
            totalswap: 0,
            freeswap: 0,
            procs: 1,
        }
    }

    /// A CPU mask with the first `cpus` bits set, `len` bytes long (sched_getaffinity).
    pub fn affinity_mask(&self, len: usize) -> Vec<u8> {
        let mut m = vec![0u8; len];
        for cpu in 0..self.cpus as usize {
            if cpu / 8 < len {
                m[cpu / 8] |= 1 << (cpu % 8);
            }
        }
        m
    }

    /// `/sys/devices/system/cpu/{online,possible,present}`.
    pub fn cpu_list(&self) -> String {
        if self.cpus == 1 {
            "0\n".into()
        } else {
            format!("0-{}\n", self.cpus - 1)
        }
    }

    /// `/proc/cpuinfo`: a generic CPU without model-specific flags.
    pub fn cpuinfo(&self) -> String {
        let mut s = String::new();
        for i in 0..self.cpus {
            s.push_str(&format!(
                "processor\t: {i}\nvendor_id\t: repro\ncpu family\t: 6\nmodel\t\t: 0\nmodel name\t: repro virtual CPU\n\
                 stepping\t: 0\ncpu MHz\t\t: 1000.000\ncache size\t: 1024 KB\nphysical id\t: 0\nsiblings\t: {n}\n\
                 core id\t\t: {i}\ncpu cores\t: {n}\napicid\t\t: {i}\nfpu\t\t: yes\nflags\t\t: fpu tsc sse sse2\n\
                 bogomips\t: 2000.00\naddress sizes\t: 46 bits physical, 48 bits virtual\n\n",
                n = self.cpus
            ));
        }
        s
    }

    /// `/proc/meminfo` (the first, most read lines).
    pub fn meminfo(&self) -> String {
        let kb = self.mem_total / 1024;
        format!(
            "MemTotal:       {kb:>8} kB\nMemFree:        {:>8} kB\nMemAvailable:   {:>8} kB\nBuffers:               0 kB\n\
             Cached:                0 kB\nSwapCached:            0 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\n",
            kb / 2,
            kb / 2
        )
    }

    /// `/proc/loadavg`.
    pub fn loadavg(&self) -> String {
        "0.00 0.00 0.00 1/1 1\n".into()
    }

    /// `/proc/uptime` from the logical monotonic clock.
    pub fn uptime(&self, clock: &LogicalClock) -> String {
        let t = clock.peek(crate::ClockKind::Monotonic);
        let idle = (t.sec as i128 * NSEC_PER_SEC as i128 + t.nsec as i128) * self.cpus as i128 / 10_000_000;
        format!("{}.{:02} {}.{:02}\n", t.sec, t.nsec / 10_000_000, idle / 100, idle % 100)
    }

    /// `/proc/stat`: zero counters, boot time so that boot + uptime = logical realtime.
    pub fn stat(&self, clock: &LogicalClock) -> String {
        let btime = clock.peek(crate::ClockKind::Realtime).sec - clock.peek(crate::ClockKind::Monotonic).sec;
        let mut s = String::from("cpu  0 0 0 0 0 0 0 0 0 0\n");
        for i in 0..self.cpus {
            s.push_str(&format!("cpu{i} 0 0 0 0 0 0 0 0 0 0\n"));
        }
        s.push_str(&format!(
            "intr 0\nctxt 0\nbtime {btime}\nprocesses 1\nprocs_running 1\nprocs_blocked 0\nsoftirq 0 0 0 0 0 0 0 0 0 0 0\n"
        ));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ClockKind;

    #[test]
    fn utsname_layout() {
        let id = Identity::new(2, "x86_64");
        let b = id.uts.to_bytes();
        assert_eq!(&b[..6], b"Linux\0");
        assert_eq!(&b[65..71], b"repro\0");
        assert_eq!(&b[130..130 + PINNED_RELEASE.len()], PINNED_RELEASE.as_bytes());
        assert_eq!(&b[260..267], b"x86_64\0");
        assert_eq!(&b[325..331], b"(none)");
        // Over-long fields are cut so a NUL always ends them.
        let mut u = id.uts.clone();
        u.nodename = "n".repeat(100);
        let b = u.to_bytes();
        assert_eq!(b[65 + 64], 0);
        assert_eq!(b[65 + 63], b'n');
    }

    #[test]
    fn sysinfo_follows_the_logical_clock() {
        let id = Identity::new(4, "x86_64");
        let mut c = LogicalClock::new(0, 0);
        c.sleep_for(crate::Timespec { sec: 5, nsec: 0 }).unwrap();
        let s = id.sysinfo(&c);
        assert_eq!(s.uptime, 10_005);
        let b = s.to_bytes();
        assert_eq!(i64::from_le_bytes(b[0..8].try_into().unwrap()), 10_005);
        assert_eq!(u64::from_le_bytes(b[32..40].try_into().unwrap()), 4 << 30);
        assert_eq!(u32::from_le_bytes(b[104..108].try_into().unwrap()), 1);
    }

    #[test]
    fn cpu_counts_are_pinned() {
        let id = Identity::new(3, "x86_64");
        assert_eq!(id.cpuinfo().matches("processor\t:").count(), 3);
        assert_eq!(id.cpu_list(), "0-2\n");
        assert_eq!(Identity::new(1, "x86_64").cpu_list(), "0\n");
        assert_eq!(Identity::new(0, "x86_64").cpus, 1);
        assert_eq!(id.affinity_mask(2), vec![0b111, 0]);
        assert_eq!(Identity::new(9, "x").affinity_mask(1), vec![0xff]);
        assert!(id.stat(&LogicalClock::new(1_000_000, 0)).contains("btime 990000\n"));
        assert!(id.meminfo().starts_with("MemTotal:        4194304 kB\n"));
    }

    #[test]
    fn uptime_text() {
        let id = Identity::new(2, "x86_64");
        let c = LogicalClock::new(0, 0);
        assert_eq!(c.peek(ClockKind::Monotonic).sec, 10_000);
        assert_eq!(id.uptime(&c), "10000.00 20000.00\n");
    }
}
