//! The DeterminismController: the one object every transport asks what the guest should see.

use crate::clock::{ClockKind, ClockRead, LogicalClock, Timespec};
use crate::entropy::{format_uuid, EntropyStream, DOMAIN_BOOT_ID, DOMAIN_MAIN};
use crate::files::{FileIdentity, FileTimeMap, FileTimes, InodeMap};
use crate::identity::Identity;
use crate::DetError;

/// What a run's determinism depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerConfig {
    pub seed: u64,
    pub epoch_unix_secs: i64,
    pub clock_step_ns: u64,
    pub cpus: u32,
    /// The real architecture (uname machine), e.g. `x86_64`.
    pub machine: String,
    /// Real time at the start of the run, in ns since the Unix epoch: file times before it are inputs.
    pub run_start_real_ns: i128,
    /// The host name the guest sees (uname nodename).
    pub nodename: String,
    /// The order of directory listings.
    pub dir_order: crate::DirOrder,
}

/// Generated files the controller serves in place of the host's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VirtualFile {
    Urandom,
    Uuid,
    BootId,
    CpuInfo,
    MemInfo,
    LoadAvg,
    Uptime,
    Stat,
    CpuList,
}

impl VirtualFile {
    /// The generated file served at `path`, if any (paths as the guest wrote them, already absolute).
    pub fn for_path(path: &[u8]) -> Option<Self> {
        Some(match path {
            b"/dev/urandom" | b"/dev/random" => VirtualFile::Urandom,
            b"/proc/sys/kernel/random/uuid" => VirtualFile::Uuid,
            b"/proc/sys/kernel/random/boot_id" => VirtualFile::BootId,
            b"/proc/cpuinfo" => VirtualFile::CpuInfo,
            b"/proc/meminfo" => VirtualFile::MemInfo,
            b"/proc/loadavg" => VirtualFile::LoadAvg,
            b"/proc/uptime" => VirtualFile::Uptime,
            b"/proc/stat" => VirtualFile::Stat,
            b"/sys/devices/system/cpu/online"
            | b"/sys/devices/system/cpu/possible"
            | b"/sys/devices/system/cpu/present" => VirtualFile::CpuList,
            _ => return None,
        })
    }
}

/// The policy of one run.
#[derive(Debug, Clone)]
pub struct DeterminismController {
    pub clock: LogicalClock,
    /// One entropy stream per guest task, created on first use.
    pub entropy: std::collections::HashMap<i32, EntropyStream>,
    seed: u64,
    pub identity: Identity,
    pub inodes: InodeMap,
    pub file_times: FileTimeMap,
    pub dir_order: crate::DirOrder,
    boot_id: String,
}

impl DeterminismController {
    /// The controller for a run.
    pub fn new(cfg: &ControllerConfig) -> Self {
        let mut boot = EntropyStream::new(cfg.seed, DOMAIN_BOOT_ID);
        let mut b = [0u8; 16];
        boot.fill(&mut b);
        let epoch_ns = cfg.epoch_unix_secs as i128 * crate::clock::NSEC_PER_SEC as i128;
        DeterminismController {
            clock: LogicalClock::new(cfg.epoch_unix_secs, cfg.clock_step_ns),
            entropy: std::collections::HashMap::new(),
            seed: cfg.seed,
            identity: {
                let mut id = Identity::new(cfg.cpus, &cfg.machine);
                id.uts.nodename = cfg.nodename.clone();
                id
            },
            dir_order: cfg.dir_order,
            inodes: InodeMap::default(),
            file_times: FileTimeMap::new(cfg.run_start_real_ns, epoch_ns),
            boot_id: format!("{}\n", format_uuid(b)),
        }
    }

    /// clock_gettime(clk_id).
    pub fn clock_gettime(&mut self, clk_id: i64) -> Result<ClockRead, DetError> {
        let kind = ClockKind::from_id(clk_id)?;
        Ok(self.clock.read(kind))
    }

    /// Any mediated event other than a clock read.
    pub fn note_event(&mut self) {
        self.clock.note_event();
    }

    /// nanosleep / clock_nanosleep without TIMER_ABSTIME.
    pub fn sleep_for(&mut self, dur: Timespec) -> Result<(), DetError> {
        self.clock.sleep_for(dur)
    }

    /// clock_nanosleep with TIMER_ABSTIME.
    pub fn sleep_until(&mut self, clk_id: i64, deadline: Timespec) -> Result<(), DetError> {
        let kind = ClockKind::from_id(clk_id)?;
        self.clock.sleep_until(kind, deadline)
    }

    /// The entropy stream of a guest task.
    fn stream(&mut self, task: i32) -> &mut EntropyStream {
        let seed = self.seed;
        self.entropy.entry(task).or_insert_with(|| EntropyStream::for_task(seed, DOMAIN_MAIN, task))
    }

    /// getrandom(n) by `task`.
    pub fn random(&mut self, task: i32, n: usize) -> Vec<u8> {
        self.note_event();
        self.stream(task).bytes(n)
    }

    /// The 16 AT_RANDOM bytes of a new program image of `task`.
    pub fn at_random(&mut self, task: i32) -> [u8; 16] {
        let mut b = [0u8; 16];
        self.stream(task).fill(&mut b);
        b
    }

