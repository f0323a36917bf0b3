//! End-to-end tests of the supervisor on real processes: every guest runs through the
//! `repro-supervise` helper binary (its own process, in a fresh PID namespace), never forked from
//! this multithreaded test harness.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const HELPER: &str = env!("CARGO_BIN_EXE_repro-supervise");

fn guests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/guests")
}

/// Guest binaries, compiled once for all test processes (nextest runs each test in its own): built in a
/// temporary directory beside the final one and renamed into place, which is named by a hash of the sources, so
/// concurrent processes never see half a build and a changed source builds anew.
fn build_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let sources: Vec<PathBuf> = ["c/probe.c", "c/threads.c", "c/clockpoll.c", "c/timerfd.c", "c/listdir.c"]
            .iter()
            .chain(&["c/vdsoclock.c", "c/waits.c", "c/vdsoparse.c", "rust/probe.rs"])
            .map(|s| guests_dir().join(s))
            .collect();
        let mut h = std::hash::DefaultHasher::new();
        for s in &sources {
            std::hash::Hash::hash(&std::fs::read(s).expect("guest source"), &mut h);
        }
        let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let done = root.join(format!("supervisor-guests-{:016x}", std::hash::Hasher::finish(&h)));
        if done.is_dir() {
            return done;
        }
        let d = tempfile::tempdir_in(root).expect("tempdir");
        build_guests(d.path());
        // Another process may have won the race: its build is as good as ours.
        if std::fs::rename(d.path(), &done).is_ok() {
            std::mem::forget(d);
        }
        done
    })
}

fn build_guests(d: &Path) {
    for name in ["probe", "threads", "clockpoll", "timerfd", "listdir", "vdsoclock", "waits"] {
        let src = guests_dir().join(format!("c/{name}.c"));
        let out = d.join(name);
        let st = Command::new("gcc").args(["-O2", "-pthread", "-o"]).arg(&out).arg(&src).status().expect("gcc runs");
        assert!(st.success(), "compiling {src:?}");
    }
    // Static binaries read AT_SYSINFO_EHDR too: glibc's static start-up, and a Go-like program that
    // parses the vDSO itself.
    for (name, src) in [("vdsoclock-static", "vdsoclock"), ("vdsoparse", "vdsoparse")] {
        let src = guests_dir().join(format!("c/{src}.c"));
        let st =
            Command::new("gcc").args(["-O2", "-static", "-o"]).arg(d.join(name)).arg(&src).status().expect("gcc runs");
        assert!(st.success(), "compiling {src:?} statically");
    }
    let st = Command::new("rustc")
        .args(["-O", "--edition", "2021", "-o"])
        .arg(d.join("rprobe"))
        .arg(guests_dir().join("rust/probe.rs"))
        .status()
        .expect("rustc runs");
    assert!(st.success(), "compiling the Rust guest");
}

/// A path of this test process's own (the same for every run it compares), on the file system of
/// `tempfile::tempdir_in(CARGO_TARGET_TMPDIR)` so that a directory made there can be renamed to it.
fn fixed_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("supervisor-{}-{name}", std::process::id()))
}

fn guest(name: &str) -> PathBuf {
    build_dir().join(name)
}

/// The tests were written for epoch 1700000000 (2023-11-14T22:13:20Z); a test's own `--epoch` comes later and wins.
/// A guard against hangs, not a speed claim (bench/supervisor.sh measures speed): a supervised run that takes
/// this long is killed and fails its test with timeout's status 124.
const HANG_GUARD_SECS: &str = "120";

