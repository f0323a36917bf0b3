//! RDRAND and RDSEED: instructions that read the CPU's random number generator without a system call. Without
//! CPUID faulting they cannot be trapped, so the supervisor looks for them in the code the guest runs: the
//! executable segments of an ELF file are searched for the instruction's opcode bytes (`0F C7` with a register
//! ModRM of /6 or /7: every RDRAND/RDSEED contains them), and each candidate is confirmed by decoding the code
//! before it with a real x86 decoder (iced-x86), so that bytes inside another instruction do not count.
//!
//! The verdict: a program that contains one is refused (the run is not reproducible: exit 121, naming the
//! binary and the offset), unless it is the system's: refusing those would refuse nearly every run, since
//! common code carries the instruction on paths that are not taken by default. Measured on this machine:
//! libcrypto.so.3 (2 sites, OpenSSL's CPU entropy routines: Python's hashlib and ssl load it), libstdc++.so.6
//! (5, `std::random_device`), gcc's cc1 (5, a static libstdc++: every C compile), node (2, a bundled OpenSSL);
//! libc, libm, libz, libssl, libpython3.11, python3 and the JDKs' libjvm have none. So a library, a program
//! under the system's directories ([`SYSTEM_DIRS`]), and a program whose every site the symbol table places in
//! one of the [`DORMANT`] functions get a warning in the run record instead; a program of the project (built in
//! the working directory, in /tmp...) that contains one is refused.

use iced_x86::{Decoder, DecoderOptions, Mnemonic};

/// How far before a candidate the decoder starts: a linear sweep falls into step with the real instruction
/// boundaries within a few instructions.
const SYNC_WINDOW: usize = 256;
/// At most this many sites are reported per file.
pub const MAX_SITES: usize = 16;

/// Functions that contain RDRAND/RDSEED but are not called unless configured to: OpenSSL's CPU entropy source
/// (`rand_cpu_x86.c`, used only with the `rdcpu` seed source or the RDRAND engine; the default seeds from the
/// kernel, which the supervisor mediates).
pub const DORMANT: [&str; 2] = ["OPENSSL_ia32_rdrand_bytes", "OPENSSL_ia32_rdseed_bytes"];

/// Where the system's programs live (the host's directories, read-only in the sandbox).
pub const SYSTEM_DIRS: [&str; 6] = ["/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/", "/opt/"];

/// Toolchains installed per user by their official installers (rustup, pyenv, nvm): their programs are judged as
/// the system's (a warning), since `repro run -- cargo test` finds and binds them without flags.
pub const TOOLCHAIN_DIRS: [&str; 4] = ["/.cargo/bin/", "/.rustup/toolchains/", "/.pyenv/versions/", "/.nvm/versions/"];

/// One instruction found: its offset in the file, its address in the image, and which one it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    pub offset: u64,
    pub vaddr: u64,
    pub seed: bool,
    /// The function holding it, from the symbol table (when the file has one).
    pub function: Option<String>,
}

impl Site {
    pub fn name(&self) -> &'static str {
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

/// A loadable executable segment: its offset and size in the file, and its address in the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub offset: u64,
    pub size: u64,
    pub vaddr: u64,
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
        let e = index
            .checked_mul(entsize)
            .and_then(|o| table.get(o..o.checked_add(56)?))
            .ok_or(ScanError::BadHeader { index })?;
        let (ty, flags) = (u32_at(e, 0), u32_at(e, 4));
        if ty == Some(PT_LOAD) && flags.is_some_and(|f| f & PF_X != 0) {
            let offset = u64_at(e, 8).ok_or(ScanError::BadHeader { index })?;
            let size = u64_at(e, 32).ok_or(ScanError::BadHeader { index })?;
            let vaddr = u64_at(e, 16).ok_or(ScanError::BadHeader { index })?;
            v.push(Segment { offset, size, vaddr });
        }
    }
    Ok(v)
}

/// The section header table's place (offset, entry size, count) from the ELF header `head`.
pub fn section_headers(head: &[u8]) -> Result<(u64, usize, usize), ScanError> {
    program_headers(head)?;
    let shoff = u64_at(head, 40).ok_or(ScanError::NotElf)?;
    let entsize = u16_at(head, 58).ok_or(ScanError::NotElf)? as usize;
    let count = u16_at(head, 60).ok_or(ScanError::NotElf)? as usize;
    if entsize < 64 {
        return Err(ScanError::NotElf);
    }
    Ok((shoff, entsize, count))
}

