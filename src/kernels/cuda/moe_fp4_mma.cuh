/* moe_fp4_mma.cuh: the MXFP4 expert weights as tensor-core operands, shared by the
 * fast-precision expert kernels (cuda_moe_tc.cu: few tokens a block; cuda_moe_tc_gemm.cu:
 * groups of many tokens in prefill). Internal to the CUDA kernels.
 *
 * An MXFP4 value, e2m1(code) * 2^(s - 127), has at most two significant bits and the
 * exponent range of fp32, so BF16 holds it exactly: the weights reach the tensor core as
 * the exact decoder gives them. The decode is a few integer operations and one BF16
 * product a pair of codes: a code's magnitude bits placed at a BF16's exponent and
 * mantissa read as e2m1(code) * 2^-126, its sign bit goes to the sign, and multiplying by
 * 2^(s - 1) gives the value (by 2^126, then 2^(s - 127), when 2^(s - 1) is past BF16's range).
 *
 * Operands: in a 256-column slice (MXFP4 blocks 8j .. 8j + 7), thread (g, q) holds blocks
 * 8j + 2q and 8j + 2q + 1 of rows g and g + 8 (32 contiguous bytes a row) and of its
 * token's x. Word w (codes 8w .. 8w + 7) of a block gives four BF16 pairs, pair i = codes
 * (8w + i, 8w + i + 4); a block is eight mma, mma 2w taking pairs 0 and 1 of word w, mma
 * 2w + 1 pairs 2 and 3; the slice is one chain of sixteen from zero (block 2q, then 2q + 1).
 * x comes in that pair order: word w of block b of a token is 16 bytes, its pair i
 * (x[32b + 8w + i], x[32b + 8w + i + 4]) at + 4 i. Where the words sit is each kernel's:
 * packed in global memory block b at byte 64 b, word w at + 16 w (spc_moe_tc_pack_x);
 * in shared memory cuda_moe_tc.cu's mt_x_unit and cuda_moe_tc_gemm.cu's swizzle. */
#ifndef SP_KERNELS_CUDA_MOE_FP4_MMA_CUH
#define SP_KERNELS_CUDA_MOE_FP4_MMA_CUH

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/decode.cuh" /* SPC_FULL_MASK */
#include "kernels/cuda/tc_mma.cuh"

#include <cuda_runtime.h>
#include <stdint.h>

#define MT_BK 256   /* columns a slice: eight MXFP4 blocks, one chain of sixteen mma */

/* An expert's matrix of one stage (0 gate or gpt-oss gate_up, 1 up, 2 down) and its bias
 * (gpt-oss's gate_up and down biases, else NULL). */
static __device__ __forceinline__ const float *mt_stage(const spc_expert &ex, int stage,
                                                        bool gptoss, sp_weight &w)
{
    w = stage == 0 ? ex.gate : stage == 1 ? ex.up : ex.down;
    return !gptoss ? NULL : stage == 0 ? ex.gate_up_bias : stage == 2 ? ex.down_bias : NULL;
}

/* Expert e's matrix of a stage and its bias (mt_stage): from the steps when the experts lie
 * at equal steps, so that the weights' loads wait for no read of the table, else from its
 * entry. False: an input-major expert, which these kernels do not compute. */
static __device__ __forceinline__ bool mt_expert(const spc_expert *experts,
                                                 const spc_expert_steps &st, int32_t e, int stage,
                                                 bool gptoss, sp_weight &w, const float *&bias)
{
    if (!st.uniform) {
        const spc_expert &ex = experts[e];
        if (ex.in_major)
            return false;
        bias = mt_stage(ex, stage, gptoss, w);
        return true;
    }
    bias = mt_stage(st.first, stage, gptoss, w);
    w.data += (int64_t)e * st.data[stage];
    w.scales += (int64_t)e * st.scales[stage];
    if (bias)
        bias += (int64_t)e * (stage == 0 ? st.gate_up_bias : st.down_bias);
    return true;
}

/* Whether an MXFP4 matrix's rows can be read 16 bytes at a time. */
static __device__ __forceinline__ bool mt_vec(const sp_weight &w)
{
    return ((uintptr_t)w.data % 16) == 0 && w.row_bytes % 16 == 0;
}

/* ---- the decode: 8 codes -> 4 BF16 pairs --------------------------------------------- */

