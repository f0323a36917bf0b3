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
pub mod githead;
pub mod gitview;
pub mod hidden;
pub mod identity;
pub mod init;
mod installs;
pub mod parse;
pub mod project;
pub mod reach;
pub mod reaper;
pub mod run;
pub mod rundir;
pub mod scancache;
pub mod settings;
pub mod signals;
pub mod toolchain;
pub mod verify;

pub use error::SandboxError;