    /// Contents of a generated file at the moment it is opened (`urandom_len` bytes for the random
    /// devices: the transport serves them as a finite, pre-generated stream).
    pub fn virtual_file(&mut self, task: i32, f: VirtualFile, urandom_len: usize) -> Vec<u8> {
        self.note_event();
        match f {
            VirtualFile::Urandom => self.stream(task).bytes(urandom_len),
            VirtualFile::Uuid => self.stream(task).uuid_line().into_bytes(),
            VirtualFile::BootId => self.boot_id.clone().into_bytes(),
            VirtualFile::CpuInfo => self.identity.cpuinfo().into_bytes(),
            VirtualFile::MemInfo => self.identity.meminfo().into_bytes(),
            VirtualFile::LoadAvg => self.identity.loadavg().into_bytes(),
            VirtualFile::Uptime => self.identity.uptime(&self.clock).into_bytes(),
            VirtualFile::Stat => self.identity.stat(&self.clock).into_bytes(),
            VirtualFile::CpuList => self.identity.cpu_list().into_bytes(),
        }
    }

    /// uname(2) bytes.
    pub fn uname(&mut self) -> Vec<u8> {
        self.note_event();
        self.identity.uts.to_bytes().to_vec()
    }

    /// sysinfo(2) bytes.
    pub fn sysinfo(&mut self) -> Vec<u8> {
        self.note_event();
        self.identity.sysinfo(&self.clock).to_bytes().to_vec()
    }

    /// The virtual identity and times of a file for the stat family.
    pub fn file_view(&mut self, id: FileIdentity, times: FileTimes) -> (u64, u64, FileTimes) {
        self.note_event();
        let now = {
            let t = self.clock.peek(ClockKind::Realtime);
            t.sec as i128 * crate::clock::NSEC_PER_SEC as i128 + t.nsec as i128
        };
        let ino = self.inodes.inode(id);
        let dev = self.inodes.dev(id.dev);
        (dev, ino, self.file_times.map_times(id, times, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(seed: u64) -> ControllerConfig {
        ControllerConfig {
            seed,
            epoch_unix_secs: 1_600_000_000,
            clock_step_ns: 0,
            cpus: 2,
            machine: "x86_64".into(),
            run_start_real_ns: 0,
            nodename: "repro".into(),
            dir_order: crate::DirOrder::Sorted,
        }
    }

    #[test]
    fn same_config_same_answers() {
        let mut a = DeterminismController::new(&cfg(1));
        let mut b = DeterminismController::new(&cfg(1));
        let mut c = DeterminismController::new(&cfg(2));
        assert_eq!(a.random(2, 32), b.random(2, 32));
        assert_ne!(a.random(3, 32), a.random(4, 32), "tasks have streams of their own");
        assert_eq!(a.at_random(2), b.at_random(2));
        let ua = a.virtual_file(2, VirtualFile::Uuid, 0);
        assert_eq!(ua, b.virtual_file(2, VirtualFile::Uuid, 0));
        assert_ne!(ua, c.virtual_file(2, VirtualFile::Uuid, 0));
        assert_ne!(a.virtual_file(2, VirtualFile::BootId, 0), c.virtual_file(2, VirtualFile::BootId, 0));
    }

    #[test]
    fn boot_id_is_fixed_for_the_run() {
        let mut a = DeterminismController::new(&cfg(1));
        let first = a.virtual_file(2, VirtualFile::BootId, 0);
        a.random(2, 1000);
        assert_eq!(a.virtual_file(2, VirtualFile::BootId, 0), first);
        let mut b = DeterminismController::new(&cfg(1));
        assert_eq!(b.virtual_file(2, VirtualFile::BootId, 0), first);
    }

    #[test]
    fn virtual_paths() {
        assert_eq!(VirtualFile::for_path(b"/dev/urandom"), Some(VirtualFile::Urandom));
        assert_eq!(VirtualFile::for_path(b"/proc/sys/kernel/random/boot_id"), Some(VirtualFile::BootId));
        assert_eq!(VirtualFile::for_path(b"/proc/cpuinfo"), Some(VirtualFile::CpuInfo));
        assert_eq!(VirtualFile::for_path(b"/etc/passwd"), None);
        let mut a = DeterminismController::new(&cfg(1));
        assert_eq!(a.virtual_file(2, VirtualFile::Urandom, 10).len(), 10);
        assert_eq!(a.virtual_file(2, VirtualFile::CpuList, 0), b"0-1\n");
    }

    #[test]
    fn unknown_clock_is_an_error() {
        let mut a = DeterminismController::new(&cfg(1));
        assert!(a.clock_gettime(99).is_err());
        assert!(a.sleep_until(99, Timespec { sec: 0, nsec: 0 }).is_err());
        assert_eq!(a.clock_gettime(0), Ok(ClockRead::Value(Timespec { sec: 1_600_000_000, nsec: 0 })));
    }

    #[test]
    fn other_events_break_a_clock_poll() {
        let mut a = DeterminismController::new(&cfg(1));
        for i in 0..50_000 {
            if i % 10_000 == 0 {
                a.uname();
            }
            assert!(matches!(a.clock_gettime(1), Ok(ClockRead::Value(_))));
        }
    }
}
