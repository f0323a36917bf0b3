//! End-to-end tests of the `repro` binary: real namespaces, processes and files.
//! One module per command family.

mod attest;
mod chaos;
mod chaos_bounds;
mod ci;
mod cli;
mod common;
mod companions;
mod contract;
mod determinism;
mod doctor;
mod git_view;
#[path = "../escape/harness.rs"]
mod harness;
mod hunt;
mod hunting;
mod layouts;
mod mcp;
mod pack;
mod pack_docker;
mod pack_names;
mod provenance;
mod races;
mod remote;
mod remote_exec;
mod repair;
mod repair_bounds;
mod repair_corpus;
mod robust;
mod run;
mod sbom;
mod sched;
mod sched_langs;
mod schedules;
mod signals;
mod sock_tape;
mod timers;
mod toolchains;
mod toolchains_reached;
mod varies;
mod waits;
