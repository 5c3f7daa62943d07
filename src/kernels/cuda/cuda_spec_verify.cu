/* cuda_spec_verify.cu: speculative sampling's acceptance rule on the device, with
 * runtime/spec_verify.c's arithmetic, so the accepted count and the next token are the
 * host's bit for bit and only those two ints cross PCIe (tests/cuda/test_cuda_spec.c
 * compares them).
 *
 * The rows: the target's m + 1 (row i verifies draft i; row m gives the bonus token) and,
 * unless q is one-hot (a deterministic draft), the draft's m rows, each set contiguous
 * wherever it is (rows m + 1 .. 2m of the launch are the draft's). The draw kernels'
 * passes (cuda_sample.cu, all but their walk) give every row its kept weights and lane
 * sums with the sampler's arithmetic; then:
 *   k_spec_totals   a block a row: the kept weights' total S (sample_row.h's order);
 *   k_spec_accept   one thread: p(d_i) = w_p(d_i) / S_p and q(d_i) likewise, accept while
 *                   u_i q(d_i) < p(d_i); the first rejected row, or m;
 *   k_spec_lanes    32 blocks of 32 lanes: the residual max(0, p - q) of the rejected row
 *                   summed in the lane order, each value computed where it is added;
 *   k_spec_walk     a block: the residual's walk to v * R, or the bonus row's draw to
 *                   v_bonus * S.
 * Where the host has to decide (a row the draw kernels leave to the host, a row with no
 * candidate, a residual with no mass) out[0] is -1 and the caller verifies on the host:
 * the same tokens. */
#include "kernels/cuda/cuda_sample.cuh"

/* The verification's own scratch, after the draw kernels' (of 2 SP_SPEC_DEV_K + 1 rows). */
struct spec_state {
    double tot[SPC_SAMPLE_MAX_ROWS];   /* each row's S */
    double lanes[SP_SAMPLE_LANES];     /* the residual's lane sums */
    int32_t ids[SPC_SAMPLE_MAX_ROWS];  /* the draw kernels' ids (-1: left to the host) */
    int row;                           /* the rejected row, or m (all accepted) */
    int fallback;                      /* the host verifies */
};

#define SPEC_ROWS_MAX (2 * SP_SPEC_DEV_K + 1)

static size_t spec_state_at(int64_t n_vocab)
{
    return (spc_sample_scratch_bytes(SPEC_ROWS_MAX, n_vocab) + 255) / 256 * 256;
}

/* Kept weight of id i in row `row` (its head h and request rq), as the walk reads it. */
static __device__ __forceinline__ double kept(const sample_rows &src, int64_t V, void *scratch,
                                              int64_t rows, int64_t row, const sample_head &h,
                                              const sp_sample_req &rq, int64_t i)
{
    const double w = row_weights(scratch, rows, row, V)[i];
    return pass_weight(w, row_ptr(src, row)[i], i, h, rq, h.masked ? 1 : 0);
}

/* The residual max(0, p - q) at i of verify row i0 (spec_verify.c's residual; q one-hot at
 * d when there are no draft rows). */
struct resid_fn {
    sample_rows logits;
    int64_t V, rows, i0, m;
    void *scratch;
    sample_head hp, hq;
    sp_sample_req rp, rq;
    double sp, sq;
    int32_t d;
    bool onehot;
    __device__ double operator()(int64_t i) const
    {
        const double p = kept(logits, V, scratch, rows, i0, hp, rp, i) / sp;
        const double q = onehot ? (i == d ? 1.0 : 0.0)
                                : kept(logits, V, scratch, rows, m + 1 + i0, hq, rq, i) / sq;
        const double r = p - q;
        return r > 0 ? r : 0.0;
    }
};

static __device__ resid_fn resid_of(const sample_rows &logits, int64_t V, int64_t rows, void *scratch,
                                    const sp_sample_req *reqs, const sp_spec_args *a, bool onehot,
                                    const spec_state *st, int64_t i0)
{
    const sample_head *heads = (const sample_head *)scratch;
    const int64_t m = a->m, jq = m + 1 + i0;
    resid_fn f = {logits, V, rows, i0, m, scratch, heads[i0], heads[onehot ? i0 : jq], reqs[i0],
                  reqs[onehot ? i0 : jq], st->tot[i0], onehot ? 1.0 : st->tot[jq], a->drafts[i0],
                  onehot};
    return f;
}

/* a block a row: S, the row's kept total */
__global__ void __launch_bounds__(WALK_THREADS)
k_spec_totals(void *scratch, int64_t rows, spec_state *st)
{
    __shared__ sample_smem sm;
    const int64_t row = blockIdx.x;
    const sample_head h = ((const sample_head *)scratch)[row];
    if (h.done)
        return;
    const double t = block_total(row_lanes(scratch, rows, row, h.masked ? 1 : 0), sm);
    if (threadIdx.x == 0)
        st->tot[row] = t;
}

