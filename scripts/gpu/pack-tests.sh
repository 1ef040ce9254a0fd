#!/usr/bin/env bash
# Build ggml-rs's test binaries against the shared ggml (--features dynamic)
# and put them in dist/tests/, for scripts/gpu/session.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$(pwd)/target-dyn}
mkdir -p dist/tests
cargo test --release --locked -p toy-ggml --features dynamic --no-run --message-format=json 2>/dev/null \
  | python3 -c "import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get('reason') == 'compiler-artifact' and m.get('executable') and m['target']['kind'] == ['test']:
        print(m['executable'])" | while read -r exe; do cp "$exe" dist/tests/; strip "dist/tests/$(basename "$exe")"; done
# The cross-entropy and attention examples, for scripts/parity/cross_entropy.py
# and scripts/parity/attention.py on the GPU.
mkdir -p dist/examples
for ex in cross_entropy attention; do
  cargo build --release --locked -p toy-ggml --features dynamic --example $ex 2>/dev/null
  cp "$CARGO_TARGET_DIR/release/examples/$ex" dist/examples/ && strip dist/examples/$ex
done
ls -la dist/tests dist/examples
