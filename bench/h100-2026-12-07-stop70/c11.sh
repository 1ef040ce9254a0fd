#!/usr/bin/env bash
# stop 70 call 11: patch 0093 candidate (AdamW, four chunks a block; TOY_CUDA_0093): optimizer tests on CUDA with it, A/B
cd "$(dirname "$0")/../.."
OUT=/tmp/cs0 bash scripts/gpu/cuda-session.sh info > /dev/null 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break; done
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/c10.log
T=.devcarry/toy
TOY_CUDA_0093=1 TOY_TEST_DEVICE=cuda timeout 60 .devcarry/tests/* optim 2>&1 | grep -E "^test result|FAILED|panicked" >> $OUT/c10.log
ms() { python3 -c "import json,sys; d=json.load(sys.stdin); print(round(d['median_ms'],3), d.get('last_loss'))" 2>/dev/null || echo fail; }
for rep in 1 2; do for env in "TOY_CUDA_0093=1" ""; do for v in 50257 8192; do
  echo "[$env] v$v $(env $env timeout 60 $T debug bench --preset gpt2-124m --vocab $v --dtype bf16 --device cuda --steps 10 --warmup 3 2>/dev/null | ms)" >> $OUT/c10.log
done; done; done
cat $OUT/c10.log
