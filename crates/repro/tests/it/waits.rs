//! Waits, sleeps and event loops in logical time, end to end: asyncio, threading and node event loops over the
//! guest's own pipes and sockets neither hang nor wait in real time, come out identical run after run, and a
//! guest whose tasks all wait on one another is stopped by the watchdog (exit 120). Every run is under
//! [`HANG_GUARD`]: a regression shows as a failed guard, never as a hung suite (no wall-clock thresholds).

use crate::common::*;

/// `repro run -q --verify -- CMD` in `w` (two runs, compared), under the hang guard.
///
/// Guests that print the clock while another process runs print it in milliseconds: each clock read moves the
/// one logical clock by a microsecond, and how the reads of two processes running at once interleave is up to
/// the host's scheduler. Real time leaking in (a wait that ran in real time, a sleep repeated as often as a
/// child takes) shows in the milliseconds.
fn verified(w: &Workdir, cmd: &[&str]) -> std::process::Output {
    repro().current_dir(w.path()).args(["run", "-q", "--verify", "--"]).args(cmd).timeout(HANG_GUARD).output().unwrap()
}

/// The logical CLOCK_MONOTONIC a guest printed last (it starts at 10,000 s).
fn last_monotonic(out: &str) -> f64 {
    out.split_whitespace().last().and_then(|t| t.parse().ok()).unwrap_or_else(|| panic!("no time in {out:?}"))
}

#[test]
fn asyncio_sleep_takes_logical_time_only() {
    // The loop's self-pipe is a socketpair: only the guest can feed it.
    require_cmd("python3");
    let w = Workdir::new();
    let o = verified(
        &w,
        &["python3", "-c", "import asyncio, time; asyncio.run(asyncio.sleep(0.05)); print(time.monotonic())"],
    );
    assert_code(&o, 0);
    let t = last_monotonic(&stdout(&o));
    assert!((10_000.05..10_001.0).contains(&t), "the guest slept 50 ms of logical time: {t}");
}

#[test]
fn asyncio_server_and_client_on_loopback() {
    require_cmd("python3");
    let w = Workdir::new();
    let script = r#"
import asyncio, time
async def main():
    async def handle(r, w):
        line = await r.readline()
        await asyncio.sleep(0.2)
        w.write(line.upper()); await w.drain(); w.close()
    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    r, w = await asyncio.open_connection("127.0.0.1", srv.sockets[0].getsockname()[1])
    w.write(b"ping\n"); await w.drain()
    print((await asyncio.wait_for(r.readline(), 5)).decode().strip())
    w.close(); srv.close(); await srv.wait_closed()
asyncio.run(main())
print(round(time.monotonic(), 3))
"#;
    std::fs::write(w.path().join("srv.py"), script).unwrap();
    let o = verified(&w, &["python3", "srv.py"]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.starts_with("PING\n"), "{out}");
    assert!(last_monotonic(&out) >= 10_000.2, "{out}");
}

#[test]
fn event_wait_after_popen_times_out_in_logical_time() {
    // FUTEX_WAIT_BITSET with an absolute CLOCK_MONOTONIC deadline, while a child may still run.
    require_cmd("python3");
    let w = Workdir::new();
    let script = "import subprocess, threading, time\n\
                  subprocess.Popen(['sleep', '0'])\n\
                  print(threading.Event().wait(0.5), round(time.monotonic(), 3))\n";
    let o = verified(&w, &["python3", "-c", script]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.starts_with("False "), "{out}");
    assert!((10_000.5..10_001.0).contains(&last_monotonic(&out)), "{out}");
}

#[test]
fn a_parent_polling_a_busy_child_is_identical_under_verify() {
    // How many 1 ms sleeps the parent makes must not depend on how long the child runs in real time.
    require_cmd("python3");
    let w = Workdir::new();
    let script = r#"
import subprocess, time
p = subprocess.Popen(["python3", "-c", "s = 0\nfor i in range(100000): s += i\nprint(s)"], stdout=subprocess.PIPE)
n = 0
while p.poll() is None:
    time.sleep(0.001)
    n += 1
print(p.stdout.read().decode().strip(), n, round(time.monotonic(), 3))
"#;
    std::fs::write(w.path().join("poll.py"), script).unwrap();
    let o = verified(&w, &["python3", "poll.py"]);
    assert_code(&o, 0);
    assert!(stdout(&o).starts_with("4999950000 "), "{}", stdout(&o));
}

#[test]
fn a_spin_on_a_flag_set_after_a_sleep_ends() {
    // The main thread never blocks while the other sleeps: the sleep is held at most its own wall time (2 s at
    // least), then times out, so the run ends rather than hanging. The sleeper is then ready while the main thread
    // spins: the scheduler's watchdog preempts the spinner, at a point that depends on the host's speed (exit 121).
    require_cmd("python3");
    let w = Workdir::new();
    let script = "import threading, time\n\
                  done = []\n\
                  threading.Thread(target=lambda: (time.sleep(0.1), done.append(1))).start()\n\
                  while not done: pass\n\
                  print('done')\n";
    let o = repro()
        .current_dir(w.path())
        .args(["run", "-q", "--", "python3", "-c", script])
        .timeout(HANG_GUARD)
        .output()
        .unwrap();
    assert_code(&o, 121);
    assert_eq!(stdout(&o), "done\n");
    assert!(stderr(&o).contains("thread 0 ran "), "{}", stderr(&o));
}

