/* cuda_sample.cu: drawing tokens from logits rows on the device, with
 * kernels/sample_row.h's arithmetic, so a draw here is the host sampler's token bit for
 * bit (runtime/sampler.c is the reference; tests/cuda/test_cuda_sample.c compares them).
 *
 * Eight launches, each for all rows; a pass over a row is spread over many SMs wherever
 * its order allows (a row's count, top and histograms are order-free; its lane sums are
 * one thread a lane, 32 lanes a block), so no SM streams a whole row of 201k logits alone:
 *   k_sample_scan     many blocks a row: the candidates' count and top (atomics), and for
 *                     rows with top-k or top-p the histogram of their ranks' top 11 bits;
 *                     the row's last block to finish writes greedy rows' ids and picks the
 *                     select's first digit;
 *   k_sample_sel      twice, many blocks a row: the radix select's passes over bits 20..10
 *                     and 9..0 (exact counts, any order; the last block picks the digit by
 *                     a block prefix sum): top-k's threshold, or top-p's SP_SAMPLE_HEAD-th
 *                     candidate (the bound of the head's gather);
 *   k_sample_weights  many blocks a row: the candidates' weights into the scratch (the
 *                     exps, most of the arithmetic, over every SM);
 *   k_sample_lanes    32 blocks of 32 threads a row: the weights' lane sums;
 *   k_sample_head     a block a row, top-p rows: the candidates before the
 *                     SP_SAMPLE_HEAD-th gathered into shared memory and sorted, then walked
 *                     by one thread as the host walks them (-1 where the head is longer:
 *                     the caller reads the row back and draws on the host, the same token);
 *   k_sample_lanes    again, rows that top-p or min-p trimmed: the kept weights' sums;
 *   k_sample_walk     a block a row: the groups' and the total's sums and the three-level
 *                     walk.
 * Greedy rows (inv_t 0) take the first index of the maximum. */
#include "kernels/cuda/cuda_sample.cuh"

/* The block's exclusive prefix sum of v (a block of up to 1,024 threads, whole warps);
 * *total receives the sum. */
static __device__ int block_scan(int v, int *warp_sums, int *total)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int x = v;
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o)
            x += y;
    }
    __syncthreads();
    if (lane == 31)
        warp_sums[w] = x;
    __syncthreads();
    if (w == 0) {
        int t = lane < nw ? warp_sums[lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, t, o);
            if (lane >= o)
                t += y;
        }
        if (lane < nw)
            warp_sums[lane] = t; /* inclusive */
    }
    __syncthreads();
    *total = warp_sums[nw - 1];
    return x - v + (w > 0 ? warp_sums[w - 1] : 0);
}

/* The k-th smallest rank (1-based k <= the count) among the ranks <= lim of the row, in
 * three passes of shared-memory histograms (11, 11, 10 bits); *n_le receives how many
 * ranks <= lim are <= it. */
