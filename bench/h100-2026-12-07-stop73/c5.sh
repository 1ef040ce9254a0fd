#!/usr/bin/env bash
# stop 73 call 5: PyTorch's own vocabulary ratio (issue 20's bar: 50257 at most 1.15x 8192): GPT-2 124M,
# bf16, nanoGPT-style PyTorch (SDPA, fused AdamW, torch.compile) beside toy, vocabulary 8192 then 50257,
# scripts/bench/bench.py (toy and PyTorch alternating, median ms/step). Module as main's (0096/0097 off).
cd "$(dirname "$0")/../.."
OUT=/tmp/cs0 bash scripts/gpu/cuda-session.sh info > /dev/null 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break; done
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site
export TOY_CUDA_NO_0096=1 TOY_CUDA_NO_0097=1
L=$OUT/c5.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
S=$(date +%s)
for v in 8192 50257; do
  timeout 270 python3 scripts/bench/bench.py --toy .devcarry/toy --device cuda --presets gpt2-124m --arch gpt2 --precisions bf16 \
    --torch compile-sdpa --vocab $v --reps 2 --steps 10 --warmup 3 --json-out $OUT/c5-vocab-$v.json > $OUT/c5-vocab-$v.txt 2> $OUT/c5-vocab-$v.err
  echo "vocab $v rc=$? t=$(( $(date +%s) - S ))" >> $L
  tail -6 $OUT/c5-vocab-$v.txt >> $L
done
cat $L
