//! Host daemons: a world-connectable UNIX socket on the host's read-only tree (outside /run, which is emptied)
//! is not reachable from the guest, by connect or by a datagram, with or without the supervisor; sockets the
//! guest makes itself work.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::common::{require_cmd, stderr, stdout};
use crate::harness::*;

/// The guest's attempt: connect to the host's socket (argv[1]), send datagrams to the host's datagram socket
/// (argv[2]) with sendto and sendmsg, then connect and send to sockets of its own in /tmp, /dev/shm and its
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
def send(p, how):
    c = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        if how == "sendto":
            c.sendto(b"guest", p)
        else:
            c.sendmsg([b"guest"], [], 0, p)
        print(p, how, "SENT", flush=True)
    except OSError as e:
        print(p, how, "refused", e.errno, flush=True)
    c.close()
attempt(sys.argv[1])
send(sys.argv[2], "sendto")
send(sys.argv[2], "sendmsg")
for p in ["/tmp/own.sock", "/dev/shm/own.sock", "own.sock"]:
    s = socket.socket(socket.AF_UNIX)
    s.bind(p)
    s.listen(1)
    attempt(p)
    s.close()
    os.unlink(p)
    d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    d.bind(p)
    for how in ["sendto", "sendmsg"]:
        send(p, how)
        print(p, how, "RECEIVED" if d.recv(16) == b"guest" else "LOST", flush=True)
    d.close()
    os.unlink(p)
"#;

/// A host datagram socket (0666): counts what it receives until dropped.
struct DatagramDaemon {
    received: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl DatagramDaemon {
    fn bind(path: &Path) -> DatagramDaemon {
        let s = UnixDatagram::bind(path).expect("bind the host's datagram socket");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).expect("chmod 0666");
        s.set_nonblocking(true).expect("nonblocking");
        let (received, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let (r, st) = (received.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut b = [0u8; 64];
            while !st.load(Ordering::Relaxed) {
                match s.recv(&mut b) {
                    Ok(_) => {
                        r.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
                }
            }
        });
        DatagramDaemon { received, stop }
    }
}

impl Drop for DatagramDaemon {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A host daemon: answers `HOST` on every connection until dropped; counts them.
pub(crate) struct Daemon {
    pub(crate) accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Daemon {
    pub(crate) fn listen(path: &Path) -> Daemon {
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

/// A 0666 stream socket and a 0666 datagram socket in a 0755 directory of a small tmpfs under /var/tmp: the guest
/// (root, and of an unprivileged caller; supervised and under `--no-supervisor`, where the init's host-socket guard
/// refuses) gets EACCES for connect, sendto and sendmsg, and the daemons see no connection and no datagram; its own
/// sockets in /tmp, /dev/shm and its working directory connect and receive.
#[test]
fn a_host_daemons_socket_outside_run_is_not_reachable() {
    require_cmd("python3");
    let fs = Tmpfs::mount_in(Path::new("/var/tmp"), "1m", 64);
    let dir = fs.path().join("daemon");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let sock = dir.join("d.sock");
    let daemon = Daemon::listen(&sock);
    let dgram = dir.join("g.sock");
    let datagrams = DatagramDaemon::bind(&dgram);
    let (host, host_dgram) = (sock.to_str().unwrap(), dgram.to_str().unwrap());
    for caller in CALLERS {
        for supervisor in [&[][..], &["--no-supervisor"][..]] {
            let d = workdir(caller);
            std::fs::write(d.path().join("attempt.py"), GUEST).unwrap();
            let script = format!("python3 attempt.py {host} {host_dgram}");
            let reached_before = daemon.accepted.load(Ordering::Relaxed);
            let received_before = datagrams.received.load(Ordering::Relaxed);
            let o = sh_as(caller, d.path(), supervisor, &script);
            let (out, err) = (stdout(&o), stderr(&o));
            let at = format!("{caller:?} {supervisor:?}");
            for own in ["/tmp/own.sock", "/dev/shm/own.sock", "own.sock"] {
                assert!(out.lines().any(|l| l.starts_with(&format!("{own} CONNECTED"))), "{at}: {out}{err}");
                for how in ["sendto", "sendmsg"] {
                    assert!(out.contains(&format!("{own} {how} RECEIVED")), "{at}: {out}{err}");
                }
            }
            assert!(out.contains(&format!("{host} refused {}", libc_eacces())), "{at}: {out}{err}");
            for how in ["sendto", "sendmsg"] {
                assert!(out.contains(&format!("{host_dgram} {how} refused {}", libc_eacces())), "{at}: {out}{err}");
            }
            // What the guest sent has had time to arrive: the python process has exited.
            std::thread::sleep(std::time::Duration::from_millis(50));
            let reached = daemon.accepted.load(Ordering::Relaxed) - reached_before;
            assert_eq!(reached, 0, "{at}: the host daemon was reached");
            let received = datagrams.received.load(Ordering::Relaxed) - received_before;
            assert_eq!(received, 0, "{at}: the host's datagram socket received");
        }
    }
}

fn libc_eacces() -> i32 {
    13
}

/// The guest's blocked connect: a listener of its own with a full backlog, then a blocking connect to it that the
/// guest's own SIGALRM (a handler that raises) must interrupt, while a second thread connects elsewhere.
const BLOCKED: &str = r#"
import signal, socket, threading, time
full = socket.socket(socket.AF_UNIX)
full.bind("full.sock")
full.listen(0)
fill = []
while len(fill) < 16:
    c = socket.socket(socket.AF_UNIX)
    c.setblocking(False)
    try:
        c.connect("full.sock")
    except BlockingIOError:
        break
    fill.append(c)
other = socket.socket(socket.AF_UNIX)
other.bind("other.sock")
other.listen(4)
done = []
def connect_other():
    time.sleep(0.3)
    c = socket.socket(socket.AF_UNIX)
    c.connect("other.sock")
    done.append(1)
threading.Thread(target=connect_other, daemon=True).start()
def alarm(*a):
    raise TimeoutError
signal.signal(signal.SIGALRM, alarm)
signal.setitimer(signal.ITIMER_REAL, 2.0)
b = socket.socket(socket.AF_UNIX)
try:
    b.connect("full.sock")
    print("CONNECTED", flush=True)
except TimeoutError:
    print("INTERRUPTED", "OTHER" if done else "NO-OTHER", flush=True)
"#;

/// A connect the supervisor (or the guard) makes for the guest and that blocks on a full backlog ends when the
/// guest's own signal arrives (its handler runs, as natively), and another thread's connect goes through
/// meanwhile. Before, with the filter's WAIT_KILLABLE_RECV, the connect outwaited the guest's alarm forever (the
/// run hung until `timeout`).
#[test]
fn a_blocked_connect_is_interrupted_by_the_guests_own_signal() {
    require_cmd("python3");
    for caller in CALLERS {
        for supervisor in [&[][..], &["--no-supervisor"][..]] {
            let d = workdir(caller);
            std::fs::write(d.path().join("blocked.py"), BLOCKED).unwrap();
            let o = sh_as(caller, d.path(), supervisor, "python3 blocked.py");
            let (out, err) = (stdout(&o), stderr(&o));
            assert!(out.contains("INTERRUPTED OTHER"), "{caller:?} {supervisor:?}: {:?}\n{out}{err}", o.status);
        }
    }
}
