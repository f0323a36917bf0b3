//! Network faults at run time: a [`Proxy`] (see [`crate::netproxy`]) in front of every port a target serves
//! through the proxy (`proxy:` in the adapter), what each identity sees as `CHAOS_PORT_<NAME>`, the faults
//! (`latency`, `loss`, `duplicate`, `reorder`, `corrupt`, `bandwidth`, `partition`, `reset`) as proxy rules,
//! their verification and undo, and the proxies' records (`RUN/system/netproxy/<target>-<port>.json`).
//!
//! Identities: a workload instance is `<workload>-<i>`, another target is its name, everything else (the
//! experiment's and the adapter's checks, observers, preflight, the hooks of adapter operations) is
//! [`HARNESS`]. The target that owns a proxied port sees the listen port itself (its health check must see the
//! real server). The proxies live in the harness process: nothing of them outlives it.
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use repro_model::timeline::Event;
use serde_json::{json, Value};

use crate::common::{listen_var, port_var};
use crate::engine::{Ctx, UndoAction};
use crate::error::{ChaosError, Result};
use crate::flow::{fnv1a, Stop};
use crate::fsutil::{mkdirs, write_json_atomic};
use crate::model::*;
use crate::netproxy::{ClientStats, DirStats, Direction, Effect, Proxy, Rule, RuleId};

/// The client identity of everything that is neither an instance nor another target.
pub const HARNESS: &str = "harness";

/// One proxied port of a target.
pub struct ProxiedPort {
    pub target: String,
    /// The adapter's port name.
    pub port: String,
    /// The port the server binds (`CHAOS_LISTEN_PORT_<NAME>`), the proxy's upstream.
    pub listen: u16,
    pub proxy: Proxy,
}

impl ProxiedPort {
    /// `<target>:<port>`, as effects and rules name it.
    pub fn key(&self) -> String {
        format!("{}:{}", self.target, self.port)
    }
    /// The file name of its record.
    pub fn file(&self) -> String {
        format!("{}-{}.json", self.target, self.port)
    }
}

/// The proxies of a run.
#[derive(Default)]
pub struct Network {
    pub ports: Vec<ProxiedPort>,
}

/// Whose view of the ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity<'a> {
    Harness,
    Instance(&'a str),
    Target(&'a str),
}

/// The seed of the proxy of `target`'s port `port`: the run's seed mixed with both names.
pub fn proxy_seed(seed: u64, target: &str, port: &str) -> u64 {
    seed ^ fnv1a(&format!("netproxy/{target}/{port}")).rotate_left(13)
}

impl Network {
    /// Starts a proxy for every proxied port. `env` holds the picked ports (`CHAOS_PORT_<NAME>`): for a
    /// proxied port that one becomes the listen port (`CHAOS_LISTEN_PORT_<NAME>`) and `CHAOS_PORT_<NAME>`
    /// the harness's listener. Every other target gets its listener now (their hooks see it from the start).
    pub fn start(adapter: &Adapter, seed: u64, env: &mut BTreeMap<String, String>) -> Result<Network> {
        let mut net = Network::default();
        for t in &adapter.targets {
            for p in &t.proxy {
                let listen: u16 = env.get(&port_var(p)).and_then(|v| v.parse().ok()).ok_or_else(|| {
                    ChaosError::Harness(format!("proxied port {} of target {}: no port picked", p.value, t.name.value))
                })?;
                let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, listen));
                let name = format!("{}:{}", t.name.value, p.value);
                let proxy = Proxy::start(&name, upstream, proxy_seed(seed, &t.name.value, p))
                    .map_err(|e| ChaosError::Harness(e.to_string()))?;
                let harness = proxy.listener(HARNESS).map_err(|e| ChaosError::Harness(e.to_string()))?;
                for other in adapter.targets.iter().filter(|o| o.name.value != t.name.value) {
                    proxy.listener(&other.name.value).map_err(|e| ChaosError::Harness(e.to_string()))?;
                }
                env.insert(listen_var(p), listen.to_string());
                env.insert(port_var(p), harness.to_string());
                net.ports.push(ProxiedPort { target: t.name.value.clone(), port: p.value.clone(), listen, proxy });
            }
        }
        Ok(net)
    }

    pub fn is_empty(&self) -> bool {
        self.ports.is_empty()
    }

    /// The variables of `raw` (the run's, before the adapter's `env:`) as `who` sees the proxied ports.
    pub fn vars_for(&self, raw: &BTreeMap<String, String>, who: Identity) -> Result<BTreeMap<String, String>> {
        let mut env = raw.clone();
        for pp in &self.ports {
            let port = match who {
                Identity::Harness => pp.proxy.listener(HARNESS),
                Identity::Target(t) if t == pp.target => Ok(pp.listen),
                Identity::Target(t) | Identity::Instance(t) => pp.proxy.listener(t),
            }
            .map_err(|e| ChaosError::Harness(e.to_string()))?;
            env.insert(port_var(&pp.port), port.to_string());
        }
        Ok(env)
    }

    /// What manifest.json records: per proxied port its listen port and every listener so far.
    pub fn manifest(&self) -> Value {
        let m: serde_json::Map<String, Value> = self
            .ports
            .iter()
            .map(|pp| {
                (
                    pp.key(),
                    json!({
                        "target": pp.target,
                        "port": pp.port,
                        "listen": pp.listen,
                        "upstream": pp.proxy.upstream().to_string(),
                        "seed": pp.proxy.seed(),
                        "listeners": pp.proxy.listeners(),
                        "record": format!("system/netproxy/{}", pp.file()),
                    }),
                )
            })
            .collect();
        Value::Object(m)
    }
}

