//! `repro-supervise`: runs one command under the determinism supervisor, for tests and benchmarks.
//!
//! ```text
//! repro-supervise [--seed N] [--epoch SECS] [--clock-step-ns N] [--cpus N] [--no-pidns] [--stats FILE] [--network record] -- CMD [ARGS...]
//! ```
//! By default it enters a new PID and mount namespace (with a fresh /proc) so that pids are deterministic,
//! as `repro run`'s sandbox does. Exit status: the guest's (128+signal when killed), 121 when determinism was
//! not enforced, 127/126 when the command cannot be executed. `--network record` tapes the guest's sockets
//! (it uses the host's network; the tape is discarded): for measuring what taping costs.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::ExitCode;

use repro_tracer::{supervise, DetConfig, GuestExit, GuestSpec, TracerError};

struct Args {
    cfg: DetConfig,
    pidns: bool,
    stats: Option<PathBuf>,
    cmd: Vec<OsString>,
}

fn usage(msg: &str) -> ! {
    eprintln!("repro-supervise: {msg}");
    eprintln!("usage: repro-supervise [--seed N] [--epoch SECS] [--clock-step-ns N] [--cpus N] [--no-pidns] [--stats FILE] [--network record] -- CMD [ARGS...]");
    std::process::exit(2)
}

fn parse() -> Args {
    let mut it = std::env::args_os().skip(1);
    let mut a = Args { cfg: DetConfig::default(), pidns: true, stats: None, cmd: Vec::new() };
    while let Some(arg) = it.next() {
        let s = arg.to_string_lossy().into_owned();
        let mut val = |name: &str| -> String {
            it.next()
                .map(|v| v.to_string_lossy().into_owned())
                .unwrap_or_else(|| usage(&format!("{name} needs a value")))
        };
        match s.as_str() {
            "--seed" => a.cfg.seed = val("--seed").parse().unwrap_or_else(|_| usage("bad --seed")),
            "--epoch" => a.cfg.epoch_unix_secs = val("--epoch").parse().unwrap_or_else(|_| usage("bad --epoch")),
            "--clock-step-ns" => {
                a.cfg.clock_step_ns = val("--clock-step-ns").parse().unwrap_or_else(|_| usage("bad --clock-step-ns"))
            }
            "--cpus" => a.cfg.cpus = val("--cpus").parse().unwrap_or_else(|_| usage("bad --cpus")),
            "--no-pidns" => a.pidns = false,
            "--stats" => a.stats = Some(PathBuf::from(val("--stats"))),
            "--network" => match val("--network").as_str() {
                "record" => a.cfg.tapes.network = repro_tracer::tape::NetMode::Record,
                "off" => a.cfg.tapes.network = repro_tracer::tape::NetMode::Off,
                other => usage(&format!("bad --network {other}: record or off")),
            },
            "--" => {
                a.cmd = it.collect();
                break;
            }
            _ => usage(&format!("unknown argument {s}")),
        }
    }
    if a.cmd.is_empty() {
        usage("no command given");
    }
    a
}

fn resolve(cmd: &OsString) -> PathBuf {
    let p = PathBuf::from(cmd);
    if cmd.as_bytes().contains(&b'/') {
        return p;
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let cand = dir.join(&p);
            if cand.is_file() {
                return cand;
            }
        }
    }
    p
}

fn cstr(b: &[u8]) -> CString {
    CString::new(b).unwrap_or_else(|_| usage("argument contains a NUL byte"))
}

fn run(a: &Args) -> i32 {
    let program = cstr(resolve(&a.cmd[0]).as_os_str().as_bytes());
    let argv: Vec<CString> = a.cmd.iter().map(|s| cstr(s.as_bytes())).collect();
    let envp: Vec<CString> = std::env::vars_os()
        .map(|(k, v)| {
            let mut b = k.as_bytes().to_vec();
            b.push(b'=');
            b.extend_from_slice(v.as_bytes());
            cstr(&b)
        })
        .collect();
    let mut pre_exec = || Ok(());
    let spec = GuestSpec { program, argv, envp, pre_exec: &mut pre_exec };
    match supervise(spec, &a.cfg, &mut |_| {}) {
        Ok(out) => {
            for r in &out.not_enforced {
                eprintln!("[repro] determinism not enforced: {r}");
            }
            if let Some(p) = &a.stats {
                if let Err(e) = std::fs::write(p, out.stats.to_json().to_string()) {
                    eprintln!("repro-supervise: cannot write the stats to {}: {e}", p.display());
                }
            }
            let code = match out.exit {
                GuestExit::Exited(c) => c,
                GuestExit::Signaled(s) => 128 + s,
            };
            if out.not_enforced.is_empty() {
                code
            } else {
                eprintln!("[repro] the guest exited {code} but this run is NOT reproducible; see the messages above.");
                121
            }
        }
        Err(e) => {
            eprintln!("repro-supervise: {e}");
            match e {
                TracerError::Exec { errno: libc::ENOENT, .. } => 127,
                TracerError::Exec { .. } => 126,
                _ => 125,
            }
        }
    }
}

fn main() -> ExitCode {
    let a = parse();
    if !a.pidns {
        return ExitCode::from(run(&a) as u8);
    }
    if let Err(e) = repro_sys::fdops::unshare(libc::CLONE_NEWPID | libc::CLONE_NEWNS) {
        eprintln!("repro-supervise: unshare: {e}");
        return ExitCode::from(125);
    }
    let init = repro_sys::spawn::fork_run(|| {
        // PID 1 of the new namespace: a private /proc that shows it.
        use nix::mount::{mount, MsFlags};
        // Without them the guest sees the host's /proc (its pids are then not the namespace's): said, not fatal.
        if let Err(e) = mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>) {
            eprintln!("repro-supervise: making / private: {e}");
        }
        let proc_flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
        if let Err(e) = mount(Some("proc"), "/proc", Some("proc"), proc_flags, None::<&str>) {
            eprintln!("repro-supervise: mounting a fresh /proc: {e}");
        }
        run(&a)
    });
    match init {
        Ok(pid) => loop {
            match nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None) {
                Ok(nix::sys::wait::WaitStatus::Exited(_, c)) => return ExitCode::from(c as u8),
                Ok(nix::sys::wait::WaitStatus::Signaled(_, s, _)) => return ExitCode::from(128 + s as u8),
                Ok(_) | Err(nix::Error::EINTR) => continue,
                Err(e) => {
                    eprintln!("repro-supervise: waitpid: {e}");
                    return ExitCode::from(125);
                }
            }
        },
        Err(e) => {
            eprintln!("repro-supervise: fork: {e}");
            ExitCode::from(125)
        }
    }
}
