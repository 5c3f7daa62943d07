/* cuda_moe_tc_gemm.cu: gpt-oss's MXFP4 expert products for groups of many tokens
 * (prefill) in fast precision, on tensor cores: the same order per output as
 * cuda_moe_tc.cu (cuda_ops.h, "fast precision: MXFP4 experts"; the operands of
 * moe_fp4_mma.cuh), so a token's outputs are the bits it gets alone.
 *
 * Why a second schedule: cuda_moe_tc.cu stages a group's whole x in shared memory, which
 * holds 8 tokens of gpt-oss's 2880 columns, and decodes every weight for each group of 8;
 * a 512-token prefill of gpt-oss-20b spent 73% of its time there (1.2 ms a launch, H200).
 * Here a group holds up to SPC_MOE_TC_GEMM_TOK pairs of one expert (four n8 tiles), x comes
 * in as BF16 pairs already (spc_moe_tc_pack_x, or the gate_up epilogue for down) and only
 * one 256-column slice of it at a time is in shared memory (MGE_STAGES slices in flight by
 * cp.async), and each decoded weight fragment feeds the mma of all four tiles.
 *
 * Schedule: block (x, g) computes rows 64 x .. 64 x + 63 of group g's expert, warp w rows
 * 16 w .. 16 w + 15, walking the slices in ascending order: a slice is one chain of
 * sixteen mma from zero per tile (moe_fp4_mma.cuh's order), added to the running total
 * (from 0.0f) as soon as it is done: the ascending fold of the contract, without the shared
 * memory of cuda_moe_tc.cu's fold. The next slice's weights load into registers while a
 * slice is multiplied. gate_up ends in gpt-oss's activation (a row pair (gate 2i, up
 * 2i + 1) sits in lanes 4 apart), written as BF16 pairs for down (the rounding down's x
 * staging would apply); down writes fp32 rows back in pair order for k_moe_combine.
 *
 * H200, gpt-oss-20b shape, 512-token prefill (fast): 6.41k -> 12.6k tok/s (the expert
 * launches 1,190 us each -> gate_up 578 us, down 297 us; docs/BENCHMARKS_GPU.md). */
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/cuda_moe_tc.cuh"
#include "kernels/cuda/decode.cuh"
#include "kernels/cuda/moe_fp4_mma.cuh"

#define MGE_WARPS 4
#define MGE_ROWS (16 * MGE_WARPS)              /* rows a block */
#define MGE_NT (SPC_MOE_TC_GEMM_TOK / 8)       /* n8 token tiles a block */
#define MGE_STAGES 3                           /* x slices in flight */
#define MGE_PITCH (MT_BK * 2 + 64)             /* a token's slice in shared memory (+64: banks) */
#define MGE_STAGE_BYTES (SPC_MOE_TC_GEMM_TOK * MGE_PITCH)
#define MGE_SMEM (MGE_STAGES * MGE_STAGE_BYTES)

/* Byte offset of column c in a row of BF16 pairs (moe_fp4_mma.cuh's order). */
static __device__ __forceinline__ int64_t mge_pair_off(int64_t c)
{
    return (c >> 5) * 64 + ((c >> 3) & 3) * 16 + (c & 3) * 4 + ((c & 4) ? 2 : 0);
}

/* Where 16-byte word ch (0..31: block ch / 4, word ch % 4) of a token's slice sits in its
 * shared-memory row: the word index's bits 0-1 XOR bits 3-4. The eight threads of a
 * 16-byte load phase (g = 2p, 2p + 1; q = 0..3) read words 8q + 4k + w of two rows: with
 * the swizzle and the pitch (36 words, 4 mod 8) they hit eight different bank groups
 * (unswizzled, the four q of a row share one: 4-way conflicts). */
static __device__ __forceinline__ int mge_swz(int ch) { return ch ^ ((ch >> 3) & 3); }

/* Issues slice s of the group's x (tokens first.. of xb, rows of cols BF16) into buf: token
 * t's words (8 columns, 16 bytes) at row t; words past cols and tokens past nt are zeros.
 * One cp.async group. */
static __device__ __forceinline__ void mge_stage(const unsigned char *xb, int64_t first, int nt,
                                                 int64_t cols, int s, unsigned char *buf)
{
    constexpr int WORDS = MT_BK / 8;
    const int64_t row_words = cols / 8;
    for (int i = threadIdx.x; i < SPC_MOE_TC_GEMM_TOK * WORDS; i += MGE_WARPS * 32) {
        const int t = i / WORDS, wi = i % WORDS;
        const int64_t gw = (int64_t)s * WORDS + wi;
        const bool ok = t < nt && gw < row_words;
        const unsigned char *src = ok ? xb + ((first + t) * row_words + gw) * 16 : xb;
        spc_cp16_or_zero(buf + t * MGE_PITCH + mge_swz(wi) * 16, src, ok);
    }
    spc_cp_commit();
}

/* c[j] += one block's eight mma for every tile j: lo / hi its 16 bytes in rows g / g + 8,
 * slo / shi their scale bytes; xrow: tile 0's token row of the slice (tile j's is 8 j rows
 * further), the block being 2q + K. */
