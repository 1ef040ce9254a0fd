// Check and time patches 0096 and 0097's kernels (toy-sk-kernel.cuh, toy-skm-kernel.cuh)
// without ggml: against an f64 reference of the same bf16 operands, and against cuBLAS's GEMM
// of the same product as ggml calls it (cublasGemmEx), at SmolLM2-135M's LoRA shapes (d 576,
// d_ff 1536, kv 192, rank 16, 4096 tokens) and at edge shapes (tails, narrow sides 8-32):
// 0096's out_prod dA/dB (N/T, f32 C), 0097's A*x (T/N, bf16 C) and B^T*dy (N/N, bf16 C).
//
// The kernels did not land (bench/results.md, stop 73): apply skinny-candidates.diff (beside this
// file) to the patched ggml, then
//   nvcc -O3 -std=c++17 -arch=sm_90a -I <that ggml>/src/ggml-cuda \
//        out-prod-skinny-test.cu -lcublas -o sk-test && ./sk-test
//
// Prints one line per case: max |error| / max |reference| (for beta 0 and beta 1 where it applies),
// and the median GPU microseconds of each side a call (calls captured in a CUDA graph). Exits 1
// where an error exceeds its bound.
#include "toy-sk-kernel.cuh"
#include "toy-skm-kernel.cuh"

#include <cublas_v2.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(2); } } while (0)
#define CB(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { printf("%s: %d\n", #x, (int) s_); exit(2); } } while (0)

struct Case { int m, n, k; const char * what; };

static cudaStream_t g_stream; // every launch and cuBLAS call, so that timing captures them in a graph

// ggml's out_prod: C[i + j*ldc] = alpha*sum_k A[i + k*m]*B[j + k*n] + beta*C (m = ne0, n = ne1)
static cudaError_t run_sk(const nv_bfloat16 * a, const nv_bfloat16 * b, float * c, const Case & t, float beta) {
    if (t.n <= 32) {
        return t.n <= 16 ? toy_sk_launch<16>(a, t.m, t.m, b, t.n, t.n, t.k, c, 1, t.m, 1.0f, beta, g_stream)
                         : toy_sk_launch<32>(a, t.m, t.m, b, t.n, t.n, t.k, c, 1, t.m, 1.0f, beta, g_stream);
    }
    return t.m <= 16 ? toy_sk_launch<16>(b, t.n, t.n, a, t.m, t.m, t.k, c, t.m, 1, 1.0f, beta, g_stream)
                     : toy_sk_launch<32>(b, t.n, t.n, a, t.m, t.m, t.k, c, t.m, 1, 1.0f, beta, g_stream);
}

static void run_cublas(cublasHandle_t h, const nv_bfloat16 * a, const nv_bfloat16 * b, float * c, const Case & t, float beta) {
    const float one = 1.0f;
    CB(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, t.m, t.n, t.k, &one, a, CUDA_R_16BF, t.m, b, CUDA_R_16BF, t.n,
                    &beta, c, CUDA_R_32F, t.m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
}

// Median GPU microseconds of one call of f: 100 calls captured in a CUDA graph (as ggml runs a
// step), the graph launched 7 times. Launched one by one, the host's launch cost (cuBLAS's
// heuristics above all) would be timed instead of the GPU's.
template <class F> static float median_us(F f) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < 100; ++i) f();
    CK(cudaStreamEndCapture(g_stream, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaGraphLaunch(exec, g_stream)); // warm-up
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> us;
    for (int r = 0; r < 7; ++r) {
        CK(cudaEventRecord(e0, g_stream));
        CK(cudaGraphLaunch(exec, g_stream));
        CK(cudaEventRecord(e1, g_stream));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        us.push_back(ms*1000.0f/100);
    }
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    std::sort(us.begin(), us.end());
    return us[3];
}

// 0097: D [m, N] = P [m, K] Q^T, Q(j, k) = q[k + j*K]; P row-major (A*x: A [K, m] as ggml's
// src0, P(i, k) = a[k + i*K]) or k-major (B^T*dy: P(i, k) = b[i + k*m]).
struct SkmCase { int m, N, K; bool pk, bf16; const char * what; };

template <int MP, bool PK> static void skm_attr() {
    CK(cudaFuncSetAttribute(k_toy_skinny_mm<MP, PK, nv_bfloat16>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200*1024));
    CK(cudaFuncSetAttribute(k_toy_skinny_mm<MP, PK, float>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200*1024));
}

