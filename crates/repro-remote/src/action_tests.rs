use super::*;
use crate::digest::digest_of;
use repro_model::manifest::FileEntry;

const B1: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const B2: &str = "2222222222222222222222222222222222222222222222222222222222222222";

fn entry(path: &str, kind: EntryKind, mode: u32) -> FileEntry {
    FileEntry {
        path: path.into(),
        path_hex: None,
        kind,
        mode,
        size: None,
        blake3: None,
        target: None,
        target_hex: None,
        access: Vec::new(),
        mtime_ns: None,
    }
}

fn file(path: &str, b3: &str, mode: u32) -> FileEntry {
    FileEntry { blake3: Some(b3.into()), size: Some(1), ..entry(path, EntryKind::File, mode) }
}

fn link(path: &str, target: &str) -> FileEntry {
    FileEntry { target: Some(target.into()), ..entry(path, EntryKind::Symlink, 0o777) }
}

fn base_files() -> Vec<FileEntry> {
    vec![
        entry("/", EntryKind::Dir, 0o755),
        entry("/usr", EntryKind::Dir, 0o755),
        entry("/usr/bin", EntryKind::Dir, 0o755),
        file("/usr/bin/tool", B1, 0o755),
        file("/usr/bin/data", B2, 0o644),
        file("/usr/bin/copy", B2, 0o644),
        link("/bin", "usr/bin"),
        link("/usr/bin/abs", "/usr/bin/tool"),
        FileEntry { size: Some(1 << 30), ..entry("/usr/bin/big-stat-only", EntryKind::Sized, 0o644) },
        entry("/usr/bin/listed", EntryKind::Listed, 0o644),
    ]
}

struct Fixture {
    dir: tempfile::TempDir,
    manifest: Manifest,
}

fn fixture(files: Vec<FileEntry>) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(B1), b"#!/bin/sh\necho tool\n").unwrap();
    std::fs::write(dir.path().join(B2), b"data\n").unwrap();
    let mut manifest: Manifest = serde_json::from_str(include_str!("testdata/manifest.json")).unwrap();
    manifest.files = files;
    // The pack's other blobs (stdout, stderr, ...) go under blobs/ in the input root.
    for (field, b3, _) in manifest.blob_refs() {
        if !field.starts_with("files[") {
            std::fs::write(dir.path().join(&b3), field.as_bytes()).unwrap();
        }
    }
    Fixture { dir, manifest }
}

fn build(f: &Fixture) -> Result<PackAction, RemoteError> {
    let json = serde_json::to_vec(&f.manifest).unwrap();
    pack_action(&PackContent {
        pack: Path::new("p.repro"),
        manifest: &f.manifest,
        manifest_json: &json,
        blob_dir: f.dir.path(),
    })
}

fn dir_of(a: &PackAction, d: &re::Digest) -> re::Directory {
    let Some(Blob::Bytes(b)) = a.blobs.get(d) else { panic!("directory {d:?} not among the blobs") };
    re::Directory::decode(b.as_slice()).unwrap()
}

fn child(a: &PackAction, d: &re::Directory, name: &str) -> re::Directory {
    let n = d.directories.iter().find(|n| n.name == name).unwrap_or_else(|| panic!("no directory {name}"));
    dir_of(a, n.digest.as_ref().unwrap())
}

/// The digest of `root/` (the closure; `manifest.json` beside it differs whenever the manifest does).
fn closure(a: &PackAction) -> re::Digest {
    let top = dir_of(a, &a.input_root_digest);
    top.directories.iter().find(|n| n.name == "root").unwrap().digest.clone().unwrap()
}

#[test]
fn the_same_pack_gives_the_same_digests() {
    let a = build(&fixture(base_files())).unwrap();
    let b = build(&fixture(base_files())).unwrap();
    assert_eq!(a.action_digest, b.action_digest);
    assert_eq!(a.input_root_digest, b.input_root_digest);
    assert_eq!(a.action_digest, digest_of(&a.action.encode_to_vec()));
    // Every digest the Action names is among the blobs.
    assert!(a.blobs.get(a.action.command_digest.as_ref().unwrap()).is_some());
    assert!(a.blobs.get(&a.input_root_digest).is_some());
}

#[test]
fn the_order_of_the_manifest_does_not_matter() {
    let a = build(&fixture(base_files())).unwrap();
    let mut files = base_files();
    files.reverse();
    files.swap(1, 4);
    let b = build(&fixture(files)).unwrap();
    assert_eq!(closure(&a), closure(&b));
}

