#!/usr/bin/env bash
# stop 71 call 2: patch 0093 (GPT-2's up projection + bias + bf16 cast + GELU as one cuBLASLt GELU_AUX_BIAS matmul; q/k/v + bias + cast as one bf16 matmul): CUDA tests, plans, A/B TOY_CUDA_NO_0093
cd "$(dirname "$0")/../.."
OUT=/tmp/cs0 bash scripts/gpu/cuda-session.sh info > /dev/null 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break; done
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/d2.log
T=.devcarry/toy
ms() { python3 -c "import json,sys; d=json.load(sys.stdin); print(round(d['median_ms'],3), round((d.get('device_used_bytes') or 0)/2**20), d.get('last_loss'))" 2>/dev/null || echo fail; }
TOY_CUDA_LT_LOG=1 timeout 60 $T debug bench --preset gpt2-124m --vocab 8192 --dtype bf16 --device cuda --steps 2 --warmup 1 2>&1 >/dev/null | grep -E "gelu|to bf16|tuned" | sort | uniq -c | head -20 >> $OUT/d2.log
for t in .devcarry/tests/*; do TOY_TEST_DEVICE=cuda timeout 120 $t --test-threads 4 > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/d2.log; grep -E "^test result|FAILED|panicked" $OUT/tests.log | head >> $OUT/d2.log; done
for rep in 1 2; do for env in "TOY_CUDA_NO_0093=1" ""; do
  for a in "--preset gpt2-124m --vocab 50257" "--preset gpt2-124m --vocab 8192" "--preset medium --arch gpt2"; do
   echo "[$env] $a $(env $env timeout 60 $T debug bench $a --dtype bf16 --device cuda --steps 10 --warmup 3 2>/dev/null | ms)" >> $OUT/d2.log
  done
done; done
timeout 60 $T debug bench --preset medium --arch llama --dtype bf16 --device cuda --steps 10 --warmup 3 2>/dev/null | ms >> $OUT/d2.log
cat $OUT/d2.log
