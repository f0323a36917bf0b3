//! Per-chunk decisions: what the rules do to one chunk of one direction of one connection.
//!
//! The decisions of chunk `i` under rule `r` are a pure function of (seed, client, connection index, direction,
//! rule id, `i`) plus, for effects with a correlation, the previous value of that rule on that direction (which
//! starts at 0 on the first chunk the rule sees). Effects that do not decide per chunk (bandwidth, blackhole,
//! reset) are applied by the writer at delivery time and draw nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use super::rng::{draw, stream_key, unit};
use super::{Direction, Effect, RuleId};

/// What happens to one chunk.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Outcome {
    /// Total extra delay before the chunk may be delivered (latency + retransmission timeouts + reorder slot).
    pub delay: Duration,
    pub lost: bool,
    pub duplicated: bool,
    pub reordered: bool,
    /// Bit index (0 = lowest bit of the first byte) flipped in the chunk, if any; with two corrupt rules firing
    /// on one chunk, the last one.
    pub corrupt_bit: Option<u64>,
    /// How many bits were flipped (one per corrupt rule that fired).
    pub corrupt_count: u32,
}

#[derive(Debug, Clone)]
struct RuleState {
    key: u64,
    /// The previous correlated value (jitter in [-1, 1], or a uniform in [0, 1) for percent draws).
    prev: f64,
    consecutive_losses: u32,
}

/// Decisions for one direction of one connection.
#[derive(Debug)]
pub(crate) struct Decider {
    seed: u64,
    client: String,
    conn: u64,
    direction: Direction,
    rto: Duration,
    rto_max: Duration,
    states: BTreeMap<RuleId, RuleState>,
}

fn correlated(corr: f64, prev: f64, fresh: f64) -> f64 {
    corr * prev + (1.0 - corr) * fresh
}

/// The rule fires when `u * 100 < percent` (so 0 never fires and 100 always does).
fn fires(u: f64, percent: f64) -> bool {
    u * 100.0 < percent
}

impl Decider {
    pub(crate) fn new(
        seed: u64,
        client: &str,
        conn: u64,
        direction: Direction,
        rto: Duration,
        rto_max: Duration,
    ) -> Decider {
        Decider { seed, client: client.to_string(), conn, direction, rto, rto_max, states: BTreeMap::new() }
    }

    /// Decides chunk number `chunk` (0-based per direction) under `rules` (those that apply to this client and
    /// direction, in id order) and flips the chosen bits of `data` in place.
    pub(crate) fn decide(&mut self, chunk: u64, data: &mut [u8], rules: &[(RuleId, Effect)]) -> Outcome {
        let mut out = Outcome::default();
        let mut latency = Duration::ZERO;
        let mut extra = Duration::ZERO;
        for (id, effect) in rules {
            let (seed, client, conn, direction) = (self.seed, &self.client, self.conn, self.direction);
            let st = self.states.entry(*id).or_insert_with(|| RuleState {
                key: stream_key(seed, client, conn, direction, *id),
                prev: 0.0,
                consecutive_losses: 0,
            });
            let fresh = unit(draw(st.key, chunk, 0));
            match *effect {
                Effect::Latency { delay, jitter, correlation } => {
                    let j = correlated(correlation, st.prev, 2.0 * fresh - 1.0);
                    st.prev = j;
                    let d = delay.as_secs_f64() + jitter.as_secs_f64() * j;
                    latency += Duration::from_secs_f64(d.max(0.0));
                }
                Effect::Loss { percent, correlation } => {
                    let u = correlated(correlation, st.prev, fresh);
                    st.prev = u;
                    if fires(u, percent) {
                        st.consecutive_losses = st.consecutive_losses.saturating_add(1);
                        let doublings = (st.consecutive_losses - 1).min(20);
                        extra += self.rto.saturating_mul(1 << doublings).min(self.rto_max);
                        out.lost = true;
                    } else {
                        st.consecutive_losses = 0;
                    }
                }
                Effect::Duplicate { percent } => out.duplicated |= fires(fresh, percent),
                Effect::Reorder { percent, correlation } => {
                    let u = correlated(correlation, st.prev, fresh);
                    st.prev = u;
                    out.reordered |= fires(u, percent);
                }
                Effect::Corrupt { percent } => {
                    if fires(fresh, percent) && !data.is_empty() {
                        let bit = draw(st.key, chunk, 1) % (data.len() as u64 * 8);
                        data[(bit / 8) as usize] ^= 1 << (bit % 8);
                        out.corrupt_bit = Some(bit);
                        out.corrupt_count += 1;
                    }
                }
                Effect::Bandwidth { .. } | Effect::Blackhole | Effect::Reset => {}
            }
        }
        if out.reordered {
            // Overtaken by the next segment: the chunk waits one more latency slot.
            extra += latency;
        }
        out.delay = latency + extra;
        out
    }
}
