//! Network and /proc-/sys tapes (`repro capture --network record`, `repro replay`); see docs/pack-format.md.
//!
//! Network: while taping, the filter also sends socket, connect, accept/accept4, read/readv/recvfrom/recvmsg,
//! write/writev/sendto/sendmsg (and, on replay, the socket option and address calls) to the supervisor. Only
//! AF_INET/AF_INET6 sockets are taped; a socket is known by the inode of its open file description (so
//! forks and dups share it) and numbered in order of creation. Recording: the supervisor makes the call
//! itself on the guest's socket (created with ADDFD, or borrowed with pidfd_getfd) and tapes the result and
//! the bytes. Replay: the guest's socket is one end of a socket pair whose other end holds one byte (so
//! poll/epoll see it readable and writable), and every taped call is answered from the tape, in order, per
//! socket; a call that is not the next one on the tape, or a write of other bytes, is a divergence: the guest
//! is stopped and the run reports it. read/write/readv/writev on a descriptor that is not a taped socket
//! (the guest's files and pipes: most of them) run natively (SECCOMP_USER_NOTIF_FLAG_CONTINUE); without a
//! network tape they are not in the filter at all.
//!
//! /proc and /sys: an open (read-only) of a regular file of /proc or /sys that the controller does not
//! generate is read by the supervisor and served from a memfd; its bytes are taped by path. On replay the
//! recorded bytes are served for that path (the recorded opens in order, then the last one again).

use std::collections::{HashMap, VecDeque};
use std::ffi::CString;
use std::os::fd::OwnedFd;

use repro_sys::seccomp::{Listener, Notification};
use repro_sys::{fdops, memory, net};

use crate::notify::Reply;
use crate::Shared;

/// Bytes one taped read or write moves at most (larger calls are partial, as the kernel may do).
const IO_MAX: usize = 1 << 20;
/// Largest /proc or /sys file taped (bigger ones are read natively).
const PROC_MAX: usize = 1 << 20;

/// What the network tape does in a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum NetMode {
    /// No taping (the default: the guest has its own empty network namespace or the host's, untaped).
    #[default]
    Off,
    /// Tape the guest's sockets (it uses the host's network).
    Record,
    /// Answer the guest's sockets from this tape.
    Replay(NetTape),
}

/// What the /proc and /sys tape does in a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ProcMode {
    #[default]
    Off,
    Record,
    Replay(ProcTape),
}

/// The tapes of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TapeConfig {
    pub network: NetMode,
    pub proc: ProcMode,
}

impl TapeConfig {
    fn active(&self) -> bool {
        self.network != NetMode::Off || self.proc != ProcMode::Off
    }
}

pub use repro_model::tape::{NetEvent, NetOp, NetTape, ProcRead, ProcTape, RecordedTapes};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A replayed socket.
struct ReplaySocket {
    domain: i32,
    peer_addr: Vec<u8>,
    /// The supervisor's end of the guest's socket pair.
    _peer: OwnedFd,
}

/// The supervisor's tape state during a run.
#[derive(Default)]
pub(crate) struct TapeState {
    cfg: TapeConfig,
    /// Taped sockets by inode: (number, calls answered so far).
    sockets: HashMap<u64, (u32, u32)>,
    next_socket: u32,
    recorded: Vec<NetEvent>,
    /// Replay: each socket's remaining events.
    queues: HashMap<u32, VecDeque<NetEvent>>,
    replay_sockets: HashMap<u32, ReplaySocket>,
    proc_recorded: Vec<ProcRead>,
    proc_replay: HashMap<String, VecDeque<Vec<u8>>>,
    pub diverged: Option<String>,
}

impl TapeState {
    pub(crate) fn new(cfg: &TapeConfig) -> Option<TapeState> {
        if !cfg.active() {
            return None;
        }
        let mut st = TapeState { cfg: cfg.clone(), ..Default::default() };
        if let NetMode::Replay(t) = &cfg.network {
            for e in &t.events {
                st.queues.entry(e.socket).or_default().push_back(e.clone());
            }
        }
        if let ProcMode::Replay(t) = &cfg.proc {
            for r in &t.reads {
                st.proc_replay.entry(r.path.clone()).or_default().push_back(r.data.clone());
            }
        }
        Some(st)
    }

    pub(crate) fn finish(&mut self) -> RecordedTapes {
        RecordedTapes {
            network: (self.cfg.network == NetMode::Record)
                .then(|| NetTape { events: std::mem::take(&mut self.recorded) }),
            proc: (self.cfg.proc == ProcMode::Record)
                .then(|| ProcTape { reads: std::mem::take(&mut self.proc_recorded) }),
        }
    }
}

/// Syscalls the filter sends to the supervisor while taping the network.
pub(crate) fn net_syscalls(cfg: &TapeConfig) -> Vec<u32> {
    let mut v = match cfg.network {
        NetMode::Off => return Vec::new(),
        _ => vec![
            libc::SYS_socket,
            libc::SYS_connect,
            libc::SYS_accept,
            libc::SYS_accept4,
            libc::SYS_recvfrom,
            libc::SYS_recvmsg,
            libc::SYS_sendto,
            libc::SYS_sendmsg,
            // Plain I/O on a socket (bash's /dev/tcp, `cat <&3`): every read and write of the guest is
            // notified, and those on other descriptors are let through (see `handle`). Only while taping.
            libc::SYS_read,
            libc::SYS_readv,
            libc::SYS_write,
            libc::SYS_writev,
            libc::SYS_getsockname,
        ],
    };
    v.extend(UNTAPED.iter().map(|(nr, _, _)| *nr));
    if matches!(cfg.network, NetMode::Replay(_)) {
        v.extend([
            libc::SYS_bind,
            libc::SYS_listen,
            libc::SYS_setsockopt,
            libc::SYS_getsockopt,
            libc::SYS_getpeername,
            libc::SYS_shutdown,
        ]);
    }
    v.into_iter().map(|n| n as u32).collect()
}

