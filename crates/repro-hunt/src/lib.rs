//! Flaky failures on demand: `repro hunt` runs a command under many configurations (seed, epoch, directory
//! order, environment, CPUs, hostname, clock step) until it fails; `repro explain` varies one input at a time to
//! say which decides the outcome, and bisects the date boundary.
//!
//! Every configuration is executed as its own `repro run --json` process, so runs are isolated from each other
//! and from the orchestrator, and parallel jobs need no shared state.

pub mod cancel;
pub mod config;
pub mod explain;
pub mod hunt;
#[cfg(test)]
mod props;
pub mod race;
pub mod runner;
pub mod shrink;

mod error;

pub use error::HuntError;
