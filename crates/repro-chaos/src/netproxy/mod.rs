//! A seeded TCP fault proxy: the engine of network faults (latency, loss, duplicate, reorder, corrupt,
//! bandwidth, partition, reset) on a kernel without `sch_netem`.
//!
//! One [`Proxy`] stands in front of one upstream address (a target's port). Each client identity (a workload
//! instance such as `writer-0`, another target such as `replica`, or `harness`) gets its own listening port on
//! 127.0.0.1 ([`Proxy::listener`]); the identity of a connection is the listener it came in on, which is how a
//! rule can partition one instance from one target without network namespaces.
//!
//! Rules ([`Rule`]) are installed with [`Proxy::apply`] and removed with [`Proxy::remove`]; several compose.
//!
//! ## What the effects mean on a TCP stream
//!
//! The proxy sees a byte stream, not packets, so it works on *chunks*: one `read` of at most
//! [`ProxyConfig::chunk_size`] bytes (16 KiB by default). The kernel decides how a stream is split into reads;
//! every decision is then made per chunk:
//! - [`Effect::Latency`]: the chunk is delivered `delay ± jitter` after it was read (jitter correlated like
//!   netem). A chunk is never delivered before an earlier one of the same direction (a stream cannot be
//!   reordered), so a short delay after a long one waits for it.
//! - [`Effect::Loss`]: TCP hides loss. A "lost" chunk is delivered after a retransmission timeout instead
//!   ([`ProxyConfig::rto`], 200 ms, doubling for each consecutive loss on that rule, capped by
//!   [`ProxyConfig::rto_max`]). No byte is ever lost; loss costs latency. The congestion window a real sender
//!   would shrink is not modelled, so throughput is not reduced beyond the added delay.
//! - [`Effect::Duplicate`]: a duplicated segment is discarded by the receiving TCP; the application sees
//!   nothing. The chunk is delivered once, unchanged, and counted in [`DirStats::duplicated`].
//! - [`Effect::Reorder`]: a reordered segment is overtaken by the next one and the receiving TCP waits for it,
//!   so the application sees the chunk late: it waits one more latency slot (its own latency delay, again).
//!   Without a latency rule this has no effect besides the count (netem's reorder likewise needs a delay).
//! - [`Effect::Corrupt`]: one seeded bit of the chunk is flipped: what an application sees when a corrupted
//!   segment passes the TCP checksum (the 16-bit checksum misses some errors; NIC offloads can too).
//! - [`Effect::Bandwidth`]: each direction of each connection is paced to `bytes_per_sec` (no burst credit).
//! - [`Effect::Blackhole`]: a partition. Data in the rule's direction is held, not delivered, while the rule is
//!   active; new connections are accepted, and with an upstream-bound blackhole the proxy does not even connect
//!   to the upstream until it heals (the SYN would not cross). When the rule is removed the held data is
//!   delivered, as TCP retransmission would after a heal. While data is held the proxy keeps reading up to
//!   [`ProxyConfig::max_held_bytes`] per direction; beyond that it stops reading (the sender's window fills
//!   and its writes block, as on a real partition) or, with [`HeldOverflow::Reset`], resets the connection.
//!   A real connection could also time out during a long partition; this one does not.
//! - [`Effect::Reset`]: every current connection of the rule's clients is aborted (RST, `SO_LINGER` 0) when the
//!   rule is applied, and new ones are accepted and reset at once while it is active. The direction is ignored.
//!
//! ## Determinism
//!
//! Every random draw is `splitmix64` of a key derived from (seed, client, connection index of that client,
//! direction, rule id) and the chunk index; see [`Decision`]. What replays exactly: the decisions made for
//! chunk `i` of connection `k` of a client, given the same rule ids and the same chunk at which each rule was
//! first seen (a correlated effect carries its previous value from chunk to chunk of the rule). What does not:
//! how the kernel splits the stream into reads (so which bytes form chunk `i`), the wall-clock timing (when a
//! rule lands relative to the traffic, scheduling delays), and the connection index when one client opens
//! connections concurrently (it is the order of accepts on its listener). Rule ids count from 1 per proxy, so
//! the same sequence of `apply` calls gives the same ids; listener ports are whatever the kernel gives.
//! Sending one request at a time and waiting for its reply makes chunks follow messages.
//!
//! ## When a rule takes effect
//!
//! [`Proxy::apply`] is synchronous: when it returns, every chunk read afterwards is decided under the rule, on
//! every listener the rule names. Chunks already read keep the delay they were given; blackhole and bandwidth
//! are checked at delivery, so they also hold or pace chunks already in flight (a chunk whose write has
//! started completes, a paced one up to its current 1/20 s slice). A reset rule has aborted the matching
//! connections when `apply` returns (their sockets close as their threads end, at once or within the 200 ms
//! socket timeout of a blocked write). [`Proxy::remove`] is synchronous the same way: chunks read afterwards
//! do not see the rule, and held chunks are released.
//!
//! ## Bounds
//!
//! At most [`ProxyConfig::max_connections`] live connections (more are accepted and reset, counted as
//! refused); at most [`ProxyConfig::max_held_bytes`] queued (delayed or held) per direction of a connection,
//! after which the reader waits (so a long delay also bounds throughput, like a TCP window). No I/O error
//! panics: an error on one side aborts that connection (the other side sees a reset), a client hanging up
//! while its data is delayed is fine. [`Proxy::stop`] (also on drop) closes the listeners and every connection
//! and joins every thread.
//!
//! Threads: one per listener (accept), four per connection (a reader and a writer per direction). TCP only.

