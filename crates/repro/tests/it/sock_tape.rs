//! `repro capture --network record` / `repro replay` of sockets used with plain read(2)/write(2) and
//! readv(2)/writev(2): bash's /dev/tcp (a socket dup'ed onto fds 0, 1 and 3 and inherited by a child) and
//! Python's os.read/os.write/os.readv/os.writev, against a loopback HTTP server that is stopped before the
//! replay.

use std::fs;
use std::path::PathBuf;
use std::process::Output;

use crate::common::*;

/// A working directory, plus a directory aside for packs and the cache.
struct Env {
    w: Workdir,
    aside: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        Env { w: Workdir::new(), aside: tempfile::Builder::new().prefix("repro-sock-").tempdir().unwrap() }
    }
    fn pack(&self) -> PathBuf {
        self.aside.path().join("net.repro")
    }
    fn cmd(&self, args: &[&str]) -> Output {
        let mut c = repro();
        c.current_dir(self.w.path()).env("XDG_CACHE_HOME", self.aside.path().join("cache")).args(args);
        c.output().expect("repro runs")
    }
    fn capture(&self, cmd: &[&str]) -> Output {
        let p = self.pack();
        let mut args = vec!["capture", "-o", p.to_str().unwrap(), "--network", "record", "--"];
        args.extend_from_slice(cmd);
        self.cmd(&args)
    }
    fn replay(&self, opts: &[&str]) -> Output {
        let p = self.pack();
        let mut args = vec!["replay", p.to_str().unwrap()];
        args.extend_from_slice(opts);
        self.cmd(&args)
    }
    fn write(&self, name: &str, content: &str) {
        fs::write(self.w.path().join(name), content).unwrap();
    }
    /// The pack's network tape, as `repro unpack` writes it.
    fn tape(&self) -> serde_json::Value {
        let dir = self.aside.path().join("unpacked");
        assert_code(&self.cmd(&["unpack", self.pack().to_str().unwrap(), dir.to_str().unwrap()]), 0);
        serde_json::from_slice(&fs::read(dir.join("tapes/network.json")).unwrap()).unwrap()
    }
}

fn site() -> tempfile::TempDir {
    let site = tempfile::tempdir().unwrap();
    fs::write(site.path().join("a.txt"), "alpha\n").unwrap();
    fs::write(site.path().join("b.txt"), "beta\n").unwrap();
    site
}

/// bash's /dev/tcp: the socket is moved onto fd 3; `printf >&3` writes it as fd 1 of the shell, `read -u 3`
/// reads fd 3 a byte at a time, and `cat <&3` reads it as fd 0 of a forked child. The document comes from
/// $DOC, so a replay with another DOC sends other bytes. It fails after printing the response.
const DEV_TCP: &str = r#"exec 3<>/dev/tcp/127.0.0.1/$1
printf 'GET /%s HTTP/1.0\r\n\r\n' "${DOC:-a.txt}" >&3
read -r -u 3 status
cat <&3
echo "status ${status%$'\r'}" >&2
exit 1
"#;

fn ops(tape: &serde_json::Value) -> Vec<String> {
    tape["events"].as_array().unwrap().iter().map(|e| e["op"].as_str().unwrap().to_string()).collect()
}

