#!/usr/bin/env python3
"""toy's cross-entropy from ids (ggml patch 0017) against PyTorch's
F.cross_entropy(logits, targets, ignore_index=-1): loss and d loss/d logits in
f32, on vocabularies 1000, 50257 and 151936 with some targets -1.

    cargo build --release --example cross_entropy -p toy-ggml
    python3 scripts/parity/cross_entropy.py --bin target/release/examples/cross_entropy [--device cuda]

Errors: |loss - loss_ref| / |loss_ref|, and max |g - g_ref| / max |g_ref| (the
gradient's scale); both must stay under 1e-6. PyTorch computes in float64 from
the same f32 logits, so the error is toy's alone.
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
    ap.add_argument("--bin", required=True, help="the cross_entropy example of ggml-rs")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rows", type=int, default=64)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    failed = False
    with tempfile.TemporaryDirectory() as d:
        for nv in (1000, 50257, 151936):
            logits = (rng.standard_normal((a.rows, nv)) * 3).astype(np.float32)
            targets = rng.integers(0, nv, a.rows).astype(np.int32)
            targets[::5] = -1  # every fifth token masked
            inp, out = os.path.join(d, "in.bin"), os.path.join(d, "out.bin")
            with open(inp, "wb") as f:
                f.write(np.array([nv, a.rows], np.uint64).tobytes())
                f.write(logits.tobytes())
                f.write(targets.tobytes())
            subprocess.run([a.bin, inp, out, "--device", a.device], check=True)
            got = np.fromfile(out, np.float32)
            loss, grad = float(got[0]), got[1:].reshape(a.rows, nv)
            x = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
            ref = F.cross_entropy(x, torch.tensor(targets, dtype=torch.int64), ignore_index=-1)
            ref.backward()
            g = x.grad.numpy()
            le = abs(loss - ref.item()) / abs(ref.item())
            ge = np.abs(grad - g).max() / np.abs(g).max()
            ok = le < 1e-6 and ge < 1e-6 and np.all(grad[::5] == 0)
            failed |= not ok
            print(f"vocab {nv:>6}, {a.rows} rows ({(targets < 0).sum()} ignored), {a.device}: "
                  f"loss {loss:.6f} (PyTorch {ref.item():.6f}), rel err {le:.2e}; gradient rel err {ge:.2e} "
                  f"{'PASS' if ok else 'FAIL'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
