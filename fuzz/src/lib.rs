//! The fuzzing harness of repro's parsers of outside input: one function per target, each feeding bytes to the
//! same entry points the command line uses and checking what must hold for any input (no panic, and round trips
//! where a serializer exists). The cargo-fuzz targets in `fuzz_targets/` call these; the stable-toolchain
//! replay of the corpus (`crates/repro/tests/fuzz.rs`) includes this file, so both run the same checks.
//!
//! Every function takes `scratch`, a directory on a size-limited tmpfs for the files a target must write (a pack
//! file: `read_pack` reads from a path). Nothing is written anywhere else: packs are read and checked without
//! extraction.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// A target's harness: the input, and a scratch directory on a size-limited tmpfs.
pub type Harness = fn(&[u8], &Path);

/// The targets, by corpus directory name.
pub const TARGETS: &[(&str, Harness)] = &[
    ("pack", pack),
    ("pack_tar", pack_tar),
    ("manifest", manifest),
    ("tape", tape),
    ("experiment", experiment),
    ("prom", prom),
    ("args", args),
    ("run_record", run_record),
    ("project", project),
    ("procfs", procfs),
    ("elf_scan", elf_scan),
    ("sched_script", sched_script),
    ("environment", environment),
    ("attestation", attestation),
    ("repair_counts", repair_counts),
    ("history", history),
    ("chaos_schedule", chaos_schedule),
    ("copyback", copyback),
];

/// A file given to `repro drift` or `repro env` that may be a DSSE envelope of `repro attest` (classified by
/// content, read unchecked: `env::side_of` without keys), then its payload signed by a key of the harness and read
/// with that key (the path `repro drift --key` takes once a signature verifies), and with a key that signed
/// nothing. A side that reads is described and the same as itself under drift, and a runtime trace's full
/// environment checks as an environment document; an error names the file.
pub fn attestation(data: &[u8], scratch: &Path) {
    use repro_prov::attest::{dsse, read, PrivateKey, Verifier};
    let file = scratch.join("attestation.dsse");
    let named = |e: &repro_prov::ProvError| {
        let m = e.to_string();
        assert!(m.contains("attestation.dsse"), "the error names the file: {m}");
    };
    let _ = repro_prov::open::is_envelope(data);
    // A pack (zstd) is the pack targets' business: its reader stages blobs outside the scratch directory.
    if !data.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        std::fs::write(&file, data).expect("the scratch tmpfs takes the file");
        match repro_prov::drift::side_of(&file, &[]) {
            Ok(side) => check_side(&side),
            Err(e) => named(&e),
        }
    }
    let signer = PrivateKey::from_seed(&[0x5e; 32]);
    let stranger = PrivateKey::from_seed(&[0x5f; 32]).public();
    match read::read(data, &file, &[&stranger as &dyn Verifier]) {
        Ok(_) => panic!("an envelope verified with a key that signed nothing"),
        Err(e) => named(&e),
    }
    if let Ok(u) = dsse::open_unchecked(data, &file) {
        let env = dsse::sign(dsse::PAYLOAD_TYPE, &u.payload, &signer).expect("signing never fails").to_json();
        // `repro attest verify` of it: the statement's predicate (any type, a repair VSA's extension included)
        // put into words, never a panic.
        match repro_prov::attest::verify(&env, &file, &signer.public(), &repro_prov::attest::Against::default()) {
            Ok(v) => {
                let _ = repro_prov::attest::describe(&v);
            }
            Err(e) => named(&e),
        }
        match read::read(&env, &file, &[&signer.public() as &dyn Verifier]) {
            Ok(a) => {
                assert!(a.source.verified && a.source.key_id.as_deref() == Some(signer.id()));
                check_side(&repro_prov::drift::Side {
                    environment: a.environment,
                    attestation: Some(a.source),
                    executed: a.executed,
                });
            }
            Err(e) => {
                named(&e);
                assert!(!matches!(e, repro_prov::ProvError::Unverified { .. }), "its own signature: {e}");
            }
        }
    }
}

fn check_side(side: &repro_prov::drift::Side) {
    let _ = repro_prov::drift::describe_side(side);
    let d = repro_prov::drift::compare_sides(("a", side), ("b", side));
    assert!(d.same, "a side is the same as itself");
    let _ = repro_prov::drift::describe(&d);
    if side.attestation.is_some() && side.files_listed() {
        let path = Path::new("environment.json");
        let back = repro_prov::env::parse(path, &repro_prov::env::to_json(&side.environment))
            .unwrap_or_else(|e| panic!("a runtime trace's environment does not check as a document: {e}"));
        assert_eq!(back, side.environment, "environment round trip");
    }
}

