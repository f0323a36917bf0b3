//! The experiment and adapter schema (`apiVersion: repro.dev/chaos/v1`) as typed structs: plain serde types
//! in `repro_model::chaos` (they cross into repro-report and repro-cli), re-exported here. Loading them from
//! YAML, with located errors and validation, is [`crate::load`].
pub use repro_model::chaos::*;
