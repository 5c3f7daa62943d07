/* cuda_tc_gemm.cu: the many-token schedule of the fast-precision BF16 products (prefill):
 * the order of cuda_ops.h, issued by a tiled tensor-core GEMM.
 *
 * 1. k_tc_x_bf16 rounds x to BF16 once into a scratch buffer (tc_pack8: the same bits the
 *    rows kernel computes per load), so both operands travel by cp.async.
 * 2. k_tc_gemm: a block owns BR weight rows x BT tokens, warps of 16 MI rows x 32 tokens;
 *    a TG_STAGES-deep cp.async pipeline of 64-column stages (two 32-column steps) of both
 *    operands, rows of 128 bytes in shared memory with their 16-byte chunks swizzled
 *    (chunk c of row r at c ^ 4 (r & 1)): a fragment load (8 lanes: rows g, g + 1 of
 *    one chunk column each) hits all 32 banks once. Fragments are double-buffered (a
 *    step's operands are read while the step before multiplies; one barrier a stage).
 *    Each thread keeps its slice sums and the folded totals in registers (two
 *    accumulator sets: a warp tile of 64 x 32 already takes 128 of the 255 registers);
 *    a slice ends every two stages.
 * Never split along K: every element's chain and fold run in one thread, in order. The
 * tile (below) is speed only: any tile gives the same bits. */
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/cuda_tc.cuh"
#include "kernels/cuda/decode.cuh"

#define TG_BK 64     /* columns a stage: two steps */
#define TG_STAGES 4  /* pipeline depth */
#define TG_ROW 128   /* bytes of a stage row in shared memory (64 bf16) */

/* ---- 1. x as bf16 ------------------------------------------------------------------- */

#define TG_X_UNROLL 4 /* chunks a thread converts per pass, loads first */

/* xb[i] = bf16(x[i]) for n8 chunks of 8 elements; a thread takes TG_X_UNROLL chunks a
 * pass, a grid stride apart. */
__global__ void k_tc_x_bf16(const float *__restrict__ x, int64_t n8, bool xvec,
                            uint4 *__restrict__ xb)
{
    spc_pdl_trigger();
    spc_pdl_wait();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i0 < n8;
         i0 += TG_X_UNROLL * stride) {
        float4 u[TG_X_UNROLL], v[TG_X_UNROLL];
#pragma unroll
        for (int k = 0; k < TG_X_UNROLL; k++)
            if (i0 + k * stride < n8)
                tc_x8(x + 8 * (i0 + k * stride), xvec, u[k], v[k]);
#pragma unroll
        for (int k = 0; k < TG_X_UNROLL; k++)
            if (i0 + k * stride < n8) {
                uint32_t b[4];
                tc_pack8(u[k], v[k], b);
                xb[i0 + k * stride] = make_uint4(b[0], b[1], b[2], b[3]);
            }
    }
}

/* ---- 2. the GEMM -------------------------------------------------------------------- */

/* A tile: WR x WT warps (WR along rows), each MI m-tiles (16 rows) x 4 n-tiles (8 tokens).
 * SwiGLU: a warp's first MI / 2 m-tiles are gate rows, the last MI / 2 the same up rows. */
template <int MI, int WR, int WT> struct tg_cfg {
    static constexpr int THREADS = 32 * WR * WT;
    static constexpr int BR = 16 * MI * WR; /* weight rows a block */
    static constexpr int BT = 32 * WT;      /* tokens a block */
    static constexpr int A_BYTES = BR * TG_ROW;
    static constexpr int X_BYTES = BT * TG_ROW;
    static constexpr int STAGE = A_BYTES + X_BYTES;
    static constexpr int SMEM = TG_STAGES * STAGE;
    static constexpr int A_PER = BR * 8 / THREADS; /* 16-byte chunks a thread copies a stage */
    static constexpr int X_PER = BT * 8 / THREADS;
    static_assert(BR * 8 % THREADS == 0 && BT * 8 % THREADS == 0 && THREADS % 16 == 0,
                  "whole chunks a thread, rows of one parity");
};

/* byte offset of chunk c (16 bytes) of row r in a stage tile */
static __device__ __forceinline__ int tg_off(int r, int c)
{
    return r * TG_ROW + ((c ^ ((r & 1) << 2)) << 4);
}

