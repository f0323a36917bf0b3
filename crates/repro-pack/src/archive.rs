//! The pack file: a deterministic tar (manifest.json first, then `blobs/<blake3>` sorted by digest; mtime 0,
//! uid/gid 0, mode 0644, no user or group names) compressed with zstd, one frame (with its content checksum) per
//! tar entry, so that the whole file decompresses as one stream to the tar.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use crate::extract::{Beneath, Limits};
pub use crate::frame::ZSTD_LEVEL;
use crate::frame::{frame, frames_of, parallel_map, tar_entry};
use crate::manifest::{Digest, Manifest, ManifestCheck, ManifestError, PACK_FORMAT};
use crate::store::{FrameCache, Store};
use crate::PackError;
use repro_model::tape::TAPE_VERSION;

/// The pack file's extension.
pub const EXTENSION: &str = "repro";

/// Where a blob's bytes come from when writing.
#[derive(Debug, Clone)]
pub enum BlobSource {
    Bytes(Vec<u8>),
    File(PathBuf),
}

/// The frame of blob `digest`: from the frame cache when it holds a good one, else read from `src` (checked
/// against the digest), compressed, and put in the cache.
pub(crate) fn blob_frame(digest: &Digest, src: &BlobSource, frames: Option<&FrameCache>) -> Result<Vec<u8>, PackError> {
    let name = format!("blobs/{digest}");
    if let Some(f) = frames.and_then(|c| c.get(digest)) {
        return Ok(f);
    }
    let (content, what) = match src {
        BlobSource::Bytes(b) => (std::borrow::Cow::Borrowed(b.as_slice()), PathBuf::from("(data)")),
        BlobSource::File(p) => {
            (std::borrow::Cow::Owned(fs::read(p).map_err(|e| PackError::io("cannot read", p, e))?), p.clone())
        }
    };
    let actual = blake3::hash(&content).to_hex().to_string();
    if &actual != digest {
        return Err(PackError::Closure {
            path: what,
            detail: format!("it changed while being packed (expected blake3 {digest}, read {actual})"),
        });
    }
    let entry =
        tar_entry(&name, &content).map_err(|e| PackError::Closure { path: what.clone(), detail: e.to_string() })?;
    let f =
        frames_of(&entry).map_err(|e| PackError::Closure { path: what, detail: format!("cannot compress: {e}") })?;
    if let Some(c) = frames {
        c.put(digest, &f);
    }
    Ok(f)
}

/// How much blob content is held in memory per batch of compression.
const BATCH_BYTES: u64 = 64 << 20;

/// The frames of `blobs`, in order, computed by [`workers`] threads a batch at a time; `emit` gets each in order.
fn each_frame(
    blobs: &BTreeMap<Digest, BlobSource>,
    frames: Option<&FrameCache>,
    mut emit: impl FnMut(Vec<u8>) -> Result<(), PackError>,
) -> Result<(), PackError> {
    let items: Vec<(&Digest, &BlobSource)> = blobs.iter().collect();
    let size_of = |s: &BlobSource| match s {
        BlobSource::Bytes(b) => b.len() as u64,
        BlobSource::File(p) => fs::metadata(p).map(|m| m.len()).unwrap_or(0),
    };
    let sizes: Vec<u64> = items.iter().map(|(_, src)| size_of(src)).collect();
    let mut start = 0;
    while start < items.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < items.len() && (end == start || bytes + sizes[end] <= BATCH_BYTES) && end - start < 4096 {
            bytes += sizes[end];
            end += 1;
        }
        for r in parallel_map(&items[start..end], |(d, src)| blob_frame(d, src, frames)) {
            let r = r.unwrap_or_else(|| {
                Err(PackError::Closure {
                    path: PathBuf::from("(pack writer)"),
                    detail: "a compression thread failed".into(),
                })
            });
            emit(r?)?;
        }
        start = end;
    }
    Ok(())
}

