//! The policy of tape replay: which taped call answers the guest's next call on a socket, when the guest has
//! diverged from the recording (and what to tell the user), which /proc and /sys files the /proc tape covers,
//! and what a replayed /proc read returns. The supervisor's network handlers read the guest and make the
//! calls; what they conclude is decided here.

use std::collections::{HashMap, VecDeque};

use repro_model::tape::{NetEvent, NetOp, NetTape, ProcTape};

/// The guest did something the recording does not have: the replay stops, with this explanation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Divergence(pub String);

/// A replay of the network tape: each socket's remaining taped calls, in order.
#[derive(Debug, Clone, Default)]
pub struct NetReplay {
    queues: HashMap<u32, VecDeque<NetEvent>>,
}

impl NetReplay {
    pub fn new(tape: &NetTape) -> Self {
        let mut queues: HashMap<u32, VecDeque<NetEvent>> = HashMap::new();
        for e in &tape.events {
            queues.entry(e.socket).or_default().push_back(e.clone());
        }
        NetReplay { queues }
    }

    /// Whether the next taped call of `socket` is `op` (without taking it).
    pub fn next_is(&self, socket: u32, op: NetOp) -> bool {
        self.queues.get(&socket).and_then(|q| q.front()).is_some_and(|e| e.op == op)
    }

    /// Calls of `socket` still on the tape.
    pub fn remaining(&self, socket: u32) -> usize {
        self.queues.get(&socket).map_or(0, VecDeque::len)
    }

    /// The next taped call of `socket`, which must be `op` (the guest's call number `ordinal` on that socket).
    pub fn next(&mut self, socket: u32, ordinal: u32, op: NetOp) -> Result<NetEvent, Divergence> {
        match self.queues.get_mut(&socket).and_then(|q| q.pop_front()) {
            Some(e) if e.op == op => Ok(e),
            Some(e) => Err(Divergence(format!(
                "the guest called {} on socket {socket} (call {ordinal}) where the recording has {}",
                op.name(),
                e.op.name()
            ))),
            None => Err(Divergence(format!(
                "the guest called {} on socket {socket} (call {ordinal}), which is not on the tape",
                op.name()
            ))),
        }
    }
}

/// A connect must go where the recording's went.
pub fn check_connect(socket: u32, ordinal: u32, addr: &[u8], ev: &NetEvent) -> Result<(), Divergence> {
    if ev.addr == addr {
        return Ok(());
    }
    Err(Divergence(format!(
        "the guest connected socket {socket} (call {ordinal}) to {} where the recording connected to {}",
        show_addr(addr),
        show_addr(&ev.addr)
    )))
}

/// A read must have room for what the recording read.
pub fn check_read(socket: u32, ordinal: u32, room: usize, ev: &NetEvent) -> Result<(), Divergence> {
    if ev.result < 0 || ev.data.len() <= room {
        return Ok(());
    }
    Err(Divergence(format!(
        "the guest read at most {room} bytes from socket {socket} (call {ordinal}) where the recording read {}",
        ev.data.len()
    )))
}

/// A write must send (at least) the bytes the recording sent.
pub fn check_write(socket: u32, ordinal: u32, data: &[u8], ev: &NetEvent) -> Result<(), Divergence> {
    if ev.result < 0 || (data.len() >= ev.data.len() && data[..ev.data.len()] == ev.data[..]) {
        return Ok(());
    }
    let at = data.iter().zip(&ev.data).position(|(x, y)| x != y).unwrap_or(data.len().min(ev.data.len()));
    Err(Divergence(format!(
        "the guest wrote {} bytes to socket {socket} (call {ordinal}) that differ from the recording's {} at byte \
         {at}: {} where the recording has {}",
        data.len(),
        ev.data.len(),
        show(&data[at.min(data.len())..]),
        show(&ev.data[at.min(ev.data.len())..])
    )))
}

/// What becomes of a call that moves a taped socket's data without a buffer the supervisor could tape
/// (sendfile, splice, sendmmsg, recvmmsg).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Untaped {
    /// Replay: the tape cannot answer it; the replay stops.
    Diverge(Divergence),
    /// Recording: it runs, and the run is not reproducible, for this reason.
    NotEnforced(String),
}