/// An environment document (`repro env`, `drift` read one given on the command line, or a pack's
/// `environment` blob): parsed and checked against itself; one that passes is described, compared, and reads
/// back equal, and its SBOMs (both formats) are JSON and deterministic; an error names the file.
pub fn environment(data: &[u8], scratch: &Path) {
    let path = scratch.join("environment.json");
    match repro_prov::env::parse(&path, data) {
        Ok(env) => {
            let _ = repro_prov::env::describe(&env);
            let d = repro_prov::drift::compare(("a", &env), ("b", &env));
            assert!(d.same, "an environment is the same as itself");
            let _ = repro_prov::drift::describe(&d);
            let back = repro_prov::env::parse(&path, &repro_prov::env::to_json(&env))
                .unwrap_or_else(|e| panic!("an environment that checked does not read back: {e}"));
            assert_eq!(back, env, "environment round trip");
            for format in [repro_prov::sbom::Format::CycloneDx, repro_prov::sbom::Format::Spdx] {
                let doc = repro_prov::sbom::write(&env, format);
                assert!(serde_json::from_slice::<serde_json::Value>(&doc).is_ok(), "an SBOM is JSON");
                assert_eq!(doc, repro_prov::sbom::write(&env, format), "an SBOM is deterministic");
            }
        }
        Err(e) => assert!(e.to_string().contains("environment.json"), "the error names the file: {e}"),
    }
}

/// What `repro run --sched-script FILE` does with the file: parse it; a script that parses writes back and parses
/// equal, and an error names a line or a switch.
pub fn sched_script(data: &[u8], _scratch: &Path) {
    match repro_model::SchedScript::parse(data) {
        Ok(s) => {
            assert!(s.switches.len() <= repro_model::sched::SCHED_SCRIPT_MAX);
            let json = serde_json::to_vec(&s).expect("a schedule script serializes");
            assert_eq!(repro_model::SchedScript::parse(&json).expect("a written script parses"), s);
            let mut sched = repro_detcore::Scheduler::scripted(repro_model::SchedPolicy::Random, &s);
            for _ in 0..64 {
                let _ = sched.pick(&[0, 1, 2]);
            }
        }
        Err(e) => {
            let m = e.to_string();
            assert!(m.contains("line") || m.contains("switches"), "the error says where: {m}");
        }
    }
}

/// What `repro inspect` and `repro pack verify` do with a pack file's bytes: read and check it (without
/// extraction), summarize and render it; and what a cached root does first: read its manifest alone.
pub fn pack(data: &[u8], scratch: &Path) {
    let file = scratch.join("fuzz.repro");
    std::fs::write(&file, data).expect("the scratch tmpfs takes the pack file");
    check_pack_file(&file, scratch);
}

/// The same as [`pack`] for a pack whose tar stream is `data`: compressed here (one zstd frame), so that the
/// fuzzer explores the tar headers, the manifest and the blob checks instead of zstd's checksums.
pub fn pack_tar(data: &[u8], scratch: &Path) {
    let file = scratch.join("fuzz-tar.repro");
    let compressed = zstd::bulk::compress(data, 1).expect("zstd compresses any bytes");
    std::fs::write(&file, compressed).expect("the scratch tmpfs takes the pack file");
    check_pack_file(&file, scratch);
}

fn check_pack_file(file: &Path, scratch: &Path) {
    // An empty store: a thin pack's blobs are missing (an error), nothing is read from the host's store.
    let store = repro_pack::Store::at(scratch.join("store"));
    match repro_pack::read_pack(file, &store, None) {
        Ok(p) => {
            let s = repro_pack::summary::summarize(&p);
            let _ = repro_pack::summary::render(&s);
            let (m, id) =
                repro_pack::archive::read_manifest(file).expect("a pack that reads has a manifest that reads");
            assert_eq!(m, p.manifest);
            assert_eq!(id, p.id);
            check_manifest_round_trip(&p.manifest);
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("fuzz"), "the error names the pack: {msg}");
            let _ = e.exit_code();
            let _ = repro_pack::archive::read_manifest(file);
        }
    }
}

/// A pack's `manifest.json`: parsed and validated; one that passes serializes and parses back equal.
pub fn manifest(data: &[u8], _scratch: &Path) {
    if let Ok(m) = repro_pack::archive::parse_manifest(Path::new("manifest.json"), data) {
        check_manifest_round_trip(&m);
    }
}

fn check_manifest_round_trip(m: &repro_pack::Manifest) {
    let _ = m.blob_refs();
    let json = serde_json::to_vec_pretty(m).expect("a manifest serializes");
    let back = repro_pack::archive::parse_manifest(Path::new("manifest.json"), &json)
        .unwrap_or_else(|e| panic!("a manifest that validated does not parse back: {e}"));
    assert_eq!(&back, m, "manifest round trip");
}

