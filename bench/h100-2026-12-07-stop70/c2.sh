#!/usr/bin/env bash
# stop 70 call 2: LoRA ncu (gguf installed this time) and GPT-2 124M with big weight-gradient products on the side stream (TOY_CUDA_0060_MAX)
cd "$(dirname "$0")/../.."
bash scripts/gpu/cuda-session.sh info >/dev/null 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break; done
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/whl/*.whl > /dev/null 2>&1; export PYTHONPATH=/tmp/site
T=.devcarry/toy
ms() { python3 -c "import json,sys; d=json.load(sys.stdin); print(round(d['median_ms'],3), d.get('peak_mib', d.get('device_peak_mib','')))" 2>/dev/null || echo fail; }
W=/tmp/lora-bench; mkdir -p $W
[ -f $W/smol-f16.gguf ] || python3 scripts/bench/make-smollm-shape.py $W/smol-f16.gguf >> $OUT/c.log 2>&1
[ -f $W/smol-q4_1.gguf ] || python3 scripts/bench/typed-copy.py $W/smol-f16.gguf $W/smol-q4_1.gguf q4_1 --embd q8_0 >> $OUT/c.log 2>&1
prof() { local n=$1 to=$2; shift 2
  GGML_CUDA_DISABLE_GRAPHS=1 timeout $to ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw $T debug bench "$@" --steps 1 --warmup 1 > $OUT/ncu-$n.csv 2>>$OUT/err.txt
  python3 .devcarry/next/ncu_half.py $OUT/ncu-$n.csv $n 45 >> $OUT/c.log 2>&1 || true; }
S="--device cuda --context 512 --batch 8"
L7=attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down
echo "lora7 $(timeout 60 $T debug bench --from $W/smol-q4_1.gguf --lora-rank 16 --lora-targets $L7 $S --steps 10 --warmup 3 2>/dev/null | ms)" >> $OUT/c.log
echo "lora4 $(timeout 60 $T debug bench --from $W/smol-q4_1.gguf --lora-rank 16 --lora-targets attn_q,attn_k,attn_v,attn_output $S --steps 10 --warmup 3 2>/dev/null | ms)" >> $OUT/c.log
echo "full $(timeout 60 $T debug bench --from $W/smol-f16.gguf $S --steps 10 --warmup 3 2>/dev/null | ms)" >> $OUT/c.log
prof lora7 150 --from $W/smol-q4_1.gguf --lora-rank 16 --lora-targets $L7 $S
prof lora4 150 --from $W/smol-q4_1.gguf --lora-rank 16 --lora-targets attn_q,attn_k,attn_v,attn_output $S
prof full 150 --from $W/smol-f16.gguf $S
gzip -f $OUT/*.csv; tail -c 3000 $OUT/err.txt > $OUT/err-tail.txt; rm -f $OUT/err.txt
cat $OUT/c.log