/* The weight row behind row rho of a block's A tile: plain, row r0 + rho of matrix m;
 * SwiGLU, warp row wr = rho / (16 MI) holds 8 MI gate rows then the same up rows, of
 * output rows r0 + 8 MI wr .. (r0 = BR / 2 x the block). NULL past the matrix. */
template <int MI>
static __device__ __forceinline__ const unsigned char *tg_a_row(const tc_set &set, int m,
                                                                int64_t r0, int rho)
{
    int mm = m;
    int64_t r = r0 + rho;
    if (set.swiglu) {
        const int wr = rho / (16 * MI), in = rho % (16 * MI), half = 8 * MI;
        mm = in < half ? 0 : 1;
        r = r0 + half * wr + (in % half);
    }
    return r < set.rows[mm] ? set.w[mm] + (size_t)r * set.ld[mm] : nullptr;
}

/* The weight copies of a stage: chunk i of this thread is row rho_i = (threadIdx.x +
 * THREADS i) / 8, chunk column threadIdx.x % 8 (src NULL past the rows: zeros are
 * copied). THREADS / 8 is even, so the swizzle of row rho_i is that of rho_0 and the
 * destinations are off + i THREADS / 8 rows. */
template <int PER> struct tg_a_copies {
    const unsigned char *src[PER];
    int off;
};

/* The x copies: rows t0 + t_i of xb (t_i as rho_i), the first n of them real tokens. */
struct tg_x_copies {
    const unsigned char *src; /* row t_0's chunk */
    int64_t pitch;            /* bytes between chunks i and i + 1 */
    int n, off;
};

template <int PER, int THREADS>
static __device__ __forceinline__ void tg_copy_a(const tg_a_copies<PER> &c, int64_t kt,
                                                 int64_t cols, const void *any, unsigned char *dst)
{
    const bool in = kt * TG_BK + 8 * (threadIdx.x & 7) < cols;
#pragma unroll
    for (int i = 0; i < PER; i++) {
        const bool ok = in && c.src[i] != nullptr;
        spc_cp16_or_zero(dst + c.off + i * (THREADS / 8) * TG_ROW,
                         ok ? c.src[i] + kt * (TG_BK * 2) : any, ok);
    }
}

template <int PER, int THREADS>
static __device__ __forceinline__ void tg_copy_x(const tg_x_copies &c, int64_t kt, int64_t cols,
                                                 const void *any, unsigned char *dst)
{
    const bool in = kt * TG_BK + 8 * (threadIdx.x & 7) < cols;
#pragma unroll
    for (int i = 0; i < PER; i++) {
        const bool ok = in && i < c.n;
        spc_cp16_or_zero(dst + c.off + i * (THREADS / 8) * TG_ROW,
                         ok ? c.src + i * c.pitch + kt * (TG_BK * 2) : any, ok);
    }
}

/* A warp's operands of one 32-column step: rows g and g + 8 of its MI m-tiles, token g of
 * its 4 n-tiles, 8 bf16 each (the mapping of cuda_tc.cuh). */
template <int MI> struct tg_frag {
    uint4 lo[MI], hi[MI];
    uint32_t b[4][4];
};

/* Step u (which half of the stage) of the stage at a / xs into f. */
template <int MI>
static __device__ __forceinline__ void tg_load(const unsigned char *a, const unsigned char *xs,
                                               int arow, int xrow, int u, tg_frag<MI> &f)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3, c = 4 * u + q;
#pragma unroll
    for (int i = 0; i < MI; i++) {
        f.lo[i] = *reinterpret_cast<const uint4 *>(a + tg_off(arow + 16 * i + g, c));
        f.hi[i] = *reinterpret_cast<const uint4 *>(a + tg_off(arow + 16 * i + g + 8, c));
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const uint4 v = *reinterpret_cast<const uint4 *>(xs + tg_off(xrow + 8 * j + g, c));
        f.b[j][0] = v.x, f.b[j][1] = v.y, f.b[j][2] = v.z, f.b[j][3] = v.w;
    }
}

