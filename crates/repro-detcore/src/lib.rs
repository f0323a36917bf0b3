//! The DeterminismController: logical clock, entropy stream, pinned identity, directory order,
//! deterministic inode numbers and logical file times.
//!
//! Pure logic, no kernel mechanism: every transport (seccomp user notification, ptrace, a replacement
//! vDSO) asks this crate what the guest should see and reuses it unchanged. Everything here is a pure
//! function of its [`controller::ControllerConfig`] and of the order of the calls made on it.

pub mod clock;
pub mod controller;
pub mod dirs;
pub mod entropy;
pub mod files;
pub mod identity;
pub mod ports;
pub mod procfs;
pub mod rdrand;
pub mod rng;
pub mod sched;
pub mod statfs;
pub mod tapes;
pub mod timers;
pub mod waits;

pub use clock::{ClockKind, ClockRead, LogicalClock, Timespec};
pub use controller::{ClockAnswer, ControllerConfig, DeterminismController, HostTimer, GETRANDOM_MAX, URANDOM_BYTES};
pub use dirs::{DirEntry, DirListing, DirOrder};
pub use entropy::{format_uuid, ChaCha20, EntropyStream};
pub use files::{FileIdentity, FileOrigin, FileTimeMap, FileTimes, InodeMap};
pub use identity::{Identity, SysinfoValues, UtsName};
pub use rng::{splitmix64, SplitMix64};
pub use sched::Scheduler;
pub use tapes::{Divergence, NetReplay, ProcReplay};
pub use waits::Deadline;

/// Errors of the pure policy (bad inputs from the guest that the transport turns into an errno).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DetError {
    /// The guest's buffer cannot hold even one directory entry (getdents64 returns EINVAL).
    #[error("getdents64 buffer of {buf_len} bytes cannot hold the entry {name:?} ({needed} bytes)")]
    BufferTooSmall { buf_len: usize, needed: usize, name: String },
    /// A clock id the kernel does not know (clock_gettime returns EINVAL).
    #[error("unknown clock id {0}")]
    UnknownClock(i64),
    /// A timespec with a negative or out-of-range field (nanosleep returns EINVAL).
    #[error("invalid timespec {sec}s {nsec}ns")]
    InvalidTimespec { sec: i64, nsec: i64 },
    /// sched_getaffinity with a mask length that is not a positive multiple of 8 (EINVAL).
    #[error("CPU mask length {0} is not a positive multiple of 8")]
    MaskLength(usize),
}

impl DetError {
    /// The errno the guest's syscall returns for this error.
    pub fn errno(&self) -> i32 {
        match self {
            DetError::BufferTooSmall { .. }
            | DetError::UnknownClock(_)
            | DetError::InvalidTimespec { .. }
            | DetError::MaskLength(_) => libc::EINVAL,
        }
    }
}
