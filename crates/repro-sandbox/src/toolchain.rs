//! Toolchains found without flags: `repro run -- cargo test` with rustup, `pytest` from an activated virtualenv,
//! `python3` through a pyenv shim, `node` from nvm, `go` from /usr/local/go. The command is resolved on the host as
//! the caller's shell would (its PATH, its toolchain variables); when it belongs to a known toolchain, exactly
//! that toolchain's directories are bound read-only into the guest at the same paths, and the variables it needs
//! are set. Each becomes a [`Toolchain`] in the run record: what was passed and why. A command the host has but
//! the guest would not find gets a hint naming the flag that fixes it ([`Resolution::hint`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use repro_model::run::Toolchain;

/// Host directories the guest does not see: not part of its root (`/home`, `/tmp`, `/run` and the kernel's
/// trees are its own), or closed to it (`/root`: mode 700, owned by an id outside the guest's user namespace).
const HIDDEN: [&str; 7] = ["/root", "/home", "/tmp", "/run", "/proc", "/sys", "/dev"];

/// What the host says about the command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolution {
    /// Toolchains to pass to the guest (at most one today: the command's).
    pub toolchains: Vec<Toolchain>,
    /// For a command the guest would not find, where it is on the host and what makes it visible.
    pub hint: Option<String>,
}

/// The host as the resolver reads it: its variables, its working directory.
pub struct Host<'a> {
    pub var: &'a dyn Fn(&str) -> Option<String>,
    pub cwd: &'a Path,
}

impl Host<'_> {
    fn var(&self, name: &str) -> Option<String> {
        (self.var)(name).filter(|v| !v.is_empty())
    }

    /// A variable, unset when empty.
    pub fn var_opt(&self, name: &str) -> Option<String> {
        self.var(name)
    }

    /// `$NAME`, else `$HOME/default`.
    fn dir(&self, name: &str, default: &str) -> Option<PathBuf> {
        self.var(name).map(PathBuf::from).or_else(|| self.var("HOME").map(|h| Path::new(&h).join(default)))
    }
}

/// Whether the guest sees `p` at the same path (its working directory's overlay included).
pub fn guest_sees(p: &Path, cwd: &Path) -> bool {
    p.starts_with(cwd) || !HIDDEN.iter().any(|h| p.starts_with(h))
}

/// Resolves `cmd` on the host. `guest_path` is the PATH the guest will have without a toolchain.
pub fn resolve(cmd: &str, host: &Host, guest_path: &str) -> Resolution {
    // A path ending in `..` or `/` names no program: an empty name matches no pyenv shim.
    let name = Path::new(cmd).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if cmd.contains('/') {
        let p = crate::parse::normalize(&host.cwd.join(cmd));
        if is_executable(&p) {
            if let Some(t) = known(&name, &p, host, guest_path, true) {
                return Resolution { toolchains: vec![t], hint: None };
            }
        }
        let hint = (p.is_file() && !guest_sees(&p, host.cwd)).then(|| {
            let dir = p.parent().unwrap_or(Path::new("/"));
            format!(
                "it is {} on the host, which the guest does not see: add --bind {} or [run] binds in repro.toml",
                p.display(),
                bind_root(dir).display()
            )
        });
        return Resolution { toolchains: Vec::new(), hint };
    }
    let Some(found) = host.var("PATH").and_then(|path| which(cmd, &path)) else {
        return Resolution::default();
    };
    if let Some(t) = known(cmd, &found, host, guest_path, false) {
        return Resolution { toolchains: vec![t], hint: None };
    }
    let dir = found.parent().unwrap_or(Path::new("/"));
    let in_guest_path = guest_path.split(':').any(|d| Path::new(d) == dir);
    if in_guest_path && guest_sees(dir, host.cwd) {
        return Resolution::default();
    }
    let fix = if guest_sees(dir, host.cwd) {
        format!("add --env PATH={}:{guest_path} or [run] env in repro.toml, or give its full path", dir.display())
    } else {
        format!(
            "add --bind {} or [run] binds in repro.toml, and give its full path or --env PATH={}:{guest_path}",
            bind_root(dir).display(),
            dir.display()
        )
    };
    Resolution { toolchains: Vec::new(), hint: Some(format!("it is {} on the host: {fix}", found.display())) }
}

