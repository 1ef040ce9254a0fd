#!/usr/bin/env python3
"""Write fixtures/qwen2/tiny-qwen2.gguf: a tiny random qwen2 model laid out as
llama.cpp's converter writes a Qwen2-Instruct GGUF, for toy's tests (open,
generate, eval, finetune) and for the llama.cpp and PyTorch checks of the
qwen2 forward pass (scripts/parity/qwen2_logits.py, scripts/llamacpp/).

- general.architecture qwen2 with the keys llama.cpp's qwen2 loader reads
  (no rope.dimension_count: the loader takes the head width);
- d 32, 2 blocks, 4 query heads over 2 kv heads (head width 8), d_ff 64,
  context 128, RoPE base 1e6, RMSNorm eps 1e-6 (Qwen2's values);
- q/k/v biases, a tied head (no output.weight, as Qwen2-0.5B);
- matrices and the token table in f16, gains and biases in f32 (the
  converter's --outtype f16), in the converter's tensor order;
- a byte-level BPE with pre-tokenizer qwen2: the 256 byte symbols, merges
  learned here on a few sentences, <|endoftext|>, <|im_start|>, <|im_end|>
  (control) and two user-defined [PAD…] tokens (as in Qwen2's vocabulary),
  eos <|im_end|>, bos/padding <|endoftext|>, and a ChatML chat template.

Deterministic (numpy seed 0). Needs numpy and the gguf package:
    python3 scripts/make-qwen2-fixture.py
"""
import collections
import os
import re

import numpy as np
import gguf

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "qwen2", "tiny-qwen2.gguf")
D, LAYERS, HEADS, KV_HEADS, FF, CONTEXT = 32, 2, 4, 2, 64, 128
N_MERGES = 60
TEXT = """Once upon a time there was a little robot named Qwen. The robot liked to count: one, two, three.
Every morning the robot said hello to the sun and the sea. Then the robot went to the market to buy 12 apples.
She said: "It's a good day, isn't it?" and they laughed together in the warm evening light.
"""
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def byte_symbols():
    """GPT-2's byte -> printable character map, in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return [out[b] for b in range(256)]


def learn_merges(sym):
    """Naive BPE over words (a space joins the word after it, as the qwen2 split does)."""
    words = collections.Counter("".join(sym[b] for b in w.encode()) for w in re.findall(r" ?[A-Za-z]+|[0-9]| ?[^\sA-Za-z0-9]+|\s+", TEXT))
    seqs = {w: list(w) for w in words}
    merges = []
    for _ in range(N_MERGES):
        pairs = collections.Counter()
        for w, n in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append((a, b))
        for w in seqs:
            s, i, out = seqs[w], 0, []
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == (a, b):
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return merges


def main():
    sym = byte_symbols()
    merges = learn_merges(sym)
    tokens = sym + [a + b for a, b in merges]
    types = [gguf.TokenType.NORMAL] * len(tokens)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    eot, im_end = len(tokens), len(tokens) + 2
    tokens += specials + [f"[PAD{len(tokens) + 3}]", f"[PAD{len(tokens) + 4}]"]
    types += [gguf.TokenType.CONTROL] * 3 + [gguf.TokenType.USER_DEFINED] * 2
    vocab = len(tokens)

    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    w = gguf.GGUFWriter(OUT, "qwen2")
    w.add_name("tiny-qwen2 (toy fixture)")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(D)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([int(t) for t in types])
    w.add_token_merges([f"{a} {b}" for a, b in merges])
    w.add_eos_token_id(im_end)
    w.add_bos_token_id(eot)
    w.add_pad_token_id(eot)
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)

    rng = np.random.RandomState(0)
    dh = D // HEADS

    def mat(n_out, n_in, std=0.15):  # ne [in, out] = numpy (out, in)
        return (rng.standard_normal((n_out, n_in)) * std).astype(np.float16)

    def vec(n, mean=0.0, std=0.1):
        return (mean + rng.standard_normal(n) * std).astype(np.float32)

    w.add_tensor("token_embd.weight", mat(vocab, D, 0.5))
    w.add_tensor("output_norm.weight", vec(D, 1.0))
    for i in range(LAYERS):
        b = f"blk.{i}."
        # The converter's order: the names of Hugging Face's checkpoint, sorted.
        w.add_tensor(b + "attn_norm.weight", vec(D, 1.0))
        w.add_tensor(b + "ffn_down.weight", mat(D, FF))
        w.add_tensor(b + "ffn_gate.weight", mat(FF, D))
        w.add_tensor(b + "ffn_up.weight", mat(FF, D))
        w.add_tensor(b + "ffn_norm.weight", vec(D, 1.0))
        w.add_tensor(b + "attn_k.bias", vec(KV_HEADS * dh, std=0.5))
        w.add_tensor(b + "attn_k.weight", mat(KV_HEADS * dh, D))
        w.add_tensor(b + "attn_output.weight", mat(D, HEADS * dh))
        w.add_tensor(b + "attn_q.bias", vec(HEADS * dh, std=0.5))
        w.add_tensor(b + "attn_q.weight", mat(HEADS * dh, D))
        w.add_tensor(b + "attn_v.bias", vec(KV_HEADS * dh, std=0.5))
        w.add_tensor(b + "attn_v.weight", mat(KV_HEADS * dh, D))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {OUT}: vocab {vocab} ({len(merges)} merges), {os.path.getsize(OUT)} bytes")


if __name__ == "__main__":
    main()
