#!/usr/bin/env bash
# Gather what scripts/gpu/cuda-session.sh needs on a GPU machine into
# .devcarry/ (ignored by git; name it in the device tool's `carry`): toy and the
# shared ggml libraries from dist/ (stripped), the ggml-rs test binaries from
# dist/tests, a CUDA module built elsewhere (MODULE=path/libggml-cuda.so,
# compressed) and the gguf wheel for Python (.whl/ or downloaded here).
set -euo pipefail
cd "$(dirname "$0")/../.."
c=.devcarry
rm -rf "$c" && mkdir -p "$c/tests" "$c/whl"
mkdir -p .git/info; grep -qx "/.devcarry/" .git/info/exclude 2>/dev/null || echo "/.devcarry/" >> .git/info/exclude
cp dist/toy "$c/" && strip "$c/toy"
for l in libggml.so.0 libggml-base.so.0 libggml-cpu.so; do cp -L "dist/$l" "$c/"; done
[ -d dist/tests ] && cp dist/tests/* "$c/tests/"
if [ -n "${MODULE:-}" ]; then xz -T0 -6 -c "$MODULE" > "$c/libggml-cuda.so.xz"; fi
ls .whl/gguf-*.whl >/dev/null 2>&1 || python3 -m pip download -q --no-deps --only-binary=:all: -d .whl gguf
cp .whl/gguf-*.whl "$c/whl/"
du -sh "$c" && du -sh "$c"/* | sort -h | tail -5