/// The network and /proc tapes (blobs of a pack, read by `repro replay`): a tape that parses writes itself
/// back as JSON that parses to the same tape.
pub fn tape(data: &[u8], _scratch: &Path) {
    use repro_tracer::tape::{NetTape, ProcTape};
    if let Ok(t) = NetTape::from_json(data) {
        let back = NetTape::from_json(&t.to_json()).expect("a network tape's own JSON parses");
        assert_eq!(back, t, "network tape round trip");
    }
    if let Ok(t) = ProcTape::from_json(data) {
        let back = ProcTape::from_json(&t.to_json()).expect("a /proc tape's own JSON parses");
        assert_eq!(back, t, "proc tape round trip");
    }
}

/// Experiment and adapter YAML (`repro chaos run/validate`): parsed and validated from the text; errors name
/// the file.
pub fn experiment(data: &[u8], _scratch: &Path) {
    // The loader reads files with read_to_string: text that is not UTF-8 is an I/O error before parsing.
    let Ok(text) = std::str::from_utf8(data) else { return };
    let path = Path::new("fuzz.yaml");
    match repro_chaos::load::parse_experiment(path, text) {
        Ok(e) => {
            let _ = serde_json::to_string(&e);
        }
        Err(e) => assert!(e.to_string().starts_with("fuzz.yaml"), "the error names the file: {e}"),
    }
    if let Err(e) = repro_chaos::load::parse_adapter(path, text) {
        assert!(e.to_string().starts_with("fuzz.yaml"), "the error names the file: {e}");
    }
    let _ = repro_chaos::load::sniff_kind(text);
}

/// A scraped exporter's answer (`metric` checks of chaos experiments): the Prometheus text exposition (the
/// HTTP exchange is ureq's) and the recorded scrape lines the evaluation reads back. Parsed samples print
/// back to text that parses to the same samples.
pub fn prom(data: &[u8], _scratch: &Path) {
    use repro_chaos::prom;
    let text = String::from_utf8_lossy(data);
    if let Ok(e) = prom::parse(&text) {
        for s in &e.samples {
            let _ = prom::family_of(&s.name, &e.types);
        }
        let printed = print_exposition(&e.samples);
        let back = prom::parse(&printed).unwrap_or_else(|err| panic!("printed samples do not parse: {err}\n{printed}"));
        assert_eq!(back.samples.len(), e.samples.len());
        for (a, b) in back.samples.iter().zip(&e.samples) {
            assert_eq!(a.name, b.name);
            assert_eq!(a.labels, b.labels);
            assert!(a.value == b.value || (a.value.is_nan() && b.value.is_nan()), "{} != {}", a.value, b.value);
        }
    }
    // A line of `system/metrics/<target>.jsonl`.
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) {
        let scrapes = [v];
        let mut labels = BTreeMap::new();
        let series = repro_chaos::evaluate::metric_series(&scrapes, "up", &labels);
        labels.insert("job".to_string(), "x".to_string());
        let _ = repro_chaos::evaluate::metric_series(&scrapes, "up", &labels);
        use repro_chaos::model::Aggregate;
        for how in [Aggregate::Last, Aggregate::First, Aggregate::Min, Aggregate::Max, Aggregate::Increase] {
            let _ = repro_chaos::evaluate::aggregate(&series, how);
        }
    }
}

/// A run directory's `run.json` and `changes.json` (`repro runs`, `repro show`, `repro hunt`): read from a
/// file; a record that reads serializes and reads back equal.
pub fn run_record(data: &[u8], scratch: &Path) {
    use repro_sandbox::rundir;
    let dir = scratch.join("run");
    std::fs::create_dir_all(&dir).expect("the scratch tmpfs takes a run directory");
    std::fs::write(dir.join(rundir::RUN_JSON), data).expect("the scratch tmpfs takes run.json");
    match rundir::read_record(&dir) {
        Ok(r) => {
            let _ = repro_sandbox::run::describe_epoch(&r.settings.epoch);
            let _ = repro_sandbox::run::env_lines(&r.settings.env);
            let json = serde_json::to_vec(&r).expect("a run record serializes");
            let back: repro_model::run::RunRecord = serde_json::from_slice(&json).expect("a run record reads back");
            assert_eq!(back, r, "run record round trip");
        }
        Err(e) => assert!(e.to_string().contains("run.json"), "the error names the file: {e}"),
    }
    let _ = serde_json::from_slice::<repro_model::run::Changes>(data);
}

/// A project file (`repro.toml`, found in whatever directory a run starts in: a stranger's checkout), as
/// `repro run` reads it: bounded, parsed, and put under the options; an error names the file.
pub fn project(data: &[u8], scratch: &Path) {
    let path = scratch.join("repro.toml");
    std::fs::write(&path, data).expect("the scratch tmpfs takes repro.toml");
    match repro_sandbox::project::load(&path) {
        Ok(loaded) => {
            let _ = repro_sandbox::project::apply(&repro_model::settings::RunOptions::default(), &loaded);
        }
        Err(e) => assert!(e.to_string().contains("repro.toml"), "the error names the file: {e}"),
    }
}

