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
            dir_order: "sorted".into(),
            hostname: "repro".into(),
        },
        resources: Resources { cpus: 1, memory_bytes: 4 << 30 },
        system: System { arch: "x86_64".into(), kernel_release: "6.1.0".into(), libc_version: "glibc 2.36".into() },
        source: Source {
            git: Some(GitState { commit: "0123456789abcdef0123456789abcdef01234567".into(), uncommitted_digest: None }),
            lockfiles: vec![Lockfile { path: "requirements.txt".into(), blake3: digest(b"req") }],
        },
        result: RunResult {
            outcome: "exited".into(),
            exit_status: 1,
            stdout: BlobRef::of(stdout),
            stderr: BlobRef::of(stderr),
            changes: vec![],
        },
        signature: Signature::compute(1, stdout, stderr, &[]),
        files,
        tapes: Tapes { network_mode: "none".into(), ..Default::default() },
        thin: false,
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
            kind: EntryKind::Dir,
            mode: 0o755,
            size: None,
            blake3: None,
            target: None,
            access: vec![],
        },
        FileEntry {
            path: "/usr/bin/python3".into(),
            kind: EntryKind::Symlink,
            mode: 0o777,
            size: None,
            blake3: None,
            target: Some("python3.11".into()),
            access: vec![],
        },
        FileEntry {
            path: "/usr/bin/python3.11".into(),
            kind: EntryKind::Sized,
            mode: 0o755,
            size: Some(4096),
            blake3: None,
            target: None,
            access: vec!["stat".into()],
        },
        FileEntry {
            path: "/work/proj/fail.py".into(),
            kind: EntryKind::File,
            mode: 0o644,
            size: Some(ss),
            blake3: Some(sd.clone()),
            target: None,
            access: vec!["open".into()],
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
        kind: EntryKind::File,
        mode: 0o644,
        size: Some(big.len() as u64),
        blake3: Some(d.clone()),
        target: None,
        access: vec!["open".into()],
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
    let p = prefetch::Prefetcher::start(stream.clone(), opts, frames.clone(), d.path().join("digests.json"));
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
            kind: EntryKind::File,
            mode,
            size,
            blake3: Some(d),
            target: None,
            access: vec!["open".into()],
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

/// Regression (fuzz review): a 36 KB pack whose manifest.json entry claims 1 GiB made `repro inspect` read it
/// all into memory (1.6 GB RSS, a minute); a manifest beyond MANIFEST_MAX_BYTES is refused before it is read.
#[test]
fn a_huge_manifest_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bomb.repro");
    let mut h = tar::Header::new_ustar();
    h.set_path("manifest.json").unwrap();
    h.set_size(archive::MANIFEST_MAX_BYTES + 1);
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
            msg.contains("bomb.repro") && msg.contains("more than the 67108864 bytes a manifest may have"),
            "{msg}"
        );
        assert_eq!(err.exit_code(), 2);
    }
}