fn supervised(flags: &[&str], cmd: &[&str]) -> Output {
    Command::new("timeout")
        .args(["--kill-after=5", HANG_GUARD_SECS, HELPER])
        .args(["--epoch", "1700000000"])
        .args(flags)
        .arg("--")
        .args(cmd)
        // cargo sets it to every native dependency's build directory (many more under `cargo test --workspace`);
        // the dynamic loader of every guest would probe each one and the counts below would depend on it.
        .env_remove("LD_LIBRARY_PATH")
        .env("TZ", "UTC")
        .env("LC_ALL", "C")
        .env("PYTHONHASHSEED", "0")
        .output()
        .expect("helper runs")
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn ok(o: Output) -> String {
    assert!(
        o.status.success(),
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        text(&o),
        String::from_utf8_lossy(&o.stderr)
    );
    text(&o)
}

/// Runs `cmd` without the supervisor (the probes skip their 60 s sleep then).
fn native(cmd: &[&str]) -> String {
    let o = Command::new(cmd[0])
        .args(&cmd[1..])
        .env("TZ", "UTC")
        .env("LC_ALL", "C")
        .env("PROBE_SLEEP", "0")
        .output()
        .expect("native runs");
    assert!(o.status.success(), "native {cmd:?}: {}", String::from_utf8_lossy(&o.stderr));
    text(&o)
}

fn line<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no line {prefix:?} in\n{out}"))
}

/// Runs `cmd` twice (identical), with another seed and epoch (different), and natively (different).
fn check_deterministic(cmd: &[&str], seed_dependent: &[&str], epoch_dependent: &[&str]) -> String {
    let a = ok(supervised(&[], cmd));
    let b = ok(supervised(&[], cmd));
    assert_eq!(a, b, "two runs with the same seed differ");
    let s = ok(supervised(&["--seed", "1"], cmd));
    for p in seed_dependent {
        assert_ne!(line(&a, p), line(&s, p), "{p} does not depend on the seed");
    }
    let e = ok(supervised(&["--epoch", "1000000000"], cmd));
    for p in epoch_dependent {
        assert_ne!(line(&a, p), line(&e, p), "{p} does not depend on the epoch");
    }
    let n1 = native(cmd);
    for p in seed_dependent.iter().chain(epoch_dependent) {
        assert_ne!(line(&a, p), line(&n1, p), "{p} is the same natively");
    }
    a
}

#[test]
fn c_guest_sees_logical_time_seeded_entropy_and_pinned_identity() {
    let probe = guest("probe");
    let out = check_deterministic(
        &[probe.to_str().unwrap()],
        &["getrandom", "at_random"],
        &["libc realtime", "raw realtime", "gettimeofday", "time "],
    );
    assert_eq!(line(&out, "vdso"), "vdso present");
    assert_eq!(line(&out, "pid"), "pid 2 ppid 1");
    assert_eq!(line(&out, "libc realtime").split(' ').nth(2).unwrap().split('.').next(), Some("1700000000"));
    assert!(line(&out, "uname").starts_with("uname Linux repro 6.1.0-repro"));
    assert_eq!(line(&out, "nproc"), "nproc 1 1");
    assert_eq!(line(&out, "slept"), "slept 60 s");
    // rdtsc is emulated from the logical clock, not the host counter.
    let native_rdtsc: u64 =
        line(&native(&[probe.to_str().unwrap()]), "rdtsc ").split(' ').nth(1).unwrap().parse().unwrap();
    let rdtsc: u64 = line(&out, "rdtsc ").split(' ').nth(1).unwrap().parse().unwrap();
    assert!((10_000_000_000_000..10_000_100_000_000).contains(&rdtsc), "rdtsc {rdtsc}");
    assert_ne!(rdtsc, native_rdtsc);
    assert!(line(&out, "rdtscp ").ends_with(" aux 0"), "rdtscp reports cpu 0 in IA32_TSC_AUX: {out}");
    let cpus = ok(supervised(&["--cpus", "3"], &[probe.to_str().unwrap()]));
    assert_eq!(line(&cpus, "nproc"), "nproc 3 3");
}

#[test]
fn a_day_long_sleep_passes_on_the_guest_clock_only() {
    // A day of sleep ends within the hang guard (two minutes) and the guest's clock moved by exactly a day.
    let out = ok(supervised(&[], &["/bin/sh", "-c", "date +%s; sleep 86400; date +%s"]));
    let v: Vec<i64> = out.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(v[1] - v[0], 86400);
}

fn fill_in_random_order(dir: &Path, salt: u64) {
    let mut names: Vec<String> = (0..40).map(|i| format!("f{i:02}")).collect();
    let mut x = salt.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for i in (1..names.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        names.swap(i, (x % (i as u64 + 1)) as usize);
    }
    for n in names {
        std::fs::write(dir.join(n), b"x").unwrap();
    }
}

