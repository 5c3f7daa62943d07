/* cuda_dsv4.cu: DeepSeek-V4's ops on the GPU (see cuda_ops.h; the scalar references are
 * kernels/cpu/dsv4.c, the math docs/DEEPSEEK_V4.md).
 *
 * Most of these are per-row glue, so each kernel gives one thread (or one block) the same
 * sequence of operations the CPU reference runs for one output, in the same order: with
 * --fmad=false nothing is contracted, so element-wise results equal the CPU's bit for bit
 * except where expf/log1pf differ by an ulp (GPU math library). The exceptions, reductions
 * the GPU splits across threads in a fixed tree (so a result depends only on its own
 * inputs and shape, never on the batch), are the compressed entry's RMSNorm and the
 * attention's dot products and softmax denominator.
 *
 * The lightning indexer chooses discretely, so it computes each (query, entry) score with
 * exactly the CPU's loop (bit-identical scores from identical inputs), then one thread per
 * query runs torch.topk's selection (kernels/topk_torch_impl.h, the very code the CPU
 * runs) over a queue in device memory: from the same scores both backends keep the same
 * entries, ties included, and a query's choice never depends on its batch. */
#include "kernels/cuda/decode.cuh"

#include <math.h>

#define TT_FN static __device__
#include "kernels/topk_torch_impl.h"

#define DV_THREADS 128
#define DV_MAX_SMEM (200 * 1024) /* attention's dynamic shared memory (under Hopper's 227 KB) */

static unsigned dv_blocks(int64_t n) { return spc_grid_blocks(n, DV_THREADS); }

static __device__ __forceinline__ float dv_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* ---- hyper-connections ----------------------------------------------------------------- */

static __device__ void dv_sinkhorn(float *comb, int64_t N, int64_t iters, float eps)
{
    for (int64_t it = 0; it < iters; it++) {
        if (it > 0)
            for (int64_t i = 0; i < N; i++) {
                float s = 0.0f;
                for (int64_t j = 0; j < N; j++)
                    s += comb[i * N + j];
                for (int64_t j = 0; j < N; j++)
                    comb[i * N + j] /= s + eps;
            }
        for (int64_t j = 0; j < N; j++) {
            float s = 0.0f;
            for (int64_t i = 0; i < N; i++)
                s += comb[i * N + j];
            for (int64_t i = 0; i < N; i++)
                comb[i * N + j] /= s + eps;
        }
    }
}

/* One thread per token: sp_hc_weights' sequence. */
__global__ void k_hc_weights(const float *mix, int64_t mix_stride, const float *base,
                             const float *scale, int64_t n, int64_t N, int64_t iters, float eps,
                             float *pre, float *post, float *comb)
{
    spc_pdl_trigger();
    SPC_GRID_STRIDE(t, n)
    {
        const float *x = mix + t * mix_stride;
        for (int64_t k = 0; k < N; k++)
            pre[t * N + k] = dv_sigmoid(x[k] * scale[0] + base[k]) + eps;
        if (!post)
            continue;
        for (int64_t k = 0; k < N; k++)
            post[t * N + k] = 2.0f * dv_sigmoid(x[N + k] * scale[1] + base[N + k]);
        float *c = comb + t * N * N;
        for (int64_t i = 0; i < N; i++) {
            float *r = c + i * N;
            float mx = -INFINITY;
            for (int64_t j = 0; j < N; j++) {
                r[j] = x[2 * N + i * N + j] * scale[2] + base[2 * N + i * N + j];
                mx = r[j] > mx ? r[j] : mx;
            }
            float s = 0.0f;
            for (int64_t j = 0; j < N; j++) {
                r[j] = expf(r[j] - mx);
                s += r[j];
            }
            for (int64_t j = 0; j < N; j++)
                r[j] = r[j] / s + eps;
        }
        dv_sinkhorn(c, N, iters, eps);
    }
}

