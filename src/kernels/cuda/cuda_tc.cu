/* cuda_tc.cu: the fast-precision products of BF16 weights on tensor cores (see
 * cuda_ops.h, "fast precision"): y = bf16(x) W^T with mma.sync m16n8k16 (BF16 inputs,
 * fp32 accumulation), one arithmetic for every number of tokens.
 *
 * Two schedules compute the same mma sequence for every output element (the fragment
 * mapping is in cuda_tc.cuh):
 * - k_tc_rows (up to 16 tokens: decode, verify, here): a block of 8 warps takes 16 rows
 *   at a time (and, for SwiGLU, the same 16 rows of up) of 8 or 16 tokens, with x as bf16
 *   in shared memory, staged once; each warp computes whole 128-column slices (which warp
 *   takes which slice is a schedule, not arithmetic), the block folds the slice sums in
 *   ascending order, then walks on to its next row group (at most a wave of blocks: the
 *   LM head's 12,568 groups no longer stage x 12,568 times; gpt-oss-20b shape, H200, ncu
 *   of a decode step: Q/K/V + LM head 754 -> 689 us, decode within noise, +0-2%). The
 *   weights reach the warps through a ring of shared-memory slots filled by cp.async in
 *   whole lines (below).
 * - k_tc_gemm (more tokens, cuda_tc_gemm.cu): x rounded to bf16 once into the caller's
 *   scratch, then a tiled GEMM; without scratch the rows kernel runs in 16-token pieces.
 * This file holds the rows kernel, the choice between the two and the entry points. */
#include "kernels/cuda/cuda_moe_tc.cuh"
#include "kernels/cuda/cuda_tc.cuh"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/decode.cuh"

#define TC_WARPS_ROWS 8              /* warps of k_tc_rows */
#define TC_ROUND_FLOATS 8192         /* k_tc_rows' slice sums a round (32 KB) */
#define TC_XS_MAX (96 * 1024)        /* k_tc_rows' bf16 x in shared memory, at most */

/* ---- few tokens: k_tc_rows ---------------------------------------------------------- */

/* 8 elements of x row tok at column k (zeros past the row's tokens or columns) */
static __device__ __forceinline__ void tc_load_x(const float *x, int64_t cols, bool xvec,
                                                 bool ok, int64_t tok, int64_t k, uint32_t b[4])
{
    float4 u = make_float4(0.f, 0.f, 0.f, 0.f), v = u;
    if (ok)
        tc_x8(x + tok * cols + k, xvec, u, v);
    tc_pack8(u, v, b);
}

/* A warp's weights for one slice: rows g and g + 8 of a 16-row group, every step, in the
 * registers of cuda_tc.cuh's fragment mapping. */
struct tc_slice_w {
    uint4 lo[TC_SLICE], hi[TC_SLICE];
};

/* Where a warp's x fragments come from: XS, the block's bf16 copy in shared memory
 * (rows of pitch bytes, `rows` tokens from t0); else x itself, converted per load. Both
 * give the same bf16 values. */
struct tc_x_src {
    const float *x;
    int64_t cols, n_tok, t0;
    bool xvec;
    const unsigned char *xs;
    int pitch, rows;
};

/* Token tt's x fragment at column k read from x itself, converted per load (the path
 * where the block's bf16 copy does not fit shared memory; the copy's path is tc_x_lane's
 * pointer): zeros past the tokens or columns. */
static __device__ __forceinline__ void tc_x_frag_global(const tc_x_src &src, int tt, int64_t k,
                                                        uint32_t b[4])
{
    const int64_t tok = src.t0 + tt;
    tc_load_x(src.x, src.cols, src.xvec, tok < src.n_tok && k < src.cols, tok, k, b);
}

/* The chain of slice s over the loaded weights and NT token tiles of x. xl (XS only): the
 * lane's x fragments in shared memory, token tile j's at xl[j] (tc_x_lane). */
