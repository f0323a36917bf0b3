//! Fault-injection experiments (`repro chaos ...`): the experiment model, the flow engine, the process
//! adapter, verdicts and the run directory.
pub mod api;
pub mod docker;
pub mod error;
pub mod evaluate;
pub mod fsutil;
pub mod limits;
pub mod load;
pub mod model;
pub mod proc;
pub mod prom;
pub mod runner;
pub mod timeline;

pub use error::{ChaosError, Result};