/* BF16 pair (both halves) of the block scale's factors: c1 = 2^(s - 1) when that fits
 * BF16 (s <= 128), else 2^126 with c2 = 2^(s - 127) (NaN for s = 255, as spc_e8m0); c2 = 0:
 * no second product. */
static __device__ __forceinline__ void mt_scale(uint32_t s, uint32_t *c1, uint32_t *c2)
{
    if (s <= 128u) {
        *c1 = (s + 126u) << 7;
        *c2 = 0;
    } else {
        *c1 = 253u << 7;
        *c2 = s == 255u ? 0x7fc0u : s << 7;
    }
    *c1 |= *c1 << 16;
    *c2 |= *c2 << 16;
}

/* mt_scale's c1 for a scale s < 128 (no second product), in one multiply-add:
 * (s + 126) << 7 in both halves, which cannot carry into each other (at most 253 << 7). */
static __device__ __forceinline__ uint32_t mt_scale_small(uint32_t s)
{
    return s * 0x00800080u + 0x3f003f00u;
}

/* A block scale's factors for mt_pair<I, BIG>: mt_scale's when some scale of the warp's
 * slice needs the second product (BIG), else c1 alone by mt_scale_small (the same bits:
 * every scale is then below 128). Both expert kernels take their factors here. */
template <bool BIG> static __device__ __forceinline__ void mt_scales(uint32_t s, uint32_t c[2])
{
    if (BIG) {
        mt_scale(s, &c[0], &c[1]);
    } else {
        c[0] = mt_scale_small(s);
        c[1] = 0u;
    }
}

static __device__ __forceinline__ uint32_t mt_mul(uint32_t a, uint32_t b)
{
    __nv_bfloat162 r = __hmul2(*reinterpret_cast<__nv_bfloat162 *>(&a),
                               *reinterpret_cast<__nv_bfloat162 *>(&b));
    return *reinterpret_cast<uint32_t *>(&r);
}

/* Pair i of word w: codes i (bits 4i..) and i + 4 (bits 4i + 16..), magnitude to bits
 * 6-8 / 22-24, sign to 15 / 31; times the scale. Exact: e2m1 * 2^-126 is a BF16 (a
 * subnormal for 0.5) and the products by powers of two round nothing away but overflow.
 * The two codes (pairs 2 and 3 from w >> 8) are masked out and moved to both places by
 * one multiply, m * (2^a + 2^(a + 6)): the two shifted copies share no bit, so the sum
 * has no carry, and a mask keeps magnitude and sign. */
template <int I, bool BIG>
static __device__ __forceinline__ uint32_t mt_pair(uint32_t w, uint32_t c1, uint32_t c2)
{
    constexpr int J = I & 1;                  /* nibble of the (shifted) word's halves */
    const uint32_t src = I >= 2 ? w >> 8 : w; /* codes i, i + 4 at bits 4j.., 4j + 16.. */
    const uint32_t m = src & (0x000f000fu << (4 * J));
    const uint32_t v = (m * (0x1040u >> (4 * J))) & 0x81c081c0u;
    const uint32_t r = mt_mul(v, c1);
    return BIG && c2 ? mt_mul(r, c2) : r;
}

/* c += the two mma of word w of rows g (lo) and g + 8 (hi) against x pairs b. BIG: some
 * scale of the warp's slice needs the second product. */
template <bool BIG>
static __device__ __forceinline__ void mt_word(float c[4], uint32_t lo, uint32_t hi,
                                               const uint32_t slo[2], const uint32_t shi[2],
                                               const uint4 &b)
{
    tc_mma(c, mt_pair<0, BIG>(lo, slo[0], slo[1]), mt_pair<0, BIG>(hi, shi[0], shi[1]),
           mt_pair<1, BIG>(lo, slo[0], slo[1]), mt_pair<1, BIG>(hi, shi[0], shi[1]), b.x, b.y);
    tc_mma(c, mt_pair<2, BIG>(lo, slo[0], slo[1]), mt_pair<2, BIG>(hi, shi[0], shi[1]),
           mt_pair<3, BIG>(lo, slo[0], slo[1]), mt_pair<3, BIG>(hi, shi[0], shi[1]), b.z, b.w);
}

/* ---- one slice ------------------------------------------------------------------------ */

