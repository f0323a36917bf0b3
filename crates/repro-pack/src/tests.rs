//! Round trips, determinism and damage detection of the pack file.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::manifest::*;
use crate::*;

pub(crate) fn sample_manifest(files: Vec<FileEntry>, stdout: &[u8], stderr: &[u8]) -> Manifest {
    Manifest {
        format: PACK_FORMAT,
        repro_version: "0.1.0".into(),
        command: CommandSpec {
            argv: vec!["python3".into(), "fail.py".into(), "it's".into()],
            cwd: "/work/proj".into(),
            env: BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]),
        },
        determinism: DeterminismSpec {
            supervised: true,
            seed: 7,
            epoch_unix: 1_700_000_000,
            epoch_rfc3339: "2023-11-14T22:13:20Z".into(),
            clock_step_ns: 1000,
            dir_order: repro_model::DirOrder::Sorted,
            hostname: "repro".into(),
            sched: Default::default(),
            spin_limit_ms: repro_model::run::DEFAULT_SPIN_LIMIT_MS,
        },
        resources: Resources { cpus: 1, memory_bytes: 4 << 30, pids_max: 4096 },
        system: System { arch: "x86_64".into(), kernel_release: "6.1.0".into(), libc_version: "glibc 2.36".into() },
        source: Source {
            git: Some(GitState { commit: "0123456789abcdef0123456789abcdef01234567".into(), uncommitted_digest: None }),
            lockfiles: vec![Lockfile { path: "requirements.txt".into(), blake3: digest(b"req") }],
        },
        result: RunResult {
            outcome: Outcome::Exited,
            exit_status: 1,
            stdout: BlobRef::of(stdout),
            stderr: BlobRef::of(stderr),
            changes: vec![],
        },
        signature: crate::signature::compute(1, stdout, stderr, &[]),
        files,
        tapes: Tapes { network_mode: NetworkMode::None, ..Default::default() },
        thin: false,
        secrets: Default::default(),
        environment: None,
        companions: Vec::new(),
    }
}

struct Fixture {
    dir: tempfile::TempDir,
    manifest: Manifest,
    blobs: BTreeMap<Digest, BlobSource>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("fail.py");
    fs::write(&script, b"raise SystemExit('boom')\n").unwrap();
    let (sd, ss) = (digest(b"raise SystemExit('boom')\n"), 25);
    let files = vec![
        FileEntry {
            path: "/usr".into(),
            path_hex: None,
            kind: EntryKind::Dir,
            mode: 0o755,
            size: None,
            blake3: None,
            target: None,
            target_hex: None,
            access: vec![],
            mtime_ns: None,
        },
        FileEntry {
            path: "/usr/bin/python3".into(),
            path_hex: None,
            kind: EntryKind::Symlink,
            mode: 0o777,
            size: None,
            blake3: None,
            target: Some("python3.11".into()),
            target_hex: None,
            access: vec![],
            mtime_ns: None,
        },
        FileEntry {
            path: "/usr/bin/python3.11".into(),
            path_hex: None,
            kind: EntryKind::Sized,
            mode: 0o755,
            size: Some(4096),
            blake3: None,
            target: None,
            target_hex: None,
            access: vec![AccessKind::Stat],
            mtime_ns: None,
        },
        FileEntry {
            path: "/work/proj/fail.py".into(),
            path_hex: None,
            kind: EntryKind::File,
            mode: 0o644,
            size: Some(ss),
            blake3: Some(sd.clone()),
            target: None,
            target_hex: None,
            access: vec![AccessKind::Open],
            mtime_ns: None,
        },
    ];
    let (out, err) = (b"".to_vec(), b"boom\n".to_vec());
    let manifest = sample_manifest(files, &out, &err);
    let mut blobs = BTreeMap::new();
    blobs.insert(sd, BlobSource::File(script));
    blobs.insert(digest(&out), BlobSource::Bytes(out));
    blobs.insert(digest(&err), BlobSource::Bytes(err));
    Fixture { dir, manifest, blobs }
}

fn store(f: &Fixture) -> Store {
    Store::at(f.dir.path().join("cas"))
}

fn write(f: &Fixture, name: &str) -> PathBuf {
    let p = f.dir.path().join(name);
    write_pack(&p, &f.manifest, &f.blobs, None, None).unwrap();
    p
}

#[test]
fn round_trip_and_byte_identical() {
    let f = fixture();
    let a = write(&f, "a.repro");
    let b = write(&f, "b.repro");
    assert_eq!(fs::read(&a).unwrap(), fs::read(&b).unwrap(), "same input, same bytes");
    let pack = read_pack(&a, &store(&f), None).unwrap();
    assert_eq!(pack.manifest, f.manifest);
    assert_eq!(pack.blobs.len(), 3);
    // No partial files are left next to the pack.
    let names: Vec<String> =
        fs::read_dir(f.dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(!names.iter().any(|n| n.contains("partial")), "{names:?}");
}

#[test]
fn tar_entries_are_sorted_and_normalized() {
    let f = fixture();
    let p = write(&f, "a.repro");
    let dec = zstd::Decoder::new(fs::File::open(&p).unwrap()).unwrap();
    let mut ar = tar::Archive::new(dec);
    let mut names = Vec::new();
    for e in ar.entries().unwrap() {
        let e = e.unwrap();
        let h = e.header();
        assert_eq!((h.mtime().unwrap(), h.uid().unwrap(), h.gid().unwrap(), h.mode().unwrap()), (0, 0, 0, 0o644));
        names.push(e.path().unwrap().to_string_lossy().into_owned());
    }
    assert_eq!(names[0], "manifest.json");
    let mut sorted = names[1..].to_vec();
    sorted.sort();
    assert_eq!(names[1..], sorted[..]);
    assert!(names[1..].iter().all(|n| n.starts_with("blobs/") && n.len() == 6 + 64));
}

/// Rewrites a pack with `edit` applied to its tar entries (name, data), keeping the format otherwise.
fn rewrite(src: &Path, dst: &Path, edit: impl Fn(&str, &mut Vec<u8>)) {
    let dec = zstd::Decoder::new(fs::File::open(src).unwrap()).unwrap();
    let mut ar = tar::Archive::new(dec);
    let mut enc = zstd::Encoder::new(fs::File::create(dst).unwrap(), 3).unwrap();
    {
        let mut b = tar::Builder::new(&mut enc);
        for e in ar.entries().unwrap() {
            let mut e = e.unwrap();
            let name = e.path().unwrap().to_string_lossy().into_owned();
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut data).unwrap();
            edit(&name, &mut data);
            let mut h = e.header().clone();
            h.set_size(data.len() as u64);
            h.set_cksum();
            b.append(&h, &data[..]).unwrap();
        }
        b.finish().unwrap();
    }
    enc.finish().unwrap().flush().unwrap();
}

