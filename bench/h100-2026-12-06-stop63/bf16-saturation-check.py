# How far bf16 rounding of the products (autocast-like) moves the gradients of
# W_o·attn(rope-less q, k, v of rms_norm(x)·g), relative to each tensor's max, at d=96 and d=576,
# with weights U(-0.3, 0.3) and U(-b, b), b = 0.3·sqrt(96/d). (No rope: the saturation is the point.)
# run(..., ab): with a LoRA-like term B_q·(A·xn) added to q, A in U(-ab, ab) (stop 64's check imports it).
import torch, math
torch.manual_seed(0)
def run(d, wb, bf16, ab=None):
    g = torch.Generator().manual_seed(1)
    T, B, h, hkv, dh = 130, 2, 9, 3, 64
    u = lambda *s, lo=-1.0, hi=1.0: (torch.rand(*s, generator=g)*(hi-lo)+lo).requires_grad_()
    x = u(B*T, d); gain = u(d, lo=0.5, hi=1.5)
    wq, wk, wv = u(d, h*dh, lo=-wb, hi=wb), u(d, hkv*dh, lo=-wb, hi=wb), u(d, hkv*dh, lo=-wb, hi=wb)
    if ab is not None:
        A, Bq = u(d, 4, lo=-ab, hi=ab), u(4, h*dh, lo=-0.3, hi=0.3)
    wo = u(h*dh, d, lo=-0.3, hi=0.3); rt = torch.rand(B*T, d, generator=g)*2-1
    xn = x * torch.rsqrt((x*x).mean(-1, keepdim=True) + 1e-5) * gain
    cast = (lambda t: t.bfloat16()) if bf16 else (lambda t: t)
    a = cast(xn)
    if ab is not None:
        ax = cast(a @ cast(A))
        q = (ax @ cast(Bq)) + a @ cast(wq)
    else:
        q = a @ cast(wq)
    k, v = a @ cast(wk), a @ cast(wv)
    q = q.float().view(B, T, h, dh).transpose(1, 2); k = k.float().view(B, T, hkv, dh).transpose(1, 2); v = v.float().view(B, T, hkv, dh).transpose(1, 2)
    if bf16: q, k, v = q.bfloat16().float(), k.bfloat16().float(), v.bfloat16().float()
    k = k.repeat_interleave(3, 1); v = v.repeat_interleave(3, 1)
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B*T, h*dh)
    y = cast(o) @ cast(wo)
    (y.float()*rt).sum().backward()
    return [t.grad.clone() for t in (x, wq, wk, gain) + ((A, Bq) if ab is not None else ())]
if __name__ == "__main__":
  for d in (96, 576):
      for wb in (0.3, 0.3*min(1, math.sqrt(96/d))):
          a, b = run(d, wb, False), run(d, wb, True)
          errs = [((p-q).abs().max()/q.abs().max()).item() for p, q in zip(b, a)]
          print(f"d {d} bound {wb:.3f}: dx dWq dWk dg err/scale", " ".join(f"{e:.2e}" for e in errs))
