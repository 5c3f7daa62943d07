/* matmul.c: the CPU matrix products (see matmul.h): the reference decoders, the choice
 * of a row kernel by ISA level, precision and format (matmul_isa.h), the one-off input
 * preparation a kernel asks for, and the split of rows across threads. The row kernels
 * themselves live in matmul_generic.c / matmul_avx2.c / matmul_avx512*.c. */
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"
#include "util/dtype.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

const char *sp_wformat_name(sp_wformat f)
{
    switch (f) {
    case SP_WF_NONE: return "none";
    case SP_WF_F32: return "F32";
    case SP_WF_BF16: return "BF16";
    case SP_WF_F16: return "F16";
    case SP_WF_MXFP4: return "MXFP4";
    case SP_WF_NVFP4: return "NVFP4";
    case SP_WF_FP8_BLOCK: return "FP8 (128x128 block scales)";
    }
    return "?";
}

float sp_weight_at(const sp_weight *w, int64_t r, int64_t c)
{
    const unsigned char *row = sp_weight_row(w, r);
    switch (w->format) {
    case SP_WF_F32: {
        float f;
        memcpy(&f, row + 4 * c, 4);
        return f;
    }
    case SP_WF_BF16: {
        uint16_t h;
        memcpy(&h, row + 2 * c, 2);
        return sp_bf16_to_f32(h);
    }
    case SP_WF_F16: {
        uint16_t h;
        memcpy(&h, row + 2 * c, 2);
        return sp_f16_to_f32(h);
    }
    case SP_WF_MXFP4: {
        unsigned b = row[c / 2];
        unsigned code = (c & 1) ? b >> 4 : b & 15;
        uint8_t s = w->scales[(size_t)r * w->scale_row_bytes + (size_t)(c / 32)];
        return sp_e2m1_table[code] * sp_e8m0_to_f32(s);
    }
    case SP_WF_NVFP4: {
        unsigned b = row[c / 2];
        unsigned code = (c & 1) ? b >> 4 : b & 15;
        uint8_t s = w->scales[(size_t)r * w->scale_row_bytes + (size_t)(c / 16)];
        return sp_e2m1_table[code] * (sp_e4m3_to_f32(s) * w->global_scale);
    }
    case SP_WF_FP8_BLOCK: {
        float s;
        memcpy(&s, w->scales + (size_t)((r + w->row_offset) / 128) * w->scale_row_bytes + 4 * (size_t)(c / 128), 4);
        return sp_e4m3_to_f32(row[c]) * s;
    }
    case SP_WF_NONE: break;
    }
    return 0.0f;
}

void sp_weight_row_f32(const sp_weight *w, int64_t r, float *out)
{
    for (int64_t c = 0; c < w->cols; c++)
        out[c] = sp_weight_at(w, r, c);
}

void sp_matmul_ref(const sp_weight *w, const float *x, int64_t n_tok, float *y,
                   const float *bias)
{
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < w->rows; r++) {
            double s = 0.0;
            for (int64_t c = 0; c < w->cols; c++)
                s += (double)x[t * w->cols + c] * (double)sp_weight_at(w, r, c);
            if (bias)
                s += bias[r];
            y[t * w->rows + r] = (float)s;
        }
}

/* ---- the row kernels: choice, input preparation, threads ---------------------------- */

/* SP_BF16_DOT_FMA_BATCHES: calls of this many tokens or more take the FMAs (Emerald Rapids,
 * llama 1.1B: a pass over 3 tokens 80.4 ms with FMAs against 78.5, over 4 83.3 against
 * 97.6; one token 1.5x slower with FMAs; docs/BENCHMARKS.md). */
#define BF16_FMA_MIN_TOKENS 4

/* The sp_bf16_dot in use; SP_BF16_DOT_AUTO until first asked. */
static atomic_int bf16_dot = SP_BF16_DOT_AUTO;

