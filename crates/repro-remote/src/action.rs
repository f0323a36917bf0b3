//! A pack as a Remote Execution API v2 Action.
//!
//! The input root holds `manifest.json` (the pack's own bytes) and `root/`, the guest's file closure as a tree:
//! `file` entries with their content (executable when any execute bit is set), `listed` entries as empty files,
//! directories, and symbolic links. An absolute link target is made relative to the link's directory (`/a/l ->
//! /etc/x` becomes `../etc/x`): below `root/` it names the same entry, and REAPI servers may refuse absolute
//! targets (BuildGrid says `symlinkAbsolutePathStrategy: DISALLOWED`). `sized` entries (only stat'ed, replayed as
//! sparse files) are not in the tree: the manifest describes them. Every Directory message lists its files,
//! directories and links sorted by name, with no node properties (no times, no modes), so the same pack always
//! gives the same digests, whatever order the manifest lists its entries in. `blobs/<blake3>` holds the pack's
//! other blobs (stdout, stderr, tapes, environment), so that a worker rebuilds the pack from the input root
//! (`repro replay DIR`, see [`repro_pack::dirpack`]).

use crate::digest::{digest_of, digest_of_file, Blob, Blobs};
use crate::RemoteError;
use bazel_remote_apis::build::bazel::remote::execution::v2 as re;
use prost::Message;
use repro_model::manifest::{EntryKind, Manifest};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The Action of a pack and every blob it needs (protos and contents), keyed by SHA-256.
#[derive(Debug, Clone)]
pub struct PackAction {
    pub action: re::Action,
    pub action_digest: re::Digest,
    pub command: re::Command,
    pub input_root_digest: re::Digest,
    pub blobs: Blobs,
}

enum Node {
    Dir(BTreeMap<String, Node>),
    File { digest: re::Digest, executable: bool },
    Symlink(String),
}

/// Where the blobs of a pack are: `dir/<blake3>` (as [`repro_pack::read_pack`] extracts them).
pub struct PackContent<'a> {
    /// The pack's path, for messages.
    pub pack: &'a Path,
    pub manifest: &'a Manifest,
    /// The exact bytes of the pack's `manifest.json`.
    pub manifest_json: &'a [u8],
    pub blob_dir: &'a Path,
}

/// The argv the worker runs in the input root (see docs/remote.md).
pub fn replay_argv() -> Vec<String> {
    ["repro", "replay", "--json", "."].map(String::from).to_vec()
}

/// Builds the Action of a pack.
pub fn pack_action(p: &PackContent<'_>) -> Result<PackAction, RemoteError> {
    let mut blobs = Blobs::new();
    let mut root = BTreeMap::new();
    let bad =
        |path: &str, reason: String| RemoteError::Tree { pack: p.pack.to_path_buf(), path: path.to_string(), reason };
    let mut by_blake3: BTreeMap<&str, re::Digest> = BTreeMap::new();
    for e in &p.manifest.files {
        if e.path_hex.is_some() || e.target_hex.is_some() {
            return Err(bad(&e.path, "a name that is not UTF-8 cannot be a Remote Execution API path".into()));
        }
        let comps: Vec<&str> = e.path.split('/').filter(|c| !c.is_empty()).collect();
        let node = match e.kind {
            EntryKind::Dir => Node::Dir(BTreeMap::new()),
            EntryKind::Sized => continue,
            EntryKind::Listed => {
                let d = blobs.add_bytes(Vec::new());
                Node::File { digest: d, executable: e.mode & 0o111 != 0 }
            }
            EntryKind::File => {
                let b3 = e.blake3.as_deref().ok_or_else(|| bad(&e.path, "a file without a blake3 digest".into()))?;
                let digest = match by_blake3.get(b3) {
                    Some(d) => d.clone(),
                    None => {
                        let path = p.blob_dir.join(b3);
                        let d = digest_of_file(&path)?;
                        blobs.insert(d.clone(), Blob::File(path));
                        by_blake3.insert(b3, d.clone());
                        d
                    }
                };
                Node::File { digest, executable: e.mode & 0o111 != 0 }
            }
            EntryKind::Symlink => {
                let t = e.target.as_deref().ok_or_else(|| bad(&e.path, "a link without a target".into()))?;
                Node::Symlink(relative_target(comps.len().saturating_sub(1), t))
            }
        };
        insert(&mut root, &comps, node).map_err(|r| bad(&e.path, r))?;
    }
    let mut top = BTreeMap::new();
    let m = blobs.add_bytes(p.manifest_json.to_vec());
    top.insert("manifest.json".to_string(), Node::File { digest: m, executable: false });
    top.insert(repro_pack::dirpack::ROOT_DIR.to_string(), Node::Dir(root));
    // The other blobs a pack holds (stdout, stderr, tapes, environment), by blake3: a worker rebuilds the pack.
    let mut others = BTreeMap::new();
    for (field, b3, _) in p.manifest.blob_refs() {
        if field.starts_with("files[") || others.contains_key(&b3) {
            continue;
        }
        let digest = match by_blake3.get(b3.as_str()) {
            Some(d) => d.clone(),
            None => {
                let path = p.blob_dir.join(&b3);
                let d = digest_of_file(&path)?;
                blobs.insert(d.clone(), Blob::File(path));
                d
            }
        };
        others.insert(b3, Node::File { digest, executable: false });
    }
    top.insert(repro_pack::dirpack::BLOBS_DIR.to_string(), Node::Dir(others));
    let input_root_digest = directory(&top, &mut blobs);
    let platform = platform(&p.manifest.system.arch);
    // Command.platform is deprecated since API 2.2 (it moved to the Action) but servers of 2.0 and 2.1 read it there.
    #[allow(deprecated)]
    let command = re::Command { arguments: replay_argv(), platform: Some(platform.clone()), ..Default::default() };
    let command_digest = blobs.add_bytes(command.encode_to_vec());
    let action = re::Action {
        command_digest: Some(command_digest),
        input_root_digest: Some(input_root_digest.clone()),
        platform: Some(platform),
        ..Default::default()
    };
    let action_bytes = action.encode_to_vec();
    let action_digest = blobs.add_bytes(action_bytes);
    Ok(PackAction { action, action_digest, command, input_root_digest, blobs })
}

