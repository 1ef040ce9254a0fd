#!/usr/bin/env python3
"""Training-step benchmark: toy against a PyTorch reference of the same model.

For each preset, alternating toy and PyTorch over several repetitions, it
measures the median time of a full training step (forward, cross-entropy,
backward, global-norm clipping, AdamW; fp32, same shapes and vocabulary, random
tokens) and prints median ms/step, tokens/s, peak memory and the ratio
toy/PyTorch. On a GPU it also times PyTorch with torch.compile.

toy runs as a subprocess (`toy debug bench`, which builds the step graph once
and times steps after a warm-up); each PyTorch variant runs in a fresh Python
subprocess too, so peak memory (max RSS on CPU, max allocated on CUDA) is
measured the same way for every side.

    python3 scripts/bench/bench.py --toy target/release/toy --device cpu --threads 2 --presets smoke,small
    python3 scripts/bench/bench.py --toy dist/toy --device cuda --presets smoke,small,medium --compile
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
}


def torch_worker(args):
    """Time PyTorch steps in this process; print one JSON line."""
    import torch

    sys.path.insert(0, os.path.join(HERE, "..", "parity"))
    from models import Gpt2, Llama  # noqa: E402
    from toygguf import ToyConfig  # noqa: E402

    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    d, h, f, n_layers, t, b = PRESETS[args.preset]
    if args.arch == "gpt2":
        f = 4 * d
    cfg = ToyConfig(arch=args.arch, vocab=args.vocab, d_model=d, n_layers=n_layers, n_heads=h, n_kv_heads=h, d_ff=f,
                    context=t, norm_eps=1e-5, rope_base=10000.0, tied=args.arch == "gpt2")
    g = torch.Generator().manual_seed(0)
    shapes = {"token_embd.weight": (args.vocab, d), "output_norm.weight": (d,)}
    if args.arch == "llama":
        shapes["output.weight"] = (args.vocab, d)
        for i in range(n_layers):
            for name, s in [("attn_norm", (d,)), ("ffn_norm", (d,)), ("attn_q", (d, d)), ("attn_k", (d, d)), ("attn_v", (d, d)),
                            ("attn_output", (d, d)), ("ffn_gate", (f, d)), ("ffn_up", (f, d)), ("ffn_down", (d, f))]:
                shapes[f"blk.{i}.{name}.weight"] = s
    else:
        shapes["position_embd.weight"] = (t, d)
        shapes["output_norm.bias"] = (d,)
        for i in range(n_layers):
            for name, s in [("attn_norm", (d,)), ("ffn_norm", (d,)), ("attn_qkv", (3 * d, d)), ("attn_output", (d, d)),
                            ("ffn_up", (f, d)), ("ffn_down", (d, f))]:
                shapes[f"blk.{i}.{name}.weight"] = s
                shapes[f"blk.{i}.{name}.bias"] = (s[0],)
    tensors = {k: (torch.randn(s, generator=g) * 0.02).numpy() for k, s in shapes.items()}
    model = (Llama if args.arch == "llama" else Gpt2)(cfg, tensors).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)

    def step(tokens, targets):
        opt.zero_grad(set_to_none=True)
        loss, _ = model.loss(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    if args.compile:
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
    import resource
    peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"median_ms": statistics.median(times), "step_ms": times, "peak_bytes": peak,
                      "tokens_per_step": t * b, "torch": torch.__version__}))


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
    ap.add_argument("--arch", default="llama", choices=["llama", "gpt2"])
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=3, help="alternating repetitions of each side")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per repetition")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--compile", action="store_true", help="also time torch.compile (GPU)")
    ap.add_argument("--json-out", help="write all measurements here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--preset", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return torch_worker(args)

    rows, raw = [], []
    for preset in args.presets.split(","):
        sides = {"toy": [], "torch": []}
        if args.compile:
            sides["torch.compile"] = []
        peaks = {}
        for rep in range(args.reps):
            order = list(sides) if rep % 2 == 0 else list(reversed(list(sides)))
            for side in order:
                if side == "toy":
                    r = run_json([args.toy, "debug", "bench", "--preset", preset, "--arch", args.arch, "--vocab", str(args.vocab),
                                  "--steps", str(args.steps), "--warmup", str(args.warmup), "--device", args.device,
                                  "--threads", str(args.threads)])
                    peak = (sum(r["compute_bytes"].values()) + r["weights_bytes"]) if args.device == "cuda" else r["peak_rss_bytes"]
                else:
                    cmd = [sys.executable, __file__, "--worker", "--preset", preset, "--arch", args.arch, "--vocab", str(args.vocab),
                           "--steps", str(args.steps), "--warmup", str(args.warmup), "--device", args.device, "--threads", str(args.threads)]
                    if side == "torch.compile":
                        cmd.append("--compile")
                    r = run_json(cmd)
                    peak = r["peak_bytes"]
                sides[side].extend(r["step_ms"])
                peaks[side] = max(peaks.get(side, 0), peak)
                raw.append({"preset": preset, "side": side, "rep": rep, **r})
        tokens = PRESETS[preset][4] * PRESETS[preset][5]
        med = {s: statistics.median(v) for s, v in sides.items()}
        for s in sides:
            rows.append((preset, s, med[s], tokens / med[s] * 1e3, peaks[s] / 2**20, med["toy"] / med[s] if s != "toy" else None))
    print(f"\n{'preset':<8} {'side':<14} {'median ms':>10} {'tokens/s':>12} {'peak MiB':>10} {'toy/this':>9}")
    for p, s, m, tps, mib, ratio in rows:
        print(f"{p:<8} {s:<14} {m:>10.2f} {tps:>12.0f} {mib:>10.0f} {'' if ratio is None else f'{ratio:>9.3f}'}")
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump({"device": args.device, "threads": args.threads, "arch": args.arch, "vocab": args.vocab, "runs": raw}, fh, indent=1)


if __name__ == "__main__":
    main()