/* The step's mma on every tile of the warp: every tile's first mma, then every tile's
 * second (each accumulator still sees tc_mma2's two in order; two dependent mma back to
 * back would stall the warp on the first's latency). FIRST: the step opens a slice, its
 * chain starts from zero (acc's old values, already folded, are not read). */
template <int MI, bool FIRST>
static __device__ __forceinline__ void tg_mma(const tg_frag<MI> &f, float acc[MI][4][4])
{
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if (FIRST)
                acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
            tc_mma(acc[i][j], f.lo[i].x, f.hi[i].x, f.lo[i].y, f.hi[i].y, f.b[j][0], f.b[j][1]);
        }
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            tc_mma(acc[i][j], f.lo[i].z, f.hi[i].z, f.lo[i].w, f.hi[i].w, f.b[j][2], f.b[j][3]);
}

/* A slice ends: tot += acc, in slice order. */
template <int MI>
static __device__ __forceinline__ void tg_fold(const float acc[MI][4][4], float tot[MI][4][4])
{
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                tot[i][j][r] = __fadd_rn(tot[i][j][r], acc[i][j][r]);
}

/* Outputs: register r of tile (i, j) is row 16 i + g (+ 8 when r >= 2) of the warp's rows
 * (wrow = 16 MI wr), token 8 j + 2 q + (r & 1) of its tokens (t0w). */
template <int MI>
static __device__ __forceinline__ void tg_store(const tc_set &set, int m, int64_t r0, int wr,
                                                int64_t t0w, int64_t n_tok, float tot[MI][4][4])
{
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int64_t tok = t0w + 8 * j + 2 * q + (r & 1);
            if (tok >= n_tok)
                continue;
            if (set.swiglu) {
#pragma unroll
                for (int i = 0; i < MI / 2; i++) {
                    const int64_t row = r0 + 8 * MI * wr + 16 * i + g + (r >= 2 ? 8 : 0);
                    if (row < set.rows[0])
                        set.y[0][tok * set.rows[0] + row] =
                            __fmul_rn(spc_silu(tot[i][j][r]), tot[i + MI / 2][j][r]);
                }
            } else {
#pragma unroll
                for (int i = 0; i < MI; i++) {
                    const int64_t row = r0 + 16 * MI * wr + 16 * i + g + (r >= 2 ? 8 : 0);
                    if (row < set.rows[m]) {
                        const float v = tot[i][j][r];
                        set.y[m][tok * set.rows[m] + row] =
                            set.b[m] ? __fadd_rn(v, set.b[m][row]) : v;
                    }
                }
            }
        }
}

/* What the main loops need: the copies, the sizes, the warp's rows and tokens in a tile. */
template <int MI, int WR, int WT> struct tg_pipe {
    tg_a_copies<tg_cfg<MI, WR, WT>::A_PER> ca;
    tg_x_copies cx;
    const void *any;
    int64_t cols, steps, nst;
    int arow, xrow;
};

/* Stage kt + TG_STAGES - 1 into its buffer (stage kt - 1's: read by every warp before the
 * last barrier), then commit (a group even when empty: the waits count groups). */
template <int MI, int WR, int WT>
static __device__ __forceinline__ void tg_next(const tg_pipe<MI, WR, WT> &p, int64_t kt)
{
    using C = tg_cfg<MI, WR, WT>;
    extern __shared__ __align__(128) unsigned char tg_smem[];
    const int64_t nk = kt + TG_STAGES - 1;
    if (nk < p.nst) {
        unsigned char *d = tg_smem + (nk % TG_STAGES) * C::STAGE;
        tg_copy_a<C::A_PER, C::THREADS>(p.ca, nk, p.cols, p.any, d);
        tg_copy_x<C::X_PER, C::THREADS>(p.cx, nk, p.cols, p.any, d);
    }
    spc_cp_commit();
}

/* The main loop, one barrier a stage, fragments double-buffered: step 2 kt + 1's operands
 * are read while step 2 kt multiplies, and stage kt + 1's first step's after the barrier,
 * while step 2 kt + 1 multiplies. */
