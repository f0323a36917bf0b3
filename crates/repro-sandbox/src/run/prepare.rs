//! The first stage of `repro run`: the options validated against the host into a [`RunRequest`] (the project
//! file, the epoch, the limits, the environment, the toolchains and the repository the guest is shown).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use repro_model::run::{BindMount, RunSettings};
use repro_model::DirOrder;

use super::{RunOptions, DEFAULT_MEMORY, HOSTNAME};
use crate::parse::{self, EnvSpec};
use crate::rundir;
use crate::SandboxError;

/// A validated run, ready to execute.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub settings: RunSettings,
    pub state_dir: PathBuf,
    /// Said after "cannot execute" when the guest does not find the command: where the host has it and the flag
    /// that makes it visible ([`crate::toolchain::Resolution::hint`]).
    pub exec_hint: Option<String>,
}

impl RunRequest {
    /// Validates the options against the host: every error names the argument and the expected form.
    pub fn prepare(opts: &RunOptions) -> Result<RunRequest, SandboxError> {
        if opts.command.is_empty() {
            return Err(SandboxError::usage("CMD", "no command given: repro run [OPTIONS] -- CMD [ARGS...]"));
        }
        let cwd = std::env::current_dir().map_err(|e| SandboxError::io("cannot read the current directory", ".", e))?;
        check_cwd(&cwd)?;
        let project = match crate::project::locate(&opts.config, &cwd) {
            Some(path) => Some(crate::project::load(&path)?),
            None => None,
        };
        let merged;
        let opts = match &project {
            Some(p) => {
                merged = crate::project::apply(opts, p);
                &merged
            }
            None => opts,
        };
        repro_sys::startup::mark("run: project file located");
        let file_epoch = project.as_ref().and_then(|p| p.file.run.epoch.as_ref()).map(|e| e.as_flag());
        let state_dir =
            rundir::state_dir(opts.state_dir.as_deref(), std::env::var("REPRO_STATE_DIR").ok().as_deref(), &cwd);
        let epoch = parse::resolve_epoch_with(
            opts.epoch.as_deref(),
            file_epoch.as_deref(),
            std::env::var("SOURCE_DATE_EPOCH").ok().as_deref(),
            &cwd,
            Some(&state_dir),
        )?;
        repro_sys::startup::mark("run: epoch resolved");
        let memory_bytes = match &opts.memory {
            Some(m) => parse::parse_memory("--memory", m)?,
            None => DEFAULT_MEMORY,
        };
        let pids_max = opts.pids.unwrap_or(repro_model::settings::DEFAULT_PIDS);
        if !(1..=repro_model::settings::MAX_PIDS).contains(&pids_max) {
            return Err(SandboxError::usage(
                format!("--pids {pids_max}"),
                format!("expected a number of tasks from 1 to {}", repro_model::settings::MAX_PIDS),
            ));
        }
        let disk_bytes = match &opts.disk {
            Some(d) => parse::parse_memory("--disk", d)?,
            None => repro_model::run::DEFAULT_DISK_BYTES,
        };
        if opts.cpus == 0 {
            return Err(SandboxError::usage("--cpus", "expected a number of CPUs of at least 1"));
        }
        let stuck_after_ms = match &opts.stuck_after {
            Some(d) => parse::parse_duration_ms("--stuck-after", d)?,
            None => repro_model::run::DEFAULT_STUCK_AFTER_MS,
        };
        let spin_limit_ms = match &opts.spin_limit {
            Some(d) => parse::parse_spin_limit_ms(d)?,
            None => repro_model::run::DEFAULT_SPIN_LIMIT_MS,
        };
        let sched = repro_model::SchedSettings {
            policy: match &opts.sched {
                Some(p) => p.parse().map_err(|m: String| SandboxError::usage(format!("--sched '{p}'"), m))?,
                None => repro_model::SchedPolicy::default(),
            },
            seed: opts.sched_seed.unwrap_or(0),
            points: match &opts.sched_points {
                Some(p) => p.parse().map_err(|m: String| SandboxError::usage(format!("--sched-points '{p}'"), m))?,
                None => repro_model::SchedPoints::default(),
            },
        };
        let sched_script = match &opts.sched_script {
            Some(path) => {
                let arg = format!("--sched-script {}", path.display());
                let text =
                    std::fs::read(path).map_err(|e| SandboxError::usage(&arg, format!("cannot read it: {e}")))?;
                Some(repro_model::SchedScript::parse(&text).map_err(|e| SandboxError::usage(&arg, e.to_string()))?)
            }
            None => None,
        };
        let specs: Vec<EnvSpec> = opts.env.iter().map(|e| parse::parse_env(e)).collect::<Result<_, _>>()?;
        let mut env = crate::env::guest_env(epoch.unix, &specs, |k| std::env::var(k).ok());
        let mut binds: Vec<BindMount> =
            opts.bind.iter().map(|b| parse::parse_bind(b, &cwd)).collect::<Result<_, _>>()?;
        let guest_path = env.get("PATH").cloned().unwrap_or_else(|| crate::env::PATH.to_string());
        let host_var = |k: &str| std::env::var(k).ok();
        let mut resolution = crate::reach::resolve_all(
            &opts.command,
            &crate::toolchain::Host { var: &host_var, cwd: &cwd },
            &guest_path,
        );
        let guest_home = env.get("HOME").cloned().unwrap_or_else(|| crate::env::HOME.to_string());
        crate::reach::mirror_home(&mut resolution.toolchains, host_var("HOME").as_deref(), &guest_home, &cwd);
        repro_sys::startup::mark("run: toolchains resolved");
        // A variable an `--env` names is the user's.
        let user_set = |k: &str| specs.iter().any(|s| matches!(s, EnvSpec::Set(n, _) | EnvSpec::Pass(n) if n == k));
        pass_toolchains(&resolution.toolchains, &user_set, &cwd, &mut env, &mut binds);
        if let (Some(p), false) = (&resolution.path, user_set("PATH")) {
            env.insert("PATH".into(), p.clone());
        }
        let repository = crate::gitview::view(&cwd, &host_var);
        repository.iter().for_each(|v| crate::gitview::pass(v, &user_set, &mut env, &mut binds));
        let hostname = match &opts.hostname {
            Some(h) => check_hostname(h)?,
            None => HOSTNAME.into(),
        };
        let dir_order = match &opts.dir_order {
            Some(o) => o.parse::<DirOrder>().map_err(|_| {
                SandboxError::usage(
                    format!("--dir-order '{o}'"),
                    format!("expected {}", repro_model::dirorder::DIR_ORDER_EXPECTED),
                )
            })?,
            None => DirOrder::Sorted,
        };
        let settings =
            crate::settings::for_host(opts.command.clone(), cwd.to_string_lossy().into_owned(), epoch, |s| {
                s.seed = opts.seed.unwrap_or(0);
                s.cpus = opts.cpus;
                s.memory_bytes = memory_bytes;
                s.pids_max = pids_max;
                s.env = env;
                s.binds = binds;
                s.keep_changes = opts.keep_changes;
                s.hostname = hostname;
                s.supervised = !opts.no_supervisor;
                s.clock_step_ns = opts.clock_step_ns;
                s.dir_order = dir_order;
                s.disk_bytes = disk_bytes;
                s.project_file = project.as_ref().map(|p| p.path.to_string_lossy().into_owned());
                s.toolchains = resolution.toolchains;
                s.repository = repository;
                s.path_notes = resolution.notes;
                s.stuck_after_ms = stuck_after_ms;
                s.spin_limit_ms = spin_limit_ms;
                s.sched = sched;
                s.sched_script = sched_script;
                s.sched_log = opts.sched_log;
            });
        Ok(RunRequest { settings, state_dir, exec_hint: resolution.hint })
    }
}