/// The toolchain the program `found` (named `name`) belongs to, if repro knows it and a bind can take its paths
/// (mount options are comma-separated: such a path gets the hint instead).
/// The program is looked at as named, then along its symlink chain (a venv's `bin/python` links into the
/// interpreter it was made from). A toolchain with a path that is, lies in or holds a secret path (repro-model's
/// `secret_paths`) is not shown. A virtualenv that is not activated counts only when the program is named by its
/// path (`venv/bin/python`); found on PATH, it gets the hint.
fn known(name: &str, found: &Path, host: &Host, guest_path: &str, by_path: bool) -> Option<Toolchain> {
    chain(found)
        .iter()
        .find_map(|f| {
            rustup(f, host, guest_path)
                .or_else(|| virtualenv(f, host, guest_path))
                .or_else(|| pyenv(name, f, host, guest_path))
                .or_else(|| by_path.then(|| venv_by_path(f, host, guest_path)).flatten())
                .or_else(|| nvm(f, host, guest_path))
                .or_else(|| go(f, host, guest_path))
                .or_else(|| crate::installs::installed(f, host, guest_path))
        })
        .filter(|t| t.paths.iter().all(|p| !p.contains(',') && showable(Path::new(p))))
}

/// Whether a toolchain's directory may be shown to the guest: not a secret path, not one holding a secret
/// (a home directory with `.ssh`), not a directory the guest's root hides whole (`/root`, `/home`).
pub fn showable(p: &Path) -> bool {
    use repro_model::secret_paths::{holds_secret, secret_path};
    let top = HIDDEN.iter().any(|h| p == Path::new(h)) || p.parent() == Some(Path::new("/home"));
    !top && p != Path::new("/") && secret_path(p).is_none() && holds_secret(p).is_none()
}

/// `p`, then each link of its symlink chain, then its canonical path (at most 40 links, as the kernel).
pub fn chain(p: &Path) -> Vec<PathBuf> {
    let mut out = vec![p.to_path_buf()];
    let mut cur = p.to_path_buf();
    while out.len() <= 40 {
        let Ok(target) = std::fs::read_link(&cur) else { break };
        cur = crate::parse::normalize(&cur.parent().unwrap_or(Path::new("/")).join(target));
        out.push(cur.clone());
    }
    if let Ok(c) = std::fs::canonicalize(p) {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// The directory to bind for a program in `dir`: its prefix when `dir` is a `bin` (`/opt/foo` for
/// `/opt/foo/bin`), else `dir`.
fn bind_root(dir: &Path) -> &Path {
    match (dir.file_name(), dir.parent()) {
        (Some(n), Some(parent)) if n == "bin" && parent != Path::new("/") && parent != Path::new("/usr") => parent,
        _ => dir,
    }
}

/// The first executable file named `cmd` in the directories of `path`.
pub fn which(cmd: &str, path: &str) -> Option<PathBuf> {
    path.split(':').filter(|d| d.starts_with('/')).map(|d| Path::new(d).join(cmd)).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    // What cannot be stat'ed is not a program the shell would run either.
    std::fs::metadata(p).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

fn text(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// `dir` with symlinks resolved when it can be (a bind follows them anyway; the record names the real one).
fn real(dir: &Path) -> PathBuf {
    std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())
}

/// A toolchain record; `bin` (when the host's PATH has it) goes first on the guest's PATH.
pub(crate) fn toolchain(
    name: &str,
    command: &Path,
    paths: Vec<PathBuf>,
    bin: Option<&Path>,
    guest_path: &str,
    mut variables: BTreeMap<String, String>,
    reason: String,
) -> Toolchain {
    if let Some(bin) = bin {
        variables.insert("PATH".into(), format!("{}:{guest_path}", bin.display()));
    }
    let mut paths: Vec<String> = paths.iter().map(|p| text(p)).collect();
    paths.dedup();
    Toolchain { name: name.into(), command: text(command), paths, variables, reason, home_paths: BTreeMap::new() }
}

/// rustup's proxies in `$CARGO_HOME/bin` (default `~/.cargo/bin`): CARGO_HOME and RUSTUP_HOME (default
/// `~/.rustup`) are bound and set.
fn rustup(found: &Path, host: &Host, guest_path: &str) -> Option<Toolchain> {
    let cargo_home = host.dir("CARGO_HOME", ".cargo")?;
    let bin = cargo_home.join("bin");
    if found.parent() != Some(bin.as_path()) {
        return None;
    }
    let rustup_home = host.dir("RUSTUP_HOME", ".rustup")?;
    let mut vars = BTreeMap::from([
        ("CARGO_HOME".to_string(), text(&cargo_home)),
        ("RUSTUP_HOME".to_string(), text(&rustup_home)),
    ]);
    for name in ["RUSTUP_TOOLCHAIN", "RUSTUP_AUTO_INSTALL"] {
        if let Some(v) = host.var(name) {
            vars.insert(name.into(), v);
        }
    }
    let mut paths = vec![real(&cargo_home)];
    if rustup_home.is_dir() {
        paths.push(real(&rustup_home));
    }
    let reason = format!(
        "{} is in CARGO_HOME/bin ({}): rustup's toolchains in RUSTUP_HOME ({})",
        found.display(),
        cargo_home.display(),
        rustup_home.display()
    );
    Some(toolchain("rustup", found, paths, Some(&bin), guest_path, vars, reason))
}

/// The prefix of the interpreter a virtual environment was made from (`home` in its pyvenv.cfg is its `bin`),
/// when the guest would not see it.
fn venv_base(venv: &Path, cwd: &Path) -> Option<PathBuf> {
    // No readable pyvenv.cfg: no base interpreter to add (the guest then runs what the venv links to, or says not
    // found).
    let cfg = std::fs::read_to_string(venv.join("pyvenv.cfg")).ok()?;
    let home = cfg.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == "home").then(|| PathBuf::from(v.trim()))
    })?;
    let home = real(&home);
    let prefix = if home.file_name().is_some_and(|n| n == "bin") { home.parent()?.to_path_buf() } else { home };
    (!guest_sees(&prefix, cwd)).then_some(prefix)
}

