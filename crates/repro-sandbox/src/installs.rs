//! Version managers' install trees reached by path (a symlink chain, a `#!` line, a venv's base, a shim): the
//! one installed version is shown to the guest, not the manager's whole directory. See `toolchain` for the
//! managers that need more (rustup's homes, pyenv's shims, an activated venv, nvm, Go).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use repro_model::run::Toolchain;

use crate::toolchain::Host;

/// An install tree: the manager's name, its root variable and default under HOME, and how many directory levels
/// under the root make one installed version (0: the root itself is the installation).
struct Tree {
    name: &'static str,
    var: Option<&'static str>,
    default: &'static str,
    depth: usize,
}

const TREES: [Tree; 12] = [
    Tree { name: "pyenv", var: Some("PYENV_ROOT"), default: ".pyenv", depth: 2 },
    Tree { name: "rustup", var: Some("RUSTUP_HOME"), default: ".rustup", depth: 2 },
    Tree { name: "asdf", var: Some("ASDF_DATA_DIR"), default: ".asdf", depth: 0 },
    Tree { name: "mise", var: None, default: ".local/share/mise/installs", depth: 2 },
    Tree { name: "sdkman", var: Some("SDKMAN_DIR"), default: ".sdkman", depth: 0 },
    Tree { name: "uv", var: None, default: ".local/share/uv/python", depth: 1 },
    Tree { name: "pipx", var: None, default: ".local/share/pipx/venvs", depth: 1 },
    Tree { name: "volta", var: Some("VOLTA_HOME"), default: ".volta", depth: 0 },
    Tree { name: "conda", var: None, default: "miniconda3", depth: 0 },
    Tree { name: "conda", var: None, default: "anaconda3", depth: 0 },
    Tree { name: "conda", var: None, default: "miniforge3", depth: 0 },
    Tree { name: "conda", var: None, default: ".conda", depth: 0 },
];

/// The installed version `found` lies in, when it lies in a known install tree. pyenv's and rustup's trees take
/// two levels (`versions/3.11.7`, `toolchains/stable-x86_64-unknown-linux-gnu`) and only those subtrees.
pub fn installed(found: &Path, host: &Host, guest_path: &str) -> Option<Toolchain> {
    TREES.iter().find_map(|t| {
        let root = match t.var.and_then(|v| host.var_opt(v)) {
            Some(r) => PathBuf::from(r),
            None => PathBuf::from(host.var_opt("HOME")?).join(t.default),
        };
        let rest = found.strip_prefix(&root).ok()?;
        let parts: Vec<_> = rest.components().collect();
        let first = parts.first().map(|c| c.as_os_str().to_string_lossy().into_owned());
        let wanted_first = match t.name {
            "pyenv" => Some("versions"),
            "rustup" => Some("toolchains"),
            _ => None,
        };
        if wanted_first.is_some() && first.as_deref() != wanted_first {
            return None;
        }
        // A version directory and something in it.
        if parts.len() <= t.depth {
            return None;
        }
        let prefix = parts[..t.depth].iter().fold(root.clone(), |p, c| p.join(c));
        let reason =
            format!("{} is in {} installed by {} ({})", found.display(), prefix.display(), t.name, root.display());
        let paths = vec![std::fs::canonicalize(&prefix).unwrap_or(prefix)];
        Some(crate::toolchain::toolchain(t.name, found, paths, None, guest_path, BTreeMap::new(), reason))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(found: &Path, vars: &[(&str, String)]) -> Option<Toolchain> {
        let lookup = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        installed(found, &Host { var: &lookup, cwd: Path::new("/w") }, "/usr/bin")
    }

    #[test]
    fn one_installed_version_is_shown() {
        let home = [("HOME", "/h".to_string())];
        let t = at(Path::new("/h/.pyenv/versions/3.11.7/bin/python3.11"), &home).unwrap();
        assert_eq!(
            (t.name.as_str(), t.paths.as_slice()),
            ("pyenv", ["/h/.pyenv/versions/3.11.7".to_string()].as_slice())
        );
        assert!(t.reason.contains("installed by pyenv"), "{}", t.reason);
        assert!(!t.variables.contains_key("PATH"));
        let t = at(Path::new("/h/.local/share/mise/installs/node/20.1.0/bin/node"), &home).unwrap();
        assert_eq!(t.paths, ["/h/.local/share/mise/installs/node/20.1.0"]);
        let t = at(Path::new("/h/.rustup/toolchains/stable-x/bin/cargo"), &home).unwrap();
        assert_eq!(t.paths, ["/h/.rustup/toolchains/stable-x"]);
        let t = at(Path::new("/opt/py/versions/3.12.1/bin/python3"), &[("PYENV_ROOT", "/opt/py".into())]).unwrap();
        assert_eq!(t.paths, ["/opt/py/versions/3.12.1"]);
        // pyenv's own scripts, the manager's root itself, elsewhere: not an installed version.
        assert!(at(Path::new("/h/.pyenv/bin/pyenv"), &home).is_none());
        assert!(at(Path::new("/h/.pyenv/versions"), &home).is_none());
        assert!(at(Path::new("/h/.ssh/id_rsa"), &home).is_none());
        assert!(at(Path::new("/usr/bin/python3"), &home).is_none());
    }
}