/// The rules a network fault installed, to remove at its undo: (index of the proxied port, rule id), the
/// clients whose counters the undo reports, and their counters when the rules were applied.
#[derive(Debug, Clone, PartialEq)]
pub struct NetUndo {
    pub rules: Vec<(usize, RuleId)>,
    /// Per rule: the clients it names (`None`: every client).
    pub clients: Vec<Option<Vec<String>>>,
    pub before: Vec<BTreeMap<String, ClientStats>>,
}

fn dir_delta(a: &DirStats, b: &DirStats) -> DirStats {
    DirStats {
        bytes: a.bytes.saturating_sub(b.bytes),
        chunks: a.chunks.saturating_sub(b.chunks),
        delayed: a.delayed.saturating_sub(b.delayed),
        lost: a.lost.saturating_sub(b.lost),
        corrupted: a.corrupted.saturating_sub(b.corrupted),
        duplicated: a.duplicated.saturating_sub(b.duplicated),
        reordered: a.reordered.saturating_sub(b.reordered),
        held: a.held.saturating_sub(b.held),
        held_bytes: a.held_bytes.saturating_sub(b.held_bytes),
    }
}

/// What happened to a client between two snapshots (its port, active connections and last error as now).
pub fn stats_delta(now: &ClientStats, before: &ClientStats) -> ClientStats {
    ClientStats {
        port: now.port,
        connections: now.connections.saturating_sub(before.connections),
        active: now.active,
        refused: now.refused.saturating_sub(before.refused),
        resets: now.resets.saturating_sub(before.resets),
        held_connects: now.held_connects.saturating_sub(before.held_connects),
        errors: now.errors.saturating_sub(before.errors),
        last_error: now.last_error.clone(),
        upstream: dir_delta(&now.upstream, &before.upstream),
        downstream: dir_delta(&now.downstream, &before.downstream),
    }
}

/// One line of a client's counters: "3 connections, 12 chunks held (1200 B), 40 delayed".
pub fn stats_summary(s: &ClientStats) -> String {
    let sum = |f: fn(&DirStats) -> u64| f(&s.upstream) + f(&s.downstream);
    let mut parts = vec![format!("{} connections", s.connections), format!("{} chunks", sum(|d| d.chunks))];
    for (n, what) in [
        (sum(|d| d.delayed), "delayed"),
        (sum(|d| d.lost), "lost (retransmitted late)"),
        (sum(|d| d.duplicated), "duplicated"),
        (sum(|d| d.reordered), "reordered"),
        (sum(|d| d.corrupted), "corrupted"),
    ] {
        if n > 0 {
            parts.push(format!("{n} {what}"));
        }
    }
    let held = sum(|d| d.held);
    if held > 0 {
        parts.push(format!("held {held} chunks ({} B)", sum(|d| d.held_bytes)));
    }
    for (n, what) in
        [(s.held_connects, "connects held"), (s.resets, "reset"), (s.refused, "refused"), (s.errors, "errors")]
    {
        if n > 0 {
            parts.push(format!("{n} {what}"));
        }
    }
    parts.join(", ")
}

fn direction_of(d: NetDirection) -> Direction {
    match d {
        NetDirection::ToTarget => Direction::Upstream,
        NetDirection::FromTarget => Direction::Downstream,
        NetDirection::Both => Direction::Both,
    }
}

