//! What still varies from run to run on the host and is pinned, mediated or refused under repro: kernel-chosen
//! ports, the per-process /proc figures, file system figures, getrusage, RDRAND. Each case runs twice under
//! repro (outputs compared) and, where the point is that it varies natively, natively too.

use crate::common::*;

const PORTS: &str = r#"
import socket
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()
port = s.getsockname()[1]
c = socket.create_connection(('127.0.0.1', port)); a, _ = s.accept()
c.sendall(b'ping'); print(port, a.recv(4).decode(), c.getsockname()[1])
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('', 0))
v = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); v.sendto(b'x', ('127.0.0.1', u.getsockname()[1]))
print(u.getsockname()[1], u.recvfrom(1)[0].decode())
"#;

#[test]
fn kernel_chosen_ports_follow_the_seed() {
    require_cmd("python3");
    let w = Workdir::new();
    let run = |seed: &str| {
        let o = w.run(&["-q", "--seed", seed], &["python3", "-c", PORTS]);
        assert_code(&o, 0);
        stdout(&o)
    };
    let (a, b, c) = (run("0"), run("0"), run("1"));
    assert_eq!(a, b, "the same ports in two runs");
    assert_ne!(a, c, "another seed, other ports");
    assert!(a.lines().next().is_some_and(|l| l.contains(" ping ")), "the client and server talk: {a}");
    let port: u16 = a.split_whitespace().next().unwrap().parse().unwrap();
    assert!((32768..=60999).contains(&port), "an ephemeral port: {a}");
}

const PROC: &str = "cut -d' ' -f10-17,22,24,39 /proc/self/stat; grep -E 'ctxt|VmRSS|VmHWM|VmPeak' /proc/self/status; \
                    cat /proc/self/statm; grep bytes /proc/self/io; cat /proc/self/schedstat";

#[test]
fn proc_self_figures_are_pinned() {
    let w = Workdir::new();
    let a = w.sh(PROC);
    assert_code(&a, 0);
    let b = w.sh(PROC);
    assert_eq!(stdout(&a), stdout(&b));
    let out = stdout(&a);
    assert!(out.contains("voluntary_ctxt_switches:\t0"), "{out}");
    assert!(out.starts_with("0 0 0 0 0 0 0 0 "), "no faults, no CPU time: {out}");
    // Natively the start time (in ticks since boot) of two processes started apart differs.
    let native = || {
        std::process::Command::new("sh")
            .args(["-c", "sleep 0.02; cut -d' ' -f22 /proc/self/stat"])
            .output()
            .unwrap()
            .stdout
    };
    assert_ne!(native(), native());
}

const FS: &str = r#"
import os
for p in ['.', '/tmp', '/usr', '/']:
    s = os.statvfs(p); print(p, s.f_bsize, s.f_blocks, s.f_bfree, s.f_files, s.f_ffree, s.f_fsid)
open('big', 'wb').write(b'x' * 1_000_000)
s = os.statvfs('.'); print('after', s.f_blocks - s.f_bfree)
"#;

#[test]
fn file_system_figures_are_the_runs() {
    require_cmd("python3");
    let w = Workdir::new();
    let run = |disk: &str| {
        let o = w.run(&["-q", "--disk", disk], &["python3", "-c", FS]);
        assert_code(&o, 0);
        stdout(&o)
    };
    let (a, b) = (run("1G"), run("1G"));
    assert_eq!(a, b);
    assert!(a.lines().next().unwrap().starts_with(". 4096 262144 "), "the writable layer is the disk limit: {a}");
    let used: u64 = a.lines().last().unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(used >= 1_000_000 / 4096, "what the guest wrote shows: {a}");
    assert!(run("512M").starts_with(". 4096 131072 "));
    let df = w.sh("df / .");
    assert_code(&df, 0);
    assert_eq!(stdout(&df), stdout(&w.sh("df / .")));
}

#[test]
fn getrusage_is_pinned() {
    require_cmd("python3");
    let w = Workdir::new();
    let py = "import resource as r; print(r.getrusage(r.RUSAGE_SELF)); sum(range(10**6)); print(r.getrusage(r.RUSAGE_CHILDREN))";
    let a = w.run(&["-q"], &["python3", "-c", py]);
    assert_code(&a, 0);
    assert_eq!(stdout(&a), stdout(&w.run(&["-q"], &["python3", "-c", py])));
    assert!(stdout(&a).contains("ru_maxrss=0") && stdout(&a).contains("ru_nvcsw=0"), "{}", stdout(&a));
}

#[test]
fn rdrand_in_the_program_is_refused() {
    require_cmd("gcc");
    let w = Workdir::new();
    let src = w.path().join("rd.c");
    std::fs::write(
        &src,
        "#include <immintrin.h>\n#include <stdio.h>\nint main(){unsigned long long v=0; _rdrand64_step(&v); printf(\"%llu\\n\", v); return 0;}\n",
    )
    .unwrap();
    let gcc = std::process::Command::new("gcc")
        .args(["-O2", "-mrdrnd", "rd.c", "-o", "rd"])
        .current_dir(w.path())
        .output()
        .unwrap();
    assert!(gcc.status.success(), "{}", String::from_utf8_lossy(&gcc.stderr));
    let o = w.run(&[], &["./rd"]);
    assert_code(&o, 121);
    assert!(stderr(&o).contains("rd contains RDRAND at file offset 0x"), "{}", stderr(&o));
    // A program without it is not refused.
    assert_code(&w.run(&["-q"], &["true"]), 0);
    // The files found clean are cached in the state directory (true and its libraries): the next runs do not read
    // them again, and the program with RDRAND is refused again (never cached). Replaced by a clean program of
    // the same name, it is scanned afresh (its identity changed) and runs.
    let cache = std::fs::read_to_string(w.path().join(".repro/cache/rdrand-clean")).unwrap();
    assert!(cache.lines().count() >= 2, "{cache}");
    let o = w.run(&[], &["./rd"]);
    assert_code(&o, 121);
    assert!(stderr(&o).contains("rd contains RDRAND at file offset 0x"), "{}", stderr(&o));
    std::fs::write(&src, "int main(){return 0;}\n").unwrap();
    let gcc =
        std::process::Command::new("gcc").args(["-O2", "rd.c", "-o", "rd"]).current_dir(w.path()).output().unwrap();
    assert!(gcc.status.success(), "{}", String::from_utf8_lossy(&gcc.stderr));
    assert_code(&w.run(&["-q"], &["./rd"]), 0);
    let again = std::fs::read_to_string(w.path().join(".repro/cache/rdrand-clean")).unwrap();
    assert!(again.lines().count() > cache.lines().count(), "the clean rd was added: {again}");
}