/// Calls that move a socket's data without a buffer of the guest's the supervisor could tape, with the
/// arguments that hold descriptors. On a taped socket they are not taped: recording says so (determinism not
/// enforced, exit 121) and lets them run; replay stops as diverged (exit 123) rather than answer from nothing.
const UNTAPED: [(i64, &str, &[usize]); 4] = [
    (libc::SYS_sendfile, "sendfile", &[0, 1]),
    (libc::SYS_splice, "splice", &[0, 2]),
    (libc::SYS_sendmmsg, "sendmmsg", &[0]),
    (libc::SYS_recvmmsg, "recvmmsg", &[0]),
];

/// read(2), readv(2), write(2), writev(2): calls on any descriptor, taped only on a socket.
fn is_plain_io(nr: i64) -> bool {
    matches!(nr, libc::SYS_read | libc::SYS_readv | libc::SYS_write | libc::SYS_writev)
}

/// The inode of a guest descriptor when it is a socket. Found the cheapest way: a duplicate through the task's
/// cached pidfd, and fstat (about 1.6 µs; reading the /proc/PID/fd/N link costs twice that). This runs for
/// every read and write of the guest while the network is taped.
fn socket_inode(sh: &mut Shared, tid: i32, fd: i32) -> Option<u64> {
    let dup = crate::notify::borrow_fd(sh, tid, fd).ok()?;
    let st = fdops::newfstatat_raw(Some(&dup), c"", libc::AT_EMPTY_PATH).ok()?;
    let mode = u32::from_le_bytes([st[24], st[25], st[26], st[27]]);
    (mode & libc::S_IFMT == libc::S_IFSOCK).then(|| u64::from_le_bytes(st[8..16].try_into().unwrap_or([0; 8])))
}

fn fd_inode(fd: &OwnedFd) -> Option<u64> {
    let st = fdops::newfstatat_raw(Some(fd), c"", libc::AT_EMPTY_PATH).ok()?;
    Some(u64::from_le_bytes(st[8..16].try_into().ok()?))
}

fn borrow(tid: i32, fd: i32) -> Result<OwnedFd, i32> {
    let e = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    let pidfd = fdops::pidfd_open(tid, true).or_else(|_| fdops::pidfd_open(tid, false)).map_err(e)?;
    fdops::pidfd_getfd(&pidfd, fd).map_err(e)
}

fn errno(e: std::io::Error) -> i64 {
    -(e.raw_os_error().unwrap_or(libc::EIO) as i64)
}

fn reply(r: i64) -> Reply {
    if r < 0 {
        Reply::Error(-r as i32)
    } else {
        Reply::Value(r)
    }
}

fn read_mem(tid: i32, addr: u64, len: usize) -> Result<Vec<u8>, i32> {
    let mut b = vec![0u8; len];
    memory::read_exact(tid, addr, &mut b).map_err(|_| libc::EFAULT)?;
    Ok(b)
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b.get(o..o + 8).and_then(|s| s.try_into().ok()).unwrap_or([0; 8]))
}

/// The (base, len) pairs of a guest iovec array.
fn iovecs(tid: i32, addr: u64, count: usize) -> Result<Vec<(u64, usize)>, i32> {
    let raw = read_mem(tid, addr, count.min(1024) * 16)?;
    Ok(raw.chunks(16).map(|c| (u64_at(c, 0), u64_at(c, 8) as usize)).collect())
}

/// Where the bytes of a read go and where its sender's address goes.
struct ReadDest {
    iov: Vec<(u64, usize)>,
    /// (address buffer, pointer to its socklen_t) of recvfrom/accept.
    addr: Option<(u64, u64)>,
    /// recvmsg's msghdr (its name length, control length and flags are updated).
    msghdr: Option<u64>,
}

impl ReadDest {
    fn len(&self) -> usize {
        self.iov.iter().map(|(_, l)| *l).sum::<usize>().min(IO_MAX)
    }

    fn deliver(&self, tid: i32, data: &[u8], addr: &[u8]) -> Result<(), i32> {
        let mut off = 0;
        for &(base, len) in &self.iov {
            if off >= data.len() {
                break;
            }
            let n = len.min(data.len() - off);
            memory::write(tid, base, &data[off..off + n]).map_err(|_| libc::EFAULT)?;
            off += n;
        }
        if let Some((buf, lenp)) = self.addr {
            write_addr(tid, buf, lenp, addr)?;
        }
        if let Some(h) = self.msghdr {
            let hdr = read_mem(tid, h, 56)?;
            let name = u64_at(&hdr, 0);
            let namelen = u32::from_le_bytes([hdr[8], hdr[9], hdr[10], hdr[11]]) as usize;
            let n = addr.len().min(namelen);
            if name != 0 && n > 0 {
                memory::write(tid, name, &addr[..n]).map_err(|_| libc::EFAULT)?;
            }
            let outlen = if name != 0 { addr.len() as u32 } else { 0 };
            memory::write(tid, h + 8, &outlen.to_le_bytes()).map_err(|_| libc::EFAULT)?;
            memory::write(tid, h + 40, &0u64.to_le_bytes()).map_err(|_| libc::EFAULT)?;
            memory::write(tid, h + 48, &0u32.to_le_bytes()).map_err(|_| libc::EFAULT)?;
        }
        Ok(())
    }
}

