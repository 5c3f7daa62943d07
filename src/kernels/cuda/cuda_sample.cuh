/* cuda_sample.cuh: what the draw kernels (cuda_sample.cu) leave for a row in their
 * scratch, and the device functions that read it, shared with the speculative
 * verification kernels (cuda_spec_verify.cu) that run the same passes first. */
#ifndef SPC_CUDA_SAMPLE_CUH
#define SPC_CUDA_SAMPLE_CUH

#include "kernels/cuda/cuda_ops.h"
#include "kernels/sample_row.h"

#include <cuda_runtime.h>
#include <stdint.h>

#define SM_THREADS SP_SAMPLE_LANES

#define SEL_BINS 2048 /* the radix select's digits: 11, 11 and 10 bits */

/* What the launches pass on for a row (the scratch's first part). ntop, n_ok, arrive and
 * the histogram are accumulated by many blocks (ntop = ~top, by atomicMax from 0) and set
 * back to 0 by the last block of their pass, so every launch finds them so (the scratch
 * starts zeroed). */
struct sample_head {
    unsigned long long ntop; /* ~(rank << 32 | id) of the top candidate */
    int n_ok;                /* non-NaN logits */
    int done;                /* the id is written (greedy, no candidate, or left to the host) */
    float lmax;              /* the top candidate's logit */
    uint32_t kth;            /* the largest candidate rank (top-k's threshold, else all) */
    int n_cand;              /* candidates */
    int masked;              /* top-p or min-p: pass 1's lane sums are the kept ones */
    unsigned long long cut;  /* top-p: the last kept (rank << 32 | id); else ~0 */
    /* the many-block radix select (k_sample_scan's histogram, then k_sample_sel's two
     * passes; the last block of a pass to arrive picks its digit) */
    int sel_k;               /* k to select (0: none): top-k's, or SP_SAMPLE_HEAD for top-p */
    int sel_topk;            /* the select is top-k's (else top-p's gather bound) */
    uint32_t prefix;         /* the digits picked so far */
    int krem;                /* k within the prefix's bucket */
    uint32_t below;          /* top-p: gather ranks < below (valid when sel_k && !sel_topk) */
    unsigned arrive;         /* blocks of the pass done (the last sets it back to 0) */
};

#define SCAN_THREADS 256
#define SCAN_PER 8 /* ids a thread */
#define LANE_BLOCK 32

/* The scratch: SPC_SAMPLE_MAX_ROWS heads and select histograms (SEL_BINS ints a row) at fixed
 * places, whatever a launch's row count (their counters must be found at 0 by the next
 * launch, of any count), then two sets of lane sums a row (passes 0 and 1) and the rows'
 * weights (n_vocab doubles a row), written before they are read. */

static __host__ __device__ size_t heads_bytes(int64_t rows)
{
    (void)rows;
    return ((size_t)SPC_SAMPLE_MAX_ROWS * (sizeof(sample_head) + SEL_BINS * sizeof(int)) + 255) / 256 * 256;
}

static __device__ int *row_hist(void *scratch, int64_t rows, int64_t row)
{
    (void)rows;
    return (int *)((unsigned char *)scratch + (size_t)SPC_SAMPLE_MAX_ROWS * sizeof(sample_head)) +
           row * SEL_BINS;
}

static __device__ double *row_lanes(void *scratch, int64_t rows, int64_t row, int pass)
{
    return (double *)((unsigned char *)scratch + heads_bytes(rows)) +
           ((size_t)row * 2 + (size_t)pass) * SP_SAMPLE_LANES;
}

static __device__ double *row_weights(void *scratch, int64_t rows, int64_t row, int64_t V)
{
    return (double *)((unsigned char *)scratch + heads_bytes(rows)) +
           (size_t)rows * 2 * SP_SAMPLE_LANES + (size_t)row * (size_t)V;
}

/* A candidate's weight (0 for the others), as the host computes it (runtime/sampler.c,
 * kept_weights). */
static __device__ __forceinline__ double cand_weight(float li, const sample_head &h, double inv_t)
{
    if (!(li == li) || sp_sample_rank(li) > h.kth)
        return 0.0;
    return sp_sample_weight(li, h.lmax, inv_t, (double)h.lmax * inv_t);
}

/* Weight w of id i in pass 0 (as is) or pass 1 (top-p's cut and min-p applied). */
static __device__ __forceinline__ double pass_weight(double w, float li, int64_t i,
                                                     const sample_head &h, const sp_sample_req &rq,
                                                     int pass)
{
    if (pass == 1 && rq.top_p < 1.0f && w > 0.0 &&
        !sp_sample_before(sp_sample_rank(li), i, (uint32_t)(h.cut >> 32), (int64_t)(uint32_t)h.cut))
        w = 0.0;
    if (pass == 1 && rq.min_p > 0.0f && w < (double)rq.min_p)
        w = 0.0;
    return w;
}

