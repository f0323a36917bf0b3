//! `repro remote`: packs as Remote Execution API v2 Actions on an existing engine (see docs/remote.md).
//!
//! - [`config`]: the endpoint from `--remote` and the `[remote]` table of repro.toml, checked.
//! - [`action`]: a pack as an input root (canonical Directory tree), a Command and an Action.
//! - [`client`]: CAS (FindMissingBlobs, BatchUpdateBlobs, ByteStream Write), Action Cache, Capabilities.
//! - [`fetch`]: CAS reads and a bounded input root written into a private directory.
//! - [`bots`]: the Remote Workers API messages and client (CreateBotSession, UpdateBotSession).
//! - [`worker`]: `repro worker`, a bot that replays the Actions it leases.
//! - [`execute`]: `repro remote replay`: Execute / WaitExecution, Action Cache hits short-circuit.

pub mod action;
pub mod bots;
pub mod client;
pub mod config;
pub mod digest;
mod error;
pub mod execute;
pub mod fetch;
pub mod ops;
pub mod worker;

pub use action::{action_of_pack, pack_action, PackAction};
pub use client::{Remote, UploadStats};
pub use error::RemoteError;
