#!/usr/bin/env bash
# Does llama.cpp, given a base model and a toy LoRA adapter, compute what toy
# computes?
#
#   scripts/llamacpp/check-lora.sh BASE.gguf ADAPTER.gguf BATCHES.bin [TOY]
#
# BATCHES.bin is a run's batches.bin (toy train --record-batches); its first
# window is decoded by both (as one sequence: record it with batch 1). Prints
# the max |Δ| of the logits, the largest difference among llama.cpp's top-5
# logits of each position relative to that position's largest |logit|, and the
# argmax agreement. ADAPTER `-`: the base model alone, against toy's logits of
# the base (a checkpoint toy wrote, or a llama/qwen2 GGUF toy runs).
# Environment:
#   TOY_SIDE=merged (default): toy's merged model (toy export merge), against
#     an absolute tolerance TOL (default 1e-3): an f32/f16 base.
#   TOY_SIDE=adapter: toy's base + adapter as it trains (debug dump-logits of
#     the adapter, which names its base), against TOL on the top-5 relative
#     difference (default 2e-2): a quantized base, which llama.cpp multiplies
#     with activations rounded to 8 bits and toy with the dequantized matrix.
#   STORED=1 (with TOY_SIDE=adapter): toy multiplies the quantized base as
#     stored (debug dump-logits --stored-types: q4_1 by activations rounded to
#     q8_1, as llama.cpp and toy generate do) instead of dequantizing it. On a
#     quantized base the logits are sensitive at the 1e-2 level to any change
#     of arithmetic: llama.cpp against itself with flash attention on and off
#     moves SmolLM2 Q4_1's top-5 by 5.2e-2 (bench/results.md).
#   GREEDY=N: also compare the greedy continuations of N tokens after the
#     window's first 32 ids (toy generate --greedy against lora_greedy.cpp).
# Builds libllama (CPU) once from the llama.cpp source that cargo fetched for
# ggml-sys (override with LLAMA_CPP_DIR) into $LLAMA_BUILD_DIR (default
# target/llamacpp). Needs cmake, a C++ compiler and Python with the gguf package.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
base="$1"; adapter="$2"; batches="$3"; toy="${4:-$here/../../target/release/toy}"
side="${TOY_SIDE:-merged}"
. "$here/libllama.sh"
for prog in lora_logits lora_greedy; do
  c++ -O2 -std=c++17 "$here/$prog.cpp" -I"$llama/include" -I"$llama/ggml/include" -L"$build/bin" \
    -lllama -lggml -lggml-base -Wl,-rpath,"$build/bin" -o "$build/$prog"
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tol="${TOL:-1e-3}"
if [ "$adapter" = - ]; then
  "$toy" debug dump-logits "$base" --batches "$batches" --out "$work/toy.gguf" > /dev/null
elif [ "$side" = adapter ]; then
  stored=(); [ -n "${STORED:-}" ] && stored=(--stored-types)
  "$toy" debug dump-logits "$adapter" "${stored[@]}" --batches "$batches" --out "$work/toy.gguf" > /dev/null
  tol="${TOL:-2e-2}"
  # The base alone on both sides too: what the adapter changes, compared apart
  # from how each side multiplies the quantized base.
  "$toy" debug dump-logits "$base" "${stored[@]}" --batches "$batches" --out "$work/toy-base.gguf" > /dev/null
else
  "$toy" export merge --base "$base" --lora "$adapter" --out "$work/merged.gguf" > /dev/null
  "$toy" debug dump-logits "$work/merged.gguf" --batches "$batches" --out "$work/toy.gguf" > /dev/null
fi
n=$(python3 -c "import gguf,sys; r=gguf.GGUFReader('$work/toy.gguf'); t=[t for t in r.tensors if t.name=='logits'][0]; print(int(t.shape[1]))")
"$build/lora_logits" "$base" "$adapter" "$batches" "$n" "$work/llama.f32" 2> "$work/llama.log" || { cat "$work/llama.log"; exit 1; }
if [ "$side" = adapter ] && [ "$adapter" != - ]; then
  "$build/lora_logits" "$base" - "$batches" "$n" "$work/llama-base.f32" 2> "$work/llama.log" || { cat "$work/llama.log"; exit 1; }
fi
[ "$adapter" = - ] && side=merged
python3 - "$work/toy.gguf" "$work/llama.f32" "$adapter" "$side" "$tol" <<'PY'
import sys, numpy as np, gguf
r = gguf.GGUFReader(sys.argv[1])
adapter, side, tol = sys.argv[3], sys.argv[4], float(sys.argv[5])
toy = [t for t in r.tensors if t.name == "logits"][0]
v, n = int(toy.shape[0]), int(toy.shape[1])
a = np.asarray(toy.data, dtype=np.float32).reshape(n, v)
b = np.fromfile(sys.argv[2], dtype=np.float32).reshape(n, v)
d = float(np.abs(a - b).max())
top = np.argsort(-b, axis=1)[:, :5]
rows = np.arange(n)[:, None]
top_rel = float((np.abs(a[rows, top] - b[rows, top]) / np.abs(b).max(1, keepdims=True)).max())
what = ("llama.cpp base vs toy" if adapter == "-" else
        f"llama.cpp base + adapter vs toy {'base + adapter' if side == 'adapter' else 'merged'}")
print(f"{what}: {n} positions x {v} logits, max |d| = {d:.3g}, top-5 max |d| / max |logit| = {top_rel:.3g}, "
      f"argmax agree {int((a.argmax(1) == b.argmax(1)).sum())}/{n}")
if side == "adapter":
    tb = [t for t in gguf.GGUFReader(sys.argv[1].replace("toy.gguf", "toy-base.gguf")).tensors if t.name == "logits"][0]
    ta = np.asarray(tb.data, dtype=np.float32).reshape(n, v)
    lb = np.fromfile(sys.argv[2].replace("llama.f32", "llama-base.f32"), dtype=np.float32).reshape(n, v)
    e_toy, e_llama = a - ta, b - lb
    print(f"what the adapter changes (with - without): max |d| = {float(np.abs(e_toy - e_llama).max()):.3g}, "
          f"relative to its largest |change| {float(np.abs(e_llama).max()):.3g}: {float(np.abs(e_toy - e_llama).max() / np.abs(e_llama).max()):.3g}")
sys.exit(0 if (top_rel if side == "adapter" else d) <= tol else 1)
PY
if [ -n "${GREEDY:-}" ]; then
  prompt=$(python3 -c "import numpy as np; print(','.join(str(int(x)) for x in np.fromfile('$batches', dtype=np.uint32)[:32]))")
  with=(--lora "$adapter"); [ "$adapter" = - ] && with=()
  ours=$("$toy" generate "$base" "${with[@]}" --prompt-ids "$prompt" --greedy --ignore-eot -n "$GREEDY" --json \
    | python3 -c "import json,sys; print(','.join(str(i) for i in json.load(sys.stdin)['ids'][32:]))")
  theirs=$("$build/lora_greedy" "$base" "$adapter" "$prompt" "$GREEDY" 2> "$work/greedy.log") || { cat "$work/greedy.log"; exit 1; }
  echo "greedy $GREEDY tokens after 32: toy       $ours"
  echo "                               llama.cpp $theirs"
  [ "$ours" = "$theirs" ] && echo "greedy continuations: same" || { echo "greedy continuations: differ"; exit 1; }
fi