template <int MI, int WR, int WT>
static __device__ __forceinline__ void tg_main(const tg_pipe<MI, WR, WT> &p,
                                                  float acc[MI][4][4], float tot[MI][4][4])
{
    using C = tg_cfg<MI, WR, WT>;
    extern __shared__ __align__(128) unsigned char tg_smem[];
    tg_frag<MI> f0, f1;
    spc_cp_wait<TG_STAGES - 2>();
    __syncthreads();
    tg_load<MI>(tg_smem, tg_smem + C::A_BYTES, p.arow, p.xrow, 0, f0);
    for (int64_t kt = 0; kt < p.nst; kt++) {
        tg_next<MI, WR, WT>(p, kt);
        const unsigned char *a = tg_smem + (kt % TG_STAGES) * C::STAGE;
        const bool two = 2 * kt + 1 < p.steps; /* else steps is odd and this is the last step */
        if (two)
            tg_load<MI>(a, a + C::A_BYTES, p.arow, p.xrow, 1, f1);
        if (kt & 1)
            tg_mma<MI, false>(f0, acc);
        else
            tg_mma<MI, true>(f0, acc);
        if (!two)
            tg_fold<MI>(acc, tot);
        spc_cp_wait<TG_STAGES - 2>();
        __syncthreads(); /* stage kt + 1 landed for all; nobody reads stage kt any more */
        if (kt + 1 < p.nst) {
            const unsigned char *an = tg_smem + ((kt + 1) % TG_STAGES) * C::STAGE;
            tg_load<MI>(an, an + C::A_BYTES, p.arow, p.xrow, 0, f0);
        }
        if (two) {
            tg_mma<MI, false>(f1, acc);
            if ((kt & 1) || 2 * kt + 2 == p.steps)
                tg_fold<MI>(acc, tot);
        }
    }
}

/* grid (row blocks of every matrix (tc_set.grp0), token blocks), tg_cfg threads and
 * dynamic shared memory; xb: the tokens as bf16, rows of cols. Warp (wr = warp % WR,
 * wt = warp / WR) computes tile rows 16 MI wr .. and tokens 32 wt .. 32 wt + 31. Weights
 * of the first stages are requested before spc_pdl_wait (they never depend on earlier
 * kernels), x after. */
template <int MI, int WR, int WT>
__global__ void __launch_bounds__(32 * WR * WT)
k_tc_gemm(const tc_set set, const unsigned char *__restrict__ xb, int64_t n_tok)
{
    using C = tg_cfg<MI, WR, WT>;
    extern __shared__ __align__(128) unsigned char tg_smem[];
    spc_pdl_trigger();
    const int warp = threadIdx.x >> 5, wr = warp % WR, wt = warp / WR;
    int m = 0; /* the matrix: grp0 counts row blocks here */
    while (m + 1 < set.n && blockIdx.x >= set.grp0[m + 1])
        m++;
    const int64_t r0 = (int64_t)(blockIdx.x - set.grp0[m]) * (set.swiglu ? C::BR / 2 : C::BR);
    const int64_t t0 = (int64_t)blockIdx.y * C::BT, cols = set.cols;
    const int64_t steps = (cols + TC_BK - 1) / TC_BK, nst = (steps + 1) / 2;
    tg_a_copies<C::A_PER> ca;
    const int ch = threadIdx.x & 7, rho0 = threadIdx.x >> 3;
#pragma unroll
    for (int i = 0; i < C::A_PER; i++) {
        const unsigned char *row = tg_a_row<MI>(set, m, r0, rho0 + (C::THREADS / 8) * i);
        ca.src[i] = row ? row + 16 * ch : nullptr;
    }
    ca.off = tg_off(rho0, ch);
    tg_x_copies cx;
    cx.src = xb + (size_t)(t0 + rho0) * cols * 2 + 16 * ch;
    cx.pitch = (int64_t)(C::THREADS / 8) * cols * 2;
    cx.n = (int)((n_tok - t0 - rho0 + C::THREADS / 8 - 1) / (C::THREADS / 8));
    cx.off = C::A_BYTES + tg_off(rho0, ch);
    const void *any = set.w[0];
#pragma unroll
    for (int s = 0; s < TG_STAGES - 1; s++)
        if (s < nst)
            tg_copy_a<C::A_PER, C::THREADS>(ca, s, cols, any, tg_smem + s * C::STAGE);
    spc_pdl_wait();
#pragma unroll
    for (int s = 0; s < TG_STAGES - 1; s++) {
        if (s < nst)
            tg_copy_x<C::X_PER, C::THREADS>(cx, s, cols, any, tg_smem + s * C::STAGE);
        spc_cp_commit(); /* group s: stage s's x (group 0 also every prologue weight) */
    }
    float acc[MI][4][4], tot[MI][4][4]; /* acc: set by each slice's first step */
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                tot[i][j][r] = 0.0f;
    const tg_pipe<MI, WR, WT> p = {ca, cx, any, cols, steps, nst, 16 * MI * wr, 32 * wt};
    tg_main<MI, WR, WT>(p, acc, tot);
    spc_cp_wait<0>();
    tg_store<MI>(set, m, r0, wr, t0 + 32 * wt, n_tok, tot);
}