extern "C" int spc_hc_weights(void *stream, const float *mix, int64_t mix_stride, const float *base,
                              const float *scale, int64_t n, int64_t N, int64_t iters, float eps,
                              float *pre, float *post, float *comb)
{
    if (n < 0 || N <= 0 || iters < 0 || (post && !comb))
        return (int)cudaErrorInvalidValue;
    if (!n)
        return 0;
    k_hc_weights<<<dv_blocks(n), DV_THREADS, 0, (cudaStream_t)stream>>>(mix, mix_stride, base, scale, n, N,
                                                                        iters, eps, pre, post, comb);
    return spc_launch_status();
}

/* out[t, d] = sum_k pre[t, k] streams[t, k, d], k ascending. */
__global__ void k_hc_collapse(const float *streams, const float *pre, int64_t n, int64_t N,
                              int64_t H, float *out)
{
    spc_pdl_trigger();
    SPC_GRID_STRIDE(i, n * H)
    {
        int64_t t = i / H, d = i % H;
        float s = 0.0f;
        for (int64_t k = 0; k < N; k++)
            s += pre[t * N + k] * streams[(t * N + k) * H + d];
        out[i] = s;
    }
}

extern "C" int spc_hc_collapse(void *stream, const float *streams, const float *pre, int64_t n,
                               int64_t N, int64_t H, float *out)
{
    if (n < 0 || N <= 0 || H <= 0 || n > INT64_MAX / H)
        return (int)cudaErrorInvalidValue;
    if (!n)
        return 0;
    k_hc_collapse<<<dv_blocks(n * H), DV_THREADS, 0, (cudaStream_t)stream>>>(streams, pre, n, N, H, out);
    return spc_launch_status();
}

/* out[t, k, d] = post[t, k] y[t, d] + sum_j comb[t, j, k] streams[t, j, d], j ascending. */
__global__ void k_hc_expand(const float *streams, const float *y, const float *post,
                            const float *comb, int64_t n, int64_t N, int64_t H, float *out)
{
    spc_pdl_trigger();
    SPC_GRID_STRIDE(i, n * N * H)
    {
        int64_t t = i / (N * H), k = (i / H) % N, d = i % H;
        const float *c = comb + t * N * N, *st = streams + t * N * H;
        float s = 0.0f;
        for (int64_t j = 0; j < N; j++)
            s += c[j * N + k] * st[j * H + d];
        out[i] = post[t * N + k] * y[t * H + d] + s;
    }
}

extern "C" int spc_hc_expand(void *stream, const float *streams, const float *y, const float *post,
                             const float *comb, int64_t n, int64_t N, int64_t H, float *out)
{
    if (n < 0 || N <= 0 || H <= 0 || N > INT64_MAX / H || n > INT64_MAX / (N * H))
        return (int)cudaErrorInvalidValue;
    if (!n)
        return 0;
    k_hc_expand<<<dv_blocks(n * N * H), DV_THREADS, 0, (cudaStream_t)stream>>>(streams, y, post, comb, n,
                                                                               N, H, out);
    return spc_launch_status();
}

/* ---- RoPE on the trailing dims ----------------------------------------------------------- */

static __device__ __forceinline__ void dv_rope_pair(float *x, int64_t i, int64_t half, const float *cs,
                                                    bool inverse)
{
    float c = cs[i], s = inverse ? -cs[half + i] : cs[half + i];
    float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * c - b * s;
    x[2 * i + 1] = b * c + a * s;
}

/* One thread per (token, head, pair). */
__global__ void k_rope_tail(float *x, int64_t n, int64_t n_heads, int64_t tok_stride,
                            int64_t head_stride, int64_t rot, const float *cs, bool inverse)
{
    spc_pdl_trigger();
    const int64_t half = rot / 2;
    SPC_GRID_STRIDE(i, n * n_heads * half)
    {
        int64_t t = i / (n_heads * half), h = (i / half) % n_heads, p = i % half;
        dv_rope_pair(x + t * tok_stride + h * head_stride, p, half, cs + t * rot, inverse);
    }
}

