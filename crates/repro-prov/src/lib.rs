//! Provenance: what a run actually used, as an environment with an identity (`repro env`), signed in-toto
//! attestations in DSSE envelopes (`repro attest`, `repro key gen`) and the differences between two environments (`repro drift`). See docs/provenance.md.
//!
//! The documents types are repro-model's (`repro_model::provenance`); this crate derives, writes, signs and
//! checks them. Everything it reads may come from someone else and is parsed within limits.

pub mod attest;
pub mod drift;
pub mod env;
pub mod error;
pub mod identity;
pub mod open;
pub mod resolve;
pub mod sbom;

pub use error::ProvError;