/// A symbol table and its string table: (offset, size) of each in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SymbolTable {
    pub symbols: (u64, u64),
    pub strings: (u64, u64),
}

/// The symbol tables (.symtab, .dynsym) the section header table `table` describes.
pub fn symbol_tables(table: &[u8], entsize: usize, count: usize) -> Vec<SymbolTable> {
    const SHT_SYMTAB: u32 = 2;
    const SHT_DYNSYM: u32 = 11;
    let section = |i: usize| i.checked_mul(entsize).and_then(|o| table.get(o..o.checked_add(64)?));
    let place = |e: &[u8]| Some((u64_at(e, 24)?, u64_at(e, 32)?));
    let mut v = Vec::new();
    for i in 0..count {
        let Some(e) = section(i) else { break };
        if !matches!(u32_at(e, 4), Some(SHT_SYMTAB | SHT_DYNSYM)) {
            continue;
        }
        let link = u32_at(e, 40).map(|l| l as usize);
        if let (Some(symbols), Some(strings)) = (place(e), link.and_then(section).and_then(place)) {
            v.push(SymbolTable { symbols, strings });
        }
    }
    v
}

/// The name of the function symbol of `symbols` (24-byte ELF64 entries) whose range holds `vaddr`.
pub fn function_at(symbols: &[u8], strings: &[u8], vaddr: u64) -> Option<String> {
    function_containing(symbols, strings, vaddr).map(|(name, _)| name)
}

/// [`function_at`], with the function's start address.
pub fn function_containing(symbols: &[u8], strings: &[u8], vaddr: u64) -> Option<(String, u64)> {
    const STT_FUNC: u8 = 2;
    symbols.chunks_exact(24).find_map(|e| {
        let (value, size) = (u64_at(e, 8)?, u64_at(e, 16)?);
        if e[4] & 0xf != STT_FUNC || vaddr < value || vaddr >= value.checked_add(size)? {
            return None;
        }
        let name = strings.get(u32_at(e, 0)? as usize..)?;
        let end = name.iter().position(|&b| b == 0)?;
        Some((String::from_utf8_lossy(&name[..end]).into_owned(), value))
    })
}