template <int NT, bool XS>
static __device__ __forceinline__ void tc_mma_slice(const tc_slice_w &f, const tc_x_src &src,
                                                    const unsigned char *const xl[NT], int s,
                                                    float c[NT][4])
{
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int steps = (int)((src.cols + TC_BK - 1) / TC_BK);
#pragma unroll
    for (int j = 0; j < NT; j++)
        c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.0f;
#pragma unroll
    for (int u = 0; u < TC_SLICE; u++) {
        const int st = s * TC_SLICE + u;
        if (st < steps) {
#pragma unroll
            for (int j = 0; j < NT; j++) {
                uint32_t b[4];
                if (XS) {
                    const uint4 v = *reinterpret_cast<const uint4 *>(xl[j] + st * (TC_BK * 2));
                    b[0] = v.x, b[1] = v.y, b[2] = v.z, b[3] = v.w;
                } else {
                    tc_x_frag_global(src, j * 8 + g, (int64_t)st * TC_BK + 8 * q, b);
                }
                tc_mma2(c[j], f.lo[u], f.hi[u], b);
            }
        }
    }
}

/* Where the lane's x fragments of token tile j start in the staged copy: its token's row
 * (tokens past the tile's read the last one's: their mma columns are never stored, and a
 * column's sums use its own x only), column 8q. The staged rows are zero past cols up to a
 * whole step, so a step below `steps` needs no column check. */
static __device__ __forceinline__ const unsigned char *tc_x_lane(const tc_x_src &src, int j)
{
    const int lane = threadIdx.x & 31, t = j * 8 + (lane >> 2);
    return src.xs + (t < src.rows ? t : src.rows - 1) * src.pitch + (lane & 3) * 16;
}

/* Copies tokens t0 .. t0 + src.rows of x to the block's bf16 rows (zeros past cols). */
static __device__ __forceinline__ void tc_stage_x(const tc_x_src &src, unsigned char *xs)
{
    const int64_t chunks = (src.cols + TC_BK - 1) / TC_BK * (TC_BK / 8); /* 8 columns each */
    for (int64_t i = threadIdx.x; i < chunks * src.rows; i += blockDim.x) {
        const int t = (int)(i / chunks);
        const int64_t k = (i % chunks) * 8;
        uint32_t b[4];
        tc_load_x(src.x, src.cols, src.xvec, k < src.cols, src.t0 + t, k, b);
        *reinterpret_cast<uint4 *>(xs + t * src.pitch + k * 2) = make_uint4(b[0], b[1], b[2], b[3]);
    }
}

/* The chain of slice s into the item's shared-memory slot (register r of lane l at
 * slot[j][r][l]). */
template <int NT, bool XS>
static __device__ __forceinline__ void tc_item_slice(const tc_slice_w &f, const tc_x_src &src,
                                                     const unsigned char *const xl[NT], int s,
                                                     float (*slot)[4][32])
{
    float c[NT][4];
    tc_mma_slice<NT, XS>(f, src, xl, s, c);
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int r = 0; r < 4; r++)
            slot[j][r][lane] = c[j][r];
}

/* Which matrix row group g (of all the launch's matrices) is in, and its first row. */
static __device__ __forceinline__ int tc_group(const tc_set &set, int64_t g, int64_t *r0)
{
    int m = 0;
    while (m + 1 < set.n && g >= set.grp0[m + 1])
        m++;
    *r0 = (g - set.grp0[m]) * 16;
    return m;
}

/* ---- the weights through shared memory -----------------------------------------------
 * Each warp copies its next TC_RING items (16 rows x 128 columns) into a ring of
 * shared-memory slots by cp.async, half a warp to a 256-byte row segment (two whole lines a
 * request), and reads an item's fragments from its slot (granule c of row r stored at
 * c ^ (r % 8): conflict-free reads). Loading the fragments straight from global memory, a
 * load instruction takes 64 bytes of each of eight rows: 1.5-1.9x the L2 requests for the
 * same bytes (llama-1b, H200: fast decode 843-849 -> 879-888 tok/s, gpt-oss-20b 380-383 ->
 * 384-387; ncu, down 2048 x 8192: 18.0 -> 15.4 us). Only where the bytes travel changes:
 * the same registers reach the same mma. */
#define TC_RING 2                        /* items a warp has in flight */
#define TC_SEG_BYTES (TC_KS * 2)         /* an item's row: 128 BF16 columns */
#define TC_ITEM_BYTES (16 * TC_SEG_BYTES) /* an item: 16 rows */
#define TC_LANE_COPIES (TC_ITEM_BYTES / (16 * 32)) /* 16-byte copies a lane makes of an item */
#define TC_RING_BYTES ((size_t)TC_WARPS_ROWS * TC_RING * TC_ITEM_BYTES) /* a block's rings */

