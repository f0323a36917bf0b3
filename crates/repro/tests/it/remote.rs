//! `repro-remote` against a real Remote Execution API v2 engine: BuildGrid's server (CAS, ByteStream, Action
//! Cache, Capabilities; in memory) from the test venv (`.ci/python-packages`, installed by
//! scripts/install-deps.sh), on a free loopback port. A pack captured by `repro capture` is uploaded as an Action.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bazel_remote_apis::build::bazel::remote::execution::v2 as re;
use repro_remote::{action_of_pack, config, Remote};

use crate::common::*;

/// BuildGrid's `bgd` in the test venv, or a failure naming how CI installs it.
pub(crate) fn require_bgd() -> PathBuf {
    let venv = PathBuf::from(std::env::var("REPRO_PYVENV").unwrap_or_else(|_| "/var/cache/repro/pyvenv".into()));
    let bgd = venv.join("bin/bgd");
    assert!(
        bgd.exists(),
        "this test needs BuildGrid's `bgd` in the venv {} (buildgrid is pinned in .ci/python-packages: run \
         scripts/install-deps.sh; CI's .ci/run does)",
        venv.display()
    );
    bgd
}

/// The configuration this test (and docs/remote.md) uses: CAS, ByteStream and Action Cache on one in-memory LRU
/// storage, no authorization, instance `main`.
fn bgd_config(port: u16) -> String {
    format!(
        "server:\n  - !channel\n    address: \"127.0.0.1:{port}\"\n    insecure-mode: true\n\
         authorization:\n  method: none\n\
         storages:\n  - !lru-storage &main-storage\n    size: 256MB\n\
         caches:\n  - !lru-action-cache &main-action\n    storage: *main-storage\n    max-cached-refs: 1024\n    \
         allow-updates: true\n    cache-failed-actions: true\n\
         instances:\n  - name: main\n    services:\n      - !action-cache\n        cache: *main-action\n      \
         - !cas\n        storage: *main-storage\n      - !bytestream\n        storage: *main-storage\n"
    )
}

