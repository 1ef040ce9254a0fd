#!/usr/bin/env python3
"""Training-step benchmark: toy against a PyTorch reference of the same model.

For each preset, alternating toy and PyTorch over several repetitions, it
measures the median time of a full training step (forward, cross-entropy,
backward, global-norm clipping, AdamW; f32 weights, same shapes and vocabulary,
random tokens) and prints median ms/step, tokens/s, peak memory and the ratio
toy/PyTorch. PyTorch variants (--torch): eager or torch.compile, each with the
explicit attention of scripts/parity/models.py or with
F.scaled_dot_product_attention(is_causal=True) (nanoGPT's path). Precisions
(--precisions): toy --matmul-precision highest|high against PyTorch
torch.set_float32_matmul_precision("highest"|"high") (TF32 on CUDA), and bf16:
toy --dtype bf16 against PyTorch under autocast(bfloat16) with TF32 for the
rest (nanoGPT's setting). PyTorch's AdamW is fused on CUDA (nanoGPT's).
With --llmc PATH, llm.c's train_gpt2cu (bf16) runs beside them for GPT-2 124M
(preset gpt2-124m, architecture gpt2, precision bf16): it needs its random
token shards in --llmc-data (../shared/anchors/llmc_data.py writes them).

toy runs as a subprocess (`toy debug bench`, which builds the step graph once
and times steps after a warm-up); each PyTorch variant runs in a fresh Python
subprocess too, so peak memory (max RSS on CPU, max allocated on CUDA) is
measured the same way for every side.

    python3 scripts/bench/bench.py --toy target/release/toy --device cpu --threads 2 --presets smoke,small
    python3 scripts/bench/bench.py --toy dist/toy --device cuda --archs llama,gpt2 --presets small,medium \
        --precisions highest,high --torch eager,eager-sdpa,compile,compile-sdpa
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# Preset shapes (d_model, heads, d_ff, layers, context, batch), as toy's config.rs.
PRESETS = {
    "smoke": (64, 4, 128, 2, 32, 1),
    "tiny": (128, 4, 344, 4, 64, 8),
    "small": (256, 8, 688, 6, 256, 32),
    "medium": (512, 8, 1376, 8, 512, 32),
    "gpt2-124m": (768, 12, 3072, 12, 1024, 16),
    "llama-124m": (768, 12, 2048, 12, 1024, 16),
    "smollm2-135m": (576, 9, 1536, 30, 2048, 8),
}
# Presets that name their vocabulary and architecture (toy's config.rs), and
# SmolLM2's grouped kv heads, tied head and RoPE base.
PRESET_VOCAB = {"gpt2-124m": 50257, "llama-124m": 50257, "smollm2-135m": 49152}
PRESET_ARCH = {"gpt2-124m": "gpt2", "llama-124m": "llama", "smollm2-135m": "llama"}
PRESET_KV = {"smollm2-135m": 3}
PRESET_ROPE = {"smollm2-135m": 100000.0}


def shape(preset, context=None):
    """(d_model, heads, d_ff, layers, context, batch), with --context applied."""
    d, h, f, n_layers, t, b = PRESETS[preset]
    return d, h, f, n_layers, context or t, b


def llama_shapes(d, dkv, f, n_layers, vocab, tied):
    """The numpy shapes (out, in) of a llama's tensors by GGUF name: width d,
    key/value width dkv, feed-forward width f."""
    shapes = {"token_embd.weight": (vocab, d), "output_norm.weight": (d,)}
    if not tied:
        shapes["output.weight"] = (vocab, d)
    for i in range(n_layers):
        for name, s in [("attn_norm", (d,)), ("ffn_norm", (d,)), ("attn_q", (d, d)), ("attn_k", (dkv, d)), ("attn_v", (dkv, d)),
                        ("attn_output", (d, d)), ("ffn_gate", (f, d)), ("ffn_up", (f, d)), ("ffn_down", (d, f))]:
            shapes[f"blk.{i}.{name}.weight"] = s
    return shapes


def torch_worker(args):
    """Time PyTorch steps in this process; print one JSON line."""
    import torch

    sys.path.insert(0, os.path.join(HERE, "..", "parity"))
    from models import Gpt2, Llama, causal_attention, causal_attention_sdpa  # noqa: E402
    from toygguf import ToyConfig  # noqa: E402

    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    torch.set_float32_matmul_precision("high" if args.precision == "bf16" else args.precision)
    dev = torch.device(args.device)
    d, h, f, n_layers, t, b = shape(args.preset, args.context)
    if args.arch == "gpt2":
        f = 4 * d
    kv = PRESET_KV.get(args.preset, h)
    tied = args.arch == "gpt2" or args.preset == "smollm2-135m"
    cfg = ToyConfig(arch=args.arch, vocab=args.vocab, d_model=d, n_layers=n_layers, n_heads=h, n_kv_heads=kv, d_ff=f,
                    context=t, norm_eps=1e-5, rope_base=PRESET_ROPE.get(args.preset, 10000.0), tied=tied)
    g = torch.Generator().manual_seed(0)
    if args.arch == "llama":
        shapes = llama_shapes(d, d // h * kv, f, n_layers, args.vocab, tied)
    else:
        shapes = {"token_embd.weight": (args.vocab, d), "output_norm.weight": (d,)}
        shapes["position_embd.weight"] = (t, d)
        shapes["output_norm.bias"] = (d,)
        for i in range(n_layers):
            for name, s in [("attn_norm", (d,)), ("ffn_norm", (d,)), ("attn_qkv", (3 * d, d)), ("attn_output", (d, d)),
                            ("ffn_up", (f, d)), ("ffn_down", (d, f))]:
                shapes[f"blk.{i}.{name}.weight"] = s
                shapes[f"blk.{i}.{name}.bias"] = (s[0],)
    tensors = {k: (torch.randn(s, generator=g) * 0.02).numpy() for k, s in shapes.items()}
    attention = causal_attention_sdpa if args.variant.endswith("sdpa") else causal_attention
    model = (Llama if args.arch == "llama" else Gpt2)(cfg, tensors, attention=attention).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8, fused=dev.type == "cuda")
    autocast = args.precision == "bf16"

    def step(tokens, targets):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast):
            loss, _ = model.loss(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    compile_s = None
    if args.variant.startswith("compile"):
        step = torch.compile(step)
    times = []
    for i in range(args.warmup + args.steps):
        tokens = torch.randint(0, args.vocab, (b, t), generator=g).to(dev)
        targets = torch.randint(0, args.vocab, (b, t), generator=g).to(dev)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step(tokens, targets)
        loss.item()  # the host reads the loss every step, as toy does
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if i >= args.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
        elif i == 0 and args.variant.startswith("compile"):
            compile_s = time.perf_counter() - t0
        if args.barrier and i == min(1, args.warmup + args.steps - 1):
            # Compiled (the optimizer's first step recompiles once): wait for the
            # other workers, then time alone on the GPU, holding the lock.
            barrier_wait(args.barrier, args.n_barrier)
            lock = gpu_lock(args.barrier)
    if args.profile:
        profile_step(args.profile, step, lambda: [torch.randint(0, args.vocab, (b, t), generator=g).to(dev) for _ in range(2)])
    import resource
    peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    reserved = torch.cuda.max_memory_reserved() if dev.type == "cuda" else None
    print(json.dumps({"median_ms": statistics.median(times), "step_ms": times, "peak_bytes": peak, "peak_reserved_bytes": reserved,
                      "compile_s": compile_s,
                      "tokens_per_step": t * b, "torch": torch.__version__}))


def profile_step(path, step, batch):
    """One more step under torch.profiler: its GPU kernels by total time, to `path`
    (the side's counterpart of toy's ncu tables; profiled after the timed steps)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    tokens, targets = batch()
    cuda = tokens.is_cuda  # else the CPU's operators (nested ones included)
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        step(tokens, targets).item()
        if cuda:
            torch.cuda.synchronize()
    kernels = {}
    for e in prof.events():
        if e.device_type == (torch.autograd.DeviceType.CUDA if cuda else torch.autograd.DeviceType.CPU):
            k = kernels.setdefault(e.name, [0, 0.0])
            k[0] += 1
            k[1] += e.device_time_total if cuda else e.cpu_time_total
    total = sum(v[1] for v in kernels.values())
    with open(path, "w") as f:
        what = "kernels" if cuda else "operators"
        f.write(f"{sum(v[0] for v in kernels.values())} {what}, {total / 1e3:.3f} ms\n")
        f.write(f"| {what[:-1]} | calls | us | share |\n|---|---:|---:|---:|\n")
        for name, (n, us) in sorted(kernels.items(), key=lambda kv: -kv[1][1])[:60]:
            f.write(f"| `{name[:110]}` | {n} | {us:.1f} | {100 * us / total:.1f}% |\n")


