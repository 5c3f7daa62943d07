/* cuda_moe_tc.cu: MXFP4 expert rows in fast precision, on tensor cores (the contract is in
 * cuda_ops.h, "fast precision: MXFP4 experts"; cuda_moe.cu runs the pass around them).
 *
 * The weights' decode and operand mapping are moe_fp4_mma.cuh's; x is rounded to BF16 and
 * the products are summed in fp32 by mma.sync m16n8k16, as BF16 weights are in cuda_tc.cu.
 * The exact kernels spend about eight instructions an element decoding (the reason their
 * FP4 rows run at a fifth of the DRAM bandwidth, docs/BENCHMARKS_GPU.md).
 *
 * This file serves pairs alone (decode, verify) and groups of up to 8 pairs of one expert
 * that cuda_moe_tc_gemm.cu does not take.
 * Schedule: a block of 4 warps computes one expert's matrix for up to 8 tokens of that
 * expert (one (token, slot) pair in decode and verify; a group of pairs sorted by expert
 * in prefill: either way each token is a column of the same mma), walking 16-row groups
 * x, x + gridDim.x, ...; warp w computes slices w, w + 4, ... of a group into shared
 * memory, its next slice's loads in flight meanwhile, and the block adds the slice sums
 * to 0.0f in ascending order, then the bias. gpt-oss's gate_up stage can end in its
 * activation: a row pair (gate 2i, up 2i + 1) sits in lanes 4 apart, one shuffle away. */
#include "kernels/cuda/cuda_moe_tc.cuh"
#include "kernels/cuda/decode.cuh"
#include "kernels/cuda/moe_fp4_mma.cuh"

#define MT_WARPS 4  /* warps a block: one row group, its 128 outputs folded by 128 threads */
#define MT_PER 4    /* slices a warp takes of a round, at most */
#define MT_ROUND (MT_WARPS * MT_PER) /* slices folded at once */

/* c += one block's eight mma: lo / hi its 16 bytes in rows g / g + 8, slo / shi their scale
 * bytes, b the token's 64 bytes of x pairs. */
template <bool BIG>
static __device__ __forceinline__ void mt_block(float c[4], const uint4 &lo, const uint4 &hi,
                                                uint32_t slo, uint32_t shi, const uint4 *b)
{
    uint32_t cl[2], ch[2];
    mt_scales<BIG>(slo, cl);
    mt_scales<BIG>(shi, ch);
    mt_word<BIG>(c, lo.x, hi.x, cl, ch, b[0]);
    mt_word<BIG>(c, lo.y, hi.y, cl, ch, b[1]);
    mt_word<BIG>(c, lo.z, hi.z, cl, ch, b[2]);
    mt_word<BIG>(c, lo.w, hi.w, cl, ch, b[3]);
}

/* Where word w of MXFP4 block b of a token sits, in 16-byte units: a slice's 32 words
 * ordered (k, w, q) for the thread (g, q) that reads word w of block 2q + k (mt_chain), so
 * the four q of a read are 64 contiguous bytes (no bank conflicts). */
static __device__ __forceinline__ int64_t mt_x_unit(int64_t b, int w)
{
    const int bl = (int)(b % (MT_BK / 32));
    return (b - bl) * 4 + ((bl & 1) * 4 + w) * 4 + (bl >> 1);
}

/* The slice's chain of sixteen mma from zero (block 2q, then 2q + 1); xt: the x pairs of
 * the thread's token (tokens past the block's read the last one's: their mma columns are
 * never stored, and a column's sums use its own x only). */
static __device__ __forceinline__ void mt_chain(const mt_slice &f, const unsigned char *xt, int s,
                                                float c[4])
{
    const int q = threadIdx.x & 3;
    c[0] = c[1] = c[2] = c[3] = 0.0f;
    /* mt_x_unit(8 s + 2 q, 0) = 32 s + q: slice s's 32 units start at 32 s, and word 0 of
     * its block 2q is unit q */
    const uint4 *xb = reinterpret_cast<const uint4 *>(xt) + (MT_BK / 8) * s + q;
    const bool big = mt_big(f);
#pragma unroll
    for (int k = 0; k < 2; k++) {
        uint4 b[4];
#pragma unroll
        for (int i = 0; i < 4; i++) /* block 2q + k's word i */
            b[i] = xb[(k * 4 + i) * 4];
        const uint32_t slo = f.sb[k], shi = f.sb[2 + k];
        if (big)
            mt_block<true>(c, f.lo[k], f.hi[k], slo, shi, b);
        else
            mt_block<false>(c, f.lo[k], f.hi[k], slo, shi, b);
    }
}

