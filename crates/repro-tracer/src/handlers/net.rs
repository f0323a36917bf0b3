//! Network and tapes: the guest's socket calls while the network is taped (its reads of /proc and /sys files
//! while the /proc tape runs are `proc_tape.rs`; see `tape.rs` for what is taped and how a replay answers).
//!
//! Recording: the supervisor makes the call itself on the guest's socket (created with ADDFD, or borrowed with
//! pidfd_getfd) and tapes the result and the bytes. Replay: the guest's socket is one end of a socket pair whose
//! other end holds one byte (so poll/epoll see it readable and writable), and every taped call is answered from
//! the tape, in order, per socket; a call that is not the next one on the tape, or a write of other bytes, is a
//! divergence: the guest is stopped and the run reports it.

use std::os::fd::OwnedFd;

use repro_detcore::tapes::{self, Divergence};
use repro_model::tape::{NetEvent, NetOp};
use repro_sys::{fdops, net};

use crate::decode::{Control, NetCall, ReadArgs, Syscall, TimedWait, WriteArgs};
use crate::guest::{Guest, PidfdCache, TaskGuest};
use crate::reply::Reply;
use crate::state::{lock, Shared};
use crate::tape::{NetMode, ReplaySocket, IO_MAX};

/// The inode of a guest descriptor when it is a socket. Found the cheapest way: a duplicate through the task's
/// cached pidfd, and fstat (about 1.6 µs; reading the /proc/PID/fd/N link costs twice that). This runs for
/// every read and write of the guest while the network is taped.
fn socket_inode<G: Guest>(g: &mut G, fd: i32) -> Option<u64> {
    let dup = g.borrow_fd(fd).ok()?;
    let st = fdops::newfstatat_raw(Some(&dup), c"", libc::AT_EMPTY_PATH).ok()?;
    let mode = u32::from_le_bytes([st[24], st[25], st[26], st[27]]);
    (mode & libc::S_IFMT == libc::S_IFSOCK).then(|| u64_at(&st, 8))
}

/// Whether `fd` is a socket the network tape holds (recorded or replayed: a replayed inet socket is an AF_UNIX
/// socketpair end): its connect is the tape's, not [`crate::handlers::unix::connect`]'s.
pub(crate) fn is_taped<G: Guest>(sh: &Shared, g: &mut G, fd: i32) -> bool {
    let Some(t) = sh.tape.as_ref().filter(|t| !matches!(t.cfg.network, NetMode::Off)) else { return false };
    socket_inode(g, fd).is_some_and(|ino| t.sockets.contains_key(&ino))
}

fn fd_inode(fd: &OwnedFd) -> Option<u64> {
    let st = fdops::newfstatat_raw(Some(fd), c"", libc::AT_EMPTY_PATH).ok()?;
    Some(u64_at(&st, 8))
}

fn errno(e: std::io::Error) -> i64 {
    -(e.raw_os_error().unwrap_or(libc::EIO) as i64)
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    b.get(o..o + 8).and_then(|s| s.try_into().ok()).map_or(0, u64::from_le_bytes)
}

/// The (base, len) pairs of a guest iovec array (at most 1024, as the kernel's UIO_MAXIOV).
fn iovecs<G: Guest>(g: &mut G, addr: u64, count: usize) -> Result<Vec<(u64, usize)>, i32> {
    let raw = g.read_bytes(addr, count.min(1024) * 16)?;
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

    fn deliver<G: Guest>(&self, g: &mut G, data: &[u8], addr: &[u8]) -> Result<(), i32> {
        let mut off = 0;
        for &(base, len) in &self.iov {
            if off >= data.len() {
                break;
            }
            let n = len.min(data.len() - off);
            g.write_bytes(base, &data[off..off + n])?;
            off += n;
        }
        if let Some((buf, lenp)) = self.addr {
            write_addr(g, buf, lenp, addr)?;
        }
        if let Some(h) = self.msghdr {
            let hdr = g.read_bytes(h, 56)?;
            let name = u64_at(&hdr, 0);
            let namelen = u32::from_le_bytes([hdr[8], hdr[9], hdr[10], hdr[11]]) as usize;
            let n = addr.len().min(namelen);
            if name != 0 && n > 0 {
                g.write_bytes(name, &addr[..n])?;
            }
            let outlen = if name != 0 { addr.len() as u32 } else { 0 };
            g.write_bytes(h + 8, &outlen.to_le_bytes())?;
            g.write_bytes(h + 40, &0u64.to_le_bytes())?;
            g.write_bytes(h + 48, &0u32.to_le_bytes())?;
        }
        Ok(())
    }
}

