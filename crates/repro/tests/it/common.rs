//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;

/// A `repro` command built from this workspace.
pub fn repro() -> Command {
    Command::cargo_bin("repro").expect("the repro binary is built")
}

/// The path of the built `repro` binary.
pub fn repro_path() -> PathBuf {
    assert_cmd::cargo::cargo_bin("repro")
}

/// A fresh working directory for one test (its state directory is `.repro` inside it).
pub struct Workdir {
    pub dir: tempfile::TempDir,
}

impl Workdir {
    pub fn new() -> Workdir {
        Workdir { dir: tempfile::Builder::new().prefix("repro-it-").tempdir().expect("tempdir") }
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    /// `repro run [args] -- cmd...` in this directory.
    pub fn run(&self, args: &[&str], cmd: &[&str]) -> Output {
        let mut c = repro();
        c.current_dir(self.path()).arg("run").args(args).arg("--").args(cmd);
        c.timeout(HANG_GUARD).output().expect("repro runs")
    }
    /// `repro run -q -- sh -c SCRIPT`.
    pub fn sh(&self, script: &str) -> Output {
        self.run(&["-q"], &["sh", "-c", script])
    }
    /// The only run directory.
    pub fn last_run(&self) -> PathBuf {
        let runs = self.path().join(".repro/runs");
        let mut all: Vec<PathBuf> = std::fs::read_dir(&runs).expect("runs").map(|e| e.unwrap().path()).collect();
        all.sort();
        all.pop().expect("a run directory")
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts the exit status, printing the output when it differs.
pub fn assert_code(o: &Output, code: i32) {
    assert_eq!(o.status.code(), Some(code), "stdout:\n{}\nstderr:\n{}", stdout(o), stderr(o));
}

/// `python3 -m http.server` on a free loopback port, serving `dir`; stopped when dropped.
pub struct HttpServer {
    child: std::process::Child,
    pub port: u16,
}

impl HttpServer {
    pub fn start(dir: &Path) -> HttpServer {
        require_cmd("python3");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = std::process::Command::new("python3")
            .args(["-m", "http.server", "--bind", "127.0.0.1", &port.to_string()])
            .current_dir(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("python3 -m http.server starts");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "the HTTP server did not start");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        HttpServer { child, port }
    }

    /// Stops the server and checks that nothing listens on its port any more.
    pub fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        assert!(std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err(), "the server is stopped");
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The caller's own memory cgroup directory (from /proc/self/cgroup: the v1 memory line, else the v2 `0::` line),
/// under which repro creates a run's cgroup `repro-<id>`.
#[allow(dead_code)]
pub fn caller_memory_cgroup() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let line = |pred: &dyn Fn(&str, &str) -> bool| {
        text.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (id, ctrls, path) = (f.next()?, f.next()?, f.next()?);
            pred(id, ctrls).then(|| path.trim_start_matches('/').to_string())
        })
    };
    if Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists() {
        let rel = line(&|_, c| c.split(',').any(|c| c == "memory"))?;
        return Some(Path::new("/sys/fs/cgroup/memory").join(rel));
    }
    let rel = line(&|id, c| id == "0" && c.is_empty())?;
    Some(Path::new("/sys/fs/cgroup").join(rel))
}

/// What CI installs, by command: the Debian package that provides it (`.ci/apt-packages`, installed by
/// `scripts/install-deps.sh`, which `.ci/run` and `scripts/test.sh` call first).
const PROVIDERS: &[(&str, &str)] = &[
    ("autoreconf", "autoconf"),
    ("bc", "bc"),
    ("cmake", "cmake"),
    ("ctest", "cmake"),
    ("busybox", "busybox-static"),
    ("chromium", "chromium"),
    ("gcc", "gcc"),
    ("git", "git"),
    ("go", "golang-go"),
    ("ip", "iproute2"),
    ("ldd", "libc6-dev"),
    ("make", "make"),
    ("openssl", "openssl"),
    ("pg_isready", "postgresql"),
    ("prove", "perl"),
    ("prometheus-postgres-exporter", "prometheus-postgres-exporter"),
    ("prometheus-redis-exporter", "prometheus-redis-exporter"),
    ("promtool", "prometheus"),
    ("psql", "postgresql"),
    ("pypy3", "pypy3"),
    ("python3", "python3"),
    ("redis-cli", "redis-server"),
    ("redis-server", "redis-server"),
    ("setpriv", "util-linux"),
    ("unshare", "util-linux"),
];

/// How CI provides `cmd`, for the message of a test that cannot find it.
fn provider(cmd: &str) -> String {
    match PROVIDERS.iter().find(|(c, _)| *c == cmd) {
        Some((_, pkg)) => format!(
            "the Debian package {pkg} provides it; CI installs it (.ci/run runs scripts/install-deps.sh, which \
             installs .ci/apt-packages)"
        ),
        None => "CI's image provides it".to_string(),
    }
}

/// The executable `cmd` on `path` (a `PATH`-style list), if any.
pub fn find_on_path(cmd: &str, path: &std::ffi::OsStr) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path)
        .map(|d| d.join(cmd))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// Compiles the C program `DIR/NAME.c` of this repository (`DIR` relative to its root, e.g. `tests/races`) into
