/* backend_cpu.c: the CPU backend — the ops of backend.h on host memory, running the
 * kernels of src/kernels/cpu/ on the backend's thread pool. It is the reference the
 * other backends are compared with. */
#include "backend/backend_cpu.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "util/error.h"
#include "util/threadpool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef struct cpu_backend {
    sp_backend base;
    sp_pool *pool;
    float *attn_scratch; /* [n_threads, SP_ATTN_GROUP, attn_ctx] */
    int64_t attn_ctx;
    void *scratch;       /* sp_cpu_backend_scratch */
    size_t scratch_bytes;
    sp_attn_args *many;  /* [many_cap] attention_many's arguments with the scratch */
    int64_t *many_start; /* [many_cap + 1] */
    int64_t many_cap;
    sp_status status;    /* first failure since the last finish */
    char failed[160];
} cpu_backend;

static cpu_backend *cpu(sp_backend *be) { return (cpu_backend *)be; }

static void fail(cpu_backend *c, sp_status st, const char *msg)
{
    if (c->status == SP_OK) {
        c->status = st;
        snprintf(c->failed, sizeof c->failed, "%s", msg);
    }
}

/* ---- element-wise and per-row ops across the pool -------------------------------------
 * Prefill runs them over hundreds of rows; a row's (an element's) result never depends on
 * the range it is computed in, so splitting them changes no bit. Small calls (decode)
 * stay on the calling thread: waking the workers would cost more than the op. */

#define PAR_MIN_ELEMS (1 << 15)

typedef struct par_op {
    int kind;
    const float *a, *b, *w, *cs;
    float *out;
    int64_t dim, x_stride, out_stride, n_heads, tok_stride, head_stride, rot_dim, inter;
    float eps, alpha, limit;
    bool interleaved;
    const sp_weight *table;
    const int32_t *ids;
} par_op;

enum { PAR_RMSNORM, PAR_ADD, PAR_SWIGLU, PAR_GLU, PAR_ROPE, PAR_EMBED };

static void gptoss_glu_rows(const float *gu, int64_t n, int64_t I, float alpha, float limit,
                            float *out);
static void rope_rows(const par_op *o, int64_t t0, int64_t t1);

static void par_task(void *ctx, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const par_op *o = ctx;
    switch (o->kind) {
    case PAR_RMSNORM:
        if (o->x_stride == o->dim && o->out_stride == o->dim)
            sp_rmsnorm(o->a + b * o->dim, o->w, e - b, o->dim, o->eps, o->out + b * o->dim);
        else
            for (int64_t r = b; r < e; r++)
                sp_rmsnorm(o->a + r * o->x_stride, o->w, 1, o->dim, o->eps, o->out + r * o->out_stride);
        break;
    case PAR_ADD: sp_add_inplace(o->out + b, o->a + b, e - b); break;
    case PAR_SWIGLU: sp_swiglu(o->a + b, o->b + b, e - b, o->out + b); break;
    case PAR_GLU:
        gptoss_glu_rows(o->a + b * 2 * o->inter, e - b, o->inter, o->alpha, o->limit,
                        o->out + b * o->inter);
        break;
    case PAR_ROPE: rope_rows(o, b, e); break;
    case PAR_EMBED:
        for (int64_t t = b; t < e; t++)
            sp_weight_row_f32(o->table, o->ids[t], o->out + t * o->table->cols);
        break;
    }
}

/* Runs o over [0, n) items of item_elems elements each, on the pool when large. */
static void par_run(sp_backend *be, par_op *o, int64_t n, int64_t item_elems)
{
    sp_pool *pool = n * item_elems >= PAR_MIN_ELEMS ? cpu(be)->pool : NULL;
    sp_pool_run(pool, n, item_elems >= 64 ? 1 : 64, par_task, o);
}

static void cpu_destroy(sp_backend *be)
{
    cpu_backend *c = cpu(be);
    sp_pool_free(c->pool);
    free(c->attn_scratch);
    free(c->scratch);
    free(c->many);
    free(c->many_start);
    free(c);
}

#define HUGE_PAGE ((size_t)2 << 20)

/* 64-byte aligned; an allocation of a huge page or more is aligned to one and advised to
 * the kernel's transparent huge pages (weights copied by exec_weights.c, KV caches): one
 * TLB entry and one fault per 2 MiB instead of per 4 KiB. */
