// Prints what a Rust program sees that would differ between runs (compiled with rustc by the tests).
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

fn main() {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    println!("systemtime {}.{:09}", now.as_secs(), now.subsec_nanos());
    let mut h = RandomState::new().build_hasher();
    h.write_u32(7);
    println!("randomstate {:x}", h.finish());
    println!("pid {}", std::process::id());
    println!("parallelism {}", std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0));
    let t0 = Instant::now();
    let handles: Vec<_> = (0..3).map(|i| std::thread::spawn(move || i * 2)).collect();
    let sum: i32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    println!("threads {sum}");
    let secs = std::env::var("PROBE_SLEEP").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    std::thread::sleep(std::time::Duration::from_secs(secs));
    println!("slept {}", t0.elapsed().as_secs());
}