#[test]
fn python_guest_is_reproducible() {
    let d = tempfile::tempdir().unwrap();
    let clock = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    fill_in_random_order(d.path(), clock);
    let probe = guests_dir().join("python/probe.py");
    let cmd = ["python3", probe.to_str().unwrap(), d.path().to_str().unwrap()];
    let out = check_deterministic(
        &cmd,
        &["urandom", "uuid4", "random", "/proc/sys/kernel/random/boot_id"],
        &["time", "datetime"],
    );
    assert_eq!(line(&out, "slept"), "slept 60");
    assert_eq!(line(&out, "hostname"), "hostname repro");
    assert_eq!(line(&out, "cpus"), "cpus 1 1");
    assert_eq!(line(&out, "cpuinfo"), "cpuinfo processors 1");
    let listing = line(&out, "listdir");
    let sorted: Vec<String> = (0..40).map(|i| format!("'f{i:02}'")).collect();
    assert_eq!(listing, format!("listdir [{}]", sorted.join(", ")));
}

#[test]
fn directory_order_does_not_depend_on_creation_order_or_buffer_size() {
    let lister = guest("listdir");
    let mut outs = Vec::new();
    let mut natives = Vec::new();
    for salt in [1, 2] {
        let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        fill_in_random_order(d.path(), salt);
        // Same path for both runs so the output can be compared.
        let fixed = fixed_dir(&format!("dir{salt}"));
        std::fs::rename(d.path(), &fixed).unwrap();
        let o = ok(supervised(&[], &[lister.to_str().unwrap(), fixed.to_str().unwrap()]));
        natives.push(native(&[lister.to_str().unwrap(), fixed.to_str().unwrap()]));
        std::fs::remove_dir_all(&fixed).unwrap();
        outs.push(o);
    }
    assert_eq!(outs[0], outs[1]);
    assert!(
        !natives[0].starts_with("readdir .\nreaddir ..\nreaddir f00\nreaddir f01\n"),
        "native order is already sorted"
    );
    let readdir: Vec<&str> = outs[0].lines().filter_map(|l| l.strip_prefix("readdir ")).collect();
    let small: Vec<&str> = outs[0].lines().filter_map(|l| l.strip_prefix("small ")).collect();
    let mut want = vec![".".to_string(), "..".to_string()];
    want.extend((0..40).map(|i| format!("f{i:02}")));
    assert_eq!(readdir, want);
    assert_eq!(small, want);
}

#[test]
fn shell_pipeline_times_and_files_are_reproducible() {
    let probe = guests_dir().join("shell/probe.sh");
    let run = |flags: &[&str]| {
        let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let fixed = fixed_dir(&format!("sh-{}", flags.join("")));
        let _ = std::fs::remove_dir_all(&fixed); // a leftover of an earlier run, if any
        std::fs::rename(d.path(), &fixed).unwrap();
        fill_in_random_order(&fixed, 3);
        let o = ok(supervised(flags, &[probe.to_str().unwrap(), fixed.to_str().unwrap()]));
        std::fs::remove_dir_all(&fixed).unwrap();
        o
    };
    let a = run(&[]);
    let b = run(&[]);
    assert_eq!(a, b);
    assert_eq!(line(&a, "elapsed"), "elapsed 60");
    assert_eq!(line(&a, "pid"), "pid 2");
    assert!(line(&a, "new2 is newer").contains("newer"));
    let s = run(&["--seed", "9"]);
    assert_ne!(a, s);
    assert!(a.starts_with("Tue Nov 14 22:13:20 UTC 2023\n"), "{a}");
}

#[test]
fn rust_guest_is_reproducible() {
    let p = guest("rprobe");
    let out = check_deterministic(&[p.to_str().unwrap()], &["randomstate"], &["systemtime"]);
    assert_eq!(line(&out, "slept"), "slept 60");
    assert_eq!(line(&out, "threads"), "threads 6");
    assert_eq!(line(&out, "parallelism"), "parallelism 1");
}

