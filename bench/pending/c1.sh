#!/usr/bin/env bash
# Patch 0096 as landed and candidate 0097 (the pipelined wgmma forward, opt-in TOY_CUDA_0097) in one
# module (patches 0001-0096 + 0097). Harness checks and kernel times with 0096 off, as landed, and with
# 0097; whole steps at SmolLM2-135M's shape (4096) alternating; the ggml-rs tests on CUDA (with and
# without 0097); then issue 21's table (toy against PyTorch SDPA + compile) at 4096 and 8192.
cd "$(dirname "$0")/../.."
. scripts/gpu/call-env.sh
L=$OUT/c1.log
# have N: at least N seconds left before C1_END (default 570) seconds after the start
have() { [ $(( ${C1_END:-570} - ($(date +%s) - S) )) -gt "$1" ]; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
nvcc -O3 -std=c++17 -arch=sm_90a -DGGML_CUDA_WGMMA -use_fast_math -I .devcarry/flash scripts/gpu/attn-flash-test.cu -o /tmp/aft 2> $OUT/nvcc.err || { echo nvcc failed >> $L; tail $OUT/nvcc.err >> $L; }
for env in "TOY_X=1" "TOY_CUDA_NO_0096=1" "TOY_CUDA_0097=1"; do env $env timeout 60 /tmp/aft check > $OUT/check.txt 2>&1; echo "check [$env] rc=$? $(grep -c PASS $OUT/check.txt) PASS"; done >> $L
for rep in 1 $(have 400 && echo 2); do for shape in "64 9 3 4096 8" "64 9 3 8192 8" "64 12 12 1024 16"; do for env in "TOY_CUDA_NO_0096=1" "TOY_X=1" "TOY_CUDA_0097=1"; do
  echo "[$env] $(env $env timeout 30 /tmp/aft time $shape bf16)" >> $L
done; done; done
echo "t=$(( $(date +%s) - S ))" >> $L
for rep in 1 $(have 350 && echo 2); do for env in "TOY_CUDA_NO_0096=1" "TOY_X=1" "TOY_CUDA_0097=1"; do
  echo "[$env] 4096 $(env $env timeout 60 $T debug bench --preset smollm2-135m --vocab 49152 --context 4096 --attention fused --device cuda --steps 10 --warmup 3 2>/dev/null | ms)" >> $L
done; done
echo "t=$(( $(date +%s) - S ))" >> $L
for env in $(have 330 && echo TOY_X=1) $(have 120 && echo TOY_CUDA_0097=1); do for t in .devcarry/tests/*; do
  env $env TOY_TEST_DEVICE=cuda timeout 100 $t --test-threads 4 > $OUT/c1-tests.log 2>&1; echo "tests [$env] rc=$?" >> $L
  grep -E "^test result|FAILED|panicked" $OUT/c1-tests.log | head >> $L
done; done
echo "t=$(( $(date +%s) - S ))" >> $L
t4=$(( ${C1_END:-570} - ($(date +%s) - S) - 10 )); [ $t4 -gt 200 ] && t4=200
have 60 && CONTEXTS="4096" OUT=/tmp/cs4 timeout $t4 bash scripts/gpu/cuda-session.sh smollm_table > $OUT/c1-smollm-4096.log 2>&1
echo "t=$(( $(date +%s) - S ))" >> $L
left=$(( ${C1_END:-570} - ($(date +%s) - S) ))
[ $left -gt 150 ] && CONTEXTS="8192" OUT=/tmp/cs5 timeout $left bash scripts/gpu/cuda-session.sh smollm_table > $OUT/c1-smollm-8192.log 2>&1
echo "t=$(( $(date +%s) - S ))" >> $L
cat $L; tail -4 $OUT/c1-smollm-4096.log; tail -4 $OUT/c1-smollm-8192.log 2>/dev/null
