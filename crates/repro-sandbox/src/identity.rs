//! Who the guest is on the host: the id maps of its user namespace, and entering it ([`enter`]: the init's maps
//! written, the idmapped trees passed to it).
//!
//! The guest always runs in a user namespace. As root, guest ids 0..65535 map to a range of host ids that no
//! host account uses (root's range in `/etc/subuid` and `/etc/subgid` when they hold one of at least 65536 ids,
//! else [`DEFAULT_HOST_BASE`]); the working directory is then idmapped so that it looks to the guest as it does
//! on the host. An unprivileged caller gets a single-id map: guest 0 is the caller.

use std::fs;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use repro_model::init::TreeRole;
use repro_model::run::{IdRange, Identity};
use repro_sys::ns;

use crate::SandboxError;

/// Ids a root caller maps into the guest: 0..65535, what distributions reserve for one container.
pub const RANGE: u32 = 65536;
/// The host range used when `/etc/subuid`/`/etc/subgid` hold none for root: far above any account's id.
pub const DEFAULT_HOST_BASE: u32 = 0x7000_0000;

/// The identity of a guest started by the caller with ids `(uid, gid)`.
pub fn for_caller(uid: u32, gid: u32) -> Identity {
    if uid != 0 {
        let one = |id| IdRange { inside: 0, outside: id, count: 1 };
        return Identity { uid_map: one(uid), gid_map: one(gid), source: "caller".into(), idmapped_mounts: false };
    }
    // No /etc/subuid or /etc/subgid (or unreadable): the default range is used, and `source` says so.
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let uids = root_range(&read("/etc/subuid"));
    let gids = root_range(&read("/etc/subgid"));
    let range = |found: Option<u32>| IdRange { inside: 0, outside: found.unwrap_or(DEFAULT_HOST_BASE), count: RANGE };
    let source = match (uids, gids) {
        (Some(_), Some(_)) => "/etc/subuid, /etc/subgid",
        (Some(_), None) => "/etc/subuid, default gid range",
        (None, Some(_)) => "default uid range, /etc/subgid",
        (None, None) => "default",
    };
    Identity { uid_map: range(uids), gid_map: range(gids), source: source.into(), idmapped_mounts: true }
}

/// The identity of a guest started by this process.
pub fn current() -> Identity {
    for_caller(repro_sys::ns::getuid(), repro_sys::ns::getgid())
}

/// The first range of root (`root` or `0`) in a subuid/subgid file that holds at least [`RANGE`] ids and does
/// not overlap the low ids of real accounts (start above 0, no overflow).
pub fn root_range(content: &str) -> Option<u32> {
    content.lines().find_map(|l| {
        let mut f = l.trim().split(':');
        let (name, start, count) = (f.next()?, f.next()?, f.next()?);
        if name != "root" && name != "0" {
            return None;
        }
        let (start, count) = (start.trim().parse::<u32>().ok()?, count.trim().parse::<u32>().ok()?);
        (start > 0 && count >= RANGE && start.checked_add(RANGE).is_some()).then_some(start)
    })
}

/// The lines written to `/proc/<pid>/uid_map` and `gid_map`.
pub fn map_line(r: &IdRange) -> String {
    format!("{} {} {}", r.inside, r.outside, r.count)
}

/// The host id of the guest's root.
pub fn host_root(i: &Identity) -> (u32, u32) {
    (i.uid_map.outside, i.gid_map.outside)
}

/// An error of [`enter`]: `what` failed for init `pid`.
fn failed<E: Into<Box<dyn std::error::Error + Send + Sync>>>(pid: i32, what: String) -> impl FnOnce(E) -> SandboxError {
    move |e| SandboxError::Identity { pid, what, source: e.into() }
}