#[test]
fn tampered_blob_is_named() {
    let f = fixture();
    let p = write(&f, "a.repro");
    let bad = f.dir.path().join("bad.repro");
    let target = f.manifest.files[3].blake3.clone().unwrap();
    rewrite(&p, &bad, |name, data| {
        if name.ends_with(&target) {
            data[0] = b'#';
        }
    });
    let err = read_pack(&bad, &store(&f), None).unwrap_err();
    assert!(matches!(err, PackError::DigestMismatch { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains(&target) && msg.contains("tampered"), "{msg}");
}

#[test]
fn tampered_manifest_is_rejected() {
    let f = fixture();
    let p = write(&f, "a.repro");
    let bad = f.dir.path().join("bad.repro");
    rewrite(&p, &bad, |name, data| {
        if name == "manifest.json" {
            let s = String::from_utf8(data.clone()).unwrap().replace("\"size\": 25", "\"size\": 26");
            *data = s.into_bytes();
        }
    });
    let msg = read_pack(&bad, &store(&f), None).unwrap_err().to_string();
    assert!(msg.contains("files[/work/proj/fail.py]") && msg.contains("26"), "{msg}");
    rewrite(&p, &bad, |name, data| {
        if name == "manifest.json" {
            *data = b"{\"format\": 99}".to_vec();
        }
    });
    let msg = read_pack(&bad, &store(&f), None).unwrap_err().to_string();
    assert!(msg.contains("format 99") && msg.contains("upgrade repro"), "{msg}");
    rewrite(&p, &bad, |name, data| {
        if name == "manifest.json" {
            let s = String::from_utf8(data.clone()).unwrap().replace("\"cwd\"", "\"cwdx\"");
            *data = s.into_bytes();
        }
    });
    let msg = read_pack(&bad, &store(&f), None).unwrap_err().to_string();
    assert!(msg.contains("manifest.json") && msg.contains("cwdx"), "{msg}");
}

/// A manifest as `repro capture` wrote it before the tape version was recorded (copied from a pack captured by
/// the code of that time): it still reads, as tape version 1, with every field typed.
#[test]
fn a_manifest_written_before_the_tape_version_reads() {
    let json = include_bytes!("testdata/manifest-format1-before-tape-version.json");
    assert!(!String::from_utf8_lossy(json).contains("\"version\""));
    let m = crate::archive::parse_manifest(Path::new("old.repro"), json).unwrap();
    assert_eq!(m.format, 1);
    assert_eq!((m.tapes.version, m.tapes.network_mode), (1, NetworkMode::None));
    assert_eq!(m.determinism.dir_order, repro_model::DirOrder::Sorted);
    assert_eq!((m.result.outcome, m.result.exit_status), (Outcome::Exited, 3));
    assert!(m.files.iter().any(|f| f.kind == EntryKind::File));
    // What this version writes for it has the version, and reads back the same.
    let again = serde_json::to_vec(&m).unwrap();
    assert!(String::from_utf8_lossy(&again).contains("\"version\":1"));
    assert_eq!(crate::archive::parse_manifest(Path::new("new.repro"), &again).unwrap(), m);
    // Older still: no `tapes` at all.
    let mut v: serde_json::Value = serde_json::from_slice(json).unwrap();
    v.as_object_mut().unwrap().remove("tapes");
    let m = crate::archive::parse_manifest(Path::new("older.repro"), &serde_json::to_vec(&v).unwrap()).unwrap();
    assert_eq!(m.tapes, Tapes::unversioned());
}

#[test]
fn a_pack_of_a_newer_tape_version_is_refused_naming_the_versions() {
    let f = fixture();
    let p = write(&f, "a.repro");
    let bad = f.dir.path().join("future.repro");
    let future = repro_model::tape::TAPE_VERSION + 1;
    rewrite(&p, &bad, |name, data| {
        if name == "manifest.json" {
            let mut v: serde_json::Value = serde_json::from_slice(data).unwrap();
            v["tapes"]["version"] = future.into();
            // A newer tape format may come with fields this version does not know: still refused by version.
            v["tapes"]["replies"] = serde_json::json!([]);
            *data = serde_json::to_vec(&v).unwrap();
        }
    });
    let e = read_pack(&bad, &store(&f), None).unwrap_err();
    assert!(matches!(e, PackError::UnsupportedTapes { found, .. } if found == u64::from(future)), "{e}");
    assert_eq!(e.exit_code(), 2);
    let msg = e.to_string();
    let want =
        format!("pack '{}': tapes.version {future}, this repro reads tape version 1: upgrade repro", bad.display());
    assert_eq!(msg, want);
    // Version 0 never existed: refused as a bad field.
    rewrite(&p, &bad, |name, data| {
        if name == "manifest.json" {
            let mut v: serde_json::Value = serde_json::from_slice(data).unwrap();
            v["tapes"]["version"] = 0.into();
            *data = serde_json::to_vec(&v).unwrap();
        }
    });
    let msg = read_pack(&bad, &store(&f), None).unwrap_err().to_string();
    assert!(msg.contains("manifest.json: tapes.version: 0 (this repro reads tape version 1 to 1)"), "{msg}");
}

#[test]
fn a_bad_mode_in_a_stranger_s_manifest_names_its_field() {
    let f = fixture();
    let p = write(&f, "a.repro");
    let bad = f.dir.path().join("bad.repro");
    for (under, field, value, named) in [
        ("determinism", "dir_order", "random", "determinism.dir_order: \"random\" is not a directory order"),
        ("tapes", "network_mode", "host", "tapes.network_mode: unknown variant `host`"),
        ("result", "outcome", "exploded", "result.outcome: unknown variant `exploded`"),
    ] {
        rewrite(&p, &bad, |name, data| {
            if name == "manifest.json" {
                let mut v: serde_json::Value = serde_json::from_slice(data).unwrap();
                v[under][field] = value.into();
                *data = serde_json::to_vec(&v).unwrap();
            }
        });
        let e = read_pack(&bad, &store(&f), None).unwrap_err();
        assert!(matches!(e, PackError::Manifest { .. }), "{e}");
        assert!(e.to_string().contains(&format!("manifest.json: {named}")), "{e}");
    }
    rewrite(&p, &bad, |name, data| {
        if name == "manifest.json" {
            let mut v: serde_json::Value = serde_json::from_slice(data).unwrap();
            v["files"][0]["access"] = serde_json::json!(["open", "write"]);
            *data = serde_json::to_vec(&v).unwrap();
        }
    });
    let e = read_pack(&bad, &store(&f), None).unwrap_err().to_string();
    assert!(e.contains("manifest.json: files[0].access[1]: unknown variant `write`"), "{e}");
}

#[test]
fn truncated_and_garbage_packs_are_rejected() {
    let f = fixture();
    let p = write(&f, "a.repro");
    let bytes = fs::read(&p).unwrap();
    for cut in [bytes.len() - 1, bytes.len() - 8, bytes.len() / 2, 20] {
        let t = f.dir.path().join("t.repro");
        fs::write(&t, &bytes[..cut]).unwrap();
        let err = read_pack(&t, &store(&f), None).unwrap_err();
        assert!(matches!(err, PackError::Truncated { .. }), "cut at {cut}: {err}");
        assert!(err.to_string().contains("is truncated"), "{err}");
    }
    let g = f.dir.path().join("g.repro");
    fs::write(&g, b"not a pack at all").unwrap();
    let err = read_pack(&g, &store(&f), None).unwrap_err();
    assert!(matches!(err, PackError::Corrupt { .. } | PackError::Truncated { .. }), "{err}");
    // A flipped byte in the compressed stream.
    let mut flipped = bytes.clone();
    let i = flipped.len() / 2;
    flipped[i] ^= 0x55;
    fs::write(&g, &flipped).unwrap();
    assert!(read_pack(&g, &store(&f), None).is_err());
}

#[test]
fn extra_and_missing_blobs_are_rejected() {
    let f = fixture();
    let mut blobs = f.blobs.clone();
    let script_digest = f.manifest.files[3].blake3.clone().unwrap();
    blobs.remove(&script_digest);
    let p = f.dir.path().join("missing.repro");
    write_pack(&p, &f.manifest, &blobs, None, None).unwrap();
    let msg = read_pack(&p, &store(&f), None).unwrap_err().to_string();
    assert!(msg.contains("files[/work/proj/fail.py]") && msg.contains("not in the pack"), "{msg}");
    let mut blobs = f.blobs.clone();
    blobs.insert(digest(b"extra"), BlobSource::Bytes(b"extra".to_vec()));
    write_pack(&p, &f.manifest, &blobs, None, None).unwrap();
    let msg = read_pack(&p, &store(&f), None).unwrap_err().to_string();
    assert!(msg.contains("does not refer to it"), "{msg}");
}

#[test]
fn thin_packs_use_the_store() {
    let f = fixture();
    let mut m = f.manifest.clone();
    m.thin = true;
    let s = store(&f);
    let p = f.dir.path().join("thin.repro");
    write_pack(&p, &m, &f.blobs, Some(&s), None).unwrap();
    let full = write(&f, "full.repro");
    assert!(fs::metadata(&p).unwrap().len() < fs::metadata(&full).unwrap().len());
    let pack = read_pack(&p, &s, None).unwrap();
    assert_eq!(pack.blobs.len(), 3);
    let d = m.files[3].blake3.clone().unwrap();
    fs::remove_file(s.path_of(&d)).unwrap();
    let msg = read_pack(&p, &s, None).unwrap_err().to_string();
    assert!(msg.contains("thin pack") && msg.contains(&d), "{msg}");
}

#[test]
fn materialize_and_unpack() {
    let f = fixture();
    let p = write(&f, "a.repro");
    let out = f.dir.path().join("out");
    let pack = summary::unpack(&p, &out, &store(&f)).unwrap();
    assert_eq!(fs::read(out.join("root/work/proj/fail.py")).unwrap(), b"raise SystemExit('boom')\n");
    assert_eq!(fs::read_link(out.join("root/usr/bin/python3")).unwrap(), Path::new("python3.11"));
    assert_eq!(fs::metadata(out.join("root/usr/bin/python3.11")).unwrap().len(), 4096);
    assert_eq!(fs::read(out.join("stderr")).unwrap(), b"boom\n");
    for d in ["proc", "sys", "dev", "tmp", "home/repro"] {
        assert!(out.join("root").join(d).is_dir(), "{d}");
    }
    assert!(out.join("root/etc/hosts").is_file());
    let m2: Manifest = serde_json::from_slice(&fs::read(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m2, pack.manifest);
    assert!(!out.join(".blobs").exists());
    let err = summary::unpack(&p, &out, &store(&f)).unwrap_err().to_string();
    assert!(err.contains("non-empty"), "{err}");
}

#[test]
fn the_layout_gives_back_the_recorded_times() {
    use std::os::unix::fs::MetadataExt;
    let mtime = |p: &Path| {
        let m = fs::symlink_metadata(p).unwrap();
        (m.mtime(), m.mtime_nsec())
    };
    // A pack without times: the layout's own (now), as before.
    let f = fixture();
    let out = f.dir.path().join("plain");
    summary::unpack(&write(&f, "plain.repro"), &out, &store(&f)).unwrap();
    assert!(mtime(&out.join("root/usr/bin/python3.11")).0 > 1_700_000_000, "no times recorded: left alone");

    // With times: each entry gets its own back (a directory, a link itself, a sized file), after everything in
    // it was made; an entry without one (the working directory's) gets one second before the recorded epoch.
    let mut f = fixture();
    let times =
        [("/usr", -5_000_000_001i64), ("/usr/bin/python3", 1_600_000_000_123_456_789), ("/usr/bin/python3.11", 42)];
    for e in f.manifest.files.iter_mut() {
        e.mtime_ns = times.iter().find(|(p, _)| *p == e.path).map(|(_, t)| *t);
    }
    let out = f.dir.path().join("timed");
    summary::unpack(&write(&f, "timed.repro"), &out, &store(&f)).unwrap();
    let root = out.join("root");
    assert_eq!(mtime(&root.join("usr")), (-6, 999_999_999), "a time before 1970");
    assert_eq!(mtime(&root.join("usr/bin/python3")), (1_600_000_000, 123_456_789), "the link, not its target");
    assert_eq!(mtime(&root.join("usr/bin/python3.11")), (0, 42));
    assert_eq!(mtime(&root.join("work/proj/fail.py")), (1_699_999_999, 0), "pinned: epoch - 1 s");
}

#[test]
fn inspect_summary_snapshot() {
    let f = fixture();
    let p = write(&f, "a.repro");
    let pack = read_pack(&p, &store(&f), None).unwrap();
    let mut s = summary::summarize(&pack);
    s.pack = "a.repro".into();
    s.sizes.pack_bytes = 1234;
    insta::assert_snapshot!(summary::render(&s));
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["signature"]["exit_status"], 1);
    assert_eq!(json["inputs"]["(working directory)"]["files"], 1);
}

#[test]
fn the_frame_cache_gives_the_same_bytes_and_survives_damage() {
    let f = fixture();
    let cache = store::FrameCache::at(f.dir.path().join("frames"));
    let plain = write(&f, "plain.repro");
    let cold = f.dir.path().join("cold.repro");
    write_pack(&cold, &f.manifest, &f.blobs, None, Some(&cache)).unwrap();
    let cached: Vec<_> = walk(&cache.root);
    assert_eq!(cached.len(), f.blobs.len(), "one frame per blob is kept: {cached:?}");
    let warm = f.dir.path().join("warm.repro");
    write_pack(&warm, &f.manifest, &f.blobs, None, Some(&cache)).unwrap();
    assert_eq!(fs::read(&plain).unwrap(), fs::read(&cold).unwrap());
    assert_eq!(fs::read(&cold).unwrap(), fs::read(&warm).unwrap(), "a cached frame gives the same pack");
    // A damaged frame in the cache is not used: the pack is the same and reads back.
    for p in &cached {
        let mut b = fs::read(p).unwrap();
        let i = b.len() / 2;
        b[i] ^= 0x40;
        fs::write(p, b).unwrap();
    }
    let again = f.dir.path().join("again.repro");
    write_pack(&again, &f.manifest, &f.blobs, None, Some(&cache)).unwrap();
    assert_eq!(fs::read(&plain).unwrap(), fs::read(&again).unwrap());
    read_pack(&again, &store(&f), None).unwrap();
    // The file decompresses as one stream to a plain tar (one zstd frame per entry).
    let tar = zstd::decode_all(fs::File::open(&again).unwrap()).unwrap();
    let names: Vec<String> = tar::Archive::new(&tar[..])
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names[0], "manifest.json");
    assert_eq!(names.len(), 1 + f.blobs.len());
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out.sort();
    out
}

#[test]
fn a_pack_cut_between_two_frames_is_truncated() {
    let f = fixture();
    let p = write(&f, "whole.repro");
    let bytes = fs::read(&p).unwrap();
    // Cut off the last frame (the end-of-archive blocks), then also the last blob's frame: every frame that is
    // left is whole, so only the missing end shows the damage.
    let mut cut = bytes.len();
    for _ in 0..2 {
        let mut at = cut - 1;
        while zstd::decode_all(&bytes[..at]).is_err() {
            at -= 1;
        }
        cut = at;
        let g = f.dir.path().join("cut.repro");
        fs::write(&g, &bytes[..cut]).unwrap();
        let err = read_pack(&g, &store(&f), None).unwrap_err().to_string();
        assert!(err.contains("is truncated: the end of the archive is missing"), "{err}");
    }
}

#[test]
fn a_large_blob_is_cut_into_frames_and_reads_back() {
    let f = fixture();
    // 9 MiB that compress poorly: three frames of the 4 MiB chunks.
    let mut big = vec![0u8; 9 << 20];
    let mut x = 0x9e3779b97f4a7c15u64;
    for b in big.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = (x >> 56) as u8;
    }
    let d = digest(&big);
    let mut m = f.manifest.clone();
    m.files.push(FileEntry {
        path: "/work/proj/big.bin".into(),
        path_hex: None,
        kind: EntryKind::File,
        mode: 0o644,
        size: Some(big.len() as u64),
        blake3: Some(d.clone()),
        target: None,
        target_hex: None,
        access: vec![AccessKind::Open],
        mtime_ns: None,
    });
    m.files.sort_by(|a, b| a.path.cmp(&b.path));
    let mut blobs = f.blobs.clone();
    blobs.insert(d.clone(), BlobSource::Bytes(big.clone()));
    let cache = store::FrameCache::at(f.dir.path().join("frames"));
    let (a, b) = (f.dir.path().join("a.repro"), f.dir.path().join("b.repro"));
    write_pack(&a, &m, &blobs, None, Some(&cache)).unwrap();
    write_pack(&b, &m, &blobs, None, Some(&cache)).unwrap();
    assert_eq!(fs::read(&a).unwrap(), fs::read(&b).unwrap());
    let out = f.dir.path().join("out");
    let pack = read_pack(&a, &store(&f), Some(&out)).unwrap();
    assert_eq!(pack.blobs[&d], big.len() as u64);
    assert_eq!(fs::read(out.join(&d)).unwrap(), big);
    let cached = cache.get(&d).unwrap();
    let mut frames = 0;
    let mut rest = &cached[..];
    while !rest.is_empty() {
        let n = zstd::zstd_safe::find_frame_compressed_size(rest).unwrap();
        rest = &rest[n..];
        frames += 1;
    }
    assert_eq!(frames, 3, "9 MiB and a header in 4 MiB frames");
}