mod conn;
mod decide;
mod rng;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;

use conn::{ClientCounters, Conn};

/// Errors of the proxy, with the proxy's name and what it was doing.
#[derive(Debug, thiserror::Error)]
pub enum NetProxyError {
    #[error("netproxy {proxy} (upstream {upstream}): cannot bind a listener for client {client:?} on {ip}: {source}")]
    Bind {
        proxy: String,
        upstream: SocketAddr,
        client: String,
        ip: IpAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("netproxy {proxy} (upstream {upstream}): listener for client {client:?}: {what}: {source}")]
    Listener {
        proxy: String,
        upstream: SocketAddr,
        client: String,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("netproxy {proxy} (upstream {upstream}) is stopped")]
    Stopped { proxy: String, upstream: SocketAddr },
    #[error("netproxy rule: {0}")]
    InvalidRule(String),
}

pub type Result<T, E = NetProxyError> = std::result::Result<T, E>;

/// Which way data flows, seen from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Client to target.
    Upstream,
    /// Target to client.
    Downstream,
    Both,
}

impl Direction {
    /// Whether a rule with this direction applies to data flowing `flow` (`Upstream` or `Downstream`).
    pub fn covers(self, flow: Direction) -> bool {
        self == Direction::Both || self == flow
    }
}

/// What a rule does. Percentages are 0..=100, correlations 0..=1 (values outside are clamped by
/// [`Proxy::apply`]; [`Rule::validate`] reports them).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Effect {
    /// Each chunk is delivered `delay ± jitter` late; `next jitter = correlation * prev + (1 - correlation) *
    /// fresh` with fresh uniform in [-1, 1]. Order is preserved.
    Latency {
        #[serde(serialize_with = "ser_dur")]
        delay: Duration,
        #[serde(serialize_with = "ser_dur")]
        jitter: Duration,
        correlation: f64,
    },
    /// A lost chunk is delivered after a retransmission timeout (see the module docs); bytes are never lost.
    Loss { percent: f64, correlation: f64 },
    /// Counted only: the receiving TCP discards duplicates.
    Duplicate { percent: f64 },
    /// The chunk waits one more latency slot (no effect without a latency rule).
    Reorder { percent: f64, correlation: f64 },
    /// One seeded bit of the chunk is flipped.
    Corrupt { percent: f64 },
    /// Pacing per direction per connection.
    Bandwidth { bytes_per_sec: u64 },
    /// Partition: data is held while the rule is active, delivered when it is removed.
    Blackhole,
    /// Current connections are aborted with RST; new ones are reset while active.
    Reset,
}

