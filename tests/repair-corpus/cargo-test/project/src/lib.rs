//! A sum with a planted bug.

/// The sum of `xs` (the planted bug drops the last item).
pub fn total(xs: &[i64]) -> i64 {
    let mut s = 0;
    let mut i = 0;
    while i + 1 < xs.len() {
        s += xs[i];
        i += 1;
    }
    s
}

/// `a + b`.
pub fn add(a: i64, b: i64) -> i64 {
    a + b
}