/// OSFamily and ISA, sorted by name as REAPI requires.
pub(crate) fn platform(arch: &str) -> re::Platform {
    let isa = match arch {
        "x86_64" => "x86-64",
        "aarch64" => "arm-a64",
        "i686" | "i386" => "x86-32",
        other => other,
    };
    let prop = |name: &str, value: &str| re::platform::Property { name: name.into(), value: value.into() };
    re::Platform { properties: vec![prop("ISA", isa), prop("OSFamily", "linux")] }
}

/// `target` as seen from a link `depth` directories below the root: absolute targets become relative.
pub fn relative_target(depth: usize, target: &str) -> String {
    let Some(rest) = target.strip_prefix('/') else { return target.to_string() };
    let rest = rest.trim_start_matches('/');
    let up: Vec<&str> = std::iter::repeat_n("..", depth).collect();
    match (up.is_empty(), rest.is_empty()) {
        (true, true) => ".".into(),
        (true, false) => rest.into(),
        (false, true) => up.join("/"),
        (false, false) => format!("{}/{rest}", up.join("/")),
    }
}

fn insert(dir: &mut BTreeMap<String, Node>, comps: &[&str], node: Node) -> Result<(), String> {
    let Some((last, parents)) = comps.split_last() else {
        // The root itself: only a directory may be there.
        return match node {
            Node::Dir(_) => Ok(()),
            _ => Err("the root is not a directory".into()),
        };
    };
    let mut cur = dir;
    for c in parents {
        let next = cur.entry((*c).to_string()).or_insert_with(|| Node::Dir(BTreeMap::new()));
        cur = match next {
            Node::Dir(d) => d,
            _ => return Err(format!("its parent '{c}' is not a directory in the pack")),
        };
    }
    match (cur.get(*last), &node) {
        (Some(Node::Dir(_)), Node::Dir(_)) => Ok(()),
        (Some(_), _) => Err("listed twice in the manifest".into()),
        (None, _) => {
            cur.insert((*last).to_string(), node);
            Ok(())
        }
    }
}

/// The digest of the Directory of `entries` (children first), each message added to `blobs`.
fn directory(entries: &BTreeMap<String, Node>, blobs: &mut Blobs) -> re::Digest {
    let mut d = re::Directory::default();
    // BTreeMap order is the byte order of the UTF-8 names: REAPI's canonical order.
    for (name, node) in entries {
        match node {
            Node::Dir(children) => {
                let digest = directory(children, blobs);
                d.directories.push(re::DirectoryNode { name: name.clone(), digest: Some(digest) });
            }
            Node::File { digest, executable } => d.files.push(re::FileNode {
                name: name.clone(),
                digest: Some(digest.clone()),
                is_executable: *executable,
                node_properties: None,
            }),
            Node::Symlink(target) => {
                d.symlinks.push(re::SymlinkNode { name: name.clone(), target: target.clone(), node_properties: None })
            }
        }
    }
    blobs.add_bytes(d.encode_to_vec())
}

/// Reads a pack (checked as every reader does), extracts its blobs under `work` and builds its Action.
pub fn action_of_pack(pack: &Path, work: &Path) -> Result<PackAction, RemoteError> {
    let store = repro_pack::Store::default_store();
    let blob_dir: PathBuf = work.join("blobs");
    let read = repro_pack::read_pack(pack, &store, Some(&blob_dir))?;
    let manifest_json = read_manifest_bytes(pack)?;
    if repro_model::manifest::digest(&manifest_json) != read.id {
        return Err(RemoteError::Tree {
            pack: pack.to_path_buf(),
            path: "manifest.json".into(),
            reason: "changed while being read".into(),
        });
    }
    pack_action(&PackContent { pack, manifest: &read.manifest, manifest_json: &manifest_json, blob_dir: &blob_dir })
}

/// The bytes of the first entry, `manifest.json`, of a pack that [`repro_pack::read_pack`] has checked.
fn read_manifest_bytes(pack: &Path) -> Result<Vec<u8>, RemoteError> {
    use std::io::Read;
    let f = std::fs::File::open(pack).map_err(|e| RemoteError::io("cannot open", pack, e))?;
    let z = zstd::stream::read::Decoder::new(f).map_err(|e| RemoteError::io("cannot decompress", pack, e))?;
    let mut tar = tar::Archive::new(z);
    let mut entries = tar.entries().map_err(|e| RemoteError::io("cannot read", pack, e))?;
    let mut first = entries
        .next()
        .ok_or_else(|| RemoteError::Tree { pack: pack.into(), path: "manifest.json".into(), reason: "missing".into() })?
        .map_err(|e| RemoteError::io("cannot read", pack, e))?;
    let mut out = Vec::new();
    first
        .by_ref()
        .take(repro_pack::Limits::default().max_manifest_bytes())
        .read_to_end(&mut out)
        .map_err(|e| RemoteError::io("cannot read", pack, e))?;
    Ok(out)
}

/// The SHA-256 digest of some bytes (as [`digest_of`]), for callers holding a proto.
pub fn digest_of_message(m: &impl Message) -> re::Digest {
    digest_of(&m.encode_to_vec())
}

#[cfg(test)]
#[path = "action_tests.rs"]
mod tests;
