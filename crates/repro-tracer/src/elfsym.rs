//! The function symbol at an offset of an ELF file (64-bit, little-endian), from its .symtab or .dynsym: enough
//! to name where a guest thread spins (see sched.rs). Reads untrusted files: every offset is checked.

use std::path::Path;

use repro_detcore::rdrand;

/// Files larger than this are not read.
const MAX_FILE: u64 = 512 << 20;

/// The function containing file offset `off` of the ELF file at `path`, and the distance from its start.
pub(crate) fn symbol_at_file_offset(path: &Path, off: u64) -> Option<(String, u64)> {
    if std::fs::metadata(path).ok()?.len() > MAX_FILE {
        return None;
    }
    let b = std::fs::read(path).ok()?;
    symbol_in(&b, off)
}

/// The ELF parsing is the RDRAND scan's (repro-detcore's `rdrand`: bounds-checked and fuzzed as `elf_scan`).
fn symbol_in(b: &[u8], off: u64) -> Option<(String, u64)> {
    let at = |place: (u64, u64)| b.get(place.0 as usize..(place.0.checked_add(place.1)?) as usize);
    // The virtual address of the offset, from the executable segment holding it (a spinning thread runs code).
    let (phoff, phentsize, phnum) = rdrand::program_headers(b).ok()?;
    let segments = rdrand::exec_segments(b.get(phoff as usize..)?, phentsize, phnum).ok()?;
    let seg = segments.iter().find(|s| off >= s.offset && off - s.offset < s.size)?;
    let vaddr = off - seg.offset + seg.vaddr;
    let (shoff, shentsize, shnum) = rdrand::section_headers(b).ok()?;
    rdrand::symbol_tables(b.get(shoff as usize..)?, shentsize, shnum).into_iter().find_map(|t| {
        let (name, start) = rdrand::function_containing(at(t.symbols)?, at(t.strings)?, vaddr)?;
        Some((name, vaddr - start))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_of_this_test_binary_is_found_and_garbage_is_not() {
        // This very test binary: the file offset of a function of it, from its own mapping.
        let addr = symbol_in as *const () as u64;
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let off = maps
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let (lo, hi) = f[0].split_once('-')?;
                let (lo, hi) = (u64::from_str_radix(lo, 16).ok()?, u64::from_str_radix(hi, 16).ok()?);
                (addr >= lo && addr < hi && f.get(5) == Some(&exe.to_str()?))
                    .then(|| addr - lo + u64::from_str_radix(f[2], 16).unwrap())
            })
            .unwrap();
        let (name, delta) = symbol_at_file_offset(&exe, off).unwrap();
        assert!(name.contains("symbol_in"), "{name}");
        assert_eq!(delta, 0);
        assert!(symbol_in(b"not an elf file at all", 3).is_none());
        assert!(symbol_in(b"\x7fELF\x02\x01", 3).is_none());
    }
}
