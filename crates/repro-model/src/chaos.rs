//! The experiment schema of `repro chaos`.