sp_bf16_dot sp_matmul_bf16_dot(void)
{
    int v = atomic_load_explicit(&bf16_dot, memory_order_relaxed);
    if (v == SP_BF16_DOT_AUTO) {
        const char *e = getenv("SPECULA_BF16_DOT");
        if (e && !strcmp(e, "fma"))
            v = SP_BF16_DOT_FMA;
        else if (e && !strcmp(e, "vdpbf16ps"))
            v = SP_BF16_DOT_VDPBF16PS;
        else if (e && !strcmp(e, "batches"))
            v = SP_BF16_DOT_FMA_BATCHES;
        else {
#ifdef SP_HAVE_AVX512BF16_KERNELS
            v = sp_isa_detected() >= SP_ISA_AVX512_BF16 && sp_mm_vdpbf16ps_is_slow()
                    ? SP_BF16_DOT_FMA_BATCHES
                    : SP_BF16_DOT_VDPBF16PS;
#else
            v = SP_BF16_DOT_VDPBF16PS;
#endif
        }
        atomic_store(&bf16_dot, v);
    }
    return (sp_bf16_dot)v;
}

void sp_matmul_set_bf16_dot(sp_bf16_dot d)
{
    atomic_store(&bf16_dot, (int)d);
}

/* The kernel for w in precision prec for a call of n_tok tokens. */
static sp_mm_kernel pick_kernel(const sp_weight *w, sp_precision prec, int64_t n_tok)
{
    if (w->keep_exact)
        prec = SP_PRECISION_EXACT;
    switch (sp_isa_active()) {
#ifdef SP_HAVE_AVX512BF16_KERNELS
    case SP_ISA_AVX512_BF16: {
        if (prec != SP_PRECISION_FAST)
            return sp_mm_pick_avx512(w);
        sp_bf16_dot d = sp_matmul_bf16_dot();
        bool fma = d == SP_BF16_DOT_FMA || (d == SP_BF16_DOT_FMA_BATCHES && n_tok >= BF16_FMA_MIN_TOKENS);
        return fma ? sp_mm_pick_avx512bf16_fma(w) : sp_mm_pick_avx512bf16(w);
    }
#endif
#ifdef SP_HAVE_AVX512_KERNELS
    case SP_ISA_AVX512: return sp_mm_pick_avx512(w);
#endif
#ifdef SP_HAVE_AVX2_KERNELS
    case SP_ISA_AVX2: return prec == SP_PRECISION_FAST ? sp_mm_pick_avx2_fast(w) : sp_mm_pick_avx2(w);
#endif
    default: return sp_mm_pick_generic(w);
    }
}

void sp_matmul_round_input(const sp_weight *w, const float *x, int64_t n, uint16_t *out)
{
    sp_mm_kernel k = pick_kernel(w, SP_PRECISION_FAST, INT64_MAX); /* a prefill's */
    if (k.prep == SP_MM_PREP_BF16_TILED && k.prep_fn) {
        k.prep_fn(x, n, out);
        return;
    }
    int64_t i = 0;
    if (k.prep == SP_MM_PREP_BF16_SPLIT && k.prep_fn) /* widened and split: undo both */
        for (; i + 32 <= n; i += 32) {
            float f[32];
            k.prep_fn(x + i, 32, f);
            for (int c = 0; c < 32; c++) {
                uint32_t u;
                memcpy(&u, &f[c % 2 ? 16 + c / 2 : c / 2], 4);
                out[i + c] = (uint16_t)(u >> 16);
            }
        }
    for (; i < n; i++)
        out[i] = sp_mm_round_bf16(x[i]);
}

bool sp_matmul_prep_q8(const float *x, int64_t cols, unsigned char *out)
{
    sp_weight w = {.format = SP_WF_MXFP4, .rows = 1, .cols = cols};
    sp_mm_kernel k = pick_kernel(&w, SP_PRECISION_FAST, 1);
    if (k.prep != SP_MM_PREP_Q8 || cols % 32)
        return false;
    if (k.prep_fn)
        k.prep_fn(x, cols, out);
    else
        sp_mm_prep_q8_row(x, cols, out);
    return true;
}