static __device__ uint32_t block_select(const float *l, int64_t V, uint32_t lim, int k,
                                        int *hist, int *bcast, int *n_le)
{
    const int k0 = k;
    uint32_t prefix = 0;
    int last_bin = 0;
    for (int pass = 0; pass < 3; pass++) {
        const int shift = pass == 0 ? 21 : pass == 1 ? 10 : 0;
        const int bins = pass == 2 ? 1024 : 2048;
        const uint32_t hi = pass == 0 ? 0u : 0xffffffffu << (shift + (pass == 2 ? 10 : 11));
        for (int d = threadIdx.x; d < SEL_BINS; d += SM_THREADS)
            hist[d] = 0;
        __syncthreads();
        for (int64_t i = threadIdx.x; i < V; i += SM_THREADS) {
            const uint32_t r = sp_sample_rank(l[i]);
            if (r <= lim && (r & hi) == prefix)
                atomicAdd(&hist[(r >> shift) & (uint32_t)(bins - 1)], 1);
        }
        __syncthreads();
        /* thread t owns bins t * per .. : the bin where the running count reaches k */
        const int per = bins / SM_THREADS, b0 = threadIdx.x * per;
        int mine = 0;
        for (int j = 0; j < per; j++)
            mine += hist[b0 + j];
        int total;
        const int before = block_scan(mine, bcast + 4, &total);
        if (before < k && k <= before + mine) {
            int cum = before, d = b0;
            while (cum + hist[d] < k)
                cum += hist[d++];
            bcast[0] = d;
            bcast[1] = k - cum;
            bcast[2] = hist[d];
        }
        __syncthreads();
        prefix |= (uint32_t)bcast[0] << shift;
        k = bcast[1];
        last_bin = bcast[2];
        __syncthreads();
    }
    *n_le = k0 - k + last_bin;
    return prefix;
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

/* Whether this block is the last of its row's blocks to finish the pass (its writes and
 * atomics before, every block's visible after). */
static __device__ bool last_to_arrive(sample_head *hp, int *flag)
{
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        *flag = atomicAdd(&hp->arrive, 1u) == gridDim.x - 1;
    __syncthreads();
    if (*flag)
        __threadfence();
    return *flag != 0;
}

/* The last block's digit of a select pass over the row's histogram (bins of it, the bucket
 * holding the krem-th): prefix and krem advance; the histogram is zeroed for the next
 * pass. Returns the picked bin's count. */
static __device__ int pick_digit(sample_head *hp, int *hist, int bins, int shift, int *sh)
{
    const int per = bins / blockDim.x, b0 = threadIdx.x * per, k = hp->krem;
    int mine = 0;
    for (int j = 0; j < per; j++)
        mine += __ldcg(hist + b0 + j);
    int total;
    const int before = block_scan(mine, sh + 4, &total);
    if (before < k && k <= before + mine) {
        int cum = before, d = b0;
        while (cum + __ldcg(hist + d) < k)
            cum += __ldcg(hist + d++);
        sh[0] = d;
        sh[1] = k - cum;
        sh[2] = __ldcg(hist + d);
    }
    __syncthreads();
    for (int j = 0; j < per; j++)
        hist[b0 + j] = 0;
    if (threadIdx.x == 0) {
        hp->prefix |= (uint32_t)sh[0] << shift;
        hp->krem = sh[1];
    }
    return sh[2];
}

/* Adds the block's histogram of the ranks in its ids that match (r & hi) == prefix (bins
 * of the bits from shift) to the row's. */
static __device__ void add_hist(const float *l, int64_t V, uint32_t hi, uint32_t prefix, int shift,
                                int bins, int *sh_hist, int *hist)
{
    for (int d = threadIdx.x; d < bins; d += blockDim.x)
        sh_hist[d] = 0;
    __syncthreads();
    const int64_t i0 = (int64_t)blockIdx.x * SCAN_THREADS * SCAN_PER + threadIdx.x;
#pragma unroll
    for (int k = 0; k < SCAN_PER; k++) {
        const int64_t i = i0 + (int64_t)k * SCAN_THREADS;
        const uint32_t r = i < V ? sp_sample_rank(l[i]) : 0xffffffffu;
        if (r != 0xffffffffu && (r & hi) == prefix)
            atomicAdd(&sh_hist[(r >> shift) & (uint32_t)(bins - 1)], 1);
    }
    __syncthreads();
    for (int d = threadIdx.x; d < bins; d += blockDim.x)
        if (sh_hist[d])
            atomicAdd(&hist[d], sh_hist[d]);
}

/* Launch 1 (grid: ids / (SCAN_THREADS SCAN_PER), rows): the candidates' count and top, and
 * for rows that select (top-k, top-p) the histogram of their ranks' top 11 bits. The last
 * block of a row: greedy rows' ids, the head's fields, the select's first digit. */
__global__ void __launch_bounds__(SCAN_THREADS)
k_sample_scan(const sample_rows src, int64_t V, const sp_sample_req *reqs,
              int32_t *ids, void *scratch, int64_t rows)
{
    __shared__ unsigned long long red[SCAN_THREADS / 32];
    __shared__ int ired[SCAN_THREADS / 32], sh_hist[SEL_BINS], sh[4 + SCAN_THREADS / 32], flag;
    const int64_t row = blockIdx.y;
    const float *l = row_ptr(src, row);
    const sp_sample_req rq = reqs[row];
    sample_head *hp = (sample_head *)scratch + row;
    int *hist = row_hist(scratch, rows, row);
    const bool selects = rq.inv_t > 0.0 && (rq.top_k > 0 || rq.top_p < 1.0f);
    uint64_t top = ~0ull;
    int n = 0;
    const int64_t i0 = (int64_t)blockIdx.x * SCAN_THREADS * SCAN_PER + threadIdx.x;
#pragma unroll
    for (int k = 0; k < SCAN_PER; k++) {
        const int64_t i = i0 + (int64_t)k * SCAN_THREADS;
        const uint32_t r = i < V ? sp_sample_rank(l[i]) : 0xffffffffu;
        if (r != 0xffffffffu) {
            n++;
            const uint64_t key = (uint64_t)r << 32 | (uint32_t)i;
            top = key < top ? key : top;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        n += __shfl_xor_sync(0xffffffffu, n, o);
        const uint64_t u = __shfl_xor_sync(0xffffffffu, top, o);
        top = u < top ? u : top;
    }
    if ((threadIdx.x & 31) == 0) {
        red[threadIdx.x >> 5] = top;
        ired[threadIdx.x >> 5] = n;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < SCAN_THREADS / 32; w++) {
            n += ired[w];
            top = red[w] < top ? red[w] : top;
        }
        if (n > 0) {
            atomicAdd(&hp->n_ok, n);
            atomicMax(&hp->ntop, ~top);
        }
    }
    if (selects)
        add_hist(l, V, 0u, 0u, 21, SEL_BINS, sh_hist, hist);
    if (!last_to_arrive(hp, &flag))
        return;
    /* the row's last block */
    const int n_ok = atomicAdd(&hp->n_ok, 0);
    const uint64_t all_top = ~atomicAdd(&hp->ntop, 0ull);
    __syncthreads();
    int sel_k = 0;
    if (rq.top_k > 0 && rq.top_k < n_ok)
        sel_k = rq.top_k;
    else if (rq.top_p < 1.0f && n_ok > SP_SAMPLE_HEAD)
        sel_k = SP_SAMPLE_HEAD;
    const bool greedy = !(rq.inv_t > 0.0) || n_ok == 0;
    if (threadIdx.x == 0) {
        hp->ntop = 0; /* set back for the next launch */
        hp->n_ok = 0;
        hp->arrive = 0;
        hp->done = greedy;
        if (greedy) /* sp_argmax: 0 where logit 0 is NaN */
            ids[row] = n_ok == 0 || l[0] != l[0] ? 0 : (int32_t)(uint32_t)all_top;
        hp->lmax = sp_sample_unrank((uint32_t)(all_top >> 32));
        hp->kth = 0xfffffffeu;
        hp->n_cand = n_ok;
        hp->masked = rq.top_p < 1.0f || rq.min_p > 0.0f;
        hp->cut = ~0ull;
        hp->below = 0xffffffffu;
        hp->sel_k = greedy ? 0 : sel_k;
        hp->sel_topk = rq.top_k > 0 && rq.top_k < n_ok;
        hp->prefix = 0;
        hp->krem = sel_k;
    }
    __syncthreads();
    if (selects && !greedy && sel_k > 0)
        pick_digit(hp, hist, SEL_BINS, 21, sh);
    else if (selects)
        for (int d = threadIdx.x; d < SEL_BINS; d += blockDim.x)
            hist[d] = 0;
}

/* Launches 2 and 3 (grid as launch 1): the select's passes over bits 20..10 and 9..0 of
 * the ranks in the bucket picked so far; after the last, top-k's threshold and candidate
 * count, or top-p's gather bound. */
__global__ void __launch_bounds__(SCAN_THREADS)
k_sample_sel(const sample_rows src, int64_t V, void *scratch, int64_t rows, int pass)
{
    __shared__ int sh_hist[SEL_BINS], sh[4 + SCAN_THREADS / 32], flag;
    const int64_t row = blockIdx.y;
    sample_head *hp = (sample_head *)scratch + row;
    const int sel_k = hp->sel_k;
    if (hp->done || sel_k == 0)
        return;
    const float *l = row_ptr(src, row);
    int *hist = row_hist(scratch, rows, row);
    const int shift = pass == 1 ? 10 : 0, bins = pass == 1 ? 2048 : 1024;
    const uint32_t hi = 0xffffffffu << (shift + (pass == 1 ? 11 : 10));
    add_hist(l, V, hi, hp->prefix, shift, bins, sh_hist, hist);
    if (!last_to_arrive(hp, &flag))
        return;
    const int last_bin = pick_digit(hp, hist, bins, shift, sh);
    __syncthreads();
    if (threadIdx.x == 0) {
        hp->arrive = 0;
        if (pass == 2) {
            const uint32_t result = hp->prefix;
            if (hp->sel_topk) {
                hp->kth = result;
                hp->n_cand = sel_k - hp->krem + last_bin;
            } else {
                hp->below = result;
            }
        }
    }
}

/* Launch 4 (grid: ids / (SCAN_THREADS SCAN_PER), rows): the candidates' weights. */
__global__ void __launch_bounds__(SCAN_THREADS)
k_sample_weights(const sample_rows src, int64_t V, const sp_sample_req *reqs,
                 void *scratch, int64_t rows)
{
    const int64_t row = blockIdx.y;
    const sample_head h = ((const sample_head *)scratch)[row];
    if (h.done)
        return;
    const float *l = row_ptr(src, row);
    double *w = row_weights(scratch, rows, row, V);
    const double inv_t = reqs[row].inv_t;
    const int64_t i0 = (int64_t)blockIdx.x * SCAN_THREADS * SCAN_PER + threadIdx.x;
#pragma unroll
    for (int k = 0; k < SCAN_PER; k++) {
        const int64_t i = i0 + (int64_t)k * SCAN_THREADS;
        if (i < V)
            w[i] = cand_weight(l[i], h, inv_t);
    }
}

#define LANE_AHEAD 16 /* a lane's loads in flight */

/* Launches 5 and 7 (grid: SP_SAMPLE_LANES / LANE_BLOCK, rows; LANE_BLOCK threads): lane c's
 * sum of its weights in pass `pass`, ids c, c + 1024, ... ascending. */
__global__ void __launch_bounds__(LANE_BLOCK)
k_sample_lanes(const sample_rows src, int64_t V, const sp_sample_req *reqs,
               void *scratch, int64_t rows, int pass)
{
    const int64_t row = blockIdx.y;
    const sample_head h = ((const sample_head *)scratch)[row];
    if (h.done || (pass == 1 && !h.masked))
        return;
    const float *l = row_ptr(src, row);
    const double *w = row_weights(scratch, rows, row, V);
    const sp_sample_req rq = reqs[row];
    const int c = blockIdx.x * LANE_BLOCK + threadIdx.x;
    row_lanes(scratch, rows, row, pass)[c] = lane_sum<LANE_AHEAD>(c, V, [&](int64_t i) {
        return pass == 0 ? w[i] : pass_weight(w[i], l[i], i, h, rq, 1);
    });
}

/* Launch 6, a block a row, top-p rows: the head's cut (or the row left to the host). */
__global__ void __launch_bounds__(SM_THREADS)
k_sample_head(const sample_rows src, int64_t V, const sp_sample_req *reqs,
              int32_t *ids, void *scratch, int64_t rows)
{
    __shared__ sample_smem sm;
    const int64_t row = blockIdx.x;
    sample_head *hp = (sample_head *)scratch + row;
    const sample_head h = *hp;
    const sp_sample_req rq = reqs[row];
    if (h.done || !(rq.top_p < 1.0f))
        return;
    const float *l = row_ptr(src, row);
    const double target = (double)rq.top_p * block_total(row_lanes(scratch, rows, row, 0), sm);
    uint32_t below = 0xffffffffu; /* gather ranks < below (all candidates if they fit) */
    const bool all = h.n_cand <= SP_SAMPLE_HEAD;
    if (!all && h.sel_k && !h.sel_topk) {
        below = h.below;
    } else if (!all) { /* top-k over SP_SAMPLE_HEAD: the head's bound selected here */
        int n_le;
        below = block_select(l, V, h.kth, SP_SAMPLE_HEAD, sm.hist, sm.bcast, &n_le);
    }
    if (threadIdx.x == 0)
        sm.bcast[2] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < V; i += SM_THREADS) {
        const uint32_t r = sp_sample_rank(l[i]);
        if (r <= h.kth && (all || r < below))
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
    if (threadIdx.x == 0) { /* the walk, each weight computed as it is added */
        double acc = 0.0;
        int j = 0;
        uint64_t cut = sm.head[0];
        for (; j < n; j++) {
            if (!(acc < target))
                break;
            cut = sm.head[j];
            const uint32_t id = (uint32_t)sm.head[j];
            acc = acc + row_weights(scratch, rows, row, V)[id];
        }
        if (n > 0 && (all || !(j == n && acc < target))) {
            hp->cut = cut;
        } else {
            ids[row] = -1; /* the host draws this row */
            hp->done = 1;
        }
    }
}

/* Launch 8, a block of WALK_THREADS a row: the total and the three-level walk. */
__global__ void __launch_bounds__(WALK_THREADS)
k_sample_walk(const sample_rows src, int64_t V, const sp_sample_req *reqs,
              int32_t *ids, void *scratch, int64_t rows)
{
    __shared__ sample_smem sm;
    const int64_t row = blockIdx.x;
    const sample_head h = ((const sample_head *)scratch)[row];
    if (h.done)
        return;
    const float *l = row_ptr(src, row);
    const sp_sample_req rq = reqs[row];
    const int pass = h.masked ? 1 : 0;
    const double x = rq.u * block_total(row_lanes(scratch, rows, row, pass), sm);
    if (threadIdx.x == 0) {
        double acc;
        sm.bcast[0] = walk_groups(x, sm, &acc);
        sm.dcast[0] = acc;
    }
    __syncthreads();
    const double *w = row_weights(scratch, rows, row, V);
    const int64_t id = walk_lane(sm.bcast[0], sm.dcast[0], x, V, sm, [&](int64_t i) {
        return pass_weight(w[i], l[i], i, h, rq, pass);
    });
    if (threadIdx.x == 0)
        ids[row] = (int32_t)id;
}

extern "C" size_t spc_sample_scratch_bytes(int64_t rows, int64_t n_vocab)
{
    if (rows <= 0 || rows > SPC_SAMPLE_MAX_ROWS || n_vocab <= 0 || n_vocab > INT32_MAX ||
        (uint64_t)rows * (uint64_t)(n_vocab + 2 * SP_SAMPLE_LANES) > SIZE_MAX / 16)
        return 0;
    return heads_bytes(rows) + (size_t)rows * (2 * SP_SAMPLE_LANES + (size_t)n_vocab) * sizeof(double);
}

int spc_sample_prep(cudaStream_t s, const sample_rows src, int64_t rows, int64_t n_vocab,
                    const sp_sample_req *reqs, int32_t *ids, void *scratch)
{
    const unsigned r = (unsigned)rows;
    const unsigned chunks = (unsigned)((n_vocab + SCAN_THREADS * SCAN_PER - 1) / (SCAN_THREADS * SCAN_PER));
    const dim3 lanes(SP_SAMPLE_LANES / LANE_BLOCK, r);
    k_sample_scan<<<dim3(chunks, r), SCAN_THREADS, 0, s>>>(src, n_vocab, reqs, ids, scratch,
                                                           rows);
    k_sample_sel<<<dim3(chunks, r), SCAN_THREADS, 0, s>>>(src, n_vocab, scratch, rows, 1);
    k_sample_sel<<<dim3(chunks, r), SCAN_THREADS, 0, s>>>(src, n_vocab, scratch, rows, 2);
    k_sample_weights<<<dim3(chunks, r), SCAN_THREADS, 0, s>>>(src, n_vocab, reqs, scratch, rows);
    k_sample_lanes<<<lanes, LANE_BLOCK, 0, s>>>(src, n_vocab, reqs, scratch, rows, 0);
    k_sample_head<<<r, SM_THREADS, 0, s>>>(src, n_vocab, reqs, ids, scratch, rows);
    k_sample_lanes<<<lanes, LANE_BLOCK, 0, s>>>(src, n_vocab, reqs, scratch, rows, 1);
    return (int)cudaGetLastError();
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
    const sample_rows src = {logits, logits, rows, stride};
    const int st = spc_sample_prep(s, src, rows, n_vocab, reqs, ids, scratch);
    if (st)
        return st;
    k_sample_walk<<<(unsigned)rows, WALK_THREADS, 0, s>>>(src, n_vocab, reqs, ids, scratch, rows);
    return (int)cudaGetLastError();
}