fn direction_text(d: Direction) -> &'static str {
    match d {
        Direction::Upstream => "to the target",
        Direction::Downstream => "from the target",
        Direction::Both => "both ways",
    }
}

/// The effect of a network fault with its parameters (validated by the loader).
pub fn effect_of(fault: Fault, n: &NetworkSpec) -> Effect {
    let pct = |v: &Option<At<f64>>| v.as_ref().map_or(0.0, |v| v.value);
    let corr = pct(&n.correlation) / 100.0;
    match fault {
        Fault::Latency => Effect::Latency {
            delay: n.delay.as_ref().map_or(Duration::ZERO, |d| d.value.0),
            jitter: n.jitter.as_ref().map_or(Duration::ZERO, |d| d.value.0),
            correlation: corr,
        },
        Fault::Loss => Effect::Loss { percent: pct(&n.percent), correlation: corr },
        Fault::Duplicate => Effect::Duplicate { percent: pct(&n.percent) },
        Fault::Reorder => Effect::Reorder { percent: pct(&n.percent), correlation: corr },
        Fault::Corrupt => Effect::Corrupt { percent: pct(&n.percent) },
        Fault::Bandwidth => Effect::Bandwidth { bytes_per_sec: n.rate.as_ref().map_or(1, |r| r.value.0) },
        Fault::Reset => Effect::Reset,
        // Partition, and the process faults (never asked for here).
        _ => Effect::Blackhole,
    }
}

/// How an effect reads in `operation.verified`: "latency 100ms±20ms", "loss 10%", "partition".
pub fn effect_text(fault: Fault, e: &Effect) -> String {
    let corr = |c: f64| if c > 0.0 { format!(" (correlation {}%)", c * 100.0) } else { String::new() };
    match e {
        Effect::Latency { delay, jitter, correlation } => {
            let j = if jitter.is_zero() { String::new() } else { format!("±{}", format_duration(*jitter)) };
            format!("latency {}{j}{}", format_duration(*delay), corr(*correlation))
        }
        Effect::Loss { percent, correlation } | Effect::Reorder { percent, correlation } => {
            format!("{} {percent}%{}", fault.name(), corr(*correlation))
        }
        Effect::Duplicate { percent } | Effect::Corrupt { percent } => format!("{} {percent}%", fault.name()),
        Effect::Bandwidth { bytes_per_sec } => format!("bandwidth {} ({bytes_per_sec} bytes/s)", Rate(*bytes_per_sec)),
        Effect::Blackhole => "partition".into(),
        Effect::Reset => "reset".into(),
    }
}

impl Ctx {
    /// The variables `who` sees: the run's, with `CHAOS_PORT_<NAME>` of each proxied port as `who`'s, and the
    /// adapter's `env:` expanded against them.
    pub fn identity_env(&self, who: Identity) -> Result<BTreeMap<String, String>> {
        if self.net.is_empty() {
            return Ok(self.env.clone());
        }
        let vars = self.net.vars_for(&self.env_raw, who)?;
        Ok(crate::common::with_adapter_env(&self.adapter, vars))
    }

    /// The identities a name in `clients` or `between` stands for: a workload's instances, an instance, a
    /// target.
    fn identities(&self, name: &str) -> Vec<String> {
        match self.exp.workloads.iter().find(|w| w.name.value == name) {
            Some(w) => (0..w.instances).map(|i| format!("{name}-{i}")).collect(),
            None => vec![name.to_string()],
        }
    }

