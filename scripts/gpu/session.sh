#!/usr/bin/env bash
# Everything the GPU issues ask for, in one command on a GPU machine without a
# Rust toolchain (see scripts/gpu/README.md). Prepare here with:
#   scripts/dist.sh && scripts/gpu/pack-tests.sh
# then run there:  bash scripts/gpu/session.sh      (logs and tables under $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
here=$(pwd)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
if [ ! -f dist/libggml-cuda.so ]; then
  start=$(date +%s)
  JOBS=$(nproc) bash scripts/cuda-backend.sh dist/ggml-src dist > "$OUT/cuda-build.log" 2>&1 || { tail -40 "$OUT/cuda-build.log"; exit 1; }
  echo "libggml-cuda.so built in $(( $(date +%s) - start )) s"
fi
[ -d .whl ] && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
T=$here/dist/toy
$T devices | tee "$OUT/devices.txt"

echo "== ggml-rs tests on CUDA (issue 3, 7)"
for t in dist/tests/*; do TOY_TEST_DEVICE=cuda "$t" --test-threads 4 2>&1 | tail -3; done | tee "$OUT/tests-cuda.txt"

echo "== CPU vs CUDA losses, 100 steps from the same weights and batches (issue 6)"
for arch in llama gpt2; do
  $T train --arch $arch --preset small --corpus data/default-corpus.txt --steps 100 --eval-every 0 --out /tmp/cpu-$arch --json --threads $(nproc) > /dev/null
  $T train --arch $arch --preset small --corpus data/default-corpus.txt --steps 100 --eval-every 0 --out /tmp/gpu-$arch --json --device cuda 2> "$OUT/fallback-$arch.txt" > /dev/null
  python3 - "$arch" <<'PY'
import json, sys
a = sys.argv[1]
L = lambda p: {e["step"]: e["loss"] for e in map(json.loads, open(p)) if e["kind"] == "step"}
c, g = L(f"/tmp/cpu-{a}/events.jsonl"), L(f"/tmp/gpu-{a}/events.jsonl")
fb = [e for e in map(json.loads, open(f"/tmp/gpu-{a}/events.jsonl")) if e["kind"] == "fallback"]
print(f"{a} small: max relative loss difference CPU vs CUDA over {len(c)} steps: {max(abs(c[k]-g[k])/abs(c[k]) for k in c):.2e}; CPU-fallback nodes: {fb[0]['n_nodes'] if fb else 0}")
PY
done | tee "$OUT/cpu-vs-cuda.txt"

echo "== parity on CUDA (issue 5, 7)"
for run in "llama smoke 200" "llama small 200" "gpt2 smoke 200"; do
  set -- $run
  python3 scripts/parity/parity.py --toy $T --arch $1 --preset $2 --steps $3 --corpus data/default-corpus.txt --device cuda --torch-device cuda --work /tmp/parity-$1-$2 2>&1 | tail -14
done | tee "$OUT/parity-cuda.txt"

echo "== benchmark (issue 6, 7)"
python3 scripts/bench/bench.py --toy $T --device cuda --presets smoke,small,medium --compile --reps 3 --steps 20 --json-out "$OUT/bench-cuda-llama.json" | tee "$OUT/bench-cuda.txt"
python3 scripts/bench/bench.py --toy $T --device cuda --arch gpt2 --presets small --compile --reps 3 --steps 20 --json-out "$OUT/bench-cuda-gpt2.json" | tee -a "$OUT/bench-cuda.txt"
