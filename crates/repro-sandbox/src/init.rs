//! `repro __init`: PID 1 of the sandbox. It builds the guest's root, starts the guest, reaps every process,
//! forwards SIGINT/SIGTERM/SIGHUP to the guest and exits with the guest's status.
//!
//! It is executed fresh (`/proc/self/exe __init CONFIG`) by `repro run` in new mount, PID, network, UTS and IPC
//! namespaces, so it starts single-threaded with a clean address space.

use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use repro_model::run::{BindMount, Determinism, RunOutcome};
use repro_sys::ns::{self, mflags, ChildExit};
use serde::{Deserialize, Serialize};

/// Signals the init handles through a signalfd (blocked before its exec).
pub const INIT_SIGNALS: [i32; 4] = [libc_sig::INT, libc_sig::TERM, libc_sig::HUP, libc_sig::CHLD];

/// Signal numbers (x86_64 and aarch64 agree on these).
pub mod libc_sig {
    pub const HUP: i32 = 1;
    pub const INT: i32 = 2;
    pub const KILL: i32 = 9;
    pub const TERM: i32 = 15;
    pub const CHLD: i32 = 17;
}

/// The descriptor at which the init receives the guest's stdout pipe.
pub const STDOUT_FD: i32 = 3;
/// The descriptor at which the init receives the guest's stderr pipe.
pub const STDERR_FD: i32 = 4;

/// Everything the init needs, written by `repro run` to the run directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InitConfig {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: String,
    /// An empty directory on the host where the new root is assembled.
    pub root: String,
    pub upper: String,
    pub work: String,
    /// Paths to hide from the guest (the state directory when it lies inside the working directory).
    pub hide: Vec<String>,
    pub binds: Vec<BindMount>,
    /// Host files to place at `/etc/<name>`: `(name, host path)`.
    pub etc: Vec<(String, String)>,
    pub hostname: String,
    pub domainname: String,
    pub umask: u32,
    pub no_aslr: bool,
    pub rlimits: Vec<(i32, u64, u64)>,
    pub cpus: Vec<usize>,
    /// Where to write the [`InitResult`].
    pub result: String,
    /// Whether the init runs in its own user namespace (overlay then needs `userxattr`).
    pub user_namespace: bool,
    /// The determinism supervisor's settings; `None` runs the guest without it.
    pub determinism: Option<DetSettings>,
    /// A directory to bind (read-only) as the guest's `/` instead of the host's (a reproducer pack's root);
    /// the working directory's overlay then takes its lower layer from inside it.
    #[serde(default)]
    pub root_source: Option<String>,
    /// Share the host's network namespace (`repro capture --network record`): the init then neither brings
    /// up `lo` nor expects a network namespace of its own.
    #[serde(default)]
    pub host_network: bool,
    /// The network and /proc tapes to record or replay.
    #[serde(default)]
    pub tapes: TapeSettings,
}

/// Recording or replaying a tape; a replayed tape is its JSON document (docs/pack-format.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TapeIo {
    #[default]
    Off,
    Record,
    Replay(String),
}

/// The tapes of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TapeSettings {
    pub network: TapeIo,
    pub proc: TapeIo,
}

/// The tapes a run recorded and whether a replay diverged from them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TapesOut {
    pub network: Option<String>,
    pub proc: Option<String>,
    pub network_events: u64,
    pub proc_reads: u64,
    /// What the guest did that the tape does not have (the replay was stopped).
    pub diverged: Option<String>,
}

/// What the supervisor makes the guest's view of the world a function of.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DetSettings {
    pub seed: u64,
    pub epoch_unix_secs: i64,
    pub clock_step_ns: u64,
    /// CPUs as the guest sees them.
    pub cpus: u32,
    /// Record the paths the guest uses (`repro capture`).
    #[serde(default)]
    pub record_access: bool,
    /// The host name the guest sees.
    #[serde(default = "default_hostname")]
    pub hostname: String,
    /// `sorted`, `reversed` or `shuffled:SEED`.
    #[serde(default)]
    pub dir_order: String,
    /// With `record_access`: a file the paths the guest reads are appended to while it runs.
    #[serde(default)]
    pub access_stream: Option<String>,
}