/// The /proc files the supervisor rewrites for the guest (`stat`, `status`, `io`, `sched`): their text holds
/// the task's name, which the guest chooses. No panic, and the same input gives the same output.
pub fn procfs(data: &[u8], _scratch: &Path) {
    use repro_detcore::procfs;
    let t = data.len() as u64;
    assert_eq!(procfs::rewrite_stat(data, t), procfs::rewrite_stat(data, t));
    let _ = procfs::stat_pid(data);
    for f in [procfs::rewrite_status, procfs::rewrite_io, procfs::rewrite_sched] {
        assert_eq!(f(data), f(data));
    }
}

/// An ELF file the guest executes or opens as a library, scanned for RDRAND/RDSEED as the supervisor does
/// (repro-tracer/src/rdrand.rs), over the bytes in memory: headers, executable segments, code, symbol tables.
/// No panic; every site found lies inside the file's bytes.
pub fn elf_scan(data: &[u8], _scratch: &Path) {
    use repro_detcore::rdrand;
    let at = |off: u64, len: usize| -> Option<&[u8]> {
        let off = usize::try_from(off).ok()?;
        data.get(off..off.checked_add(len)?)
    };
    let Ok((phoff, entsize, count)) = rdrand::program_headers(data) else { return };
    let Some(table) = at(phoff, entsize.saturating_mul(count).min(1 << 16)) else { return };
    let Ok(segments) = rdrand::exec_segments(table, entsize, count) else { return };
    let mut sites = Vec::new();
    for seg in segments {
        let Some(code) = usize::try_from(seg.size).ok().and_then(|n| at(seg.offset, n)) else { continue };
        for site in rdrand::scan_code(code, seg) {
            assert!(site.offset >= seg.offset && site.offset - seg.offset < seg.size, "a site outside its segment");
            sites.push(site);
        }
    }
    if let Ok((shoff, entsize, count)) = rdrand::section_headers(data) {
        if let Some(table) = at(shoff, entsize.saturating_mul(count).min(1 << 16)) {
            for t in rdrand::symbol_tables(table, entsize, count) {
                let (Some(sym), Some(str_)) = (
                    usize::try_from(t.symbols.1).ok().and_then(|n| at(t.symbols.0, n)),
                    usize::try_from(t.strings.1).ok().and_then(|n| at(t.strings.0, n)),
                ) else {
                    continue;
                };
                for site in &mut sites {
                    site.function = rdrand::function_at(sym, str_, site.vaddr);
                }
            }
        }
    }
    let _ = rdrand::verdict("/work/x", true, &sites);
}

/// Prometheus text of `samples` (names, escaped label values, values).
pub fn print_exposition(samples: &[repro_chaos::prom::Sample]) -> String {
    let mut out = String::new();
    for s in samples {
        out.push_str(&s.name);
        if !s.labels.is_empty() {
            let l: Vec<String> = s
                .labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")))
                .collect();
            out.push_str(&format!("{{{}}}", l.join(",")));
        }
        let v = if s.value.is_nan() {
            "NaN".to_string()
        } else if s.value == f64::INFINITY {
            "+Inf".to_string()
        } else if s.value == f64::NEG_INFINITY {
            "-Inf".to_string()
        } else {
            format!("{:?}", s.value)
        };
        out.push_str(&format!(" {v}\n"));
    }
    out
}

/// The values of `repro run`'s arguments: `--epoch` (and SOURCE_DATE_EPOCH), `--memory`, `--bind`, `--env`,
/// `--dir-order`, and durations of experiments. An epoch that parses prints as RFC 3339 that parses back to it.
pub fn args(data: &[u8], scratch: &Path) {
    let Ok(v) = std::str::from_utf8(data) else { return };
    use repro_sandbox::parse;
    match parse::parse_epoch("--epoch", v) {
        Ok(secs) => {
            let printed = parse::rfc3339(secs);
            assert_eq!(parse::parse_epoch("--epoch", &printed).ok(), Some(secs), "epoch {secs} printed as {printed}");
            assert_eq!(parse::parse_epoch("--epoch", &secs.to_string()).ok(), Some(secs));
        }
        Err(e) => assert!(e.to_string().contains("--epoch"), "{e}"),
    }
    match parse::parse_memory("--memory", v) {
        Ok(b) => assert!((1 << 20..=1 << 50).contains(&b), "--memory {v:?} gave {b}"),
        Err(e) => assert!(e.to_string().contains("--memory"), "{e}"),
    }
    match parse::parse_bind(v, scratch) {
        Ok(b) => {
            assert!(b.guest.starts_with('/') && b.host.starts_with('/'), "{b:?}");
            assert!(b.guest != "/", "{b:?}");
            assert!(!b.guest.contains(',') && !b.host.contains(','), "{b:?}");
        }
        Err(e) => assert!(e.to_string().contains("--bind"), "{e}"),
    }
    match parse::parse_env(v) {
        Ok(parse::EnvSpec::Set(n, _)) | Ok(parse::EnvSpec::Pass(n)) => assert!(!n.is_empty() && !n.contains('=')),
        Err(e) => assert!(e.to_string().contains("--env"), "{e}"),
    }
    let _ = repro_detcore::DirOrder::parse(v);
    if let Some(d) = repro_chaos::model::parse_duration(v) {
        let printed = repro_chaos::model::format_duration(d);
        assert!(repro_chaos::model::parse_duration(&printed).is_some(), "{d:?} printed as {printed}");
    }
}

