"""Reference PyTorch implementations of toy's llama, qwen2 and gpt2, written
from the math (DESIGN.md "Models"; qwen2: llama with q/k/v biases and the
rotate-half RoPE of Hugging Face's Qwen2), not from toy's or ggml's code.

Both models keep their weights under the checkpoint's own names
(`model.w["blk.0.attn_q.weight"]`), with PyTorch shapes: numpy order, i.e. the
reverse of ggml's `ne`, so a projection is `x @ W.T` with `W` (out, in).
Activations are (B, T, ...) tensors.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from toygguf import ToyConfig, ToyGguf


def rms_norm(x, g, eps):
    """RMSNorm (Zhang & Sennrich 2019): x / sqrt(mean(x²) + eps) · g over the last dim."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g


def rope(x, base):
    """Rotary embedding (Su et al. 2021) as ggml mode 0 / llama.cpp `llama`:
    the ADJACENT pairs (2i, 2i+1) of each head, at position t, are rotated by
    the angle t·base^(−2i/d_head). x is (B, T, H, d_head)."""
    _, t, _, dh = x.shape
    freq = base ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)  # (dh/2,)
    angle = torch.arange(t, dtype=torch.float64)[:, None] * freq[None, :]  # (T, dh/2)
    cos = angle.cos().to(x.dtype).to(x.device)[None, :, None, :]
    sin = angle.sin().to(x.dtype).to(x.device)[None, :, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


def rope_neox(x, base):
    """Rotary embedding in GPT-NeoX's layout (ggml NEOX mode, llama.cpp's
    `qwen2`; Hugging Face's `x·cos + rotate_half(x)·sin`): dimension i of the
    first half of each head is paired with dimension i + d_head/2, rotated by
    t·base^(−2i/d_head). x is (B, T, H, d_head)."""
    _, t, _, dh = x.shape
    freq = base ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)  # (dh/2,)
    angle = torch.arange(t, dtype=torch.float64)[:, None] * freq[None, :]  # (T, dh/2)
    angle = torch.cat((angle, angle), dim=-1)  # (T, dh)
    cos = angle.cos().to(x.dtype).to(x.device)[None, :, None, :]
    sin = angle.sin().to(x.dtype).to(x.device)[None, :, None, :]
    x0, x1 = x[..., : dh // 2], x[..., dh // 2:]
    return x * cos + torch.cat((-x1, x0), dim=-1) * sin


def causal_attention(q, k, v):
    """softmax(q·kᵀ/√d_head + causal mask)·v for q (B, T, H, dh) and k, v
    (B, T, H_kv, dh); query head h reads kv head h // (H / H_kv). Returns
    (B, T, H·dh), head j in columns j·dh .. (j+1)·dh."""
    b, t, h, dh = q.shape
    group = h // k.shape[2]
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    q, k, v = (z.transpose(1, 2) for z in (q, k, v))  # (B, H, T, dh)
    scores = q @ k.transpose(-1, -2) / math.sqrt(dh)  # (B, H, T_q, T_k)
    future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    p = scores.masked_fill(future, float("-inf")).softmax(-1)
    return (p @ v).transpose(1, 2).reshape(b, t, h * dh)


def causal_attention_sdpa(q, k, v):
    """causal_attention through F.scaled_dot_product_attention(is_causal=True)
    (nanoGPT's path: PyTorch picks a fused kernel). Same shapes and grouping."""
    b, t, h, dh = q.shape
    group = h // k.shape[2]
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    q, k, v = (z.transpose(1, 2) for z in (q, k, v))  # (B, H, T, dh)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return o.transpose(1, 2).reshape(b, t, h * dh)


class ToyModel(nn.Module):
    """Weights by checkpoint name, loaded from a toy GGUF."""

    def __init__(self, cfg: ToyConfig, tensors: dict, dtype=torch.float32, attention=causal_attention):
        super().__init__()
        self.cfg = cfg
        self.attention = attention
        self.w = {}
        for name, a in tensors.items():
            p = nn.Parameter(torch.from_numpy(a.copy()).to(dtype))
            self.register_parameter(name.replace(".", "__"), p)
            self.w[name] = p

    def blk(self, i, name):
        return self.w[f"blk.{i}.{name}"]

    def proj(self, x, i, name):
        """x @ Wᵀ for the block's matrix `name`; with a LoRA adapter on it (Hu et
        al. 2021, eq. 3: h = W₀x + ΔWx, ΔW = (α/r)·B·A with A (r, in), B (out, r)),
        plus (α/r)·(x @ Aᵀ) @ Bᵀ; plus the bias where the model has one (qwen2's q/k/v)."""
        key = f"blk.{i}.{name}"
        y = x @ self.w[key].T
        bias = self.w.get(key[: -len(".weight")] + ".bias")
        if bias is not None:
            y = y + bias
        if key in getattr(self, "lora", {}):
            a, b = self.lora[key]
            y = y + self.lora_scale * ((x @ a.T) @ b.T)
        return y

    def loss(self, tokens, targets):
        """Mean next-token cross-entropy over all B·T positions, and the logits."""
        logits = self(tokens)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten()), logits


