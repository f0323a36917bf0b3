//! Packing while the guest runs: the supervisor appends each path whose content the guest uses to an access
//! stream (`RunExtras::access_stream`); a thread here follows it and hashes and compresses those files into the
//! digest and frame caches, on a core the guest leaves idle. When the run ends the pack is written as always
//! ([`crate::closure`], [`crate::archive::write_pack`]) and finds most of its work done. Only caches are
//! written, so what this thread does or misses changes the time of a capture, never its pack.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::archive::blob_frame;
use crate::closure::ClosureOptions;
use crate::secrets::ScanCache;
use crate::store::{DigestCache, FrameCache};

/// Files larger than this are left to the writer (which compresses them in parallel chunks).
const MAX_PREFETCH: u64 = 64 << 20;

pub struct Prefetcher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Prefetcher {
    /// Follows `stream` (paths, one per line) until [`Prefetcher::finish`].
    /// `scans` is the [`ScanCache`] the files' contents are searched for credentials into, while they are read.
    pub fn start(
        stream: PathBuf,
        opts: ClosureOptions,
        frames: FrameCache,
        digests: PathBuf,
        scans: PathBuf,
    ) -> Prefetcher {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = repro_sandbox::run::spawn_beside("repro-prefetch", move || {
            follow(&stream, &opts, &frames, (&digests, &scans), &flag)
        })
        // Without the thread the capture only takes longer: the pack is written from the files either way.
        .ok();
        Prefetcher { stop, thread }
    }

    /// Stops after the file in hand and saves what was learned.
    pub fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                eprintln!("[repro] warning: the prefetch thread failed; the pack is written without its caches");
            }
        }
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn follow(
    stream: &Path,
    opts: &ClosureOptions,
    frames: &FrameCache,
    (digests, scans): (&Path, &Path),
    stop: &AtomicBool,
) {
    let Ok(mut f) = fs::File::open(stream) else { return };
    let mut cache = DigestCache::load(digests);
    let mut scans = ScanCache::load(scans);
    let mut pending = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut seen = std::collections::HashSet::new();
    while !stop.load(Ordering::Relaxed) {
        let n = f.read(&mut buf).unwrap_or(0);
        if n == 0 {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        pending.extend_from_slice(&buf[..n]);
        while let Some(i) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=i).collect();
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let Ok(guest) = std::str::from_utf8(&line[..line.len() - 1]) else { continue };
            if seen.insert(guest.to_string()) {
                prefetch(guest, opts, frames, &mut cache, &mut scans);
            }
        }
    }
    cache.save();
    scans.save();
}

/// Hashes and compresses one file the guest used, if it is a pack input.
fn prefetch(guest: &str, opts: &ClosureOptions, frames: &FrameCache, cache: &mut DigestCache, scans: &mut ScanCache) {
    if opts.skipped(guest.as_bytes()) {
        return;
    }
    let Ok(host) = fs::canonicalize(opts.host(guest.as_bytes())) else { return };
    let Ok(md) = fs::metadata(&host) else { return };
    if !md.is_file() || md.len() > MAX_PREFETCH {
        return;
    }
    let digest = match cache.lookup(&host, &md) {
        Some(d) => d,
        None => {
            let Ok(content) = fs::read(&host) else { return };
            let d = blake3::hash(&content).to_hex().to_string();
            if content.len() as u64 == md.len() {
                cache.remember(&host, &md, &d);
            }
            // The bytes are in hand: search them for credentials now rather than at the end of the run.
            if !scans.known(&d) {
                scans.remember(&d, crate::secrets::scan(&content));
            }
            if !frames.has(&d) {
                // Cache warming: an error here recurs, and is reported, when the pack is written.
                let _ = blob_frame(&d, &crate::archive::BlobSource::Bytes(content), Some(frames));
            }
            return;
        }
    };
    if !scans.known(&digest) {
        if let Ok(content) = fs::read(&host) {
            if blake3::hash(&content).to_hex().as_str() == digest {
                scans.remember(&digest, crate::secrets::scan(&content));
            }
        }
    }
    if !frames.has(&digest) {
        // Cache warming: an error here recurs, and is reported, when the pack is written.
        let _ = blob_frame(&digest, &crate::archive::BlobSource::File(host), Some(frames));
    }
}