/// Passes the toolchains to the guest: their variables (unless an `--env` names the same variable: the user's
/// wins), read-only binds of their directories the guest does not already see (a path already bound by
/// `--bind` is left to it) and of their directories under the host's HOME at the guest's HOME (`home_paths`).
fn pass_toolchains(
    toolchains: &[repro_model::run::Toolchain],
    user_set: &dyn Fn(&str) -> bool,
    cwd: &Path,
    env: &mut BTreeMap<String, String>,
    binds: &mut Vec<BindMount>,
) {
    for t in toolchains {
        for (k, v) in &t.variables {
            if !user_set(k) {
                env.insert(k.clone(), v.clone());
            }
        }
        for p in &t.paths {
            let taken = binds.iter().any(|b| Path::new(&b.guest) == Path::new(p));
            if !taken && !crate::toolchain::guest_sees(Path::new(p), cwd) {
                binds.push(BindMount { host: p.clone(), guest: p.clone(), writable: false });
            }
        }
        for (guest, host) in &t.home_paths {
            if !binds.iter().any(|b| Path::new(&b.guest) == Path::new(guest)) {
                binds.push(BindMount { host: host.clone(), guest: guest.clone(), writable: false });
            }
        }
    }
}

/// A host name the guest can be given: 1 to 63 letters, digits, '-' and '.'.
fn check_hostname(h: &str) -> Result<String, SandboxError> {
    let ok = !h.is_empty() && h.len() <= 63 && h.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    if ok {
        Ok(h.to_string())
    } else {
        Err(SandboxError::usage(format!("--hostname '{h}'"), "expected 1 to 63 letters, digits, '-' and '.'"))
    }
}

