//! Reproducer packs: one file that carries every input of a run (its file closure, environment, seed, epoch,
//! tapes) and the failure it produced, so that `repro replay` can make it happen again anywhere.
//!
//! Layout and compatibility rules: docs/pack-format.md.

pub mod archive;
pub mod capture;
pub mod closure;
pub mod companions;
pub mod dirpack;
mod error;
pub mod extract;
pub mod frame;
pub mod manifest;
pub mod prefetch;
pub mod replay;
pub mod secrets;
pub mod signature;
pub mod store;
pub mod summary;
pub mod tree;

pub use archive::{read_pack, read_pack_checked, write_pack, BlobSource, Pack};
pub use error::PackError;
pub use extract::Limits;
pub use manifest::{Manifest, PACK_FORMAT};
pub use signature::Signature;
pub use store::Store;

#[cfg(test)]
mod tests;
