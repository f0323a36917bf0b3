//! RDRAND and RDSEED: instructions that read the CPU's random number generator without a system call. Without
//! CPUID faulting they cannot be trapped, so the supervisor looks for them in the code the guest runs: the
//! executable segments of an ELF file are searched for the instruction's opcode bytes (`0F C7` with a register
//! ModRM of /6 or /7: every RDRAND/RDSEED contains them), and each candidate is confirmed by decoding the code
//! before it with a real x86 decoder (iced-x86), so that bytes inside another instruction do not count.
//!
//! The verdict: a main executable that contains one is refused (the run is not reproducible: exit 121, naming
//! the binary and the offset); a library only gets a warning, because common ones (OpenSSL's libcrypto,
//! libstdc++'s `std::random_device`) carry it on paths that are not taken by default, and refusing them would
//! refuse nearly every run.

use iced_x86::{Decoder, DecoderOptions, Mnemonic};

/// How far before a candidate the decoder starts: a linear sweep falls into step with the real instruction
/// boundaries within a few instructions.
const SYNC_WINDOW: usize = 256;
/// At most this many sites are reported per file.
pub const MAX_SITES: usize = 16;

/// One instruction found: its offset in the file and which one it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site {
    pub offset: u64,
    pub seed: bool,
}

impl Site {
    pub fn name(self) -> &'static str {
        if self.seed {
            "RDSEED"
        } else {
            "RDRAND"
        }
    }
}

/// Why a file could not be scanned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScanError {
    #[error("not a 64-bit little-endian ELF file")]
    NotElf,
    #[error("ELF program header {index} lies outside the file")]
    BadHeader { index: usize },
}

/// A loadable executable segment: its offset and size in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub offset: u64,
    pub size: u64,
}

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

/// The program header table's place (offset, entry size, count) from the first bytes of an ELF file (at least
/// 64: the ELF header).
pub fn program_headers(head: &[u8]) -> Result<(u64, usize, usize), ScanError> {
    if head.len() < 64 || &head[..4] != b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return Err(ScanError::NotElf);
    }
    let phoff = u64_at(head, 32).ok_or(ScanError::NotElf)?;
    let phentsize = u16_at(head, 54).ok_or(ScanError::NotElf)? as usize;
    let phnum = u16_at(head, 56).ok_or(ScanError::NotElf)? as usize;
    if phentsize < 56 {
        return Err(ScanError::NotElf);
    }
    Ok((phoff, phentsize, phnum))
}

/// The executable PT_LOAD segments described by the program header table `table` (`count` entries of
/// `entsize` bytes).
pub fn exec_segments(table: &[u8], entsize: usize, count: usize) -> Result<Vec<Segment>, ScanError> {
    const PT_LOAD: u32 = 1;
    const PF_X: u32 = 1;
    let mut v = Vec::new();
    for index in 0..count {
        let e = index.checked_mul(entsize).and_then(|o| table.get(o..o + 56)).ok_or(ScanError::BadHeader { index })?;
        let (ty, flags) = (u32_at(e, 0), u32_at(e, 4));
        if ty == Some(PT_LOAD) && flags.is_some_and(|f| f & PF_X != 0) {
            let offset = u64_at(e, 8).ok_or(ScanError::BadHeader { index })?;
            let size = u64_at(e, 32).ok_or(ScanError::BadHeader { index })?;
            v.push(Segment { offset, size });
        }
    }
    Ok(v)
}

/// The RDRAND/RDSEED instructions in `code`, the bytes of an executable segment that starts at file offset
/// `base`.
pub fn scan_code(code: &[u8], base: u64) -> Vec<Site> {
    let mut sites = Vec::new();
    let mut last_end = 0usize;
    for i in memchr::memmem::find_iter(code, b"\x0f\xc7") {
        if code.get(i + 2).is_none_or(|&m| m < 0xf0) || i < last_end {
            continue;
        }
        let start = i.saturating_sub(SYNC_WINDOW);
        let end = (i + 3).min(code.len());
        let mut d = Decoder::with_ip(64, &code[start..end], start as u64, DecoderOptions::NONE);
        while d.can_decode() {
            let ins = d.decode();
            let (s, e) = (ins.ip() as usize, ins.next_ip() as usize);
            if s > i {
                break;
            }
            if e > i + 1 && matches!(ins.mnemonic(), Mnemonic::Rdrand | Mnemonic::Rdseed) {
                sites.push(Site { offset: base + s as u64, seed: ins.mnemonic() == Mnemonic::Rdseed });
                last_end = e;
                break;
            }
        }
        if sites.len() >= MAX_SITES {
            break;
        }
    }
    sites
}

