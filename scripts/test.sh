#!/usr/bin/env bash
# The project's test command (README, CI): every crate's tests, then a check
# that the committed ggml bindings match the patched headers when libclang is
# installed.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --locked "$@"
if ldconfig -p 2>/dev/null | grep -q libclang || ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1; then
  cargo test -p toy-ggml-sys --features generate-bindings --locked bindings_current
else
  echo "libclang not found: skipping the bindings freshness check"
fi
