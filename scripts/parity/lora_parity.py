"""LoRA parity: toy's finetune --lora-rank against PyTorch, from the same base,
the same initial adapters and the same batches.

1. `toy train` a base llama (from-scratch, `--base-steps` steps), then
   `toy train finetune --from BASE --lora-rank R --lora-alpha A --lora-targets T
   --save-initial --record-batches` for `--steps` steps.
2. `toy debug dump-logits` / `dump-grads` of the initial adapter (step_0.gguf,
   on its base) on recorded batch 1, against the reference: `models.py`'s llama
   with the LoRA update written from the paper (`load_lora_model`): logits and
   the gradients of every A and B.
3. Replays every recorded batch with `torch.optim.AdamW` over the adapters only
   (weight decay on them, as toy: they are matrices), `clip_grad_norm_` over
   them, toy's schedule; compares every step's loss and the final adapters with
   toy's events and last adapter file.

    python3 scripts/parity/lora_parity.py --toy target/release/toy --steps 100
"""

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from parity import Table, lr_at, read_run, rel, sh, torch_setup, worst_tensor  # noqa: E402

TOL_LOGITS = 1e-4
TOL_GRAD = 1e-4
TOL_LOSS = 1e-3
TOL_ADAPTERS = 1e-3


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--toy", required=True)
    p.add_argument("--preset", default="smoke")
    p.add_argument("--corpus", help="corpus of the fine-tuning (default: the embedded one)")
    p.add_argument("--base-corpus", help="corpus of the base (default: the embedded one)")
    p.add_argument("--base-steps", type=int, default=30)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--alpha", type=float, default=16.0)
    p.add_argument("--targets", default="attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--base-type", help="quantize the base's matrices first (q8_0, q4_0, q4_1, q5_0, q5_1, f16): "
                   "toy keeps them so, the reference reads them dequantized (scripts/bench/typed-copy.py)")
    p.add_argument("--work", help="keep the runs and dumps here")
    return p.parse_args(argv)


def main(argv=None):
    a = parse_args(argv)
    import torch

    from models import load_lora_model
    from toygguf import ToyGguf

    temp = a.work is None
    work = Path(tempfile.mkdtemp(prefix="toy-lora-parity-") if temp else a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    try:
        base, run = work / "base", work / "lora"
        for d in (base, run):
            shutil.rmtree(d, ignore_errors=True)
        common = ["--preset", a.preset, "--threads", a.threads, "--json", "--log-every", 1000]
        cmd = [a.toy, "train", "--steps", a.base_steps, "--seed", a.seed, "--out", base] + common
        sh(cmd + (["--corpus", a.base_corpus] if a.base_corpus else []))
        frm = base / "weights" / "latest"
        if a.base_type:
            frm = work / f"base-{a.base_type}.gguf"
            sh([sys.executable, Path(__file__).resolve().parents[1] / "bench" / "typed-copy.py", base / "weights" / "latest", frm, a.base_type])
        t0 = time.time()
        cmd = [a.toy, "train", "finetune", "--from", frm, "--lora-rank", a.rank, "--lora-alpha", a.alpha,
               "--lora-targets", a.targets, "--lr", a.lr, "--steps", a.steps, "--seed", a.seed, "--save-initial", "--record-batches",
               "--out", run] + common
        sh(cmd + (["--corpus", a.corpus] if a.corpus else []))
        print(f"toy: {a.steps} LoRA steps in {time.time() - t0:.1f} s", file=sys.stderr)

        dev = torch_setup("cpu")
        cfg, events, windows = read_run(run)
        n = int(cfg["steps"])
        basef = cfg["from"]
        t = Table()

        # 2. one batch at the initial adapters (B = 0: the gradients of A are 0
        # there), and again at toy's final ones, where both are not.
        def one_batch(adapter, step, tag):
            for what in ("dump-logits", "dump-grads"):
                sh([a.toy, "debug", what, adapter, "--batches", run / "batches.bin", "--step", step, "--out", work / f"{what}-{tag}.gguf"])
            toy_logits = ToyGguf(work / f"dump-logits-{tag}.gguf").tensors["logits"]
            toy_grads = ToyGguf(work / f"dump-grads-{tag}.gguf").tensors
            model = load_lora_model(basef, adapter).to(dev)
            w = torch.from_numpy(windows[step - 1].astype(np.int64))
            loss, logits = model.loss(w[:, :-1], w[:, 1:])
            loss.backward()
            d = float(np.abs(toy_logits - logits.detach().flatten(0, 1).numpy()).max())
            t.add(f"logits, {tag} adapters, batch {step}: max |Δ|", d, "", TOL_LOGITS)
            errs = {k: rel(toy_grads[k], p.grad.numpy()) for k, p in model.lora_params.items() if k.endswith("lora_b") or tag != "initial"}
            t.add(f"gradients of {'B' if tag == 'initial' else 'A and B'}, {tag} adapters, batch {step} ({len(errs)} tensors): ‖Δg‖/‖g‖",
                  *worst_tensor(errs), TOL_GRAD)
            return model

        step0 = run / "weights" / "step_0.gguf"
        model = one_batch(step0, 1, "initial")
        zero_b = max(float(np.abs(p.detach().numpy()).max()) for k, p in model.lora_params.items() if k.endswith("lora_b"))
        t.add("B at step 0: max |B| (the base model exactly)", zero_b, "", 1e-30)
        one_batch(run / "weights" / f"step_{n}.gguf", n, "final")

        # 3. the replay
        model = load_lora_model(basef, step0).to(dev)
        params = list(model.lora_params.values())
        opt = torch.optim.AdamW([{"params": params, "weight_decay": cfg["weight_decay"]}], lr=cfg["lr"], betas=tuple(cfg["betas"]),
                                eps=cfg["eps"], foreach=False)
        clip = float(cfg["grad_clip"])
        worst_loss = (0.0, "")
        for s in range(1, n + 1):
            w = torch.from_numpy(windows[s - 1].astype(np.int64))
            loss, _ = model.loss(w[:, :-1], w[:, 1:])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(params, clip)
            for g in opt.param_groups:
                g["lr"] = lr_at(s, cfg)
            opt.step()
            d = abs(loss.item() - float(events[s]["loss"]))
            if d > worst_loss[0]:
                worst_loss = (d, f"step {s}")
        t.add(f"loss, every step of {n}: max |Δ|", worst_loss[0], worst_loss[1], TOL_LOSS)
        final = ToyGguf(run / "weights" / f"step_{n}.gguf").tensors
        errs = {k: rel(final[k], p.detach().numpy()) for k, p in model.lora_params.items()}
        t.add(f"adapters after {n} steps: ‖Δ‖/‖ref‖", *worst_tensor(errs), TOL_ADAPTERS)
        kept = f", base {a.base_type} (the reference: dequantized)" if a.base_type else ""
        print(f"lora parity: toy {a.preset}{kept}, rank {a.rank}, alpha {a.alpha}, targets {a.targets}, {n} steps, PyTorch {torch.__version__} on cpu")
        t.print()
        print("lora parity: FAIL" if t.failed else "lora parity: PASS")
        return 1 if t.failed else 0
    finally:
        if temp:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
