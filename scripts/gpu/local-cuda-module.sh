#!/usr/bin/env bash
# Build the CUDA module (libggml-cuda.so, sm_90a) on a machine without a GPU or a
# CUDA toolkit, from pip's CUDA 13 wheels, so that a GPU call does not spend its
# minutes on the build (about 13 minutes on 2 cores here, ~3 on the GPU machine).
#
#   scripts/gpu/local-cuda-module.sh [GGML_SOURCE] [OUT_DIR]
#
# Needs cmake and the wheels nvidia-cuda-nvcc, nvidia-cuda-crt, nvidia-cuda-cccl,
# nvidia-cublas and nvidia-cuda-runtime (PyTorch's CUDA 13 build brings them)
# installed with pip. It assembles a toolkit folder (TOOLKIT, default
# /tmp/cuda) of links to them:
# - the runtime headers of the CUDA 13.0 runtime wheel (downloaded once), as
#   CCCL refuses headers newer than nvcc 13.0;
# - crt/link.stub, which nvcc's link step includes and the wheels lack (two
#   includes suffice for cmake's compiler check; ggml links no device code);
# - a stub libcuda.so with the driver functions ggml calls (the GPU machine's
#   driver provides the real one, soname libcuda.so.1).
# Then it runs scripts/cuda-backend.sh with that toolkit. Carry the result
# xz-compressed as .devcarry/libggml-cuda.so.xz (scripts/gpu/README.md).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
nv=$(python3 -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu13"))')
# The modules that ran on the GPU machine (nvcc 13 there) were built with nvcc 13.0.88 from
# the wheels nvidia-cuda-nvcc, -crt and nvidia-nvvm 13.0.88, nvidia-cuda-cccl 13.0.85 and
# nvidia-cublas 13.0.2.14; newer wheels (13.5) were not tried there.
ver=$("$nv/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
[ "$ver" = 13.0 ] || echo "local-cuda-module.sh: nvcc $ver, not the 13.0 of the modules run so far (scripts/gpu/README.md names the pins)" >&2
tk=${TOOLKIT:-/tmp/cuda}
rt=$tk.runtime-13.0
if [ ! -d "$rt/nvidia" ]; then
  mkdir -p "$rt"
  python3 -m pip download -q --no-deps "nvidia-cuda-runtime==13.0.*" -d "$rt"
  (cd "$rt" && unzip -q -o ./*.whl)
fi
rm -rf "$tk" && mkdir -p "$tk/bin/crt" "$tk/include" "$tk/lib64/stubs"
for f in "$nv"/bin/*; do [ "$(basename "$f")" = crt ] || ln -s "$f" "$tk/bin/"; done
# Newer nvidia-cuda-crt wheels ship bin/crt/*.stub; older ones do not.
for f in "$nv"/bin/crt/*; do [ -e "$f" ] && ln -s "$f" "$tk/bin/crt/"; done
[ -e "$tk/bin/crt/link.stub" ] || printf '#include <stddef.h>\n#include "crt/host_runtime.h"\n' > "$tk/bin/crt/link.stub"
ln -s "$nv/nvvm" "$tk/nvvm"
for f in "$nv"/include/*; do ln -s "$f" "$tk/include/"; done
for f in "$rt"/nvidia/cu13/include/*; do rm -rf "$tk/include/$(basename "$f")"; ln -s "$f" "$tk/include/"; done
for l in cudart cublas cublasLt; do
  ln -s "$nv/lib/lib$l.so.13" "$tk/lib64/lib$l.so"
  ln -s "$nv/lib/lib$l.so.13" "$tk/lib64/lib$l.so.13"
done
ln -s "$nv/lib/libcudart_static.a" "$nv/lib/libcudadevrt.a" "$tk/lib64/"
stub=$(mktemp --suffix=.c)
for f in cuDeviceGet cuDeviceGetAttribute cuGetErrorString cuMemAddressFree cuMemAddressReserve cuMemCreate \
         cuMemGetAllocationGranularity cuMemMap cuMemRelease cuMemSetAccess cuMemUnmap cuGetProcAddress_v2 cuDriverGetVersion; do
  echo "int $f(void) { return 0; }" >> "$stub"
done
cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$tk/lib64/stubs/libcuda.so" "$stub"
rm -f "$stub"
CUDACXX="$tk/bin/nvcc" CUDAToolkit_ROOT="$tk" CUDA_PATH="$tk" JOBS=${JOBS:-$(nproc)} \
  bash "$here/scripts/cuda-backend.sh" "${1:-$here/dist/ggml-src}" "${2:-$here/dist}"
