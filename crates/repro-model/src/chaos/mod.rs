//! The experiment schema of `repro chaos` (`apiVersion: repro.dev/chaos/v1`): experiments, workloads,
//! operations, the flow, checks, expectations and adapters, as plain serde types shared by repro-chaos (which
//! loads and runs them), repro-report and repro-cli.
//!
//! The types deserialize from any serde format; read from YAML by `repro_chaos::load` they carry the line and
//! column of what was written ([`At`], [`FlowNode`]), and durations and counts are checked against the
//! [`Limits`] of the running parse. Validation that needs more than one value (references, names, sizes) is
//! the loader's.
pub mod adapter;
pub mod at;
pub mod duration;
pub mod experiment;
pub mod flow;
pub mod limits;
pub mod network;
pub mod schedule;
pub mod stress;

pub use adapter::*;
pub use at::At;
pub use duration::{format_duration, parse_duration, parse_duration_checked, Dur, DurationError, DURATION_EXPECTED};
pub use experiment::*;
pub use flow::*;
pub use limits::{DurationOverLimit, Limits};
pub use network::{parse_rate, NetDirection, NetworkSpec, Rate, RATE_EXPECTED};
pub use schedule::{Draw, Schedule, ScheduledOp, SCHEDULE_VERSION};
pub use stress::{parse_bytes, Bytes, StressSpec, BYTES_EXPECTED};
