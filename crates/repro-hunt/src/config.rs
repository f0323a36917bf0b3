//! Configurations: the inputs a hunt varies, and how each becomes `repro run` options.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::HuntError;

/// An input the hunt can vary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dimension {
    Seed,
    Epoch,
    DirOrder,
    Env,
    Cpus,
    Hostname,
    ClockStep,
    /// The scheduler's policy and seed: the interleaving of the guest's threads and processes.
    Schedule,
}

impl Dimension {
    pub const ALL: [Dimension; 8] = [
        Dimension::Seed,
        Dimension::Epoch,
        Dimension::DirOrder,
        Dimension::Env,
        Dimension::Cpus,
        Dimension::Hostname,
        Dimension::ClockStep,
        Dimension::Schedule,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Dimension::Seed => "seed",
            Dimension::Epoch => "epoch",
            Dimension::DirOrder => "dir-order",
            Dimension::Env => "env",
            Dimension::Cpus => "cpus",
            Dimension::Hostname => "hostname",
            Dimension::ClockStep => "clock-step",
            Dimension::Schedule => "schedule",
        }
    }

    /// Parses `--vary seed,epoch,...` (`all` for every dimension).
    pub fn parse_list(value: &str) -> Result<Vec<Dimension>, HuntError> {
        let mut out = Vec::new();
        for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part == "all" {
                out.extend(Dimension::ALL);
                continue;
            }
            let d = Dimension::ALL.iter().copied().find(|d| d.name() == part).ok_or_else(|| {
                HuntError::usage(
                    format!("--vary '{value}'"),
                    format!(
                        "unknown dimension '{part}': expected a comma-separated list of {} or all",
                        Dimension::ALL.map(|d| d.name()).join(", ")
                    ),
                )
            })?;
            out.push(d);
        }
        if out.is_empty() {
            return Err(HuntError::usage(format!("--vary '{value}'"), "expected at least one dimension"));
        }
        out.sort();
        out.dedup();
        Ok(out)
    }
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

pub use repro_model::{DirOrder, SchedPoints, SchedPolicy, SchedSettings};

/// A directory order in hunt's JSON reports as they have always been written: `"sorted"`, `"reversed"`,
/// `{"shuffled": SEED}` (run records and packs write `shuffled:SEED`).
fn serialize_dir_order<S: serde::Serializer>(o: &DirOrder, s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    #[serde(rename_all = "kebab-case")]
    enum Reported {
        Sorted,
        Reversed,
        Shuffled(u64),
    }
    let r = match *o {
        DirOrder::Sorted => Reported::Sorted,
        DirOrder::Reversed => Reported::Reversed,
        DirOrder::Shuffled(seed) => Reported::Shuffled(seed),
    };
    r.serialize(s)
}

/// One configuration of the inputs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Config {
    pub seed: u64,
    pub epoch: i64,
    #[serde(serialize_with = "serialize_dir_order")]
    pub dir_order: DirOrder,
    /// Variables set on top of the sandbox's fixed environment (reported with secret values as markers).
    #[serde(serialize_with = "serialize_env_redacted")]
    pub env: Vec<(String, String)>,
    pub cpus: u32,
    pub hostname: String,
    pub clock_step_ns: u64,
    /// The scheduler's policy and seed.
    pub sched: SchedSettings,
}

fn serialize_env_redacted<S: serde::Serializer>(env: &[(String, String)], s: S) -> Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&repro_model::secrets::redact_pairs(env), s)
}

impl Config {
    /// The baseline: what `repro run` does by default, at `epoch`.
    pub fn baseline(epoch: i64) -> Config {
        Config {
            seed: 0,
            epoch,
            dir_order: DirOrder::Sorted,
            env: Vec::new(),
            cpus: 1,
            hostname: repro_model::settings::HOSTNAME.into(),
            clock_step_ns: repro_model::settings::DEFAULT_CLOCK_STEP_NS,
            sched: SchedSettings::default(),
        }
    }

