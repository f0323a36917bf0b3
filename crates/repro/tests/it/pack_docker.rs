//! A pack captured on this machine replays inside a Docker container whose root has another Python: Debian's
//! PyPy (the Python 3.9 language) as /usr/bin/python3 and no CPython at all. The guest's root comes from the pack
//! alone, so the replay runs the recorded CPython 3.11 and reproduces the failure, while the container's own
//! python3 fails differently.
//!
//! Nothing is pulled: the image is one `docker import` of a tar stream made here from the host's pypy3 and
//! busybox-static files and the shared libraries they and repro need (ldd). It is tagged by the blake3 of that
//! stream and kept, so a later run with the same host files reuses it (images of this kind with another tag are
//! removed when a new one is built). The repro binary under test is bind-mounted, so rebuilding repro does not
//! change the image. The test's container is removed by the test.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{assert_code, repro, repro_path, require_cmds, require_docker, stderr, stdout};

/// The repository of the image; its tag is the content digest.
const IMAGE_REPO: &str = "repro-test/pypy-root";
/// The label every image of this kind carries (stale ones are found by it).
const IMAGE_LABEL: &str = "repro.test.image=pypy-root";

/// Fails on a CPython 3.11 (prints the implementation, then needs `tomllib`, new in 3.11); on PyPy 3.9 it dies
/// at the import instead.
const FAIL_PY: &str = "import sys\n\
print(f'{sys.implementation.name} {sys.version_info[0]}.{sys.version_info[1]}', file=sys.stderr)\n\
import tomllib\n\
cfg = tomllib.load(open('settings.toml', 'rb'))\n\
if cfg['retries'] != 5:\n    raise SystemExit(f\"retries is {cfg['retries']}, expected 5\")\n";

fn docker(args: &[&str]) -> Output {
    Command::new("docker").args(args).output().expect("docker runs")
}

/// The files of the image, by path inside it (relative, sorted).
#[derive(Default)]
struct Tree(BTreeMap<String, Entry>);

enum Entry {
    Dir(u32),
    /// Content read from this host path (links followed).
    File(PathBuf),
    Symlink(String),
}

impl Tree {
    fn dir(&mut self, path: &str, mode: u32) {
        self.parent(path);
        self.0.insert(path.to_string(), Entry::Dir(mode));
    }
    /// The directories above `path`, unless they are there already.
    fn parent(&mut self, path: &str) {
        let Some((parent, _)) = path.rsplit_once('/') else { return };
        let mut at = String::new();
        for c in parent.split('/') {
            if !at.is_empty() {
                at.push('/');
            }
            at.push_str(c);
            self.0.entry(at.clone()).or_insert(Entry::Dir(0o755));
        }
    }
    /// The host file `src` at the same path, with its directories resolved (`/lib/x86_64-linux-gnu/libc.so.6`
    /// is stored under `usr/lib/...` on a merged-/usr host, as the host has it).
    fn host_file(&mut self, src: &Path) {
        let dir = fs::canonicalize(src.parent().unwrap()).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
        let at = dir.join(src.file_name().unwrap());
        let rel = at.to_str().unwrap().trim_start_matches('/').to_string();
        self.parent(&rel);
        self.0.insert(rel, Entry::File(src.to_path_buf()));
    }
    fn symlink(&mut self, path: &str, target: &str) {
        self.parent(path);
        self.0.insert(path.to_string(), Entry::Symlink(target.to_string()));
    }
    /// Everything under the host directory `dir`, as it is.
    fn host_tree(&mut self, dir: &Path) {
        let rel = dir.to_str().unwrap().trim_start_matches('/').to_string();
        self.dir(&rel, 0o755);
        let mut entries: Vec<PathBuf> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for p in entries {
            let m = fs::symlink_metadata(&p).unwrap();
            let rel = p.to_str().unwrap().trim_start_matches('/').to_string();
            if m.file_type().is_symlink() {
                self.symlink(&rel, fs::read_link(&p).unwrap().to_str().unwrap());
            } else if m.is_dir() {
                self.host_tree(&p);
            } else if m.is_file() {
                self.0.insert(rel, Entry::File(p));
            }
        }
    }