/// Writes a socket address to a guest (buffer, socklen_t pointer) pair, truncated as the kernel does.
fn write_addr(tid: i32, buf: u64, lenp: u64, addr: &[u8]) -> Result<(), i32> {
    if buf == 0 || lenp == 0 {
        return Ok(());
    }
    let cap = u32::from_le_bytes(read_mem(tid, lenp, 4)?.try_into().map_err(|_| libc::EFAULT)?) as usize;
    let n = cap.min(addr.len());
    if n > 0 {
        memory::write(tid, buf, &addr[..n]).map_err(|_| libc::EFAULT)?;
    }
    memory::write(tid, lenp, &(addr.len() as u32).to_le_bytes()).map_err(|_| libc::EFAULT)
}

/// The bytes of a guest write call: (data, flags, destination address).
fn write_source(tid: i32, nr: i64, a: [u64; 6]) -> Result<(Vec<u8>, i32, Vec<u8>), i32> {
    match nr {
        libc::SYS_write => Ok((read_mem(tid, a[1], (a[2] as usize).min(IO_MAX))?, 0, Vec::new())),
        libc::SYS_writev => Ok((gather(tid, a[1], a[2] as usize)?, 0, Vec::new())),
        libc::SYS_sendto => {
            let addr = if a[4] != 0 { read_mem(tid, a[4], (a[5] as usize).min(128))? } else { Vec::new() };
            Ok((read_mem(tid, a[1], (a[2] as usize).min(IO_MAX))?, a[3] as i32, addr))
        }
        _ => {
            let hdr = read_mem(tid, a[1], 56)?;
            Ok((gather(tid, u64_at(&hdr, 16), u64_at(&hdr, 24) as usize)?, a[2] as i32, Vec::new()))
        }
    }
}

/// The bytes of a guest iovec array, concatenated (at most [`IO_MAX`]).
fn gather(tid: i32, iov: u64, count: usize) -> Result<Vec<u8>, i32> {
    let mut data = Vec::new();
    for (base, len) in iovecs(tid, iov, count)? {
        let n = len.min(IO_MAX - data.len());
        data.extend(read_mem(tid, base, n)?);
        if data.len() >= IO_MAX {
            break;
        }
    }
    Ok(data)
}

fn read_dest(tid: i32, nr: i64, a: [u64; 6]) -> Result<(ReadDest, i32), i32> {
    match nr {
        libc::SYS_read => Ok((ReadDest { iov: vec![(a[1], a[2] as usize)], addr: None, msghdr: None }, 0)),
        libc::SYS_readv => Ok((ReadDest { iov: iovecs(tid, a[1], a[2] as usize)?, addr: None, msghdr: None }, 0)),
        libc::SYS_recvfrom => {
            Ok((ReadDest { iov: vec![(a[1], a[2] as usize)], addr: Some((a[4], a[5])), msghdr: None }, a[3] as i32))
        }
        _ => {
            let hdr = read_mem(tid, a[1], 56)?;
            let iov = iovecs(tid, u64_at(&hdr, 16), u64_at(&hdr, 24) as usize)?;
            Ok((ReadDest { iov, addr: None, msghdr: Some(a[1]) }, a[2] as i32))
        }
    }
}

fn show(b: &[u8]) -> String {
    let s: String = String::from_utf8_lossy(&b[..b.len().min(40)]).escape_debug().collect();
    if b.len() > 40 {
        format!("\"{s}\"...")
    } else {
        format!("\"{s}\"")
    }
}

/// Stops the guest: the replay diverged.
fn diverge(sh: &mut Shared, what: String) -> Reply {
    if let Some(t) = sh.tape.as_mut() {
        if t.diverged.is_none() {
            t.diverged = Some(what);
        }
    }
    for &t in &sh.live {
        let _ = repro_sys::ptrace::kill_task(t, libc::SIGKILL);
    }
    Reply::Error(libc::EIO)
}

