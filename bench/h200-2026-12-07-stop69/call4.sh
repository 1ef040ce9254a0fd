#!/usr/bin/env bash
# call 4: patch 0089 A/B on issue 23's sides (LoRA r16 over Q4_1, full fine-tuning of f16; SmolLM2 shape, context 512, batch 8)
cd "$(dirname "$0")/../.."
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break
done
W=/tmp/lora-bench; ls -la $W/*.gguf > $OUT/c4.log 2>&1
OUT=$OUT/i timeout 60 bash scripts/gpu/cuda-session.sh info > /dev/null 2>&1
one() { local label=$1; shift; env "$@" timeout 60 .devcarry/toy debug bench $ARGS --device cuda --context 512 --batch 8 --steps 10 --warmup 3 > /tmp/c4.json 2>/tmp/c4.err || { echo "$label failed $(tail -2 /tmp/c4.err)" >> $OUT/c4.log; return; }
  L=$label python3 -c "import json,os; d=json.load(open('/tmp/c4.json')); print(os.environ['L'], 'median', round(d['median_ms'],3), 'fallbacks', len(d['cpu_fallbacks']), 'loss', d['last_loss'])" >> $OUT/c4.log; }
for rep in 1 2; do
  ARGS="--from $W/smol-q4_1.gguf --lora-rank 16" one lora-0089 ; ARGS="--from $W/smol-q4_1.gguf --lora-rank 16" one lora-no0089 TOY_CUDA_NO_0089=1
  ARGS="--from $W/smol-f16.gguf" one full-0089 ; ARGS="--from $W/smol-f16.gguf" one full-no0089 TOY_CUDA_NO_0089=1
done
TOY_CUDA_LT_LOG=1 timeout 60 .devcarry/toy debug bench --from $W/smol-q4_1.gguf --lora-rank 16 --device cuda --context 512 --batch 8 --steps 2 --warmup 0 2>&1 >/dev/null | grep tuned | sort | uniq -c | head -20 >> $OUT/c4.log
cat $OUT/c4.log
