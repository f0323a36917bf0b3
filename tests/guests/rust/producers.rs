//! Two producers send into one channel; the consumer prints the order the messages arrived in. The order depends
//! only on how the threads interleave.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;

fn main() {
    let (tx, rx) = mpsc::channel();
    // A lock-free read-modify-write race beside it: `counter` is incremented with a load and a store.
    let counter = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for name in ['a', 'b'] {
        let tx = tx.clone();
        let counter = Arc::clone(&counter);
        handles.push(thread::spawn(move || {
            for _ in 0..6 {
                let v = counter.load(Ordering::Relaxed);
                thread::yield_now();
                counter.store(v + 1, Ordering::Relaxed);
                tx.send(name).unwrap();
            }
        }));
    }
    drop(tx);
    for h in handles {
        h.join().unwrap();
    }
    let order: String = rx.iter().collect();
    println!("{order} counter={}", counter.load(Ordering::Relaxed));
}
