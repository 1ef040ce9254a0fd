#!/usr/bin/env bash
# stop 70 call 3: module with patch 0090 (LayerNorm + bf16 cast; bias gradient writes its source's bf16 copy):
# CUDA tests, A/B TOY_CUDA_NO_0090 (gpt2 124m 50257/8192, gpt2 medium, llama medium), ADD log of gpt2 medium
cd "$(dirname "$0")/../.."
bash scripts/gpu/cuda-session.sh info > $OUT/c.log 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break; done
T=.devcarry/toy
ms() { python3 -c "import json,sys; d=json.load(sys.stdin); print(round(d['median_ms'],3), round((d.get('device_used_bytes') or 0)/2**20), d.get('last_loss'))" 2>/dev/null || echo fail; }
:
:
for rep in 1 2 3; do
 for off in "" 1; do
  for a in "--preset gpt2-124m --vocab 50257" "--preset gpt2-124m --vocab 8192" "--preset medium --arch gpt2" "--preset medium --arch llama"; do
   echo "off=$off $a $(env ${off:+TOY_CUDA_NO_0090=1} timeout 60 $T debug bench $a --dtype bf16 --device cuda --steps 10 --warmup 3 2>/dev/null | ms)" >> $OUT/c.log
  done
 done
done
TOY_CUDA_ADD_LOG=1 GGML_CUDA_DISABLE_GRAPHS=1 timeout 60 $T debug bench --preset medium --arch gpt2 --dtype bf16 --device cuda --steps 1 --warmup 0 > /dev/null 2> $OUT/addlog.txt
grep "toy add" $OUT/addlog.txt | head -60 > $OUT/addlog-head.txt; rm $OUT/addlog.txt
cat $OUT/c.log; cat $OUT/addlog-head.txt | head -30