/* The rows kernel's dynamic shared memory, at most: the smallest of the devices' limits
 * (spc_tc_supported sets it before any launch). */
static int g_tc_dyn_smem;

/* Item `it` of a group: its job (0 the matrix or SwiGLU's gate, 1 SwiGLU's up) and slice;
 * it < 2 S, so no division. */
static __device__ __forceinline__ int tc_item_job(const tc_set &set, int S, int it, int *s)
{
    const int j = set.swiglu && it >= S ? 1 : 0;
    *s = it - j * S;
    return j;
}

/* Where a lane's copies of one group come from (set when the warp's copies reach the
 * group, not an item at a time): for each job, the lane's first row r0 + lane / 16 at
 * column byte 16 (lane % 16) of slice 0 (its copies take every second row from there),
 * and two rows' bytes; full: all 16 rows exist. */
struct tc_src_rows {
    const unsigned char *p[2];
    size_t ld2[2];
    bool full;
};

/* A warp's next item to copy: group g (of the block's g = blockIdx.x + i gridDim.x), round
 * (first item of TC_ROUND_FLOATS / (128 NT)), item k of the round; src: group g's rows. */
struct tc_cur {
    int64_t g;
    int round, k;
    tc_src_rows src;
};

static __device__ __forceinline__ void tc_src_rows_at(const tc_set &set, int64_t g, tc_src_rows &r)
{
    int64_t r0;
    const int m = tc_group(set, g, &r0), lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int mm = set.swiglu ? j : m;
        r.p[j] = set.w[mm] + (size_t)(r0 + (lane >> 4)) * set.ld[mm] + (size_t)(lane & 15) * 16;
        r.ld2[j] = 2 * set.ld[mm];
    }
    r.full = r0 + 16 <= set.rows[m];
}

/* Moves c to the warp's first item at or after it (past empty rounds; g >= groups: none),
 * and its rows to the group it lands in. */
static __device__ __forceinline__ void tc_cur_settle(const tc_set &set, tc_cur &c, int items,
                                                     int R, int warp, int64_t groups)
{
    const int64_t g0 = c.g;
    while (c.g < groups) {
        const int n_in = items - c.round < R ? items - c.round : R;
        if (c.k < n_in)
            break;
        c.k = warp;
        c.round += R;
        if (c.round >= items) {
            c.round = 0;
            c.g += gridDim.x;
        }
    }
    if (c.g != g0 && c.g < groups)
        tc_src_rows_at(set, c.g, c.src);
}

/* An item wholly inside its matrix (all 16 rows, all 128 columns): each lane copies 16
 * bytes of each of its 8 rows, every second row from p, no checks (the copies' addresses
 * from the group's row pointer, not an item's matrix search, divisions and products:
 * gpt-oss-20b shape, H200, ncu of a decode step: Q/K/V + LM head 738 -> 677 us, o 13.6 ->
 * 12.5 us a launch; fast decode 483 -> 494 tok/s). These copies go without the L2
 * evict-first hint the edge items' copies keep: with it, ptxas of CUDA 13.0 gave these
 * unpredicated copies the policy in an odd uniform register (desc[UR1]), an illegal
 * instruction on an H200, also with the policy made once at the kernel's top. */
static __device__ __forceinline__ void tc_ring_issue_full(const unsigned char *p, size_t ld2,
                                                          unsigned char *slot)
{
    const int lane = threadIdx.x & 31, h = lane >> 4, c16 = lane & 15;
#pragma unroll
    for (int i = 0; i < TC_LANE_COPIES; i++) {
        const int rho = h + 2 * i;
        spc_cp16(slot + rho * TC_SEG_BYTES + ((c16 ^ (rho & 7)) << 4), p + i * ld2);
    }
}

/* Issues the copies of item c into slot (zeros past rows or columns) and commits them as
 * one group (an empty group when c is past the block's groups). */