/// What `repro repair`'s gates read from a test run and a project: console output and JUnit XML (test counts and
/// per-test outcomes: `counts::count_output`, `count_junit`, `count_run`, `outcomes_in_output`,
/// `outcomes_in_junit`) and a user masking file (`MaskingFile::parse`, merged over the defaults by
/// `MaskingSet::new`), whose patterns then scan the input as an added file. Counts serialize and read back equal;
/// an error names the file.
pub fn repair_counts(data: &[u8], _scratch: &Path) {
    use repro_repair::counts;
    use repro_repair::masking::{MaskingFile, MaskingSet, DEFAULT_MASKING, DEFAULT_MASKING_NAME};
    let text = String::from_utf8_lossy(data);
    let all = [counts::count_output(&text), counts::count_junit(&text), counts::count_run(data, data, &[data])];
    for k in all.into_iter().flatten() {
        let json = serde_json::to_string(&k).expect("counts serialize");
        let back: repro_model::repair::TestCounts = serde_json::from_str(&json).expect("counts read back");
        assert_eq!(back, k, "counts round trip");
    }
    let _ = counts::outcomes_in_output(&text);
    let _ = counts::outcomes_in_junit(&text);
    let _ = counts::missing_summary_hint(&text);
    let named = |e: &repro_repair::RepairError| {
        let m = e.to_string();
        assert!(m.starts_with("user-masking.toml: "), "the error names the file: {m}");
    };
    // The user file merged over the defaults' languages (compiling only its own patterns: the defaults' are
    // compiled once, and scan the input too).
    let defaults = MaskingFile::parse(DEFAULT_MASKING, DEFAULT_MASKING_NAME).expect("the defaults parse");
    let languages = MaskingFile { languages: defaults.languages, patterns: Vec::new() };
    let mut sets = vec![MaskingSet::defaults().expect("the defaults compile")];
    match MaskingFile::parse(&text, "user-masking.toml") {
        Ok(user) => match MaskingSet::new(&[languages, user]) {
            Ok(set) => sets.push(set),
            Err(e) => named(&e),
        },
        Err(e) => named(&e),
    }
    let limits = repro_repair::tree::DiffLimits::default();
    for path in ["src/a.py", "src/lib.rs", "a_test.go", "a.test.js", "ci/run.sh"] {
        let fd = repro_repair::tree::FileDiff {
            path: path.into(),
            change: repro_repair::tree::ChangeKind::Added,
            old_mode: None,
            new_mode: Some(0o644),
            kind: repro_repair::tree::FileDiffKind::Text { hunks: repro_repair::tree::text_hunks("", &text, &limits) },
            lines_added: 0,
            lines_removed: 0,
        };
        for h in sets.iter().flat_map(|set| set.scan_file(&fd)) {
            assert!(h.line >= 1 && h.path == path, "a hit names its file and line: {h:?}");
        }
    }
}

