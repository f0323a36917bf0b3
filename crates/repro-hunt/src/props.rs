//! Property tests of the search logic: ddmin (the result still fails and is 1-minimal for a monotone predicate),
//! the configuration space (deterministic for a seed, covering every declared value), explain's attribution
//! (the dimension that flips a synthetic predicate is the one named, the epoch boundary is found to the second),
//! the hunt's summary, and the parsers of `hunt`/`explain`/`shrink` arguments and test-runner output.

use std::collections::BTreeSet;
use std::path::PathBuf;

use proptest::prelude::*;

use crate::config::{
    parse_date, parse_date_range, parse_duration, parse_env_variant, parse_seeds, rfc3339, Config, Dimension, Space,
    SpaceOptions,
};
use crate::explain::{explain, values_for, ExplainOptions};
use crate::hunt::report;
use crate::runner::{Outcome, Verdict};
use crate::shrink::{ddmin, failure_lines, select_tests};

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

/// A monotone predicate in disjunctive normal form: a set fails when it holds every element of some clause.
fn fails_dnf(clauses: &[BTreeSet<u8>], s: &[u8]) -> bool {
    clauses.iter().any(|c| c.iter().all(|x| s.contains(x)))
}

/// Distinct items and one to three non-empty clauses drawn from them.
fn items_and_clauses() -> impl Strategy<Value = (Vec<u8>, Vec<BTreeSet<u8>>)> {
    proptest::collection::btree_set(any::<u8>(), 1..40).prop_flat_map(|set| {
        let items: Vec<u8> = set.into_iter().collect();
        let clause = proptest::sample::subsequence(items.clone(), 1..=items.len().min(5))
            .prop_map(|v| v.into_iter().collect::<BTreeSet<u8>>());
        (Just(items), proptest::collection::vec(clause, 1..4))
    })
}

fn any_dims() -> impl Strategy<Value = Vec<Dimension>> {
    proptest::sample::subsequence(Dimension::ALL.to_vec(), 1..=Dimension::ALL.len())
}

fn space_options() -> impl Strategy<Value = SpaceOptions> {
    (
        any_dims(),
        proptest::option::of(proptest::collection::btree_set(any::<u64>(), 1..30)),
        proptest::option::of((0i64..4_000_000_000, 1i64..1_000_000_000)),
        // Names that are not secret: a secret's marker would need the key under the tester's config directory.
        proptest::collection::vec(
            (
                "[A-Z][A-Z_]{0,6}".prop_filter("not a secret name", |n| !repro_model::secrets::is_secret_name(n)),
                proptest::collection::vec("[a-zA-Z0-9/_.-]{0,8}", 1..4),
            ),
            0..3,
        ),
        // Zero random dates too: a range that holds no edge then still has its start as the one epoch.
        0usize..12,
        // Scheduler seeds: none given, an empty list, only seed 0 (whose random schedule is the baseline), others.
        proptest::option::of(proptest::collection::vec(0u64..20, 0..5)),
    )
        .prop_map(|(dims, seeds, range, env_variants, random_epochs, sched_seeds)| SpaceOptions {
            dims,
            seeds: seeds.map(|s| s.into_iter().collect()),
            epoch_range: range.map(|(from, len)| (from, from + len)),
            env_variants,
            random_epochs,
            sched_seeds,
        })
}

/// The values of `d` a space declares, as `Config::value` shows them.
fn declared(space: &Space, base: &Config, d: Dimension) -> BTreeSet<String> {
    let mut v: BTreeSet<String> = values_for(d, space, base).iter().map(|c| c.value(d)).collect();
    if d == Dimension::Env {
        // values_for skips the first variant (no variable): the baseline's own value.
        v.insert(Config::baseline(0).value(Dimension::Env));
    }
    v
}

/// An outcome for `config` as a synthetic predicate decides it (no process is run).
fn outcome(index: usize, config: Config, fails: bool) -> Outcome {
    let exit_status = if fails { 1 } else { 0 };
    Outcome {
        index,
        config,
        verdict: if fails { Verdict::Fail } else { Verdict::Pass },
        exit_status,
        signature: repro_pack::signature::compute(exit_status, b"", b"", &[]),
        stdout_digest: blake3::hash(if fails { b"fail" } else { b"pass" }).to_hex().to_string(),
        duration_ms: 0,
        run_dir: PathBuf::from("/nonexistent"),
        not_enforced: Vec::new(),
        tasks_created: 0,
    }
}

