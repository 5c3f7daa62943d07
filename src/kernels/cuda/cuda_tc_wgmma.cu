/* cuda_tc_wgmma.cu: the many-token schedule of the fast-precision BF16 products on
 * Hopper's warpgroup MMA (wgmma, sm_90a): the order of cuda_ops.h, the same bits as
 * k_tc_gemm and k_tc_rows (cuda_tc_gemm.cu, cuda_tc.cu), a larger share of the tensor cores.
 *
 * Why the bits are the same. The order's unit is one k16 mma of the fragment mapping in
 * cuda_tc.cuh: a 32-column step's first mma takes columns {0-3, 8-11, 16-19, 24-27}, its
 * second the other 16, and a slice chains its 8 k16 products in ascending order from zero.
 * Measured on an H200 (bench/gpu/wgmma_bits.cu, 2026-11-28; 13.6M outputs, unit and 2^+-20-wide
 * operands, chains of 8): one k16 product gives the same bits whatever k slot each of its
 * 16 (a, b) pairs occupies (the tensor core's k16 sum does not depend on the slot order),
 * and wgmma m64nNk16 with A from registers gives mma.sync m16n8k16's bits for the same
 * pairs and accumulator. So a wgmma chain over the same 16-column sets in the same order
 * equals the mma.sync chain: test_cuda_tc compares this kernel's bits with the rows
 * kernel's on every shape.
 *
 * 1. k_tc_x_slots rounds x to BF16 once (tc_pack8, as every schedule) into the scratch in
 *    slot order: per 32-column step, 16-byte chunk e holds the 4-byte pairs e of the step's
 *    four 8-column groups (chunk 0: columns 0 1 8 9 16 17 24 25, chunk 1: 2 3 10 11 ..., so
 *    chunks 0-1 are the first k16's slots 0-15 as the A fragments hold them: slot 2q, 2q+1
 *    columns 8q, 8q+1; slot 2q+8, 2q+9 columns 8q+2, 8q+3; chunks 2-3 the second's); rows
 *    padded with zeros to whole steps.
 * 2. k_tc_wgmma: a block (one warpgroup, 4 warps) owns 64 weight rows x BT tokens (64 or
 *    128); a cp.async pipeline of 64-column stages, two loading while one multiplies. The
 *    weight tile keeps cuda_tc_gemm.cu's layout and reaches the tensor cores through
 *    registers (the fragments of tc_mma2); the token tile is laid out as wgmma's K-major
 *    operand with the 128-byte swizzle (chunk c of row r at c ^ (r % 8); 1024-byte
 *    aligned) and read by the tensor cores from shared memory, one descriptor a k16 (start
 *    + 32 bytes). A warp's 16 rows are 16 output rows, or with SwiGLU 8 gate rows then the
 *    same 8 up rows, so a thread holds gate and up of the same outputs. A slice's first
 *    stage still multiplies while its second is issued; the second is waited for (and with
 *    it the first), its sums folded into the totals in registers in slice order, before the
 *    next barrier; each barrier frees the buffer of the stage two before for refilling. */
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/cuda_tc.cuh"
#include "kernels/cuda/decode.cuh"

#include <stdlib.h>
#include <string.h>

#define TW_BK 64     /* columns a stage: two steps */
#define TW_STAGES 4  /* stage buffers */
#define TW_AHEAD 2   /* stages loading ahead of the one multiplied (TW_STAGES - 2: a slice's
                        first stage may still multiply while the stage after it is read) */
#define TW_ROW 128   /* bytes of a stage row in shared memory (64 bf16) */

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TW_HAVE 1 /* this pass compiles for sm_90a: wgmma exists */
#else
#define TW_HAVE 0
#endif

/* ---- 1. x as bf16 in slot order ------------------------------------------------------ */

/* A thread converts one 32-column step of one token: 4 chunks of 8 elements in, the
 * 4 x 4 transpose of their 4-byte pairs out; columns past cols are zeros. */
__global__ void k_tc_x_slots(const float *__restrict__ x, int64_t n_tok, int64_t cols,
                             int64_t steps, bool xvec, uint4 *__restrict__ xb)
{
    spc_pdl_trigger();
    spc_pdl_wait();
    const int64_t total = n_tok * steps, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int64_t t = i / steps, k0 = (i - t * steps) * TC_BK;
        uint32_t b[4][4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float4 u = make_float4(0.f, 0.f, 0.f, 0.f), v = u;
            if (k0 + 8 * j < cols) /* cols is a multiple of 8 */
                tc_x8(x + t * cols + k0 + 8 * j, xvec, u, v);
            tc_pack8(u, v, b[j]);
        }
        uint4 *o = xb + 4 * i;
#pragma unroll
        for (int e = 0; e < 4; e++)
            o[e] = make_uint4(b[0][e], b[1][e], b[2][e], b[3][e]);
    }
}

