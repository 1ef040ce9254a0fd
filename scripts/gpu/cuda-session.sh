#!/usr/bin/env bash
# One call on a GPU machine (nvcc/PyTorch there, no Rust): the stages named on
# the command line, logs and tables under $OUT. Prepare here with
#   scripts/dist.sh && scripts/gpu/pack-tests.sh && scripts/gpu/pack-carry.sh
# which fills .devcarry/ (toy, shared ggml, the CUDA module as .xz, test
# binaries, the gguf wheel); carry that folder. Without a prebuilt module the
# script builds it from dist/ggml-src (scripts/cuda-backend.sh, ~160 s).
#
#   bash scripts/gpu/cuda-session.sh info tests ncu bench-toy bench-eager parity
#
# Stages: info, tests (ggml-rs tests with TOY_TEST_DEVICE=cuda), ncu (kernel
# times of one llama and one gpt2 small step), bench-toy (toy alone, both
# precisions), bench-eager / bench-compile / bench-all (scripts/bench/bench.py
# against PyTorch), parity (scripts/parity on CUDA, both precisions), lora
# (finetune and LoRA on CUDA, f16 base, eval against the CPU).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
C=${CARRY:-.devcarry}
export PYTHONUNBUFFERED=1 GGML_NO_BACKTRACE=1

if [ ! -f "$C/libggml-cuda.so" ]; then
  if [ -f "$C/libggml-cuda.so.xz" ]; then
    xz -dk "$C/libggml-cuda.so.xz"
  else
    s=$(date +%s)
    JOBS=$(nproc) bash scripts/cuda-backend.sh dist/ggml-src "$C" > "$OUT/cuda-build.log" 2>&1 || { tail -30 "$OUT/cuda-build.log"; exit 1; }
    echo "libggml-cuda.so built in $(( $(date +%s) - s )) s"
  fi
