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
# The cross-entropy example, for scripts/parity/cross_entropy.py on the GPU.
cargo build --release --locked -p toy-ggml --features dynamic --example cross_entropy 2>/dev/null
mkdir -p dist/examples && cp "$CARGO_TARGET_DIR/release/examples/cross_entropy" dist/examples/ && strip dist/examples/cross_entropy
ls -la dist/tests dist/examples
