#!/usr/bin/env bash
# stop 72 call 3: module 0001-0095 (0095 matching GPT-2's reshaped GELU): the DGELU plans, CUDA tests, A/B of 0095
# (TOY_CUDA_NO_0095) and its BGRAD (TOY_CUDA_NO_0095_BGRAD), alternating; GPT-2 small bf16 parity; vocabulary pairs;
# on an H200 also issue 20's anchors and presets, and issues 21/23's tables
cd "$(dirname "$0")/../.."
OUT=/tmp/cs0 bash scripts/gpu/cuda-session.sh info > /dev/null 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break; done
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/e4.log
T=.devcarry/toy
S=$(date +%s)
ms() { python3 -c "import json,sys; d=json.load(sys.stdin); print(round(d['median_ms'],3), round((d.get('device_used_bytes') or 0)/2**20), d.get('last_loss'), len(d.get('cpu_fallbacks') or []))" 2>/dev/null || echo fail; }
TOY_CUDA_LT_LOG=1 timeout 40 $T debug bench --preset gpt2-124m --vocab 50257 --dtype bf16 --device cuda --steps 2 --warmup 1 > /dev/null 2> $OUT/e4-ltlog.txt
grep -E "dgelu|tuned m=3072 n=16384 k=768" $OUT/e4-ltlog.txt | sort | uniq -c | head -12 >> $OUT/e4.log
for t in .devcarry/tests/*; do TOY_TEST_DEVICE=cuda TOY_CUDA_LT_LOG=1 timeout 90 $t --test-threads 4 > $OUT/e4-tests.log 2>&1; echo "tests rc=$?" >> $OUT/e4.log; grep -E "^test result|FAILED|panicked" $OUT/e4-tests.log | head >> $OUT/e4.log; grep -c dgelu $OUT/e4-tests.log >> $OUT/e4.log; done
echo "t=$(( $(date +%s) - S ))" >> $OUT/e4.log
for a in "--preset gpt2-124m --vocab 50257" "--preset medium --arch gpt2" "--preset gpt2-124m --vocab 8192"; do
  for rep in 1 2; do for env in "TOY_CUDA_NO_0095=1" "TOY_CUDA_NO_0095_BGRAD=1" "TOY_X=1"; do
   echo "[$env] $a $(env $env timeout 40 $T debug bench $a --dtype bf16 --device cuda --steps 10 --warmup 3 2>/dev/null | ms)" >> $OUT/e4.log
  done; done
done
echo "t=$(( $(date +%s) - S ))" >> $OUT/e4.log
timeout 100 python3 scripts/parity/parity.py --toy $T --arch gpt2 --preset small --steps 200 --matmul-precision high --dtype bf16 \
  --corpus data/default-corpus.txt --device cuda --torch-device cuda --work /tmp/parity-gpt2-bf16 > $OUT/e4-parity-gpt2-small-bf16.txt 2> /tmp/e4-parity.err
echo "parity rc=$?" >> $OUT/e4.log; grep -E "loss|FAIL|PASS" $OUT/e4-parity-gpt2-small-bf16.txt | tail -4 >> $OUT/e4.log
echo "t=$(( $(date +%s) - S ))" >> $OUT/e4.log
if grep -q H200 $OUT/e4.log; then
  OUT=/tmp/cs1 timeout 150 bash scripts/gpu/cuda-session.sh bench-124m-gpt2 > $OUT/e4-anchors.log 2>&1
  BF16_TORCH=compile-sdpa OUT=/tmp/cs2 timeout 110 bash scripts/gpu/cuda-session.sh bench_bf16 > $OUT/e4-presets.log 2>&1
  CONTEXTS="4096 8192" OUT=/tmp/cs4 timeout 150 bash scripts/gpu/cuda-session.sh smollm_table > $OUT/e4-smollm.log 2>&1
  echo "t=$(( $(date +%s) - S ))" >> $OUT/e4.log
fi
cat $OUT/e4.log; tail -8 $OUT/e4-anchors.log 2>/dev/null; tail -10 $OUT/e4-presets.log 2>/dev/null; tail -8 $OUT/e4-smollm.log 2>/dev/null
