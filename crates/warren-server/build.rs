//! Rebuilds the server when a migration is added or changed: `sqlx::migrate!` embeds the
//! migrations directory, which cargo does not otherwise watch.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
