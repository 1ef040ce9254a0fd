#!/usr/bin/env python3
"""Checks of the reference models' building blocks against independent
formulations (no toy needed): `python3 scripts/parity/test_reference.py`."""

import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import causal_attention, rms_norm, rope, rope_neox  # noqa: E402


def test_attention_matches_sdpa():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 7, 4, 8, dtype=torch.float64) for _ in range(3))
    want = F.scaled_dot_product_attention(*(z.transpose(1, 2) for z in (q, k, v)), is_causal=True)
    assert torch.allclose(causal_attention(q, k, v), want.transpose(1, 2).reshape(2, 7, 32), atol=1e-12)


def test_grouped_query_attention_reads_kv_head_h_over_group():
    torch.manual_seed(1)
    q = torch.randn(1, 5, 4, 8, dtype=torch.float64)
    k, v = (torch.randn(1, 5, 2, 8, dtype=torch.float64) for _ in range(2))
    out = causal_attention(q, k, v).view(1, 5, 4, 8)
    for h in range(4):  # query head h alone against kv head h // 2
        one = causal_attention(q[:, :, h:h + 1], k[:, :, h // 2:h // 2 + 1], v[:, :, h // 2:h // 2 + 1])
        assert torch.allclose(out[:, :, h], one, atol=1e-12)


def test_rope_rotates_adjacent_pairs():
    torch.manual_seed(2)
    x = torch.randn(1, 6, 3, 8, dtype=torch.float64)
    base = 10000.0
    pairs = torch.view_as_complex(x.reshape(1, 6, 3, 4, 2).contiguous())  # (x[2i], x[2i+1]) as one complex number
    angle = torch.arange(6.0, dtype=torch.float64)[:, None] * base ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    want = torch.view_as_real(pairs * torch.polar(torch.ones_like(angle), angle)[None, :, None, :]).reshape(1, 6, 3, 8)
    assert torch.allclose(rope(x, base), want, atol=1e-12)
    assert torch.equal(rope(x, base)[:, 0], x[:, 0])  # position 0 is not rotated


def test_neox_rope_is_mode_0_on_the_halves_interleaved():
    """NEOX pairs (i, i + d/2): interleaving the two halves turns it into the
    adjacent-pair rotation, and interleaving back undoes it."""
    torch.manual_seed(3)
    x = torch.randn(1, 6, 3, 8, dtype=torch.float64)
    perm = torch.tensor([0, 4, 1, 5, 2, 6, 3, 7])  # (x0, x4, x1, x5, ...): NEOX pairs side by side
    inv = torch.argsort(perm)
    assert torch.allclose(rope_neox(x, 1e6), rope(x[..., perm], 1e6)[..., inv], atol=1e-12)
    assert not torch.allclose(rope_neox(x, 1e6), rope(x, 1e6))


def test_rms_norm():
    x = torch.tensor([[3.0, 4.0]], dtype=torch.float64)
    assert torch.allclose(rms_norm(x, torch.ones(2, dtype=torch.float64), 0.0), x / math.sqrt(12.5))


if __name__ == "__main__":
    for name, f in list(globals().items()):
        if name.startswith("test_"):
            f()
            print(f"ok {name}")