/// Writes a pack atomically: into a hidden temporary file next to `out`, then renamed. A writer killed half-way
/// leaves only a `.<name>.partial-*` file, never something named like a pack. With `store` (a thin pack), blobs
/// go to the store and only the manifest is in the pack.
///
/// Every tar entry is its own zstd frame (the manifest's, each blob's, the end-of-archive blocks), so the file
/// decompresses as one stream to the same tar; blob frames are compressed in parallel and, with `frames`, kept
/// in the frame cache so that the next pack of the same file copies the frame instead of compressing again.
pub fn write_pack(
    out: &Path,
    manifest: &Manifest,
    blobs: &BTreeMap<Digest, BlobSource>,
    store: Option<&Store>,
    frames: Option<&FrameCache>,
) -> Result<(), PackError> {
    let dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "pack".into());
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}.partial-"))
        .tempfile_in(&dir)
        .map_err(|e| PackError::io("cannot create a temporary file in", &dir, e))?;
    let werr = |e: io::Error| PackError::io("cannot write", out, e);
    let mut manifest_json = serde_json::to_vec_pretty(manifest).map_err(|e| PackError::Manifest {
        path: out.to_path_buf(),
        source: ManifestError::Shape(format!("cannot be written as JSON: {e}")),
    })?;
    manifest_json.push(b'\n');
    let file = tmp.as_file().try_clone().map_err(werr)?;
    let mut w = io::BufWriter::with_capacity(1 << 20, file);
    w.write_all(&frame(&tar_entry("manifest.json", &manifest_json).map_err(werr)?).map_err(werr)?).map_err(werr)?;
    match store {
        Some(s) => {
            for (digest, src) in blobs {
                let (reader, what): (Box<dyn Read>, PathBuf) = match src {
                    BlobSource::Bytes(b) => (Box::new(io::Cursor::new(b.clone())), PathBuf::from("(data)")),
                    BlobSource::File(p) => {
                        (Box::new(fs::File::open(p).map_err(|e| PackError::io("cannot read", p, e))?), p.clone())
                    }
                };
                s.put_reader(digest, reader, &what)?;
            }
        }
        None => each_frame(blobs, frames, |f| w.write_all(&f).map_err(werr))?,
    }
    w.write_all(&frame(&[0u8; 1024]).map_err(werr)?).map_err(werr)?;
    let file = w.into_inner().map_err(|e| werr(e.into_error()))?;
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644)).map_err(werr)?;
    file.sync_all().map_err(werr)?;
    tmp.persist(out).map_err(|e| PackError::io("cannot rename the finished pack to", out, e.error))?;
    Ok(())
}

/// A pack that was read and checked.
#[derive(Debug, Clone)]
pub struct Pack {
    pub path: PathBuf,
    pub manifest: Manifest,
    /// blake3 of manifest.json: identifies the pack's content (every blob is named in it).
    pub id: Digest,
    /// Size of the pack file.
    pub compressed_bytes: u64,
    /// Blobs and their sizes (from the pack, or from the store for a thin pack).
    pub blobs: BTreeMap<Digest, u64>,
}

fn classify(path: &Path, e: io::Error) -> PackError {
    let msg = e.to_string();
    let lower = msg.to_lowercase();
    if e.kind() == io::ErrorKind::UnexpectedEof || lower.contains("eof") || lower.contains("incomplete") {
        PackError::Truncated { path: path.to_path_buf(), detail: msg }
    } else {
        PackError::Corrupt { path: path.to_path_buf(), detail: msg }
    }
}

/// Reads and checks a pack with the default [`Limits`]; with `extract_to` (a directory made when missing),
/// each blob is also written to `extract_to/<digest>` (see [`read_pack_checked`]).
pub fn read_pack(path: &Path, store: &Store, extract_to: Option<&Path>) -> Result<Pack, PackError> {
    match extract_to {
        None => read_pack_checked(path, store, None, &Limits::default()),
        Some(dir) => {
            fs::create_dir_all(dir).map_err(|e| PackError::io("cannot create", dir, e))?;
            let b = Beneath::open(dir).map_err(|e| PackError::io("cannot open", dir, e))?;
            read_pack_checked(path, store, Some((&b, dir)), &Limits::default())
        }
    }
}

/// The name of a tar entry; one that cannot be decoded is refused.
fn entry_name(path: &Path, entry: &tar::Entry<'_, impl Read>) -> Result<String, PackError> {
    entry.path().map(|p| p.to_string_lossy().into_owned()).map_err(|e| PackError::BadEntry {
        path: path.into(),
        entry: "(a name that cannot be decoded)".into(),
        why: e.to_string(),
    })
}

/// What a tar entry type is, for an error.
fn entry_type_name(t: tar::EntryType) -> &'static str {
    match t {
        tar::EntryType::Symlink => "a symbolic link",
        tar::EntryType::Link => "a hard link",
        tar::EntryType::Char => "a character device",
        tar::EntryType::Block => "a block device",
        tar::EntryType::Fifo => "a fifo",
        tar::EntryType::Directory => "a directory",
        tar::EntryType::GNUSparse => "a sparse file",
        tar::EntryType::Continuous => "a contiguous file",
        _ => "an entry of an unknown type",
    }
}

