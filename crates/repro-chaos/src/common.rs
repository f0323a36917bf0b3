//! The crate's small shared helpers, a leaf (it imports only leaves: the model, the loaded files' types and
//! `flow::fnv1a`): which candidates an operation hits ([`select`]), `${VAR}` expansion ([`expand`]), the
//! variables every hook sees ([`base_env`], [`base_vars`], [`with_adapter_env`], [`port_var`], [`listen_var`])
//! and the names of the run directory's files that several modules read or write ([`SCHEDULE_FILE`],
//! [`INTERRUPTED_MARKER`]).
use std::collections::BTreeMap;
use std::path::Path;

use crate::flow::fnv1a;
use crate::load::{LoadedAdapter, LoadedExperiment};
use crate::model::{Adapter, Select};

/// The run's fault schedule (see [`crate::model::Schedule`]).
pub const SCHEDULE_FILE: &str = "schedule.json";

/// Name of the marker file of a run that SIGINT or SIGTERM ended (its content: which, and what was undone).
pub const INTERRUPTED_MARKER: &str = "INTERRUPTED";

/// splitmix64: stable across versions, so a seed means the same thing forever.
pub use repro_detcore::SplitMix64 as Rng;

/// Which candidates an operation's run hits: depends only on seed, operation name and run number.
pub fn select(seed: u64, op: &str, run: u32, candidates: &[String], how: &Select) -> Vec<String> {
    let k = match how {
        Select::One => 1,
        Select::All => candidates.len(),
        Select::Count(n) => (*n as usize).min(candidates.len()),
        // Pinned: the named ones that are candidates, in candidate order.
        Select::Names(names) => return candidates.iter().filter(|c| names.contains(c)).cloned().collect(),
    };
    if k >= candidates.len() {
        return candidates.to_vec();
    }
    let mut rng = Rng::new(seed ^ fnv1a(op) ^ u64::from(run).wrapping_mul(0x9E37_79B9));
    let mut idx: Vec<usize> = (0..candidates.len()).collect();
    for i in 0..k {
        let j = i + rng.below((idx.len() - i) as u64) as usize;
        idx.swap(i, j);
    }
    let mut chosen: Vec<usize> = idx[..k].to_vec();
    chosen.sort_unstable();
    chosen.into_iter().map(|i| candidates[i].clone()).collect()
}

/// Expands `${VAR}` from `env`.
pub fn expand(s: &str, env: &BTreeMap<String, String>) -> String {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| regex::Regex::new(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}").expect("static regex"));
    // An unset variable expands to nothing, as in the shell.
    re.replace_all(s, |c: &regex::Captures| env.get(&c[1]).cloned().unwrap_or_default()).into_owned()
}

fn free_port() -> std::io::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// The variables every hook, workload and check sees (for a proxied port, `CHAOS_PORT_<NAME>` is what the
/// harness sees: see [`crate::engine::network`]).
pub fn base_env(
    exp: &LoadedExperiment,
    adapter: &LoadedAdapter,
    run_id: &str,
    run_dir: &Path,
    seed: u64,
    scratch: &Path,
    dirs: (Option<&Path>, Option<&Path>),
) -> std::io::Result<BTreeMap<String, String>> {
    let vars = base_vars(exp, adapter, run_id, run_dir, seed, scratch, dirs)?;
    Ok(with_adapter_env(&adapter.adapter, vars))
}

/// The adapter's `env:`, expanded against `vars` in order, added to them.
pub fn with_adapter_env(adapter: &Adapter, mut vars: BTreeMap<String, String>) -> BTreeMap<String, String> {
    for (k, v) in &adapter.env {
        let expanded = expand(v, &vars);
        vars.insert(k.clone(), expanded);
    }
    vars
}

