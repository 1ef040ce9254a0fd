#!/usr/bin/env bash
# stop 70 call 5: module 0090 + 0091 (residual sums through reshapes): CUDA tests, A/B 0091, ADD log, ncu top of a GPT-2 124M step
cd "$(dirname "$0")/../.."
OUT=/tmp/cs0 bash scripts/gpu/cuda-session.sh info > /dev/null 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break; done
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/c5.log
T=.devcarry/toy
ms() { python3 -c "import json,sys; d=json.load(sys.stdin); print(round(d['median_ms'],3), round((d.get('device_used_bytes') or 0)/2**20), d.get('last_loss'))" 2>/dev/null || echo fail; }
for t in .devcarry/tests/*; do TOY_TEST_DEVICE=cuda timeout 200 $t --test-threads 4 > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/c5.log; grep -E "^test result|FAILED|panicked" $OUT/tests.log | head >> $OUT/c5.log; done
TOY_TEST_DEVICE=cuda timeout 100 .devcarry/tests/* bias_bf16 --nocapture 2>&1 | grep -E "err|ok|FAIL" | head -20 >> $OUT/c5.log
for rep in 1 2 3; do
 for env in "" "TOY_CUDA_NO_0091=1" "TOY_CUDA_NO_0091=1 TOY_CUDA_NO_0090=1"; do
  for a in "--preset gpt2-124m --vocab 50257" "--preset gpt2-124m --vocab 8192" "--preset medium --arch gpt2"; do
   echo "[$env] $a $(env $env timeout 60 $T debug bench $a --dtype bf16 --device cuda --steps 10 --warmup 3 2>/dev/null | ms)" >> $OUT/c5.log
  done
 done
done
for env in "" "TOY_CUDA_NO_0091=1"; do
 echo "[$env] tf32 124m $(env $env timeout 60 $T debug bench --preset gpt2-124m --vocab 50257 --dtype f32 --device cuda --steps 6 --warmup 2 2>/dev/null | ms)" >> $OUT/c5.log
 echo "[$env] small gpt2 bf16 $(env $env timeout 60 $T debug bench --preset small --arch gpt2 --dtype bf16 --device cuda --steps 10 --warmup 3 2>/dev/null | ms)" >> $OUT/c5.log
done
TOY_CUDA_ADD_LOG=1 GGML_CUDA_DISABLE_GRAPHS=1 timeout 60 $T debug bench --preset medium --arch gpt2 --dtype bf16 --device cuda --steps 1 --warmup 0 2>&1 >/dev/null | grep "toy add" | head -80 > $OUT/addlog.txt
GGML_CUDA_DISABLE_GRAPHS=1 timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw $T debug bench --preset gpt2-124m --vocab 50257 --dtype bf16 --device cuda --steps 1 --warmup 1 > $OUT/ncu-124m-after.csv 2>/dev/null
python3 .devcarry/next/ncu_half.py $OUT/ncu-124m-after.csv 124m-after 20 >> $OUT/c5.log 2>&1; gzip -f $OUT/*.csv
cat $OUT/c5.log; head -30 $OUT/addlog.txt | cut -c1-250