/// A path the guest used and how (`open`, `exec`, `map`, `stat`, `list`, `readlink`, `chdir`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accessed {
    pub path: String,
    pub kinds: Vec<String>,
}

fn default_hostname() -> String {
    crate::run::HOSTNAME.into()
}

/// What the init reports back.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InitResult {
    pub outcome: RunOutcome,
    pub exit_status: i32,
    #[serde(default)]
    pub determinism: Determinism,
    /// The paths the guest used, when recording.
    #[serde(default)]
    pub accessed: Vec<Accessed>,
    #[serde(default)]
    pub tapes: TapesOut,
}

/// The init's entry point. Returns the exit status.
pub fn main(config_path: &Path) -> i32 {
    let cfg: InitConfig = match fs::read(config_path)
        .map_err(|e| e.to_string())
        .and_then(|d| serde_json::from_slice(&d).map_err(|e| e.to_string()))
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("repro: sandbox setup failed: cannot read {}: {e}", config_path.display());
            return crate::EXIT_SETUP;
        }
    };
    // Open the result file before the root changes: afterwards the run directory is not reachable.
    let mut result_file = match fs::File::create(&cfg.result) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("repro: sandbox setup failed: cannot create {}: {e}", cfg.result);
            return crate::EXIT_SETUP;
        }
    };
    // The access stream too (a capture reads it while the guest runs).
    let stream = cfg
        .determinism
        .as_ref()
        .and_then(|d| d.access_stream.as_ref())
        .and_then(|p| fs::OpenOptions::new().append(true).open(p).ok())
        .map(|f| repro_tracer::AccessStream(std::sync::Arc::new(f)));
    let mut determinism = Determinism { supervised: cfg.determinism.is_some(), ..Default::default() };
    let mut accessed = Vec::new();
    let mut tapes = TapesOut::default();
    let (outcome, status) = match setup(&cfg) {
        Err(msg) => {
            eprintln!("repro: sandbox setup failed: {msg}");
            (RunOutcome::SetupFailed { message: msg }, crate::EXIT_SETUP)
        }
        Ok(()) => run_guest(&cfg, &mut determinism, (&mut accessed, stream), &mut tapes),
    };
    let res = InitResult { outcome, exit_status: status, determinism, accessed, tapes };
    let _ = result_file.write_all(&serde_json::to_vec(&res).unwrap_or_default());
    status
}

fn setup(cfg: &InitConfig) -> Result<(), String> {
    let e = |x: ns::SysError| x.to_string();
    ns::setsid().map_err(e)?;
    ns::sethostname(&cfg.hostname).map_err(e)?;
    ns::setdomainname(&cfg.domainname).map_err(e)?;
    if !cfg.host_network {
        ns::interface_up("lo").map_err(e)?;
    }
    build_root(cfg)?;
    ns::pivot_into(&cfg.root).map_err(e)?;
    ns::mount("proc", "/proc", "proc", mflags::NOSUID | mflags::NODEV | mflags::NOEXEC, None).map_err(e)?;
    // A sysfs of this network namespace: /sys/class/net shows only lo. With the host's network, the host's
    // /sys (part of the recursive bind of /) stays: a sysfs cannot be mounted again for that namespace.
    if !cfg.host_network {
        ns::mount("sysfs", "/sys", "sysfs", mflags::RDONLY | mflags::NOSUID | mflags::NODEV | mflags::NOEXEC, None)
            .map_err(e)?;
    }
    Ok(())
}

fn under(root: &str, path: &str) -> String {
    format!("{}/{}", root.trim_end_matches('/'), path.trim_start_matches('/'))
}

