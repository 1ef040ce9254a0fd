#!/usr/bin/env bash
# stop 74 call 2: the harness alone, with 0098 (dQ as wgmma) allowed without 0096: checks, then
# kernel times at SmolLM2's shape (4096, 8192) and GPT-2 124M's, two rounds alternating.
cd "$(dirname "$0")/../.."
L=$OUT/c2.log
nvidia-smi --query-gpu=name --format=csv,noheader > $L
nvcc -O3 -std=c++17 -arch=sm_90a -DGGML_CUDA_WGMMA -use_fast_math -I .devcarry/flash scripts/gpu/attn-flash-test.cu -o /tmp/aft 2> $OUT/nvcc.err || { echo nvcc failed >> $L; tail $OUT/nvcc.err >> $L; }
N97=TOY_CUDA_NO_0097=1
for env in "$N97 TOY_CUDA_NO_0096=1" "$N97"; do env $env timeout 60 /tmp/aft check > $OUT/check.txt 2>&1; echo "check [$env] rc=$? $(grep -c PASS $OUT/check.txt) PASS"; done >> $L
for rep in 1 2 3; do for shape in "64 9 3 4096 8" "64 9 3 8192 8" "64 12 12 1024 16"; do
  for env in "$N97 TOY_CUDA_NO_0096=1 TOY_CUDA_NO_0098=1" "$N97 TOY_CUDA_NO_0096=1" "$N97"; do
    echo "[$env] $(env $env timeout 30 /tmp/aft time $shape bf16)" >> $L
  done
done; done
cat $L