const char *sp_matmul_kernel_name(const sp_weight *w, sp_precision prec)
{
    return pick_kernel(w, prec, 1).name;
}

const char *sp_matmul_kernel_name_n(const sp_weight *w, sp_precision prec, int64_t n_tok)
{
    return pick_kernel(w, prec, n_tok).name;
}

/* One token's 32 values at xs as SP_MM_PREP_BF16_SPLIT holds them: rounded to bf16,
 * widened, the even columns then the odd ones (the portable path of a kernel's prep_fn). */
static void split32(const float *xs, float *os)
{
    for (int i = 0; i < 32; i++)
        os[i % 2 ? 16 + i / 2 : i / 2] = sp_bf16_to_f32(sp_mm_round_bf16(xs[i]));
}

/* SP_MM_PREP_BF16_TILED (2-byte values) and SP_MM_PREP_BF16_SPLIT (4-byte): tokens
 * [t0, t1), one tile (cols a multiple of 32). */
static void prep_bf16_tile(const sp_mm_kernel *k, const float *x, int64_t t0, int64_t t1,
                           int64_t cols, void *buf)
{
    const bool split = k->prep == SP_MM_PREP_BF16_SPLIT;
    const size_t esz = split ? 4 : 2;
    unsigned char *o = (unsigned char *)buf + (size_t)(t0 * cols) * esz;
    const int64_t T = t1 - t0;
    if (T == 1 && k->prep_fn) { /* a lone token: the natural order, one call */
        k->prep_fn(x + t0 * cols, cols, o);
        return;
    }
    for (int64_t t = t0; t < t1; t++)
        for (int64_t c = 0; c < cols; c += 32) {
            const float *xs = x + t * cols + c;
            void *os = o + (size_t)(c * T + (t - t0) * 32) * esz; /* matmul_isa.h's tile order */
            if (k->prep_fn)
                k->prep_fn(xs, 32, os);
            else if (split)
                split32(xs, os);
            else
                for (int i = 0; i < 32; i++)
                    ((uint16_t *)os)[i] = sp_mm_round_bf16(xs[i]);
        }
}

/* SP_MM_PREP_PAIRS (group 32) and SP_MM_PREP_QUADS (group 8): each group of columns as
 * its even columns, then its odd ones. */
static void prep_even_odd(const float *x, int64_t t0, int64_t t1, int64_t cols, int64_t group,
                          float *buf)
{
    for (int64_t t = t0; t < t1; t++)
        for (int64_t c = 0; c < cols; c += group) {
            const float *xs = x + t * cols + c;
            float *os = buf + t * cols + c;
            for (int64_t i = 0; i < group / 2; i++) {
                os[i] = xs[2 * i];
                os[group / 2 + i] = xs[2 * i + 1];
            }
        }
}

/* Writes tokens [t0, t1) of x in the layout kernel k reads (matmul_isa.h) into buf
 * (for SP_MM_PREP_BF16_TILED, [t0, t1) is one tile of n_tok's). */
static void prepare_input(const sp_mm_kernel *k, const float *x, int64_t t0, int64_t t1,
                          int64_t cols, void *buf)
{
    switch (k->prep) {
    case SP_MM_PREP_BF16_TILED:
    case SP_MM_PREP_BF16_SPLIT: prep_bf16_tile(k, x, t0, t1, cols, buf); return;
    case SP_MM_PREP_PAIRS: prep_even_odd(x, t0, t1, cols, 32, buf); return;
    case SP_MM_PREP_QUADS: prep_even_odd(x, t0, t1, cols, 8, buf); return;
    case SP_MM_PREP_Q8:
        for (int64_t t = t0; t < t1; t++) {
            unsigned char *row = (unsigned char *)buf + (size_t)t * SP_MM_Q8_BYTES((size_t)cols);
            if (k->prep_fn)
                k->prep_fn(x + t * cols, cols, row);
            else
                sp_mm_prep_q8_row(x + t * cols, cols, row);
        }
        return;
    case SP_MM_PREP_NONE: return;
    }
}