#[test]
fn bash_dev_tcp_is_taped_and_replayed_without_the_server() {
    let e = Env::new();
    let site = site();
    e.write("get.sh", DEV_TCP);
    let server = HttpServer::start(site.path());
    let o = e.capture(&["bash", "get.sh", &server.port.to_string()]);
    assert_code(&o, 1);
    assert!(stdout(&o).contains("alpha"), "{}{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("status HTTP/1.0 200 OK"), "{}", stderr(&o));
    server.stop();

    // The request went out with write(2) and the answer came in with read(2): both are on the tape.
    let tape = e.tape();
    let ops = ops(&tape);
    assert_eq!(&ops[..3], ["socket", "connect", "write"], "{tape}");
    let events = tape["events"].as_array().unwrap();
    let written: String = events.iter().filter(|e| e["op"] == "write").map(|e| e["data"].as_str().unwrap()).collect();
    assert_eq!(written, "GET /a.txt HTTP/1.0\r\n\r\n", "{tape}");
    // `read -u 3` reads one byte at a time up to the end of the status line.
    let reads: Vec<&serde_json::Value> = events.iter().filter(|e| e["op"] == "read").collect();
    assert!(reads.len() > "HTTP/1.0 200 OK\r\n".len(), "{tape}");
    assert_eq!(reads[0]["data"], "H", "{tape}");
    assert_eq!(reads.last().unwrap()["result"], 0, "cat read to the end: {tape}");

    // Replayed with no network and no server: the answers come from the tape.
    let o = e.replay(&[]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("alpha"), "{}", stdout(&o));
    assert!(stderr(&o).contains("[repro] reproduced 1/1: exit 1; stderr: status HTTP/1.0 200 OK"), "{}", stderr(&o));

    // Another document: the first write differs from the recording.
    let o = e.replay(&["--env", "DOC=b.txt"]);
    assert_code(&o, 123);
    let err = stderr(&o);
    assert!(err.contains("[repro] replay diverged from the recording: the guest wrote"), "{err}");
    assert!(err.contains("socket 0 (call 3)") && err.contains("b.txt") && err.contains("a.txt"), "{err}");
    assert!(!stdout(&o).contains("alpha"), "the guest was stopped before it read anything: {}", stdout(&o));

    // A script that reads the socket more than the recording did runs past the end of the tape.
    e.write("get.sh", &DEV_TCP.replace("cat <&3", "cat <&3; cat <&3"));
    let o = e.replay(&["--with", "get.sh"]);
    assert_code(&o, 123);
    assert!(
        stderr(&o).contains("the guest called read on socket 0 (call ") && stderr(&o).contains("not on the tape"),
        "{}",
        stderr(&o)
    );
}

/// os.writev/os.readv/os.write/os.read on a socket's descriptor.
const VECTORED: &str = r#"import os, socket, sys
s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))
fd = s.fileno()
os.writev(fd, [b'GET /b.txt', b' HTTP/1.0\r\n'])
os.write(fd, b'\r\n')
head = bytearray(9)
n = os.readv(fd, [head])
rest = b''
while True:
    chunk = os.read(fd, 4096)
    if not chunk:
        break
    rest += chunk
print(bytes(head[:n]).decode() + rest.decode())
raise SystemExit('body ' + rest.decode().split('\r\n\r\n', 1)[1].strip())
"#;

#[test]
fn readv_and_writev_on_a_socket_are_taped_and_replayed() {
    let e = Env::new();
    let site = site();
    e.write("client.py", VECTORED);
    let server = HttpServer::start(site.path());
    let o = e.capture(&["python3", "client.py", &server.port.to_string()]);
    assert_code(&o, 1);
    assert!(stderr(&o).contains("body beta"), "{}{}", stdout(&o), stderr(&o));
    server.stop();

    let tape = e.tape();
    let events = tape["events"].as_array().unwrap();
    let writes: Vec<&str> = events.iter().filter(|e| e["op"] == "write").map(|e| e["data"].as_str().unwrap()).collect();
    assert_eq!(writes, ["GET /b.txt HTTP/1.0\r\n", "\r\n"], "writev is one write of both buffers: {tape}");
    let first_read = events.iter().find(|e| e["op"] == "read").unwrap();
    assert_eq!(first_read["data"], "HTTP/1.0 ", "readv into a 9-byte buffer: {tape}");

    let o = e.replay(&["--runs", "2"]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("HTTP/1.0 200 OK"), "{}", stdout(&o));
    assert!(stderr(&o).contains("[repro] reproduced 2/2: exit 1; stderr: body beta"), "{}", stderr(&o));

    // writev of other bytes diverges at the socket's second call.
    e.write("client.py", &VECTORED.replace("b' HTTP/1.0", "b' HTTP/1.1"));
    let o = e.replay(&["--with", "client.py"]);
    assert_code(&o, 123);
    let err = stderr(&o);
    assert!(
        err.contains("the guest wrote 21 bytes to socket 0 (call 3) that differ from the recording's 21 at byte 18"),
        "{err}"
    );
}