/// An operation history a workload wrote (JSON lines, read by `repro chaos` checks): `repro_history::parse_reader`
/// within small limits, then every checker with small search bounds. No panic; an error names the history and a
/// line; the operations are well formed (in invoke order, returns not before calls, completions after invokes);
/// a result serializes and reads back (with the same verdict and summary); a non-linearizable verdict carries a window holding its failing
/// operation, inside the window's time span.
pub fn history(data: &[u8], _scratch: &Path) {
    use repro_history::{check, parse_reader, Checker, Details, LinearOptions, ParseOptions, Validity};
    let named = |e: &repro_history::HistoryError| {
        let m = e.to_string();
        assert!(m.starts_with("history.jsonl:"), "the error names the history and a line: {m}");
        assert!(e.location().line >= 1, "a line number is 1-based: {m}");
    };
    let opts = ParseOptions { max_ops: 2_000, max_line_bytes: 4_096 };
    let h = match parse_reader("history.jsonl", data, &opts) {
        Ok(h) => h,
        Err(e) => return named(&e),
    };
    assert!(h.ops.len() <= opts.max_ops);
    for (i, op) in h.ops.iter().enumerate() {
        assert_eq!(op.index, i, "ops in invoke order");
        assert!(op.line >= 1 && op.complete_line.is_none_or(|c| c > op.line), "lines: {op:?}");
        assert!(op.ret.is_none_or(|r| r >= op.call), "a return before its call: {op:?}");
        assert_eq!(op.ret.is_none(), op.outcome == repro_history::Outcome::Info, "info iff no return: {op:?}");
    }
    let lin = LinearOptions { max_steps: 20_000, max_window_steps: 20_000, ..LinearOptions::default() };
    for checker in Checker::ALL {
        let r = match check(checker, &h, &lin) {
            Ok(r) => r,
            Err(e) => {
                named(&e);
                continue;
            }
        };
        assert_eq!(r.checker, checker);
        // A result reads back; not necessarily equal: serde_json (without its float_roundtrip feature) may read
        // a float it wrote one ulp off, e.g. a huge integer literal of the history that became a float.
        let json = serde_json::to_string(&r).expect("a result serializes");
        let back: repro_history::CheckResult = serde_json::from_str(&json).expect("a result reads back");
        assert_eq!((back.checker, back.valid, &back.summary), (r.checker, r.valid, &r.summary), "result round trip");
        if let Details::Linearizable(d) = &r.details {
            assert_eq!(r.valid == Validity::Invalid, d.window.is_some(), "a window iff invalid: {}", r.summary);
            if let Some(w) = &d.window {
                assert!(w.ops.contains(&w.failing), "the window holds its failing operation");
                for op in &w.ops {
                    assert!(w.start <= op.call && op.ret.unwrap_or(op.call) <= w.end, "inside the span: {op:?}");
                }
            }
        }
    }
}

/// What `repro chaos replay` and `shrink` read from someone else's run directory: the timeline (JSON lines)
/// and `schedule.json`. The input is split at the first NUL: a timeline, then a schedule. The schedule derived
/// from the timeline reads back equal; any schedule that parses compares with it; the flow of a fixed experiment
/// with every node kind is pinned from it within a node bound (never larger), and every candidate of that pinned
/// flow is an experiment that loads.
pub fn chaos_schedule(data: &[u8], _scratch: &Path) {
    use repro_chaos::shrink::{candidate_flow, pin_flow, repeat_rounds, Choice};
    const EXP: &str = "apiVersion: repro.dev/chaos/v1\nid: e\nversion: 1\ntitle: t\nhypothesis: h\ntimeout: 1m\nworkloads:\n  - {name: w, kind: shell, instances: 3, run: 'true'}\noperations:\n  - {name: k, uses: kill, target: w}\n  - {name: f, uses: freeze, target: w, duration: 1s}\nflow:\n  parallel:\n    - w\n    - serial:\n        - {delay: 1s, jitter: 500ms}\n        - schedule: {from: [k, {do: f, weight: 2}], length: 3, interval: 100ms}\n        - random: {pick: 1, from: [k, f]}\n        - repeat: {for: 1s, do: k}\n        - {op: f, select: [w-1], duration: 200ms}\n";
    let (tl_bytes, sched_bytes) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let timeline: Vec<serde_json::Value> =
        String::from_utf8_lossy(tl_bytes).lines().take(2_000).filter_map(|l| serde_json::from_str(l).ok()).collect();
    let sc = repro_chaos::schedule::from_timeline(7, &timeline);
    let back: repro_chaos::model::Schedule =
        serde_json::from_str(&serde_json::to_string(&sc).expect("a schedule serializes")).expect("reads back");
    assert_eq!(back.operations.len(), sc.operations.len());
    assert_eq!(repro_chaos::schedule::difference(&sc, &sc), None, "a schedule is the same as itself");
    if let Ok(other) = serde_json::from_slice::<repro_chaos::model::Schedule>(sched_bytes) {
        let _ = repro_chaos::schedule::difference(&sc, &other);
    }
    let exp = repro_chaos::load::parse_experiment(Path::new("e.yaml"), EXP).expect("the fixed experiment loads");
    let rounds = repeat_rounds(&timeline);
    let (flow, slots) = pin_flow(&exp, &sc, &rounds, 500);
    let flow = flow.expect("the experiment has a flow");
    let nodes = serde_json::to_string(&flow).expect("a flow serializes").matches('{').count();
    assert!(nodes <= 2_000, "the pinned flow is bounded: {nodes}");
    for choices in [vec![Choice::Leave; slots.len()], vec![Choice::Run(None); slots.len()]] {
        let mut e = exp.clone();
        e.flow = Some(candidate_flow(&flow, &slots, &choices));
        let text = repro_chaos::shrink::experiment_yaml(&e).expect("a candidate serializes");
        if let Err(err) = repro_chaos::load::parse_experiment(Path::new("c.yaml"), &text) {
            panic!("a candidate does not load: {err}\n{text}");
        }
    }
}