extern "C" int spc_rope_tail(void *stream, float *x, int64_t n, int64_t n_heads, int64_t tok_stride,
                             int64_t head_stride, int64_t rot, const float *cs, int inverse)
{
    if (n < 0 || n_heads < 0 || rot < 0 || rot % 2 || (n_heads && n > INT64_MAX / n_heads / (rot + 1)))
        return (int)cudaErrorInvalidValue;
    if (!n || !n_heads || !rot)
        return 0;
    k_rope_tail<<<dv_blocks(n * n_heads * (rot / 2)), DV_THREADS, 0, (cudaStream_t)stream>>>(
        x, n, n_heads, tok_stride, head_stride, rot, cs, inverse != 0);
    return spc_launch_status();
}

/* ---- compressed entries ------------------------------------------------------------------ */

/* One slot of entry w, as kernels/cpu/dsv4.c's slot(): value and gate of channel d. */
static __device__ void dv_slot(const sp_compress_args &a, int64_t w, int64_t s, int64_t d, float *v,
                               float *g)
{
    const int64_t m = a.rate, hd = a.hd;
    if (!a.overlap) {
        const int64_t p = w * m + s;
        *v = a.kv[p * a.stride + d];
        *g = a.gate[p * a.stride + d] + a.ape[s * hd + d];
        return;
    }
    if (s < m) {
        if (w == 0) {
            *v = 0.0f;
            *g = -INFINITY;
            return;
        }
        const int64_t p = (w - 1) * m + s;
        *v = a.kv[p * a.stride + d];
        *g = a.gate[p * a.stride + d] + a.ape[s * 2 * hd + d];
        return;
    }
    const int64_t p = w * m + (s - m);
    *v = a.kv[p * a.stride + hd + d];
    *g = a.gate[p * a.stride + hd + d] + a.ape[(s - m) * 2 * hd + hd + d];
}

/* The block's fixed-order sum of the DV_THREADS values v (thread 0's result is returned
 * to every thread): a warp butterfly, then the warps' sums in order. */
static __device__ float dv_block_sum(float v, float *part)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(SPC_FULL_MASK, v, off);
    __syncthreads(); /* part may still be read from an earlier call */
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = 0.0f;
    for (int w = 0; w < DV_THREADS / 32; w++)
        s += part[w];
    return s;
}

/* One block per entry: the per-channel softmax over the window's slots (sp_compress_entry's
 * loops), then RMSNorm (fixed tree) and RoPE at the window's first position. */
__global__ void __launch_bounds__(DV_THREADS)
k_compress(const sp_compress_args a, int64_t w0, const float *cs, float *out, int64_t out_stride)
{
    spc_pdl_trigger();
    __shared__ float part[DV_THREADS / 32];
    const int64_t w = w0 + blockIdx.x, slots = a.overlap ? 2 * a.rate : a.rate, hd = a.hd;
    float *o = out + (int64_t)blockIdx.x * out_stride;
    float sq = 0.0f;
    for (int64_t d = threadIdx.x; d < hd; d += DV_THREADS) {
        float mx = -INFINITY, v, g;
        for (int64_t s = 0; s < slots; s++) {
            dv_slot(a, w, s, d, &v, &g);
            mx = g > mx ? g : mx;
        }
        float den = 0.0f;
        for (int64_t s = 0; s < slots; s++) {
            dv_slot(a, w, s, d, &v, &g);
            den += expf(g - mx);
        }
        float acc = 0.0f;
        for (int64_t s = 0; s < slots; s++) {
            dv_slot(a, w, s, d, &v, &g);
            acc += v * (expf(g - mx) / den);
        }
        o[d] = acc;
        sq = fmaf(acc, acc, sq);
    }
    float ms = dv_block_sum(sq, part) / (float)hd;
    float inv = 1.0f / sqrtf(ms + a.eps);
    for (int64_t d = threadIdx.x; d < hd; d += DV_THREADS)
        o[d] = a.norm[d] * (o[d] * inv);
    __syncthreads(); /* the pairs below cross threads' channels */
    const int64_t half = a.rot / 2;
    const float *c = cs + (int64_t)blockIdx.x * a.rot;
    for (int64_t p = threadIdx.x; p < half; p += DV_THREADS)
        dv_rope_pair(o + hd - a.rot, p, half, c, false);
}

