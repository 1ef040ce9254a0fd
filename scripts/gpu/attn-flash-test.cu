// Standalone check and timing of patch 0024's kernels (src/ggml-cuda/attn-flash.cuh
// of the patched ggml), without ggml: random q, k, v, dO in ggml's layouts, an
// f64 CPU reference of causal attention and its gradient, relative errors of
// out, lse, dq, dk, dv; then the time of forward and backward at the shapes of
// the benchmarks.
//
// Each check and timing runs twice: with f32 q, k, v (copied to bf16 by the
// op) and with bf16 ones (what an autocast model gives the op).
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -DGGML_CUDA_WGMMA -use_fast_math -I dist/ggml-src/src/ggml-cuda scripts/gpu/attn-flash-test.cu -o /tmp/aft
//   /tmp/aft            # checks, then timings; exit code 1 when a check fails
//   /tmp/aft time D hq hkv T B [bf16]   # the timing of that one shape (e.g. under ncu)
//
// Built for sm_90a with GGML_CUDA_WGMMA, head size 64 runs patch 0069's wgmma
// kernels on an H100/H200; TOY_CUDA_NO_0069=1 runs the mma.sync ones instead.
// TOY_CUDA_NO_0096=1 keeps dQ's products in that backward on mma.sync (patch 0096).

#include <cstdio>
#include <cstdlib>

// attn-flash.cuh checks the host side's preconditions with ggml's GGML_ASSERT (patch 0079).
#ifndef GGML_ASSERT
#define GGML_ASSERT(x) do { if (!(x)) { std::fprintf(stderr, "assertion failed: %s\n", #x); std::abort(); } } while (0)
#endif

#include "attn-flash.cuh"

#include <algorithm>
#include <cmath>
#include <string>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); std::exit(3); } } while (0)

struct shape { int D, hq, hkv, T, B; };

