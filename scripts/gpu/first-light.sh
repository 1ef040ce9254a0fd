#!/usr/bin/env bash
# First run on a GPU machine (no Rust there): build libggml-cuda.so from the
# carried patched source, check toy sees the device, compare a short CUDA run
# with the CPU one, time training steps. Writes logs under $OUT.
#   bash scripts/gpu/first-light.sh      (needs dist/ from scripts/dist.sh)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
nvcc --version | tail -2; cmake --version | head -1; ldd --version | head -1
if [ ! -f dist/libggml-cuda.so ]; then
  if [ -f dist/libggml-cuda.so.xz ]; then xz -d -k dist/libggml-cuda.so.xz; else
  start=$(date +%s)
  JOBS=$(nproc) bash scripts/cuda-backend.sh dist/ggml-src dist > "$OUT/cuda-build.log" 2>&1 || { tail -40 "$OUT/cuda-build.log"; exit 1; }
  echo "cuda module built in $(( $(date +%s) - start )) s"
  fi
fi
ls -la dist/libggml-cuda.so
[ -f "$OUT/libggml-cuda.so.xz" ] || xz -T0 -6 -c dist/libggml-cuda.so > "$OUT/libggml-cuda.so.xz"
cd dist
./toy devices
./toy train --preset smoke --steps 100 --out /tmp/cpu-smoke --json --seed 3 > "$OUT/cpu-smoke.json"
./toy train --preset smoke --steps 100 --out /tmp/gpu-smoke --json --seed 3 --device cuda > "$OUT/gpu-smoke.json" 2> "$OUT/gpu-smoke.err"
cat "$OUT/gpu-smoke.err" | head -5
cp /tmp/gpu-smoke/events.jsonl "$OUT/gpu-smoke-events.jsonl"; cp /tmp/cpu-smoke/events.jsonl "$OUT/cpu-smoke-events.jsonl"
python3 - <<'PY'
import json
def losses(p): return {e["step"]: e["loss"] for e in map(json.loads, open(p)) if e["kind"] == "step"}
a, b = losses("/tmp/cpu-smoke/events.jsonl"), losses("/tmp/gpu-smoke/events.jsonl")
rel = max(abs(a[k] - b[k]) / abs(a[k]) for k in a)
print(f"smoke cpu vs cuda over {len(a)} steps: max relative loss difference {rel:.2e}")
PY
for p in smoke small medium; do ./toy debug bench --preset $p --device cuda --steps 20 --warmup 3 | tee -a "$OUT/bench-toy-cuda.jsonl" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['preset'], 'median ms', round(d['median_ms'],2), 'tok/s', round(d['tokens_per_s']), 'fallbacks', len(d['cpu_fallbacks']), 'splits', d['n_splits'])"; done
