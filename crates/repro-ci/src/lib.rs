//! CI integration: JUnit XML reports of `run`, `run --verify`, `replay`, `hunt` and `chaos run` ([`junit`] the
//! typed document and its writer, [`report`] the mapping of each command's result), and the CI pipelines of
//! `repro ci init` ([`pipeline`]). docs/ci.md documents both for users.

pub mod junit;
pub mod pipeline;
pub mod report;