typedef struct prep_job {
    const sp_mm_kernel *k;
    const float *x;
    int64_t cols, n_tok;
    void *buf;
} prep_job;

static void prep_task(void *ctx, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const prep_job *p = ctx;
    if (p->k->prep == SP_MM_PREP_BF16_TILED || p->k->prep == SP_MM_PREP_BF16_SPLIT) { /* tiles */
        for (int64_t i = b; i < e; i++) {
            int64_t t0 = i * SP_MM_TILE_TOKENS, t1 = t0 + SP_MM_TILE_TOKENS;
            prepare_input(p->k, p->x, t0, t1 < p->n_tok ? t1 : p->n_tok, p->cols, p->buf);
        }
        return;
    }
    prepare_input(p->k, p->x, b, e, p->cols, p->buf);
}

static void matmul_task(void *ctx, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const sp_mm_kernel *k = ((const void **)ctx)[0];
    const sp_mm_job *j = ((const void **)ctx)[1];
    k->fn(j, b, e);
}

/* Bytes kernel k's preparation of x ([n_tok, w->cols]) takes (0: it needs none), a
 * multiple of 64 so that several can share one buffer. */
static size_t prep_bytes(const sp_mm_kernel *k, const sp_weight *w, int64_t n_tok)
{
    if (k->prep == SP_MM_PREP_NONE)
        return 0;
    size_t bytes = k->prep == SP_MM_PREP_Q8 ? (size_t)n_tok * SP_MM_Q8_BYTES((size_t)w->cols)
                   : (size_t)(n_tok * w->cols) * (k->prep == SP_MM_PREP_BF16_TILED ? 2 : 4);
    return (bytes + 63) & ~(size_t)63;
}

/* Writes x prepared as kernel *k asks (matmul_isa.h) into buf (prep_bytes of it); a
 * prefill's inputs are worth preparing on every thread. */
static void prepare_into(sp_pool *pool, const sp_mm_kernel *k, const sp_weight *w, const float *x,
                         int64_t n_tok, void *buf)
{
    prep_job pj = {k, x, w->cols, n_tok, buf};
    const bool tiles = k->prep == SP_MM_PREP_BF16_TILED || k->prep == SP_MM_PREP_BF16_SPLIT;
    int64_t units = tiles ? (n_tok + SP_MM_TILE_TOKENS - 1) / SP_MM_TILE_TOKENS : n_tok;
    sp_pool_run(n_tok * w->cols < (1 << 15) ? NULL : pool, units, 1, prep_task, &pj);
}

/* The exact 8-lane kernel for w, which needs no prepared input (out of memory for one). */
static sp_mm_kernel unprepared_kernel(const sp_weight *w)
{
#ifdef SP_HAVE_AVX2_KERNELS
    return sp_isa_active() >= SP_ISA_AVX2 ? sp_mm_pick_avx2_unprepared(w) : sp_mm_pick_generic(w);
#else
    return sp_mm_pick_generic(w);
#endif
}

/* Prepares x ([n_tok, w->cols]) as kernel *k asks in the pool's scratch or a heap buffer
 * (*heap, for the caller to free): the pointer for sp_mm_job.xp, or NULL when *k needs
 * none or, out of memory, after replacing *k by an exact 8-lane kernel that needs none. */
static const void *prepare(sp_pool *pool, sp_mm_kernel *k, const sp_weight *w, const float *x,
                           int64_t n_tok, void **heap)
{
    *heap = NULL;
    size_t bytes = prep_bytes(k, w, n_tok);
    if (!bytes)
        return NULL;
    void *buf = pool ? sp_pool_scratch(pool, bytes) : NULL;
    if (!buf)
        buf = *heap = aligned_alloc(64, bytes); /* bytes: a multiple of 64 */
    if (!buf) {
        *k = unprepared_kernel(w);
        return NULL;
    }
    prepare_into(pool, k, w, x, n_tok, buf);
    return buf;
}