static __device__ __forceinline__ void tc_ring_issue(const tc_set &set, int S, const tc_cur &c,
                                                     int64_t groups, unsigned char *slot)
{
    if (c.g < groups) {
        int s;
        const int jb = tc_item_job(set, S, c.round + c.k, &s);
        if (c.src.full && (int64_t)(s + 1) * TC_KS <= set.cols) {
            tc_ring_issue_full((jb ? c.src.p[1] : c.src.p[0]) + (size_t)s * TC_SEG_BYTES,
                               jb ? c.src.ld2[1] : c.src.ld2[0], slot);
        } else {
            int64_t r0;
            const int m = tc_group(set, c.g, &r0), mm = set.swiglu ? jb : m;
            const unsigned char *w = set.w[mm];
            const int lane = threadIdx.x & 31;
#pragma unroll
            for (int i = 0; i < TC_LANE_COPIES; i++) { /* half a warp a row segment */
                const int idx = lane + 32 * i, rho = idx / (TC_SEG_BYTES / 16);
                const int c16 = idx % (TC_SEG_BYTES / 16);
                const int64_t row = r0 + rho, col = (int64_t)s * TC_KS + 8 * c16;
                const bool ok = row < set.rows[mm] && col < set.cols;
                spc_cp16_or_zero_stream(slot + rho * TC_SEG_BYTES + ((c16 ^ (rho & 7)) << 4),
                                        ok ? w + (size_t)row * set.ld[mm] + (size_t)col * 2 : w, ok);
            }
        }
    }
    spc_cp_commit();
}

/* An item's fragments from its slot, in cuda_tc.cuh's mapping (rows g and g + 8, columns
 * 32 u + 8 q of step u). */
static __device__ __forceinline__ void tc_ring_read(const unsigned char *slot, tc_slice_w &f)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int u = 0; u < TC_SLICE; u++) {
        const int c = ((4 * u + q) ^ g) << 4;
        f.lo[u] = *reinterpret_cast<const uint4 *>(slot + g * TC_SEG_BYTES + c);
        f.hi[u] = *reinterpret_cast<const uint4 *>(slot + (g + 8) * TC_SEG_BYTES + c);
    }
}

/* grid (blocks walking the 16-row groups of all matrices: x, x + gridDim.x, ..; token tiles
 * of 8 NT), TC_WARPS_ROWS warps; dynamic shared memory: XS, the tile's tokens of x as bf16
 * (rows of xs_pitch bytes, xs_bytes padded to 128), staged once for all the block's groups,
 * then the warps' rings. Items are (job, slice) pairs, job 0 the matrix (SwiGLU: 0 gate, 1
 * up), in rounds of up to TC_ROUND_FLOATS / (128 NT) items (one round for K up to 16384 at
 * NT 1); warp w computes items w, w + W, ... of a round into shared memory, then the block
 * folds the round's items in ascending order (the fold's element mapping is below). A
 * warp's copies run TC_RING items ahead of it, across rounds and groups, the first ones
 * issued before the wait for x. */
