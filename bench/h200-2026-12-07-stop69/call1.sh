#!/usr/bin/env bash
# stop 68 call B: ggml-rs tests on CUDA; patches 0088 (GET_ROWS_BACK + ADD in place), 0089 (cuBLASLt algorithm by timing), 0084 (opt-in CE kernel) A/B at GPT-2 124M bf16
cd "$(dirname "$0")/../.."
S=scripts/gpu/cuda-session.sh
mkdir -p $OUT/b
OUT=$OUT/b/info timeout 60 bash $S info > $OUT/b.log 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break
done
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv >> $OUT/b.log 2>&1
for t in .devcarry/tests/*; do
  TOY_TEST_DEVICE=cuda timeout 200 $t --test-threads 8 > $OUT/b/tests.log 2>&1
  echo "tests $(basename $t) rc=$?" >> $OUT/b.log
done
grep -E "test result|FAILED|panicked" $OUT/b/tests.log >> $OUT/b.log
for v in 50257 8192; do
  TOY_CUDA_LT_LOG=1 TOY_CUDA_0088_LOG=1 timeout 90 .devcarry/toy debug bench --preset gpt2-124m --vocab $v --dtype bf16 --device cuda --steps 2 --warmup 0 2>&1 >/dev/null | grep -E "patch 0088|tuned" | sort | uniq -c | head -30 >> $OUT/b.log
done
ab() { # ab LABEL VOCAB VARS...
  local label=$1 vocab=$2; shift 2
  env "$@" timeout 90 .devcarry/toy debug bench --preset gpt2-124m --vocab $vocab --dtype bf16 --device cuda --steps 10 --warmup 3 > /tmp/b.json 2> /tmp/b.err \
    || { echo "$label $vocab failed: $(tail -2 /tmp/b.err)" >> $OUT/b.log; return; }
  L="$label" python3 -c "import json,os; d=json.load(open('/tmp/b.json')); d['label']=os.environ['L']; print(json.dumps(d))" >> $OUT/b/ab.jsonl
  L="$label" python3 -c "import json,os; d=json.load(open('/tmp/b.json')); print(os.environ['L'], d['vocab'], 'median ms', round(d['median_ms'],3), 'used MiB', (d.get('device_used_bytes') or 0)>>20, 'peak', d.get('peak_device_bytes'), 'fallbacks', len(d['cpu_fallbacks']), 'loss', d['last_loss'])" >> $OUT/b.log
}
for rep in 1 2; do
  for v in 50257 8192; do ab landed $v; ab no-0089 $v TOY_CUDA_NO_0089=1; ab with-0084 $v TOY_CUDA_0084=1; done
done
for k in ${NCU_KERNELS:-}; do
  GGML_CUDA_DISABLE_GRAPHS=1 timeout 90 ncu --clock-control none -k regex:$k --launch-count 4 --metrics gpu__time_duration.sum,dram__bytes.sum \
    .devcarry/toy debug bench --preset gpt2-124m --vocab 50257 --dtype bf16 --device cuda --steps 1 --warmup 0 > $OUT/b/ncu-$k.txt 2>&1
  echo "== ncu $k rc=$?" >> $OUT/b.log; grep -E "k_toy|nvjet|gpu__time|dram__bytes" $OUT/b/ncu-$k.txt | head -16 >> $OUT/b.log
done
cat $OUT/b.log | tail -90
