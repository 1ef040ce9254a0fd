#!/usr/bin/env bash
# stop 70 call 1: ncu of one step: LoRA r16 over Q4_1 (4 and 7 targets), full fine-tuning (f16 base), GPT-2 124M bf16 at 50257 and 8192
cd "$(dirname "$0")/../.."
bash scripts/gpu/cuda-session.sh info >/dev/null 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break; done
W=/tmp/lora-bench; mkdir -p $W
[ -f $W/smol-f16.gguf ] || python3 scripts/bench/make-smollm-shape.py $W/smol-f16.gguf > $OUT/c.log 2>&1
[ -f $W/smol-q4_1.gguf ] || python3 scripts/bench/typed-copy.py $W/smol-f16.gguf $W/smol-q4_1.gguf q4_1 --embd q8_0 >> $OUT/c.log 2>&1
ls -la $W >> $OUT/c.log
T=.devcarry/toy
prof() { # name, timeout, args...
  local n=$1 to=$2; shift 2
  GGML_CUDA_DISABLE_GRAPHS=1 timeout $to ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw $T debug bench "$@" --steps 1 --warmup 1 > $OUT/ncu-$n.csv 2>>$OUT/err.txt
  python3 .devcarry/next/ncu_half.py $OUT/ncu-$n.csv $n 45 >> $OUT/c.log 2>&1 || true
}
S="--device cuda --context 512 --batch 8"
# plain timings first (graphs on)
for t in attn_q,attn_k,attn_v,attn_output attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down; do
  timeout 60 $T debug bench --from $W/smol-q4_1.gguf --lora-rank 16 --lora-targets $t $S --steps 10 --warmup 3 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print('lora $t', round(d['median_ms'],3))" >> $OUT/c.log
done
timeout 60 $T debug bench --from $W/smol-f16.gguf $S --steps 10 --warmup 3 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print('full', round(d['median_ms'],3))" >> $OUT/c.log
prof lora7 150 --from $W/smol-q4_1.gguf --lora-rank 16 --lora-targets attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down $S
prof lora4 150 --from $W/smol-q4_1.gguf --lora-rank 16 --lora-targets attn_q,attn_k,attn_v,attn_output $S
prof full 150 --from $W/smol-f16.gguf $S
prof g50257 120 --preset gpt2-124m --vocab 50257 --dtype bf16 --device cuda
prof g8192 120 --preset gpt2-124m --vocab 8192 --dtype bf16 --device cuda
gzip -f $OUT/*.csv; tail -c 3000 $OUT/err.txt > $OUT/err-tail.txt; rm $OUT/err.txt
cat $OUT/c.log
