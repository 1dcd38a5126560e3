/* The elementwise glue of a bf16 decode step, fused: what torch runs as 6-8 small ops, each
 * paying its own dispatch and a pass over memory (RMSNorm alone was ~0.2 ms a call at 64 rows
 * of SmolLM2 with two threads, ~7% of a bf16 decode step).
 *
 * arena_add_rms_norm: h += delta (a product's bf16 output), then bf16(h * rsqrt(mean(h^2) + eps)
 *   * w): the residual add, the RMSNorm and the cast for the next product in one pass.
 * arena_silu_mul: bf16(silu(g) * u) of a fused [gate | up] bf16 product, in fp32.
 * arena_rope_qkv: the rotary of the fused [q | k | v] bf16 product's query and key heads, in
 *   fp32: the queries scaled for attention (fp32), the keys rounded to bf16 for the cache, the
 *   values copied as they are (torch: a cast, a rotate-half of three ops, four more for the
 *   rotary, the scale, transposes and the copies into the cache's dtype).
 * Built by arena_core/rollout/cpu_kernels.py (-O3 -march=native -fopenmp).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <omp.h>
#include "simd.h"

int arena_add_rms_norm(float *h, const uint16_t *delta, const float *w, uint16_t *out,
                       int64_t rows, int64_t width, int64_t sh, int64_t sd, int64_t so,
                       float eps, int threads) {
    if (width % 16 || width <= 0 || rows < 0) return 1;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        float *x = h + r * sh;
        v16 ss = {0};
        for (int64_t i = 0; i < width; i += 16) {
            v16 v = ld_f32(x + i);
            if (delta) {
                v += ld_b16(delta + r * sd + i);
                st_f32(x + i, v);
            }
            ss += v * v;
        }
        float sum = 0.0f;
        for (int k = 0; k < 16; ++k) sum += ss[k];
        const float inv = 1.0f / sqrtf(sum / (float)width + eps);
        uint16_t *o = out + r * so;
        for (int64_t i = 0; i < width; i += 16) st_b16(o + i, (ld_f32(x + i) * inv) * ld_f32(w + i));
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

/* qkv [rows, (H + 2 KV) * D] bf16 (rows sq apart); cos, sin [rows, D] fp32 (rows sc apart, the
 * model's rotary: both halves' angles, any attention scaling applied); q [rows, H, D] fp32 =
 * rotary(q) * scale; k [rows, KV, D] bf16 = rotary(k); v [rows, KV, D] bf16 = v. Rotary as
 * transformers' Llama: x * cos + rotate_half(x) * sin, rotate_half(x) = (-x2, x1), each product
 * and the sum rounded as torch rounds them (no fused multiply-add): the same bits as torch's ops,
 * so the decode samples what it sampled before. */
__attribute__((optimize("fp-contract=off"))) int arena_rope_qkv(const uint16_t *qkv, const float *cos, const float *sin, float *q,
                   uint16_t *k, uint16_t *v, int64_t rows, int64_t H, int64_t KV, int64_t D,
                   int64_t sq, int64_t sc, float scale, int threads) {
    const int64_t half = D / 2;
    if (D <= 0 || half % 16 || rows < 0 || H <= 0 || KV <= 0) return 1;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const uint16_t *x = qkv + r * sq;
        const float *c = cos + r * sc, *s = sin + r * sc;
        for (int64_t hd = 0; hd < H + KV; ++hd, x += D) {
            for (int64_t i = 0; i < half; i += 16) {
                const v16 x1 = ld_b16(x + i), x2 = ld_b16(x + half + i);
                const v16 o1 = x1 * ld_f32(c + i) + (-x2) * ld_f32(s + i);
                const v16 o2 = x2 * ld_f32(c + half + i) + x1 * ld_f32(s + half + i);
                if (hd < H) {
                    float *o = q + (r * H + hd) * D;
                    st_f32(o + i, o1 * scale);
                    st_f32(o + half + i, o2 * scale);
                } else {
                    uint16_t *o = k + (r * KV + hd - H) * D;
                    st_b16(o + i, o1);
                    st_b16(o + half + i, o2);
                }
            }
        }
        memcpy(v + r * KV * D, x, sizeof(uint16_t) * KV * D);
    }
    return 0;
}
