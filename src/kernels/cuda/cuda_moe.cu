/* cuda_moe.cu: MoE routing and the expert sum (see cuda_ops.h, model/moe_route.h,
 * model/forward_moe.c).
 *
 * Routing: one thread per token runs sp_moe_route's exact sequence of operations.
 * Expert FFN: every (token, slot) pair runs its expert alone (the expert chosen on the
 * device from the id, through a device-resident table), with the matmul's block
 * reduction (one token per tile: the same per-token order as spc_matmul) or, for
 * input-major experts, the transposed product; then the weighted sum per token in
 * ascending expert id. With several tokens and row-major experts the pairs of one
 * expert share a block instead (grouping by expert, below): the same bits, each
 * expert's weights read once per 4 pairs. In fast precision, row-major MXFP4 experts run
 * on tensor cores instead (cuda_moe_tc.cu), alone or grouped alike. spc_moe_route_ffn
 * folds gpt-oss's routing into the first expert kernel of the pairs-alone pass on tensor
 * cores: each block routes its own pair (moe_route_warp.cuh), one launch fewer a layer.
 * (Not in the exact kernels: the routing code took k_moe_rows from 80 to 96 registers.) */
#include "kernels/cuda/cuda_moe_tc.cuh"
#include "kernels/cuda/decode.cuh"
#include "kernels/cuda/moe_route_warp.cuh"
#include "kernels/cuda/rmsnorm_row.cuh"

#include <math.h>

#define RT_THREADS 32
#define RT_MAX_E 1024
#define RT_MAX_K 64
#define RT_MAX_G 64

/* ---- routing ----------------------------------------------------------------------- */

struct rt_cfg {
    int kind;
    int64_t E, k;
    bool norm;
    int64_t G, topk_group;
    float scaling;
    const float *bias;
    bool sqrt_softplus; /* DSV4, HASH: the score function (else sigmoid) */
};

static __device__ int64_t rt_best(const float *v, int64_t n, const bool *taken)
{
    int64_t b = -1;
    for (int64_t i = 0; i < n; i++)
        if (!taken[i] && (b < 0 || v[i] > v[b]))
            b = i;
    return b;
}

static __device__ void rt_top_k(const float *v, int64_t n, int64_t k, int32_t *ids, bool *taken)
{
    for (int64_t i = 0; i < n; i++)
        taken[i] = false;
    for (int64_t j = 0; j < k; j++) {
        int64_t b = rt_best(v, n, taken);
        ids[j] = (int32_t)b;
        if (b >= 0)
            taken[b] = true;
    }
}

/* rt_top_k's picks with the block's one warp (every lane calls it; v, ids and taken in
 * shared memory): with no NaN in v, round j takes the warp's maximum of the untaken values
 * (value descending, index ascending: the order rt_best's `>` scan gives, -0 tying +0),
 * each lane the best of its indices lane, lane + 32, .., then a butterfly; a NaN makes `>`
 * no order, and lane 0 runs rt_top_k itself. (Lane 0 alone took about 28 us a token for
 * gpt-oss-120b's 128 experts, k 4: a dependent shared-memory load an index a round.) */
static __device__ void rt_top_k_warp(const float *v, int64_t n, int64_t k, int32_t *ids, bool *taken)
{
    const int lane = threadIdx.x & 31;
    bool nan = false;
    for (int64_t i = lane; i < n; i += 32)
        nan = nan || v[i] != v[i];
    if (__any_sync(SPC_FULL_MASK, nan)) {
        if (lane == 0)
            rt_top_k(v, n, k, ids, taken);
        __syncwarp();
        return;
    }
    for (int64_t i = lane; i < n; i += 32)
        taken[i] = false;
    __syncwarp();
    for (int64_t j = 0; j < k; j++) {
        float bv = 0.0f;
        int bi = -1;
        for (int i = lane; i < (int)n; i += 32) /* ascending: `>` keeps the lower of equals */
            if (!taken[i] && (bi < 0 || v[i] > bv))
                bv = v[i], bi = i;
        rw_best_of_warp(bv, bi);
        if (lane == 0) { /* bi >= 0: k <= n */
            ids[j] = bi;
            taken[bi] = true;
        }
        __syncwarp();
    }
}

static __device__ void rt_softmax(float *v, int64_t n)
{
    float m = v[0];
    for (int64_t i = 1; i < n; i++)
        m = v[i] > m ? v[i] : m;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        v[i] = expf(__fsub_rn(v[i], m));
        sum = __fadd_rn(sum, v[i]);
    }
    for (int64_t i = 0; i < n; i++)
        v[i] = __fdiv_rn(v[i], sum);
}

/* rt_softmax of v (shared memory) with the warp: the maximum and the sum in lane 0, in
 * rt_softmax's order; each element's exp and quotient by its own lane (the same
 * operations on the same values). */
static __device__ void rt_softmax_warp(float *v, int64_t n)
{
    const int lane = threadIdx.x & 31;
    float m = v[0];
    if (lane == 0)
        for (int64_t i = 1; i < n; i++)
            m = v[i] > m ? v[i] : m;
    m = __shfl_sync(SPC_FULL_MASK, m, 0);
    for (int64_t i = lane; i < n; i += 32)
        v[i] = expf(__fsub_rn(v[i], m));
    __syncwarp();
    float sum = 0.0f;
    if (lane == 0)
        for (int64_t i = 0; i < n; i++)
            sum = __fadd_rn(sum, v[i]);
    sum = __shfl_sync(SPC_FULL_MASK, sum, 0);
    for (int64_t i = lane; i < n; i += 32)
        v[i] = __fdiv_rn(v[i], sum);
    __syncwarp();
}

static __device__ void rt_renorm(float *w, int64_t k, float eps)
{
    float sum = 0.0f;
    for (int64_t j = 0; j < k; j++)
        sum = __fadd_rn(sum, w[j]);
    sum = __fadd_rn(sum, eps);
    for (int64_t j = 0; j < k; j++)
        w[j] = __fdiv_rn(w[j], sum);
}