    /// The tree as a tar stream (deterministic: the same files give the same bytes).
    fn write_tar<W: Write>(&self, w: W) -> io::Result<W> {
        let mut b = tar::Builder::new(w);
        b.mode(tar::HeaderMode::Deterministic);
        let header = |kind: tar::EntryType, mode: u32| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(kind);
            h.set_size(0);
            h.set_mode(mode);
            h.set_mtime(0);
            h
        };
        for (path, e) in &self.0 {
            match e {
                Entry::Dir(mode) => b.append_data(&mut header(tar::EntryType::Directory, *mode), path, io::empty())?,
                Entry::File(src) => b.append_path_with_name(src, path)?,
                Entry::Symlink(target) => b.append_link(&mut header(tar::EntryType::Symlink, 0o777), path, target)?,
            }
        }
        b.into_inner()
    }
}

/// The shared libraries the ELF objects need, as ldd resolves them on the host.
fn shared_libraries(objects: &[PathBuf]) -> Vec<PathBuf> {
    let o = Command::new("ldd").args(objects).output().expect("ldd runs");
    assert!(o.status.success(), "ldd failed:\n{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(!out.contains("not found"), "a library is missing on the host:\n{out}");
    let mut libs: Vec<PathBuf> = out
        .lines()
        .filter(|l| l.starts_with('\t'))
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with('/')).map(PathBuf::from))
        .collect();
    libs.sort();
    libs.dedup();
    libs
}

/// The image's root: busybox-static, Debian's pypy3 as /usr/bin/python3 with its standard library, and every
/// library pypy, its extension modules and repro load. No CPython.
fn pypy_root() -> Tree {
    let pypy = fs::canonicalize("/usr/bin/pypy3")
        .unwrap_or_else(|e| panic!("/usr/bin/pypy3: {e}: install pypy3 (scripts/install-deps.sh, .ci/apt-packages)"));
    let name = pypy.file_name().unwrap().to_str().unwrap().to_string(); // pypy3.9
    let stdlib = Path::new("/usr/lib").join(&name);
    assert!(stdlib.is_dir(), "{} is missing: pypy3-lib is not installed", stdlib.display());
    let busybox = Path::new("/bin/busybox");
    assert!(busybox.is_file(), "/bin/busybox is missing: install busybox-static (scripts/install-deps.sh)");

    let mut t = Tree::default();
    // The host's top-level links (a merged /usr: bin -> usr/bin, lib -> usr/lib, lib64 -> usr/lib64).
    for top in ["bin", "lib", "lib64", "sbin"] {
        if let Ok(target) = fs::read_link(Path::new("/").join(top)) {
            t.symlink(top, target.to_str().unwrap());
        }
    }
    for d in ["dev", "etc", "proc", "sys", "usr/local/bin"] {
        t.dir(d, 0o755);
    }
    t.dir("tmp", 0o1777);
    t.host_file(busybox);
    let bb_dir =
        fs::canonicalize(busybox).unwrap().parent().unwrap().to_str().unwrap().trim_start_matches('/').to_string();
    for applet in ["sh", "cat", "ls", "sleep", "test"] {
        t.symlink(&format!("{bb_dir}/{applet}"), "busybox");
    }
    t.host_file(&pypy);
    t.symlink("usr/bin/pypy3", &name);
    t.symlink("usr/bin/python3", &name);
    t.host_tree(&stdlib);
    let mut objects = vec![pypy.clone(), repro_path()];
    objects.extend(t.0.values().filter_map(|e| match e {
        Entry::File(p) if p.starts_with(&stdlib) && p.extension().is_some_and(|x| x == "so") => Some(p.clone()),
        _ => None,
    }));
    for lib in shared_libraries(&objects) {
        t.host_file(&lib);
    }
    t
}

/// The image, built unless one with the same content is there already. Returns its tag.
fn pypy_image() -> String {
    let started = Instant::now();
    let tree = pypy_root();
    let mut hasher = blake3::Hasher::new();
    tree.write_tar(&mut hasher).expect("the image's files can be read");
    let tag = format!("{IMAGE_REPO}:{}", &hasher.finalize().to_hex()[..16]);
    if docker(&["image", "inspect", "--format", "{{.Id}}", &tag]).status.success() {
        eprintln!("image {tag}: cached ({} ms)", started.elapsed().as_millis());
        return tag;
    }
    let mut child = Command::new("docker")
        .args(["import", "--change", &format!("LABEL {IMAGE_LABEL}"), "-", &tag])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("docker runs");
    let stdin = io::BufWriter::with_capacity(1 << 20, child.stdin.take().unwrap());
    let written = tree.write_tar(stdin).and_then(|mut w| w.flush());
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success() && written.is_ok(), "docker import failed ({written:?}):\n{}", stderr(&o));
    // Images of this kind with another content are out of date (ignored when a container still uses one).
    let ids = docker(&["images", "-q", "--no-trunc", "-f", &format!("label={IMAGE_LABEL}")]);
    let current = stdout(&docker(&["image", "inspect", "--format", "{{.Id}}", &tag])).trim().to_string();
    for id in stdout(&ids).split_whitespace().filter(|id| *id != current) {
        let _ = docker(&["image", "rm", id]);
    }
    eprintln!("image {tag}: built ({} ms)", started.elapsed().as_millis());
    tag
}

