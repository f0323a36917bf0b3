//! File names that are not UTF-8 in packs: `repro capture` keeps them with their exact bytes (`path_hex` in the
//! manifest), `repro replay` has them, `repro unpack` writes them, and a manifest whose `path_hex` is bad is
//! refused (exit 2, naming the entry).

use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::*;

/// A working directory plus a directory aside for packs and the cache (not in the guest's listings).
struct Env {
    w: Workdir,
    aside: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        Env { w: Workdir::new(), aside: tempfile::Builder::new().prefix("repro-names-").tempdir().unwrap() }
    }
    fn pack(&self, name: &str) -> PathBuf {
        self.aside.path().join(name)
    }
    fn cmd(&self, args: &[&str]) -> Output {
        let mut c = repro();
        c.current_dir(self.w.path()).env("XDG_CACHE_HOME", self.aside.path().join("cache")).args(args);
        // Bounded: a replay that hangs fails the test instead of holding the machine.
        c.timeout(std::time::Duration::from_secs(120));
        c.output().expect("repro runs")
    }
    fn raw(&self, name: &[u8]) -> PathBuf {
        self.w.path().join(OsStr::from_bytes(name))
    }
}

/// Reads the names with byte 0xff/0xfe/0xfd/0xfc, a file's content by `os.open`, a file in a directory so named,
/// that directory's listing; exits 1 with all of it in the message (the failure signature's stderr).
const GUEST: &str = r#"import os
top = sorted(n for n in os.listdir(b".") if any(b in n for b in b"\xff\xfe\xfc"))
fd = os.open(b"data-\xff.txt", os.O_RDONLY)
data = os.read(fd, 100)
inner = open(b"dir-\xfe/inner-\xfd.txt", "rb").read()
sub = sorted(os.listdir(b"dir-\xfe"))
raise SystemExit("names %r data %r inner %r sub %r" % (top, data, inner, sub))
"#;

const EXPECTED: &str = "names [b'data-\\xff.txt', b'dir-\\xfe', b'listed-\\xfc'] data b'payload one' \
                        inner b'payload two' sub [b'inner-\\xfd.txt']";

fn setup() -> Env {
    let e = Env::new();
    fs::write(e.w.path().join("names.py"), GUEST).unwrap();
    fs::write(e.raw(b"data-\xff.txt"), b"payload one").unwrap();
    fs::create_dir(e.raw(b"dir-\xfe")).unwrap();
    fs::write(e.raw(b"dir-\xfe/inner-\xfd.txt"), b"payload two").unwrap();
    fs::write(e.raw(b"listed-\xfc"), b"only listed").unwrap();
    e
}

/// The manifest of a pack as JSON.
fn manifest_of(pack: &Path) -> serde_json::Value {
    let dec = zstd::Decoder::new(fs::File::open(pack).unwrap()).unwrap();
    let mut ar = tar::Archive::new(dec);
    let mut first = ar.entries().unwrap().next().unwrap().unwrap();
    let mut mj = Vec::new();
    first.read_to_end(&mut mj).unwrap();
    serde_json::from_slice(&mj).unwrap()
}

