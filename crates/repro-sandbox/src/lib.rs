//! The hermetic boundary of `repro run`.
