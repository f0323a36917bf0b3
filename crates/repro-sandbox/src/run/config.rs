//! The stage of `repro run` before the sandbox: the run's scratch directory, the guest's identity and idmapped
//! trees, and the init's configuration and the descriptors it inherits.

use std::fs;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use repro_model::init::ScannedFile;
use repro_model::run::{Identity, RunSettings};
use repro_sys::ns;

use super::{RunExtras, RunRequest, DOMAINNAME, SCRATCH};
use crate::init::{InitConfig, TreeRole, RUN_DIR_FD};
use crate::rundir::RunDir;
use crate::SandboxError;

/// What [`configure`] gives [`super::start::start`].
pub(super) struct Configured {
    /// The run directory's empty scratch directory, on which the init mounts its tmpfs.
    pub scratch: PathBuf,
    /// The guest's identity (its user namespace's maps, whether trees are idmapped).
    pub identity: Identity,
    /// The trees idmapped for the guest.
    pub trees: Vec<(TreeRole, PathBuf)>,
    /// Files earlier runs found free of RDRAND/RDSEED.
    pub rdrand_known: Vec<ScannedFile>,
    /// The init's configuration (a memfd), its result (an empty memfd) and the access stream, if any.
    pub cfg_fd: OwnedFd,
    pub result_fd: OwnedFd,
    pub access_fd: Option<fs::File>,
    /// The socket pair over which the idmapped trees go to the init.
    pub trees_tx: OwnedFd,
    pub trees_rx: OwnedFd,
}

/// Takes the request, its extras and the run directory just created; makes the scratch directory and gives
/// what the init will inherit: its configuration and result memfds, the access stream, the trees' socket pair,
/// with the identity, the trees and the RDRAND scan cache they were made from.
pub(super) fn configure(req: &RunRequest, extras: &RunExtras, dir: &RunDir) -> Result<Configured, SandboxError> {
    let s = &req.settings;
    // The run's only scratch on the host's disk: an empty directory on which the init mounts a tmpfs of its own
    // for the root, the layer, the stage and the /etc files (each directory made on the disk costs ~0.3 ms here,
    // and as much again to remove).
    let scratch = dir.join(SCRATCH);
    fs::create_dir(&scratch).map_err(|e| SandboxError::io("cannot create", &scratch, e))?;
    // The guest always has its own user namespace: its root is a host id without privileges (see identity.rs).
    let identity = s.identity.clone().unwrap_or_else(crate::identity::current);
    let trees = idmapped_trees(&identity, s, extras);
    let etc_files = etc_files(&s.hostname);
    // Files earlier runs found free of RDRAND/RDSEED: the supervisor does not read them again.
    let rdrand_known = if s.supervised { crate::scancache::load(&req.state_dir) } else { Vec::new() };
    let cfg = init_config(req, extras, &trees, &etc_files, &rdrand_known)?;
    // The init cannot open files of the run directory (it is not the host's user): its configuration, result and
    // access stream are descriptors it inherits. The configuration (with the environment) never touches the disk.
    let cfg_json =
        serde_json::to_vec(&cfg).map_err(|source| SandboxError::Encode { what: "the init's configuration", source })?;
    let cfg_fd = repro_sys::idmap::memfd(c"repro-init-config", &cfg_json)?;
    let result_fd = repro_sys::idmap::memfd(c"repro-init-result", b"")?;
    let access_fd = match &extras.access_stream {
        Some(p) => {
            Some(fs::OpenOptions::new().append(true).open(p).map_err(|e| SandboxError::io("cannot open", p, e))?)
        }
        None => None,
    };
    let (trees_tx, trees_rx) = ns::socketpair()?;
    repro_sys::startup::mark("run: scratch directory, init configuration");
    Ok(Configured { scratch, identity, trees, rdrand_known, cfg_fd, result_fd, access_fd, trees_tx, trees_rx })
}

/// The trees `repro run` idmaps for the guest (as root): the working directory or a pack's root, and every bind.
fn idmapped_trees(identity: &Identity, s: &RunSettings, extras: &RunExtras) -> Vec<(TreeRole, PathBuf)> {
    let mut trees: Vec<(TreeRole, PathBuf)> = Vec::new();
    if identity.idmapped_mounts {
        match &extras.root_source {
            Some(r) => trees.push((TreeRole::RootSource, r.clone())),
            None => trees.push((TreeRole::Cwd, PathBuf::from(&s.cwd))),
        }
        for (i, b) in s.binds.iter().enumerate() {
            trees.push((TreeRole::Bind(i), PathBuf::from(&b.host)));
        }
    }
    trees
}