extern "C" int spc_compress(void *stream, const sp_compress_args *a, int64_t w0, int64_t w1,
                            const float *cs, float *out, int64_t out_stride)
{
    if (!a || w0 < 0 || w1 < w0 || w1 - w0 > 0x7fffffff || a->rate <= 0 || a->hd <= 0 ||
        a->rot < 0 || a->rot % 2 || a->rot > a->hd || !a->norm)
        return (int)cudaErrorInvalidValue;
    if (w1 == w0)
        return 0;
    k_compress<<<(unsigned)(w1 - w0), DV_THREADS, 0, (cudaStream_t)stream>>>(*a, w0, cs, out, out_stride);
    return spc_launch_status();
}

/* ---- lightning indexer ------------------------------------------------------------------- */

struct dv_index {
    const float *q, *w, *keys;
    int64_t key_stride, n_heads, hd, topk, rate, pos0, n_tok, n_queue, cap;
    float ss, ws; /* 1 / sqrt(hd), 1 / sqrt(n_heads), computed on the host as the CPU does */
    int32_t *sel;
    tt_elem *queue; /* [n_tok, cap] */
};

static __device__ __forceinline__ int64_t dv_n_valid(const dv_index &b, int64_t t)
{
    return (b.pos0 + t + 1) / b.rate;
}

static __device__ __forceinline__ int64_t dv_n_queue(const dv_index &b, int64_t t)
{
    int64_t nv = dv_n_valid(b, t);
    return b.n_queue > nv ? b.n_queue : nv;
}

/* Queue element (t, s): sp_index_topk's score loop, or -inf past the query's entries. */
__global__ void k_index_scores(const dv_index b)
{
    spc_pdl_trigger();
    SPC_GRID_STRIDE(i, b.n_tok * b.cap)
    {
        int64_t t = i / b.cap, s = i % b.cap;
        if (s >= dv_n_queue(b, t))
            continue;
        float tot = -INFINITY;
        if (s < dv_n_valid(b, t)) {
            const float *k = b.keys + s * b.key_stride, *q = b.q + t * b.n_heads * b.hd;
            const float *w = b.w + t * b.n_heads;
            tot = 0.0f;
            for (int64_t h = 0; h < b.n_heads; h++) {
                const float *qh = q + h * b.hd;
                float dot = 0.0f;
                for (int64_t d = 0; d < b.hd; d++)
                    dot += qh[d] * k[d];
                tot += (fmaxf(dot, 0.0f) * b.ss) * (w[h] * b.ws);
            }
        }
        b.queue[i].v = tot;
        b.queue[i].i = s;
    }
}

/* One thread per query: torch.topk's selection, then the valid entries ascending, -1 padded. */
__global__ void k_index_select(const dv_index b)
{
    spc_pdl_trigger();
    SPC_GRID_STRIDE(t, b.n_tok)
    {
        int32_t *sel = b.sel + t * b.topk;
        tt_elem *q = b.queue + t * b.cap;
        const int64_t nq = dv_n_queue(b, t), nv = dv_n_valid(b, t);
        for (int64_t j = 0; j < b.topk; j++)
            sel[j] = -1;
        const int64_t k = b.topk < nq ? b.topk : nq;
        if (k <= 0)
            continue;
        tt_topk_torch(q, nq, k);
        int64_t n = 0;
        for (int64_t j = 0; j < k; j++)
            if (q[j].i < nv)
                sel[n++] = (int32_t)q[j].i;
        for (int64_t i = 1; i < n; i++)
            for (int64_t j = i; j > 0 && sel[j - 1] > sel[j]; j--) {
                int32_t x = sel[j];
                sel[j] = sel[j - 1];
                sel[j - 1] = x;
            }
    }
}

