/* One decode step's attention on the CPU: one new query position per row against the row's KV
 * cache, GQA (the query heads of a KV head share its keys), fp32 or bf16 cache, fp32 math.
 *
 * Why a kernel: with a bf16 cache, torch's CPU bmm is slower than its fp32 one at these shapes
 * (3 query heads against a few hundred positions), so halving the cache's bytes gained nothing
 * through torch ops; this loop reads each key and value once per KV head, converts bf16 to fp32
 * in registers and keeps the scores, softmax and weighted sum in fp32.
 *
 * Layout: keys transposed, K^T[row, kv_head, dim, position] (positions contiguous: a block of
 * 64 positions is four vector loads per dimension), values V[row, kv_head, position, dim].
 * Threads: OpenMP, so a process that loaded torch's libgomp runs it on torch's own pool.
 * Built by arena_core/rollout/cpu_attention.py with the host's compiler (-march=native).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

typedef float v16 __attribute__((vector_size(64), aligned(4), may_alias));
typedef int32_t v16i __attribute__((vector_size(64), aligned(4), may_alias));
typedef uint16_t v16h __attribute__((vector_size(32), aligned(2), may_alias));
typedef uint32_t v16u __attribute__((vector_size(64)));

static inline v16 ld_f32(const float *p) { return *(const v16 *)p; }
static inline void st_f32(float *p, v16 x) { *(v16 *)p = x; }
static inline v16 ld_b16(const uint16_t *p) {
    v16h h = *(const v16h *)p;
    v16u u = __builtin_convertvector(h, v16u) << 16;
    return (v16)u;
}
static inline v16 vsel(v16i m, v16 a, v16 b) { return (v16)(((v16i)a & m) | ((v16i)b & ~m)); }
static inline v16 vmax(v16 a, v16 b) { return vsel(a > b, a, b); }

/* exp(x) for x <= 0 (a softmax's shifted scores): 2^n e^r with a degree-6 polynomial (relative
 * error ~2e-7); below -80 exactly 0, so masked positions never make denormals. */
