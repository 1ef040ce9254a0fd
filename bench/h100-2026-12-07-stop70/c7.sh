#!/usr/bin/env bash
# stop 70 call 7: module 0001-0091: quick A/B of 0091, then issue 20's bars: GPT-2 124M vs llm.c and PyTorch compile, vocabulary ratio, presets bf16 vs PyTorch compile
cd "$(dirname "$0")/../.."
OUT=/tmp/cs0 bash scripts/gpu/cuda-session.sh info > /dev/null 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break; done
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/c7.log
T=.devcarry/toy
ms() { python3 -c "import json,sys; d=json.load(sys.stdin); print(round(d['median_ms'],3), round((d.get('device_used_bytes') or 0)/2**20), d.get('last_loss'))" 2>/dev/null || echo fail; }
for env in "" "TOY_CUDA_NO_0091=1" "" "TOY_CUDA_NO_0091=1"; do
  for a in "--preset gpt2-124m --vocab 8192" "--preset medium --arch gpt2"; do
   echo "[$env] $a $(env $env timeout 60 $T debug bench $a --dtype bf16 --device cuda --steps 10 --warmup 3 2>/dev/null | ms)" >> $OUT/c7.log
  done
done
TOY_CUDA_ADD_LOG=1 GGML_CUDA_DISABLE_GRAPHS=1 timeout 60 $T debug bench --preset medium --arch gpt2 --dtype bf16 --device cuda --steps 1 --warmup 0 2>&1 >/dev/null | grep -c "toy add" >> $OUT/c7.log
OUT=/tmp/cs1 bash scripts/gpu/cuda-session.sh bench-124m-gpt2 > $OUT/c7-anchors.log 2>&1
cp /tmp/cs1/results-*.tgz $OUT/c7-anchors.tgz
for rep in 1 2 3 4 5; do for v in 50257 8192; do
  echo "rep $rep vocab $v $(timeout 60 $T debug bench --preset gpt2-124m --vocab $v --dtype bf16 --device cuda --steps 10 --warmup 3 2>/dev/null | ms)" >> $OUT/c7.log
done; done
BF16_TORCH=compile-sdpa OUT=/tmp/cs2 bash scripts/gpu/cuda-session.sh bench_bf16 > $OUT/c7-presets.log 2>&1
cp /tmp/cs2/results-*.tgz $OUT/c7-presets.tgz
cat $OUT/c7.log; tail -22 $OUT/c7-anchors.log; tail -12 $OUT/c7-presets.log
