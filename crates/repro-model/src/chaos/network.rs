//! The parameters of the network faults (`latency`, `loss`, `duplicate`, `reorder`, `corrupt`, `bandwidth`,
//! `partition`, `reset`): an operation's `network:` field, and rates (`1mbit`, `100kbps`, `12500`).
//!
//! Which field each fault needs or allows is the loader's (repro-chaos `load::experiment`): the types only
//! say what a value looks like.
use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

use super::at::At;
use super::duration::Dur;

/// What a rate must look like (used in error messages).
pub const RATE_EXPECTED: &str =
    "a rate such as 1mbit, 100kbit (bits/s), 100kbps, 2mbps (bytes/s) or a bare number of bytes/s, above 0";

/// A bandwidth in bytes per second. Written as tc writes rates: `bit`, `kbit`, `mbit`, `gbit` are bits per
/// second, `bps`, `kbps`, `mbps`, `gbps` bytes per second (k = 1000), a bare number is bytes per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rate(pub u64);

/// Parses a rate (see [`Rate`]); the error says what was expected.
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let bad = || format!("expected {RATE_EXPECTED}, got {text:?}");
    let t = text.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| bad())?;
    let (mult, bits) = match unit.trim() {
        "" | "bps" => (1.0, false),
        "kbps" => (1e3, false),
        "mbps" => (1e6, false),
        "gbps" => (1e9, false),
        "bit" => (1.0, true),
        "kbit" => (1e3, true),
        "mbit" => (1e6, true),
        "gbit" => (1e9, true),
        _ => return Err(bad()),
    };
    let bytes = n * mult / if bits { 8.0 } else { 1.0 };
    if !bytes.is_finite() || !(1.0..=1e15).contains(&bytes) {
        return Err(format!("{text:?} is not a rate from 1 byte/s to 1e15 bytes/s ({RATE_EXPECTED})"));
    }
    Ok(Rate(bytes.round() as u64))
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b >= 125_000 && b.is_multiple_of(125_000) {
            write!(f, "{}mbit", b / 125_000)
        } else if b >= 125 && b.is_multiple_of(125) {
            write!(f, "{}kbit", b / 125)
        } else {
            write!(f, "{b}bps")
        }
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Rate;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(RATE_EXPECTED)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Rate, E> {
                parse_rate(&v.to_string()).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Rate, E> {
                parse_rate(&v.to_string()).map_err(E::custom)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Rate, E> {
                parse_rate(&v.to_string()).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Rate, E> {
                parse_rate(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

/// Which traffic a network fault acts on, seen from the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetDirection {
    /// What the clients send to the target (requests).
    ToTarget,
    /// What the target sends back (replies).
    FromTarget,
    #[default]
    Both,
}

/// An operation's `network:` parameters. Percentages and correlations are 0..=100 (netem's convention).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct NetworkSpec {
    /// `latency`: the added delay of every chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<At<Dur>>,
    /// `latency`: ± this much, uniformly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<At<Dur>>,
    /// `latency`, `loss`, `reorder`: how much each draw follows the previous one, 0..=100 (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation: Option<At<f64>>,
    /// `loss`, `duplicate`, `reorder`, `corrupt`: the share of chunks hit, 0..=100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<At<f64>>,
    /// `bandwidth`: the rate each direction of each connection is paced to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<At<Rate>>,
    /// Default `both`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<At<NetDirection>>,
    /// Client identities: workload names (all their instances), instance names (`writer-0`), target names.
    /// Default: every client of the target's proxied ports (the harness's too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients: Option<Vec<At<String>>>,
    /// `partition`: two groups of names (workloads, instances, targets) cut off from each other, instead of
    /// `target` and `clients`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub between: Option<At<Vec<Vec<At<String>>>>>,
    /// `partition` with `between`: only what the first group sends to the second is cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub one_way: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_like_tc() {
        assert_eq!(parse_rate("1mbit"), Ok(Rate(125_000)));
        assert_eq!(parse_rate("100kbit"), Ok(Rate(12_500)));
        assert_eq!(parse_rate("100kbps"), Ok(Rate(100_000)));
        assert_eq!(parse_rate("12500"), Ok(Rate(12_500)));
        assert_eq!(parse_rate("1.5Mbit"), Ok(Rate(187_500)));
        for bad in ["", "fast", "0", "-1kbit", "1 parsec", "4bit"] {
            let e = parse_rate(bad).unwrap_err();
            assert!(e.contains("rate"), "{bad}: {e}");
        }
        assert_eq!(Rate(125_000).to_string(), "1mbit");
        assert_eq!(Rate(12_500).to_string(), "100kbit");
        assert_eq!(Rate(7).to_string(), "7bps");
    }
}
