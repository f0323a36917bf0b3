//! Escape attempts: packs (see main.rs for the rules these tests follow).
//!
//! Every pack here is crafted in the test (a zstd-compressed tar, see docs/pack-format.md) and aimed at canary
//! paths on a small tmpfs the test mounts (`size=256m,nr_inodes=20000`, unmounted at the end even on failure);
//! `repro pack verify`, `unpack` and `replay` run under `timeout`, as root and as an unprivileged caller. Each
//! asserts the exit status, that the message names the offending entry or field, that nothing outside the
//! target changed, and that no partial output is left behind.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

use crate::common::{stderr, stdout};
#[allow(unused_imports)]
use crate::harness::*;

/// One test's world on its own tmpfs: `canary/` (0777, one file) that no pack may touch, the pack, the cache,
/// and the unpack target `out`.
struct World {
    fs: Tmpfs,
}

const CANARY_TEXT: &str = "canary: untouched\n";

impl World {
    fn new() -> World {
        let w = World { fs: Tmpfs::bounded() };
        let canary = w.canary();
        fs::create_dir(&canary).unwrap();
        fs::set_permissions(&canary, fs::Permissions::from_mode(0o777)).unwrap();
        fs::write(canary.join("keep"), CANARY_TEXT).unwrap();
        fs::set_permissions(canary.join("keep"), fs::Permissions::from_mode(0o666)).unwrap();
        for d in ["cache-Root", "cache-Unprivileged", "state"] {
            fs::create_dir(w.p(d)).unwrap();
            fs::set_permissions(w.p(d), fs::Permissions::from_mode(0o777)).unwrap();
        }
        w
    }
    fn p(&self, name: &str) -> PathBuf {
        self.fs.path().join(name)
    }
    fn canary(&self) -> PathBuf {
        self.p("canary")
    }
    fn pack(&self) -> PathBuf {
        self.p("p.repro")
    }
    fn out(&self) -> PathBuf {
        self.p("out")
    }

    /// Every path on the tmpfs outside `out` and `cache`, with its type, mode and content.
    fn snapshot(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        fn walk(root: &Path, p: &Path, m: &mut BTreeMap<String, String>) {
            for e in fs::read_dir(p).unwrap().flatten() {
                let path = e.path();
                let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                if rel == "out" || rel.starts_with("cache") || rel == "state" {
                    continue;
                }
                let md = fs::symlink_metadata(&path).unwrap();
                let what = if md.file_type().is_symlink() {
                    format!("link {}", fs::read_link(&path).unwrap().display())
                } else if md.is_dir() {
                    walk(root, &path, m);
                    "dir".into()
                } else {
                    format!("file {}", String::from_utf8_lossy(&fs::read(&path).unwrap()))
                };
                m.insert(rel, format!("{what} mode {:o} uid {}", md.mode(), md.uid()));
            }
        }
        walk(self.fs.path(), self.fs.path(), &mut m);
        m
    }

    /// `repro ARGS` as `caller`, from the tmpfs, with its cache and state there, under `timeout 60`.
    fn repro(&self, caller: Caller, args: &[&str]) -> Output {
        let c = repro_as(caller, self.fs.path());
        let mut t = Command::new("timeout");
        t.arg("60").arg(c.get_program()).args(c.get_args()).args(args);
        t.current_dir(self.fs.path())
            .env("XDG_CACHE_HOME", self.p(&format!("cache-{caller:?}")))
            .env("REPRO_STATE_DIR", self.p("state"))
            .env("HOME", self.p("state"));
        t.output().expect("repro runs")
    }

    /// Runs `pack verify`, `unpack` and `replay` of the pack as both callers; each must exit `code` with every
    /// string of `names` in its message, change nothing outside `out` and leave no partial output.
    fn refused_everywhere(&self, code: i32, names: &[&str]) {
        self.refused_everywhere_with(code, names, &[]);
    }