impl Effect {
    /// Whether the effect makes a decision per chunk (latency, loss, duplicate, reorder, corrupt); the others
    /// act at delivery (bandwidth, blackhole) or on connections (reset).
    pub fn per_chunk(&self) -> bool {
        !matches!(self, Effect::Bandwidth { .. } | Effect::Blackhole | Effect::Reset)
    }
}

/// A fault on some clients' traffic in some direction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rule {
    /// Client identities (listener names) the rule applies to; `None` = all, including later listeners.
    pub clients: Option<Vec<String>>,
    pub direction: Direction,
    pub effect: Effect,
}

impl Rule {
    /// A rule on every client.
    pub fn all(direction: Direction, effect: Effect) -> Rule {
        Rule { clients: None, direction, effect }
    }

    /// A rule on the named clients only.
    pub fn clients<S: Into<String>>(
        clients: impl IntoIterator<Item = S>,
        direction: Direction,
        effect: Effect,
    ) -> Rule {
        Rule { clients: Some(clients.into_iter().map(Into::into).collect()), direction, effect }
    }

    /// Whether the rule applies to `client`'s data flowing `flow`.
    pub fn applies(&self, client: &str, flow: Direction) -> bool {
        self.direction.covers(flow) && self.names(client)
    }

    fn names(&self, client: &str) -> bool {
        self.clients.as_ref().is_none_or(|c| c.iter().any(|n| n == client))
    }

    /// Checks ranges (percent 0..=100, correlation 0..=1, bandwidth > 0, finite numbers).
    pub fn validate(&self) -> Result<()> {
        let percent = |p: f64| {
            if (0.0..=100.0).contains(&p) {
                Ok(())
            } else {
                Err(NetProxyError::InvalidRule(format!("percent {p} is not within 0..=100")))
            }
        };
        let corr = |c: f64| {
            if (0.0..=1.0).contains(&c) {
                Ok(())
            } else {
                Err(NetProxyError::InvalidRule(format!("correlation {c} is not within 0..=1")))
            }
        };
        match self.effect {
            Effect::Latency { correlation, .. } => corr(correlation),
            Effect::Loss { percent: p, correlation } | Effect::Reorder { percent: p, correlation } => {
                percent(p)?;
                corr(correlation)
            }
            Effect::Duplicate { percent: p } | Effect::Corrupt { percent: p } => percent(p),
            Effect::Bandwidth { bytes_per_sec: 0 } => {
                Err(NetProxyError::InvalidRule("bandwidth of 0 bytes/s (use blackhole for a partition)".into()))
            }
            Effect::Bandwidth { .. } | Effect::Blackhole | Effect::Reset => Ok(()),
        }
    }

    /// The rule with out-of-range numbers clamped (NaN becomes 0).
    fn clamped(mut self) -> Rule {
        let clamp = |v: &mut f64, max: f64| *v = if v.is_nan() { 0.0 } else { v.clamp(0.0, max) };
        match &mut self.effect {
            Effect::Latency { correlation, .. } => clamp(correlation, 1.0),
            Effect::Loss { percent, correlation } | Effect::Reorder { percent, correlation } => {
                clamp(percent, 100.0);
                clamp(correlation, 1.0);
            }
            Effect::Duplicate { percent } | Effect::Corrupt { percent } => clamp(percent, 100.0),
            Effect::Bandwidth { bytes_per_sec } => *bytes_per_sec = (*bytes_per_sec).max(1),
            Effect::Blackhole | Effect::Reset => {}
        }
        self
    }
}

/// The id of an applied rule; ids count from 1 per proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct RuleId(pub u64);

impl fmt::Display for RuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rule-{}", self.0)
    }
}

/// An installed rule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActiveRule {
    pub id: RuleId,
    pub rule: Rule,
}

/// What to do when a held (blackholed) direction reaches [`ProxyConfig::max_held_bytes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HeldOverflow {
    /// Stop reading from the sender (its writes block once its socket buffer fills), as on a real partition.
    Backpressure,
    /// Reset the connection.
    Reset,
}

