/* cuda_matmul.cu: y = x W^T for every weight format, the transposed product and row
 * decoding (see cuda_ops.h).
 *
 * spc_matmul: one block of SPC_SLOTS threads per R consecutive output rows (R: 4 for one
 * token and for FP4, else 2) and tile of TT tokens (grid.y); TT is 1, 2, 4 or 8, picked
 * from n_tok only to size the registers: every token's reduction order is the one of
 * cuda_ops.h whatever R, TT or the tile (spc_block_rows), so outputs are bit-identical
 * for a token alone or in any batch. Each thread keeps U chunks per row (U * R 16-byte
 * weight loads) in flight; each decoded weight group is used for every token of the
 * tile. */
#include "kernels/cuda/decode.cuh"

#include <string.h>
#include <type_traits>

#define MT_THREADS 128
#define MT_TT 8

/* Rows per block R and chunks in flight per row U (R * U = 8 loads in flight per thread;
 * 16 at one token was slower: 96-124 registers instead of 72-80).
 * One token (decode) takes 4 rows per block in every format: each x element a thread
 * loads then serves 4 rows (x traffic through L1, fp32: 2 bytes of x per byte of BF16
 * weight, limited a BF16 matrix-vector product at 2 rows). FP4 at 8 rows ran out of
 * registers (slower), so it keeps 4. */
template <int FMT, int TT = 8> struct mm_cfg {
    static constexpr bool FP4 = FMT == SP_WF_MXFP4 || FMT == SP_WF_NVFP4;
    static constexpr int R = TT == 1 ? 4 : (FP4 ? 4 : 2);
    static constexpr int U = 2 * (4 / R);
};

/* A matrix of few rows at one token (a MoE router: 32 to 256 rows, the model's whole
 * expert choice waiting on it) runs in few blocks: there each slot loads up to MM_FEW_U
 * chunks a row before the kernel waits for the kernels before it, all of a row of up to
 * 4096 BF16 columns, so that no weight round trip follows the wait. 16-bit and fp32
 * weights only (the packed formats keep their registers for the decode). */
#define MM_FEW_ROWS 512
#define MM_FEW_U 4

/* Rows per block for a launch over n_tok tokens (the token tile is 1 for one token). */
static int64_t mm_rows_per_block(sp_wformat f, int64_t n_tok)
{
    const bool fp4 = f == SP_WF_MXFP4 || f == SP_WF_NVFP4;
    return n_tok == 1 || fp4 ? 4 : 2;
}

template <int FMT, int TT, int UU = 0> /* UU: chunks in flight a row, else mm_cfg's */
__global__ void __launch_bounds__(SPC_SLOTS)
k_matmul(const sp_weight w, const float *__restrict__ x, int64_t n_tok, float *__restrict__ y,
         const float *__restrict__ bias, bool vec, bool xvec)
{
    spc_pdl_trigger();
    constexpr int R = mm_cfg<FMT, TT>::R, U = UU ? UU : mm_cfg<FMT, TT>::U;
    const int64_t r0 = (int64_t)blockIdx.x * R;
    if (r0 >= w.rows)
        return;
    const int nr = (int)(w.rows - r0 < R ? w.rows - r0 : R);
    const int64_t t0 = (int64_t)blockIdx.y * TT;
    const int nt = (int)(n_tok - t0 < TT ? n_tok - t0 : TT);
    float acc[TT * R];
    spc_block_rows<FMT, TT, R, U>(w, w, r0, nr, x + t0 * w.cols, w.cols, nt, vec, xvec, acc);
    spc_block_store<TT, R>(acc, r0, nr, t0, nt, y, w.rows, bias);
}

static bool fmt_ok(sp_wformat f)
{
    return f == SP_WF_F32 || f == SP_WF_BF16 || f == SP_WF_F16 || f == SP_WF_MXFP4 ||
           f == SP_WF_NVFP4 || f == SP_WF_FP8_BLOCK;
}

/* Calls f(std::integral_constant<int, T>) with the token tile T = tt (1, 2, 4, else 8): the
 * one switch from a runtime tile to a kernel instance, for every launcher below. */
