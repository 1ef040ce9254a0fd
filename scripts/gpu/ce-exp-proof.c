// Exhaustive check for toy-rs patch 0064 (ce_exp in ggml-cuda/cross-entropy-loss-ids.cu):
// for every float x in [-87, 88.7], rintf(x*log2e) and its int conversion (the old code)
// equal (x*log2e + 1.5*2^23) - 1.5*2^23 and the sum's bits less those of 1.5*2^23 (the new
// code), with each product and sum rounded once to nearest even, as the GPU's mul.rn,
// add.rn and cvt.rni do. The rest of ce_exp is unchanged, so its values are the same.
//   cc -O2 -ffp-contract=off -o /tmp/ce-exp-proof scripts/gpu/ce-exp-proof.c -lm && /tmp/ce-exp-proof
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
static float f(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static int32_t bits(float x) { int32_t u; memcpy(&u, &x, 4); return u; }
int main(void) {
    const float L2E = 1.4426950408889634f, big = 12582912.0f;
    uint64_t n = 0, bad = 0;
    for (uint64_t u = 0; u <= 0xFFFFFFFFull; ++u) {
        float x = f((uint32_t) u);
        if (!(x >= -87.0f && x <= 88.7f)) continue; // ce_exp returns 0 below -87; exp overflows above 88.7
        volatile float p = x * L2E;
        float n1 = rintf(p);
        int i1 = (int) n1;
        volatile float t = p + big;
        float n2 = t - big;
        int i2 = bits(t) - bits(big);
        ++n;
        if (n1 != n2 || i1 != i2) { if (bad++ < 5) printf("x=%a n1=%a n2=%a i1=%d i2=%d\n", x, n1, n2, i1, i2); }
    }
    printf("checked %llu floats, %llu differ\n", (unsigned long long) n, (unsigned long long) bad);
    return bad != 0;
}