#[test]
fn the_prefetcher_fills_the_caches_from_the_access_stream() {
    let d = tempfile::tempdir().unwrap();
    let stream = d.path().join("stream");
    fs::write(&stream, b"").unwrap();
    let data = d.path().join("data.txt");
    fs::write(&data, b"the guest reads this").unwrap();
    let frames = store::FrameCache::at(d.path().join("frames"));
    let opts =
        closure::ClosureOptions { excluded: vec![d.path().join("skip").display().to_string()], ..Default::default() };
    let scans = d.path().join("scans.json");
    let p =
        prefetch::Prefetcher::start(stream.clone(), opts, frames.clone(), d.path().join("digests.json"), scans.clone());
    fs::create_dir_all(d.path().join("skip")).unwrap();
    fs::write(d.path().join("skip/x"), b"excluded").unwrap();
    let mut s = fs::OpenOptions::new().append(true).open(&stream).unwrap();
    writeln!(s, "{}\n{}/skip/x\n/nonexistent/file", data.display(), d.path().display()).unwrap();
    let want = digest(b"the guest reads this");
    let start = std::time::Instant::now();
    while !frames.has(&want) && start.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    p.finish();
    assert!(frames.has(&want), "the file named in the stream was compressed into the cache");
    assert!(!frames.has(&digest(b"excluded")), "excluded paths are left alone");
    let scanned = crate::secrets::ScanCache::load(&scans);
    assert!(scanned.known(&want), "the file was searched for credentials while its bytes were in hand");
    assert!(!scanned.known(&digest(b"excluded")));
}