template <typename F> static void mm_by_tile(int tt, F f)
{
    switch (tt) {
    case 1: f(std::integral_constant<int, 1>()); break;
    case 2: f(std::integral_constant<int, 2>()); break;
    case 4: f(std::integral_constant<int, 4>()); break;
    default: f(std::integral_constant<int, 8>()); break;
    }
}

template <int FMT>
static void mm_launch(cudaStream_t s, const sp_weight &w, const float *x, int64_t n_tok, float *y,
                      const float *bias, bool vec, bool xvec, int tt)
{
    const int64_t rows_per_block = mm_rows_per_block(w.format, n_tok);
    dim3 grid((unsigned)((w.rows + rows_per_block - 1) / rows_per_block),
              (unsigned)((n_tok + tt - 1) / tt));
    constexpr bool wide = FMT == SP_WF_F32 || FMT == SP_WF_BF16 || FMT == SP_WF_F16;
    if (wide && tt == 1 && w.rows <= MM_FEW_ROWS) {
        spc_launch(k_matmul<FMT, 1, MM_FEW_U>, grid, dim3(SPC_SLOTS), s, true, w, x, n_tok, y,
                   bias, vec, xvec);
        return;
    }
    mm_by_tile(tt, [&](auto T) {
        spc_launch(k_matmul<FMT, T.value>, grid, dim3(SPC_SLOTS), s, true, w, x, n_tok, y, bias,
                   vec, xvec);
    });
}

/* The token tile: 1, 2, 4 or 8 by n_tok (registers only; never a token's arithmetic). */
static int mm_token_tile(int64_t n_tok)
{
    return n_tok == 1 ? 1 : n_tok == 2 ? 2 : n_tok <= 4 ? 4 : 8;
}

extern "C" int spc_matmul(void *stream, const sp_weight *w, const float *x, int64_t n_tok, float *y,
                          const float *bias)
{
    if (!w || !fmt_ok(w->format) || n_tok < 0 || w->rows < 0 || w->cols < 0)
        return (int)cudaErrorInvalidValue;
    if (n_tok == 0 || w->rows == 0)
        return 0;
    const int tt = mm_token_tile(n_tok);
    if ((n_tok + tt - 1) / tt > 65535)
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    const bool vec = spc_weight_vec_ok(w);
    const bool xvec = ((uintptr_t)x % 16) == 0 && (w->cols % 4) == 0;
    const sp_weight wv = *w;
    switch (w->format) {
    case SP_WF_F32: mm_launch<SP_WF_F32>(s, wv, x, n_tok, y, bias, vec, xvec, tt); break;
    case SP_WF_BF16: mm_launch<SP_WF_BF16>(s, wv, x, n_tok, y, bias, vec, xvec, tt); break;
    case SP_WF_F16: mm_launch<SP_WF_F16>(s, wv, x, n_tok, y, bias, vec, xvec, tt); break;
    case SP_WF_MXFP4: mm_launch<SP_WF_MXFP4>(s, wv, x, n_tok, y, bias, vec, xvec, tt); break;
    case SP_WF_NVFP4: mm_launch<SP_WF_NVFP4>(s, wv, x, n_tok, y, bias, vec, xvec, tt); break;
    default: mm_launch<SP_WF_FP8_BLOCK>(s, wv, x, n_tok, y, bias, vec, xvec, tt); break;
    }
    return spc_launch_status();
}

/* ---- fused launches: several matrices of one x, gate/up + SwiGLU ------------------- */

struct mm_multi {
    sp_weight w[SPC_MULTI_MAX];
    float *y[SPC_MULTI_MAX];
    const float *b[SPC_MULTI_MAX];
    unsigned blk0[SPC_MULTI_MAX + 1]; /* first block of each matrix; blk0[n] = total */
    int n;
};

