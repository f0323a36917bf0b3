//! Bounds on what one experiment may ask of the harness, checked when it is loaded.
//!
//! An experiment is YAML that may come from anyone; `instances: 100000000` or `timeout: 99999999999h` must be
//! refused with a located error before anything is created, not discovered when the host runs out of inodes.
//! The limits are the runner's (flags of `repro chaos`), never the experiment's own: a file cannot raise them.
//! The type is `repro_model::chaos::Limits`, beside the deserializers that check durations and counts against
//! the limits of the running parse; [`crate::load`] sets them with [`with_parse_limits`], and checks the
//! sizes a whole experiment multiplies out to (instances, check runs, flow steps, parallel branches).
pub use repro_model::chaos::limits::{parse_limits, with_parse_limits, DurationOverLimit, Limits};