struct sample_smem {
    double lane[SP_SAMPLE_LANES];
    double group[SP_SAMPLE_GROUPS];
    double buf[SM_THREADS];
    uint64_t head[SP_SAMPLE_HEAD];
    int hist[SEL_BINS];
    int bcast[4 + SM_THREADS / 32];
    double dcast[2];
};

/* The groups' sums of a row's lane sums (pass `pass`) into sm, and their total. */
static __device__ double block_total(const double *lanes, sample_smem &sm)
{
    for (int c = threadIdx.x; c < SP_SAMPLE_LANES; c += blockDim.x)
        sm.lane[c] = lanes[c];
    __syncthreads();
    if (threadIdx.x < SP_SAMPLE_GROUPS) {
        double g = 0.0;
        for (int c = 0; c < SP_SAMPLE_GROUP; c++)
            g = g + sm.lane[threadIdx.x * SP_SAMPLE_GROUP + c];
        sm.group[threadIdx.x] = g;
    }
    __syncthreads();
    double total = 0.0;
    for (int g = 0; g < SP_SAMPLE_GROUPS; g++)
        total = total + sm.group[g];
    return total;
}

#define WALK_THREADS 256 /* the walks' blocks */

/* Where a launch's rows are: rows below split from a, the others from b, stride floats
 * apart (a verification's target rows and its draft's rows, or one array). */
struct sample_rows {
    const float *a, *b;
    int64_t split, stride;
};

static __device__ __forceinline__ const float *row_ptr(const sample_rows &r, int64_t row)
{
    return row < r.split ? r.a + row * r.stride : r.b + (row - r.split) * r.stride;
}

/* Lane c's sum of value(i) over its ids c, c + L, ... < V ascending (sample_row.h's lane
 * order), AHEAD values fetched before they are added. */
template <int AHEAD, class F>
static __device__ double lane_sum(int c, int64_t V, const F &value)
{
    double t = 0.0;
    for (int64_t i0 = c; i0 < V; i0 += AHEAD * (int64_t)SP_SAMPLE_LANES) {
        double v[AHEAD];
#pragma unroll
        for (int k = 0; k < AHEAD; k++) {
            const int64_t i = i0 + (int64_t)k * SP_SAMPLE_LANES;
            v[k] = i < V ? value(i) : 0.0;
        }
#pragma unroll
        for (int k = 0; k < AHEAD; k++)
            if (i0 + (int64_t)k * SP_SAMPLE_LANES < V)
                t = t + v[k];
    }
    return t;
}

/* The walk's last level, by a block of WALK_THREADS: the ids c, c + L, ... < V of lane c,
 * from the running sum acc (the sum before the lane) to x, their values value(i) computed a
 * chunk at a time by the block and walked by thread 0 as sp_sample_walk walks (the first
 * id whose running sum exceeds x, else the last positive one). The id, valid in thread 0. */
template <class F>
static __device__ int64_t walk_lane(int c, double acc, double x, int64_t V, sample_smem &sm,
                                    const F &value)
{
    const int64_t n = (V - c + SP_SAMPLE_LANES - 1) / SP_SAMPLE_LANES;
    int64_t found = -1, last = -1;
    for (int64_t j0 = 0; j0 < n; j0 += WALK_THREADS) {
        const int64_t j = j0 + threadIdx.x;
        __syncthreads();
        sm.buf[threadIdx.x] = j < n ? value(c + j * SP_SAMPLE_LANES) : 0.0;
        __syncthreads();
        if (threadIdx.x == 0 && found < 0)
            for (int t = 0; t < WALK_THREADS && j0 + t < n; t++) {
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

/* The group, then the lane where the running sum of sm's group and lane sums first exceeds
 * x (thread 0; sm.group and sm.lane filled): the lane, and *acc the sum before it. */
static __device__ int walk_groups(double x, const sample_smem &sm, double *acc)
{
    *acc = 0.0;
    const int64_t g = sp_sample_walk(sm.group, SP_SAMPLE_GROUPS, 1, x, 0.0, acc);
    return (int)(g * SP_SAMPLE_GROUP +
                 sp_sample_walk(sm.lane + g * SP_SAMPLE_GROUP, SP_SAMPLE_GROUP, 1, x, *acc, acc));
}

/* Launches 1 to 7 of spc_sample_rows (cuda_sample.cu), all but the walk: after them each row
 * not done has its head's fields, its weights and its lane sums (pass h.masked). */
int spc_sample_prep(cudaStream_t s, const sample_rows src, int64_t rows, int64_t n_vocab,
                    const sp_sample_req *reqs, int32_t *ids, void *scratch);

#endif
