"""Read a toy checkpoint (or a `toy debug` dump) with the `gguf` package.

Tensors come back as float32 numpy arrays in numpy order: a ggml tensor with
`ne [d, V]` is an array of shape (V, d), so a weight `W` used as
`mul_mat(W, x)` is a PyTorch-style (out, in) matrix and the layer is `x @ W.T`.
"""

from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize


@dataclass
class ToyConfig:
    """A model's shape, from the `<arch>.*` keys of a checkpoint."""

    arch: str  # "llama", "qwen2" or "gpt2"
    vocab: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    context: int
    norm_eps: float
    rope_base: float  # llama and qwen2
    tied: bool

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


def values(t):
    """Tensor `t` as f32, dequantized from any type gguf-py knows (numpy shape:
    ggml's ne reversed)."""
    if t.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        return np.array(t.data, dtype=np.float32)
    return dequantize(t.data, t.tensor_type).astype(np.float32)


class ToyGguf:
    """Metadata and tensors of one GGUF file."""

    def __init__(self, path):
        self.path = str(path)
        self._r = GGUFReader(self.path)
        self.tensors = {t.name: values(t) for t in self._r.tensors}

    def get(self, key, default=None):
        f = self._r.fields.get(key)
        return default if f is None else f.contents()

    def config(self) -> ToyConfig:
        a = self.get("general.architecture")
        if a not in ("llama", "qwen2", "gpt2"):
            raise ValueError(f"{self.path}: architecture {a!r} is not llama, qwen2 or gpt2")
        n_heads = int(self.get(f"{a}.attention.head_count"))
        eps_key = "gpt2.attention.layer_norm_epsilon" if a == "gpt2" else f"{a}.attention.layer_norm_rms_epsilon"
        return ToyConfig(
            arch=a,
            vocab=self.tensors["token_embd.weight"].shape[0],
            d_model=int(self.get(f"{a}.embedding_length")),
            n_layers=int(self.get(f"{a}.block_count")),
            n_heads=n_heads,
            n_kv_heads=int(self.get(f"{a}.attention.head_count_kv", n_heads)),
            d_ff=int(self.get(f"{a}.feed_forward_length")),
            context=int(self.get(f"{a}.context_length")),
            norm_eps=float(self.get(eps_key)),
            rope_base=float(self.get(f"{a}.rope.freq_base", 10000.0)),
            tied="output.weight" not in self.tensors,
        )