/* A thread's operands of one slice: blocks 2q and 2q + 1 of rows g (lo) and g + 8 (hi),
 * and their four scale bytes as loaded (lo 2q, lo 2q + 1, hi 2q, hi 2q + 1), each in its
 * own register: nothing combines them before the slice is computed, so issuing the loads
 * never waits for them. */
struct mt_slice {
    uint4 lo[2], hi[2];
    uint32_t sb[4];
};

/* Whether some scale of the warp's slices is 128 or more (2 or more as a factor: rare), so
 * that its scale factors need mt_scale's second product (mt_scales<true>). A warp vote:
 * the whole warp takes one of the two instances of the chain. */
static __device__ __forceinline__ bool mt_big(const mt_slice &f)
{
    return __any_sync(SPC_FULL_MASK, ((f.sb[0] | f.sb[1] | f.sb[2] | f.sb[3]) & 0x80u) != 0u);
}

/* 16 bytes of an MXFP4 row (one block); byte loads when the row is not 16-byte aligned */
template <bool VEC> static __device__ __forceinline__ uint4 mt_ld16(const unsigned char *p)
{
    if constexpr (VEC) {
        return __ldg(reinterpret_cast<const uint4 *>(p));
    } else {
        uint32_t v[4];
#pragma unroll
        for (int i = 0; i < 4; i++)
            v[i] = (uint32_t)__ldg(p + 4 * i) | (uint32_t)__ldg(p + 4 * i + 1) << 8 |
                   (uint32_t)__ldg(p + 4 * i + 2) << 16 | (uint32_t)__ldg(p + 4 * i + 3) << 24;
        return make_uint4(v[0], v[1], v[2], v[3]);
    }
}

/* One row's two blocks b, b + 1 and their scale bytes (zeros past the row or its blocks). */
template <bool VEC>
static __device__ __forceinline__ void mt_load_row(const sp_weight &w, int64_t nb, int64_t r,
                                                   int64_t b, uint4 v[2], uint32_t sb[2])
{
    const uint4 z = make_uint4(0, 0, 0, 0);
    const unsigned char *d = w.data + (size_t)r * w.row_bytes + (size_t)b * 16;
    const unsigned char *s = w.scales + (size_t)r * w.scale_row_bytes + (size_t)b;
    const bool ok0 = r < w.rows && b < nb, ok1 = r < w.rows && b + 1 < nb;
    v[0] = ok0 ? mt_ld16<VEC>(d) : z;
    v[1] = ok1 ? mt_ld16<VEC>(d + 16) : z;
    sb[0] = ok0 ? (uint32_t)__ldg(s) : 0u;
    sb[1] = ok1 ? (uint32_t)__ldg(s + 1) : 0u;
}

/* Issues the loads of slice s of rows r0 .. r0 + 15 of w. */
template <bool VEC>
static __device__ __forceinline__ void mt_load(const sp_weight &w, int64_t nb, int64_t r0, int s,
                                               mt_slice &f)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int64_t b = (int64_t)s * (MT_BK / 32) + 2 * q;
    mt_load_row<VEC>(w, nb, r0 + g, b, f.lo, &f.sb[0]);
    mt_load_row<VEC>(w, nb, r0 + g + 8, b, f.hi, &f.sb[2]);
}

/* The eight BF16 operands of word w of rows g (lo) and g + 8 (hi): a[0..3] mma 2w's
 * (pairs 0 and 1), a[4..7] mma 2w + 1's (pairs 2 and 3), in tc_mma's fragment order. */
template <bool BIG>
static __device__ __forceinline__ void mt_word_a(uint32_t lo, uint32_t hi, const uint32_t slo[2],
                                                 const uint32_t shi[2], uint32_t a[8])
{
    a[0] = mt_pair<0, BIG>(lo, slo[0], slo[1]), a[1] = mt_pair<0, BIG>(hi, shi[0], shi[1]);
    a[2] = mt_pair<1, BIG>(lo, slo[0], slo[1]), a[3] = mt_pair<1, BIG>(hi, shi[0], shi[1]);
    a[4] = mt_pair<2, BIG>(lo, slo[0], slo[1]), a[5] = mt_pair<2, BIG>(hi, shi[0], shi[1]);
    a[6] = mt_pair<3, BIG>(lo, slo[0], slo[1]), a[7] = mt_pair<3, BIG>(hi, shi[0], shi[1]);
}

#endif