/* torch's softplus (beta 1, threshold 20), then the square root (moe_route.c). */
static __device__ float rt_sqrt_softplus(float x)
{
    return __fsqrt_rn(x > 20.0f ? x : log1pf(expf(x)));
}

/* torch's sigmoid as moe_route.c computes it. */
static __device__ float rt_sigmoid(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x))); }

/* The weights of the chosen ids from s, renormalized (+ eps) when norm, times scaling
 * (lane 0; an out-of-range id gives a NaN weight). */
static __device__ void rt_chosen_weights(const rt_cfg &c, const float *s, const int32_t *ids, float *w,
                                         bool norm, float eps, float scaling)
{
    if ((threadIdx.x & 31) == 0) {
        for (int64_t j = 0; j < c.k; j++)
            w[j] = ids[j] >= 0 && ids[j] < c.E ? s[ids[j]] : __uint_as_float(0x7fffffffu);
        if (norm)
            rt_renorm(w, c.k, eps);
        if (scaling != 1.0f)
            for (int64_t j = 0; j < c.k; j++)
                w[j] = __fmul_rn(w[j], scaling);
    }
    __syncwarp();
}

/* DeepSeek-V4: scores, top-k of score + bias (HASH: ids given), weights s / (sum + 1e-20)
 * x scaling. l may be choice: each lane reads its logits before writing their choices. */
static __device__ void rt_dsv4(const rt_cfg &c, const float *l, float *s, float *choice, bool *taken,
                               int32_t *ids, float *w)
{
    for (int64_t i = threadIdx.x & 31; i < c.E; i += 32) {
        s[i] = c.sqrt_softplus ? rt_sqrt_softplus(l[i]) : rt_sigmoid(l[i]);
        choice[i] = __fadd_rn(s[i], c.bias ? c.bias[i] : 0.0f);
    }
    __syncwarp();
    if (c.kind == SP_MOE_DSV4)
        rt_top_k_warp(choice, c.E, c.k, ids, taken);
    rt_chosen_weights(c, s, ids, w, true, 1e-20f, c.scaling);
}

/* DeepSeek-V3's grouped sigmoid routing: the groups' top-2 sums pick topk_group groups,
 * the top-k of score + bias among them, weights the scores (renormalized) x scaling. l may
 * be choice, as in rt_dsv4. */
static __device__ void rt_sigmoid_group(const rt_cfg &c, const float *l, float *s, float *choice,
                                        bool *taken, int32_t *ids, float *w)
{
    __shared__ float gscore[RT_MAX_G];
    __shared__ int32_t keep[RT_MAX_G], two[2];
    __shared__ bool kept[RT_MAX_G];
    const int lane = threadIdx.x & 31;
    const int64_t G = c.G, per = c.E / G;
    for (int64_t i = lane; i < c.E; i += 32) {
        s[i] = rt_sigmoid(l[i]);
        choice[i] = __fadd_rn(s[i], c.bias ? c.bias[i] : 0.0f);
    }
    __syncwarp();
    for (int64_t g = 0; g < G; g++) {
        rt_top_k_warp(choice + g * per, per, 2, two, taken);
        if (lane == 0)
            gscore[g] = __fadd_rn(choice[g * per + two[0]], choice[g * per + two[1]]);
        __syncwarp();
    }
    rt_top_k_warp(gscore, G, c.topk_group, keep, taken);
    if (lane == 0) {
        for (int64_t g = 0; g < G; g++)
            kept[g] = false;
        for (int64_t j = 0; j < c.topk_group; j++)
            kept[keep[j]] = true;
    }
    __syncwarp();
    for (int64_t i = lane; i < c.E; i += 32)
        if (!kept[i / per])
            choice[i] = -INFINITY;
    __syncwarp();
    rt_top_k_warp(choice, c.E, c.k, ids, taken);
    rt_chosen_weights(c, s, ids, w, c.norm, 1e-20f, c.scaling);
}

/* One block (one warp) per token: its lanes load the logits, then route together: the
 * element-wise scores by lane, the top-k by rounds of the warp's maximum (rt_top_k_warp),
 * the sequential sums and the k weights in lane 0, every result bit for bit the reference
 * algorithm's (moe_route.c). */
__global__ void __launch_bounds__(RT_THREADS)
k_moe_route(const rt_cfg c, const float *__restrict__ logits, int64_t n_tok, int32_t *ids_out,
            float *w_out)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    __shared__ float s[RT_MAX_E], choice[RT_MAX_E];
    __shared__ bool taken[RT_MAX_E];
    __shared__ int32_t ids[RT_MAX_K];
    __shared__ float w[RT_MAX_K];
    const int64_t t = blockIdx.x;
    if (t >= n_tok)
        return;
    const int64_t E = c.E, k = c.k;
    const int lane = threadIdx.x & 31;
    /* the sigmoid kinds read a logit where its lane then writes the choice (l may be
     * choice: rt_dsv4, rt_sigmoid_group); the softmax kinds route in s */
    const bool sigmoid = c.kind == SP_MOE_DSV4 || c.kind == SP_MOE_HASH ||
                         c.kind == SP_MOE_SIGMOID_GROUP;
    float *lg = sigmoid ? choice : s;
    for (int64_t i = lane; i < E; i += RT_THREADS)
        lg[i] = logits[t * E + i];
    if (c.kind == SP_MOE_HASH)
        for (int64_t j = lane; j < k; j += RT_THREADS)
            ids[j] = ids_out[t * k + j];
    __syncwarp();
    if (c.kind == SP_MOE_DSV4 || c.kind == SP_MOE_HASH) {
        rt_dsv4(c, choice, s, choice, taken, ids, w);
    } else if (c.kind == SP_MOE_SOFTMAX_TOPK) {
        rt_softmax_warp(s, E);
        rt_top_k_warp(s, E, k, ids, taken);
        rt_chosen_weights(c, s, ids, w, c.norm, 0.0f, 1.0f);
    } else if (c.kind == SP_MOE_TOPK_SOFTMAX) {
        rt_top_k_warp(s, E, k, ids, taken);
        if (lane == 0) {
            for (int64_t j = 0; j < k; j++)
                w[j] = s[ids[j]];
            rt_softmax(w, k);
        }
        __syncwarp();
    } else {
        rt_sigmoid_group(c, choice, s, choice, taken, ids, w);
    }
    for (int64_t j = lane; j < k; j += RT_THREADS) {
        ids_out[t * k + j] = ids[j];
        w_out[t * k + j] = w[j];
    }
}