class Llama(ToyModel):
    """Pre-norm RMSNorm blocks, RoPE, (grouped-query) causal attention, SwiGLU, no biases."""

    rotary = staticmethod(rope)

    def forward(self, tokens):
        c = self.cfg
        b, t = tokens.shape
        x = self.w["token_embd.weight"][tokens]  # (B, T, d)
        for i in range(c.n_layers):
            h = rms_norm(x, self.blk(i, "attn_norm.weight"), c.norm_eps)
            q = self.proj(h, i, "attn_q.weight").view(b, t, c.n_heads, c.d_head)
            k = self.proj(h, i, "attn_k.weight").view(b, t, c.n_kv_heads, c.d_head)
            v = self.proj(h, i, "attn_v.weight").view(b, t, c.n_kv_heads, c.d_head)
            q, k = self.rotary(q, c.rope_base), self.rotary(k, c.rope_base)
            x = x + self.proj(self.attention(q, k, v), i, "attn_output.weight")
            h = rms_norm(x, self.blk(i, "ffn_norm.weight"), c.norm_eps)
            gate = F.silu(self.proj(h, i, "ffn_gate.weight"))
            x = x + self.proj(gate * self.proj(h, i, "ffn_up.weight"), i, "ffn_down.weight")
        x = rms_norm(x, self.w["output_norm.weight"], c.norm_eps)
        head = self.w["token_embd.weight"] if c.tied else self.w["output.weight"]
        return x @ head.T  # (B, T, V)


class Qwen2(Llama):
    """Llama with biases on the q, k and v products (added by `proj`) and
    NEOX RoPE."""

    rotary = staticmethod(rope_neox)


class Gpt2(ToyModel):
    """Token + learned position embeddings, pre-LayerNorm blocks, attention and
    tanh-GELU MLP with biases, final LayerNorm, head tied to the token table."""

    def forward(self, tokens):
        c = self.cfg
        b, t = tokens.shape
        d = c.d_model

        def linear(x, i, name):
            return x @ self.blk(i, f"{name}.weight").T + self.blk(i, f"{name}.bias")

        def layer_norm(x, prefix):
            return F.layer_norm(x, (d,), self.w[f"{prefix}.weight"], self.w[f"{prefix}.bias"], c.norm_eps)

        x = self.w["token_embd.weight"][tokens] + self.w["position_embd.weight"][:t]
        for i in range(c.n_layers):
            h = layer_norm(x, f"blk.{i}.attn_norm")
            q, k, v = linear(h, i, "attn_qkv").split(d, dim=-1)  # q|k|v stacked along the output dim
            heads = lambda z: z.view(b, t, c.n_heads, c.d_head)  # noqa: E731
            x = x + linear(self.attention(heads(q), heads(k), heads(v)), i, "attn_output")
            h = layer_norm(x, f"blk.{i}.ffn_norm")
            x = x + linear(F.gelu(linear(h, i, "ffn_up"), approximate="tanh"), i, "ffn_down")
        x = layer_norm(x, "output_norm")
        return x @ self.w["token_embd.weight"].T  # (B, T, V)


def load_model(path, dtype=torch.float32) -> ToyModel:
    """A reference model holding the weights of the toy checkpoint at `path`."""
    f = ToyGguf(path)
    cfg = f.config()
    cls = {"llama": Llama, "qwen2": Qwen2, "gpt2": Gpt2}[cfg.arch]
    return cls(cfg, f.tensors, dtype)


def load_lora_model(base, adapter, dtype=torch.float32) -> ToyModel:
    """The llama or qwen2 at `base`, frozen, with the LoRA adapter at `adapter` (llama.cpp's
    layout: `W.lora_a` ne [in, r] = numpy (r, in), `W.lora_b` ne [r, out] = numpy
    (out, r), scale adapter.lora.alpha / r) as the only trainable parameters in
    `model.lora_params` (name → Parameter)."""
    model = load_model(base, dtype)
    for p in model.w.values():
        p.requires_grad_(False)
    f = ToyGguf(adapter)
    model.lora, model.lora_params = {}, {}
    for name, arr in f.tensors.items():
        if name.endswith(".lora_a"):
            key = name[: -len(".lora_a")]
            a = nn.Parameter(torch.from_numpy(arr.copy()).to(dtype))
            b = nn.Parameter(torch.from_numpy(f.tensors[key + ".lora_b"].copy()).to(dtype))
            model.lora[key] = (a, b)
            model.lora_params[name], model.lora_params[key + ".lora_b"] = a, b
    rank = next(iter(model.lora.values()))[0].shape[0]
    model.lora_scale = float(f.get("adapter.lora.alpha")) / rank
    return model