/// An activated virtual environment (`VIRTUAL_ENV`, its `bin` first on PATH).
fn virtualenv(found: &Path, host: &Host, guest_path: &str) -> Option<Toolchain> {
    let venv = PathBuf::from(host.var("VIRTUAL_ENV")?);
    let bin = venv.join("bin");
    if found.parent() != Some(bin.as_path()) {
        return None;
    }
    let mut paths = vec![real(&venv)];
    paths.extend(venv_base(&venv, host.cwd));
    let vars = BTreeMap::from([("VIRTUAL_ENV".to_string(), text(&venv))]);
    let reason = format!("{} is in the activated virtualenv VIRTUAL_ENV={}", found.display(), venv.display());
    Some(toolchain("virtualenv", found, paths, Some(&bin), guest_path, vars, reason))
}

/// A program of a virtual environment named by its path, not activated (`venv/bin/python -m pytest`, as tox, nox,
/// IDEs and CI call it): the environment and the interpreter it was made from (its pyvenv.cfg `home`). PATH and
/// VIRTUAL_ENV stay as the host has them.
fn venv_by_path(found: &Path, host: &Host, guest_path: &str) -> Option<Toolchain> {
    let bin = found.parent()?;
    let venv = bin.parent()?;
    if bin.file_name()? != "bin" || !venv.join("pyvenv.cfg").is_file() {
        return None;
    }
    let base = venv_base(venv, host.cwd);
    if base.is_none() && guest_sees(venv, host.cwd) {
        return None;
    }
    let mut paths = vec![real(venv)];
    paths.extend(base.clone());
    let from = base.map(|b| format!(", made from {}", b.display())).unwrap_or_default();
    let reason = format!("{} is in the virtualenv {} (named by its path{from})", found.display(), venv.display());
    Some(toolchain("virtualenv", found, paths, None, guest_path, BTreeMap::new(), reason))
}

