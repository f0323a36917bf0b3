//! The order in which the supervisor serves directory entries.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The order in which directory entries are served: by name (the default), reversed, or shuffled by a seed
/// (`repro hunt` varies it to find code that depends on readdir order). Written as `sorted`, `reversed` or
/// `shuffled:SEED` in run records, packs and on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DirOrder {
    #[default]
    Sorted,
    Reversed,
    Shuffled(u64),
}

/// What a directory order must look like.
pub const DIR_ORDER_EXPECTED: &str = "sorted, reversed or shuffled:SEED";

impl DirOrder {
    /// Parses `sorted`, `reversed` or `shuffled:SEED`.
    pub fn parse(s: &str) -> Option<DirOrder> {
        match s {
            "sorted" => Some(DirOrder::Sorted),
            "reversed" => Some(DirOrder::Reversed),
            _ => s.strip_prefix("shuffled:").and_then(|n| n.parse().ok()).map(DirOrder::Shuffled),
        }
    }
}

impl std::fmt::Display for DirOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DirOrder::Sorted => f.write_str("sorted"),
            DirOrder::Reversed => f.write_str("reversed"),
            DirOrder::Shuffled(seed) => write!(f, "shuffled:{seed}"),
        }
    }
}

/// A string that is not a directory order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{given:?} is not a directory order, expected {DIR_ORDER_EXPECTED}")]
pub struct BadDirOrder {
    pub given: String,
}

impl std::str::FromStr for DirOrder {
    type Err = BadDirOrder;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DirOrder::parse(s).ok_or_else(|| BadDirOrder { given: s.to_string() })
    }
}

impl Serialize for DirOrder {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DirOrder {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips() {
        for o in [DirOrder::Sorted, DirOrder::Reversed, DirOrder::Shuffled(0), DirOrder::Shuffled(u64::MAX)] {
            assert_eq!(o.to_string().parse::<DirOrder>(), Ok(o));
            let json = serde_json::to_string(&o).unwrap();
            assert_eq!(serde_json::from_str::<DirOrder>(&json).unwrap(), o);
        }
        assert_eq!(serde_json::to_string(&DirOrder::Shuffled(7)).unwrap(), "\"shuffled:7\"");
    }

    #[test]
    fn bad_orders_are_refused_with_what_was_expected() {
        for bad in ["", "Sorted", "shuffled:", "shuffled:-1", "shuffled:x", "random"] {
            let e = bad.parse::<DirOrder>().unwrap_err();
            assert!(e.to_string().contains("expected sorted, reversed or shuffled:SEED"), "{e}");
        }
        assert!(serde_json::from_str::<DirOrder>("\"upside-down\"").is_err());
    }
}
