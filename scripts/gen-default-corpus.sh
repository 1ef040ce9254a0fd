#!/usr/bin/env bash
# Regenerate the embedded default corpus:
#   data/default-corpus.txt  the story generator's output (the toy-stories crate)
#   data/tokenizer.json      `toy prep` on it with a vocabulary of 1024
# The test `embedded_corpus_is_generated_and_tokenized_by_this_project`
# (toy-cli/tests/data.rs) fails when either file is stale.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run -q -p toy-stories > data/default-corpus.txt.new
mv data/default-corpus.txt.new data/default-corpus.txt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cargo run -q -p toy-cli --bin toy -- prep data/default-corpus.txt --vocab-size 1024 --out "$tmp/prep"
cp "$tmp/prep/tokenizer.json" data/tokenizer.json
wc -c data/default-corpus.txt data/tokenizer.json
