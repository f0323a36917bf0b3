//! One proxied connection: a reader and a writer per direction, a queue between them.
//!
//! The reader reads a chunk, decides it (delay, corruption) under the rules active at that moment, and queues
//! it with its delivery time (never before the previous chunk's). The writer delivers the head of the queue
//! when its time has come, unless a blackhole holds the direction, pacing it under a bandwidth rule. An EOF
//! is queued like a chunk and delivered as `shutdown(Write)` (half-close). Any I/O error aborts the whole
//! connection (both sockets are closed with RST).

use std::collections::VecDeque;
use std::io::{ErrorKind, Read};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{send, setsockopt, sockopt, MsgFlags};

use super::decide::Decider;
use super::{lock, ClientStats, Decision, DirStats, Direction, HeldOverflow, Shared};

/// Socket read and write timeouts: how often a blocked thread looks at the abort flag.
const IO_TIMEOUT: Duration = Duration::from_millis(200);
/// Longest condvar wait before re-checking the rules (wake-ups are notified; this is a safety net).
const IDLE_WAIT: Duration = Duration::from_millis(500);
const STACK: usize = 256 * 1024;

#[derive(Debug, Default)]
pub(crate) struct DirCounters {
    bytes: AtomicU64,
    chunks: AtomicU64,
    delayed: AtomicU64,
    lost: AtomicU64,
    corrupted: AtomicU64,
    duplicated: AtomicU64,
    reordered: AtomicU64,
    held: AtomicU64,
    held_bytes: AtomicU64,
}

fn add(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::Relaxed);
}

fn get(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

impl DirCounters {
    fn snapshot(&self) -> DirStats {
        DirStats {
            bytes: get(&self.bytes),
            chunks: get(&self.chunks),
            delayed: get(&self.delayed),
            lost: get(&self.lost),
            corrupted: get(&self.corrupted),
            duplicated: get(&self.duplicated),
            reordered: get(&self.reordered),
            held: get(&self.held),
            held_bytes: get(&self.held_bytes),
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct ClientCounters {
    pub(crate) port: AtomicU64,
    pub(crate) connections: AtomicU64,
    pub(crate) active: AtomicU64,
    pub(crate) refused: AtomicU64,
    pub(crate) resets: AtomicU64,
    pub(crate) held_connects: AtomicU64,
    errors: AtomicU64,
    last_error: Mutex<Option<String>>,
    up: DirCounters,
    down: DirCounters,
}

impl ClientCounters {
    pub(crate) fn snapshot(&self) -> ClientStats {
        ClientStats {
            port: u16::try_from(get(&self.port)).unwrap_or(0),
            connections: get(&self.connections),
            active: get(&self.active),
            refused: get(&self.refused),
            resets: get(&self.resets),
            held_connects: get(&self.held_connects),
            errors: get(&self.errors),
            last_error: lock(&self.last_error).clone(),
            upstream: self.up.snapshot(),
            downstream: self.down.snapshot(),
        }
    }

    pub(crate) fn error(&self, message: String) {
        add(&self.errors, 1);
        *lock(&self.last_error) = Some(message);
    }

    fn dir(&self, flow: Direction) -> &DirCounters {
        match flow {
            Direction::Downstream => &self.down,
            _ => &self.up,
        }
    }
}

struct Chunk {
    data: Vec<u8>,
    deliver_at: Instant,
    /// Already counted as held by a blackhole.
    held: bool,
}

#[derive(Default)]
struct DirState {
    queue: VecDeque<Chunk>,
    queued: usize,
    eof: bool,
}

struct Dir {
    state: Mutex<DirState>,
    cv: Condvar,
}

impl Dir {
    fn new() -> Dir {
        Dir { state: Mutex::new(DirState::default()), cv: Condvar::new() }
    }

    fn wait<'a>(&self, st: MutexGuard<'a, DirState>, timeout: Duration) -> MutexGuard<'a, DirState> {
        match self.cv.wait_timeout(st, timeout) {
            Ok((st, _)) => st,
            Err(e) => e.into_inner().0,
        }
    }
}

pub(crate) struct Conn {
    client: String,
    index: u64,
    counters: Arc<ClientCounters>,
    aborted: AtomicBool,
    client_sock: Mutex<Option<TcpStream>>,
    upstream_sock: Mutex<Option<TcpStream>>,
    up: Dir,
    down: Dir,
    handles: Mutex<Vec<JoinHandle<()>>>,
    /// Threads of this connection still running.
    alive: AtomicUsize,
}

fn set_linger0(s: &TcpStream) {
    let _ = setsockopt(s, sockopt::Linger, &nix::libc::linger { l_onoff: 1, l_linger: 0 });
}

/// Closes an accepted socket with RST.
pub(crate) fn reset_now(s: &TcpStream) {
    set_linger0(s);
}

fn side(flow: Direction, reading: bool) -> &'static str {
    match (flow, reading) {
        (Direction::Downstream, true) | (Direction::Upstream, false) => "upstream",
        _ => "client",
    }
}

impl Conn {
    pub(crate) fn client(&self) -> &str {
        &self.client
    }

    pub(crate) fn counters(&self) -> &ClientCounters {
        &self.counters
    }

    fn dir(&self, flow: Direction) -> &Dir {
        match flow {
            Direction::Downstream => &self.down,
            _ => &self.up,
        }
    }

    fn aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }

    /// Aborts the connection: threads end, sockets close (with RST if `rst`). True if this call aborted it.
    pub(crate) fn abort(&self, rst: bool) -> bool {
        if self.aborted.swap(true, Ordering::SeqCst) {
            return false;
        }
        for sock in [&self.client_sock, &self.upstream_sock] {
            if let Some(s) = lock(sock).as_ref() {
                if rst {
                    set_linger0(s);
                }
                // Wakes a blocked read (it returns 0 on Linux); the socket closes when the threads drop it.
                let _ = s.shutdown(Shutdown::Read);
            }
        }
        self.notify();
        true
    }

    /// An I/O error: aborts with RST and records it, unless the connection was already aborted.
    fn fail(&self, message: String) {
        if !self.aborted() && self.abort(true) {
            self.counters.error(message);
        }
    }

    /// Wakes this connection's waiting threads.
    pub(crate) fn notify(&self) {
        for d in [&self.up, &self.down] {
            let _st = lock(&d.state);
            d.cv.notify_all();
        }
    }

    pub(crate) fn finished(&self) -> bool {
        self.alive.load(Ordering::SeqCst) == 0
    }

    pub(crate) fn join(&self) {
        loop {
            let h = lock(&self.handles).pop();
            match h {
                Some(h) => {
                    let _ = h.join();
                }
                None => break,
            }
        }
    }

    /// Waits until `t`; false if the connection was aborted meanwhile.
    fn sleep_until(&self, dir: &Dir, t: Instant) -> bool {
        let mut st = lock(&dir.state);
        loop {
            if self.aborted() {
                return false;
            }
            let now = Instant::now();
            if now >= t {
                return true;
            }
            st = dir.wait(st, t - now);
        }
    }
}

