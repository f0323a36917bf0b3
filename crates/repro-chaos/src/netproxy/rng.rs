//! Counter-based random draws: every draw is a pure function of its key and its index.
//!
//! A stream key is derived from (seed, client, connection index of that client, direction, rule id); draw `k`
//! of chunk `i` is `splitmix64(key, i, k)`. No generator state is carried between chunks, so a decision for
//! chunk `i` does not depend on how many draws earlier chunks or other rules made.

use super::{Direction, RuleId};

pub(crate) use repro_detcore::splitmix64;

/// Folds `v` into the hash `h`.
fn mix(h: u64, v: u64) -> u64 {
    splitmix64(h ^ splitmix64(v))
}

use crate::flow::fnv1a;

/// The key of one rule's stream on one direction of one connection.
pub(crate) fn stream_key(seed: u64, client: &str, conn: u64, direction: Direction, rule: RuleId) -> u64 {
    let dir = match direction {
        Direction::Upstream => 1,
        Direction::Downstream => 2,
        Direction::Both => 3,
    };
    [fnv1a(client), conn, dir, rule.0].into_iter().fold(splitmix64(seed), mix)
}

/// Draw `k` of chunk `chunk` in the stream `key`.
pub(crate) fn draw(key: u64, chunk: u64, k: u64) -> u64 {
    mix(mix(key, chunk), k)
}

/// A uniform value in `[0, 1)` from 53 bits of `x`.
pub(crate) fn unit(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_by_every_component() {
        let base = stream_key(1, "a", 0, Direction::Upstream, RuleId(1));
        assert_eq!(base, stream_key(1, "a", 0, Direction::Upstream, RuleId(1)));
        for other in [
            stream_key(2, "a", 0, Direction::Upstream, RuleId(1)),
            stream_key(1, "b", 0, Direction::Upstream, RuleId(1)),
            stream_key(1, "a", 1, Direction::Upstream, RuleId(1)),
            stream_key(1, "a", 0, Direction::Downstream, RuleId(1)),
            stream_key(1, "a", 0, Direction::Upstream, RuleId(2)),
        ] {
            assert_ne!(base, other);
        }
    }

    #[test]
    fn unit_is_in_range_and_spread() {
        let key = stream_key(7, "c", 0, Direction::Upstream, RuleId(1));
        let values: Vec<f64> = (0..10_000).map(|i| unit(draw(key, i, 0))).collect();
        assert!(values.iter().all(|v| (0.0..1.0).contains(v)));
        let below_half = values.iter().filter(|v| **v < 0.5).count();
        assert!((4_500..5_500).contains(&below_half), "{below_half}");
    }
}
