//! Walking paths inside the root being built without following links out of it.

use super::error::InitError;
use std::fs;
use std::path::{Path, PathBuf};

/// Before the pivot an absolute symbolic link inside the root being built names a host path: a guest path that
/// goes through one (say `/var/run -> /run`) would make the init create or mount on the host's side. Refuses
/// `path` unless its deepest existing ancestor, links resolved, lies inside `root`.
pub(super) fn stays_inside(root: &str, path: &str, what: &str) -> Result<(), InitError> {
    use std::ffi::OsString;
    let root = root.trim_end_matches('/');
    let leaves = || {
        InitError::Refused(format!(
            "{what} goes through a symbolic link that leaves the sandbox's root; give it without links"
        ))
    };
    let rel =
        path.strip_prefix(root).ok_or_else(|| InitError::Refused(format!("{what}: {path} is not under {root}")))?;
    // Walked by hand rather than canonicalized: `root` may be reached through the run directory's descriptor
    // (/proc/self/fd/N/...), whose host ancestors the guest's root may not search.
    let mut pending: std::collections::VecDeque<OsString> =
        Path::new(rel).components().filter_map(|c| component_name(&c)).collect();
    let mut inside: Vec<OsString> = Vec::new();
    let mut links = 0;
    while let Some(c) = pending.pop_front() {
        if c == ".." {
            inside.pop().ok_or_else(leaves)?;
            continue;
        }
        inside.push(c);
        let here = inside.iter().fold(PathBuf::from(root), |p, c| p.join(c));
        match fs::symlink_metadata(&here) {
            // What does not exist yet is created below a checked parent, without following anything.
            Err(_) => return Ok(()),
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > 40 {
                    return Err(InitError::Refused(format!("{what} goes through too many symbolic links ({path})")));
                }
                let target = fs::read_link(&here).map_err(|x| InitError::io("readlink", here.display(), x))?;
                // Before the pivot an absolute link names a host path.
                if target.is_absolute() {
                    return Err(leaves());
                }
                // A dangling link: what it names does not exist yet, and creating it would follow the link.
                if fs::metadata(&here).is_err() {
                    return Err(InitError::Refused(format!("{what} goes through a dangling symbolic link ({path})")));
                }
                inside.pop();
                for c in target.components().rev().filter_map(|c| component_name(&c)) {
                    pending.push_front(c);
                }
            }
            Ok(_) => {}
        }
    }
    Ok(())
}

/// A path component as a name to walk (`..` kept as such; `.` and the root dropped).
fn component_name(c: &std::path::Component<'_>) -> Option<std::ffi::OsString> {
    match c {
        std::path::Component::Normal(n) => Some(n.to_os_string()),
        std::path::Component::ParentDir => Some("..".into()),
        _ => None,
    }
}

/// The host path of a path given through a descriptor (`/proc/self/fd/N/rest`): what /proc/self/mountinfo shows.
pub(super) fn host_path(p: &str) -> String {
    if let Some(rest) = p.strip_prefix("/proc/self/fd/") {
        let (n, tail) = rest.split_once('/').unwrap_or((rest, ""));
        if let Ok(dir) = fs::read_link(format!("/proc/self/fd/{n}")) {
            let dir = dir.to_string_lossy().into_owned();
            return if tail.is_empty() { dir } else { format!("{}/{tail}", dir.trim_end_matches('/')) };
        }
    }
    p.to_string()
}

/// `host` (a path inside the tree at `host_path(r)`) as a path through `r`.
pub(super) fn through(r: &str, host: &str) -> String {
    let hr = host_path(r);
    match host.strip_prefix(hr.trim_end_matches('/')) {
        Some(rest) => format!("{}{rest}", r.trim_end_matches('/')),
        None => host.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_through_outward_links_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        fs::create_dir_all(root.join("var/lib")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("var/run")).unwrap();
        std::os::unix::fs::symlink("lib", root.join("var/rel")).unwrap();
        std::os::unix::fs::symlink("missing-target", root.join("dangling")).unwrap();
        std::os::unix::fs::symlink("/nonexistent-repro-target", root.join("absolute")).unwrap();
        std::os::unix::fs::symlink("../../..", root.join("var/up")).unwrap();
        let r = root.to_string_lossy();
        assert!(stays_inside(&r, &format!("{r}/var/lib/new/deeper"), "x").is_ok());
        assert!(stays_inside(&r, &format!("{r}/var/rel/new"), "x").is_ok());
        assert!(stays_inside(&r, &format!("{r}/var/run/x"), "x")
            .unwrap_err()
            .to_string()
            .contains("leaves the sandbox's root"));
        assert!(stays_inside(&r, &format!("{r}/dangling/x"), "x").unwrap_err().to_string().contains("dangling"));
        assert!(stays_inside(&r, &format!("{r}/absolute/x"), "x")
            .unwrap_err()
            .to_string()
            .contains("leaves the sandbox's root"));
        assert!(stays_inside(&r, &format!("{r}/var/up/x"), "x")
            .unwrap_err()
            .to_string()
            .contains("leaves the sandbox's root"));
        // Through a descriptor of the root's parent, as the init reaches the run directory.
        let dir = fs::File::open(d.path()).unwrap();
        let via = format!("/proc/self/fd/{}/root", std::os::fd::AsRawFd::as_raw_fd(&dir));
        assert_eq!(host_path(&via), r);
        assert!(stays_inside(&via, &format!("{via}/var/run/x"), "x").is_err());
        assert!(stays_inside(&via, &format!("{via}/var/rel/new"), "x").is_ok());
        assert_eq!(through(&via, &format!("{r}/var/lib")), format!("{via}/var/lib"));
    }
}