template <int NT, bool XS>
__global__ void __launch_bounds__(TC_WARPS_ROWS * 32, 2)
k_tc_rows(const tc_set set, const float *__restrict__ x, int64_t n_tok, bool xvec, int xs_pitch,
          int xs_bytes)
{
    extern __shared__ __align__(128) unsigned char tc_xs[];
    spc_pdl_trigger();
    constexpr int W = TC_WARPS_ROWS, ROUND = TC_ROUND_FLOATS / (128 * NT);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, e = threadIdx.x;
    const int64_t groups = set.grp0[set.swiglu ? 1 : set.n];
    const int64_t t0 = (int64_t)blockIdx.y * 8 * NT;
    const int S = (int)((set.cols + TC_KS - 1) / TC_KS);
    const int items = (set.swiglu ? 2 : 1) * S;
    const int64_t left = n_tok - t0;
    const tc_x_src src = {x, set.cols, n_tok, t0, xvec, tc_xs, xs_pitch,
                          (int)(left < 8 * NT ? left : 8 * NT)};
    __shared__ float part[ROUND][NT][4][32];
    /* the fold: thread e owns elements e, e + 32 W, ... < 128 NT (element el: token tile
     * el / 128, fragment register (el / 32) % 4 of lane el % 32) */
    constexpr int PER = (128 * NT + 32 * W - 1) / (32 * W);
    unsigned char *ring = tc_xs + xs_bytes + warp * TC_RING * TC_ITEM_BYTES;
    /* the first TC_RING items' copies fly before x is read */
    tc_cur cur;
    cur.g = blockIdx.x, cur.round = 0, cur.k = warp;
    if (cur.g < groups)
        tc_src_rows_at(set, cur.g, cur.src);
    tc_cur_settle(set, cur, items, ROUND, warp, groups);
#pragma unroll
    for (int d = 0; d < TC_RING; d++) {
        tc_ring_issue(set, S, cur, groups, ring + d * TC_ITEM_BYTES);
        cur.k += W;
        tc_cur_settle(set, cur, items, ROUND, warp, groups);
    }
    int slot = 0;
    spc_pdl_wait();
    const unsigned char *xl[NT] = {};
    if (XS) {
        tc_stage_x(src, tc_xs);
#pragma unroll
        for (int j = 0; j < NT; j++)
            xl[j] = tc_x_lane(src, j);
        __syncthreads();
    }
    for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
        int64_t r0;
        const int m = tc_group(set, g, &r0);
        float total[PER][2], bias[PER]; /* the group's bias, read now: used at the store */
#pragma unroll
        for (int i = 0; i < PER; i++) {
            total[i][0] = total[i][1] = 0.0f;
            const int el = e + 32 * W * i, fr = (el >> 5) & 3;
            const int64_t row = r0 + (lane >> 2) + (fr >= 2 ? 8 : 0);
            bias[i] = !set.swiglu && set.b[m] && el < 128 * NT && row < set.rows[m]
                          ? __ldg(set.b[m] + row)
                          : 0.0f;
        }
        for (int round = 0; round < items; round += ROUND) {
            const int n_in = items - round < ROUND ? items - round : ROUND;
            for (int k = warp; k < n_in; k += W) {
                spc_cp_wait<TC_RING - 1>(); /* this item's copies (this lane's) ... */
                __syncwarp();               /* ... and the warp's */
                tc_slice_w f;
                tc_ring_read(ring + slot * TC_ITEM_BYTES, f);
                __syncwarp(); /* the slot is read: refill it */
                tc_ring_issue(set, S, cur, groups, ring + slot * TC_ITEM_BYTES);
                cur.k += W;
                tc_cur_settle(set, cur, items, ROUND, warp, groups);
                slot = slot + 1 == TC_RING ? 0 : slot + 1;
                int sl;
                (void)tc_item_job(set, S, round + k, &sl);
                tc_item_slice<NT, XS>(f, src, xl, sl, part[k]);
            }
            __syncthreads();
#pragma unroll
            for (int i = 0; i < PER; i++) {
                const int el = e + 32 * W * i;
                if (el < 128 * NT)
                    for (int k = 0; k < n_in; k++) {
                        const float v = part[k][el >> 7][(el >> 5) & 3][lane];
                        if ((round + k) < S) /* job 0, else SwiGLU's up */
                            total[i][0] = __fadd_rn(total[i][0], v);
                        else
                            total[i][1] = __fadd_rn(total[i][1], v);
                    }
            }
            __syncthreads(); /* part is refilled by the next round */
        }
#pragma unroll
        for (int i = 0; i < PER; i++) {
            const int el = e + 32 * W * i, fr = (el >> 5) & 3;
            const int64_t row = r0 + (lane >> 2) + (fr >= 2 ? 8 : 0);
            const int64_t tok = t0 + (el >> 7) * 8 + 2 * (lane & 3) + (fr & 1);
            if (el >= 128 * NT || row >= set.rows[m] || tok >= n_tok)
                continue;
            float v = total[i][0];
            if (set.swiglu)
                v = __fmul_rn(spc_silu(v), total[i][1]);
            else if (set.b[m])
                v = __fadd_rn(v, bias[i]);
            set.y[m][tok * set.rows[m] + row] = v;
        }
    }
    spc_cp_wait<0>();
}

/* ---- launches ------------------------------------------------------------------------ */