/* ---- the kernel ------------------------------------------------------------------------ */

/* Stages tokens 0 .. nt - 1 (rows of x, x_stride floats apart, cols floats) as BF16 pairs,
 * word w of block b (its pairs i: x[32b + 8w + i], x[32b + 8w + i + 4]) in 16 bytes at
 * xs + t * pitch + 16 mt_x_unit(b, w); zeros past cols. */
static __device__ __forceinline__ void mt_stage_x(const float *const *xrow, int nt, int64_t cols,
                                                  int64_t nb_pad, int pitch, unsigned char *xs,
                                                  int t0 = 0)
{
    const int64_t words = nb_pad * 4; /* 8 columns each; threads t0.. of the block stage them */
    for (int64_t i = threadIdx.x - t0; i < words * nt; i += blockDim.x - t0) {
        const int t = (int)(i / words);
        const int64_t w = i % words, k = w * 8;
        float v[8];
        const float *p = xrow[t] + k;
        if (k < cols && ((uintptr_t)p % 16) == 0) { /* cols % 32 == 0: all 8 or none */
            const float4 a = __ldg(reinterpret_cast<const float4 *>(p)),
                         b = __ldg(reinterpret_cast<const float4 *>(p) + 1);
            v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
            v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++)
                v[j] = k + j < cols ? p[j] : 0.0f;
        }
        *reinterpret_cast<uint4 *>(xs + (size_t)t * pitch + mt_x_unit(w / 4, (int)(w % 4)) * 16) =
            make_uint4(tc_pack(v[0], v[4]), tc_pack(v[1], v[5]), tc_pack(v[2], v[6]),
                       tc_pack(v[3], v[7]));
    }
}

/* Where a warp is: row group rg, round (first slice of MT_ROUND), item i (slice round +
 * warp + MT_WARPS i). */
struct mt_pos {
    int64_t rg;
    int round, i;
};

/* The position after p: items 0 .. ipw - 1 of each round, the rounds of a group, then
 * the block's next group. */
static __device__ __forceinline__ mt_pos mt_next(mt_pos p, int ipw, int S, int64_t step)
{
    if (++p.i < ipw)
        return p;
    p.i = 0;
    p.round += MT_ROUND;
    if (p.round < S)
        return p;
    p.round = 0;
    p.rg += step;
    return p;
}

/* The slice warp `warp` computes at position p. */
static __device__ __forceinline__ int mt_slice_at(const mt_pos &p, int warp)
{
    return p.round + warp + MT_WARPS * p.i;
}

/* A lane's rows of one row group (set when the warp's loads reach the group, not an item
 * at a time): row rg 16 + g at block 2q of slice 0, its codes and its scales (row g + 8:
 * eight rows on); full: all 16 rows exist. */
struct mt_rowp {
    const unsigned char *d, *s;
    int64_t rg;
    bool full;
};

static __device__ __forceinline__ void mt_rowp_at(const sp_weight &w, int64_t rg, mt_rowp &rp)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int64_t r = rg * 16 + g;
    rp.d = w.data + (size_t)r * w.row_bytes + (size_t)q * 32;
    rp.s = w.scales + (size_t)r * w.scale_row_bytes + (size_t)q * 2;
    rp.rg = rg;
    rp.full = rg * 16 + 16 <= w.rows;
}

/* Slice sn of a whole row group, its eight blocks inside the row: the loads from the
 * group's row pointers, no checks and no zeros. */
static __device__ __forceinline__ void mt_load_full(const sp_weight &w, const mt_rowp &rp, int sn,
                                                    mt_slice &f)
{
    const unsigned char *d = rp.d + (size_t)sn * (MT_BK / 2);
    const unsigned char *sc = rp.s + (size_t)sn * (MT_BK / 32);
    const size_t d8 = 8 * w.row_bytes, s8 = 8 * w.scale_row_bytes;
    f.lo[0] = mt_ld16<true>(d);
    f.lo[1] = mt_ld16<true>(d + 16);
    f.hi[0] = mt_ld16<true>(d + d8);
    f.hi[1] = mt_ld16<true>(d + d8 + 16);
    f.sb[0] = (uint32_t)__ldg(sc);
    f.sb[1] = (uint32_t)__ldg(sc + 1);
    f.sb[2] = (uint32_t)__ldg(sc + s8);
    f.sb[3] = (uint32_t)__ldg(sc + s8 + 1);
}