/// The verdict on untaped call `name` on taped socket `socket`, whose last call was number `ord`.
pub fn untaped(name: &str, socket: u32, ord: u32, replay: bool) -> Untaped {
    if replay {
        let ordinal = ord + 1;
        Untaped::Diverge(Divergence(format!(
            "the guest called {name} on socket {socket} (call {ordinal}), which is not on the tape"
        )))
    } else {
        Untaped::NotEnforced(format!(
            "{name} on a socket taped by --network record (socket {socket}): its data cannot be taped"
        ))
    }
}

/// A replay of the /proc tape: the recorded contents of each path in the order they were read.
#[derive(Debug, Clone, Default)]
pub struct ProcReplay {
    reads: HashMap<String, VecDeque<Vec<u8>>>,
}

impl ProcReplay {
    pub fn new(tape: &ProcTape) -> Self {
        let mut reads: HashMap<String, VecDeque<Vec<u8>>> = HashMap::new();
        for r in &tape.reads {
            reads.entry(r.path.clone()).or_default().push_back(r.data.clone());
        }
        ProcReplay { reads }
    }

    /// What an open of `path` reads: the recorded opens in order, then the last one again; `None` for a path
    /// the recording never read (it is read from the host, like any file).
    pub fn open(&mut self, path: &str) -> Option<Vec<u8>> {
        let q = self.reads.get_mut(path)?;
        if q.len() > 1 {
            q.pop_front()
        } else {
            q.front().cloned()
        }
    }
}

/// Whether `path` is one the /proc tape covers: a file under /proc or /sys whose reads do not block and are
/// contents (not kmsg, trace_pipe, a process's memory, descriptors...).
pub fn proc_candidate(path: &[u8]) -> bool {
    let under = |p: &[u8]| path.starts_with(p) && path.len() > p.len();
    if !(under(b"/proc/") || under(b"/sys/")) {
        return false;
    }
    let skip: [&[u8]; 6] = [b"kmsg", b"trace_pipe", b"/mem", b"pagemap", b"kcore", b"/fd/"];
    !skip.iter().any(|s| path.windows(s.len()).any(|w| w == *s))
}

/// Bytes as a short quoted string for a message.
fn show(b: &[u8]) -> String {
    let s: String = String::from_utf8_lossy(&b[..b.len().min(40)]).escape_debug().collect();
    if b.len() > 40 {
        format!("\"{s}\"...")
    } else {
        format!("\"{s}\"")
    }
}

