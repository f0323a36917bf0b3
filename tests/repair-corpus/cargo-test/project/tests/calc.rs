use calc::{add, total};

#[test]
fn adds() {
    assert_eq!(add(2, 3), 5);
}

#[test]
fn totals() {
    assert_eq!(total(&[1, 2, 3]), 6);
}
