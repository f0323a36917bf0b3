//! Escape attempts: mounts (see main.rs for the rules these tests follow).

#[allow(unused_imports)]
use crate::harness::*;
