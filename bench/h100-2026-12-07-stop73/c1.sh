#!/usr/bin/env bash
# stop 73 call 1: module 0001-0095 with the candidates 0096 and 0097 (skinny-candidates.diff, their first version: 3-stage rings). Patch 0096's harness (f64 reference, cuBLAS timing), the
# ggml-rs tests on CUDA, then LoRA at SmolLM2-135M's shape (context 512, batch 8, rank 16) with
# and without 0096 (TOY_CUDA_NO_0096), alternating, beside full fine-tuning; then lora.py's table
# and, with time left, an ncu of one LoRA step.
cd "$(dirname "$0")/../.."
OUT=/tmp/cs0 bash scripts/gpu/cuda-session.sh info > /dev/null 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break; done
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site
L=$OUT/c1.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
T=.devcarry/toy
S=$(date +%s)
ms() { python3 -c "import json,sys; d=json.load(sys.stdin); print(round(d['median_ms'],3), round((d.get('device_used_bytes') or 0)/2**20), d.get('last_loss'), len(d.get('cpu_fallbacks') or []))" 2>/dev/null || echo fail; }
chmod +x .devcarry/sk-test; timeout 60 .devcarry/sk-test >> $L 2>&1; echo "sk-test rc=$?" >> $L
for t in .devcarry/tests/*; do TOY_TEST_DEVICE=cuda timeout 100 $t --test-threads 4 > $OUT/c1-tests-$(basename $t).log 2>&1; echo "tests rc=$?" >> $L; grep -E "^test result|FAILED|panicked" $OUT/c1-tests-$(basename $t).log | head >> $L; done
grep -h "out_prod" $OUT/c1-tests-*.log | head -20 >> $L
echo "t=$(( $(date +%s) - S ))" >> $L
w=/tmp/lora-bench  # cuda-session.sh's lora_bases: a random SmolLM2-shape f16 base and its Q4_1 copy
mkdir -p $w && python3 scripts/bench/make-smollm-shape.py $w/smol-f16.gguf > /dev/null
python3 scripts/bench/typed-copy.py $w/smol-f16.gguf $w/smol-q4_1.gguf q4_1 --embd q8_0 > /dev/null
all=attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down
for rep in 1 2; do
  for a in "--from $w/smol-q4_1.gguf --lora-rank 16 --lora-targets $all" "--from $w/smol-f16.gguf --lora-rank 16 --lora-targets $all" \
           "--from $w/smol-q4_1.gguf --lora-rank 16" "--from $w/smol-f16.gguf"; do
    for env in "TOY_CUDA_NO_0096=1" "TOY_X=1"; do
      echo "[$env] ${a#--from $w/} $(env $env timeout 60 $T debug bench $a --context 512 --batch 8 --device cuda --steps 10 --warmup 3 2>/dev/null | ms)" >> $L
    done
  done
done
echo "t=$(( $(date +%s) - S ))" >> $L
LORA_TORCH=compile-sdpa LORA_FULL_TORCH='' OUT=/tmp/cs2 timeout 200 bash scripts/gpu/cuda-session.sh lora_table > $OUT/c1-lora-table.log 2>&1
echo "t=$(( $(date +%s) - S ))" >> $L
if [ $(( $(date +%s) - S )) -lt 420 ]; then
  NCU_SIDES="lora" NCU_TOP=25 OUT=/tmp/cs3 timeout 120 bash scripts/gpu/cuda-session.sh ncu_lora > $OUT/c1-ncu-lora.log 2>&1
fi
echo "t=$(( $(date +%s) - S ))" >> $L
cat $L; tail -12 $OUT/c1-lora-table.log; tail -30 $OUT/c1-ncu-lora.log 2>/dev/null