static sp_status cpu_alloc(sp_backend *be, size_t bytes, void **out, sp_error *err)
{
    *out = NULL;
    if (bytes >= HUGE_PAGE) {
        size_t n = (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
        if (posix_memalign(out, HUGE_PAGE, n) != 0)
            *out = NULL;
        else
            (void)madvise(*out, n, MADV_HUGEPAGE); /* advice: failure is harmless */
    } else if (bytes) {
        *out = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    }
    if (bytes && !*out)
        return sp_err(err, SP_ERR_NOMEM, "cpu: out of memory allocating %zu bytes", bytes);
    return SP_OK;
}

static void cpu_free(sp_backend *be, void *p) { free(p); }

static sp_status cpu_copy(sp_backend *be, void *dst, const void *src, size_t bytes, sp_error *err)
{
    if (bytes)
        memmove(dst, src, bytes);
    return SP_OK;
}

static const void *cpu_view(sp_backend *be, const void *p, size_t n, void *staging) { return p; }

static sp_status cpu_finish(sp_backend *be, sp_error *err)
{
    cpu_backend *c = cpu(be);
    sp_status st = c->status;
    c->status = SP_OK;
    if (st != SP_OK)
        return sp_err(err, st, "cpu backend: %s", c->failed);
    return SP_OK;
}

static uint64_t cpu_free_bytes(sp_backend *be) { return 0; /* the caller reads /proc */ }

static void cpu_embed(sp_backend *be, const sp_weight *table, const int32_t *ids, int64_t n,
                      float *out)
{
    par_op o = {.kind = PAR_EMBED, .table = table, .ids = ids, .out = out};
    par_run(be, &o, n, table->cols);
}

static void cpu_matmul(sp_backend *be, const sp_weight *w, const float *x, int64_t n, float *y,
                       const float *bias)
{
    sp_matmul(cpu(be)->pool, w, x, n, y, bias);
}

static void cpu_matmul_t(sp_backend *be, const sp_weight *w, int64_t row0, int64_t n_in,
                         const float *x, int64_t x_stride, int64_t n, float *y, int64_t y_stride,
                         const float *bias)
{
    sp_matmul_t(cpu(be)->pool, w, row0, n_in, x, x_stride, n, y, y_stride, bias);
}

static void cpu_rmsnorm(sp_backend *be, const float *x, int64_t x_stride, const float *w,
                        int64_t rows, int64_t dim, float eps, float *out, int64_t out_stride)
{
    par_op o = {.kind = PAR_RMSNORM, .a = x, .w = w, .out = out, .dim = dim, .x_stride = x_stride,
                .out_stride = out_stride, .eps = eps};
    par_run(be, &o, rows, dim);
}

/* Tokens [t0, t1) of a rope call (x is par_op.out, the tables par_op.cs). */
static void rope_rows(const par_op *o, int64_t t0, int64_t t1)
{
    for (int64_t t = t0; t < t1; t++)
        for (int64_t h = 0; h < o->n_heads; h++) {
            float *v = o->out + t * o->tok_stride + h * o->head_stride;
            if (o->interleaved)
                sp_rope_interleaved(v, o->rot_dim, o->cs + t * o->rot_dim);
            else
                sp_rope_neox(v, o->rot_dim, o->cs + t * o->rot_dim);
        }
}

static void cpu_rope(sp_backend *be, float *x, int64_t n, int64_t n_heads, int64_t tok_stride,
                     int64_t head_stride, int64_t rot_dim, const float *cs, bool interleaved)
{
    par_op o = {.kind = PAR_ROPE, .out = x, .n_heads = n_heads, .tok_stride = tok_stride,
                .head_stride = head_stride, .rot_dim = rot_dim, .cs = cs, .interleaved = interleaved};
    par_run(be, &o, n, n_heads * rot_dim);
}

static void cpu_add(sp_backend *be, float *y, const float *x, int64_t n)
{
    par_op o = {.kind = PAR_ADD, .a = x, .out = y};
    par_run(be, &o, n, 1);
}

static void cpu_swiglu(sp_backend *be, const float *g, const float *u, int64_t n, float *out)
{
    par_op o = {.kind = PAR_SWIGLU, .a = g, .b = u, .out = out};
    par_run(be, &o, n, 1);
}

/* gpt-oss activation over interleaved (gate, up) pairs: gu [n, 2I] -> out [n, I]. */
static void cpu_gptoss_glu(sp_backend *be, const float *gu, int64_t n, int64_t I, float alpha,
                           float limit, float *out)
{
    par_op o = {.kind = PAR_GLU, .a = gu, .out = out, .inter = I, .alpha = alpha, .limit = limit};
    par_run(be, &o, n, I);
}

static void gptoss_glu_rows(const float *gu, int64_t n, int64_t I, float alpha, float limit,
                            float *out)
{
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < I; i++) {
            float g = gu[t * 2 * I + 2 * i], u = gu[t * 2 * I + 2 * i + 1];
            g = g > limit ? limit : g;
            u = u > limit ? limit : u < -limit ? -limit : u;
            float glu = g * (1.0f / (1.0f + expf(-(g * alpha))));
            out[t * I + i] = (u + 1.0f) * glu;
        }
}

