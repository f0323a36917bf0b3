//! The only crate of repro that contains `unsafe` code: thin, documented wrappers over the Linux calls the
//! sandbox and the supervisor need (namespaces, mounts, process control, seccomp, ptrace).
//!
//! Every `unsafe` block carries a `// SAFETY:` comment saying why the call is sound.
#![allow(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod beneath;
pub mod confine;
#[cfg(test)]
mod docker_profile;
pub mod fdops;
pub mod idmap;
pub mod memory;
pub mod net;
pub mod ns;
pub mod ptrace;
pub mod sched;
pub mod seccomp;
pub mod shmem;
pub mod sockconnect;
pub mod spawn;
pub mod startup;
pub mod syscalls;
pub mod term;
pub mod treecopy;
pub mod tsc;
