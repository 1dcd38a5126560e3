/* The elementwise glue of a bf16 decode step, fused: what torch runs as 6-8 small ops, each
 * paying its own dispatch and a pass over memory (RMSNorm alone was ~0.2 ms a call at 64 rows
 * of SmolLM2 with two threads, ~7% of a bf16 decode step).
 *
 * arena_add_rms_norm: h += delta (a product's bf16 output), then bf16(h * rsqrt(mean(h^2) + eps)
 *   * w): the residual add, the RMSNorm and the cast for the next product in one pass.
 * arena_silu_mul: bf16(silu(g) * u) of a fused [gate | up] bf16 product, in fp32.
 * Built by arena_core/rollout/cpu_kernels.py (-O3 -march=native -fopenmp).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <omp.h>

typedef float v16 __attribute__((vector_size(64), aligned(4), may_alias));
typedef int32_t v16i __attribute__((vector_size(64), aligned(4), may_alias));
typedef uint16_t v16h __attribute__((vector_size(32), aligned(2), may_alias));
typedef uint32_t v16u __attribute__((vector_size(64), aligned(4), may_alias));

static inline v16 ld(const float *p) { return *(const v16 *)p; }
static inline void st(float *p, v16 x) { *(v16 *)p = x; }
static inline v16 ld_b16(const uint16_t *p) {
    v16u u = __builtin_convertvector(*(const v16h *)p, v16u) << 16;
    return (v16)u;
}
/* round to nearest even, as torch's float -> bfloat16 (no NaN in a decode's activations; a NaN
 * keeps a NaN bit pattern) */
static inline void st_b16(uint16_t *p, v16 x) {
    v16u u = (v16u)x;
    v16u r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    v16u nan = (v16u)((u & 0x7fffffffu) > 0x7f800000u);
    r = (r & ~nan) | (((u >> 16) | 0x40u) & nan);
    *(v16h *)p = __builtin_convertvector(r, v16h);
}
static inline v16 vsel(v16i m, v16 a, v16 b) { return (v16)(((v16i)a & m) | ((v16i)b & ~m)); }
static inline v16 vexp(v16 x) { /* exp(x), |x| <= 88; relative error ~2e-7 */
    const v16 z = {0};
    v16 c = vsel(x < z - 87.0f, z - 87.0f, x);
    c = vsel(c > z + 88.0f, z + 88.0f, c);
    v16 n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    v16 r = c - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    v16 p = z + 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    p = p * r * r + r + 1.0f;
    v16i e = (__builtin_convertvector(n, v16i) + 127) << 23;
    return vsel(x > z - 80.0f, p * (v16)e, z);
}

int arena_add_rms_norm(float *h, const uint16_t *delta, const float *w, uint16_t *out,
                       int64_t rows, int64_t width, int64_t sh, int64_t sd, int64_t so,
                       float eps, int threads) {
    if (width % 16 || width <= 0 || rows < 0) return 1;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        float *x = h + r * sh;
        v16 ss = {0};
        for (int64_t i = 0; i < width; i += 16) {
            v16 v = ld(x + i);
            if (delta) {
                v += ld_b16(delta + r * sd + i);
                st(x + i, v);
            }
            ss += v * v;
        }
        float sum = 0.0f;
        for (int k = 0; k < 16; ++k) sum += ss[k];
        const float inv = 1.0f / sqrtf(sum / (float)width + eps);
        uint16_t *o = out + r * so;
        for (int64_t i = 0; i < width; i += 16) st_b16(o + i, (ld(x + i) * inv) * ld(w + i));
    }
    return 0;
}

int arena_silu_mul(const uint16_t *gate_up, uint16_t *out, int64_t rows, int64_t inner,
                   int64_t sg, int64_t so, int threads) {
    if (inner % 16 || inner <= 0 || rows < 0) return 1;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const uint16_t *g = gate_up + r * sg, *u = g + inner;
        uint16_t *o = out + r * so;
        for (int64_t i = 0; i < inner; i += 16) {
            const v16 x = ld_b16(g + i);
            st_b16(o + i, (x / (1.0f + vexp(-x))) * ld_b16(u + i));
        }
    }
    return 0;
}
