# Sourced from the repository root by a device call's script (bench/*/c*.sh):
# cuda-session.sh's setup, libcublas.so.13 on the library path, the carried gguf
# wheel on PYTHONPATH (for scripts/bench/*.py), and
#   T   the carried toy;   S   the call's start (seconds);
#   ms  reads `toy debug bench`'s JSON on stdin and prints its median ms, device
#       MiB, last loss and CPU fallbacks ("fail" where the run gave no JSON).
OUT=/tmp/cs0 bash scripts/gpu/cuda-session.sh info > /dev/null 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break
done
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site
T=.devcarry/toy
S=$(date +%s)
ms() {
  python3 -c "import json,sys; d=json.load(sys.stdin); print(round(d['median_ms'],3), round((d.get('device_used_bytes') or 0)/2**20), d.get('last_loss'), len(d.get('cpu_fallbacks') or []))" 2>/dev/null || echo fail
}
