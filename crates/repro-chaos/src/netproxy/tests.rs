//! The proxy over real loopback sockets (no mocks). Every read has a timeout: no test can hang.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::decide::Decider;
use super::*;

const T: Duration = Duration::from_secs(10);

/// What the test upstream does with a connection.
#[derive(Clone, Copy)]
enum Mode {
    /// Echoes every byte; shuts its write side down on EOF.
    Echo,
    /// Sends `hello\n`, then `tick\n` every 50 ms; records what it receives.
    Ticker,
    /// Sends `bye\n`, shuts its write side down, then records what it receives until EOF.
    GreetAndHalfClose,
}

struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    received: Arc<Mutex<Vec<u8>>>,
    accept: Option<JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn server(mode: Mode) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(Mutex::new(Vec::new()));
    let (st, rec) = (stop.clone(), received.clone());
    let accept = std::thread::spawn(move || {
        let mut conns = Vec::new();
        while !st.load(Ordering::SeqCst) {
            match listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    let (st, rec) = (st.clone(), rec.clone());
                    conns.push(std::thread::spawn(move || serve(s, mode, &st, &rec)));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        for c in conns {
            let _ = c.join();
        }
    });
    Server { addr, stop, received, accept: Some(accept) }
}

fn serve(mut s: TcpStream, mode: Mode, stop: &AtomicBool, received: &Mutex<Vec<u8>>) {
    let mut buf = [0u8; 8192];
    s.set_write_timeout(Some(T)).unwrap();
    match mode {
        Mode::Echo => {
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            while !stop.load(Ordering::SeqCst) {
                match s.read(&mut buf) {
                    Ok(0) => {
                        let _ = s.shutdown(Shutdown::Write);
                        return;
                    }
                    Ok(n) => {
                        if s.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(_) => return,
                }
            }
        }
        Mode::Ticker => {
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            if s.write_all(b"hello\n").is_err() {
                return;
            }
            while !stop.load(Ordering::SeqCst) {
                match s.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => received.lock().unwrap().extend_from_slice(&buf[..n]),
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(_) => return,
                }
                if s.write_all(b"tick\n").is_err() {
                    return;
                }
            }
        }
        Mode::GreetAndHalfClose => {
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            if s.write_all(b"bye\n").is_err() || s.shutdown(Shutdown::Write).is_err() {
                return;
            }
            while !stop.load(Ordering::SeqCst) {
                match s.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => received.lock().unwrap().extend_from_slice(&buf[..n]),
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(_) => return,
                }
            }
        }
    }
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Reads exactly `n` bytes within `timeout`.
fn read_n(s: &mut TcpStream, n: usize, timeout: Duration) -> std::io::Result<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    let mut out = vec![0u8; n];
    let mut got = 0;
    while got < n {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(ErrorKind::TimedOut, format!("got {got} of {n} bytes")));
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut out[got..]) {
            Ok(0) => return Err(std::io::Error::new(ErrorKind::UnexpectedEof, format!("EOF after {got} of {n}"))),
            Ok(k) => got += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Reads to EOF within `timeout`.
fn read_to_end(s: &mut TcpStream, timeout: Duration) -> Vec<u8> {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no EOF within {timeout:?} ({} bytes read)", out.len());
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return out,
            Ok(k) => out.extend_from_slice(&buf[..k]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("read: {e} after {} bytes", out.len()),
        }
    }
}

/// Nothing arrives within `within` (the read times out).
fn nothing_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut b = [0u8; 64];
    matches!(s.read(&mut b), Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut))
}

/// Round trip of one small message through an echo.
fn rtt(s: &mut TcpStream, msg: &[u8]) -> Duration {
    let t0 = Instant::now();
    s.write_all(msg).unwrap();
    assert_eq!(read_n(s, msg.len(), T).unwrap(), msg);
    t0.elapsed()
}

fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt).wrapping_add((i >> 8) as u8)).collect()
}

/// Polls `f` until true or `timeout`.
fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    f()
}

fn latency(ms: u64) -> Effect {
    Effect::Latency { delay: Duration::from_millis(ms), jitter: Duration::ZERO, correlation: 0.0 }
}

