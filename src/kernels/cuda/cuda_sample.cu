/* cuda_sample.cu: drawing tokens from logits rows on the device, with
 * kernels/sample_row.h's arithmetic, so a draw here is the host sampler's token bit for
 * bit (runtime/sampler.c is the reference; tests/cuda/test_cuda_sample.c compares them).
 *
 * Three launches. k_sample_prep, a block a row: the candidates' count and top (block
 * reductions) and top-k's threshold (a radix select in four 8-bit passes of shared-memory
 * histograms: exact counts, any order). k_sample_weights, many blocks a row: the weights
 * into the row's scratch (the exps, most of the arithmetic, spread over the SMs: at
 * temperature 1 on the gpt-oss-20b shape, H200, 372 -> 382-385 tok/s against one kernel
 * doing everything). k_sample_draw, a block of SP_SAMPLE_LANES threads a row, thread c
 * lane c of the fixed sum order (a lane's sum is that thread's running sum over ids c,
 * c + 1024, ...): the sums, top-p's head (the candidates before the SP_SAMPLE_HEAD-th
 * gathered into shared memory and sorted, then walked by one thread as the host walks
 * them), min-p, the kept sums again where a warper dropped any, and the three-level walk.
 * Where top-p's head is longer than SP_SAMPLE_HEAD candidates the row's id is -1: the
 * caller reads the row back and draws on the host (the same token). Greedy rows (inv_t 0)
 * take the first index of the maximum. */
#include "kernels/cuda/cuda_ops.h"
#include "kernels/sample_row.h"

#include <cuda_runtime.h>
#include <stdint.h>

#define SM_THREADS SP_SAMPLE_LANES

/* Block-wide sum of an int / min of a uint64 (every thread gets the result). */
static __device__ int block_count(int v, int *sh)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0)
        sh[threadIdx.x >> 5] = v;
    __syncthreads();
    int t = 0;
    for (int w = 0; w < SM_THREADS / 32; w++)
        t += sh[w];
    return t;
}

static __device__ uint64_t block_min(uint64_t v, uint64_t *sh)
{
    for (int o = 16; o > 0; o >>= 1) {
        const uint64_t u = __shfl_xor_sync(0xffffffffu, v, o);
        v = u < v ? u : v;
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0)
        sh[threadIdx.x >> 5] = v;
    __syncthreads();
    uint64_t t = ~0ull;
    for (int w = 0; w < SM_THREADS / 32; w++)
        t = sh[w] < t ? sh[w] : t;
    return t;
}

/* The k-th smallest rank (1-based k) among the ranks <= lim of the row. */
static __device__ uint32_t block_select(const float *l, int64_t V, uint32_t lim, int k,
                                        int *hist, int *bcast)
{
    uint32_t prefix = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        const uint32_t hi = shift == 24 ? 0u : 0xffffffffu << (shift + 8);
        for (int d = threadIdx.x; d < 256; d += SM_THREADS)
            hist[d] = 0;
        __syncthreads();
        for (int64_t i = threadIdx.x; i < V; i += SM_THREADS) {
            const uint32_t r = sp_sample_rank(l[i]);
            if (r <= lim && (r & hi) == prefix)
                atomicAdd(&hist[(r >> shift) & 255], 1);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int cum = 0, d = 0;
            while (d < 255 && cum + hist[d] < k)
                cum += hist[d++];
            bcast[0] = d;
            bcast[1] = k - cum;
        }
        __syncthreads();
        prefix |= (uint32_t)bcast[0] << shift;
        k = bcast[1];
        __syncthreads();
    }
    return prefix;
}

/* The lane / group / total sums of the row's weights (sample_row.h's order). */
static __device__ double block_lsum(const double *w, int64_t V, double *lane, double *group)
{
    double t = 0.0;
    for (int64_t i = threadIdx.x; i < V; i += SM_THREADS)
        t = t + w[i];
    lane[threadIdx.x] = t;
    __syncthreads();
    if (threadIdx.x < SP_SAMPLE_GROUPS) {
        double g = 0.0;
        for (int c = 0; c < SP_SAMPLE_GROUP; c++)
            g = g + lane[threadIdx.x * SP_SAMPLE_GROUP + c];
        group[threadIdx.x] = g;
    }
    __syncthreads();
    double total = 0.0;
    for (int g = 0; g < SP_SAMPLE_GROUPS; g++)
        total = total + group[g];
    return total;
}