/// the working directory as `./NAME`, with `-O2 -pthread`.
pub fn build_c_program(w: &Workdir, dir: &str, name: &str) {
    require_cmd("gcc");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../{dir}/{name}.c"));
    let o = std::process::Command::new("gcc")
        .args(["-O2", "-pthread"])
        .arg(&src)
        .args(["-o", name])
        .current_dir(w.path())
        .output()
        .expect("gcc runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Fails the test, naming what is missing and how CI provides it, unless `cmd` is an executable on `PATH`.
/// Tests call this before they use a tool of the machine, so a missing one is one clear message rather than a
/// panic somewhere deep inside (CI provides them all: the test must fail, not skip).
#[track_caller]
pub fn require_cmd(cmd: &str) {
    // No PATH finds nothing, and the message shows it empty.
    let path = std::env::var_os("PATH").unwrap_or_default();
    if find_on_path(cmd, &path).is_none() {
        panic!("this test needs `{cmd}`, which is not on PATH ({}): {}", path.to_string_lossy(), provider(cmd));
    }
}

/// [`require_cmd`] for each of `cmds`.
#[track_caller]
pub fn require_cmds(cmds: &[&str]) {
    for c in cmds {
        require_cmd(c);
    }
}

/// The guest's fixed PATH (repro-sandbox's env policy): the python3 a guest runs is found on it.
const GUEST_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Fails the test unless the python3 a guest finds (on the guest's PATH) can `import MODULE`.
#[track_caller]
pub fn require_python_module(module: &str, package: &str) {
    if find_on_path("python3", std::ffi::OsStr::new(GUEST_PATH)).is_none() {
        panic!("this test needs python3 on the guest's PATH ({GUEST_PATH}): {}", provider("python3"));
    }
    let o = std::process::Command::new("python3")
        .env("PATH", GUEST_PATH)
        .args(["-c", &format!("import {module}")])
        .output();
    match o {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "this test needs the Python module {module} (`python3 -c 'import {module}'` failed: {}): the Debian \
             package {package} provides it; CI installs it (.ci/run runs scripts/install-deps.sh)",
            stderr(&o).trim()
        ),
        Err(e) => panic!("this test needs python3 to import {module}: cannot run python3: {e}"),
    }
}

/// Fails the test unless a Docker engine answers `docker version`. CI runs on a machine with a Docker engine
/// (the `docker` client and a daemon on /var/run/docker.sock); the tests never pull images.
#[track_caller]
pub fn require_docker() {
    // No PATH finds nothing: the client is reported missing.
    let path = std::env::var_os("PATH").unwrap_or_default();
    if find_on_path("docker", &path).is_none() {
        panic!("this test needs a Docker engine: the `docker` client is not on PATH (CI's machine has Docker)");
    }
    let o = std::process::Command::new("docker").args(["version", "--format", "{{.Server.Version}}"]).output();
    match o {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            panic!("this test needs a Docker engine (CI's machine has one); `docker version` failed:\n{}", stderr(&o))
        }
        Err(e) => panic!("this test needs a Docker engine (CI's machine has one); cannot run `docker`: {e}"),
    }
}

/// Fails the test unless Debian's PostgreSQL server is installed (`/usr/lib/postgresql/*/bin/postgres`, as the
/// process-postgres adapter expects) with its client tools.
#[track_caller]
pub fn require_postgres() {
    let found = std::fs::read_dir("/usr/lib/postgresql")
        .map(|rd| rd.filter_map(Result::ok).any(|e| e.path().join("bin/postgres").is_file()))
        .unwrap_or(false);
    if !found {
        panic!("this test needs a PostgreSQL server at /usr/lib/postgresql/*/bin/postgres: {}", provider("psql"));
    }
    require_cmds(&["psql", "pg_isready", "setpriv"]);
}

/// The bound of [`wait_bounded`]: far above what any of these runs needs on a slow machine, far below the
/// hour a broken deadline would take. It guards against a hang; it is not a claim about speed (those live in
/// bench/).
pub const HANG_GUARD: std::time::Duration = std::time::Duration::from_secs(120);

/// Waits for `child` and collects its output, killing it and failing the test (naming `what`) if it has not
/// ended within [`HANG_GUARD`].
#[track_caller]
pub fn wait_bounded(mut child: std::process::Child, what: &str) -> Output {
    let deadline = std::time::Instant::now() + HANG_GUARD;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            Ok(None) => {
                // Ignored: the child may have ended since try_wait; the panic below is what matters.
                let _ = child.kill();
                panic!("{what}: did not end within {HANG_GUARD:?} (killed)");
            }
            Err(e) => panic!("{what}: waiting for pid {}: {e}", child.id()),
        }
    }
    child.wait_with_output().unwrap_or_else(|e| panic!("{what}: collecting the output: {e}"))
}