/* Issues the loads of the warp's slice at position p, if that is a slice of the matrix:
 * a whole one from the group's row pointers (rp, moved to p's group first), else checked
 * (rows past the matrix, blocks past the row: zeros). */
template <bool VEC>
static __device__ __forceinline__ void mt_fetch(const sp_weight &w, int64_t nb, int64_t n_rg, int S,
                                                const mt_pos &p, int warp, mt_slice &f,
                                                mt_rowp &rp)
{
    const int sn = mt_slice_at(p, warp);
    if (p.rg < n_rg && sn < S) {
        if (VEC) {
            if (p.rg != rp.rg)
                mt_rowp_at(w, p.rg, rp);
            if (rp.full && (int64_t)sn * (MT_BK / 32) + MT_BK / 32 <= nb) {
                mt_load_full(w, rp, sn, f);
                return;
            }
        }
        mt_load<VEC>(w, nb, p.rg * 16, sn, f);
    }
}

/* The kernel's work once the block knows its (valid, row-major) expert matrix and tokens.
 * A warp's items are one stream: while one is computed, the next item's weights are on
 * their way (their scale bytes kept apart until used, so issuing never waits). One item
 * ahead, not two: 20 registers fewer to copy an item and 116 registers in all instead of
 * 123 (H200, gpt-oss-20b shape fast: decode 465 -> 480 tok/s, gate_up 22.9 -> 21.3 us a
 * layer, down 14.5 -> 13.2; the loop unrolled to swap two buffers instead of copying was
 * slower still, 404: docs/BENCHMARKS_GPU.md, 2026-11-29 evening). staged: x is in
 * shared memory already (a pair's, staged while its expert was found). */
template <bool VEC>
static __device__ __forceinline__ void mt_body(const spc_moe_tc_job &j, const sp_weight &w,
                                               const float *bias, int64_t y, int64_t first, int nt,
                                               const int32_t *order, int pitch, unsigned char *mt_xs,
                                               float (*part)[4][32], const float **xrow, bool staged)
{
    const int64_t step = gridDim.x;
    const int64_t rows = w.rows < j.n_out ? w.rows : j.n_out, n_rg = (rows + 15) / 16;
    if ((int64_t)blockIdx.x >= n_rg)
        return;
    const int64_t nb = (w.cols < j.cols ? w.cols : j.cols) / 32;
    const int S = (int)((j.cols + MT_BK - 1) / MT_BK);
    /* items a warp takes of a round (the same for every warp: they meet at the fold) */
    const int ipw = S >= MT_ROUND ? MT_PER : (S + MT_WARPS - 1) / MT_WARPS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, fr = threadIdx.x >> 5;
    /* the first item's weights are on their way while x is staged */
    mt_pos p = {blockIdx.x, 0, 0};
    mt_slice f, fn;
    mt_rowp rp;
    rp.rg = -1;
    mt_fetch<VEC>(w, nb, n_rg, S, p, warp, f, rp);
    if (!staged) {
        if (threadIdx.x < nt)
            xrow[threadIdx.x] = j.gi ? j.x + (first + threadIdx.x) * j.x_stride
                                     : j.x + (y / j.x_div) * j.x_stride;
        __syncthreads();
        mt_stage_x(xrow, nt, j.cols, (int64_t)S * (MT_BK / 32), pitch, mt_xs);
    }
    __syncthreads();
    const int g = lane >> 2;
    const unsigned char *xt = mt_xs + (size_t)(g < nt ? g : nt - 1) * pitch;
    float total = 0.0f, bv = 0.0f;
    for (;;) {
        const int s = mt_slice_at(p, warp);
        const mt_pos pn = mt_next(p, ipw, S, step);
        mt_fetch<VEC>(w, nb, n_rg, S, pn, warp, fn, rp);
        const int64_t row = p.rg * 16 + (lane >> 2) + (fr >= 2 ? 8 : 0); /* thread's output */
        if (p.round == 0 && p.i == 0 && bias && row < rows) /* a new group's bias */
            bv = __ldg(bias + row);
        if (s < S) {
            float c[4];
            mt_chain(f, xt, s, c);
#pragma unroll
            for (int r = 0; r < 4; r++)
                part[s - p.round][r][lane] = c[r];
        }
        if (p.i == ipw - 1) { /* the round's slice sums are in: fold them in order */
            __syncthreads();
            const int n_in = S - p.round < MT_ROUND ? S - p.round : MT_ROUND;
            for (int k = 0; k < n_in; k++) /* thread e owns register e / 32 of lane e % 32 */
                total = __fadd_rn(total, part[k][fr][lane]);
            __syncthreads(); /* part is refilled by the next round */
            if (p.round + MT_ROUND >= S) { /* the group's last round: store */
                const int t = 2 * (lane & 3) + (fr & 1);
                const int64_t tok = order ? order[first + (t < nt ? t : 0)] : first + t;
                const float v = bias && row < rows ? __fadd_rn(total, bv) : total;
                if (j.glu) { /* row 2i + 1 (up) is lane ^ 4's: same register, token */
                    const float up = __shfl_xor_sync(SPC_FULL_MASK, v, 4);
                    if (!(row & 1) && row + 1 < rows && t < nt)
                        j.y[tok * (j.n_out / 2) + row / 2] = spc_glu_oss(v, up, j.alpha, j.limit);
                } else if (row < rows && t < nt) {
                    j.y[tok * j.n_out + row] = v;
                }
                total = 0.0f;
            }
        }
        if (pn.rg >= n_rg)
            break;
        p = pn;
        f = fn;
    }
}

