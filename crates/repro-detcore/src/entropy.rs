//! The entropy stream: ChaCha20 (RFC 8439 block function) keyed from the run's seed.
//!
//! Every random byte the guest sees (getrandom, /dev/urandom, AT_RANDOM, uuid) comes from one stream,
//! in the order the guest asks for it. Values that must not depend on that order (the boot id) come
//! from separate streams, told apart by the nonce.

/// The ChaCha20 block function over a 256-bit key and a 96-bit nonce.
#[derive(Debug, Clone)]
pub struct ChaCha20 {
    state: [u32; 16],
}

fn quarter(s: &mut [u32; 16], a: usize, b: usize, c: usize, d: usize) {
    s[a] = s[a].wrapping_add(s[b]);
    s[d] = (s[d] ^ s[a]).rotate_left(16);
    s[c] = s[c].wrapping_add(s[d]);
    s[b] = (s[b] ^ s[c]).rotate_left(12);
    s[a] = s[a].wrapping_add(s[b]);
    s[d] = (s[d] ^ s[a]).rotate_left(8);
    s[c] = s[c].wrapping_add(s[d]);
    s[b] = (s[b] ^ s[c]).rotate_left(7);
}

impl ChaCha20 {
    /// A cipher at block counter `counter`.
    pub fn new(key: &[u8; 32], nonce: &[u8; 12], counter: u32) -> Self {
        let mut state = [0u32; 16];
        state[0] = 0x6170_7865;
        state[1] = 0x3320_646e;
        state[2] = 0x7962_2d32;
        state[3] = 0x6b20_6574;
        for i in 0..8 {
            state[4 + i] = u32::from_le_bytes([key[4 * i], key[4 * i + 1], key[4 * i + 2], key[4 * i + 3]]);
        }
        state[12] = counter;
        for i in 0..3 {
            state[13 + i] = u32::from_le_bytes([nonce[4 * i], nonce[4 * i + 1], nonce[4 * i + 2], nonce[4 * i + 3]]);
        }
        ChaCha20 { state }
    }

    /// The next 64-byte keystream block; the counter moves on (and carries into the first nonce word,
    /// so a stream never repeats within 2^38 bytes).
    pub fn next_block(&mut self) -> [u8; 64] {
        let mut w = self.state;
        for _ in 0..10 {
            quarter(&mut w, 0, 4, 8, 12);
            quarter(&mut w, 1, 5, 9, 13);
            quarter(&mut w, 2, 6, 10, 14);
            quarter(&mut w, 3, 7, 11, 15);
            quarter(&mut w, 0, 5, 10, 15);
            quarter(&mut w, 1, 6, 11, 12);
            quarter(&mut w, 2, 7, 8, 13);
            quarter(&mut w, 3, 4, 9, 14);
        }
        let mut out = [0u8; 64];
        for i in 0..16 {
            out[4 * i..4 * i + 4].copy_from_slice(&w[i].wrapping_add(self.state[i]).to_le_bytes());
        }
        let (c, carry) = self.state[12].overflowing_add(1);
        self.state[12] = c;
        if carry {
            self.state[13] = self.state[13].wrapping_add(1);
        }
        out
    }
}

/// A byte stream derived from a seed and a domain (which stream of the run this is).
#[derive(Debug, Clone)]
pub struct EntropyStream {
    cipher: ChaCha20,
    block: [u8; 64],
    used: usize,
    produced: u64,
}

/// The stream for getrandom, /dev/urandom, AT_RANDOM and uuid.
pub const DOMAIN_MAIN: u32 = 0;
/// The stream for the boot id (fixed for a run, whatever the guest reads first).
pub const DOMAIN_BOOT_ID: u32 = 1;

impl EntropyStream {
    /// The stream `domain` of the run seeded with `seed`.
    pub fn new(seed: u64, domain: u32) -> Self {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        key[8..32].copy_from_slice(b"repro determinism v1 key");
        let mut nonce = [0u8; 12];
        nonce[8..12].copy_from_slice(&domain.to_le_bytes());
        EntropyStream { cipher: ChaCha20::new(&key, &nonce, 0), block: [0; 64], used: 64, produced: 0 }
    }

