//! Mount points below host directories the guest cannot search: a working directory in a 0700 `mktemp -d`
//! under /var/tmp, a `--bind` target in a runner's private work directory.

use super::error::InitError;
use std::fs;
use std::path::Path;

use repro_sys::ns::{self, mflags};

use super::root::under;

/// For each mount point (`(guest path, is a file)`, in the root `r` being built, still writable), the first
/// ancestor that is a directory the init cannot search (mode 0700, 0750... of an owner or group outside the
/// guest's user namespace) is covered by a small tmpfs of the guest's root (mode 0755) holding only the chain of
/// directories down to the mount point (and an empty file for a file's mount point). So the mount point is
/// reachable whatever the host's modes, and nothing else the host directory holds is visible: its other entries
/// lie under the cover. The tmpfs becomes read-only with the root. Ancestors that do not exist yet, or that are
/// symbolic links, are left to the later checks ([`super::paths::stays_inside`]) and creation.
pub(super) fn cover_closed_ancestors(r: &str, points: &[(&str, bool)]) -> Result<(), InitError> {
    for (p, is_file) in points {
        let names: Vec<&str> = p.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
        if names.contains(&"..") {
            // Refused with a clear message by stays_inside later.
            continue;
        }
        // The ancestors, shallowest first (the top level is populate_root's).
        for depth in 2..names.len() {
            let ancestor = under(r, &names[..depth].join("/"));
            let Ok(meta) = fs::symlink_metadata(&ancestor) else { break };
            if !meta.is_dir() {
                break;
            }
            if searchable(&ancestor) {
                continue;
            }
            ns::mount(
                "tmpfs",
                &ancestor,
                "tmpfs",
                mflags::NOSUID | mflags::NODEV,
                Some("mode=755,size=64k,nr_inodes=256"),
            )
            .map_err(|x| InitError::from(x).within(format!("covering {}, which the guest cannot search", ancestor)))?;
            make_chain(&ancestor, &names[depth..], *is_file)?;
            break;
        }
    }
    Ok(())
}

/// Whether the init (the guest's root) may search the directory `dir`.
fn searchable(dir: &str) -> bool {
    nix::unistd::access(Path::new(dir), nix::unistd::AccessFlags::X_OK).is_ok()
}

/// Creates below `base` the directories `names` (0755, whatever the umask), the last one an empty file if
/// `is_file`.
fn make_chain(base: &str, names: &[&str], is_file: bool) -> Result<(), InitError> {
    use std::os::unix::fs::PermissionsExt;
    let mut here = base.to_string();
    for (i, name) in names.iter().enumerate() {
        here = format!("{here}/{name}");
        if is_file && i + 1 == names.len() {
            fs::write(&here, b"").map_err(|x| InitError::io("create", &here, x))?;
        } else {
            fs::create_dir(&here).map_err(|x| InitError::io("mkdir", &here, x))?;
            fs::set_permissions(&here, fs::Permissions::from_mode(0o755))
                .map_err(|x| InitError::io("chmod", &here, x))?;
        }
    }
    Ok(())
}
