# bf16 against f32 gradients of W_o·attn(q, k, v) of rms_norm(x)·g with a LoRA-like term B_q·(A·xn)
# added to q, at d=576: A's bound 0.3 against 0.3·sqrt(96/d) (the products' bound), err / scale of dx,
# dW_q, dA, dB_q. The model is stop 63's check (its run, with the adapter).
import importlib.util, math, pathlib
here = pathlib.Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("check63", here.parent / "h100-2026-12-06-stop63" / "bf16-saturation-check.py")
check63 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check63)
d = 576
wb = 0.3*math.sqrt(96/d)
for ab in (0.3, wb):
    f, b = check63.run(d, wb, False, ab), check63.run(d, wb, True, ab)
    errs = [((b[i]-f[i]).abs().max()/f[i].abs().max()).item() for i in (0, 1, 4, 5)]  # x, W_q, A, B_q
    print(f"d {d} products {wb:.3f} A {ab:.3f}: dx dWq dA dBq err/scale", " ".join(f"{e:.2e}" for e in errs))