/// What a guest leaves in the working directory, as bytes: a program that builds an upper layer (what the guest
/// made) and a lower directory (the host's working directory) with directories, files (sparse ones too), links
/// aimed out of the tree (absolute, `..`, at a canary file), fifos, UNIX sockets, hard links (in the lower one to
/// the canary too), names with newlines, invalid UTF-8 and repro's own temporary prefixes; then what `repro run`
/// does with it: `changes::collect`, `changes::copy_tree` to a run directory, and `changes::apply` back to the
/// lower directory (`--keep-changes`). Nothing outside the run directory and the lower directory may change (the
/// canary directory is compared whole), no fifo or socket is copied, every copied link is the guest's, and the
/// changes serialize and read back equal.
pub fn copyback(data: &[u8], scratch: &Path) {
    use repro_pack::extract::Beneath;
    use repro_sandbox::changes;
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;
    use std::os::unix::fs::MetadataExt;

    let case = scratch.join("copyback");
    let _ = std::fs::remove_dir_all(&case);
    let (upper, lower, run, outside) = (case.join("upper"), case.join("lower"), case.join("run"), case.join("outside"));
    for d in [&upper, &lower, &run, &outside] {
        std::fs::create_dir_all(d).expect("the scratch tmpfs takes the case's directories");
    }
    let canary = outside.join("canary");
    std::fs::write(&canary, b"canary: untouched\n").expect("the scratch tmpfs takes the canary");
    let listing = |p: &Path| -> Vec<(OsString, u64, u32, Vec<u8>)> {
        let mut v: Vec<_> = std::fs::read_dir(p)
            .expect("the canary directory lists")
            .map(|e| {
                let e = e.expect("an entry");
                let md = std::fs::symlink_metadata(e.path()).expect("a status");
                let body = if md.is_file() { std::fs::read(e.path()).expect("readable") } else { vec![] };
                (e.file_name(), md.len(), md.mode(), body)
            })
            .collect();
        v.sort();
        v
    };
    let before = listing(&outside);

    let targets: Vec<OsString> = vec![
        canary.clone().into(),
        outside.clone().into(),
        "../outside/canary".into(),
        "../../outside/canary".into(),
        "../../../outside".into(),
        "/".into(),
        "..".into(),
        ".".into(),
        "zz".into(),
    ];
    // Both trees, each with a stack of open directories (the current one last).
    let mut trees =
        [vec![Beneath::open(&upper).expect("upper opens")], vec![Beneath::open(&lower).expect("lower opens")]];
    let mut names: Vec<OsString> = Vec::new();
    let mut r = Bytes { data, at: 0 };
    let mut ops = 0;
    while let Some(op) = r.next() {
        ops += 1;
        if ops > 48 {
            break;
        }
        let tree = &mut trees[(op >> 7) as usize];
        let name: OsString = match r.next().unwrap_or(0) % 8 {
            0 => ".repro-keep-1".into(),
            1 => "zz".into(),
            2 => "a\nb".into(),
            3 => OsString::from_vec(vec![b'n', 0xff, 0xfe]),
            4 => "..".into(),
            n => {
                let len = 1 + (n as usize);
                let mut v: Vec<u8> = (0..len).map(|_| r.next().unwrap_or(b'x')).collect();
                for c in v.iter_mut() {
                    if *c == b'/' || *c == 0 {
                        *c = b'_';
                    }
                }
                OsString::from_vec(v)
            }
        };
        names.push(name.clone());
        let dir = tree.last().expect("the root stays");
        // Errors are part of the game: a name that exists, `..`, a full tmpfs.
        match op % 10 {
            0 => {
                if dir.subdir(&name, Some(0o755)).is_ok() && tree.len() < 6 {
                    if let Ok(d) = tree.last().expect("root").subdir(&name, None) {
                        tree.push(d);
                    }
                }
            }
            1 | 2 => {
                if let Ok(mut f) = dir.create_file(&name, 0o644 | u32::from(op & 0o100) << 5) {
                    let n = r.next().unwrap_or(0) as usize;
                    let _ = f.write_all(r.take(n));
                }
            }
            3 => {
                // Sparse: up to 4 MiB of hole, then a few bytes.
                if let Ok(mut f) = dir.create_file(&name, 0o644) {
                    let hole = u64::from(r.next().unwrap_or(0)) << 14;
                    let _ = f.set_len(hole);
                    let _ = std::io::Seek::seek(&mut f, std::io::SeekFrom::End(0));
                    let _ = f.write_all(b"end");
                }
            }
            4 => {
                let t = &targets[r.next().unwrap_or(0) as usize % targets.len()];
                let _ = dir.symlink(t, &name);
            }
            5 => {
                let _ = dir.mkfifo(&name, 0o644);
            }
            6 => {
                // A socket, bound by path under the tree's current directory (through /proc: no link followed on
                // the way, the last component is created new or the bind fails).
                let p = proc_path(dir).join(&name);
                let _ = std::os::unix::net::UnixListener::bind(p);
            }
            7 => {
                // A hard link: in the lower tree to the canary (the host's working directory may hold one), in
                // the upper one to an earlier name.
                let from = if op >> 7 == 1 {
                    canary.clone()
                } else {
                    let earlier = &names[r.next().unwrap_or(0) as usize % names.len()];
                    proc_path(dir).join(earlier)
                };
                if std::fs::symlink_metadata(&from).is_ok_and(|m| m.is_file()) {
                    let _ = std::fs::hard_link(&from, proc_path(dir).join(&name));
                }
            }
            8 => {
                if tree.len() > 1 {
                    tree.pop();
                }
            }
            _ => {
                let _ = dir.chmod(0o700 | u32::from(r.next().unwrap_or(0)) & 0o077);
            }
        }
    }
    drop(trees);

    let limits = changes::CopyLimits {
        max_file_bytes: 1 << 20,
        max_total_bytes: 2 << 20,
        max_entries: 64,
        max_depth: 4,
        max_dir_entries: 64,
        keep_free: 0,
    };
    let mut c = changes::collect(&upper, &lower, &limits).expect("the layer opens");
    let changes_dir = run.join("changes");
    changes::copy_tree(&upper, &changes_dir, &limits, &mut c).expect("the run directory's copy starts");
    let json = serde_json::to_vec(&c).expect("changes serialize");
    let back: repro_model::run::Changes = serde_json::from_slice(&json).expect("changes read back");
    assert_eq!(back, c, "changes round trip");
    changes::apply(&mut c, &changes_dir, &lower, &limits).expect("the working directory opens");

    assert_eq!(listing(&outside), before, "something outside the targets changed");
    let mut top: Vec<OsString> =
        std::fs::read_dir(&case).expect("lists").map(|e| e.expect("entry").file_name()).collect();
    top.sort();
    assert_eq!(top, ["lower", "outside", "run", "upper"], "something was made beside the targets");
    check_copy(&changes_dir, &upper);
    let _ = std::fs::remove_dir_all(&case);
}

