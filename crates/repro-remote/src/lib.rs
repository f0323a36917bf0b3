//! `repro remote`: packs as Remote Execution API v2 Actions on an existing engine (see docs/remote.md).
//!
//! - [`config`]: the endpoint from `--remote` and the `[remote]` table of repro.toml, checked.
//! - [`action`]: a pack as an input root (canonical Directory tree), a Command and an Action.
//! - [`client`]: CAS (FindMissingBlobs, BatchUpdateBlobs, ByteStream Write), Action Cache, Capabilities.

pub mod action;
pub mod client;
pub mod config;
pub mod digest;
mod error;
pub mod ops;

pub use action::{action_of_pack, pack_action, PackAction};
pub use client::{Remote, UploadStats};
pub use error::RemoteError;