#[test]
fn multithreaded_program_runs_and_verifies() {
    let p = guest("threads");
    let a = ok(supervised(&[], &[p.to_str().unwrap()]));
    let b = ok(supervised(&[], &[p.to_str().unwrap()]));
    assert_eq!(a, b);
    assert_eq!(a.lines().filter(|l| l.starts_with("thread ")).count(), 4);
    assert!(line(&a, "done at").ends_with("pid 2"));
}

#[test]
fn static_busybox_runs() {
    let cmd = ["/bin/busybox", "sh", "-c", "date +%s; sleep 30; date +%s; cat /proc/sys/kernel/random/uuid; echo $$"];
    let a = ok(supervised(&[], &cmd));
    let b = ok(supervised(&[], &cmd));
    assert_eq!(a, b);
    let v: Vec<&str> = a.lines().collect();
    assert_eq!(v[0], "1700000000");
    assert_eq!(v[1], "1700000030");
    assert_eq!(v[3], "2");
    assert_ne!(a, ok(supervised(&["--seed", "5"], &cmd)));
}

#[test]
fn make_builds_a_small_project() {
    let d = tempfile::tempdir().unwrap();
    for f in ["Makefile", "main.c", "greet.c", "greet.h"] {
        std::fs::copy(guests_dir().join("make").join(f), d.path().join(f)).unwrap();
    }
    let dir = d.path().to_str().unwrap();
    let first = ok(supervised(&[], &["make", "-C", dir]));
    assert!(first.contains("cc -o hello main.o greet.o"), "{first}");
    let hello = ok(supervised(&[], &[d.path().join("hello").to_str().unwrap()]));
    assert_eq!(hello, "hello from make\n");
    let second = ok(supervised(&[], &["make", "-C", dir]));
    assert!(second.contains("is up to date"), "{second}");
    // An input changed within the run is newer than the outputs built before it.
    let third = ok(supervised(&[], &["sh", "-c", &format!("touch {dir}/greet.c && make -C {dir}")]));
    assert!(third.contains("cc -c -o greet.o greet.c"), "{third}");
    assert!(!third.contains("main.o main.c"), "{third}");
}

#[test]
fn frozen_clock_poll_loop_is_stopped_with_an_explanation() {
    let p = guest("clockpoll");
    let o = supervised(&["--clock-step-ns", "0"], &[p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(121));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("[repro] determinism not enforced: the guest read the clock 20000 times"), "{err}");
    assert!(err.contains("--clock-step-ns"), "{err}");
    // With a clock that ticks on reads the same loop ends.
    let ticking = ok(supervised(&["--clock-step-ns", "100000"], &[p.to_str().unwrap()]));
    assert_eq!(ticking, "one second passed\n");
}

#[test]
fn unmediated_clock_sources_are_reported() {
    // A timerfd runs in logical time; ITIMER_PROF counts the host's CPU time and is reported.
    let o = supervised(&[], &[guest("timerfd").to_str().unwrap(), "prof"]);
    assert_eq!(o.status.code(), Some(121));
    assert_eq!(text(&o), "first expiry after 0.25 s: 1\n5 more after 0.75 s\ntimerfd ok\n");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("determinism not enforced: the guest armed a timer on the host's clock (setitimer)"), "{err}");
    assert!(!err.contains("timerfd"), "{err}");
}

#[test]
fn exec_failures_map_to_shell_codes() {
    assert_eq!(supervised(&[], &["/nonexistent/program"]).status.code(), Some(127));
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("not-executable");
    std::fs::write(&f, "#!/bin/sh\n").unwrap();
    assert_eq!(supervised(&[], &[f.to_str().unwrap()]).status.code(), Some(126));
    let o = supervised(&[], &["/bin/sh", "-c", "exit 7"]);
    assert_eq!(o.status.code(), Some(7));
    let o = supervised(&[], &["/bin/sh", "-c", "kill -TERM $$"]);
    assert_eq!(o.status.code(), Some(128 + 15));
}

fn stats_of(flags: &[&str], cmd: &[&str]) -> (String, serde_json::Value) {
    let f = tempfile::NamedTempFile::new().unwrap();
    let mut all = flags.to_vec();
    all.extend(["--stats", f.path().to_str().unwrap()]);
    let out = ok(supervised(&all, cmd));
    let stats: serde_json::Value = serde_json::from_slice(&std::fs::read(f.path()).unwrap()).unwrap();
    (out, stats)
}