/// Writes a socket address to a guest (buffer, socklen_t pointer) pair, truncated as the kernel does.
fn write_addr<G: Guest>(g: &mut G, buf: u64, lenp: u64, addr: &[u8]) -> Result<(), i32> {
    if buf == 0 || lenp == 0 {
        return Ok(());
    }
    let mut cap = [0u8; 4];
    g.read_into(lenp, &mut cap)?;
    let n = (u32::from_le_bytes(cap) as usize).min(addr.len());
    if n > 0 {
        g.write_bytes(buf, &addr[..n])?;
    }
    g.write_bytes(lenp, &(addr.len() as u32).to_le_bytes())
}

/// The bytes of a guest write call: (data, flags, destination address).
fn write_source<G: Guest>(g: &mut G, to: WriteArgs) -> Result<(Vec<u8>, i32, Vec<u8>), i32> {
    match to {
        WriteArgs::Write { buf, len } => Ok((g.read_bytes(buf, len.min(IO_MAX))?, 0, Vec::new())),
        WriteArgs::Writev { iov, count } => Ok((gather(g, iov, count)?, 0, Vec::new())),
        WriteArgs::Sendto { buf, len, flags, addr, addrlen } => {
            let to = if addr != 0 { g.read_bytes(addr, addrlen.min(128))? } else { Vec::new() };
            Ok((g.read_bytes(buf, len.min(IO_MAX))?, flags, to))
        }
        WriteArgs::Sendmsg { msg, flags } => {
            let hdr = g.read_bytes(msg, 56)?;
            Ok((gather(g, u64_at(&hdr, 16), u64_at(&hdr, 24) as usize)?, flags, Vec::new()))
        }
    }
}

/// The bytes of a guest iovec array, concatenated (at most [`IO_MAX`]).
fn gather<G: Guest>(g: &mut G, iov: u64, count: usize) -> Result<Vec<u8>, i32> {
    let mut data = Vec::new();
    for (base, len) in iovecs(g, iov, count)? {
        let n = len.min(IO_MAX - data.len());
        data.extend(g.read_bytes(base, n)?);
        if data.len() >= IO_MAX {
            break;
        }
    }
    Ok(data)
}

/// Where a read's bytes go, and its flags.
fn read_dest<G: Guest>(g: &mut G, from: ReadArgs) -> Result<(ReadDest, i32), i32> {
    match from {
        ReadArgs::Read { buf, len } => Ok((ReadDest { iov: vec![(buf, len)], addr: None, msghdr: None }, 0)),
        ReadArgs::Readv { iov, count } => Ok((ReadDest { iov: iovecs(g, iov, count)?, addr: None, msghdr: None }, 0)),
        ReadArgs::Recvfrom { buf, len, flags, addr, addrlen } => {
            Ok((ReadDest { iov: vec![(buf, len)], addr: Some((addr, addrlen)), msghdr: None }, flags))
        }
        ReadArgs::Recvmsg { msg, flags } => {
            let hdr = g.read_bytes(msg, 56)?;
            let iov = iovecs(g, u64_at(&hdr, 16), u64_at(&hdr, 24) as usize)?;
            Ok((ReadDest { iov, addr: None, msghdr: Some(msg) }, flags))
        }
    }
}

/// Stops the guest: the replay diverged.
fn diverge(sh: &mut Shared, Divergence(what): Divergence) -> Reply {
    if let Some(t) = sh.tape.as_mut() {
        if t.diverged.is_none() {
            t.diverged = Some(what);
        }
    }
    sh.kill_all();
    Reply::Error(libc::EIO)
}