/* ---- launches ------------------------------------------------------------------------ */

/* The tile: 64 rows x 64 tokens, 4 warps of 32 x 32 (162 registers, 64 KB of shared
 * memory: three blocks an SM). Measured on an H200 at 512 tokens against 128 x 128 (8
 * warps of 64 x 32), 128 x 64 (4 warps of 64 x 32 or 8 of 32 x 32), 64 x 128 and with
 * single-buffered fragments (docs/BENCHMARKS_GPU.md): the fastest on every llama-1b shape but
 * gate/up (4% behind 128 x 64 there). */
#define TG_MI 2
#define TG_WR 2
#define TG_WT 2
typedef tg_cfg<TG_MI, TG_WR, TG_WT> tg_tile;

static int g_tg_sms[64]; /* SMs of each device (tc_gemm_setup) */

int64_t tc_gemm_tokens(int64_t cols, const void *s, size_t bytes)
{
    if (!s || (uintptr_t)s % 16 || cols <= 0)
        return 0;
    return (int64_t)(bytes / ((size_t)((cols + TC_BK - 1) / TC_BK) * TC_BK * 2));
}

int tc_gemm_run(cudaStream_t s, tc_set &set, const float *x, int64_t n_tok, void *scratch)
{
    int dev = 0;
    (void)cudaGetDevice(&dev);
    const int sms = dev >= 0 && dev < 64 && g_tg_sms[dev] > 0 ? g_tg_sms[dev] : 132;
    if (tc_wgmma_ready())
        return tc_wgmma_run(s, set, x, n_tok, scratch, sms);
    const int64_t n8 = n_tok * set.cols / 8;
    const int64_t want = (n8 + 255) / 256;
    /* at most one block per SM: the GEMM after it may then launch early (PDL) */
    spc_launch(k_tc_x_bf16, dim3((unsigned)(want < sms ? want : sms)), dim3(256), s, true, x, n8,
               ((uintptr_t)x % 16) == 0, (uint4 *)scratch);
    int rc = spc_launch_status();
    if (rc)
        return rc;
    /* row blocks of every matrix (SwiGLU: BR / 2 outputs a block) */
    const int nm = set.swiglu ? 1 : set.n;
    const int64_t per = set.swiglu ? tg_tile::BR / 2 : tg_tile::BR;
    unsigned blocks = 0;
    for (int i = 0; i < nm; i++) {
        set.grp0[i] = blocks;
        blocks += (unsigned)((set.rows[i] + per - 1) / per);
    }
    set.grp0[nm] = blocks;
    if ((n_tok + tg_tile::BT - 1) / tg_tile::BT > 65535)
        return (int)cudaErrorInvalidValue;
    dim3 grid(blocks, (unsigned)((n_tok + tg_tile::BT - 1) / tg_tile::BT));
    spc_launch_smem(k_tc_gemm<TG_MI, TG_WR, TG_WT>, grid, dim3(tg_tile::THREADS),
                    (size_t)tg_tile::SMEM, s, true, set, (const unsigned char *)scratch, n_tok);
    return spc_launch_status();
}

bool tc_gemm_setup(int dev, int sms)
{
    if (dev >= 0 && dev < 64)
        g_tg_sms[dev] = sms > 0 ? sms : 132;
    return tc_wgmma_setup(dev) && cudaFuncSetAttribute(k_tc_gemm<TG_MI, TG_WR, TG_WT>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                tg_tile::SMEM) == cudaSuccess;
}
