//! The replacement vDSO: an ELF image of ours (vdso/vdso.c, built by build.rs) mapped into every new
//! program image at exec, with a data page shared with the supervisor that holds the logical clock.
//!
//! The DeterminismController stays the source of truth: before the supervisor answers anything it
//! adopts the reads the vDSO answered in-process ([`ClockPage::sync_in`]), and after it moves the
//! clock (a read, a sleep, a jumped timeout) it publishes the change to the page
//! ([`ClockPage::sync_out`]), so in-process and mediated reads form one clock.

use repro_detcore::clock::{MONOTONIC_START_NS, NSEC_PER_SEC, STALL_READS};
use repro_detcore::LogicalClock;
use repro_sys::shmem::{SharedPage, PAGE};

/// The image built from vdso/vdso.c (empty when it could not be built).
static IMAGE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/repro-vdso.so"));

// Layout of `struct repro_vvar` in vdso/vdso.c.
const OFF_MAGIC: usize = 0;
const OFF_FLAGS: usize = 8;
const OFF_STEP: usize = 16;
const OFF_REALTIME_SEC: usize = 24;
const OFF_MONOTONIC_SEC: usize = 32;
const OFF_STALL_READS: usize = 40;
const OFF_ELAPSED: usize = 64;
const OFF_READS: usize = 128;
const OFF_ROW_BASE: usize = 136;
const MAGIC: u64 = u64::from_le_bytes(*b"REPROVD1");
/// Flag: the page cannot represent the clock any more (elapsed beyond 2^63 ns); the vDSO makes syscalls.
const FLAG_SYSCALLS: u64 = 1;

/// getcpu arguments that ask the notify thread for the memfd (only honoured for a task being set up).
pub(crate) const FD_REQUEST_MAGIC: [u64; 2] = [u64::from_le_bytes(*b"repro-vd"), u64::from_le_bytes(*b"so-memfd")];

/// The image bytes (for tests and diagnostics).
pub fn image() -> &'static [u8] {
    IMAGE
}

/// Where things are in the kernel's own vDSO (the same image in every 64-bit process of this kernel).
#[derive(Debug, Clone, Copy)]
pub(crate) struct KernelVdso {
    /// Offset of a `syscall` instruction (0f 05) from the vDSO's ELF header.
    pub gadget: u64,
    /// The kernel's vvar and vDSO mappings as (offset from the ELF header, length), to unmap.
    pub unmap: (i64, u64),
}

/// The shared page and the image, created once per supervised run.
pub(crate) struct ClockPage {
    page: SharedPage,
    /// Offset of a `syscall` instruction in our image.
    pub gadget: u64,
    /// Length of our image mapping (whole pages).
    pub image_len: u64,
    pub kernel: KernelVdso,
    /// Logical elapsed ns and reads-in-row the controller had at the last sync.
    last_elapsed: u64,
}

/// Why the replacement vDSO cannot be used in this run (the guest then gets none: its clock reads are syscalls).
#[derive(Debug, thiserror::Error)]
pub enum VdsoError {
    #[error("the replacement vDSO was not built (no C compiler at build time)")]
    NotBuilt,
    #[error("no syscall instruction in the replacement vDSO")]
    NoGadget,
    #[error("reading /proc/self/maps: {0}")]
    Maps(std::io::Error),
    #[error("this kernel maps no vDSO (nothing to replace)")]
    NoKernelVdso,
    #[error("reading the kernel vDSO: {0}")]
    ReadKernel(std::io::Error),
    #[error("no syscall instruction in the kernel vDSO")]
    NoKernelGadget,
    #[error("creating the vDSO memfd: {0}")]
    Memfd(std::io::Error),
}

fn find_gadget(b: &[u8]) -> Option<u64> {
    b.windows(2).position(|w| w == [0x0f, 0x05]).map(|p| p as u64)
}

/// Start and end of the mappings of this process whose name is one of `names` in /proc/self/maps.
fn own_mappings(names: &[&str]) -> Result<Vec<(String, u64, u64)>, VdsoError> {
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(VdsoError::Maps)?;
    Ok(maps
        .lines()
        .filter_map(|l| {
            let name = l.split_whitespace().nth(5)?;
            if !names.contains(&name) {
                return None;
            }
            let (a, b) = l.split_whitespace().next()?.split_once('-')?;
            Some((name.to_string(), u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?))
        })
        .collect())
}

/// The kernel vDSO of this process: a gadget, and the vvar+vDSO range relative to its ELF header.
fn kernel_vdso() -> Result<KernelVdso, VdsoError> {
    let maps = own_mappings(&["[vdso]", "[vvar]", "[vvar_vclock]"])?;
    let &(_, start, end) = maps.iter().find(|(n, ..)| n == "[vdso]").ok_or(VdsoError::NoKernelVdso)?;
    let mut bytes = vec![0u8; (end - start) as usize];
    let n = repro_sys::memory::read(std::process::id() as i32, start, &mut bytes).map_err(VdsoError::ReadKernel)?;
    let gadget = find_gadget(&bytes[..n]).ok_or(VdsoError::NoKernelGadget)?;
    // Unmap vvar pages too when they are contiguous with the vDSO, so nothing of the host clock stays mapped.
    let (mut lo, mut hi) = (start, end);
    let mut grew = true;
    while grew {
        grew = false;
        for &(_, a, b) in &maps {
            if b == lo {
                lo = a;
                grew = true;
            }
            if a == hi {
                hi = b;
                grew = true;
            }
        }
    }
    Ok(KernelVdso { gadget, unmap: (lo as i64 - start as i64, hi - lo) })
}

