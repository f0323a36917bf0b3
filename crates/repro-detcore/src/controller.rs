//! The DeterminismController: the one object every transport asks what the guest should see.

use crate::clock::{ClockKind, ClockRead, LogicalClock, Timespec};
use crate::entropy::{format_uuid, EntropyStream, DOMAIN_BOOT_ID, DOMAIN_MAIN};
use crate::files::{FileIdentity, FileOrigin, FileTimeMap, FileTimes, InodeMap};
use crate::identity::Identity;
use crate::waits::Deadline;
use crate::DetError;

/// Bytes of /dev/urandom served per open (a pre-generated, finite stream).
pub const URANDOM_BYTES: usize = 1 << 20;
/// The most bytes one getrandom call returns (as the kernel: 32 MiB - 1).
pub const GETRANDOM_MAX: usize = (1 << 25) - 1;
/// Resolution of the coarse clocks (clock_getres), as the vDSO answers: 4 ms.
const COARSE_RES_NS: i64 = 4_000_000;

/// What a clock call of the guest gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClockAnswer {
    /// This time (or resolution).
    Time(Timespec),
    /// EINVAL: a clock id the kernel does not know.
    Invalid,
    /// A dynamic (fd-based) clock: not mediated, the call runs natively; with the reason to record, if any.
    Native(Option<String>),
    /// The guest polled a frozen clock: it is stopped, for this reason.
    Stop(String),
}

