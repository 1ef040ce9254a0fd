#!/usr/bin/env bash
# stop 72 call 2: module 0001-0095: issue 20's bars (GPT-2 124M vs llm.c and PyTorch compile, vocabulary ratio, presets bf16 vs PyTorch compile)
cd "$(dirname "$0")/../.."
OUT=/tmp/cs0 bash scripts/gpu/cuda-session.sh info > /dev/null 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break; done
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/e3.log
T=.devcarry/toy
ms() { python3 -c "import json,sys; d=json.load(sys.stdin); print(round(d['median_ms'],3), round((d.get('device_used_bytes') or 0)/2**20), d.get('last_loss'))" 2>/dev/null || echo fail; }
for rep in 1 2; do for v in 50257 8192; do
  echo "rep $rep vocab $v $(timeout 60 $T debug bench --preset gpt2-124m --vocab $v --dtype bf16 --device cuda --steps 10 --warmup 3 2>/dev/null | ms)" >> $OUT/e3.log
done; done
OUT=/tmp/cs1 timeout 280 bash scripts/gpu/cuda-session.sh bench-124m-gpt2 > $OUT/e3-anchors.log 2>&1
cp /tmp/cs1/results-*.tgz $OUT/e3-anchors.tgz
BF16_TORCH=compile-sdpa OUT=/tmp/cs2 timeout 200 bash scripts/gpu/cuda-session.sh bench_bf16 > $OUT/e3-presets.log 2>&1
cp /tmp/cs2/results-*.tgz $OUT/e3-presets.tgz
cat $OUT/e3.log; tail -22 $OUT/e3-anchors.log; tail -12 $OUT/e3-presets.log
