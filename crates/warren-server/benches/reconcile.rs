//! Reconcile benchmark (written below).
fn main() {}
