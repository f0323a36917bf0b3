//! The anti-weakening gates of `repro repair` (docs/repair-gates.md): policy only, without a kernel.
//!
//! The repair loop snapshots the working tree before the agent runs ([`tree::snapshot`]) and after each
//! iteration, diffs the two ([`tree::diff`]), counts the tests of the baseline and candidate runs from the
//! runners' own output ([`counts::count_run`]) and asks a [`GateSet`] whether the change is an honest fix: every
//! gate is reported by its stable name ([`repro_model::repair::GateName`]), fired or not, with details.
//!
//! ```no_run
//! use repro_repair::{counts, tree, GateInput, GateSet, RunOutput};
//! use repro_model::repair::GateConfig;
//! # fn main() -> Result<(), repro_repair::RepairError> {
//! # let (orig, work) = (std::path::Path::new("a"), std::path::Path::new("b"));
//! # let (base_out, cand_out) = (Vec::<u8>::new(), Vec::<u8>::new());
//! # let failing_tests: Vec<String> = vec![];
//! let gates = GateSet::new(&GateConfig::default())?;
//! let limits = tree::SnapshotLimits::default();
//! let base = tree::snapshot(orig, &limits)?;
//! let cand = tree::snapshot(work, &limits)?;
//! let diff = tree::diff(orig, &base, work, &cand, &tree::DiffLimits::default())?;
//! let candidate = RunOutput { stdout: cand_out, stderr: vec![], junit: vec![], reports: vec![] };
//! let results = gates.evaluate(&GateInput {
//!     diff: &diff,
//!     baseline_counts: counts::count_run(&base_out, &[], &[]).as_ref(),
//!     candidate_counts: candidate.counts().as_ref(),
//!     failing_tests: &failing_tests,
//!     candidate: &candidate,
//! });
//! let honest = results.iter().all(|r| !r.fired);
//! # let _ = honest;
//! # Ok(())
//! # }
//! ```

use std::path::PathBuf;

pub mod automake;
pub mod counts;
pub mod gates;
pub mod glob;
pub mod masking;
pub mod plain;
pub mod reports;
pub mod tree;
mod xml;

pub use gates::{GateInput, GateSet, ReportFile, RunOutput, DEFAULT_PROTECTED};
pub use masking::MaskingSet;
pub use tree::{Snapshot, TreeChange, TreeDiff};

/// What can go wrong: each error names the file (and the line or entry) it is about.
#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{}: more than {limit} entries (the snapshot's limit on files); the first past it: {}", root.display(), path.display())]
    TooManyFiles { root: PathBuf, limit: u64, path: PathBuf },
    #[error("{}: more than {limit} bytes of files (the snapshot's limit); reached at {}", root.display(), path.display())]
    TooManyBytes { root: PathBuf, limit: u64, path: PathBuf },
    #[error("{}: changed since its snapshot (its hash differs): snapshot again", path.display())]
    ChangedSinceSnapshot { path: PathBuf },
    #[error("protected path glob {glob:?}: {reason}")]
    BadGlob { glob: String, reason: String },
    #[error("{file}: {reason}")]
    MaskingFile { file: String, reason: String },
    #[error("{file}: pattern[{index}] (id {id:?}): {field}: {reason}")]
    MaskingEntry { file: String, index: usize, id: String, field: String, reason: String },
}

pub type Result<T, E = RepairError> = std::result::Result<T, E>;
