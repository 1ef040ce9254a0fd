#!/usr/bin/env bash
# Regenerate ggml-sys/src/bindings.rs from the patched ggml headers (needs libclang).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -p toy-ggml-sys --features generate-bindings
out=$(ls -td target/debug/build/toy-ggml-sys-*/out | while read -r d; do [ -f "$d/bindings.rs" ] && echo "$d" && break; done)
cp "$out/bindings.rs" ggml-sys/src/bindings.rs
echo "updated ggml-sys/src/bindings.rs from $out"