static inline v16 vexp(v16 x) {
    const v16 z = {0};
    const v16 c = vmax(x, z - 87.0f);
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

/* NH heads' scores (q: NH rows of D, pre-scaled) against 64 positions of K^T (D rows `ld`
 * apart), written to s (NH rows `TP` apart). */
#define SCORES(NAME, TYPE, LD, NH)                                                             \
    static inline void NAME(const float *q, int64_t D, const TYPE *kr, int64_t ld, float *s,   \
                            int64_t TP) {                                                      \
        v16 a[NH][4];                                                                          \
        for (int h = 0; h < NH; ++h)                                                           \
            for (int i = 0; i < 4; ++i) a[h][i] = (v16){0};                                    \
        for (int64_t d = 0; d < D; ++d, kr += ld) {                                            \
            const v16 k0 = LD(kr), k1 = LD(kr + 16), k2 = LD(kr + 32), k3 = LD(kr + 48);       \
            for (int h = 0; h < NH; ++h) {                                                     \
                const float qv = q[h * D + d];                                                 \
                a[h][0] += qv * k0; a[h][1] += qv * k1; a[h][2] += qv * k2; a[h][3] += qv * k3; \
            }                                                                                  \
        }                                                                                      \
        for (int h = 0; h < NH; ++h)                                                           \
            for (int i = 0; i < 4; ++i) st_f32(s + h * TP + 16 * i, a[h][i]);                  \
    }

/* out[h, 0:64] = sum_t p[h, t] V[t, 0:64] for NH heads (p: NH rows `TP` apart). */
#define PV(NAME, TYPE, LD, NH)                                                                 \
    static inline void NAME(const float *p, int64_t TP, int64_t T, const TYPE *vr, int64_t svt, \
                            float *out, int64_t D) {                                           \
        v16 a[NH][4];                                                                          \
        for (int h = 0; h < NH; ++h)                                                           \
            for (int i = 0; i < 4; ++i) a[h][i] = (v16){0};                                    \
        for (int64_t t = 0; t < T; ++t, vr += svt) {                                           \
            const v16 x0 = LD(vr), x1 = LD(vr + 16), x2 = LD(vr + 32), x3 = LD(vr + 48);       \
            for (int h = 0; h < NH; ++h) {                                                     \
                const float w = p[h * TP + t];                                                 \
                a[h][0] += w * x0; a[h][1] += w * x1; a[h][2] += w * x2; a[h][3] += w * x3;    \
            }                                                                                  \
        }                                                                                      \
        for (int h = 0; h < NH; ++h)                                                           \
            for (int i = 0; i < 4; ++i) st_f32(out + h * D + 16 * i, a[h][i]);                 \
    }

#define FAMILY(SUF, TYPE, LD)                                                                  \
    SCORES(sc1_##SUF, TYPE, LD, 1) SCORES(sc2_##SUF, TYPE, LD, 2)                              \
    SCORES(sc3_##SUF, TYPE, LD, 3) SCORES(sc4_##SUF, TYPE, LD, 4)                              \
    PV(pv1_##SUF, TYPE, LD, 1) PV(pv2_##SUF, TYPE, LD, 2)                                      \
    PV(pv3_##SUF, TYPE, LD, 3) PV(pv4_##SUF, TYPE, LD, 4)
FAMILY(f32, float, ld_f32)
FAMILY(b16, uint16_t, ld_b16)

typedef struct {
    const float *q; const void *k; const void *v; const float *bias; float *out;
    int64_t G, KV, D, T, skr, skh, skd, svr, svh, svt, sbr;
    const void *ks; int64_t TS, ssr, ssh, sst;
    float scale; int64_t start, end;
} job_t;

/* the newest positions' keys, not yet transposed into K^T (a staging block [TS, D]): one dot
 * product per head and position */
#define STAGED(NAME, TYPE, LD)                                                                 \
    static inline void NAME(const float *q, int64_t G, int64_t D, const TYPE *kr, int64_t TS,  \
                            int64_t sst, float *s, int64_t TP) {                               \
        for (int64_t t = 0; t < TS; ++t, kr += sst)                                            \
            for (int64_t h = 0; h < G; ++h) {                                                  \
                v16 acc = {0};                                                                 \
                for (int64_t d = 0; d < D; d += 16) acc += ld_f32(q + h * D + d) * LD(kr + d); \
                float dot = 0.0f;                                                              \
                for (int x = 0; x < 16; ++x) dot += acc[x];                                    \
                s[h * TP + t] = dot;                                                           \
            }                                                                                  \
    }
STAGED(staged_f32, float, ld_f32)
STAGED(staged_b16, uint16_t, ld_b16)

/* softmax over T scores of each of G heads, in place; the additive bias (0 or -inf per
 * position, the row's mask) first; positions T..TP (block padding) get weight 0 */
static void softmax_heads(float *sc, int64_t G, int64_t T, int64_t TP, const float *bias) {
    for (int64_t h = 0; h < G; ++h) {
        float *s = sc + h * TP;
        if (bias)
            for (int64_t t = 0; t < T; ++t) s[t] += bias[t];
        for (int64_t t = T; t < TP; ++t) s[t] = -1e30f;
        v16 m = ld_f32(s);
        for (int64_t t = 16; t < TP; t += 16) m = vmax(ld_f32(s + t), m);
        float mx = m[0];
        for (int x = 1; x < 16; ++x) mx = m[x] > mx ? m[x] : mx;
        if (!(mx > -1e29f)) mx = 0.0f; /* every position masked: all weights 0, output 0 */
        v16 sum = {0};
        for (int64_t t = 0; t < TP; t += 16) {
            v16 e = vexp(ld_f32(s + t) - mx);
            st_f32(s + t, e);
            sum += e;
        }
        float tot = 0.0f;
        for (int x = 0; x < 16; ++x) tot += sum[x];
        const float inv = tot > 0.0f ? 1.0f / tot : 0.0f;
        for (int64_t t = 0; t < TP; t += 16) st_f32(s + t, ld_f32(s + t) * inv);
    }
}

#define JOB(NAME, TYPE, SUF)                                                                   \
    static int NAME(const job_t *j) {                                                          \
        const int64_t G = j->G, D = j->D, T = j->T, KV = j->KV, TA = T + j->TS;               \
        const int64_t TP = (TA + 63) & ~(int64_t)63;                                           \
        float *sc = (float *)malloc(sizeof(float) * (G * TP + G * D));                         \
        TYPE *tail = (TYPE *)calloc((size_t)(D * 64), sizeof(TYPE));                           \
        if (!sc || !tail) { free(sc); free(tail); return 1; }                                  \
        float *qs = sc + G * TP;                                                               \
        const TYPE *K = (const TYPE *)j->k, *V = (const TYPE *)j->v;                           \
        for (int64_t it = j->start; it < j->end; ++it) {                                       \
            const int64_t r = it / KV, g = it % KV;                                            \
            const float *q = j->q + (r * KV + g) * G * D;                                      \
            for (int64_t x = 0; x < G * D; ++x) qs[x] = q[x] * j->scale;                       \
            const TYPE *kp = K + r * j->skr + g * j->skh, *vp = V + r * j->svr + g * j->svh;   \
            for (int64_t tb = 0; tb < T; tb += 64) {                                           \
                const TYPE *kr = kp + tb;                                                      \
                int64_t ld = j->skd;                                                           \
                if (tb + 64 > T) { /* last block: the valid positions, zero-padded */          \
                    for (int64_t d = 0; d < D; ++d) {                                          \
                        memcpy(tail + d * 64, kp + d * j->skd + tb, sizeof(TYPE) * (T - tb));  \
                        memset(tail + d * 64 + (T - tb), 0, sizeof(TYPE) * (64 - (T - tb)));   \
                    }                                                                          \
                    kr = tail; ld = 64;                                                        \
                }                                                                              \
                for (int64_t h0 = 0; h0 < G; h0 += 4) {                                        \
                    const float *qh = qs + h0 * D;                                             \
                    float *s = sc + h0 * TP + tb;                                              \
                    switch (G - h0 < 4 ? G - h0 : 4) {                                         \
                    case 1: sc1_##SUF(qh, D, kr, ld, s, TP); break;                            \
                    case 2: sc2_##SUF(qh, D, kr, ld, s, TP); break;                            \
                    case 3: sc3_##SUF(qh, D, kr, ld, s, TP); break;                            \
                    default: sc4_##SUF(qh, D, kr, ld, s, TP);                                  \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
            if (j->TS) /* after the blocks: the last one writes zeros past T */                \
                staged_##SUF(qs, G, D, (const TYPE *)j->ks + r * j->ssr + g * j->ssh, j->TS,   \
                             j->sst, sc + T, TP);                                              \
            softmax_heads(sc, G, TA, TP, j->bias ? j->bias + r * j->sbr : 0);                  \
            float *out = j->out + (r * KV + g) * G * D;                                        \
            for (int64_t h0 = 0; h0 < G; h0 += 4)                                              \
                for (int64_t d0 = 0; d0 < D; d0 += 64) {                                       \
                    const float *p = sc + h0 * TP;                                             \
                    const TYPE *vr = vp + d0;                                                  \
                    float *o = out + h0 * D + d0;                                              \
                    switch (G - h0 < 4 ? G - h0 : 4) {                                         \
                    case 1: pv1_##SUF(p, TP, TA, vr, j->svt, o, D); break;                     \
                    case 2: pv2_##SUF(p, TP, TA, vr, j->svt, o, D); break;                     \
                    case 3: pv3_##SUF(p, TP, TA, vr, j->svt, o, D); break;                     \
                    default: pv4_##SUF(p, TP, TA, vr, j->svt, o, D);                           \
                    }                                                                          \
                }                                                                              \
        }                                                                                      \
        free(sc);                                                                              \
        free(tail);                                                                            \
        return 0;                                                                              \
    }
JOB(job_f32, float, f32)
JOB(job_b16, uint16_t, b16)

/* q [R, KV*G, D] fp32 contiguous; K^T [R, KV, D, >= T] for the first T positions and the
 * staged keys ks [R, KV, TS, D] for the next TS (ks may be NULL with TS = 0); V [R, KV, T + TS,
 * D]; all by element strides, last dim contiguous; bias [R, >= T + TS] fp32 additive or NULL;
 * out [R, KV*G, D] fp32. dtype 0 = fp32 cache, 1 = bf16.
 * Returns 0, or 1 when the shapes are outside what the kernel handles or scratch memory ran
 * out (the caller falls back). */
int arena_decode_attention(const float *q, const void *k, const void *v, const float *bias,
                           float *out, int64_t R, int64_t KV, int64_t G, int64_t D, int64_t T,
                           int64_t skr, int64_t skh, int64_t skd, int64_t svr, int64_t svh,
                           int64_t svt, int64_t sbr, const void *ks, int64_t TS, int64_t ssr,
                           int64_t ssh, int64_t sst, float scale, int dtype, int threads) {
    if (D % 64 || D <= 0 || T < 0 || TS < 0 || T + TS <= 0 || G <= 0 || KV <= 0 || R <= 0 ||
        (TS && !ks) || (dtype != 0 && dtype != 1))
        return 1;
    const int64_t items = R * KV;
    int failed = 0;
    if (threads < 1) threads = 1;
    if (threads > items) threads = (int)items;
#pragma omp parallel num_threads(threads)
    {
#if defined(__x86_64__)
        const unsigned csr = _mm_getcsr();
        _mm_setcsr(csr | 0x8040); /* flush denormals: tiny weights times values */
#endif
        const int64_t n = omp_get_num_threads(), i = omp_get_thread_num();
        job_t j = {q, k, v, bias, out, G, KV, D, T, skr, skh, skd, svr, svh, svt, sbr,
                   ks, TS, ssr, ssh, sst, scale, items * i / n, items * (i + 1) / n};
        if (dtype == 0 ? job_f32(&j) : job_b16(&j)) failed = 1;
#if defined(__x86_64__)
        _mm_setcsr(csr);
#endif
    }
    return failed;
}