/// Rewrites `src` to `dst` with `edit` applied to its manifest (blobs unchanged; one zstd frame, which readers
/// take as well).
fn rewrite_manifest(src: &Path, dst: &Path, edit: impl Fn(&mut serde_json::Value)) {
    let dec = zstd::Decoder::new(fs::File::open(src).unwrap()).unwrap();
    let mut ar = tar::Archive::new(dec);
    let mut out = tar::Builder::new(Vec::new());
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        let name = e.path().unwrap().to_string_lossy().into_owned();
        let mut data = Vec::new();
        e.read_to_end(&mut data).unwrap();
        if name == "manifest.json" {
            let mut m: serde_json::Value = serde_json::from_slice(&data).unwrap();
            edit(&mut m);
            data = serde_json::to_vec_pretty(&m).unwrap();
        }
        let mut h = e.header().clone();
        h.set_size(data.len() as u64);
        h.set_cksum();
        out.append(&h, &data[..]).unwrap();
    }
    let tar = out.into_inner().unwrap();
    fs::write(dst, zstd::encode_all(&tar[..], 3).unwrap()).unwrap();
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn names_that_are_not_utf8_are_captured_replayed_and_unpacked_exactly() {
    let e = setup();
    let p = e.pack("names.repro");
    let o = e.cmd(&["capture", "-o", p.to_str().unwrap(), "--", "python3", "names.py"]);
    assert_code(&o, 1);
    assert!(stderr(&o).contains(EXPECTED), "{}", stderr(&o));
    assert!(!stderr(&o).contains("not packed"), "{}", stderr(&o));

    // The manifest has each name's exact bytes beside its text.
    let m = manifest_of(&p);
    let cwd = e.w.path().as_os_str().as_bytes();
    let entry = |rel: &[u8]| {
        let want = hex(&[cwd, b"/", rel].concat());
        m["files"].as_array().unwrap().iter().find(|f| f["path_hex"] == want.as_str()).cloned()
    };
    let data = entry(b"data-\xff.txt").expect("data-\\xff.txt is packed");
    assert_eq!(data["kind"], "file");
    assert_eq!(data["path"], format!("{}/data-\u{fffd}.txt", e.w.path().display()));
    assert_eq!(entry(b"dir-\xfe").expect("the directory is packed")["kind"], "dir");
    assert_eq!(entry(b"dir-\xfe/inner-\xfd.txt").expect("the file in it is packed")["kind"], "file");
    assert_eq!(entry(b"listed-\xfc").expect("a listed name is packed")["kind"], "listed");
    assert!(
        m["files"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f.get("path_hex").is_none() || f["path"].as_str().unwrap().contains('\u{fffd}')),
        "path_hex only for names that are not UTF-8"
    );

    let o = e.cmd(&["pack", "verify", p.to_str().unwrap()]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("ok"), "{}", stdout(&o));
    for args in [vec!["inspect", p.to_str().unwrap()], vec!["inspect", "--json", p.to_str().unwrap()]] {
        let o = e.cmd(&args);
        assert_code(&o, 0);
        assert!(stdout(&o).contains("(working directory)") || stdout(&o).contains("inputs"), "{}", stdout(&o));
    }

    // The working tree changes: the replay has the pack's files, by their exact names.
    fs::write(e.raw(b"data-\xff.txt"), b"changed").unwrap();
    fs::remove_file(e.raw(b"dir-\xfe/inner-\xfd.txt")).unwrap();
    let o = e.cmd(&["replay", p.to_str().unwrap()]);
    assert_code(&o, 0);
    let err = stderr(&o);
    assert!(err.contains("[repro] reproduced 1/1"), "{err}");
    assert!(err.contains(EXPECTED), "the replay read the packed files by their exact names: {err}");

    // unpack writes the exact bytes.
    let dir = e.aside.path().join("unpacked");
    let o = e.cmd(&["unpack", p.to_str().unwrap(), dir.to_str().unwrap()]);
    assert_code(&o, 0);
    let root = dir.join("root").join(e.w.path().strip_prefix("/").unwrap());
    assert_eq!(fs::read(root.join(OsStr::from_bytes(b"data-\xff.txt"))).unwrap(), b"payload one");
    assert_eq!(fs::read(root.join(OsStr::from_bytes(b"dir-\xfe/inner-\xfd.txt"))).unwrap(), b"payload two");
    assert_eq!(fs::read(root.join(OsStr::from_bytes(b"listed-\xfc"))).unwrap(), b"", "listed: an empty file");
    let mut names: Vec<Vec<u8>> =
        fs::read_dir(&root).unwrap().map(|d| d.unwrap().file_name().as_bytes().to_vec()).collect();
    names.retain(|n| n.iter().any(|b| *b >= 0x80));
    names.sort();
    assert_eq!(names, [b"data-\xff.txt".to_vec(), b"dir-\xfe".to_vec(), b"listed-\xfc".to_vec()]);

    // Two captures of the same run are still the same bytes.
    fs::write(e.raw(b"data-\xff.txt"), b"payload one").unwrap();
    fs::write(e.raw(b"dir-\xfe/inner-\xfd.txt"), b"payload two").unwrap();
    let (a, b) = (e.pack("a.repro"), e.pack("b.repro"));
    for x in [&a, &b] {
        assert_code(&e.cmd(&["capture", "-q", "-o", x.to_str().unwrap(), "--", "python3", "names.py"]), 1);
    }
    assert!(fs::read(&a).unwrap() == fs::read(&b).unwrap(), "two captures differ");
}