    /// The stream of one guest task (`tid`, a pid of the guest's PID namespace) in domain `domain`: every task
    /// has its own stream, so what one process draws does not depend on how the scheduler interleaved it
    /// with the others (a pipeline's processes start in a racy order).
    pub fn for_task(seed: u64, domain: u32, tid: i32) -> Self {
        let mut s = EntropyStream::new(seed, domain);
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        key[8..32].copy_from_slice(b"repro determinism v1 key");
        let mut nonce = [0u8; 12];
        nonce[0..4].copy_from_slice(&(tid as u32).to_le_bytes());
        nonce[4] = 1;
        nonce[8..12].copy_from_slice(&domain.to_le_bytes());
        s.cipher = ChaCha20::new(&key, &nonce, 0);
        s
    }

    /// Fills `out` with the next bytes of the stream.
    pub fn fill(&mut self, out: &mut [u8]) {
        let mut i = 0;
        while i < out.len() {
            if self.used == 64 {
                self.block = self.cipher.next_block();
                self.used = 0;
            }
            let n = (64 - self.used).min(out.len() - i);
            out[i..i + n].copy_from_slice(&self.block[self.used..self.used + n]);
            self.used += n;
            i += n;
        }
        self.produced += out.len() as u64;
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        self.fill(&mut v);
        v
    }

    /// How many bytes the stream has produced.
    pub fn produced(&self) -> u64 {
        self.produced
    }

    /// A random (version 4) uuid from the next 16 bytes, formatted as the kernel does (with a newline).
    pub fn uuid_line(&mut self) -> String {
        let mut b = [0u8; 16];
        self.fill(&mut b);
        let mut s = format_uuid(b);
        s.push('\n');
        s
    }
}

/// Formats 16 bytes as a version-4, variant-1 uuid: `xxxxxxxx-xxxx-4xxx-[89ab]xxx-xxxxxxxxxxxx`.
pub fn format_uuid(mut b: [u8; 16]) -> String {
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let mut s = String::with_capacity(36);
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push_str(&format!("{byte:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn rfc8439_block_function_vector() {
        let key: [u8; 32] = core::array::from_fn(|i| i as u8);
        let nonce = [0, 0, 0, 0x09, 0, 0, 0, 0x4a, 0, 0, 0, 0];
        let mut c = ChaCha20::new(&key, &nonce, 1);
        assert_eq!(
            hex(&c.next_block()),
            "10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e\
             d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e"
        );
    }

    #[test]
    fn zero_key_vector() {
        let mut c = ChaCha20::new(&[0; 32], &[0; 12], 0);
        assert_eq!(
            hex(&c.next_block()),
            "76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7\
             da41597c5157488d7724e03fb8d84a376a43b8f41518a11cc387b669b2ee6586"
        );
    }

    #[test]
    fn same_seed_same_stream_different_seed_different_stream() {
        let a = EntropyStream::new(0, DOMAIN_MAIN).bytes(100);
        let b = EntropyStream::new(0, DOMAIN_MAIN).bytes(100);
        let c = EntropyStream::new(1, DOMAIN_MAIN).bytes(100);
        let d = EntropyStream::new(0, DOMAIN_BOOT_ID).bytes(100);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
    }

    #[test]
    fn uuid_is_version_4_variant_1() {
        let mut s = EntropyStream::new(7, DOMAIN_MAIN);
        let u = s.uuid_line();
        assert_eq!(u.len(), 37);
        assert!(u.ends_with('\n'));
        let u = u.trim_end();
        let parts: Vec<&str> = u.split('-').collect();
        assert_eq!(parts.iter().map(|p| p.len()).collect::<Vec<_>>(), vec![8, 4, 4, 4, 12]);
        assert!(parts[2].starts_with('4'));
        assert!(matches!(&parts[3][..1], "8" | "9" | "a" | "b"));
        assert!(u.chars().all(|c| c == '-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_eq!(format_uuid([0; 16]), "00000000-0000-4000-8000-000000000000");
        assert_eq!(format_uuid([0xff; 16]), "ffffffff-ffff-4fff-bfff-ffffffffffff");
        assert_ne!(s.uuid_line(), format!("{u}\n"));
    }

    proptest! {
        #[test]
        fn chunking_does_not_change_the_stream(seed in any::<u64>(), chunks in proptest::collection::vec(0usize..200, 0..20)) {
            let total: usize = chunks.iter().sum();
            let whole = EntropyStream::new(seed, DOMAIN_MAIN).bytes(total);
            let mut s = EntropyStream::new(seed, DOMAIN_MAIN);
            let mut pieces = Vec::new();
            for n in chunks {
                pieces.extend(s.bytes(n));
            }
            prop_assert_eq!(whole, pieces);
            prop_assert_eq!(s.produced(), total as u64);
        }
    }
}
