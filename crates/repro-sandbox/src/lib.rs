//! The hermetic boundary of `repro run`: namespaces, a read-only root with a writable overlay over the working
//! directory, a fixed environment and identity, resource limits, and the run directory that records it all.
//!
//! The process tree of a run:
//! ```text
//! repro run (host)           pumps stdout/stderr, forwards signals, writes the run directory
//! ├── repro __reap           outlives a killed `repro run`: empties and removes the cgroup
//! └── repro __init  (PID 1)  new user/mount/PID/net/UTS/IPC/cgroup namespaces: builds the root, reaps, forwards
//!                            signals
//!     └── CMD                the guest
//! ```

pub mod cgroup;
pub mod changes;
pub mod doctor;
pub mod env;
mod error;
pub mod gc;
pub mod identity;
pub mod init;
pub mod parse;
pub mod reaper;
pub mod run;
pub mod settings;
pub mod signals;
pub mod rundir;
pub mod verify;

pub use error::SandboxError;

/// Exit status when repro itself failed to set up the sandbox.
pub const EXIT_SETUP: i32 = 125;
/// Exit status when the command exists but cannot be executed.
pub const EXIT_NOT_EXECUTABLE: i32 = 126;
/// Exit status when the command does not exist.
pub const EXIT_NOT_FOUND: i32 = 127;
/// Exit status when the supervisor could not enforce determinism (even if the guest exited 0).
pub const EXIT_NOT_DETERMINISTIC: i32 = 121;
/// Exit status of `run --verify` when the runs differ.
pub const EXIT_VERIFY_DIFFERS: i32 = 122;
/// Exit status for a usage error.
pub const EXIT_USAGE: i32 = 2;