/// Calls that start something on the host's clock (or bypass the mediation): the supervisor lets them run,
/// and the controller says whether the run stays reproducible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostTimer {
    /// setitimer(ITIMER_VIRTUAL or ITIMER_PROF; ITIMER_REAL runs in logical time, see `timers`): whether a new
    /// value was given, and its it_value (`None` when it could not be read).
    Setitimer {
        given: bool,
        value: Option<Timespec>,
    },
    /// timer_create on a CPU-time clock (the realtime and monotonic ones run in logical time).
    TimerCreate,
    IoUringSetup,
}

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

    /// Whether an open with `flags` is served the generated file: reading is; a write-only open goes to the
    /// host's file (which takes or refuses it as it would).
    pub fn serves(self, flags: i32) -> bool {
        flags & libc::O_ACCMODE != libc::O_WRONLY
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
    /// alarm/setitimer and POSIX timers, in logical time.
    pub timers: crate::timers::TimerTable,
    boot_id: String,
    /// Ports for binds to port 0 (see `ports`).
    pub ports: crate::ports::PortAllocator,
    /// Start times (clock ticks since the pretend boot) of the guest processes whose /proc stat was read.
    pub proc_starts: std::collections::HashMap<i32, u64>,
    /// Real time at the start of the run (ns): file times before it are inputs.
    run_start_real_ns: i128,
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
            timers: crate::timers::TimerTable::default(),
            inodes: InodeMap::default(),
            file_times: FileTimeMap::new(cfg.run_start_real_ns, epoch_ns),
            boot_id: format!("{}\n", format_uuid(b)),
            ports: crate::ports::PortAllocator::new(cfg.seed),
            proc_starts: std::collections::HashMap::new(),
            run_start_real_ns: cfg.run_start_real_ns,
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

    /// A read of a clock of `kind`; a frozen clock polled too long says to stop the guest.
    pub fn read_clock(&mut self, kind: ClockKind) -> ClockAnswer {
        match self.clock.read(kind) {
            ClockRead::Value(t) => ClockAnswer::Time(t),
            ClockRead::Stalled { reads } => ClockAnswer::Stop(crate::clock::stall_reason(reads)),
        }
    }

    /// clock_gettime(clk_id): unknown ids are EINVAL, dynamic (fd-based) clocks run natively, unenforced.
    pub fn clock_gettime_answer(&mut self, clk_id: i64) -> ClockAnswer {
        match ClockKind::from_id(clk_id) {
            Ok(kind) => self.read_clock(kind),
            Err(_) if clk_id < 0 => ClockAnswer::Native(Some(format!(
                "clock_gettime on a dynamic (fd-based) clock id {clk_id} is not mediated"
            ))),
            Err(_) => ClockAnswer::Invalid,
        }
    }

    /// clock_getres: pinned resolutions (1 ns; the coarse clocks 4 ms), the same the vDSO answers.
    pub fn clock_getres(&mut self, clk_id: i64) -> ClockAnswer {
        self.note_event();
        match ClockKind::from_id(clk_id) {
            Ok(_) => {}
            Err(_) if clk_id < 0 => return ClockAnswer::Native(None),
            Err(_) => return ClockAnswer::Invalid,
        }
        let coarse = clk_id == libc::CLOCK_REALTIME_COARSE as i64 || clk_id == libc::CLOCK_MONOTONIC_COARSE as i64;
        ClockAnswer::Time(Timespec { sec: 0, nsec: if coarse { COARSE_RES_NS } else { 1 } })
    }

    /// clock_nanosleep(clk_id, flags, t): absolute with TIMER_ABSTIME, else relative; no wall-clock wait.
    pub fn clock_nanosleep(&mut self, clk_id: i64, flags: i32, t: Timespec) -> Result<(), DetError> {
        if flags & libc::TIMER_ABSTIME != 0 {
            self.sleep_until(clk_id, t)
        } else {
            ClockKind::from_id(clk_id)?;
            self.sleep_for(t)
        }
    }

    /// A timed wait that nothing can end times out: the clock jumps to its deadline.
    pub fn time_out_wait(&mut self, deadline: Deadline) -> Result<(), DetError> {
        match deadline {
            Deadline::After(t) => self.sleep_for(t),
            Deadline::At(clock, t) => self.sleep_until(clock, t),
        }
    }

    /// times(2): logical ticks (100 Hz) since the pretend boot; the process used no CPU time (the tms
    /// structure is all zeros).
    pub fn times(&mut self) -> i64 {
        self.note_event();
        let mono = self.clock.peek(ClockKind::Monotonic);
        mono.sec * 100 + mono.nsec / 10_000_000
    }

    /// getrusage(2): no resource was used (the 144-byte struct rusage is all zeros).
    pub fn rusage(&mut self) -> [u8; 144] {
        self.note_event();
        [0u8; 144]
    }

    /// The next port of the run's ephemeral sequence, for a bind the kernel would choose the port of.
    pub fn ephemeral_port(&mut self) -> u16 {
        self.note_event();
        self.ports.next_port()
    }

    /// A per-process /proc file (`procfs::PidFile`) as the guest sees it, from the real bytes: the varying figures
    /// pinned; a stat line's start time is the logical time at which the guest first read that process's stat.
    pub fn proc_pid_file(&mut self, f: crate::procfs::PidFile, real: &[u8]) -> Vec<u8> {
        use crate::procfs::{self, PidFile};
        self.note_event();
        match f {
            PidFile::Stat => {
                let ticks = self.times() as u64;
                let start = match procfs::stat_pid(real) {
                    Some(pid) => *self.proc_starts.entry(pid).or_insert(ticks),
                    None => ticks,
                };
                // An unparsable line (never from the kernel) is served as it is.
                procfs::rewrite_stat(real, start).unwrap_or_else(|| real.to_vec())
            }
            PidFile::Status => procfs::rewrite_status(real),
            PidFile::Statm => procfs::statm(),
            PidFile::Io => procfs::rewrite_io(real),
            PidFile::Schedstat => procfs::schedstat(),
            PidFile::Sched => procfs::rewrite_sched(real),
        }
    }

    /// statfs/fstatfs: the figures the guest sees (see `statfs::view`).
    pub fn statfs_view(
        &mut self,
        real: crate::statfs::StatfsFigures,
        disk: crate::statfs::DiskLimit,
    ) -> crate::statfs::StatfsFigures {
        self.note_event();
        crate::statfs::view(real, disk)
    }

    /// getcpu(2): (cpu, node); the guest always runs on CPU 0 of node 0.
    pub fn getcpu(&mut self) -> (u32, u32) {
        self.note_event();
        (0, 0)
    }

    /// sched_getaffinity(len): the first `cpus` CPUs, as an 8-byte mask; `len` must be a positive multiple of 8.
    pub fn sched_getaffinity(&mut self, len: usize) -> Result<Vec<u8>, DetError> {
        self.note_event();
        if len < 8 || !len.is_multiple_of(8) {
            return Err(DetError::MaskLength(len));
        }
        Ok(self.identity.affinity_mask(8))
    }

    /// getrandom(len) by `task`: at most [`GETRANDOM_MAX`] bytes of its stream.
    pub fn getrandom(&mut self, task: i32, len: usize) -> Vec<u8> {
        self.random(task, len.min(GETRANDOM_MAX))
    }

    /// A timer on the host's clock (or an io_uring) the guest sets up: why the run is not reproducible, or
    /// `None` when the call is harmless (disarming a timer).
    pub fn host_timer(&self, t: HostTimer) -> Option<String> {
        let armed = |name: &str| {
            Some(format!(
                "the guest armed a timer on the host's clock ({name}): its expiry and signal are not mediated"
            ))
        };
        match t {
            HostTimer::Setitimer { given: false, .. } => None,
            HostTimer::Setitimer { value: Some(Timespec { sec: 0, nsec: 0 }), .. } => None,
            HostTimer::Setitimer { .. } => armed("setitimer"),
            HostTimer::TimerCreate => armed("timer_create"),
            HostTimer::IoUringSetup => Some(
                "the guest set up an io_uring (io_uring_setup): its operations bypass the syscall mediation".into(),
            ),
        }
    }

    /// rdtsc: a 1 GHz counter on the logical monotonic clock; it advances by the clock step like a read (a
    /// frozen clock polled through rdtsc is not stopped: the counter just does not move).
    pub fn rdtsc(&mut self) -> u64 {
        let t = match self.clock.read(ClockKind::Monotonic) {
            ClockRead::Value(t) => t,
            ClockRead::Stalled { .. } => {
                self.note_event();
                self.clock.peek(ClockKind::Monotonic)
            }
        };
        (t.sec as u64).wrapping_mul(1_000_000_000).wrapping_add(t.nsec as u64)
    }

    /// The virtual device, inode and times the stat family reports for a file of type `fmt` (`st_mode &
    /// S_IFMT`) living in `origin`. Only files whose times record writes (regular files, directories, symlinks on
    /// real file systems) go through the order-preserving map; pipes, sockets, devices and entries of pseudo file
    /// systems carry times that follow the host clock, so they read as the logical now. A file of the host's
    /// installation that predates the run keeps its host times ([`FileOrigin::Host`]).
    pub fn stat_view(
        &mut self,
        id: FileIdentity,
        times: FileTimes,
        fmt: u32,
        origin: FileOrigin,
    ) -> (u64, u64, FileTimes) {
        let written = matches!(fmt, libc::S_IFREG | libc::S_IFDIR | libc::S_IFLNK) && origin != FileOrigin::Pseudo;
        if written {
            if self.keeps_host_times(times, origin) {
                let (vdev, vino, _) = self.file_view(id, FileTimes { atime: 0, mtime: 0, ctime: 0 });
                return (vdev, vino, FileTimes { atime: times.mtime, mtime: times.mtime, ctime: times.mtime });
            }
            return self.file_view(id, times);
        }
        let (vdev, vino, _) = self.file_view(id, FileTimes { atime: 0, mtime: 0, ctime: 0 });
        let now = self.clock.peek(ClockKind::Realtime);
        let now = now.sec as i128 * crate::clock::NSEC_PER_SEC as i128 + now.nsec as i128;
        (vdev, vino, FileTimes { atime: now, mtime: now, ctime: now })
    }

    /// A file of the host's installation that nothing changed since the run started keeps its host times.
    fn keeps_host_times(&self, times: FileTimes, origin: FileOrigin) -> bool {
        origin == FileOrigin::Host && times.mtime < self.run_start_real_ns && times.ctime < self.run_start_real_ns
    }

    /// statx's birth time of a file whose mapped change time is `ctime` (its host times `host`): mapped like the
    /// other times, never after the change time; 0 (unknown) stays 0; a host file that keeps its times was born at
    /// its modification time.
    pub fn birth_time(
        &mut self,
        id: FileIdentity,
        btime: i128,
        host: FileTimes,
        origin: FileOrigin,
        ctime: i128,
    ) -> i128 {
        if btime == 0 {
            return 0;
        }
        if self.keeps_host_times(host, origin) {
            return host.mtime;
        }
        ctime.min(self.file_times.map(id, btime, ctime))
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
        assert!(VirtualFile::Urandom.serves(libc::O_RDONLY) && VirtualFile::Urandom.serves(libc::O_RDWR));
        assert!(!VirtualFile::Urandom.serves(libc::O_WRONLY | libc::O_CLOEXEC));
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
    fn clock_answers() {
        let mut a = DeterminismController::new(&cfg(1));
        assert_eq!(a.clock_gettime_answer(0), ClockAnswer::Time(Timespec { sec: 1_600_000_000, nsec: 0 }));
        assert_eq!(a.clock_gettime_answer(10), ClockAnswer::Invalid);
        assert!(matches!(a.clock_gettime_answer(-5), ClockAnswer::Native(Some(_))), "an fd clock (CLOCKFD) is native");
        assert_eq!(
            a.clock_getres(libc::CLOCK_MONOTONIC_COARSE as i64),
            ClockAnswer::Time(Timespec { sec: 0, nsec: 4_000_000 })
        );
        assert_eq!(a.clock_getres(0), ClockAnswer::Time(Timespec { sec: 0, nsec: 1 }));
        assert_eq!(a.clock_getres(-5), ClockAnswer::Native(None));
        assert_eq!(a.clock_getres(10), ClockAnswer::Invalid);
        // The frozen clock (step 0) polled without anything else happening stops the guest, with the reason.
        let mut stop = None;
        for _ in 0..crate::clock::STALL_READS {
            if let ClockAnswer::Stop(why) = a.clock_gettime_answer(1) {
                stop = Some(why);
            }
        }
        assert!(stop.expect("stopped").contains("--clock-step-ns"));
    }

    #[test]
    fn sleeps_and_timed_waits_move_the_clock() {
        let mut a = DeterminismController::new(&cfg(1));
        a.clock_nanosleep(1, 0, Timespec { sec: 2, nsec: 0 }).unwrap();
        assert_eq!(a.clock.peek(ClockKind::Realtime).sec, 1_600_000_002);
        a.clock_nanosleep(0, libc::TIMER_ABSTIME, Timespec { sec: 1_600_000_010, nsec: 0 }).unwrap();
        assert_eq!(a.clock.peek(ClockKind::Realtime).sec, 1_600_000_010);
        assert_eq!(a.clock_nanosleep(42, 0, Timespec { sec: 1, nsec: 0 }).unwrap_err().errno(), libc::EINVAL);
        a.time_out_wait(Deadline::After(Timespec { sec: 0, nsec: 500_000_000 })).unwrap();
        assert_eq!(a.clock.peek(ClockKind::Realtime), Timespec { sec: 1_600_000_010, nsec: 500_000_000 });
        a.time_out_wait(Deadline::At(1, Timespec { sec: 10_100, nsec: 0 })).unwrap();
        assert_eq!(a.clock.peek(ClockKind::Monotonic), Timespec { sec: 10_100, nsec: 0 });
        assert_eq!(a.times(), 10_100 * 100);
    }

    #[test]
    fn identity_answers() {
        let mut a = DeterminismController::new(&cfg(1));
        assert_eq!(a.getcpu(), (0, 0));
        assert_eq!(a.rusage(), [0u8; 144]);
        assert_eq!(a.sched_getaffinity(128).unwrap(), [0b11, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(a.sched_getaffinity(4), Err(DetError::MaskLength(4)));
        assert_eq!(a.sched_getaffinity(12).unwrap_err().errno(), libc::EINVAL);
        assert_eq!(a.getrandom(2, GETRANDOM_MAX + 10).len(), GETRANDOM_MAX);
    }

    #[test]
    fn host_timers() {
        let a = DeterminismController::new(&cfg(1));
        assert!(a.host_timer(HostTimer::Setitimer { given: false, value: None }).is_none());
        let zero = Some(Timespec { sec: 0, nsec: 0 });
        assert!(a.host_timer(HostTimer::Setitimer { given: true, value: zero }).is_none());
        assert!(a.host_timer(HostTimer::Setitimer { given: true, value: None }).is_some(), "unreadable: armed");
        assert!(a.host_timer(HostTimer::TimerCreate).unwrap().contains("timer_create"));
        assert!(a.host_timer(HostTimer::IoUringSetup).unwrap().contains("io_uring"));
    }

    #[test]
    fn stat_view_of_pseudo_files_is_the_logical_now() {
        let mut a = DeterminismController::new(&cfg(1));
        let id = FileIdentity { dev: 5, ino: 77 };
        let old = FileTimes { atime: -5, mtime: -5, ctime: -5 };
        let (d1, i1, t) = a.stat_view(id, old, libc::S_IFCHR, FileOrigin::Run);
        let now = 1_600_000_000i128 * 1_000_000_000;
        assert_eq!(t, FileTimes { atime: now, mtime: now, ctime: now });
        let (d2, i2, t) = a.stat_view(id, old, libc::S_IFREG, FileOrigin::Pseudo);
        assert_eq!((d1, i1, t.mtime), (d2, i2, now), "same identity, pseudo file system: now");
        let (_, _, t) = a.stat_view(id, old, libc::S_IFREG, FileOrigin::Run);
        assert!(t.mtime < now, "an input file predates the run");
        assert_eq!(a.birth_time(id, 0, old, FileOrigin::Run, t.ctime), 0);
        assert!(a.birth_time(id, 1, old, FileOrigin::Run, t.ctime) <= t.ctime);
    }

    #[test]
    fn host_files_that_predate_the_run_keep_their_times() {
        let mut c = cfg(1);
        c.run_start_real_ns = 1_000_000;
        let mut a = DeterminismController::new(&c);
        let id = FileIdentity { dev: 5, ino: 77 };
        let host = FileTimes { atime: 999_000, mtime: 400_123, ctime: 500_456 };
        let (_, ino, t) = a.stat_view(id, host, libc::S_IFREG, FileOrigin::Host);
        assert_eq!(t, FileTimes { atime: 400_123, mtime: 400_123, ctime: 400_123 }, "all read as mtime");
        assert_eq!(a.birth_time(id, 300_000, host, FileOrigin::Host, t.ctime), 400_123);
        // The same file in the working directory (or a pack's root) is pinned just before the epoch.
        let (_, ino2, p) = a.stat_view(id, host, libc::S_IFREG, FileOrigin::Run);
        assert_eq!(ino, ino2);
        let pinned = 1_600_000_000i128 * 1_000_000_000 - 1_000_000_000;
        assert_eq!(p, FileTimes { atime: pinned, mtime: pinned, ctime: pinned });
        // A host file changed during the run (a `:rw` bind) is mapped to logical time like any write.
        let changed = FileTimes { atime: 2_000_000, mtime: 2_000_000, ctime: 2_000_000 };
        let (_, _, w) = a.stat_view(FileIdentity { dev: 5, ino: 78 }, changed, libc::S_IFREG, FileOrigin::Host);
        assert!(w.mtime >= 1_600_000_000i128 * 1_000_000_000, "written during the run: logical time");
        // Devices and pipes on the host still read as now.
        let (_, _, d) = a.stat_view(id, host, libc::S_IFCHR, FileOrigin::Host);
        assert_eq!(d.mtime, 1_600_000_000i128 * 1_000_000_000);
    }

    #[test]
    fn ports_and_pinned_proc_files() {
        let mut a = DeterminismController::new(&cfg(1));
        let mut b = DeterminismController::new(&cfg(1));
        let mut c = DeterminismController::new(&cfg(2));
        let (pa, pb, pc) = (a.ephemeral_port(), b.ephemeral_port(), c.ephemeral_port());
        assert_eq!(pa, pb);
        assert_ne!((pa, a.ephemeral_port()), (pc, c.ephemeral_port()), "a different seed gives another sequence");
        assert_ne!(b.ephemeral_port(), pb, "no port twice");
        let line = b"9 (sh) S 1 9 9 0 -1 0 50 0 0 0 7 7 0 0 20 0 1 0 4444 1 1 1 1 1 1\n";
        let first = a.proc_pid_file(crate::procfs::PidFile::Stat, line);
        a.sleep_for(Timespec { sec: 5, nsec: 0 }).unwrap();
        assert_eq!(a.proc_pid_file(crate::procfs::PidFile::Stat, line), first, "a process's start time stays");
        let other =
            a.proc_pid_file(crate::procfs::PidFile::Stat, b"10 (sh) S 1 9 9 0 -1 0 50 0 0 0 7 7 0 0 20 0 1 0 4444 1\n");
        assert_ne!(
            String::from_utf8_lossy(&other).split(' ').nth(21),
            String::from_utf8_lossy(&first).split(' ').nth(21)
        );
    }

    #[test]
    fn rdtsc_follows_the_monotonic_clock() {
        let mut a = DeterminismController::new(&cfg(1));
        assert_eq!(a.rdtsc(), 10_000 * 1_000_000_000);
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
