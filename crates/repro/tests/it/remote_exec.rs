//! Remote execution against a real engine: BuildGrid 0.4.4 (the test venv, see remote.rs) with its SQL
//! scheduler on a throwaway PostgreSQL cluster (`initdb` in the test's temporary directory, as nobody, since
//! initdb refuses root), `bgd migrate apply`, and `!execution` (Execution and Bots services) beside CAS,
//! ByteStream and the Action Cache.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::common::*;
use crate::remote::{require_bgd, BuildGrid};

const NOBODY: &str = "65534";

/// The directory of Debian's PostgreSQL server binaries (the newest installed), or a failure naming the package.
fn pg_bin() -> PathBuf {
    require_postgres();
    let mut bins: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("initdb").is_file() && b.join("pg_ctl").is_file())
        .collect();
    bins.sort();
    bins.pop().expect("require_postgres found a server, so initdb is beside it")
}

/// Fails unless the venv's Python can import BuildGrid's PostgreSQL driver (psycopg2, pinned in
/// .ci/python-packages).
fn require_psycopg2(bgd: &Path) {
    let python = bgd.parent().unwrap().join("python3");
    let ok = Command::new(&python).args(["-c", "import psycopg2"]).output().map(|o| o.status.success());
    assert!(
        matches!(ok, Ok(true)),
        "this test needs psycopg2 in the venv of {} (psycopg2-binary is pinned in .ci/python-packages: run \
         scripts/install-deps.sh)",
        bgd.display()
    );
}

/// As nobody: `setpriv --reuid=65534 --regid=65534 --clear-groups PROG`.
fn as_nobody(prog: &Path) -> Command {
    let mut c = Command::new("setpriv");
    c.args([&format!("--reuid={NOBODY}"), &format!("--regid={NOBODY}"), "--clear-groups"]).arg(prog);
    c
}

fn run_ok(mut c: Command, what: &str) {
    let o = c.output().unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(o.status.success(), "{what} failed ({}):\n{}{}", o.status, stdout(&o), stderr(&o));
}

/// A PostgreSQL cluster in a temporary directory, owned by nobody, on a free loopback port, with a database
/// `bgd` that `bgd migrate apply` has prepared; stopped (immediate mode) when dropped.
pub(crate) struct Postgres {
    bin: PathBuf,
    data: PathBuf,
    pub(crate) port: u16,
    _dir: tempfile::TempDir,
}

impl Postgres {
    pub(crate) fn start() -> Postgres {
        let bin = pg_bin();
        let dir = tempfile::Builder::new().prefix("repro-pg-").tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        for p in [dir.path(), &data] {
            std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
        }
        let mut c = as_nobody(&bin.join("initdb"));
        c.arg("-D").arg(&data).args(["-U", "bgd", "--auth=trust", "-E", "UTF8", "--no-sync"]);
        run_ok(c, "initdb");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut c = as_nobody(&bin.join("pg_ctl"));
        c.arg("-D").arg(&data).arg("-l").arg(dir.path().join("pg.log")).args(["-w", "-t", "60", "-o"]).arg(format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60",
            dir.path().display()
        ));
        c.arg("start");
        let pg = Postgres { bin, data, port, _dir: dir };
        run_ok(c, "pg_ctl start");
        let mut c = as_nobody(&pg.bin.join("createdb"));
        c.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "bgd", "bgd"]);
        run_ok(c, "createdb bgd");
        let bgd = require_bgd();
        require_psycopg2(&bgd);
        let mut c = Command::new(&bgd);
        c.args(["migrate", "apply", &pg.url()]);
        run_ok(c, "bgd migrate apply");
        pg
    }

    pub(crate) fn url(&self) -> String {
        // psycopg2 explicitly: SQLAlchemy 2.1 defaults to psycopg 3, and BuildGrid 0.4.4's notifier polls a
        // psycopg2 connection ("'Connection' object has no attribute 'poll'" otherwise).
        format!("postgresql+psycopg2://bgd@127.0.0.1:{}/bgd", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let mut c = as_nobody(&self.bin.join("pg_ctl"));
        c.arg("-D").arg(&self.data).args(["-m", "immediate", "stop"]);
        let _ = c.output();
    }
}