/* Sorts s[0, n) ascending (n a power of two <= SP_SAMPLE_HEAD), bitonic. */
static __device__ void block_sort(uint64_t *s, int n)
{
    for (int k = 2; k <= n; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < n; i += SM_THREADS) {
                const int x = i ^ j;
                if (x > i) {
                    const uint64_t a = s[i], b = s[x];
                    if ((a > b) == ((i & k) == 0)) {
                        s[i] = b;
                        s[x] = a;
                    }
                }
            }
            __syncthreads();
        }
}

struct sample_smem {
    double lane[SP_SAMPLE_LANES];
    double group[SP_SAMPLE_GROUPS];
    double buf[SM_THREADS];
    uint64_t head[SP_SAMPLE_HEAD];
    int hist[256];
    int bcast[4];
    double dcast[2];
    uint64_t cut;
};

/* top-p's head: the candidates before the cut in rank order, as the host walks them.
 * Returns false where the head is longer than the gathered candidates (the host draws). */
static __device__ bool head_cut(const float *l, const double *w, int64_t V, uint32_t kth, int n_cand,
                                double target, sample_smem &sm)
{
    uint32_t below = 0xffffffffu; /* gather ranks < below (all candidates if they fit) */
    const bool all = n_cand <= SP_SAMPLE_HEAD;
    if (!all)
        below = block_select(l, V, kth, SP_SAMPLE_HEAD, sm.hist, sm.bcast);
    if (threadIdx.x == 0)
        sm.bcast[2] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < V; i += SM_THREADS) {
        const uint32_t r = sp_sample_rank(l[i]);
        if (r <= kth && (all || r < below))
            sm.head[atomicAdd(&sm.bcast[2], 1)] = (uint64_t)r << 32 | (uint32_t)i;
    }
    __syncthreads();
    const int n = sm.bcast[2];
    int p2 = 1;
    while (p2 < n)
        p2 <<= 1;
    for (int i = n + threadIdx.x; i < p2; i += SM_THREADS)
        sm.head[i] = ~0ull;
    __syncthreads();
    block_sort(sm.head, p2);
    if (threadIdx.x == 0) {
        double acc = 0.0;
        int j = 0;
        uint64_t cut = sm.head[0];
        for (; j < n; j++) {
            if (!(acc < target))
                break;
            cut = sm.head[j];
            acc = acc + w[(uint32_t)sm.head[j]];
        }
        sm.cut = cut;
        sm.bcast[3] = n > 0 && (all || !(j == n && acc < target));
    }
    __syncthreads();
    return sm.bcast[3] != 0;
}

/* The walk's last level: the ids of lane c from acc, staged a chunk at a time. */
static __device__ int64_t walk_lane(const double *w, int64_t V, int c, double x, double acc,
                                    sample_smem &sm)
{
    const int64_t n = (V - c + SP_SAMPLE_LANES - 1) / SP_SAMPLE_LANES;
    int64_t found = -1, last = -1;
    for (int64_t j0 = 0; j0 < n; j0 += SM_THREADS) {
        const int64_t j = j0 + threadIdx.x;
        __syncthreads();
        sm.buf[threadIdx.x] = j < n ? w[c + j * SP_SAMPLE_LANES] : 0.0;
        __syncthreads();
        if (threadIdx.x == 0 && found < 0)
            for (int t = 0; t < SM_THREADS && j0 + t < n; t++) {
                const double v = sm.buf[t];
                if (!(v > 0.0))
                    continue;
                const double next = acc + v;
                if (x < next) {
                    found = j0 + t;
                    break;
                }
                last = j0 + t;
                acc = next;
            }
    }
    return c + SP_SAMPLE_LANES * (found >= 0 ? found : last);
}