/// Decrements the connection's thread count at thread end; the last one out releases the sockets.
struct Guard {
    shared: Arc<Shared>,
    conn: Arc<Conn>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.conn.alive.fetch_sub(1, Ordering::SeqCst) == 1 {
            lock(&self.conn.client_sock).take();
            lock(&self.conn.upstream_sock).take();
            self.shared.live.fetch_sub(1, Ordering::SeqCst);
            self.conn.counters.active.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

fn spawn_thread(shared: &Arc<Shared>, conn: &Arc<Conn>, what: &str, f: impl FnOnce(Guard) + Send + 'static) -> bool {
    conn.alive.fetch_add(1, Ordering::SeqCst);
    let guard = Guard { shared: shared.clone(), conn: conn.clone() };
    let name = format!("netproxy-{what}-{}-{}", conn.client, conn.index);
    // The guard moves into the thread; if spawning fails the closure (and the guard) is dropped here.
    match std::thread::Builder::new().name(name).stack_size(STACK).spawn(move || f(guard)) {
        Ok(h) => {
            lock(&conn.handles).push(h);
            true
        }
        Err(e) => {
            conn.fail(format!("spawn a {what} thread: {e}"));
            false
        }
    }
}

/// Starts forwarding an accepted client connection.
pub(crate) fn spawn(shared: &Arc<Shared>, client: &str, stream: TcpStream, counters: &Arc<ClientCounters>) {
    let index = counters.connections.fetch_add(1, Ordering::Relaxed);
    let prepared = stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_nodelay(true))
        .and_then(|()| stream.set_read_timeout(Some(IO_TIMEOUT)))
        .and_then(|()| stream.set_write_timeout(Some(IO_TIMEOUT)))
        .and_then(|()| stream.try_clone());
    let reader = match prepared {
        Ok(r) => r,
        Err(e) => {
            counters.error(format!("prepare an accepted socket: {e}"));
            reset_now(&stream);
            return;
        }
    };
    shared.live.fetch_add(1, Ordering::SeqCst);
    add(&counters.active, 1);
    let conn = Arc::new(Conn {
        client: client.to_string(),
        index,
        counters: counters.clone(),
        aborted: AtomicBool::new(false),
        client_sock: Mutex::new(Some(stream)),
        upstream_sock: Mutex::new(None),
        up: Dir::new(),
        down: Dir::new(),
        handles: Mutex::new(Vec::new()),
        // Released by a guard made below (or at once if no thread can be started).
        alive: AtomicUsize::new(1),
    });
    lock(&shared.conns).push(conn.clone());
    let initial = Guard { shared: shared.clone(), conn: conn.clone() };
    let s = shared.clone();
    let c = conn.clone();
    spawn_thread(shared, &conn, "setup", move |guard| setup(&s, &c, reader, guard));
    drop(initial);
}

/// Connects to the upstream (after an upstream-bound blackhole, if any), starts the other three threads and
/// becomes the client-to-upstream reader.
fn setup(shared: &Arc<Shared>, conn: &Arc<Conn>, client_reader: TcpStream, guard: Guard) {
    let client = conn.client.as_str();
    {
        let mut st = lock(&conn.up.state);
        let mut counted = false;
        while shared.blackholed(client, Direction::Upstream) {
            if conn.aborted() {
                return;
            }
            if !counted {
                add(&conn.counters.held_connects, 1);
                counted = true;
            }
            st = conn.up.wait(st, IDLE_WAIT);
        }
    }
    if conn.aborted() {
        return;
    }
    let upstream = shared.upstream;
    let connected = TcpStream::connect_timeout(&upstream, shared.config.connect_timeout).and_then(|s| {
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(IO_TIMEOUT))?;
        s.set_write_timeout(Some(IO_TIMEOUT))?;
        Ok((s.try_clone()?, s.try_clone()?, s))
    });
    let (up_dest, down_src, up_sock) = match connected {
        Ok(c) => c,
        Err(e) => {
            conn.fail(format!("connect to upstream {upstream}: {e}"));
            return;
        }
    };
    let down_dest = match lock(&conn.client_sock).as_ref().map(TcpStream::try_clone) {
        Some(Ok(s)) => s,
        Some(Err(e)) => {
            conn.fail(format!("clone the client socket: {e}"));
            return;
        }
        None => return,
    };
    *lock(&conn.upstream_sock) = Some(up_sock);
    if conn.aborted() {
        // Aborted before the upstream socket was stored: close it here.
        if let Some(s) = lock(&conn.upstream_sock).as_ref() {
            set_linger0(s);
        }
        return;
    }
    let (s, c) = (shared.clone(), conn.clone());
    if !spawn_thread(shared, conn, "up-writer", move |g| writer(&s, &c, Direction::Upstream, &up_dest, g)) {
        return;
    }
    let (s, c) = (shared.clone(), conn.clone());
    if !spawn_thread(shared, conn, "down-reader", move |g| reader(&s, &c, Direction::Downstream, &down_src, g)) {
        return;
    }
    let (s, c) = (shared.clone(), conn.clone());
    if !spawn_thread(shared, conn, "down-writer", move |g| writer(&s, &c, Direction::Downstream, &down_dest, g)) {
        return;
    }
    reader(shared, conn, Direction::Upstream, &client_reader, guard);
}