/* Block (x, y): y is pair y (ids, x row y / x_div, output row y) or, with gi, group y
 * (expert, first sorted slot, count: x rows first.., output rows first.. or order[first..]
 * with scatter); x walks the 16-row groups x, x + gridDim.x, ... A warp's items (group,
 * slice) form one stream, each item's weight loads issued one item before it is
 * computed, across rounds and groups. Dynamic shared memory: the tokens' x, `pitch`
 * bytes each. */
template <int ROUTE> /* 0: ids given; else the logits a lane of the routing warp */
__global__ void __launch_bounds__(MT_WARPS * 32, 4)
k_moe_tc(const spc_moe_tc_job j, int pitch)
{
    extern __shared__ __align__(16) unsigned char mt_xs[];
    __shared__ float part[MT_ROUND][4][32];
    __shared__ const float *xrow[SPC_MOE_TC_TOK];
    spc_pdl_trigger();
    spc_pdl_wait(); /* ids and x come from the kernels before */
    const int64_t y = blockIdx.y, step = gridDim.x;
    int32_t e;
    int64_t first;
    int nt;
    if (j.gi) {
        if (y >= j.gi[4 * j.P])
            return;
        const int32_t *gr = j.gi + j.P + 3 * y;
        e = gr[0], first = gr[1], nt = gr[2];
    } else {
        /* the pair's x is staged while its expert is found: by warps 1-3 while warp 0 routes
         * the token, else by all once the id's load is issued */
        const float *xr[1] = {j.x + (y / j.x_div) * j.x_stride};
        const int64_t nb_pad = (j.cols + MT_BK - 1) / MT_BK * (MT_BK / 32);
        __shared__ int32_t routed;
        if (ROUTE) {
            if (threadIdx.x >= 32)
                mt_stage_x(xr, 1, j.cols, nb_pad, pitch, mt_xs, 32);
            e = spc_route_pair<ROUTE ? ROUTE : 1>(j.route, y, blockIdx.x == 0, &routed);
        } else {
            e = j.ids[y];
            mt_stage_x(xr, 1, j.cols, nb_pad, pitch, mt_xs);
        }
        first = y, nt = 1;
    }
    const int32_t *order = j.gi && j.scatter ? j.gi : NULL;
    if (e < 0 || e >= j.n_experts) { /* NaN rows (with glu, NaN activations), as the exact pass */
        const int64_t n_y = j.glu ? j.n_out / 2 : j.n_out, per = j.glu ? 8 : 16;
        for (int64_t rg = blockIdx.x; rg * 16 < j.n_out; rg += step)
            for (int i = threadIdx.x; i < per * nt; i += blockDim.x) {
                const int64_t r = rg * per + i % per, t = first + i / per;
                if (r < n_y)
                    j.y[(order ? order[t] : t) * n_y + r] = __uint_as_float(0x7fffffffu);
            }
        return;
    }
    sp_weight w; /* to registers */
    const float *bias;
    if (!mt_expert(j.experts, j.steps, e, j.stage, j.gptoss, w, bias))
        return;
    if (mt_vec(w))
        mt_body<true>(j, w, bias, y, first, nt, order, pitch, mt_xs, part, xrow, !j.gi);
    else
        mt_body<false>(j, w, bias, y, first, nt, order, pitch, mt_xs, part, xrow, !j.gi);
}