/* What the first launch leaves a row (in front of the weights in the scratch). */
struct sample_head {
    float lmax;     /* the top candidate's logit */
    uint32_t kth;   /* the largest candidate rank (top-k's threshold, else all non-NaN) */
    int32_t n_cand; /* candidates */
    int32_t done;   /* the id is written (greedy, or no candidate): the others skip the row */
};

/* Launch 1, a block a row: the candidates' count and top, top-k's threshold; greedy rows
 * (and rows without a candidate) get their id here. */
__global__ void __launch_bounds__(SM_THREADS)
k_sample_prep(const float *logits, int64_t V, int64_t stride, const sp_sample_req *reqs,
              int32_t *ids, sample_head *heads)
{
    __shared__ uint64_t red[SM_THREADS / 32];
    __shared__ int ired[SM_THREADS / 32], hist[256], bcast[4];
    const int64_t row = blockIdx.x;
    const float *l = logits + row * stride;
    const sp_sample_req rq = reqs[row];
    /* the candidates' count and the top (rank << 32 | id: the first index of the maximum) */
    uint64_t top = ~0ull;
    int n_ok = 0;
    for (int64_t i = threadIdx.x; i < V; i += SM_THREADS) {
        const uint32_t r = sp_sample_rank(l[i]);
        if (r != 0xffffffffu) {
            n_ok++;
            const uint64_t key = (uint64_t)r << 32 | (uint32_t)i;
            top = key < top ? key : top;
        }
    }
    n_ok = block_count(n_ok, ired);
    top = block_min(top, red);
    if (!(rq.inv_t > 0.0) || n_ok == 0) { /* greedy (sp_argmax: 0 where logit 0 is NaN) */
        if (threadIdx.x == 0) {
            ids[row] = n_ok == 0 || l[0] != l[0] ? 0 : (int32_t)(uint32_t)top;
            heads[row].done = 1;
        }
        return;
    }
    uint32_t kth = 0xfffffffeu;
    int n_cand = n_ok;
    if (rq.top_k > 0 && rq.top_k < n_ok) {
        kth = block_select(l, V, kth, rq.top_k, hist, bcast);
        int c = 0;
        for (int64_t i = threadIdx.x; i < V; i += SM_THREADS)
            c += sp_sample_rank(l[i]) <= kth;
        n_cand = block_count(c, ired);
    }
    if (threadIdx.x == 0)
        heads[row] = sample_head{sp_sample_unrank((uint32_t)(top >> 32)), kth, n_cand, 0};
}

#define SW_THREADS 256
#define SW_PER 8 /* ids a thread */

/* Launch 2, many blocks a row (grid: ids / (SW_THREADS SW_PER), rows): the weights. */
__global__ void __launch_bounds__(SW_THREADS)
k_sample_weights(const float *logits, int64_t V, int64_t stride, const sp_sample_req *reqs,
                 const sample_head *heads, double *scratch)
{
    const int64_t row = blockIdx.y;
    const sample_head h = heads[row];
    if (h.done)
        return;
    const float *l = logits + row * stride;
    double *w = scratch + row * V;
    const double inv_t = reqs[row].inv_t, m = (double)h.lmax * inv_t;
    const int64_t i0 = (int64_t)blockIdx.x * SW_THREADS * SW_PER + threadIdx.x;
#pragma unroll
    for (int k = 0; k < SW_PER; k++) {
        const int64_t i = i0 + (int64_t)k * SW_THREADS;
        if (i < V) {
            const float li = l[i];
            w[i] = sp_sample_rank(li) <= h.kth ? sp_sample_weight(li, h.lmax, inv_t, m) : 0.0;
        }
    }
}