fn build_root(cfg: &InitConfig) -> Result<(), String> {
    let e = |x: ns::SysError| x.to_string();
    let r = cfg.root.as_str();
    ns::mount("", "/", "", mflags::REC | mflags::PRIVATE, None).map_err(e)?;
    let source = cfg.root_source.as_deref().unwrap_or("/");
    ns::mount(source, r, "", mflags::BIND | mflags::REC, None).map_err(e)?;
    ns::make_readonly_recursive(r).map_err(e)?;

    let tmpfs = |target: &str, mode: &str| {
        ns::mount("tmpfs", &under(r, target), "tmpfs", mflags::NOSUID | mflags::NODEV, Some(&format!("mode={mode}")))
            .map_err(e)
    };
    tmpfs("/tmp", "1777")?;
    tmpfs("/home", "755")?;
    mkdir_p(&under(r, crate::env::HOME), 0o755)?;

    // The working directory: an overlay whose upper layer is in the run directory.
    let target = under(r, &cfg.cwd);
    if !Path::new(&target).is_dir() {
        mkdir_p(&target, 0o755)?;
    }
    let lower = match &cfg.root_source {
        Some(src) => under(src, &cfg.cwd),
        None => cfg.cwd.clone(),
    };
    for p in [&lower, &cfg.upper, &cfg.work] {
        if p.contains(',') || p.contains(':') {
            return Err(format!("the path '{p}' contains ',' or ':', which overlayfs cannot take"));
        }
    }
    let mut opts = format!("lowerdir={},upperdir={},workdir={}", lower, cfg.upper, cfg.work);
    if cfg.user_namespace {
        opts.push_str(",userxattr");
    }
    ns::mount("overlay", &target, "overlay", 0, Some(&opts)).map_err(|x| format!("{x} (options {opts})"))?;
    for h in &cfg.hide {
        let t = under(r, h);
        if Path::new(&t).is_dir() {
            ns::mount("tmpfs", &t, "tmpfs", mflags::RDONLY | mflags::NOSUID | mflags::NODEV, Some("mode=555,size=4k"))
                .map_err(e)?;
        }
    }

    build_dev(r)?;

    for (name, host) in &cfg.etc {
        let t = resolve_in_root(r, &format!("/etc/{name}"));
        if Path::new(&t).exists() {
            ns::mount(host, &t, "", mflags::BIND, None).map_err(e)?;
            ns::mount("", &t, "", mflags::BIND | mflags::REMOUNT | mflags::RDONLY, None).map_err(e)?;
        }
    }

    for b in &cfg.binds {
        let t = under(r, &b.guest);
        if !Path::new(&t).exists() {
            let host_is_dir = Path::new(&b.host).is_dir();
            let made = if host_is_dir {
                mkdir_p(&t, 0o755)
            } else {
                Path::new(&t)
                    .parent()
                    .map(|p| mkdir_p(&p.to_string_lossy(), 0o755))
                    .unwrap_or(Ok(()))
                    .and_then(|_| fs::write(&t, b"").map_err(|x| x.to_string()))
            };
            made.map_err(|_| {
                format!(
                    "--bind {}: the guest path {} does not exist and cannot be created in the read-only root (use a \
                     path under /tmp, {} or the working directory, or one that exists)",
                    b.host,
                    b.guest,
                    crate::env::HOME
                )
            })?;
        }
        ns::mount(&b.host, &t, "", mflags::BIND | mflags::REC, None).map_err(e)?;
        if !b.writable {
            ns::make_readonly_recursive(&t).map_err(e)?;
        }
    }
    Ok(())
}

/// Resolves symbolic links of `path` inside `root` (at most a few levels), for files such as /etc/resolv.conf.
fn resolve_in_root(root: &str, path: &str) -> String {
    let mut p = PathBuf::from(path);
    for _ in 0..8 {
        let host = under(root, &p.to_string_lossy());
        match fs::read_link(&host) {
            Ok(target) => {
                p = if target.is_absolute() { target } else { p.parent().unwrap_or(Path::new("/")).join(target) };
                p = crate::parse::normalize(&p);
            }
            Err(_) => return host,
        }
    }
    under(root, &p.to_string_lossy())
}