/// Answers a socket call when it is taped; `None` lets the caller handle it as usual.
pub(crate) fn handle<G: Guest>(sh: &mut Shared, g: &mut G, call: Syscall) -> Option<Reply> {
    let tape = sh.tape.as_mut()?;
    let replay = match tape.cfg.network {
        NetMode::Off => return None,
        NetMode::Record => false,
        NetMode::Replay(_) => true,
    };
    let call = match call {
        // Recording: a wait may be ended by the network, which the logical clock knows nothing of; it runs natively.
        Syscall::Wait(w) if !replay && TimedWait::on_descriptors(w) => return Some(Reply::Continue),
        Syscall::Net(c) => c,
        _ => return None,
    };
    let fd = match call {
        NetCall::Socket { domain, ty, protocol } => {
            if domain != libc::AF_INET && domain != libc::AF_INET6 {
                return None;
            }
            return Some(new_socket(sh, g, NewSocket { domain, ty, protocol, listening: None }));
        }
        NetCall::Untaped { name, fds } => {
            for fd in fds.into_iter().flatten() {
                let Some(ino) = socket_inode(g, fd) else { continue };
                let Some(&(socket, ord)) = sh.tape.as_ref().and_then(|t| t.sockets.get(&ino)) else { continue };
                return Some(match tapes::untaped(name, socket, ord, replay) {
                    tapes::Untaped::Diverge(d) => diverge(sh, d),
                    tapes::Untaped::NotEnforced(why) => {
                        sh.not_enforced.insert(why);
                        Reply::Continue
                    }
                });
            }
            return Some(Reply::Continue);
        }
        NetCall::Connect { fd, .. }
        | NetCall::Accept { fd, .. }
        | NetCall::Read { fd, .. }
        | NetCall::Write { fd, .. }
        | NetCall::Getsockname { fd, .. }
        | NetCall::Control { fd, .. } => fd,
    };
    let ino = socket_inode(g, fd);
    let tape = sh.tape.as_mut()?;
    let Some((ino, (socket, ord))) = ino.and_then(|i| tape.sockets.get(&i).map(|&v| (i, v))) else {
        // Most reads and writes are of files and pipes: they run natively. (Whether the descriptor is a taped
        // socket is looked up at every call: descriptors are dup'ed, inherited and closed without the
        // supervisor seeing it, so no answer can be cached.)
        return call.is_plain_io().then_some(Reply::Continue);
    };
    tape.sockets.insert(ino, (socket, ord + 1));
    let ordinal = ord + 1;
    let r = match call {
        NetCall::Connect { fd, addr, len } => connect(sh, g, (socket, ordinal), fd, addr, len, replay),
        NetCall::Accept { fd, addr, addrlen, flags } => {
            let listening = Some(Listening { socket, ordinal, fd, addr, addrlen });
            new_socket(sh, g, NewSocket { domain: 0, ty: flags, protocol: 0, listening })
        }
        NetCall::Read { fd, from } => read(sh, g, (socket, ordinal), fd, from, replay),
        NetCall::Write { fd, to } => write(sh, g, (socket, ordinal), fd, to, replay),
        NetCall::Getsockname { fd, addr, addrlen } => sockname(sh, g, (socket, ino, ord), fd, (addr, addrlen), replay),
        NetCall::Control { op, .. } => {
            // Replay only: socket options and addresses of a socket that is a socket pair here.
            if let Some(t) = sh.tape.as_mut() {
                t.sockets.insert(ino, (socket, ord));
            }
            replay_control(sh, g, socket, op)
        }
        NetCall::Socket { .. } | NetCall::Untaped { .. } => Reply::Continue,
    };
    Some(r)
}

/// getsockname(2) of a taped socket: recorded (a server that bound port 0 tells its clients the port the kernel
/// chose), and answered from the tape on replay; a tape made before sockname events were taped is answered with
/// the unspecified address, as then.
fn sockname<G: Guest>(
    sh: &mut Shared,
    g: &mut G,
    (socket, ino, ord): (u32, u64, u32),
    fd: i32,
    (buf, lenp): (u64, u64),
    replay: bool,
) -> Reply {
    if replay {
        let next_is_sockname = sh.tape.as_ref().is_some_and(|t| t.net_replay.next_is(socket, NetOp::Sockname));
        if !next_is_sockname {
            if let Some(t) = sh.tape.as_mut() {
                t.sockets.insert(ino, (socket, ord));
            }
            return replay_control(sh, g, socket, Control::Getsockname { addr: buf, addrlen: lenp });
        }
        let ev = match next_event(sh, socket, ord + 1, NetOp::Sockname) {
            Ok(e) => e,
            Err(r) => return r,
        };
        if ev.result < 0 {
            return Reply::from_raw(ev.result);
        }
        return match write_addr(g, buf, lenp, &ev.addr) {
            Ok(()) => Reply::Value(0),
            Err(e) => Reply::Error(e),
        };
    }
    let got = g.borrow_fd(fd).map_err(|e| -(e as i64)).and_then(|fd| net::getsockname(&fd).map_err(errno));
    let (result, addr) = match got {
        Ok(addr) => (0, addr),
        Err(r) => (r, Vec::new()),
    };
    if result == 0 {
        if let Err(e) = write_addr(g, buf, lenp, &addr) {
            return Reply::Error(e);
        }
    }
    if let Some(t) = sh.tape.as_mut() {
        t.recorded.push(NetEvent { socket, op: NetOp::Sockname, result, data: Vec::new(), addr });
    }
    Reply::from_raw(result)
}