extern "C" int spc_moe_route(void *stream, const sp_route_cfg *cfg, const float *logits,
                             int64_t n_tok, int32_t *ids, float *w)
{
    if (!cfg || n_tok < 0 || cfg->n_experts <= 0 || cfg->n_experts > RT_MAX_E || cfg->top_k <= 0 ||
        cfg->top_k > RT_MAX_K || cfg->top_k > cfg->n_experts)
        return (int)cudaErrorInvalidValue;
    if (cfg->kind != SP_MOE_SOFTMAX_TOPK && cfg->kind != SP_MOE_TOPK_SOFTMAX &&
        cfg->kind != SP_MOE_SIGMOID_GROUP && cfg->kind != SP_MOE_DSV4 && cfg->kind != SP_MOE_HASH)
        return (int)cudaErrorInvalidValue;
    if (cfg->kind == SP_MOE_SIGMOID_GROUP &&
        (cfg->n_group <= 0 || cfg->n_group > RT_MAX_G || cfg->n_experts % cfg->n_group ||
         cfg->n_experts / cfg->n_group < 2 || cfg->topk_group <= 0 || cfg->topk_group > cfg->n_group))
        return (int)cudaErrorInvalidValue;
    if (!n_tok)
        return 0;
    rt_cfg c = {(int)cfg->kind, cfg->n_experts, cfg->top_k, cfg->norm, cfg->n_group,
                cfg->topk_group, cfg->scaling, cfg->score_bias, cfg->sqrt_softplus};
    if (n_tok > 0x7fffffff)
        return (int)cudaErrorInvalidValue;
    spc_launch(k_moe_route, dim3((unsigned)n_tok), dim3(RT_THREADS), (cudaStream_t)stream, true, c,
               logits, n_tok, ids, w);
    return spc_launch_status();
}

/* ---- expert FFN -------------------------------------------------------------------- */

#define MR_ROWS 4
#define MC_THREADS 128
#define MG_TOK 4 /* pairs a group of the exact kernels (their token tile) */

/* Fast precision on tensor cores (cuda_moe_tc.cu): row-major MXFP4 experts whose inputs
 * fit its shared memory. A choice by the model's shape only, never by n_tok. */
static bool moe_tc(const spc_moe_args *a)
{
    const int64_t wide = a->H > a->I ? a->H : a->I;
    return a->fast && a->row_fmt == SP_WF_MXFP4 && a->row_major_only && a->H % 32 == 0 &&
           a->I % 32 == 0 && spc_moe_tc_group_tokens(wide) > 0 && spc_tc_supported();
}

/* gpt-oss's grouped pass on tensor cores as cuda_moe_tc_gemm.cu computes it: the inputs as
 * BF16 pairs in scratch A (a [P, max(2I, H)] float buffer: always room for [P, H] BF16), the
 * activations as BF16 pairs in scratch C ([P, H] floats: room for [P, I] BF16 when
 * I <= 2H), both 16-byte aligned (the backend's carve-up keeps them so). A choice by the
 * model's shape only. */
static bool moe_tc_gemm(const spc_moe_args *a)
{
    return moe_tc(a) && a->act == SPC_ACT_GPTOSS_GLU && a->I <= 2 * a->H &&
           ((uintptr_t)a->scratch_a % 16) == 0 && ((uintptr_t)a->scratch_c % 16) == 0;
}

/* Pairs a group of one expert holds at most (grouping, below): MG_TOK for the exact
 * kernels, up to 8 (one mma column each) on tensor cores, SPC_MOE_TC_GEMM_TOK for
 * cuda_moe_tc_gemm.cu. */
static int moe_group_tokens(const spc_moe_args *a)
{
    if (moe_tc_gemm(a))
        return SPC_MOE_TC_GEMM_TOK;
    return moe_tc(a) ? spc_moe_tc_group_tokens(a->H > a->I ? a->H : a->I) : MG_TOK;
}

/* stage: 0 gate (or gpt-oss gate_up), 1 up, 2 down */
static __device__ __forceinline__ const sp_weight &mx_weight(const spc_expert &e, int stage)
{
    return stage == 0 ? e.gate : stage == 1 ? e.up : e.down;
}

static __device__ __forceinline__ const float *mx_bias(const spc_expert &e, int stage, bool gptoss)
{
    if (!gptoss)
        return NULL;
    return stage == 0 ? e.gate_up_bias : stage == 2 ? e.down_bias : NULL;
}

/* One block's work for row-major experts: rows [r0, r0 + *nr) of expert e's stage matrix
 * against nt <= TT token inputs at x (x_stride apart), the matmul's block order
 * (spc_block_rows): acc[t * MR_ROWS + rr] and *bias. An id outside [0, n_experts) gives
 * NaN rows. False when the block has nothing to store (an input-major expert, rows past
 * the matrix). FMT: the one format of every row-major expert (host-checked), or
 * SP_WF_NONE for a switch per block (every format's code in one kernel: about 140
 * registers, 3 blocks per SM, where one format takes the matmul's 72-96). */
