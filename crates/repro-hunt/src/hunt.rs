//! `repro hunt`: many configurations, in parallel, until the command fails or the budget ends.

use std::collections::BTreeMap;

use repro_pack::signature::Signature;
use serde::Serialize;

use crate::config::{Config, Dimension};
use crate::runner::{Outcome, Verdict};

/// Pass and fail counts for one value of one dimension.
#[derive(Debug, Clone, Serialize)]
pub struct ValueRow {
    pub dimension: Dimension,
    pub value: String,
    pub pass: usize,
    pub fail: usize,
    /// Unenforced or errored runs.
    pub other: usize,
}

/// One distinct failure, by signature.
#[derive(Debug, Clone, Serialize)]
pub struct FailureClass {
    pub signature: Signature,
    pub count: usize,
    /// The first configuration (lowest index) that failed this way.
    pub first: Config,
    pub first_run_dir: std::path::PathBuf,
    /// Every failing configuration of this class, described by the varied dimensions.
    pub configs: Vec<String>,
}

/// The result of a hunt.
#[derive(Debug, Clone, Serialize)]
pub struct HuntReport {
    pub dimensions: Vec<Dimension>,
    pub runs: usize,
    pub passed: usize,
    pub failed: usize,
    pub unenforced: usize,
    pub errors: usize,
    pub elapsed_ms: u64,
    pub table: Vec<ValueRow>,
    pub failures: Vec<FailureClass>,
    /// The pack captured for the first failing configuration (`--capture`).
    pub pack: Option<std::path::PathBuf>,
    /// The baseline's epoch and where it came from (set by the caller).
    pub baseline_epoch: Option<crate::explain::BaselineEpoch>,
    /// SIGINT or SIGTERM stopped the hunt: the runs are those that finished before it.
    pub interrupted: bool,
    /// How many of the runs had a configuration of their own (the others repeated one).
    pub distinct_configs: usize,
}

/// Summarizes outcomes.
pub fn report(dims: &[Dimension], outcomes: &[Outcome], elapsed_ms: u64) -> HuntReport {
    let count = |v: Verdict| outcomes.iter().filter(|o| o.verdict == v).count();
    let mut rows: BTreeMap<(Dimension, String), ValueRow> = BTreeMap::new();
    for o in outcomes {
        for d in dims {
            let value = o.config.value(*d);
            let row = rows.entry((*d, value.clone())).or_insert(ValueRow {
                dimension: *d,
                value,
                pass: 0,
                fail: 0,
                other: 0,
            });
            match o.verdict {
                Verdict::Pass => row.pass += 1,
                Verdict::Fail => row.fail += 1,
                _ => row.other += 1,
            }
        }
    }
    let mut classes: Vec<FailureClass> = Vec::new();
    for o in outcomes.iter().filter(|o| o.verdict == Verdict::Fail) {
        let describe = o.config.describe(dims);
        match classes.iter_mut().find(|c| c.signature == o.signature) {
            Some(c) => {
                c.count += 1;
                c.configs.push(describe);
            }
            None => classes.push(FailureClass {
                signature: o.signature.clone(),
                count: 1,
                first: o.config.clone(),
                first_run_dir: o.run_dir.clone(),
                configs: vec![describe],
            }),
        }
    }
    HuntReport {
        dimensions: dims.to_vec(),
        runs: outcomes.len(),
        passed: count(Verdict::Pass),
        failed: count(Verdict::Fail),
        unenforced: count(Verdict::Unenforced),
        errors: count(Verdict::Error),
        elapsed_ms,
        table: rows.into_values().collect(),
        failures: classes,
        pack: None,
        baseline_epoch: None,
        interrupted: false,
        distinct_configs: outcomes.iter().map(|o| &o.config).collect::<std::collections::HashSet<_>>().len(),
    }
}

/// The report as text.
pub fn render(r: &HuntReport) -> String {
    let mut out = String::new();
    if let Some(e) = &r.baseline_epoch {
        out.push_str(&format!("baseline: {}\n", e.describe()));
    }
    if r.interrupted {
        out.push_str("INTERRUPTED: the runs that finished before the signal\n");
    }
    out.push_str(&format!(
        "{} runs ({} distinct configurations) in {:.1} s: {} passed, {} failed, {} not enforced, {} errors\n",
        r.runs,
        r.distinct_configs,
        r.elapsed_ms as f64 / 1000.0,
        r.passed,
        r.failed,
        r.unenforced,
        r.errors
    ));
    // Only values that saw a failure, or dimensions with few values, are worth a line each.
    let interesting: Vec<&ValueRow> = r
        .table
        .iter()
        .filter(|row| row.fail > 0 || r.table.iter().filter(|x| x.dimension == row.dimension).count() <= 16)
        .collect();
    if !interesting.is_empty() {
        out.push_str("\noutcomes by value\n");
        out.push_str(&format!("  {:<11} {:<40} {:>5} {:>5} {:>5}\n", "DIMENSION", "VALUE", "PASS", "FAIL", "OTHER"));
        for row in interesting {
            out.push_str(&format!(
                "  {:<11} {:<40} {:>5} {:>5} {:>5}\n",
                row.dimension.name(),
                row.value,
                row.pass,
                row.fail,
                row.other
            ));
        }
    }
    if r.failures.is_empty() {
        out.push_str("\nno failure found\n");
    }
    for (i, c) in r.failures.iter().enumerate() {
        out.push_str(&format!(
            "\nfailure {} ({} run{}): {}\n",
            i + 1,
            c.count,
            if c.count == 1 { "" } else { "s" },
            c.signature.summary()
        ));
        out.push_str(&format!("  first: {}\n", c.first.describe(&r.dimensions)));
        out.push_str(&format!("  run directory: {}\n", c.first_run_dir.display()));
        out.push_str(&format!("  reproduce: repro run {} -- ...\n", c.first.display_args().join(" ")));
        for cfg in c.configs.iter().skip(1).take(5) {
            out.push_str(&format!("  also: {cfg}\n"));
        }
        if c.configs.len() > 6 {
            out.push_str(&format!("  ... and {} more\n", c.configs.len() - 6));
        }
    }
    if let Some(p) = &r.pack {
        out.push_str(&format!("\ncaptured: {}\n", p.display()));
    }
    out
}
