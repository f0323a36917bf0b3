//! Directory order: a whole directory is read, sorted by name, then served in buffer-sized pieces.
//!
//! The position in the listing is the index of the next entry: `d_off` of entry `i` is `i + 1`, so
//! telldir/seekdir and lseek(fd, 0) (rewinddir) keep working whatever buffer size the guest uses.

use crate::DetError;

/// One directory entry as getdents64 reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: u64,
    pub d_type: u8,
}

pub use repro_model::DirOrder;

/// A sorted directory.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DirListing {
    entries: Vec<DirEntry>,
}

/// Size of one `struct linux_dirent64` record holding `name_len` bytes of name.
pub fn dirent64_reclen(name_len: usize) -> usize {
    // d_ino (8) + d_off (8) + d_reclen (2) + d_type (1) + name + NUL, rounded up to 8.
    (19 + name_len + 1 + 7) & !7
}

impl DirListing {
    /// Sorts `entries` by name (bytewise, as `LC_ALL=C ls` does).
    pub fn new(mut entries: Vec<DirEntry>) -> Self {
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        DirListing { entries }
    }

    /// The entries in `order`: sorted first, then reversed or shuffled (Fisher-Yates driven by the seed and the
    /// sorted names, so the same directory content always gives the same order).
    pub fn new_ordered(entries: Vec<DirEntry>, order: DirOrder) -> Self {
        let mut l = DirListing::new(entries);
        match order {
            DirOrder::Sorted => {}
            DirOrder::Reversed => l.entries.reverse(),
            DirOrder::Shuffled(seed) => {
                let mut state = seed ^ 0x9E37_79B9_7F4A_7C15;
                for e in &l.entries {
                    for b in &e.name {
                        state = (state ^ *b as u64).wrapping_mul(0x100_0000_01b3);
                    }
                }
                let mut rng = crate::SplitMix64::new(state);
                for i in (1..l.entries.len()).rev() {
                    l.entries.swap(i, rng.below(i as u64 + 1) as usize);
                }
            }
        }
        l
    }

    /// Parses a buffer of `struct linux_dirent64` records as the kernel returned them.
    pub fn parse_dirents(buf: &[u8], out: &mut Vec<DirEntry>) {
        let mut off = 0;
        while off + 19 <= buf.len() {
            let ino = u64::from_le_bytes(buf[off..off + 8].try_into().unwrap_or([0; 8]));
            let reclen = u16::from_le_bytes([buf[off + 16], buf[off + 17]]) as usize;
            if reclen < 20 || off + reclen > buf.len() {
                break;
            }
            let d_type = buf[off + 18];
            let name_area = &buf[off + 19..off + reclen];
            let len = name_area.iter().position(|&b| b == 0).unwrap_or(name_area.len());
            out.push(DirEntry { name: name_area[..len].to_vec(), ino, d_type });
            off += reclen;
        }
    }

