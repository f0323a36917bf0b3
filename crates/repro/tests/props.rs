//! Property tests of the parsers of outside input that `fuzz.rs` does not cover with a round trip: `--env`,
//! `--bind`, `--dir-order`, `repro gc --older-than`, experiment durations (exactly, through their printed form),
//! non-UTF-8 path records, the secret-name list and its markers, and failure signatures of a guest's output.
//! Each asserts what must hold for any input, not only that nothing panics.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;
use repro_sandbox::parse::{normalize, parse_bind, parse_env, EnvSpec};

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config(256))]

    /// `--env NAME=VALUE` keeps the value exactly (`=` and all); `--env NAME` passes the host's; a bad name is an
    /// error that names `--env` and never repeats the value (it may be a secret).
    #[test]
    fn env_arguments(name in "[A-Za-z_][A-Za-z0-9_]{0,12}", value in "\\PC{0,24}", bad in "[0-9-][A-Za-z0-9_.-]{0,6}") {
        prop_assert_eq!(parse_env(&format!("{name}={value}")).unwrap(), EnvSpec::Set(name.clone(), value.clone()));
        prop_assert_eq!(parse_env(&name).unwrap(), EnvSpec::Pass(name.clone()));
        let secret = format!("s3cr3t-{value}");
        let e = parse_env(&format!("{bad}={secret}")).unwrap_err().to_string();
        prop_assert!(e.contains("--env"), "{}", e);
        prop_assert!(!e.contains(&secret), "the value is repeated: {}", e);
    }

    /// `--bind HOST[:GUEST][:ro|rw]` for an existing host path: the guest path is the normalized GUEST (or
    /// HOST), read-only unless `:rw`; `..` cannot climb above `/`.
    #[test]
    fn bind_arguments(
        guest in proptest::collection::vec(prop_oneof!["[a-z]{1,6}", Just("..".to_string()), Just(".".to_string())], 1..6),
        mode in prop_oneof![Just(""), Just(":ro"), Just(":rw")],
        relative in any::<bool>(),
    ) {
        let cwd = tempfile::tempdir().unwrap();
        std::fs::create_dir(cwd.path().join("data")).unwrap();
        let host = if relative { "data".to_string() } else { cwd.path().join("data").display().to_string() };
        let guest_text = format!("/{}", guest.join("/"));
        let want_guest = normalize(Path::new(&guest_text));
        let r = parse_bind(&format!("{host}:{guest_text}{mode}"), cwd.path());
        if want_guest == Path::new("/") {
            let e = r.unwrap_err().to_string();
            prop_assert!(e.contains("--bind") && e.contains("root"), "{}", e);
        } else {
            let b = r.unwrap();
            prop_assert_eq!(Path::new(&b.host), cwd.path().join("data"));
            prop_assert_eq!(Path::new(&b.guest), want_guest.as_path());
            prop_assert_eq!(b.writable, mode == ":rw");
            prop_assert!(!b.guest.split('/').any(|c| c == ".." || c == "."), "{}", b.guest);
        }
        // Without GUEST the guest path is the host's.
        let b = parse_bind(&format!("{host}{mode}"), cwd.path()).unwrap();
        prop_assert_eq!(&b.guest, &b.host);
    }

    /// A missing host path and a relative guest path are errors naming `--bind`.
    #[test]
    fn bind_errors_name_the_argument(name in "[a-z]{1,8}", guest in "[a-z]{1,8}") {
        let cwd = tempfile::tempdir().unwrap();
        let e = parse_bind(&format!("missing-{name}"), cwd.path()).unwrap_err().to_string();
        prop_assert!(e.contains("--bind") && e.contains("does not exist"), "{}", e);
        // (Prefixed, so that it is never a mode word: `HOST:rw` is HOST with a mode.)
        let e = parse_bind(&format!("{}:g{guest}", cwd.path().display()), cwd.path()).unwrap_err().to_string();
        prop_assert!(e.contains("--bind") && e.contains("must be absolute"), "{}", e);
    }

    /// `normalize` gives an absolute path without `.` or `..`, and is idempotent.
    #[test]
    fn normalized_paths(parts in proptest::collection::vec(prop_oneof!["[a-z]{1,4}", Just("..".to_string()), Just(".".to_string()), Just(String::new())], 0..8), absolute in any::<bool>()) {
        let text = format!("{}{}", if absolute { "/" } else { "" }, parts.join("/"));
        let n = normalize(Path::new(&text));
        prop_assert!(n.is_absolute());
        prop_assert!(n.components().all(|c| matches!(c, std::path::Component::RootDir | std::path::Component::Normal(_))), "{:?}", n);
        prop_assert_eq!(normalize(&n), n);
    }

    /// `--dir-order`: `sorted`, `reversed` and `shuffled:SEED` for any u64; nothing else.
    #[test]
    fn dir_orders(seed in any::<u64>(), junk in "\\PC{0,12}") {
        use repro_detcore::DirOrder;
        prop_assert_eq!(DirOrder::parse(&format!("shuffled:{seed}")), Some(DirOrder::Shuffled(seed)));
        prop_assert_eq!(DirOrder::parse("sorted"), Some(DirOrder::Sorted));
        prop_assert_eq!(DirOrder::parse("reversed"), Some(DirOrder::Reversed));
        let known = junk == "sorted" || junk == "reversed" || junk.strip_prefix("shuffled:").is_some_and(|n| n.parse::<u64>().is_ok());
        prop_assert_eq!(DirOrder::parse(&junk).is_some(), known, "{:?}", junk);
    }

    /// `repro gc --older-than`: a sum of numbers with units is their total; anything else names the argument.
    #[test]
    fn gc_ages(parts in proptest::collection::vec((0u64..1000, proptest::sample::select(vec![('s', 1u64), ('m', 60), ('h', 3600), ('d', 86400), ('w', 604800)])), 1..4), junk in "[a-z ]{1,6}") {
        use repro_sandbox::gc::parse_age;
        let text: String = parts.iter().map(|(n, (u, _))| format!("{n}{u}")).collect();
        let total: u64 = parts.iter().map(|(n, (_, mult))| n * mult).sum();
        prop_assert_eq!(parse_age("--older-than", &text).unwrap(), Duration::from_secs(total));
        // No digits: a unit without a number, another letter, or nothing at all.
        let e = parse_age("--older-than", &junk).unwrap_err().to_string();
        prop_assert!(e.contains("--older-than"), "{}", e);
    }

    /// An experiment's duration prints in a form that parses back to exactly the same duration.
    #[test]
    fn experiment_durations_round_trip(ms in 0u64..(30 * 86_400_000)) {
        use repro_chaos::model::{format_duration, parse_duration};
        let d = Duration::from_millis(ms);
        let printed = format_duration(d);
        prop_assert_eq!(parse_duration(&printed), Some(d), "{}", printed);
    }

    /// Paths in records: any bytes (without NUL) encode as text plus, when not UTF-8, hex; decoding gives the
    /// same bytes. Hex that is not a file name's is an error naming the path.
    #[test]
    fn path_records_round_trip(bytes in proptest::collection::vec(1u8..=255, 1..40), junk in "\\PC{0,12}") {
        use repro_model::pathenc::{decode, encode, from_hex, to_hex};
        let p = OsStr::from_bytes(&bytes);
        let (text, hex) = encode(p);
        prop_assert_eq!(hex.is_some(), std::str::from_utf8(&bytes).is_err());
        let decoded = decode(&text, hex.as_deref()).unwrap();
        prop_assert_eq!(decoded.as_os_str(), p);
        prop_assert_eq!(from_hex(&to_hex(&bytes)), Some(bytes.clone()));
        if from_hex(&junk).is_none() {
            let e = decode("some/path", Some(&junk)).unwrap_err();
            prop_assert!(e.to_string().contains("some/path"), "{}", e);
        }
    }

    /// Secret names: any name holding an extra part is secret; a marker hides the value, is recognized as a
    /// marker, and is the same for the same key and value.
    #[test]
    fn secret_names_and_markers(prefix in "[A-Z_]{0,5}", part in "[A-Z]{3,8}", suffix in "[A-Z_]{0,5}", value in "\\PC{4,24}", key in any::<[u8; 32]>()) {
        use repro_model::secrets::{is_marker, is_secret_name_with, marker_with, parse_extra};
        let extra = parse_extra(&format!(" ,{},", part.to_lowercase()));
        prop_assert_eq!(&extra, &vec![part.clone()]);
        let name = format!("{prefix}{part}{suffix}");
        prop_assert!(is_secret_name_with(&name, &extra), "{}", name);
        let m = marker_with(&key, &value);
        prop_assert!(is_marker(&m), "{}", m);
        prop_assert!(!m.contains(&value), "{}", m);
        prop_assert_eq!(marker_with(&key, &value), m);
    }

    /// A failure signature of any output: at most the last few normalized stderr lines, none empty, the exit
    /// status kept; it serializes and reads back equal and differs from itself in nothing.
    #[test]
    fn signatures_of_any_output(status in any::<i32>(), stdout in proptest::collection::vec(any::<u8>(), 0..300), stderr in proptest::collection::vec(prop_oneof!["\\PC{0,30}", "FAILED [a-z_./:]{1,20}", "\\s{0,3}"], 0..20)) {
        use repro_pack::signature::{Signature, STDERR_TAIL_LINES};
        let err = stderr.join("\n");
        let s = repro_pack::signature::compute(status, &stdout, err.as_bytes(), &[]);
        prop_assert_eq!(s.exit_status, status);
        prop_assert!(s.stderr_tail.len() <= STDERR_TAIL_LINES);
        prop_assert!(s.stderr_tail.iter().all(|l| !l.trim().is_empty()));
        let back: Signature = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        prop_assert_eq!(&back, &s);
        prop_assert!(s.differences(&s).is_empty());
        prop_assert_eq!(repro_pack::signature::compute(status, &stdout, err.as_bytes(), &[]), s);
    }

    /// JUnit XML from anywhere: failing test ids are found or not, never a panic.
    #[test]
    fn junit_of_any_text(text in "\\PC{0,200}", name in "[a-z_]{1,8}", class in "[a-z.]{1,8}") {
        use repro_pack::signature::failing_tests_in_junit;
        let _ = failing_tests_in_junit(&text);
        let xml = format!("<testsuite><testcase classname=\"{class}\" name=\"{name}\"><failure message=\"x\"/></testcase><testcase classname=\"{class}\" name=\"ok\"/></testsuite>");
        let found = failing_tests_in_junit(&xml);
        prop_assert_eq!(found.len(), 1, "{:?}", found);
        prop_assert!(found[0].contains(&name), "{:?}", found);
    }
}
