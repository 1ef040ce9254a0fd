#!/usr/bin/env bash
# stop 73 call 4: same module as call 3, with 0096 and 0097 off in every run (what main has). LoRA
# over all seven matrices of SmolLM2-135M's shape (rank 16 over Q4_1, context 512, batch 8) with
# each existing knob of its step changed from its default: the merged-weight input gradient
# (TOY_0066), the side stream's lag (TOY_CUDA_0060_LAG 1, 4, 8; default 2) and size limit
# (TOY_CUDA_0060_MAX), its priority (TOY_CUDA_NO_0065), cuBLASLt timing (TOY_CUDA_NO_0089) and
# the bf16 gradient of A·x (TOY_NO_0056); two runs each, alternating; full fine-tuning beside.
cd "$(dirname "$0")/../.."
OUT=/tmp/cs0 bash scripts/gpu/cuda-session.sh info > /dev/null 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break; done
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site
L=$OUT/c4.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
T=.devcarry/toy
S=$(date +%s)
ms() { python3 -c "import json,sys; d=json.load(sys.stdin); print(round(d['median_ms'],3), round((d.get('device_used_bytes') or 0)/2**20), d.get('last_loss'), len(d.get('cpu_fallbacks') or []))" 2>/dev/null || echo fail; }
w=/tmp/lora-bench
mkdir -p $w && python3 scripts/bench/make-smollm-shape.py $w/smol-f16.gguf > /dev/null
python3 scripts/bench/typed-copy.py $w/smol-f16.gguf $w/smol-q4_1.gguf q4_1 --embd q8_0 > /dev/null
all=attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down
export TOY_CUDA_NO_0096=1 TOY_CUDA_NO_0097=1
for rep in 1 2; do
  echo "[full] $(timeout 60 $T debug bench --from $w/smol-f16.gguf --context 512 --batch 8 --device cuda --steps 10 --warmup 3 2>/dev/null | ms)" >> $L
  for env in "TOY_X=1" "TOY_0066=1" "TOY_CUDA_0060_LAG=1" "TOY_CUDA_0060_LAG=4" "TOY_CUDA_0060_LAG=8" "TOY_CUDA_0060_MAX=3000000" \
             "TOY_CUDA_NO_0065=1" "TOY_CUDA_NO_0089=1" "TOY_NO_0056=1" "TOY_0066=1 TOY_CUDA_0060_LAG=4"; do
    echo "[$env] $(env $env timeout 60 $T debug bench --from $w/smol-q4_1.gguf --lora-rank 16 --lora-targets $all --context 512 --batch 8 --device cuda --steps 10 --warmup 3 2>/dev/null | ms)" >> $L
  done
done
echo "t=$(( $(date +%s) - S ))" >> $L
cat $L