    fn identities_of(&self, names: &[At<String>]) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for n in names {
            for id in self.identities(&n.value) {
                if !out.contains(&id) {
                    out.push(id);
                }
            }
        }
        out
    }

    /// The rules of a network fault: (index of the proxied port, rule).
    fn net_rules(&self, op: &Operation, fault: Fault) -> Vec<(usize, Rule)> {
        let default = NetworkSpec::default();
        let n = op.network.as_ref().map_or(&default, |n| &n.value);
        let effect = effect_of(fault, n);
        let ports_of = |t: &str| -> Vec<usize> {
            self.net.ports.iter().enumerate().filter(|(_, p)| p.target == t).map(|(i, _)| i).collect()
        };
        let mut out = Vec::new();
        if let Some(b) = &n.between {
            let one_way = n.one_way.unwrap_or(false);
            let groups: Vec<Vec<String>> = b.value.iter().map(|g| self.identities_of(g)).collect();
            for (g, group) in b.value.iter().enumerate() {
                let others = groups[1 - g].clone();
                // Group 0 -> group 1: the requests to a target of group 1, the replies of a target of group 0.
                let direction = match (one_way, g) {
                    (false, _) => Direction::Both,
                    (true, 0) => Direction::Downstream,
                    (true, _) => Direction::Upstream,
                };
                for member in group {
                    for i in ports_of(&member.value) {
                        out.push((i, Rule::clients(others.clone(), direction, effect.clone())));
                    }
                }
            }
        } else if let Some(t) = &op.target {
            let clients = n.clients.as_ref().map(|c| self.identities_of(c));
            let direction = direction_of(n.direction.as_ref().map_or(NetDirection::Both, |d| d.value));
            for i in ports_of(&t.value) {
                out.push((i, Rule { clients: clients.clone(), direction, effect: effect.clone() }));
            }
        }
        out
    }

    /// A network fault: its rules applied to the proxies, verified active on every listener they cover, held
    /// for the operation's duration (or until the end-of-run undo).
    pub fn run_net_fault(&self, op: &Operation, fault: Fault, run: u32) -> Result<(), Stop> {
        let rules = self.net_rules(op, fault);
        let mut clients: Vec<String> = Vec::new();
        for (_, r) in &rules {
            for c in r.clients.iter().flatten() {
                if !clients.contains(c) {
                    clients.push(c.clone());
                }
            }
        }
        let target = op.target.as_ref().map(|t| t.value.clone());
        self.emit(Event::OperationStarted {
            operation: op.name.value.clone(),
            uses: op.uses.value.clone(),
            run,
            target: target.clone(),
            scope: "network".into(),
            instances: clients.clone(),
            ids: None,
            containers: None,
        });
        if rules.is_empty() {
            return self.fail(&format!(
                "{}: the {} did not take effect: no proxied port to act on",
                op.name.value, op.uses.value
            ));
        }
        let mut undo = NetUndo { rules: vec![], clients: vec![], before: vec![] };
        for (i, rule) in &rules {
            let pp = &self.net.ports[*i];
            if let Err(e) = rule.validate() {
                return self.fail(&format!("{}: {e}", op.name.value));
            }
            // Every listener the rule names exists before it is applied (an instance not started yet too).
            for c in rule.clients.iter().flatten() {
                if let Err(e) = pp.proxy.listener(c) {
                    return self.fail(&format!("{}: {e}", op.name.value));
                }
            }
            undo.before.push(pp.proxy.stats().clients);
            let id = pp.proxy.apply(rule.clone());
            undo.rules.push((*i, id));
            undo.clients.push(rule.clients.clone());
        }
        let undo_id = self.undo.push(&op.name.value, &op.uses.value, run, UndoAction::NetRules(undo.clone()));
        // Verified: every rule is active on every listener it covers.
        let mut effects = Vec::new();
        let mut ids = Vec::new();
        for ((i, id), (_, rule)) in undo.rules.iter().zip(&rules) {
            let pp = &self.net.ports[*i];
            let covered: Vec<String> =
                rule.clients.clone().unwrap_or_else(|| pp.proxy.listeners().keys().cloned().collect());
            for c in &covered {
                if !pp.proxy.active_rules_for(c).iter().any(|r| r.id == *id) {
                    return self.fail(&format!(
                        "{}: the {} did not take effect: {id} is not active on {} for {c}",
                        op.name.value,
                        op.uses.value,
                        pp.key()
                    ));
                }
            }
            let who = match &rule.clients {
                Some(c) => c.join(", "),
                None => format!("every client ({})", covered.join(", ")),
            };
            let dir = if rule.effect == Effect::Reset {
                String::new()
            } else {
                format!(", {}", direction_text(rule.direction))
            };
            effects.push(format!("{} on {} for {who}{dir}", effect_text(fault, &rule.effect), pp.key()));
            ids.push(format!("{}/{id}", pp.key()));
        }
        self.emit(Event::OperationVerified {
            operation: op.name.value.clone(),
            run,
            effect: effects.join("; "),
            api: Some("netproxy".into()),
            instances: Some(clients),
            output: None,
            rules: Some(ids),
        });
        if let Some(d) = op.duration {
            let completed = self.sleep(d.0);
            if let Some(u) = self.undo.take(undo_id) {
                self.run_undo(u, false);
            }
            if !completed {
                return Err(Stop::Cancelled);
            }
        }
        Ok(())
    }

    /// Removes a network fault's rules and verifies them gone: (ok, detail, the affected clients' counters
    /// while the rules were active).
    pub fn undo_net_rules(&self, operation: &str, u: &NetUndo) -> (bool, String, Value) {
        let mut ok = true;
        let mut removed = Vec::new();
        let mut problems = Vec::new();
        let mut stats = serde_json::Map::new();
        let mut lines = Vec::new();
        for (k, (i, id)) in u.rules.iter().enumerate() {
            let Some(pp) = self.net.ports.get(*i) else { continue };
            pp.proxy.remove(*id);
            if pp.proxy.active_rules().iter().any(|r| r.id == *id) {
                ok = false;
                problems.push(format!("{}/{id} is still active", pp.key()));
            } else {
                removed.push(format!("{}/{id}", pp.key()));
            }
            let now = pp.proxy.stats().clients;
            let empty = BTreeMap::new();
            let before = u.before.get(k).unwrap_or(&empty);
            let names: Vec<String> = match u.clients.get(k).cloned().flatten() {
                Some(c) => c,
                None => now.keys().cloned().collect(),
            };
            let mut per = serde_json::Map::new();
            for c in names {
                let Some(s) = now.get(&c) else { continue };
                let d = stats_delta(s, before.get(&c).unwrap_or(&ClientStats::default()));
                lines.push(format!("{} {c}: {}", pp.key(), stats_summary(&d)));
                per.insert(c, serde_json::to_value(&d).unwrap_or(Value::Null));
            }
            let key = pp.key();
            match stats.get_mut(&key) {
                Some(Value::Object(m)) => m.extend(per),
                _ => {
                    stats.insert(key, Value::Object(per));
                }
            }
        }
        if !ok {
            self.harness_error(&format!("{operation}: the undo did not take effect: {}", problems.join(", ")));
        }
        let mut detail = if ok {
            format!("removed {}", removed.join(", "))
        } else {
            format!("not removed: {}", problems.join(", "))
        };
        if !lines.is_empty() {
            detail.push_str(&format!("; while active: {}", lines.join("; ")));
        }
        (ok, detail, Value::Object(stats))
    }

    /// Writes each proxy's counters, decisions and listeners to `RUN/system/netproxy/<target>-<port>.json`,
    /// adds the listeners to manifest.json, and stops the proxies (after the targets stopped).
    pub fn finish_network(&self) -> Result<()> {
        if self.net.is_empty() {
            return Ok(());
        }
        let dir = self.run_dir.join("system/netproxy");
        mkdirs(&dir)?;
        let manifest = self.net.manifest();
        let mut first_err = None;
        for pp in &self.net.ports {
            let stats = pp.proxy.stats();
            let rules = pp.proxy.active_rules();
            let decisions = pp.proxy.take_decisions();
            let v = json!({
                "target": pp.target,
                "port": pp.port,
                "listen": pp.listen,
                "upstream": pp.proxy.upstream().to_string(),
                "seed": pp.proxy.seed(),
                "listeners": pp.proxy.listeners(),
                "active_rules_at_end": rules,
                "stats": stats,
                "decisions": decisions,
            });
            pp.proxy.stop();
            if let Err(e) = write_json_atomic(&dir.join(pp.file()), &v) {
                first_err.get_or_insert(e);
            }
        }
        let path = self.run_dir.join("manifest.json");
        if let Ok(text) = std::fs::read_to_string(&path) {
            if let Ok(mut m) = serde_json::from_str::<Value>(&text) {
                m["netproxy"] = manifest;
                if let Err(e) = write_json_atomic(&path, &m) {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::path::Path;

    const ADAPTER: &str = "apiVersion: repro.dev/chaos/v1\nkind: adapter\nname: a\ndriver: process\nports: [redis, web]\nenv:\n  REDIS_URL: redis://127.0.0.1:${CHAOS_PORT_REDIS}\ntargets:\n  - name: redis\n    proxy: [redis]\n    start: exec sleep 100\n  - name: exporter\n    start: exec sleep 100\n";

    fn vars(ports: &[(&str, u16)]) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        for (p, n) in ports {
            env.insert(port_var(p), n.to_string());
            env.insert(listen_var(p), n.to_string());
        }
        env
    }

    #[test]
    fn each_identity_sees_its_own_listener_and_the_owner_the_listen_port() {
        let a = crate::load::parse_adapter(Path::new("a.yaml"), ADAPTER).unwrap();
        let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let listen = upstream.local_addr().unwrap().port();
        let mut raw = vars(&[("redis", listen), ("web", 4321)]);
        let net = Network::start(&a, 7, &mut raw).unwrap();
        let pp = &net.ports[0];
        assert_eq!((pp.target.as_str(), pp.port.as_str(), pp.listen), ("redis", "redis", listen));
        assert_eq!(pp.proxy.seed(), proxy_seed(7, "redis", "redis"));
        assert_ne!(proxy_seed(7, "redis", "redis"), proxy_seed(7, "redis", "other"));
        let harness = pp.proxy.listener(HARNESS).unwrap();
        assert_eq!(raw["CHAOS_PORT_REDIS"], harness.to_string(), "the run's variables are the harness's view");
        assert_eq!(raw["CHAOS_LISTEN_PORT_REDIS"], listen.to_string());
        // A port that is not proxied: LISTEN = PORT, for everyone.
        assert_eq!((raw["CHAOS_PORT_WEB"].as_str(), raw["CHAOS_LISTEN_PORT_WEB"].as_str()), ("4321", "4321"));
        let port_of = |who| {
            let v = crate::common::with_adapter_env(&a, net.vars_for(&raw, who).unwrap());
            assert_eq!(
                v["REDIS_URL"],
                format!("redis://127.0.0.1:{}", v["CHAOS_PORT_REDIS"]),
                "adapter env per identity"
            );
            assert_eq!(v["CHAOS_LISTEN_PORT_REDIS"], listen.to_string());
            assert_eq!(v["CHAOS_PORT_WEB"], "4321");
            v["CHAOS_PORT_REDIS"].parse::<u16>().unwrap()
        };
        let w0 = port_of(Identity::Instance("writer-0"));
        let w1 = port_of(Identity::Instance("writer-1"));
        let exporter = port_of(Identity::Target("exporter"));
        assert_eq!(port_of(Identity::Harness), harness);
        assert_eq!(port_of(Identity::Target("redis")), listen, "the owner's hooks see the real server");
        let all = [harness, w0, w1, exporter, listen];
        let distinct: std::collections::BTreeSet<u16> = all.into_iter().collect();
        assert_eq!(distinct.len(), 5, "{all:?}");
        assert_eq!(port_of(Identity::Instance("writer-0")), w0, "the same listener on every call");
        let listeners = pp.proxy.listeners();
        assert_eq!(listeners["writer-0"], w0);
        assert_eq!(listeners["exporter"], exporter, "another target's listener exists from the start");
        // Real sockets: a byte sent on writer-1's listener arrives at the upstream, and the answer comes back.
        let mut c = std::net::TcpStream::connect(("127.0.0.1", w1)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(b"x").unwrap();
        upstream.set_nonblocking(false).unwrap();
        let (mut s, _) = upstream.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        s.write_all(b"y").unwrap();
        c.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"y");
        assert_eq!(pp.proxy.stats().clients["writer-1"].connections, 1);
        let m = net.manifest();
        assert_eq!(m["redis:redis"]["listen"], listen);
        assert_eq!(m["redis:redis"]["listeners"]["writer-1"], w1);
        pp.proxy.stop();
    }

    #[test]
    fn effects_and_their_text() {
        let n = NetworkSpec {
            delay: Some(At::new(Dur::millis(100))),
            jitter: Some(At::new(Dur::millis(20))),
            correlation: Some(At::new(25.0)),
            ..Default::default()
        };
        let e = effect_of(Fault::Latency, &n);
        assert_eq!(
            e,
            Effect::Latency { delay: Duration::from_millis(100), jitter: Duration::from_millis(20), correlation: 0.25 }
        );
        assert_eq!(effect_text(Fault::Latency, &e), "latency 100ms±20ms (correlation 25%)");
        let n = NetworkSpec { rate: Some(At::new(Rate(125_000))), ..Default::default() };
        assert_eq!(effect_text(Fault::Bandwidth, &effect_of(Fault::Bandwidth, &n)), "bandwidth 1mbit (125000 bytes/s)");
        assert_eq!(effect_of(Fault::Partition, &NetworkSpec::default()), Effect::Blackhole);
        let s = ClientStats {
            connections: 3,
            upstream: DirStats { chunks: 10, held: 4, held_bytes: 40, ..Default::default() },
            downstream: DirStats { chunks: 2, delayed: 2, ..Default::default() },
            ..Default::default()
        };
        assert_eq!(stats_summary(&s), "3 connections, 12 chunks, 2 delayed, held 4 chunks (40 B)");
        let d = stats_delta(&s, &ClientStats { connections: 1, ..Default::default() });
        assert_eq!(d.connections, 2);
    }
}