/// The next taped call of `socket` on replay, checked to be `op`.
fn next_event(sh: &mut Shared, socket: u32, ordinal: u32, op: NetOp) -> Result<NetEvent, Reply> {
    let Some(t) = sh.tape.as_mut() else { return Err(Reply::Error(libc::EIO)) };
    t.net_replay.next(socket, ordinal, op).map_err(|d| diverge(sh, d))
}

/// The listening socket of an accept: its tape number, this call's ordinal, the guest's descriptor and where
/// the peer's address goes.
#[derive(Clone, Copy)]
struct Listening {
    socket: u32,
    ordinal: u32,
    fd: i32,
    addr: u64,
    addrlen: u64,
}

/// A socket() call, or an accept (`listening`).
#[derive(Clone, Copy)]
struct NewSocket {
    domain: i32,
    /// socket's type with its flags, or accept4's flags.
    ty: i32,
    protocol: i32,
    listening: Option<Listening>,
}

/// socket() or accept: a new taped socket.
fn new_socket<G: Guest>(sh: &mut Shared, g: &mut G, s: NewSocket) -> Reply {
    let tid = g.tid();
    let Some(tape) = sh.tape.as_mut() else { return Reply::Continue };
    let replay = matches!(tape.cfg.network, NetMode::Replay(_));
    let cloexec = s.ty & libc::SOCK_CLOEXEC != 0;
    let id = tape.next_socket;
    if replay {
        let ev = match s.listening {
            Some(l) => next_event(sh, l.socket, l.ordinal, NetOp::Accept),
            None => next_event(sh, id, 1, NetOp::Socket),
        };
        let ev = match ev {
            Ok(e) => e,
            Err(r) => return r,
        };
        if ev.result < 0 {
            return Reply::from_raw(ev.result);
        }
        let pair = net::socketpair(libc::SOCK_STREAM | libc::SOCK_CLOEXEC | (s.ty & libc::SOCK_NONBLOCK));
        let (guest, peer) = match pair {
            Ok(p) => p,
            Err(e) => return Reply::from_raw(errno(e)),
        };
        // The byte that makes the guest's end readable for poll; a socket pair just made has room for it, and
        // without it a poll would only wait (the replay's answers do not depend on it).
        let _ = net::write(&peer, b"\0");
        let Some(ino) = fd_inode(&guest) else { return Reply::Error(libc::EIO) };
        if let Some(l) = s.listening {
            if let Err(e) = write_addr(g, l.addr, l.addrlen, &ev.addr) {
                return Reply::Error(e);
            }
        }
        let Some(tape) = sh.tape.as_mut() else { return Reply::Error(libc::EIO) };
        let domain = match s.listening.and_then(|l| tape.replay_sockets.get(&l.socket)) {
            Some(l) => l.domain,
            None => s.domain,
        };
        let peer_addr = if s.listening.is_some() { ev.addr.clone() } else { Vec::new() };
        tape.replay_sockets.insert(id, ReplaySocket { domain, peer_addr, _peer: peer });
        tape.sockets.insert(ino, (id, if s.listening.is_some() { 0 } else { 1 }));
        tape.next_socket += 1;
        return Reply::AddFd { fd: guest, cloexec };
    }
    if let Some(listening) = s.listening {
        let l = match g.borrow_fd(listening.fd) {
            Ok(l) => l,
            Err(e) => return record_new_socket(sh, g, (id, s, cloexec), Err(-(e as i64))),
        };
        if !acceptable(&l) && blocking(&l) {
            // Waits for a client, perhaps one of the guest's own tasks: on a thread of its own. The socket's
            // number is taken now, in the guest's order of calls.
            tape.next_socket += 1;
            return Reply::Defer(Box::new(move |shared| {
                let made = net::accept4(&l, s.ty & libc::SOCK_NONBLOCK).map_err(errno);
                let failed = made.is_err();
                let mut sh = lock(shared);
                let before = sh.tape.as_ref().map(|t| t.next_socket);
                let mut cache = PidfdCache::default();
                let mut g = TaskGuest::new(tid, None, &mut cache);
                let r = record_new_socket(&mut sh, &mut g, (id, s, cloexec), made);
                // The number was taken when the call was made; a failed accept gives it back if no socket came
                // after it.
                if let (Some(t), Some(b)) = (sh.tape.as_mut(), before) {
                    t.next_socket = if failed && b == id + 1 { id } else { b };
                }
                r
            }));
        }
        let made = net::accept4(&l, s.ty & libc::SOCK_NONBLOCK).map_err(errno);
        return record_new_socket(sh, g, (id, s, cloexec), made);
    }
    let made = net::socket(s.domain, s.ty | libc::SOCK_CLOEXEC, s.protocol).map(|fd| (fd, Vec::new())).map_err(errno);
    record_new_socket(sh, g, (id, s, cloexec), made)
}

