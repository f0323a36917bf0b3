//! The stable-toolchain side of fuzzing (docs/fuzzing.md): every input of the fuzz corpora (`fuzz/corpus/<target>/`)
//! and every crash reproducer found so far (`fuzz/regressions/<target>/`) goes through the same harness the
//! cargo-fuzz targets use (`fuzz/src/lib.rs`, included below) and must neither panic nor hang; then a short
//! property-based pass per parser: arbitrary input never panics, and what a serializer writes parses back.

#[allow(dead_code)]
#[path = "../../../fuzz/src/lib.rs"]
mod harness;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::Duration;

use proptest::prelude::*;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The harness function of a target.
fn target(name: &str) -> harness::Harness {
    harness::TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f).unwrap()
}

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_file()).collect(),
        Err(_) => vec![],
    };
    v.sort();
    v
}

/// A bound for one input that only a hang reaches (a debug build on a loaded machine may take seconds): how
/// fast the parsers are is libFuzzer's business (`-timeout` in scripts/fuzz.sh), not this test's.
const HANG: Duration = Duration::from_secs(120);

/// Runs `f` on `data` in a thread of its own; a panic, or no answer within [`HANG`], is a failure described by
/// the returned message.
fn run_one(name: &str, f: harness::Harness, data: &[u8], scratch: &Path) -> Result<(), String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (data, scratch) = (data.to_vec(), scratch.to_path_buf());
    std::thread::spawn(move || {
        let r = catch_unwind(AssertUnwindSafe(|| f(&data, &scratch)));
        // Ignored: the receiver is gone only after it gave up waiting, and that is reported there.
        let _ = tx.send(r);
    });
    match rx.recv_timeout(HANG) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(p)) => {
            let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            Err(format!("{name}: panicked: {}", msg.as_deref().unwrap_or("(a panic without a message)")))
        }
        Err(_) => Err(format!("{name}: no answer within {HANG:?} (a hang)")),
    }
}