fn build_dev(r: &str) -> Result<(), String> {
    let e = |x: ns::SysError| x.to_string();
    let dev = under(r, "/dev");
    ns::mount("tmpfs", &dev, "tmpfs", mflags::NOSUID, Some("mode=755")).map_err(e)?;
    for node in ["null", "zero", "full", "random", "urandom", "tty"] {
        let t = format!("{dev}/{node}");
        fs::write(&t, b"").map_err(|x| format!("{t}: {x}"))?;
        ns::mount(&format!("/dev/{node}"), &t, "", mflags::BIND, None).map_err(e)?;
    }
    mkdir_p(&format!("{dev}/pts"), 0o755)?;
    ns::mount(
        "devpts",
        &format!("{dev}/pts"),
        "devpts",
        mflags::NOSUID | mflags::NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=620"),
    )
    .map_err(e)?;
    mkdir_p(&format!("{dev}/shm"), 0o1777)?;
    ns::mount("tmpfs", &format!("{dev}/shm"), "tmpfs", mflags::NOSUID | mflags::NODEV, Some("mode=1777")).map_err(e)?;
    for (link, target) in [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, format!("{dev}/{link}")).map_err(|x| format!("{dev}/{link}: {x}"))?;
    }
    Ok(())
}

fn mkdir_p(path: &str, mode: u32) -> Result<(), String> {
    fs::create_dir_all(path).map_err(|x| format!("mkdir {path}: {x}"))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(|x| format!("chmod {path}: {x}"))
}

/// Finds the program the way a shell would, with the guest's PATH, inside the new root.
fn resolve_program(cmd: &str, path_var: &str) -> Result<String, i32> {
    if cmd.contains('/') {
        return match ns::is_executable(cmd) {
            Ok(()) if Path::new(cmd).is_dir() => Err(13),
            Ok(()) => Ok(cmd.to_string()),
            Err(errno) => Err(errno),
        };
    }
    let mut denied = false;
    for dir in path_var.split(':') {
        let dir = if dir.is_empty() { "." } else { dir };
        let cand = format!("{dir}/{cmd}");
        if Path::new(&cand).is_file() {
            match ns::is_executable(&cand) {
                Ok(()) => return Ok(cand),
                Err(_) => denied = true,
            }
        }
    }
    Err(if denied { 13 } else { 2 })
}

fn exec_failed(cmd: &str, errno: i32) -> (RunOutcome, i32) {
    let message = ns::strerror(errno);
    eprintln!("repro: cannot execute '{cmd}': {message}");
    let code = if errno == 2 { crate::EXIT_NOT_FOUND } else { crate::EXIT_NOT_EXECUTABLE };
    (RunOutcome::ExecFailed { errno, message }, code)
}

fn run_guest(
    cfg: &InitConfig,
    determinism: &mut Determinism,
    (accessed, stream): (&mut Vec<Accessed>, Option<repro_tracer::AccessStream>),
    tapes: &mut TapesOut,
) -> (RunOutcome, i32) {
    let cmd = cfg.argv.first().cloned().unwrap_or_default();
    let path_var = cfg.env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str()).unwrap_or(crate::env::PATH);
    let sigfd = match ns::signalfd(&INIT_SIGNALS) {
        Ok(f) => f,
        Err(x) => return (RunOutcome::SetupFailed { message: x.to_string() }, crate::EXIT_SETUP),
    };
    // Resolve from the working directory, as the guest would.
    if let Err(x) = std::env::set_current_dir(&cfg.cwd) {
        let m = format!("cannot enter the working directory {}: {x}", cfg.cwd);
        eprintln!("repro: sandbox setup failed: {m}");
        return (RunOutcome::SetupFailed { message: m }, crate::EXIT_SETUP);
    }
    let program = match resolve_program(&cmd, path_var) {
        Ok(p) => p,
        Err(errno) => return exec_failed(&cmd, errno),
    };
    let cs = |s: &str| CString::new(s.replace('\0', "")).unwrap_or_default();
    let argv: Vec<CString> = cfg.argv.iter().map(|a| cs(a)).collect();
    let envp: Vec<CString> = cfg.env.iter().map(|(k, v)| cs(&format!("{k}={v}"))).collect();
    // Docker's capabilities, no_new_privs, and the guest's seccomp rules: a filter of their own without the
    // supervisor, in the supervisor's filter with it.
    let confine = match repro_sys::confine::Confinement::docker_default(cfg.determinism.is_none()) {
        Ok(c) => c,
        Err(x) => {
            let m = format!("cannot build the guest's seccomp filter: {x}");
            eprintln!("repro: sandbox setup failed: {m}");
            return (RunOutcome::SetupFailed { message: m }, crate::EXIT_SETUP);
        }
    };
    let setup = ns::GuestSetup {
        umask: cfg.umask,
        no_aslr: cfg.no_aslr,
        rlimits: cfg.rlimits.clone(),
        cpus: cfg.cpus.clone(),
        fds: vec![(STDOUT_FD, 1), (STDERR_FD, 2)],
        close: vec![STDOUT_FD, STDERR_FD],
        cwd: cs(&cfg.cwd),
        confine: Some(confine),
    };
    let exit = match &cfg.determinism {
        None => match spawn_plain(&cs(&program), &argv, &envp, &setup, &sigfd) {
            Ok(exit) => exit,
            Err(failed) => return failed(&cmd),
        },
        Some(det) => {
            match supervised(
                cs(&program),
                argv,
                envp,
                &setup,
                det,
                sigfd,
                determinism,
                (accessed, stream),
                (&cfg.tapes, tapes),
            ) {
                Ok(exit) => exit,
                Err(failed) => return failed(&cmd),
            }
        }
    };
    let outcome = match exit {
        ChildExit::Exited(code) => RunOutcome::Exited { code },
        ChildExit::Signaled(signal) => RunOutcome::Signaled { signal, name: signal_name(signal) },
    };
    (outcome, exit.code())
}

