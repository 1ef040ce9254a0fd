#!/usr/bin/env python3
"""Load a toy checkpoint with Hugging Face `transformers` (its GGUF loader, the
same conversion llama.cpp's files go through) and check that it produces the
same next-token logits as toy on a prompt.

    python3 scripts/check-hf.py --toy target/release/toy runs/<id>/weights/latest --prompt "Once upon a time"

Needs: torch, transformers, gguf (pip install torch transformers gguf).
Prints the max absolute logit difference over every position of the prompt
and exits non-zero when it is ≥ 1e-3 or the two tokenizers disagree.
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np


def toy_logits(toy, model, ids, work):
    """Logits [T, V] from `toy debug dump-logits` on one window of `ids`."""
    # A recording of one step with one window: the prompt plus a dummy target.
    window = list(ids) + [0]
    with open(os.path.join(work, "batches.bin"), "wb") as f:
        f.write(struct.pack(f"<{len(window)}I", *window))
    with open(os.path.join(work, "batches.json"), "w") as f:
        json.dump({"format": "toy/batches-v1", "dtype": "u32", "window": len(window), "batch": 1}, f)
    out = os.path.join(work, "logits.gguf")
    subprocess.run([toy, "debug", "dump-logits", model, "--batches", os.path.join(work, "batches.bin"), "--out", out],
                   check=True, capture_output=True)
    from gguf import GGUFReader

    r = GGUFReader(out)
    t = next(t for t in r.tensors if t.name == "logits")
    return np.array(t.data, dtype=np.float32).reshape(len(ids), -1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a toy checkpoint (.gguf)")
    ap.add_argument("--toy", default="target/release/toy")
    ap.add_argument("--prompt", default="Once upon a time, there was a little girl named Lily.")
    ap.add_argument("--tolerance", type=float, default=1e-3)
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = os.path.realpath(args.model)
    folder, name = os.path.dirname(path), os.path.basename(path)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    from gguf import GGUFReader

    fields = GGUFReader(path).fields
    arch = fields["general.architecture"].contents()
    extra = {}
    if arch == "gpt2":
        # transformers maps gpt2.context_length to n_ctx but sizes the position
        # table by n_positions (default 1024): pass it explicitly.
        extra["n_positions"] = int(fields["gpt2.context_length"].contents())
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32, **extra)
    model.eval()
    ids = tok(args.prompt, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        hf = model(torch.tensor([ids])).logits[0].numpy()

    toy_ids = json.loads(subprocess.run([args.toy, "generate", path, "--prompt", args.prompt, "-n", "0", "--json"],
                                        check=True, capture_output=True, text=True).stdout)["ids"]
    with tempfile.TemporaryDirectory() as work:
        ours = toy_logits(args.toy, path, ids, work)
    diff = float(np.abs(ours - hf).max())
    same_ids = toy_ids == ids
    print(f"model: {path} ({model.config.model_type}, {sum(p.numel() for p in model.parameters())} parameters in transformers)")
    print(f"prompt: {args.prompt!r} -> {len(ids)} tokens; toy's tokenizer gives the same ids: {same_ids}")
    print(f"max |logits_toy - logits_transformers| over {ours.shape[0]} positions × {ours.shape[1]} tokens: {diff:.3e} "
          f"(tolerance {args.tolerance:g})")
    print(f"next token: toy {int(ours[-1].argmax())} {tok.decode([int(ours[-1].argmax())])!r}, "
          f"transformers {int(hf[-1].argmax())} {tok.decode([int(hf[-1].argmax())])!r}")
    ok = same_ids and diff < args.tolerance
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