#[test]
fn every_corpus_and_regression_input_passes_the_harness() {
    let scratch = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (name, f) in harness::TARGETS {
        let corpus = inputs(&repo().join("fuzz/corpus").join(name));
        assert!(corpus.len() >= 3, "fuzz/corpus/{name} holds {} inputs: the corpus is missing", corpus.len());
        for p in corpus.iter().chain(&inputs(&repo().join("fuzz/regressions").join(name))) {
            let data = match std::fs::read(p) {
                Ok(d) => d,
                // A fuzzer running on this checkout replaces corpus files as it reduces them.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => panic!("{}: {e}", p.display()),
            };
            if let Err(e) = run_one(&p.display().to_string(), *f, &data, scratch.path()) {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{} inputs fail:\n{}", failures.len(), failures.join("\n"));
}

/// The seed packs of the corpus are real packs (made by `repro capture`): they read and check.
#[test]
fn seed_packs_read() {
    let store = repro_pack::Store::at(tempfile::tempdir().unwrap().path().join("store"));
    for name in ["tiny", "tproc", "tnet"] {
        let p = repo().join(format!("fuzz/corpus/pack/{name}.repro"));
        let pack = repro_pack::read_pack(&p, &store, None).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(!pack.blobs.is_empty());
    }
}

fn corpus_file(target: &str, name: &str) -> Vec<u8> {
    std::fs::read(repo().join("fuzz/corpus").join(target).join(name)).unwrap()
}

/// Bounded cases: the whole pass takes a few seconds.
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

fn hex_digest() -> impl Strategy<Value = String> {
    "[0-9a-f]{64}"
}

proptest! {
    #![proptest_config(config(64))]

    /// Arbitrary bytes as a pack file, and as a pack's tar stream, give an error (never a panic).
    #[test]
    fn pack_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let scratch = tempfile::tempdir().unwrap();
        harness::pack(&data, scratch.path());
        harness::pack_tar(&data, scratch.path());
    }

    /// A real pack's tar stream with bytes overwritten (headers, manifest, blobs, padding) is an error or a pack
    /// that checks; never a panic.
    #[test]
    fn damaged_pack_tar_never_panics(edits in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 1..8)) {
        let scratch = tempfile::tempdir().unwrap();
        let mut data = corpus_file("pack_tar", "tnet.tar");
        for (i, b) in edits {
            let i = i.index(data.len());
            data[i] = b;
        }
        harness::pack_tar(&data, scratch.path());
    }

    /// A cut real pack (any length) is an error naming the pack.
    #[test]
    fn truncated_pack_is_an_error(at in any::<proptest::sample::Index>()) {
        let scratch = tempfile::tempdir().unwrap();
        let full = corpus_file("pack", "tnet.repro");
        let cut = &full[..at.index(full.len())];
        let file = scratch.path().join("cut.repro");
        std::fs::write(&file, cut).unwrap();
        let store = repro_pack::Store::at(scratch.path().join("store"));
        let err = repro_pack::read_pack(&file, &store, None).unwrap_err();
        prop_assert!(err.to_string().contains("cut.repro"), "{}", err);
        prop_assert_eq!(err.exit_code(), 2);
    }

    /// A manifest with generated fields serializes and parses back equal (the harness asserts the round trip).
    #[test]
    fn manifest_round_trips(
        argv in proptest::collection::vec("\\PC{1,12}", 1..4),
        cwd in "(/[a-z0-9_-][a-z0-9._-]{0,5}){0,3}",
        env in proptest::collection::btree_map("[A-Z_]{1,8}", "\\PC{0,12}", 0..4),
        seed in any::<u64>(),
        epoch in 0i64..4_102_444_800,
        files in proptest::collection::btree_map("/[a-z]{1,6}(/[a-z0-9_-][a-z0-9._-]{0,5}){0,3}", (hex_digest(), any::<u64>(), 0u32..0o7777), 0..6),
        stdout in (hex_digest(), any::<u64>()),
        thin in any::<bool>(),
    ) {
        // Every generated path is a file: one below another ("/x" and "/x/0") is a manifest the validator rightly
        // refuses (its parent is a file), so such draws are not round-trip cases.
        // The same for a file at or above the working directory, which the sandbox needs as a directory.
        prop_assume!(!files.keys().any(|a| files.keys().any(|b| b.starts_with(&format!("{a}/")))));
        let cwd = if cwd.is_empty() { "/".to_string() } else { cwd };
        prop_assume!(!files.keys().any(|f| *f == cwd || cwd.starts_with(&format!("{f}/"))));
        let mut m: serde_json::Value = serde_json::from_slice(&corpus_file("manifest", "tnet.json")).unwrap();
        m["command"] = serde_json::json!({"argv": argv, "cwd": cwd, "env": env});
        m["determinism"]["seed"] = seed.into();
        m["determinism"]["epoch_unix"] = epoch.into();
        m["files"] = files
            .iter()
            .map(|(p, (d, size, mode))| serde_json::json!({"path": p, "kind": "file", "mode": mode, "size": size, "blake3": d}))
            .collect::<Vec<_>>()
            .into();
        m["result"]["stdout"] = serde_json::json!({"blake3": stdout.0, "size": stdout.1});
        m["thin"] = thin.into();
        let bytes = serde_json::to_vec(&m).unwrap();
        let parsed = repro_pack::archive::parse_manifest(Path::new("manifest.json"), &bytes);
        prop_assert!(parsed.is_ok(), "{:?}", parsed.err());
        harness::manifest(&bytes, Path::new("/nonexistent"));
    }

    /// Arbitrary text as a manifest, a tape, an experiment, an exposition or an argument never panics.
    /// Schedule scripts of generated switches (any steps and tasks, repeats included) parse and write back, or
    /// name the repeated step; arbitrary bytes are an error naming a line.
    #[test]
    fn sched_scripts_round_trip_or_name_the_problem(
        switches in proptest::collection::vec((0u64..50, any::<u64>()), 0..40),
        junk in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let body: Vec<String> = switches.iter().map(|(s, t)| format!("{{\"step\":{s},\"task\":{t}}}")).collect();
        let text = format!("{{\"switches\":[{}]}}", body.join(","));
        let scratch = tempfile::tempdir().unwrap();
        harness::sched_script(text.as_bytes(), scratch.path());
        harness::sched_script(&junk, scratch.path());
        let steps: std::collections::BTreeSet<u64> = switches.iter().map(|s| s.0).collect();
        prop_assert_eq!(repro_model::SchedScript::parse(text.as_bytes()).is_ok(), steps.len() == switches.len());
    }

    /// Arbitrary bytes as a tree a guest leaves behind: collection and both copies never write outside their
    /// targets (the harness compares the canary directory) and never copy a fifo or socket.
    #[test]
    fn copyback_of_any_tree_stays_in_its_targets(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        let scratch = tempfile::tempdir().unwrap();
        harness::copyback(&data, scratch.path());
    }

    #[test]
    fn text_parsers_never_panic(s in "\\PC{0,200}") {
        for name in ["manifest", "tape", "experiment", "prom", "args"] {
            target(name)(s.as_bytes(), Path::new("/nonexistent"));
        }
    }

    /// Arbitrary bytes as a project file, as the /proc files the supervisor rewrites, and as an ELF file it scans
    /// for RDRAND never panic (the harness checks what must hold).
    #[test]
    fn project_procfs_and_elf_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let scratch = tempfile::tempdir().unwrap();
        target("project")(&b, scratch.path());
        target("procfs")(&b, Path::new("/nonexistent"));
        target("elf_scan")(&b, Path::new("/nonexistent"));
    }

    /// A real ELF header with bytes overwritten scans without a panic.
    #[test]
    fn damaged_elf_never_panics(edits in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 1..12)) {
        // A minimal ELF file: one executable segment holding `rdrand rax`.
        let mut data = vec![0u8; 0x200];
        data[..6].copy_from_slice(b"\x7fELF\x02\x01");
        data[32..40].copy_from_slice(&64u64.to_le_bytes());
        data[54..56].copy_from_slice(&56u16.to_le_bytes());
        data[56..58].copy_from_slice(&1u16.to_le_bytes());
        data[64..68].copy_from_slice(&1u32.to_le_bytes());
        data[68..72].copy_from_slice(&5u32.to_le_bytes());
        data[72..80].copy_from_slice(&0x100u64.to_le_bytes());
        data[96..104].copy_from_slice(&0x10u64.to_le_bytes());
        data[0x100..0x104].copy_from_slice(&[0x48, 0x0f, 0xc7, 0xf0]);
        for (i, b) in edits {
            let i = i.index(data.len());
            data[i] = b;
        }
        target("elf_scan")(&data, Path::new("/nonexistent"));
    }

    /// JSON-shaped input (objects with the fields the parsers look for) never panics either.
    #[test]
    fn json_shaped_input_never_panics(
        kind in prop_oneof!["network", "proc", "x"],
        version in prop_oneof![Just(serde_json::json!(1)), Just(serde_json::json!(-1)), Just(serde_json::json!("1")), Just(serde_json::json!(1e300))],
        socket in prop_oneof![Just(serde_json::json!(0)), Just(serde_json::json!(u64::MAX)), Just(serde_json::json!(-1)), Just(serde_json::json!(4294967296u64))],
        op in prop_oneof!["socket", "connect", "read", "write", "accept", "sockname", "x"],
        result in any::<i64>(),
        data in "\\PC{0,20}",
        data_hex in "[0-9a-fA-Fxg]{0,21}",
    ) {
        let doc = serde_json::json!({"tape": kind, "version": version,
            "events": [{"socket": socket, "op": op, "result": result, "data": data, "addr_hex": data_hex}],
            "reads": [{"path": data, "data_hex": data_hex}]});
        harness::tape(&serde_json::to_vec(&doc).unwrap(), Path::new("/nonexistent"));
        let scrape = serde_json::json!({"t": 1, "samples": [{"name": "up", "labels": {"job": data}, "value": data_hex}]});
        harness::prom(&serde_json::to_vec(&scrape).unwrap(), Path::new("/nonexistent"));
    }

    /// Tapes with arbitrary bytes (UTF-8 or not) write themselves as JSON that parses back to the same tape.
    #[test]
    fn tapes_round_trip(
        events in proptest::collection::vec((any::<u32>(), 0usize..6, any::<i64>(), proptest::collection::vec(any::<u8>(), 0..40), proptest::collection::vec(any::<u8>(), 0..20)), 0..8),
        reads in proptest::collection::vec(("\\PC{0,20}", proptest::collection::vec(any::<u8>(), 0..40)), 0..6),
    ) {
        use repro_tracer::tape::{NetEvent, NetOp, NetTape, ProcRead, ProcTape};
        let ops = [NetOp::Socket, NetOp::Connect, NetOp::Accept, NetOp::Read, NetOp::Write, NetOp::Sockname];
        let net = NetTape {
            events: events.into_iter().map(|(socket, op, result, data, addr)| NetEvent { socket, op: ops[op], result, data, addr }).collect(),
        };
        prop_assert_eq!(NetTape::from_json(&net.to_json()).unwrap(), net);
        let proc = ProcTape { reads: reads.into_iter().map(|(path, data)| ProcRead { path, data }).collect() };
        prop_assert_eq!(ProcTape::from_json(&proc.to_json()).unwrap(), proc);
    }

    /// A generated experiment loads, with the values it was written with.
    #[test]
    fn generated_experiments_load(
        id in "[a-z][a-z0-9-]{0,20}",
        names in proptest::collection::btree_set("[a-z][a-z0-9_]{0,10}", 1..4),
        instances in 1u32..5,
        timeout_s in 1u64..3600,
        title in "[a-zA-Z0-9][ -~&&[^']]{0,29}",
    ) {
        let mut text = format!("apiVersion: repro.dev/chaos/v1\nid: {id}\nversion: 1\ntitle: '{title}'\nhypothesis: h\ntimeout: {timeout_s}s\nworkloads:\n");
        for n in &names {
            text.push_str(&format!("  - name: {n}\n    kind: shell\n    instances: {instances}\n    run: echo {n}\n    checks:\n      - name: ok\n        kind: exit-code\n"));
        }
        // Quoted: YAML reads a bare `y` or `no` as a boolean.
        let leaves: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
        text.push_str(&format!("flow:\n  parallel: [{}]\n", leaves.join(", ")));
        let e = repro_chaos::load::parse_experiment(Path::new("gen.yaml"), &text);
        prop_assert!(e.is_ok(), "{}\n{}", e.err().map(|e| e.to_string()).unwrap_or_default(), text);
        let e = e.unwrap();
        prop_assert_eq!(e.workloads.len(), names.len());
        prop_assert!(e.workloads.iter().all(|w| w.instances == instances));
        harness::experiment(text.as_bytes(), Path::new("/nonexistent"));
    }

    /// Generated expositions (names, escaped label values, any f64) parse to their samples (the harness prints
    /// them back and parses again).
    #[test]
    fn expositions_round_trip(
        samples in proptest::collection::vec(("[a-zA-Z_:][a-zA-Z0-9_:]{0,12}", proptest::collection::btree_map("[a-zA-Z_][a-zA-Z0-9_]{0,6}", "\\PC{0,10}", 0..3), any::<f64>()), 0..6),
    ) {
        let samples: Vec<repro_chaos::prom::Sample> = samples.into_iter().map(|(name, labels, value)| repro_chaos::prom::Sample { name, labels, value }).collect();
        let text = harness::print_exposition(&samples);
        let parsed = repro_chaos::prom::parse(&text);
        prop_assert!(parsed.is_ok(), "{:?}\n{}", parsed.err(), text);
        prop_assert_eq!(parsed.unwrap().samples.len(), samples.len());
        harness::prom(text.as_bytes(), Path::new("/nonexistent"));
    }
}