/// Answers a socket call when it is taped; `None` lets the caller handle it as usual.
pub(crate) fn handle(sh: &mut Shared, n: &Notification) -> Option<Reply> {
    let tape = sh.tape.as_mut()?;
    let replay = match tape.cfg.network {
        NetMode::Off => return None,
        NetMode::Record => false,
        NetMode::Replay(_) => true,
    };
    let tid = n.pid as i32;
    let nr = n.nr as i64;
    let a = n.args;
    // Recording: a wait may be ended by the network, which the logical clock knows nothing of; it runs natively.
    if !replay && crate::waits::is_descriptor_wait(nr) {
        return Some(Reply::Continue);
    }
    if nr == libc::SYS_socket {
        let domain = a[0] as i32;
        if domain != libc::AF_INET && domain != libc::AF_INET6 {
            return None;
        }
        return Some(new_socket(sh, n, domain, a[1] as i32, None));
    }
    if let Some((_, name, fds)) = UNTAPED.iter().find(|(x, _, _)| *x == nr) {
        for &i in fds.iter() {
            let Some(ino) = socket_inode(sh, tid, a[i] as i32) else { continue };
            let Some(&(socket, ord)) = sh.tape.as_ref().and_then(|t| t.sockets.get(&ino)) else { continue };
            if replay {
                let what =
                    format!("the guest called {name} on socket {socket} (call {}), which is not on the tape", ord + 1);
                return Some(diverge(sh, what));
            }
            sh.not_enforced.insert(format!(
                "{name} on a socket taped by --network record (socket {socket}): its data cannot be taped"
            ));
            return Some(Reply::Continue);
        }
        return Some(Reply::Continue);
    }
    let ino = socket_inode(sh, tid, a[0] as i32);
    let tape = sh.tape.as_mut()?;
    let Some((ino, (socket, ord))) = ino.and_then(|i| tape.sockets.get(&i).map(|&v| (i, v))) else {
        // Most reads and writes are of files and pipes: they run natively. (Whether the descriptor is a taped
        // socket is looked up at every call: descriptors are dup'ed, inherited and closed without the
        // supervisor seeing it, so no answer can be cached.)
        return is_plain_io(nr).then_some(Reply::Continue);
    };
    tape.sockets.insert(ino, (socket, ord + 1));
    let ordinal = ord + 1;
    let r = match nr {
        libc::SYS_connect => connect(sh, n, socket, ordinal, replay),
        libc::SYS_accept | libc::SYS_accept4 => {
            let flags = if nr == libc::SYS_accept4 { a[3] as i32 } else { 0 };
            return Some(new_socket(sh, n, 0, flags, Some((socket, ordinal))));
        }
        libc::SYS_read | libc::SYS_readv | libc::SYS_recvfrom | libc::SYS_recvmsg => {
            read(sh, n, socket, ordinal, replay)
        }
        libc::SYS_write | libc::SYS_writev | libc::SYS_sendto | libc::SYS_sendmsg => {
            write(sh, n, socket, ordinal, replay)
        }
        libc::SYS_getsockname => return Some(sockname(sh, n, socket, ino, ord, replay)),
        _ => {
            // Replay only: socket options and addresses of a socket that is a socket pair here.
            tape.sockets.insert(ino, (socket, ord));
            return Some(replay_control(sh, n, socket));
        }
    };
    Some(r)
}

/// getsockname(2) of a taped socket: recorded (a server that bound port 0 tells its clients the port the kernel
/// chose), and answered from the tape on replay; a tape made before sockname events were taped is answered with
/// the unspecified address, as then.
fn sockname(sh: &mut Shared, n: &Notification, socket: u32, ino: u64, ord: u32, replay: bool) -> Reply {
    let tid = n.pid as i32;
    let a = n.args;
    if replay {
        let next_is_sockname = sh
            .tape
            .as_ref()
            .and_then(|t| t.queues.get(&socket))
            .and_then(|q| q.front())
            .is_some_and(|e| e.op == NetOp::Sockname);
        if !next_is_sockname {
            if let Some(t) = sh.tape.as_mut() {
                t.sockets.insert(ino, (socket, ord));
            }
            return replay_control(sh, n, socket);
        }
        let ev = match next_event(sh, socket, ord + 1, NetOp::Sockname) {
            Ok(e) => e,
            Err(r) => return r,
        };
        if ev.result < 0 {
            return reply(ev.result);
        }
        return match write_addr(tid, a[1], a[2], &ev.addr) {
            Ok(()) => Reply::Value(0),
            Err(e) => Reply::Error(e),
        };
    }
    let got = borrow(tid, a[0] as i32).map_err(|e| -(e as i64)).and_then(|fd| net::getsockname(&fd).map_err(errno));
    let (result, addr) = match got {
        Ok(addr) => (0, addr),
        Err(r) => (r, Vec::new()),
    };
    if result == 0 {
        if let Err(e) = write_addr(tid, a[1], a[2], &addr) {
            return Reply::Error(e);
        }
    }
    if let Some(t) = sh.tape.as_mut() {
        t.recorded.push(NetEvent { socket, op: NetOp::Sockname, result, data: Vec::new(), addr });
    }
    reply(result)
}

/// The next taped call of `socket` on replay, checked to be `op`.
fn next_event(sh: &mut Shared, socket: u32, ordinal: u32, op: NetOp) -> Result<NetEvent, Reply> {
    let ev = sh.tape.as_mut().and_then(|t| t.queues.get_mut(&socket)).and_then(|q| q.pop_front());
    match ev {
        Some(e) if e.op == op => Ok(e),
        Some(e) => Err(diverge(
            sh,
            format!(
                "the guest called {} on socket {socket} (call {ordinal}) where the recording has {}",
                op.name(),
                e.op.name()
            ),
        )),
        None => Err(diverge(
            sh,
            format!("the guest called {} on socket {socket} (call {ordinal}), which is not on the tape", op.name()),
        )),
    }
}