#[test]
fn unpack_lays_out_files_that_share_content_with_each_other_and_with_the_output() {
    let f = fixture();
    let mut m = f.manifest.clone();
    // Two files with the script's content (different modes), and an empty file: stdout is empty too.
    let sd = m.files[3].blake3.clone().unwrap();
    for (path, mode, d, size) in [
        ("/work/proj/copy.py", 0o755, sd.clone(), m.files[3].size),
        ("/work/proj/__init__.py", 0o644, digest(b""), Some(0)),
    ] {
        m.files.push(FileEntry {
            path: path.into(),
            path_hex: None,
            kind: EntryKind::File,
            mode,
            size,
            blake3: Some(d),
            target: None,
            target_hex: None,
            access: vec![AccessKind::Open],
            mtime_ns: None,
        });
    }
    m.files.sort_by(|a, b| a.path.cmp(&b.path));
    let p = f.dir.path().join("shared.repro");
    write_pack(&p, &m, &f.blobs, None, None).unwrap();
    let out = f.dir.path().join("unpacked");
    summary::unpack(&p, &out, &store(&f)).unwrap();
    let root = out.join("root/work/proj");
    assert_eq!(fs::read(root.join("fail.py")).unwrap(), b"raise SystemExit('boom')\n");
    assert_eq!(fs::read(root.join("copy.py")).unwrap(), b"raise SystemExit('boom')\n");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(fs::metadata(root.join("copy.py")).unwrap().permissions().mode() & 0o777, 0o755);
    assert_eq!(fs::metadata(root.join("fail.py")).unwrap().permissions().mode() & 0o777, 0o644);
    assert_eq!(fs::read(root.join("__init__.py")).unwrap(), b"");
    assert_eq!(fs::read(out.join("stdout")).unwrap(), b"");
    assert_eq!(fs::read(out.join("stderr")).unwrap(), b"boom\n");
    assert!(!out.join(".blobs").exists());
}