extern "C" int spc_index_queue_bytes(const sp_index_batch *b, size_t *bytes)
{
    *bytes = 0;
    if (!b || b->rate <= 0 || b->n_tok < 0 || b->pos0 < 0 || b->n_queue < 0 ||
        b->pos0 > INT64_MAX - b->n_tok)
        return (int)cudaErrorInvalidValue;
    int64_t most = (b->pos0 + b->n_tok) / b->rate;
    int64_t cap = most > b->n_queue ? most : b->n_queue;
    if (cap > 0 && (uint64_t)b->n_tok > SIZE_MAX / sizeof(tt_elem) / (uint64_t)cap)
        return (int)cudaErrorInvalidValue;
    *bytes = (size_t)b->n_tok * (size_t)cap * sizeof(tt_elem);
    return 0;
}

extern "C" int spc_index_topk(void *stream, const sp_index_batch *b, void *queue, size_t queue_bytes)
{
    size_t need = 0;
    int rc = spc_index_queue_bytes(b, &need);
    if (rc || queue_bytes < need || b->n_heads <= 0 || b->hd <= 0 || b->topk < 0)
        return rc ? rc : (int)cudaErrorInvalidValue;
    if (!b->n_tok)
        return 0;
    int64_t most = (b->pos0 + b->n_tok) / b->rate;
    dv_index d = {b->q, b->w, b->keys, b->key_stride, b->n_heads, b->hd, b->topk, b->rate, b->pos0,
                  b->n_tok, b->n_queue, most > b->n_queue ? most : b->n_queue,
                  1.0f / sqrtf((float)b->hd), 1.0f / sqrtf((float)b->n_heads), b->sel,
                  (tt_elem *)queue};
    cudaStream_t s = (cudaStream_t)stream;
    if (d.cap > 0)
        k_index_scores<<<dv_blocks(d.n_tok * d.cap), DV_THREADS, 0, s>>>(d);
    k_index_select<<<dv_blocks(d.n_tok), DV_THREADS, 0, s>>>(d);
    return spc_launch_status();
}

/* ---- attention: window + compressed entries ---------------------------------------------- */

/* Key j of the query at pos: the window's rows (lo..pos), then the entries (CSA: the
 * compacted selection in ents, HCA: 0, 1, ...). */
static __device__ __forceinline__ const float *dv_key(const sp_dsv4_attn_args &a, int64_t lo,
                                                      int64_t n_win, const int32_t *ents, int64_t j)
{
    if (j < n_win)
        return a.kv + (lo + j) * a.kv_stride;
    j -= n_win;
    return a.comp + (a.sel ? (int64_t)ents[j] : j) * a.comp_stride;
}

/* One block per (query, head). Dynamic shared memory: the key count's logits, then the
 * compacted selection. Dots: warp w takes keys w, w + 4, ..., its lanes the dims in a
 * butterfly; max exact; the denominator a fixed tree; each output dim sums its keys in
 * ascending order as the CPU does. */
