/* dsv4_cpu.c: the DeepSeek-V4 ops of the CPU backend — row loops over the scalar kernels of
 * kernels/cpu/dsv4.h. Every row is computed alone, so results never depend on the batch. */
#include "backend/backend_cpu.h"
#include "kernels/cpu/dsv4.h"

void sp_cpu_hc_weights(sp_backend *be, const float *mix, int64_t mix_stride, const float *base,
                       const float *scale, int64_t n, int64_t N, int64_t iters, float eps,
                       float *pre, float *post, float *comb)
{
    (void)be;
    for (int64_t t = 0; t < n; t++)
        sp_hc_weights(mix + t * mix_stride, base, scale, N, iters, eps, pre + t * N,
                      post ? post + t * N : NULL, comb ? comb + t * N * N : NULL);
}

void sp_cpu_hc_collapse(sp_backend *be, const float *streams, const float *pre, int64_t n,
                        int64_t N, int64_t H, float *out)
{
    (void)be;
    for (int64_t t = 0; t < n; t++)
        sp_hc_collapse(streams + t * N * H, pre + t * N, N, H, out + t * H);
}

void sp_cpu_hc_expand(sp_backend *be, const float *streams, const float *y, const float *post,
                      const float *comb, int64_t n, int64_t N, int64_t H, float *out)
{
    (void)be;
    for (int64_t t = 0; t < n; t++)
        sp_hc_expand(streams + t * N * H, y + t * H, post + t * N, comb + t * N * N, N, H,
                     out + t * N * H);
}

void sp_cpu_rope_tail(sp_backend *be, float *x, int64_t n, int64_t n_heads, int64_t tok_stride,
                      int64_t head_stride, int64_t rot, const float *cs, bool inverse)
{
    (void)be;
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < n_heads; h++)
            sp_rope_tail(x + t * tok_stride + h * head_stride, rot, cs + t * rot, inverse);
}

void sp_cpu_compress(sp_backend *be, const sp_compress_args *a, int64_t w0, int64_t w1,
                     const float *cs, float *out, int64_t out_stride)
{
    (void)be;
    for (int64_t w = w0; w < w1; w++)
        sp_compress_entry(a, w, cs + (w - w0) * a->rot, out + (w - w0) * out_stride);
}

void sp_cpu_index_topk(sp_backend *be, const sp_index_batch *b)
{
    int64_t most = (b->pos0 + b->n_tok) / b->rate;
    most = most > b->n_queue ? most : b->n_queue;
    sp_topk_elem *q = sp_cpu_backend_scratch(be, (size_t)(most > 0 ? most : 1) * sizeof *q, "index_topk");
    if (!q)
        return;
    for (int64_t t = 0; t < b->n_tok; t++) {
        sp_index_args a = {
            .q = b->q + t * b->n_heads * b->hd,
            .w = b->w + t * b->n_heads,
            .keys = b->keys,
            .key_stride = b->key_stride,
            .n_heads = b->n_heads,
            .hd = b->hd,
            .n_valid = (b->pos0 + t + 1) / b->rate,
            .topk = b->topk,
            .n_queue = b->n_queue,
        };
        sp_index_topk(&a, b->sel + t * b->topk, q);
    }
}

void sp_cpu_dsv4_attention(sp_backend *be, const sp_dsv4_attn_args *a)
{
    int64_t ent = a->sel ? a->n_sel : a->comp ? (a->pos0 + a->n_tok) / a->rate : 0;
    int64_t keys = a->window + ent + 1;
    size_t bytes = (size_t)keys * (sizeof(float) + sizeof(const float *));
    char *s = sp_cpu_backend_scratch(be, bytes, "dsv4_attention");
    if (!s)
        return;
    sp_dsv4_attn_args b = *a;
    b.scratch = (float *)(s + (size_t)keys * sizeof(const float *)); /* pointers first: aligned */
    sp_dsv4_attention(&b, (const float **)s);
}

void sp_cpu_swiglu_limit(sp_backend *be, const float *gate, const float *up, int64_t n,
                         float limit, float *out)
{
    (void)be;
    sp_swiglu_limit(gate, up, n, limit, out);
}