/// A container of the image, running `sleep` until removed (by `remove`, or when dropped; else gone 10 minutes
/// later, `--rm`).
struct Container {
    name: String,
    removed: bool,
}

impl Container {
    /// What repro needs to make its sandbox in a container: namespaces, mounts and pivot_root (SYS_ADMIN, and
    /// neither Docker's default seccomp profile, which refuses pivot_root, nor AppArmor's docker-default, which
    /// refuses mount), an unmasked /proc (systempaths=unconfined: the guest's user namespace may mount a procfs
    /// only while a fully visible one exists), `lo` up in the guest's network namespace (NET_ADMIN), ptrace and pidfd_getfd on any guest,
    /// dumpable or not (SYS_PTRACE), the cgroup hierarchy writable for the memory limit, and a directory that is
    /// executable and not on the container's overlay root for the cache and the state directory (the overlay of
    /// the working directory puts its upper layer there). `--privileged` does as well where the engine allows it
    /// (not here: the engine's own capability bounding set lacks CAP_SYS_RESOURCE).
    fn start(image: &str, pack: &Path, cgroups: bool) -> Container {
        let name = format!("repro-pack-docker-{}-{}", std::process::id(), if cgroups { "cg" } else { "nocg" });
        let _ = docker(&["rm", "-f", &name]);
        let exe = format!("{}:/usr/local/bin/repro:ro", repro_path().display());
        let pack = format!("{}:/packs/py.repro:ro", pack.display());
        #[rustfmt::skip]
        let args = [
            "run", "-d", "--rm", "--name", &name, "--label", "repro.test=pack-docker",
            "--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN", "--cap-add", "SYS_PTRACE",
            "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
            "--security-opt", "systempaths=unconfined",
            "-v", &exe, "-v", &pack,
            "--tmpfs", "/work:exec", "-w", "/work", "-e", "HOME=/work", "-e", "XDG_CACHE_HOME=/work/cache",
        ];
        let cgroup_args = ["--cgroupns", "host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw"];
        let mut args: Vec<&str> = args.to_vec();
        if cgroups {
            args.extend_from_slice(&cgroup_args);
        }
        args.extend_from_slice(&[image, "sleep", "600"]);
        let o = docker(&args);
        let c = Container { name, removed: false };
        assert!(o.status.success(), "docker run failed:\n{}", stderr(&o));
        c
    }
    fn exec(&self, cmd: &[&str]) -> Output {
        let mut args = vec!["exec", &self.name];
        args.extend_from_slice(cmd);
        docker(&args)
    }
    /// Removes the container and checks that the engine no longer knows it.
    fn remove(mut self) {
        let rm = docker(&["rm", "-f", &self.name]);
        self.removed = true;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = docker(&["ps", "-a", "-q", "-f", &format!("name=^{}$", self.name)]);
            if stdout(&left).trim().is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "container {} left behind; docker rm: {}", self.name, stderr(&rm));
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if !self.removed {
            let _ = docker(&["rm", "-f", &self.name]);
        }
    }
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}\n{}", stdout(o), stderr(o)))
}