/// The layout itself never follows a link, even for a manifest that skipped validation: a symlink of the pack
/// then a file "under" it fails, and nothing is written where the link points.
#[test]
fn layout_never_follows_a_link_of_the_pack() {
    let d = tempfile::tempdir().unwrap();
    let outside = d.path().join("outside");
    fs::create_dir(&outside).unwrap();
    for target in
        [outside.to_string_lossy().into_owned(), "../../../../../../../../..".to_string() + &outside.to_string_lossy()]
    {
        let files = vec![
            FileEntry {
                path: "/a".into(),
                path_hex: None,
                kind: EntryKind::Symlink,
                mode: 0o777,
                size: None,
                blake3: None,
                target: Some(target),
                target_hex: None,
                access: vec![],
                mtime_ns: None,
            },
            FileEntry {
                path: "/a/x".into(),
                path_hex: None,
                kind: EntryKind::Listed,
                mode: 0o644,
                size: Some(0),
                blake3: None,
                target: None,
                target_hex: None,
                access: vec![],
                mtime_ns: None,
            },
        ];
        let m = sample_manifest(files, b"", b"");
        assert!(m
            .validate_untrusted()
            .unwrap_err()
            .to_string()
            .contains("files[/a/x]: its parent /a is a symbolic link"));
        let pack =
            Pack { path: "p".into(), manifest: m, id: String::new(), compressed_bytes: 0, blobs: BTreeMap::new() };
        let staging = extract::Staging::beside(&d.path().join("out")).unwrap();
        let blobs = staging.dir.subdir("blobs", Some(0o700)).unwrap();
        let root = staging.dir.subdir("root", Some(0o755)).unwrap();
        let err = tree::materialize(&pack, &blobs, &root, Path::new("root")).unwrap_err();
        assert!(err.to_string().contains("/a/x") || err.to_string().contains("root/a"), "{err}");
        drop(staging);
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 0, "nothing written through the link");
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1, "the staging directory is gone");
    }
}