template <int FMT, int TT, int U = 2>
static __device__ __forceinline__ bool mx_block(const spc_expert *__restrict__ experts, int64_t n_experts,
                                                int32_t e, int stage, bool gptoss, int64_t r0, int *nr,
                                                const float *x, int64_t x_stride, int nt, float *acc,
                                                const float **bias)
{
    *bias = NULL;
    if (e < 0 || e >= n_experts) {
        for (int i = 0; i < TT * MR_ROWS; i++)
            acc[i] = __uint_as_float(0x7fffffffu);
        return true;
    }
    const spc_expert &ex = experts[e];
    if (ex.in_major)
        return false;
    const sp_weight w = mx_weight(ex, stage);
    *bias = mx_bias(ex, stage, gptoss);
    if (r0 >= w.rows)
        return false;
    if (w.rows - r0 < *nr)
        *nr = (int)(w.rows - r0);
    const bool vec = spc_weight_vec_ok_dev(w);
    /* float4 loads of x: only full chunks use them */
    const bool xvec = ((uintptr_t)x % 16) == 0 && x_stride % 4 == 0;
#define MX_ROWS(F) spc_block_rows<F, TT, MR_ROWS, U>(w, w, r0, *nr, x, x_stride, nt, vec, xvec, acc)
    SPC_BY_FORMAT(FMT == SP_WF_NONE ? (int)w.format : FMT, MX_ROWS,
                  for (int i = 0; i < TT * MR_ROWS; i++) acc[i] = __uint_as_float(0x7fffffffu))
#undef MX_ROWS
    return true;
}

/* Each (token, slot) pair alone: one block per MR_ROWS output rows, one pair per grid.y;
 * U chunks per row in flight. */
template <int FMT, int U = 2>
__global__ void __launch_bounds__(SPC_SLOTS)
k_moe_rows(const spc_expert *__restrict__ experts, int64_t n_experts,
           const int32_t *__restrict__ ids, int stage, bool gptoss, const float *x, int64_t x_div,
           int64_t x_stride, int64_t n_out, float *y)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    const int64_t p = blockIdx.y;
    const int64_t r0 = (int64_t)blockIdx.x * MR_ROWS;
    if (r0 >= n_out)
        return;
    int nr = (int)(n_out - r0 < MR_ROWS ? n_out - r0 : MR_ROWS);
    float acc[MR_ROWS];
    const float *bias;
    if (mx_block<FMT, 1, U>(experts, n_experts, ids[p], stage, gptoss, r0, &nr, x + (p / x_div) * x_stride,
                            0, 1, acc, &bias))
        spc_block_store<1, MR_ROWS>(acc, r0, nr, 0, 1, y + p * n_out, 0, bias);
}

/* Launches the row-major expert pass, specialized on the experts' one format. FP4 rows
 * of at most SPC_SLOTS chunks (<= 4096 columns: one chunk per slot, as gpt-oss's 2880)
 * keep one chunk per row in flight: a second (U = 2) only costs registers there (113
 * against 80; H100, gpt-oss-20b shape: the 1-token expert pass 101 -> 88 us, decode 227
 * -> 244 tok/s; 1, 2 or 8 rows per block were slower). */
static void moe_rows_launch(cudaStream_t s, const spc_moe_args *a, int stage, bool gptoss,
                            const float *x, int64_t div, int64_t xs, int64_t n_out, float *y)
{
    const int64_t P = a->n_tok * a->k;
    const int64_t cols = stage == 2 ? a->I : a->H;
    if (moe_tc(a)) {
        const spc_moe_tc_job j = {a->experts, a->n_experts, stage, gptoss, x, div, xs, a->ids,
                                  NULL, P, false, n_out, cols, y, false, 0.0f, 0.0f,
                                  spc_route_in{}, a->steps};
        (void)spc_moe_tc_rows(s, j, P); /* its checks hold: moe_tc's and spc_moe_ffn's */
        return;
    }
    dim3 grid((unsigned)((n_out + MR_ROWS - 1) / MR_ROWS), (unsigned)P);
    if ((a->row_fmt == SP_WF_MXFP4 || a->row_fmt == SP_WF_NVFP4) && cols <= 32 * SPC_SLOTS) {
#define MR_U1(F)                                                                                \
    spc_launch(k_moe_rows<F, 1>, grid, dim3(SPC_SLOTS), s, true, a->experts, a->n_experts, a->ids, \
               stage, gptoss, x, div, xs, n_out, y)
        if (a->row_fmt == SP_WF_MXFP4)
            MR_U1(SP_WF_MXFP4);
        else
            MR_U1(SP_WF_NVFP4);
#undef MR_U1
        return;
    }
#define MR_LAUNCH(F)                                                                           \
    spc_launch(k_moe_rows<F>, grid, dim3(SPC_SLOTS), s, true, a->experts, a->n_experts, a->ids, \
               stage, gptoss, x, div, xs, n_out, y)
    SPC_BY_FORMAT(a->row_fmt, MR_LAUNCH, MR_LAUNCH(SP_WF_NONE))
#undef MR_LAUNCH
}

/* ---- grouping by expert -------------------------------------------------------------
 * Several tokens: the pairs that chose one expert are sorted next to each other (stable:
 * ascending pair index within an expert, invalid ids as one more expert after the last)
 * and cut into groups of up to `per` pairs (moe_group_tokens), each computed by one block
 * per MR_ROWS rows with spc_block_rows' token tile (on tensor cores: cuda_moe_tc.cu), so an
 * expert's rows are read once per group rather than once per pair. spc_block_rows' per-output order does not depend on the tile's tokens:
 * the outputs are bit-identical to k_moe_rows'. Gate/up read the token inputs gathered
 * in sorted order and write their outputs in sorted order (the activation is row-wise),
 * so the down product reads its inputs in place and scatters its outputs back to pair
 * order for k_moe_combine.
 * group_ints: order [P] (sorted slot -> pair), groups [3 P] (expert, first slot, count),
 * then the group count. */
#define MG_THREADS 256
#define MG_MAX_E 1024

extern "C" int64_t spc_moe_group_ints(int64_t pairs) { return 4 * pairs + 1; }

static __device__ __forceinline__ int32_t mg_key(int32_t id, int64_t E)
{
    return id >= 0 && id < E ? id : (int32_t)E;
}

/* One block: a stable counting sort of the pairs by expert, then the groups. Warp w owns
 * the pairs of its contiguous range (ranges ascending with w); each warp counts its keys,
 * a key's slots go to the warps in order (cnt[w][key] becomes the warp's first slot
 * among the key's), and each warp places its pairs walking its range 32 at a time, a
 * pair's rank among the equal keys of its step from __match_any_sync: ascending pair
 * index within an expert, as a sequential scan places them. */