template <int FMT, int TT>
__global__ void __launch_bounds__(SPC_SLOTS)
k_matmul_multi(const mm_multi g, const float *__restrict__ x, int64_t n_tok, bool xvec)
{
    spc_pdl_trigger();
    constexpr int R = mm_cfg<FMT, TT>::R, U = mm_cfg<FMT, TT>::U;
    int i = 0;
    while (i + 1 < g.n && blockIdx.x >= g.blk0[i + 1])
        i++;
    const sp_weight &w = g.w[i];
    const int64_t r0 = (int64_t)(blockIdx.x - g.blk0[i]) * R;
    if (r0 >= w.rows)
        return;
    const int nr = (int)(w.rows - r0 < R ? w.rows - r0 : R);
    const int64_t t0 = (int64_t)blockIdx.y * TT;
    const int nt = (int)(n_tok - t0 < TT ? n_tok - t0 : TT);
    float acc[TT * R];
    spc_block_rows<FMT, TT, R, U>(w, w, r0, nr, x + t0 * w.cols, w.cols, nt,
                                  spc_weight_vec_ok_dev(w), xvec, acc);
    spc_block_store<TT, R>(acc, r0, nr, t0, nt, g.y[i], w.rows, g.b[i]);
}

template <int FMT, int TT>
__global__ void __launch_bounds__(SPC_SLOTS)
k_matmul_swiglu(const sp_weight wg, const sp_weight wu, const float *__restrict__ x, int64_t n_tok,
                float *__restrict__ y, bool vec, bool xvec)
{
    spc_pdl_trigger();
    /* RG rows of gate and the same RG rows of up in one block_rows call (2 RG rows) */
    constexpr int R2 = mm_cfg<FMT, TT>::R, RG = R2 / 2, U = mm_cfg<FMT, TT>::U;
    const int64_t r0 = (int64_t)blockIdx.x * RG;
    if (r0 >= wg.rows)
        return;
    const int nr = (int)(wg.rows - r0 < RG ? wg.rows - r0 : RG);
    const int64_t t0 = (int64_t)blockIdx.y * TT;
    const int nt = (int)(n_tok - t0 < TT ? n_tok - t0 : TT);
    float a[TT * R2], h[TT * RG];
    spc_block_rows<FMT, TT, R2, U, RG>(wg, wu, r0, nr, x + t0 * wg.cols, wg.cols, nt, vec, xvec, a);
#pragma unroll
    for (int t = 0; t < TT; t++)
#pragma unroll
        for (int rr = 0; rr < RG; rr++)
            h[t * RG + rr] = __fmul_rn(spc_silu(a[t * R2 + rr]), a[t * R2 + RG + rr]);
    spc_block_store<TT, RG>(h, r0, nr, t0, nt, y, wg.rows, NULL);
}

/* formats with fused kernels (others run unfused, with the same bits) */
static bool fused_fmt(sp_wformat f)
{
    return f == SP_WF_BF16 || f == SP_WF_MXFP4 || f == SP_WF_NVFP4 || f == SP_WF_FP8_BLOCK;
}

/* Calls fn(std::integral_constant<int, FMT>) for a fused_fmt format f: the one switch from
 * a runtime format to a fused kernel's instance. */
template <typename F> static void mm_by_fused_fmt(sp_wformat f, F fn)
{
    switch (f) {
    case SP_WF_BF16: fn(std::integral_constant<int, SP_WF_BF16>()); break;
    case SP_WF_MXFP4: fn(std::integral_constant<int, SP_WF_MXFP4>()); break;
    case SP_WF_NVFP4: fn(std::integral_constant<int, SP_WF_NVFP4>()); break;
    default: fn(std::integral_constant<int, SP_WF_FP8_BLOCK>()); break;
    }
}

template <int FMT>
static void multi_launch(cudaStream_t s, const mm_multi &g, const float *x, int64_t n_tok, bool xvec)
{
    const int tt = mm_token_tile(n_tok);
    dim3 grid(g.blk0[g.n], (unsigned)((n_tok + tt - 1) / tt));
    mm_by_tile(tt, [&](auto T) {
        spc_launch(k_matmul_multi<FMT, T.value>, grid, dim3(SPC_SLOTS), s, true, g, x, n_tok, xvec);
    });
}