fn reader(shared: &Arc<Shared>, conn: &Arc<Conn>, flow: Direction, src: &TcpStream, _guard: Guard) {
    let cfg = &shared.config;
    let client = conn.client.as_str();
    let dir = conn.dir(flow);
    let counters = conn.counters.dir(flow);
    let mut decider = Decider::new(shared.seed, client, conn.index, flow, cfg.rto, cfg.rto_max);
    let mut buf = vec![0u8; cfg.chunk_size];
    let mut index = 0u64;
    let mut last = Instant::now();
    loop {
        if conn.aborted() {
            return;
        }
        let mut src_ref = src;
        let n = match src_ref.read(&mut buf) {
            Ok(0) => {
                if !conn.aborted() {
                    let mut st = lock(&dir.state);
                    st.eof = true;
                    dir.cv.notify_all();
                }
                return;
            }
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {
                continue
            }
            Err(e) => {
                conn.fail(format!("read from {}: {e}", side(flow, true)));
                return;
            }
        };
        let now = Instant::now();
        let mut data = buf[..n].to_vec();
        let rules = shared.chunk_effects(client, flow);
        let mut deliver_at = now;
        if !rules.is_empty() {
            let out = decider.decide(index, &mut data, &rules);
            if out.delay > Duration::ZERO {
                add(&counters.delayed, 1);
            }
            add(&counters.lost, u64::from(out.lost));
            add(&counters.duplicated, u64::from(out.duplicated));
            add(&counters.reordered, u64::from(out.reordered));
            add(&counters.corrupted, u64::from(out.corrupt_count));
            deliver_at = now + out.delay;
            shared.record(Decision {
                client: client.to_string(),
                conn: conn.index,
                direction: flow,
                chunk: index,
                len: n,
                delay: out.delay,
                lost: out.lost,
                duplicated: out.duplicated,
                reordered: out.reordered,
                corrupt_bit: out.corrupt_bit,
                rules: rules.iter().map(|(id, _)| *id).collect(),
            });
        }
        // A stream keeps its order: never before the previous chunk.
        deliver_at = deliver_at.max(last);
        last = deliver_at;
        index += 1;
        let mut st = lock(&dir.state);
        while st.queued > 0 && st.queued + n > cfg.max_held_bytes {
            if conn.aborted() {
                return;
            }
            if cfg.held_overflow == HeldOverflow::Reset && shared.blackholed(client, flow) {
                drop(st);
                if conn.abort(true) {
                    add(&conn.counters.resets, 1);
                }
                return;
            }
            st = dir.wait(st, IDLE_WAIT);
        }
        if conn.aborted() {
            return;
        }
        st.queued += n;
        st.queue.push_back(Chunk { data, deliver_at, held: false });
        dir.cv.notify_all();
    }
}

