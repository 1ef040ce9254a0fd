#!/usr/bin/env python3
"""toy's fused causal attention (ggml patch 0020) against PyTorch's
F.scaled_dot_product_attention(is_causal=True): the output and the gradients of
q, k and v in f32, for d_head 64 and 128, heads 9/3 (GQA) and 12/12, and
T = 1, 17, 1024 and 4096.

    cargo build --release --example attention -p toy-ggml
    python3 scripts/parity/attention.py --bin target/release/examples/attention [--device cuda] [--max-t 4096]

Error: max |a - a_ref| / max(max |a_ref|, 1e-6) per tensor; the bound is 1e-5
in f32.
PyTorch computes in float64 from the same f32 inputs (the math backend), so
the error is toy's alone.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="the attention example of ggml-rs")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--max-t", type=int, default=4096)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    failed = False
    with tempfile.TemporaryDirectory() as d:
        for dh, h, hkv in ((64, 9, 3), (128, 12, 12)):
            for t in (1, 17, 1024, 4096):
                if t > a.max_t:
                    continue
                b = 1 if t >= 1024 else 2
                # ggml ne order [dh, H, T, B] is numpy [B, T, H, dh]
                q = rng.standard_normal((b, t, h, dh)).astype(np.float32)
                k = rng.standard_normal((b, t, hkv, dh)).astype(np.float32)
                v = rng.standard_normal((b, t, hkv, dh)).astype(np.float32)
                do = rng.standard_normal((b, t, h, dh)).astype(np.float32)
                scale = 1.0 / np.sqrt(dh)
                inp, out = os.path.join(d, "in.bin"), os.path.join(d, "out.bin")
                with open(inp, "wb") as f:
                    f.write(np.array([dh, h, hkv, t, b], np.uint64).tobytes())
                    f.write(np.float32(scale).tobytes())
                    for x in (q, k, v, do):
                        f.write(x.tobytes())
                subprocess.run([a.bin, inp, out, "--device", a.device], check=True)
                got = np.fromfile(out, np.float32)
                nq, nk = q.size, k.size
                o, dq, dk, dv = (got[:nq].reshape(q.shape), got[nq:2 * nq].reshape(q.shape),
                                 got[2 * nq:2 * nq + nk].reshape(k.shape), got[2 * nq + nk:].reshape(k.shape))
                # PyTorch: [B, H, T, dh]; GQA as llama.cpp (query head i reads kv head i // (h // hkv))
                tq, tk, tv = (torch.tensor(x, dtype=torch.float64).transpose(1, 2).requires_grad_() for x in (q, k, v))
                rep = h // hkv
                ref = F.scaled_dot_product_attention(tq, tk.repeat_interleave(rep, dim=1), tv.repeat_interleave(rep, dim=1),
                                                     is_causal=True, scale=float(scale))
                ref.backward(torch.tensor(do, dtype=torch.float64).transpose(1, 2))
                pairs = [("out", o, ref.detach()), ("dq", dq, tq.grad), ("dk", dk, tk.grad), ("dv", dv, tv.grad)]
                errs = {}
                for name, x, r in pairs:
                    r = r.transpose(1, 2).numpy()
                    # (with T = 1, dq and dk are 0 in exact arithmetic: an absolute floor)
                    errs[name] = np.abs(x - r).max() / max(np.abs(r).max(), 1e-6)
                ok = all(e <= 1e-5 for e in errs.values())
                failed |= not ok
                print(f"d_head {dh:>3}, heads {h}/{hkv}, T {t:>4}, B {b}, {a.device}: "
                      + ", ".join(f"{n} {e:.2e}" for n, e in errs.items()) + f" {'PASS' if ok else 'FAIL'}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