void sp_matmul_prec(sp_pool *pool, sp_precision prec, const sp_weight *w, const float *x,
                    int64_t n_tok, float *y, const float *bias)
{
    if (n_tok <= 0 || w->rows <= 0)
        return;
    sp_mm_kernel k = pick_kernel(w, prec, n_tok);
    sp_mm_job j = {w, x, NULL, n_tok, y, bias};
    void *heap;
    j.xp = prepare(pool, &k, w, x, n_tok, &heap);
    const void *ctx[2] = {&k, &j};
    /* Small products are not worth waking the workers. */
    int64_t work = w->rows * w->cols * n_tok;
    sp_pool_run(work < (1 << 15) ? NULL : pool, w->rows, 16, matmul_task, (void *)ctx);
    free(heap);
}

/* ---- products sharing one input: one preparation, one parallel-for ------------------
 * Rows are handed out in grains of GRAIN rows of one product (each product's grains start
 * at its row 0, as in sp_matmul_prec), so every output is computed by the same kernel in
 * the same order as alone: the group changes the number of joins, not a bit. */

enum { GROUP_MAX = 8, GRAIN = 16 };

typedef struct mm_group {
    int n;
    sp_mm_kernel k[GROUP_MAX];
    sp_mm_job j[GROUP_MAX];
    int64_t first[GROUP_MAX + 1]; /* first grain of product i; first[n] = all grains */
    bool swiglu; /* two products (gate, up) of equal shape: y0 = silu(y0) * y1 per chunk */
} mm_group;

static void group_rows(const mm_group *g, int i, int64_t gb, int64_t ge)
{
    int64_t rows = g->j[i].w->rows, re = ge * GRAIN < rows ? ge * GRAIN : rows;
    g->k[i].fn(&g->j[i], gb * GRAIN, re);
}

static void group_task(void *ctx, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const mm_group *g = ctx;
    if (g->swiglu) { /* grains index the rows of both products */
        group_rows(g, 0, b, e);
        group_rows(g, 1, b, e);
        int64_t rows = g->j[0].w->rows, rb = b * GRAIN, re = e * GRAIN < rows ? e * GRAIN : rows;
        for (int64_t t = 0; t < g->j[0].n_tok; t++) {
            float *gate = g->j[0].y + t * rows + rb;
            sp_swiglu(gate, g->j[1].y + t * rows + rb, re - rb, gate);
        }
        return;
    }
    for (int i = 0; i < g->n; i++) {
        int64_t lo = b > g->first[i] ? b : g->first[i];
        int64_t hi = e < g->first[i + 1] ? e : g->first[i + 1];
        if (lo < hi)
            group_rows(g, i, lo - g->first[i], hi - g->first[i]);
    }
}

/* Runs the group (its kernels picked, its jobs filled but for xp): the input prepared
 * once when every kernel wants the same preparation, else each product on its own. */
static void group_run(sp_pool *pool, mm_group *g, const float *x)
{
    const sp_weight *w0 = g->j[0].w;
    bool shared = true;
    for (int i = 1; i < g->n; i++)
        shared = shared && g->k[i].prep == g->k[0].prep && g->k[i].prep_fn == g->k[0].prep_fn;
    void *heap = NULL;
    const void *xp = NULL;
    if (shared) {
        sp_mm_kernel k0 = g->k[0];
        xp = prepare(pool, &k0, w0, x, g->j[0].n_tok, &heap);
        shared = xp || g->k[0].prep == SP_MM_PREP_NONE; /* false: out of memory */
    }
    if (!shared) {
        for (int i = 0; i < g->n; i++)
            sp_matmul_prec(pool, sp_pool_precision(pool), g->j[i].w, x, g->j[i].n_tok, g->j[i].y,
                           g->j[i].bias);
        if (g->swiglu)
            sp_swiglu(g->j[0].y, g->j[1].y, g->j[0].n_tok * w0->rows, g->j[0].y);
        return;
    }
    for (int i = 0; i < g->n; i++)
        g->j[i].xp = xp;
    int64_t work = 0;
    for (int i = 0; i < g->n; i++)
        work += g->j[i].w->rows * g->j[i].w->cols * g->j[i].n_tok;
    sp_pool_run(work < (1 << 15) ? NULL : pool, g->first[g->swiglu ? 1 : g->n], 1, group_task, g);
    free(heap);
}

