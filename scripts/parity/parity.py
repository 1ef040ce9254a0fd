#!/usr/bin/env python3
"""PyTorch parity for toy: same initial weights, same batches, same optimizer.

Runs `toy train --save-initial --record-batches`, dumps toy's logits and
gradients for recorded batches, and checks toy against the reference models in
models.py (fp32 by default, deterministic kernels):

  logits, step_0 weights, batch 1       max |Δ|                    < 1e-4
  every gradient, step_0, batch 1       ‖g_toy − g_ref‖/‖g_ref‖    < 1e-4 (worst tensor)
  learning rate of every step           |Δlr|/lr                   < 1e-6
  loss of every step (replay)           |Δloss|/loss               < 1e-3 (worst step)
  weights after the last step           ‖w_toy − w_ref‖/‖w_ref‖    < 1e-3 (worst tensor)
  logits (max |Δ| / max |logit| < 1e-5) and gradients (< 1e-4) at toy's final
  weights on the last batch: the same step math in the trained regime,
  independent of how far the two trajectories drifted apart
  info only: pre-clip gradient norm of every step, weight updates w_N − w_0, and
  with --noise-floor the same between PyTorch fp32 and fp64 replays (how much
  fp32 rounding alone moves this trajectory).

Prints one table and exits 1 when a check fails (toy failing exits non-zero too).

    python3 scripts/parity/parity.py --toy target/release/toy --arch llama --preset smoke \\
        --corpus ../shared/data/tinystories-sample.txt --steps 200
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

TOL_LOGITS = 1e-4
TOL_LOGITS_REL = 1e-5
TOL_GRAD = 1e-4
TOL_LR = 1e-6
TOL_LOSS = 1e-3
# bf16 products (toy --dtype bf16 against PyTorch autocast(bfloat16)): the
# per-step loss of the two trajectories within 2%.
TOL_LOSS_BF16 = 2e-2
TOL_WEIGHTS = 1e-3


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--toy", required=True, help="the toy binary to test")
    p.add_argument("--arch", choices=["llama", "qwen2", "gpt2"], default="llama")
    p.add_argument("--preset", choices=["smoke", "tiny", "small", "medium"], default="smoke")
    p.add_argument("--corpus", help="corpus for toy train (default: toy's embedded corpus)")
    p.add_argument("--steps", type=int, default=200, help="training steps (the schedule spans them)")
    p.add_argument("--batch", type=int, help="sequences per step (default: the preset's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="toy's device: cpu, cuda, cuda:N")
    p.add_argument("--torch-device", help="PyTorch's device (default: cuda[:N] when --device is cuda[:N], else cpu)")
    p.add_argument("--threads", type=int, help="toy's CPU threads")
    p.add_argument("--matmul-precision", choices=["highest", "high"], default="highest",
                   help="f32 matrix products of both sides: highest (f32) or high (TF32 on CUDA, PyTorch's "
                        "set_float32_matmul_precision('high')); with high only the loss and the learning rate are checked")
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32",
                   help="toy train --dtype; bf16 replays PyTorch under autocast(bfloat16) and compares the loss curves to 2%%")
    p.add_argument("--toy-arg", action="append", default=[], help="extra argument for toy train (repeatable)")
    p.add_argument("--ref-dtype", choices=["float32", "float64"], default="float32",
                   help="the reference's precision (float64: to tell fp32 rounding drift from error)")
    p.add_argument("--noise-floor", action="store_true",
                   help="replay a second time in the other precision and report PyTorch fp32 vs fp64 (info rows); "
                        "with --dtype bf16, PyTorch autocast against PyTorch f32 (TF32 with --matmul-precision high)")
    p.add_argument("--work", help="folder for the toy run and dumps (default: a temporary folder, removed at the end)")
    p.add_argument("--run", help="check an existing run folder (made with --save-initial --record-batches) instead of training")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------
# toy


def sh(cmd):
    """Run a toy command, echoing it; returns its stdout. Exits (status 1) with toy's output when it fails."""
    print("$ " + " ".join(str(c) for c in cmd), file=sys.stderr, flush=True)
    r = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        sys.exit(f"parity: toy failed with exit code {r.returncode}: {' '.join(str(c) for c in cmd)}")
    return r.stdout


