/* backend_cpu.h: the CPU backend (backend_cpu.c) and its expert block (moe_cpu.c). */
#ifndef SP_BACKEND_BACKEND_CPU_H
#define SP_BACKEND_BACKEND_CPU_H

#include "backend/backend.h"
#include "util/threadpool.h"

sp_status sp_cpu_backend_new(int n_threads, sp_backend **out, sp_error *err);
/* The backend's worker pool (its kernels run on it). */
sp_pool *sp_cpu_backend_pool(sp_backend *be);
/* moe_ffn on the CPU: tokens grouped by expert, one batched matmul per expert. */
void sp_cpu_moe_ffn(sp_backend *be, const sp_moe_args *a);
/* A grow-only scratch of at least `bytes` (valid until the next call; NULL, with the
 * failure recorded for finish, when out of memory). */
void *sp_cpu_backend_scratch(sp_backend *be, size_t bytes, const char *op);
/* The DeepSeek-V4 ops on the CPU (dsv4_cpu.c; backend.h for their contracts). */
void sp_cpu_hc_weights(sp_backend *be, const float *mix, int64_t mix_stride, const float *base,
                       const float *scale, int64_t n, int64_t N, int64_t iters, float eps,
                       float *pre, float *post, float *comb);
void sp_cpu_hc_collapse(sp_backend *be, const float *streams, const float *pre, int64_t n,
                        int64_t N, int64_t H, float *out);
void sp_cpu_hc_expand(sp_backend *be, const float *streams, const float *y, const float *post,
                      const float *comb, int64_t n, int64_t N, int64_t H, float *out);
void sp_cpu_rope_tail(sp_backend *be, float *x, int64_t n, int64_t n_heads, int64_t tok_stride,
                      int64_t head_stride, int64_t rot, const float *cs, bool inverse);
void sp_cpu_compress(sp_backend *be, const sp_compress_args *a, int64_t w0, int64_t w1,
                     const float *cs, float *out, int64_t out_stride);
void sp_cpu_index_topk(sp_backend *be, const sp_index_batch *b);
void sp_cpu_dsv4_attention(sp_backend *be, const sp_dsv4_attn_args *a);
void sp_cpu_swiglu_limit(sp_backend *be, const float *gate, const float *up, int64_t n,
                         float limit, float *out);

#endif
