//! Operation histories (JSON lines, as Jepsen and Knossos write them) and their checkers: linearizability of a
//! register and of a key-value map (Wing–Gong–Lowe search with Lowe's memoization, as Porcupine does), a set
//! and a counter. Pure logic: nothing here reads a file or a clock; the caller hands over the text.
//!
//! ```text
//! parse(name, text) -> History { ops: [Op { process, f, key, value, result, outcome, call, ret, line, .. }] }
//! check(Checker::LinearizableKv, &history, &LinearOptions::default()) -> CheckResult { valid, summary, details }
//! ```
//!
//! Used by repro-chaos (workloads write histories, checks read them); depends on no repro crate.
pub mod check;
pub mod counter;
pub mod error;
pub mod history;
pub mod linear;
pub mod set;
pub mod verdict;

pub use check::check;
pub use counter::check_counter;
pub use error::{HistoryError, Location};
pub use history::{parse, parse_reader, History, Op, Outcome, ParseOptions, Process};
pub use linear::{check_kv, check_register, LinearOptions};
pub use set::check_set;
pub use verdict::{
    CheckResult, Checker, CounterDetails, CounterRead, Details, LinearDetails, LinearModel, SetDetails, Validity,
    Window, WindowInitial,
};