/// socket() (accept when `listening` is the listening socket and its call ordinal).
fn new_socket(sh: &mut Shared, n: &Notification, domain: i32, ty: i32, listening: Option<(u32, u32)>) -> Reply {
    let tid = n.pid as i32;
    let a = n.args;
    let Some(tape) = sh.tape.as_mut() else { return Reply::Continue };
    let replay = matches!(tape.cfg.network, NetMode::Replay(_));
    let cloexec = ty & libc::SOCK_CLOEXEC != 0;
    let id = tape.next_socket;
    let addr_out = listening.map(|_| (a[1], a[2]));
    if replay {
        let ev = match listening {
            Some((l, ord)) => next_event(sh, l, ord, NetOp::Accept),
            None => next_event(sh, id, 1, NetOp::Socket),
        };
        let ev = match ev {
            Ok(e) => e,
            Err(r) => return r,
        };
        if ev.result < 0 {
            return reply(ev.result);
        }
        let (guest, peer) = match net::socketpair(libc::SOCK_STREAM | libc::SOCK_CLOEXEC | (ty & libc::SOCK_NONBLOCK)) {
            Ok(p) => p,
            Err(e) => return reply(errno(e)),
        };
        let _ = net::write(&peer, b"\0");
        let Some(ino) = fd_inode(&guest) else { return Reply::Error(libc::EIO) };
        if let Some((buf, lenp)) = addr_out {
            if let Err(e) = write_addr(tid, buf, lenp, &ev.addr) {
                return Reply::Error(e);
            }
        }
        let Some(tape) = sh.tape.as_mut() else { return Reply::Error(libc::EIO) };
        let domain = match listening.and_then(|(l, _)| tape.replay_sockets.get(&l)) {
            Some(l) => l.domain,
            None => domain,
        };
        let peer_addr = if listening.is_some() { ev.addr.clone() } else { Vec::new() };
        tape.replay_sockets.insert(id, ReplaySocket { domain, peer_addr, _peer: peer });
        tape.sockets.insert(ino, (id, if listening.is_some() { 0 } else { 1 }));
        tape.next_socket += 1;
        return Reply::AddFd { fd: guest, cloexec };
    }
    if listening.is_some() {
        let l = match borrow(tid, a[0] as i32) {
            Ok(l) => l,
            Err(e) => return record_new_socket(sh, tid, (id, listening, addr_out, cloexec), Err(-(e as i64))),
        };
        if !acceptable(&l) && blocking(&l) {
            // Waits for a client, perhaps one of the guest's own tasks: on a thread of its own. The socket's
            // number is taken now, in the guest's order of calls.
            tape.next_socket += 1;
            return Reply::Defer(Box::new(move |shared| {
                let made = net::accept4(&l, ty & libc::SOCK_NONBLOCK).map_err(errno);
                let failed = made.is_err();
                let mut sh = crate::lock(shared);
                let before = sh.tape.as_ref().map(|t| t.next_socket);
                let r = record_new_socket(&mut sh, tid, (id, listening, addr_out, cloexec), made);
                // The number was taken when the call was made; a failed accept gives it back if no socket came
                // after it.
                if let (Some(t), Some(b)) = (sh.tape.as_mut(), before) {
                    t.next_socket = if failed && b == id + 1 { id } else { b };
                }
                r
            }));
        }
        let made = net::accept4(&l, ty & libc::SOCK_NONBLOCK).map_err(errno);
        return record_new_socket(sh, tid, (id, listening, addr_out, cloexec), made);
    }
    let made = net::socket(domain, ty | libc::SOCK_CLOEXEC, a[2] as i32).map(|s| (s, Vec::new())).map_err(errno);
    record_new_socket(sh, tid, (id, listening, addr_out, cloexec), made)
}

/// A new socket's descriptor (made, or accepted from `listening`) as socket `id` on the tape, installed in the
/// guest. Takes the next socket number.
#[allow(clippy::type_complexity)]
fn record_new_socket(
    sh: &mut Shared,
    tid: i32,
    (id, listening, addr_out, cloexec): (u32, Option<(u32, u32)>, Option<(u64, u64)>, bool),
    made: Result<(OwnedFd, Vec<u8>), i64>,
) -> Reply {
    let (socket, ordinal) = listening.unwrap_or((id, 1));
    let op = if listening.is_some() { NetOp::Accept } else { NetOp::Socket };
    let Some(tape) = sh.tape.as_mut() else { return Reply::Error(libc::EIO) };
    match made {
        Err(r) => {
            if listening.is_none() {
                tape.next_socket += 1;
            }
            tape.recorded.push(NetEvent { socket, op, result: r, data: Vec::new(), addr: Vec::new() });
            reply(r)
        }
        Ok((fd, peer)) => {
            let Some(ino) = fd_inode(&fd) else { return Reply::Error(libc::EIO) };
            tape.recorded.push(NetEvent { socket, op, result: 0, data: Vec::new(), addr: peer.clone() });
            tape.sockets.insert(ino, (id, if listening.is_some() { 0 } else { 1 }));
            tape.next_socket += 1;
            let _ = ordinal;
            if let Some((buf, lenp)) = addr_out {
                if let Err(e) = write_addr(tid, buf, lenp, &peer) {
                    return Reply::Error(e);
                }
            }
            Reply::AddFd { fd, cloexec }
        }
    }
}

fn connect(sh: &mut Shared, n: &Notification, socket: u32, ordinal: u32, replay: bool) -> Reply {
    let tid = n.pid as i32;
    let a = n.args;
    let addr = match read_mem(tid, a[1], (a[2] as usize).min(128)) {
        Ok(b) => b,
        Err(e) => return Reply::Error(e),
    };
    if replay {
        let ev = match next_event(sh, socket, ordinal, NetOp::Connect) {
            Ok(e) => e,
            Err(r) => return r,
        };
        if ev.addr != addr {
            return diverge(
                sh,
                format!(
                    "the guest connected socket {socket} (call {ordinal}) to {} where the recording connected to {}",
                    show_addr(&addr),
                    show_addr(&ev.addr)
                ),
            );
        }
        if let Some(s) = sh.tape.as_mut().and_then(|t| t.replay_sockets.get_mut(&socket)) {
            s.peer_addr = addr;
        }
        return reply(ev.result);
    }
    let r = match borrow(tid, a[0] as i32) {
        Ok(fd) => net::connect(&fd, &addr).map(|_| 0).unwrap_or_else(errno),
        Err(e) => -(e as i64),
    };
    if let Some(t) = sh.tape.as_mut() {
        t.recorded.push(NetEvent { socket, op: NetOp::Connect, result: r, data: Vec::new(), addr });
    }
    reply(r)
}

