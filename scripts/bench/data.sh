#!/usr/bin/env bash
# Data-path measurements for bench/data.md (run on an idle machine):
#   1. toy prep on a large text (the TinyStories 1 MB file repeated to SIZE_MB):
#      wall time, tokens/s, peak RSS;
#   2. toy train --preset tiny --steps 20 on that prepared corpus and on the
#      1 MB sample prepared alone: peak RSS of each;
#   3. the BPE trained on a bounded sample of the 1 MB file against the one
#      trained on all of it: vocabulary overlap and tokens per byte.
#
#   bash scripts/bench/data.sh [SIZE_MB]        (default 1024; needs 2 x SIZE_MB of disk)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
toy=${TOY:-$here/target/release/toy}
src=${SRC:-$here/../shared/data/tinystories-1m.txt}
size=${1:-1024}
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
echo "work folder: $work"
rss() { grep "Maximum resident" "$1" | awk '{print $6 / 1024 " MB"}'; }
wall() { grep "Elapsed (wall clock)" "$1" | awk '{print $8}'; }

# 1. a large text
big=$work/big.txt
if [ ! -f "$big" ]; then
  n=$(( size * 1024 * 1024 / $(stat -c %s "$src") + 1 ))
  for _ in $(seq "$n"); do cat "$src"; echo "<|endoftext|>"; done > "$big"
fi
bytes=$(stat -c %s "$big")
rm -rf "$work/big-prep"
/usr/bin/time -v "$toy" prep "$big" --vocab-size 4096 --out "$work/big-prep" --json > "$work/big-prep.json" 2> "$work/big-prep.time"
tokens=$(python3 -c "import json; m=json.load(open('$work/big-prep.json')); print(m['train_tokens'] + m['val_tokens'])")
secs=$(python3 -c "
t='$(wall "$work/big-prep.time")'.split(':'); s=0
for p in t: s=s*60+float(p)
print(s)")
echo "prep of $(( bytes / 1000000 )) MB: $secs s wall, $(python3 -c "print(round($bytes/1e6/$secs, 2))") MB/s, $(python3 -c "print(round($tokens/$secs))") tokens/s, peak RSS $(rss "$work/big-prep.time")"

# 2. training RSS on the big prepared corpus and on the 1 MB sample alone
rm -rf "$work/small-prep" "$work/run-big" "$work/run-small"
"$toy" prep "$src" --vocab-size 4096 --out "$work/small-prep" > /dev/null
for c in big small; do
  /usr/bin/time -v "$toy" train --corpus "$work/$c-prep" --preset tiny --steps 20 --threads 2 --out "$work/run-$c" --json \
    > /dev/null 2> "$work/train-$c.time"
  echo "train --preset tiny --steps 20 on the $c prepared corpus: peak RSS $(rss "$work/train-$c.time")"
done

# 3. BPE from a bounded sample against the whole 1 MB file
python3 - "$toy" "$src" "$work" <<'PY'
import json, os, subprocess, sys
toy, src, work = sys.argv[1:]
def prep(sample_mb, out):
    subprocess.run([toy, "prep", src, "--vocab-size", "4096", "--out", out, "--force", "--bpe-sample", str(sample_mb), "--json"],
                   check=True, stdout=subprocess.PIPE)
    m = json.load(open(os.path.join(out, "manifest.json")))
    vocab = set(json.load(open(os.path.join(out, "tokenizer.json")))["model"]["vocab"])
    return vocab, (m["train_tokens"] + m["val_tokens"]) / os.path.getsize(src), m["bpe_sample_bytes"]
whole, tpb, n = prep(1024, os.path.join(work, "bpe-whole"))
print(f"BPE on the whole file ({n / 1e6:.2f} MB): {len(whole)} tokens, {tpb:.4f} tokens/byte")
for mb in (0.125, 0.25, 0.5):
    v, t, n = prep(mb, os.path.join(work, f"bpe-{mb}"))
    print(f"BPE on a {n / 1e6:.2f} MB sample: vocabulary overlap {len(v & whole) / len(whole):.1%}, "
          f"{t:.4f} tokens/byte ({(t / tpb - 1) * 100:+.2f}%)")
PY