#[test]
fn a_worker_thread_ends_a_timed_wait_before_its_deadline() {
    // asgiref's test_wsgi: the event loop waits with a 1 s timeout while an executor's thread runs the work and
    // hands the result back (call_soon_threadsafe writes to the loop's socketpair). The thread was parked in its
    // GIL wait with the loop's epoll_wait; one look of the scheduler released the thread and, in the same look,
    // found every task blocked (the thread had written, then gone idle in its queue's untimed futex) and timed
    // the loop's wait out although its socket was readable: logical time jumped 1 s per round. Then the same with
    // a plain thread and a queue's timed condition wait.
    require_cmd("python3");
    let w = Workdir::new();
    let script = r#"
import asyncio, queue, threading, time
def work(n, q=None):
    s = sum(k * k for k in range(n))
    if q is not None:
        q.put(s)
    return s
async def main():
    loop = asyncio.get_running_loop()
    t0 = time.monotonic()
    for i in range(200):
        await asyncio.wait_for(loop.run_in_executor(None, work, 2000 + i), 1)
    print("asyncio", round(time.monotonic() - t0, 1))
asyncio.run(main())
t0, late = time.monotonic(), 0
for i in range(200):
    q = queue.Queue()
    t = threading.Thread(target=work, args=(2000 + i, q))
    t.start()
    try:
        q.get(timeout=1)
    except queue.Empty:
        late += 1
    t.join()
print("threads", late, round(time.monotonic() - t0, 1))
"#;
    std::fs::write(w.path().join("worker.py"), script).unwrap();
    let o = verified(&w, &["python3", "worker.py"]);
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "asyncio 0.0\nthreads 0 0.0\n", "no wait may reach its deadline while a thread works");
}

#[test]
fn gil_contention_does_not_move_the_clock() {
    // The thread holds the GIL in C code (sum over a range) for a while; the main thread's 5 ms GIL waits are
    // held for 5 ms of wall time each and then time out while the thread runs. How many there are follows the
    // host's speed: timing them out moved the logical clock by 5 ms each (0.5-0.6 s here, never the same twice).
    require_cmd("python3");
    let w = Workdir::new();
    let script = "import threading, time\n\
                  t0 = time.monotonic()\n\
                  t = threading.Thread(target=lambda: sum(range(20_000_000)))\n\
                  t.start()\n\
                  while t.is_alive(): pass\n\
                  print(round(time.monotonic() - t0, 1))\n";
    let o = verified(&w, &["python3", "-c", script]);
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "0.0\n");
}

#[test]
fn futex_waitv_times_out_in_logical_time() {
    // futex_waitv's timeout is absolute on the clock the call names: 200 s on CLOCK_MONOTONIC and 100 s on
    // CLOCK_REALTIME end at once in logical time (natively, or with the logical deadline shown to the kernel,
    // they outlast the hang guard), and a thread that changes a word and wakes it after a 1 s sleep ends it then.
    require_cmd("gcc");
    let w = Workdir::new();
    std::fs::write(w.path().join("fw.c"), include_str!("futex_waitv.c")).unwrap();
    let gcc = std::process::Command::new("gcc")
        .args(["-O2", "-pthread", "fw.c", "-o", "fw"])
        .current_dir(w.path())
        .output()
        .unwrap();
    assert!(gcc.status.success(), "{}", String::from_utf8_lossy(&gcc.stderr));
    let o = verified(&w, &["./fw"]);
    assert_code(&o, 0);
    assert_eq!(
        stdout(&o),
        "monotonic: -1 Connection timed out after 200.0 s\n\
         realtime: -1 Connection timed out after 100.0 s\n\
         woken: yes, b=5 after 1.0 s\n"
    );
}

#[test]
fn a_spin_until_a_rechecked_timed_wait_expires_ends() {
    // The waiter's timed condition wait times out (held its 1 s of wall time while the other thread spins)
    // without moving the clock, looks at the clock, and waits again for the same deadline; the spinner reads no
    // clock. After 2 s of such waits the clock jumps to the deadline (with a warning), so the run ends.
    require_cmd("gcc");
    let w = Workdir::new();
    std::fs::write(w.path().join("spin.c"), include_str!("spin_timedwait.c")).unwrap();
    let gcc = std::process::Command::new("gcc")
        .args(["-O2", "-pthread", "spin.c", "-o", "spin"])
        .current_dir(w.path())
        .output()
        .unwrap();
    assert!(gcc.status.success(), "{}", String::from_utf8_lossy(&gcc.stderr));
    let o = repro().current_dir(w.path()).args(["run", "--", "./spin"]).timeout(HANG_GUARD).output().unwrap();
    assert_code(&o, 121);
    assert_eq!(stdout(&o), "waited 1.0 s\n");
    assert!(stderr(&o).contains("depended on the host's speed"), "{}", stderr(&o));
    assert!(stderr(&o).contains("without a system call (spin loop at main+0x"), "{}", stderr(&o));
}