impl ClockPage {
    /// Creates the memfd with the data page and the image; `Err` says why the vDSO cannot be replaced.
    pub fn new(clock: &LogicalClock, epoch_unix_secs: i64) -> Result<Self, VdsoError> {
        if IMAGE.len() < 64 || &IMAGE[..4] != b"\x7fELF" {
            return Err(VdsoError::NotBuilt);
        }
        let gadget = find_gadget(IMAGE).ok_or(VdsoError::NoGadget)?;
        let kernel = kernel_vdso()?;
        let page = SharedPage::new(c"repro-vdso", IMAGE).map_err(VdsoError::Memfd)?;
        let image_len = (page.total_len() - PAGE) as u64;
        page.store(OFF_STEP, clock.step_ns());
        page.store(OFF_REALTIME_SEC, epoch_unix_secs as u64);
        page.store(OFF_MONOTONIC_SEC, (MONOTONIC_START_NS / NSEC_PER_SEC) as u64);
        page.store(OFF_STALL_READS, STALL_READS as u64);
        page.store(OFF_ELAPSED, 0);
        page.store(OFF_MAGIC, MAGIC);
        let mut p = ClockPage { page, gadget, image_len, kernel, last_elapsed: 0 };
        p.sync_out(clock);
        Ok(p)
    }

    /// The memfd to install in a guest.
    pub fn fd(&self) -> &std::os::fd::OwnedFd {
        self.page.fd()
    }

    /// Bytes to map in a guest: the data page and the image.
    pub fn total_len(&self) -> u64 {
        self.page.total_len() as u64
    }

    /// Clock reads answered in-process so far.
    pub fn reads(&self) -> u64 {
        self.page.load(OFF_READS)
    }

    /// Adopts what the vDSO did since the last sync: its reads advanced the clock and count as reads
    /// in a row for the frozen-clock detector.
    pub fn sync_in(&mut self, clock: &mut LogicalClock) {
        if self.page.load(OFF_FLAGS) & FLAG_SYSCALLS != 0 {
            return;
        }
        let elapsed = self.page.load(OFF_ELAPSED);
        let row = self.page.load(OFF_READS).wrapping_sub(self.page.load(OFF_ROW_BASE));
        clock.absorb(elapsed as i128, row.min(u32::MAX as u64) as u32);
        self.last_elapsed = elapsed;
    }

    /// Publishes the controller's clock to the page after the supervisor answered something.
    pub fn sync_out(&mut self, clock: &LogicalClock) {
        if self.page.load(OFF_FLAGS) & FLAG_SYSCALLS != 0 {
            return;
        }
        let now = clock.elapsed_ns();
        if now >= (1i128 << 63) {
            // The page cannot hold it: from now on every read is a mediated syscall.
            self.page.store(OFF_FLAGS, FLAG_SYSCALLS);
            return;
        }
        let now = now as u64;
        if now > self.last_elapsed {
            // An add, not a store, so reads the vDSO answered meanwhile are not lost.
            self.page.fetch_add(OFF_ELAPSED, now - self.last_elapsed);
            self.last_elapsed = now;
        }
        let reads = self.page.load(OFF_READS);
        let base = reads.wrapping_sub(clock.reads_in_row() as u64);
        if self.page.load(OFF_ROW_BASE) != base {
            self.page.store(OFF_ROW_BASE, base);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_is_a_relocation_free_shared_object_with_the_vdso_symbols() {
        let img = image();
        assert!(img.len() > 64, "the vDSO image was not built");
        assert_eq!(&img[..4], b"\x7fELF");
        assert_eq!(u16::from_le_bytes([img[16], img[17]]), 3, "ET_DYN");
        let text = String::from_utf8_lossy(img);
        for sym in [
            "__vdso_clock_gettime",
            "__vdso_gettimeofday",
            "__vdso_time",
            "__vdso_getcpu",
            "__vdso_clock_getres",
            "__vdso_getrandom",
            "LINUX_2.6",
            "linux-vdso.so.1",
        ] {
            assert!(text.contains(sym), "{sym} missing from the image");
        }
        assert!(!text.contains(".rela.dyn"), "the image must need no relocations");
        assert!(find_gadget(img).is_some());
    }

    #[test]
    fn page_and_controller_form_one_clock() {
        let mut clock = LogicalClock::new(1_700_000_000, 1000);
        let Ok(mut p) = ClockPage::new(&clock, 1_700_000_000) else {
            return; // no kernel vDSO on this machine: nothing to replace
        };
        // Three in-process reads, as the vDSO does them.
        for _ in 0..3 {
            p.page.fetch_add(OFF_READS, 1);
            p.page.fetch_add(OFF_ELAPSED, 1000);
        }
        p.sync_in(&mut clock);
        assert_eq!(clock.elapsed_ns(), 3000);
        assert_eq!(clock.reads_in_row(), 3);
        // A mediated read continues from there, and the page sees it.
        let _ = clock.read(repro_detcore::ClockKind::Realtime); // the read's value does not matter, its step does
        clock.sleep_for(repro_detcore::Timespec { sec: 1, nsec: 0 }).unwrap();
        p.sync_out(&clock);
        assert_eq!(p.page.load(OFF_ELAPSED), 1_000_004_000);
        assert_eq!(p.page.load(OFF_READS).wrapping_sub(p.page.load(OFF_ROW_BASE)), 0, "the sleep reset the row");
        assert_eq!(p.reads(), 3);
    }
}
