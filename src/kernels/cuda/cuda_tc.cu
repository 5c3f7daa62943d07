/* cuda_tc.cu: the fast-precision products of BF16 weights on tensor cores (see
 * cuda_ops.h, "fast precision"): y = bf16(x) W^T with mma.sync m16n8k16 (BF16 inputs,
 * fp32 accumulation), one arithmetic for every number of tokens.
 *
 * Two schedules compute the same mma sequence for every output element:
 * - k_tc_rows (up to 16 tokens: decode, verify): a block of 8 warps owns 16 rows (and,
 *   for SwiGLU, the same 16 rows of up) and 8 or 16 tokens, with x as bf16 in shared
 *   memory; each warp computes whole 128-column slices (which warp takes which slice is a
 *   schedule, not arithmetic), the block folds the slice sums in ascending order.
 * - k_tc_gemm (prefill): 64 or 128 rows x 64 or 128 tokens a block (the largest tile that
 *   still gives every SM a block), warps of 32 or 64 rows x 32 tokens, a three-stage
 *   pipeline (weights by cp.async; x through registers, stored as bf16 after the step
 *   that issued its loads); each thread keeps the running slice and the folded total in
 *   registers.
 *
 * Operand fragments: a thread (g = lane / 4, q = lane % 4) of a 16 x 8 tile reads, for a
 * 32-column step at k0, the 8 consecutive elements k0 + 8q .. k0 + 8q + 7 of W rows g and
 * g + 8 and of token g's x (one 16-byte load each, no ldmatrix); elements 0-3 feed the
 * step's first mma, 4-7 its second, in the register order of tc_mma2. Both schedules
 * use this mapping, so the tensor core sees the same operands in the same places. */
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/cuda_moe_tc.cuh"
#include "kernels/cuda/decode.cuh"
#include "kernels/cuda/tc_mma.cuh"

#define TC_BK 32                     /* columns a step: two k16 mma */
#define TC_KS 128                    /* columns a slice: one mma chain */
#define TC_SLICE (TC_KS / TC_BK)     /* steps a slice */
#define TC_WARPS_ROWS 8              /* warps of k_tc_rows */
#define TC_ROUND_FLOATS 8192         /* k_tc_rows' slice sums a round (32 KB) */
#define TC_XS_MAX (96 * 1024)        /* k_tc_rows' bf16 x in shared memory, at most */
#define TC_STAGES 3                  /* k_tc_gemm pipeline depth */

/* ---- the step: two mma on one thread's 8 elements --------------------------------- */

/* c += one step: lo / hi are rows g and g + 8 (8 bf16 each), b token g's 8 bf16 as
 * pairs. mma 1 takes pairs 0 (k 2q) and 1 (k 2q + 8), mma 2 pairs 2 and 3. */
static __device__ __forceinline__ void tc_mma2(float c[4], const uint4 &lo, const uint4 &hi,
                                               const uint32_t b[4])
{
    tc_mma(c, lo.x, hi.x, lo.y, hi.y, b[0], b[1]);
    tc_mma(c, lo.z, hi.z, lo.w, hi.w, b[2], b[3]);
}

static __device__ __forceinline__ void tc_pack8(const float4 &u, const float4 &v, uint32_t b[4])
{
    b[0] = tc_pack(u.x, u.y);
    b[1] = tc_pack(u.z, u.w);
    b[2] = tc_pack(v.x, v.y);
    b[3] = tc_pack(v.z, v.w);
}

/* ---- the matrices of one launch ----------------------------------------------------- */

struct tc_set {
    const unsigned char *w[SPC_MULTI_MAX];
    size_t ld[SPC_MULTI_MAX]; /* bytes between rows */
    int64_t rows[SPC_MULTI_MAX];
    float *y[SPC_MULTI_MAX];
    const float *b[SPC_MULTI_MAX];
    unsigned grp0[SPC_MULTI_MAX + 1]; /* first 16-row group (rows kernel) of each matrix */
    int n;
    int64_t cols;
    bool swiglu; /* w[0] gate, w[1] up: y[0] = silu(gate) * up */
};

/* ---- few tokens: k_tc_rows ---------------------------------------------------------- */

