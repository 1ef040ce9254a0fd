#!/usr/bin/env bash
# stop 70 call 8: patch 0092 (the bias reduction with its bf16 copy, two columns a thread): CUDA tests, A/B TOY_CUDA_NO_0092
cd "$(dirname "$0")/../.."
OUT=/tmp/cs0 bash scripts/gpu/cuda-session.sh info > /dev/null 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break; done
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/c8.log
T=.devcarry/toy
ms() { python3 -c "import json,sys; d=json.load(sys.stdin); print(round(d['median_ms'],3), round((d.get('device_used_bytes') or 0)/2**20), d.get('last_loss'))" 2>/dev/null || echo fail; }
for t in .devcarry/tests/*; do TOY_TEST_DEVICE=cuda timeout 100 $t --test-threads 4 > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/c8.log; grep -E "^test result|FAILED|panicked" $OUT/tests.log | head >> $OUT/c8.log; done
TOY_TEST_DEVICE=cuda timeout 60 .devcarry/tests/* bias_bf16 --nocapture 2>&1 | grep -E "d 768|ok|FAIL" | head -10 >> $OUT/c8.log
for rep in 1 2; do for env in "" "TOY_CUDA_NO_0092=1"; do
  for a in "--preset gpt2-124m --vocab 50257" "--preset gpt2-124m --vocab 8192" "--preset medium --arch gpt2"; do
   echo "[$env] $a $(env $env timeout 60 $T debug bench $a --dtype bf16 --device cuda --steps 10 --warmup 3 2>/dev/null | ms)" >> $OUT/c8.log
  done
done; done
cat $OUT/c8.log
