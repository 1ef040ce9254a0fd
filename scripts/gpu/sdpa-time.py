"""Time PyTorch's F.scaled_dot_product_attention(is_causal=True), forward and
backward, bf16, at the shapes of scripts/gpu/attn-flash-test.cu (the same
D heads/kv T B lines), for a side-by-side with patch 0024's kernels.

Each grouped shape is timed twice: "sdpa" with k and v repeated to the query
heads before the call (untimed), as the benchmark's PyTorch model does
(scripts/parity/models.py), and "sdpa-gqa" with enable_gqa=True. These are
times of the calls (CUDA events around them): the kernels and whatever
PyTorch runs around them. Stop 59 quoted the gqa call's as SDPA's (0.542 ms
backward at T 2048); the benchmark step's profile (bench.py --profile, stop
60) gives cuDNN's kernels alone there: 0.335 ms. Compare kernels with that.

    python3 scripts/gpu/sdpa-time.py
"""
import sys

import torch
import torch.nn.functional as F

SHAPES = [(64, 12, 12, 1024, 16), (64, 9, 3, 1024, 8), (64, 9, 3, 2048, 8), (64, 9, 3, 4096, 8),
          (64, 9, 3, 8192, 8), (128, 12, 12, 2048, 4)]


def time_ms(fn, reps=10, warm=2):
    ts = []
    for i in range(reps + warm):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        if i >= warm:
            ts.append(a.elapsed_time(b))
    return sorted(ts)[len(ts) // 2]


def run(name, q, k, v, do, gqa):
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    fwd = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa))
    bwd = time_ms(lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True))
    bsz, hq, t, d = q.shape
    fl = 4.0 * d * t * t / 2 * hq * bsz
    print(f"{name:8s} D {d:3d} heads {hq:2d}/{k.shape[1]:2d} T {t:5d} B {bsz:2d}: fwd {fwd:.3f} ms ({fl/fwd/1e9:.0f} TFLOP/s)"
          f"  bwd {bwd:.3f} ms ({2.5*fl/bwd/1e9:.0f} TFLOP/s)")
    if "--kernels" in sys.argv and (d, hq, t) == (64, 9, 2048):
        # Which implementation SDPA picked here: the kernels of one forward and backward, and their GPU time.
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            o2 = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
            torch.autograd.grad(o2, (q, k, v), do)
            torch.cuda.synchronize()
        for e in prof.key_averages():
            dt = getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0)
            if dt > 0 and not e.key.startswith("aten::"):
                print(f"  kernel {e.key[:110]}  x{e.count}  {dt/1e3:.3f} ms")


for d, hq, hkv, t, bsz in SHAPES:
    q = torch.randn(bsz, hq, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(bsz, hkv, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(bsz, hkv, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    do = torch.randn(bsz, hq, t, d, device="cuda", dtype=torch.bfloat16)
    wide = [z.detach().repeat_interleave(hq // hkv, dim=1).requires_grad_() for z in (k, v)]
    run("sdpa", q, wide[0], wide[1], do, False)
    if hq != hkv:
        run("sdpa-gqa", q, k, v, do, True)
