#!/usr/bin/env bash
# stop 72 call 6: the module as landed (0095's BGRAD opt-in): CUDA tests, the DGELU plan, A/B of 0095, GPT-2 small bf16 parity
cd "$(dirname "$0")/../.."
OUT=/tmp/cs0 bash scripts/gpu/cuda-session.sh info > /dev/null 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break; done
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/e6.log
T=.devcarry/toy
ms() { python3 -c "import json,sys; d=json.load(sys.stdin); print(round(d['median_ms'],3), round((d.get('device_used_bytes') or 0)/2**20), d.get('last_loss'), len(d.get('cpu_fallbacks') or []))" 2>/dev/null || echo fail; }
TOY_CUDA_LT_LOG=1 timeout 40 $T debug bench --preset gpt2-124m --vocab 50257 --dtype bf16 --device cuda --steps 2 --warmup 1 > /dev/null 2> $OUT/e6-ltlog.txt
grep -E "dgelu|tuned m=3072 n=16384 k=768" $OUT/e6-ltlog.txt | sort | uniq -c | head >> $OUT/e6.log
for t in .devcarry/tests/*; do TOY_TEST_DEVICE=cuda timeout 90 $t --test-threads 4 > $OUT/e6-tests.log 2>&1; echo "tests rc=$?" >> $OUT/e6.log; grep -E "^test result|FAILED|panicked" $OUT/e6-tests.log | head >> $OUT/e6.log; done
for a in "--preset gpt2-124m --vocab 50257" "--preset medium --arch gpt2"; do
  for rep in 1 2; do for env in "TOY_CUDA_NO_0095=1" "TOY_X=1"; do
   echo "[$env] $a $(env $env timeout 40 $T debug bench $a --dtype bf16 --device cuda --steps 10 --warmup 3 2>/dev/null | ms)" >> $OUT/e6.log
  done; done
done
timeout 100 python3 scripts/parity/parity.py --toy $T --arch gpt2 --preset small --steps 200 --matmul-precision high --dtype bf16 \
  --corpus data/default-corpus.txt --device cuda --torch-device cuda --work /tmp/parity-gpt2-bf16 > $OUT/e6-parity-gpt2-small-bf16.txt 2> /tmp/e6-parity.err
echo "parity rc=$?" >> $OUT/e6.log; grep -E "loss|FAIL|PASS" $OUT/e6-parity-gpt2-small-bf16.txt | tail -4 >> $OUT/e6.log
cat $OUT/e6.log
