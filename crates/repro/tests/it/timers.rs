//! Timers in logical time: alarm, setitimer(ITIMER_REAL), POSIX timers (coreutils `timeout`) and timerfds fire
//! when the logical clock reaches them, with no wall-clock waiting and no refusal. Every program runs twice
//! under a hang guard; both runs must print the same (expected) output. No wall-clock thresholds.

use std::process::Stdio;

use crate::common::*;

/// `repro run -q -- cmd` in `w`, bounded by the hang guard.
fn run_bounded(w: &Workdir, cmd: &[&str]) -> std::process::Output {
    let child = std::process::Command::new(repro_path())
        .current_dir(w.path())
        .args(["run", "-q", "--"])
        .args(cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("repro starts");
    wait_bounded(child, &cmd.join(" "))
}

/// Runs `cmd` twice; both end with `code` and print `expected`.
#[track_caller]
fn twice(cmd: &[&str], code: i32, expected: &str) {
    let w = Workdir::new();
    for _ in 0..2 {
        let o = run_bounded(&w, cmd);
        assert_code(&o, code);
        assert_eq!(stdout(&o), expected, "stderr:\n{}", stderr(&o));
        assert!(!stderr(&o).contains("not enforced"), "{}", stderr(&o));
    }
}

#[test]
fn timeout_ends_its_command_after_logical_seconds() {
    require_cmd("timeout");
    twice(&["timeout", "2", "sleep", "10"], 124, "");
    twice(&["timeout", "10", "sleep", "2"], 0, "");
    // The clock after each: the 2 s of the timeout, then the 2 s of the sleep (the epoch is 2025-01-01 here; the
    // microseconds are the clock's steps on reads).
    twice(
        &["sh", "-c", "date +%s; timeout 2 sleep 10; echo $?; date +%s; timeout 10 sleep 2; echo $?; date +%s"],
        0,
        "1735689600\n124\n1735689602\n0\n1735689604\n",
    );
}

#[test]
fn setitimer_delivers_periodic_sigalrms() {
    require_cmd("python3");
    let pause = "import signal, time\nn = 0\ndef h(s, f):\n    global n\n    n += 1\n\
                 signal.signal(signal.SIGALRM, h)\nt0 = time.monotonic()\n\
                 signal.setitimer(signal.ITIMER_REAL, 0.05, 0.05)\nwhile n < 5:\n    signal.pause()\n\
                 print(n, round(time.monotonic() - t0, 3), [round(x, 3) for x in signal.getitimer(signal.ITIMER_REAL)])\n";
    twice(&["python3", "-c", pause], 0, "5 0.25 [0.05, 0.05]\n");
    // A sleep interrupted by each SIGALRM goes on with the time left (PEP 475): 20 in one second.
    let sleep = "import signal, time\nn = 0\ndef h(s, f):\n    global n\n    n += 1\n\
                 signal.signal(signal.SIGALRM, h)\nt0 = time.monotonic()\n\
                 signal.setitimer(signal.ITIMER_REAL, 0.05, 0.05)\ntime.sleep(1)\n\
                 signal.setitimer(signal.ITIMER_REAL, 0)\nprint(n, round(time.monotonic() - t0, 3))\n";
    twice(&["python3", "-c", sleep], 0, "20 1.0\n");
}

#[test]
fn alarm_interrupts_a_sleep() {
    require_cmd("python3");
    let prog = "import signal, time\nclass Alarm(Exception): pass\ndef h(s, f): raise Alarm()\n\
                signal.signal(signal.SIGALRM, h)\nt0 = time.time()\nsignal.alarm(1)\n\
                try:\n    time.sleep(5)\n    print('not interrupted')\nexcept Alarm:\n\
                \x20   print('interrupted after', round(time.time() - t0, 3))\nprint(signal.alarm(0))\n";
    twice(&["python3", "-c", prog], 0, "interrupted after 1.0\n0\n");
    // An alarm nobody catches ends the process with SIGALRM, as natively (the shell reports 128 + 14).
    twice(&["sh", "-c", "python3 -c 'import signal, time; signal.alarm(3); time.sleep(60)'; echo $?"], 0, "142\n");
}

#[test]
fn a_timerfd_counts_expiries_in_logical_time() {
    require_cmd("python3");
    let prog = r#"
import ctypes, os, select, struct, time
libc = ctypes.CDLL(None, use_errno=True)
class ts(ctypes.Structure): _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]
class its(ctypes.Structure): _fields_ = [("interval", ts), ("value", ts)]
fd = libc.timerfd_create(1, 0)
t0 = time.monotonic()
assert libc.timerfd_settime(fd, 0, ctypes.byref(its(ts(0, 100_000_000), ts(0, 250_000_000))), None) == 0
cur = its()
libc.timerfd_gettime(fd, ctypes.byref(cur))
print("armed", cur.value.ns, cur.interval.ns)
print("first", struct.unpack("Q", os.read(fd, 8))[0], round(time.monotonic() - t0, 3))
ep = select.epoll(); ep.register(fd, select.EPOLLIN)
got = 0
while got < 5:
    for _ in ep.poll(10):
        got += struct.unpack("Q", os.read(fd, 8))[0]
print("five more", round(time.monotonic() - t0, 3))
time.sleep(0.35)
print("during a sleep", struct.unpack("Q", os.read(fd, 8))[0])
"#;
    twice(&["python3", "-c", prog], 0, "armed 250000000 100000000\nfirst 1 0.25\nfive more 0.75\nduring a sleep 3\n");
}