extern "C" int spc_matmul_multi(void *stream, int n, const sp_weight *const *ws, const float *x,
                                int64_t n_tok, float *const *ys, const float *const *biases)
{
    if (n < 0 || n > SPC_MULTI_MAX || n_tok < 0 || (n && (!ws || !ys)))
        return (int)cudaErrorInvalidValue;
    bool same = n > 0 && fused_fmt(ws[0]->format);
    for (int i = 0; i < n; i++) {
        if (!ws[i] || !fmt_ok(ws[i]->format) || ws[i]->rows < 0 || ws[i]->cols != ws[0]->cols)
            return (int)cudaErrorInvalidValue;
        same = same && ws[i]->format == ws[0]->format;
    }
    if (n == 0 || n_tok == 0)
        return 0;
    if (!same || (n_tok + 7) / 8 > 65535) {
        for (int i = 0; i < n; i++) {
            int rc = spc_matmul(stream, ws[i], x, n_tok, ys[i], biases ? biases[i] : NULL);
            if (rc)
                return rc;
        }
        return 0;
    }
    mm_multi g;
    memset(&g, 0, sizeof g);
    g.n = n;
    const int64_t rpb = mm_rows_per_block(ws[0]->format, n_tok);
    g.blk0[0] = 0;
    for (int i = 0; i < n; i++) {
        g.w[i] = *ws[i];
        g.y[i] = ys[i];
        g.b[i] = biases ? biases[i] : NULL;
        int64_t nb = (ws[i]->rows + rpb - 1) / rpb;
        if ((int64_t)g.blk0[i] + nb > 0x7fffffff)
            return (int)cudaErrorInvalidValue;
        g.blk0[i + 1] = g.blk0[i] + (unsigned)nb;
    }
    for (int i = n + 1; i <= SPC_MULTI_MAX; i++)
        g.blk0[i] = g.blk0[n];
    if (g.blk0[n] == 0)
        return 0;
    cudaStream_t s = (cudaStream_t)stream;
    const bool xvec = ((uintptr_t)x % 16) == 0 && (ws[0]->cols % 4) == 0;
    mm_by_fused_fmt(ws[0]->format, [&](auto F) { multi_launch<F.value>(s, g, x, n_tok, xvec); });
    return spc_launch_status();
}

template <int FMT>
static void glu_launch(cudaStream_t s, const sp_weight &wg, const sp_weight &wu, const float *x,
                       int64_t n_tok, float *y, bool xvec)
{
    const int tt = mm_token_tile(n_tok);
    const int64_t rpb = mm_rows_per_block(wg.format, n_tok) / 2; /* gate + up rows share R */
    dim3 grid((unsigned)((wg.rows + rpb - 1) / rpb), (unsigned)((n_tok + tt - 1) / tt));
    const bool vec = spc_weight_vec_ok(&wg) && spc_weight_vec_ok(&wu);
    mm_by_tile(tt, [&](auto T) {
        spc_launch(k_matmul_swiglu<FMT, T.value>, grid, dim3(SPC_SLOTS), s, true, wg, wu, x,
                   n_tok, y, vec, xvec);
    });
}

extern "C" int spc_swiglu(void *stream, const float *g, const float *u, int64_t n, float *out);

extern "C" int spc_matmul_swiglu(void *stream, const sp_weight *wg, const sp_weight *wu,
                                 const float *x, int64_t n_tok, float *y)
{
    if (!wg || !wu || !fmt_ok(wg->format) || wg->format != wu->format || wg->rows != wu->rows ||
        wg->cols != wu->cols || n_tok < 0 || wg->rows < 0)
        return (int)cudaErrorInvalidValue;
    if (n_tok == 0 || wg->rows == 0)
        return 0;
    if (!fused_fmt(wg->format) || (n_tok + 7) / 8 > 65535)
        return (int)cudaErrorInvalidValue; /* callers run the unfused ops */
    cudaStream_t s = (cudaStream_t)stream;
    const bool xvec = ((uintptr_t)x % 16) == 0 && (wg->cols % 4) == 0;
    mm_by_fused_fmt(wg->format,
                    [&](auto F) { glu_launch<F.value>(s, *wg, *wu, x, n_tok, y, xvec); });
    return spc_launch_status();
}

