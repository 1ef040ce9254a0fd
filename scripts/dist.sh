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
mkdir -p dist/ggml-src/src
rm -f dist/toy dist/libggml*.so*
cp "$CARGO_TARGET_DIR/release/toy" dist/
cp -P "$CARGO_TARGET_DIR"/release/libggml*.so* dist/
# The patched source the build used (ggml-sys prints it as `source_dir`). Files
# whose content did not change keep their time stamps, so a CUDA build folder
# kept from an earlier scripts/cuda-backend.sh run recompiles only what changed.
src=$(ls -td "$CARGO_TARGET_DIR"/release/build/toy-ggml-sys-*/out/ggml-src/ggml | head -1)
# Without rsync: a fresh copy (files a patch no longer makes must not stay behind).
sync() { if command -v rsync >/dev/null; then rsync -rc --delete "$@"; else rm -rf "$2/$(basename "$1")" && cp -a "$1" "$2"; fi; }
for f in CMakeLists.txt cmake include; do sync "$src/$f" dist/ggml-src/; done
# Only the parts the CPU and CUDA builds read.
for f in "$src"/src/*; do
  case "$(basename "$f")" in
    ggml-cpu|ggml-cuda|*.c|*.cpp|*.h|*.in|CMakeLists.txt) sync "$f" dist/ggml-src/src/ ;;
  esac
done
du -sh dist