/// The path of a directory held open, through /proc (what a caller with a path-only API needs).
/// Input bytes read in order (past the end: nothing).
struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Bytes<'a> {
    fn next(&mut self) -> Option<u8> {
        let b = self.data.get(self.at).copied();
        self.at += 1;
        b
    }
    fn take(&mut self, n: usize) -> &'a [u8] {
        let from = self.at.min(self.data.len());
        self.at = self.at.saturating_add(n);
        &self.data[from..self.at.min(self.data.len())]
    }
}

fn proc_path(dir: &repro_pack::extract::Beneath) -> std::path::PathBuf {
    use std::os::fd::{AsFd, AsRawFd};
    Path::new("/proc/self/fd").join(dir.as_fd().as_raw_fd().to_string())
}

/// Every entry of the copy `out` is a file, directory or link; a link holds what the same link of `upper` holds.
fn check_copy(out: &Path, upper: &Path) {
    for e in std::fs::read_dir(out).into_iter().flatten().flatten() {
        let p = e.path();
        let md = std::fs::symlink_metadata(&p).expect("a status");
        let ft = md.file_type();
        assert!(ft.is_file() || ft.is_dir() || ft.is_symlink(), "{} copied as {ft:?}", p.display());
        let u = upper.join(e.file_name());
        if ft.is_symlink() {
            assert_eq!(std::fs::read_link(&p).ok(), std::fs::read_link(&u).ok(), "{}", p.display());
        } else if ft.is_dir() {
            check_copy(&p, &u);
        }
    }
}

/// The scratch directory of a fuzzing process: `$REPRO_FUZZ_SCRATCH`, which must be a size-limited tmpfs
/// (`scripts/fuzz.sh` mounts one); without it the target refuses to start rather than write to a real disk.
pub fn scratch_from_env() -> &'static Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let Some(base) = std::env::var_os("REPRO_FUZZ_SCRATCH") else {
            let _ = writeln!(
                std::io::stderr(),
                "repro-fuzz: set REPRO_FUZZ_SCRATCH to a size-limited tmpfs directory (scripts/fuzz.sh does)"
            );
            std::process::exit(2);
        };
        let dir = Path::new(&base).join(format!("t{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("REPRO_FUZZ_SCRATCH is writable");
        dir
    })
}
