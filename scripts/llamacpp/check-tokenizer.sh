#!/usr/bin/env bash
# Check that llama.cpp tokenizes a prepared corpus exactly as toy did, with
# the vocabulary it reads from a toy checkpoint (tokenizer.ggml.* keys).
#
#   scripts/llamacpp/check-tokenizer.sh CHECKPOINT.gguf PREPARED_DIR [SOURCE.txt]
#
# Builds libllama (CPU) once from the llama.cpp source that cargo fetched for
# ggml-sys (the llama-cpp-sys-2 package; override with LLAMA_CPP_DIR) into
# $LLAMA_BUILD_DIR (default target/llamacpp). Needs cmake and a C++ compiler.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
ckpt="$1"; dir="$2"; src="${3:-}"
. "$here/libllama.sh"
c++ -O2 -std=c++17 "$here/tokenizer_check.cpp" -I"$llama/include" -I"$llama/ggml/include" -L"$build/bin" \
  -lllama -lggml -lggml-base -Wl,-rpath,"$build/bin" -o "$build/tokenizer_check"
cat "$dir/train.bin" "$dir/val.bin" > "$build/ids.bin"
"$build/tokenizer_check" "$ckpt" "$build/ids.bin" $src 2> "$build/tokenizer_check.log"