#[test]
fn a_million_clock_reads_through_the_vdso_are_logical_identical_and_in_process() {
    let p = guest("vdsoclock");
    let (a, stats) = stats_of(&[], &[p.to_str().unwrap()]);
    // In process, not through a mediated syscall (~20 µs each): the stats show no clock_gettime left the
    // process (the speed itself is bench/supervisor.sh's).
    assert_eq!(stats["vdso_replaced"], 1, "{stats}");
    assert!(stats["vdso_clock_reads"].as_u64().unwrap() >= 1_000_000, "{stats}");
    assert!(stats["mediated"].get("clock_gettime").is_none(), "reads left the process: {stats}");
    assert_eq!(line(&a, "vdso"), "vdso present");
    // Logical time: the epoch plus what start-up used (ld.so's rdtsc reads tick the same clock), then
    // exactly 1 µs per read, whichever clock is read.
    let ns = |l: &str| -> i64 {
        let (s, f) = l.split(' ').nth(1).unwrap().split_once('.').unwrap();
        s.parse::<i64>().unwrap() * 1_000_000_000 + f.parse::<i64>().unwrap() * 10i64.pow(9 - f.len() as u32)
    };
    let e0 = ns(line(&a, "first")) - 1_700_000_000_000_000_000;
    assert!((0..1_000_000).contains(&e0), "{a}");
    assert_eq!(ns(line(&a, "last")), 10_000_000_000_000 + e0 + 1_000_000_000);
    assert_eq!(ns(line(&a, "gettimeofday")), 1_700_000_001_000_000_000 + e0 + 1000);
    let b = ok(supervised(&[], &[p.to_str().unwrap()]));
    assert_eq!(a, b, "two runs read the same clock");
    let stepped = ok(supervised(&["--clock-step-ns", "10"], &[p.to_str().unwrap()]));
    let e0 = ns(line(&stepped, "first")) - 1_700_000_000_000_000_000;
    assert_eq!(ns(line(&stepped, "last")), 10_000_000_000_000 + e0 + 10_000_000);
    assert_ne!(line(&a, "sum"), line(&native(&[p.to_str().unwrap()]), "sum"));
}

#[test]
fn static_binaries_get_the_replacement_vdso() {
    let p = guest("vdsoclock-static");
    let (a, stats) = stats_of(&[], &[p.to_str().unwrap(), "1000"]);
    assert_eq!(stats["vdso_replaced"], 1, "{stats}");
    assert_eq!(line(&a, "first"), "first 1700000000.000000000");
    assert_eq!(line(&a, "last"), "last 10000.001000000");
    // A Go-like program resolving the symbols itself (DT_HASH, LINUX_2.6 versions, file offsets).
    let g = guest("vdsoparse");
    let (a, stats) = stats_of(&[], &[g.to_str().unwrap()]);
    assert_eq!(a, ok(supervised(&[], &[g.to_str().unwrap()])));
    assert!(stats["vdso_clock_reads"].as_u64().unwrap() >= 3, "{stats}");
    assert_eq!(line(&a, "vdso realtime"), "vdso realtime 1700000000.000000000");
    assert_eq!(line(&a, "vdso monotonic"), "vdso monotonic 10000.000001000");
    assert_eq!(line(&a, "vdso gettimeofday"), "vdso gettimeofday 1700000000.000002");
    // The kernel's own vDSO is gone from the guest, so it cannot be found and called.
    let maps = ok(supervised(&[], &["/bin/busybox", "cat", "/proc/self/maps"]));
    assert!(!maps.contains("[vdso]") && !maps.contains("[vvar"), "{maps}");
    assert!(maps.contains("repro-vdso"), "{maps}");
}

#[test]
fn mediated_and_in_process_clock_reads_are_one_clock() {
    // time.time() goes through the vDSO, the sleep is mediated: both move the same clock.
    let cmd = [
        "/usr/bin/python3",
        "-c",
        "import time, os\nt = time.time(); time.sleep(2); print(round(time.time() - t, 3), os.times().elapsed > 0)",
    ];
    let out = ok(supervised(&[], &cmd));
    assert_eq!(out, "2.0 True\n");
}