/// An AF_INET/AF_INET6 socket address as `ip:port`, anything else in hexadecimal.
pub fn show_addr(a: &[u8]) -> String {
    let fam = a.get(0..2).map(|f| u16::from_ne_bytes([f[0], f[1]]) as i32);
    let port = a.get(2..4).map_or(0, |p| u16::from_be_bytes([p[0], p[1]]));
    match fam {
        Some(libc::AF_INET) if a.len() >= 8 => format!("{}:{port}", std::net::Ipv4Addr::new(a[4], a[5], a[6], a[7])),
        Some(libc::AF_INET6) if a.len() >= 24 => {
            let mut b = [0u8; 16];
            b.copy_from_slice(&a[8..24]);
            format!("[{}]:{port}", std::net::Ipv6Addr::from(b))
        }
        _ => format!("address {}", a.iter().map(|x| format!("{x:02x}")).collect::<String>()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use repro_model::tape::ProcRead;

    const LOCALHOST_80: [u8; 16] = [2, 0, 0, 80, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];

    fn ev(socket: u32, op: NetOp, result: i64, data: &[u8], addr: &[u8]) -> NetEvent {
        NetEvent { socket, op, result, data: data.to_vec(), addr: addr.to_vec() }
    }

    #[test]
    fn calls_are_answered_per_socket_in_order() {
        let tape = NetTape {
            events: vec![
                ev(0, NetOp::Socket, 0, b"", b""),
                ev(1, NetOp::Socket, 0, b"", b""),
                ev(0, NetOp::Connect, 0, b"", b""),
            ],
        };
        let mut r = NetReplay::new(&tape);
        assert_eq!((r.remaining(0), r.remaining(1), r.remaining(2)), (2, 1, 0));
        assert!(r.next_is(1, NetOp::Socket));
        assert_eq!(r.next(1, 1, NetOp::Socket).unwrap().socket, 1);
        assert_eq!(r.next(0, 1, NetOp::Socket).unwrap().op, NetOp::Socket);
        let e = r.next(0, 2, NetOp::Read).unwrap_err();
        assert_eq!(e.0, "the guest called read on socket 0 (call 2) where the recording has connect");
        let e = r.next(0, 3, NetOp::Read).unwrap_err();
        assert_eq!(e.0, "the guest called read on socket 0 (call 3), which is not on the tape");
    }

    #[test]
    fn divergences_name_what_differs() {
        let c = ev(0, NetOp::Connect, 0, b"", &LOCALHOST_80);
        assert!(check_connect(0, 2, &LOCALHOST_80, &c).is_ok());
        let other = [2, 0, 0, 81, 127, 0, 0, 1];
        let e = check_connect(0, 2, &other, &c).unwrap_err();
        assert_eq!(
            e.0,
            "the guest connected socket 0 (call 2) to 127.0.0.1:81 where the recording connected to 127.0.0.1:80"
        );
        let w = ev(0, NetOp::Write, 4, b"PING", b"");
        assert!(check_write(0, 3, b"PING", &w).is_ok());
        assert!(
            check_write(0, 3, b"PINGPONG", &w).is_ok(),
            "more than the recording sent: the rest is the next call's"
        );
        let e = check_write(0, 3, b"PANG", &w).unwrap_err();
        assert!(e.0.contains("at byte 1: \"ANG\" where the recording has \"ING\""), "{e}");
        assert!(check_write(0, 3, b"PI", &w).is_err(), "less than the recording sent");
        assert!(
            check_write(0, 3, b"x", &ev(0, NetOp::Write, -32, b"", b"")).is_ok(),
            "a failed write matches any bytes"
        );
        let r = ev(0, NetOp::Read, 4, b"PONG", b"");
        assert!(check_read(0, 4, 4, &r).is_ok());
        assert!(check_read(0, 4, 3, &r).is_err());
        assert!(matches!(untaped("splice", 0, 4, true), Untaped::Diverge(d) if d.0.contains("(call 5)")));
        assert!(matches!(untaped("splice", 0, 4, false), Untaped::NotEnforced(w) if w.contains("splice")));
    }

    #[test]
    fn proc_replay_serves_reads_in_order_then_the_last_again() {
        let read = |p: &str, d: &[u8]| ProcRead { path: p.into(), data: d.to_vec() };
        let mut r = ProcReplay::new(&ProcTape {
            reads: vec![read("/proc/a", b"1"), read("/proc/b", b"x"), read("/proc/a", b"2")],
        });
        assert_eq!(r.open("/proc/a").unwrap(), b"1");
        assert_eq!(r.open("/proc/a").unwrap(), b"2");
        assert_eq!(r.open("/proc/a").unwrap(), b"2");
        assert_eq!(r.open("/proc/b").unwrap(), b"x");
        assert_eq!(r.open("/proc/c"), None);
    }

    #[test]
    fn proc_candidates() {
        assert!(proc_candidate(b"/proc/loadavg"));
        assert!(proc_candidate(b"/sys/class/net/lo/mtu"));
        assert!(!proc_candidate(b"/proc/kmsg"));
        assert!(!proc_candidate(b"/proc/self/fd/0"));
        assert!(!proc_candidate(b"/proc/1/mem"));
        assert!(!proc_candidate(b"/etc/passwd"));
        assert!(!proc_candidate(b"/proc/"));
    }

    #[test]
    fn addresses() {
        assert_eq!(show_addr(&LOCALHOST_80), "127.0.0.1:80");
        let mut v6 = vec![10u8, 0, 1, 187, 0, 0, 0, 0];
        v6.extend(std::net::Ipv6Addr::LOCALHOST.octets());
        v6[0..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        assert_eq!(show_addr(&v6), "[::1]:443");
        assert_eq!(show_addr(&[9, 9]), "address 0909");
        assert_eq!(show_addr(&[]), "address ");
    }

    proptest! {
        /// Messages about any bytes and addresses are made without panicking.
        #[test]
        fn any_write_or_address_is_judged(data in proptest::collection::vec(any::<u8>(), 0..100), rec in proptest::collection::vec(any::<u8>(), 0..100)) {
            let w = ev(0, NetOp::Write, rec.len() as i64, &rec, b"");
            let same = data.len() >= rec.len() && data[..rec.len()] == rec[..];
            prop_assert_eq!(check_write(0, 1, &data, &w).is_ok(), same);
            show_addr(&data);
            proc_candidate(&data);
        }
    }
}
