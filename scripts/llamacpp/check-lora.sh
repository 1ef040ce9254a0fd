#!/usr/bin/env bash
# Does llama.cpp, given a base model and a toy LoRA adapter, compute the same
# next-token logits as toy's merged model (toy export merge)?
#
#   scripts/llamacpp/check-lora.sh BASE.gguf ADAPTER.gguf BATCHES.bin [TOY]
#
# BATCHES.bin is a run's batches.bin (toy train --record-batches); its first
# window is decoded. Prints the max |Δ| of the logits and fails above 1e-3.
# ADAPTER `-`: the base model alone, against toy's logits of the base (a
# checkpoint toy wrote, or a llama/qwen2 GGUF toy runs).
# Builds libllama (CPU) once from the llama.cpp source that cargo fetched for
# ggml-sys (override with LLAMA_CPP_DIR) into $LLAMA_BUILD_DIR (default
# target/llamacpp). Needs cmake, a C++ compiler and Python with the gguf package.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
base="$1"; adapter="$2"; batches="$3"; toy="${4:-$here/../../target/release/toy}"
. "$here/libllama.sh"
c++ -O2 -std=c++17 "$here/lora_logits.cpp" -I"$llama/include" -I"$llama/ggml/include" -L"$build/bin" \
  -lllama -lggml -lggml-base -Wl,-rpath,"$build/bin" -o "$build/lora_logits"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [ "$adapter" = - ]; then
  cp "$base" "$work/merged.gguf"
else
  "$toy" export merge --base "$base" --lora "$adapter" --out "$work/merged.gguf" > /dev/null
fi
"$toy" debug dump-logits "$work/merged.gguf" --batches "$batches" --out "$work/toy.gguf" > /dev/null
n=$(python3 -c "import gguf,sys; r=gguf.GGUFReader('$work/toy.gguf'); t=[t for t in r.tensors if t.name=='logits'][0]; print(int(t.shape[1]))")
"$build/lora_logits" "$base" "$adapter" "$batches" "$n" "$work/llama.f32" 2> "$work/llama.log" || { cat "$work/llama.log"; exit 1; }
python3 - "$work/toy.gguf" "$work/llama.f32" "$adapter" <<'PY'
import sys, numpy as np, gguf
r = gguf.GGUFReader(sys.argv[1])
toy = [t for t in r.tensors if t.name == "logits"][0]
v, n = int(toy.shape[0]), int(toy.shape[1])
a = np.asarray(toy.data, dtype=np.float32).reshape(n, v)
b = np.fromfile(sys.argv[2], dtype=np.float32).reshape(n, v)
d = float(np.abs(a - b).max())
what = "llama.cpp base vs toy" if sys.argv[3] == "-" else "llama.cpp base + adapter vs toy merged"
print(f"{what}: {n} positions x {v} logits, max |d| = {d:.3g}, "
      f"argmax agree {int((a.argmax(1) == b.argmax(1)).sum())}/{n}")
sys.exit(0 if d <= 1e-3 else 1)
PY
