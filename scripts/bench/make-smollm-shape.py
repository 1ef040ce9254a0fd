"""Write a random-weights llama GGUF of SmolLM2-135M's exact shape (vocab 49152,
d 576, 30 layers, 9 heads, 3 kv heads, d_ff 1536, tied head, f16 matrices) with a
synthetic gpt2-style BPE of 49152 ids (<|endoftext|>, the 256 bytes, then merges
of existing tokens), for `scripts/bench/finetune.sh`.

    python3 scripts/bench/make-smollm-shape.py OUT.gguf
"""

import sys

import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType

VOCAB, D, LAYERS, HEADS, KV, FF, CTX = 49152, 576, 30, 9, 3, 1536, 8192


def byte_to_unicode():
    """GPT-2's printable stand-ins for the 256 bytes."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def vocabulary(rng):
    tokens = ["<|endoftext|>"] + byte_to_unicode()
    seen, merges = set(tokens), []
    letters = [t for t in tokens[1:] if t.isalpha()] + ["Ġ"]
    while len(tokens) < VOCAB:
        # Merge two recent tokens (words grow), mostly within letters and spaces.
        pool = tokens[1:] if rng.random() < 0.1 else letters
        a, b = pool[rng.integers(len(pool))], pool[rng.integers(len(pool))]
        if a + b in seen or a == "Ġ" == b or len(a + b) > 16:
            continue
        seen.add(a + b)
        tokens.append(a + b)
        merges.append(f"{a} {b}")
        letters.append(a + b)
    return tokens, merges


def main(out):
    rng = np.random.default_rng(0)
    tokens, merges = vocabulary(rng)
    w = GGUFWriter(out, "llama")
    w.add_name("smollm2-135m-shape-random")
    w.add_context_length(CTX)
    w.add_embedding_length(D)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV)
    w.add_rope_freq_base(100000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(1)  # mostly f16
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_token_types([3] + [1] * (len(tokens) - 1))
    w.add_eos_token_id(0)
    w.add_bos_token_id(0)
    hd = D // HEADS

    def mat(name, n_out, n_in):
        w.add_tensor(name, (rng.standard_normal((n_out, n_in), dtype=np.float32) * 0.02).astype(np.float16),
                     raw_dtype=GGMLQuantizationType.F16)

    mat("token_embd.weight", VOCAB, D)
    w.add_tensor("output_norm.weight", np.ones(D, np.float32))
    for i in range(LAYERS):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(D, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(D, np.float32))
        mat(f"blk.{i}.attn_q.weight", HEADS * hd, D)
        mat(f"blk.{i}.attn_k.weight", KV * hd, D)
        mat(f"blk.{i}.attn_v.weight", KV * hd, D)
        mat(f"blk.{i}.attn_output.weight", D, HEADS * hd)
        mat(f"blk.{i}.ffn_gate.weight", FF, D)
        mat(f"blk.{i}.ffn_up.weight", FF, D)
        mat(f"blk.{i}.ffn_down.weight", D, FF)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main(sys.argv[1])