/* Launch 3, a block a row: top-p's head, min-p, the kept sums and the walk. */
__global__ void __launch_bounds__(SM_THREADS)
k_sample_draw(const float *logits, int64_t V, int64_t stride, const sp_sample_req *reqs,
              const sample_head *heads, int32_t *ids, double *scratch)
{
    __shared__ sample_smem sm;
    const int64_t row = blockIdx.x;
    const sample_head h = heads[row];
    if (h.done)
        return;
    const float *l = logits + row * stride;
    double *w = scratch + row * V;
    const sp_sample_req rq = reqs[row];
    double total = block_lsum(w, V, sm.lane, sm.group);
    bool masked = false;
    if (rq.top_p < 1.0f) {
        if (!head_cut(l, w, V, h.kth, h.n_cand, (double)rq.top_p * total, sm)) {
            if (threadIdx.x == 0)
                ids[row] = -1; /* the host draws this row */
            return;
        }
        const uint32_t cr = (uint32_t)(sm.cut >> 32);
        const int64_t ci = (uint32_t)sm.cut;
        for (int64_t i = threadIdx.x; i < V; i += SM_THREADS)
            if (w[i] > 0.0 && !sp_sample_before(sp_sample_rank(l[i]), i, cr, ci))
                w[i] = 0.0;
        masked = true;
    }
    if (rq.min_p > 0.0f) {
        for (int64_t i = threadIdx.x; i < V; i += SM_THREADS)
            if (w[i] < (double)rq.min_p)
                w[i] = 0.0;
        masked = true;
    }
    if (masked) {
        __syncthreads();
        total = block_lsum(w, V, sm.lane, sm.group);
    }
    const double x = rq.u * total;
    if (threadIdx.x == 0) {
        double acc = 0.0;
        const int64_t g = sp_sample_walk(sm.group, SP_SAMPLE_GROUPS, 1, x, 0.0, &acc);
        const int64_t c = g * SP_SAMPLE_GROUP +
                          sp_sample_walk(sm.lane + g * SP_SAMPLE_GROUP, SP_SAMPLE_GROUP, 1, x, acc, &acc);
        sm.bcast[0] = (int)c;
        sm.dcast[0] = acc;
    }
    __syncthreads();
    const int64_t id = walk_lane(w, V, sm.bcast[0], x, sm.dcast[0], sm);
    if (threadIdx.x == 0)
        ids[row] = (int32_t)id;
}

/* The scratch: the rows' heads (256-byte aligned), then their weights. */
#define SAMPLE_HEADS_BYTES(rows) (((size_t)(rows) * sizeof(sample_head) + 255) / 256 * 256)

extern "C" size_t spc_sample_scratch_bytes(int64_t rows, int64_t n_vocab)
{
    if (rows <= 0 || n_vocab <= 0 || n_vocab > INT32_MAX || rows > INT32_MAX ||
        rows > (int64_t)(SIZE_MAX / 16) / n_vocab)
        return 0;
    return SAMPLE_HEADS_BYTES(rows) + (size_t)rows * (size_t)n_vocab * sizeof(double);
}

extern "C" int spc_sample_rows(void *stream, const float *logits, int64_t rows, int64_t n_vocab,
                               int64_t stride, const sp_sample_req *reqs, int32_t *ids,
                               void *scratch, size_t scratch_bytes)
{
    if (rows < 0 || n_vocab <= 0 || n_vocab > INT32_MAX || stride < n_vocab || !scratch ||
        scratch_bytes < spc_sample_scratch_bytes(rows, n_vocab))
        return (int)cudaErrorInvalidValue;
    if (rows == 0)
        return 0;
    cudaStream_t s = (cudaStream_t)stream;
    sample_head *heads = (sample_head *)scratch;
    double *w = (double *)((unsigned char *)scratch + SAMPLE_HEADS_BYTES(rows));
    k_sample_prep<<<(unsigned)rows, SM_THREADS, 0, s>>>(logits, n_vocab, stride, reqs, ids, heads);
    const unsigned chunks = (unsigned)((n_vocab + SW_THREADS * SW_PER - 1) / (SW_THREADS * SW_PER));
    k_sample_weights<<<dim3(chunks, (unsigned)rows), SW_THREADS, 0, s>>>(logits, n_vocab, stride,
                                                                        reqs, heads, w);
    k_sample_draw<<<(unsigned)rows, SM_THREADS, 0, s>>>(logits, n_vocab, stride, reqs, heads, ids, w);
    return (int)cudaGetLastError();
}
