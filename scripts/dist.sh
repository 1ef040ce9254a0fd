#!/usr/bin/env bash
# Build `toy` with loadable backends (--features dynamic) and gather what a GPU
# machine without a Rust toolchain needs into dist/: the binary, the shared
# ggml libraries and CPU module, and the patched ggml source for
# scripts/cuda-backend.sh.
#
#   scripts/dist.sh            # -> dist/{toy, libggml*.so*, ggml-src/}
# Environment: CARGO_TARGET_DIR (default target-dyn, kept apart from the static build).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$here/target-dyn}
cargo build --release --locked -p toy-cli --features dynamic
rm -rf dist && mkdir -p dist
cp "$CARGO_TARGET_DIR/release/toy" dist/
cp -P "$CARGO_TARGET_DIR"/release/libggml*.so* dist/
# The patched source the build used (ggml-sys prints it as `source_dir`).
src=$(ls -td "$CARGO_TARGET_DIR"/release/build/toy-ggml-sys-*/out/ggml-src/ggml | head -1)
mkdir -p dist/ggml-src/src
cp -r "$src/CMakeLists.txt" "$src/cmake" "$src/include" dist/ggml-src/
# Only the parts the CPU and CUDA builds read.
for f in "$src"/src/*; do
  case "$(basename "$f")" in
    ggml-cpu|ggml-cuda|*.c|*.cpp|*.h|*.in|CMakeLists.txt) cp -r "$f" dist/ggml-src/src/ ;;
  esac
done
du -sh dist
