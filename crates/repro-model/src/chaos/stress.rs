//! The parameters of the `stress` fault: an operation's `stress:` field (CPU, memory and IO workers of
//! stress-ng beside a target), and sizes (`256Mi`, `1G`, `4096`).
//!
//! Which values are in bounds, and which fields go together, is the loader's (repro-chaos `load::experiment`):
//! the types only say what a value looks like.
use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

use super::at::At;

/// What a size must look like (used in error messages).
pub const BYTES_EXPECTED: &str =
    "a size such as 256Mi, 1Gi (powers of 1024), 500M, 1G (powers of 1000) or a bare number of bytes";

/// A number of bytes. Written as Kubernetes writes quantities: `Ki`, `Mi`, `Gi`, `Ti` are powers of 1024, `k`,
/// `M`, `G`, `T` powers of 1000 (the letter's case does not matter; a trailing `B` is allowed: `MiB`, `MB`),
/// a bare number is bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Bytes(pub u64);

/// Parses a size (see [`Bytes`]); the error says what was expected.
pub fn parse_bytes(text: &str) -> Result<Bytes, String> {
    let bad = || format!("expected {BYTES_EXPECTED}, got {text:?}");
    let t = text.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| bad())?;
    let unit = unit.trim();
    let unit = unit.strip_suffix('b').unwrap_or(unit);
    let mult: f64 = match unit {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        "t" => 1e12,
        "ki" => 1024.0,
        "mi" => 1024.0 * 1024.0,
        "gi" => 1024.0 * 1024.0 * 1024.0,
        "ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad()),
    };
    let bytes = (n * mult).round();
    if !bytes.is_finite() || !(1.0..=1e18).contains(&bytes) {
        return Err(format!("{text:?} is not a size from 1 byte to 1e18 bytes ({BYTES_EXPECTED})"));
    }
    Ok(Bytes(bytes as u64))
}

impl fmt::Display for Bytes {
    /// The largest binary unit that divides it (`128 MiB`), else bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        for (unit, size) in [("TiB", 1u64 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
            if b >= size && b.is_multiple_of(size) {
                return write!(f, "{} {unit}", b / size);
            }
        }
        write!(f, "{b} bytes")
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Bytes;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(BYTES_EXPECTED)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Bytes, E> {
                parse_bytes(&v.to_string()).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Bytes, E> {
                parse_bytes(&v.to_string()).map_err(E::custom)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Bytes, E> {
                parse_bytes(&v.to_string()).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Bytes, E> {
                parse_bytes(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

/// An operation's `stress:` parameters: how many stress-ng workers of each kind run beside the target.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct StressSpec {
    /// CPU workers (`stress-ng --cpu N`): each spins on one CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<At<u32>>,
    /// The memory the vm workers hold and touch, in all (split evenly among them: `--vm-bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<At<Bytes>>,
    /// IO workers (`stress-ng --io N`): each calls sync(2) in a loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<At<u32>>,
    /// How many vm workers share `memory` (default 1; only with `memory`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_workers: Option<At<u32>>,
}

impl StressSpec {
    pub fn cpu_workers(&self) -> u32 {
        self.cpu.as_ref().map_or(0, |c| c.value)
    }
    pub fn io_workers(&self) -> u32 {
        self.io.as_ref().map_or(0, |c| c.value)
    }
    /// The vm workers: `vm-workers` (default 1) when `memory` is set, else 0.
    pub fn vm(&self) -> u32 {
        match &self.memory {
            Some(_) => self.vm_workers.as_ref().map_or(1, |v| v.value),
            None => 0,
        }
    }
    /// The bytes each vm worker holds (`memory` split evenly), if there are vm workers.
    pub fn bytes_per_vm_worker(&self) -> Option<u64> {
        let m = self.memory.as_ref()?.value.0;
        Some(m / u64::from(self.vm().max(1)))
    }
    /// Every worker stress-ng starts (cpu + io + vm).
    pub fn workers(&self) -> u32 {
        self.cpu_workers() + self.io_workers() + self.vm()
    }
    /// What runs, in words: "2 cpu workers, 1 vm worker of 128 MiB".
    pub fn describe(&self) -> String {
        let plural = |n: u32, what: &str| format!("{n} {what} worker{}", if n == 1 { "" } else { "s" });
        let mut parts = Vec::new();
        if self.cpu_workers() > 0 {
            parts.push(plural(self.cpu_workers(), "cpu"));
        }
        if self.io_workers() > 0 {
            parts.push(plural(self.io_workers(), "io"));
        }
        if let Some(b) = self.bytes_per_vm_worker() {
            parts.push(format!("{} of {}", plural(self.vm(), "vm"), Bytes(b)));
        }
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_like_kubernetes_quantities() {
        assert_eq!(parse_bytes("256Mi"), Ok(Bytes(256 << 20)));
        assert_eq!(parse_bytes("1G"), Ok(Bytes(1_000_000_000)));
        assert_eq!(parse_bytes("1gi"), Ok(Bytes(1 << 30)));
        assert_eq!(parse_bytes("512MiB"), Ok(Bytes(512 << 20)));
        assert_eq!(parse_bytes("4096"), Ok(Bytes(4096)));
        assert_eq!(parse_bytes("1.5Ki"), Ok(Bytes(1536)));
        for bad in ["", "lots", "0", "-1Mi", "1 parsec", "1Pi", "Mi"] {
            let e = parse_bytes(bad).unwrap_err();
            assert!(e.contains("size"), "{bad}: {e}");
        }
        assert_eq!(Bytes(128 << 20).to_string(), "128 MiB");
        assert_eq!(Bytes(1 << 30).to_string(), "1 GiB");
        assert_eq!(Bytes(1000).to_string(), "1000 bytes");
    }

    #[test]
    fn workers_and_words() {
        let s =
            StressSpec { cpu: Some(At::new(2)), memory: Some(At::new(Bytes(128 << 20))), io: None, vm_workers: None };
        assert_eq!((s.vm(), s.workers(), s.bytes_per_vm_worker()), (1, 3, Some(128 << 20)));
        assert_eq!(s.describe(), "2 cpu workers, 1 vm worker of 128 MiB");
        let s = StressSpec { io: Some(At::new(1)), vm_workers: Some(At::new(4)), ..Default::default() };
        assert_eq!((s.vm(), s.workers()), (0, 1), "vm-workers without memory starts none");
        assert_eq!(s.describe(), "1 io worker");
    }
}