/* ---- Q, K, V with RoPE and the cache writes in the epilogue ------------------------- */

struct mm_qkv {
    sp_weight w[3];     /* q, k, v */
    sp_weight hi[2];    /* q, k from row `half` on: the partner rows of a block's pairs */
    float *y[3];
    const float *b[3];
    unsigned blk0[4];   /* first block of each matrix; blk0[3] = total */
    int64_t hd, half;   /* head dim, half of it (every head dim rotated) */
    const float *cs;    /* [n_tok, hd]: half cos then half sin a token */
    const int32_t *pos; /* [n_tok] cache rows */
    float *kc, *vc;     /* caches, rows of w[1].rows and w[2].rows floats */
    bool vec[3], hvec[2];
};

/* Output i of the block's TT x R sums (a register pick, not a dynamic index). */
template <int N> static __device__ __forceinline__ float mm_pick(const float *acc, int i)
{
    float v = acc[0];
#pragma unroll
    for (int q = 1; q < N; q++)
        if (q == i)
            v = acc[q];
    return v;
}

/* A Q or K block computes P = R / 2 rotated pairs (r, r + half) of one head, a V block R
 * consecutive rows, each row as k_matmul_multi computes it (spc_block_rows: the order does
 * not depend on which rows share a block); the epilogue is k_rope_kv_store's for the pairs
 * (+ bias first, as spc_block_store adds it) and the cache writes. */
template <int FMT, int TT>
__global__ void __launch_bounds__(SPC_SLOTS)
k_matmul_qkv_rope(const mm_qkv g, const float *__restrict__ x, int64_t n_tok, bool xvec)
{
    spc_pdl_trigger();
    constexpr int R = mm_cfg<FMT, TT>::R, U = mm_cfg<FMT, TT>::U, P = R / 2;
    const int i = blockIdx.x < g.blk0[1] ? 0 : blockIdx.x < g.blk0[2] ? 1 : 2;
    const sp_weight &w = g.w[i];
    const int64_t b = (int64_t)(blockIdx.x - g.blk0[i]);
    const int64_t t0 = (int64_t)blockIdx.y * TT;
    const int nt = (int)(n_tok - t0 < TT ? n_tok - t0 : TT);
    const float *xt = x + t0 * w.cols;
    float acc[TT * R];
    const int j = threadIdx.x;
    if (i == 2) { /* V: the output row and the cache row */
        const int64_t r0 = b * R;
        const int nr = (int)(w.rows - r0 < R ? w.rows - r0 : R);
        spc_block_rows<FMT, TT, R, U>(w, w, r0, nr, xt, w.cols, nt, g.vec[2], xvec, acc);
        const int t = j / R, rr = j % R;
        if (j >= TT * R || t >= nt || rr >= nr)
            return;
        float v = mm_pick<TT * R>(acc, j);
        if (g.b[2])
            v = __fadd_rn(v, g.b[2][r0 + rr]);
        g.y[2][(t0 + t) * w.rows + r0 + rr] = v;
        g.vc[(int64_t)g.pos[t0 + t] * w.rows + r0 + rr] = v;
        return;
    }
    const int64_t per_head = g.half / P, c0 = (b % per_head) * P;
    const int64_t r0 = (b / per_head) * g.hd + c0;
    spc_block_rows<FMT, TT, R, U, P>(w, g.hi[i], r0, P, xt, w.cols, nt, g.vec[i] && g.hvec[i], xvec,
                                     acc);
    const int t = j / P, p = j % P;
    if (j >= TT * P || t >= nt)
        return;
    const int64_t ra = r0 + p, rb = ra + g.half, tok = t0 + t;
    float a = mm_pick<TT * R>(acc, t * R + p), bb = mm_pick<TT * R>(acc, t * R + P + p);
    if (g.b[i]) {
        a = __fadd_rn(a, g.b[i][ra]);
        bb = __fadd_rn(bb, g.b[i][rb]);
    }
    const float c = g.cs[tok * g.hd + c0 + p], s = g.cs[tok * g.hd + g.half + c0 + p];
    const float o0 = __fsub_rn(__fmul_rn(a, c), __fmul_rn(bb, s));
    const float o1 = __fadd_rn(__fmul_rn(bb, c), __fmul_rn(a, s));
    float *y = g.y[i] + tok * w.rows;
    y[ra] = o0;
    y[rb] = o1;
    if (i == 1) {
        float *kc = g.kc + (int64_t)g.pos[tok] * w.rows;
        kc[ra] = o0;
        kc[rb] = o1;
    }
}

