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
        format!("postgresql://bgd@127.0.0.1:{}/bgd", self.port)
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
