#!/usr/bin/env bash
# stop 70 call 4: module with 0090 + 0091 (bias + residual sum in the epilogue): CUDA tests, A/B, ADD log, LoRA side stream off/on
cd "$(dirname "$0")/../.."
bash scripts/gpu/cuda-session.sh info > /dev/null 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break; done
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/whl/*.whl > /dev/null 2>&1; export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/c.log
T=.devcarry/toy
ms() { python3 -c "import json,sys; d=json.load(sys.stdin); print(round(d['median_ms'],3), round((d.get('device_used_bytes') or 0)/2**20), d.get('last_loss'))" 2>/dev/null || echo fail; }
for t in .devcarry/tests/*; do TOY_TEST_DEVICE=cuda timeout 200 $t --test-threads 4 > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/c.log; grep -E "^test result|FAILED|panicked" $OUT/tests.log | head >> $OUT/c.log; done
TOY_TEST_DEVICE=cuda timeout 100 .devcarry/tests/* bias_bf16 norms_and_ropes --nocapture 2>&1 | grep -E "err|ok|FAIL" | head -30 >> $OUT/c.log
for rep in 1 2 3; do
 for env in "" "TOY_CUDA_NO_0091=1" "TOY_CUDA_NO_0091=1 TOY_CUDA_NO_0090=1"; do
  for a in "--preset gpt2-124m --vocab 50257" "--preset gpt2-124m --vocab 8192" "--preset medium --arch gpt2"; do
   echo "[$env] $a $(env $env timeout 60 $T debug bench $a --dtype bf16 --device cuda --steps 10 --warmup 3 2>/dev/null | ms)" >> $OUT/c.log
  done
 done
done
echo "tf32 124m on $(timeout 60 $T debug bench --preset gpt2-124m --vocab 50257 --dtype f32 --device cuda --steps 6 --warmup 2 2>/dev/null | ms)" >> $OUT/c.log
echo "tf32 124m off $(TOY_CUDA_NO_0091=1 TOY_CUDA_NO_0090=1 timeout 60 $T debug bench --preset gpt2-124m --vocab 50257 --dtype f32 --device cuda --steps 6 --warmup 2 2>/dev/null | ms)" >> $OUT/c.log
TOY_CUDA_ADD_LOG=1 GGML_CUDA_DISABLE_GRAPHS=1 timeout 60 $T debug bench --preset medium --arch gpt2 --dtype bf16 --device cuda --steps 1 --warmup 0 2>&1 >/dev/null | grep "toy add" | head -80 > $OUT/addlog.txt
W=/tmp/lora-bench; mkdir -p $W
[ -f $W/smol-f16.gguf ] || python3 scripts/bench/make-smollm-shape.py $W/smol-f16.gguf > /dev/null 2>&1
[ -f $W/smol-q4_1.gguf ] || python3 scripts/bench/typed-copy.py $W/smol-f16.gguf $W/smol-q4_1.gguf q4_1 --embd q8_0 > /dev/null 2>&1
S="--device cuda --context 512 --batch 8"; L7=attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down
for rep in 1 2; do for mx in 65536 0; do
 echo "lora7 side-max $mx $(TOY_CUDA_0060_MAX=$mx timeout 60 $T debug bench --from $W/smol-q4_1.gguf --lora-rank 16 --lora-targets $L7 $S --steps 10 --warmup 3 2>/dev/null | ms)" >> $OUT/c.log
done; done
echo "full $(timeout 60 $T debug bench --from $W/smol-f16.gguf $S --steps 10 --warmup 3 2>/dev/null | ms)" >> $OUT/c.log
cat $OUT/c.log; head -40 $OUT/addlog.txt | cut -c1-300
