#!/usr/bin/env bash
# Fine-tuning measurements for bench/results.md (CPU):
#   1. forgetting: a tiny llama trained on ../shared/data/tinystories-sample.txt,
#      fine-tuned fully and with LoRA (rank 8) on the embedded default corpus;
#      validation loss on the new corpus (the finetune runs' held-out split) and
#      loss on the old text, before and after;
#   2. a random llama of SmolLM2-135M's shape (f16, scripts/bench/make-smollm-shape.py):
#      peak RSS and s/step of LoRA against full fine-tuning.
#
#   bash scripts/bench/finetune.sh [WORK]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
toy=${TOY:-$here/target/release/toy}
old=${OLD:-$here/../shared/data/tinystories-sample.txt}
new=$here/data/default-corpus.txt
work=${1:-$(mktemp -d)}
steps=${STEPS:-200}
threads=${THREADS:-2}
mkdir -p "$work"
cd "$work"
echo "work folder: $work"
rm -rf base full lora
common=(--preset tiny --threads "$threads" --json --log-every 1000)
"$toy" train --corpus "$old" --steps 400 --out base "${common[@]}" > /dev/null
"$toy" train finetune --from base/weights/latest --steps "$steps" --out full "${common[@]}" > /dev/null
"$toy" train finetune --from base/weights/latest --steps "$steps" --lora-rank 8 --lora-alpha 16 --lr 3e-3 \
  --lora-targets attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down --out lora "${common[@]}" > /dev/null
val() { python3 -c "
import json,sys
v=[json.loads(l) for l in open('$1/events.jsonl') if '\"eval\"' in l]
print(v[$2]['val_loss'])"; }
loss() { "$toy" eval "$@" --corpus "$old" --threads "$threads" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['loss'])"; }
echo "new corpus (held-out split of the embedded corpus), val loss: base $(val full 0), full $(val full -1), lora $(val lora -1)"
echo "old corpus ($(basename "$old")), loss: base $(loss base), full $(loss full), lora $(loss lora)"

# 2. SmolLM2-135M's shape
[ -f smol.gguf ] || python3 "$here/scripts/bench/make-smollm-shape.py" smol.gguf
for mode in lora full; do
  extra=(); [ "$mode" = lora ] && extra=(--lora-rank 8)
  rm -rf "smol-$mode"
  /usr/bin/time -v "$toy" train finetune --from smol.gguf --batch 1 --context 128 --steps 4 --eval-every 0 \
    --threads "$threads" --json --out "smol-$mode" "${extra[@]}" > /dev/null 2> "smol-$mode.time"
  python3 - "smol-$mode" "$mode" <<'PY'
import json, re, statistics, sys
run, mode = sys.argv[1:]
w = [json.loads(l)["wall_us"] / 1e6 for l in open(f"{run}/events.jsonl") if '"kind":"step"' in l]
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(f"{run}.time").read()).group(1)) / 1024
print(f"SmolLM2-135M shape, {mode}: median {statistics.median(w[1:]):.2f} s/step (steps 2-{len(w)}, batch 1 x 128 tokens), peak RSS {rss:.0f} MiB")
PY
done
