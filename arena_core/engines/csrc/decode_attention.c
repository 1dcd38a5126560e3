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
 * Built by arena_core/engines/cpu_attention.py with the host's compiler (-march=native).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "simd.h"

/* NH heads' scores (q: NH rows of D, pre-scaled) against 64 positions of K^T (D rows `ld`
 * apart), written to s (NH rows `TP` apart). (Loading only the vectors a short last block needs,
 * with line-aligned rows, measured 0.97x in the engine: the whole block stays.) */
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

/* out[h, 0:64] = sum_t p[h, t] V[t, 0:64] for NH heads (p: NH rows `TP` apart); with `add`, added
 * to what out holds (the prefix's part of a cascade: the same sum, continued in order). */
#define PV(NAME, TYPE, LD, NH)                                                                 \
    static inline void NAME(const float *p, int64_t TP, int64_t T, const TYPE *vr, int64_t svt, \
                            float *out, int64_t D, int add) {                                  \
        v16 a[NH][4];                                                                          \
        for (int h = 0; h < NH; ++h)                                                           \
            for (int i = 0; i < 4; ++i)                                                        \
                a[h][i] = add ? ld_f32(out + h * D + 16 * i) : (v16){0};                       \
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
    PV(pv3_##SUF, TYPE, LD, 3) PV(pv4_##SUF, TYPE, LD, 4)                                      \
    /* NH (1-4) heads' scores, or their weighted values */                                    \
    static inline void scores_##SUF(int64_t nh, const float *q, int64_t D, const TYPE *kr,     \
                                    int64_t ld, float *s, int64_t TP) {                        \
        switch (nh) {                                                                          \
        case 1: sc1_##SUF(q, D, kr, ld, s, TP); break;                                         \
        case 2: sc2_##SUF(q, D, kr, ld, s, TP); break;                                         \
        case 3: sc3_##SUF(q, D, kr, ld, s, TP); break;                                         \
        default: sc4_##SUF(q, D, kr, ld, s, TP);                                               \
        }                                                                                      \
    }                                                                                          \
    static inline void values_##SUF(int64_t nh, const float *p, int64_t TP, int64_t T,         \
                                    const TYPE *vr, int64_t svt, float *o, int64_t D,          \
                                    int add) {                                                 \
        switch (nh) {                                                                          \
        case 1: pv1_##SUF(p, TP, T, vr, svt, o, D, add); break;                                \
        case 2: pv2_##SUF(p, TP, T, vr, svt, o, D, add); break;                                \
        case 3: pv3_##SUF(p, TP, T, vr, svt, o, D, add); break;                                \
        default: pv4_##SUF(p, TP, T, vr, svt, o, D, add);                                      \
        }                                                                                      \
    }
FAMILY(f32, float, ld_f32)
FAMILY(b16, uint16_t, ld_b16)