/// An AF_INET/AF_INET6 address as `ip:port`.
fn show_addr(a: &[u8]) -> String {
    let fam = a.get(0..2).map(|f| u16::from_ne_bytes([f[0], f[1]]) as i32);
    let port = a.get(2..4).map(|p| u16::from_be_bytes([p[0], p[1]])).unwrap_or(0);
    match fam {
        Some(libc::AF_INET) if a.len() >= 8 => {
            format!("{}:{port}", std::net::Ipv4Addr::new(a[4], a[5], a[6], a[7]))
        }
        Some(libc::AF_INET6) if a.len() >= 24 => {
            let b: [u8; 16] = a[8..24].try_into().unwrap_or([0; 16]);
            format!("[{}]:{port}", std::net::Ipv6Addr::from(b))
        }
        _ => format!("address {}", hex(a)),
    }
}

fn read(sh: &mut Shared, n: &Notification, socket: u32, ordinal: u32, replay: bool) -> Reply {
    let tid = n.pid as i32;
    let (dest, flags) = match read_dest(tid, n.nr as i64, n.args) {
        Ok(d) => d,
        Err(e) => return Reply::Error(e),
    };
    if replay {
        let ev = match next_event(sh, socket, ordinal, NetOp::Read) {
            Ok(e) => e,
            Err(r) => return r,
        };
        if ev.result < 0 {
            return reply(ev.result);
        }
        if ev.data.len() > dest.len() {
            return diverge(
                sh,
                format!(
                    "the guest read at most {} bytes from socket {socket} (call {ordinal}) where the recording read {}",
                    dest.len(),
                    ev.data.len()
                ),
            );
        }
        return match dest.deliver(tid, &ev.data, &ev.addr) {
            Ok(()) => Reply::Value(ev.data.len() as i64),
            Err(e) => Reply::Error(e),
        };
    }
    let fd = match borrow(tid, n.args[0] as i32) {
        Ok(fd) => fd,
        Err(e) => return record_read(sh, tid, &dest, socket, Err(-(e as i64))),
    };
    // Without waiting first: a read that has to wait is made on a thread of its own (Reply::Defer), so that the
    // guest's other tasks are served meanwhile (the peer may be one of them).
    let got = net::recvfrom(&fd, dest.len(), flags | libc::MSG_DONTWAIT).map_err(errno);
    if got.as_ref().err() == Some(&-(libc::EAGAIN as i64)) && flags & libc::MSG_DONTWAIT == 0 && blocking(&fd) {
        return Reply::Defer(Box::new(move |shared| {
            let got = net::recvfrom(&fd, dest.len(), flags).map_err(errno);
            record_read(&mut crate::lock(shared), tid, &dest, socket, got)
        }));
    }
    record_read(sh, tid, &dest, socket, got)
}

/// Hands a recorded read's bytes to the guest and puts the read on the tape.
fn record_read(sh: &mut Shared, tid: i32, dest: &ReadDest, socket: u32, got: Result<(Vec<u8>, Vec<u8>), i64>) -> Reply {
    let (r, data, addr) = match got {
        Ok((d, a)) => (d.len() as i64, d, a),
        Err(r) => (r, Vec::new(), Vec::new()),
    };
    if r >= 0 {
        if let Err(e) = dest.deliver(tid, &data, &addr) {
            return Reply::Error(e);
        }
    }
    if let Some(t) = sh.tape.as_mut() {
        t.recorded.push(NetEvent { socket, op: NetOp::Read, result: r, data, addr });
    }
    reply(r)
}

/// Whether calls on the guest's descriptor wait (it is not O_NONBLOCK).
fn blocking(fd: &OwnedFd) -> bool {
    nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFL).map(|fl| fl & libc::O_NONBLOCK == 0).unwrap_or(true)
}

/// Whether a listening socket has a connection waiting (accept would not block).
fn acceptable(fd: &OwnedFd) -> bool {
    use std::os::fd::AsFd;
    let mut p = [nix::poll::PollFd::new(fd.as_fd(), nix::poll::PollFlags::POLLIN)];
    nix::poll::poll(&mut p, nix::poll::PollTimeout::ZERO).map(|n| n > 0).unwrap_or(true)
}