def barrier_wait(folder, n, timeout=900):
    """Mark this process ready in `folder`, then wait until `n` are (or `timeout` s pass)."""
    open(os.path.join(folder, f"ready-{os.getpid()}"), "w").close()
    deadline = time.time() + timeout
    while len([f for f in os.listdir(folder) if f.startswith("ready-")]) < n and time.time() < deadline:
        time.sleep(0.2)


def gpu_lock(folder):
    """An exclusive lock on `folder`/gpu.lock (released when the file object goes)."""
    import fcntl

    fh = open(os.path.join(folder, "gpu.lock"), "w")
    fcntl.flock(fh, fcntl.LOCK_EX)
    return fh


def run_llmc(args, preset):
    """llm.c's train_gpt2cu on GPT-2 124M (`-e d12`, batch 16 x 1024, bf16, no cuDNN): median ms of
    its steps after the warm-up, and its device memory (the "device memory usage" line)."""
    import re

    d, h, f, n_layers, t, b = PRESETS[preset]
    n = args.warmup + args.steps
    cmd = [args.llmc, "-i", f"{args.llmc_data}/train_*.bin", "-j", f"{args.llmc_data}/val_*.bin", "-e", f"d{n_layers}",
           "-b", str(b), "-t", str(t), "-d", str(b * t), "-x", str(n), "-v", "100000", "-s", "0", "-n", "0", "-h", "0"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=os.path.dirname(os.path.abspath(args.llmc)))
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    steps = [(int(m.group(1)), float(m.group(2))) for m in re.finditer(r"step\s+(\d+)/\d+ \|.*?\| *([0-9.]+) ms", out.stdout)]
    times = [ms for s, ms in steps if s > args.warmup]
    mem = re.search(r"device memory usage: (\d+) MiB", out.stdout)
    return {"median_ms": statistics.median(times), "step_ms": times, "peak_bytes": int(mem.group(1)) * 2**20 if mem else 0,
            "tokens_per_step": t * b}