#[test]
fn netproxy_echo_intact_both_ways_half_close_two_clients() {
    let srv = server(Mode::Echo);
    let proxy = Proxy::start("redis", srv.addr, 1).unwrap();
    let a = proxy.listener("writer-0").unwrap();
    let b = proxy.listener("writer-1").unwrap();
    assert_ne!(a, b);
    assert_eq!(proxy.listener("writer-0").unwrap(), a);
    assert_eq!(proxy.listeners().len(), 2);
    let workers: Vec<_> = [(a, 1u8), (b, 2u8)]
        .into_iter()
        .map(|(port, salt)| {
            std::thread::spawn(move || {
                let data = pattern(300_000, salt);
                let mut s = connect(port);
                let mut w = s.try_clone().unwrap();
                let sent = data.clone();
                let writer = std::thread::spawn(move || {
                    w.write_all(&sent).unwrap();
                    // Half-close: the reply must still come back.
                    w.shutdown(Shutdown::Write).unwrap();
                });
                let got = read_to_end(&mut s, T);
                writer.join().unwrap();
                assert!(got == data, "{} bytes back, {} sent", got.len(), data.len());
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert!(eventually(T, || {
        let st = proxy.stats();
        ["writer-0", "writer-1"].iter().all(|c| {
            let c = &st.clients[*c];
            c.connections == 1 && c.upstream.bytes == 300_000 && c.downstream.bytes == 300_000 && c.active == 0
        })
    }));
    let st = proxy.stats();
    assert_eq!(st.clients["writer-0"].port, a);
    assert_eq!(st.clients["writer-0"].errors, 0, "{:?}", st.clients["writer-0"].last_error);
    assert!(proxy.decisions().is_empty(), "no rule, no decision");
}

#[test]
fn netproxy_latency_delays_round_trip_and_remove_restores() {
    let srv = server(Mode::Echo);
    let proxy = Proxy::start("p", srv.addr, 1).unwrap();
    let mut s = connect(proxy.listener("c").unwrap());
    let base = rtt(&mut s, b"warm");
    let id = proxy.apply(Rule::all(Direction::Upstream, latency(100)));
    assert_eq!(proxy.active_rules().len(), 1);
    let mut delayed = Vec::new();
    for _ in 0..3 {
        delayed.push(rtt(&mut s, b"ping"));
    }
    assert!(proxy.remove(id));
    assert!(!proxy.remove(id));
    let after = rtt(&mut s, b"pong");
    eprintln!("latency: base {base:?}, delayed {delayed:?}, after {after:?}");
    for d in &delayed {
        assert!(*d >= Duration::from_millis(100), "{d:?}");
        assert!(*d < Duration::from_millis(500), "{d:?}");
    }
    assert!(after < Duration::from_millis(80), "{after:?}");
    let st = &proxy.stats().clients["c"];
    assert_eq!(st.upstream.delayed, 3);
    assert_eq!(st.downstream.delayed, 0);
}

/// Per-chunk delays of a proxy with a jittered latency rule, one ping at a time (one chunk each).
fn jitter_delays(seed: u64) -> Vec<Duration> {
    let srv = server(Mode::Echo);
    let proxy = Proxy::start("p", srv.addr, seed).unwrap();
    let mut s = connect(proxy.listener("c").unwrap());
    proxy.apply(Rule::all(
        Direction::Upstream,
        Effect::Latency { delay: Duration::from_millis(20), jitter: Duration::from_millis(10), correlation: 0.25 },
    ));
    for _ in 0..12 {
        let d = rtt(&mut s, b"ping");
        assert!(d >= Duration::from_millis(10), "{d:?}");
    }
    let log = proxy.decisions();
    assert_eq!(log.len(), 12);
    assert!(log.iter().enumerate().all(|(i, d)| d.chunk == i as u64 && d.conn == 0 && d.len == 4));
    log.iter().map(|d| d.delay).collect()
}

#[test]
fn netproxy_jitter_within_bounds_and_replays_with_the_seed() {
    let a = jitter_delays(42);
    let b = jitter_delays(42);
    let c = jitter_delays(43);
    eprintln!("jitter delays, seed 42: {a:?}");
    assert_eq!(a, b);
    assert_ne!(a, c);
    for d in a.iter().chain(&c) {
        assert!(*d >= Duration::from_millis(10) && *d <= Duration::from_millis(30), "{d:?}");
    }
    let distinct: std::collections::BTreeSet<_> = a.iter().collect();
    assert!(distinct.len() > 6, "delays vary: {a:?}");
}

#[test]
fn netproxy_decider_is_a_pure_function_of_its_key() {
    let rules = vec![
        (
            RuleId(1),
            Effect::Latency { delay: Duration::from_millis(50), jitter: Duration::from_millis(20), correlation: 0.5 },
        ),
        (RuleId(2), Effect::Loss { percent: 30.0, correlation: 0.0 }),
        (RuleId(3), Effect::Corrupt { percent: 50.0 }),
        (RuleId(4), Effect::Duplicate { percent: 10.0 }),
    ];
    let run = |seed: u64, conn: u64| {
        let rto = Duration::from_millis(200);
        let mut d = Decider::new(seed, "c", conn, Direction::Upstream, rto, rto * 16);
        (0..500)
            .map(|i| {
                let mut data = vec![0u8; 100];
                let o = d.decide(i, &mut data, &rules);
                (o, data)
            })
            .collect::<Vec<_>>()
    };
    let a = run(9, 0);
    assert_eq!(a, run(9, 0));
    assert_ne!(a, run(9, 1));
    assert_ne!(a, run(10, 0));
    let lost = a.iter().filter(|(o, _)| o.lost).count();
    let corrupt = a.iter().filter(|(o, _)| o.corrupt_bit.is_some()).count();
    let dup = a.iter().filter(|(o, _)| o.duplicated).count();
    assert!((100..200).contains(&lost), "{lost}");
    assert!((200..300).contains(&corrupt), "{corrupt}");
    assert!((20..90).contains(&dup), "{dup}");
    for (o, data) in &a {
        let ones: u32 = data.iter().map(|b| b.count_ones()).sum();
        assert_eq!(ones, o.corrupt_count);
        if !o.lost {
            assert!(o.delay >= Duration::from_millis(30) && o.delay <= Duration::from_millis(70), "{o:?}");
        } else {
            assert!(o.delay >= Duration::from_millis(230), "{o:?}");
        }
    }
    // Correlation 1 keeps the first value (0): the delay is exactly the base.
    let mut d = Decider::new(1, "c", 0, Direction::Upstream, Duration::ZERO, Duration::ZERO);
    let fixed = [(
        RuleId(1),
        Effect::Latency { delay: Duration::from_millis(50), jitter: Duration::from_millis(20), correlation: 1.0 },
    )];
    assert!((0..50).all(|i| d.decide(i, &mut [0u8; 4], &fixed).delay == Duration::from_millis(50)));
    // Reorder: one more latency slot.
    let mut d = Decider::new(1, "c", 0, Direction::Upstream, Duration::ZERO, Duration::ZERO);
    let reorder = [(RuleId(1), latency(50)), (RuleId(2), Effect::Reorder { percent: 100.0, correlation: 0.0 })];
    let o = d.decide(0, &mut [0u8; 4], &reorder);
    assert!(o.reordered);
    assert_eq!(o.delay, Duration::from_millis(100));
    // A rule's draws do not depend on other rules.
    let alone = [(RuleId(3), Effect::Corrupt { percent: 50.0 })];
    let mut d = Decider::new(9, "c", 0, Direction::Upstream, Duration::ZERO, Duration::ZERO);
    let bits: Vec<_> = (0..500).map(|i| d.decide(i, &mut [0u8; 100], &alone).corrupt_bit).collect();
    assert_eq!(bits, a.iter().map(|(o, _)| o.corrupt_bit).collect::<Vec<_>>());
}

#[test]
fn netproxy_blackhole_one_client_holds_then_delivers() {
    let srv = server(Mode::Echo);
    let proxy = Proxy::start("p", srv.addr, 1).unwrap();
    let mut a = connect(proxy.listener("a").unwrap());
    let mut b = connect(proxy.listener("b").unwrap());
    rtt(&mut a, b"warm");
    rtt(&mut b, b"warm");
    let id = proxy.apply(Rule::clients(["a"], Direction::Both, Effect::Blackhole));
    a.write_all(b"held").unwrap();
    // A new connection of `a` is accepted but nothing crosses, not even the connect to the upstream.
    let mut a2 = connect(proxy.listener("a").unwrap());
    a2.write_all(b"later").unwrap();
    let t0 = Instant::now();
    let d = rtt(&mut b, b"free");
    assert!(d < Duration::from_millis(200), "{d:?}");
    assert!(nothing_within(&mut a, Duration::from_millis(300)));
    assert!(nothing_within(&mut a2, Duration::from_millis(10)));
    assert!(t0.elapsed() >= Duration::from_millis(300));
    let st = proxy.stats();
    assert!(st.clients["a"].upstream.held >= 1, "{:?}", st.clients["a"]);
    assert_eq!(st.clients["a"].held_connects, 1);
    assert_eq!(st.clients["b"].upstream.held, 0);
    assert!(proxy.remove(id));
    assert_eq!(read_n(&mut a, 4, T).unwrap(), b"held");
    assert_eq!(read_n(&mut a2, 5, T).unwrap(), b"later");
    assert_eq!(proxy.stats().clients["a"].connections, 2);
}

#[test]
fn netproxy_upstream_blackhole_is_one_way() {
    let srv = server(Mode::Ticker);
    let proxy = Proxy::start("p", srv.addr, 1).unwrap();
    let mut s = connect(proxy.listener("c").unwrap());
    assert_eq!(read_n(&mut s, 6, T).unwrap(), b"hello\n");
    let id = proxy.apply(Rule::all(Direction::Upstream, Effect::Blackhole));
    s.write_all(b"ping").unwrap();
    // Pushes from the server keep arriving for 300 ms...
    let t0 = Instant::now();
    let mut ticks = 0;
    while t0.elapsed() < Duration::from_millis(300) {
        assert_eq!(read_n(&mut s, 5, T).unwrap(), b"tick\n");
        ticks += 1;
    }
    assert!(ticks >= 2, "{ticks}");
    // ...while the server has received nothing.
    assert!(srv.received.lock().unwrap().is_empty());
    assert!(proxy.stats().clients["c"].upstream.held >= 1);
    proxy.remove(id);
    assert!(eventually(T, || srv.received.lock().unwrap().as_slice() == b"ping"));
}

#[test]
fn netproxy_bandwidth_paces_200_kb_at_100_kb_per_s() {
    let srv = server(Mode::Echo);
    let proxy = Proxy::start("p", srv.addr, 1).unwrap();
    let mut s = connect(proxy.listener("c").unwrap());
    rtt(&mut s, b"warm");
    proxy.apply(Rule::all(Direction::Upstream, Effect::Bandwidth { bytes_per_sec: 100_000 }));
    let data = pattern(200_000, 7);
    let mut w = s.try_clone().unwrap();
    let sent = data.clone();
    let t0 = Instant::now();
    let writer = std::thread::spawn(move || w.write_all(&sent).unwrap());
    let got = read_n(&mut s, data.len(), T).unwrap();
    let took = t0.elapsed();
    writer.join().unwrap();
    eprintln!("bandwidth: 200 KB at 100 KB/s took {took:?}");
    assert!(got == data);
    assert!(took >= Duration::from_millis(1500) && took <= Duration::from_secs(6), "{took:?}");
}

/// Sends `n` messages of 1000 bytes one at a time through an upstream-corrupting proxy; returns what came back
/// and the log.
fn corrupt_run(percent: f64) -> (Vec<u8>, Vec<u8>, Vec<Decision>) {
    let srv = server(Mode::Echo);
    let proxy = Proxy::start("p", srv.addr, 5).unwrap();
    let mut s = connect(proxy.listener("c").unwrap());
    proxy.apply(Rule::all(Direction::Upstream, Effect::Corrupt { percent }));
    let mut sent = Vec::new();
    let mut got = Vec::new();
    for i in 0..5u8 {
        let msg = pattern(1000, i);
        s.write_all(&msg).unwrap();
        got.extend(read_n(&mut s, msg.len(), T).unwrap());
        sent.extend(msg);
    }
    (sent, got, proxy.decisions())
}

#[test]
fn netproxy_corrupt_flips_one_bit_per_chunk() {
    let (sent, got, log) = corrupt_run(100.0);
    let mut flipped = Vec::new();
    for (i, (a, b)) in sent.iter().zip(&got).enumerate() {
        for bit in 0..8 {
            if (a ^ b) & (1 << bit) != 0 {
                flipped.push(i as u64 * 8 + bit);
            }
        }
    }
    let mut expected = Vec::new();
    let mut offset = 0u64;
    for d in &log {
        expected.push(offset * 8 + d.corrupt_bit.unwrap());
        offset += d.len as u64;
    }
    assert_eq!(offset, 5000);
    assert!(log.len() >= 5);
    assert_eq!(flipped, expected);
    let (sent, got, log) = corrupt_run(0.0);
    assert!(sent == got);
    assert!(log.iter().all(|d| d.corrupt_bit.is_none()));
}

#[test]
fn netproxy_loss_delays_each_chunk_by_a_doubling_rto() {
    let srv = server(Mode::Echo);
    let proxy = Proxy::start("p", srv.addr, 1).unwrap();
    let mut s = connect(proxy.listener("c").unwrap());
    rtt(&mut s, b"warm");
    proxy.apply(Rule::all(Direction::Upstream, Effect::Loss { percent: 100.0, correlation: 0.0 }));
    let rtts: Vec<Duration> = (0..3).map(|_| rtt(&mut s, b"ping")).collect();
    eprintln!("loss 100%: {rtts:?}");
    for (i, d) in rtts.iter().enumerate() {
        let rto = Duration::from_millis(200 << i);
        assert!(*d >= rto && *d < rto + Duration::from_millis(500), "chunk {i}: {d:?}");
    }
    // The counters are the delivering threads': they may land a moment after the echo did.
    let counted = || {
        let st = &proxy.stats().clients["c"];
        (st.upstream.lost, st.upstream.bytes)
    };
    assert!(eventually(Duration::from_secs(5), || counted() == (3, 4 + 12)), "{:?}", counted());
}

#[test]
fn netproxy_reset_aborts_open_and_new_connections() {
    let srv = server(Mode::Echo);
    let proxy = Proxy::start("p", srv.addr, 1).unwrap();
    let port = proxy.listener("c").unwrap();
    let mut s = connect(port);
    rtt(&mut s, b"warm");
    let id = proxy.apply(Rule::all(Direction::Both, Effect::Reset));
    let ended = |s: &mut TcpStream| {
        s.set_read_timeout(Some(T)).unwrap();
        let mut b = [0u8; 16];
        match s.read(&mut b) {
            Ok(0) => "eof",
            Err(e) if e.kind() == ErrorKind::ConnectionReset => "reset",
            other => panic!("expected EOF or a reset, got {other:?}"),
        }
    };
    let t0 = Instant::now();
    let how = ended(&mut s);
    eprintln!("reset: open connection saw {how} after {:?}", t0.elapsed());
    let mut n = connect(port);
    let _ = n.write_all(b"x");
    ended(&mut n);
    let st = &proxy.stats().clients["c"];
    assert_eq!(st.resets, 1);
    assert_eq!(st.refused, 1);
    proxy.remove(id);
    let mut s = connect(port);
    rtt(&mut s, b"again");
}

#[test]
fn netproxy_max_connections_refuses_the_extra_one() {
    let srv = server(Mode::Echo);
    let config = ProxyConfig { max_connections: 2, ..ProxyConfig::default() };
    let proxy = Proxy::start_with("p", srv.addr, 1, config).unwrap();
    let port = proxy.listener("c").unwrap();
    let mut a = connect(port);
    let mut b = connect(port);
    rtt(&mut a, b"a");
    rtt(&mut b, b"b");
    let mut c = connect(port);
    let _ = c.write_all(b"c");
    assert!(read_n(&mut c, 1, T).is_err());
    assert_eq!(proxy.stats().clients["c"].refused, 1);
    drop((a, b));
    assert!(eventually(T, || proxy.stats().clients["c"].active == 0));
    let mut d = connect(port);
    rtt(&mut d, b"d");
}

#[test]
fn netproxy_stop_ends_every_thread_and_closes_ports() {
    let srv = server(Mode::Echo);
    let proxy = Proxy::start("p", srv.addr, 1).unwrap();
    let port = proxy.listener("c").unwrap();
    let port2 = proxy.listener("d").unwrap();
    let mut s = connect(port);
    rtt(&mut s, b"warm");
    // One connection with data in flight under a long delay.
    proxy.apply(Rule::all(Direction::Both, latency(5_000)));
    s.write_all(b"in flight").unwrap();
    let t0 = Instant::now();
    proxy.stop();
    let took = t0.elapsed();
    eprintln!("stop took {took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    // Every thread held the shared state: only the proxy's own reference is left.
    assert_eq!(Arc::strong_count(&proxy.shared), 1);
    for p in [port, port2] {
        let e = TcpStream::connect(("127.0.0.1", p)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnectionRefused);
    }
    s.set_read_timeout(Some(T)).unwrap();
    let mut b = [0u8; 16];
    assert!(matches!(s.read(&mut b), Ok(0) | Err(_)));
    assert!(matches!(proxy.listener("e"), Err(NetProxyError::Stopped { .. })));
    proxy.stop();
}

#[test]
fn netproxy_rules_validate_and_clamp() {
    assert!(Rule::all(Direction::Both, Effect::Loss { percent: 101.0, correlation: 0.0 }).validate().is_err());
    assert!(Rule::all(Direction::Both, Effect::Reorder { percent: 1.0, correlation: 2.0 }).validate().is_err());
    assert!(Rule::all(Direction::Both, Effect::Bandwidth { bytes_per_sec: 0 }).validate().is_err());
    assert!(Rule::all(Direction::Both, Effect::Corrupt { percent: f64::NAN }).validate().is_err());
    assert!(Rule::all(Direction::Both, latency(1)).validate().is_ok());
    let proxy = Proxy::start("p", "127.0.0.1:9".parse().unwrap(), 1).unwrap();
    let id = proxy.apply(Rule::clients(["x"], Direction::Upstream, Effect::Corrupt { percent: 300.0 }));
    assert_eq!(id, RuleId(1));
    let rules = proxy.active_rules();
    assert_eq!(rules[0].rule.effect, Effect::Corrupt { percent: 100.0 });
    assert_eq!(proxy.apply(Rule::all(Direction::Both, Effect::Blackhole)), RuleId(2));
    let id3 = proxy.apply(Rule::clients(["y"], Direction::Both, latency(1500)));
    let json = serde_json::to_string(&proxy.active_rules()).unwrap();
    assert!(json.contains(r#""kind":"blackhole""#), "{json}");
    assert!(json.contains(r#""delay":"1500ms""#), "{json}");
    let for_x: Vec<RuleId> = proxy.active_rules_for("x").iter().map(|r| r.id).collect();
    assert_eq!(for_x, vec![RuleId(1), RuleId(2)]);
    assert_eq!(proxy.active_rules_for("y").iter().map(|r| r.id).collect::<Vec<_>>(), vec![RuleId(2), id3]);
    proxy.clear();
    assert!(proxy.active_rules().is_empty());
}

#[test]
fn netproxy_upstream_down_counts_an_error_and_resets_the_client() {
    // A port nothing listens on.
    let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let proxy = Proxy::start("p", addr, 1).unwrap();
    let mut s = connect(proxy.listener("c").unwrap());
    let _ = s.write_all(b"x");
    assert!(read_n(&mut s, 1, T).is_err());
    assert!(eventually(T, || proxy.stats().clients["c"].errors == 1));
    let st = proxy.stats();
    assert!(st.clients["c"].last_error.as_deref().unwrap_or("").contains("connect to upstream"), "{st:?}");
    serde_json::to_string(&st).unwrap();
}

#[test]
fn netproxy_upstream_half_close_lets_the_client_still_send() {
    let srv = server(Mode::GreetAndHalfClose);
    let proxy = Proxy::start("p", srv.addr, 1).unwrap();
    let mut s = connect(proxy.listener("c").unwrap());
    assert_eq!(read_to_end(&mut s, T), b"bye\n");
    s.write_all(b"after").unwrap();
    assert!(eventually(T, || srv.received.lock().unwrap().as_slice() == b"after"));
    s.shutdown(Shutdown::Write).unwrap();
    assert!(eventually(T, || proxy.stats().clients["c"].active == 0));
    assert_eq!(proxy.stats().clients["c"].errors, 0);
}

#[test]
fn netproxy_reorder_waits_one_more_latency_slot_duplicate_is_counted() {
    let srv = server(Mode::Echo);
    let proxy = Proxy::start("p", srv.addr, 1).unwrap();
    let mut s = connect(proxy.listener("c").unwrap());
    rtt(&mut s, b"warm");
    proxy.apply(Rule::all(Direction::Upstream, latency(60)));
    proxy.apply(Rule::all(Direction::Upstream, Effect::Reorder { percent: 100.0, correlation: 0.0 }));
    proxy.apply(Rule::all(Direction::Upstream, Effect::Duplicate { percent: 100.0 }));
    let d = rtt(&mut s, b"ping");
    assert!(d >= Duration::from_millis(120) && d < Duration::from_millis(600), "{d:?}");
    let st = &proxy.stats().clients["c"];
    assert_eq!((st.upstream.reordered, st.upstream.duplicated), (1, 1));
    let log = proxy.take_decisions();
    assert_eq!(log.len(), 1);
    let json = serde_json::to_string(&log[0]).unwrap();
    assert!(json.contains(r#""delay_us":120000"#), "{json}");
    assert_eq!(log[0].rules, vec![RuleId(1), RuleId(2), RuleId(3)]);
    assert!(proxy.decisions().is_empty());
}

/// 2 MB sent into an upstream-bound blackhole with 64 KiB of room: the proxy stops reading (backpressure) and
/// delivers everything after the heal, or (with `HeldOverflow::Reset`) resets the connection.
fn held_overflow(overflow: HeldOverflow) -> (Proxy, Server, TcpStream, JoinHandle<std::io::Result<()>>, Vec<u8>) {
    let srv = server(Mode::Echo);
    let config = ProxyConfig { max_held_bytes: 64 * 1024, held_overflow: overflow, ..ProxyConfig::default() };
    let proxy = Proxy::start_with("p", srv.addr, 1, config).unwrap();
    let mut s = connect(proxy.listener("c").unwrap());
    rtt(&mut s, b"warm");
    let data = pattern(2_000_000, 3);
    let mut w = s.try_clone().unwrap();
    w.set_write_timeout(Some(T)).unwrap();
    let sent = data.clone();
    proxy.apply(Rule::all(Direction::Upstream, Effect::Blackhole));
    let writer = std::thread::spawn(move || w.write_all(&sent));
    (proxy, srv, s, writer, data)
}

#[test]
fn netproxy_held_bytes_are_bounded_by_backpressure() {
    let (proxy, _srv, mut s, writer, data) = held_overflow(HeldOverflow::Backpressure);
    assert!(nothing_within(&mut s, Duration::from_millis(300)));
    let st = proxy.stats().clients["c"].clone();
    assert!(st.upstream.held >= 1 && st.upstream.held_bytes <= 64 * 1024 + 16 * 1024, "{st:?}");
    proxy.clear();
    assert!(read_n(&mut s, data.len(), T).unwrap() == data);
    writer.join().unwrap().unwrap();
    assert_eq!(proxy.stats().clients["c"].resets, 0);
}

#[test]
fn netproxy_held_overflow_can_reset_instead() {
    let (proxy, _srv, mut s, writer, _data) = held_overflow(HeldOverflow::Reset);
    s.set_read_timeout(Some(T)).unwrap();
    let mut b = [0u8; 16];
    assert!(matches!(s.read(&mut b), Ok(0) | Err(_)));
    // The 2 MB may all have fit in the kernel's buffers before the reset: the writer may or may not see it.
    let _ = writer.join().unwrap();
    assert_eq!(proxy.stats().clients["c"].resets, 1);
}

#[test]
fn netproxy_proxy_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Proxy>();
    check::<ProxyStats>();
}

#[test]
fn netproxy_client_hanging_up_mid_delay_is_fine() {
    let srv = server(Mode::Echo);
    let proxy = Proxy::start("p", srv.addr, 1).unwrap();
    let port = proxy.listener("c").unwrap();
    proxy.apply(Rule::all(Direction::Both, latency(200)));
    for _ in 0..5 {
        let mut s = connect(port);
        s.write_all(&pattern(50_000, 1)).unwrap();
        drop(s);
    }
    assert!(eventually(T, || proxy.stats().clients["c"].active == 0), "{:?}", proxy.stats());
    let mut s = connect(port);
    let d = rtt(&mut s, b"still");
    assert!(d >= Duration::from_millis(400), "{d:?}");
}

#[test]
fn netproxy_fifty_concurrent_connections() {
    let srv = server(Mode::Echo);
    let proxy = Proxy::start("p", srv.addr, 1).unwrap();
    let port = proxy.listener("c").unwrap();
    proxy.apply(Rule::all(Direction::Upstream, latency(50)));
    let clients: Vec<_> = (0..50u8)
        .map(|i| {
            std::thread::spawn(move || {
                let mut s = connect(port);
                let msg = pattern(2000, i);
                s.write_all(&msg).unwrap();
                assert!(read_n(&mut s, msg.len(), T).unwrap() == msg);
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let st = &proxy.stats().clients["c"];
    assert_eq!(st.connections, 50);
    assert_eq!(st.errors, 0, "{:?}", st.last_error);
    // Indices 0..50, each connection's chunks counted from 0.
    let conns: std::collections::BTreeSet<u64> = proxy.decisions().iter().map(|d| d.conn).collect();
    assert_eq!(conns, (0..50).collect());
}