    /// The sorted entries.
    pub fn entries(&self) -> &[DirEntry] {
        &self.entries
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the directory is empty (not even `.`).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries from position `pos` that fit in `buf_len` bytes, as getdents64 records, and the position
    /// after them. An empty result means the end of the directory; `ino_of` maps each entry's inode
    /// number (the transport uses it to apply the deterministic inode numbering).
    pub fn serve(
        &self,
        pos: u64,
        buf_len: usize,
        mut ino_of: impl FnMut(&DirEntry) -> u64,
    ) -> Result<(Vec<u8>, u64), DetError> {
        let mut out = Vec::new();
        let mut i = usize::try_from(pos).unwrap_or(usize::MAX).min(self.entries.len());
        while i < self.entries.len() {
            let e = &self.entries[i];
            let reclen = dirent64_reclen(e.name.len());
            if out.len() + reclen > buf_len {
                if out.is_empty() {
                    return Err(DetError::BufferTooSmall {
                        buf_len,
                        needed: reclen,
                        name: String::from_utf8_lossy(&e.name).into_owned(),
                    });
                }
                break;
            }
            let start = out.len();
            out.extend_from_slice(&ino_of(e).to_le_bytes());
            out.extend_from_slice(&((i + 1) as i64).to_le_bytes());
            out.extend_from_slice(&(reclen as u16).to_le_bytes());
            out.push(e.d_type);
            out.extend_from_slice(&e.name);
            out.resize(start + reclen, 0);
            i += 1;
        }
        Ok((out, i.max(pos.min(self.entries.len() as u64) as usize) as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(name: &str, ino: u64) -> DirEntry {
        DirEntry { name: name.as_bytes().to_vec(), ino, d_type: 8 }
    }

    fn names(buf: &[u8]) -> Vec<String> {
        let mut v = Vec::new();
        DirListing::parse_dirents(buf, &mut v);
        v.into_iter().map(|e| String::from_utf8(e.name).unwrap()).collect()
    }

    #[test]
    fn orders_are_deterministic_permutations() {
        let mk = || (0..20u8).map(|i| DirEntry { name: vec![b'a' + i], ino: i as u64, d_type: 8 }).collect::<Vec<_>>();
        let names = |l: &DirListing| l.entries().iter().map(|e| e.name[0]).collect::<Vec<u8>>();
        let sorted = names(&DirListing::new_ordered(mk(), DirOrder::Sorted));
        let mut rev = names(&DirListing::new_ordered(mk(), DirOrder::Reversed));
        let s1 = names(&DirListing::new_ordered(mk(), DirOrder::Shuffled(1)));
        assert_eq!(s1, names(&DirListing::new_ordered(mk(), DirOrder::Shuffled(1))));
        assert_ne!(s1, names(&DirListing::new_ordered(mk(), DirOrder::Shuffled(2))));
        assert_ne!(s1, sorted);
        let mut s1_sorted = s1.clone();
        s1_sorted.sort();
        assert_eq!(s1_sorted, sorted);
        rev.reverse();
        assert_eq!(rev, sorted);
        assert_eq!(DirOrder::parse("shuffled:7"), Some(DirOrder::Shuffled(7)));
        assert_eq!(DirOrder::parse("reversed"), Some(DirOrder::Reversed));
        assert_eq!(DirOrder::parse("random"), None);
    }

    #[test]
    fn sorted_by_name_bytewise() {
        let d = DirListing::new(vec![entry("b", 1), entry("B", 2), entry("..", 3), entry(".", 4), entry("a", 5)]);
        let (buf, pos) = d.serve(0, 4096, |e| e.ino).unwrap();
        assert_eq!(names(&buf), vec![".", "..", "B", "a", "b"]);
        assert_eq!(pos, 5);
        let (buf, pos) = d.serve(pos, 4096, |e| e.ino).unwrap();
        assert!(buf.is_empty());
        assert_eq!(pos, 5);
    }

    #[test]
    fn records_are_aligned_and_carry_offsets() {
        let d = DirListing::new(vec![entry("abc", 42)]);
        let (buf, _) = d.serve(0, 4096, |e| e.ino * 10).unwrap();
        assert_eq!(buf.len(), 24);
        assert_eq!(u64::from_le_bytes(buf[0..8].try_into().unwrap()), 420);
        assert_eq!(i64::from_le_bytes(buf[8..16].try_into().unwrap()), 1);
        assert_eq!(u16::from_le_bytes([buf[16], buf[17]]), 24);
        assert_eq!(buf[18], 8);
        assert_eq!(&buf[19..23], b"abc\0");
        assert_eq!(dirent64_reclen(4), 24);
        assert_eq!(dirent64_reclen(5), 32);
    }

    #[test]
    fn too_small_buffer_is_an_error_not_a_panic() {
        let d = DirListing::new(vec![entry("a-long-name", 1)]);
        assert!(matches!(d.serve(0, 10, |e| e.ino), Err(DetError::BufferTooSmall { .. })));
        assert_eq!(
            d.serve(0, 0, |e| e.ino).map(|_| ()),
            Err(DetError::BufferTooSmall { buf_len: 0, needed: 32, name: "a-long-name".into() })
        );
    }

    #[test]
    fn seeking_back_restarts_and_past_the_end_is_eof() {
        let d = DirListing::new((0..10).map(|i| entry(&format!("f{i}"), i)).collect());
        let (_, pos) = d.serve(0, 50, |e| e.ino).unwrap();
        assert_eq!(pos, 2);
        let (buf, _) = d.serve(0, 50, |e| e.ino).unwrap();
        assert_eq!(names(&buf), vec!["f0", "f1"]);
        let (buf, pos) = d.serve(1_000_000, 4096, |e| e.ino).unwrap();
        assert!(buf.is_empty());
        assert_eq!(pos, 10);
    }

    proptest! {
        #[test]
        fn any_buffer_size_gives_the_same_sorted_listing(
            mut raw in proptest::collection::btree_set("[a-zA-Z0-9._-]{1,40}", 0..60),
            buf_len in 64usize..2048,
            shuffle_seed in any::<u64>(),
        ) {
            let mut v: Vec<String> = std::mem::take(&mut raw).into_iter().collect();
            let n = v.len();
            // Deterministic shuffle so the input order is arbitrary.
            let mut x = shuffle_seed | 1;
            for i in (1..n).rev() {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                v.swap(i, (x % (i as u64 + 1)) as usize);
            }
            let d = DirListing::new(v.iter().enumerate().map(|(i, s)| entry(s, i as u64)).collect());
            let mut pos = 0;
            let mut got = Vec::new();
            loop {
                let (buf, next) = d.serve(pos, buf_len, |e| e.ino).unwrap();
                if buf.is_empty() { break; }
                prop_assert!(buf.len() <= buf_len);
                got.extend(names(&buf));
                pos = next;
            }
            let mut want = v.clone();
            want.sort();
            prop_assert_eq!(got, want);
        }
    }
}