/* 8 elements of x row tok at column k (zeros past the row's tokens or columns) */
static __device__ __forceinline__ void tc_load_x(const float *x, int64_t cols, bool xvec,
                                                 bool ok, int64_t tok, int64_t k, uint32_t b[4])
{
    float4 u = make_float4(0.f, 0.f, 0.f, 0.f), v = u;
    if (ok) {
        const float *p = x + tok * cols + k;
        if (xvec) {
            u = __ldg(reinterpret_cast<const float4 *>(p));
            v = __ldg(reinterpret_cast<const float4 *>(p) + 1);
        } else {
            u = make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
            v = make_float4(__ldg(p + 4), __ldg(p + 5), __ldg(p + 6), __ldg(p + 7));
        }
    }
    tc_pack8(u, v, b);
}

static __device__ __forceinline__ uint4 tc_load_w(const unsigned char *row, bool ok, int64_t k)
{
    if (!ok)
        return make_uint4(0, 0, 0, 0);
    return __ldg(reinterpret_cast<const uint4 *>(row + k * 2));
}

/* A warp's weights for one slice: rows g and g + 8 of a 16-row group, every step. */
struct tc_slice_w {
    uint4 lo[TC_SLICE], hi[TC_SLICE];
};

/* Issues the loads of slice s of rows r0 .. r0 + 15 (zeros past rows or cols). */
static __device__ __forceinline__ void tc_load_slice(const unsigned char *w, size_t ld,
                                                     int64_t rows, int64_t r0, int64_t cols,
                                                     int s, tc_slice_w &f)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const bool ok_lo = r0 + g < rows, ok_hi = r0 + g + 8 < rows;
    const unsigned char *p_lo = w + (size_t)(ok_lo ? r0 + g : 0) * ld;
    const unsigned char *p_hi = w + (size_t)(ok_hi ? r0 + g + 8 : 0) * ld;
#pragma unroll
    for (int u = 0; u < TC_SLICE; u++) {
        const int64_t k = ((int64_t)s * TC_SLICE + u) * TC_BK + 8 * q;
        f.lo[u] = tc_load_w(p_lo, k < cols && ok_lo, k);
        f.hi[u] = tc_load_w(p_hi, k < cols && ok_hi, k);
    }
}

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

template <bool XS>
static __device__ __forceinline__ void tc_x_frag(const tc_x_src &src, int tt, int64_t k,
                                                 uint32_t b[4])
{
    if (XS) {
        if (tt < src.rows && k < src.cols) {
            const uint4 v = *reinterpret_cast<const uint4 *>(src.xs + tt * src.pitch + k * 2);
            b[0] = v.x, b[1] = v.y, b[2] = v.z, b[3] = v.w;
        } else {
            b[0] = b[1] = b[2] = b[3] = 0u;
        }
    } else {
        const int64_t tok = src.t0 + tt;
        tc_load_x(src.x, src.cols, src.xvec, tok < src.n_tok && k < src.cols, tok, k, b);
    }
}

/* The chain of slice s over the loaded weights and NT token tiles of x. */
template <int NT, bool XS>
static __device__ __forceinline__ void tc_mma_slice(const tc_slice_w &f, const tc_x_src &src,
                                                    int s, float c[NT][4])
{
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int64_t steps = (src.cols + TC_BK - 1) / TC_BK;
#pragma unroll
    for (int j = 0; j < NT; j++)
        c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.0f;
#pragma unroll
    for (int u = 0; u < TC_SLICE; u++) {
        const int64_t st = (int64_t)s * TC_SLICE + u;
        if (st < steps) {
#pragma unroll
            for (int j = 0; j < NT; j++) {
                uint32_t b[4];
                tc_x_frag<XS>(src, j * 8 + g, st * TC_BK + 8 * q, b);
                tc_mma2(c[j], f.lo[u], f.hi[u], b);
            }
        }
    }
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

/* Loads item `it` (job it / S: the matrix, or SwiGLU's gate / up; slice it % S) of row
 * group r0 into f when it < end. */
static __device__ __forceinline__ void tc_load_item(const tc_set &set, int m, int64_t r0, int S,
                                                    int it, int end, tc_slice_w &f)
{
    if (it >= end)
        return;
    const int mm = set.swiglu ? it / S : m;
    tc_load_slice(set.w[mm], set.ld[mm], set.rows[mm], r0, set.cols, it % S, f);
}

/* The chain of slice s into the item's shared-memory slot (register r of lane l at
 * slot[j][r][l]). */
template <int NT, bool XS>
static __device__ __forceinline__ void tc_item_slice(const tc_slice_w &f, const tc_x_src &src,
                                                     int s, float (*slot)[4][32])
{
    float c[NT][4];
    tc_mma_slice<NT, XS>(f, src, s, c);
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int r = 0; r < 4; r++)
            slot[j][r][lane] = c[j][r];
}