    fn refused_everywhere_with(&self, code: i32, names: &[&str], extra: &[&str]) {
        let before = self.snapshot();
        let pack = self.pack().to_string_lossy().into_owned();
        let out = self.out().to_string_lossy().into_owned();
        for caller in CALLERS {
            for cmd in [vec!["pack", "verify", &pack], vec!["unpack", &pack, &out], vec!["replay", &pack]] {
                let mut args: Vec<&str> = cmd.clone();
                args.extend_from_slice(extra);
                let o = self.repro(caller, &args);
                let err = stderr(&o);
                assert_eq!(o.status.code(), Some(code), "{caller:?} repro {args:?}: {err}{}", stdout(&o));
                for n in names {
                    assert!(err.contains(n), "{caller:?} repro {args:?}: the message names {n:?}: {err}");
                }
                assert!(!err.contains("panicked"), "{err}");
                assert_eq!(self.snapshot(), before, "{caller:?} repro {args:?} changed something outside its target");
                self.assert_nothing_left(&format!("{caller:?} repro {args:?}"));
            }
        }
    }

    /// No unpack target, no staging directory, no root in the cache.
    fn assert_nothing_left(&self, what: &str) {
        assert!(!self.out().exists(), "{what}: the target was created");
        let roots = |c: &str| self.p(c).join("repro").join("roots");
        for dir in [self.fs.path().to_path_buf(), roots("cache-Root"), roots("cache-Unprivileged")] {
            for e in fs::read_dir(&dir).into_iter().flatten().flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                assert!(!n.contains("partial"), "{what}: left {}", e.path().display());
                assert!(dir == self.fs.path() || n.len() != 64, "{what}: a root was made in the cache: {n}");
            }
        }
        assert_eq!(fs::read_to_string(self.canary().join("keep")).unwrap(), CANARY_TEXT);
    }
}

fn digest(data: &[u8]) -> String {
    blake3::hash(data).to_hex().to_string()
}

/// A tar header with an arbitrary name (written into the field directly, so that absolute and `..` names
/// get through), type and size.
fn header(name: &str, kind: tar::EntryType, size: u64, mode: u32) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    let bytes = name.as_bytes();
    assert!(bytes.len() <= 100, "short names only: {name}");
    h.as_old_mut().name[..bytes.len()].copy_from_slice(bytes);
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(mode);
    h.set_mtime(0);
    h.set_cksum();
    h
}

/// A tar entry: header, `data`, padding.
fn entry(h: &tar::Header, data: &[u8]) -> Vec<u8> {
    let mut v = h.as_bytes().to_vec();
    v.extend_from_slice(data);
    v.resize(512 + data.len().div_ceil(512) * 512, 0);
    v
}

fn blob_entry(data: &[u8]) -> Vec<u8> {
    entry(&header(&format!("blobs/{}", digest(data)), tar::EntryType::Regular, data.len() as u64, 0o644), data)
}

fn blob_ref(data: &[u8]) -> Value {
    json!({"blake3": digest(data), "size": data.len()})
}

/// A manifest that passes every check: `sh -c 'exit 3'` in /work, no files (callers add theirs).
fn manifest(files: Value) -> Value {
    json!({
        "format": 1, "repro_version": "0.1.0",
        "command": {"argv": ["sh", "-c", "exit 3"], "cwd": "/work", "env": {"PATH": "/usr/bin:/bin"}},
        "determinism": {"supervised": true, "seed": 0, "epoch_unix": 0, "epoch_rfc3339": "1970-01-01T00:00:00Z",
                        "clock_step_ns": 1000},
        "resources": {"cpus": 1, "memory_bytes": 1u64 << 30},
        "system": {"arch": "x86_64", "kernel_release": "6.0", "libc_version": "glibc"},
        "result": {"outcome": "exited", "exit_status": 3, "stdout": blob_ref(b""), "stderr": blob_ref(b""),
                   "changes": []},
        "signature": {"exit_status": 3, "stderr_tail": []},
        "files": files,
    })
}