template <int FMT>
static void qkv_launch(cudaStream_t s, const mm_qkv &g, const float *x, int64_t n_tok, bool xvec)
{
    const int tt = mm_token_tile(n_tok);
    dim3 grid(g.blk0[3], (unsigned)((n_tok + tt - 1) / tt));
    mm_by_tile(tt, [&](auto T) {
        spc_launch(k_matmul_qkv_rope<FMT, T.value>, grid, dim3(SPC_SLOTS), s, true, g, x, n_tok,
                   xvec);
    });
}

extern "C" int spc_matmul_qkv_rope(void *stream, const sp_weight *const *ws,
                                   const float *const *biases, const float *x, int64_t n_tok,
                                   float *q, float *k, float *v, int64_t head_dim,
                                   const float *cos_sin, const int32_t *pos, float *k_cache,
                                   float *v_cache)
{
    if (!ws || !ws[0] || !ws[1] || !ws[2] || n_tok < 0 || head_dim < 2 || (head_dim & 1))
        return (int)cudaErrorInvalidValue;
    const sp_wformat f = ws[0]->format;
    const int64_t rpb = mm_rows_per_block(f, n_tok), P = rpb / 2;
    for (int i = 0; i < 3; i++)
        if (ws[i]->format != f || ws[i]->cols != ws[0]->cols || ws[i]->rows <= 0)
            return SPC_NOT_SUPPORTED;
    if (!fused_fmt(f) || n_tok > 65535 || (head_dim / 2) % P || ws[0]->rows % head_dim ||
        ws[1]->rows % head_dim)
        return SPC_NOT_SUPPORTED;
    if (n_tok == 0)
        return 0;
    mm_qkv g;
    memset(&g, 0, sizeof g);
    g.hd = head_dim;
    g.half = head_dim / 2;
    g.cs = cos_sin;
    g.pos = pos;
    g.kc = k_cache;
    g.vc = v_cache;
    float *ys[3] = {q, k, v};
    g.blk0[0] = 0;
    for (int i = 0; i < 3; i++) {
        g.w[i] = *ws[i];
        g.y[i] = ys[i];
        g.b[i] = biases ? biases[i] : NULL;
        g.vec[i] = spc_weight_vec_ok(ws[i]);
        if (i < 2) {
            g.hi[i] = sp_weight_rows(ws[i], g.half, ws[i]->rows - g.half);
            g.hvec[i] = spc_weight_vec_ok(&g.hi[i]);
        }
        const int64_t nb = (ws[i]->rows + rpb - 1) / rpb;
        if ((int64_t)g.blk0[i] + nb > 0x7fffffff)
            return (int)cudaErrorInvalidValue;
        g.blk0[i + 1] = g.blk0[i] + (unsigned)nb;
    }
    cudaStream_t s = (cudaStream_t)stream;
    const bool xvec = ((uintptr_t)x % 16) == 0 && (ws[0]->cols % 4) == 0;
    mm_by_fused_fmt(f, [&](auto F) { qkv_launch<F.value>(s, g, x, n_tok, xvec); });
    return spc_launch_status();
}

/* ---- transposed product ------------------------------------------------------------ */

