//! The frame format shared by the pack file (archive.rs) and the frame cache (store.rs): tar
//! entries with fixed metadata, each compressed as zstd frames at [`ZSTD_LEVEL`] with their content checksum.
//! Both sides depend on this module and not on each other.

use std::io;

/// zstd level of packs: fast to write (capture time matters), still much smaller than ReproZip's gzip.
pub const ZSTD_LEVEL: i32 = 3;

/// The ustar header of a pack entry: regular file, mode 0644, uid/gid 0, mtime 0.
pub(crate) fn header(path: &str, size: u64) -> Result<tar::Header, io::Error> {
    let mut h = tar::Header::new_ustar();
    h.set_path(path)?;
    h.set_size(size);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_cksum();
    Ok(h)
}

/// The tar entry `path` holding `content`: header, content and zero padding to the 512-byte block.
pub(crate) fn tar_entry(path: &str, content: &[u8]) -> Result<Vec<u8>, io::Error> {
    let h = header(path, content.len() as u64)?;
    let padded = content.len().div_ceil(512) * 512;
    let mut out = Vec::with_capacity(512 + padded);
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(content);
    out.resize(512 + padded, 0);
    Ok(out)
}

/// One zstd frame (level [`ZSTD_LEVEL`], content size and checksum in the frame) of `data`.
pub(crate) fn frame(data: &[u8]) -> Result<Vec<u8>, io::Error> {
    let mut c = zstd::bulk::Compressor::new(ZSTD_LEVEL)?;
    c.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))?;
    c.compress(data)
}

/// Entries larger than this are cut into frames of this size, compressed in parallel (a large executable would
/// otherwise keep one core busy while the others wait).
const CHUNK: usize = 4 << 20;

/// `data` as one frame, or as consecutive frames of [`CHUNK`] bytes compressed by [`workers`] threads.
pub(crate) fn frames_of(data: &[u8]) -> Result<Vec<u8>, io::Error> {
    if data.len() <= CHUNK {
        return frame(data);
    }
    let chunks: Vec<&[u8]> = data.chunks(CHUNK).collect();
    let mut out = Vec::new();
    for f in parallel_map(&chunks, |c| frame(c)) {
        out.extend_from_slice(&f.unwrap_or_else(|| Err(io::Error::other("a compression thread failed")))?);
    }
    Ok(out)
}

/// `f` of each item, in order, computed by [`workers`] threads taking the next item as they finish one; `None`
/// where a thread panicked.
pub(crate) fn parallel_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<Option<R>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let slots: Vec<std::sync::Mutex<Option<R>>> = items.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..workers().min(items.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let r = f(item);
                if let Ok(mut slot) = slots[i].lock() {
                    *slot = Some(r);
                }
            });
        }
    });
    slots.into_iter().map(|m| m.into_inner().ok().flatten()).collect()
}

/// How many blobs are compressed at once, and how much of their content is held in memory per batch.
pub(crate) fn workers() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).clamp(1, 8)
}