/// The pack bytes: manifest.json, the empty blob (stdout and stderr), the given entries, the end blocks.
fn pack_bytes(m: &Value, entries: &[Vec<u8>], end: bool) -> Vec<u8> {
    let mj = serde_json::to_vec_pretty(m).unwrap();
    let mut tar = entry(&header("manifest.json", tar::EntryType::Regular, mj.len() as u64, 0o644), &mj);
    tar.extend(blob_entry(b""));
    for e in entries {
        tar.extend_from_slice(e);
    }
    if end {
        tar.extend_from_slice(&[0u8; 1024]);
    }
    zstd::encode_all(&tar[..], 3).unwrap()
}

impl World {
    fn write_pack(&self, m: &Value, entries: &[Vec<u8>]) {
        fs::write(self.pack(), pack_bytes(m, entries, true)).unwrap();
        fs::set_permissions(self.pack(), fs::Permissions::from_mode(0o644)).unwrap();
    }
}

#[test]
fn symlink_then_a_file_under_it() {
    let w = World::new();
    let canary = w.canary().to_string_lossy().into_owned();
    let data = b"written through the link\n";
    // Absolute and relative link targets that both lead to the canary directory from the pack's root.
    for target in [canary.clone(), format!("../../../../../../..{canary}")] {
        let m = manifest(json!([
            {"path": "/a", "kind": "symlink", "mode": 0o777, "target": target},
            {"path": "/a/pwned", "kind": "file", "mode": 0o644, "size": data.len(), "blake3": digest(data)},
        ]));
        w.write_pack(&m, &[blob_entry(data)]);
        w.refused_everywhere(2, &["files[/a/pwned]", "its parent /a is a symbolic link"]);
        assert!(!w.canary().join("pwned").exists());
    }
    // The same through the working directory and the sandbox's mountpoints.
    for (files, named) in [
        (json!([{"path": "/work", "kind": "symlink", "mode": 0o777, "target": canary}]), "files[/work]"),
        (json!([{"path": "/etc", "kind": "symlink", "mode": 0o777, "target": canary}]), "files[/etc]"),
        (json!([{"path": "/tmp", "kind": "symlink", "mode": 0o777, "target": canary}]), "files[/tmp]"),
    ] {
        w.write_pack(&manifest(files), &[]);
        w.refused_everywhere(2, &[named, "a symbolic link"]);
    }
}

#[test]
fn absolute_and_dotdot_names() {
    let w = World::new();
    let canary = w.canary().to_string_lossy().into_owned();
    let data = b"escaped\n";
    let m = manifest(json!([]));
    // Tar entries with an absolute name and with `..`.
    let abs = format!("{canary}/abs");
    w.write_pack(&m, &[entry(&header(&abs, tar::EntryType::Regular, data.len() as u64, 0o644), data)]);
    w.refused_everywhere(2, &[&format!("entry '{abs}'"), "an absolute name"]);
    let dots = "blobs/../../canary/dots";
    w.write_pack(&m, &[entry(&header(dots, tar::EntryType::Regular, data.len() as u64, 0o644), data)]);
    w.refused_everywhere(2, &[&format!("entry '{dots}'"), "'..'"]);
    // Manifest paths with `..` and relative ones.
    for (p, named) in [
        ("/../../../../../../canary/x", "files[/../../../../../../canary/x]"),
        ("/usr/../../canary/x", "files[/usr/../../canary/x]"),
        ("canary/x", "canary/x"),
    ] {
        let m =
            manifest(json!([{"path": p, "kind": "file", "mode": 0o644, "size": data.len(), "blake3": digest(data)}]));
        w.write_pack(&m, &[blob_entry(data)]);
        w.refused_everywhere(2, &[named]);
    }
    // A working directory with `..` (the sandbox would create it).
    for cwd in ["/work/../../../../canary/cwd", "/../canary", "work", "/proc/1/root", "/work//x"] {
        let mut m = manifest(json!([]));
        m["command"]["cwd"] = json!(cwd);
        w.write_pack(&m, &[]);
        w.refused_everywhere(2, &["command.cwd", cwd]);
    }
    assert_eq!(fs::read_dir(w.canary()).unwrap().count(), 1);
}