#define MG_WARPS (MG_THREADS / 32)
__global__ void __launch_bounds__(MG_THREADS)
k_moe_group(const int32_t *__restrict__ ids, int64_t P, int64_t E, int per, int32_t *gi)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    __shared__ int32_t start[MG_MAX_E + 1], fill[MG_MAX_E + 1], gstart[MG_MAX_E + 1];
    __shared__ int32_t cnt[MG_WARPS][MG_MAX_E + 1];
    int32_t *order = gi, *groups = gi + P;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int64_t span = (P + MG_WARPS - 1) / MG_WARPS;
    const int64_t p0 = warp * span, p1 = p0 + span < P ? p0 + span : P;
    for (int64_t i = tid; i < MG_WARPS * (E + 1); i += MG_THREADS)
        cnt[i / (E + 1)][i % (E + 1)] = 0;
    __syncthreads();
    for (int64_t p = p0 + lane; p < p1; p += 32)
        atomicAdd(&cnt[warp][mg_key(ids[p], E)], 1); /* counts (exact, order-free) */
    __syncthreads();
    for (int64_t e = tid; e <= E; e += MG_THREADS) { /* per key: the warps' first slots */
        int32_t n = 0;
        for (int w = 0; w < MG_WARPS; w++) {
            const int32_t c = cnt[w][e];
            cnt[w][e] = n;
            n += c;
        }
        fill[e] = n;
    }
    __syncthreads();
    if (tid == 0) { /* counts -> first slots; groups per expert -> first groups */
        int32_t slot = 0, g = 0;
        for (int64_t e = 0; e <= E; e++) {
            const int32_t c = fill[e];
            start[e] = slot;
            gstart[e] = g;
            slot += c;
            g += (c + per - 1) / per;
        }
        gi[4 * P] = g;
    }
    __syncthreads();
    for (int64_t b = p0; b < p1; b += 32) { /* every lane of the warp takes each step */
        const int64_t p = b + lane;
        const int32_t key = p < p1 ? mg_key(ids[p], E) : -1;
        const unsigned same = __match_any_sync(SPC_FULL_MASK, key);
        const int rank = __popc(same & ((1u << lane) - 1u));
        const int32_t base = key >= 0 ? start[key] + cnt[warp][key] : 0;
        __syncwarp(); /* every read of cnt before the update */
        if (key >= 0) {
            order[base + rank] = (int32_t)p;
            if (rank == 0)
                cnt[warp][key] += __popc(same);
        }
        __syncwarp();
    }
    __syncthreads();
    for (int64_t e = tid; e <= E; e += MG_THREADS) {
        const int32_t n = fill[e], first = start[e];
        for (int32_t j = 0; j * per < n; j++) {
            int32_t *gr = groups + 3 * (int64_t)(gstart[e] + j);
            gr[0] = (int32_t)e;
            gr[1] = first + j * per;
            gr[2] = n - j * per < per ? n - j * per : per;
        }
    }
}

/* xg[slot] = x[order[slot] / div] (rows of H floats). */
__global__ void k_moe_gather(const float *__restrict__ x, const int32_t *__restrict__ order,
                             int64_t P, int64_t div, int64_t H, float *__restrict__ xg)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    SPC_GRID_STRIDE(i, P * H) {
        const int64_t slot = i / H, h = i % H;
        xg[i] = x[(order[slot] / div) * H + h];
    }
}

/* Block (x, g): rows [MR_ROWS x, +MR_ROWS) of group g's expert for its tokens, whose
 * inputs are rows first.. of xs (x_stride apart); outputs to y row `first + t` (sorted
 * order) or, with scatter, row order[first + t] (pair order). */
template <int FMT>
__global__ void __launch_bounds__(SPC_SLOTS)
k_moe_rows_grouped(const spc_expert *__restrict__ experts, int64_t n_experts,
                   const int32_t *__restrict__ gi, int64_t P, int stage, bool gptoss,
                   const float *xs, int64_t x_stride, int64_t n_out, bool scatter, float *y)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    const int64_t g = blockIdx.y;
    const int64_t r0 = (int64_t)blockIdx.x * MR_ROWS;
    if (g >= gi[4 * P] || r0 >= n_out)
        return;
    const int32_t *gr = gi + P + 3 * g, *order = gi;
    const int32_t e = gr[0], first = gr[1], nt = gr[2];
    int nr = (int)(n_out - r0 < MR_ROWS ? n_out - r0 : MR_ROWS);
    float acc[MG_TOK * MR_ROWS];
    const float *bias;
    if (!mx_block<FMT, MG_TOK>(experts, n_experts, e, stage, gptoss, r0, &nr, xs + (int64_t)first * x_stride,
                               x_stride, nt, acc, &bias))
        return;
    spc_block_store<MG_TOK, MR_ROWS>(acc, r0, nr, first, nt, y, n_out, bias, scatter ? order : NULL);
}

/* The grouped pass of one stage (see above). */
static void moe_rows_grouped_launch(cudaStream_t s, const spc_moe_args *a, int stage, bool gptoss,
                                    const float *xs, int64_t x_stride, int64_t n_out, bool scatter,
                                    float *y)
{
    const int64_t P = a->n_tok * a->k;
    if (moe_tc(a)) {
        const spc_moe_tc_job j = {a->experts, a->n_experts, stage, gptoss, xs, 1, x_stride, NULL,
                                  (const int32_t *)a->group_ints, P, scatter, n_out,
                                  stage == 2 ? a->I : a->H, y, false, 0.0f, 0.0f,
                                  spc_route_in{}, a->steps};
        (void)spc_moe_tc_rows(s, j, P); /* its checks hold: moe_tc's and spc_moe_ffn's */
        return;
    }
    dim3 grid((unsigned)((n_out + MR_ROWS - 1) / MR_ROWS), (unsigned)P);
#define MG_LAUNCH(F)                                                                           \
    spc_launch(k_moe_rows_grouped<F>, grid, dim3(SPC_SLOTS), s, true, a->experts, a->n_experts, \
               (const int32_t *)a->group_ints, P, stage, gptoss, xs, x_stride, n_out, scatter, y)
    SPC_BY_FORMAT(a->row_fmt, MG_LAUNCH, MG_LAUNCH(SP_WF_NONE))
#undef MG_LAUNCH
}

