//! With the `dynamic` feature, let the `toy` binary (and test binaries in
//! `deps/`) find the shared ggml libraries next to themselves.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_DYNAMIC").is_some() {
        println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN:$ORIGIN/..");
    }
}