    /// The `repro run` options for this configuration.
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec![
            "--seed".into(),
            self.seed.to_string(),
            "--epoch".into(),
            self.epoch.to_string(),
            "--cpus".into(),
            self.cpus.to_string(),
            "--clock-step-ns".into(),
            self.clock_step_ns.to_string(),
        ];
        if self.dir_order != DirOrder::Sorted {
            a.push("--dir-order".into());
            a.push(self.dir_order.to_string());
        }
        if self.hostname != "repro" {
            a.push("--hostname".into());
            a.push(self.hostname.clone());
        }
        if self.sched != SchedSettings::default() {
            a.push("--sched".into());
            a.push(self.sched.policy.to_string());
            a.push("--sched-seed".into());
            a.push(self.sched.seed.to_string());
            if !self.sched.points.is_default() {
                a.push("--sched-points".into());
                a.push(self.sched.points.to_string());
            }
        }
        for (k, v) in &self.env {
            a.push("--env".into());
            a.push(format!("{k}={v}"));
        }
        a
    }

    /// [`Config::to_args`] as shown to people: the values of secret variables as markers (the runs themselves
    /// get the real values).
    pub fn display_args(&self) -> Vec<String> {
        let shown = Config { env: repro_model::secrets::redact_pairs(&self.env), ..self.clone() };
        shown.to_args()
    }

    /// The value of one dimension, as shown in tables (secret values as markers).
    pub fn value(&self, d: Dimension) -> String {
        match d {
            Dimension::Seed => self.seed.to_string(),
            Dimension::Epoch => rfc3339(self.epoch),
            Dimension::DirOrder => self.dir_order.to_string(),
            Dimension::Env => {
                if self.env.is_empty() {
                    "(default)".into()
                } else {
                    repro_model::secrets::redact_pairs(&self.env)
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                }
            }
            Dimension::Cpus => self.cpus.to_string(),
            Dimension::Hostname => self.hostname.clone(),
            Dimension::ClockStep => format!("{}ns", self.clock_step_ns),
            Dimension::Schedule => match self.sched.points {
                SchedPoints::Blocking => format!("{}:{}", self.sched.policy, self.sched.seed),
                points => format!("{}:{}+{points}", self.sched.policy, self.sched.seed),
            },
        }
    }

    /// A one-line description of the configuration's non-default values.
    pub fn describe(&self, dims: &[Dimension]) -> String {
        dims.iter().map(|d| format!("{d}={}", self.value(*d))).collect::<Vec<_>>().join(" ")
    }
}

/// Unix seconds as RFC 3339.
pub fn rfc3339(secs: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| secs.to_string())
}

/// Parses a date: Unix seconds or RFC 3339, or a bare date `2024-02-29` (midnight UTC).
pub fn parse_date(argument: &str, value: &str) -> Result<i64, HuntError> {
    let v = value.trim();
    if let Ok(s) = v.parse::<i64>() {
        return Ok(s);
    }
    let full = if v.len() == 10 { format!("{v}T00:00:00Z") } else { v.to_string() };
    time::OffsetDateTime::parse(&full, &time::format_description::well_known::Rfc3339)
        .map(|t| t.unix_timestamp())
        .map_err(|_| {
            HuntError::usage(
                argument,
                format!("'{value}' is not a date: expected 2024-02-29, RFC 3339 or Unix seconds"),
            )
        })
}

/// Parses `FROM..TO` dates.
pub fn parse_date_range(argument: &str, value: &str) -> Result<(i64, i64), HuntError> {
    let (a, b) = value.split_once("..").ok_or_else(|| {
        HuntError::usage(argument, format!("'{value}': expected FROM..TO, e.g. 2020-01-01..2030-01-01"))
    })?;
    let (a, b) = (parse_date(argument, a)?, parse_date(argument, b)?);
    if a >= b {
        return Err(HuntError::usage(argument, format!("'{value}': FROM must be before TO")));
    }
    Ok((a, b))
}