/* grid (16-row groups of all matrices, token tiles of 8 NT), TC_WARPS_ROWS warps; dynamic
 * shared memory: XS, the tile's tokens of x as bf16 (rows of xs_pitch bytes). Items are
 * (job, slice) pairs, job 0 the matrix (SwiGLU: 0 gate, 1 up), in rounds of up to
 * TC_ROUND_FLOATS / (128 NT) items (one round for K up to 16384 at NT 1); warp w computes
 * items w, w + W, ... of a round into shared memory, then the block folds the round's
 * items in ascending order (the fold's element mapping is below). */
template <int NT, bool XS>
__global__ void __launch_bounds__(TC_WARPS_ROWS * 32, 2)
k_tc_rows(const tc_set set, const float *__restrict__ x, int64_t n_tok, bool xvec, int xs_pitch)
{
    extern __shared__ __align__(16) unsigned char tc_xs[];
    spc_pdl_trigger();
    constexpr int W = TC_WARPS_ROWS, ROUND = TC_ROUND_FLOATS / (128 * NT);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, e = threadIdx.x;
    int m = 0;
    while (m + 1 < set.n && blockIdx.x >= set.grp0[m + 1])
        m++;
    const int64_t r0 = (int64_t)(blockIdx.x - set.grp0[m]) * 16;
    const int64_t t0 = (int64_t)blockIdx.y * 8 * NT;
    const int64_t cols = set.cols;
    const int S = (int)((cols + TC_KS - 1) / TC_KS);
    const int items = (set.swiglu ? 2 : 1) * S;
    const int64_t left = n_tok - t0;
    const tc_x_src src = {x, cols, n_tok, t0, xvec, tc_xs, xs_pitch,
                          (int)(left < 8 * NT ? left : 8 * NT)};
    __shared__ float part[ROUND][NT][4][32];
    /* the fold: thread e owns elements e, e + 32 W, ... < 128 NT (element el: token tile
     * el / 128, fragment register (el / 32) % 4 of lane el % 32) */
    constexpr int PER = (128 * NT + 32 * W - 1) / (32 * W);
    float total[PER][2];
#pragma unroll
    for (int i = 0; i < PER; i++)
        total[i][0] = total[i][1] = 0.0f;
    /* the first item's weights are on their way before x is read (x may still be being
     * written by the previous kernel until spc_pdl_wait) */
    tc_slice_w f, fn;
    tc_load_item(set, m, r0, S, warp, items, f);
    spc_pdl_wait();
    if (XS) {
        tc_stage_x(src, tc_xs);
        __syncthreads();
    }
    for (int round = 0; round < items; round += ROUND) {
        const int n_in = items - round < ROUND ? items - round : ROUND;
        if (round)
            tc_load_item(set, m, r0, S, round + warp, items, f);
        for (int k = warp; k < n_in; k += W) { /* the next item's loads fly during this one */
            if (k + W < n_in)
                tc_load_item(set, m, r0, S, round + k + W, items, fn);
            tc_item_slice<NT, XS>(f, src, (round + k) % S, part[k]);
            f = fn;
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
            v = __fadd_rn(v, set.b[m][row]);
        set.y[m][tok * set.rows[m] + row] = v;
    }
}

/* ---- many tokens: k_tc_gemm --------------------------------------------------------- */

/* A k_tc_gemm shape: MI m-tiles (16 rows) a warp, 2 x WM warps (2 along rows, WM along
 * tokens), each warp 32 tokens (4 n-tiles). A block: 32 MI weight rows (SwiGLU: 16 MI
 * outputs, each warp's first MI / 2 m-tiles gate rows and the last MI / 2 the same rows
 * of up), 32 WM tokens. */
template <int MI, int WM> struct tc_gemm_cfg {
    static constexpr int THREADS = 64 * WM;
    static constexpr int BN = 32 * MI;                 /* weight rows a block */
    static constexpr int BM = 32 * WM;                 /* tokens a block */
    static constexpr int A_BYTES = BN * TC_BK * 2;
    static constexpr int X_BYTES = BM * TC_BK * 2; /* x as bf16: a fragment's rows 64 B apart */
    static constexpr int X_PER = BM * (TC_BK / 8) / THREADS; /* 8-column chunks a thread stages */
    static constexpr int SMEM = TC_STAGES * (A_BYTES + X_BYTES);
};

/* The weight row behind row rho of a block's A tile: plain, row r0 + rho of matrix m;
 * SwiGLU, warp row wn = rho / (16 MI) holds 8 MI gate rows then the same up rows, of
 * output rows r0 + 8 MI wn .. (r0 = 16 MI x the block). */
template <int MI>
static __device__ __forceinline__ const unsigned char *tc_a_row(const tc_set &set, int m,
                                                                int64_t r0, int rho, bool &ok)
{
    int mm = m;
    int64_t r = r0 + rho;
    if (set.swiglu) {
        const int wn = rho / (16 * MI), in = rho % (16 * MI), half = 8 * MI;
        mm = in < half ? 0 : 1;
        r = r0 + half * wn + (in % half);
    }
    ok = r < set.rows[mm];
    return set.w[mm] + (size_t)(ok ? r : 0) * set.ld[mm];
}

/* Step kt's weight tile into a_s (cp.async). */
template <int MI, int WM>
static __device__ __forceinline__ void tc_gemm_load_a(const tc_set &set, int m, int64_t r0,
                                                      int64_t kt, unsigned char *a_s)
{
    using C = tc_gemm_cfg<MI, WM>;
    const int64_t cols = set.cols, k0 = kt * TC_BK;
    for (int i = threadIdx.x; i < C::BN * 4; i += C::THREADS) {
        const int rho = i >> 2, ch = i & 3;
        bool ok;
        const unsigned char *row = tc_a_row<MI>(set, m, r0, rho, ok);
        const int64_t k = k0 + 8 * ch;
        ok = ok && k < cols;
        spc_cp16_or_zero(a_s + rho * (TC_BK * 2) + ch * 16, ok ? row + k * 2 : set.w[0], ok);
    }
}

/* Step kt's x tile, fp32 from global into registers: chunk c of this thread is token
 * (threadIdx.x + THREADS c) / 4, columns 8 x its remainder (zeros past the tokens or
 * columns). Issued before a step's mma, stored after them (tc_gemm_store_x). */
template <int MI, int WM>
static __device__ __forceinline__ void tc_gemm_fetch_x(const float *x, int64_t cols, int64_t n_tok,
                                                       int64_t t0, int64_t kt, float4 r[][2])
{
    using C = tc_gemm_cfg<MI, WM>;
#pragma unroll
    for (int c = 0; c < C::X_PER; c++) {
        const int i = threadIdx.x + C::THREADS * c, t = i >> 2, ch = i & 3;
        const int64_t tok = t0 + t, k = kt * TC_BK + 8 * ch;
        r[c][0] = r[c][1] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (tok < n_tok && k < cols) {
            const float4 *p = reinterpret_cast<const float4 *>(x + tok * cols + k);
            r[c][0] = __ldg(p);
            r[c][1] = __ldg(p + 1);
        }
    }
}

/* The fetched chunks as BF16 into a stage's x tile (tc_pack8: the values tc_x_frag gives),
 * token rows of 64 bytes: a fragment read (8 lanes, rows g and g + 1) is conflict-free. */
template <int MI, int WM>
static __device__ __forceinline__ void tc_gemm_store_x(const float4 r[][2], unsigned char *x_s)
{
    using C = tc_gemm_cfg<MI, WM>;
#pragma unroll
    for (int c = 0; c < C::X_PER; c++) {
        const int i = threadIdx.x + C::THREADS * c;
        uint32_t b[4];
        tc_pack8(r[c][0], r[c][1], b);
        *reinterpret_cast<uint4 *>(x_s + (i >> 2) * (TC_BK * 2) + (i & 3) * 16) =
            make_uint4(b[0], b[1], b[2], b[3]);
    }
}

/* grid (row blocks of every matrix (tc_set.grp0), token blocks), tc_gemm_cfg threads and
 * dynamic shared memory. Warp (wn = warp % 2, wm = warp / 2) computes tile rows
 * 16 MI wn .. (m-tiles i < MI) and tokens 32 wm .. + 31 (n-tiles j < 4). */
template <int MI, int WM>
__global__ void __launch_bounds__(64 * WM)
k_tc_gemm(const tc_set set, const float *__restrict__ x, int64_t n_tok)
{
    using C = tc_gemm_cfg<MI, WM>;
    extern __shared__ __align__(16) unsigned char tc_smem[];
    unsigned char *a_s = tc_smem, *x_s = tc_smem + TC_STAGES * C::A_BYTES;
    spc_pdl_trigger();
    spc_pdl_wait();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int wn = warp & 1, wm = warp >> 1;
    int m = 0; /* the matrix: grp0 counts row blocks here */
    while (m + 1 < set.n && blockIdx.x >= set.grp0[m + 1])
        m++;
    const int64_t r0 = (int64_t)(blockIdx.x - set.grp0[m]) * (set.swiglu ? C::BN / 2 : C::BN);
    const int64_t t0 = (int64_t)blockIdx.y * C::BM;
    const int64_t steps = (set.cols + TC_BK - 1) / TC_BK;
    float acc[MI][4][4], tot[MI][4][4];
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                acc[i][j][r] = tot[i][j][r] = 0.0f;
    float4 xr[C::X_PER][2];
#pragma unroll
    for (int s = 0; s < TC_STAGES - 1; s++) {
        if (s < steps) {
            tc_gemm_load_a<MI, WM>(set, m, r0, s, a_s + s * C::A_BYTES);
            tc_gemm_fetch_x<MI, WM>(x, set.cols, n_tok, t0, s, xr);
            tc_gemm_store_x<MI, WM>(xr, x_s + s * C::X_BYTES);
        }
        spc_cp_commit();
    }
    for (int64_t kt = 0; kt < steps; kt++) {
        spc_cp_wait<TC_STAGES - 2>();
        __syncthreads();
        const int64_t nk = kt + TC_STAGES - 1;
        if (nk < steps) {
            tc_gemm_load_a<MI, WM>(set, m, r0, nk, a_s + (nk % TC_STAGES) * C::A_BYTES);
            tc_gemm_fetch_x<MI, WM>(x, set.cols, n_tok, t0, nk, xr); /* stored after this step */
        }
        spc_cp_commit();
        const int st = (int)(kt % TC_STAGES);
        const unsigned char *a = a_s + st * C::A_BYTES;
        const unsigned char *xs = x_s + st * C::X_BYTES;
        uint4 lo[MI], hi[MI];
        uint32_t b[4][4];
#pragma unroll
        for (int i = 0; i < MI; i++) {
            const int rho = 16 * MI * wn + 16 * i + g;
            lo[i] = *reinterpret_cast<const uint4 *>(a + rho * (TC_BK * 2) + 16 * q);
            hi[i] = *reinterpret_cast<const uint4 *>(a + (rho + 8) * (TC_BK * 2) + 16 * q);
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int tok = 32 * wm + 8 * j + g;
            const uint4 v = *reinterpret_cast<const uint4 *>(xs + tok * (TC_BK * 2) + 16 * q);
            b[j][0] = v.x, b[j][1] = v.y, b[j][2] = v.z, b[j][3] = v.w;
        }
#pragma unroll
        for (int i = 0; i < MI; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
                tc_mma2(acc[i][j], lo[i], hi[i], b[j]);
        if ((kt + 1) % TC_SLICE == 0 || kt + 1 == steps) { /* a slice ends: fold it */
#pragma unroll
            for (int i = 0; i < MI; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int r = 0; r < 4; r++) {
                        tot[i][j][r] = __fadd_rn(tot[i][j][r], acc[i][j][r]);
                        acc[i][j][r] = 0.0f;
                    }
        }
        if (nk < steps) /* stage nk % TC_STAGES was last read in step kt - 1: all are past it */
            tc_gemm_store_x<MI, WM>(xr, x_s + (nk % TC_STAGES) * C::X_BYTES);
    }
    spc_cp_wait<0>();
    /* outputs: register r of tile (i, j) is row 16 i + g (+ 8 when r >= 2) of the warp's
     * rows, token 8 j + 2 q + (r & 1) of its tokens */
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int64_t tok = t0 + 32 * wm + 8 * j + 2 * q + (r & 1);
            if (tok >= n_tok)
                continue;
            if (set.swiglu) {
#pragma unroll
                for (int i = 0; i < MI / 2; i++) {
                    const int64_t row = r0 + 8 * MI * wn + 16 * i + g + (r >= 2 ? 8 : 0);
                    if (row < set.rows[0])
                        set.y[0][tok * set.rows[0] + row] =
                            __fmul_rn(spc_silu(tot[i][j][r]), tot[i + MI / 2][j][r]);
                }
            } else {
#pragma unroll
                for (int i = 0; i < MI; i++) {
                    const int64_t row = r0 + 16 * MI * wn + 16 * i + g + (r >= 2 ? 8 : 0);
                    if (row < set.rows[m]) {
                        const float v = tot[i][j][r];
                        set.y[m][tok * set.rows[m] + row] =
                            set.b[m] ? __fadd_rn(v, set.b[m][row]) : v;
                    }
                }
            }
        }
}

/* ---- launches ------------------------------------------------------------------------ */

static int g_tc_sms[64]; /* SMs of each device (spc_tc_supported) */

/* Tokens up to which the rows kernel runs (both give the same bits; this is speed). */
#define TC_ROWS_MAX_TOK 16

/* One k_tc_gemm launch over every matrix of the set (row blocks counted in grp0). */
template <int MI, int WM> static int tc_gemm_launch(cudaStream_t s, tc_set set, const float *x,
                                                    int64_t n_tok)
{
    using C = tc_gemm_cfg<MI, WM>;
    const int nm = set.swiglu ? 1 : set.n;
    const int64_t per = set.swiglu ? C::BN / 2 : C::BN;
    unsigned blocks = 0;
    for (int i = 0; i < nm; i++) {
        set.grp0[i] = blocks;
        blocks += (unsigned)((set.rows[i] + per - 1) / per);
    }
    set.grp0[nm] = blocks;
    if ((n_tok + C::BM - 1) / C::BM > 65535)
        return (int)cudaErrorInvalidValue;
    dim3 grid(blocks, (unsigned)((n_tok + C::BM - 1) / C::BM));
    spc_launch_smem(k_tc_gemm<MI, WM>, grid, dim3(C::THREADS), (size_t)C::SMEM, s, true, set, x, n_tok);
    return spc_launch_status();
}

/* Blocks of a k_tc_gemm shape over the set. */
static int64_t tc_gemm_blocks(const tc_set &set, int64_t bn, int64_t bm, int64_t n_tok)
{
    const int nm = set.swiglu ? 1 : set.n;
    const int64_t per = set.swiglu ? bn / 2 : bn;
    int64_t b = 0;
    for (int i = 0; i < nm; i++)
        b += (set.rows[i] + per - 1) / per;
    return b * ((n_tok + bm - 1) / bm);
}

static int tc_run(cudaStream_t s, tc_set &set, const float *x, int64_t n_tok)
{
    const bool xvec = ((uintptr_t)x % 16) == 0;
    if (n_tok > TC_ROWS_MAX_TOK && !xvec) { /* cp.async needs 16-byte x: same bits, in pieces */
        for (int64_t t = 0; t < n_tok; t += TC_ROWS_MAX_TOK) {
            tc_set part = set;
            for (int i = 0; i < set.n; i++)
                part.y[i] = set.y[i] + t * set.rows[set.swiglu ? 0 : i];
            const int64_t nt = n_tok - t < TC_ROWS_MAX_TOK ? n_tok - t : TC_ROWS_MAX_TOK;
            const int rc = tc_run(s, part, x + t * set.cols, nt);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (n_tok <= TC_ROWS_MAX_TOK) {
        unsigned groups = 0;
        const int nm = set.swiglu ? 1 : set.n;
        for (int i = 0; i < nm; i++) {
            set.grp0[i] = groups;
            groups += (unsigned)((set.rows[i] + 15) / 16);
        }
        set.grp0[nm] = groups;
        const int nt = n_tok <= 8 ? 1 : 2;
        dim3 grid(groups, (unsigned)((n_tok + 8 * nt - 1) / (8 * nt)));
        /* x as bf16 in shared memory when it fits (the same values as converting per load) */
        const int64_t steps = (set.cols + TC_BK - 1) / TC_BK;
        const int64_t xs_pitch = steps * TC_BK * 2 + 16;
        const int64_t xs_rows = n_tok < 8 * nt ? n_tok : 8 * nt;
        const int64_t xs = xs_pitch <= TC_XS_MAX ? xs_rows * xs_pitch : TC_XS_MAX + 1;
        const bool use_xs = xs <= TC_XS_MAX;
        const int pitch = use_xs ? (int)xs_pitch : 0;
        const cudaStream_t st = s;
#define TC_ROWS(NT, XS)                                                                      \
    spc_launch_smem(k_tc_rows<NT, XS>, grid, dim3(TC_WARPS_ROWS * 32), XS ? (size_t)xs : 0, st, \
                    true, set, x, n_tok, xvec, pitch)
        if (nt == 1)
            use_xs ? TC_ROWS(1, true) : TC_ROWS(1, false);
        else
            use_xs ? TC_ROWS(2, true) : TC_ROWS(2, false);
#undef TC_ROWS
        return spc_launch_status();
    }
    /* the largest tile that still gives every SM a block (all give the same bits) */
    int dev = 0;
    (void)cudaGetDevice(&dev);
    const int sms = dev >= 0 && dev < 64 && g_tc_sms[dev] > 0 ? g_tc_sms[dev] : 132;
    if (tc_gemm_blocks(set, 128, 128, n_tok) >= sms)
        return tc_gemm_launch<4, 4>(s, set, x, n_tok);
    if (tc_gemm_blocks(set, 128, 64, n_tok) >= sms)
        return tc_gemm_launch<4, 2>(s, set, x, n_tok);
    return tc_gemm_launch<2, 2>(s, set, x, n_tok);
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
        ok = ok && tc_smem_limit(k_tc_rows<1, true>, TC_XS_MAX) &&
             tc_smem_limit(k_tc_rows<2, true>, TC_XS_MAX) &&
             tc_smem_limit(k_tc_gemm<4, 4>, tc_gemm_cfg<4, 4>::SMEM) &&
             tc_smem_limit(k_tc_gemm<4, 2>, tc_gemm_cfg<4, 2>::SMEM) &&
             tc_smem_limit(k_tc_gemm<2, 2>, tc_gemm_cfg<2, 2>::SMEM) && spc_moe_tc_setup();
        g_tc_sms[dev] = sms > 0 ? sms : 132;
        g_tc_state[dev] = ok ? 1 : -1;
        (void)cudaGetLastError(); /* a refused attribute is not a launch error */
    }
    return g_tc_state[dev] == 1;
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
                             float *y, const float *bias)
{
    return spc_matmul_tc_multi(stream, 1, &w, x, n_tok, &y, &bias);
}

extern "C" int spc_matmul_tc_multi(void *stream, int n, const sp_weight *const *ws, const float *x,
                                   int64_t n_tok, float *const *ys, const float *const *biases)
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
    return tc_run((cudaStream_t)stream, set, x, n_tok);
}

extern "C" int spc_matmul_tc_swiglu(void *stream, const sp_weight *wg, const sp_weight *wu,
                                    const float *x, int64_t n_tok, float *y)
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
    return tc_run((cudaStream_t)stream, set, x, n_tok);
}