template <int MP, bool PK> static cudaError_t skm_go(const nv_bfloat16 * p, const nv_bfloat16 * q, void * d, const SkmCase & t) {
    const int64_t si = PK ? 1 : t.K, sk = PK ? t.m : 1;
    return t.bf16 ? toy_skm_launch<MP, PK, nv_bfloat16>(p, si, sk, t.m, q, t.K, t.N, t.K, (nv_bfloat16 *) d, t.m, 1.0f, g_stream)
                  : toy_skm_launch<MP, PK, float>(p, si, sk, t.m, q, t.K, t.N, t.K, (float *) d, t.m, 1.0f, g_stream);
}

static cudaError_t run_skm(const nv_bfloat16 * p, const nv_bfloat16 * q, void * d, const SkmCase & t) {
    if (t.m <= 16) return t.pk ? skm_go<16, true>(p, q, d, t) : skm_go<16, false>(p, q, d, t);
    return t.pk ? skm_go<32, true>(p, q, d, t) : skm_go<32, false>(p, q, d, t);
}

static int skm_cases(cublasHandle_t h, std::mt19937 & rng) {
    skm_attr<16, true>(); skm_attr<16, false>(); skm_attr<32, true>(); skm_attr<32, false>();
    const SkmCase cases[] = {
        {16, 4096, 576, false, true, "A*x, in 576"}, {16, 4096, 1536, false, true, "A*x, in 1536"},
        {16, 4096, 1536, true, true, "B^T*dy, out 1536"}, {16, 4096, 576, true, true, "B^T*dy, out 576"},
        {16, 4096, 192, true, true, "B^T*dy, out 192"}, {24, 1000, 40, false, false, "m 24, tails, f32"},
        {8, 300, 104, true, true, "m 8, k-major, tails"}, {32, 512, 576, true, false, "m 32, k-major, f32"},
        {32, 777, 264, false, true, "m 32, row-major, tails"},
    };
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    int bad = 0;
    for (const SkmCase & t : cases) {
        std::vector<nv_bfloat16> hp((size_t) t.m*t.K), hq((size_t) t.K*t.N);
        for (auto & x : hp) x = __float2bfloat16(dist(rng));
        for (auto & x : hq) x = __float2bfloat16(dist(rng));
        auto P = [&](int i, int k) { return (double) __bfloat162float(t.pk ? hp[(size_t) i + (size_t) k*t.m] : hp[(size_t) k + (size_t) i*t.K]); };
        std::vector<double> ref((size_t) t.m*t.N, 0.0);
        for (int j = 0; j < t.N; ++j) for (int i = 0; i < t.m; ++i) {
            double s = 0.0;
            for (int k = 0; k < t.K; ++k) s += P(i, k)*(double) __bfloat162float(hq[(size_t) k + (size_t) j*t.K]);
            ref[(size_t) i + (size_t) j*t.m] = s;
        }
        nv_bfloat16 *dp, *dq;
        void * dd;
        const size_t es = t.bf16 ? 2 : 4;
        CK(cudaMalloc(&dp, hp.size()*2));
        CK(cudaMalloc(&dq, hq.size()*2));
        CK(cudaMalloc(&dd, ref.size()*es));
        CK(cudaMemcpy(dp, hp.data(), hp.size()*2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dq, hq.data(), hq.size()*2, cudaMemcpyHostToDevice));
        CK(cudaMemset(dd, 0xff, ref.size()*es)); // NaN where a value is not written
        CK(run_skm(dp, dq, dd, t));
        CK(cudaDeviceSynchronize());
        std::vector<unsigned char> raw(ref.size()*es);
        CK(cudaMemcpy(raw.data(), dd, raw.size(), cudaMemcpyDeviceToHost));
        double e = 0.0, mx = 0.0;
        for (size_t i = 0; i < ref.size(); ++i) {
            const double got = t.bf16 ? (double) __bfloat162float(((nv_bfloat16 *) raw.data())[i]) : (double) ((float *) raw.data())[i];
            const double d = std::fabs(got - ref[i]);
            e = std::isnan(d) ? INFINITY : std::max(e, d);
            mx = std::max(mx, std::fabs(ref[i]));
        }
        e /= mx;
        const float one = 1.0f, zero = 0.0f;
        const cudaDataType_t ct = t.bf16 ? CUDA_R_16BF : CUDA_R_32F;
        const float us_k = median_us([&] { CK(run_skm(dp, dq, dd, t)); });
        const float us_c = median_us([&] {
            CB(cublasGemmEx(h, t.pk ? CUBLAS_OP_N : CUBLAS_OP_T, CUBLAS_OP_N, t.m, t.N, t.K, &one, dp, CUDA_R_16BF, t.pk ? t.m : t.K,
                            dq, CUDA_R_16BF, t.K, &zero, dd, ct, t.m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
        });
        // a bf16 result is within half its unit in the last place (2^-9 relative) of the f32 sum
        const bool ok = e <= (t.bf16 ? 4e-3 : 1e-5);
        bad += !ok;
        printf("%-22s m %5d N %5d K %5d  err %.2e  0097 %7.2f us  cuBLAS %7.2f us  ratio %.3f %s\n", t.what, t.m, t.N, t.K, e,
               us_k, us_c, us_k/us_c, ok ? "ok" : "FAIL");
        CK(cudaFree(dp));
        CK(cudaFree(dq));
        CK(cudaFree(dd));
    }
    return bad;
}

int main() {
    for (int sp : {16, 32}) {
        const size_t bytes = sp == 16 ? toy_sk_smem<16>::bytes : toy_sk_smem<32>::bytes;
        CK(sp == 16 ? cudaFuncSetAttribute(k_toy_out_prod_skinny<16>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int) bytes)
                    : cudaFuncSetAttribute(k_toy_out_prod_skinny<32>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int) bytes));
    }
    CK(cudaStreamCreate(&g_stream));
    cublasHandle_t h;
    CB(cublasCreate(&h));
    CB(cublasSetStream(h, g_stream));
    void * ws;
    CK(cudaMalloc(&ws, 32 << 20));
    CB(cublasSetWorkspace(h, ws, 32 << 20)); // graph capture: no allocations of its own
    const Case cases[] = {
        {576, 16, 4096, "dA q/k/v/o/gate/up"}, {1536, 16, 4096, "dA down"}, {16, 576, 4096, "dB q/o/down"},
        {16, 192, 4096, "dB k/v"}, {16, 1536, 4096, "dB gate/up"}, {200, 8, 1000, "tails, S 8"},
        {24, 328, 777, "S 24, K tail"}, {32, 64, 256, "S 32, K 256"}, {768, 32, 16384, "S 32, K 16384"},
        {16, 3072, 2048, "dB, L 3072"},
    };
    int bad = 0;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (const Case & t : cases) {
        std::vector<nv_bfloat16> ha((size_t) t.m*t.k), hb((size_t) t.n*t.k);
        std::vector<float> hc((size_t) t.m*t.n);
        for (auto & x : ha) x = __float2bfloat16(dist(rng));
        for (auto & x : hb) x = __float2bfloat16(dist(rng));
        for (auto & x : hc) x = dist(rng);
        std::vector<double> ref((size_t) t.m*t.n, 0.0);
        for (int k = 0; k < t.k; ++k) {
            for (int j = 0; j < t.n; ++j) {
                const double bj = __bfloat162float(hb[(size_t) j + (size_t) k*t.n]);
                for (int i = 0; i < t.m; ++i) {
                    ref[(size_t) i + (size_t) j*t.m] += (double) __bfloat162float(ha[(size_t) i + (size_t) k*t.m])*bj;
                }
            }
        }
        nv_bfloat16 *da, *db;
        float *dc;
        CK(cudaMalloc(&da, ha.size()*2));
        CK(cudaMalloc(&db, hb.size()*2));
        CK(cudaMalloc(&dc, hc.size()*4));
        CK(cudaMemcpy(da, ha.data(), ha.size()*2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(db, hb.data(), hb.size()*2, cudaMemcpyHostToDevice));
        double err[2];
        for (int beta = 0; beta < 2; ++beta) {
            CK(cudaMemcpy(dc, hc.data(), hc.size()*4, cudaMemcpyHostToDevice));
            CK(run_sk(da, db, dc, t, (float) beta));
            CK(cudaDeviceSynchronize());
            std::vector<float> out(hc.size());
            CK(cudaMemcpy(out.data(), dc, out.size()*4, cudaMemcpyDeviceToHost));
            double e = 0.0, mx = 0.0;
            for (size_t i = 0; i < out.size(); ++i) {
                const double r = ref[i] + beta*(double) hc[i];
                e = std::max(e, std::fabs(out[i] - r));
                mx = std::max(mx, std::fabs(r));
            }
            err[beta] = e/mx;
        }
        const float us_sk = median_us([&] { CK(run_sk(da, db, dc, t, 0.0f)); });
        const float us_cb = median_us([&] { run_cublas(h, da, db, dc, t, 0.0f); });
        const bool ok = err[0] <= 1e-5 && err[1] <= 1e-5;
        bad += !ok;
        printf("%-22s m %5d n %5d k %5d  err %.2e %.2e  0096 %7.2f us  cuBLAS %7.2f us  ratio %.3f %s\n", t.what, t.m, t.n,
               t.k, err[0], err[1], us_sk, us_cb, us_sk/us_cb, ok ? "ok" : "FAIL");
        CK(cudaFree(da));
        CK(cudaFree(db));
        CK(cudaFree(dc));
    }
    bad += skm_cases(h, rng);
    return bad ? 1 : 0;
}