/// Checks a tar entry's header before anything of it is used: a regular file with a plain relative name.
/// `earlier` are the names of the entries before it (a hard link to one of them is still refused, but named
/// as such).
fn check_entry(
    path: &Path,
    name: &str,
    entry: &tar::Entry<'_, impl Read>,
    earlier: &[String],
) -> Result<(), PackError> {
    let bad = |why: String| PackError::BadEntry { path: path.into(), entry: name.escape_debug().to_string(), why };
    if name.starts_with('/') {
        return Err(bad("an absolute name (a pack holds only manifest.json and blobs/<blake3>)".into()));
    }
    if name.split('/').any(|c| c == "..") {
        return Err(bad("a name with a '..' component (a pack holds only manifest.json and blobs/<blake3>)".into()));
    }
    let t = entry.header().entry_type();
    if t == tar::EntryType::Link {
        // Only for the message: the link is refused whatever its target.
        let target = entry.link_name().ok().flatten().map(|l| l.to_string_lossy().into_owned()).unwrap_or_default();
        let why = if earlier.contains(&target) {
            format!("a hard link to the earlier entry '{target}' (a pack stores each blob once, as a regular file)")
        } else {
            format!("a hard link to '{}', which is not an entry of the pack", target.escape_debug())
        };
        return Err(bad(why));
    }
    if !matches!(t, tar::EntryType::Regular) && t.as_byte() != b'\0' {
        let mut why = format!("{} (expected a regular file)", entry_type_name(t));
        if let Ok(Some(l)) = entry.link_name() {
            why.push_str(&format!(" pointing to '{}'", l.to_string_lossy().escape_debug()));
        }
        return Err(bad(why));
    }
    Ok(())
}

