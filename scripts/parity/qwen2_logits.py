#!/usr/bin/env python3
"""Does toy compute a qwen2 GGUF's logits as Qwen2 defines them? An
independent float64 numpy forward pass, written from the model's definition
(Hugging Face's Qwen2: RMSNorm, q/k/v projections with biases, rotary
embedding with `rotate_half`, i.e. pairs (i, i + d_head/2), grouped-query
causal attention, SwiGLU, final RMSNorm, head tied to the token table when the
file has no output.weight), against `toy debug dump-logits` on random ids.

    python3 scripts/parity/qwen2_logits.py --toy target/release/toy \\
        [--model fixtures/qwen2/tiny-qwen2.gguf] [--tokens 24] [--seed 0]

Needs numpy and the gguf package (no PyTorch). Prints the max |Δ| and the
max |Δ| relative to the largest logit; exits 1 above 1e-4 relative.
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGUFReader


def load(path):
    r = GGUFReader(path)
    meta = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.")}
    w = {t.name: np.array(t.data, dtype=np.float64).reshape([int(n) for n in reversed(t.shape)]) for t in r.tensors}
    return meta, w


def rms_norm(x, g, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g


def rotary(x, base):
    """x (T, H, dh): x·cos + rotate_half(x)·sin, rotate_half(x) = (−x₂, x₁)."""
    t, _, dh = x.shape
    inv = base ** (-np.arange(0, dh, 2) / dh)
    ang = np.arange(t)[:, None] * inv[None, :]
    ang = np.concatenate([ang, ang], -1)[:, None, :]
    half = np.concatenate([-x[..., dh // 2:], x[..., : dh // 2]], -1)
    return x * np.cos(ang) + half * np.sin(ang)


def forward(meta, w, ids):
    a = "qwen2"
    n_layers, h = int(meta[f"{a}.block_count"]), int(meta[f"{a}.attention.head_count"])
    hkv = int(meta.get(f"{a}.attention.head_count_kv", h))
    eps, base = float(meta[f"{a}.attention.layer_norm_rms_epsilon"]), float(meta.get(f"{a}.rope.freq_base", 10000.0))
    emb = w["token_embd.weight"]  # (V, d)
    d = emb.shape[1]
    dh, t = d // h, len(ids)
    x = emb[ids]
    mask = np.triu(np.full((t, t), -np.inf), 1)
    for i in range(n_layers):
        p = lambda n: w[f"blk.{i}.{n}"]  # noqa: E731
        a_in = rms_norm(x, p("attn_norm.weight"), eps)
        q = (a_in @ p("attn_q.weight").T + p("attn_q.bias")).reshape(t, h, dh)
        k = (a_in @ p("attn_k.weight").T + p("attn_k.bias")).reshape(t, hkv, dh)
        v = (a_in @ p("attn_v.weight").T + p("attn_v.bias")).reshape(t, hkv, dh)
        q, k = rotary(q, base), rotary(k, base)
        out = np.zeros((t, h, dh))
        for j in range(h):
            kv = j // (h // hkv)
            s = q[:, j] @ k[:, kv].T / np.sqrt(dh) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            out[:, j] = (s / s.sum(-1, keepdims=True)) @ v[:, kv]
        x = x + out.reshape(t, h * dh) @ p("attn_output.weight").T
        m = rms_norm(x, p("ffn_norm.weight"), eps)
        g = m @ p("ffn_gate.weight").T
        x = x + (g / (1 + np.exp(-g)) * (m @ p("ffn_up.weight").T)) @ p("ffn_down.weight").T
    x = rms_norm(x, w["output_norm.weight"], eps)
    return x @ w.get("output.weight", emb).T  # (T, V)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--toy", default="target/release/toy")
    ap.add_argument("--model", default=str(pathlib.Path(__file__).resolve().parents[2] / "fixtures/qwen2/tiny-qwen2.gguf"))
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    meta, w = load(a.model)
    if meta.get("general.architecture") != "qwen2":
        sys.exit(f"{a.model}: not a qwen2 model")
    vocab = w["token_embd.weight"].shape[0]
    ids = np.random.RandomState(a.seed).randint(0, vocab, a.tokens + 1).astype(np.uint32)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        ids.tofile(tmp / "batches.bin")
        layout = {"format": "toy/batches-v1", "dtype": "u32", "window": a.tokens + 1, "batch": 1}
        (tmp / "batches.json").write_text(json.dumps(layout))
        subprocess.run([a.toy, "debug", "dump-logits", a.model, "--batches", str(tmp / "batches.bin"), "--out", str(tmp / "l.gguf")],
                       check=True, stdout=subprocess.DEVNULL)
        t = [t for t in GGUFReader(tmp / "l.gguf").tensors if t.name == "logits"][0]
        toy = np.array(t.data, dtype=np.float64).reshape(-1, vocab)[: a.tokens]
    ref = forward(meta, w, ids[: a.tokens].astype(np.int64))
    d = float(np.abs(toy - ref).max())
    rel = d / float(np.abs(ref).max())
    agree = int((toy.argmax(1) == ref.argmax(1)).sum())
    print(f"qwen2 logits, {a.model}: {a.tokens} positions x {vocab}: max |d| = {d:.3g}, relative {rel:.3g}, argmax agree {agree}/{a.tokens}")
    return 0 if rel <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
