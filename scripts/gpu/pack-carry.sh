#!/usr/bin/env bash
# Gather what scripts/gpu/cuda-session.sh needs on a GPU machine into
# .devcarry/ (CARRY_DIR; ignored by git; name it in the device tool's `carry`):
# toy and the shared ggml libraries from dist/ (DIST, stripped), the ggml-rs
# test binaries from dist/tests, a CUDA module built elsewhere
# (MODULE=path/libggml-cuda.so, compressed) and the gguf wheel for Python
# (.whl/ or downloaded here), and the benchmark anchors (llm.c).
set -euo pipefail
cd "$(dirname "$0")/../.."
c=${CARRY_DIR:-.devcarry}
d=${DIST:-dist}
rm -rf "$c" && mkdir -p "$c/tests" "$c/whl"
mkdir -p .git/info; grep -qx "/$c/" .git/info/exclude 2>/dev/null || echo "/$c/" >> .git/info/exclude
cp "$d/toy" "$c/" && strip "$c/toy"
for l in libggml.so.0 libggml-base.so.0 libggml-cpu.so; do cp -L "$d/$l" "$c/"; done
[ -d "$d/tests" ] && cp "$d"/tests/* "$c/tests/"
[ -d "$d/examples" ] && mkdir -p "$c/examples" && cp "$d"/examples/* "$c/examples/"
if [ -n "${MODULE:-}" ]; then xz -T0 -6 -c "$MODULE" > "$c/libggml-cuda.so.xz"; fi
ls .whl/gguf-*.whl >/dev/null 2>&1 || python3 -m pip download -q --no-deps --only-binary=:all: -d .whl gguf
cp .whl/gguf-*.whl "$c/whl/"
# Other projects' programs to benchmark against (never committed): ANCHORS (default ../shared/anchors).
a=${ANCHORS:-../shared/anchors}
if [ -d "$a" ]; then mkdir -p "$c/anchors" && cp "$a"/*.tar.gz "$a"/*.py "$c/anchors/"; fi
du -sh "$c" && du -sh "$c"/* | sort -h | tail -5