/* Input-major experts (x @ W, W [n_in, n_out]): one thread per output column. */
__global__ void __launch_bounds__(MC_THREADS)
k_moe_cols(const spc_expert *__restrict__ experts, int64_t n_experts,
           const int32_t *__restrict__ ids, int stage, bool gptoss, const float *x, int64_t x_div,
           int64_t x_stride, int64_t n_in, int64_t n_out, float *y)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    const int64_t p = blockIdx.y;
    const int64_t c = (int64_t)blockIdx.x * MC_THREADS + threadIdx.x;
    if (c >= n_out)
        return;
    const int32_t e = ids[p];
    if (e < 0 || e >= n_experts)
        return; /* k_moe_rows marks the row */
    const spc_expert &ex = experts[e];
    if (!ex.in_major)
        return;
    const sp_weight w = mx_weight(ex, stage);
    const float *bias = mx_bias(ex, stage, gptoss);
    const float *xr = x + (p / x_div) * x_stride;
    if (c >= w.cols || n_in > w.rows)
        return;
    float b = bias ? bias[c] : 0.0f, acc[1];
#define MC_COL(F) spc_col_t<F, 1>(w, 0, n_in, c, xr, 0, 1, b, acc)
    SPC_BY_FORMAT(w.format, MC_COL, acc[0] = __uint_as_float(0x7fffffffu))
#undef MC_COL
    y[p * n_out + c] = acc[0];
}

/* silu(g) * u; clamped (DeepSeek-V4, sp_swiglu_limit): silu(min(g, L)) * clamp(u, -L, L). */
__global__ void k_moe_swiglu(const float *g, const float *u, int64_t n, bool clamp, float limit,
                             float *out)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    SPC_GRID_STRIDE(i, n) {
        float x = g[i], y = u[i];
        if (clamp) {
            x = fminf(x, limit);
            y = fminf(fmaxf(y, -limit), limit);
        }
        out[i] = __fmul_rn(spc_silu(x), y);
    }
}

/* out[t, h] = sum over the token's slots in ascending expert id of y * w (unfused). */
__global__ void k_moe_combine(const int32_t *__restrict__ ids, const float *__restrict__ wts,
                              const float *__restrict__ ys, int64_t n_tok, int64_t k, int64_t H,
                              float *out)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    SPC_GRID_STRIDE(i, n_tok * H) {
        int64_t t = i / H, h = i % H;
        const int32_t *id = ids + t * k;
        float o = 0.0f;
        int32_t done = -1;
        for (int64_t j = 0; j < k; j++) {
            int64_t pick = -1;
            for (int64_t q = 0; q < k; q++)
                if (id[q] > done && (pick < 0 || id[q] < id[pick]))
                    pick = q;
            if (pick < 0)
                break;
            done = id[pick];
            float p = __fmul_rn(ys[(t * k + pick) * H + h], wts[t * k + pick]);
            o = __fadd_rn(o, p);
        }
        out[i] = o;
    }
}

#define MC_KMAX 8 /* slots a token the summing norm kernel takes (more: the two launches) */

/* k_moe_combine's sum of one token at its elements i: its slots in ascending expert id
 * (slot[j] < 0: none), each product rounded, added in that order. rn_row fetches an
 * element's K values (all of them issued before any is used), then takes the sum. */
template <int K> struct mc_sum {
    const float *y; /* the token's first pair row */
    int64_t H;
    int slot[K];
    float w[K];
    float got[RN_REG][K];
    __device__ __forceinline__ void fetch(int q, int64_t i)
    {
#pragma unroll
        for (int j = 0; j < K; j++)
            got[q][j] = slot[j] >= 0 ? __ldg(y + slot[j] * H + i) : 0.0f;
    }
    __device__ __forceinline__ float value(int q) const
    {
        float o = 0.0f;
#pragma unroll
        for (int j = 0; j < K; j++)
            if (slot[j] >= 0)
                o = __fadd_rn(o, __fmul_rn(got[q][j], w[j]));
        return o;
    }
    __device__ __forceinline__ float operator()(int64_t i) const
    {
        float o = 0.0f;
#pragma unroll
        for (int j = 0; j < K; j++)
            if (slot[j] >= 0)
                o = __fadd_rn(o, __fmul_rn(__ldg(y + slot[j] * H + i), w[j]));
        return o;
    }
};

/* k_moe_combine's pick order of one token's k <= MC_KMAX slots: rank j the slot of the
 * j-th smallest id above the one before (a repeated id taken once, as there). */
template <int K>
static __device__ __forceinline__ void mc_order(const int32_t *id, const float *wt, int64_t k,
                                                mc_sum<K> &f)
{
    int32_t v[K];
#pragma unroll
    for (int q = 0; q < K; q++)
        v[q] = q < k ? __ldg(id + q) : 0;
    int32_t done = -1;
    bool more = true;
#pragma unroll
    for (int j = 0; j < K; j++) {
        int pick = -1;
        int32_t best = 0;
#pragma unroll
        for (int q = 0; q < K; q++)
            if (q < k && v[q] > done && (pick < 0 || v[q] < best))
                pick = q, best = v[q];
        more = more && j < k && pick >= 0;
        f.slot[j] = more ? pick : -1;
        f.w[j] = more ? __ldg(wt + pick) : 0.0f;
        done = more ? best : done;
    }
}

/* One token a block: the expert sum (k_moe_combine's, into out), then x += it and xn =
 * rmsnorm(x) * nw (k_add_rmsnorm's row): three ops' results in one launch. */