#[test]
fn validation_names_the_field() {
    let base = || sample_manifest(vec![], b"", b"");
    let mut m = base();
    m.command.cwd = "/work/../../etc".into();
    assert!(m
        .validate_untrusted()
        .unwrap_err()
        .to_string()
        .starts_with("command.cwd: '/work/../../etc': it has a '..' component"));
    let mut m = base();
    m.resources.pids_max = 0;
    assert!(m.validate_untrusted().unwrap_err().to_string().starts_with("resources.pids_max: 0"));
    m.resources.pids_max = 4096;
    m.resources.memory_bytes = 0;
    assert!(m.validate_untrusted().unwrap_err().to_string().starts_with("resources.memory_bytes: 0"));
    let mut m = base();
    m.command.env.insert("A=B".into(), "x".into());
    assert!(m.validate_untrusted().unwrap_err().to_string().starts_with("command.env: the name 'A=B'"));
    let mut m = base();
    m.files = vec![FileEntry {
        path: "/etc".into(),
        path_hex: None,
        kind: EntryKind::Symlink,
        mode: 0o777,
        size: None,
        blake3: None,
        target: Some("/".into()),
        target_hex: None,
        access: vec![],
        mtime_ns: None,
    }];
    assert!(m.validate_untrusted().unwrap_err().to_string().starts_with("files[/etc]: a symbolic link where"));
    let mut m = base();
    m.files = vec![FileEntry {
        path: "/x".into(),
        path_hex: None,
        kind: EntryKind::Listed,
        mode: 0o100644,
        size: None,
        blake3: None,
        target: None,
        target_hex: None,
        access: vec![],
        mtime_ns: None,
    }];
    assert!(m.validate_untrusted().unwrap_err().to_string().starts_with("files[/x].mode"));
    assert_eq!(base().validate_untrusted(), Ok(()));
}