fi
# The module needs CUDA 13's runtime and cuBLAS; find them if the loader does not.
if ! ldd "$C/libggml-cuda.so" | grep -q "libcublas.so.13 => /"; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib $(python3 -c 'import nvidia,os;print(os.path.join(os.path.dirname(nvidia.__path__[0]),"nvidia/cu13/lib"))' 2>/dev/null); do
    [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break
  done
fi
if [ -d "$C/whl" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$C"/whl/*.whl && export PYTHONPATH=/tmp/site
fi
T=$(pwd)/$C/toy

stage_info() {
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv
  ldd "$C/libggml-cuda.so" | grep -E "cu|not found"
  $T devices
}

stage_tests() {
  for t in "$C"/tests/*; do
    echo "== $(basename "$t")"
    TOY_TEST_DEVICE=cuda timeout ${TEST_TIMEOUT:-300} "$t" --test-threads 4 > "$OUT/test-$(basename "$t").log" 2>&1
    echo "rc=$?"; grep -E "^test result|FAILED|panicked" "$OUT/test-$(basename "$t").log" | head -20
  done
}

# ncu_step NAME TOP ARGS...: kernel times of one `toy debug bench ARGS --device cuda
# --steps 1 --warmup 0` under ncu (at most NCU_LAUNCHES kernels, NCU_TIMEOUT s):
# $OUT/ncu-NAME.{csv,err,md}, the top TOP kernels printed.
ncu_step() {
  local name=$1 top=$2; shift 2
  GGML_CUDA_DISABLE_GRAPHS=1 timeout ${NCU_TIMEOUT:-300} ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    --launch-count ${NCU_LAUNCHES:-12000} $T debug bench "$@" --device cuda --steps 1 --warmup 0 > "$OUT/ncu-$name.csv" 2> "$OUT/ncu-$name.err"
  echo "== ncu $name $* (rc=$?)"
  python3 scripts/gpu/ncu_top.py "$OUT/ncu-$name.csv" --top $top | tee "$OUT/ncu-$name.md"
}

# ncu [EXTRA...]: kernel times of one llama and one gpt2 small step (EXTRA: more
# `toy debug bench` flags, e.g. --matmul-precision highest; NCU_TAG names the files).
stage_ncu() {
  local tag=${NCU_TAG:-}
  for arch in llama gpt2; do ncu_step $arch-small$tag 15 --preset small --arch $arch "$@"; done
  gzip -f "$OUT"/ncu-*.csv
}
stage_ncu_highest() { NCU_TAG=-highest stage_ncu --matmul-precision highest; }

stage_bench_toy() {
  for arch in llama gpt2; do for p in small medium; do for prec in highest high; do
    $T debug bench --preset $p --arch $arch --device cuda --steps 20 --warmup 5 --matmul-precision $prec | tee -a "$OUT/bench-toy.jsonl" |
      python3 -c "import json,sys; d=json.load(sys.stdin); print('$arch', d['preset'], '$prec', 'median ms', round(d['median_ms'],2), 'fallbacks', len(d['cpu_fallbacks']), 'splits', d['n_splits'])"
  done; done; done
}

# toy alone, the default precision only (for builds older than --matmul-precision).
stage_bench_toy_plain() {
  for arch in llama gpt2; do for p in small medium; do
    $T debug bench --preset $p --arch $arch --device cuda --steps 20 --warmup 5 | tee -a "$OUT/bench-toy-plain.jsonl" |
      python3 -c "import json,sys; d=json.load(sys.stdin); print('$arch', d['preset'], 'median ms', round(d['median_ms'],2), 'fallbacks', len(d['cpu_fallbacks']))"
  done; done
}

bench() { # bench NAME ARGS...: scripts/bench/bench.py on CUDA
  local name=$1; shift
  python3 scripts/bench/bench.py --toy $T --device cuda --threads "$(nproc)" --archs llama,gpt2 --steps 20 --warmup 5 \
    --json-out "$OUT/bench-$name.json" "$@" 2> "$OUT/bench-$name.err" | tee "$OUT/bench-$name.txt"
}
stage_bench_eager() { bench eager --presets small,medium --precisions highest,high --torch eager,eager-sdpa --reps 2; }
stage_bench_compile() { bench compile --presets small,medium --precisions highest,high --torch compile,compile-sdpa --reps 1; }
stage_bench_eager_small() { bench eager-small --presets small --precisions highest,high --torch eager,eager-sdpa --reps 1; }
stage_compile_probe() { bench compile-probe --archs llama --presets small --precisions high --torch compile-sdpa --reps 1; }
stage_bench_all() { bench all --presets small,medium --precisions highest,high --torch eager,eager-sdpa,compile,compile-sdpa --reps 1 --parallel-compile; }
# One architecture of bench-all (a call's time limit holds about one).
stage_bench_llama() { bench llama --archs llama --presets small,medium --precisions highest,high --torch eager,eager-sdpa,compile,compile-sdpa --reps 1 --parallel-compile; }
stage_bench_gpt2() { bench gpt2 --archs gpt2 --presets small,medium --precisions highest,high --torch eager,eager-sdpa,compile,compile-sdpa --reps 1 --parallel-compile; }

# Data-parallel training on two virtual CUDA devices of one GPU (GGML_CUDA_DEVICES=2):
# the multi-device code path and its loss curve against one device; no speed-up
# is possible on one GPU.
stage_dp_virtual() {
  GGML_CUDA_DEVICES=2 $T devices
  for arch in llama gpt2; do
    for dev in cuda:0 cuda:0,cuda:1; do
      GGML_CUDA_DEVICES=2 $T train --arch $arch --preset small --steps 100 --device $dev --matmul-precision highest \
        --corpus data/default-corpus.txt --eval-every 0 --out /tmp/dp-$arch-${dev//[:,]/_} --json > /dev/null 2> "$OUT/dp-$arch-${dev//[:,]/_}.err"
    done
    cp /tmp/dp-$arch-cuda_0_cuda_1/events.jsonl "$OUT/dp-$arch-events.jsonl"
    python3 - $arch <<'PY'
import json, sys
a = sys.argv[1]
L = lambda p: {e["step"]: e["loss"] for e in map(json.loads, open(p)) if e["kind"] == "step"}
one, two = L(f"/tmp/dp-{a}-cuda_0/events.jsonl"), L(f"/tmp/dp-{a}-cuda_0_cuda_1/events.jsonl")
start = json.loads(open(f"/tmp/dp-{a}-cuda_0_cuda_1/events.jsonl").readline())
print(f"{a} small, highest: 1 device vs 2 virtual devices over {len(one)} steps: max relative loss difference "
      f"{max(abs(one[k] - two[k]) / abs(one[k]) for k in one):.2e}; all-reduce {start['backend']['allreduce']}")
PY
  done
  GGML_CUDA_DEVICES=2 $T debug bench --preset small --device cuda:0,cuda:1 --steps 10 --warmup 3 --matmul-precision highest |
    python3 -c "import json,sys; d=json.load(sys.stdin); print('debug bench small on 2 virtual devices: median', round(d['median_ms'],2), 'ms, all-reduce', d['allreduce'], round(d['allreduce_ms_median'],2), 'ms')"
}

# parity RUN...: each RUN is "arch preset steps precision".
parity() {
  local run
  for run in "$@"; do
    set -- $run
    timeout 300 python3 scripts/parity/parity.py --toy $T --arch $1 --preset $2 --steps $3 --matmul-precision $4 \
      --corpus data/default-corpus.txt --device cuda --torch-device cuda --work /tmp/parity-$1-$4 > "$OUT/parity-$1-$2-$4.txt" 2> "$OUT/parity-$1-$2-$4.err"
    echo "== parity $run (rc=$?)"; tail -14 "$OUT/parity-$1-$2-$4.txt"
  done
}
# The finetune recipe and LoRA on CUDA: full and LoRA fine-tuning of a toy base,
# an f16 copy of the base under LoRA, eval of the adapters on CUDA against the CPU.
stage_lora() {
  local w=/tmp/lora-cuda && rm -rf $w && mkdir -p $w
  $T train --preset small --steps 30 --device cuda --out $w/base --json > $w/base.json
  $T train finetune --from $w/base/weights/latest --preset small --steps 30 --device cuda --out $w/full --json | tail -1
  $T train finetune --from $w/base/weights/latest --preset small --steps 30 --device cuda --lora-rank 8 --lr 3e-3 --out $w/lo --json | tail -1
  python3 scripts/bench/typed-copy.py $w/base/weights/latest $w/b16.gguf f16
  $T train finetune --from $w/b16.gguf --preset small --steps 30 --device cuda --lora-rank 8 --lr 3e-3 --out $w/lo16 --json | tail -1
  python3 scripts/bench/typed-copy.py $w/base/weights/latest $w/b41.gguf q4_1 --embd q8_0
  $T train finetune --from $w/b41.gguf --preset small --steps 30 --device cuda --lora-rank 8 --lr 3e-3 --out $w/lo41 --json | tail -1
  $T train finetune --from $w/b41.gguf --preset small --steps 30 --device cpu --lora-rank 8 --lr 3e-3 --out $w/lo41cpu --json | tail -1
  echo "fallback events: $(cat $w/lo16/events.jsonl $w/lo41/events.jsonl | grep -c '"kind":"fallback"')"
  grep -h '"kind":"fallback"' $w/lo41/events.jsonl | head -3 | cut -c1-300
  for r in lo lo16 lo41 lo41cpu; do
    for dev in cuda cpu; do
      echo "eval $r on $dev: $($T eval $w/$r --corpus data/default-corpus.txt --max-windows 64 --device $dev --json)"
    done
  done
  grep -h '"kind":"step"' $w/lo/events.jsonl | tail -1 | cut -c1-160
}
# Which training runs work on CUDA (short runs, one line each).
stage_triage() {
  cd /tmp
  for c in "debug bench --preset small --device cuda --steps 2 --warmup 1" "train --preset smoke --device cuda --steps 3 --out s1 --json" \
           "train --preset small --device cuda --steps 3 --eval-every 0 --out s2 --json" "eval s1 --corpus $OLDPWD/data/default-corpus.txt --device cuda --max-windows 8"; do
    echo "== $c"; timeout 60 $T $c 2>&1 | tail -3
  done
  echo "== small, CUDA_LAUNCH_BLOCKING"; CUDA_LAUNCH_BLOCKING=1 timeout 60 $T train --preset small --device cuda --steps 2 --out s4 2>&1 | grep -v "^step" | tail -5
  echo "== small, no CUDA graphs"; GGML_CUDA_DISABLE_GRAPHS=1 timeout 60 $T train --preset small --device cuda --steps 2 --out s5 2>&1 | tail -2
  cd "$OLDPWD"
}
stage_parity_quick() { parity "llama small 100 highest"; }

# --- GPT-2 124M (issue 20) ---
# The ggml-rs tests of the cross-entropy op on CUDA (also part of `tests`).
stage_tests_ce() {
  for t in "$C"/tests/*; do
    TOY_TEST_DEVICE=cuda timeout 120 "$t" cross_entropy --nocapture 2>&1 | grep -E "rel err|^test |test result" | tee -a "$OUT/tests-ce.log"
  done
}
# The cross-entropy op on CUDA against PyTorch's F.cross_entropy(ignore_index=-1).
stage_ce_parity() {
  python3 scripts/parity/cross_entropy.py --bin "$C"/examples/cross_entropy --device cuda | tee "$OUT/ce-parity.txt"
}
# One `toy debug bench` on CUDA (10 steps after 3): bench_toy PRESET VOCAB FILE [debug bench flags...];
# its JSON line appended to $OUT/FILE, a summary printed.
bench_toy() {
  local preset=$1 v=$2 file=$3; shift 3
  timeout 150 $T debug bench --preset $preset --vocab $v --device cuda --steps 10 --warmup 3 "$@" > /tmp/b.json 2> /tmp/b.err || { echo "$preset $v $* failed"; tail -5 /tmp/b.err; return; }
  tee -a "$OUT/$file" < /tmp/b.json | python3 -c "import json,sys; d=json.load(sys.stdin); print('$preset', 'vocab', d['vocab'], d['dtype'], d['matmul_precision'], 'median ms', round(d['median_ms'],2), 'buffers MiB', d['device_buffers_bytes']>>20, 'device used MiB', d.get('device_used_bytes',0)>>20, 'fallbacks', len(d['cpu_fallbacks']), 'loss', round(d['last_loss'],4))"
}
# toy alone at GPT-2 124M and llama-124m: bf16 and TF32, and vocabulary 8192 against 50257.
stage_bench_124m_toy() {
  local p v d
  for p in gpt2-124m llama-124m; do
    for d in "--dtype bf16" "--dtype f32 --matmul-precision high"; do
      for v in 50257 8192; do bench_toy $p $v bench-124m-toy.jsonl $d; done
    done
  done
}
# ncu top-15 of one GPT-2 124M step (NCU_DTYPE: bf16 or f32).
stage_ncu_124m() {
  local dt=${NCU_DTYPE:-bf16}
  ncu_step gpt2-124m-$dt 15 --preset gpt2-124m --dtype $dt
  gzip -f "$OUT"/ncu-*.csv
}
# ncu top-15 of one SmolLM2-135M-shape step at context NCU_CONTEXT (default 2048), bf16, fused attention.
stage_ncu_smollm() {
  local c=${NCU_CONTEXT:-2048}
  ncu_step smollm-$c 20 --preset smollm2-135m --context $c --attention fused
  gzip -f "$OUT"/ncu-*.csv
}
# llm.c's train_gpt2cu from the carried anchor ($C/anchors), with the CUDA 13 fix of its notes.
LLMC=/tmp/llmc/train_gpt2cu
stage_llmc_build() {
  [ -x $LLMC ] && return
  mkdir -p /tmp/llmc && tar xzf "$C"/anchors/llm.c-*.tar.gz -C /tmp/llmc
  sed -i 's/cudaMemAdvise(\*out, bytes, cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdvise(*out, bytes, cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' /tmp/llmc/llmc/cuda_utils.cuh
  (cd /tmp/llmc && make train_gpt2cu USE_CUDNN=0 NO_MULTI_GPU=1 NO_USE_MPI=1 GPU_COMPUTE_CAPABILITY=90 > "$OUT/llmc-build.log" 2>&1) || tail -20 "$OUT/llmc-build.log"
  python3 "$C"/anchors/llmc_data.py /tmp/llmc-data > /dev/null
  ls -la $LLMC
}
# GPT-2 124M side by side: toy, PyTorch (nanoGPT-style, SDPA, fused AdamW) and llm.c.
stage_bench_124m() {
  stage_llmc_build
  bench 124m --archs gpt2,llama --presets gpt2-124m,llama-124m --precisions bf16,high --torch eager-sdpa,compile-sdpa --reps 1 \
    --steps 10 --warmup 3 --parallel-compile --llmc $LLMC --llmc-data /tmp/llmc-data
}
# GPT-2 124M only, bf16 and TF32, against PyTorch compile (SDPA) and llm.c: one call's worth.
stage_bench_124m_gpt2() {
  stage_llmc_build
  bench 124m-gpt2 --archs gpt2 --presets gpt2-124m --precisions ${PRECISIONS:-bf16,high} --torch compile-sdpa --reps 1 --attention fused \
    --steps 10 --warmup 3 --parallel-compile --llmc $LLMC --llmc-data /tmp/llmc-data
}
# Small and medium at bf16 against PyTorch bf16 (eager and compile, SDPA).
stage_bench_bf16() {
  bench bf16 --presets small,medium --precisions bf16 --torch ${BF16_TORCH:-eager-sdpa,compile-sdpa} --reps 1 --steps 10 --warmup 3 --parallel-compile
}
# Parity at f32 on CUDA, and the 200-step loss curve at bf16 against PyTorch autocast.
stage_parity_124m() {
  parity "llama small 100 highest" "gpt2 small 100 highest"
  stage_parity_bf16
}
# --- fused attention on CUDA (issue 21, patch 0021) ---
# The ggml-rs attention tests on CUDA, and the op against PyTorch's SDPA there.
stage_attn_tests() {
  for t in "$C"/tests/*; do
    TOY_TEST_DEVICE=cuda timeout 200 "$t" attention --nocapture 2>&1 | grep -E "rel err|max|^test |test result|panicked" | tee -a "$OUT/attn-tests.log"
  done
  timeout 300 python3 scripts/parity/attention.py --bin "$C"/examples/attention --device cuda --max-t 4096 | tee "$OUT/attn-parity.txt"
}
# toy at GPT-2 124M and SmolLM2's shape, fused against reference attention (bf16).
stage_attn_bench_toy() {
  local p runs
  # ATTN_RUNS: "preset context attention" runs, comma-separated.
  IFS=, read -ra runs <<< "${ATTN_RUNS:-gpt2-124m 1024 reference,gpt2-124m 1024 fused,smollm2-135m 1024 reference,smollm2-135m 1024 fused,smollm2-135m 2048 reference,smollm2-135m 2048 fused,smollm2-135m 4096 fused,smollm2-135m 8192 fused}"
  for p in "${runs[@]}"; do
    set -- $p
    timeout 200 $T debug bench --preset $1 --context $2 --device cuda --steps 6 --warmup 2 --attention $3 > /tmp/b.json 2> /tmp/b.err || { echo "$1 ctx $2 $3 failed: $(tail -2 /tmp/b.err)"; continue; }
    tee -a "$OUT/attn-bench-toy.jsonl" < /tmp/b.json | python3 -c "import json,sys; d=json.load(sys.stdin); print('$1', 'ctx', d['context'], '$3', d['dtype'], 'median ms', round(d['median_ms'],2), 'device used MiB', (d['device_used_bytes'] or 0)>>20, 'buffers MiB', d['device_buffers_bytes']>>20, 'fallbacks', len(d['cpu_fallbacks']), 'loss', round(d['last_loss'],3))"
  done
}
# SmolLM2-135M's shape, batch 8, contexts 1024-8192: toy (fused) against PyTorch SDPA + compile, bf16.
stage_smollm_table() {
  local ctx
  for ctx in ${CONTEXTS:-1024 2048 4096 8192}; do
    bench smollm-$ctx --archs llama --presets smollm2-135m --precisions bf16 --torch compile-sdpa --reps 1 --steps 6 --warmup 2 \
      --context $ctx --attention fused
  done
}
stage_ncu_124m_fused() {
  ncu_step gpt2-124m-fused 10 --preset gpt2-124m --attention fused
  gzip -f "$OUT"/ncu-*.csv
}
# The parity harness with the fused attention on CUDA (f32, full precision).
stage_parity_fused() {
  local a
  for a in llama gpt2; do
    timeout 300 python3 scripts/parity/parity.py --toy $T --arch $a --preset small --steps 100 --matmul-precision highest --toy-arg=--attention --toy-arg=fused \
      --corpus data/default-corpus.txt --device cuda --torch-device cuda --work /tmp/parity-$a-fused > "$OUT/parity-$a-fused.txt" 2> "$OUT/parity-$a-fused.err"
    echo "== parity $a small 100 highest fused (rc=$?)"; tail -14 "$OUT/parity-$a-fused.txt"
  done
}
# Hand the CUDA module back in parts of at most 15 MiB (xz).
module_out() { xz -T0 -6 -c "$C/libggml-cuda.so" | split -b 15M - "$OUT/libggml-cuda.so.xz.part-"; }

# LoRA at SmolLM2-135M's shape (issue 23): toy over Q4_1 and f16 bases and toy's
# full fine-tuning against PyTorch LoRA (bf16 base, autocast; eager and compile)
# and PyTorch full fine-tuning, context 512, batch 8.
stage_lora_table() {
  python3 scripts/bench/lora.py --toy $T --device cuda --context 512 --batch 8 --steps 10 --warmup 3 \
    --torch ${LORA_TORCH-eager-sdpa,compile-sdpa} ${LORA_FULL_TORCH---full-torch} --work /tmp/lora-bench > "$OUT/lora-table.txt" 2> "$OUT/lora-table.err"
  echo "rc=$?"; cat "$OUT/lora-table.txt"; tail -5 "$OUT/lora-table.err"
}
# The CPU LoRA table on this machine's many cores (CPU_THREADS, default all),
# SmolLM2-135M's shape, context 128, batch 4, against PyTorch on the CPU; then
# toy's sides again without patch 0059's packed GEMM (TOY_CPU_NO_0059).
stage_lora_cpu_table() {
  local n=${CPU_THREADS:-$(nproc)}
  python3 scripts/bench/lora.py --toy $T --device cpu --threads $n --context 128 --batch 4 --work /tmp/lora-cpu \
    > "$OUT/lora-cpu-table.txt" 2> "$OUT/lora-cpu-table.err"
  echo "rc=$?"; cat "$OUT/lora-cpu-table.txt"; tail -5 "$OUT/lora-cpu-table.err"
  TOY_CPU_NO_0059=1 python3 scripts/bench/lora.py --toy $T --device cpu --threads $n --context 128 --batch 4 --torch '' \
    --work /tmp/lora-cpu > "$OUT/lora-cpu-table-no0059.txt" 2>&1
  echo "rc=$?"; cat "$OUT/lora-cpu-table-no0059.txt"
}
# Kernel times of LoRA (rank 16, Q4_1 base) against full fine-tuning at
# SmolLM2-135M's shape, context 512, batch 8: one step of each, from `toy debug
# bench --from` (no validation passes; scripts/bench/lora.py's random base files).
# The random SmolLM2-shape bases of the LoRA stages: $LORA_BENCH/smol-f16.gguf and its Q4_1 copy.
LORA_BENCH=/tmp/lora-bench
lora_bases() {
  [ -f $LORA_BENCH/smol-q4_1.gguf ] && return
  mkdir -p $LORA_BENCH && python3 scripts/bench/make-smollm-shape.py $LORA_BENCH/smol-f16.gguf > /dev/null
  python3 scripts/bench/typed-copy.py $LORA_BENCH/smol-f16.gguf $LORA_BENCH/smol-q4_1.gguf q4_1 --embd q8_0
}
# (NCU_SIDES: lora over Q4_1, lora16 over its f16 copy, full fine-tuning of that copy)
stage_ncu_lora() {
  local w=$LORA_BENCH
  lora_bases
  for side in ${NCU_SIDES:-lora full}; do
    local extra=(--from $w/smol-f16.gguf)
    [ $side = lora ] && extra=(--from $w/smol-q4_1.gguf --lora-rank 16 --lora-targets attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down)
    [ $side = lora16 ] && extra=(--from $w/smol-f16.gguf --lora-rank 16 --lora-targets attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down)
    ncu_step $side ${NCU_TOP:-15} "${extra[@]}" --context 512 --batch 8
  done
  gzip -f "$OUT"/ncu-*.csv
}
# quick-124m: toy alone, GPT-2 124M at bf16, vocabularies 50257 and 8192 (median ms, memory).
stage_quick_124m() {
  local v
  for v in ${QUICK_VOCABS:-50257 8192}; do bench_toy gpt2-124m $v quick-124m.jsonl --dtype bf16; done
}
# smollm-toy: toy alone at SmolLM2-135M's shape (batch 8, bf16, fused attention) for CONTEXTS.
stage_smollm_toy() {
  local ctx
  for ctx in ${CONTEXTS:-1024 2048}; do bench_toy smollm2-135m 49152 smollm-toy.jsonl --context $ctx --attention fused; done
}
# parity-bf16: the 200-step loss curves at bf16 (fused attention) against PyTorch autocast, llama and gpt2 small.
stage_parity_bf16() {
  local a
  for a in llama gpt2; do
    timeout 400 python3 scripts/parity/parity.py --toy $T --arch $a --preset small --steps 200 --matmul-precision high --dtype bf16 \
      --corpus data/default-corpus.txt --device cuda --torch-device cuda --work /tmp/parity-$a-bf16 > "$OUT/parity-$a-small-bf16.txt" 2> "$OUT/parity-$a-small-bf16.err"
    echo "== parity $a small 200 bf16 (rc=$?)"; grep -E "loss|FAIL|PASS" "$OUT/parity-$a-small-bf16.txt" | tail -4
  done
}
# The cases of the A/B stages (ab_cases, toy-ab), by index: SmolLM2's shape at
# contexts 2048 and 1024, GPT-2 124M (bf16 and TF32), LoRA rank 16 over a Q4_1
# base and full fine-tuning of its f16 copy (context 512, batch 8), LoRA over that f16 copy,
# GPT-2 124M at vocabulary 8192, SmolLM2's shape at contexts 4096 and 8192.
ab_case_list() {
  local w=$LORA_BENCH
  lora_bases
  CASES=(
    "--preset smollm2-135m --vocab 49152 --context 2048 --attention fused"
    "--preset smollm2-135m --vocab 49152 --context 1024 --attention fused"
    "--preset gpt2-124m --vocab 50257 --dtype bf16"
    "--preset gpt2-124m --vocab 50257 --dtype f32 --matmul-precision high"
    "--from $w/smol-q4_1.gguf --lora-rank 16 --lora-targets attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down --context 512 --batch 8"
    "--from $w/smol-f16.gguf --context 512 --batch 8"
    "--from $w/smol-f16.gguf --lora-rank 16 --lora-targets attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down --context 512 --batch 8"
    "--preset gpt2-124m --vocab 8192 --dtype bf16"
    "--preset smollm2-135m --vocab 49152 --context 4096 --attention fused"
    "--preset smollm2-135m --vocab 49152 --context 8192 --attention fused"
  )
}
# A/B of a patch that an environment variable turns off: each case of AB_CASES
# (indices into ab_case_list, default all) with the patch on, then with
# AB_ENV=1; $OUT/ab-AB_ENV.jsonl. With AB_OPT_IN=1 the variable turns it on.
ab_cases() {
  local on i
  ab_case_list
  for i in ${AB_CASES:-0 1 2 3 4 5 6}; do
    local c=${CASES[$i]}
    for on in 1 0; do
      if [ $on = "${AB_OPT_IN:-0}" ]; then export "$AB_ENV"="${AB_VALUE:-1}"; else unset "$AB_ENV"; fi
      timeout 150 $T debug bench $c --device cuda --steps ${AB_STEPS:-10} --warmup 3 > /tmp/b.json 2> /tmp/b.err || { echo "$c on=$on failed: $(tail -2 /tmp/b.err)"; continue; }
      CASE="$c" ON=$on python3 -c "import json,os; d=json.load(open('/tmp/b.json')); d['patch_on']=int(os.environ['ON']); d['case']=os.environ['CASE']; print(json.dumps(d))" >> "$OUT/ab-$AB_ENV.jsonl"
      CASE="$c" ON=$on python3 -c "import json,os; d=json.load(open('/tmp/b.json')); print('on=' + os.environ['ON'], os.environ['CASE'][:60], d['dtype'], 'median ms', round(d['median_ms'],2), 'device used MiB', (d.get('device_used_bytes') or 0)>>20, 'fallbacks', len(d['cpu_fallbacks']), 'loss', round(d['last_loss'],5))"
    done
  done
  unset "$AB_ENV"
}
# Patch 0037 (fused product epilogues) and patch 0038 (RMSNorm rows, float4 SWIGLU), on and off.
stage_epilogue_ab() { AB_ENV=TOY_CUDA_NO_EPILOGUE ab_cases; }
stage_rows_ab() { AB_ENV=TOY_CUDA_NO_0038 ab_cases; }
# Patch 0039 (AdamW and the gradient norm over lists of parameters), on and off.
stage_lists_ab() { AB_ENV=TOY_CUDA_NO_0039 ab_cases; }
# Patch 0040: all of it off (frozen weights cast to f32, no small bf16 products), then
# only the cast (toy's side) off.
stage_bf16_cast_ab() { AB_ENV=TOY_CUDA_NO_0040 ab_cases; AB_ENV=TOY_NO_0040_CAST ab_cases; }
stage_cast_ab() { AB_ENV=TOY_NO_0040_CAST ab_cases; }
# Patch 0041: the training head's logits in bf16, then in f32 (GPT-2 124M, SmolLM2 at 2048, LoRA over Q4_1 by default).
stage_logits_ab() { AB_CASES=${AB_CASES:-2 0 4} AB_ENV=TOY_F32_LOGITS ab_cases; }
# Patch 0042: the products' inputs (norm, GELU, SwiGLU outputs) stored in bf16, then in f32.
stage_inputs_ab() { AB_CASES=${AB_CASES:-2 0 4} AB_ENV=TOY_F32_INPUTS ab_cases; }
# Patch 0043: the attention's q, k and v cast to bf16, then read in f32.
stage_attn_ab() { AB_CASES=${AB_CASES:-2 0 4} AB_ENV=TOY_F32_ATTENTION ab_cases; }
# Patches 0044, 0045: SwiGLU's gate and up and GELU's input cast to bf16, then read in f32
# (SmolLM2 at 2048, GPT-2 124M, LoRA over Q4_1 and full fine-tuning by default).
stage_act_ab() { AB_CASES=${AB_CASES:-0 2 4 5} AB_ENV=TOY_F32_ACTIVATIONS ab_cases; }
# Patch 0044's four-bf16-a-thread SwiGLU forward, on and off (SmolLM2 at 2048 and 1024).
stage_gated_ab() { AB_CASES=${AB_CASES:-0 1} AB_ENV=TOY_CUDA_NO_0044_GATED ab_cases; }
# Patch 0047: the norms' backward as one NORM_GAIN_BACK pass, then the composite
# (SmolLM2 at 2048, GPT-2 124M, LoRA over Q4_1 by default).
stage_norm_ab() { AB_CASES=${AB_CASES:-0 2 4} AB_ENV=TOY_NO_0047 ab_cases; }
# Patch 0051 (one RoPE table a graph), on and off.
stage_rope_cache_ab() { AB_CASES=${AB_CASES:-0 2} AB_ENV=TOY_CUDA_NO_0051 ab_cases; }
# Patch 0053 (norms and ropes writing their bf16 casts), on and off (SmolLM2 at 2048
# and 1024, LoRA over Q4_1 by default).
stage_bf16_writes_ab() { AB_CASES=${AB_CASES:-0 1 4} AB_ENV=TOY_CUDA_NO_0053 ab_cases; }
# Patch 0048: SwiGLU's gate and up written by bf16 products, then f32 products and
# casts (SmolLM2 at 2048 and 1024, full fine-tuning of the f16 copy by default).
stage_outputs_ab() { AB_CASES=${AB_CASES:-0 1 5} AB_ENV=TOY_F32_OUTPUTS ab_cases; }
# Patch 0056: the gradient of a LoRA adapter's A·x in bf16, then f32 (LoRA over Q4_1 and over f16 by default).
stage_dh_ab() { AB_CASES=${AB_CASES:-4 6} AB_ENV=TOY_NO_0056 ab_cases; }
# Patch 0057: the hoisted casts of LoRA's factors as one launch a run, then a launch
# each (LoRA over Q4_1 and over f16, full fine-tuning by default).
stage_cast_list_ab() { AB_CASES=${AB_CASES:-4 6 5} AB_ENV=TOY_CUDA_NO_0057 ab_cases; }
# Patch 0060: LoRA's weight gradients on a second stream, then all on one
# (LoRA over Q4_1 and over f16, full fine-tuning by default).
stage_side_ab() { AB_CASES=${AB_CASES:-4 6 5} AB_ENV=TOY_CUDA_NO_0060 ab_cases; }
# Patch 0061: a LoRA base dequantized once a step and kept for the backward (toy's
# TOY_NO_0061: per product, twice a step), then the list launch alone (TOY_CUDA_NO_0061).
stage_dequant_ab() { AB_CASES=${AB_CASES:-4 6 5} AB_ENV=TOY_NO_0061 ab_cases; }
# The LoRA base loaded in bf16 once (train/dequant.rs) against patch 0061's casts once a step.
stage_base_ab() { AB_CASES=${AB_CASES:-4 6 5} AB_ENV=TOY_BASE_CAST_PER_STEP ab_cases; }
# Patch 0063 (on by default since patch 0082): the cross-entropy forward writing its gradient,
# on and off (GPT-2 124M at vocabularies 50257 and 8192, bf16, by default).
stage_fused_ce_ab() { AB_CASES=${AB_CASES:-2 7 2 7} AB_ENV=TOY_CUDA_NO_0063 ab_cases; }
# Patch 0081: the cross-entropy's exp over bf16 logits as ex2.approx, on and off.
stage_ce_exp_ab() { AB_CASES=${AB_CASES:-2 7 0} AB_ENV=TOY_CUDA_NO_0081 ab_cases; }
# patch 0064: the fused cross-entropy (0063 on) reading each row once, staged in shared memory,
# against reading it twice (GPT-2 124M at 50257 and 8192).
stage_ce_stage_ab() { AB_CASES=${AB_CASES:-2 7} AB_ENV=TOY_CUDA_NO_0064 ab_cases; }
# patch 0065 (on unless TOY_CUDA_NO_0065): the main stream at the greatest priority (LoRA over Q4_1 and f16, full fine-tuning).
stage_priority_ab() { AB_CASES=${AB_CASES:-4 6 5} AB_ENV=TOY_CUDA_NO_0065 ab_cases; }
# Patch 0069 (the flash kernels on wgmma, sm_90a modules) on and off: SmolLM2 at 2048, 4096, 8192, GPT-2 124M.
stage_wgmma_ab() { AB_CASES=${AB_CASES:-0 8 9 2} AB_ENV=TOY_CUDA_NO_0069 ab_cases; }
# Patch 0070 (dO's copy and the row dots in one pass) on and off: SmolLM2 at 2048 and 4096, GPT-2 124M.
stage_rowdot_ab() { AB_CASES=${AB_CASES:-0 8 2} AB_ENV=TOY_CUDA_NO_0070 ab_cases; }
# Patch 0073 (the attention's bf16 output for bf16 q, k, v) on and off: SmolLM2 at 2048 and 4096, GPT-2 124M.
stage_attn_out_ab() { AB_CASES=${AB_CASES:-0 8 2} AB_ENV=TOY_NO_0073 ab_cases; }
# Any variable's A/B: AB_ENV (with AB_VALUE, AB_OPT_IN, AB_CASES) from the caller.
# The bf16 parity harness at llama medium (heads of 64: the bf16 q, k, v and attention
# patches in play), PARITY_STEPS (default 100) steps, as built, then with PARITY_OFF (a
# space-separated list of variables, e.g. "TOY_NO_0078 TOY_NO_0079") set; PARITY_ARGS go to
# parity.py (e.g. --noise-floor: PyTorch bf16 against PyTorch f32 as info rows).
stage_parity_medium_ab() {
  local off v
  for off in 0 1; do
    if [ $off = 1 ]; then for v in ${PARITY_OFF:?variables to set}; do export "$v"=1; done; fi
    timeout 200 python3 scripts/parity/parity.py --toy $T --arch llama --preset medium --steps ${PARITY_STEPS:-100} --matmul-precision high \
      --dtype bf16 --corpus data/default-corpus.txt --device cuda --torch-device cuda --work /tmp/pm$off ${PARITY_ARGS:-} \
      > "$OUT/parity-llama-medium-bf16-off$off.txt" 2> "$OUT/parity-llama-medium-bf16-off$off.err"
    echo "== parity llama medium bf16, off=$off (rc=$?)"; grep -E "loss, steps|gradients, step_|logits, step_|parity:" "$OUT/parity-llama-medium-bf16-off$off.txt"
  done
  for v in ${PARITY_OFF}; do unset "$v"; done
}
stage_env_ab() { : "${AB_ENV:?the variable to A/B}"; ab_cases; }
# patch 0066 (opt-in in toy): LoRA's input gradient through the merged weight (LoRA over Q4_1 and f16).
stage_merged_ab() { AB_CASES=${AB_CASES:-4 6} AB_ENV=TOY_0066 AB_OPT_IN=1 ab_cases; }
# Patch 0062: GPT-2's GELU computed again in the backward (toy's TOY_NO_0062: kept), GPT-2 124M by default.
stage_recompute_ab() { AB_CASES=${AB_CASES:-2} AB_ENV=TOY_NO_0062 ab_cases; }
stage_dequant_list_ab() { AB_CASES=${AB_CASES:-4 6} AB_ENV=TOY_CUDA_NO_0061 ab_cases; }
# Patch 0060 for every weight gradient (full fine-tuning's too): the default limit
# (2^16 values a node), then none (TOY_CUDA_0060_MAX).
stage_side_all_ab() { AB_CASES=${AB_CASES:-5} AB_ENV=TOY_CUDA_0060_MAX AB_VALUE=1000000000 ab_cases; }
# The side-stream plans of one LoRA step (TOY_CUDA_0060_LOG).
stage_side_log() {
  ab_case_list
  TOY_CUDA_0060_LOG=1 timeout 120 $T debug bench ${CASES[4]} --device cuda --steps 1 --warmup 0 2>&1 >/dev/null | grep "patch 0060" | sort | uniq -c
}
# The cuBLASLt plans one LoRA step makes (TOY_CUDA_LT_LOG), counted.
stage_lt_log() {
  ab_case_list
  TOY_CUDA_LT_LOG=1 timeout 120 $T debug bench ${CASES[4]} --device cuda --steps 1 --warmup 0 2>&1 >/dev/null | grep "cuBLASLt" | sort | uniq -c | head -40
}
# Patch 0049: RoPE's rotations from one table of the tokens', then per pair (SmolLM2 at 2048 and 1024).
stage_rope_ab() { AB_CASES=${AB_CASES:-0 1} AB_ENV=TOY_CUDA_NO_0049 ab_cases; }
# The ggml-rs tests of TESTS_FILTER (default: the norms' backward, the bf16
# activations and products, the gradient checks) on CUDA.
stage_tests_filtered() {
  local t
  for t in "$C"/tests/*; do
    echo "== $(basename "$t") ${TESTS_FILTER:-norm activations grad::}"
    TOY_TEST_DEVICE=cuda timeout 300 "$t" ${TESTS_FILTER:-norm activations grad::} --test-threads 4 --nocapture > "$OUT/tests-filtered-$(basename "$t").log" 2>&1
    echo "rc=$?"; grep -E "^test result|FAILED|panicked|max rel err|max err" "$OUT/tests-filtered-$(basename "$t").log" | head -40
  done
}
# This CUDA module against an earlier build of it (AB_OLD: its .xz; same toy, loaded
# from another folder through TOY_BACKEND_DIR): SmolLM2 at 2048 and 1024, GPT-2 124M,
# LoRA over Q4_1 by default.
stage_module_ab() {
  local old=/tmp/old-module
  rm -rf $old && mkdir -p $old && cp "$C"/libggml-cpu.so $old/ && xz -dc "${AB_OLD:?the .xz of an earlier module}" > $old/libggml-cuda.so
  AB_CASES=${AB_CASES:-0 1 2 4} AB_ENV=TOY_BACKEND_DIR AB_VALUE=$old ab_cases
}
# flash-harness: patch 0024's kernels alone (scripts/gpu/attn-flash-test.cu: checks
# against an f64 reference, then times; FLASH_SRC: the folder of the attn-flash.cuh
# to test, default the module's source) beside PyTorch's SDPA (scripts/gpu/sdpa-time.py),
# and the names of the kernels SDPA runs.
stage_flash_harness() {
  local src=${FLASH_SRC:-dist/ggml-src/src/ggml-cuda}
  nvcc -O3 -std=c++17 -arch=sm_90a -DGGML_CUDA_WGMMA -use_fast_math -I "$src" scripts/gpu/attn-flash-test.cu -o /tmp/aft 2> "$OUT/flash-nvcc.err" || { echo "nvcc failed"; tail -20 "$OUT/flash-nvcc.err"; return; }
  /tmp/aft ${FLASH_ARGS:-} | tee -a "$OUT/flash-harness.txt"
  [ -n "${FLASH_NO_SDPA:-}" ] || python3 scripts/gpu/sdpa-time.py --kernels | tee -a "$OUT/sdpa-time.txt"
}
# flash-ncu: ncu's full sections for one forward and one backward kernel of the
# harness (FLASH_SHAPE, default SmolLM2's 64 9 3 2048 8 in bf16); run after flash-harness.
stage_flash_ncu() {
  timeout 300 ncu --set full -k regex:k_flash_ --launch-skip 2 --launch-count 2 /tmp/aft time ${FLASH_SHAPE:-64 9 3 2048 8} bf16 > "$OUT/flash-ncu.txt" 2>&1
  echo "rc=$?"; grep -E "k_flash|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Compute \(SM\) Throughput|Memory Throughput|Warp Cycles Per Issued|Block Limit" "$OUT/flash-ncu.txt" | head -40
}
# toy-ab: this toy against an earlier one (AB_TOY_OLD, same module) on AB_CASES of
# ab_case_list; $OUT/ab-toy.jsonl.
stage_toy_ab() {
  local i old=${AB_TOY_OLD:?an earlier toy binary}
  chmod +x "$old"
  ab_case_list
  for i in ${AB_CASES:-4 6 5}; do
    local c=${CASES[$i]} bin
    for bin in $T "$old" $T "$old"; do
      timeout 150 $bin debug bench $c --device cuda --steps ${AB_STEPS:-10} --warmup 3 > /tmp/b.json 2> /tmp/b.err || { echo "$c $bin failed: $(tail -2 /tmp/b.err)"; continue; }
      CASE="$c" BIN="$bin" python3 -c "import json,os; d=json.load(open('/tmp/b.json')); d['toy']=os.environ['BIN']; d['case']=os.environ['CASE']; print(json.dumps(d))" >> "$OUT/ab-toy.jsonl"
      CASE="$c" BIN="$bin" python3 -c "import json,os; d=json.load(open('/tmp/b.json')); print(os.path.basename(os.environ['BIN']), os.environ['CASE'][:60], 'median ms', round(d['median_ms'],2), 'device used MiB', (d.get('device_used_bytes') or 0)>>20, 'fallbacks', len(d['cpu_fallbacks']), 'loss', round(d['last_loss'],5))"
    done
  done
}
stage_parity() { parity "llama small 100 highest" "gpt2 small 100 highest" "llama small 100 high" "gpt2 small 100 high"; }

for s in "$@"; do
  echo "######## $s ($(date +%T))"
  "stage_${s//-/_}"
done 2>&1 | tee -a "$OUT/session.log"
# At most 8 files come back from a call: everything in one archive.
# Earlier calls' archives and the module's parts stay as they are.
keep=(! -name 'results*.tgz' ! -name 'libggml-cuda.so.xz.part-*')
(cd "$OUT" && tar czf /tmp/results.tgz --exclude='results*.tgz' --exclude='libggml-cuda.so.xz.part-*' . &&
  find . -mindepth 1 -maxdepth 1 "${keep[@]}" -exec rm -rf {} + && mv /tmp/results.tgz "results-$(date +%H%M%S).tgz")
if [ -n "${MODULE_OUT:-}" ]; then module_out; fi