#[test]
fn pack_replays_in_a_docker_container_with_another_python() {
    // The engine, and what the image is made of (pypy3, busybox-static) and with (ldd): say so plainly instead
    // of failing somewhere later.
    require_docker();
    require_cmds(&["pypy3", "busybox", "ldd", "python3"]);
    let started = Instant::now();
    let wd = tempfile::Builder::new().prefix("repro-it-").tempdir().unwrap();
    let aside = tempfile::Builder::new().prefix("repro-packs-").tempdir().unwrap();
    fs::write(wd.path().join("fail.py"), FAIL_PY).unwrap();
    fs::write(wd.path().join("settings.toml"), "retries = 3\n").unwrap();
    let pack = aside.path().join("py.repro");

    // Captured on the host, with its CPython 3.11.
    let o = repro()
        .current_dir(wd.path())
        .env("XDG_CACHE_HOME", aside.path().join("cache"))
        .args(["capture", "--json", "-o", pack.to_str().unwrap(), "--", "python3", "fail.py"])
        .output()
        .unwrap();
    assert_code(&o, 1);
    assert!(stderr(&o).contains("cpython 3.11\nretries is 3, expected 5\n"), "{}", stderr(&o));
    let signature = json(&o)["signature"].clone();
    assert_eq!(signature["exit_status"], 1, "{signature}");
    assert_eq!(signature["stderr_tail"], serde_json::json!(["cpython 3.11", "retries is 3, expected 5"]));

    let image = pypy_image();
    let built = started.elapsed();

    // The image's python3 is PyPy, and it fails otherwise on the same files: the result depends on the Python.
    let src = format!("{}:/src:ro", wd.path().display());
    let o = docker(&["run", "--rm", "-v", &src, "-w", "/src", &image, "python3", "fail.py"]);
    assert_code(&o, 1);
    let err = stderr(&o);
    assert!(err.starts_with("pypy 3.9\n") && err.contains("No module named 'tomllib'"), "{err}");

    let c = Container::start(&image, &pack, true);
    let o = c.exec(&["python3", "-c", "import sys; print(sys.implementation.name); print(sys.version)"]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.starts_with("pypy\n3.9.") && out.contains("[PyPy 7."), "{out}");
    let o = c.exec(&["ls", "/usr/bin", "/usr/lib"]);
    assert_code(&o, 0);
    assert!(!stdout(&o).contains("python3."), "the image has a CPython:\n{}", stdout(&o));

    // Replayed there from the pack alone: the recorded CPython runs, and the failure is the recorded one.
    let o = c.exec(&["repro", "replay", "/packs/py.repro"]);
    assert_code(&o, 0);
    let err = stderr(&o);
    assert!(err.starts_with("cpython 3.11\nretries is 3, expected 5\n"), "the guest's stderr:\n{err}");
    assert!(err.contains("[repro] reproduced 1/1: exit 1; stderr: retries is 3, expected 5"), "{err}");
    assert!(!err.contains("pypy") && !err.contains("differs"), "{err}");

    let o = c.exec(&["repro", "replay", "--runs", "2", "--json", "/packs/py.repro"]);
    assert_code(&o, 0);
    let r = json(&o);
    assert_eq!(r["reproduced"], 2, "{r}");
    assert_eq!(r["recorded"], signature, "{r}");
    let runs = r["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for run in runs {
        assert_eq!(run["signature"], signature, "{r}");
        assert_eq!(run["differences"], serde_json::json!([]), "{r}");
    }
    // In the same sandbox as on the host: the memory limit was enforced, nothing was left unenforced.
    let run_json = format!("{}/run.json", runs[0]["run_dir"].as_str().unwrap());
    let o = c.exec(&["cat", &run_json]);
    assert_code(&o, 0);
    let rec = json(&o);
    assert!(rec["enforcement"]["cgroup"].is_string(), "{}", rec["enforcement"]);
    assert_eq!(rec["enforcement"]["warnings"], serde_json::json!([]), "{}", rec["enforcement"]);
    c.remove();

    // Without a writable cgroup hierarchy the memory limit cannot be enforced: the replay still reproduces the
    // failure, and says what it could not enforce, as `repro run` does.
    let c = Container::start(&image, &pack, false);
    let o = c.exec(&["repro", "replay", "/packs/py.repro"]);
    assert_code(&o, 0);
    let err = stderr(&o);
    assert!(err.contains("repro: warning: memory limit not enforced"), "{err}");
    assert!(err.contains("[repro] reproduced 1/1"), "{err}");
    let o = c.exec(&["repro", "replay", "--json", "/packs/py.repro"]);
    let r = json(&o);
    assert!(r["runs"][0]["warnings"][0].as_str().unwrap_or("").starts_with("memory limit not enforced"), "{r}");
    c.remove();
    eprintln!("image ready after {} ms; test done in {} ms", built.as_millis(), started.elapsed().as_millis());
}
