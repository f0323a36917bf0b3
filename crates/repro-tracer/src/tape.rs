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

use std::collections::HashMap;
use std::os::fd::OwnedFd;

/// Bytes one taped read or write moves at most (larger calls are partial, as the kernel may do).
pub(crate) const IO_MAX: usize = 1 << 20;
/// Largest /proc or /sys file taped (bigger ones are read natively).
pub(crate) const PROC_MAX: usize = 1 << 20;

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

use repro_detcore::{NetReplay, ProcReplay};

/// A replayed socket.
pub(crate) struct ReplaySocket {
    pub domain: i32,
    pub peer_addr: Vec<u8>,
    /// The supervisor's end of the guest's socket pair.
    pub _peer: OwnedFd,
}

/// The supervisor's tape state during a run.
#[derive(Default)]
pub(crate) struct TapeState {
    pub cfg: TapeConfig,
    /// Taped sockets by inode: (number, calls answered so far).
    pub sockets: HashMap<u64, (u32, u32)>,
    pub next_socket: u32,
    pub recorded: Vec<NetEvent>,
    /// Replay: each socket's remaining events.
    pub net_replay: NetReplay,
    pub replay_sockets: HashMap<u32, ReplaySocket>,
    pub proc_recorded: Vec<ProcRead>,
    /// Replay: the recorded reads of each /proc and /sys path.
    pub proc_replay: ProcReplay,
    pub diverged: Option<String>,
}

impl TapeState {
    pub(crate) fn new(cfg: &TapeConfig) -> Option<TapeState> {
        if !cfg.active() {
            return None;
        }
        let mut st = TapeState { cfg: cfg.clone(), ..Default::default() };
        if let NetMode::Replay(t) = &cfg.network {
            st.net_replay = NetReplay::new(t);
        }
        if let ProcMode::Replay(t) = &cfg.proc {
            st.proc_replay = ProcReplay::new(t);
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
            // notified, and those on other descriptors are let through (see `handlers::net`). Only while taping.
            libc::SYS_read,
            libc::SYS_readv,
            libc::SYS_write,
            libc::SYS_writev,
            libc::SYS_getsockname,
        ],
    };
    v.extend([libc::SYS_sendfile, libc::SYS_splice, libc::SYS_sendmmsg, libc::SYS_recvmmsg]);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syscalls_only_when_taping() {
        assert!(net_syscalls(&TapeConfig::default()).is_empty());
        let rec = net_syscalls(&TapeConfig { network: NetMode::Record, proc: ProcMode::Off });
        assert!(rec.contains(&(libc::SYS_recvfrom as u32)) && !rec.contains(&(libc::SYS_bind as u32)));
        assert!(rec.contains(&(libc::SYS_splice as u32)), "untaped data movers are watched");
        let rep = net_syscalls(&TapeConfig { network: NetMode::Replay(NetTape::default()), proc: ProcMode::Off });
        assert!(rep.contains(&(libc::SYS_bind as u32)));
        // Plain I/O is notified only while the network is taped: a /proc tape alone does not add it.
        let plain = [libc::SYS_read, libc::SYS_readv, libc::SYS_write, libc::SYS_writev].map(|n| n as u32);
        for nr in plain {
            assert!(rec.contains(&nr) && rep.contains(&nr), "{nr}");
            assert!(!net_syscalls(&TapeConfig { network: NetMode::Off, proc: ProcMode::Record }).contains(&nr));
        }
    }

    #[test]
    fn replay_queues_events_per_socket_and_finish_gives_the_recording() {
        let ev = |socket, op| NetEvent { socket, op, result: 0, data: vec![], addr: vec![] };
        let tape = NetTape { events: vec![ev(0, NetOp::Socket), ev(1, NetOp::Socket), ev(0, NetOp::Connect)] };
        let st = TapeState::new(&TapeConfig { network: NetMode::Replay(tape), proc: ProcMode::Off }).unwrap();
        assert!(st.net_replay.next_is(0, NetOp::Socket));
        assert_eq!((st.net_replay.remaining(0), st.net_replay.remaining(1)), (2, 1));
        assert!(TapeState::new(&TapeConfig::default()).is_none());
        let mut rec = TapeState::new(&TapeConfig { network: NetMode::Record, proc: ProcMode::Record }).unwrap();
        rec.recorded.push(ev(0, NetOp::Socket));
        let out = rec.finish();
        assert_eq!(out.network.unwrap().events.len(), 1);
        assert_eq!(out.proc, Some(ProcTape::default()));
    }
}