__global__ void __launch_bounds__(DV_THREADS) k_dsv4_attention(const sp_dsv4_attn_args a, int64_t max_keys)
{
    spc_pdl_trigger();
    extern __shared__ float smem[];
    __shared__ float part[DV_THREADS / 32];
    __shared__ int64_t n_ent_s;
    float *p = smem;
    int32_t *ents = (int32_t *)(smem + max_keys);
    const int64_t t = blockIdx.y, h = blockIdx.x, pos = a.pos0 + t;
    const int64_t lo = pos - a.window + 1 > 0 ? pos - a.window + 1 : 0, n_win = pos - lo + 1;
    if (threadIdx.x == 0) {
        int64_t n = 0;
        if (a.comp && a.sel) {
            for (int64_t j = 0; j < a.n_sel; j++)
                if (a.sel[t * a.n_sel + j] >= 0)
                    ents[n++] = a.sel[t * a.n_sel + j];
        } else if (a.comp) {
            n = (pos + 1) / a.rate;
        }
        n_ent_s = n;
    }
    __syncthreads();
    const int64_t n_keys = n_win + n_ent_s;
    const float *q = a.q + t * a.q_stride + h * a.hd;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int64_t j = warp; j < n_keys; j += DV_THREADS / 32) {
        const float *r = dv_key(a, lo, n_win, ents, j);
        float dot = 0.0f;
        for (int64_t d = lane; d < a.hd; d += 32)
            dot = fmaf(q[d], r[d], dot);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            dot += __shfl_xor_sync(SPC_FULL_MASK, dot, off);
        if (lane == 0)
            p[j] = dot * a.scale;
    }
    __syncthreads();
    const float sink = a.sinks ? a.sinks[h] : -INFINITY;
    float mx = sink;
    for (int64_t j = 0; j < n_keys; j++) /* every thread: the same exact max */
        mx = p[j] > mx ? p[j] : mx;
    __syncthreads(); /* all maxima read before p is overwritten */
    float part_sum = 0.0f;
    for (int64_t j = threadIdx.x; j < n_keys; j += DV_THREADS) {
        p[j] = expf(p[j] - mx);
        part_sum += p[j];
    }
    const float den = expf(sink - mx) + dv_block_sum(part_sum, part);
    float *o = a.out + (t * a.n_heads + h) * a.hd;
    for (int64_t d = threadIdx.x; d < a.hd; d += DV_THREADS) {
        float acc = 0.0f;
        for (int64_t j = 0; j < n_keys; j++)
            acc += (p[j] / den) * dv_key(a, lo, n_win, ents, j)[d];
        o[d] = acc;
    }
}

extern "C" int spc_dsv4_attention(void *stream, const sp_dsv4_attn_args *a)
{
    if (!a || a->n_tok < 0 || a->n_tok > 65535 || a->n_heads <= 0 || a->n_heads > 65535 || a->hd <= 0 ||
        a->window <= 0 || a->pos0 < 0 || a->rate <= 0 || (a->sel && a->n_sel < 0))
        return (int)cudaErrorInvalidValue;
    if (!a->n_tok)
        return 0;
    if (a->pos0 > INT64_MAX - a->n_tok)
        return (int)cudaErrorInvalidValue;
    int64_t ent = !a->comp ? 0 : a->sel ? a->n_sel : (a->pos0 + a->n_tok) / a->rate;
    if (a->window > DV_MAX_SMEM || ent > DV_MAX_SMEM) /* keeps the sums below from overflowing */
        return (int)cudaErrorInvalidValue;
    int64_t max_keys = a->window + ent;
    size_t bytes = (size_t)max_keys * sizeof(float) + (size_t)(a->sel ? a->n_sel : 0) * sizeof(int32_t);
    if (bytes > DV_MAX_SMEM)
        return (int)cudaErrorInvalidValue;
    if (bytes > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(k_dsv4_attention, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)bytes);
        if (e != cudaSuccess)
            return (int)e;
    }
    dim3 grid((unsigned)a->n_heads, (unsigned)a->n_tok);
    k_dsv4_attention<<<grid, DV_THREADS, bytes, (cudaStream_t)stream>>>(*a, max_keys);
    return spc_launch_status();
}

/* ---- clamped SwiGLU ---------------------------------------------------------------------- */

__global__ void k_swiglu_limit(const float *gate, const float *up, int64_t n, float limit, float *out)
{
    spc_pdl_trigger();
    SPC_GRID_STRIDE(i, n)
    {
        float g = fminf(gate[i], limit);
        float u = fminf(fmaxf(up[i], -limit), limit);
        out[i] = g / (1.0f + expf(-g)) * u;
    }
}

extern "C" int spc_swiglu_limit(void *stream, const float *gate, const float *up, int64_t n,
                                float limit, float *out)
{
    if (n < 0)
        return (int)cudaErrorInvalidValue;
    if (!n)
        return 0;
    k_swiglu_limit<<<dv_blocks(n), DV_THREADS, 0, (cudaStream_t)stream>>>(gate, up, n, limit, out);
    return spc_launch_status();
}
