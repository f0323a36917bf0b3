//! Plain serde types shared by every repro crate.

pub mod chaos;