/// A new socket's descriptor (made, or accepted from a listening socket) as socket `id` on the tape, installed
/// in the guest. Takes the next socket number.
fn record_new_socket<G: Guest>(
    sh: &mut Shared,
    g: &mut G,
    (id, s, cloexec): (u32, NewSocket, bool),
    made: Result<(OwnedFd, Vec<u8>), i64>,
) -> Reply {
    let socket = s.listening.map_or(id, |l| l.socket);
    let op = if s.listening.is_some() { NetOp::Accept } else { NetOp::Socket };
    let Some(tape) = sh.tape.as_mut() else { return Reply::Error(libc::EIO) };
    match made {
        Err(r) => {
            if s.listening.is_none() {
                tape.next_socket += 1;
            }
            tape.recorded.push(NetEvent { socket, op, result: r, data: Vec::new(), addr: Vec::new() });
            Reply::from_raw(r)
        }
        Ok((fd, peer)) => {
            let Some(ino) = fd_inode(&fd) else { return Reply::Error(libc::EIO) };
            tape.recorded.push(NetEvent { socket, op, result: 0, data: Vec::new(), addr: peer.clone() });
            tape.sockets.insert(ino, (id, if s.listening.is_some() { 0 } else { 1 }));
            tape.next_socket += 1;
            if let Some(l) = s.listening {
                if let Err(e) = write_addr(g, l.addr, l.addrlen, &peer) {
                    return Reply::Error(e);
                }
            }
            Reply::AddFd { fd, cloexec }
        }
    }
}

fn connect<G: Guest>(
    sh: &mut Shared,
    g: &mut G,
    (socket, ordinal): (u32, u32),
    fd: i32,
    addr: u64,
    len: u32,
    replay: bool,
) -> Reply {
    let addr = match g.read_bytes(addr, (len as usize).min(128)) {
        Ok(b) => b,
        Err(e) => return Reply::Error(e),
    };
    if replay {
        let ev = match next_event(sh, socket, ordinal, NetOp::Connect) {
            Ok(e) => e,
            Err(r) => return r,
        };
        if let Err(d) = tapes::check_connect(socket, ordinal, &addr, &ev) {
            return diverge(sh, d);
        }
        if let Some(s) = sh.tape.as_mut().and_then(|t| t.replay_sockets.get_mut(&socket)) {
            s.peer_addr = addr;
        }
        return Reply::from_raw(ev.result);
    }
    let r = match g.borrow_fd(fd) {
        Ok(fd) => net::connect(&fd, &addr).map(|_| 0).unwrap_or_else(errno),
        Err(e) => -(e as i64),
    };
    if let Some(t) = sh.tape.as_mut() {
        t.recorded.push(NetEvent { socket, op: NetOp::Connect, result: r, data: Vec::new(), addr });
    }
    Reply::from_raw(r)
}