def toy_train(a, run):
    cmd = [a.toy, "train", "from-scratch", "--arch", a.arch, "--preset", a.preset, "--steps", a.steps, "--seed", a.seed,
           "--save-initial", "--record-batches", "--out", run, "--log-every", max(a.steps, 1), "--json", "--device", a.device,
           "--matmul-precision", a.matmul_precision, "--dtype", a.dtype]
    if a.corpus:
        cmd += ["--corpus", a.corpus]
    if a.batch:
        cmd += ["--batch", a.batch]
    if a.threads:
        cmd += ["--threads", a.threads]
    cmd += a.toy_arg
    t0 = time.time()
    sh(cmd)
    return time.time() - t0


def toy_dump(a, what, ckpt, run, step, out):
    """`toy debug dump-logits|dump-grads` of checkpoint `ckpt` on recorded batch `step`; its JSON line."""
    line = sh([a.toy, "debug", what, ckpt, "--batches", run / "batches.bin", "--step", step, "--out", out, "--device", a.device,
               "--matmul-precision", a.matmul_precision])
    return json.loads(line.strip().splitlines()[-1])


def read_run(run):
    """config.toml, the `step` events by step number, the recorded batches (steps, B, T+1)."""
    cfg = tomllib.loads((run / "config.toml").read_text())
    steps = {}
    for line in (run / "events.jsonl").read_text().splitlines():
        try:
            e = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn line
        if e.get("kind") == "step" and e.get("phase", "train") == "train":
            steps[int(e["step"])] = e
    layout = json.loads((run / "batches.json").read_text())
    if layout.get("format") != "toy/batches-v1" or layout.get("dtype") != "u32":
        sys.exit(f"parity: {run / 'batches.json'}: unknown batch layout {layout}")
    windows = np.fromfile(run / "batches.bin", dtype="<u4").reshape(-1, layout["batch"], layout["window"])
    return cfg, steps, windows


# ---------------------------------------------------------------------------
# the reference


def lr_at(step, c):
    """Cosine schedule with linear warmup, step 1-based (TrainConfig fields).
    The warmup is at most the run's length (a run shorter than its warmup
    still reaches the peak learning rate at its last step)."""
    lr, lo, n = c["lr"], c["min_lr"], c["steps"]
    warm = min(c["warmup_steps"], n)
    if step <= warm:
        return lr * step / warm
    if n - warm <= 1:
        return lr
    p = min(max((step - warm - 1) / (n - warm - 1), 0.0), 1.0)
    return lo + 0.5 * (lr - lo) * (1.0 + math.cos(math.pi * p))


def worst(cur, err, at):
    """The larger of (error, where) pairs, a non-finite error counting as infinite."""
    err = err if math.isfinite(err) else math.inf
    return (err, at) if err > cur[0] else cur