/// The pyenv version names in force for `cwd` and where they came from, as pyenv decides them: PYENV_VERSION,
/// else the nearest `.python-version`, else `$PYENV_ROOT/version`, else `system`.
pub fn pyenv_versions(root: &Path, host: &Host) -> (Vec<String>, String) {
    let words = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .flat_map(|l| l.split([' ', '\t', ':']))
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect()
    };
    if let Some(v) = host.var("PYENV_VERSION") {
        return (words(&v), "PYENV_VERSION".into());
    }
    for dir in host.cwd.ancestors() {
        let f = dir.join(".python-version");
        if let Ok(s) = std::fs::read_to_string(&f) {
            return (words(&s), f.display().to_string());
        }
    }
    let f = root.join("version");
    match std::fs::read_to_string(&f) {
        Ok(s) => (words(&s), f.display().to_string()),
        Err(_) => (vec!["system".into()], "no version file".into()),
    }
}

/// A pyenv shim (`$PYENV_ROOT/shims`, or a plugin's): resolved to the real interpreter of the version in force,
/// whose prefix is bound. A `system` version is the host's own, which the guest finds on its PATH as it is.
fn pyenv(cmd: &str, found: &Path, host: &Host, guest_path: &str) -> Option<Toolchain> {
    let root = host.dir("PYENV_ROOT", ".pyenv")?;
    let dir = found.parent()?;
    let is_shim = dir == root.join("shims")
        || (dir.file_name().is_some_and(|n| n == "shims") && dir.starts_with(root.join("plugins")));
    if !is_shim {
        return None;
    }
    let (versions, from) = pyenv_versions(&root, host);
    for v in &versions {
        if v == "system" {
            return None;
        }
        let prefix = root.join("versions").join(v);
        let program = prefix.join("bin").join(cmd);
        if !is_executable(&program) {
            continue;
        }
        let real_prefix = real(&prefix);
        let mut paths = vec![real_prefix.clone()];
        paths.extend(venv_base(&real_prefix, host.cwd));
        let bin = real_prefix.join("bin");
        let reason = format!(
            "{} is a pyenv shim (PYENV_ROOT={}): version {v} from {from} has {}",
            found.display(),
            root.display(),
            program.display()
        );
        return Some(toolchain("pyenv", &bin.join(cmd), paths, Some(&bin), guest_path, BTreeMap::new(), reason));
    }
    None
}

/// A node installed by nvm (`$NVM_DIR/versions/node/VERSION/bin`, default `~/.nvm`).
fn nvm(found: &Path, host: &Host, guest_path: &str) -> Option<Toolchain> {
    let nvm_dir = host.dir("NVM_DIR", ".nvm")?;
    let bin = found.parent()?;
    let prefix = bin.parent()?;
    if bin.file_name()? != "bin" || prefix.parent()? != nvm_dir.join("versions/node") {
        return None;
    }
    let reason = format!(
        "{} is node {} installed by nvm (NVM_DIR={})",
        found.display(),
        prefix.file_name()?.to_string_lossy(),
        nvm_dir.display()
    );
    Some(toolchain("nvm", found, vec![real(prefix)], Some(bin), guest_path, BTreeMap::new(), reason))
}