template <int K, int NR>
__global__ void __launch_bounds__(RN_THREADS)
k_moe_combine_add_rmsnorm(const int32_t *__restrict__ ids, const float *__restrict__ wts,
                          const float *__restrict__ ys, int64_t k, int64_t H, float *out, float *x,
                          const float *__restrict__ nw, float eps, float *xn)
{
    spc_pdl_trigger();
    rn_w<NR> wl;
    wl.load(nw, H); /* the norm weights do not depend on the kernels before */
    spc_pdl_wait(); /* launched as a programmatic dependent */
    const int64_t t = blockIdx.x;
    mc_sum<K> f;
    f.y = ys + t * k * H, f.H = H;
    mc_order(ids + t * k, wts + t * k, k, f);
    float *xr = x + t * H;
    rn_row<true>(xr, xr, f, wl, H, eps, xn + t * H, out + t * H);
}

static unsigned ew(int64_t n) { return spc_grid_blocks(n, 256); }

/* out = the weighted sum of the pair rows ys, then the residual step when a->then_x asks:
 * one launch (top_k <= MC_KMAX) or k_moe_combine then spc_add_rmsnorm. */
static void moe_sum(cudaStream_t s, const spc_moe_args *a, const float *ys)
{
    const int64_t H = a->H;
    if (a->then_x && a->k <= MC_KMAX && a->n_tok <= 0x7fffffff) {
        spc_launch(a->k > 4 ? k_moe_combine_add_rmsnorm<MC_KMAX, RN_REG>
                            : rn_pick(H, k_moe_combine_add_rmsnorm<4, 8>,
                                      k_moe_combine_add_rmsnorm<4, 12>,
                                      k_moe_combine_add_rmsnorm<4, RN_REG>),
                   dim3((unsigned)a->n_tok), dim3(RN_THREADS), s, true,
                   a->ids, a->w, ys, a->k, H, a->out, a->then_x, a->then_w, a->then_eps,
                   a->then_xn);
        return;
    }
    spc_launch(k_moe_combine, dim3(ew(a->n_tok * H)), dim3(256), s, true, a->ids, a->w, ys,
               a->n_tok, a->k, H, a->out);
    if (a->then_x)
        (void)spc_add_rmsnorm(s, a->then_x, H, a->out, H, a->then_w, a->n_tok, H, a->then_eps,
                              a->then_xn, H); /* its checks hold: n_tok, H > 0 */
}

/* gpt-oss's gate_up product and activation into h ([pairs, I]) on tensor cores, the
 * activation in the product's epilogue (spc_glu_oss, as spc_gptoss_glu computes it):
 * pairs alone (x row p / div) or, grouped, the gathered inputs in sorted order. */
static void moe_tc_gate_up_glu(cudaStream_t s, const spc_moe_args *a, const float *x, int64_t div,
                               bool grouped, float *h, const spc_route_in &route)
{
    const int64_t P = a->n_tok * a->k;
    const spc_moe_tc_job j = {a->experts, a->n_experts, 0, true, x, div, a->H,
                              grouped ? NULL : a->ids,
                              grouped ? (const int32_t *)a->group_ints : NULL, P, false, 2 * a->I,
                              a->H, h, true, a->alpha, a->limit, route, a->steps};
    (void)spc_moe_tc_rows(s, j, P); /* its checks hold: moe_tc's and spc_moe_ffn's */
}

/* The grouped pass of moe_tc_gemm after the grouping: x gathered into A as BF16 pairs,
 * gate_up + activation into C (BF16 pairs), down into A (pair order), the weighted sum. */
static int moe_tc_gemm_pass(cudaStream_t s, const spc_moe_args *a)
{
    const int64_t P = a->n_tok * a->k, H = a->H, I = a->I;
    const int32_t *gi = (const int32_t *)a->group_ints;
    unsigned char *xa = (unsigned char *)a->scratch_a, *xc = (unsigned char *)a->scratch_c;
    const int64_t groups = P / SPC_MOE_TC_GEMM_TOK + a->n_experts + 1; /* at most */
    const int64_t gy = groups < P ? groups : P;
    int rc = spc_moe_tc_pack_x(s, a->x, gi, P, a->k, H, xa);
    spc_moe_tc_gemm_job j = {a->experts, a->n_experts, 0, true, xa, gi, P, false, 2 * I, H,
                             NULL, true, a->alpha, a->limit, xc};
    if (!rc)
        rc = spc_moe_tc_gemm(s, j, gy);
    j.stage = 2, j.xb = xc, j.scatter = true, j.n_out = H, j.cols = I, j.y = a->scratch_a;
    j.glu = false, j.yb = NULL;
    if (!rc)
        rc = spc_moe_tc_gemm(s, j, gy);
    if (rc)
        return rc;
    moe_sum(s, a, (const float *)a->scratch_a);
    return spc_launch_status();
}

/* spc_moe_ffn with the pairs grouped by expert (row-major experts only). */
static int moe_ffn_grouped(cudaStream_t s, const spc_moe_args *a)
{
    const int64_t P = a->n_tok * a->k, H = a->H, I = a->I;
    float *A = a->scratch_a, *B = a->scratch_b, *C = a->scratch_c;
    spc_launch(k_moe_group, dim3(1), dim3(MG_THREADS), s, true, a->ids, P, a->n_experts,
               moe_group_tokens(a), a->group_ints);
    if (moe_tc_gemm(a))
        return moe_tc_gemm_pass(s, a);
    spc_launch(k_moe_gather, dim3(ew(P * H)), dim3(256), s, true, a->x, (const int32_t *)a->group_ints,
               P, a->k, H, C);
    if (a->act == SPC_ACT_GPTOSS_GLU) {
        if (moe_tc(a)) {
            moe_tc_gate_up_glu(s, a, C, 1, true, B, spc_route_in{});
        } else {
            moe_rows_grouped_launch(s, a, 0, true, C, H, 2 * I, false, A);
            (void)spc_gptoss_glu(s, A, P, I, a->alpha, a->limit, B); /* P, I > 0: no error */
        }
        moe_rows_grouped_launch(s, a, 2, true, B, I, H, true, A);
        moe_sum(s, a, (const float *)A);
    } else {
        moe_rows_grouped_launch(s, a, 0, false, C, H, I, false, A);
        moe_rows_grouped_launch(s, a, 1, false, C, H, I, false, B);
        spc_launch(k_moe_swiglu, dim3(ew(P * I)), dim3(256), s, true, (const float *)A,
                   (const float *)B, P * I, a->act == SPC_ACT_SWIGLU_LIMIT, a->limit, A);
        moe_rows_grouped_launch(s, a, 2, false, A, I, H, true, B);
        moe_sum(s, a, (const float *)B);
    }
    return spc_launch_status();
}