typedef struct {
    const float *q; const void *k; const void *v; const float *bias; float *out;
    int64_t G, KV, D, T, skr, skh, skd, svr, svh, svt, sbr;
    const void *ks; int64_t TS, ssr, ssh, sst;
    const int64_t *order, *starts; int64_t P; /* cascade groups (order NULL: none) */
    int64_t klimit; /* elements readable from k on (K^T blocks may read past T up to there) */
    float scale;
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

/* softmax over T scores of each of G heads (rows `stride` apart), in place; the additive bias
 * (0 or -inf per position, the row's mask) first; positions T..TP (block padding) get weight 0 */
static void softmax_heads(float *sc, int64_t G, int64_t T, int64_t TP, int64_t stride,
                          const float *bias) {
    for (int64_t h = 0; h < G; ++h) {
        float *s = sc + h * stride;
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

/* One work item: a group of rows that share their first P positions (a GRPO group's prompt,
 * prefilled once and copied to each row) and one KV head. Cascade: the group's queries (rows x
 * heads) are scored against the prefix keys of the group's first row block by block, each
 * 64-position block read once from memory and reused from L1 for every query, and weigh its
 * prefix values likewise; each row's own positions follow as before. Same arithmetic, in the
 * same order, as attending each row alone: the scores are the same dot products and the
 * weighted sum over the row's own positions continues the prefix's accumulators. Without
 * groups each row is its own group and P = 0. */
#define ITEM(NAME, TYPE, SUF)                                                                  \
    static int NAME(const job_t *j, int64_t gi, int64_t g, float **scr, int64_t *cap,          \
                    TYPE *tail) {                                                              \
        const int64_t G = j->G, D = j->D, T = j->T, KV = j->KV, TA = T + j->TS;               \
        const int64_t TR = (TA + 63) & ~(int64_t)63, TP = TR + 64;                             \
        const int64_t first = j->order ? j->starts[gi] : gi;                                   \
        const int64_t n = j->order ? j->starts[gi + 1] - first : 1, P = j->order ? j->P : 0;  \
        const int64_t Q = n * G, need = Q * (TP + 2 * D);                                      \
        if (need > *cap) {                                                                     \
            float *grown = (float *)realloc(*scr, sizeof(float) * need);                       \
            if (!grown) return 1;                                                              \
            *scr = grown; *cap = need;                                                         \
        }                                                                                      \
        float *sc = *scr, *qs = sc + Q * TP, *acc = qs + Q * D;                                \
        const TYPE *K = (const TYPE *)j->k, *V = (const TYPE *)j->v;                           \
        for (int64_t i = 0; i < n; ++i) {                                                      \
            const int64_t r = j->order ? j->order[first + i] : first + i;                      \
            const float *q = j->q + (r * KV + g) * G * D;                                      \
            for (int64_t x = 0; x < G * D; ++x) qs[i * G * D + x] = q[x] * j->scale;           \
        }                                                                                      \
        const int64_t o = j->order ? j->order[first] : first; /* the prefix's row */           \
        for (int64_t i = -1; i < n; ++i) { /* -1: the shared prefix, then each row's rest */   \
            const int64_t r = i < 0 ? o : (j->order ? j->order[first + i] : first + i);        \
            const TYPE *kp = K + r * j->skr + g * j->skh;                                      \
            const int64_t from = i < 0 ? 0 : P, to = i < 0 ? P : T;                            \
            const int64_t q0 = i < 0 ? 0 : i * G, nq = i < 0 ? Q : G;                          \
            for (int64_t tb = from; tb < to; tb += 64) {                                       \
                const TYPE *kr = kp + tb;                                                      \
                int64_t ld = j->skd;                                                           \
                if (tb + 64 > T && kp - K + (D - 1) * j->skd + tb + 64 > j->klimit) {          \
                    /* a block past the buffer's end: the valid positions, padded (a block    \
                     * that only runs past T reads what lies there: those lanes' scores are    \
                     * replaced by the staged keys' or masked, as the padding is) */            \
                    for (int64_t d = 0; d < D; ++d) {                                          \
                        memcpy(tail + d * 64, kp + d * j->skd + tb, sizeof(TYPE) * (T - tb));  \
                        memset(tail + d * 64 + (T - tb), 0, sizeof(TYPE) * (64 - (T - tb)));   \
                    }                                                                          \
                    kr = tail; ld = 64;                                                        \
                } /* a prefix block past P scores the first row's positions: its rows'        \
                   * own blocks, written after, replace them */                                \
                for (int64_t h0 = 0; h0 < nq; h0 += 4)                                         \
                    scores_##SUF(nq - h0 < 4 ? nq - h0 : 4, qs + (q0 + h0) * D, D, kr, ld,     \
                                 sc + (q0 + h0) * TP + tb, TP);                                \
            }                                                                                  \
        }                                                                                      \
        for (int64_t i = 0; i < n; ++i) {                                                      \
            const int64_t r = j->order ? j->order[first + i] : first + i;                      \
            float *s = sc + i * G * TP;                                                        \
            if (j->TS) /* after the blocks: the last one writes zeros past T */                \
                staged_##SUF(qs + i * G * D, G, D,                                             \
                             (const TYPE *)j->ks + r * j->ssr + g * j->ssh, j->TS, j->sst,     \
                             s + T, TP);                                                       \
            softmax_heads(s, G, TA, TR, TP, j->bias ? j->bias + r * j->sbr : 0);               \
        }                                                                                      \
        for (int64_t d0 = 0; d0 < D; d0 += 64) {                                               \
            if (P > 0)                                                                         \
                for (int64_t h0 = 0; h0 < Q; h0 += 4)                                          \
                    values_##SUF(Q - h0 < 4 ? Q - h0 : 4, sc + h0 * TP, TP, P,                 \
                                 V + o * j->svr + g * j->svh + d0, j->svt,                     \
                                 acc + h0 * D + d0, D, 0);                                     \
            for (int64_t i = 0; i < n; ++i) {                                                  \
                const int64_t r = j->order ? j->order[first + i] : first + i;                  \
                for (int64_t h0 = 0; h0 < G; h0 += 4)                                          \
                    values_##SUF(G - h0 < 4 ? G - h0 : 4, sc + (i * G + h0) * TP + P, TP,      \
                                 TA - P, V + r * j->svr + g * j->svh + P * j->svt + d0,       \
                                 j->svt, acc + (i * G + h0) * D + d0, D, P > 0);               \
            }                                                                                  \
        }                                                                                      \
        for (int64_t i = 0; i < n; ++i) {                                                      \
            const int64_t r = j->order ? j->order[first + i] : first + i;                      \
            memcpy(j->out + (r * KV + g) * G * D, acc + i * G * D, sizeof(float) * G * D);     \
        }                                                                                      \
        return 0;                                                                              \
    }