/// socket.sendfile: the kernel copies a file to the socket, and there is no buffer of the guest's to tape.
const SENDFILE: &str = r#"import socket, sys
s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))
with open('req.txt', 'rb') as f:
    s.sendfile(f)
print(s.makefile('rb').readline().decode().strip())
raise SystemExit(1)
"#;

#[test]
fn sendfile_on_a_taped_socket_is_reported_not_replayed_from_nothing() {
    let e = Env::new();
    let site = site();
    e.write("send.py", SENDFILE);
    e.write("req.txt", "GET /a.txt HTTP/1.0\r\n\r\n");
    let server = HttpServer::start(site.path());
    let o = e.capture(&["python3", "send.py", &server.port.to_string()]);
    server.stop();
    // Recording: the call runs (the answer arrives), and the run says what it could not tape.
    assert!(stdout(&o).contains("HTTP/1.0 200 OK"), "{}", stdout(&o));
    assert_code(&o, 121);
    assert!(
        stderr(&o).contains("[repro] determinism not enforced: sendfile on a socket taped by --network record"),
        "{}",
        stderr(&o)
    );
    // Replaying: the guest is stopped at the sendfile instead of waiting on a socket nobody answers.
    let o = e.replay(&[]);
    assert_code(&o, 123);
    assert!(
        stderr(&o).contains("the guest called sendfile on socket 0 (call 3), which is not on the tape"),
        "{}",
        stderr(&o)
    );
}

/// A server and a client in one guest, one thread: the server binds port 0 and asks the kernel which port it got.
const SELF_TALK: &str = r#"import socket
srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen(1)
port = srv.getsockname()[1]
c = socket.create_connection(('127.0.0.1', port))
s, _ = srv.accept()
c.sendall(b'ping')
got = s.recv(4)
s.sendall(got.upper())
print(c.recv(4).decode())
raise SystemExit('answer ' + got.decode())
"#;

#[test]
fn a_guest_talking_to_itself_is_taped_with_its_port_and_replayed() {
    let e = Env::new();
    e.write("self.py", SELF_TALK);
    let o = e.capture(&["python3", "self.py"]);
    assert_code(&o, 1);
    assert_eq!(stdout(&o), "PING\n");
    // The port the kernel chose is on the tape: the replay's client connects where the recording's did.
    assert!(ops(&e.tape()).contains(&"sockname".to_string()), "{}", e.tape());
    let o = e.replay(&["--runs", "2"]);
    assert_code(&o, 0);
    assert!(stderr(&o).contains("[repro] reproduced 2/2: exit 1; stderr: answer ping"), "{}", stderr(&o));
}

/// A server thread and a client in one guest: the server's accept and the client's read wait for each other.
const THREADED_SELF_TALK: &str = r#"import http.server, sys, threading, urllib.request
srv = http.server.HTTPServer(('127.0.0.1', 0), http.server.SimpleHTTPRequestHandler)
threading.Thread(target=srv.serve_forever, daemon=True).start()
body = urllib.request.urlopen(f'http://127.0.0.1:{srv.server_address[1]}/self.py', timeout=5).read()
print('got', len(body), 'bytes')
sys.exit(1)
"#;

#[test]
fn a_recording_does_not_wait_on_one_guest_thread_while_another_must_answer() {
    let e = Env::new();
    e.write("self.py", THREADED_SELF_TALK);
    let p = e.pack();
    // Under `timeout`: a recording that made the blocking accept on the supervisor's only thread never ended
    // (`timeout` would end it with 124, not the guest's 1).
    let mut c = std::process::Command::new("timeout");
    c.current_dir(e.w.path())
        .env("XDG_CACHE_HOME", e.aside.path().join("cache"))
        .args(["60", repro_path().to_str().unwrap()]);
    c.args(["capture", "-o", p.to_str().unwrap(), "--network", "record", "--", "python3", "self.py"]);
    let o = c.output().unwrap();
    assert_code(&o, 1);
    assert_eq!(stdout(&o), format!("got {} bytes\n", THREADED_SELF_TALK.len()));
    let tape = e.tape();
    let ops = ops(&tape);
    assert!(ops.contains(&"accept".to_string()) && ops.contains(&"read".to_string()), "{tape}");
}