#[test]
fn hard_links_devices_and_fifos() {
    let w = World::new();
    let keep = w.canary().join("keep").to_string_lossy().into_owned();
    let data = b"x";
    let d = digest(data);
    let m = manifest(json!([{"path": "/f", "kind": "file", "mode": 0o644, "size": 1, "blake3": d}]));
    // A hard link to a file outside the pack.
    let mut h = header(&format!("blobs/{d}"), tar::EntryType::Link, 0, 0o644);
    h.set_link_name(&keep).unwrap();
    h.set_cksum();
    w.write_pack(&m, &[entry(&h, b"")]);
    w.refused_everywhere(2, &[&format!("entry 'blobs/{d}'"), "a hard link", &keep]);
    // A hard link to an earlier entry: still not a blob.
    let mut h = header(&format!("blobs/{d}"), tar::EntryType::Link, 0, 0o644);
    h.set_link_name("manifest.json").unwrap();
    h.set_cksum();
    w.write_pack(&m, &[entry(&h, b"")]);
    w.refused_everywhere(2, &[&format!("entry 'blobs/{d}'"), "a hard link to the earlier entry 'manifest.json'"]);
    // A symbolic link entry, a character device (the numbers of /dev/null), a block device, a fifo.
    for (kind, what) in [
        (tar::EntryType::Symlink, "a symbolic link"),
        (tar::EntryType::Char, "a character device"),
        (tar::EntryType::Block, "a block device"),
        (tar::EntryType::Fifo, "a fifo"),
    ] {
        let mut h = header(&format!("blobs/{d}"), kind, 0, 0o666);
        h.set_device_major(1).unwrap();
        h.set_device_minor(3).unwrap();
        if kind == tar::EntryType::Symlink {
            h.set_link_name(&keep).unwrap();
        }
        h.set_cksum();
        w.write_pack(&m, &[entry(&h, b"")]);
        w.refused_everywhere(2, &[&format!("entry 'blobs/{d}'"), what]);
    }
    // Devices and fifos in the manifest: not a kind a pack can hold.
    for kind in ["char", "block", "fifo", "socket"] {
        w.write_pack(&manifest(json!([{"path": "/dev-x", "kind": kind, "mode": 0o666}])), &[]);
        w.refused_everywhere(2, &["manifest.json", &format!("unknown variant `{kind}`")]);
    }
}