/* The rows kernel over n_tok <= TC_ROWS_MAX_TOK tokens. */
static int tc_rows_run(cudaStream_t s, tc_set &set, const float *x, int64_t n_tok)
{
    const bool xvec = ((uintptr_t)x % 16) == 0;
    unsigned groups = 0;
    const int nm = set.swiglu ? 1 : set.n;
    for (int i = 0; i < nm; i++) {
        set.grp0[i] = groups;
        groups += (unsigned)((set.rows[i] + 15) / 16);
    }
    set.grp0[nm] = groups;
    const int nt = n_tok <= 8 ? 1 : 2;
    /* at most a wave of blocks (two an SM), each walking groups x, x + gridDim.x, .. */
    const unsigned tiles = (unsigned)((n_tok + 8 * nt - 1) / (8 * nt));
    const unsigned wave = 2u * (unsigned)(spc_sm_count > 0 ? spc_sm_count : 132);
    const unsigned per_tile = (wave + tiles - 1) / tiles;
    dim3 grid(groups < per_tile ? groups : per_tile, tiles);
    /* x as bf16 in shared memory when it fits (the same values as converting per load) */
    const int64_t steps = (set.cols + TC_BK - 1) / TC_BK;
    const int64_t xs_pitch = steps * TC_BK * 2 + 16;
    const int64_t xs_rows = n_tok < 8 * nt ? n_tok : 8 * nt;
    const int64_t xs = xs_pitch <= TC_XS_MAX ? xs_rows * xs_pitch : TC_XS_MAX + 1;
    const bool use_xs = xs <= TC_XS_MAX;
    /* the ring after x, at a multiple of 128 bytes (x from global memory when both do not
     * fit): a slot's 256-byte row segments must start on 128-byte lines of shared memory.
     * With the ring 16 bytes past a line, the same copies cost three times the L2 requests
     * (H200, ncu of the gpt-oss LM head: 27.2 M requests and 90.5 M sectors read, half of
     * them L2 hits, against 9.05 M and 54.3 M aligned; 303 -> 264 us), as if a copy
     * instruction went in one pass per shared-memory line its lanes write, each pass
     * requesting every global line its lanes read (the swizzle spreads a pass's lanes over
     * both of a half warp's global lines). */
    const int xb = use_xs ? (int)((xs + 127) / 128 * 128) : 0;
    const bool fit = (size_t)xb + TC_RING_BYTES <= (size_t)g_tc_dyn_smem;
    const size_t smem = (fit ? (size_t)xb : 0) + TC_RING_BYTES;
    const int pitch = use_xs && fit ? (int)xs_pitch : 0;
#define TC_ROWS(NT, XS)                                                                      \
    spc_launch_smem(k_tc_rows<NT, XS>, grid, dim3(TC_WARPS_ROWS * 32), smem, s, true, set, x,   \
                    n_tok, xvec, pitch, fit ? xb : 0)
    if (nt == 1)
        use_xs && fit ? TC_ROWS(1, true) : TC_ROWS(1, false);
    else
        use_xs && fit ? TC_ROWS(2, true) : TC_ROWS(2, false);
#undef TC_ROWS
    return spc_launch_status();
}

/* Few tokens: the rows kernel; more: the GEMM, in pieces of as many tokens as the scratch
 * holds (the rows kernel's 16 without scratch). Every piece gives the same bits. */
static int tc_run(cudaStream_t s, tc_set &set, const float *x, int64_t n_tok, void *scratch,
                  size_t scratch_bytes)
{
    if (n_tok <= TC_ROWS_MAX_TOK)
        return tc_rows_run(s, set, x, n_tok);
    int64_t per = tc_gemm_tokens(set.cols, scratch, scratch_bytes);
    if (per >= n_tok)
        return tc_gemm_run(s, set, x, n_tok, scratch);
    per = per > TC_ROWS_MAX_TOK ? per : TC_ROWS_MAX_TOK;
    for (int64_t t = 0; t < n_tok; t += per) {
        tc_set part = set;
        for (int i = 0; i < set.n; i++)
            part.y[i] = set.y[i] + t * set.rows[set.swiglu ? 0 : i];
        const int64_t nt = n_tok - t < per ? n_tok - t : per;
        const int rc = tc_run(s, part, x + t * set.cols, nt, scratch, scratch_bytes);
        if (rc)
            return rc;
    }
    return 0;
}

extern "C" bool spc_tc_weight_ok(const sp_weight *w)
{
    return w && w->format == SP_WF_BF16 && w->rows >= 0 && w->cols > 0 && w->cols % 8 == 0 &&
           ((uintptr_t)w->data % 16) == 0 && w->row_bytes % 16 == 0 &&
           w->row_bytes >= (size_t)w->cols * 2;
}

/* Once per process, outside any graph capture (spc_tc_supported, called when a backend
 * turns fast precision on): the device check, the SM count and the kernels' shared-memory
 * limits (cudaFuncSetAttribute is not a call to make while a stream records). */
