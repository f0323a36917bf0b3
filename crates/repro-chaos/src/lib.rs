//! Fault-injection experiments (`repro chaos ...`).
//!
//! One experiment, from YAML to verdict:
//!
//! ```text
//! load (model, load) -> runner::run: run directory, manifest, signal guard (signals)
//!   -> preflight (checks) -> targets up (targets, via the Driver) -> observers (engine::observers)
//!   -> flow::Interpreter::run: serial / parallel / repeat / delay / wait, step limit, experiment timeout,
//!        cancel on a harness error or SIGINT/SIGTERM; each leaf is the engine's (engine::Ctx as flow::Host):
//!        a workload (engine::instances) or an operation (engine::ops: select, fault = driver hits + undo, adapter hook)
//!   -> undo sweep, newest first (undo, engine::ops::run_undo) -> remaining instances killed and collected
//!   -> observers stopped -> adapter checks (checks) -> targets stopped -> evaluate -> verdict.json
//! ```
//!
//! Every event goes to the timeline ([`timeline`], typed as [`repro_model::timeline::Event`]); a write that
//! fails there makes the run return an error instead of a verdict.
//!
//! Where to add:
//! - a driver (Kubernetes, a VM): implement [`driver::Driver`] in a new file beside [`process_driver`] and
//!   [`docker_driver`], and pick it in [`runner::run`];
//! - a built-in fault: a [`model::Fault`] (schema), then its sequence of [`driver::Hit`]s in
//!   [`engine::ops`] (`apply_fault`) and, if the drivers need a new primitive, a `Hit` variant;
//! - a flow node: [`model::FlowKind`], then [`flow::Interpreter::exec`] (the interpreter knows no process);
//! - a timeline event: a variant of [`repro_model::timeline::Event`].
//!
//! The flow's semantics are unit-tested over a fake driver and a fake clock (`fake.rs`, `engine/tests.rs`).
pub mod api;
pub mod check_result;
pub mod checks;
pub mod common;
pub mod docker;
pub mod docker_driver;
pub mod driver;
pub mod engine;
pub mod error;
pub mod evaluate;
pub mod flow;
pub mod fsutil;
pub mod inputs;
pub mod limits;
pub mod load;
pub mod model;
pub mod netproxy;
pub mod proc;
pub mod process_driver;
pub mod prom;
pub mod reaper;
pub mod reaper_link;
pub mod replay;
pub mod runner;
pub mod schedule;
pub mod shrink;
pub mod signals;
pub mod steady;
pub mod timeline;
pub mod undo;

#[cfg(test)]
mod fake;

pub use error::{ChaosError, Result};