/* ---- launch ------------------------------------------------------------------------- */

#define MT_MAX_DEVICES 64
static int g_mt_sms[MT_MAX_DEVICES]; /* SMs of each device (spc_moe_tc_setup) */

static int mt_sms(void)
{
    int dev = 0;
    (void)cudaGetDevice(&dev);
    return dev >= 0 && dev < MT_MAX_DEVICES && g_mt_sms[dev] > 0 ? g_mt_sms[dev] : 132;
}

/* Bytes of one token's staged x (blocks padded to whole slices, + 16 against bank conflicts). */
static int64_t mt_pitch(int64_t cols) { return (cols + MT_BK - 1) / MT_BK * MT_BK * 2 + 16; }

int spc_moe_tc_group_tokens(int64_t cols)
{
    const int64_t per = SPC_MOE_TC_XS_MAX / mt_pitch(cols);
    return per >= SPC_MOE_TC_TOK ? SPC_MOE_TC_TOK : per < 1 ? 0 : (int)per;
}

int spc_moe_tc_rows(cudaStream_t s, const spc_moe_tc_job &j, int64_t blocks_y)
{
    const int per = spc_moe_tc_group_tokens(j.cols);
    if (per < 1 || blocks_y < 1 || blocks_y > 65535 || j.cols % 32 || j.n_out < 1 ||
        (j.glu && (j.stage != 0 || j.n_out % 2)))
        return (int)cudaErrorInvalidValue;
    const int64_t pitch = mt_pitch(j.cols);
    const size_t smem = (size_t)(j.gi ? per : 1) * (size_t)pitch;
    /* about one wave of blocks (four an SM: the launch bounds), each walking an equal share
     * of the row groups; grouped, blocks_y counts pairs and about P / per + experts hold a
     * group */
    const int64_t n_rg = (j.n_out + 15) / 16;
    int64_t ys = j.gi ? j.P / per + j.n_experts : blocks_y;
    ys = ys < blocks_y ? ys : blocks_y;
    const int64_t wave = 4 * (int64_t)mt_sms(), per_block = (n_rg * ys + wave - 1) / wave;
    dim3 grid((unsigned)((n_rg + per_block - 1) / per_block), (unsigned)blocks_y);
    if (j.route.logits && !j.gi) /* routing in the kernel: its own instances */
        spc_route_per(j.route.E) == 1
            ? spc_launch_smem(k_moe_tc<1>, grid, dim3(MT_WARPS * 32), smem, s, true, j, (int)pitch)
            : spc_launch_smem(k_moe_tc<4>, grid, dim3(MT_WARPS * 32), smem, s, true, j, (int)pitch);
    else
        spc_launch_smem(k_moe_tc<0>, grid, dim3(MT_WARPS * 32), smem, s, true, j, (int)pitch);
    return spc_launch_status();
}

bool spc_moe_tc_setup(void)
{
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= MT_MAX_DEVICES ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        return false;
    g_mt_sms[dev] = sms > 0 ? sms : 132;
    return cudaFuncSetAttribute(k_moe_tc<0>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                SPC_MOE_TC_XS_MAX) == cudaSuccess &&
           cudaFuncSetAttribute(k_moe_tc<1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                SPC_MOE_TC_XS_MAX) == cudaSuccess &&
           cudaFuncSetAttribute(k_moe_tc<4>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                SPC_MOE_TC_XS_MAX) == cudaSuccess &&
           spc_moe_tc_gemm_setup();
}