#define TC_MAX_DEVICES 64
static int g_tc_state[TC_MAX_DEVICES]; /* per device: 0 not yet, 1 ready, -1 unsupported */

template <typename... P> static bool tc_smem_limit(void (*k)(P...), int bytes)
{
    return cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) ==
           cudaSuccess;
}

extern "C" bool spc_tc_supported(void)
{
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= TC_MAX_DEVICES)
        return false;
    if (!g_tc_state[dev]) {
        int major = 0, sms = 0;
        bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) ==
                      cudaSuccess &&
                  major >= 8 &&
                  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess;
        /* the rows kernel's dynamic shared memory: the ring and up to TC_XS_MAX of x, less
         * where the device has less (then x comes from global memory for long rows) */
        int optin = 0;
        ok = ok && cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) ==
                       cudaSuccess;
        const int stat = (int)(TC_ROUND_FLOATS * sizeof(float)) + 1024; /* part, and slack */
        int dyn = TC_XS_MAX + 128 + (int)TC_RING_BYTES;
        dyn = optin - stat < dyn ? optin - stat : dyn;
        ok = ok && dyn >= (int)TC_RING_BYTES && tc_smem_limit(k_tc_rows<1, true>, dyn) &&
             tc_smem_limit(k_tc_rows<2, true>, dyn) && tc_smem_limit(k_tc_rows<1, false>, dyn) &&
             tc_smem_limit(k_tc_rows<2, false>, dyn) &&
             tc_gemm_setup(dev, sms) && spc_moe_tc_setup();
        g_tc_state[dev] = ok ? 1 : -1;
        if (ok)
            g_tc_dyn_smem = g_tc_dyn_smem && g_tc_dyn_smem < dyn ? g_tc_dyn_smem : dyn;
        (void)cudaGetLastError(); /* a refused attribute is not a launch error */
    }
    return g_tc_state[dev] == 1;
}

extern "C" const char *spc_tc_gemm_name(void)
{
    return tc_wgmma_ready() ? "wgmma" : "mma.sync";
}

static void tc_add(tc_set &set, const sp_weight *w, float *y, const float *b)
{
    const int i = set.n++;
    set.w[i] = w->data;
    set.ld[i] = w->row_bytes;
    set.rows[i] = w->rows;
    set.y[i] = y;
    set.b[i] = b;
}

extern "C" int spc_matmul_tc(void *stream, const sp_weight *w, const float *x, int64_t n_tok,
                             float *y, const float *bias, void *scratch, size_t scratch_bytes)
{
    return spc_matmul_tc_multi(stream, 1, &w, x, n_tok, &y, &bias, scratch, scratch_bytes);
}

extern "C" int spc_matmul_tc_multi(void *stream, int n, const sp_weight *const *ws, const float *x,
                                   int64_t n_tok, float *const *ys, const float *const *biases,
                                   void *scratch, size_t scratch_bytes)
{
    if (n < 1 || n > SPC_MULTI_MAX || n_tok < 0 || !ws || !ys || !spc_tc_supported())
        return (int)cudaErrorInvalidValue;
    tc_set set = {};
    for (int i = 0; i < n; i++) {
        if (!spc_tc_weight_ok(ws[i]) || ws[i]->cols != ws[0]->cols)
            return (int)cudaErrorInvalidValue;
        tc_add(set, ws[i], ys[i], biases ? biases[i] : NULL);
    }
    set.cols = ws[0]->cols;
    if (n_tok == 0)
        return 0;
    return tc_run((cudaStream_t)stream, set, x, n_tok, scratch, scratch_bytes);
}

extern "C" int spc_matmul_tc_swiglu(void *stream, const sp_weight *wg, const sp_weight *wu,
                                    const float *x, int64_t n_tok, float *y, void *scratch,
                                    size_t scratch_bytes)
{
    if (n_tok < 0 || !spc_tc_supported() || !spc_tc_weight_ok(wg) || !spc_tc_weight_ok(wu) ||
        wg->rows != wu->rows || wg->cols != wu->cols)
        return (int)cudaErrorInvalidValue;
    tc_set set = {};
    tc_add(set, wg, y, NULL);
    tc_add(set, wu, y, NULL);
    set.cols = wg->cols;
    set.swiglu = true;
    if (n_tok == 0)
        return 0;
    return tc_run((cudaStream_t)stream, set, x, n_tok, scratch, scratch_bytes);
}