template <int FMT>
__global__ void __launch_bounds__(MT_THREADS)
k_matmul_t(const sp_weight w, int64_t row0, int64_t n_in, const float *__restrict__ x,
           int64_t x_stride, int64_t n_tok, float *__restrict__ y, int64_t y_stride,
           const float *__restrict__ bias)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    int64_t c = (int64_t)blockIdx.x * MT_THREADS + threadIdx.x;
    if (c >= w.cols)
        return;
    int64_t t0 = (int64_t)blockIdx.y * MT_TT;
    int nt = (int)(n_tok - t0 < MT_TT ? n_tok - t0 : MT_TT);
    float acc[MT_TT];
    spc_col_t<FMT, MT_TT>(w, row0, n_in, c, x + t0 * x_stride, x_stride, nt, bias ? bias[c] : 0.0f,
                          acc);
#pragma unroll
    for (int t = 0; t < MT_TT; t++)
        if (t < nt)
            y[(t0 + t) * y_stride + c] = acc[t];
}

extern "C" int spc_matmul_t(void *stream, const sp_weight *w, int64_t row0, int64_t n_in,
                            const float *x, int64_t x_stride, int64_t n_tok, float *y,
                            int64_t y_stride, const float *bias)
{
    if (!w || !fmt_ok(w->format) || n_tok < 0 || n_in < 0 || row0 < 0 || row0 + n_in > w->rows)
        return (int)cudaErrorInvalidValue;
    if (n_tok == 0 || w->cols == 0)
        return 0;
    int64_t ty = (n_tok + MT_TT - 1) / MT_TT;
    if (ty > 65535)
        return (int)cudaErrorInvalidValue;
    dim3 grid((unsigned)((w->cols + MT_THREADS - 1) / MT_THREADS), (unsigned)ty);
    cudaStream_t s = (cudaStream_t)stream;
    sp_weight wv = *w;
#define MT_LAUNCH(F)                                                                           \
    spc_launch(k_matmul_t<F>, grid, dim3(MT_THREADS), s, true, wv, row0, n_in, x, x_stride, n_tok, \
               y, y_stride, bias)
    switch (w->format) {
    case SP_WF_F32: MT_LAUNCH(SP_WF_F32); break;
    case SP_WF_BF16: MT_LAUNCH(SP_WF_BF16); break;
    case SP_WF_F16: MT_LAUNCH(SP_WF_F16); break;
    case SP_WF_MXFP4: MT_LAUNCH(SP_WF_MXFP4); break;
    case SP_WF_NVFP4: MT_LAUNCH(SP_WF_NVFP4); break;
    default: MT_LAUNCH(SP_WF_FP8_BLOCK); break;
    }
#undef MT_LAUNCH
    return spc_launch_status();
}

/* ---- row decoding ------------------------------------------------------------------ */

__global__ void k_weight_rows(const sp_weight w, const int32_t *__restrict__ ids, int64_t n,
                              float *__restrict__ out)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    for (int64_t i = blockIdx.y; i < n; i += gridDim.y) {
        int64_t r = ids[i];
        bool ok = r >= 0 && r < w.rows; /* an id out of range gives a NaN row, no fault */
        for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < w.cols;
             c += (int64_t)gridDim.x * blockDim.x)
            out[i * w.cols + c] = ok ? spc_elem_any(w, r, c) : __uint_as_float(0x7fffffffu);
    }
}

extern "C" int spc_weight_rows_f32(void *stream, const sp_weight *w, const int32_t *row_ids,
                                   int64_t n, float *out)
{
    if (!w || !fmt_ok(w->format) || n < 0)
        return (int)cudaErrorInvalidValue;
    if (n == 0 || w->cols == 0)
        return 0;
    int64_t bx = (w->cols + 255) / 256;
    if (bx > 1024)
        bx = 1024;
    dim3 grid((unsigned)bx, (unsigned)(n < 65535 ? n : 65535));
    spc_launch(k_weight_rows, grid, dim3(256), (cudaStream_t)stream, true, *w, row_ids, n, out);
    return spc_launch_status();
}
