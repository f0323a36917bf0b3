//! Plain serde types shared by every repro crate: the settings of a run, the run record (`run.json`),
//! the list of changed files, and the experiment schema of `repro chaos`.

pub mod chaos;
pub mod pathenc;
pub mod run;
pub mod secrets;
pub mod timeline;
