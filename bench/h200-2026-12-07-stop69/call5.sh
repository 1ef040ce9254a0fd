#!/usr/bin/env bash
# call 5: why toy train finetune's LoRA step is slower than debug bench's (SmolLM2 shape, ctx 512, batch 8)
cd "$(dirname "$0")/../.."
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break
done
OUT=$OUT/i timeout 60 bash scripts/gpu/cuda-session.sh info > /dev/null 2>&1
W=/tmp/lora-bench
tr() { local label=$1 base=$2; shift 2; rm -rf /tmp/r5; env $ENVV timeout 90 .devcarry/toy train finetune --from $W/$base --context 512 --batch 8 --steps 13 --eval-every 0 --device cuda --json --log-every 1000 --out /tmp/r5 "$@" > /tmp/r5.json 2> /tmp/r5.err || { echo "$label failed: $(tail -3 /tmp/r5.err)" >> $OUT/c5.log; return; }
  L=$label python3 -c "
import json,os,statistics
ev=[json.loads(l) for l in open('/tmp/r5/events.jsonl')]
ms=[e['wall_us']/1e3 for e in ev if e['kind']=='step']
print(os.environ['L'], 'median', round(statistics.median(ms[3:]),3), 'steps', [round(x,2) for x in ms])" >> $OUT/c5.log
  grep -v "^\s*$" /tmp/r5.err | head -3 >> $OUT/c5.log; }
LR="--lora-rank 16 --lora-alpha 16 --lora-targets attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down"
tr lora-train smol-q4_1.gguf $LR
tr full-train smol-f16.gguf
ENVV=GGML_CUDA_DISABLE_GRAPHS=1 tr lora-train-nographs smol-q4_1.gguf $LR
tr lora-train-grad-accum1 smol-q4_1.gguf $LR --grad-accum 1
timeout 60 .devcarry/toy debug bench --from $W/smol-q4_1.gguf --lora-rank 16 --lora-targets attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down --device cuda --context 512 --batch 8 --steps 10 --warmup 3 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print('bench-lora-alltargets', d['median_ms'], d.get('step_ms') or '')" >> $OUT/c5.log
cat $OUT/c5.log