/// `bgd server start` on a free loopback port; killed when dropped.
pub(crate) struct BuildGrid {
    child: std::process::Child,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl BuildGrid {
    fn start() -> BuildGrid {
        BuildGrid::start_with(|port, _| bgd_config(port))
    }

    /// With the configuration `config(port, its directory)`.
    pub(crate) fn start_with(config: impl Fn(u16, &Path) -> String) -> BuildGrid {
        let bgd = require_bgd();
        let dir = tempfile::Builder::new().prefix("repro-bgd-").tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let cfg = dir.path().join("bgd.yml");
        std::fs::write(&cfg, config(port, dir.path())).unwrap();
        let log = dir.path().join("bgd.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = std::process::Command::new(&bgd)
            .args(["server", "start"])
            .arg(&cfg)
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("bgd starts");
        let mut g = BuildGrid { child, port, log, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(st) = g.child.try_wait().unwrap() {
                panic!("bgd exited ({st}) before serving:\n{}", g.log_text());
            }
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            assert!(Instant::now() < deadline, "bgd did not listen on {port} within 60 s:\n{}", g.log_text());
            std::thread::sleep(Duration::from_millis(100));
        }
        g
    }

    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub(crate) fn url(&self) -> String {
        format!("grpc://127.0.0.1:{}", self.port)
    }
}

impl Drop for BuildGrid {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Captures a failing run that reads a 6 MiB file (above BuildGrid's 4 MiB batch limit, so it goes by
/// ByteStream) into `aside/p.repro`.
pub(crate) fn capture(w: &Workdir, aside: &Path) -> PathBuf {
    let big: Vec<u8> = (0..6u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    std::fs::write(w.path().join("big.bin"), big).unwrap();
    let pack = aside.join("p.repro");
    let o = repro()
        .current_dir(w.path())
        .env("XDG_CACHE_HOME", aside.join("cache"))
        .args([
            "capture",
            "-o",
            pack.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "wc -c big.bin; echo remote-boom >&2; exit 3",
        ])
        .timeout(HANG_GUARD)
        .output()
        .expect("repro runs");
    assert_code(&o, 3);
    pack
}

#[test]
fn a_captured_pack_is_uploaded_and_its_action_result_round_trips() {
    let server = BuildGrid::start();
    let w = Workdir::new();
    let aside = tempfile::Builder::new().prefix("repro-remote-").tempdir().unwrap();
    let pack = capture(&w, aside.path());
    let a = action_of_pack(&pack, &aside.path().join("work1")).expect("the pack becomes an Action");
    let again = action_of_pack(&pack, &aside.path().join("work2")).unwrap();
    assert_eq!(a.action_digest, again.action_digest, "the same pack, the same Action: a cache hit");

    let ep = config::endpoint(&server.url(), "main", &["x-repro-test: 1".into()], None).unwrap();
    let remote = Remote::connect(&ep).unwrap_or_else(|e| panic!("{e}\n{}", server.log_text()));
    let caps = remote.capabilities().unwrap();
    let cache = caps.cache_capabilities.expect("cache capabilities");
    assert!(cache.digest_functions.contains(&(re::digest_function::Value::Sha256 as i32)));
    let limit = cache.max_batch_total_size_bytes;
    assert!(limit > 0 && limit < 6 << 20, "BuildGrid's batch limit {limit}");

    let all: Vec<re::Digest> = a.blobs.iter().map(|(d, _)| d.clone()).collect();
    // REAPI: the empty blob is always present (the `listed` entries are empty files).
    let nonempty = all.iter().filter(|d| d.size_bytes > 0).count();
    assert!(nonempty > 3 && nonempty < all.len(), "{nonempty} of {}", all.len());
    assert_eq!(remote.find_missing(&all).unwrap().len(), nonempty, "a fresh server has none but the empty blob");
    let t = Instant::now();
    let up = remote.upload(&a.blobs).unwrap_or_else(|e| panic!("{e}\n{}", server.log_text()));
    eprintln!("uploaded {up:?} in {:?}", t.elapsed());
    assert_eq!((up.blobs, up.present), (all.len(), all.len() - nonempty));
    assert!(up.streamed >= 1, "the 6 MiB blob goes by ByteStream: {up:?}");
    assert_eq!(up.batched + up.streamed, nonempty);
    assert!(remote.find_missing(&all).unwrap().is_empty(), "none missing after the upload");
    let second = remote.upload(&a.blobs).unwrap();
    assert_eq!((second.present, second.sent_bytes), (all.len(), 0), "nothing is sent twice");

    assert_eq!(remote.get_action_result(&a.action_digest).unwrap(), None, "not executed yet");
    let stderr_digest = repro_remote::digest::digest_of(b"remote-boom\n");
    let mut blobs = repro_remote::digest::Blobs::new();
    blobs.add_bytes(b"remote-boom\n".to_vec());
    remote.upload(&blobs).unwrap();
    let result = re::ActionResult { exit_code: 3, stderr_digest: Some(stderr_digest), ..Default::default() };
    remote.update_action_result(&a.action_digest, result.clone()).unwrap();
    let got = remote.get_action_result(&again.action_digest).unwrap().expect("the Action Cache has it");
    assert_eq!((got.exit_code, got.stderr_digest), (3, result.stderr_digest));

    // The CLI, its endpoint from repro.toml: the same Action digest, every blob already there, the cached result.
    let proj = tempfile::Builder::new().prefix("repro-remote-proj-").tempdir().unwrap();
    std::fs::write(
        proj.path().join("repro.toml"),
        format!("[remote]\nurl = \"{}\"\ninstance = \"main\"\n", server.url()),
    )
    .unwrap();
    let cli = |args: &[&str]| {
        repro()
            .current_dir(proj.path())
            .env("XDG_CACHE_HOME", aside.path().join("cache"))
            .args(args)
            .timeout(HANG_GUARD)
            .output()
            .expect("repro runs")
    };
    let o = cli(&["remote", "check"]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("SHA256") && stdout(&o).contains("instance 'main'"), "{}", stdout(&o));
    let o = cli(&["remote", "upload", pack.to_str().unwrap()]);
    assert_code(&o, 0);
    let d = &a.action_digest;
    assert_eq!(stdout(&o).trim(), format!("{}/{}", d.hash, d.size_bytes));
    assert!(stderr(&o).contains(&format!("{n} already there", n = all.len())), "{}", stderr(&o));
    assert!(stderr(&o).contains("holds a result for it (exit 3)"), "{}", stderr(&o));
    let o = cli(&["remote", "check", "--remote-instance", "no-such-instance"]);
    assert_code(&o, 125);
    assert!(stderr(&o).contains("GetCapabilities failed"), "{}", stderr(&o));
}

#[test]
fn an_unreachable_engine_is_a_clear_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let ep = config::endpoint(&format!("grpc://127.0.0.1:{port}"), "", &[], None).unwrap();
    let m = Remote::connect(&ep).err().expect("nothing listens there").to_string();
    assert!(m.contains(&format!("grpc://127.0.0.1:{port}")) && m.contains("cannot connect"), "{m}");
    let o = repro().args(["remote", "check", "--remote", &format!("grpc://127.0.0.1:{port}")]).output().unwrap();
    assert_code(&o, 125);
    let o = repro().args(["remote", "check", "--remote", "http://127.0.0.1:1"]).output().unwrap();
    assert_code(&o, 2);
    assert!(stderr(&o).contains("unknown scheme"), "{}", stderr(&o));
}

/// A CA and a server certificate for `localhost` and 127.0.0.1, made by openssl in `dir`: (ca.pem, server.key,
/// server.pem).
fn make_certs(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    require_cmd("openssl");
    let run = |args: &[&str]| {
        let o = std::process::Command::new("openssl").current_dir(dir).args(args).output().expect("openssl runs");
        assert!(o.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    };
    let subj_ca = ["-subj", "/CN=repro test CA"];
    run(&[
        &["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2"][..],
        &subj_ca,
    ]
    .concat());
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    std::fs::write(dir.join("ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n").unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext",
    ]);
    (dir.join("ca.pem"), dir.join("server.key"), dir.join("server.pem"))
}

#[test]
fn grpcs_checks_the_server_against_the_given_ca() {
    let certs = tempfile::Builder::new().prefix("repro-remote-tls-").tempdir().unwrap();
    let (ca, key, cert) = make_certs(certs.path());
    let server = BuildGrid::start_with(|port, _| {
        bgd_config(port).replace(
            "insecure-mode: true\n",
            &format!(
                "insecure-mode: false\n    credentials:\n      tls-server-key: {}\n      tls-server-cert: {}\n",
                key.display(),
                cert.display()
            ),
        )
    });
    let url = format!("grpcs://localhost:{}", server.port);
    let ep = config::endpoint(&url, "main", &[], Some(ca.clone())).unwrap();
    let remote = Remote::connect(&ep).unwrap_or_else(|e| panic!("{e}\n{}", server.log_text()));
    let mut blobs = repro_remote::digest::Blobs::new();
    let d = blobs.add_bytes(b"over TLS".to_vec());
    let big = blobs.add_bytes(vec![7u8; 5 << 20]);
    let up = remote.upload(&blobs).unwrap();
    assert_eq!((up.batched, up.streamed), (1, 1), "{up:?}");
    assert!(remote.find_missing(&[d, big]).unwrap().is_empty());

    let check = |args: &[&str]| {
        let mut a = vec!["remote", "check", "--remote", url.as_str(), "--remote-instance", "main"];
        a.extend_from_slice(args);
        repro().args(&a).timeout(HANG_GUARD).output().expect("repro runs")
    };
    let o = check(&["--remote-ca-cert", ca.to_str().unwrap()]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains(&format!("remote     {url} (instance 'main')")), "{}", stdout(&o));
    // Without the CA, the system's roots do not know the server: refused, saying why.
    let o = check(&[]);
    assert_code(&o, 125);
    assert!(stderr(&o).contains("UnknownIssuer"), "{}", stderr(&o));
    // Plain HTTP/2 to a TLS port fails too.
    let plain = format!("grpc://localhost:{}", server.port);
    let o = repro().args(["remote", "check", "--remote", &plain]).timeout(HANG_GUARD).output().unwrap();
    assert_code(&o, 125);
}

#[test]
fn headers_reach_a_server_that_requires_a_token() {
    const SECRET: &str = "repro-test-secret-of-at-least-32-bytes";
    let server = BuildGrid::start_with(|port, dir| {
        std::fs::write(dir.join("jwt.secret"), SECRET).unwrap();
        bgd_config(port).replace(
            "method: none\n",
            &format!("method: jwt\n  secret: {}\n  algorithm: hs256\n", dir.join("jwt.secret").display()),
        )
    });
    // A token made by PyJWT (BuildGrid's own dependency, in the same venv).
    let python = require_bgd().with_file_name("python");
    let o = std::process::Command::new(python)
        .args([
            "-c",
            "import jwt, sys, time; print(jwt.encode({'sub': 'repro', 'exp': int(time.time()) + 3600}, sys.argv[1], \
             algorithm='HS256'))",
            SECRET,
        ])
        .output()
        .expect("python runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let token = String::from_utf8(o.stdout).unwrap().trim().to_string();
    let header = format!("authorization: Bearer {token}");

    // Every call carries the header, the ByteStream stream too.
    let ep = config::endpoint(&server.url(), "main", std::slice::from_ref(&header), None).unwrap();
    let remote = Remote::connect(&ep).unwrap();
    let mut blobs = repro_remote::digest::Blobs::new();
    let small = blobs.add_bytes(b"with a token".to_vec());
    let big = blobs.add_bytes(vec![9u8; 5 << 20]);
    let up = remote.upload(&blobs).unwrap_or_else(|e| panic!("{e}\n{}", server.log_text()));
    assert_eq!((up.batched, up.streamed), (1, 1), "{up:?}");
    assert!(remote.find_missing(&[small, big]).unwrap().is_empty());

    let check = |env_header: Option<&str>| {
        let mut c = repro();
        c.args(["remote", "check", "--remote", &server.url(), "--remote-instance", "main"]);
        match env_header {
            Some(h) => c.env("REPRO_REMOTE_HEADER", h),
            None => c.env_remove("REPRO_REMOTE_HEADER"),
        };
        c.timeout(HANG_GUARD).output().expect("repro runs")
    };
    assert_code(&check(Some(&header)), 0);
    let o = check(None);
    assert_code(&o, 125);
    assert!(stderr(&o).contains("Unauthenticated"), "{}", stderr(&o));
    assert_code(&check(Some("authorization: Bearer not.a.token")), 125);
}