enum Next {
    Deliver(Chunk),
    Eof,
    Wait(Duration),
}

fn writer(shared: &Arc<Shared>, conn: &Arc<Conn>, flow: Direction, dest: &TcpStream, _guard: Guard) {
    let client = conn.client.as_str();
    let dir = conn.dir(flow);
    let counters = conn.counters.dir(flow);
    let mut next_free = Instant::now();
    loop {
        let chunk = {
            let mut st = lock(&dir.state);
            loop {
                if conn.aborted() {
                    return;
                }
                // Checked under the queue's lock: a rule change notifies under it too, so none is missed.
                let held = shared.blackholed(client, flow);
                let queued = st.queued;
                let eof = st.eof;
                let next = match st.queue.front_mut() {
                    Some(head) if held => {
                        if !head.held {
                            head.held = true;
                            add(&counters.held, 1);
                            add(&counters.held_bytes, head.data.len() as u64);
                        }
                        Next::Wait(IDLE_WAIT)
                    }
                    Some(head) => {
                        let now = Instant::now();
                        if head.deliver_at > now {
                            Next::Wait(head.deliver_at - now)
                        } else {
                            match st.queue.pop_front() {
                                Some(c) => Next::Deliver(c),
                                None => Next::Wait(IDLE_WAIT),
                            }
                        }
                    }
                    None if eof && !held => Next::Eof,
                    None => Next::Wait(IDLE_WAIT),
                };
                match next {
                    Next::Deliver(c) => {
                        st.queued = queued - c.data.len();
                        dir.cv.notify_all();
                        break c;
                    }
                    Next::Eof => {
                        drop(st);
                        let _ = dest.shutdown(Shutdown::Write);
                        return;
                    }
                    Next::Wait(d) => st = dir.wait(st, d),
                }
            }
        };
        if !write_paced(shared, conn, flow, dest, &chunk.data, &mut next_free) {
            return;
        }
        add(&counters.bytes, chunk.data.len() as u64);
        add(&counters.chunks, 1);
    }
}

/// Writes `data`, in slices of 1/20 s under a bandwidth rule. False if the connection ended.
fn write_paced(
    shared: &Shared,
    conn: &Conn,
    flow: Direction,
    dest: &TcpStream,
    data: &[u8],
    next_free: &mut Instant,
) -> bool {
    let mut off = 0;
    while off < data.len() {
        let end = match shared.bandwidth(&conn.client, flow) {
            None => data.len(),
            Some(rate) => {
                let slice = usize::try_from(rate / 20).unwrap_or(usize::MAX).clamp(1, shared.config.chunk_size);
                let end = off + slice.min(data.len() - off);
                let start = (*next_free).max(Instant::now());
                if !conn.sleep_until(conn.dir(flow), start) {
                    return false;
                }
                *next_free = start + Duration::from_secs_f64((end - off) as f64 / rate as f64);
                end
            }
        };
        if !write_all(conn, flow, dest, &data[off..end]) {
            return false;
        }
        off = end;
    }
    true
}

fn write_all(conn: &Conn, flow: Direction, dest: &TcpStream, mut buf: &[u8]) -> bool {
    while !buf.is_empty() {
        if conn.aborted() {
            return false;
        }
        match send(dest.as_raw_fd(), buf, MsgFlags::MSG_NOSIGNAL) {
            Ok(0) => {
                conn.fail(format!("write to {}: wrote 0 bytes", side(flow, false)));
                return false;
            }
            Ok(n) => buf = &buf[n..],
            Err(Errno::EAGAIN | Errno::EINTR) => {}
            Err(e) => {
                conn.fail(format!("write to {}: {e}", side(flow, false)));
                return false;
            }
        }
    }
    true
}