/* one thread: the acceptance tests in order */
__global__ void k_spec_accept(const sample_rows logits, int64_t V, int64_t rows, void *scratch,
                              const sp_sample_req *reqs, const sp_spec_args *a, bool onehot,
                              spec_state *st, int32_t *out)
{
    if (threadIdx.x != 0)
        return;
    const sample_head *heads = (const sample_head *)scratch;
    const int m = a->m;
    int row = m;
    bool fallback = false;
    for (int i = 0; i < m; i++) {
        const int jq = m + 1 + i;
        if (heads[i].done || (!onehot && heads[jq].done)) {
            fallback = true;
            break;
        }
        const int32_t d = a->drafts[i];
        const double pd = kept(logits, V, scratch, rows, i, heads[i], reqs[i], d) / st->tot[i];
        const double qd =
            onehot ? 1.0 : kept(logits, V, scratch, rows, jq, heads[jq], reqs[jq], d) / st->tot[jq];
        if (qd > 0 && a->u[i] * qd < pd)
            continue;
        row = i; /* rejected */
        break;
    }
    if (!fallback && row == m) /* the bonus row is read only when every draft is accepted */
        fallback = heads[m].done != 0;
    st->row = row;
    st->fallback = fallback;
    out[0] = fallback ? -1 : row;
    out[1] = -1;
}

#define SPEC_LANE_BLOCK 32
#define SPEC_AHEAD 8

/* 32 blocks of 32 lanes: the rejected row's residual, lane c's ids ascending */
__global__ void __launch_bounds__(SPEC_LANE_BLOCK)
k_spec_lanes(const sample_rows logits, int64_t V, int64_t rows, void *scratch, const sp_sample_req *reqs,
             const sp_spec_args *a, bool onehot, spec_state *st)
{
    if (st->fallback || st->row >= a->m)
        return;
    const resid_fn f = resid_of(logits, V, rows, scratch, reqs, a, onehot, st, st->row);
    const int c = blockIdx.x * SPEC_LANE_BLOCK + threadIdx.x;
    st->lanes[c] = lane_sum<SPEC_AHEAD>(c, V, f);
}

/* a block: the residual's draw, or the bonus row's */
__global__ void __launch_bounds__(WALK_THREADS)
k_spec_walk(const sample_rows logits, int64_t V, int64_t rows, void *scratch, const sp_sample_req *reqs,
            const sp_spec_args *a, bool onehot, spec_state *st, int32_t *out)
{
    __shared__ sample_smem sm;
    if (st->fallback)
        return;
    const int m = a->m, row = st->row;
    const bool bonus = row >= m;
    const sample_head h = ((const sample_head *)scratch)[m];
    const double total =
        block_total(bonus ? row_lanes(scratch, rows, m, h.masked ? 1 : 0) : st->lanes, sm);
    if (!bonus && !(total > 0.0)) { /* no residual mass (rounding): the host draws from p */
        if (threadIdx.x == 0) {
            st->fallback = 1;
            out[0] = -1;
        }
        return;
    }
    const double x = (bonus ? a->v_bonus : a->v) * total;
    if (threadIdx.x == 0) {
        double acc;
        sm.bcast[0] = walk_groups(x, sm, &acc);
        sm.dcast[0] = acc;
    }
    __syncthreads();
    int64_t id;
    if (bonus) {
        const sp_sample_req rq = reqs[m];
        id = walk_lane(sm.bcast[0], sm.dcast[0], x, V, sm,
                       [&](int64_t i) { return kept(logits, V, scratch, rows, m, h, rq, i); });
    } else {
        const resid_fn f = resid_of(logits, V, rows, scratch, reqs, a, onehot, st, row);
        id = walk_lane(sm.bcast[0], sm.dcast[0], x, V, sm, f);
    }
    if (threadIdx.x == 0)
        out[1] = (int32_t)id;
}

extern "C" size_t spc_spec_scratch_bytes(int64_t n_vocab)
{
    if (!spc_sample_scratch_bytes(SPEC_ROWS_MAX, n_vocab))
        return 0;
    return spec_state_at(n_vocab) + sizeof(spec_state);
}

extern "C" int spc_spec_verify(void *stream, const float *target, const float *draft, int64_t m,
                               int64_t n_vocab, const sp_sample_req *reqs, const sp_spec_args *args,
                               int32_t *out, void *scratch, size_t scratch_bytes)
{
    if (m < 1 || m > SP_SPEC_DEV_K || n_vocab <= 0 || !target || !scratch ||
        scratch_bytes < spc_spec_scratch_bytes(n_vocab))
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    const bool oh = !draft;
    const int64_t rows = oh ? m + 1 : 2 * m + 1;
    const sample_rows src = {target, oh ? target : draft, m + 1, n_vocab};
    spec_state *st = (spec_state *)((unsigned char *)scratch + spec_state_at(n_vocab));
    int e = spc_sample_prep(s, src, rows, n_vocab, reqs, st->ids, scratch);
    if (e)
        return e;
    k_spec_totals<<<(unsigned)rows, WALK_THREADS, 0, s>>>(scratch, rows, st);
    k_spec_accept<<<1, 32, 0, s>>>(src, n_vocab, rows, scratch, reqs, args, oh, st, out);
    k_spec_lanes<<<SP_SAMPLE_LANES / SPEC_LANE_BLOCK, SPEC_LANE_BLOCK, 0, s>>>(
        src, n_vocab, rows, scratch, reqs, args, oh, st);
    k_spec_walk<<<1, WALK_THREADS, 0, s>>>(src, n_vocab, rows, scratch, reqs, args, oh, st, out);
    return (int)cudaGetLastError();
}