/// How a failed start is reported: a function of the command name.
type Failed = Box<dyn FnOnce(&str) -> (RunOutcome, i32)>;

fn setup_failed(m: String) -> Failed {
    Box::new(move |_| {
        eprintln!("repro: sandbox setup failed: {m}");
        (RunOutcome::SetupFailed { message: m }, crate::EXIT_SETUP)
    })
}

/// Starts the guest without the supervisor and waits for it.
fn spawn_plain(
    program: &CString,
    argv: &[CString],
    envp: &[CString],
    setup: &ns::GuestSetup,
    sigfd: &std::os::fd::OwnedFd,
) -> Result<ChildExit, Failed> {
    let guest = match ns::spawn_guest(program, argv, envp, setup) {
        Ok(pid) => pid,
        Err(("execve", errno)) => return Err(Box::new(move |cmd| exec_failed(cmd, errno))),
        Err((step, errno)) => return Err(setup_failed(format!("{step} in the guest failed: {}", ns::strerror(errno)))),
    };
    // The init keeps no end of the output pipes: they close when the guest's last process does.
    ns::close_raw(STDOUT_FD);
    ns::close_raw(STDERR_FD);
    Ok(wait_guest(guest, sigfd))
}

/// Starts the guest under the determinism supervisor and waits for it. Signals for the guest are forwarded
/// by a thread started once the guest runs.
#[allow(clippy::too_many_arguments)]
fn supervised(
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    setup: &ns::GuestSetup,
    det: &DetSettings,
    sigfd: std::os::fd::OwnedFd,
    determinism: &mut Determinism,
    (accessed, stream): (&mut Vec<Accessed>, Option<repro_tracer::AccessStream>),
    (tape_cfg, tapes): (&TapeSettings, &mut TapesOut),
) -> Result<ChildExit, Failed> {
    use repro_tracer::tape::{NetMode, NetTape, ProcMode, ProcTape};
    let network = match &tape_cfg.network {
        TapeIo::Off => NetMode::Off,
        TapeIo::Record => NetMode::Record,
        TapeIo::Replay(j) => NetMode::Replay(NetTape::from_json(j.as_bytes()).map_err(setup_failed)?),
    };
    let proc = match &tape_cfg.proc {
        TapeIo::Off => ProcMode::Off,
        TapeIo::Record => ProcMode::Record,
        TapeIo::Replay(j) => ProcMode::Replay(ProcTape::from_json(j.as_bytes()).map_err(setup_failed)?),
    };
    let mut pre_exec = || -> std::io::Result<()> {
        ns::apply_guest_setup(setup).map_err(|(_, errno)| std::io::Error::from_raw_os_error(errno))
    };
    let spec = repro_tracer::GuestSpec { program, argv, envp, pre_exec: &mut pre_exec };
    let cfg = repro_tracer::DetConfig {
        seed: det.seed,
        epoch_unix_secs: det.epoch_unix_secs,
        clock_step_ns: det.clock_step_ns,
        cpus: det.cpus,
        record_access: det.record_access,
        hostname: det.hostname.clone(),
        dir_order: repro_detcore::DirOrder::parse(&det.dir_order).unwrap_or_default(),
        tapes: repro_tracer::tape::TapeConfig { network, proc },
        access_stream: stream,
        confine: true,
    };
    let mut sigfd = Some(sigfd);
    let mut on_spawn = |guest: i32| {
        // The guest has its own copies of the output pipes now.
        ns::close_raw(STDOUT_FD);
        ns::close_raw(STDERR_FD);
        if let Some(fd) = sigfd.take() {
            std::thread::spawn(move || loop {
                match ns::read_signal(&fd) {
                    Ok(libc_sig::CHLD) => {}
                    Ok(sig) => {
                        let _ = ns::kill(guest, sig);
                    }
                    Err(_) => return,
                }
            });
        }
    };
    match repro_tracer::supervise(spec, &cfg, &mut on_spawn) {
        Ok(out) => {
            determinism.not_enforced = out.not_enforced;
            determinism.mediated = out.stats.mediated;
            determinism.tasks_created = out.stats.tasks_created;
            determinism.execs = out.stats.execs;
            *accessed = out.accessed.into_iter().map(|a| Accessed { path: a.path, kinds: a.kinds }).collect();
            let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
            tapes.network_events = out.tapes.network.as_ref().map_or(0, |t| t.events.len() as u64);
            tapes.proc_reads = out.tapes.proc.as_ref().map_or(0, |t| t.reads.len() as u64);
            tapes.network = out.tapes.network.map(|t| text(t.to_json()));
            tapes.proc = out.tapes.proc.map(|t| text(t.to_json()));
            tapes.diverged = out.diverged;
            Ok(match out.exit {
                repro_tracer::GuestExit::Exited(c) => ChildExit::Exited(c),
                repro_tracer::GuestExit::Signaled(s) => ChildExit::Signaled(s),
            })
        }
        Err(repro_tracer::TracerError::Exec { errno, .. }) => Err(Box::new(move |cmd| exec_failed(cmd, errno))),
        Err(e) => Err(setup_failed(e.to_string())),
    }
}