/* Whether spc_moe_ffn groups the pairs by expert: from about two pairs per expert (an
 * H100, gpt-oss-20b's shape: 512 tokens 530 -> 684 tok/s; a verify batch of 2-9 tokens
 * over 32 experts, mostly one pair per expert, ran 1.2-1.4x slower grouped); a choice by
 * the shape only, and both paths give the same bits. */
static bool moe_grouped(const spc_moe_args *a)
{
    return a->n_tok > 1 && a->n_tok * a->k >= 2 * a->n_experts && a->row_major_only &&
           a->n_experts <= MG_MAX_E && a->scratch_c && a->group_ints;
}

static int moe_args_ok(const spc_moe_args *a)
{
    return a && a->n_tok >= 0 && a->k > 0 && a->H > 0 && a->I > 0 && a->n_experts > 0 && a->experts &&
           a->n_tok * a->k <= 65535;
}

/* The pairs alone; with route.logits the first expert kernel routes (gpt-oss on tensor
 * cores only: spc_moe_route_ffn). */
static int moe_ffn_pairs(cudaStream_t s, const spc_moe_args *a, const spc_route_in &route)
{
    const int64_t P = a->n_tok * a->k, H = a->H, I = a->I;
    float *A = a->scratch_a, *B = a->scratch_b;
    const bool gptoss = a->act == SPC_ACT_GPTOSS_GLU;
#define ROWS(stage, x, div, xs, n_out, y) moe_rows_launch(s, a, stage, gptoss, x, div, xs, n_out, y)
#define COLS(stage, x, div, xs, n_in, n_out, y)                                                 \
    do {                                                                                       \
        if (!a->row_major_only)                                                                \
            spc_launch(k_moe_cols,                                                             \
                       dim3((unsigned)(((n_out) + MC_THREADS - 1) / MC_THREADS), (unsigned)P), \
                       dim3(MC_THREADS), s, true, a->experts, a->n_experts, a->ids, stage,       \
                       gptoss, x, (int64_t)(div), (int64_t)(xs), (int64_t)(n_in),               \
                       (int64_t)(n_out), y);                                                    \
    } while (0)
    if (gptoss) {
        if (moe_tc(a)) { /* row-major experts only */
            moe_tc_gate_up_glu(s, a, a->x, a->k, false, B, route);
        } else {
            ROWS(0, a->x, a->k, H, 2 * I, A);
            COLS(0, a->x, a->k, H, H, 2 * I, A);
            (void)spc_gptoss_glu(s, A, P, I, a->alpha, a->limit, B); /* P, I > 0: no error */
        }
        ROWS(2, B, 1, I, H, A);
        COLS(2, B, 1, I, I, H, A);
        moe_sum(s, a, (const float *)A);
    } else {
        ROWS(0, a->x, a->k, H, I, A);
        ROWS(1, a->x, a->k, H, I, B);
        spc_launch(k_moe_swiglu, dim3(ew(P * I)), dim3(256), s, true, (const float *)A,
                   (const float *)B, P * I, a->act == SPC_ACT_SWIGLU_LIMIT, a->limit, A);
        ROWS(2, A, 1, I, H, B);
        moe_sum(s, a, (const float *)B);
    }
#undef ROWS
#undef COLS
    return spc_launch_status();
}

extern "C" int spc_moe_ffn(void *stream, const spc_moe_args *a)
{
    if (!moe_args_ok(a))
        return (int)cudaErrorInvalidValue;
    if (a->n_tok == 0)
        return 0;
    cudaStream_t s = (cudaStream_t)stream;
    if (moe_grouped(a))
        return moe_ffn_grouped(s, a);
    return moe_ffn_pairs(s, a, spc_route_in{});
}

extern "C" int spc_moe_route_ffn(void *stream, const sp_route_cfg *cfg, const float *logits,
                                 int32_t *ids, float *w, const spc_moe_args *a0)
{
    if (!moe_args_ok(a0) || !cfg || !ids || !w)
        return (int)cudaErrorInvalidValue;
    spc_moe_args a = *a0;
    a.ids = ids;
    a.w = w;
    const bool fold = spc_route_warp_ok(cfg) && cfg->n_experts == a.n_experts && cfg->top_k == a.k &&
                      a.act == SPC_ACT_GPTOSS_GLU && moe_tc(&a) && !moe_grouped(&a);
    if (!fold || a.n_tok == 0) {
        const int rc = spc_moe_route(stream, cfg, logits, a.n_tok, ids, w);
        return rc ? rc : spc_moe_ffn(stream, &a);
    }
    const spc_route_in route = {logits, (int)cfg->n_experts, (int)cfg->top_k, ids, w};
    return moe_ffn_pairs((cudaStream_t)stream, &a, route);
}

extern "C" int spc_moe_stage(void *stream, const spc_moe_args *a, int stage, const float *x,
                             int64_t x_div, int64_t x_stride, int64_t n_out, float *y)
{
    if (!a || !a->experts || !a->row_major_only || a->n_tok < 0 || a->k <= 0 || stage < 0 ||
        stage > 2 || x_div < 1 || n_out < 1 || a->n_tok * a->k > 65535)
        return (int)cudaErrorInvalidValue;
    if (a->n_tok == 0)
        return 0;
    moe_rows_launch((cudaStream_t)stream, a, stage, a->act == SPC_ACT_GPTOSS_GLU, x, x_div, x_stride,
                    n_out, y);
    return spc_launch_status();
}