proptest! {
    #![proptest_config(config(512))]

    /// Any epoch in range parses from its Unix seconds and from its RFC 3339 form, to itself.
    #[test]
    fn epochs_round_trip(secs in -62_167_219_200i64..=253_402_300_799) {
        use repro_sandbox::parse::{parse_epoch, rfc3339};
        prop_assert_eq!(parse_epoch("--epoch", &secs.to_string()).unwrap(), secs);
        prop_assert_eq!(parse_epoch("--epoch", &rfc3339(secs)).unwrap(), secs);
    }

    /// Epochs out of range, sizes too large, and durations too long are errors naming the argument.
    #[test]
    fn out_of_range_values_are_errors(big in 253_402_300_800i64.., unit in prop_oneof!["", "K", "M", "G", "T"], digits in "[1-9][0-9]{16,40}") {
        use repro_sandbox::parse::{parse_epoch, parse_memory};
        let e = parse_epoch("--epoch", &big.to_string()).unwrap_err().to_string();
        prop_assert!(e.contains("--epoch") && e.contains("out of range"), "{}", e);
        let e = parse_memory("--memory", &format!("{digits}{unit}")).unwrap_err().to_string();
        prop_assert!(e.contains("--memory"), "{}", e);
        let huge = format!("{digits}{digits}h");
        prop_assert_eq!(repro_chaos::model::parse_duration(&huge), None);
    }

    /// Sizes: a number and a unit give that many bytes.
    #[test]
    fn memory_sizes_parse(n in 1u64..1_000_000, unit in 0usize..4, suffix in prop_oneof!["", "i", "ib", "B", "iB"]) {
        let (letter, mult) = [("K", 1u64 << 10), ("M", 1 << 20), ("G", 1 << 30), ("T", 1 << 40)][unit];
        let bytes = n * mult;
        let r = repro_sandbox::parse::parse_memory("--memory", &format!("{n}{letter}{suffix}"));
        if (1 << 20..=1 << 50).contains(&bytes) {
            prop_assert_eq!(r.unwrap(), bytes);
        } else {
            prop_assert!(r.is_err());
        }
    }

    /// Arbitrary argument values never panic (the harness also checks the epoch round trip on what parses).
    #[test]
    fn argument_values_never_panic(s in "[0-9a-zA-Z:./+ _=-]{0,40}") {
        let scratch = tempfile::tempdir().unwrap();
        harness::args(s.as_bytes(), scratch.path());
    }
}
