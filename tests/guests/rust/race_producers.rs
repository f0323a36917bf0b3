// A message order race: two producer threads send into one channel, yielding between messages; the consumer prints
// which producer each of the first messages came from.
use std::sync::mpsc;
use std::thread;

fn main() {
    let (tx, rx) = mpsc::channel();
    let producers: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|name| {
            let tx = tx.clone();
            thread::spawn(move || {
                for i in 0..200u64 {
                    // Some work whose length differs by message, then a scheduling point.
                    let mut acc = 0u64;
                    for k in 0..(5_000 + (i * 7_919) % 20_000) {
                        acc = acc.wrapping_add(k * k);
                    }
                    std::hint::black_box(acc);
                    tx.send(name).unwrap();
                    thread::yield_now();
                }
            })
        })
        .collect();
    drop(tx);
    let order: String = rx.iter().take(40).collect();
    for p in producers {
        p.join().unwrap();
    }
    println!("{order}");
}