void sp_matmul_multi(sp_pool *pool, int n, const sp_weight *const *ws, const float *x,
                     int64_t n_tok, float *const *ys, const float *const *biases)
{
    if (n_tok <= 0)
        return;
    sp_precision prec = sp_pool_precision(pool);
    for (int b = 0; b < n; b += GROUP_MAX) {
        mm_group g = {.n = n - b < GROUP_MAX ? n - b : GROUP_MAX};
        for (int i = 0; i < g.n; i++) {
            const sp_weight *w = ws[b + i];
            g.k[i] = pick_kernel(w, prec, n_tok);
            g.j[i] = (sp_mm_job){w, x, NULL, n_tok, ys[b + i], biases ? biases[b + i] : NULL};
            g.first[i + 1] = g.first[i] + (w->rows + GRAIN - 1) / GRAIN;
        }
        group_run(pool, &g, x);
    }
}

/* Up to GROUP_MAX products with their own inputs: each input prepared into its part of
 * one buffer, then all rows in one parallel-for. */
static void each_group(sp_pool *pool, sp_precision prec, int n, const sp_weight *const *ws,
                       const float *const *xs, const int64_t *n_toks, float *const *ys,
                       const float *const *biases)
{
    mm_group g = {.n = 0};
    size_t off[GROUP_MAX], size[GROUP_MAX], total = 0;
    int64_t work = 0;
    for (int i = 0; i < n; i++) {
        if (n_toks[i] <= 0 || ws[i]->rows <= 0)
            continue;
        int q = g.n++;
        g.k[q] = pick_kernel(ws[i], prec, n_toks[i]);
        g.j[q] = (sp_mm_job){ws[i], xs[i], NULL, n_toks[i], ys[i], biases ? biases[i] : NULL};
        g.first[q + 1] = g.first[q] + (ws[i]->rows + GRAIN - 1) / GRAIN;
        off[q] = total;
        size[q] = prep_bytes(&g.k[q], ws[i], n_toks[i]);
        total += size[q];
        work += ws[i]->rows * ws[i]->cols * n_toks[i];
    }
    void *heap = NULL;
    unsigned char *buf = !total ? NULL : pool ? sp_pool_scratch(pool, total) : NULL;
    if (total && !buf)
        buf = heap = aligned_alloc(64, total); /* a sum of multiples of 64 */
    if (total && !buf) { /* out of memory: each product alone (sp_matmul_prec copes) */
        for (int q = 0; q < g.n; q++)
            sp_matmul_prec(pool, prec, g.j[q].w, g.j[q].x, g.j[q].n_tok, g.j[q].y, g.j[q].bias);
        return;
    }
    for (int q = 0; q < g.n; q++)
        if (size[q]) {
            prepare_into(pool, &g.k[q], g.j[q].w, g.j[q].x, g.j[q].n_tok, buf + off[q]);
            g.j[q].xp = buf + off[q];
        }
    if (g.n)
        sp_pool_run(work < (1 << 15) ? NULL : pool, g.first[g.n], 1, group_task, &g);
    free(heap);
}

void sp_matmul_each(sp_pool *pool, int n, const sp_weight *const *ws, const float *const *xs,
                    const int64_t *n_toks, float *const *ys, const float *const *biases)
{
    sp_precision prec = sp_pool_precision(pool);
    for (int b = 0; b < n; b += GROUP_MAX)
        each_group(pool, prec, n - b < GROUP_MAX ? n - b : GROUP_MAX, ws + b, xs + b, n_toks + b, ys + b,
                   biases ? biases + b : NULL);
}

