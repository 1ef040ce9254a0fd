#!/usr/bin/env bash
# Build ggml's CUDA backend as a loadable module (libggml-cuda.so) from the same
# pinned and patched ggml source the Rust build uses. Runs on a GPU machine that
# has nvcc and cmake but no Rust toolchain; `toy` built with `--features dynamic`
# loads the module (put it next to the binary, or pass --backend-dir DIR, or set
# TOY_BACKEND_DIR / GGML_BACKEND_PATH).
#
#   scripts/cuda-backend.sh [GGML_SOURCE] [OUT_DIR]
#
# GGML_SOURCE: the patched ggml folder (default dist/ggml-src, written by
#   scripts/dist.sh; or any ggml 0.26.0 folder with patches/ applied).
# OUT_DIR: where libggml-cuda.so goes (default dist).
# Environment: CMAKE_CUDA_ARCHITECTURES (default 90a = H100/H200, with patch
#   0069's wgmma kernels; 90 or others for other GPUs),
#   GGML_CUDA_FA (default OFF: FlashAttention has no backward, training never
#   uses it), JOBS (default: all cores).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
src=$(cd "${1:-$here/dist/ggml-src}" && pwd)
out=${2:-$here/dist}
mkdir -p "$out"
out=$(cd "$out" && pwd)
build=${BUILD_DIR:-$(mktemp -d)}
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
# The options must match ggml-sys's `dynamic` build (same struct layouts, one
# shared libggml-base); only the CUDA ones are added.
cmake -S "$here/ggml-sys/cmake" -B "$build" "${gen[@]}" \
  -DTOY_GGML_SOURCE_DIR="$src" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF \
  -DGGML_BLAS=OFF -DGGML_LLAMAFILE=ON -DGGML_CCACHE=OFF -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF \
  -DGGML_CUDA=ON -DGGML_CUDA_FA="${GGML_CUDA_FA:-OFF}" -DGGML_CUDA_NCCL=OFF -DGGML_CUDA_GRAPHS=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${CMAKE_CUDA_ARCHITECTURES:-90a}" -DCMAKE_POSITION_INDEPENDENT_CODE=ON
cmake --build "$build" --target ggml-cuda -j "${JOBS:-$(nproc)}"
lib=$(find "$build" -name 'libggml-cuda.so' | head -1)
cp "$lib" "$out/"
echo "built $out/libggml-cuda.so"