def run_json(cmd, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--toy", default="target/release/toy")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--presets", default="smoke,small")
    ap.add_argument("--arch", default="llama", choices=["llama", "gpt2"], help="one architecture (see --archs)")
    ap.add_argument("--archs", help="comma list of architectures (overrides --arch)")
    ap.add_argument("--vocab", type=int, help="vocabulary (default: the preset's, else 4096)")
    ap.add_argument("--precisions", default="highest", help="comma list of highest, high, bf16")
    ap.add_argument("--llmc", help="llm.c's train_gpt2cu: a side for gpt2 / gpt2-124m / bf16")
    ap.add_argument("--llmc-data", default="/tmp/llmc", help="llm.c's token shards (train_*.bin, val_*.bin)")
    ap.add_argument("--torch", default="eager", help="comma list of PyTorch variants: eager, eager-sdpa, compile, compile-sdpa")
    ap.add_argument("--compile", action="store_true", help="shorthand: add the compile variant")
    ap.add_argument("--reps", type=int, default=3, help="alternating repetitions of each side")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per repetition")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json-out", help="write all measurements here")
    ap.add_argument("--context", type=int, help="override every preset's context")
    ap.add_argument("--attention", default="fused", choices=["reference", "fused"], help="toy's attention (fused: its default)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--profile", help=argparse.SUPPRESS)  # worker: one more step under torch.profiler, its kernels to this file
    ap.add_argument("--preset", help=argparse.SUPPRESS)
    ap.add_argument("--variant", default="eager", help=argparse.SUPPRESS)
    ap.add_argument("--precision", default="highest", help=argparse.SUPPRESS)
    ap.add_argument("--barrier", help=argparse.SUPPRESS)
    ap.add_argument("--n-barrier", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--parallel-compile", action="store_true",
                    help="compile all torch.compile variants of an architecture at once (on the CPU), then time every side "
                         "alone on the GPU, one after the other (saves minutes of compiling on a GPU machine)")
    args = ap.parse_args()
    if args.worker:
        return torch_worker(args)

    variants = [v for v in args.torch.split(",") if v]
    if args.compile and "compile" not in variants:
        variants.append("compile")
    for v in variants:
        if v not in ("eager", "eager-sdpa", "compile", "compile-sdpa"):
            sys.exit(f"bench: unknown PyTorch variant {v!r}")
    archs = (args.archs or args.arch).split(",")
    presets, precisions = args.presets.split(","), args.precisions.split(",")
    all_sides = ["toy"] + [f"torch {v}" for v in variants] + (["llm.c"] if args.llmc else [])

    def sides_for(arch, preset, prec):
        return [s for s in all_sides if s != "llm.c" or (arch, preset, prec) == ("gpt2", "gpt2-124m", "bf16")]

    def vocab(preset):
        return args.vocab or PRESET_VOCAB.get(preset, 4096)

    def command(arch, preset, prec, side, extra=()):
        if side == "toy":
            dtype = ["--dtype", "bf16", "--matmul-precision", "high"] if prec == "bf16" else ["--dtype", "f32", "--matmul-precision", prec]
            return [args.toy, "debug", "bench", "--preset", preset, "--arch", arch, "--vocab", str(vocab(preset)), "--steps", str(args.steps),
                    "--warmup", str(args.warmup), "--device", args.device, "--threads", str(args.threads), *dtype,
                    "--attention", args.attention, *(["--context", str(args.context)] if args.context else [])]
        return [sys.executable, __file__, "--worker", "--preset", preset, "--arch", arch, "--vocab", str(vocab(preset)),
                *(["--context", str(args.context)] if args.context else []),
                "--steps", str(args.steps), "--warmup", str(args.warmup), "--device", args.device, "--threads", str(args.threads),
                "--variant", side.split(" ", 1)[1], "--precision", prec, *extra]

    def run_side(arch, preset, prec, side, extra=()):
        if side == "llm.c":
            return run_llmc(args, preset)
        return run_json(command(arch, preset, prec, side, extra))

    results = {}  # (arch, preset, prec, side) -> list of runs

    def record(key, rep, r):
        results.setdefault(key, []).append(r)
        raw.append({"arch": key[0], "preset": key[1], "precision": key[2], "side": key[3], "rep": rep, **r})
        print(f"{' '.join(key)} rep {rep}: median {statistics.median(r['step_ms']):.2f} ms", file=sys.stderr, flush=True)

    raw = []
    for arch in archs:
        keys = [(arch, p, prec) for p in presets for prec in precisions if PRESET_ARCH.get(p, arch) == arch]
        if args.parallel_compile and any(s.startswith("torch compile") for s in all_sides):
            import tempfile

            for rep in range(args.reps):
                folder = tempfile.mkdtemp(prefix="toy-bench-")
                jobs = [(k + (s,)) for k in keys for s in sides_for(*k) if s.startswith("torch compile")]
                procs = [(j, subprocess.Popen(command(*j, extra=("--barrier", folder, "--n-barrier", str(len(jobs)))),
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)) for j in jobs]
                while len([f for f in os.listdir(folder) if f.startswith("ready-")]) < len(jobs):
                    if any(p.poll() not in (None, 0) for _, p in procs):
                        break
                    time.sleep(0.5)
                for k in keys:
                    for s in sides_for(*k):
                        if not s.startswith("torch compile"):
                            lock = gpu_lock(folder)
                            record(k + (s,), rep, run_side(*k, s))
                            lock.close()
                for j, p in procs:
                    out, err = p.communicate()
                    if p.returncode != 0:
                        raise RuntimeError(f"{' '.join(j)} failed:\n{err[-2000:]}")
                    record(j, rep, json.loads(out.strip().splitlines()[-1]))
        else:
            for k in keys:
                sides = sides_for(*k)
                for rep in range(args.reps):
                    for s in (sides if rep % 2 == 0 else list(reversed(sides))):
                        record(k + (s,), rep, run_side(*k, s))
    rows = []
    for arch in archs:
        for preset in presets:
            for prec in precisions:
                if PRESET_ARCH.get(preset, arch) != arch:
                    continue
                sides = sides_for(arch, preset, prec)
                tokens = shape(preset, args.context)[4] * shape(preset, args.context)[5]
                med, peak = {}, {}
                for s in sides:
                    runs = results[(arch, preset, prec, s)]
                    med[s] = statistics.median([x for r in runs for x in r["step_ms"]])
                    if s == "toy" and args.device == "cuda":
                        # The device memory the run took: ggml's buffers, its CUDA pool of temporaries and cuBLAS's workspace
                        peak[s] = max(r.get("device_used_bytes") or r["device_buffers_bytes"] for r in runs)
                    elif s == "toy":
                        peak[s] = max(r["peak_rss_bytes"] for r in runs)
                    else:
                        peak[s] = max(r["peak_bytes"] for r in runs)
                for s in sides:
                    rows.append((arch, preset, prec, s, med[s], tokens / med[s] * 1e3, peak[s] / 2**20, med["toy"] / med[s] if s != "toy" else None))
    print(f"\n{'arch':<6} {'preset':<10} {'precision':<9} {'side':<20} {'median ms':>10} {'tokens/s':>12} {'peak MiB':>10} {'toy/this':>9}")
    for a, p, prec, s, m, tps, mib, ratio in rows:
        print(f"{a:<6} {p:<10} {prec:<9} {s:<20} {m:>10.2f} {tps:>12.0f} {mib:>10.0f} {'' if ratio is None else f'{ratio:>9.3f}'}")
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump({"device": args.device, "threads": args.threads, "archs": archs, "vocab": args.vocab, "runs": raw}, fh, indent=1)


if __name__ == "__main__":
    main()