/// Into an existing empty directory (the current one, say): it keeps its inode and receives the content; the
/// staging directory beside it is gone.
#[test]
fn unpack_into_an_existing_empty_directory() {
    use std::os::unix::fs::MetadataExt;
    let f = fixture();
    let p = write(&f, "a.repro");
    let out = f.dir.path().join("empty");
    fs::create_dir(&out).unwrap();
    let ino = fs::metadata(&out).unwrap().ino();
    summary::unpack(&p, &out, &store(&f)).unwrap();
    assert_eq!(fs::metadata(&out).unwrap().ino(), ino);
    assert_eq!(fs::read(out.join("root/work/proj/fail.py")).unwrap(), b"raise SystemExit('boom')\n");
    let left: Vec<_> = fs::read_dir(f.dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("partial"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

fn entry(path: &str, path_hex: Option<&str>, kind: EntryKind, blob: Option<(&Digest, u64)>) -> FileEntry {
    FileEntry {
        path: path.into(),
        path_hex: path_hex.map(String::from),
        kind,
        mode: if kind == EntryKind::Dir { 0o755 } else { 0o644 },
        size: blob.map(|b| b.1).or((kind == EntryKind::Listed).then_some(0)),
        blake3: blob.map(|b| b.0.clone()),
        target: None,
        target_hex: None,
        access: vec![],
        mtime_ns: None,
    }
}

/// Names that are not UTF-8: kept with their exact bytes in `path_hex`, written into the manifest, read back and
/// unpacked with exactly those bytes (two names whose text is the same stay two files).
#[test]
fn names_that_are_not_utf8_round_trip_and_unpack_exactly() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let mut f = fixture();
    let data = b"bytes\n".to_vec();
    let d = digest(&data);
    f.blobs.insert(d.clone(), BlobSource::Bytes(data.clone()));
    // /work/proj/d\xff (a directory), in it x\xfe.txt (content) and x\xfd.txt (listed): the last two have the
    // same text.
    let hex = |b: &[u8]| repro_model::pathenc::to_hex(b);
    let dir = b"/work/proj/d\xff".to_vec();
    let x1 = [&dir[..], b"/x\xfd.txt"].concat();
    let x2 = [&dir[..], b"/x\xfe.txt"].concat();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    f.manifest.files.push(entry(&text(&dir), Some(&hex(&dir)), EntryKind::Dir, None));
    f.manifest.files.push(entry(&text(&x1), Some(&hex(&x1)), EntryKind::Listed, None));
    f.manifest.files.push(entry(&text(&x2), Some(&hex(&x2)), EntryKind::File, Some((&d, 6))));
    let link = [&dir[..], b"/to-\xfe"].concat();
    f.manifest.files.push(FileEntry {
        mode: 0o777,
        target: Some("x\u{fffd}.txt".into()),
        target_hex: Some(hex(b"x\xfe.txt")),
        ..entry(&text(&link), Some(&hex(&link)), EntryKind::Symlink, None)
    });
    f.manifest.files.sort_by(|a, b| a.bytes().cmp(&b.bytes()));
    f.manifest.result.changes.push(ChangedFile {
        path: "out-\u{fffd}".into(),
        path_hex: Some(hex(b"out-\xff")),
        kind: repro_model::run::ChangeKind::Added,
        blake3: None,
    });
    assert_eq!(f.manifest.validate_untrusted(), Ok(()));
    let p = write(&f, "a.repro");
    assert_eq!(fs::read(&p).unwrap(), fs::read(write(&f, "b.repro")).unwrap(), "same input, same bytes");
    let pack = read_pack(&p, &store(&f), None).unwrap();
    assert_eq!(pack.manifest, f.manifest);
    let out = f.dir.path().join("out");
    summary::unpack(&p, &out, &store(&f)).unwrap();
    let root = out.join("root");
    let on_disk = |b: &[u8]| root.join(OsStr::from_bytes(&b[1..]));
    assert!(on_disk(&dir).is_dir());
    assert_eq!(fs::read(on_disk(&x2)).unwrap(), data);
    assert_eq!(fs::read(on_disk(&x1)).unwrap(), b"");
    let mut names: Vec<Vec<u8>> =
        fs::read_dir(on_disk(&dir)).unwrap().map(|e| e.unwrap().file_name().as_bytes().to_vec()).collect();
    names.sort();
    assert_eq!(names, [b"to-\xfe".to_vec(), b"x\xfd.txt".to_vec(), b"x\xfe.txt".to_vec()]);
    assert_eq!(fs::read_link(on_disk(&link)).unwrap().as_os_str().as_bytes(), b"x\xfe.txt");
    // The manifest written by unpack keeps the exact bytes too.
    let mj = fs::read_to_string(out.join("manifest.json")).unwrap();
    assert!(mj.contains(&format!("\"path_hex\": \"{}\"", hex(&x2))), "{mj}");
}

/// `path_hex` is checked as `path` is: hex, normal, consistent with `path`; each error names the entry.
#[test]
fn path_hex_is_validated() {
    let hex = |b: &[u8]| repro_model::pathenc::to_hex(b);
    let with = |path: &str, h: String| {
        let mut m = sample_manifest(vec![entry(path, Some(&h), EntryKind::Listed, None)], b"", b"");
        m.files.insert(0, entry("/", None, EntryKind::Dir, None));
        m.validate_untrusted()
    };
    assert_eq!(with("/a\u{fffd}", hex(b"/a\xff")), Ok(()));
    let cases: [(&str, String, &str); 9] = [
        // `..` hidden in the bytes, with a `path` that looks harmless.
        ("/x/\u{fffd}", hex(b"/x/../../etc/\xff"), "files[/x/\u{fffd}].path_hex: its bytes read"),
        ("/../\u{fffd}", hex(b"/../\xff"), "files[/../\u{fffd}]: it has a '..' component"),
        ("/a\u{fffd}", "2f61f".into(), "files[/a\u{fffd}].path_hex: '2f61f' is not an even number"),
        ("/a\u{fffd}", "2F61FF".into(), "is not an even number of lowercase hex digits"),
        ("/a\u{fffd}", "+f61ff".into(), "is not an even number of lowercase hex digits"),
        ("/a\u{fffd}", hex(b"/b\xff"), "files[/a\u{fffd}].path_hex: its bytes read '/b\u{fffd}', not '/a\u{fffd}'"),
        ("/a\u{fffd}", hex(b"/a\xff\x00"), "its bytes read"),
        ("/a", hex(b"/a"), "files[/a].path_hex: names a UTF-8 path"),
        ("\u{fffd}", hex(b"\xff"), "files[\u{fffd}]: it is not absolute"),
    ];
    for (path, h, want) in cases {
        let err = with(path, h.clone()).unwrap_err().to_string();
        assert!(err.contains(want), "{path} {h}: {err}");
    }
    // `..` in the exact bytes where the text shows it too is refused by the bytes' own check as well.
    let e = exact_path("/a/../\u{fffd}", Some(&hex(b"/a/../\xff"))).unwrap();
    assert!(bad_guest_bytes(&e).unwrap().contains("'..' component"));
    // NUL is refused in the bytes (its text would show it too).
    let e = exact_path("/a\0\u{fffd}", Some(&hex(b"/a\0\xff"))).unwrap();
    assert!(bad_guest_bytes(&e).unwrap().contains("NUL"));
    // Too long a component, counted in bytes.
    let long = [&b"/"[..], &[0xffu8; 256][..]].concat();
    assert!(with(&String::from_utf8_lossy(&long), hex(&long))
        .unwrap_err()
        .to_string()
        .contains("longer than 255 bytes"));
    // Two entries with the same text but other bytes are two entries; the same bytes twice are refused.
    let mut m = sample_manifest(
        vec![
            entry("/", None, EntryKind::Dir, None),
            entry("/a\u{fffd}", Some(&hex(b"/a\xfe")), EntryKind::Listed, None),
            entry("/a\u{fffd}", Some(&hex(b"/a\xff")), EntryKind::Listed, None),
        ],
        b"",
        b"",
    );
    assert_eq!(m.validate_untrusted(), Ok(()));
    m.files[2].path_hex = Some(hex(b"/a\xfe"));
    assert!(m.validate_untrusted().unwrap_err().to_string().contains("out of order or repeated"));
    // An entry under a link of the pack, by bytes.
    let mut m = sample_manifest(
        vec![
            entry("/", None, EntryKind::Dir, None),
            FileEntry {
                target: Some("/etc".into()),
                target_hex: None,
                ..entry("/l\u{fffd}", Some(&hex(b"/l\xff")), EntryKind::Symlink, None)
            },
            entry("/l\u{fffd}/x", Some(&hex(b"/l\xff/x")), EntryKind::Listed, None),
        ],
        b"",
        b"",
    );
    m.files[1].mode = 0o777;
    assert!(m.validate_untrusted().unwrap_err().to_string().contains("its parent /l\u{fffd} is a symbolic link"));
    // A link's target_hex: hex, consistent with target, only on a link with a target.
    for (t, h, want) in [
        (Some("\u{fffd}"), Some("zz".to_string()), "files[/l].target_hex: 'zz'"),
        (Some("a\u{fffd}"), Some(hex(b"b\xff")), "files[/l].target_hex: its bytes read"),
        (Some("a\u{fffd}"), Some(hex(b"a\xff\0")), "files[/l].target_hex: its bytes read"),
        (None, Some(hex(b"a\xff")), "files[/l].target_hex: without a target"),
    ] {
        let l = FileEntry {
            mode: 0o777,
            target: t.map(String::from),
            target_hex: h,
            ..entry("/l", None, if t.is_some() { EntryKind::Symlink } else { EntryKind::Listed }, None)
        };
        let m = sample_manifest(vec![entry("/", None, EntryKind::Dir, None), l], b"", b"");
        let err = m.validate_untrusted().unwrap_err().to_string();
        assert!(err.contains(want), "{err}");
    }
    // result.changes[]: relative, normal bytes.
    for (path, h, want) in [
        ("\u{fffd}/x", hex(b"\xff/../../x"), "result.changes[\u{fffd}/x].path_hex"),
        ("\u{fffd}", hex(b"/\xff"), "result.changes[\u{fffd}].path_hex"),
        ("\u{fffd}", "zz".into(), "result.changes[\u{fffd}].path_hex: 'zz'"),
    ] {
        let mut m = sample_manifest(vec![], b"", b"");
        m.result.changes.push(ChangedFile {
            path: path.into(),
            path_hex: Some(h),
            kind: repro_model::run::ChangeKind::Added,
            blake3: None,
        });
        let err = m.validate_untrusted().unwrap_err().to_string();
        assert!(err.contains(want), "{err}");
    }
}

/// Regression (fuzz review): a 36 KB pack whose manifest.json entry claims 1 GiB made `repro inspect` read it
/// all into memory (1.6 GB RSS, a minute); a manifest beyond the limit (`Limits::max_manifest_bytes`) is refused before it is read.
#[test]
fn a_huge_manifest_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bomb.repro");
    let mut h = tar::Header::new_ustar();
    h.set_path("manifest.json").unwrap();
    h.set_size(crate::extract::Limits::default().max_manifest_bytes() + 1);
    h.set_mode(0o644);
    h.set_cksum();
    let mut tar = h.as_bytes().to_vec();
    tar.extend_from_slice(&[b' '; 4096]);
    fs::write(&p, zstd::bulk::compress(&tar, 1).unwrap()).unwrap();
    for err in
        [read_pack(&p, &Store::at(dir.path().join("s")), None).unwrap_err(), archive::read_manifest(&p).unwrap_err()]
    {
        let msg = err.to_string();
        assert!(
            msg.contains("bomb.repro") && msg.contains("its manifest.json has") && msg.contains("--max-entries"),
            "{msg}"
        );
        assert_eq!(err.exit_code(), 2);
    }
}

#[test]
fn the_schedule_is_recorded_only_when_it_is_not_the_default_and_replays() {
    let mut f = fixture();
    let default_json = String::from_utf8(serde_json::to_vec(&f.manifest).unwrap()).unwrap();
    assert!(!default_json.contains("\"sched\""), "the default schedule keeps older packs' bytes and ids");
    let sched = repro_model::SchedSettings {
        policy: repro_model::SchedPolicy::PCT,
        seed: 17,
        points: repro_model::SchedPoints::Io,
    };
    f.manifest.determinism.sched = sched;
    let p = write(&f, "pct.repro");
    let pack = read_pack(&p, &store(&f), None).unwrap();
    assert_eq!(pack.manifest.determinism.sched, sched);
    assert_eq!(crate::replay::settings(&pack, vec![]).sched, sched, "a replay runs the recorded schedule and points");
    // A variation changes one part and keeps the other.
    let mut s = crate::replay::settings(&pack, vec![]);
    crate::replay::Variation {
        sched: Some(crate::replay::SchedVariation { policy: None, seed: Some(3), points: None }),
        ..Default::default()
    }
    .apply(&mut s);
    assert_eq!(s.sched, repro_model::SchedSettings { seed: 3, ..sched });
    crate::replay::Variation {
        sched: Some(crate::replay::SchedVariation {
            points: Some(repro_model::SchedPoints::Blocking),
            ..Default::default()
        }),
        ..Default::default()
    }
    .apply(&mut s);
    assert_eq!(s.sched, repro_model::SchedSettings { seed: 3, points: repro_model::SchedPoints::Blocking, ..sched });
    // A stranger's policy that is not one is refused naming the field.
    let mut v: serde_json::Value = serde_json::from_slice(&serde_json::to_vec(&pack.manifest).unwrap()).unwrap();
    v["determinism"]["sched"]["policy"] = serde_json::json!("fifo");
    let e = crate::archive::parse_manifest(Path::new("bad.repro"), &serde_json::to_vec(&v).unwrap()).unwrap_err();
    assert!(e.to_string().contains("bad.repro"), "{e}");
}

#[test]
fn the_spin_limit_is_recorded_only_when_it_is_not_the_default_and_replays() {
    let mut f = fixture();
    let default_json = String::from_utf8(serde_json::to_vec(&f.manifest).unwrap()).unwrap();
    assert!(!default_json.contains("spin_limit_ms"), "the default limit keeps older packs' bytes and ids");
    f.manifest.determinism.spin_limit_ms = 7_000;
    let p = write(&f, "spin.repro");
    let pack = read_pack(&p, &store(&f), None).unwrap();
    assert_eq!(pack.manifest.determinism.spin_limit_ms, 7_000);
    assert_eq!(crate::replay::settings(&pack, vec![]).spin_limit_ms, 7_000, "a replay refuses where the capture did");
    // A stranger's limit that is not a number is refused naming the pack.
    let mut v: serde_json::Value = serde_json::from_slice(&serde_json::to_vec(&pack.manifest).unwrap()).unwrap();
    v["determinism"]["spin_limit_ms"] = serde_json::json!("forever");
    let e = crate::archive::parse_manifest(Path::new("bad.repro"), &serde_json::to_vec(&v).unwrap()).unwrap_err();
    assert!(e.to_string().contains("bad.repro"), "{e}");
    // Out of bounds (0 would refuse every threaded run, u64::MAX would turn the watchdog off): refused naming it.
    for ms in [0, u64::MAX] {
        v["determinism"]["spin_limit_ms"] = serde_json::json!(ms);
        let e = crate::archive::parse_manifest(Path::new("bad.repro"), &serde_json::to_vec(&v).unwrap()).unwrap_err();
        assert!(e.to_string().contains("determinism.spin_limit_ms"), "{ms}: {e}");
    }
}
