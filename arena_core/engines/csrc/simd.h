/* The vector helpers of Arena's CPU decode kernels (decode_attention.c, decode_glue.c): 16 fp32
 * lanes through GCC/Clang vector extensions (one AVX-512 register with -march=native where the
 * CPU has it, pairs or quads of narrower ones elsewhere), bf16 widened and rounded in registers,
 * and one exp. cpu_kernels.py hashes this header into every kernel's build key. */
#ifndef ARENA_SIMD_H
#define ARENA_SIMD_H
#include <stdint.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

typedef float v16 __attribute__((vector_size(64), aligned(4), may_alias));
typedef int32_t v16i __attribute__((vector_size(64), aligned(4), may_alias));
typedef uint16_t v16h __attribute__((vector_size(32), aligned(2), may_alias));
typedef uint32_t v16u __attribute__((vector_size(64), aligned(4), may_alias));

static inline v16 ld_f32(const float *p) { return *(const v16 *)p; }
static inline void st_f32(float *p, v16 x) { *(v16 *)p = x; }

/* 16 bf16 values as fp32 (bf16 is fp32's top half: a widening and a shift) */
static inline v16 ld_b16(const uint16_t *p) {
#if defined(__AVX512F__)
    /* one widening load and a shift (the generic form compiles to four 256-bit halves) */
    return (v16)_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)),
                                  16);
#else
    v16u u = __builtin_convertvector(*(const v16h *)p, v16u) << 16;
    return (v16)u;
#endif
}

/* fp32 to bf16, round to nearest even as torch's cast (a NaN keeps a NaN bit pattern) */
static inline void st_b16(uint16_t *p, v16 x) {
    v16u u = (v16u)x;
    v16u r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    v16u nan = (v16u)((u & 0x7fffffffu) > 0x7f800000u);
    r = (r & ~nan) | (((u >> 16) | 0x40u) & nan);
    *(v16h *)p = __builtin_convertvector(r, v16h);
}

static inline v16 vsel(v16i m, v16 a, v16 b) { return (v16)(((v16i)a & m) | ((v16i)b & ~m)); }
static inline v16 vmax(v16 a, v16 b) { return vsel(a > b, a, b); }
static inline v16 vmin(v16 a, v16 b) { return vsel(a < b, a, b); }

/* exp(x) for x <= 88: 2^n e^r with a degree-6 polynomial (relative error ~2e-7); below -80
 * exactly 0, so a softmax's masked positions (and SiLU's far tail) never make denormals. */
static inline v16 vexp(v16 x) {
    const v16 z = {0};
    const v16 c = vmin(vmax(x, z - 87.0f), z + 88.0f);
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
#endif