#[test]
fn timed_waits_nothing_can_end_jump_the_clock_and_a_pipe_writer_is_waited_for() {
    let p = guest("waits");
    // Natively this program waits 13 s; here each wait reports the logical time it waited.
    let (out, stats) = stats_of(&[], &[p.to_str().unwrap()]);
    let want = [
        "poll 0 revents 0 after 5000 ms",
        "ppoll 0 after 1500 ms",
        "select 0 set 0 after 2500 ms",
        "pselect 0 after 250 ms",
        "epoll_wait 0 after 3000 ms",
        "futex -1 ETIMEDOUT after 1000 ms",
        "socket poll 0 after 0 ms",
        "ready poll 1 revents 1 after 0 ms",
        // The child works, then writes: the 10 s wait is not cut short, it ends with the data.
        "pipe poll 1 data y before the timeout",
    ];
    assert_eq!(out.lines().collect::<Vec<_>>(), want, "{out}");
    assert_eq!(stats["waits_jumped"], 6, "{stats}");
    assert_eq!(out, ok(supervised(&[], &[p.to_str().unwrap()])));
    // Under a parent shell waiting for it, the same (the shell is asleep in wait4).
    let sh = ok(supervised(&[], &["/bin/sh", "-c", &format!("{}; echo done", p.display())]));
    assert_eq!(sh, format!("{}\ndone\n", want.join("\n")));
}

#[test]
fn when_the_vdso_cannot_be_installed_clock_reads_are_mediated_and_the_stats_say_why() {
    // With no descriptor free, the memfd cannot be installed in the guest: the safe fallback (no vDSO,
    // every read a mediated syscall) keeps the same logical clock.
    let p = guest("vdsoclock-static");
    let script = format!("ulimit -n 3; exec {} 1000", p.display());
    let (out, stats) = stats_of(&[], &["/bin/sh", "-c", &script]);
    assert_eq!(stats["vdso_disabled"], 1, "{stats}");
    assert!(stats["vdso_disabled_why"][0].as_str().unwrap().contains("Too many open files"), "{stats}");
    assert_eq!(stats["mediated"]["clock_gettime"], 1001, "{stats}");
    assert_eq!(line(&out, "vdso"), "vdso absent");
    let direct = ok(supervised(&[], &[p.to_str().unwrap(), "1000"]));
    assert_eq!(line(&direct, "vdso"), "vdso present");
    // The same reads, the same steps, whichever way they were answered (the shell read the clock first).
    let span = |o: &str| -> Vec<String> {
        ["first", "last"].iter().map(|k| line(o, k).rsplit('.').next().unwrap().to_string()).collect()
    };
    let (a, b) = (span(&out), span(&direct));
    let d = |v: &[String]| v[1].parse::<i64>().unwrap() - v[0].parse::<i64>().unwrap();
    assert_eq!(d(&a), d(&b));
}

#[test]
fn reads_and_writes_reach_the_supervisor_only_while_the_network_is_taped() {
    // 2,000 one-byte reads of /dev/zero and as many writes to /dev/null.
    let cmd = ["dd", "if=/dev/zero", "of=/dev/null", "bs=1", "count=2000", "status=none"];
    let continued = |s: &serde_json::Value| s["continued"].as_u64().unwrap();
    let (_, plain) = stats_of(&[], &cmd);
    assert!(continued(&plain) < 200, "without a tape read/write are not in the filter: {plain}");
    // The guest starts although the filter sends write(2) to the supervisor before exec (the start-up handshake),
    // and its reads and writes of files run natively.
    let (_, taped) = stats_of(&["--network", "record"], &cmd);
    assert!(continued(&taped) >= 4000, "{taped}");
    assert_eq!(taped["mediated"].get("read"), None, "{taped}");
    // The report of a failed execve is a write(2) after the filter, answered by the supervisor.
    let o = supervised(&["--network", "record"], &["/nonexistent/program"]);
    assert_eq!(o.status.code(), Some(127), "{}", String::from_utf8_lossy(&o.stderr));
    let o = supervised(&["--network", "record"], &["sh", "-c", "echo through a pipe | cat"]);
    assert_eq!(text(&o), "through a pipe\n");
}
