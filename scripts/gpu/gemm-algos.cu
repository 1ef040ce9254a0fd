// Time cuBLASLt's heuristic algorithms for GPT-2 124M's head products (bf16 operands, f32 accumulation),
// each candidate on constant operands, median of 15 runs after 3. Build (on the GPU machine, or with
// scripts/gpu/local-cuda-module.sh's toolkit): nvcc -O2 -arch=sm_90a gemm-algos.cu -lcublasLt -o gemm-algos
// Run: ./gemm-algos [V=50304] [N=16384] [K=768]. Constant data draws less power than real
// operands: compare candidates with each other, not with a training step's kernels.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#define CK(x) do { auto e_ = (x); if ((int) e_ != 0) { fprintf(stderr, "%s:%d error %d\n", __FILE__, __LINE__, (int) e_); exit(1); } } while (0)

struct Case { const char * name; cublasOperation_t ta, tb; int m, n, k; cudaDataType_t ctype; };

static float time_algo(cublasLtHandle_t h, cublasLtMatmulDesc_t op, void * A, cublasLtMatrixLayout_t la, void * B, cublasLtMatrixLayout_t lb,
                       void * C, cublasLtMatrixLayout_t lc, const cublasLtMatmulAlgo_t * algo, void * ws, size_t wss, cudaStream_t s, int reps) {
    float alpha = 1.0f, beta = 0.0f;
    for (int i = 0; i < 3; ++i) {
        if (cublasLtMatmul(h, op, &alpha, A, la, B, lb, &beta, C, lc, C, lc, algo, ws, wss, s) != CUBLAS_STATUS_SUCCESS) return -1;
    }
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    std::vector<float> t;
    for (int i = 0; i < reps; ++i) {
        cudaEventRecord(e0, s);
        cublasLtMatmul(h, op, &alpha, A, la, B, lb, &beta, C, lc, C, lc, algo, ws, wss, s);
        cudaEventRecord(e1, s); cudaEventSynchronize(e1);
        float ms; cudaEventElapsedTime(&ms, e0, e1); t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return t[t.size()/2];
}

int main(int argc, char ** argv) {
    const int V = argc > 1 ? atoi(argv[1]) : 50304, N = argc > 2 ? atoi(argv[2]) : 16384, K = argc > 3 ? atoi(argv[3]) : 768;
    // ggml's layouts: W [K, V] (K contiguous), X [K, N], logits [V, N], dlogits [V, N]
    Case cases[] = {
        {"logits = W^T X (bf16 out)", CUBLAS_OP_T, CUBLAS_OP_N, V, N, K, CUDA_R_16BF},
        {"logits = W^T X (f32 out)",  CUBLAS_OP_T, CUBLAS_OP_N, V, N, K, CUDA_R_32F},
        {"dX = W dL (f32 out)",       CUBLAS_OP_N, CUBLAS_OP_N, K, N, V, CUDA_R_32F},
        {"dW = X dL^T (f32 out)",     CUBLAS_OP_N, CUBLAS_OP_T, K, V, N, CUDA_R_32F},
    };
    cublasLtHandle_t h; CK(cublasLtCreate(&h));
    cudaStream_t s; cudaStreamCreate(&s);
    size_t wss = 64u << 20; void * ws; CK(cudaMalloc(&ws, wss));
    size_t big = (size_t) V * N * 4; void *A, *B, *C;
    CK(cudaMalloc(&A, (size_t) std::max(V, N) * K * 2 + (size_t) V * N * 2)); CK(cudaMalloc(&B, (size_t) V * N * 2 + (size_t) K * N * 2)); CK(cudaMalloc(&C, big));
    cudaMemset(A, 0x3c, (size_t) std::max(V, N) * K * 2 + (size_t) V * N * 2); cudaMemset(B, 0x3c, (size_t) V * N * 2 + (size_t) K * N * 2);
    for (const Case & c : cases) {
        cublasLtMatmulDesc_t op; CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &c.ta, sizeof(c.ta)));
        CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &c.tb, sizeof(c.tb)));
        const int ar = c.ta == CUBLAS_OP_N ? c.m : c.k, ac = c.ta == CUBLAS_OP_N ? c.k : c.m;
        const int br = c.tb == CUBLAS_OP_N ? c.k : c.n, bc = c.tb == CUBLAS_OP_N ? c.n : c.k;
        cublasLtMatrixLayout_t la, lb, lc;
        CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, ar, ac, ar));
        CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, br, bc, br));
        CK(cublasLtMatrixLayoutCreate(&lc, c.ctype, c.m, c.n, c.m));
        cublasLtMatmulPreference_t pref; CK(cublasLtMatmulPreferenceCreate(&pref));
        CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wss, sizeof(wss)));
        cublasLtMatmulHeuristicResult_t res[64]; int nres = 0;
        CK(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 64, res, &nres));
        const double flop = 2.0 * c.m * c.n * (double) c.k;
        printf("== %s: m %d n %d k %d, %d heuristic results\n", c.name, c.m, c.n, c.k, nres);
        float best = 1e30f; int ibest = -1;
        for (int i = 0; i < nres; ++i) {
            const float ms = time_algo(h, op, A, la, B, lb, C, lc, &res[i].algo, ws, wss, s, 15);
            int tile = -1, stages = -1, splitk = -1, swz = -1; size_t sz;
            cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &sz);
            cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &sz);
            cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk), &sz);
            cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof(swz), &sz);
            int id = -1; cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &sz);
            printf("  #%2d algo %3d tile %3d stages %3d splitk %2d swz %d ws %8zu: %8.1f us %6.1f TFLOP/s\n", i, id, tile, stages, splitk, swz,
                   res[i].workspaceSize, ms * 1e3, ms > 0 ? flop / (ms * 1e-3) / 1e12 : 0.0);
            if (ms > 0 && ms < best) { best = ms; ibest = i; }
        }
        printf("  best #%d %.1f us vs heuristic #0\n", ibest, best * 1e3);
        cublasLtMatmulPreferenceDestroy(pref); cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulDescDestroy(op);
    }
    return 0;
}
