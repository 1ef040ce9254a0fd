#!/usr/bin/env bash
# Not run: no machine could be started for it (the session's device time ran out on failed starts).
# stop 74 call 3: the module as it would land (patch 0096: the flash backward's dQ = dS K as wgmma
# from shared memory; TOY_CUDA_NO_0096 turns it off). Harness checks; whole steps, alternating, at
# SmolLM2-135M's shape (4096, 8192) and GPT-2 124M; the ggml-rs tests on CUDA.
cd "$(dirname "$0")/../.."
. scripts/gpu/call-env.sh
L=$OUT/c3.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
nvcc -O3 -std=c++17 -arch=sm_90a -DGGML_CUDA_WGMMA -use_fast_math -I .devcarry/flash scripts/gpu/attn-flash-test.cu -o /tmp/aft 2> $OUT/nvcc.err || { echo nvcc failed >> $L; tail $OUT/nvcc.err >> $L; }
for env in "TOY_X=1" "TOY_CUDA_NO_0096=1"; do env $env timeout 60 /tmp/aft check > $OUT/check.txt 2>&1; echo "check [$env] rc=$? $(grep -c PASS $OUT/check.txt) PASS"; done >> $L
ab() { for rep in 1 2; do for env in "TOY_CUDA_NO_0096=1" "TOY_X=1"; do
    echo "[$env] $1 $(env $env timeout 60 $T debug bench $1 --device cuda --steps 8 --warmup 2 2>/dev/null | ms)" >> $L
  done; done; echo "t=$(( $(date +%s) - S ))" >> $L; }
ab "--preset smollm2-135m --vocab 49152 --context 4096 --attention fused"
for t in .devcarry/tests/*; do TOY_TEST_DEVICE=cuda timeout 100 $t --test-threads 4 > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $L; grep -E "^test result|FAILED|panicked" $OUT/tests.log | head >> $L; done
echo "t=$(( $(date +%s) - S ))" >> $L
ab "--preset smollm2-135m --vocab 49152 --context 8192 --attention fused"
ab "--preset gpt2-124m --vocab 50257 --dtype bf16"
cat $L