#[test]
fn directories_are_canonical_and_hold_every_kind() {
    let a = build(&fixture(base_files())).unwrap();
    let top = dir_of(&a, &a.input_root_digest);
    assert_eq!(top.files.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["manifest.json"]);
    let root = child(&a, &top, "root");
    assert_eq!(
        root.symlinks.iter().map(|s| (s.name.as_str(), s.target.as_str())).collect::<Vec<_>>(),
        [("bin", "usr/bin")]
    );
    let bin = child(&a, &child(&a, &root, "usr"), "bin");
    let names: Vec<&str> = bin.files.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["copy", "data", "listed", "tool"], "sorted; the sized entry is left to the manifest");
    let tool = &bin.files[3];
    assert!(tool.is_executable);
    assert!(!bin.files[1].is_executable);
    assert_eq!(tool.digest.as_ref().unwrap(), &digest_of(b"#!/bin/sh\necho tool\n"));
    assert_eq!(bin.files[0].digest, bin.files[1].digest, "one content, one digest");
    assert_eq!(bin.files[2].digest.as_ref().unwrap(), &digest_of(b""));
    assert!(bin.files.iter().all(|f| f.node_properties.is_none()));
    // The absolute target is relative to the link's directory, below root/.
    assert_eq!(bin.symlinks[0].target, "../../usr/bin/tool");
    // blobs/ holds the pack's other blobs (stdout, stderr, ...), named by blake3.
    let f = fixture(base_files());
    let others: std::collections::BTreeSet<String> =
        f.manifest.blob_refs().into_iter().filter(|(field, _, _)| !field.starts_with("files[")).map(|r| r.1).collect();
    assert!(others.len() >= 2, "stdout and stderr at least");
    let blobs_dir = child(&a, &top, "blobs");
    let names: std::collections::BTreeSet<String> = blobs_dir.files.iter().map(|f| f.name.clone()).collect();
    assert_eq!(names, others);
    // The blobs: the two contents, the empty file, manifest.json, 4 directories and blobs/, the Command, the
    // Action, and the other blobs.
    assert_eq!(a.blobs.len(), 2 + 1 + 1 + 5 + 2 + others.len());
}

#[test]
fn an_executable_bit_changes_the_digest() {
    let a = build(&fixture(base_files())).unwrap();
    let mut files = base_files();
    files[4].mode = 0o744;
    let b = build(&fixture(files)).unwrap();
    assert_ne!(closure(&a), closure(&b));
    let mut files = base_files();
    files[4].mode = 0o640;
    let c = build(&fixture(files)).unwrap();
    assert_eq!(closure(&a), closure(&c), "only the execute bits are part of the tree");
}

#[test]
fn a_link_target_changes_the_digest() {
    let a = build(&fixture(base_files())).unwrap();
    let mut files = base_files();
    files[6] = link("/bin", "/usr/bin");
    let b = build(&fixture(files)).unwrap();
    assert_eq!(closure(&a), closure(&b), "/bin -> /usr/bin is /bin -> usr/bin");
    let mut files = base_files();
    files[6] = link("/bin", "usr/sbin");
    assert_ne!(closure(&a), closure(&build(&fixture(files)).unwrap()));
}

#[test]
fn the_command_replays_with_the_platform_of_the_pack() {
    let a = build(&fixture(base_files())).unwrap();
    assert_eq!(a.command.arguments, replay_argv());
    let p = a.action.platform.as_ref().unwrap();
    let props: Vec<(&str, &str)> = p.properties.iter().map(|p| (p.name.as_str(), p.value.as_str())).collect();
    assert_eq!(props, [("ISA", "x86-64"), ("OSFamily", "linux")]);
}

#[test]
fn bad_trees_are_refused_with_the_path() {
    let mut files = base_files();
    files.push(file("/usr/bin/tool/inner", B1, 0o644));
    let m = build(&fixture(files)).unwrap_err().to_string();
    assert!(m.contains("/usr/bin/tool/inner") && m.contains("not a directory"), "{m}");
    let mut files = base_files();
    files.push(file("/usr/bin/tool", B2, 0o644));
    let m = build(&fixture(files)).unwrap_err().to_string();
    assert!(m.contains("twice"), "{m}");
    let mut files = base_files();
    files[3].path_hex = Some("ff".into());
    let m = build(&fixture(files)).unwrap_err().to_string();
    assert!(m.contains("not UTF-8"), "{m}");
    let mut files = base_files();
    files[3].blake3 = Some("3".repeat(64));
    let m = build(&fixture(files)).unwrap_err().to_string();
    assert!(m.contains("cannot open"), "{m}");
}

#[test]
fn relative_targets() {
    assert_eq!(relative_target(0, "/usr/bin"), "usr/bin");
    assert_eq!(relative_target(2, "/etc/x"), "../../etc/x");
    assert_eq!(relative_target(1, "/"), "..");
    assert_eq!(relative_target(0, "/"), ".");
    assert_eq!(relative_target(3, "rel/x"), "rel/x");
    assert_eq!(relative_target(1, "//etc"), "../etc");
}