static void cpu_copy2d(sp_backend *be, float *dst, int64_t dst_stride, const float *src,
                       int64_t src_stride, int64_t rows, int64_t width)
{
    for (int64_t r = 0; r < rows; r++)
        memmove(dst + r * dst_stride, src + r * src_stride, (size_t)width * sizeof(float));
}

/* Positions are read from backend memory, which on this backend is the host's. */
static void cpu_kv_store(sp_backend *be, float *dst, int64_t dst_stride, const int32_t *pos,
                         const float *src, int64_t src_stride, int64_t rows, int64_t width)
{
    for (int64_t r = 0; r < rows; r++)
        memcpy(dst + (int64_t)pos[r] * dst_stride, src + r * src_stride,
               (size_t)width * sizeof(float));
}

/* The fused ops: the products share one input preparation and one parallel-for; the
 * same bits as the unfused ops in sequence (matmul.h). */
static void cpu_matmul_multi(sp_backend *be, int n, const sp_weight *const *ws, const float *x,
                             int64_t n_tok, float *const *ys, const float *const *biases)
{
    sp_matmul_multi(cpu(be)->pool, n, ws, x, n_tok, ys, biases);
}

static void cpu_matmul_swiglu(sp_backend *be, const sp_weight *wg, const sp_weight *wu,
                              const float *x, int64_t n_tok, float *out, float *up)
{
    sp_matmul_swiglu(cpu(be)->pool, wg, wu, x, n_tok, out, up);
}

static void cpu_add_rmsnorm(sp_backend *be, float *x, const float *res, const float *w,
                            int64_t rows, int64_t dim, float eps, float *out)
{
    cpu_add(be, x, res, rows * dim);
    cpu_rmsnorm(be, x, dim, w, rows, dim, eps, out, dim);
}

static void cpu_scale(sp_backend *be, float *x, int64_t n, float f)
{
    for (int64_t i = 0; i < n; i++)
        x[i] *= f;
}

/* Score rows for attentions up to need positions: false when out of memory. */
static bool attn_scratch(cpu_backend *c, int64_t need)
{
    if (need > c->attn_ctx) {
        size_t nt = (size_t)sp_pool_n_threads(c->pool);
        float *p = realloc(c->attn_scratch, nt * SP_ATTN_GROUP * (size_t)need * sizeof(float));
        if (!p) {
            fail(c, SP_ERR_NOMEM, "attention: out of memory for its score rows");
            return false;
        }
        c->attn_scratch = p;
        c->attn_ctx = need;
    }
    return true;
}

static void cpu_attention(sp_backend *be, const sp_attn_args *a)
{
    cpu_backend *c = cpu(be);
    if (!attn_scratch(c, a->pos0 + a->n_tok))
        return;
    sp_attn_args b = *a;
    b.scratch = c->attn_scratch;
    b.n_ctx = c->attn_ctx;
    sp_attention(c->pool, &b);
}

