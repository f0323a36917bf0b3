//! Fault-injection experiments (`repro chaos ...`).