#[test]
fn unittest_isolated_asyncio_test_case() {
    require_cmd("python3");
    let w = Workdir::new();
    let script = r#"
import asyncio, unittest
class T(unittest.IsolatedAsyncioTestCase):
    async def test_sleep(self):
        await asyncio.sleep(0.1)
    async def test_gather(self):
        self.assertEqual(await asyncio.gather(asyncio.sleep(0.2, "a"), asyncio.sleep(0.1, "b")), ["a", "b"])
"#;
    std::fs::write(w.path().join("test_aio.py"), script).unwrap();
    let o = verified(&w, &["python3", "-m", "unittest", "test_aio"]);
    assert_code(&o, 0);
    assert!(stderr(&o).contains("Ran 2 tests in 0.3"), "{}", stderr(&o));
}

#[test]
fn node_set_timeout_closes_a_loopback_server() {
    require_cmd("node");
    let w = Workdir::new();
    let script = r#"
const net = require("net");
const s = net.createServer(c => c.end("hi"));
s.listen(0, "127.0.0.1", () => {
  const c = net.connect(s.address().port, "127.0.0.1");
  c.on("data", d => console.log("got", String(d)));
  setTimeout(() => { s.close(); c.destroy(); console.log("closed", performance.now() >= 50); }, 50);
});
"#;
    let o = verified(&w, &["node", "-e", script]);
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "got hi\nclosed true\n");
}

#[test]
fn node_test_runner_with_two_tests() {
    require_cmd("node");
    let w = Workdir::new();
    let tests = r#"
const test = require("node:test"); const assert = require("node:assert");
test("waits", async () => { await new Promise(r => setTimeout(r, 20)); assert.strictEqual(1, 1); });
test("plain", () => { assert.ok(true); });
"#;
    std::fs::write(w.path().join("two.test.js"), tests).unwrap();
    let run = || {
        let o = repro()
            .current_dir(w.path())
            .args(["run", "-q", "--", "node", "--test", "two.test.js"])
            .timeout(HANG_GUARD)
            .output()
            .unwrap();
        assert_code(&o, 0);
        stdout(&o)
    };
    let (a, b) = (run(), run());
    assert!(a.contains("# pass 2") && a.contains("# fail 0"), "{a}");
    // The runner's threads read the shared clock concurrently, so the measured durations may differ by a few
    // clock steps; everything else must be the same.
    let results = |s: &str| s.lines().filter(|l| !l.contains("duration_ms")).map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(results(&a), results(&b));
}

#[test]
fn a_deadlocked_guest_is_stopped_with_where_it_waits() {
    require_cmd("python3");
    let w = Workdir::new();
    // Two threads, each reading the pipe only the other writes to.
    let script = "import os, threading\n\
                  r1, w1 = os.pipe(); r2, w2 = os.pipe()\n\
                  threading.Thread(target=lambda: (os.read(r1, 1), os.write(w2, b'x'))).start()\n\
                  os.read(r2, 1); os.write(w1, b'x')\n";
    let o = repro()
        .current_dir(w.path())
        .args(["run", "-q", "--stuck-after", "2s", "--", "python3", "-c", script])
        .timeout(HANG_GUARD)
        .output()
        .unwrap();
    assert_code(&o, 120);
    let err = stderr(&o);
    assert!(err.contains("[repro] the guest is stuck: task "), "{err}");
    assert_eq!(err.matches("in read on fd ").count(), 2, "both threads, each in its read: {err}");
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(w.last_run().join("run.json")).unwrap()).unwrap();
    assert!(record["determinism"]["stuck"].as_str().is_some_and(|s| s.contains("pipe:[")), "{record}");
    // A single task reading a pipe whose writer it holds itself.
    let o = repro()
        .current_dir(w.path())
        .args(["run", "--stuck-after", "1s", "--", "python3", "-c", "import os; r, w = os.pipe(); os.read(r, 1)"])
        .timeout(HANG_GUARD)
        .output()
        .unwrap();
    assert_code(&o, 120);
    // The summary line says the watchdog stopped it, not that the guest was killed by SIGKILL.
    assert!(stderr(&o).contains("repro: stuck, stopped by the watchdog (exit 120)"), "{}", stderr(&o));
    // A bad duration is a usage error naming the flag.
    let o = w.run(&["--stuck-after", "soon"], &["true"]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("--stuck-after"), "{}", stderr(&o));
}

#[test]
fn a_wait_on_the_outside_is_not_stuck() {
    // The guest reads its stdin, a pipe from outside: it waits for the world, however long, and is not stopped.
    require_cmd("head");
    let w = Workdir::new();
    let mut child = std::process::Command::new(repro_path())
        .current_dir(w.path())
        .args(["run", "-q", "--stuck-after", "1s", "--", "head", "-c", "2"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Three watchdog periods pass before the input comes.
    std::thread::sleep(std::time::Duration::from_secs(3));
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"ok").unwrap();
    let o = wait_bounded(child, "repro run -- head");
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "ok");
}