/// Parses `--seeds`: a count `N` (seeds 0..N) or a range `A..B` (B excluded).
pub fn parse_seeds(value: &str) -> Result<Vec<u64>, HuntError> {
    let bad = || HuntError::usage(format!("--seeds '{value}'"), "expected a count (100) or a range (0..100)");
    let r = match value.split_once("..") {
        Some((a, b)) => a.trim().parse::<u64>().map_err(|_| bad())?..b.trim().parse::<u64>().map_err(|_| bad())?,
        None => 0..value.trim().parse::<u64>().map_err(|_| bad())?,
    };
    if r.is_empty() || r.end - r.start > 1_000_000 {
        return Err(bad());
    }
    Ok(r.collect())
}

/// Parses `--env-variant NAME=V1,V2,...`.
pub fn parse_env_variant(value: &str) -> Result<(String, Vec<String>), HuntError> {
    let (name, values) = value
        .split_once('=')
        .ok_or_else(|| HuntError::usage(format!("--env-variant '{value}'"), "expected NAME=V1,V2,..."))?;
    let valid = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(HuntError::usage(format!("--env-variant '{value}'"), "NAME must be letters, digits and '_'"));
    }
    Ok((name.to_string(), values.split(',').map(String::from).collect()))
}

/// Parses a duration: `90`, `90s`, `5m`, `1h`, `500ms`.
pub fn parse_duration(argument: &str, value: &str) -> Result<Duration, HuntError> {
    let v = value.trim();
    let bad = || HuntError::usage(argument, format!("'{value}' is not a duration: expected 90s, 5m, 1h or 500ms"));
    let (num, unit) = match v.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => (&v[..i], &v[i..]),
        None => (v, "s"),
    };
    let n: f64 = num.parse().map_err(|_| bad())?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(bad()),
    };
    if !secs.is_finite() || secs <= 0.0 || secs > 7.0 * 86400.0 {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The classic edges of calendars and clocks, as Unix seconds: ends of day, month and year, a leap day,
/// DST changes in common zones, the 2038 boundary and the far future.
pub fn epoch_edges() -> Vec<(i64, &'static str)> {
    vec![
        (1_735_689_599, "end of year 2024 (23:59:59Z)"),
        (repro_model::run::DEFAULT_EPOCH, "start of year 2025"),
        (1_709_164_800, "leap day 2024-02-29"),
        (1_709_251_199, "end of February in a leap year"),
        (1_738_367_999, "end of month 2025-01-31 23:59:59Z"),
        (1_738_367_999 - 1, "end of day minus one second"),
        (1_710_054_000, "US DST starts 2024-03-10 (America/New_York 02:00)"),
        (1_711_846_800, "EU DST starts 2024-03-31 (Europe/Berlin 02:00)"),
        (1_730_595_600, "US DST ends 2024-11-03"),
        (2_147_483_647, "2038-01-19T03:14:07Z, the last second of 32-bit time_t"),
        (2_147_483_648, "2038-01-19T03:14:08Z, past 32-bit time_t"),
        (4_102_444_800, "far future 2100-01-01"),
        (946_684_800, "Y2K 2000-01-01"),
    ]
}

/// The schedules a hunt tries: each seed under the seeded random policy, then under PCT, alternating (random
/// choices find shallow races quickly, PCT's priority change points find ordering bugs of small depth with a
/// known probability). Every one decides at reads, writes and signals too (`--sched-points io`): a race between
/// threads that never block needs those points, which the baseline (and a plain `repro run`) does not pay for.
fn schedules(seeds: Option<&[u64]>) -> Vec<SchedSettings> {
    let seeds: Vec<u64> = match seeds {
        Some(s) if !s.is_empty() => s.to_vec(),
        _ => (0..500).collect(),
    };
    let mut out = Vec::with_capacity(seeds.len() * 2);
    for seed in seeds {
        for policy in [SchedPolicy::Random, SchedPolicy::PCT] {
            out.push(SchedSettings { policy, seed, points: SchedPoints::Io });
        }
    }
    out
}

/// The values the hunt tries for each dimension, in order.
#[derive(Debug, Clone)]
pub struct Space {
    pub dims: Vec<Dimension>,
    pub seeds: Vec<u64>,
    pub epochs: Vec<i64>,
    pub dir_orders: Vec<DirOrder>,
    pub envs: Vec<Vec<(String, String)>>,
    pub cpus: Vec<u32>,
    pub hostnames: Vec<String>,
    pub clock_steps: Vec<u64>,
    pub schedules: Vec<SchedSettings>,
}

/// The hunt's own choices (random dates) come from splitmix64.
pub use repro_detcore::SplitMix64 as Rng;

/// What the user asked to vary, with the defaults filled in.
#[derive(Debug, Clone)]
pub struct SpaceOptions {
    pub dims: Vec<Dimension>,
    pub seeds: Option<Vec<u64>>,
    pub epoch_range: Option<(i64, i64)>,
    pub env_variants: Vec<(String, Vec<String>)>,
    /// How many random dates to add to the edges.
    pub random_epochs: usize,
    /// The scheduler seeds tried (`--sched-seeds`; default 0..500), each under the seeded random policy and
    /// under PCT.
    pub sched_seeds: Option<Vec<u64>>,
}

impl Space {
    pub fn new(o: &SpaceOptions, hunt_seed: u64) -> Space {
        let mut rng = Rng::new(hunt_seed ^ 0x5eed);
        let (from, to) = o.epoch_range.unwrap_or((946_684_800, 2_208_988_800));
        let mut epochs: Vec<i64> =
            epoch_edges().into_iter().map(|(e, _)| e).filter(|e| *e >= from && *e <= to).collect();
        for _ in 0..o.random_epochs {
            epochs.push(from + rng.below((to - from) as u64) as i64);
        }
        if epochs.is_empty() {
            // No edge in the range and no random date asked for: the range's start, so that every dimension has
            // at least one value (config() indexes modulo the count).
            epochs.push(from);
        }
        let mut envs: Vec<Vec<(String, String)>> = vec![Vec::new()];
        if o.env_variants.is_empty() {
            for (k, v) in [
                ("TZ", "America/New_York"),
                ("TZ", "Asia/Kolkata"),
                ("TZ", "Pacific/Chatham"),
                ("LC_ALL", "C"),
                ("LANG", "de_DE.UTF-8"),
                ("HOME", "/tmp/home with space"),
                ("USER", "root"),
                ("PATH", "/bin:/usr/bin:/sbin:/usr/sbin:/usr/local/bin"),
            ] {
                envs.push(vec![(k.to_string(), v.to_string())]);
            }
        } else {
            for (k, values) in &o.env_variants {
                for v in values {
                    envs.push(vec![(k.clone(), v.clone())]);
                }
            }
        }
        Space {
            dims: o.dims.clone(),
            seeds: o.seeds.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| (0..1000).collect()),
            epochs,
            dir_orders: vec![
                DirOrder::Sorted,
                DirOrder::Reversed,
                DirOrder::Shuffled(1),
                DirOrder::Shuffled(2),
                DirOrder::Shuffled(3),
            ],
            envs,
            cpus: vec![1, 2, 4, 64],
            hostnames: vec!["repro".into(), "localhost".into(), "ci-runner-7.example.internal".into(), "h".into()],
            clock_steps: vec![1000, 0, 1, 1_000_000],
            schedules: schedules(o.sched_seeds.as_deref()),
        }
    }

    /// The `i`-th configuration: every varied dimension walks its values at its own pace, so the first runs
    /// cover each value of each dimension and later runs mix them; unvaried dimensions keep the baseline.
    pub fn config(&self, base: &Config, i: usize) -> Config {
        let mut c = base.clone();
        for (k, d) in self.dims.iter().enumerate() {
            // Stagger the dimensions so combinations differ between runs.
            let j = i + k * 7;
            match d {
                Dimension::Seed => c.seed = self.seeds[i % self.seeds.len()],
                Dimension::Epoch => c.epoch = self.epochs[j % self.epochs.len()],
                Dimension::DirOrder => c.dir_order = self.dir_orders[j % self.dir_orders.len()],
                Dimension::Env => c.env = self.envs[j % self.envs.len()].clone(),
                Dimension::Cpus => c.cpus = self.cpus[j % self.cpus.len()],
                Dimension::Hostname => c.hostname = self.hostnames[j % self.hostnames.len()].clone(),
                Dimension::ClockStep => c.clock_step_ns = self.clock_steps[j % self.clock_steps.len()],
                Dimension::Schedule => c.sched = self.schedules[j % self.schedules.len()],
            }
        }
        c
    }

    /// How many configurations cover every value of every varied dimension at least once.
    pub fn cover(&self) -> usize {
        self.dims
            .iter()
            .map(|d| match d {
                Dimension::Seed => self.seeds.len(),
                Dimension::Epoch => self.epochs.len(),
                Dimension::DirOrder => self.dir_orders.len(),
                Dimension::Env => self.envs.len(),
                Dimension::Cpus => self.cpus.len(),
                Dimension::Hostname => self.hostnames.len(),
                Dimension::ClockStep => self.clock_steps.len(),
                Dimension::Schedule => self.schedules.len(),
            })
            .max()
            .unwrap_or(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vary_lists() {
        assert_eq!(Dimension::parse_list("seed, epoch").unwrap(), vec![Dimension::Seed, Dimension::Epoch]);
        assert_eq!(Dimension::parse_list("all").unwrap().len(), 8);
        let e = Dimension::parse_list("seed,moon").unwrap_err().to_string();
        assert!(e.starts_with("--vary 'seed,moon': unknown dimension 'moon'"), "{e}");
        assert!(Dimension::parse_list(",").is_err());
    }

    #[test]
    fn seeds_durations_dates() {
        assert_eq!(parse_seeds("3").unwrap(), vec![0, 1, 2]);
        assert_eq!(parse_seeds("5..7").unwrap(), vec![5, 6]);
        assert!(parse_seeds("7..5").is_err());
        assert!(parse_seeds("x").is_err());
        assert_eq!(parse_duration("--time-budget", "90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("--time-budget", "2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("--time-budget", "500ms").unwrap(), Duration::from_millis(500));
        assert!(parse_duration("--time-budget", "soon").is_err());
        assert_eq!(parse_date("--epoch-range", "2024-02-29").unwrap(), 1_709_164_800);
        assert_eq!(
            parse_date_range("--epoch-range", "2024-01-01..2025-01-01").unwrap(),
            (1_704_067_200, 1_735_689_600)
        );
        assert!(parse_date_range("--epoch-range", "2025-01-01..2024-01-01").is_err());
        assert_eq!(
            parse_env_variant("TZ=UTC,Asia/Tokyo").unwrap(),
            ("TZ".into(), vec!["UTC".into(), "Asia/Tokyo".into()])
        );
    }

    #[test]
    fn configs_cover_every_value_and_are_deterministic() {
        let o = SpaceOptions {
            dims: vec![Dimension::Seed, Dimension::Cpus],
            seeds: Some((0..10).collect()),
            epoch_range: None,
            env_variants: vec![],
            random_epochs: 4,
            sched_seeds: None,
        };
        let space = Space::new(&o, 1);
        let base = Config::baseline(0);
        let configs: Vec<Config> = (0..space.cover()).map(|i| space.config(&base, i)).collect();
        assert_eq!(configs.len(), 10);
        let cpus: std::collections::BTreeSet<u32> = configs.iter().map(|c| c.cpus).collect();
        assert_eq!(cpus.into_iter().collect::<Vec<_>>(), vec![1, 2, 4, 64]);
        assert!(configs.iter().all(|c| c.epoch == 0 && c.hostname == "repro"), "unvaried dimensions stay");
        assert_eq!(Space::new(&o, 1).config(&base, 3), configs[3]);
    }

    #[test]
    fn varied_schedules_decide_at_reads_and_writes_and_their_runs_say_so() {
        let o = SpaceOptions {
            dims: vec![Dimension::Schedule],
            seeds: None,
            epoch_range: None,
            env_variants: vec![],
            random_epochs: 0,
            sched_seeds: Some(vec![0, 1]),
        };
        let space = Space::new(&o, 0);
        let pairs: Vec<(SchedPolicy, u64)> = space.schedules.iter().map(|s| (s.policy, s.seed)).collect();
        assert_eq!(
            pairs,
            [(SchedPolicy::Random, 0), (SchedPolicy::PCT, 0), (SchedPolicy::Random, 1), (SchedPolicy::PCT, 1)],
            "random seed 0 with io points is not the baseline: it is tried"
        );
        assert!(space.schedules.iter().all(|s| s.points == SchedPoints::Io), "{:?}", space.schedules);
        let base = Config::baseline(0);
        assert!(!base.to_args().contains(&"--sched-points".to_string()), "the baseline is a plain run");
        let c = space.config(&base, 2);
        let a = c.to_args();
        assert!(a.windows(2).any(|w| w == ["--sched-points", "io"]), "{a:?}");
        assert!(a.windows(2).any(|w| w == ["--sched-seed", "1"]), "{a:?}");
        assert_eq!(c.value(Dimension::Schedule), "random:1+io");
        assert_eq!(base.value(Dimension::Schedule), "random:0");
    }

    #[test]
    fn args_only_name_what_differs_from_the_sandbox_defaults() {
        let mut c = Config::baseline(5);
        assert!(!c.to_args().contains(&"--dir-order".to_string()));
        c.dir_order = DirOrder::Shuffled(3);
        c.env.push(("TZ".into(), "Asia/Kolkata".into()));
        let a = c.to_args();
        assert!(a.windows(2).any(|w| w == ["--dir-order", "shuffled:3"]));
        assert!(a.windows(2).any(|w| w == ["--env", "TZ=Asia/Kolkata"]));
    }

    #[test]
    fn reports_write_directory_orders_as_before() {
        let mut c = Config::baseline(5);
        for (o, json) in [
            (DirOrder::Sorted, serde_json::json!("sorted")),
            (DirOrder::Reversed, serde_json::json!("reversed")),
            (DirOrder::Shuffled(7), serde_json::json!({"shuffled": 7})),
        ] {
            c.dir_order = o;
            assert_eq!(serde_json::to_value(&c).unwrap()["dir_order"], json);
        }
    }

    #[test]
    fn secret_values_are_reported_as_markers_but_runs_get_them() {
        let d = tempfile::tempdir().unwrap();
        std::env::set_var("XDG_CONFIG_HOME", d.path());
        let mut c = Config::baseline(5);
        c.env.push(("API_TOKEN".into(), "hunter2-xyz".into()));
        c.env.push(("TZ".into(), "UTC".into()));
        assert!(c.to_args().iter().any(|a| a == "API_TOKEN=hunter2-xyz"), "the run gets the value");
        let shown = format!(
            "{} {} {}",
            c.display_args().join(" "),
            c.value(Dimension::Env),
            serde_json::to_string(&c).unwrap()
        );
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("API_TOKEN=<redacted:blake3:"), "{shown}");
        assert!(shown.contains("TZ=UTC"), "{shown}");
    }
}