/// BuildGrid with execution: its SQL scheduler on `pg`, the Execution and Bots services (`!execution`) beside
/// CAS, ByteStream and the Action Cache, instance `main`. Platform properties ISA and OSFamily are matched (a
/// bot must offer the ones an Action asks for).
pub(crate) fn bgd_exec_config(port: u16, pg: &Postgres) -> String {
    format!(
        "server:\n  - !channel\n    address: \"127.0.0.1:{port}\"\n    insecure-mode: true\n\
         authorization:\n  method: none\n\
         connections:\n  - !sql-connection &sql\n    connection-string: {url}\n    pool-size: 5\n    \
         pool-timeout: 30\n    max-overflow: 10\n\
         storages:\n  - !lru-storage &main-storage\n    size: 256MB\n\
         caches:\n  - !lru-action-cache &main-action\n    storage: *main-storage\n    max-cached-refs: 1024\n    \
         allow-updates: true\n    cache-failed-actions: true\n\
         schedulers:\n  - !sql-scheduler &state\n    sql: *sql\n    action-cache: *main-action\n    \
         storage: *main-storage\n    property-set: !dynamic-property-set\n      match-property-keys: [ISA, OSFamily]\n    \
         bot-session-keepalive-timeout: 20\n\
         instances:\n  - name: main\n    services:\n      - !action-cache\n        cache: *main-action\n      \
         - !execution\n        scheduler: *state\n      - !cas\n        storage: *main-storage\n      \
         - !bytestream\n        storage: *main-storage\n",
        url = pg.url()
    )
}

/// PostgreSQL and BuildGrid with execution (BuildGrid is dropped first).
pub(crate) struct ExecEngine {
    pub(crate) grid: BuildGrid,
    pub(crate) _pg: Postgres,
}

impl ExecEngine {
    pub(crate) fn start() -> ExecEngine {
        let t = Instant::now();
        let pg = Postgres::start();
        let grid = BuildGrid::start_with(|port, _| bgd_exec_config(port, &pg));
        eprintln!("PostgreSQL and BuildGrid with execution up in {:?}", t.elapsed());
        ExecEngine { grid, _pg: pg }
    }
}

#[test]
fn buildgrid_with_postgres_offers_execution() {
    let e = ExecEngine::start();
    let o = repro()
        .args(["remote", "check", "--remote", &e.grid.url(), "--remote-instance", "main"])
        .timeout(HANG_GUARD)
        .output()
        .expect("repro runs");
    assert_code(&o, 0);
    assert!(stdout(&o).contains("execution  enabled"), "{}\n{}", stdout(&o), e.grid.log_text());
}

/// `repro worker` against `grid`, its own cache in `cache`, in its own process group; stderr to `log`.
fn start_worker(grid: &BuildGrid, cache: &Path, log: &Path) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let err = std::fs::File::create(log).unwrap();
    std::process::Command::new(repro_path())
        .args(["worker", "--remote", &grid.url(), "--remote-instance", "main", "--bot-id"])
        .arg(format!("test-bot-{}", std::process::id()))
        .env("XDG_CACHE_HOME", cache)
        .stdout(std::process::Stdio::piped())
        .stderr(err)
        .process_group(0)
        .spawn()
        .expect("repro worker starts")
}

/// `kill SIG -- TARGET` (a pid, or -PGID for a process group).
fn signal(sig: &str, target: &str) {
    let o = Command::new("kill").args([sig, "--", target]).output().unwrap();
    assert!(o.status.success(), "kill {sig} {target}: {}", stderr(&o));
}

fn json_of(o: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}\n{}", stdout(o), stderr(o)))
}