fn read<G: Guest>(
    sh: &mut Shared,
    g: &mut G,
    (socket, ordinal): (u32, u32),
    fd: i32,
    from: ReadArgs,
    replay: bool,
) -> Reply {
    let tid = g.tid();
    let (dest, flags) = match read_dest(g, from) {
        Ok(d) => d,
        Err(e) => return Reply::Error(e),
    };
    if replay {
        let ev = match next_event(sh, socket, ordinal, NetOp::Read) {
            Ok(e) => e,
            Err(r) => return r,
        };
        if ev.result < 0 {
            return Reply::from_raw(ev.result);
        }
        if let Err(d) = tapes::check_read(socket, ordinal, dest.len(), &ev) {
            return diverge(sh, d);
        }
        return match dest.deliver(g, &ev.data, &ev.addr) {
            Ok(()) => Reply::Value(ev.data.len() as i64),
            Err(e) => Reply::Error(e),
        };
    }
    let fd = match g.borrow_fd(fd) {
        Ok(fd) => fd,
        Err(e) => return record_read(sh, g, &dest, socket, Err(-(e as i64))),
    };
    // Without waiting first: a read that has to wait is made on a thread of its own (Reply::Defer), so that the
    // guest's other tasks are served meanwhile (the peer may be one of them).
    let got = net::recvfrom(&fd, dest.len(), flags | libc::MSG_DONTWAIT).map_err(errno);
    if got.as_ref().err() == Some(&-(libc::EAGAIN as i64)) && flags & libc::MSG_DONTWAIT == 0 && blocking(&fd) {
        return Reply::Defer(Box::new(move |shared| {
            let got = net::recvfrom(&fd, dest.len(), flags).map_err(errno);
            let mut cache = PidfdCache::default();
            let mut g = TaskGuest::new(tid, None, &mut cache);
            record_read(&mut lock(shared), &mut g, &dest, socket, got)
        }));
    }
    record_read(sh, g, &dest, socket, got)
}

/// Hands a recorded read's bytes to the guest and puts the read on the tape.
fn record_read<G: Guest>(
    sh: &mut Shared,
    g: &mut G,
    dest: &ReadDest,
    socket: u32,
    got: Result<(Vec<u8>, Vec<u8>), i64>,
) -> Reply {
    let (r, data, addr) = match got {
        Ok((d, a)) => (d.len() as i64, d, a),
        Err(r) => (r, Vec::new(), Vec::new()),
    };
    if r >= 0 {
        if let Err(e) = dest.deliver(g, &data, &addr) {
            return Reply::Error(e);
        }
    }
    if let Some(t) = sh.tape.as_mut() {
        t.recorded.push(NetEvent { socket, op: NetOp::Read, result: r, data, addr });
    }
    Reply::from_raw(r)
}

/// Whether calls on the guest's descriptor wait (it is not O_NONBLOCK); when that cannot be told, it is taken
/// to wait (the call is then deferred to a thread, which is right either way).
fn blocking(fd: &OwnedFd) -> bool {
    nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFL).map_or(true, |fl| fl & libc::O_NONBLOCK == 0)
}

/// Whether a listening socket has a connection waiting (accept would not block); when poll fails, it is taken
/// to have one (the accept is then made at once and reports the error).
fn acceptable(fd: &OwnedFd) -> bool {
    use std::os::fd::AsFd;
    let mut p = [nix::poll::PollFd::new(fd.as_fd(), nix::poll::PollFlags::POLLIN)];
    nix::poll::poll(&mut p, nix::poll::PollTimeout::ZERO).map_or(true, |n| n > 0)
}

fn write<G: Guest>(
    sh: &mut Shared,
    g: &mut G,
    (socket, ordinal): (u32, u32),
    fd: i32,
    to: WriteArgs,
    replay: bool,
) -> Reply {
    let (data, flags, addr) = match write_source(g, to) {
        Ok(d) => d,
        Err(e) => return Reply::Error(e),
    };
    if replay {
        let ev = match next_event(sh, socket, ordinal, NetOp::Write) {
            Ok(e) => e,
            Err(r) => return r,
        };
        if let Err(d) = tapes::check_write(socket, ordinal, &data, &ev) {
            return diverge(sh, d);
        }
        return Reply::from_raw(ev.result);
    }
    let r = match g.borrow_fd(fd) {
        Ok(fd) if to.is_plain() => net::write(&fd, &data).map(|n| n as i64).unwrap_or_else(errno),
        Ok(fd) => net::sendto(&fd, &data, flags, &addr).map(|n| n as i64).unwrap_or_else(errno),
        Err(e) => -(e as i64),
    };
    let sent = if r > 0 { data[..r as usize].to_vec() } else { Vec::new() };
    if let Some(t) = sh.tape.as_mut() {
        t.recorded.push(NetEvent { socket, op: NetOp::Write, result: r, data: sent, addr: Vec::new() });
    }
    Reply::from_raw(r)
}

