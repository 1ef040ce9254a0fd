# bf16 against f32 gradients of W_o·attn(q, k, v) of rms_norm(x)·g with a LoRA-like term B_q·(A·xn)
# added to q, at d=576: A's bound 0.3 against 0.3·sqrt(96/d) (the products' bound), err / scale of dB_q, dA, dx.
import torch, math
def run(d, wb, ab, bf16):
    g = torch.Generator().manual_seed(1)
    T, B, h, hkv, dh = 130, 2, 9, 3, 64
    u = lambda *s, lo=-1.0, hi=1.0: (torch.rand(*s, generator=g)*(hi-lo)+lo).requires_grad_()
    x = u(B*T, d); gain = u(d, lo=0.5, hi=1.5)
    wq, wk, wv = u(d, h*dh, lo=-wb, hi=wb), u(d, hkv*dh, lo=-wb, hi=wb), u(d, hkv*dh, lo=-wb, hi=wb)
    A, Bq = u(d, 4, lo=-ab, hi=ab), u(4, h*dh, lo=-0.3, hi=0.3)
    wo = u(h*dh, d, lo=-0.3, hi=0.3); rt = torch.rand(B*T, d, generator=g)*2-1
    xn = x * torch.rsqrt((x*x).mean(-1, keepdim=True) + 1e-5) * gain
    c = (lambda t: t.bfloat16()) if bf16 else (lambda t: t)
    a = c(xn)
    ax = c(a @ c(A))
    q, k, v = (ax @ c(Bq)) + a @ c(wq), a @ c(wk), a @ c(wv)
    q = q.float().view(B, T, h, dh).transpose(1, 2); k = k.float().view(B, T, hkv, dh).transpose(1, 2); v = v.float().view(B, T, hkv, dh).transpose(1, 2)
    if bf16: q, k, v = q.bfloat16().float(), k.bfloat16().float(), v.bfloat16().float()
    k = k.repeat_interleave(3, 1); v = v.repeat_interleave(3, 1)
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B*T, h*dh)
    y = c(o) @ c(wo)
    (y.float()*rt).sum().backward()
    return [t.grad.clone() for t in (x, wq, A, Bq)]
d = 576
wb = 0.3*math.sqrt(96/d)
for ab in (0.3, wb):
    f, b = run(d, wb, ab, False), run(d, wb, ab, True)
    errs = [((p-q).abs().max()/q.abs().max()).item() for p, q in zip(b, f)]
    print(f"d {d} products {wb:.3f} A {ab:.3f}: dx dWq dA dBq err/scale", " ".join(f"{e:.2e}" for e in errs))
