//! Plain serde types shared by every repro crate.