/// The RDRAND/RDSEED instructions in `code`, the bytes of executable segment `seg`.
pub fn scan_code(code: &[u8], seg: Segment) -> Vec<Site> {
    let base = seg.offset;
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
                sites.push(Site {
                    offset: base + s as u64,
                    vaddr: seg.vaddr.wrapping_add(s as u64),
                    seed: ins.mnemonic() == Mnemonic::Rdseed,
                    function: None,
                });
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
    let within = first.function.as_ref().map_or(String::new(), |f| format!(" in {f}"));
    let what = format!("{binary} contains {} at file offset {:#x}{within}{more}", first.name(), first.offset);
    let dormant = sites.iter().all(|s| s.function.as_deref().is_some_and(|f| DORMANT.contains(&f)));
    let system = SYSTEM_DIRS.iter().any(|d| binary.starts_with(d)) || TOOLCHAIN_DIRS.iter().any(|d| binary.contains(d));
    Some(if main && !dormant && !system {
        Verdict::Refuse(format!("{what}: the CPU's random numbers cannot be trapped (no CPUID faulting)"))
    } else {
        let whose = match (main, dormant) {
            (false, _) => "a library",
            (true, true) => "code not run by default",
            (true, false) => "a system program",
        };
        Verdict::Warn(format!(
            "{what}: {whose}; if the guest executes it, what it reads from the CPU's random number generator \
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
        let seg = Segment { offset: 0x1000, size: code.len() as u64, vaddr: 0x401000 };
        let sites = scan_code(&code, seg);
        let at = |offset: u64, seed: bool| Site { offset, vaddr: offset + 0x400000, seed, function: None };
        assert_eq!(sites, [at(0x1001, false), at(0x100b, true)]);
        // cmpxchg16b [rax] is 0f c7 /1 with a memory operand: not a candidate.
        assert!(scan_code(&[0x48, 0x0f, 0xc7, 0x08], seg).is_empty());
        assert!(scan_code(&[], seg).is_empty());
    }

    #[test]
    fn verdicts() {
        assert_eq!(verdict("/bin/x", true, &[]), None);
        let mut s = vec![
            Site { offset: 0x1234, vaddr: 0x1234, seed: false, function: None },
            Site { offset: 0x2000, vaddr: 0x2000, seed: true, function: Some("OPENSSL_ia32_rdseed_bytes".into()) },
        ];
        let Some(Verdict::Refuse(m)) = verdict("/work/x", true, &s) else { panic!() };
        assert!(m.starts_with("/work/x contains RDRAND at file offset 0x1234 (and 1 more)"), "{m}");
        assert!(
            matches!(verdict("/usr/lib/gcc/x86_64-linux-gnu/12/cc1", true, &s), Some(Verdict::Warn(m)) if m.contains("a system program"))
        );
        assert!(matches!(verdict("/lib/libcrypto.so.3", false, &s), Some(Verdict::Warn(m)) if m.contains("library")));
        // Every site in a dormant function: a warning, naming it.
        s[0].function = Some("OPENSSL_ia32_rdrand_bytes".into());
        let Some(Verdict::Warn(m)) = verdict("/root/.nvm/versions/node/v22/bin/node", true, &s) else { panic!() };
        assert!(m.contains("in OPENSSL_ia32_rdrand_bytes") && m.contains("not run by default"), "{m}");
        s[1].function = Some("main".into());
        // A toolchain's own program is judged as a system one; the same binary elsewhere is refused.
        assert!(
            matches!(verdict("/root/.nvm/versions/node/v22/bin/node", true, &s), Some(Verdict::Warn(m)) if m.contains("a system program"))
        );
        assert!(matches!(verdict("/root/.cargo/bin/rustup", true, &s), Some(Verdict::Warn(_))));
        assert!(matches!(verdict("/work/node", true, &s), Some(Verdict::Refuse(_))));
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
        table[16..24].copy_from_slice(&0x401000u64.to_le_bytes());
        assert_eq!(exec_segments(&table, 56, 2), Ok(vec![Segment { offset: 0x1000, size: 0x500, vaddr: 0x401000 }]));
        assert_eq!(exec_segments(&table, 56, 3), Err(ScanError::BadHeader { index: 2 }));
    }

    proptest! {
        /// Any bytes (a hostile binary) are scanned without a panic.
        #[test]
        fn any_bytes_are_scanned(b in proptest::collection::vec(any::<u8>(), 0..600), n in 0usize..12) {
            let _ = program_headers(&b);
            let _ = exec_segments(&b, 56, n);
            let _ = scan_code(&b, Segment { offset: 0, size: b.len() as u64, vaddr: u64::MAX - 3 });
            let _ = section_headers(&b);
            for t in symbol_tables(&b, 64, n) {
                let _ = t;
            }
            let _ = function_at(&b, &b, 0x40);
        }
    }

    #[test]
    fn symbols_name_the_function() {
        // One function symbol "f" at 0x100, 0x20 bytes long; the string table "\0f\0".
        let mut sym = vec![0u8; 48];
        sym[24..28].copy_from_slice(&1u32.to_le_bytes());
        sym[28] = 0x12; // global function
        sym[32..40].copy_from_slice(&0x100u64.to_le_bytes());
        sym[40..48].copy_from_slice(&0x20u64.to_le_bytes());
        assert_eq!(function_at(&sym, b"\0f\0", 0x110).as_deref(), Some("f"));
        assert_eq!(function_at(&sym, b"\0f\0", 0x120), None);
        assert_eq!(function_at(&sym, b"\0f", 0x110), None, "no NUL: no name");
        // Section headers: [0] null, [1] .symtab linked to [2] .strtab.
        let mut sh = vec![0u8; 64 * 3];
        sh[64 + 4..64 + 8].copy_from_slice(&2u32.to_le_bytes());
        sh[64 + 24..64 + 32].copy_from_slice(&0x1000u64.to_le_bytes());
        sh[64 + 32..64 + 40].copy_from_slice(&48u64.to_le_bytes());
        sh[64 + 40..64 + 44].copy_from_slice(&2u32.to_le_bytes());
        sh[128 + 24..128 + 32].copy_from_slice(&0x2000u64.to_le_bytes());
        sh[128 + 32..128 + 40].copy_from_slice(&3u64.to_le_bytes());
        assert_eq!(symbol_tables(&sh, 64, 3), [SymbolTable { symbols: (0x1000, 48), strings: (0x2000, 3) }]);
        assert_eq!(symbol_tables(&sh, 64, 9).len(), 1, "a count past the table stops");
    }
}
