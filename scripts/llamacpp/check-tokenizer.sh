#!/usr/bin/env bash
# Check that llama.cpp tokenizes text exactly as toy does.
#
#   scripts/llamacpp/check-tokenizer.sh CHECKPOINT.gguf PREPARED_DIR [SOURCE.txt]
#     a prepared corpus: llama.cpp, given the vocabulary of a toy checkpoint
#     (tokenizer.ggml.* keys), must give toy's ids for every document.
#
#   scripts/llamacpp/check-tokenizer.sh --text VOCAB.gguf TEXT.txt [TOY]
#     any GGUF with a tokenizer (a vocabulary-only file such as llama.cpp's
#     models/ggml-vocab-qwen2.gguf): `toy debug tokenize` and llama.cpp must
#     give the same ids for TEXT.txt, four ways: special tokens as text (a
#     corpus document) and parsed (a prompt), the whole text at once and line by
#     line. scripts/llamacpp/tokenizer-corpus.py writes a varied TEXT.txt.
#
# Builds libllama (CPU) once from the llama.cpp source that cargo fetched for
# ggml-sys (the llama-cpp-sys-2 package; override with LLAMA_CPP_DIR) into
# $LLAMA_BUILD_DIR (default target/llamacpp). Needs cmake and a C++ compiler.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/libllama.sh"
c++ -O2 -std=c++17 "$here/tokenizer_check.cpp" -I"$llama/include" -I"$llama/ggml/include" -L"$build/bin" \
  -lllama -lggml -lggml-base -Wl,-rpath,"$build/bin" -o "$build/tokenizer_check"
if [ "${1:-}" = "--text" ]; then
  vocab="$2"; text="$3"; toy="${4:-$here/../../target/release/toy}"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  status=0
  for special in plain special; do
    for pieces in whole lines; do
      flags=()
      [ "$special" = special ] && flags+=(--special)
      [ "$pieces" = lines ] && flags+=(--lines)
      "$toy" debug tokenize "$vocab" --text "$text" --out "$work/toy.bin" "${flags[@]}" > /dev/null
      "$build/tokenizer_check" --text "$vocab" "$text" "$work/toy.bin" "$special" "$pieces" 2>> "$build/tokenizer_check.log" || status=1
    done
  done
  exit $status
fi
ckpt="$1"; dir="$2"; src="${3:-}"
cat "$dir/train.bin" "$dir/val.bin" > "$build/ids.bin"
"$build/tokenizer_check" "$ckpt" "$build/ids.bin" $src 2> "$build/tokenizer_check.log"