void sp_matmul_swiglu(sp_pool *pool, const sp_weight *wg, const sp_weight *wu, const float *x,
                      int64_t n_tok, float *out, float *up)
{
    if (n_tok <= 0)
        return;
    sp_precision prec = sp_pool_precision(pool);
    mm_group g = {.n = 2, .swiglu = wg->rows == wu->rows && wg->cols == wu->cols};
    const sp_weight *ws[2] = {wg, wu};
    float *ys[2] = {out, up};
    for (int i = 0; i < 2; i++) {
        g.k[i] = pick_kernel(ws[i], prec, n_tok);
        g.j[i] = (sp_mm_job){ws[i], x, NULL, n_tok, ys[i], NULL};
        g.first[i + 1] = g.first[i] + (ws[i]->rows + GRAIN - 1) / GRAIN;
    }
    if (!g.swiglu) { /* unequal shapes: the products, then the activation */
        sp_matmul_multi(pool, 2, ws, x, n_tok, ys, NULL);
        sp_swiglu(out, up, n_tok * wg->rows, out);
        return;
    }
    group_run(pool, &g, x);
}

void sp_matmul(sp_pool *pool, const sp_weight *w, const float *x, int64_t n_tok, float *y,
               const float *bias)
{
    sp_matmul_prec(pool, sp_pool_precision(pool), w, x, n_tok, y, bias);
}

void sp_mm_prep_q8_row(const float *x, int64_t cols, unsigned char *row)
{
    const int64_t nb = cols / 32;
    memset(row, 0, SP_MM_Q8_BYTES((size_t)cols));
    for (int64_t b = 0; b < nb; b++) {
        int8_t q[32];
        unsigned char *pair = row + SP_MM_Q8_PAIR * (b / 2);
        float d = sp_mm_quantize_q8(x + 32 * b, q);
        int half = (int)(b % 2) * 16; /* A: bytes 0-15 and 32-47; B: 16-31 and 48-63 */
        for (int i = 0; i < 16; i++) {
            pair[half + i] = (unsigned char)q[2 * i];
            pair[32 + half + i] = (unsigned char)q[2 * i + 1];
        }
        for (int l = 0; l < 4; l++) {
            int32_t c = 0;
            for (int i = 0; i < 8; i++)
                c += q[8 * l + i];
            c *= 12;
            memcpy(pair + 64 + 4 * (half / 4 + l), &d, 4);
            memcpy(pair + 96 + 4 * (half / 4 + l), &c, 4);
        }
    }
}

void sp_matmul_ref_q8(const sp_weight *w, const float *x, int64_t n_tok, float *y,
                      const float *bias)
{
    int8_t q[32];
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < w->rows; r++) {
            double s = 0.0;
            for (int64_t b = 0; b < w->cols / 32; b++) {
                double d = sp_mm_quantize_q8(x + t * w->cols + 32 * b, q), dot = 0.0;
                for (int i = 0; i < 32; i++)
                    dot += (double)q[i] * (double)sp_weight_at(w, r, 32 * b + i);
                s += d * dot;
            }
            if (bias)
                s += bias[r];
            y[t * w->rows + r] = (float)s;
        }
}

void sp_matmul_ref_prec(sp_precision prec, const sp_weight *w, const float *x, int64_t n_tok,
                        float *y, const float *bias)
{
    if (prec == SP_PRECISION_EXACT) {
        sp_matmul_ref(w, x, n_tok, y, bias);
        return;
    }
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < w->rows; r++) {
            double s = 0.0;
            for (int64_t c = 0; c < w->cols; c++)
                s += (double)sp_bf16_to_f32(sp_mm_round_bf16(x[t * w->cols + c])) *
                     (double)sp_weight_at(w, r, c);
            if (bias)
                s += bias[r];
            y[t * w->rows + r] = (float)s;
        }
}