/// Go from GOROOT (default /usr/local/go): GOROOT set, its `bin` on PATH, the host's module cache bound when there
/// is one, and GOTOOLCHAIN=local (the guest has no network to fetch another toolchain with).
fn go(found: &Path, host: &Host, guest_path: &str) -> Option<Toolchain> {
    let goroot = host.var("GOROOT").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/usr/local/go"));
    let bin = goroot.join("bin");
    if found.parent() != Some(bin.as_path()) {
        return None;
    }
    let mut vars =
        BTreeMap::from([("GOROOT".to_string(), text(&goroot)), ("GOTOOLCHAIN".to_string(), "local".to_string())]);
    let mut paths = vec![real(&goroot)];
    let modcache = host
        .var("GOMODCACHE")
        .map(PathBuf::from)
        .or_else(|| host.dir("GOPATH", "go").map(|g| g.join("pkg/mod")))
        .filter(|m| m.is_dir());
    if let Some(m) = modcache {
        vars.insert("GOMODCACHE".into(), text(&m));
        paths.push(real(&m));
    }
    let reason = format!("{} is in GOROOT/bin (GOROOT={})", found.display(), goroot.display());
    Some(toolchain("go", found, paths, Some(&bin), guest_path, vars, reason))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const GUEST_PATH: &str = crate::env::PATH;

    fn exe(p: &Path) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn resolve_with(cmd: &str, vars: &[(&str, String)], cwd: &Path) -> Resolution {
        let lookup = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        resolve(cmd, &Host { var: &lookup, cwd }, GUEST_PATH)
    }

    #[test]
    fn rustup_binds_cargo_and_rustup_homes() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path();
        exe(&home.join(".cargo/bin/cargo"));
        std::fs::create_dir_all(home.join(".rustup/toolchains")).unwrap();
        let path = format!("{}/.cargo/bin:/usr/bin", home.display());
        let r = resolve_with("cargo", &[("HOME", text(home)), ("PATH", path)], Path::new("/w"));
        let t0 = &r.toolchains[0];
        assert_eq!(t0.name, "rustup");
        assert_eq!(t0.paths, [text(&real(&home.join(".cargo"))), text(&real(&home.join(".rustup")))]);
        assert_eq!(t0.variables["CARGO_HOME"], text(&home.join(".cargo")));
        assert_eq!(t0.variables["RUSTUP_HOME"], text(&home.join(".rustup")));
        assert_eq!(t0.variables["PATH"], format!("{}/.cargo/bin:{GUEST_PATH}", home.display()));
        assert!(t0.reason.contains("CARGO_HOME/bin"), "{}", t0.reason);
        assert_eq!(r.hint, None);
        // Named by its path, it is the same toolchain.
        let by_path = home.join(".cargo/bin/cargo");
        let r = resolve_with(by_path.to_str().unwrap(), &[("HOME", text(home))], Path::new("/w"));
        assert_eq!(r.toolchains[0].name, "rustup");
    }

    #[test]
    fn nvm_node_binds_its_version_only() {
        let t = tempfile::tempdir().unwrap();
        let nvm = t.path().join("nvm");
        exe(&nvm.join("versions/node/v20.1.0/bin/node"));
        exe(&nvm.join("versions/node/v18.0.0/bin/node"));
        let path = format!("{}/versions/node/v20.1.0/bin:/usr/bin", nvm.display());
        let r = resolve_with("node", &[("NVM_DIR", text(&nvm)), ("PATH", path)], Path::new("/w"));
        let t0 = &r.toolchains[0];
        assert_eq!(t0.name, "nvm");
        assert_eq!(t0.paths, [text(&real(&nvm.join("versions/node/v20.1.0")))]);
        assert!(t0.variables["PATH"].starts_with(&format!("{}/versions/node/v20.1.0/bin:", nvm.display())));
        assert!(t0.reason.contains("node v20.1.0"), "{}", t0.reason);
    }

    #[test]
    fn go_sets_goroot_and_the_module_cache() {
        let t = tempfile::tempdir().unwrap();
        let goroot = t.path().join("go-root");
        exe(&goroot.join("bin/go"));
        std::fs::create_dir_all(t.path().join("gopath/pkg/mod")).unwrap();
        let vars = [
            ("GOROOT", text(&goroot)),
            ("GOPATH", text(&t.path().join("gopath"))),
            ("PATH", format!("{}/bin:/usr/bin", goroot.display())),
        ];
        let r = resolve_with("go", &vars, Path::new("/w"));
        let t0 = &r.toolchains[0];
        assert_eq!(t0.name, "go");
        assert_eq!(t0.variables["GOROOT"], text(&goroot));
        assert_eq!(t0.variables["GOTOOLCHAIN"], "local");
        assert_eq!(t0.variables["GOMODCACHE"], text(&t.path().join("gopath/pkg/mod")));
        assert_eq!(t0.paths.len(), 2);
    }

    #[test]
    fn pyenv_shims_resolve_to_the_version_in_force() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("pyenv");
        exe(&root.join("shims/python3"));
        exe(&root.join("versions/3.11.7/bin/python3"));
        exe(&root.join("versions/3.12.1/bin/python3"));
        std::fs::write(root.join("version"), "3.11.7\n").unwrap();
        let project = t.path().join("proj");
        std::fs::create_dir_all(project.join("sub")).unwrap();
        let vars = || vec![("PYENV_ROOT", text(&root)), ("PATH", format!("{}/shims:/usr/bin", root.display()))];
        let r = resolve_with("python3", &vars(), &project.join("sub"));
        assert_eq!(r.toolchains[0].command, text(&real(&root.join("versions/3.11.7")).join("bin/python3")));
        assert!(r.toolchains[0].reason.contains("version 3.11.7 from"), "{}", r.toolchains[0].reason);
        // The nearest .python-version wins over the global one; PYENV_VERSION over both.
        std::fs::write(project.join(".python-version"), "# pinned\n3.12.1\n").unwrap();
        let r = resolve_with("python3", &vars(), &project.join("sub"));
        assert_eq!(r.toolchains[0].paths, [text(&real(&root.join("versions/3.12.1")))]);
        let mut v = vars();
        v.push(("PYENV_VERSION", "3.11.7".into()));
        let r = resolve_with("python3", &v, &project.join("sub"));
        assert!(r.toolchains[0].paths[0].ends_with("3.11.7"));
        // `system`: the host's own interpreter, no toolchain.
        let mut v = vars();
        v.push(("PYENV_VERSION", "system".into()));
        assert!(resolve_with("python3", &v, &project).toolchains.is_empty());
    }

    #[test]
    fn a_virtualenv_binds_itself_and_a_hidden_base() {
        let t = tempfile::tempdir().unwrap();
        let venv = t.path().join("venv");
        let base = t.path().join("base");
        exe(&venv.join("bin/pytest"));
        exe(&base.join("bin/python3"));
        std::fs::write(venv.join("pyvenv.cfg"), format!("home = {}/bin\nversion = 3.11\n", base.display())).unwrap();
        let vars = [("VIRTUAL_ENV", text(&venv)), ("PATH", format!("{}/bin:/usr/bin", venv.display()))];
        let r = resolve_with("pytest", &vars, Path::new("/w"));
        let t0 = &r.toolchains[0];
        assert_eq!(t0.name, "virtualenv");
        assert_eq!(t0.paths, [text(&real(&venv)), text(&real(&base))]);
        assert_eq!(t0.variables["VIRTUAL_ENV"], text(&venv));
        // Not activated: a program in it is only a hint.
        let r = resolve_with("pytest", &[("PATH", format!("{}/bin:/usr/bin", venv.display()))], Path::new("/w"));
        assert!(r.toolchains.is_empty());
        let hint = r.hint.unwrap();
        assert!(hint.contains(&format!("add --bind {}", venv.display())), "{hint}");
    }

    #[test]
    fn hints_for_programs_the_guest_would_not_find() {
        let t = tempfile::tempdir().unwrap();
        exe(&t.path().join("opt/foo/bin/foo"));
        let path = format!("/usr/bin:{}/opt/foo/bin", t.path().display());
        let r = resolve_with("foo", &[("PATH", path.clone())], Path::new("/w"));
        let hint = r.hint.unwrap();
        assert!(
            hint.starts_with(&format!(
                "it is {0}/opt/foo/bin/foo on the host: add --bind {0}/opt/foo or [run] binds in repro.toml",
                t.path().display()
            )),
            "{hint}"
        );
        // In the guest's own PATH, or nowhere on the host: nothing to say.
        assert_eq!(resolve_with("sh", &[("PATH", "/usr/bin:/bin".into())], Path::new("/w")), Resolution::default());
        assert_eq!(resolve_with("no-such-xyz", &[("PATH", path)], Path::new("/w")), Resolution::default());
        // Given by a path the guest does not see.
        let r = resolve_with(&format!("{}/opt/foo/bin/foo", t.path().display()), &[], Path::new("/w"));
        assert!(r.hint.unwrap().contains("which the guest does not see"));
        assert!(guest_sees(Path::new("/usr/local/go"), Path::new("/w")));
        assert!(!guest_sees(Path::new("/root/.cargo"), Path::new("/w")));
        assert!(guest_sees(Path::new("/root/proj/venv"), Path::new("/root/proj")));
    }
}