def rel(a, b):
    """‖a − b‖ / ‖b‖ in float64."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    nb = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / nb) if nb > 0 else float(np.linalg.norm(a - b))


def worst_tensor(errs):
    """(error, name) of the tensor with the largest error, NaN counting as infinite."""
    name = max(errs, key=lambda k: errs[k] if math.isfinite(errs[k]) else math.inf)
    return errs[name], name


def torch_setup(name, precision="highest"):
    """fp32 everywhere, no TF32 (unless `precision` is "high"), deterministic kernels."""
    import torch

    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit(f"parity: --torch-device {name}, but PyTorch sees no CUDA device")
    torch.use_deterministic_algorithms(True)
    torch.set_float32_matmul_precision(precision)
    torch.backends.cuda.matmul.allow_tf32 = precision == "high"
    torch.backends.cudnn.allow_tf32 = precision == "high"
    return dev


class Table:
    def __init__(self):
        self.rows = []

    def add(self, quantity, err, where, tol):
        ok = tol is None or (err is not None and math.isfinite(err) and err < tol)
        verdict = "info" if tol is None else ("PASS" if ok else "FAIL")
        self.rows.append((quantity, err, tol, verdict, where))

    @property
    def failed(self):
        return any(r[3] == "FAIL" for r in self.rows)

    def print(self):
        fmt = lambda x: "—" if x is None else f"{x:.3e}"  # noqa: E731
        head = ("quantity", "max error", "tolerance", "result", "worst at")
        rows = [(q, fmt(e), fmt(t), v, w) for q, e, t, v, w in self.rows]
        width = [max(len(r[i]) for r in [head] + rows) for i in range(5)]
        line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, width)) + " |"  # noqa: E731
        print(line(head))
        print("|" + "|".join("-" * (w + 2) for w in width) + "|")
        for r in rows:
            print(line(r))


def compare_batch(a, run, windows, ckpt, step, work, dev, dtype, t, trained=False):
    """toy's logits and gradients on recorded batch `step` at the weights of
    checkpoint `ckpt` against the reference's; adds two rows to table `t`.
    Trained logits are large and fp32 rounding grows with them, so there the
    logits' error is taken relative to the largest logit."""
    import torch

    from models import load_model
    from toygguf import ToyGguf

    tag = Path(ckpt).stem  # step_0, step_200
    d_logits = toy_dump(a, "dump-logits", ckpt, run, step, work / f"logits-{tag}-batch{step}.gguf")
    d_grads = toy_dump(a, "dump-grads", ckpt, run, step, work / f"grads-{tag}-batch{step}.gguf")
    toy_logits = ToyGguf(d_logits["out"]).tensors["logits"]  # (B·T, V), row b·T + t
    toy_grads = ToyGguf(d_grads["out"]).tensors
    model = load_model(ckpt, dtype).to(dev)
    w = torch.from_numpy(windows[step - 1].astype(np.int64)).to(dev)
    loss, logits = model.loss(w[:, :-1], w[:, 1:])
    loss.backward()
    ref = logits.detach().flatten(0, 1).cpu().numpy()
    diff = float(np.abs(toy_logits - ref).max())
    if not trained:
        t.add(f"logits, {tag} weights, batch {step}: max |Δ|", diff, "", strict(a, TOL_LOGITS))
    else:
        t.add(f"logits, {tag} weights, batch {step}: max |Δ| / max |logit|", diff / float(np.abs(ref).max()), "",
              strict(a, TOL_LOGITS_REL))
    errs = {k: rel(toy_grads[k], p.grad.cpu().numpy()) for k, p in model.w.items()}
    t.add(f"gradients, {tag} weights, batch {step} ({len(errs)} tensors): ‖Δg‖/‖g‖", *worst_tensor(errs), strict(a, TOL_GRAD))
    print(f"  {tag}, batch {step}: loss toy {d_grads['loss']:.7f}, reference {loss.item():.7f}", file=sys.stderr)


def comparable(name, w, d_model):
    """The part of tensor `name` whose trained value means something. GPT-2's
    key bias (the middle third of `attn_qkv.bias`) has a gradient of exactly 0
    in exact arithmetic (adding q·b_k to every score of a query leaves its
    softmax unchanged), so what it holds after training is rounding noise of
    each implementation, AdamW-normalised; it is left out of weight comparisons.
    qwen2's `attn_k.bias` is the same case, whole: `None` (left out)."""
    if name.endswith("attn_qkv.bias"):
        return np.concatenate([w[:d_model], w[2 * d_model:]])
    if name.endswith("attn_k.bias"):
        return None
    return w