/// The working directory becomes the guest's writable overlay: it cannot be the root or a kernel filesystem.
fn check_cwd(cwd: &Path) -> Result<(), SandboxError> {
    let bad = cwd == Path::new("/") || ["/proc", "/sys", "/dev"].iter().any(|p| cwd.starts_with(p));
    if bad {
        return Err(SandboxError::usage(
            "working directory",
            format!(
                "'{}' cannot be the sandbox's writable directory: run repro from a project directory",
                cwd.display()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{test_options as opts, DOMAINNAME};
    use repro_model::ExitCode;

    #[test]
    fn prepared_settings_are_the_defaults_with_the_options() {
        let o = RunOptions {
            seed: Some(7),
            dir_order: Some("shuffled:3".into()),
            hostname: Some("box".into()),
            disk: Some("64M".into()),
            ..opts()
        };
        let s = RunRequest::prepare(&o).unwrap().settings;
        assert_eq!((s.seed, s.epoch.unix, s.hostname.as_str()), (7, 0, "box"));
        assert_eq!(s.dir_order, DirOrder::Shuffled(3));
        assert_eq!((s.disk_bytes, s.disk_inodes), (64 << 20, repro_model::run::disk_inodes_for(64 << 20)));
        assert_eq!((s.domainname.as_str(), s.umask.as_str()), (DOMAINNAME, "0022"));
        assert_eq!(s.rlimits, repro_model::settings::fixed_rlimits());
        assert_eq!(s.memory_bytes, DEFAULT_MEMORY);
        assert!(s.supervised && s.identity.is_some() && s.cpu_affinity.len() <= 1);
        assert_eq!(s.sched, repro_model::SchedSettings::default());
        let d = RunRequest::prepare(&opts()).unwrap().settings;
        assert_eq!((d.dir_order, d.hostname.as_str()), (DirOrder::Sorted, HOSTNAME));
        let o = RunOptions { sched: Some("pct".into()), sched_seed: Some(9), ..opts() };
        let p = RunRequest::prepare(&o).unwrap().settings;
        assert_eq!(
            p.sched,
            repro_model::SchedSettings { policy: repro_model::SchedPolicy::PCT, seed: 9, ..Default::default() }
        );
        let o = RunOptions { sched_points: Some("io".into()), ..opts() };
        let p = RunRequest::prepare(&o).unwrap().settings;
        assert_eq!(p.sched.points, repro_model::SchedPoints::Io);
    }

    #[test]
    fn bad_options_name_the_argument_and_the_expected_form() {
        let cases = [
            (RunOptions { dir_order: Some("sideways".into()), ..opts() }, "--dir-order 'sideways'", "shuffled:SEED"),
            (RunOptions { hostname: Some("a b".into()), ..opts() }, "--hostname 'a b'", "letters, digits"),
            (RunOptions { cpus: 0, ..opts() }, "--cpus", "at least 1"),
            (RunOptions { sched: Some("fifo".into()), ..opts() }, "--sched 'fifo'", "round-robin"),
            (RunOptions { sched_points: Some("all".into()), ..opts() }, "--sched-points 'all'", "blocking or io"),
            (RunOptions { command: vec![], ..opts() }, "CMD", "no command given"),
        ];
        for (o, argument, expected) in cases {
            let e = RunRequest::prepare(&o).unwrap_err();
            assert_eq!(e.exit_code(), ExitCode::Usage.code(), "{e}");
            let text = e.to_string();
            assert!(text.starts_with(argument) && text.contains(expected), "{text}");
        }
    }
}