/* ---- 2. the GEMM --------------------------------------------------------------------- */

template <int BT> struct tw_cfg {
    static constexpr int THREADS = 128; /* one warpgroup */
    static constexpr int BR = 64;       /* weight rows a block */
    static constexpr int A_BYTES = BR * TW_ROW;
    static constexpr int X_BYTES = BT * TW_ROW;
    static constexpr int STAGE = A_BYTES + X_BYTES; /* a multiple of 1024 */
    static constexpr int SMEM = TW_STAGES * STAGE + 1024; /* + room to align to 1024 */
    static constexpr int A_PER = BR * 8 / THREADS;       /* 16-byte chunks a thread a stage */
    static constexpr int X_PER = BT * 8 / THREADS;
    static constexpr int NACC = BT / 2; /* accumulators a thread */
    static_assert(BT % 16 == 0 && BT <= 256 && (BT * 8) % THREADS == 0, "wgmma n, whole copies");
};

/* weight tile: chunk c of row r (cuda_tc_gemm.cu's swizzle) */
static __device__ __forceinline__ int tw_a_off(int r, int c)
{
    return r * TW_ROW + ((c ^ ((r & 1) << 2)) << 4);
}

/* token tile: chunk c of row r, wgmma's 128-byte swizzle */
static __device__ __forceinline__ int tw_x_off(int r, int c)
{
    return r * TW_ROW + ((c ^ (r & 7)) << 4);
}

/* The weight row behind row rho of a block's tile: plain, row r0 + rho of matrix m;
 * SwiGLU, warp w = rho / 16's rows 0-7 are gate rows r0 + 8 w .., 8-15 the same up rows
 * (r0 = BR / 2 x the block). NULL past the matrix. */
static __device__ __forceinline__ const unsigned char *tw_a_row(const tc_set &set, int m,
                                                                int64_t r0, int rho)
{
    int mm = m;
    int64_t r = r0 + rho;
    if (set.swiglu) {
        mm = (rho & 15) < 8 ? 0 : 1;
        r = r0 + 8 * (rho >> 4) + (rho & 7);
    }
    return r < set.rows[mm] ? set.w[mm] + (size_t)r * set.ld[mm] : nullptr;
}

/* wgmma shared-memory descriptor: K-major, 128-byte swizzle, 8-row groups 1024 bytes apart */
static __device__ __forceinline__ uint64_t tw_desc(const unsigned char *p)
{
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a >> 4) & 0x3fff) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
           ((uint64_t)1 << 62);
}

#define TW_F8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), \
                 "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])

/* d += A B for one k16: A the warp's 16 rows (a0-a3 as mma.sync's), B BT tokens at desc */
template <int BT> struct tw_mma;
template <> struct tw_mma<64> {
    static __device__ __forceinline__ void run(float (&d)[32], uint32_t a0, uint32_t a1,
                                               uint32_t a2, uint32_t a3, uint64_t db)
    {
#if TW_HAVE
        asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,"
                     "%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
                     "{%32,%33,%34,%35}, %36, 1, 1, 1, 0;"
                     : TW_F8(0), TW_F8(8), TW_F8(16), TW_F8(24)
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db));
#else
        (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)db;
        __trap();
#endif
    }
};
template <> struct tw_mma<128> {
    static __device__ __forceinline__ void run(float (&d)[64], uint32_t a0, uint32_t a1,
                                               uint32_t a2, uint32_t a3, uint64_t db)
    {
#if TW_HAVE
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,"
                     "%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,"
                     "%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,"
                     "%56,%57,%58,%59,%60,%61,%62,%63}, "
                     "{%64,%65,%66,%67}, %68, 1, 1, 1, 0;"
                     : TW_F8(0), TW_F8(8), TW_F8(16), TW_F8(24), TW_F8(32), TW_F8(40), TW_F8(48),
                       TW_F8(56)
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db));
#else
        (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)db;
        __trap();
#endif
    }
};
#undef TW_F8

/* The thread's landed cp.async writes become visible to the tensor cores' reads of shared
 * memory (wgmma reads through the async proxy; cp.async writes through the generic one). */