def replay(run, work, dev, dtype, autocast_bf16=False):
    """Train the reference from step_0.gguf on the recorded batches with toy's
    optimizer settings. Returns per-step lr, loss, pre-clip gradient norm and
    the final weights (numpy)."""
    import torch

    from models import load_model

    cfg, _, windows = read_run(run)
    n = int(cfg["steps"])
    model = load_model(run / "weights" / "step_0.gguf", dtype).to(dev)
    params = list(model.w.values())
    opt = torch.optim.AdamW(  # nanoGPT's groups: decay matrices and embeddings, not gains and biases
        [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg["weight_decay"]},
         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
        lr=cfg["lr"], betas=tuple(cfg["betas"]), eps=cfg["eps"], foreach=False)
    clip = float(cfg["grad_clip"])
    out = {"lr": [], "loss": [], "grad_norm": []}
    t0 = time.time()
    for s in range(1, n + 1):
        w = torch.from_numpy(windows[s - 1].astype(np.int64)).to(dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast_bf16):
            loss, _ = model.loss(w[:, :-1], w[:, 1:])
        loss = loss.float()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, clip).item() if clip > 0 else math.nan
        lr = lr_at(s, cfg)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        for k, v in (("lr", lr), ("loss", loss.item()), ("grad_norm", norm)):
            out[k].append(v)
        if s % max(1, n // 10) == 0 or s == n:
            print(f"  {dtype} replay, step {s}/{n}: loss {loss.item():.6f} ({(time.time() - t0) / s:.2f} s/step)", file=sys.stderr)
    out = {k: np.array(v) for k, v in out.items()}
    out["final"] = {k: p.detach().cpu().numpy() for k, p in model.w.items()}
    return out


def strict(a, tol):
    """A tolerance that holds only for f32 products: none (an info row) with TF32 or bf16."""
    return tol if a.matmul_precision == "highest" and a.dtype == "f32" else None


def compare_replay(a, run, ref, d_model, t, against="toy", floor="fp32 vs fp64"):
    """Rows comparing a trajectory (toy's run, or another replay `against`) with replay `ref`;
    `floor` names the two replays' precisions in the rows of the latter (info rows)."""
    from toygguf import ToyGguf

    cfg, events, _ = read_run(run)
    n = int(cfg["steps"])
    if against == "toy":
        other = {k: np.array([events[s].get(k, math.nan) for s in range(1, n + 1)]) for k in ("lr", "loss", "grad_norm")}
        other["final"] = ToyGguf(run / "weights" / f"step_{n}.gguf").tensors
        who, tol = "", lambda x: x
    else:
        other, who, tol = against, f"noise floor, PyTorch {floor}: ", lambda x: None
    w0 = ToyGguf(run / "weights" / "step_0.gguf").tensors

    def per_step(key):
        e = np.abs(other[key] - ref[key]) / np.abs(ref[key])
        e = np.where(np.isfinite(e), e, np.inf)
        return float(e.max()), f"step {int(e.argmax()) + 1}"

    if against == "toy":
        t.add(f"learning rate, steps 1..{n}: |Δlr|/lr", *per_step("lr"), TOL_LR)
    t.add(f"{who}loss, steps 1..{n}: |Δloss|/loss", *per_step("loss"), tol(TOL_LOSS_BF16 if a.dtype == "bf16" else TOL_LOSS))
    if float(cfg["grad_clip"]) > 0:
        t.add(f"{who}grad norm, steps 1..{n}: |Δ‖g‖|/‖g‖", *per_step("grad_norm"), None)
    c = lambda k, w: comparable(k, w, d_model)  # noqa: E731
    x, y = other["final"], ref["final"]
    kept = [k for k in y if c(k, y[k]) is not None]
    t.add(f"{who}weights after step {n}: ‖Δw‖/‖w‖", *worst_tensor({k: rel(c(k, x[k]), c(k, y[k])) for k in kept}),
          strict(a, tol(TOL_WEIGHTS)))
    updates = {k: rel(c(k, x[k] - w0[k]), c(k, y[k] - w0[k])) for k in kept}
    t.add(f"{who}updates w_{n} − w_0: ‖Δ‖/‖w_{n} − w_0‖", *worst_tensor(updates), None)


def write_steps(run, ref, path):
    """Per-step lr, loss and gradient norm of toy and the reference, as CSV."""
    _, events, _ = read_run(run)
    rows = ["step,lr_toy,lr_ref,loss_toy,loss_ref,grad_norm_toy,grad_norm_ref"]
    for s in range(1, len(ref["loss"]) + 1):
        e = events[s]
        rows.append(",".join(repr(float(x)) for x in (s, e["lr"], ref["lr"][s - 1], e["loss"], ref["loss"][s - 1],
                                                      e.get("grad_norm", math.nan), ref["grad_norm"][s - 1])))
    path.write_text("\n".join(rows) + "\n")


def check(a, run, work):
    import torch

    dev = torch_setup(a.torch_device, a.matmul_precision)
    dtype = getattr(torch, a.ref_dtype)
    cfg, events, windows = read_run(run)
    n = int(cfg["steps"])
    if len(windows) < n or any(s not in events for s in range(1, n + 1)):
        sys.exit(f"parity: {run} has {len(windows)} recorded batches and {len(events)} step events for {n} steps")
    d_model = int(cfg["model"]["d_model"])
    print(f"reference: PyTorch {torch.__version__}, {a.ref_dtype} on {dev}; T={windows.shape[2] - 1} B={windows.shape[1]}",
          file=sys.stderr)
    t = Table()
    compare_batch(a, run, windows, run / "weights" / "step_0.gguf", 1, work, dev, dtype, t)
    ref = replay(run, work, dev, dtype, autocast_bf16=a.dtype == "bf16")
    write_steps(run, ref, work / "steps.csv")
    np.savez(work / "reference_final.npz", **ref["final"])
    compare_replay(a, run, ref, d_model, t)
    # The same step math again in the trained regime, apart from how far the
    # trajectories drifted: toy's own final weights, the last batch.
    compare_batch(a, run, windows, run / "weights" / f"step_{n}.gguf", n, work, dev, dtype, t, trained=True)
    if a.noise_floor and a.dtype == "bf16":
        # How far bf16 itself moves this trajectory: PyTorch autocast against PyTorch without it,
        # the same batches from the same weights. toy's bf16 curve against PyTorch's reads against it.
        f32 = replay(run, work, dev, dtype)
        compare_replay(a, run, f32, d_model, t, against=ref, floor="bf16 vs f32")
    elif a.noise_floor:
        # How far fp32 rounding alone moves this trajectory: PyTorch fp32 against fp64.
        other = replay(run, work, dev, torch.float64 if dtype == torch.float32 else torch.float32)
        f32, f64 = (ref, other) if dtype == torch.float32 else (other, ref)
        compare_replay(a, run, f64, d_model, t, against=f32)
    return t


def main(argv=None):
    a = parse_args(argv)
    a.toy = str(Path(a.toy).resolve())
    if a.torch_device is None:
        a.torch_device = a.device if a.device.startswith("cuda") else "cpu"
    if a.torch_device.startswith("cuda"):
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS; before CUDA starts
    temp = a.work is None
    work = Path(tempfile.mkdtemp(prefix="toy-parity-") if temp else a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    try:
        if a.run:
            run = Path(a.run).resolve()
            cfg = tomllib.loads((run / "config.toml").read_text())
            a.steps, a.preset, a.arch = cfg["steps"], cfg["preset"], cfg["model"]["arch"]
        else:
            run = work / "run"
            if run.exists():
                shutil.rmtree(run)
            secs = toy_train(a, run)
            print(f"toy: {a.steps} steps in {secs:.1f} s", file=sys.stderr)
        table = check(a, run, work)
    finally:
        if temp:
            shutil.rmtree(work, ignore_errors=True)
    print(f"parity: toy {a.arch} {a.preset}, {a.steps} steps, toy --device {a.device}, PyTorch on {a.torch_device}, "
          f"matmul precision {a.matmul_precision}")
    table.print()
    if a.arch == "gpt2":
        print("(weights: the key third of attn_qkv.bias is left out; its gradient is 0 in exact arithmetic)")
    if a.arch == "qwen2":
        print("(weights: attn_k.bias is left out; its gradient is 0 in exact arithmetic)")
    print("parity: FAIL" if table.failed else "parity: PASS")
    return 1 if table.failed else 0


if __name__ == "__main__":
    sys.exit(main())
