#!/usr/bin/env bash
# stop 72 call 5 ran this stop-71 script unchanged, on an H200, after `export TOY_CUDA_NO_0095_BGRAD=1` (the code path of 0095 as it landed)
# stop 71 call 4: ncu of one gpt2 medium bf16 step and one GPT-2 124M bf16 step with patch 0093
cd "$(dirname "$0")/../.."
OUT=/tmp/cs0 bash scripts/gpu/cuda-session.sh info > /dev/null 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break; done
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/d4.log
GGML_CUDA_DISABLE_GRAPHS=1 timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
  .devcarry/toy debug bench --preset medium --arch gpt2 --dtype bf16 --device cuda --steps 1 --warmup 1 > /tmp/ncu-med.csv 2>/dev/null
python3 scripts/gpu/ncu_top.py /tmp/ncu-med.csv --last-half --full-names --top 30 >> $OUT/d4.log
gzip -c /tmp/ncu-med.csv > $OUT/d4-ncu-gpt2-medium.csv.gz
GGML_CUDA_DISABLE_GRAPHS=1 timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
  .devcarry/toy debug bench --preset gpt2-124m --vocab 50257 --dtype bf16 --device cuda --steps 1 --warmup 1 > /tmp/ncu-124.csv 2>/dev/null
python3 scripts/gpu/ncu_top.py /tmp/ncu-124.csv --last-half --full-names --top 30 >> $OUT/d4.log
gzip -c /tmp/ncu-124.csv > $OUT/d4-ncu-124m-50257.csv.gz
cat $OUT/d4.log
