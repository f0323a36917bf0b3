//! A rayon parallel sum over a 4-thread pool: many small tasks stolen between workers.
use rayon::prelude::*;

fn main() {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(4).build().expect("a pool of 4 threads");
    let total: u64 = pool.install(|| (0..40_000_000u64).into_par_iter().map(|i| i % 7 * i % 13).sum());
    println!("{total}");
}