/// A size- and inode-limited tmpfs, unmounted when dropped.
pub struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    /// Mounts one (as root) on a new temporary directory named with `prefix`; `opts` as mount(8) takes them
    /// (`size=64m,nr_inodes=2000`).
    pub fn mount(prefix: &str, opts: &str) -> SmallFs {
        let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
        let st = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", opts, "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("mount runs");
        assert!(st.success(), "mounting a small tmpfs (the tests run as root)");
        SmallFs { dir }
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    /// Inodes in use on the tmpfs (total minus free, from `stat -f`).
    pub fn inodes_used(&self) -> u64 {
        let o = std::process::Command::new("stat").args(["-f", "--format=%c %d"]).arg(self.path()).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let v: Vec<u64> = text.split_whitespace().map(|n| n.parse().unwrap()).collect();
        assert_eq!(v.len(), 2, "{text}");
        v[0] - v[1]
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every package named for a missing command is one that CI installs.
    #[test]
    fn every_provider_is_in_the_ci_package_list() {
        let list = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.ci/apt-packages"))
            .expect(".ci/apt-packages");
        let listed: Vec<&str> = list.lines().filter_map(|l| l.split_whitespace().next()).collect();
        for (cmd, pkg) in PROVIDERS {
            assert!(listed.contains(pkg), "{cmd}: package {pkg} is not in .ci/apt-packages");
        }
    }

    #[test]
    fn a_missing_command_is_named_with_its_package() {
        let err = std::panic::catch_unwind(|| require_cmd("repro-no-such-command-redis-server")).unwrap_err();
        let msg = err.downcast_ref::<String>().cloned().expect("a formatted panic message");
        assert!(msg.contains("`repro-no-such-command-redis-server`, which is not on PATH"), "{msg}");
        assert!(provider("redis-server").contains("Debian package redis-server"));
        assert!(provider("promtool").contains("Debian package prometheus"));
    }

    #[test]
    fn lookup_follows_the_path_list_and_needs_an_executable() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("tool");
        std::fs::write(&f, "#!/bin/sh\n").unwrap();
        let path = d.path().as_os_str().to_owned();
        assert_eq!(find_on_path("tool", &path), None, "not executable");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(find_on_path("tool", &path), Some(f));
        assert_eq!(find_on_path("other", &path), None);
    }
}