/* ---- transposed products: y = x W[row0 : row0 + n_in, :] -----------------------------
 * Each output column c accumulates x[i] * W[row0 + i, c] for i ascending, 8 columns per
 * vector lane group. Columns are handed to threads in aligned groups of 8 and the last
 * cols % 8 columns always take the scalar path, so a value's rounding depends only on
 * the matrix shape, never on the batch or the thread count. */

#define T_GROUP 8

typedef struct matmul_t_job {
    const sp_weight *w;
    int64_t row0, n_in, x_stride, n_tok, y_stride;
    const float *x, *bias;
    float *y;
} matmul_t_job;

/* Decodes columns [c0, c0 + n) of row r into out (vector-friendly for dense formats). */
static void decode_cols(const sp_weight *w, int64_t r, int64_t c0, int64_t n, float *out)
{
    const unsigned char *row = sp_weight_row(w, r);
    switch (w->format) {
    case SP_WF_F32: memcpy(out, row + 4 * c0, (size_t)n * sizeof(float)); return;
    case SP_WF_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, row + 2 * (c0 + i), 2);
            out[i] = sp_bf16_to_f32(h);
        }
        return;
    default:
        for (int64_t i = 0; i < n; i++)
            out[i] = sp_weight_at(w, r, c0 + i);
        return;
    }
}

static void matmul_t_task(void *ctx, int64_t gb, int64_t ge, int thread)
{
    (void)thread;
    const matmul_t_job *j = ctx;
    const sp_weight *w = j->w;
    int64_t c0 = gb * T_GROUP, c1 = ge * T_GROUP < w->cols ? ge * T_GROUP : w->cols;
    int64_t cols8 = w->cols & ~(int64_t)7, vec_end = c1 < cols8 ? c1 : cols8;
    float buf[512];
    for (int64_t t = 0; t < j->n_tok; t++)
        for (int64_t c = c0; c < c1; c++)
            j->y[t * j->y_stride + c] = j->bias ? j->bias[c] : 0.0f;
    for (int64_t cb = c0; cb < c1; cb += 512) {
        int64_t ce = cb + 512 < c1 ? cb + 512 : c1;
        int64_t ve = ce < vec_end ? ce : vec_end;
        for (int64_t i = 0; i < j->n_in; i++) {
            decode_cols(w, j->row0 + i, cb, ce - cb, buf);
            for (int64_t t = 0; t < j->n_tok; t++) {
                float xv = j->x[t * j->x_stride + i];
                float *yr = j->y + t * j->y_stride;
                sp_v8 xb = sp_v8_set1(xv);
                int64_t c = cb;
                for (; c + 8 <= ve; c += 8)
                    sp_v8_store(yr + c, sp_v8_fmadd(xb, sp_v8_load(buf + (c - cb)), sp_v8_load(yr + c)));
                for (; c < ce; c++)
                    yr[c] += xv * buf[c - cb];
            }
        }
    }
}

void sp_matmul_t(sp_pool *pool, const sp_weight *w, int64_t row0, int64_t n_in, const float *x,
                 int64_t x_stride, int64_t n_tok, float *y, int64_t y_stride, const float *bias)
{
    matmul_t_job j = {w, row0, n_in, x_stride, n_tok, y_stride, x, bias, y};
    int64_t groups = (w->cols + T_GROUP - 1) / T_GROUP;
    int64_t work = n_in * w->cols * n_tok;
    sp_pool_run(work < (1 << 15) ? NULL : pool, groups, 8, matmul_t_task, &j);
}

void sp_matmul_t_ref(const sp_weight *w, int64_t row0, int64_t n_in, const float *x,
                     int64_t x_stride, int64_t n_tok, float *y, int64_t y_stride, const float *bias)
{
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t c = 0; c < w->cols; c++) {
            double s = bias ? bias[c] : 0.0;
            for (int64_t i = 0; i < n_in; i++)
                s += (double)x[t * x_stride + i] * (double)sp_weight_at(w, row0 + i, c);
            y[t * y_stride + c] = (float)s;
        }
}
