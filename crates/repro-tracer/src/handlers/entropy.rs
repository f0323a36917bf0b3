//! Entropy: getrandom from the task's seeded stream (AT_RANDOM is rewritten at the exec stop, /dev/urandom is a
//! generated file: see `exec.rs` and `files.rs`).

use crate::guest::Guest;
use crate::reply::Outcome;
use crate::state::Shared;

/// getrandom(buf, len): at most `GETRANDOM_MAX` bytes of the task's stream.
pub(crate) fn getrandom<G: Guest>(sh: &mut Shared, g: &mut G, buf: u64, len: usize) -> Outcome {
    let bytes = sh.ctl.getrandom(g.tid(), len);
    g.write_bytes(buf, &bytes)?;
    Ok(bytes.len() as i64)
}

#[cfg(test)]
mod tests {
    use crate::decode::decode;
    use crate::guest::fake::FakeGuest;
    use crate::handlers::dispatch;
    use crate::handlers::testing::shared;
    use crate::reply::Reply;

    fn random(seed: u64, tid: i32, len: usize) -> Vec<u8> {
        let mut sh = shared(seed, 1000);
        let mut g = FakeGuest::new(tid);
        g.map(0x1000, len);
        let nr = libc::SYS_getrandom;
        let r = dispatch(&mut sh, &mut g, nr, decode(nr, [0x1000, len as u64, 0, 0, 0, 0]));
        assert!(matches!(r, Reply::Value(n) if n == len as i64), "{r:?}");
        g.get(0x1000, len)
    }

    #[test]
    fn getrandom_fills_the_buffer_from_the_seed() {
        let a = random(7, 3, 64);
        assert_eq!(a, random(7, 3, 64), "same seed, same task: same bytes");
        assert_ne!(a, random(8, 3, 64), "another seed");
        assert_ne!(a, random(7, 4, 64), "another task has a stream of its own");
        assert!(a.iter().any(|&b| b != 0));
    }

    #[test]
    fn getrandom_to_unmapped_memory_is_efault() {
        let mut sh = shared(1, 1000);
        let mut g = FakeGuest::new(3);
        let nr = libc::SYS_getrandom;
        let r = dispatch(&mut sh, &mut g, nr, decode(nr, [0x1000, 16, 0, 0, 0, 0]));
        assert!(matches!(r, Reply::Error(libc::EFAULT)));
    }
}