static void cpu_attention_many(sp_backend *be, const sp_attn_args *a, int64_t n)
{
    cpu_backend *c = cpu(be);
    int64_t need = 0;
    for (int64_t i = 0; i < n; i++)
        need = a[i].pos0 + a[i].n_tok > need ? a[i].pos0 + a[i].n_tok : need;
    if (n <= 0 || !attn_scratch(c, need))
        return;
    if (n > c->many_cap) { /* grows with the most sequences a pass has held */
        sp_attn_args *p = realloc(c->many, (size_t)n * sizeof *p);
        if (p)
            c->many = p;
        int64_t *s = p ? realloc(c->many_start, (size_t)(n + 1) * sizeof *s) : NULL;
        if (!s) {
            fail(c, SP_ERR_NOMEM, "attention: out of memory for the sequences of a pass");
            return;
        }
        c->many_start = s;
        c->many_cap = n;
    }
    memcpy(c->many, a, (size_t)n * sizeof *a);
    c->many[0].scratch = c->attn_scratch;
    c->many[0].n_ctx = c->attn_ctx;
    sp_attention_many(c->pool, c->many, n, c->many_start);
}

static void cpu_moe_route(sp_backend *be, const sp_route_cfg *cfg, const float *logits, int64_t n,
                          int32_t *ids, float *w)
{
    float tmp[2 * 1024];
    float *scratch = cfg->n_experts <= 1024 ? tmp : malloc(2 * (size_t)cfg->n_experts * sizeof(float));
    if (!scratch) {
        fail(cpu(be), SP_ERR_NOMEM, "moe_route: out of memory");
        return;
    }
    for (int64_t t = 0; t < n; t++)
        sp_moe_route(cfg, logits + t * cfg->n_experts, ids + t * cfg->top_k, w + t * cfg->top_k,
                     scratch);
    if (scratch != tmp)
        free(scratch);
}

void *sp_cpu_backend_scratch(sp_backend *be, size_t bytes, const char *op)
{
    cpu_backend *c = cpu(be);
    if (bytes > c->scratch_bytes) {
        void *p = realloc(c->scratch, bytes);
        if (!p) {
            char msg[96];
            snprintf(msg, sizeof msg, "%s: out of memory for its scratch", op);
            fail(c, SP_ERR_NOMEM, msg);
            return NULL;
        }
        c->scratch = p;
        c->scratch_bytes = bytes;
    }
    return c->scratch;
}

/* the CPU kernels read the precision from their pool */
static sp_precision cpu_set_precision(sp_backend *be, sp_precision want)
{
    sp_pool_set_precision(cpu(be)->pool, want);
    return want;
}

static const sp_backend_ops cpu_ops = {
    .name = "cpu",
    .set_precision = cpu_set_precision,
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .view = cpu_view,
    .finish = cpu_finish,
    .free_bytes = cpu_free_bytes,
    .embed = cpu_embed,
    .matmul = cpu_matmul,
    .matmul_t = cpu_matmul_t,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .add = cpu_add,
    .swiglu = cpu_swiglu,
    .gptoss_glu = cpu_gptoss_glu,
    .copy2d = cpu_copy2d,
    .kv_store = cpu_kv_store,
    .scale = cpu_scale,
    .matmul_multi = cpu_matmul_multi,
    .matmul_swiglu = cpu_matmul_swiglu,
    .add_rmsnorm = cpu_add_rmsnorm,
    .attention = cpu_attention,
    .attention_many = cpu_attention_many,
    .moe_route = cpu_moe_route,
    .moe_ffn = sp_cpu_moe_ffn,
    .hc_weights = sp_cpu_hc_weights,
    .hc_collapse = sp_cpu_hc_collapse,
    .hc_expand = sp_cpu_hc_expand,
    .rope_tail = sp_cpu_rope_tail,
    .compress = sp_cpu_compress,
    .index_topk = sp_cpu_index_topk,
    .dsv4_attention = sp_cpu_dsv4_attention,
    .swiglu_limit = sp_cpu_swiglu_limit,
};

sp_pool *sp_cpu_backend_pool(sp_backend *be) { return cpu(be)->pool; }

sp_status sp_cpu_backend_new(int n_threads, sp_backend **out, sp_error *err)
{
    *out = NULL;
    cpu_backend *c = calloc(1, sizeof *c);
    if (!c)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    sp_status st = sp_pool_new(n_threads, &c->pool, err);
    if (st != SP_OK) {
        free(c);
        return st;
    }
    c->base.ops = &cpu_ops;
    c->base.host_memory = true;
    snprintf(c->base.device_name, sizeof c->base.device_name, "cpu (%d threads)",
             sp_pool_n_threads(c->pool));
    *out = &c->base;
    return SP_OK;
}
