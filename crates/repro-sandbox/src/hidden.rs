//! A hint for host paths the sandbox hid: when a guest that failed says it could not execute or read a path under
//! a directory closed to it (`/root`, `/home`, `/tmp`, `/run`), or a program name the host's PATH finds in one,
//! repro says once per directory what hid it and the bind that shows it. Read from the guest's saved stderr (the
//! messages of shells, `env`, interpreters), the supervisor's view of failed opens not being recorded on every run.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use repro_model::run::RunSettings;

use crate::toolchain::{guest_sees, which};

/// What repro reads of the guest's stderr: its last bytes.
const TAIL: usize = 64 * 1024;

/// The hints for a failed run whose guest wrote `stderr`: at most one per directory, at most 4.
pub fn hints(stderr: &[u8], settings: &RunSettings, host_path: Option<&str>) -> Vec<String> {
    let text = String::from_utf8_lossy(&stderr[stderr.len().saturating_sub(TAIL)..]).into_owned();
    let cwd = Path::new(&settings.cwd);
    let bound = |p: &Path| settings.binds.iter().any(|b| p.starts_with(&b.guest));
    let mut dirs: BTreeSet<PathBuf> = BTreeSet::new();
    let failed = ["Permission denied", "No such file or directory", "not found"];
    for line in text.lines().filter(|l| failed.iter().any(|f| l.contains(f))) {
        for w in line.split(|c: char| c.is_whitespace() || "'\"`:,()".contains(c)).filter(|w| !w.is_empty()) {
            let host = if w.starts_with('/') {
                Some(PathBuf::from(w))
            } else if w.chars().all(|c| c.is_ascii_alphanumeric() || "_.+-".contains(c)) {
                host_path.and_then(|p| which(w, p))
            } else {
                None
            };
            let Some(host) = host.filter(|h| h.exists() && !guest_sees(h, cwd) && !bound(h)) else { continue };
            let dir = if host.is_dir() { host.clone() } else { host.parent().unwrap_or(Path::new("/")).to_path_buf() };
            if repro_model::secret_paths::secret_path(&dir).is_none() {
                dirs.insert(dir);
            }
        }
    }
    dirs.iter()
        .take(4)
        .map(|d| {
            let top = Path::new("/").join(d.components().nth(1).map(|c| c.as_os_str()).unwrap_or_default());
            let why = if top == Path::new("/root") {
                "root's private files are hidden".to_string()
            } else {
                format!("the guest has its own {}", top.display())
            };
            format!(
                "the guest could not read {}: {why}; --bind {} (or binds in repro.toml) shows it read-only",
                d.display(),
                show_root(d).display()
            )
        })
        .collect()
}

/// The directory to name in the hint: the install tree under a home (`/root/.pyenv` for
/// `/root/.pyenv/versions/3.11.7/bin`), else the directory.
fn show_root(d: &Path) -> PathBuf {
    let parts: Vec<_> = d.components().collect();
    let depth = match parts.get(1).map(|c| c.as_os_str().to_string_lossy().into_owned()).as_deref() {
        Some("root") => 3,
        Some("home") => 4,
        _ => parts.len(),
    };
    parts[..depth.min(parts.len())].iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(cwd: &str) -> RunSettings {
        let epoch = repro_model::run::Epoch {
            unix: repro_model::run::DEFAULT_EPOCH,
            rfc3339: "2025-01-01T00:00:00Z".into(),
            source: repro_model::run::EpochSource::Default,
        };
        RunSettings::defaults(vec!["true".into()], cwd.into(), epoch)
    }

    #[test]
    fn a_hidden_path_in_a_failure_gets_one_hint_per_directory() {
        let t = tempfile::tempdir().unwrap();
        let bin = t.path().join("tools/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("x"), "").unwrap();
        let msg = format!(
            "sh: 1: {0}/x: Permission denied\nsh: 1: {0}/x: Permission denied\nenv: 'x': No such file or directory\n",
            bin.display()
        );
        let path = bin.display().to_string();
        let h = hints(msg.as_bytes(), &settings("/w"), Some(&path));
        assert_eq!(h.len(), 1, "{h:?}");
        assert!(
            h[0].starts_with(&format!(
                "the guest could not read {}: the guest has its own /tmp; --bind",
                bin.display()
            )),
            "{h:?}"
        );
        // Seen by the guest (its working directory), or said in another message: nothing.
        assert!(hints(msg.as_bytes(), &settings(t.path().to_str().unwrap()), Some(&path)).is_empty());
        assert!(hints(format!("{}/x: ok", bin.display()).as_bytes(), &settings("/w"), None).is_empty());
        assert_eq!(show_root(Path::new("/root/.pyenv/versions/3.11.7/bin")), Path::new("/root/.pyenv"));
    }
}