#[test]
fn setuid_setgid_and_sticky_bits_are_stripped() {
    let w = World::new();
    let data = b"#!/bin/sh\nid\n";
    let m = manifest(json!([
        {"path": "/shared", "kind": "dir", "mode": 0o3777},
        {"path": "/shared/listed", "kind": "listed", "mode": 0o2755},
        {"path": "/shared/sized", "kind": "sized", "mode": 0o4755, "size": 4096},
        {"path": "/shared/suid", "kind": "file", "mode": 0o6755, "size": data.len(), "blake3": digest(data)},
    ]));
    w.write_pack(&m, &[blob_entry(data)]);
    for caller in CALLERS {
        let before = w.snapshot();
        let o = w.repro(caller, &["unpack", &w.pack().to_string_lossy(), &w.out().to_string_lossy()]);
        assert_eq!(o.status.code(), Some(0), "{caller:?}: {}", stderr(&o));
        let root = w.out().join("root");
        let mode = |p: &str| fs::symlink_metadata(root.join(p)).unwrap().mode() & 0o7777;
        assert_eq!(mode("shared"), 0o777, "{caller:?}: setgid and sticky dropped from the directory");
        assert_eq!(mode("shared/suid"), 0o755, "{caller:?}: setuid and setgid dropped");
        assert_eq!(mode("shared/sized"), 0o755);
        assert_eq!(mode("shared/listed"), 0o755);
        assert_eq!(fs::read(root.join("shared/suid")).unwrap(), data);
        assert_eq!(w.snapshot(), before);
        fs::remove_dir_all(w.out()).unwrap();
    }
    // verify says the pack is fine: the bits are only not applied.
    let o = w.repro(Caller::Root, &["pack", "verify", &w.pack().to_string_lossy()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn a_blob_claiming_4_gb() {
    let w = World::new();
    let big = 4u64 << 30;
    let data = b"only a few bytes";
    let d = digest(data);
    let name = format!("blobs/{d}");
    // The tar header claims 4 GB, the manifest 16 bytes: refused on the header, before a byte is written.
    let m = manifest(json!([{"path": "/f", "kind": "file", "mode": 0o644, "size": data.len(), "blake3": d}]));
    w.write_pack(&m, &[entry(&header(&name, tar::EntryType::Regular, big, 0o644), data)]);
    w.refused_everywhere(2, &[&d, &format!("has {big} bytes but files[/f] says {}", data.len())]);
    // Both claim 4 GB (and the stream ends early): refused before writing, it does not fit the 256 MB tmpfs.
    let m = manifest(json!([{"path": "/f", "kind": "file", "mode": 0o644, "size": big, "blake3": d}]));
    w.write_pack(&m, &[entry(&header(&name, tar::EntryType::Regular, big, 0o644), data)]);
    let before = w.snapshot();
    let pack = w.pack().to_string_lossy().into_owned();
    let out = w.out().to_string_lossy().into_owned();
    for caller in CALLERS {
        for args in [vec!["unpack", &pack, &out], vec!["replay", &pack]] {
            let o = w.repro(caller, &args);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(125), "{caller:?} {args:?}: {err}");
            assert!(err.contains(&format!("unpacking needs {big} bytes")), "{err}");
            assert!(err.contains("nothing was written"), "{err}");
            assert_eq!(w.snapshot(), before);
            w.assert_nothing_left(&format!("{caller:?} {args:?}"));
        }
        // With a lower limit, the limit refuses it first (everywhere, verify included).
        for args in [vec!["pack", "verify", &pack], vec!["unpack", &pack, &out], vec!["replay", &pack]] {
            let mut args = args.clone();
            args.extend(["--max-unpacked-size", "1G"]);
            let o = w.repro(caller, &args);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{caller:?} {args:?}: {err}");
            assert!(
                err.contains(&format!("it unpacks to {big} bytes")) && err.contains("--max-unpacked-size"),
                "{err}"
            );
            w.assert_nothing_left(&format!("{caller:?} {args:?}"));
        }
    }
    // verify reads the whole stream: truncated.
    let o = w.repro(Caller::Root, &["pack", "verify", &pack]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("truncated") && stderr(&o).contains(&name), "{}", stderr(&o));
}

#[test]
fn a_truncated_pack_leaves_nothing() {
    let w = World::new();
    // 1 MiB of content that does not compress, cut in the middle of its blob.
    let mut data = Vec::with_capacity(1 << 20);
    let mut x: u64 = 0x9e3779b97f4a7c15;
    while data.len() < 1 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.extend_from_slice(&x.to_le_bytes());
    }
    let m = manifest(json!([
        {"path": "/usr", "kind": "dir", "mode": 0o755},
        {"path": "/usr/a", "kind": "listed", "mode": 0o644},
        {"path": "/usr/big", "kind": "file", "mode": 0o644, "size": data.len(), "blake3": digest(&data)},
    ]));
    let full = pack_bytes(&m, &[blob_entry(&data)], true);
    fs::write(w.pack(), &full[..full.len() / 2]).unwrap();
    fs::set_permissions(w.pack(), fs::Permissions::from_mode(0o644)).unwrap();
    w.refused_everywhere(2, &["is truncated"]);
    // Cut between frames (the end blocks missing): also truncated.
    fs::write(w.pack(), pack_bytes(&m, &[blob_entry(&data)], false)).unwrap();
    w.refused_everywhere(2, &["is truncated", "the end of the archive is missing"]);
    // The whole pack unpacks.
    fs::write(w.pack(), &full).unwrap();
    let o = w.repro(Caller::Root, &["unpack", &w.pack().to_string_lossy(), &w.out().to_string_lossy()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(fs::read(w.out().join("root/usr/big")).unwrap(), data);
}

#[test]
fn too_many_entries() {
    let w = World::new();
    let files: Vec<Value> = std::iter::once(json!({"path": "/d", "kind": "dir", "mode": 0o755}))
        .chain((0..300).map(|i| json!({"path": format!("/d/f{i:04}"), "kind": "listed", "mode": 0o644})))
        .collect();
    w.write_pack(&manifest(Value::Array(files)), &[]);
    w.refused_everywhere_with(
        2,
        &["it holds 304 entries (301 paths", "limit of 100", "--max-entries"],
        &["--max-entries", "100"],
    );
    // Raised, it unpacks.
    let o = w.repro(
        Caller::Unprivileged,
        &["unpack", &w.pack().to_string_lossy(), &w.out().to_string_lossy(), "--max-entries", "400"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(fs::read_dir(w.out().join("root/d")).unwrap().count(), 300);
    fs::remove_dir_all(w.out()).unwrap();
    // More entries than the tmpfs has inodes, within the default limit: refused before a single one is made.
    let files: Vec<Value> = std::iter::once(json!({"path": "/d", "kind": "dir", "mode": 0o755}))
        .chain((0..25_000).map(|i| json!({"path": format!("/d/f{i:05}"), "kind": "listed", "mode": 0o644})))
        .collect();
    w.write_pack(&manifest(Value::Array(files)), &[]);
    let used = |w: &World| {
        let o = Command::new("stat").args(["-f", "-c", "%d"]).arg(w.fs.path()).output().unwrap();
        stdout(&o).trim().parse::<u64>().unwrap()
    };
    let free_inodes = used(&w);
    let pack = w.pack().to_string_lossy().into_owned();
    let out = w.out().to_string_lossy().into_owned();
    for args in [vec!["unpack", &pack, &out], vec!["replay", &pack]] {
        let o = w.repro(Caller::Root, &args);
        assert_eq!(o.status.code(), Some(125), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("inodes") && stderr(&o).contains("nothing was written"), "{}", stderr(&o));
        w.assert_nothing_left(&format!("{args:?}"));
        assert_eq!(used(&w), free_inodes, "{args:?}: no inode was used");
    }
}

#[test]
fn a_manifest_cannot_ask_for_binds_network_or_privileges() {
    let w = World::new();
    let canary = w.canary().to_string_lossy().into_owned();
    // Fields the sandbox has but a pack does not: refused as unknown, naming them.
    let asks: [(&str, &str, Value); 7] = [
        ("", "binds", json!([{"host": canary, "guest": "/x", "writable": true}])),
        ("command", "binds", json!([canary])),
        ("", "host_network", json!(true)),
        ("", "privileged", json!(true)),
        ("resources", "capabilities", json!(["CAP_SYS_ADMIN"])),
        ("", "user_namespace", json!(false)),
        ("", "keep_changes", json!(true)),
    ];
    for (under, field, value) in asks {
        let mut m = manifest(json!([]));
        if under.is_empty() {
            m[field] = value;
        } else {
            m[under][field] = value;
        }
        w.write_pack(&m, &[]);
        w.refused_everywhere(2, &["manifest.json", &format!("unknown field `{field}`")]);
    }
    // Fields a pack has, outside what `repro run` accepts.
    let bad: [(&str, &str, Value, &str); 9] = [
        ("determinism", "epoch_unix", json!(i64::MAX), "determinism.epoch_unix"),
        ("resources", "memory_bytes", json!(0), "resources.memory_bytes"),
        ("resources", "memory_bytes", json!(u64::MAX), "resources.memory_bytes"),
        ("resources", "cpus", json!(0), "resources.cpus"),
        ("determinism", "hostname", json!("a/b"), "determinism.hostname"),
        ("determinism", "dir_order", json!("random"), "determinism.dir_order"),
        ("tapes", "network_mode", json!("host"), "tapes.network_mode"),
        ("command", "env", json!({"A=B": "x"}), "command.env"),
        ("command", "argv", json!(["sh\u{0}x"]), "command.argv[0]"),
    ];
    for (under, field, value, named) in bad {
        let mut m = manifest(json!([]));
        if under == "tapes" {
            m["tapes"] = json!({});
        }
        m[under][field] = value;
        w.write_pack(&m, &[]);
        w.refused_everywhere(2, &[named]);
    }
}

/// A real pack, captured here: replay runs its command in the same sandbox as `repro run`, whatever the
/// manifest says about the network, and `--with` cannot reach through a link of the pack.
#[test]
fn replay_runs_in_the_sandbox_of_run() {
    let w = World::new();
    let work = w.p("work");
    fs::create_dir(&work).unwrap();
    fs::set_permissions(&work, fs::Permissions::from_mode(0o777)).unwrap();
    let script = "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; ls /sys/class/net; exit 3";
    let run = |args: &[&str]| {
        let mut c = Command::new("timeout");
        c.arg("60").arg(crate::common::repro_path()).args(args);
        c.current_dir(&work).env("XDG_CACHE_HOME", w.p("cache-Root")).env("REPRO_STATE_DIR", w.p("state"));
        c.output().unwrap()
    };
    let pack = w.pack().to_string_lossy().into_owned();
    let o = run(&["capture", "-q", "-o", &pack, "--", "sh", "-c", script]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let o = run(&["run", "-q", "--", "sh", "-c", script]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let in_run = stdout(&o);
    let o = run(&["replay", &pack]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), in_run, "replay's guest has the capabilities, seccomp and network of run's");
    assert_eq!(stdout(&o).lines().last(), Some("lo"), "only lo: {}", stdout(&o));

    // The manifest says its network was recorded from the host's (without a tape): still no host network.
    let (mut m, blobs) = unpack_pack(&w.pack());
    m["tapes"]["network_mode"] = json!("record");
    fs::write(w.pack(), repack(&m, &blobs)).unwrap();
    let o = run(&["replay", &pack]);
    assert_eq!(stdout(&o), in_run, "{}", stderr(&o));

    // A link of the pack in the working directory: --with cannot bind through it.
    let cwd = m["command"]["cwd"].as_str().unwrap().to_string();
    let files = m["files"].as_array_mut().unwrap();
    files.push(json!({"path": format!("{cwd}/sub"), "kind": "symlink", "mode": 0o777, "target": canary_of(&w)}));
    files.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
    fs::write(w.pack(), repack(&m, &blobs)).unwrap();
    fs::create_dir(work.join("sub")).unwrap();
    fs::write(work.join("sub/f"), "mine").unwrap();
    let before = w.snapshot();
    let o = run(&["replay", &pack, "--with", "sub/f"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--with sub/f") && stderr(&o).contains(&format!("under {cwd}/sub")), "{}", stderr(&o));
    assert_eq!(w.snapshot(), before);
    assert!(!w.canary().join("f").exists());
}

fn canary_of(w: &World) -> String {
    w.canary().to_string_lossy().into_owned()
}

/// The manifest and the blob entries of a pack.
fn unpack_pack(p: &Path) -> (Value, Vec<(String, Vec<u8>)>) {
    let dec = zstd::Decoder::new(fs::File::open(p).unwrap()).unwrap();
    let mut ar = tar::Archive::new(dec);
    let mut manifest = Value::Null;
    let mut blobs = Vec::new();
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        let name = e.path().unwrap().to_string_lossy().into_owned();
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut e, &mut data).unwrap();
        if name == "manifest.json" {
            manifest = serde_json::from_slice(&data).unwrap();
        } else {
            blobs.push((name, data));
        }
    }
    (manifest, blobs)
}

fn repack(m: &Value, blobs: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mj = serde_json::to_vec_pretty(m).unwrap();
    let mut tar = entry(&header("manifest.json", tar::EntryType::Regular, mj.len() as u64, 0o644), &mj);
    for (name, data) in blobs {
        tar.extend(entry(&header(name, tar::EntryType::Regular, data.len() as u64, 0o644), data));
    }
    tar.extend_from_slice(&[0u8; 1024]);
    zstd::encode_all(&tar[..], 3).unwrap()
}
