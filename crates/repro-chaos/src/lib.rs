//! Fault-injection experiments (`repro chaos ...`).
//!
//! The experiment model and its loading ([`model`], [`load`]); one run ([`runner`]): the flow interpreter
//! ([`flow`], knowing nothing of processes), the engine that runs its leaves ([`engine`], [`targets`],
//! [`instances`], [`ops`], [`undo`]) against a [`driver::Driver`] ([`process_driver`], [`docker_driver`]),
//! the observers ([`observers`]), the harness's checks ([`checks`]), the evidence ([`timeline`]) and the
//! signal guard ([`signals`]); then the evaluation and verdict ([`evaluate`]).
pub mod api;
pub mod checks;
pub mod docker;
pub mod docker_driver;
pub mod driver;
pub mod engine;
pub mod error;
pub mod evaluate;
pub mod flow;
pub mod fsutil;
pub mod instances;
pub mod limits;
pub mod load;
pub mod model;
pub mod observers;
pub mod ops;
pub mod proc;
pub mod process_driver;
pub mod prom;
pub mod runner;
pub mod signals;
pub mod targets;
pub mod timeline;
pub mod undo;

#[cfg(test)]
mod engine_tests;
#[cfg(test)]
mod fake;

pub use error::{ChaosError, Result};