static float * to_dev(const std::vector<float> & h) {
    float * d;
    CK(cudaMalloc(&d, h.size()*sizeof(float)));
    CK(cudaMemcpy(d, h.data(), h.size()*sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

static std::vector<float> to_host(const float * d, size_t n) {
    std::vector<float> h(n);
    CK(cudaMemcpy(h.data(), d, n*sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

// rowsum(dO * O) per (h, t, b), as ggml's k_attn_rowdot computes it.
static __global__ void k_rowdot(const float * a, const float * b, float * d, int D, int64_t n) {
    const int64_t r = (int64_t) blockIdx.x*blockDim.x + threadIdx.x;
    if (r < n) {
        float s = 0;
        for (int e = 0; e < D; ++e) s += a[r*D + e]*b[r*D + e];
        d[r] = s;
    }
}

// f64 reference: out, lse, dq, dk, dv (contiguous layouts).
static void reference(const shape & s, const std::vector<float> & q, const std::vector<float> & k,
        const std::vector<float> & v, const std::vector<float> & dout, float scale,
        std::vector<double> & out, std::vector<double> & lse, std::vector<double> & dq,
        std::vector<double> & dk, std::vector<double> & dv) {
    const int D = s.D, T = s.T, group = s.hq/s.hkv;
    out.assign((size_t) D*s.hq*T*s.B, 0); lse.assign((size_t) s.hq*T*s.B, 0);
    dq.assign(out.size(), 0); dk.assign((size_t) D*s.hkv*T*s.B, 0); dv.assign(dk.size(), 0);
    std::vector<double> pr(T), dp(T);
    for (int b = 0; b < s.B; ++b) for (int h = 0; h < s.hq; ++h) for (int i = 0; i < T; ++i) {
        const int hk = h/group;
        auto Q = [&](int t, int e) { return (double) q[(((size_t) b*T + t)*s.hq + h)*D + e]; };
        auto K = [&](int t, int e) { return (double) k[(((size_t) b*T + t)*s.hkv + hk)*D + e]; };
        auto V = [&](int t, int e) { return (double) v[(((size_t) b*T + t)*s.hkv + hk)*D + e]; };
        double mx = -1e300;
        for (int j = 0; j <= i; ++j) {
            double x = 0; for (int e = 0; e < D; ++e) x += Q(i, e)*K(j, e);
            pr[j] = x*scale; mx = std::max(mx, pr[j]);
        }
        double sum = 0; for (int j = 0; j <= i; ++j) { pr[j] = std::exp(pr[j] - mx); sum += pr[j]; }
        for (int j = 0; j <= i; ++j) pr[j] /= sum;
        const size_t orow = (((size_t) b*T + i)*s.hq + h)*D;
        lse[((size_t) b*T + i)*s.hq + h] = mx + std::log(sum);
        for (int e = 0; e < D; ++e) { double x = 0; for (int j = 0; j <= i; ++j) x += pr[j]*V(j, e); out[orow + e] = x; }
        double Dr = 0; for (int e = 0; e < D; ++e) Dr += dout[orow + e]*out[orow + e];
        for (int j = 0; j <= i; ++j) {
            double x = 0; for (int e = 0; e < D; ++e) x += dout[orow + e]*V(j, e);
            dp[j] = pr[j]*(x - Dr);
        }
        for (int j = 0; j <= i; ++j) {
            const size_t krow = (((size_t) b*T + j)*s.hkv + hk)*D;
            for (int e = 0; e < D; ++e) {
                dq[orow + e] += scale*dp[j]*K(j, e);
                dk[krow + e] += scale*dp[j]*Q(i, e);
                dv[krow + e] += pr[j]*dout[orow + e];
            }
        }
    }
}

// max |a - r| / max |r|
static double rel(const std::vector<float> & a, const std::vector<double> & r) {
    double num = 0, den = 0;
    for (size_t i = 0; i < r.size(); ++i) { num = std::max(num, std::fabs(a[i] - r[i])); den = std::max(den, std::fabs(r[i])); }
    return num/std::max(den, 1e-30);
}

struct run_bufs {
    float *q, *k, *v, *dout, *out, *lse, *rd, *dq, *dk, *dv;
    __nv_bfloat16 *qb, *kb, *vb, *ws, *ob;
};

// Patch 0073: FLASH_OUT_BF16=1 has the forward write O in bf16 (r.ob) and the
// backward read it there, as the op does for bf16 q, k and v.
static bool out_bf16() {
    static const bool b = std::getenv("FLASH_OUT_BF16") != nullptr;
    return b;
}

static __global__ void k_from_bf16(const __nv_bfloat16 * x, float * y, int64_t n) {
    const int64_t i = (int64_t) blockIdx.x*blockDim.x + threadIdx.x;
    if (i < n) y[i] = __bfloat162float(x[i]);
}

static __global__ void k_to_bf16(const float * x, __nv_bfloat16 * y, int64_t n) {
    const int64_t i = (int64_t) blockIdx.x*blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2bfloat16(x[i]);
}

static __nv_bfloat16 * to_bf16(const float * x, int64_t n) {
    __nv_bfloat16 * y;
    CK(cudaMalloc(&y, n*2));
    k_to_bf16<<<(n + 255)/256, 256>>>(x, y, n);
    return y;
}

static void launch(const shape & s, const run_bufs & r, bool fwd, bool bwd, bool bf16) {
    const int64_t rows = (int64_t) s.hq*s.T*s.B;
    const float scale = 1.0f/std::sqrt((float) s.D);
    const flash_src q = { bf16 ? (const void *) r.qb : r.q, s.D, (int64_t) s.hq*s.D, (int64_t) s.T*s.hq*s.D, bf16 };
    const flash_src k = { bf16 ? (const void *) r.kb : r.k, s.D, (int64_t) s.hkv*s.D, (int64_t) s.T*s.hkv*s.D, bf16 };
    const flash_src v = { bf16 ? (const void *) r.vb : r.v, s.D, (int64_t) s.hkv*s.D, (int64_t) s.T*s.hkv*s.D, bf16 };
    const bool obf = out_bf16();
    void * out = obf ? (void *) r.ob : (void *) r.out;
    if (fwd) {
        if (s.D == 64) flash_forward<64>(q, k, v, s.T, s.B, s.hq, s.hkv, scale, out, obf, r.lse, r.ws, 0);
        else flash_forward<128>(q, k, v, s.T, s.B, s.hq, s.hkv, scale, out, obf, r.lse, r.ws, 0);
    }
    if (bwd) {
        // patch 0070: the row dots computed with dO's copy, unless TOY_CUDA_NO_0070 is set (and O is f32)
        static const bool no_0070 = std::getenv("TOY_CUDA_NO_0070") != nullptr && !obf;
        if (no_0070) k_rowdot<<<(rows + 255)/256, 256>>>(r.dout, r.out, r.rd, s.D, rows);
        const void * o = no_0070 ? nullptr : out;
        if (s.D == 64) flash_backward<64>(q, k, v, r.dout, false, o, obf, s.T, s.B, s.hq, s.hkv, scale, r.lse, r.rd, r.dq, r.dk, r.dv, r.ws, 0);
        else flash_backward<128>(q, k, v, r.dout, false, o, obf, s.T, s.B, s.hq, s.hkv, scale, r.lse, r.rd, r.dq, r.dk, r.dv, r.ws, 0);
    }
    CK(cudaGetLastError());
}

static run_bufs alloc_run(const shape & s, std::vector<float> * hq, std::vector<float> * hk,
        std::vector<float> * hv, std::vector<float> * hdo, unsigned seed) {
    const size_t nq = (size_t) s.D*s.hq*s.T*s.B, nk = (size_t) s.D*s.hkv*s.T*s.B;
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> q(nq), k(nk), v(nk), dout(nq);
    for (auto & x : q) x = nd(rng);
    for (auto & x : k) x = nd(rng);
    for (auto & x : v) x = nd(rng);
    for (auto & x : dout) x = nd(rng);
    run_bufs r;
    r.q = to_dev(q); r.k = to_dev(k); r.v = to_dev(v); r.dout = to_dev(dout);
    CK(cudaMalloc(&r.out, nq*4)); CK(cudaMalloc(&r.dq, nq*4)); CK(cudaMalloc(&r.dk, nk*4)); CK(cudaMalloc(&r.dv, nk*4));
    CK(cudaMalloc(&r.lse, nq/s.D*4)); CK(cudaMalloc(&r.rd, nq/s.D*4)); CK(cudaMalloc(&r.ob, nq*2));
    const size_t tp = (s.T + 127)/128*128, wq = (size_t) s.D*s.hq*tp*s.B, wk = (size_t) s.D*s.hkv*tp*s.B;
    CK(cudaMalloc(&r.ws, (2*wq + 2*wk)*2));   // the most any version of the kernels asks for
    r.qb = to_bf16(r.q, nq); r.kb = to_bf16(r.k, nk); r.vb = to_bf16(r.v, nk);
    if (hq) { *hq = q; *hk = k; *hv = v; *hdo = dout; }
    return r;
}

static void free_run(run_bufs & r) {
    for (float * p : { r.q, r.k, r.v, r.dout, r.out, r.lse, r.rd, r.dq, r.dk, r.dv }) cudaFree(p);
    for (__nv_bfloat16 * p : { r.qb, r.kb, r.vb, r.ws, r.ob }) cudaFree(p);
}

static bool check(const shape & s, const bool bf16) {
    std::vector<float> q, k, v, dout;
    run_bufs r = alloc_run(s, &q, &k, &v, &dout, 1234u + s.T);
    const float scale = 1.0f/std::sqrt((float) s.D);
    launch(s, r, true, true, bf16);
    CK(cudaDeviceSynchronize());
    std::vector<double> out, lse, dq, dk, dv;
    reference(s, q, k, v, dout, scale, out, lse, dq, dk, dv);
    const size_t nq = out.size(), nk = dk.size();
    if (out_bf16()) {
        k_from_bf16<<<(nq + 255)/256, 256>>>(r.ob, r.out, (int64_t) nq);
        CK(cudaDeviceSynchronize());
    }
    const double e[5] = { rel(to_host(r.out, nq), out), rel(to_host(r.lse, lse.size()), lse),
        rel(to_host(r.dq, nq), dq), rel(to_host(r.dk, nk), dk), rel(to_host(r.dv, nk), dv) };
    const bool ok = e[0] < 1e-2 && e[1] < 1e-2 && e[2] < 1e-2 && e[3] < 1e-2 && e[4] < 1e-2;
    std::printf("check %s D %3d heads %2d/%2d T %5d B %d: out %.2e lse %.2e dq %.2e dk %.2e dv %.2e %s\n",
        bf16 ? "bf16" : "f32 ", s.D, s.hq, s.hkv, s.T, s.B, e[0], e[1], e[2], e[3], e[4], ok ? "PASS" : "FAIL");
    free_run(r);
    return ok;
}

static void timing(const shape & s, const bool bf16) {
    run_bufs r = alloc_run(s, nullptr, nullptr, nullptr, nullptr, 7u);
    cudaEvent_t e0, e1, e2;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1)); CK(cudaEventCreate(&e2));
    std::vector<float> tf, tb;
    for (int it = 0; it < 12; ++it) {
        CK(cudaEventRecord(e0));
        launch(s, r, true, false, bf16);
        CK(cudaEventRecord(e1));
        launch(s, r, false, true, bf16);
        CK(cudaEventRecord(e2));
        CK(cudaEventSynchronize(e2));
        float a, b;
        CK(cudaEventElapsedTime(&a, e0, e1)); CK(cudaEventElapsedTime(&b, e1, e2));
        if (it >= 2) { tf.push_back(a); tb.push_back(b); }
    }
    std::sort(tf.begin(), tf.end()); std::sort(tb.begin(), tb.end());
    const double fl = 4.0*s.D*(double) s.T*s.T/2*s.hq*s.B;   // causal: half the square, 2 products
    const double mf = tf[tf.size()/2], mb = tb[tb.size()/2];
    std::printf("time %s D %3d heads %2d/%2d T %5d B %2d: fwd %.3f ms (%.0f TFLOP/s)  bwd %.3f ms (%.0f TFLOP/s)\n",
        bf16 ? "bf16" : "f32 ", s.D, s.hq, s.hkv, s.T, s.B, mf, fl/mf/1e9, mb, 2.5*fl/mb/1e9);
    free_run(r);
}

int main(int argc, char ** argv) {
    if (argc >= 7 && std::string(argv[1]) == "time") {
        timing({ std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]), std::atoi(argv[6]) },
            argc > 7 && std::string(argv[7]) == "bf16");
        return 0;
    }
    bool ok = true;
    const shape checks[] = {
        { 64, 9, 3, 1, 2 }, { 64, 9, 3, 17, 2 }, { 64, 12, 12, 100, 1 }, { 128, 12, 12, 17, 1 },
        { 128, 4, 2, 130, 2 }, { 64, 9, 3, 257, 1 }, { 64, 2, 1, 1024, 1 },
    };
    for (const shape & s : checks) ok = check(s, false) && ok;
    for (const shape & s : checks) ok = check(s, true) && ok;
    if (argc > 1 && std::string(argv[1]) == "check") return ok ? 0 : 1;
    const shape times[] = {
        { 64, 12, 12, 1024, 16 }, { 64, 9, 3, 1024, 8 }, { 64, 9, 3, 2048, 8 }, { 64, 9, 3, 4096, 8 },
        { 64, 9, 3, 8192, 8 }, { 128, 12, 12, 2048, 4 },
    };
    for (const shape & s : times) { timing(s, false); timing(s, true); }
    return ok ? 0 : 1;
}