/// Writes the id maps of the init's user namespace and sends the init, on `tx`, the run directory and the idmapped
/// trees (`trees`, made with that namespace). A working directory (or pack root) on a filesystem that cannot be
/// idmapped (overlayfs, as in a Docker container) is used as it is: the guest is still not host root, but host
/// root's files there look like `nobody`'s to it; the warning returned says so. A `:rw` bind that cannot be
/// idmapped fails the setup.
pub(crate) fn enter(
    pid: i32,
    run_dir: &Path,
    identity: &Identity,
    trees: &[(TreeRole, PathBuf)],
    binds: &[repro_model::run::BindMount],
    tx: &OwnedFd,
) -> Result<Option<String>, SandboxError> {
    let writable = |i: usize| binds.get(i).is_some_and(|b| b.writable);
    let mut maps = vec![("uid_map", map_line(&identity.uid_map)), ("gid_map", map_line(&identity.gid_map))];
    if identity.uid_map.count == 1 {
        // Without privileges a gid map is only accepted once setgroups is denied.
        maps.insert(0, ("setgroups", "deny".to_string()));
    }
    for (file, content) in maps {
        let p = format!("/proc/{pid}/{file}");
        ns::write_file(&p, &content).map_err(failed(pid, format!("cannot write '{content}' to {p}")))?;
    }
    // First the run directory, opened through the init's root so that the descriptor is in its mount namespace.
    let p = format!("/proc/{pid}/root{}", run_dir.display());
    let mut held = vec![OwnedFd::from(fs::File::open(&p).map_err(failed(pid, format!("cannot open {p}")))?)];
    let mut tags = Vec::new();
    let mut warning = None;
    if !trees.is_empty() {
        let p = format!("/proc/{pid}/ns/user");
        let userns = fs::File::open(&p).map_err(failed(pid, format!("cannot open {p}")))?;
        let userns = OwnedFd::from(userns);
        for (role, path) in trees {
            let what = match role {
                TreeRole::Cwd => "the working directory",
                TreeRole::RootSource => "the pack's root",
                TreeRole::Bind(_) => "--bind",
            };
            match repro_sys::idmap::idmapped_tree(&path.to_string_lossy(), &userns) {
                Ok(tree) => {
                    held.push(tree);
                    tags.push(1);
                }
                // A read-only bind that cannot be idmapped is passed as a plain copy of its mount.
                Err(_) if matches!(role, TreeRole::Bind(i) if !writable(*i)) => {
                    let tree = repro_sys::idmap::cloned_tree(&path.to_string_lossy())
                        .map_err(failed(pid, format!("--bind {}", path.display())))?;
                    held.push(tree);
                    tags.push(1);
                }
                // So is a working directory (or pack root) that cannot be: see the warning.
                Err(e) if !matches!(role, TreeRole::Bind(_)) => {
                    warning = Some(format!(
                        "{what} {} cannot be idmapped ({e}): in the guest, host root's files there belong to \
                         nobody and cannot be changed in place",
                        path.display()
                    ));
                    let tree = repro_sys::idmap::cloned_tree(&path.to_string_lossy())
                        .map_err(failed(pid, format!("{what} {}", path.display())))?;
                    held.push(tree);
                    tags.push(1);
                }
                Err(e) => return Err(SandboxError::Idmap { pid, what, path: path.clone(), source: e }),
            }
        }
    }
    let raw: Vec<_> = held.iter().map(|f| f.as_raw_fd()).collect();
    repro_sys::idmap::send_fds(tx, &tags, &raw)
        .map_err(failed(pid, "cannot pass the idmapped mounts to the init".into()))?;
    Ok(warning)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_ranges_come_from_subuid_when_big_enough() {
        assert_eq!(root_range("alice:100000:65536\nroot:200000:65536\n"), Some(200000));
        assert_eq!(root_range("0:300000:100000"), Some(300000));
        assert_eq!(root_range("root:200000:1000\n"), None, "too small");
        assert_eq!(root_range("root:0:65536\n"), None, "would map guest root to host root");
        assert_eq!(root_range("root:4294967000:65536\n"), None, "overflows");
        assert_eq!(root_range("root:x:y\nbroken\n\n"), None);
        assert_eq!(root_range(""), None);
    }

    #[test]
    fn unprivileged_callers_map_one_id() {
        let i = for_caller(1000, 1001);
        assert_eq!(map_line(&i.uid_map), "0 1000 1");
        assert_eq!(map_line(&i.gid_map), "0 1001 1");
        assert!(!i.idmapped_mounts);
    }

    #[test]
    fn root_maps_a_range_that_is_not_host_root() {
        let i = for_caller(0, 0);
        assert_eq!(i.uid_map.count, RANGE);
        assert!(i.uid_map.outside > 0 && i.gid_map.outside > 0);
        assert!(i.idmapped_mounts);
    }
}