fn write(sh: &mut Shared, n: &Notification, socket: u32, ordinal: u32, replay: bool) -> Reply {
    let tid = n.pid as i32;
    let nr = n.nr as i64;
    let (data, flags, addr) = match write_source(tid, nr, n.args) {
        Ok(d) => d,
        Err(e) => return Reply::Error(e),
    };
    if replay {
        let ev = match next_event(sh, socket, ordinal, NetOp::Write) {
            Ok(e) => e,
            Err(r) => return r,
        };
        if ev.result >= 0 && (data.len() < ev.data.len() || data[..ev.data.len()] != ev.data[..]) {
            let at = data.iter().zip(&ev.data).position(|(x, y)| x != y).unwrap_or(data.len().min(ev.data.len()));
            return diverge(
                sh,
                format!(
                    "the guest wrote {} bytes to socket {socket} (call {ordinal}) that differ from the recording's {} \
                     at byte {at}: {} where the recording has {}",
                    data.len(),
                    ev.data.len(),
                    show(&data[at.min(data.len())..]),
                    show(&ev.data[at.min(ev.data.len())..])
                ),
            );
        }
        return reply(ev.result);
    }
    let r = match borrow(tid, n.args[0] as i32) {
        Ok(fd) if nr == libc::SYS_write || nr == libc::SYS_writev => {
            net::write(&fd, &data).map(|n| n as i64).unwrap_or_else(errno)
        }
        Ok(fd) => net::sendto(&fd, &data, flags, &addr).map(|n| n as i64).unwrap_or_else(errno),
        Err(e) => -(e as i64),
    };
    let sent = if r > 0 { data[..r as usize].to_vec() } else { Vec::new() };
    if let Some(t) = sh.tape.as_mut() {
        t.recorded.push(NetEvent { socket, op: NetOp::Write, result: r, data: sent, addr: Vec::new() });
    }
    reply(r)
}

/// Replay: bind, listen, setsockopt, shutdown succeed; getsockopt reads 0; getsockname reads the unspecified
/// address of the socket's family, getpeername the address it connected to (or accepted from).
fn replay_control(sh: &mut Shared, n: &Notification, socket: u32) -> Reply {
    let tid = n.pid as i32;
    let a = n.args;
    let Some(s) = sh.tape.as_ref().and_then(|t| t.replay_sockets.get(&socket)) else { return Reply::Continue };
    let unspecified = |domain: i32| {
        let mut v = vec![0u8; if domain == libc::AF_INET6 { 28 } else { 16 }];
        v[0..2].copy_from_slice(&(domain as u16).to_ne_bytes());
        v
    };
    let r = match n.nr as i64 {
        libc::SYS_getsockopt => {
            if a[3] != 0 && a[4] != 0 {
                memory::write(tid, a[3], &0u32.to_le_bytes())
                    .and_then(|_| memory::write(tid, a[4], &4u32.to_le_bytes()))
                    .map_err(|_| libc::EFAULT)
            } else {
                Ok(())
            }
        }
        libc::SYS_getsockname => write_addr(tid, a[1], a[2], &unspecified(s.domain)),
        libc::SYS_getpeername if s.peer_addr.is_empty() => Err(libc::ENOTCONN),
        libc::SYS_getpeername => write_addr(tid, a[1], a[2], &s.peer_addr.clone()),
        _ => Ok(()),
    };
    match r {
        Ok(()) => Reply::Value(0),
        Err(e) => Reply::Error(e),
    }
}

/// Whether `path` is one the /proc tape may serve (a file under /proc or /sys).
fn proc_candidate(path: &[u8]) -> bool {
    let under = |p: &[u8]| path.starts_with(p) && path.len() > p.len();
    if !(under(b"/proc/") || under(b"/sys/")) {
        return false;
    }
    // Files whose reads block or that are not contents.
    let skip: [&[u8]; 6] = [b"kmsg", b"trace_pipe", b"/mem", b"pagemap", b"kcore", b"/fd/"];
    !skip.iter().any(|s| path.windows(s.len()).any(|w| w == *s))
}