/// The guest's /etc/hostname, /etc/hosts and /etc/resolv.conf.
fn etc_files(hostname: &str) -> [(&'static str, String); 3] {
    [
        ("hostname", format!("{}\n", hostname)),
        (
            "hosts",
            format!(
                "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{h}.{DOMAINNAME} {h}\n",
                h = hostname
            ),
        ),
        (
            "resolv.conf",
            "# repro: the sandbox has no network\nnameserver 127.0.0.1\noptions timeout:1 attempts:1\n".to_string(),
        ),
    ]
}

/// The init's configuration for `req`: the run directory is reached through [`RUN_DIR_FD`], the fixed parts come
/// from the settings, the supervisor's from the settings and `extras`.
fn init_config(
    req: &RunRequest,
    extras: &RunExtras,
    trees: &[(TreeRole, PathBuf)],
    etc_files: &[(&'static str, String)],
    rdrand_clean: &[repro_model::init::ScannedFile],
) -> Result<InitConfig, SandboxError> {
    let s = &req.settings;
    let cwd = Path::new(&s.cwd);
    let hide = if req.state_dir.starts_with(cwd) && req.state_dir != cwd {
        vec![req.state_dir.to_string_lossy().into_owned()]
    } else {
        Vec::new()
    };
    // The init reaches the run directory through a descriptor (see `identity::enter`), not by its host path: the
    // guest's root may not traverse the directories above it (a project under /root, mode 700).
    let in_run_dir = |name: &str| format!("/proc/self/fd/{RUN_DIR_FD}/{name}");
    let in_scratch = |name: &str| in_run_dir(&format!("{SCRATCH}/{name}"));
    Ok(InitConfig {
        argv: s.command.clone(),
        env: s.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        cwd: s.cwd.clone(),
        scratch: in_run_dir(SCRATCH),
        root: in_scratch("root"),
        layer: in_scratch("layer"),
        disk_bytes: s.disk_bytes,
        disk_inodes: s.disk_inodes,
        hide,
        binds: s.binds.clone(),
        etc: etc_files.iter().map(|(n, c)| (n.to_string(), c.clone())).collect(),
        hostname: s.hostname.clone(),
        domainname: s.domainname.clone(),
        umask: crate::settings::umask_of(s)?,
        no_aslr: !s.aslr,
        rlimits: crate::settings::rlimits_for_init(&s.rlimits)?,
        cpus: s.cpu_affinity.clone(),
        user_namespace: true,
        trees: trees.iter().map(|(r, _)| *r).collect(),
        stage: in_scratch("stage"),
        determinism: s.supervised.then_some(crate::init::DetSettings {
            seed: s.seed,
            epoch_unix_secs: s.epoch.unix,
            clock_step_ns: s.clock_step_ns,
            hostname: s.hostname.clone(),
            dir_order: s.dir_order,
            cpus: s.cpus,
            record_access: extras.record_access,
            access_stream: extras.access_stream.as_ref().map(|p| p.to_string_lossy().into_owned()),
            stuck_after_ms: s.stuck_after_ms,
            spin_limit_ms: s.spin_limit_ms,
            sched: s.sched,
            sched_script: s.sched_script.clone(),
            sched_log: s.sched_log,
            rdrand_clean: rdrand_clean.to_vec(),
        }),
        root_source: extras.root_source.as_ref().map(|p| p.to_string_lossy().into_owned()),
        root_times: extras.root_times,
        host_network: extras.host_network,
        tapes: extras.tapes.clone(),
        exec_hint: req.exec_hint.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{test_options as opts, RunOptions, UMASK};
    use repro_model::DirOrder;

    #[test]
    fn the_init_config_follows_the_settings() {
        let mut req = RunRequest::prepare(&RunOptions { dir_order: Some("reversed".into()), ..opts() }).unwrap();
        req.state_dir = PathBuf::from(&req.settings.cwd).join(".repro");
        let extras = RunExtras { record_access: true, host_network: true, ..Default::default() };
        let trees = [(TreeRole::Cwd, PathBuf::from(&req.settings.cwd))];
        let cfg = init_config(&req, &extras, &trees, &etc_files("box"), &[]).unwrap();
        let det = cfg.determinism.as_ref().unwrap();
        assert_eq!((det.dir_order, det.record_access, det.seed), (DirOrder::Reversed, true, 0));
        assert_eq!((cfg.umask, cfg.no_aslr, cfg.host_network), (UMASK, true, true));
        assert_eq!(cfg.trees, [TreeRole::Cwd]);
        // The state directory inside the working directory is hidden from the guest.
        assert_eq!(cfg.hide, [req.state_dir.to_string_lossy().into_owned()]);
        assert!(cfg.root.starts_with(&format!("/proc/self/fd/{RUN_DIR_FD}/")));
        assert_eq!(cfg.etc.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["hostname", "hosts", "resolv.conf"]);
        req.settings.supervised = false;
        assert!(init_config(&req, &extras, &[], &[], &[]).unwrap().determinism.is_none());
        req.settings.rlimits.push(repro_model::run::Rlimit { resource: "cpu".into(), soft: 1, hard: 1 });
        assert!(init_config(&req, &extras, &[], &[], &[]).is_err());
    }
}
