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

typedef struct cpu_backend {
    sp_backend base;
    sp_pool *pool;
    float *attn_scratch; /* [n_threads, attn_ctx] */
    int64_t attn_ctx;
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

static void cpu_destroy(sp_backend *be)
{
    cpu_backend *c = cpu(be);
    sp_pool_free(c->pool);
    free(c->attn_scratch);
    free(c);
}

static sp_status cpu_alloc(sp_backend *be, size_t bytes, void **out, sp_error *err)
{
    *out = bytes ? aligned_alloc(64, (bytes + 63) & ~(size_t)63) : NULL;
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
    for (int64_t t = 0; t < n; t++)
        sp_weight_row_f32(table, ids[t], out + t * table->cols);
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
    if (x_stride == dim && out_stride == dim) {
        sp_rmsnorm(x, w, rows, dim, eps, out);
        return;
    }
    for (int64_t r = 0; r < rows; r++)
        sp_rmsnorm(x + r * x_stride, w, 1, dim, eps, out + r * out_stride);
}

static void cpu_rope(sp_backend *be, float *x, int64_t n, int64_t n_heads, int64_t tok_stride,
                     int64_t head_stride, int64_t rot_dim, const float *cs, bool interleaved)
{
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < n_heads; h++) {
            float *v = x + t * tok_stride + h * head_stride;
            if (interleaved)
                sp_rope_interleaved(v, rot_dim, cs + t * rot_dim);
            else
                sp_rope_neox(v, rot_dim, cs + t * rot_dim);
        }
}

static void cpu_add(sp_backend *be, float *y, const float *x, int64_t n) { sp_add_inplace(y, x, n); }

static void cpu_swiglu(sp_backend *be, const float *g, const float *u, int64_t n, float *out)
{
    sp_swiglu(g, u, n, out);
}

/* gpt-oss activation over interleaved (gate, up) pairs: gu [n, 2I] -> out [n, I]. */
static void cpu_gptoss_glu(sp_backend *be, const float *gu, int64_t n, int64_t I, float alpha,
                           float limit, float *out)
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

/* The fused ops: the unfused ones in sequence (the same bits by construction). */
static void cpu_matmul_multi(sp_backend *be, int n, const sp_weight *const *ws, const float *x,
                             int64_t n_tok, float *const *ys, const float *const *biases)
{
    for (int i = 0; i < n; i++)
        cpu_matmul(be, ws[i], x, n_tok, ys[i], biases ? biases[i] : NULL);
}

static void cpu_matmul_swiglu(sp_backend *be, const sp_weight *wg, const sp_weight *wu,
                              const float *x, int64_t n_tok, float *out, float *up)
{
    cpu_matmul(be, wg, x, n_tok, out, NULL);
    cpu_matmul(be, wu, x, n_tok, up, NULL);
    sp_swiglu(out, up, n_tok * wg->rows, out);
}

static void cpu_add_rmsnorm(sp_backend *be, float *x, const float *res, const float *w,
                            int64_t rows, int64_t dim, float eps, float *out)
{
    sp_add_inplace(x, res, rows * dim);
    cpu_rmsnorm(be, x, dim, w, rows, dim, eps, out, dim);
}

static void cpu_scale(sp_backend *be, float *x, int64_t n, float f)
{
    for (int64_t i = 0; i < n; i++)
        x[i] *= f;
}

static void cpu_attention(sp_backend *be, const sp_attn_args *a)
{
    cpu_backend *c = cpu(be);
    int64_t need = a->pos0 + a->n_tok;
    if (need > c->attn_ctx) {
        size_t nt = (size_t)sp_pool_n_threads(c->pool);
        float *p = realloc(c->attn_scratch, nt * (size_t)need * sizeof(float));
        if (!p) {
            fail(c, SP_ERR_NOMEM, "attention: out of memory for its score rows");
            return;
        }
        c->attn_scratch = p;
        c->attn_ctx = need;
    }
    sp_attn_args b = *a;
    b.scratch = c->attn_scratch;
    b.n_ctx = c->attn_ctx;
    sp_attention(c->pool, &b);
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

static const sp_backend_ops cpu_ops = {
    .name = "cpu",
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
    .moe_route = cpu_moe_route,
    .moe_ffn = sp_cpu_moe_ffn,
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