/// Tunables; [`ProxyConfig::default`] is what [`Proxy::start`] uses.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProxyConfig {
    /// Address the listeners bind (port 0). Default 127.0.0.1.
    pub listen_ip: IpAddr,
    /// Largest chunk (one read); decisions are per chunk. Default 16 KiB.
    pub chunk_size: usize,
    /// Live connections per proxy; more are reset at accept. Default 1024.
    pub max_connections: usize,
    /// Bytes queued (delayed or held) per direction of a connection before the reader stops. Default 4 MiB.
    pub max_held_bytes: usize,
    /// Default [`HeldOverflow::Backpressure`].
    pub held_overflow: HeldOverflow,
    /// First retransmission timeout of a lost chunk. Default 200 ms.
    pub rto: Duration,
    /// Cap of the doubling timeout. Default 3.2 s.
    pub rto_max: Duration,
    /// Timeout of the connect to the upstream. Default 5 s.
    pub connect_timeout: Duration,
    /// How many [`Decision`]s to keep until [`Proxy::take_decisions`] (later ones are counted in
    /// [`ProxyStats::decisions_dropped`], not kept). Default 4096.
    pub decision_log: usize,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            listen_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            chunk_size: 16 * 1024,
            max_connections: 1024,
            max_held_bytes: 4 * 1024 * 1024,
            held_overflow: HeldOverflow::Backpressure,
            rto: Duration::from_millis(200),
            rto_max: Duration::from_millis(3200),
            connect_timeout: Duration::from_secs(5),
            decision_log: 4096,
        }
    }
}

/// What the rules decided for one chunk that at least one per-chunk rule ([`Effect::per_chunk`]) applied to,
/// in the order chunks were read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    pub client: String,
    /// Connection index of that client, from 0.
    pub conn: u64,
    /// `Upstream` or `Downstream`.
    pub direction: Direction,
    /// Chunk index in that direction of that connection, from 0.
    pub chunk: u64,
    pub len: usize,
    /// Total delay given to the chunk (latency, retransmission timeouts, reorder slot), before ordering and
    /// pacing. Serialized as `delay_us` (microseconds).
    #[serde(rename = "delay_us", serialize_with = "ser_us")]
    pub delay: Duration,
    pub lost: bool,
    pub duplicated: bool,
    pub reordered: bool,
    /// The bit flipped (index from the chunk's first byte, lowest bit first).
    pub corrupt_bit: Option<u64>,
    /// The per-chunk rules that applied.
    pub rules: Vec<RuleId>,
}

/// Counters of one direction of one client's connections.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DirStats {
    /// Bytes delivered.
    pub bytes: u64,
    /// Chunks delivered.
    pub chunks: u64,
    /// Chunks given a delay > 0 (latency, loss, reorder).
    pub delayed: u64,
    /// Chunks "lost" (delivered after a retransmission timeout).
    pub lost: u64,
    pub corrupted: u64,
    pub duplicated: u64,
    pub reordered: u64,
    /// Chunks that had to wait for a blackhole to be removed.
    pub held: u64,
    /// Bytes of those chunks.
    pub held_bytes: u64,
}

/// Counters of one client identity.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ClientStats {
    /// Its listening port (0 if the client appears in no listener yet).
    pub port: u16,
    /// Connections accepted and forwarded (or held for a partition).
    pub connections: u64,
    /// Connections currently open.
    pub active: u64,
    /// Connections accepted and reset at once (over the limit, or a reset rule active).
    pub refused: u64,
    /// Connections aborted with RST by a reset rule or held-bytes overflow.
    pub resets: u64,
    /// Connections whose connect to the upstream waited for an upstream-bound blackhole to be removed.
    pub held_connects: u64,
    /// I/O errors: connections aborted by one on either side (including a failed connect to the upstream),
    /// and failed accepts.
    pub errors: u64,
    /// The last one.
    pub last_error: Option<String>,
    /// Client to target.
    pub upstream: DirStats,
    /// Target to client.
    pub downstream: DirStats,
}