ITEM(item_f32, float, f32)
ITEM(item_b16, uint16_t, b16)

/* q [R, KV*G, D] fp32 contiguous; K^T [R, KV, D, >= T] for the first T positions and the
 * staged keys ks [R, KV, TS, D] for the next TS (ks may be NULL with TS = 0); V [R, KV, T + TS,
 * D]; all by element strides, last dim contiguous; bias [R, >= T + TS] fp32 additive or NULL;
 * out [R, KV*G, D] fp32. dtype 0 = fp32 cache, 1 = bf16.
 * Cascade (order not NULL): NG groups, group i the rows order[starts[i] .. starts[i+1]), whose
 * first P (<= T) positions of K, V and bias are equal; they are read from the group's first row.
 * klimit: how many elements from k on may be read (the buffer's end): a last block of K^T
 * positions that fits reads past T instead of being copied into a padded block (a copy of 64
 * short rows per row and head was most of a call at a few positions).
 * Returns 0, or 1 when the shapes are outside what the kernel handles or scratch memory ran
 * out (the caller falls back). */
int arena_decode_attention(const float *q, const void *k, const void *v, const float *bias,
                           float *out, int64_t R, int64_t KV, int64_t G, int64_t D, int64_t T,
                           int64_t skr, int64_t skh, int64_t skd, int64_t svr, int64_t svh,
                           int64_t svt, int64_t sbr, const void *ks, int64_t TS, int64_t ssr,
                           int64_t ssh, int64_t sst, const int64_t *order,
                           const int64_t *starts, int64_t NG, int64_t P, int64_t klimit,
                           float scale, int dtype, int threads) {
    if (D % 64 || D <= 0 || T < 0 || TS < 0 || T + TS <= 0 || G <= 0 || KV <= 0 || R <= 0 ||
        (TS && !ks) || (dtype != 0 && dtype != 1))
        return 1;
    if (order) {
        if (!starts || NG <= 0 || P < 0 || P > T || starts[0] != 0 || starts[NG] != R) return 1;
        for (int64_t i = 0; i < NG; ++i)
            if (starts[i + 1] <= starts[i]) return 1;
        char *seen = (char *)calloc((size_t)R, 1); /* order must be a permutation of the rows */
        if (!seen) return 1;
        int bad = 0;
        for (int64_t i = 0; i < R && !bad; ++i) {
            bad = order[i] < 0 || order[i] >= R || seen[order[i]];
            if (!bad) seen[order[i]] = 1;
        }
        free(seen);
        if (bad) return 1;
    } else {
        NG = R;
        P = 0;
    }
    const int64_t items = NG * KV;
    int failed = 0;
    if (threads < 1) threads = 1;
    if (threads > items) threads = (int)items;
#pragma omp parallel num_threads(threads)
    {
#if defined(__x86_64__)
        const unsigned csr = _mm_getcsr();
        _mm_setcsr(csr | 0x8040); /* flush denormals: tiny weights times values */
#endif
        job_t j = {q, k, v, bias, out, G, KV, D, T, skr, skh, skd, svr, svh, svt, sbr,
                   ks, TS, ssr, ssh, sst, order, starts, P, klimit, scale};
        float *scr = NULL;
        int64_t cap = 0;
        void *tail = calloc((size_t)(D * 64), sizeof(float));
        if (!tail) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < items; ++it) {
            if (!tail) continue;
            const int bad = dtype == 0 ? item_f32(&j, it / KV, it % KV, &scr, &cap, tail)
                                       : item_b16(&j, it / KV, it % KV, &scr, &cap, tail);
            if (bad) {
#pragma omp atomic write
                failed = 1;
            }
        }
        free(scr);
        free(tail);
#if defined(__x86_64__)
        _mm_setcsr(csr);
#endif
    }
    return failed;
}