/// A space with the defaults and every dimension, at a fixed hunt seed.
fn full_space(seeds: u64, random_epochs: usize) -> Space {
    let o = SpaceOptions {
        dims: Dimension::ALL.to_vec(),
        seeds: Some((0..seeds).collect()),
        epoch_range: None,
        env_variants: vec![],
        random_epochs,
        sched_seeds: None,
    };
    Space::new(&o, 7)
}

proptest! {
    #![proptest_config(config(256))]

    /// ddmin on a monotone predicate: the result still fails, is a subsequence of the input, and is 1-minimal
    /// (removing any one element makes it pass).
    #[test]
    fn ddmin_result_fails_and_is_one_minimal((items, clauses) in items_and_clauses()) {
        let mut calls = 0usize;
        let out = ddmin(items.clone(), &mut |s: &[u8]| { calls += 1; fails_dnf(&clauses, s) });
        prop_assert!(fails_dnf(&clauses, &out), "{:?} does not fail", out);
        let mut it = items.iter();
        prop_assert!(out.iter().all(|x| it.any(|y| y == x)), "{:?} is not a subsequence of {:?}", out, items);
        for i in 0..out.len() {
            let mut smaller = out.clone();
            smaller.remove(i);
            prop_assert!(!fails_dnf(&clauses, &smaller), "{:?} still fails without {}", out, out[i]);
        }
        // Quadratic at worst (chunks and complements at every granularity), never a walk over all subsets.
        prop_assert!(calls <= 2 * items.len() * items.len() + 2, "{} calls for {} items", calls, items.len());
    }

    /// With a single clause, the 1-minimal failing set is the clause itself; ddmin is a function of its input.
    #[test]
    fn ddmin_finds_the_one_cause((items, clauses) in items_and_clauses()) {
        let cause = &clauses[..1];
        let out = ddmin(items.clone(), &mut |s: &[u8]| fails_dnf(cause, s));
        prop_assert_eq!(out.iter().copied().collect::<BTreeSet<u8>>(), cause[0].clone());
        prop_assert_eq!(ddmin(items, &mut |s: &[u8]| fails_dnf(cause, s)), out);
    }

    /// A predicate that already fails on nothing shrinks to nothing; an empty input stays empty.
    #[test]
    fn ddmin_of_an_always_failing_predicate_is_empty(items in proptest::collection::vec(any::<u8>(), 0..30)) {
        prop_assert!(ddmin(items, &mut |_: &[u8]| true).is_empty());
        prop_assert!(ddmin(Vec::<u8>::new(), &mut |_: &[u8]| false).is_empty());
    }

    /// The space is a function of (options, hunt seed); its first `cover()` configurations show every declared
    /// value of every varied dimension, keep the baseline in the others, and random dates stay in the range.
    #[test]
    fn configurations_are_deterministic_and_cover_the_space(o in space_options(), hunt_seed in any::<u64>()) {
        let space = Space::new(&o, hunt_seed);
        let again = Space::new(&o, hunt_seed);
        let base = Config::baseline(1_700_000_000);
        let configs: Vec<Config> = (0..space.cover()).map(|i| space.config(&base, i)).collect();
        let configs_again: Vec<Config> = (0..again.cover()).map(|i| again.config(&base, i)).collect();
        prop_assert_eq!(&configs, &configs_again);
        for d in Dimension::ALL {
            let seen: BTreeSet<String> = configs.iter().map(|c| c.value(d)).collect();
            if o.dims.contains(&d) {
                prop_assert_eq!(&seen, &declared(&space, &base, d), "{} is not covered", d);
            } else {
                prop_assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![base.value(d)], "{} varies", d);
            }
        }
        let (from, to) = o.epoch_range.unwrap_or((946_684_800, 2_208_988_800));
        prop_assert!(space.epochs.iter().all(|e| (from..=to).contains(e)), "{:?} outside {}..{}", space.epochs, from, to);
        if let Some(seeds) = &o.seeds {
            prop_assert_eq!(&space.seeds, seeds);
        }
    }

    /// Explain names the dimension that flips a synthetic predicate, and only it, with exactly the values that
    /// flip it; the others have no effect.
    #[test]
    fn explain_attributes_the_outcome_to_the_deciding_dimension(
        decider in proptest::sample::select(Dimension::ALL.to_vec()),
        pick in proptest::collection::vec(any::<proptest::sample::Index>(), 1..4),
        control_k in 1usize..4,
    ) {
        let space = full_space(20, 3);
        let base = Config::baseline(1_700_000_000);
        let values: Vec<String> = values_for(decider, &space, &base).iter().map(|c| c.value(decider)).collect();
        // The failing values: some of the dimension's values, never the baseline's own (the control passes).
        let failing: BTreeSet<String> =
            pick.iter().map(|i| values[i.index(values.len())].clone()).filter(|v| *v != base.value(decider)).collect();
        prop_assume!(!failing.is_empty());
        let mut runs = 0usize;
        let mut batch = |cs: &[Config]| -> Result<Vec<Outcome>, crate::HuntError> {
            let out = cs.iter().enumerate().map(|(i, c)| outcome(runs + i, c.clone(), failing.contains(&c.value(decider)))).collect::<Vec<_>>();
            runs += cs.len();
            Ok(out)
        };
        let r = explain(&base, &space, &ExplainOptions::new(control_k, 4), &mut batch, &mut |_| {}).unwrap();
        prop_assert_eq!(r.control_verdict, Verdict::Pass);
        prop_assert!(!r.nondeterministic);
        prop_assert_eq!(r.control_runs, control_k);
        for f in &r.findings {
            if f.dimension == decider {
                prop_assert!(f.changes_outcome, "{:?}", f);
                let named: BTreeSet<String> = f.deciding_values.iter().cloned().collect();
                prop_assert_eq!(&named, &failing);
            } else {
                prop_assert!(!f.changes_outcome && !f.changes_output && f.deciding_values.is_empty(), "{:?}", f);
            }
        }
        prop_assert_eq!(r.findings.len(), Dimension::ALL.len());
        prop_assert_eq!(r.runs, runs);
    }

    /// Early stopping: when the deciding dimension flips within its first `patience` values, every other
    /// dimension is dropped after exactly `patience` tries (or all its values, if fewer), the decider is tried
    /// in full and named with exactly its flipping values, and the run count is bounded accordingly.
    #[test]
    fn explain_stops_the_other_dimensions_early_and_keeps_the_decider(
        decider in proptest::sample::select(Dimension::ALL.to_vec()),
        patience in 1usize..5,
        chunk in 1usize..6,
        early in any::<proptest::sample::Index>(),
        late in proptest::collection::vec(any::<proptest::sample::Index>(), 0..3),
        control_k in 1usize..3,
    ) {
        let space = full_space(40, 6);
        let base = Config::baseline(1_700_000_000);
        let values: Vec<String> = values_for(decider, &space, &base).iter().map(|c| c.value(decider)).collect();
        let within = patience.min(values.len());
        let mut failing: BTreeSet<String> = BTreeSet::new();
        failing.insert(values[early.index(within)].clone());
        failing.extend(late.iter().map(|i| values[i.index(values.len())].clone()));
        failing.remove(&base.value(decider));
        prop_assume!(values[..within].iter().any(|v| failing.contains(v)));
        let mut runs = 0usize;
        let mut batch = |cs: &[Config]| -> Result<Vec<Outcome>, crate::HuntError> {
            let out = cs.iter().enumerate().map(|(i, c)| outcome(runs + i, c.clone(), failing.contains(&c.value(decider)))).collect::<Vec<_>>();
            runs += cs.len();
            Ok(out)
        };
        let opts = ExplainOptions { control_k, patience, chunk, bisect_points: chunk };
        let mut lines = Vec::new();
        let r = explain(&base, &space, &opts, &mut batch, &mut |l| lines.push(l.to_string())).unwrap();
        prop_assert!(!r.interrupted);
        let mut bound = control_k;
        for f in &r.findings {
            let all = values_for(f.dimension, &space, &base).len();
            prop_assert_eq!(f.tried + f.untried, all);
            if f.dimension == decider {
                prop_assert!(f.changes_outcome, "{:?}", f);
                prop_assert_eq!(f.untried, 0);
                prop_assert_eq!(&f.deciding_values.iter().cloned().collect::<BTreeSet<_>>(), &failing);
                bound += all;
            } else {
                prop_assert!(!f.changes_outcome, "{:?}", f);
                prop_assert_eq!(f.tried, patience.min(all), "{:?} was not stopped after {} tries", f, patience);
                bound += patience.min(all);
            }
        }
        // Bisection: at most four boundaries, each to the second over at most 2^33 seconds, `chunk` per step.
        prop_assert!(r.runs <= bound + 4 * 33 * chunk, "{} runs, bound {}", r.runs, bound);
        prop_assert_eq!(r.runs, runs);
        prop_assert!(lines.iter().any(|l| l.starts_with(&format!("{} ", decider.name())) && l.contains("outcome flipped at")), "{:?}", lines);
    }

    /// A signal in the middle (the batch answers Interrupted): the explanation ends without an error, marked
    /// interrupted, with the runs made until then.
    #[test]
    fn an_interrupted_explanation_reports_what_it_found(after in 1usize..12, patience in 1usize..4, partial in any::<bool>()) {
        let space = full_space(20, 3);
        let base = Config::baseline(1_700_000_000);
        let mut calls = 0usize;
        let mut runs = 0usize;
        // The configurations that finished, with their dimension's value as the outcome saw it.
        let mut finished: Vec<Config> = Vec::new();
        let mut batch = |cs: &[Config]| -> Result<Vec<Outcome>, crate::HuntError> {
            calls += 1;
            let all = cs.iter().enumerate().map(|(i, c)| outcome(i, c.clone(), c.epoch > 2_000_000_000));
            if calls > after {
                if !partial {
                    return Err(crate::HuntError::Interrupted { signal: 2 });
                }
                // Every other run finished (gaps included), then the signal.
                let some: Vec<Outcome> = all.filter(|o| o.index % 2 == 1).collect();
                runs += some.len();
                finished.extend(some.iter().map(|o| o.config.clone()));
                return Ok(some);
            }
            runs += cs.len();
            finished.extend(cs.iter().cloned());
            Ok(all.collect())
        };
        let r = explain(&base, &space, &ExplainOptions { control_k: 1, patience, chunk: 2, bisect_points: 2 }, &mut batch, &mut |_| {}).unwrap();
        prop_assert_eq!(r.runs, runs);
        prop_assert_eq!(r.interrupted, calls > after);
        // Every finished run of a dimension is counted for it: the control (one) and the dimensions' own.
        let tried: usize = r.findings.iter().map(|f| f.tried).sum();
        prop_assert_eq!(finished.len(), r.runs);
        let bisected = r.findings.iter().any(|f| f.dimension == Dimension::Epoch && f.changes_outcome);
        if bisected {
            // The bisection's runs belong to no dimension's tries.
            prop_assert!(tried < r.runs, "{:?}", r);
        } else {
            prop_assert_eq!(tried + 1, r.runs, "{:?}", r);
        }
        for f in &r.findings {
            prop_assert_eq!(f.tried + f.untried, values_for(f.dimension, &space, &base).len());
        }
    }

    /// A failure from a date on: explain bisects the boundary to the second, in both directions.
    #[test]
    fn explain_bisects_the_epoch_boundary_to_the_second(at in 946_684_801i64..2_208_988_800, fails_after in any::<bool>(), points in 1usize..6) {
        let space = full_space(4, 6);
        let sampled = values_for(Dimension::Epoch, &space, &Config::baseline(0));
        // The control sits on the passing side; some sampled date on the other.
        let base_epoch = if fails_after { 946_684_800 } else { 2_208_988_800 };
        let fails = |e: i64| if fails_after { e >= at } else { e < at };
        prop_assume!(sampled.iter().any(|c| fails(c.epoch)));
        let base = Config::baseline(base_epoch);
        let mut batch = |cs: &[Config]| -> Result<Vec<Outcome>, crate::HuntError> {
            Ok(cs.iter().enumerate().map(|(i, c)| outcome(i, c.clone(), fails(c.epoch))).collect())
        };
        let r = explain(&base, &space, &ExplainOptions { bisect_points: points, ..ExplainOptions::new(1, 4) }, &mut batch, &mut |_| {}).unwrap();
        let epoch = r.findings.iter().find(|f| f.dimension == Dimension::Epoch).unwrap();
        prop_assert!(epoch.changes_outcome);
        prop_assert_eq!(r.epoch_boundaries.len(), 1, "{:?}", r.epoch_boundaries);
        let b = &r.epoch_boundaries[0];
        if fails_after {
            prop_assert_eq!((b.passes_at, b.fails_at), (at - 1, at));
        } else {
            prop_assert_eq!((b.passes_at, b.fails_at), (at, at - 1));
        }
        prop_assert!(!fails(b.passes_at) && fails(b.fails_at));
    }

    /// The hunt's summary counts every run once: per verdict, per value of each dimension, per failure class;
    /// a class's first configuration is its lowest-index failure.
    #[test]
    fn hunt_report_counts_every_run_once(
        dims in any_dims(),
        verdicts in proptest::collection::vec((0u8..4, 0i32..3), 0..60),
    ) {
        let space = full_space(10, 2);
        let base = Config::baseline(1_700_000_000);
        let all = Space { dims: dims.clone(), ..space };
        let outcomes: Vec<Outcome> = verdicts
            .iter()
            .enumerate()
            .map(|(i, (v, code))| {
                let mut o = outcome(i, all.config(&base, i), *v == 1);
                o.verdict = [Verdict::Pass, Verdict::Fail, Verdict::Unenforced, Verdict::Error][*v as usize];
                if o.verdict == Verdict::Fail {
                    o.signature = repro_pack::signature::compute(1 + code, b"", b"", &[]);
                }
                o
            })
            .collect();
        let r = report(&dims, &outcomes, 0);
        prop_assert_eq!(r.runs, outcomes.len());
        prop_assert_eq!(r.passed + r.failed + r.unenforced + r.errors, r.runs);
        let distinct: BTreeSet<String> = outcomes.iter().map(|o| o.config.describe(&Dimension::ALL)).collect();
        prop_assert_eq!(r.distinct_configs, distinct.len());
        for d in &dims {
            let rows: Vec<_> = r.table.iter().filter(|row| row.dimension == *d).collect();
            prop_assert_eq!(rows.iter().map(|row| row.pass + row.fail + row.other).sum::<usize>(), r.runs);
        }
        prop_assert_eq!(r.failures.iter().map(|c| c.count).sum::<usize>(), r.failed);
        for c in &r.failures {
            let first = outcomes.iter().find(|o| o.verdict == Verdict::Fail && o.signature == c.signature).unwrap();
            prop_assert_eq!(&c.first, &first.config);
        }
    }

    /// `--vary`: any list of dimension names (repeated, spaced, in any order) is the sorted set of them.
    #[test]
    fn vary_lists_parse_to_their_set(names in proptest::collection::vec(proptest::sample::select(Dimension::ALL.to_vec()), 1..10), sep in prop_oneof![Just(","), Just(", "), Just(" ,")]) {
        let text = names.iter().map(|d| d.name()).collect::<Vec<_>>().join(sep);
        let want: Vec<Dimension> = names.iter().copied().collect::<BTreeSet<_>>().into_iter().collect();
        prop_assert_eq!(Dimension::parse_list(&text).unwrap(), want);
    }

    /// `--seeds N` is 0..N and `--seeds A..B` is A..B; an empty or reversed range is an error naming --seeds.
    #[test]
    fn seeds_parse(a in 0u64..1_000_000, n in 1u64..2000) {
        prop_assert_eq!(parse_seeds(&n.to_string()).unwrap(), (0..n).collect::<Vec<_>>());
        prop_assert_eq!(parse_seeds(&format!("{a}..{}", a + n)).unwrap(), (a..a + n).collect::<Vec<_>>());
        let e = parse_seeds(&format!("{}..{a}", a + n)).unwrap_err().to_string();
        prop_assert!(e.starts_with("--seeds"), "{}", e);
    }

    /// Durations: a number with a unit is that long, up to a week; beyond it is an error naming the argument.
    #[test]
    fn durations_parse(n in 1u64..10_000, unit in proptest::sample::select(vec![("ms", 1u64), ("s", 1000), ("m", 60_000), ("h", 3_600_000)])) {
        let ms = n * unit.1;
        let r = parse_duration("--time-budget", &format!("{n}{}", unit.0));
        if ms <= 7 * 86_400_000 {
            // Parsed through f64 seconds: compare to the nearest millisecond.
            prop_assert_eq!((r.unwrap().as_nanos() + 500_000) / 1_000_000, ms as u128);
        } else {
            prop_assert!(r.unwrap_err().to_string().starts_with("--time-budget"));
        }
    }

    /// Dates: Unix seconds and their RFC 3339 form parse to themselves; a range needs FROM before TO.
    #[test]
    fn dates_round_trip(a in -62_135_596_800i64..253_402_300_799, b in -62_135_596_800i64..253_402_300_799) {
        prop_assert_eq!(parse_date("--epoch-range", &a.to_string()).unwrap(), a);
        prop_assert_eq!(parse_date("--epoch-range", &rfc3339(a)).unwrap(), a);
        let r = parse_date_range("--epoch-range", &format!("{}..{}", rfc3339(a), rfc3339(b)));
        if a < b {
            prop_assert_eq!(r.unwrap(), (a, b));
        } else {
            prop_assert!(r.unwrap_err().to_string().starts_with("--epoch-range"));
        }
    }

    /// `--env-variant NAME=V1,V2`: the name and the values come back; a bad name is an error naming the flag.
    #[test]
    fn env_variants_parse(name in "[A-Za-z_][A-Za-z0-9_]{0,10}", values in proptest::collection::vec("[^,]{0,10}", 1..5)) {
        let text = format!("{name}={}", values.join(","));
        prop_assert_eq!(parse_env_variant(&text).unwrap(), (name.clone(), values));
        let e = parse_env_variant(&format!("{name}-x=1")).unwrap_err().to_string();
        prop_assert!(e.starts_with("--env-variant"), "{}", e);
    }

    /// The argument parsers never panic, whatever the text; their errors name the argument.
    #[test]
    fn argument_parsers_never_panic(s in "\\PC{0,40}") {
        for r in [Dimension::parse_list(&s).err(), parse_seeds(&s).err(), parse_env_variant(&s).err()].into_iter().flatten() {
            let e = r.to_string();
            prop_assert!(e.starts_with("--vary") || e.starts_with("--seeds") || e.starts_with("--env-variant"), "{}", e);
        }
        if let Err(e) = parse_duration("--time-budget", &s) {
            prop_assert!(e.to_string().starts_with("--time-budget"));
        }
        if let Err(e) = parse_date_range("--epoch-range", &s) {
            prop_assert!(e.to_string().starts_with("--epoch-range"));
        }
    }

    /// A test runner's output (outside input): failure lines are sorted, distinct, and each names a failure.
    #[test]
    fn failure_lines_of_any_output(lines in proptest::collection::vec(prop_oneof![
        "FAILED [a-z_./:]{1,20}( - [A-Za-z]{1,10})?",
        "ERROR [a-z_./:]{1,20}",
        "--- FAIL: Test[A-Za-z]{1,8} \\([0-9]\\.[0-9]{2}s\\)",
        "thread 'x' panicked at src/[a-z]{1,5}.rs:[0-9]{1,3}:[0-9]{1,2}",
        "\\PC{0,30}",
    ], 0..12), noise in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut text = lines.join("\n").into_bytes();
        text.extend_from_slice(&noise);
        let v = failure_lines(&text);
        prop_assert!(v.windows(2).all(|w| w[0] < w[1]), "{:?}", v);
        prop_assert!(v.iter().all(|l| l.starts_with("FAILED ") || l.starts_with("ERROR ") || l.starts_with("--- FAIL: ") || l.contains("panicked at")), "{:?}", v);
        prop_assert!(v.iter().all(|l| !l.contains(" (<dur>)")), "{:?}", v);
    }

    /// Test selection keeps the runner and its options and names exactly the failing tests.
    #[test]
    fn pytest_selection_names_the_failing_tests(
        opts in proptest::collection::vec(prop_oneof![Just("-q".to_string()), Just("-x".to_string()), Just("-p".to_string())], 0..3),
        paths in proptest::collection::vec("[a-z]{1,6}\\.py", 0..3),
        failing in proptest::collection::vec("[a-z]{1,6}\\.py::test_[a-z]{1,6}", 1..4),
    ) {
        let mut argv: Vec<String> = vec!["python3".into(), "-m".into(), "pytest".into()];
        for o in &opts {
            argv.push(o.clone());
            if o == "-p" {
                argv.push("no:cacheprovider".into());
            }
        }
        argv.extend(paths.iter().cloned());
        let ids: Vec<String> = failing.iter().map(|f| format!("pytest:{f}")).collect();
        let out = select_tests(&argv, &ids).unwrap();
        prop_assert_eq!(&out[..argv.len() - paths.len()], &argv[..argv.len() - paths.len()]);
        prop_assert_eq!(&out[argv.len() - paths.len()..], &failing[..]);
        prop_assert_eq!(select_tests(&argv, &[]), None);
    }
}
