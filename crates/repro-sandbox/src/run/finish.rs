//! The last stages of `repro run`: the sandbox torn down in a thread, beside the collection of the guest's
//! changes from its writable layer into the run directory.

use std::fs;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;

use repro_model::run::{Changes, RunSettings};
use repro_sys::ns;

use super::start::{Cleanup, Sandbox};
use super::{spawn_beside, RunExtras};
use crate::reaper;
use crate::rundir::RunDir;
use crate::SandboxError;

/// What [`tear_down`] gives.
pub(super) struct TornDown {
    /// The warning when the pids limit refused a fork.
    pub pids_refused: Option<String>,
    /// Receives once the cgroup and the scratch are gone (or is closed if the thread could not start).
    pub teardown: Receiver<()>,
}

/// Takes the sandbox whose init is done or gone, its cleanup and the init's exit (`Err`: not reaped yet); reads
/// whether the pids limit was reached, then starts the teardown thread: the init's exit waited for, the cgroup
/// emptied and removed, the scratch removed, the reaper let go. Gives the receiver of its end; an error (after
/// the teardown) when the cleanup process did not start.
pub(super) fn tear_down(
    s: &RunSettings,
    exe: &Path,
    sandbox: &Sandbox,
    cleanup: Cleanup,
    init_exit: &Result<ns::ChildExit, ()>,
    warnings: &mut Vec<String>,
) -> Result<TornDown, SandboxError> {
    let (init_pid, cgroup) = (sandbox.init_pid, &sandbox.cgroup);
    let Cleanup { scratch, reaper, reaper_error, reaper_pipe } = cleanup;
    repro_sys::startup::mark("run: output saved, result read");
    // Tear down, in a thread beside the collection of the changes and the writing of the run directory (the run
    // returns once it is done): nothing of the guest is left once its PID 1 has exited; the cgroup goes, then the
    // scratch; then the reaper is let go (it finds nothing left: its status says nothing about the run, and what
    // it leaves `repro gc` removes) and reaped by the thread. Without the thread the reaper does all of it.
    // Read before the cgroup goes: nothing of the guest is left to fork.
    let pids_refused = cgroup.as_ref().and_then(|c| c.pids_reached(s.pids_max));
    // Said on stderr with the other warnings, and kept in the record.
    warnings.extend(pids_refused.clone());
    let run_cgroup = cgroup.clone();
    // The run waits for the cleanup, not for the reaper's exit.
    let (torn_down, teardown) = std::sync::mpsc::channel::<()>();
    let init_reaped = init_exit.is_ok();
    let _ = spawn_beside("repro-teardown", move || {
        // The scratch directory is empty on the host (the init's tmpfs on it lives in the init's mount namespace,
        // which may still be going: a mount point of another namespace can be removed); removed while the init
        // exits.
        let scratch_left = fs::remove_dir(&scratch).is_err();
        if !init_reaped {
            // The init said it was done: its exit empties the cgroup.
            let _ = ns::wait_child(init_pid, false);
            repro_sys::startup::mark("run: the init's exit (its namespaces' teardown) waited for");
        }
        if let Some(cg) = &run_cgroup {
            cg.kill_all(std::time::Duration::from_secs(5));
            // The reaper, let go below, removes it if this fails (a process not gone yet).
            let _ = cg.remove();
            let _ = cg.remove_pids();
            repro_sys::startup::mark("run: cgroup removed");
        }
        if scratch_left {
            reaper::remove_tree(&scratch);
        }
        drop(reaper_pipe);
        repro_sys::startup::mark("run: torn down (cgroup, scratch)");
        let _ = torn_down.send(());
        if let Some(mut r) = reaper {
            let _ = r.wait();
        }
    });
    if let Some(e) = reaper_error {
        // Returns when the cleanup is done, or at once if the thread could not start.
        let _ = teardown.recv();
        return Err(SandboxError::io("cannot start the cleanup process", exe, e));
    }
    Ok(TornDown { pids_refused, teardown })
}

/// Takes the socket on which the init sent its writable layer; copies what the guest changed into the run
/// directory's `changes/` (and back to the working directory with `--keep-changes`) and writes `changes.json`.
/// Gives the changes and whether the `--disk` limit was reached (said in `warnings`).
pub(super) fn collect_changes(
    s: &RunSettings,
    extras: &RunExtras,
    dir: &RunDir,
    layer_sock: OwnedFd,
    warnings: &mut Vec<String>,
) -> Result<(Changes, bool), SandboxError> {
    let cwd = Path::new(&s.cwd);
    // What the guest changed: read from the writable layer through the descriptor the init sent, then copied
    // to the run directory; the layer itself goes with the descriptor.
    let changes_dir = dir.join("changes");
    let lower = match &extras.root_source {
        Some(r) => r.join(cwd.strip_prefix("/").unwrap_or(cwd)),
        None => cwd.to_path_buf(),
    };
    let layer_fd = ns::recv_fd_nonblocking(&layer_sock)?;
    drop(layer_sock);
    let mut disk_limit_reached = false;
    // Nothing the guest left is copied beyond what its layer could hold (a sparse file keeps its holes).
    let copy_limits = crate::changes::CopyLimits::for_layer(s.disk_bytes, s.disk_inodes);
    let mut changes = match &layer_fd {
        Some(fd) => {
            if let Ok(space) = ns::fs_space(fd.as_raw_fd()) {
                // tmpfs hands out whole pages: less than one page (or no inode) left means a write failed.
                if space.bytes_free < 4096 || space.inodes_free == 0 {
                    disk_limit_reached = true;
                    // Said on stderr with the other warnings, and kept in the record.
                    warnings.push(disk_limit_message(s.disk_bytes, s.disk_inodes, space));
                }
            }
            let upper = PathBuf::from(format!("/proc/self/fd/{}/upper", fd.as_raw_fd()));
            let mut changes = crate::changes::collect(&upper, &lower, &copy_limits)?;
            crate::changes::copy_tree(&upper, &changes_dir, &copy_limits, &mut changes)?;
            changes
        }
        None => {
            fs::create_dir(&changes_dir).map_err(|e| SandboxError::io("cannot create", &changes_dir, e))?;
            Default::default()
        }
    };
    drop(layer_fd);
    if s.keep_changes {
        crate::changes::apply(&mut changes, &changes_dir, cwd, &copy_limits)?;
    }
    // Said on stderr with the other warnings, and kept in the record.
    warnings.extend(crate::changes::skipped_warning(&changes));
    let mut cjson =
        serde_json::to_vec_pretty(&changes).map_err(|source| SandboxError::Encode { what: "changes.json", source })?;
    cjson.push(b'\n');
    dir.write_atomic("changes.json", &cjson)?;
    repro_sys::startup::mark("run: changes collected");
    Ok((changes, disk_limit_reached))
}

/// What a run that filled its writable layer is told.
fn disk_limit_message(bytes: u64, inodes: u64, space: ns::FsSpace) -> String {
    let what = if space.inodes_free == 0 { format!("its {inodes} inodes") } else { format!("{} MiB", bytes >> 20) };
    format!(
        "the --disk limit was reached: the guest's writable layer (working directory changes, /tmp, /home) is full \
         ({what}); writes failed with 'No space left on device'. Raise it with --disk SIZE"
    )
}