static __device__ __forceinline__ void tw_fence_proxy(void)
{
#if TW_HAVE
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

static __device__ __forceinline__ void tw_fence(void)
{
#if TW_HAVE
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}

static __device__ __forceinline__ void tw_commit(void)
{
#if TW_HAVE
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}

static __device__ __forceinline__ void tw_wait_all(void)
{
#if TW_HAVE
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#endif
}

/* Reads of the accumulators stay after the wait (an empty asm that "writes" each). */
template <int N> static __device__ __forceinline__ void tw_fence_acc(float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

/* What the main loop needs: the copy sources (chunk column threadIdx.x % 8, rows
 * threadIdx.x / 8 + THREADS / 8 i), sizes and the aligned stage buffers. */
template <int BT> struct tw_pipe {
    const unsigned char *a_src[tw_cfg<BT>::A_PER];
    const unsigned char *x_src; /* row 0's chunk; rows THREADS / 8 apart by x_pitch */
    int64_t x_pitch, cols, steps, nst;
    int x_n; /* copies of real tokens */
    const void *any;
    unsigned char *smem;
};

/* Stage kt's copies into buffer kt % TW_STAGES: weights (zeros past the rows or cols)
 * when A, tokens (zeros past n_tok; the slot-order rows hold whole steps) when X. */
template <int BT, bool A, bool X>
static __device__ __forceinline__ void tw_copy(const tw_pipe<BT> &p, int64_t kt)
{
    using C = tw_cfg<BT>;
    unsigned char *d = p.smem + (kt % TW_STAGES) * C::STAGE;
    const int ch = threadIdx.x & 7, r0 = threadIdx.x >> 3;
    if (A) {
        const bool in = kt * TW_BK + 8 * ch < p.cols;
#pragma unroll
        for (int i = 0; i < C::A_PER; i++) {
            const bool ok = in && p.a_src[i] != nullptr;
            spc_cp16_or_zero(d + tw_a_off(r0 + i * (C::THREADS / 8), ch),
                             ok ? p.a_src[i] + kt * (TW_BK * 2) : p.any, ok);
        }
    }
    if (X) {
        const bool in = 2 * kt + (ch >> 2) < p.steps; /* the stage's second step may not exist */
#pragma unroll
        for (int i = 0; i < C::X_PER; i++) {
            const bool ok = in && i < p.x_n;
            spc_cp16_or_zero(d + C::A_BYTES + tw_x_off(r0 + i * (C::THREADS / 8), ch),
                             ok ? p.x_src + i * p.x_pitch + kt * (TW_BK * 2) : p.any, ok);
        }
    }
}

/* One stage's products: for each of its steps, the two k16 of tc_mma2 in order; with
 * WAIT, they are complete on return (else still running on the tensor cores). */
template <int BT>
static __device__ __forceinline__ void tw_stage(const unsigned char *a, const unsigned char *xs,
                                                int arow, bool two, bool wait, float (&acc)[BT / 2])
{
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    uint4 lo[2], hi[2];
#pragma unroll
    for (int u = 0; u < 2; u++)
        if (u == 0 || two) {
            lo[u] = *reinterpret_cast<const uint4 *>(a + tw_a_off(arow + g, 4 * u + q));
            hi[u] = *reinterpret_cast<const uint4 *>(a + tw_a_off(arow + g + 8, 4 * u + q));
        }
    tw_fence();
#pragma unroll
    for (int u = 0; u < 2; u++)
        if (u == 0 || two) {
            tw_mma<BT>::run(acc, lo[u].x, hi[u].x, lo[u].y, hi[u].y, tw_desc(xs + 64 * u));
            tw_mma<BT>::run(acc, lo[u].z, hi[u].z, lo[u].w, hi[u].w, tw_desc(xs + 64 * u + 32));
        }
    tw_commit();
    if (wait) {
        tw_wait_all();
        tw_fence_acc(acc);
    }
}

/* Outputs: accumulator 4 j + r of warp w is row 16 w + g (+ 8 when r >= 2) of the tile,
 * token 8 j + 2 q + (r & 1) of its BT. SwiGLU: rows g and g + 8 are the gate and up of
 * output r0 + 8 w + g. */
template <int BT>
static __device__ __forceinline__ void tw_store(const tc_set &set, int m, int64_t r0, int w,
                                                int64_t t0, int64_t n_tok,
                                                const float (&tot)[BT / 2])
{
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int j = 0; j < BT / 8; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int64_t tok = t0 + 8 * j + 2 * q + (r & 1);
            if (tok >= n_tok)
                continue;
            if (set.swiglu) {
                const int64_t row = r0 + 8 * w + g;
                if (r < 2 && row < set.rows[0])
                    set.y[0][tok * set.rows[0] + row] =
                        __fmul_rn(spc_silu(tot[4 * j + r]), tot[4 * j + r + 2]);
            } else {
                const int64_t row = r0 + 16 * w + g + (r >= 2 ? 8 : 0);
                if (row < set.rows[m]) {
                    const float v = tot[4 * j + r];
                    set.y[m][tok * set.rows[m] + row] = set.b[m] ? __fadd_rn(v, set.b[m][row]) : v;
                }
            }
        }
}

/* grid (row blocks of every matrix (tc_set.grp0), token blocks); xb: the tokens in slot
 * order, rows of `steps` 64-byte steps. Weights of the first stages are requested before
 * spc_pdl_wait (they never depend on earlier kernels), x after. */
template <int BT>
__global__ void __launch_bounds__(128)
k_tc_wgmma(const tc_set set, const unsigned char *__restrict__ xb, int64_t n_tok)
{
    using C = tw_cfg<BT>;
    extern __shared__ __align__(1024) unsigned char tw_smem_raw[];
    spc_pdl_trigger();
    tw_pipe<BT> p;
    {
        const uint32_t s = (uint32_t)__cvta_generic_to_shared(tw_smem_raw);
        p.smem = tw_smem_raw + ((1024 - (s & 1023)) & 1023);
    }
    const int warp = threadIdx.x >> 5;
    int m = 0; /* the matrix: grp0 counts row blocks here */
    while (m + 1 < set.n && blockIdx.x >= set.grp0[m + 1])
        m++;
    const int64_t r0 = (int64_t)(blockIdx.x - set.grp0[m]) * (set.swiglu ? C::BR / 2 : C::BR);
    const int64_t t0 = (int64_t)blockIdx.y * BT;
    p.cols = set.cols;
    p.steps = (p.cols + TC_BK - 1) / TC_BK;
    p.nst = (p.steps + 1) / 2;
    const int ch = threadIdx.x & 7, rho0 = threadIdx.x >> 3;
#pragma unroll
    for (int i = 0; i < C::A_PER; i++) {
        const unsigned char *row = tw_a_row(set, m, r0, rho0 + (C::THREADS / 8) * i);
        p.a_src[i] = row ? row + 16 * ch : nullptr;
    }
    const int64_t xrow = p.steps * (TC_BK * 2); /* bytes of a slot-order row */
    p.x_src = xb + (size_t)(t0 + rho0) * xrow + 16 * ch;
    p.x_pitch = (int64_t)(C::THREADS / 8) * xrow;
    p.x_n = (int)((n_tok - t0 - rho0 + C::THREADS / 8 - 1) / (C::THREADS / 8));
    p.any = set.w[0];
#pragma unroll
    for (int s = 0; s < TW_AHEAD; s++)
        if (s < p.nst)
            tw_copy<BT, true, false>(p, s);
    spc_pdl_wait();
#pragma unroll
    for (int s = 0; s < TW_AHEAD; s++) {
        if (s < p.nst)
            tw_copy<BT, false, true>(p, s);
        spc_cp_commit(); /* group s: stage s's x (group 0 also every prologue weight) */
    }
    float acc[C::NACC], tot[C::NACC];
#pragma unroll
    for (int i = 0; i < C::NACC; i++)
        tot[i] = 0.0f;
    for (int64_t kt = 0; kt < p.nst; kt++) {
        spc_cp_wait<TW_AHEAD - 1>();
        tw_fence_proxy();
        /* stage kt landed for all; stage kt - 2's buffer, refilled now, is free: a slice's
         * second stage is waited for before its warpgroup reaches this barrier */
        __syncthreads();
        if (kt + TW_AHEAD < p.nst)
            tw_copy<BT, true, true>(p, kt + TW_AHEAD);
        spc_cp_commit();
        if (!(kt & 1)) { /* a slice opens: its chain starts from zero */
#pragma unroll
            for (int i = 0; i < C::NACC; i++)
                acc[i] = 0.0f;
        }
        const bool end = (kt & 1) || kt + 1 == p.nst; /* the slice ends with this stage */
        const unsigned char *a = p.smem + (kt % TW_STAGES) * C::STAGE;
        tw_stage<BT>(a, a + C::A_BYTES, 16 * warp, 2 * kt + 1 < p.steps, end, acc);
        if (end) { /* tot += acc, in slice order */
#pragma unroll
            for (int i = 0; i < C::NACC; i++)
                tot[i] = __fadd_rn(tot[i], acc[i]);
        }
    }
    spc_cp_wait<0>();
    tw_store<BT>(set, m, r0, warp, t0, n_tok, tot);
}

/* Reports whether this build's code for the device has wgmma. */
__global__ void k_tc_wgmma_probe(int *out)
{
    *out = TW_HAVE;
}

/* ---- launches ------------------------------------------------------------------------ */

#define TW_MAX_DEVICES 64
static int g_tw_state[TW_MAX_DEVICES]; /* 1: wgmma GEMM ready; 0 / -1: not */
static int g_tw_force;                 /* SPECULA_CUDA_WGMMA_TILE=64 / 128: the tile, to compare */

template <int BT> static bool tw_attr(void)
{
    return cudaFuncSetAttribute(k_tc_wgmma<BT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                tw_cfg<BT>::SMEM) == cudaSuccess;
}

bool tc_wgmma_setup(int dev)
{
    if (dev < 0 || dev >= TW_MAX_DEVICES)
        return false;
    g_tw_state[dev] = -1;
    const char *e = getenv("SPECULA_CUDA_WGMMA"); /* 0: the mma.sync GEMM, to compare */
    const char *t = getenv("SPECULA_CUDA_WGMMA_TILE");
    g_tw_force = t && !strcmp(t, "64") ? 64 : t && !strcmp(t, "128") ? 128 : 0;
    int major = 0;
    if ((e && !strcmp(e, "0")) ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        major != 9)
        return true; /* not an error: the other GEMM runs */
    int *d = NULL, h = 0;
    bool ok = cudaMalloc(&d, sizeof(int)) == cudaSuccess;
    ok = ok && cudaMemset(d, 0, sizeof(int)) == cudaSuccess;
    if (ok) {
        k_tc_wgmma_probe<<<1, 1>>>(d);
        ok = cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
    }
    if (d)
        cudaFree(d);
    ok = ok && h == 1 && tw_attr<64>() && tw_attr<128>();
    (void)cudaGetLastError();
    g_tw_state[dev] = ok ? 1 : -1;
    return true;
}

bool tc_wgmma_ready(void)
{
    int dev = 0;
    return cudaGetDevice(&dev) == cudaSuccess && dev >= 0 && dev < TW_MAX_DEVICES &&
           g_tw_state[dev] == 1;
}

/* Row blocks of every matrix (SwiGLU: BR / 2 outputs a block) into set.grp0. */
static unsigned tw_row_blocks(tc_set &set)
{
    const int nm = set.swiglu ? 1 : set.n;
    const int64_t per = set.swiglu ? 64 / 2 : 64;
    unsigned blocks = 0;
    for (int i = 0; i < nm; i++) {
        set.grp0[i] = blocks;
        blocks += (unsigned)((set.rows[i] + per - 1) / per);
    }
    set.grp0[nm] = blocks;
    return blocks;
}

int tc_wgmma_run(cudaStream_t s, tc_set &set, const float *x, int64_t n_tok, void *scratch,
                 int sms)
{
    const int64_t steps = (set.cols + TC_BK - 1) / TC_BK, items = n_tok * steps;
    const int64_t want = (items + 255) / 256;
    spc_launch(k_tc_x_slots, dim3((unsigned)(want < sms ? want : sms)), dim3(256), s, true, x,
               n_tok, set.cols, steps, ((uintptr_t)x % 16) == 0, (uint4 *)scratch);
    int rc = spc_launch_status();
    if (rc)
        return rc;
    /* 128 tokens a block where that still gives every SM two blocks, else 64 (H200,
     * llama-1b shapes at 512 tokens: gate/up and the LM head 1.2-1.3x faster at 128; o
     * 1.17x, Q/K/V and down 1.02-1.04x at 64; docs/BENCHMARKS_GPU.md) */
    const unsigned blocks = tw_row_blocks(set);
    const int bt = g_tw_force ? g_tw_force
                   : (int64_t)blocks * ((n_tok + 127) / 128) >= 2 * (int64_t)sms ? 128 : 64;
    if ((n_tok + bt - 1) / bt > 65535)
        return (int)cudaErrorInvalidValue;
    const dim3 grid(blocks, (unsigned)((n_tok + bt - 1) / bt));
    const unsigned char *xb = (const unsigned char *)scratch;
    if (bt == 128)
        spc_launch_smem(k_tc_wgmma<128>, grid, dim3(128), (size_t)tw_cfg<128>::SMEM, s, true,
                        set, xb, n_tok);
    else
        spc_launch_smem(k_tc_wgmma<64>, grid, dim3(128), (size_t)tw_cfg<64>::SMEM, s, true, set,
                        xb, n_tok);
    return spc_launch_status();
}
