#!/usr/bin/env bash
# stop 73 call 2: same module as call 1. LoRA at SmolLM2-135M's shape (context 512, batch 8, rank 16
# over Q4_1; all seven matrices, then toy's default four) with patches 0096 and 0097 each off and on,
# and with the side stream off (TOY_CUDA_0060_MAX=0), two runs each, alternating; full fine-tuning beside.
cd "$(dirname "$0")/../.."
OUT=/tmp/cs0 bash scripts/gpu/cuda-session.sh info > /dev/null 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break; done
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site
L=$OUT/c2.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
T=.devcarry/toy
S=$(date +%s)
ms() { python3 -c "import json,sys; d=json.load(sys.stdin); print(round(d['median_ms'],3), round((d.get('device_used_bytes') or 0)/2**20), d.get('last_loss'), len(d.get('cpu_fallbacks') or []))" 2>/dev/null || echo fail; }
w=/tmp/lora-bench
mkdir -p $w && python3 scripts/bench/make-smollm-shape.py $w/smol-f16.gguf > /dev/null
python3 scripts/bench/typed-copy.py $w/smol-f16.gguf $w/smol-q4_1.gguf q4_1 --embd q8_0 > /dev/null
all=attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down
for rep in 1 2; do
  echo "[full] $(timeout 60 $T debug bench --from $w/smol-f16.gguf --context 512 --batch 8 --device cuda --steps 10 --warmup 3 2>/dev/null | ms)" >> $L
  for a in "--lora-rank 16 --lora-targets $all" "--lora-rank 16"; do
    for env in "TOY_CUDA_NO_0096=1 TOY_CUDA_NO_0097=1" "TOY_CUDA_NO_0097=1" "TOY_CUDA_NO_0096=1" "TOY_X=1" \
               "TOY_CUDA_0060_MAX=0 TOY_CUDA_NO_0096=1 TOY_CUDA_NO_0097=1" "TOY_CUDA_0060_MAX=0"; do
      echo "[$env] ${a:0:40} $(env $env timeout 60 $T debug bench --from $w/smol-q4_1.gguf $a --context 512 --batch 8 --device cuda --steps 10 --warmup 3 2>/dev/null | ms)" >> $L
    done
  done
done
echo "t=$(( $(date +%s) - S ))" >> $L
cat $L