/// The run's variables before the adapter's `env:`: names, directories, seed, and the picked ports
/// (`CHAOS_PORT_<NAME>`, and `CHAOS_LISTEN_PORT_<NAME>` the same port until [`crate::engine::network::Network::start`]
/// puts a proxy in front of it).
pub fn base_vars(
    exp: &LoadedExperiment,
    adapter: &LoadedAdapter,
    run_id: &str,
    run_dir: &Path,
    seed: u64,
    scratch: &Path,
    dirs: (Option<&Path>, Option<&Path>),
) -> std::io::Result<BTreeMap<String, String>> {
    let mut env = BTreeMap::new();
    let dir_of = |p: &Path| {
        p.parent()
            .map(|d| std::fs::canonicalize(d).unwrap_or_else(|_| d.to_path_buf()))
            // A path without a parent (cannot happen for a loaded file) names no directory.
            .unwrap_or_default()
            .display()
            .to_string()
    };
    env.insert("CHAOS_EXPERIMENT".into(), exp.experiment.id.value.clone());
    let exp_dir = dirs.0.map_or_else(|| dir_of(&exp.path), |d| d.display().to_string());
    env.insert("CHAOS_EXPERIMENT_DIR".into(), exp_dir);
    env.insert("CHAOS_ADAPTER".into(), adapter.adapter.name.clone());
    let adapter_dir = dirs.1.map_or_else(|| dir_of(&adapter.path), |d| d.display().to_string());
    env.insert("CHAOS_ADAPTER_DIR".into(), adapter_dir);
    env.insert("CHAOS_RUN_ID".into(), run_id.to_string());
    env.insert("CHAOS_RUN_DIR".into(), run_dir.display().to_string());
    env.insert("CHAOS_SEED".into(), seed.to_string());
    env.insert("CHAOS_SCRATCH_DIR".into(), scratch.display().to_string());
    for p in &adapter.adapter.ports {
        let port = free_port()?.to_string();
        env.insert(listen_var(p), port.clone());
        env.insert(port_var(p), port);
    }
    Ok(env)
}

/// `CHAOS_PORT_<NAME>`.
pub fn port_var(port: &str) -> String {
    format!("CHAOS_PORT_{}", port.to_ascii_uppercase())
}

/// `CHAOS_LISTEN_PORT_<NAME>`.
pub fn listen_var(port: &str) -> String {
    format!("CHAOS_LISTEN_PORT_{}", port.to_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_is_a_function_of_seed_op_and_run() {
        let c: Vec<String> = (0..10).map(|i| format!("w-{i}")).collect();
        let a = select(42, "kill-one", 1, &c, &Select::One);
        assert_eq!(a, select(42, "kill-one", 1, &c, &Select::One));
        assert_eq!(a.len(), 1);
        let picks: std::collections::BTreeSet<Vec<String>> =
            (0..50).map(|s| select(s, "kill-one", 1, &c, &Select::One)).collect();
        assert!(picks.len() > 3, "different seeds pick different instances");
        assert_eq!(select(1, "x", 1, &c, &Select::All), c);
        let three = select(7, "x", 2, &c, &Select::Count(3));
        assert_eq!(three.len(), 3);
        assert_eq!(select(7, "x", 1, &c, &Select::Count(30)).len(), 10);
        let pinned = Select::Names(vec!["w-7".into(), "w-2".into(), "gone".into()]);
        assert_eq!(select(1, "x", 1, &c, &pinned), ["w-2", "w-7"], "the named candidates, in candidate order");
    }

    #[test]
    fn expands_variables() {
        let mut env = BTreeMap::new();
        env.insert("P".to_string(), "6390".to_string());
        assert_eq!(expand("http://127.0.0.1:${P}/m${NOPE}", &env), "http://127.0.0.1:6390/m");
    }

    proptest::proptest! {
        #[test]
        fn selection_is_a_deterministic_ordered_subset(seed: u64, run: u32, n in 0usize..40, k in 0u32..50) {
            let c: Vec<String> = (0..n).map(|i| format!("c-{i:02}")).collect();
            let how = Select::Count(k);
            let a = select(seed, "op", run, &c, &how);
            proptest::prop_assert_eq!(&a, &select(seed, "op", run, &c, &how));
            proptest::prop_assert_eq!(a.len(), (k as usize).min(n));
            proptest::prop_assert!(a.windows(2).all(|w| w[0] < w[1]), "in candidate order, no repeats");
            proptest::prop_assert!(a.iter().all(|x| c.contains(x)));
        }
    }
}
