//! Plain serde types shared by every repro crate: the settings of a run, the run record (`run.json`),
//! the list of changed files, tapes, exit codes, directory order, and the experiment schema of `repro chaos`.

pub mod chaos;
pub mod dirorder;
pub mod exit;
pub mod init;
pub mod manifest;
pub mod pathenc;
pub mod project;
pub mod provenance;
pub mod remote;
pub mod repair;
pub mod repair_loop;
pub mod run;
pub mod sched;
pub mod secret_paths;
pub mod secrets;
pub mod settings;
pub mod tape;
pub mod timeline;

pub use dirorder::DirOrder;
pub use exit::ExitCode;
pub use sched::{PctParams, SchedLog, SchedPoints, SchedPolicy, SchedScript, SchedSettings};