template <bool BIG, int K>
static __device__ __forceinline__ void mge_block(float c[MGE_NT][4], const uint4 &lo,
                                                 const uint4 &hi, uint32_t slo, uint32_t shi,
                                                 const unsigned char *xrow)
{
    const int q = threadIdx.x & 3;
    uint32_t cl[2], ch[2];
    mt_scales<BIG>(slo, cl);
    mt_scales<BIG>(shi, ch);
    const uint32_t wl[4] = {lo.x, lo.y, lo.z, lo.w}, wh[4] = {hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int w = 0; w < 4; w++) {
        uint32_t a[8];
        mt_word_a<BIG>(wl[w], wh[w], cl, ch, a);
#pragma unroll
        for (int j = 0; j < MGE_NT; j++) {
            const uint4 b = *reinterpret_cast<const uint4 *>(
                xrow + j * 8 * MGE_PITCH + mge_swz(4 * (2 * q + K) + w) * 16);
            tc_mma(c[j], a[0], a[1], a[2], a[3], b.x, b.y);
            tc_mma(c[j], a[4], a[5], a[6], a[7], b.z, b.w);
        }
    }
}

/* Every tile's chain of sixteen mma of the slice held in f, from zero; xrow: the slice's x
 * in shared memory at the thread's token row of tile 0. */
static __device__ __forceinline__ void mge_chain(const mt_slice &f, const unsigned char *xrow,
                                                 float c[MGE_NT][4])
{
#pragma unroll
    for (int j = 0; j < MGE_NT; j++)
        c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.0f;
    const bool big = mt_big(f);
    if (big) {
        mge_block<true, 0>(c, f.lo[0], f.hi[0], f.sb[0], f.sb[2], xrow);
        mge_block<true, 1>(c, f.lo[1], f.hi[1], f.sb[1], f.sb[3], xrow);
    } else {
        mge_block<false, 0>(c, f.lo[0], f.hi[0], f.sb[0], f.sb[2], xrow);
        mge_block<false, 1>(c, f.lo[1], f.hi[1], f.sb[1], f.sb[3], xrow);
    }
}

/* An invalid expert id: NaN outputs (gate_up: NaN activations) for the block's rows. */
static __device__ void mge_nan(const spc_moe_tc_gemm_job &j, int64_t first, int nt,
                               const int32_t *order)
{
    const int64_t per = j.glu ? MGE_ROWS / 2 : MGE_ROWS, n_y = j.glu ? j.n_out / 2 : j.n_out;
    const int64_t r0 = (int64_t)blockIdx.x * per;
    for (int i = threadIdx.x; i < per * nt; i += MGE_WARPS * 32) {
        const int64_t r = r0 + i % per, t = first + i / per;
        if (r >= n_y)
            continue;
        if (j.glu)
            *reinterpret_cast<uint16_t *>(j.yb + t * n_y * 2 + mge_pair_off(r)) = 0x7fc0u;
        else
            j.y[(order ? order[t] : t) * n_y + r] = __uint_as_float(0x7fffffffu);
    }
}

/* The block's rows of its group once the expert is known (w row-major MXFP4). */
template <bool VEC>
static __device__ __forceinline__ void mge_body(const spc_moe_tc_gemm_job &j, const sp_weight &w,
                                                const float *bias, int64_t first, int nt,
                                                const int32_t *order, unsigned char *xs)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int64_t rows = w.rows < j.n_out ? w.rows : j.n_out;
    const int64_t nb = (w.cols < j.cols ? w.cols : j.cols) / 32;
    const int S = (int)((j.cols + MT_BK - 1) / MT_BK);
    const int64_t r0 = (int64_t)blockIdx.x * MGE_ROWS + 16 * warp;
#pragma unroll
    for (int i = 0; i < MGE_STAGES - 1; i++) {
        if (i < S)
            mge_stage(j.xb, first, nt, j.cols, i, xs + i * MGE_STAGE_BYTES);
        else
            spc_cp_commit();
    }
    mt_slice f, fn;
    mt_load<VEC>(w, nb, r0, 0, f);
    float total[MGE_NT][4];
