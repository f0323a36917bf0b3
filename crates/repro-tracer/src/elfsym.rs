//! The function symbol at an offset of an ELF file (64-bit, little-endian), from its .symtab or .dynsym: enough
//! to name where a guest thread spins (see sched.rs). Reads untrusted files: every offset is checked.

use std::path::Path;

/// Files larger than this are not read.
const MAX_FILE: u64 = 512 << 20;

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

/// The function containing file offset `off` of the ELF file at `path`, and the distance from its start.
pub(crate) fn symbol_at_file_offset(path: &Path, off: u64) -> Option<(String, u64)> {
    if std::fs::metadata(path).ok()?.len() > MAX_FILE {
        return None;
    }
    let b = std::fs::read(path).ok()?;
    symbol_in(&b, off)
}

fn symbol_in(b: &[u8], off: u64) -> Option<(String, u64)> {
    // ELF64, little-endian.
    if b.get(0..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let phoff = u64_at(b, 0x20)? as usize;
    let shoff = u64_at(b, 0x28)? as usize;
    let (phentsize, phnum) = (u16_at(b, 0x36)? as usize, u16_at(b, 0x38)? as usize);
    let (shentsize, shnum) = (u16_at(b, 0x3a)? as usize, u16_at(b, 0x3c)? as usize);
    // The virtual address of the offset, from the loadable segment holding it.
    let vaddr = (0..phnum).find_map(|i| {
        let p = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if u32_at(b, p)? != 1 {
            return None; // not PT_LOAD
        }
        let (p_off, p_vaddr, p_filesz) = (u64_at(b, p + 8)?, u64_at(b, p + 16)?, u64_at(b, p + 32)?);
        (off >= p_off && off < p_off.checked_add(p_filesz)?).then(|| off - p_off + p_vaddr)
    })?;
    let section = |i: usize| -> Option<(u32, u64, u64, u32, u64)> {
        let s = shoff.checked_add(i.checked_mul(shentsize)?)?;
        // type, offset, size, link, entsize
        Some((u32_at(b, s + 4)?, u64_at(b, s + 24)?, u64_at(b, s + 32)?, u32_at(b, s + 40)?, u64_at(b, s + 56)?))
    };
    let mut best: Option<(String, u64)> = None;
    for i in 0..shnum {
        let Some((ty, s_off, s_size, link, entsize)) = section(i) else { continue };
        // SHT_SYMTAB (2) or SHT_DYNSYM (11).
        if (ty != 2 && ty != 11) || entsize < 24 {
            continue;
        }
        let Some((_, str_off, str_size, _, _)) = section(link as usize) else { continue };
        let n = (s_size / entsize) as usize;
        for k in 0..n {
            let Some(e) = (s_off as usize).checked_add(k * entsize as usize) else { break };
            let (Some(name), Some(info), Some(value), Some(size)) =
                (u32_at(b, e), b.get(e + 4).copied(), u64_at(b, e + 8), u64_at(b, e + 16))
            else {
                break;
            };
            // STT_FUNC.
            if info & 0xf != 2 || value == 0 || vaddr < value || vaddr >= value.saturating_add(size.max(1)) {
                continue;
            }
            let start = (str_off as usize).saturating_add(name as usize);
            let end = (str_off as usize).saturating_add(str_size as usize).min(b.len());
            let Some(bytes) = b.get(start..end) else { continue };
            let text = bytes.split(|&c| c == 0).next().unwrap_or(&[]);
            let delta = vaddr - value;
            if best.as_ref().is_none_or(|(_, d)| delta < *d) {
                best = Some((String::from_utf8_lossy(text).into_owned(), delta));
            }
        }
    }
    best
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