/// openat of a /proc or /sys file while the /proc tape records or replays; `None` lets it run as usual.
pub(crate) fn proc_open(
    sh: &mut Shared,
    n: &Notification,
    listener: &Listener,
    path: &[u8],
    flags: i32,
) -> Option<Reply> {
    let tape = sh.tape.as_mut()?;
    if tape.cfg.proc == ProcMode::Off
        || flags & libc::O_ACCMODE != libc::O_RDONLY
        || flags & (libc::O_DIRECTORY | libc::O_PATH) != 0
        || !proc_candidate(path)
    {
        return None;
    }
    let key = String::from_utf8(path.to_vec()).ok()?;
    let data = if let ProcMode::Replay(_) = tape.cfg.proc {
        let q = tape.proc_replay.get_mut(&key)?;
        if q.len() > 1 {
            q.pop_front()?
        } else {
            q.front()?.clone()
        }
    } else {
        let tid = n.pid as i32;
        let real = crate::notify::guest_path(path, tid);
        let c = CString::new(real).ok()?;
        let fd = fdops::openat(None, &c, libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY).ok()?;
        let st = fdops::newfstatat_raw(Some(&fd), c"", libc::AT_EMPTY_PATH).ok()?;
        let mode = u32::from_le_bytes([st[24], st[25], st[26], st[27]]);
        let dev = u64::from_le_bytes(st[0..8].try_into().ok()?);
        if mode & libc::S_IFMT != libc::S_IFREG || !sh.pseudo_devs.contains(&dev) {
            return None;
        }
        let mut data = Vec::new();
        let mut buf = vec![0u8; 65536];
        loop {
            match net::read(&fd, &mut buf) {
                Ok(0) => break,
                Ok(k) => data.extend_from_slice(&buf[..k]),
                Err(_) => return None,
            }
            if data.len() > PROC_MAX {
                return None;
            }
        }
        let tape = sh.tape.as_mut()?;
        tape.proc_recorded.push(ProcRead { path: key.clone(), data: data.clone() });
        data
    };
    if !listener.id_valid(n.id) {
        return Some(Reply::Error(libc::EINTR));
    }
    let name = CString::new(format!("repro-tape:{key}")).unwrap_or_else(|_| c"repro-tape".into());
    Some(match fdops::memfd_with(&name, &data) {
        Ok(fd) => Reply::AddFd { fd, cloexec: flags & libc::O_CLOEXEC != 0 },
        Err(e) => Reply::Error(e.raw_os_error().unwrap_or(libc::EIO)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_tape_round_trips() {
        let t = NetTape {
            events: vec![
                NetEvent { socket: 0, op: NetOp::Socket, result: 0, data: vec![], addr: vec![] },
                NetEvent {
                    socket: 0,
                    op: NetOp::Connect,
                    result: 0,
                    data: vec![],
                    addr: vec![2, 0, 0, 80, 127, 0, 0, 1],
                },
                NetEvent { socket: 0, op: NetOp::Write, result: 4, data: b"GET ".to_vec(), addr: vec![] },
                NetEvent { socket: 0, op: NetOp::Read, result: 2, data: vec![0xff, 0], addr: vec![] },
                NetEvent { socket: 0, op: NetOp::Read, result: -11, data: vec![], addr: vec![] },
            ],
        };
        let back = NetTape::from_json(&t.to_json()).unwrap();
        assert_eq!(back, t);
        assert_eq!(show_addr(&t.events[1].addr), "127.0.0.1:80");
        assert!(NetTape::from_json(b"{\"tape\":\"proc\",\"version\":1,\"reads\":[]}").is_err());
        assert!(NetTape::from_json(b"not json").is_err());
        // A socket number beyond u32 is an error, not silently another socket.
        let e = NetTape::from_json(
            br#"{"tape":"network","version":1,"events":[{"socket":4294967296,"op":"socket","result":0}]}"#,
        );
        let e = e.unwrap_err().to_string();
        assert!(e.starts_with("network tape event 0:") && e.contains("u32"), "{e}");
    }

    #[test]
    fn proc_tape_round_trips_and_candidates() {
        let t = ProcTape {
            reads: vec![
                ProcRead { path: "/proc/loadavg".into(), data: b"0.00 0.01\n".to_vec() },
                ProcRead { path: "/sys/x".into(), data: vec![0xfe] },
            ],
        };
        assert_eq!(ProcTape::from_json(&t.to_json()).unwrap(), t);
        assert!(proc_candidate(b"/proc/loadavg"));
        assert!(proc_candidate(b"/sys/class/net/lo/mtu"));
        assert!(!proc_candidate(b"/proc/kmsg"));
        assert!(!proc_candidate(b"/proc/self/fd/0"));
        assert!(!proc_candidate(b"/etc/passwd"));
        assert!(!proc_candidate(b"/proc/"));
    }

    #[test]
    fn syscalls_only_when_taping() {
        assert!(net_syscalls(&TapeConfig::default()).is_empty());
        let rec = net_syscalls(&TapeConfig { network: NetMode::Record, proc: ProcMode::Off });
        assert!(rec.contains(&(libc::SYS_recvfrom as u32)) && !rec.contains(&(libc::SYS_bind as u32)));
        let rep = net_syscalls(&TapeConfig { network: NetMode::Replay(NetTape::default()), proc: ProcMode::Off });
        assert!(rep.contains(&(libc::SYS_bind as u32)));
        // Plain I/O is notified only while the network is taped: a /proc tape alone does not add it.
        let plain = [libc::SYS_read, libc::SYS_readv, libc::SYS_write, libc::SYS_writev].map(|n| n as u32);
        for nr in plain {
            assert!(rec.contains(&nr) && rep.contains(&nr), "{nr}");
            assert!(!net_syscalls(&TapeConfig { network: NetMode::Off, proc: ProcMode::Record }).contains(&nr));
        }
        assert!(is_plain_io(libc::SYS_writev) && !is_plain_io(libc::SYS_sendto) && !is_plain_io(libc::SYS_pread64));
    }

    /// iovec arrays of writev and readv, read from and written to this process's own memory (as the
    /// supervisor does a guest's).
    #[test]
    fn vectored_calls_gather_and_scatter_through_their_iovecs() {
        let me = std::process::id() as i32;
        let (a, b) = (b"GET /x".to_vec(), b" HTTP/1.0\r\n".to_vec());
        let iov = |bufs: &[(u64, usize)]| -> Vec<u8> {
            bufs.iter().flat_map(|&(p, l)| p.to_le_bytes().into_iter().chain((l as u64).to_le_bytes())).collect()
        };
        let out = iov(&[(a.as_ptr() as u64, a.len()), (0, 0), (b.as_ptr() as u64, b.len())]);
        let (data, flags, addr) = write_source(me, libc::SYS_writev, [3, out.as_ptr() as u64, 3, 0, 0, 0]).unwrap();
        assert_eq!((data.as_slice(), flags, addr.len()), (&b"GET /x HTTP/1.0\r\n"[..], 0, 0));
        let (mut x, mut y) = (vec![0u8; 4], vec![0u8; 8]);
        let inv = iov(&[(x.as_mut_ptr() as u64, x.len()), (y.as_mut_ptr() as u64, y.len())]);
        let (dest, _) = read_dest(me, libc::SYS_readv, [3, inv.as_ptr() as u64, 2, 0, 0, 0]).unwrap();
        assert_eq!(dest.len(), 12);
        dest.deliver(me, b"HTTP/1.0 2", &[]).unwrap();
        assert_eq!((x.as_slice(), y.as_slice()), (&b"HTTP"[..], &b"/1.0 2\0\0"[..]));
        assert_eq!(read_dest(me, libc::SYS_readv, [3, 8, 2, 0, 0, 0]).err(), Some(libc::EFAULT));
    }
}
