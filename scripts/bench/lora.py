#!/usr/bin/env python3
"""LoRA benchmark at SmolLM2-135M's shape: toy's finetune recipe against
PyTorch, in one run.

Sides (median ms/step after a warm-up, peak memory):
- toy LoRA over a Q4_1 base (matrices q4_1, token table q8_0: the layout of
  SmolLM2-135M-Instruct.Q4_1.gguf), toy LoRA over the f16 base, toy full
  fine-tuning (the f16 base trained in f32 weights);
- PyTorch (scripts/parity/models.py's llama with SDPA, LoRA from the paper on
  the same seven matrices, frozen base in bf16 under autocast(bfloat16) on
  CUDA, f32 on the CPU; AdamW over the adapters; eager or torch.compile), and
  PyTorch full fine-tuning (scripts/bench/bench.py's worker).

The base is random (scripts/bench/make-smollm-shape.py, then
scripts/bench/typed-copy.py): step time does not depend on the values. Peak
memory: toy's device memory taken by the run (run_end's device_used_bytes) on
CUDA, max RSS on the CPU; PyTorch's max allocated on CUDA, max RSS on the CPU.

    python3 scripts/bench/lora.py --toy target/release/toy --device cpu --threads 2 --context 128 --batch 4
    python3 scripts/bench/lora.py --toy dist/toy --device cuda --context 512 --batch 8 --torch eager-sdpa,compile-sdpa
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TARGETS = "attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down"


def sh(cmd, env=None):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"lora bench: {' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return r.stdout


def toy_side(a, name, base, extra):
    """One toy finetune run; (median ms/step, peak bytes, fallbacks)."""
    out = os.path.join(a.work, name)
    subprocess.run(["rm", "-rf", out])
    cmd = [a.toy, "train", "finetune", "--from", base, "--context", a.context, "--batch", a.batch, "--steps", a.warmup + a.steps,
           "--eval-every", 0, "--device", a.device, "--threads", a.threads, "--json", "--log-every", 1000, "--out", out] + extra
    cmd = ["/usr/bin/time", "-f", "maxrss_kb=%M"] + cmd
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"lora bench: toy {name} failed:\n{r.stderr[-3000:]}")
    events = [json.loads(line) for line in open(os.path.join(out, "events.jsonl"))]
    ms = [e["wall_us"] / 1e3 for e in events if e["kind"] == "step"][a.warmup:]
    end = [e for e in events if e["kind"] == "run_end"][-1]
    rss = int(r.stderr.rsplit("maxrss_kb=", 1)[1].split()[0]) * 1024
    peak = end.get("device_used_bytes") if a.device == "cuda" else rss
    fallbacks = [e for e in events if e["kind"] == "fallback"]
    return statistics.median(ms), peak, rss, fallbacks


def torch_lora_worker(a):
    """PyTorch LoRA steps in this process; prints one JSON line."""
    import torch

    sys.path.insert(0, os.path.join(HERE, "..", "parity"))
    from models import Llama, causal_attention_sdpa  # noqa: E402
    from toygguf import ToyConfig  # noqa: E402

    sys.path.insert(0, HERE)
    from bench import llama_shapes  # noqa: E402

    dev = torch.device(a.device)
    if a.device == "cpu":
        torch.set_num_threads(a.threads)
    torch.set_float32_matmul_precision("high")
    d, h, kv, f, layers, vocab = 576, 9, 3, 1536, 30, 49152
    cfg = ToyConfig(arch="llama", vocab=vocab, d_model=d, n_layers=layers, n_heads=h, n_kv_heads=kv, d_ff=f, context=a.context,
                    norm_eps=1e-5, rope_base=100000.0, tied=True)
    g = torch.Generator().manual_seed(0)
    shapes = llama_shapes(d, d // h * kv, f, layers, vocab, tied=True)
    tensors = {k: (torch.randn(s, generator=g) * 0.02).numpy() for k, s in shapes.items()}
    bf16 = a.device == "cuda"
    model = Llama(cfg, tensors, dtype=torch.bfloat16 if bf16 else torch.float32, attention=causal_attention_sdpa).to(dev)
    for p in model.parameters():
        p.requires_grad_(False)
    model.lora, params = {}, []
    for i in range(layers):
        for n in TARGETS.split(","):
            out_f, in_f = shapes[f"blk.{i}.{n}.weight"]
            A = torch.nn.Parameter(((torch.rand(a.rank, in_f, generator=g) * 2 - 1) / in_f ** 0.5).to(dev))
            B = torch.nn.Parameter(torch.zeros(out_f, a.rank, device=dev))
            model.lora[f"blk.{i}.{n}.weight"] = (A, B)
            params += [A, B]
    model.lora_scale = 1.0
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, fused=dev.type == "cuda")

    def step(tokens, targets):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            loss, _ = model.loss(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss

    if a.variant.startswith("compile"):
        step = torch.compile(step)
    times = []
    for i in range(a.warmup + a.steps):
        tokens = torch.randint(0, vocab, (a.batch, a.context), generator=g).to(dev)
        targets = torch.randint(0, vocab, (a.batch, a.context), generator=g).to(dev)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step(tokens, targets).item()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if i >= a.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"median_ms": statistics.median(times), "peak_bytes": peak, "torch": torch.__version__}))


def torch_side(a, variant, full):
    if full:
        prec = "bf16" if a.device == "cuda" else "highest"
        cmd = [sys.executable, os.path.join(HERE, "bench.py"), "--worker", "--preset", "smollm2-135m", "--arch", "llama", "--vocab", 49152,
               "--context", a.context, "--device", a.device, "--threads", a.threads, "--variant", variant, "--precision", prec,
               "--steps", a.steps, "--warmup", a.warmup]
        r = json.loads(sh(cmd).strip().splitlines()[-1])
        return r["median_ms"], r["peak_bytes"]
    cmd = [sys.executable, __file__, "--worker", "--variant", variant, "--device", a.device, "--threads", a.threads, "--context", a.context,
           "--batch", a.batch, "--rank", a.rank, "--steps", a.steps, "--warmup", a.warmup]
    r = json.loads(sh(cmd).strip().splitlines()[-1])
    return r["median_ms"], r["peak_bytes"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--toy", default="target/release/toy")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--torch", default="eager-sdpa", help="comma list: eager-sdpa, compile-sdpa")
    ap.add_argument("--full-torch", action="store_true", help="also PyTorch full fine-tuning (batch: the preset's 8)")
    ap.add_argument("--work", default="/tmp/toy-lora-bench")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--variant", default="eager-sdpa", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return torch_lora_worker(a)
    os.makedirs(a.work, exist_ok=True)
    f16, q41 = os.path.join(a.work, "smol-f16.gguf"), os.path.join(a.work, "smol-q4_1.gguf")
    if not os.path.exists(f16):
        sh([sys.executable, os.path.join(HERE, "make-smollm-shape.py"), f16])
    if not os.path.exists(q41):
        sh([sys.executable, os.path.join(HERE, "typed-copy.py"), f16, q41, "q4_1", "--embd", "q8_0"])
    lora = ["--lora-rank", a.rank, "--lora-alpha", a.rank, "--lora-targets", TARGETS]
    rows = []
    for name, base, extra in [("toy LoRA r%d, Q4_1 base" % a.rank, q41, lora), ("toy LoRA r%d, f16 base" % a.rank, f16, lora),
                              ("toy full fine-tuning", f16, [])]:
        ms, peak, rss, fb = toy_side(a, name.split(",")[0].replace(" ", "-") + ("-q41" if base == q41 else ""), base, extra)
        rows.append((name, ms, peak, rss, len(fb)))
        print(json.dumps({"side": name, "median_ms": ms, "peak_bytes": peak, "max_rss_bytes": rss, "fallback_events": fb}), flush=True)
    for v in [v for v in a.torch.split(",") if v]:
        ms, peak = torch_side(a, v, False)
        rows.append((f"PyTorch LoRA r{a.rank}, {'bf16 base, autocast' if a.device == 'cuda' else 'f32'}, {v}", ms, peak, None, 0))
        print(json.dumps({"side": rows[-1][0], "median_ms": ms, "peak_bytes": peak}), flush=True)
        if a.full_torch:
            ms, peak = torch_side(a, v, True)
            rows.append((f"PyTorch full fine-tuning, {v}", ms, peak, None, 0))
            print(json.dumps({"side": rows[-1][0], "median_ms": ms, "peak_bytes": peak}), flush=True)
    ref = rows[0][1]
    print(f"\nSmolLM2-135M shape, {a.device}, context {a.context}, batch {a.batch}, {a.steps} timed steps after {a.warmup}")
    print("| side | ms/step | peak MiB | toy Q4_1 LoRA / this |\n|---|---:|---:|---:|")
    for name, ms, peak, _, _ in rows:
        print(f"| {name} | {ms:.1f} | {peak / 2**20:.0f} | {ref / ms:.2f} |")


if __name__ == "__main__":
    main()
