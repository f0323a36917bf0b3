//! End-to-end tests of `repro chaos`.
