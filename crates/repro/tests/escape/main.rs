//! Escape attempts: a root (or unprivileged) guest, a stranger's pack, an absurd experiment try to reach outside
//! the sandbox. Every test asserts that the attempt fails and that the host is unchanged, and runs the attempt
//! both as root and as an unprivileged caller where that applies (see `harness::Caller`).
//!
//! These tests must be harmless even when an attempt succeeds: they write back a sysctl's current value, aim
//! writes at canary paths on the test's own small tmpfs, never touch a real block device, and bound every count
//! and duration.

#[path = "../it/common.rs"]
mod common;
mod harness;

mod closed_parents;
mod confine;
mod copyback;
mod identity;
mod limits;
mod mounts;
mod packs;
mod secrets;
mod socket_race;
mod sockets;
mod terminal;
mod toolchains;
