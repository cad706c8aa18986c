//! Rebuilds the crate when a migration file changes, so `sqlx::migrate!` embeds the new set.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
