//! Host daemons: a world-connectable UNIX socket on the host's read-only tree (outside /run, which is emptied)
//! is not reachable from the guest; sockets the guest makes itself work.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::common::{require_cmd, stderr, stdout};
use crate::harness::*;

/// The guest's attempt: connect to the host's socket (argv[1]), then to a socket of its own in /tmp and in its
/// working directory (a server and a client in one process).
const GUEST: &str = r#"
import socket, os, sys
def attempt(p):
    c = socket.socket(socket.AF_UNIX)
    try:
        c.connect(p)
        print(p, "CONNECTED", c.recv(16) if p == sys.argv[1] else b"", flush=True)
    except OSError as e:
        print(p, "refused", e.errno, flush=True)
    c.close()
attempt(sys.argv[1])
for p in ["/tmp/own.sock", "own.sock"]:
    s = socket.socket(socket.AF_UNIX)
    s.bind(p)
    s.listen(1)
    attempt(p)
    s.close()
    os.unlink(p)
"#;

/// A host daemon: answers `HOST` on every connection until dropped; counts them.
struct Daemon {
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Daemon {
    fn listen(path: &Path) -> Daemon {
        let l = UnixListener::bind(path).expect("bind the host's socket");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).expect("chmod 0666");
        l.set_nonblocking(true).expect("nonblocking");
        let (accepted, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let (a, s) = (accepted.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((mut c, _)) => {
                        a.fetch_add(1, Ordering::Relaxed);
                        let _ = c.write_all(b"HOST");
                    }
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
                }
            }
        });
        Daemon { accepted, stop }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A 0666 socket in a 0755 directory of a small tmpfs under /var/tmp: the supervised guest (root, and of an
/// unprivileged caller) gets EACCES and the daemon sees no connection; its own sockets in /tmp and its working
/// directory connect. Without the supervisor nothing refuses it: the run must say so.
#[test]
fn a_host_daemons_socket_outside_run_is_not_reachable() {
    require_cmd("python3");
    let fs = Tmpfs::mount_in(Path::new("/var/tmp"), "1m", 64);
    let dir = fs.path().join("daemon");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let sock = dir.join("d.sock");
    let daemon = Daemon::listen(&sock);
    let host = sock.to_str().unwrap();
    for caller in CALLERS {
        for supervisor in [&[][..], &["--no-supervisor"][..]] {
            let d = workdir(caller);
            std::fs::write(d.path().join("attempt.py"), GUEST).unwrap();
            let script = format!("python3 attempt.py {host}");
            let reached_before = daemon.accepted.load(Ordering::Relaxed);
            let o = sh_as(caller, d.path(), supervisor, &script);
            let (out, err) = (stdout(&o), stderr(&o));
            let at = format!("{caller:?} {supervisor:?}");
            assert!(out.contains("/tmp/own.sock CONNECTED"), "{at}: {out}{err}");
            assert!(out.lines().any(|l| l.starts_with("own.sock CONNECTED")), "{at}: {out}{err}");
            if supervisor.is_empty() {
                assert!(out.contains(&format!("{host} refused {}", libc_eacces())), "{at}: {out}{err}");
                let reached = daemon.accepted.load(Ordering::Relaxed) - reached_before;
                assert_eq!(reached, 0, "{at}: the host daemon was reached");
            } else {
                assert!(
                    err.contains("UNIX socket on the read-only host tree") && err.contains("not refused"),
                    "{at}: {err}"
                );
            }
        }
    }
}

fn libc_eacces() -> i32 {
    13
}