/// Reads and checks a pack: the manifest parses and passes every check of [`ManifestCheck::validate_untrusted`]
/// and the `limits`; each tar entry is a regular file named `manifest.json` (first) or `blobs/<digest>` of a
/// blob the manifest names, whose size in the tar header is the one the manifest says (checked before its
/// content is read) and whose content matches its name; every blob the manifest names is there (in the pack,
/// or in `store` for a thin pack); nothing else is; the stream ends properly.
///
/// With `extract` (a directory, and its name for messages), the manifest's footprint is first checked against
/// the free space there, then each blob is written to `<dir>/<digest>` (created with `O_EXCL`, at most the
/// declared number of bytes). The caller extracts into a staging directory it removes on error.
pub fn read_pack_checked(
    path: &Path,
    store: &Store,
    extract: Option<(&Beneath, &Path)>,
    limits: &Limits,
) -> Result<Pack, PackError> {
    let file = fs::File::open(path).map_err(|source| PackError::Open { path: path.into(), source })?;
    let compressed_bytes = file.metadata().map_err(|e| PackError::io("cannot stat", path, e))?.len();
    let dec = zstd::Decoder::new(file).map_err(|e| classify(path, e))?;
    let mut ar = tar::Archive::new(dec);
    let mut entries = ar.entries().map_err(|e| classify(path, e))?;
    let first = match entries.next() {
        Some(e) => e.map_err(|e| classify(path, e))?,
        None => return Err(PackError::Truncated { path: path.into(), detail: "it holds no manifest.json".into() }),
    };
    let first_name = entry_name(path, &first)?;
    check_entry(path, &first_name, &first, &[])?;
    if first_name != "manifest.json" {
        return Err(PackError::UnexpectedEntry {
            path: path.into(),
            entry: first_name,
            why: "the first entry must be manifest.json",
        });
    }
    let mbytes = read_manifest_entry(path, first, limits.max_manifest_bytes())?;
    let manifest = parse_manifest(path, &mbytes)?;
    limits.check(path, &manifest)?;
    let wanted: BTreeMap<Digest, (String, Option<u64>)> =
        manifest.blob_refs().into_iter().map(|(field, d, size)| (d, (field, size))).collect();
    if let Some((dir, shown)) = extract {
        crate::extract::check_space(path, &manifest, dir, shown)?;
    }
    let mut seen: BTreeMap<Digest, u64> = BTreeMap::new();
    let mut names = vec!["manifest.json".to_string()];
    let mut buf = vec![0u8; 1 << 16];
    for entry in entries {
        let mut entry = entry.map_err(|e| classify(path, e))?;
        let name = entry_name(path, &entry)?;
        check_entry(path, &name, &entry, &names)?;
        let Some(digest) = name.strip_prefix("blobs/") else {
            return Err(PackError::UnexpectedEntry { path: path.into(), entry: name, why: "not a blob" });
        };
        let Some((field, declared)) = wanted.get(digest) else {
            return Err(PackError::UnexpectedEntry {
                path: path.into(),
                entry: name.clone(),
                why: "the manifest does not refer to it",
            });
        };
        if seen.contains_key(digest) {
            return Err(PackError::UnexpectedEntry { path: path.into(), entry: name.clone(), why: "repeated" });
        }
        // The size in the tar header against the manifest's, before a byte of it is read or written.
        let header_size = entry.size();
        if let Some(expected) = declared {
            if *expected != header_size {
                return Err(PackError::SizeMismatch {
                    path: path.into(),
                    field: field.clone(),
                    digest: digest.to_string(),
                    expected: *expected,
                    actual: header_size,
                });
            }
        }
        let mut out = match extract {
            Some((dir, shown)) => {
                Some(dir.create_file(digest, 0o600).map_err(|e| PackError::io("cannot create a file in", shown, e))?)
            }
            None => None,
        };
        let mut hasher = blake3::Hasher::new();
        let mut len = 0u64;
        let mut limited = (&mut entry).take(header_size);
        loop {
            let n = limited.read(&mut buf).map_err(|e| classify(path, e))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            len += n as u64;
            if let (Some(o), Some((_, shown))) = (out.as_mut(), extract) {
                o.write_all(&buf[..n]).map_err(|e| PackError::io("cannot write a blob in", shown, e))?;
            }
        }
        if len != header_size {
            return Err(PackError::Truncated {
                path: path.into(),
                detail: format!("{name} ends after {len} of its {header_size} bytes"),
            });
        }
        let actual = hasher.finalize().to_hex().to_string();
        if actual != digest {
            return Err(PackError::DigestMismatch { path: path.into(), entry: name.clone(), actual });
        }
        seen.insert(digest.to_string(), len);
        names.push(name);
    }
    // The end of the stream: zstd checks its checksum once everything was read. What follows the tar's first
    // end block is its second one and perhaps padding to a record: more is not a pack (and is not read).
    const MAX_TRAILER: u64 = 1 << 20;
    let mut rest = Vec::new();
    ar.into_inner().take(MAX_TRAILER + 1).read_to_end(&mut rest).map_err(|e| classify(path, e))?;
    if rest.len() as u64 > MAX_TRAILER {
        return Err(PackError::Corrupt { path: path.into(), detail: "data after the end of the archive".into() });
    }
    // The tar ends with two zero blocks (the reader stopped at the first); a file cut between two frames
    // decompresses without error, so their absence is what shows it.
    if rest.len() < 512 || rest.iter().any(|&b| b != 0) {
        return Err(PackError::Truncated { path: path.into(), detail: "the end of the archive is missing".into() });
    }
    for (digest, (field, declared)) in &wanted {
        if seen.contains_key(digest) {
            continue;
        }
        if manifest.thin {
            if let Some(mut f) = store.open(digest) {
                let stored = f.metadata().map(|m| m.len()).unwrap_or(0);
                if let Some(expected) = declared {
                    if *expected != stored {
                        return Err(PackError::SizeMismatch {
                            path: path.into(),
                            field: field.clone(),
                            digest: digest.clone(),
                            expected: *expected,
                            actual: stored,
                        });
                    }
                }
                let mut out = match extract {
                    Some((dir, shown)) => Some(
                        dir.create_file(digest, 0o600)
                            .map_err(|e| PackError::io("cannot create a file in", shown, e))?,
                    ),
                    None => None,
                };
                let mut hasher = blake3::Hasher::new();
                let mut n = 0u64;
                let mut limited = (&mut f).take(stored);
                loop {
                    let k =
                        limited.read(&mut buf).map_err(|e| PackError::io("cannot read", store.path_of(digest), e))?;
                    if k == 0 {
                        break;
                    }
                    hasher.update(&buf[..k]);
                    n += k as u64;
                    if let (Some(o), Some((_, shown))) = (out.as_mut(), extract) {
                        o.write_all(&buf[..k]).map_err(|e| PackError::io("cannot write a blob in", shown, e))?;
                    }
                }
                if hasher.finalize().to_hex().as_str() != digest {
                    return Err(PackError::DigestMismatch {
                        path: path.into(),
                        entry: store.path_of(digest).display().to_string(),
                        actual: hasher.finalize().to_hex().to_string(),
                    });
                }
                seen.insert(digest.clone(), n);
                continue;
            }
        }
        return Err(PackError::MissingBlob {
            path: path.into(),
            field: field.clone(),
            digest: digest.clone(),
            store: if manifest.thin {
                format!(" nor in the store {} (it is a thin pack)", store.root.display())
            } else {
                String::new()
            },
        });
    }
    for (digest, (field, size)) in &wanted {
        if let (Some(expected), Some(&actual)) = (size, seen.get(digest)) {
            if *expected != actual {
                return Err(PackError::SizeMismatch {
                    path: path.into(),
                    field: field.clone(),
                    digest: digest.clone(),
                    expected: *expected,
                    actual,
                });
            }
        }
    }
    Ok(Pack { path: path.into(), id: crate::manifest::digest(&mbytes), manifest, compressed_bytes, blobs: seen })
}