#[test]
fn a_timer_due_during_a_busy_clock_loop_fires_and_is_reported() {
    require_cmd("python3");
    // No mediated call after the timer is armed: the loop reads the clock in-process. The timer still fires
    // (no hang), but where the signal lands follows the host's timing, and the run says so.
    let prog = "import signal, time\nn = 0\ndef h(s, f):\n    global n\n    n += 1\n\
                signal.signal(signal.SIGALRM, h)\nsignal.setitimer(signal.ITIMER_REAL, 0.05)\n\
                while n < 1:\n    time.time()\nprint('fired')\n";
    let w = Workdir::new();
    let o = run_bounded(&w, &["python3", "-c", prog]);
    assert_code(&o, 121);
    assert_eq!(stdout(&o), "fired\n");
    assert!(stderr(&o).contains("a timer fell due while the guest ran without a mediated call"), "{}", stderr(&o));
}

#[test]
fn a_sigev_thread_timer_calls_back_with_its_value() {
    require_cmd("python3");
    // glibc's SIGEV_THREAD: its helper thread takes the timer's signal (SI_TIMER, si_value) and runs the
    // callback on a new thread; the main thread waits without a timeout, so the clock jumps to each expiry.
    let prog = r#"
import ctypes, threading, time
libc = ctypes.CDLL(None, use_errno=True)
CB = ctypes.CFUNCTYPE(None, ctypes.c_uint64)
got = []
done = threading.Event()
def cb(v):
    got.append(v)
    if len(got) == 3:
        done.set()
cbp = CB(cb)
class sigevent(ctypes.Structure):
    _fields_ = [("value", ctypes.c_uint64), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                ("fn", ctypes.c_void_p), ("attr", ctypes.c_void_p), ("pad", ctypes.c_char * 32)]
class ts(ctypes.Structure): _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]
class its(ctypes.Structure): _fields_ = [("interval", ts), ("value", ts)]
ev = sigevent(value=42, notify=2, fn=ctypes.cast(cbp, ctypes.c_void_p))
tid = ctypes.c_void_p()
assert libc.timer_create(1, ctypes.byref(ev), ctypes.byref(tid)) == 0, ctypes.get_errno()
t0 = time.monotonic()
assert libc.timer_settime(tid, 0, ctypes.byref(its(ts(0, 200_000_000), ts(0, 300_000_000))), None) == 0
done.wait()
libc.timer_delete(tid)
print("callbacks", got, round(time.monotonic() - t0, 2))
"#;
    twice(&["python3", "-c", prog], 0, "callbacks [42, 42, 42] 0.7\n");
}

#[test]
fn timeout_of_a_cpu_bound_command_ends_and_is_reported() {
    require_cmds(&["timeout", "python3"]);
    // The child neither reads the clock nor makes a mediated call: logical time stands still, so its timeout
    // cannot come in logical time. It comes after seconds of the host's time instead of never, and the run
    // says so.
    let spin = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: pass\n";
    let w = Workdir::new();
    let o = run_bounded(&w, &["timeout", "-k", "1", "1", "python3", "-c", spin]);
    assert_code(&o, 121);
    assert!(stderr(&o).contains("a timer fired while the guest ran without reading the clock"), "{}", stderr(&o));
}