/// A snapshot of a proxy's counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProxyStats {
    pub name: String,
    pub upstream: String,
    pub clients: BTreeMap<String, ClientStats>,
    /// Decisions made but not kept in the log (past [`ProxyConfig::decision_log`]).
    pub decisions_dropped: u64,
}

struct ListenerEntry {
    port: u16,
    accept: Option<JoinHandle<()>>,
}

pub(crate) struct Shared {
    name: String,
    upstream: SocketAddr,
    seed: u64,
    config: ProxyConfig,
    stopped: AtomicBool,
    rules: RwLock<BTreeMap<RuleId, Rule>>,
    next_rule: AtomicU64,
    listeners: Mutex<BTreeMap<String, ListenerEntry>>,
    clients: Mutex<BTreeMap<String, Arc<ClientCounters>>>,
    conns: Mutex<Vec<Arc<Conn>>>,
    live: AtomicUsize,
    log: Mutex<Vec<Decision>>,
    log_dropped: AtomicU64,
}

/// A rule's duration as experiments write it (`100ms`, `1m30s`).
fn ser_dur<S: serde::Serializer>(d: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&repro_model::chaos::format_duration(*d))
}

fn ser_us<S: serde::Serializer>(d: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Locks, ignoring poison (a panicking thread leaves counters and queues usable).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// Per-chunk effects of the active rules that apply to `client`'s data flowing `flow`, in id order.
    pub(crate) fn chunk_effects(&self, client: &str, flow: Direction) -> Vec<(RuleId, Effect)> {
        let rules = self.rules.read().unwrap_or_else(|e| e.into_inner());
        rules
            .iter()
            .filter(|(_, r)| r.effect.per_chunk() && r.applies(client, flow))
            .map(|(id, r)| (*id, r.effect.clone()))
            .collect()
    }

    pub(crate) fn blackholed(&self, client: &str, flow: Direction) -> bool {
        let rules = self.rules.read().unwrap_or_else(|e| e.into_inner());
        rules.values().any(|r| r.effect == Effect::Blackhole && r.applies(client, flow))
    }

    /// The lowest bandwidth of the active rules on `client` / `flow`.
    pub(crate) fn bandwidth(&self, client: &str, flow: Direction) -> Option<u64> {
        let rules = self.rules.read().unwrap_or_else(|e| e.into_inner());
        rules
            .values()
            .filter(|r| r.applies(client, flow))
            .filter_map(|r| match r.effect {
                Effect::Bandwidth { bytes_per_sec } => Some(bytes_per_sec),
                _ => None,
            })
            .min()
    }

    pub(crate) fn reset_active(&self, client: &str) -> bool {
        let rules = self.rules.read().unwrap_or_else(|e| e.into_inner());
        rules.values().any(|r| r.effect == Effect::Reset && r.names(client))
    }

    pub(crate) fn record(&self, d: Decision) {
        let mut log = lock(&self.log);
        if log.len() < self.config.decision_log {
            log.push(d);
        } else {
            self.log_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn counters(&self, client: &str) -> Arc<ClientCounters> {
        lock(&self.clients).entry(client.to_string()).or_default().clone()
    }

    /// Wakes every connection's threads (a rule changed, or the proxy stops).
    fn notify_all(&self) {
        for c in lock(&self.conns).iter() {
            c.notify();
        }
    }

    /// Joins and forgets connections whose threads have all ended.
    fn prune(&self) {
        let done: Vec<Arc<Conn>> = {
            let mut conns = lock(&self.conns);
            let (done, live) = std::mem::take(&mut *conns).into_iter().partition(|c| c.finished());
            *conns = live;
            done
        };
        for c in done {
            c.join();
        }
    }
}

/// A running proxy for one upstream; see the module docs.
pub struct Proxy {
    shared: Arc<Shared>,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy").field("name", &self.shared.name).field("upstream", &self.shared.upstream).finish()
    }
}

impl Proxy {
    /// A proxy for `upstream` with the default [`ProxyConfig`]. It listens nowhere until [`Proxy::listener`].
    pub fn start(name: &str, upstream: SocketAddr, seed: u64) -> Result<Proxy> {
        Proxy::start_with(name, upstream, seed, ProxyConfig::default())
    }

    /// A proxy with explicit tunables (`chunk_size` and `max_held_bytes` are raised to at least 1 and
    /// `chunk_size`).
    pub fn start_with(name: &str, upstream: SocketAddr, seed: u64, mut config: ProxyConfig) -> Result<Proxy> {
        config.chunk_size = config.chunk_size.max(1);
        config.max_held_bytes = config.max_held_bytes.max(config.chunk_size);
        Ok(Proxy {
            shared: Arc::new(Shared {
                name: name.to_string(),
                upstream,
                seed,
                config,
                stopped: AtomicBool::new(false),
                rules: RwLock::new(BTreeMap::new()),
                next_rule: AtomicU64::new(1),
                listeners: Mutex::new(BTreeMap::new()),
                clients: Mutex::new(BTreeMap::new()),
                conns: Mutex::new(Vec::new()),
                live: AtomicUsize::new(0),
                log: Mutex::new(Vec::new()),
                log_dropped: AtomicU64::new(0),
            }),
        })
    }

    pub fn name(&self) -> &str {
        &self.shared.name
    }

    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    pub fn seed(&self) -> u64 {
        self.shared.seed
    }

    /// The port dedicated to `client` on [`ProxyConfig::listen_ip`] (127.0.0.1 by default), bound on the first
    /// call, the same port afterwards.
    pub fn listener(&self, client: &str) -> Result<u16> {
        let s = &self.shared;
        let mut listeners = lock(&s.listeners);
        if s.stopped.load(Ordering::SeqCst) {
            return Err(NetProxyError::Stopped { proxy: s.name.clone(), upstream: s.upstream });
        }
        if let Some(l) = listeners.get(client) {
            return Ok(l.port);
        }
        let err = |what: &'static str, source| NetProxyError::Listener {
            proxy: s.name.clone(),
            upstream: s.upstream,
            client: client.to_string(),
            what,
            source,
        };
        let listener = TcpListener::bind((s.config.listen_ip, 0)).map_err(|source| NetProxyError::Bind {
            proxy: s.name.clone(),
            upstream: s.upstream,
            client: client.to_string(),
            ip: s.config.listen_ip,
            source,
        })?;
        let port = listener.local_addr().map_err(|e| err("local_addr", e))?.port();
        listener.set_nonblocking(true).map_err(|e| err("set_nonblocking", e))?;
        let counters = s.counters(client);
        counters.port.store(u64::from(port), Ordering::Relaxed);
        let shared = self.shared.clone();
        let name = client.to_string();
        let accept = std::thread::Builder::new()
            .name(format!("netproxy-accept-{client}"))
            .spawn(move || accept_loop(&shared, &name, &listener, &counters))
            .map_err(|e| err("spawn the accept thread", e))?;
        listeners.insert(client.to_string(), ListenerEntry { port, accept: Some(accept) });
        Ok(port)
    }

    /// Client identities and their ports.
    pub fn listeners(&self) -> BTreeMap<String, u16> {
        lock(&self.shared.listeners).iter().map(|(c, l)| (c.clone(), l.port)).collect()
    }

    /// Installs a rule (numbers clamped to their ranges). When this returns, every chunk read afterwards on
    /// every listener the rule names is decided under it; a reset rule has aborted the matching connections.
    pub fn apply(&self, rule: Rule) -> RuleId {
        let s = &self.shared;
        let rule = rule.clamped();
        let id = RuleId(s.next_rule.fetch_add(1, Ordering::SeqCst));
        let reset = rule.effect == Effect::Reset;
        let names = rule.clone();
        s.rules.write().unwrap_or_else(|e| e.into_inner()).insert(id, rule);
        if reset {
            let conns: Vec<Arc<Conn>> = lock(&s.conns).clone();
            for c in conns.iter().filter(|c| names.names(c.client())) {
                if c.abort(true) {
                    c.counters().resets.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        s.notify_all();
        id
    }

    /// Removes a rule; false if it was not installed. Held data of a removed blackhole is delivered.
    pub fn remove(&self, id: RuleId) -> bool {
        let removed = self.shared.rules.write().unwrap_or_else(|e| e.into_inner()).remove(&id).is_some();
        self.shared.notify_all();
        removed
    }

    /// Removes every rule.
    pub fn clear(&self) {
        self.shared.rules.write().unwrap_or_else(|e| e.into_inner()).clear();
        self.shared.notify_all();
    }

    /// The installed rules, in id order. Rules are per proxy: a rule naming a client applies on that client's
    /// listener (and `clients: None` on every listener, present and future).
    pub fn active_rules(&self) -> Vec<ActiveRule> {
        let rules = self.shared.rules.read().unwrap_or_else(|e| e.into_inner());
        rules.iter().map(|(id, rule)| ActiveRule { id: *id, rule: rule.clone() }).collect()
    }

    /// The installed rules that apply to `client` (in either direction).
    pub fn active_rules_for(&self, client: &str) -> Vec<ActiveRule> {
        self.active_rules().into_iter().filter(|r| r.rule.names(client)).collect()
    }

    /// A snapshot of the counters, per client (every client with a listener appears).
    pub fn stats(&self) -> ProxyStats {
        let s = &self.shared;
        let clients = lock(&s.clients).iter().map(|(c, k)| (c.clone(), k.snapshot())).collect();
        ProxyStats {
            name: s.name.clone(),
            upstream: s.upstream.to_string(),
            clients,
            decisions_dropped: s.log_dropped.load(Ordering::Relaxed),
        }
    }

    /// The decisions kept so far (at most [`ProxyConfig::decision_log`]), in the order chunks were read.
    pub fn decisions(&self) -> Vec<Decision> {
        lock(&self.shared.log).clone()
    }

    /// The decisions kept so far, removed from the log (which then has room for as many again): for a
    /// caller that records them as it goes.
    pub fn take_decisions(&self) -> Vec<Decision> {
        std::mem::take(&mut *lock(&self.shared.log))
    }

    /// Closes the listeners (their ports refuse connections when this returns) and every connection, and
    /// joins every thread. Idempotent; also done on drop.
    pub fn stop(&self) {
        let s = &self.shared;
        let accepts: Vec<JoinHandle<()>> = {
            let mut listeners = lock(&s.listeners);
            s.stopped.store(true, Ordering::SeqCst);
            listeners.values_mut().filter_map(|l| l.accept.take()).collect()
        };
        for h in accepts {
            let _ = h.join();
        }
        let conns: Vec<Arc<Conn>> = std::mem::take(&mut *lock(&s.conns));
        for c in &conns {
            c.abort(false);
        }
        for c in conns {
            c.join();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How long the accept loop waits in poll before looking at the stop flag again.
const ACCEPT_POLL: u16 = 50;

fn accept_loop(shared: &Arc<Shared>, client: &str, listener: &TcpListener, counters: &Arc<ClientCounters>) {
    use nix::poll::{poll, PollFd, PollFlags};
    while !shared.stopped.load(Ordering::SeqCst) {
        let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        if poll(&mut fds, ACCEPT_POLL).is_err() {
            std::thread::sleep(Duration::from_millis(u64::from(ACCEPT_POLL)));
            continue;
        }
        loop {
            let stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and the like: count, back off, keep listening.
                    counters.error(format!("accept: {e}"));
                    std::thread::sleep(Duration::from_millis(u64::from(ACCEPT_POLL)));
                    break;
                }
            };
            if shared.stopped.load(Ordering::SeqCst) {
                return;
            }
            shared.prune();
            if shared.reset_active(client) || shared.live.load(Ordering::SeqCst) >= shared.config.max_connections {
                conn::reset_now(&stream);
                counters.refused.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            conn::spawn(shared, client, stream, counters);
        }
    }
}