/// Reads only the manifest (the first entry) and the pack's id, without checking the blobs: for a pack whose
/// root was already made (and checked) from the same manifest.
pub fn read_manifest(path: &Path) -> Result<(Manifest, Digest), PackError> {
    let file = fs::File::open(path).map_err(|source| PackError::Open { path: path.into(), source })?;
    let dec = zstd::Decoder::new(file).map_err(|e| classify(path, e))?;
    let mut ar = tar::Archive::new(dec);
    let mut entries = ar.entries().map_err(|e| classify(path, e))?;
    let first = match entries.next() {
        Some(e) => e.map_err(|e| classify(path, e))?,
        None => return Err(PackError::Truncated { path: path.into(), detail: "it holds no manifest.json".into() }),
    };
    if first.path().map(|p| p.to_string_lossy() != "manifest.json").unwrap_or(true) {
        return Err(PackError::UnexpectedEntry {
            path: path.into(),
            entry: "(first entry)".into(),
            why: "the first entry must be manifest.json",
        });
    }
    let mbytes = read_manifest_entry(path, first, Limits::default().max_manifest_bytes())?;
    Ok((parse_manifest(path, &mbytes)?, crate::manifest::digest(&mbytes)))
}

/// The bytes of the manifest entry, refused beyond `max` bytes (see [`Limits::max_manifest_bytes`]) before they
/// are read: a pack is untrusted, and a few kilobytes of zstd can claim gigabytes of manifest.
fn read_manifest_entry(path: &Path, entry: tar::Entry<'_, impl Read>, max: u64) -> Result<Vec<u8>, PackError> {
    let too_big = |size: u64| PackError::Limit {
        path: path.into(),
        what: format!("its manifest.json has {size} bytes"),
        limit: max,
        flag: "--max-entries",
    };
    let declared = entry.size();
    if declared > max {
        return Err(too_big(declared));
    }
    let mut mbytes = Vec::new();
    entry.take(max.saturating_add(1)).read_to_end(&mut mbytes).map_err(|e| classify(path, e))?;
    if mbytes.len() as u64 > max {
        return Err(too_big(mbytes.len() as u64));
    }
    Ok(mbytes)
}

/// Parses and validates manifest.json: a pack of a newer format, or whose tapes are of a newer version, is
/// refused as such before its fields are read (a newer format may have fields this version does not know).
pub fn parse_manifest(path: &Path, bytes: &[u8]) -> Result<Manifest, PackError> {
    let refused = |source: ManifestError| PackError::Manifest { path: path.into(), source };
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| refused(ManifestError::NotJson(e.to_string())))?;
    let format = v
        .get("format")
        .and_then(|f| f.as_u64())
        .ok_or_else(|| refused(ManifestError::field("format", "missing or not a number")))?;
    if format > PACK_FORMAT as u64 {
        return Err(PackError::UnsupportedFormat {
            path: path.into(),
            found: u32::try_from(format).unwrap_or(u32::MAX),
            supported: PACK_FORMAT,
        });
    }
    if let Some(version) = v.get("tapes").and_then(|t| t.get("version")).and_then(|t| t.as_u64()) {
        if version > u64::from(TAPE_VERSION) {
            return Err(PackError::UnsupportedTapes { path: path.into(), found: version, supported: TAPE_VERSION });
        }
    }
    let m: Manifest = serde_path_to_error::deserialize(v).map_err(|e| {
        let field = e.path().to_string();
        let why = e.into_inner().to_string();
        refused(if field == "." { ManifestError::Shape(why) } else { ManifestError::field(field, why) })
    })?;
    m.validate_untrusted().map_err(refused)?;
    Ok(m)
}