/// What a finding means for the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Not reproducible (exit 121), for this reason.
    Refuse(String),
    /// A warning in the run record.
    Warn(String),
}

/// The verdict on `binary` (a path for the message) holding `sites`; `main`: it is the program the guest
/// executed (rather than a library it loaded). `None` when there is nothing.
pub fn verdict(binary: &str, main: bool, sites: &[Site]) -> Option<Verdict> {
    let first = sites.first()?;
    let more = if sites.len() > 1 { format!(" (and {} more)", sites.len() - 1) } else { String::new() };
    let what = format!("{binary} contains {} at {:#x}{more}", first.name(), first.offset);
    Some(if main {
        Verdict::Refuse(format!("{what}: the CPU's random numbers cannot be trapped (no CPUID faulting)"))
    } else {
        Verdict::Warn(format!(
            "{what}: a library; if the guest executes it, what it reads from the CPU's random number generator \
             is not pinned"
        ))
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn finds_rdrand_and_rdseed_and_ignores_lookalikes() {
        // nop; rdrand r10 (49 0f c7 f2); ret; mov eax, 0xf2c70f00 (the bytes inside an immediate); rdseed eax.
        let code = [0x90, 0x49, 0x0f, 0xc7, 0xf2, 0xc3, 0xb8, 0x00, 0x0f, 0xc7, 0xf2, 0x0f, 0xc7, 0xf8, 0x90];
        let sites = scan_code(&code, 0x1000);
        assert_eq!(sites, [Site { offset: 0x1001, seed: false }, Site { offset: 0x100b, seed: true }]);
        // cmpxchg16b [rax] is 0f c7 /1 with a memory operand: not a candidate.
        assert!(scan_code(&[0x48, 0x0f, 0xc7, 0x08], 0).is_empty());
        assert!(scan_code(&[], 0).is_empty());
    }

    #[test]
    fn verdicts() {
        assert_eq!(verdict("/bin/x", true, &[]), None);
        let s = [Site { offset: 0x1234, seed: false }, Site { offset: 0x2000, seed: true }];
        let Some(Verdict::Refuse(m)) = verdict("/bin/x", true, &s) else { panic!() };
        assert!(m.starts_with("/bin/x contains RDRAND at 0x1234 (and 1 more)"), "{m}");
        assert!(matches!(verdict("/lib/libcrypto.so.3", false, &s), Some(Verdict::Warn(m)) if m.contains("library")));
    }

    #[test]
    fn elf_headers() {
        let mut head = vec![0u8; 64];
        head[..6].copy_from_slice(b"\x7fELF\x02\x01");
        head[32..40].copy_from_slice(&64u64.to_le_bytes());
        head[54..56].copy_from_slice(&56u16.to_le_bytes());
        head[56..58].copy_from_slice(&2u16.to_le_bytes());
        assert_eq!(program_headers(&head), Ok((64, 56, 2)));
        assert_eq!(program_headers(b"#!/bin/sh\n"), Err(ScanError::NotElf));
        let mut table = vec![0u8; 112];
        table[0..4].copy_from_slice(&1u32.to_le_bytes());
        table[4..8].copy_from_slice(&5u32.to_le_bytes()); // R+X
        table[8..16].copy_from_slice(&0x1000u64.to_le_bytes());
        table[32..40].copy_from_slice(&0x500u64.to_le_bytes());
        table[56..60].copy_from_slice(&1u32.to_le_bytes());
        table[60..64].copy_from_slice(&4u32.to_le_bytes()); // R only
        assert_eq!(exec_segments(&table, 56, 2), Ok(vec![Segment { offset: 0x1000, size: 0x500 }]));
        assert_eq!(exec_segments(&table, 56, 3), Err(ScanError::BadHeader { index: 2 }));
    }

    proptest! {
        /// Any bytes (a hostile binary) are scanned without a panic.
        #[test]
        fn any_bytes_are_scanned(b in proptest::collection::vec(any::<u8>(), 0..600), n in 0usize..12) {
            let _ = program_headers(&b);
            let _ = exec_segments(&b, 56, n);
            let _ = scan_code(&b, 0);
        }
    }
}
