#!/usr/bin/env bash
# stop 73 call 6 (its first try carried a module missing a symbol and ran nothing): main after 6b673a0 (eval and generate take the fused attention by default), module of calls 3-5
# (0001-0095 and the candidates, off). A small llama trained on the default corpus, then eval and greedy generation on the CPU
# and on CUDA, fused (the new default) and reference (--attention is training's; eval and generate
# had the reference before): the losses and the texts side by side.
cd "$(dirname "$0")/../.."
OUT=/tmp/cs0 bash scripts/gpu/cuda-session.sh info > /dev/null 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break; done
export TOY_CUDA_NO_0096=1 TOY_CUDA_NO_0097=1 # the module of calls 3-5: the candidates off, as main
L=$OUT/c6.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
T=.devcarry/toy
timeout 120 $T train --preset small --steps 60 --device cuda --out /tmp/r6 > /tmp/r6.log 2>&1; echo "train rc=$?" >> $L; tail -2 /tmp/r6.log >> $L
for dev in cpu cuda; do
  echo "[eval $dev] $(timeout 120 $T eval /tmp/r6 --corpus data/default-corpus.txt --device $dev --max-windows 64 2>&1 | tail -1)" >> $L
  echo "[generate $dev] $(timeout 60 $T generate /tmp/r6 --prompt 'Once upon a time' -n 40 --greedy --device $dev 2>/dev/null | tr '\n' ' ')" >> $L
done
# eval at a context 8x the model's own (fused by default): no [T, T] mask
echo "[eval cuda, context 2048] $(timeout 120 $T eval /tmp/r6 --corpus data/default-corpus.txt --device cuda --context 2048 --max-windows 8 2>&1 | tail -1)" >> $L
cat $L
