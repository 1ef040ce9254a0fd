#!/usr/bin/env bash
# stop 71 call 3: module with 0093: GPT-2 small bf16 200-step loss curve vs PyTorch autocast, issue 20's anchors and presets
cd "$(dirname "$0")/../.."
OUT=/tmp/cs0 bash scripts/gpu/cuda-session.sh info > /dev/null 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break; done
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/d3.log
T=.devcarry/toy
timeout 200 python3 scripts/parity/parity.py --toy $T --arch gpt2 --preset small --steps 200 --matmul-precision high --dtype bf16 \
  --corpus data/default-corpus.txt --device cuda --torch-device cuda --work /tmp/parity-gpt2-bf16 > $OUT/d3-parity-gpt2-small-bf16.txt 2> $OUT/d3-parity.err
echo "parity rc=$?" >> $OUT/d3.log; grep -E "loss|FAIL|PASS" $OUT/d3-parity-gpt2-small-bf16.txt | tail -6 >> $OUT/d3.log
OUT=/tmp/cs1 timeout 200 bash scripts/gpu/cuda-session.sh bench-124m-gpt2 > $OUT/d3-anchors.log 2>&1
cp /tmp/cs1/results-*.tgz $OUT/d3-anchors.tgz
BF16_TORCH=compile-sdpa OUT=/tmp/cs2 timeout 170 bash scripts/gpu/cuda-session.sh bench_bf16 > $OUT/d3-presets.log 2>&1
cp /tmp/cs2/results-*.tgz $OUT/d3-presets.tgz
cat $OUT/d3.log; tail -8 $OUT/d3-anchors.log; tail -10 $OUT/d3-presets.log