#[test]
fn a_pack_replays_remotely_as_locally_then_from_the_action_cache() {
    let e = ExecEngine::start();
    let w = Workdir::new();
    let aside = tempfile::Builder::new().prefix("repro-rexec-").tempdir().unwrap();
    let pack = crate::remote::capture(&w, aside.path());
    let cache = aside.path().join("cache");
    let t = Instant::now();
    let local = repro()
        .env("XDG_CACHE_HOME", &cache)
        .args(["replay", "--json", pack.to_str().unwrap()])
        .timeout(HANG_GUARD)
        .output()
        .expect("repro runs");
    let local_ms = t.elapsed().as_millis();
    let lj = json_of(&local);
    let local_code = local.status.code().unwrap();
    assert_eq!(lj["reproduced"], 1, "the captured failure reproduces locally: {lj}");

    let wlog = aside.path().join("worker.log");
    let mut worker = start_worker(&e.grid, &aside.path().join("worker-cache"), &wlog);
    let url = e.grid.url();
    let remote = |extra: &[&str]| {
        let mut args = vec!["remote", "replay", "--json", pack.to_str().unwrap(), "--timeout", "100"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--remote", &url, "--remote-instance", "main"]);
        repro().env("XDG_CACHE_HOME", &cache).args(&args).timeout(HANG_GUARD).output().expect("repro runs")
    };
    let t = Instant::now();
    let o = remote(&[]);
    let remote_ms = t.elapsed().as_millis();
    let log =
        || format!("worker:\n{}\nbgd:\n{}", std::fs::read_to_string(&wlog).unwrap_or_default(), e.grid.log_text());
    let rj = json_of(&o);
    assert_eq!(o.status.code(), Some(local_code), "the exit code is the local replay's: {rj}\n{}", log());
    assert_eq!((rj["cached"].as_bool(), rj["exit_code"].as_i64()), (Some(false), Some(local_code as i64)), "{rj}");
    assert_eq!((rj["reproduced"].clone(), rj["runs"].clone()), (lj["reproduced"].clone(), 1.into()), "{rj}");
    let report: serde_json::Value = serde_json::from_str(rj["report"].as_str().unwrap()).unwrap();
    assert_eq!(report["recorded"], lj["recorded"], "the same recorded signature");
    assert_eq!(report["runs"][0]["signature"], lj["runs"][0]["signature"], "the same failure, replayed remotely");
    eprintln!("local replay {local_ms} ms; remote replay (upload, Execute, worker, result) {remote_ms} ms");

    // Ctrl-C ends the worker cleanly: one lease done, exit 130.
    signal("-INT", &worker.id().to_string());
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    let st = loop {
        if let Some(st) = worker.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "the worker did not stop at SIGINT:\n{}", log());
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(st.code(), Some(130), "{}", log());
    assert!(std::fs::read_to_string(&wlog).unwrap().contains("1 lease(s) done; stopped by a signal"), "{}", log());

    // No worker now: the second replay is the Action Cache's.
    let t = Instant::now();
    let o = remote(&[]);
    let rj2 = json_of(&o);
    assert_eq!(o.status.code(), Some(local_code), "{rj2}");
    assert_eq!((rj2["cached"].as_bool(), rj2["report"].clone()), (Some(true), rj["report"].clone()), "{rj2}");
    eprintln!("remote replay from the Action Cache {} ms", t.elapsed().as_millis());
}

#[test]
fn a_worker_killed_mid_lease_does_not_hang_the_client() {
    let e = ExecEngine::start();
    let w = Workdir::new();
    let aside = tempfile::Builder::new().prefix("repro-rexec-").tempdir().unwrap();
    let pack = crate::remote::capture(&w, aside.path());
    let wcache = aside.path().join("worker-cache");
    let mut worker = start_worker(&e.grid, &wcache, &aside.path().join("worker.log"));
    let t = Instant::now();
    let client = std::process::Command::new(repro_path())
        .env("XDG_CACHE_HOME", aside.path().join("cache"))
        .args(["remote", "replay", pack.to_str().unwrap(), "--no-cache", "--timeout", "20"])
        .args(["--remote", &e.grid.url(), "--remote-instance", "main"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The worker took the lease when its private directory appears: kill it and its replay there.
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let leased = std::fs::read_dir(wcache.join("repro"))
            .map(|rd| rd.filter_map(Result::ok).any(|d| d.file_name().to_string_lossy().starts_with("worker-")))
            .unwrap_or(false);
        if leased {
            break;
        }
        assert!(Instant::now() < deadline, "the worker took no lease within 60 s:\n{}", e.grid.log_text());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    signal("-KILL", &format!("-{}", worker.id()));
    let _ = worker.wait();
    let o = wait_bounded(client, "repro remote replay");
    assert_code(&o, 125);
    assert!(stderr(&o).contains("no result within 20 s"), "{}", stderr(&o));
    let took = t.elapsed();
    assert!(took < std::time::Duration::from_secs(60), "the client gave up after {took:?}");
}

/// `repro replay DIR` on an input-root layout made from a pack: it replays as the pack does; a file whose content
/// differs from the manifest's blake3 is refused (exit 2) naming the entry; a link in place of a file is refused.
#[test]
fn replay_of_a_pack_directory_checks_every_file() {
    use repro_model::manifest::EntryKind;
    let w = Workdir::new();
    let aside = tempfile::Builder::new().prefix("repro-dirpack-").tempdir().unwrap();
    let pack = crate::remote::capture(&w, aside.path());
    let blobs = aside.path().join("blobs-of-pack");
    let p = repro_pack::read_pack(&pack, &repro_pack::Store::at(aside.path().join("store")), Some(&blobs)).unwrap();
    let dir = aside.path().join("input");
    std::fs::create_dir_all(dir.join("root")).unwrap();
    std::fs::create_dir_all(dir.join("blobs")).unwrap();
    let mut json = serde_json::to_vec_pretty(&p.manifest).unwrap();
    json.push(b'\n');
    std::fs::write(dir.join("manifest.json"), json).unwrap();
    let mut big = None;
    for e in &p.manifest.files {
        let at = dir.join("root").join(e.path.trim_start_matches('/'));
        match e.kind {
            EntryKind::Dir => std::fs::create_dir_all(&at).unwrap(),
            EntryKind::File => {
                std::fs::create_dir_all(at.parent().unwrap()).unwrap();
                std::fs::copy(blobs.join(e.blake3.as_ref().unwrap()), &at).unwrap();
                if e.path.ends_with("/big.bin") {
                    big = Some((e.path.clone(), at));
                }
            }
            _ => {}
        }
    }
    for (field, b3, _) in p.manifest.blob_refs() {
        if !field.starts_with("files[") {
            std::fs::copy(blobs.join(&b3), dir.join("blobs").join(&b3)).unwrap();
        }
    }
    let replay = || {
        repro()
            .env("XDG_CACHE_HOME", aside.path().join("cache"))
            .args(["replay", "--json"])
            .arg(&dir)
            .timeout(HANG_GUARD)
            .output()
            .expect("repro runs")
    };
    let o = replay();
    assert_code(&o, 0);
    assert_eq!(json_of(&o)["reproduced"], 1, "{}", stdout(&o));

    let (entry, at) = big.expect("the pack holds big.bin");
    let mut data = std::fs::read(&at).unwrap();
    data[12345] ^= 1;
    std::fs::write(&at, &data).unwrap();
    let o = replay();
    assert_code(&o, 2);
    assert!(stderr(&o).contains(&entry) && stderr(&o).contains("not the manifest's"), "{}", stderr(&o));

    std::fs::remove_file(&at).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", &at).unwrap();
    let o = replay();
    assert_code(&o, 2);
    assert!(stderr(&o).contains(&entry), "{}", stderr(&o));
}