/// Replay: bind, listen, setsockopt, shutdown succeed; getsockopt reads 0; getsockname reads the unspecified
/// address of the socket's family, getpeername the address it connected to (or accepted from).
fn replay_control<G: Guest>(sh: &mut Shared, g: &mut G, socket: u32, op: Control) -> Reply {
    let Some(s) = sh.tape.as_ref().and_then(|t| t.replay_sockets.get(&socket)) else { return Reply::Continue };
    let unspecified = |domain: i32| {
        let mut v = vec![0u8; if domain == libc::AF_INET6 { 28 } else { 16 }];
        v[0..2].copy_from_slice(&(domain as u16).to_ne_bytes());
        v
    };
    let r = match op {
        Control::Getsockopt { optval, optlen } => {
            if optval != 0 && optlen != 0 {
                g.write_bytes(optval, &0u32.to_le_bytes()).and_then(|_| g.write_bytes(optlen, &4u32.to_le_bytes()))
            } else {
                Ok(())
            }
        }
        Control::Getsockname { addr, addrlen } => write_addr(g, addr, addrlen, &unspecified(s.domain)),
        Control::Getpeername { .. } if s.peer_addr.is_empty() => Err(libc::ENOTCONN),
        Control::Getpeername { addr, addrlen } => {
            let peer = s.peer_addr.clone();
            write_addr(g, addr, addrlen, &peer)
        }
        Control::Bind { .. } | Control::Listen | Control::Setsockopt | Control::Shutdown => Ok(()),
    };
    match r {
        Ok(()) => Reply::Value(0),
        Err(e) => Reply::Error(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::decode;
    use crate::guest::fake::FakeGuest;
    use crate::handlers::dispatch;
    use crate::handlers::testing::shared;
    use crate::tape::{ProcMode, TapeConfig, TapeState};
    use repro_model::tape::NetTape;

    const LOCALHOST_80: [u8; 16] = [2, 0, 0, 80, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];

    fn ev(socket: u32, op: NetOp, result: i64, data: &[u8], addr: &[u8]) -> NetEvent {
        NetEvent { socket, op, result, data: data.to_vec(), addr: addr.to_vec() }
    }

    fn replaying(events: Vec<NetEvent>) -> Shared {
        let mut sh = shared(1, 1000);
        let cfg = TapeConfig { network: NetMode::Replay(NetTape { events }), proc: ProcMode::Off };
        sh.tape = TapeState::new(&cfg);
        sh
    }

    /// The iovec arrays of writev and readv, gathered from and scattered to guest memory.
    #[test]
    fn vectored_calls_gather_and_scatter_through_their_iovecs() {
        let mut g = FakeGuest::new(3);
        let iov = |bufs: &[(u64, u64)]| -> Vec<u8> {
            bufs.iter().flat_map(|&(p, l)| p.to_le_bytes().into_iter().chain(l.to_le_bytes())).collect()
        };
        g.put(0x100, b"GET /x").put(0x200, b" HTTP/1.0\r\n");
        g.put(0x1000, &iov(&[(0x100, 6), (0, 0), (0x200, 11)]));
        let (data, flags, addr) = write_source(&mut g, WriteArgs::Writev { iov: 0x1000, count: 3 }).unwrap();
        assert_eq!((data.as_slice(), flags, addr.len()), (&b"GET /x HTTP/1.0\r\n"[..], 0, 0));
        g.map(0x300, 4).map(0x400, 8).put(0x2000, &iov(&[(0x300, 4), (0x400, 8)]));
        let (dest, _) = read_dest(&mut g, ReadArgs::Readv { iov: 0x2000, count: 2 }).unwrap();
        assert_eq!(dest.len(), 12);
        dest.deliver(&mut g, b"HTTP/1.0 2", &[]).unwrap();
        assert_eq!((g.get(0x300, 4), g.get(0x400, 8)), (b"HTTP".to_vec(), b"/1.0 2\0\0".to_vec()));
        assert_eq!(read_dest(&mut g, ReadArgs::Readv { iov: 8, count: 2 }).err(), Some(libc::EFAULT));
    }

    /// socket, connect, write, read answered from the tape; then a write of other bytes stops the replay.
    #[test]
    fn replay_answers_from_the_tape_and_reports_divergence() {
        let mut sh = replaying(vec![
            ev(0, NetOp::Socket, 0, b"", b""),
            ev(0, NetOp::Connect, 0, b"", &LOCALHOST_80),
            ev(0, NetOp::Write, 4, b"PING", b""),
            ev(0, NetOp::Read, 4, b"PONG", b""),
            ev(0, NetOp::Write, 4, b"PING", b""),
        ]);
        let mut g = FakeGuest::new(3);
        g.put(0x100, &LOCALHOST_80).put(0x200, b"PING").put(0x300, b"PANG").map(0x400, 16);
        let call = |sh: &mut Shared, g: &mut FakeGuest, nr: i64, a: [u64; 6]| dispatch(sh, g, nr, decode(nr, a));
        let r = call(&mut sh, &mut g, libc::SYS_socket, [libc::AF_INET as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0]);
        let Reply::AddFd { fd, cloexec: false } = r else { panic!("{r:?}") };
        g.fds.insert(5, fd);
        assert!(matches!(call(&mut sh, &mut g, libc::SYS_connect, [5, 0x100, 16, 0, 0, 0]), Reply::Value(0)));
        assert!(matches!(call(&mut sh, &mut g, libc::SYS_write, [5, 0x200, 4, 0, 0, 0]), Reply::Value(4)));
        assert!(matches!(call(&mut sh, &mut g, libc::SYS_read, [5, 0x400, 16, 0, 0, 0]), Reply::Value(4)));
        assert_eq!(g.get(0x400, 4), b"PONG");
        // Not a taped socket: plain I/O runs natively.
        assert!(matches!(call(&mut sh, &mut g, libc::SYS_write, [1, 0x200, 4, 0, 0, 0]), Reply::Continue));
        assert!(sh.tape.as_ref().unwrap().diverged.is_none());
        assert!(matches!(call(&mut sh, &mut g, libc::SYS_write, [5, 0x300, 4, 0, 0, 0]), Reply::Error(libc::EIO)));
        let why = sh.tape.as_ref().unwrap().diverged.clone().unwrap();
        assert!(why.contains("differ from the recording's 4 at byte 1"), "{why}");
    }

    #[test]
    fn a_call_the_tape_does_not_have_diverges() {
        let mut sh = replaying(vec![ev(0, NetOp::Socket, 0, b"", b"")]);
        let mut g = FakeGuest::new(3);
        g.put(0x100, &LOCALHOST_80);
        let nr = libc::SYS_socket;
        let r = dispatch(&mut sh, &mut g, nr, decode(nr, [libc::AF_INET as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0]));
        let Reply::AddFd { fd, .. } = r else { panic!("{r:?}") };
        g.fds.insert(5, fd);
        let nr = libc::SYS_connect;
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, [5, 0x100, 16, 0, 0, 0])), Reply::Error(libc::EIO)));
        let why = sh.tape.as_ref().unwrap().diverged.clone().unwrap();
        assert!(why.contains("connect on socket 0 (call 2), which is not on the tape"), "{why}");
    }

    /// A replayed socket's getpeername is the address it connected to; socket options read 0.
    #[test]
    fn replay_control_calls_are_answered_without_the_tape() {
        let mut sh = replaying(vec![ev(0, NetOp::Socket, 0, b"", b""), ev(0, NetOp::Connect, 0, b"", &LOCALHOST_80)]);
        sh.tape.as_mut().unwrap().cfg.network = NetMode::Replay(NetTape::default());
        let mut g = FakeGuest::new(3);
        g.put(0x100, &LOCALHOST_80).map(0x200, 16).put(0x300, &16u32.to_le_bytes()).put(0x400, &[0xff; 4]);
        let call = |sh: &mut Shared, g: &mut FakeGuest, nr: i64, a: [u64; 6]| dispatch(sh, g, nr, decode(nr, a));
        let r = call(&mut sh, &mut g, libc::SYS_socket, [libc::AF_INET as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0]);
        let Reply::AddFd { fd, .. } = r else { panic!("{r:?}") };
        g.fds.insert(5, fd);
        assert!(matches!(
            call(&mut sh, &mut g, libc::SYS_getpeername, [5, 0x200, 0x300, 0, 0, 0]),
            Reply::Error(libc::ENOTCONN)
        ));
        call(&mut sh, &mut g, libc::SYS_connect, [5, 0x100, 16, 0, 0, 0]);
        assert!(matches!(call(&mut sh, &mut g, libc::SYS_getpeername, [5, 0x200, 0x300, 0, 0, 0]), Reply::Value(0)));
        assert_eq!(g.get(0x200, 16), LOCALHOST_80);
        assert!(matches!(call(&mut sh, &mut g, libc::SYS_getsockopt, [5, 1, 2, 0x400, 0x300, 0]), Reply::Value(0)));
        assert_eq!(g.get(0x400, 4), [0; 4]);
    }
}