fn wait_guest(guest: i32, sigfd: &std::os::fd::OwnedFd) -> ChildExit {
    loop {
        // Reap whatever has exited; the guest's own status ends the run.
        loop {
            match ns::wait_child(-1, true) {
                Ok(Some((pid, exit))) if pid == guest => return exit,
                Ok(Some(_)) => continue,
                Ok(None) => break,
                Err(_) => return ChildExit::Exited(crate::EXIT_SETUP),
            }
        }
        match ns::read_signal(sigfd) {
            Ok(libc_sig::CHLD) => {}
            Ok(sig) => {
                let _ = ns::kill(guest, sig);
            }
            Err(_) => return ChildExit::Exited(crate::EXIT_SETUP),
        }
    }
}

/// The conventional name of a signal number.
pub fn signal_name(sig: i32) -> String {
    let names = [
        "",
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    names.get(sig as usize).filter(|n| !n.is_empty()).map(|n| n.to_string()).unwrap_or_else(|| format!("SIG{sig}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(2), "SIGINT");
        assert_eq!(signal_name(40), "SIG40");
    }

    #[test]
    fn programs_resolve_through_path() {
        assert_eq!(resolve_program("sh", "/nonexistent:/bin").unwrap(), "/bin/sh");
        assert_eq!(resolve_program("no-such-program-xyz", "/bin").unwrap_err(), 2);
        let d = tempfile::tempdir().unwrap();
        let plain = d.path().join("plain");
        fs::write(&plain, "x").unwrap();
        fs::set_permissions(&plain, fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(resolve_program(&plain.to_string_lossy(), "/bin").unwrap_err(), 13);
        assert_eq!(resolve_program(&d.path().to_string_lossy(), "/bin").unwrap_err(), 13);
        assert_eq!(resolve_program("/no/such", "/bin").unwrap_err(), 2);
    }
}