#[test]
fn a_bad_path_hex_is_refused_naming_the_entry() {
    let e = setup();
    let p = e.pack("names.repro");
    assert_code(&e.cmd(&["capture", "-q", "-o", p.to_str().unwrap(), "--", "python3", "names.py"]), 1);
    let cwd = e.w.path().as_os_str().as_bytes().to_vec();
    let good = hex(&[&cwd[..], b"/data-\xff.txt"].concat());
    let text = format!("{}/data-\u{fffd}.txt", e.w.path().display());
    // (new path_hex, what the error says)
    let cases: Vec<(String, String)> = vec![
        // `..` hidden in the bytes: their text is no longer the entry's `path`.
        (hex(&[&cwd[..], b"/../../../etc/\xff"].concat()), format!("files[{text}].path_hex: its bytes read")),
        (good[..good.len() - 1].to_string(), format!("files[{text}].path_hex: '")),
        (good.to_uppercase(), "is not an even number of lowercase hex digits".into()),
        (hex(&[&cwd[..], b"/data-x.txt"].concat()), format!("files[{text}].path_hex: names a UTF-8 path")),
        (hex(&[&cwd[..], b"/other-\xff.txt"].concat()), format!("not '{text}'")),
    ];
    for (i, (bad, want)) in cases.iter().enumerate() {
        let q = e.pack(&format!("bad-{i}.repro"));
        rewrite_manifest(&p, &q, |m| {
            for f in m["files"].as_array_mut().unwrap() {
                if f["path_hex"] == good.as_str() {
                    f["path_hex"] = bad.as_str().into();
                }
            }
        });
        let out = e.aside.path().join(format!("out-{i}"));
        for args in [
            vec!["pack", "verify", q.to_str().unwrap()],
            vec!["replay", q.to_str().unwrap()],
            vec!["unpack", q.to_str().unwrap(), out.to_str().unwrap()],
            vec!["inspect", q.to_str().unwrap()],
        ] {
            let o = e.cmd(&args);
            assert_code(&o, 2);
            assert!(stderr(&o).contains(want.as_str()), "{args:?} {bad}: {}", stderr(&o));
            assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
        }
        assert!(!out.exists(), "nothing unpacked");
    }
    // `..` both in the text and in the bytes: refused by the path check, naming the entry.
    let q = e.pack("dotdot.repro");
    rewrite_manifest(&p, &q, |m| {
        for f in m["files"].as_array_mut().unwrap() {
            if f["path_hex"] == good.as_str() {
                f["path"] = format!("{}/../x-\u{fffd}", e.w.path().display()).into();
                f["path_hex"] = hex(&[&cwd[..], b"/../x-\xff"].concat()).into();
            }
        }
    });
    let o = e.cmd(&["pack", "verify", q.to_str().unwrap()]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("/../x-\u{fffd}]: it has a '..' component"), "{}", stderr(&o));
    // A result.changes[] entry with a bad path_hex.
    let q = e.pack("changes.repro");
    rewrite_manifest(&p, &q, |m| {
        m["result"]["changes"] =
            serde_json::json!([{"path": "x\u{fffd}", "path_hex": hex(b"../x\xff"), "kind": "added", "blake3": null}]);
    });
    let o = e.cmd(&["pack", "verify", q.to_str().unwrap()]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("result.changes[x\u{fffd}].path_hex"), "{}", stderr(&o));
}
