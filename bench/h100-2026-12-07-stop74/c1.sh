#!/usr/bin/env bash
# stop 74 call 1: flash-kernel candidates, each off with its variable: 0096 (backward: S^T and dP^T
# as two wgmma groups, dV issued before dS is computed, dK after), 0097 (forward: a wgmma group per
# query tile, one tile's softmax under the other's products), 0098 (backward, on 0096: dQ = dS K as
# wgmma from shared memory instead of mma.sync). The harness (checks against f64, kernel times) per
# setting; then whole steps of SmolLM2-135M's shape at 4096/8192 and GPT-2 124M, alternating.
cd "$(dirname "$0")/../.."
OUT=/tmp/cs0 bash scripts/gpu/cuda-session.sh info > /dev/null 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break; done
L=$OUT/c1.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
T=.devcarry/toy
S=$(date +%s)
OFF="TOY_CUDA_NO_0096=1 TOY_CUDA_NO_0097=1 TOY_CUDA_NO_0098=1"
nvcc -O3 -std=c++17 -arch=sm_90a -DGGML_CUDA_WGMMA -use_fast_math -I .devcarry/flash scripts/gpu/attn-flash-test.cu -o /tmp/aft 2> $OUT/nvcc.err || { echo nvcc failed >> $L; tail $OUT/nvcc.err >> $L; }
for env in "TOY_X=1" "TOY_CUDA_NO_0098=1" "$OFF"; do
  echo "== check [$env]" >> $OUT/harness.txt
  env $env timeout 60 /tmp/aft check >> $OUT/harness.txt 2>&1; echo "check [$env] rc=$?" >> $L
done
grep -c PASS $OUT/harness.txt >> $L; grep FAIL $OUT/harness.txt | head -5 >> $L
for rep in 1 2; do for shape in "64 9 3 4096 8" "64 9 3 8192 8" "64 12 12 1024 16"; do
  for env in "$OFF" "TOY_CUDA_NO_0097=1 TOY_CUDA_NO_0098=1" "TOY_CUDA_NO_0097=1" "TOY_X=1"; do
    echo "[$env] $(env $env timeout 30 /tmp/aft time $shape bf16)" >> $L
  done
done; done
echo "t=$(( $(date +%s) - S ))" >> $L
ms() { python3 -c "import json,sys; d=json.load(sys.stdin); print(round(d['median_ms'],3), round((d.get('device_used_bytes') or 0)/2**20), d.get('last_loss'), len(d.get('cpu_fallbacks') or []))" 2>/dev/null || echo fail; }
for a in "--preset smollm2-135m --vocab 49152 --context 4096 --attention fused" "--preset smollm2-135m --vocab 49152 --context 8192 --attention fused" \
         "--preset gpt2-124m --vocab 50257 --dtype bf16"; do
  envs=("$OFF" "TOY_CUDA_NO_0097=1" "TOY_X=1"); case $a in *8192*) envs=("$OFF" "TOY_X=1");; esac
  for rep in 1 2; do for env in "${envs[@]}"; do
    echo "[$env] $a $(env $env timeout 60 $T debug bench $a --device cuda --steps 10 --warmup 3 2>/dev/null | ms)" >> $L
  done; done
  echo "t=$(( $(date +%s) - S ))" >> $L
done
cat $L
