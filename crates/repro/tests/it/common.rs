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
        c.output().expect("repro runs")
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