#pragma unroll
    for (int t = 0; t < MGE_NT; t++)
        total[t][0] = total[t][1] = total[t][2] = total[t][3] = 0.0f;
    for (int s = 0; s < S; s++) {
        if (s + 1 < S)
            mt_load<VEC>(w, nb, r0, s + 1, fn);
        spc_cp_wait<MGE_STAGES - 2>(); /* slice s is in (this thread's copies) ... */
        __syncthreads();               /* ... everyone's; and slice s - 1's buffer is free */
        const int sn = s + MGE_STAGES - 1;
        if (sn < S)
            mge_stage(j.xb, first, nt, j.cols, sn, xs + (sn % MGE_STAGES) * MGE_STAGE_BYTES);
        else
            spc_cp_commit(); /* an empty group keeps the count */
        float c[MGE_NT][4];
        mge_chain(f, xs + (s % MGE_STAGES) * MGE_STAGE_BYTES + g * MGE_PITCH, c);
#pragma unroll
        for (int t = 0; t < MGE_NT; t++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                total[t][r] = __fadd_rn(total[t][r], c[t][r]);
        f = fn;
    }
    spc_cp_wait<0>();
#pragma unroll
    for (int tj = 0; tj < MGE_NT; tj++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int64_t row = r0 + g + (r >= 2 ? 8 : 0);
            const int t = 8 * tj + 2 * q + (r & 1);
            const float v = bias && row < rows ? __fadd_rn(total[tj][r], bias[row]) : total[tj][r];
            if (j.glu) { /* row 2i + 1 (up) is lane ^ 4's: same register, token */
                const float up = __shfl_xor_sync(SPC_FULL_MASK, v, 4);
                if (!(row & 1) && row + 1 < rows && t < nt) {
                    const __nv_bfloat16 h = __float2bfloat16_rn(spc_glu_oss(v, up, j.alpha, j.limit));
                    *reinterpret_cast<__nv_bfloat16 *>(j.yb + (first + t) * (j.n_out / 2) * 2 +
                                                       mge_pair_off(row / 2)) = h;
                }
            } else if (row < rows && t < nt) {
                j.y[(order ? order[first + t] : first + t) * j.n_out + row] = v;
            }
        }
}

/* Block (x, g): rows 64 x.. of group g (expert, first sorted slot, count). Dynamic shared
 * memory: MGE_SMEM, the x slices in flight. */
__global__ void __launch_bounds__(MGE_WARPS * 32) k_moe_tc_gemm(const spc_moe_tc_gemm_job j)
{
    extern __shared__ __align__(16) unsigned char mge_xs[];
    spc_pdl_trigger();
    spc_pdl_wait(); /* the groups and x come from the kernels before */
    const int64_t grp = blockIdx.y;
    if (grp >= j.gi[4 * j.P])
        return;
    const int32_t *gr = j.gi + j.P + 3 * grp;
    const int32_t e = gr[0];
    const int64_t first = gr[1];
    const int nt = gr[2];
    const int32_t *order = j.scatter ? j.gi : NULL;
    if (e < 0 || e >= j.n_experts) {
        mge_nan(j, first, nt, order);
        return;
    }
    const spc_expert &ex = j.experts[e];
    if (ex.in_major)
        return;
    sp_weight w; /* to registers */
    const float *bias = mt_stage(ex, j.stage, j.gptoss, w);
    if (mt_vec(w))
        mge_body<true>(j, w, bias, first, nt, order, mge_xs);
    else
        mge_body<false>(j, w, bias, first, nt, order, mge_xs);
}

/* xb[slot] = BF16 pairs of row (order ? order[slot] / div : slot) of x (H floats a row). */
__global__ void k_moe_tc_pack_x(const float *__restrict__ x, const int32_t *__restrict__ order,
                                int64_t P, int64_t div, int64_t H, unsigned char *__restrict__ xb)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    const int64_t words = H / 8;
    SPC_GRID_STRIDE(i, P * words) {
        const int64_t slot = i / words, w = i % words;
        const float *p = x + (order ? order[slot] / div : slot) * H + 8 * w;
        float v[8];
#pragma unroll
        for (int k = 0; k < 8; k++)
            v[k] = __ldg(p + k);
        *reinterpret_cast<uint4 *>(xb + i * 16) =
            make_uint4(tc_pack(v[0], v[4]), tc_pack(v[1], v[5]), tc_pack(v[2], v[6]),
                       tc_pack(v[3], v[7]));
    }
}

int spc_moe_tc_pack_x(cudaStream_t s, const float *x, const int32_t *order, int64_t P, int64_t div,
                      int64_t H, unsigned char *xb)
{
    if (P < 0 || H % 32 || div < 1 || ((uintptr_t)xb % 16))
        return (int)cudaErrorInvalidValue;
    if (P == 0)
        return 0;
    spc_launch(k_moe_tc_pack_x, dim3(spc_grid_blocks(P * (H / 8), 256)), dim3(256), s, true, x, order,
               P, div, H, xb);
    return spc_launch_status();
}

int spc_moe_tc_gemm(cudaStream_t s, const spc_moe_tc_gemm_job &j, int64_t blocks_y)
{
    if (blocks_y < 1 || blocks_y > 65535 || j.cols % 32 || j.n_out < 1 || !j.xb || !j.gi ||
        ((uintptr_t)j.xb % 16) || (j.glu ? (j.stage != 0 || j.n_out % 2 || !j.yb) : !j.y))
        return (int)cudaErrorInvalidValue;
    const dim3 grid((unsigned)((j.n_out + MGE_ROWS - 1) / MGE_ROWS), (unsigned)blocks_y);
    spc_launch_smem(k_moe_tc_gemm, grid, dim3(MGE_WARPS * 32), MGE_SMEM, s, true, j);
    return spc_launch_status();
}

bool spc_moe_tc_gemm_setup(void)
{
    return cudaFuncSetAttribute(k_moe_tc_gemm, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                MGE_SMEM) == cudaSuccess;
}
