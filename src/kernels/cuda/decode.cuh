/* decode.cuh: exact weight decoders and the warp-per-row dot product shared by the
 * CUDA matmul and MoE kernels (see cuda_ops.h for the reduction order).
 *
 * The decoders reproduce sp_weight_at (kernels/cpu/matmul.c, util/dtype.h) operation for
 * operation: the same table values, the same single products (code * scale, E4M3 scale
 * * global scale first for NVFP4), so decoded values are bit-identical to the CPU's. The
 * library is compiled with --fmad=false, so no a*b+c is contracted unless written fmaf. */
#ifndef SP_KERNELS_CUDA_DECODE_CUH
#define SP_KERNELS_CUDA_DECODE_CUH

#include "kernels/cuda/cp_async.cuh" /* spc_l2_evict_first */
#include "kernels/cuda/cuda_ops.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define SPC_FULL_MASK 0xffffffffu

/* ---- programmatic dependent launch (Hopper) ------------------------------------------
 * A matmul launched with spc_launch(..., pdl = true) may start while the kernel before it
 * in the stream is still running: it issues its first weight loads (weights never depend
 * on earlier kernels), then waits (spc_pdl_wait: the previous grid complete and its
 * writes visible) before it reads an activation or writes anything. Every kernel lets its
 * dependents launch as soon as it has started (spc_pdl_trigger), so small launches chain:
 * a kernel may start while not only its primary but kernels before that one still run,
 * and nothing any earlier kernel writes (a residual, a cache row) may be read before the
 * wait, however long ago it seems written (test_batch_invariance's small fixtures caught
 * a residual read early). The arithmetic is unchanged: only when loads are issued. Off
 * below sm_90 or with SPECULA_CUDA_PDL=0. */
static __device__ __forceinline__ void spc_pdl_trigger(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

static __device__ __forceinline__ void spc_pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* cuda_ops.cu: 0 no PDL (below sm_90, or SPECULA_CUDA_PDL=0), 1 (default) a launch is a
 * programmatic dependent only when the launch before it had fewer blocks than the device
 * has SMs, 2 every launch (SPECULA_CUDA_PDL=all). A dependent launched early parks its
 * blocks on the SMs until its wait: that pays when the kernel before leaves SMs idle (a
 * norm, routing, attention), and costs the kernel before some of its slots when it fills
 * the device (gpt-oss-20b shape fast decode on an H100: 262 tok/s with every launch a
 * dependent, 278 with none). */
extern int spc_pdl_enabled;
extern int spc_sm_count;                          /* of the device spc_device_open opened */
extern thread_local unsigned long long spc_pdl_prev_blocks; /* the thread's last launch */

/* Launches kernel k with `smem` bytes of dynamic shared memory; with pdl (and PDL
 * enabled, see above) as a programmatic dependent of the stream's previous kernel. Every
 * kernel calls spc_pdl_wait before it reads what an earlier kernel wrote, a no-op when it
 * was not launched as a dependent: the choice is scheduling only. Errors reach
 * cudaGetLastError as for <<<>>>. */
template <typename... P, typename... A>
static inline void spc_launch_smem(void (*k)(P...), dim3 grid, dim3 block, size_t smem,
                                   cudaStream_t s, bool pdl, A... args)
{
    const unsigned long long blocks = (unsigned long long)grid.x * grid.y * grid.z;
    pdl = pdl && (spc_pdl_enabled == 2 ||
                  (spc_pdl_enabled == 1 && spc_pdl_prev_blocks < (unsigned long long)spc_sm_count));
    spc_pdl_prev_blocks = blocks;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    (void)cudaLaunchKernelEx(&cfg, k, args...);
}

/* spc_launch_smem without dynamic shared memory. */
template <typename... P, typename... A>
static inline void spc_launch(void (*k)(P...), dim3 grid, dim3 block, cudaStream_t s, bool pdl,
                              A... args)
{
    spc_launch_smem(k, grid, block, 0, s, pdl, args...);
}

/* Blocks of `threads` for a grid-stride loop over n elements (at most 65535: the loop
 * covers the rest; how many blocks run never changes an element's arithmetic). */
static inline unsigned spc_grid_blocks(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b > 65535 ? 65535 : b);
}

#define SPC_GRID_STRIDE(i, n)                                                             \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);             \
         i += (int64_t)gridDim.x * blockDim.x)

static __device__ __forceinline__ float spc_bits_f(uint32_t u) { return __uint_as_float(u); }

/* silu(x) = x / (1 + e^-x): the one expression every SwiGLU kernel uses (spc_swiglu, the
 * fused matmul + SwiGLU kernels, the experts), so fused and unfused agree bit for bit. */
static __device__ __forceinline__ float spc_silu(float x)
{
    return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x)));
}

/* gpt-oss's expert activation of one (gate, up) pair: gate clamped above at limit, up to
 * [-limit, limit], then gate * sigmoid(alpha gate) * (up + 1), in the CPU backend's order. */
static __device__ __forceinline__ float spc_glu_oss(float g, float u, float alpha, float limit)
{
    g = g > limit ? limit : g;
    u = u > limit ? limit : u < -limit ? -limit : u;
    const float glu = __fmul_rn(g, __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-__fmul_rn(g, alpha)))));
    return __fmul_rn(__fadd_rn(u, 1.0f), glu);
}

static __device__ __forceinline__ float spc_bf16(uint32_t h) { return __uint_as_float(h << 16); }

static __device__ __forceinline__ float spc_f16(uint32_t h)
{
    return __half2float(__ushort_as_half((unsigned short)h));
}

/* OCP E4M3 FN, as sp_e4m3_to_f32. */
static __device__ __forceinline__ float spc_e4m3(uint32_t b)
{
    uint32_t s = (b >> 7) << 31, e = (b >> 3) & 15u, m = b & 7u;
    if (e == 15 && m == 7)
        return spc_bits_f(0x7fc00000u | s);
    if (e == 0)
        return spc_bits_f(__float_as_uint(__fmul_rn((float)m, 0.001953125f)) | s);
    return spc_bits_f(s | ((e + 120u) << 23) | (m << 20));
}

/* UE8M0, as sp_e8m0_to_f32. */
static __device__ __forceinline__ float spc_e8m0(uint32_t b)
{
    if (b == 0xff)
        return spc_bits_f(0x7fc00000u);
    return spc_bits_f(b ? b << 23 : 0x00400000u);
}

/* E2M1 code (4 bits) as sp_e2m1_table: {0,.5,1,1.5,2,3,4,6}, bit 3 the sign (-0 for 8). */
static __device__ __forceinline__ float spc_e2m1(uint32_t code)
{
    uint32_t e = (code >> 1) & 3u, m = code & 1u;
    uint32_t mag = e ? ((126u + e) << 23) | (m << 22) : (m ? 126u << 23 : 0u);
    return spc_bits_f(mag | ((code & 8u) << 28));
}

/* Element (r, c) of w, exactly sp_weight_at. */
template <int FMT>
static __device__ __forceinline__ float spc_elem(const sp_weight &w, int64_t r, int64_t c)
{
    const unsigned char *row = w.data + (size_t)r * w.row_bytes;
    if (FMT == SP_WF_F32)
        return ((const float *)row)[c];
    if (FMT == SP_WF_BF16)
        return spc_bf16(((const unsigned short *)row)[c]);
    if (FMT == SP_WF_F16)
        return spc_f16(((const unsigned short *)row)[c]);
    if (FMT == SP_WF_MXFP4 || FMT == SP_WF_NVFP4) {
        uint32_t b = row[c / 2];
        uint32_t code = (c & 1) ? b >> 4 : b & 15u;
        if (FMT == SP_WF_MXFP4)
            return __fmul_rn(spc_e2m1(code),
                             spc_e8m0(w.scales[(size_t)r * w.scale_row_bytes + (size_t)(c / 32)]));
        float s = __fmul_rn(spc_e4m3(w.scales[(size_t)r * w.scale_row_bytes + (size_t)(c / 16)]),
                            w.global_scale);
        return __fmul_rn(spc_e2m1(code), s);
    }
    /* FP8 block */
    float s = *(const float *)(w.scales + (size_t)((r + w.row_offset) / 128) * w.scale_row_bytes +
                               4 * (size_t)(c / 128));
    return __fmul_rn(spc_e4m3(row[c]), s);
}

/* switch (f) calling X(F) with the compile-time format F equal to f, `other` (a statement)
 * for any other value: one kernel instance per format. */
#define SPC_BY_FORMAT(f, X, other)                                                         \
    switch (f) {                                                                           \
    case SP_WF_F32: X(SP_WF_F32); break;                                                   \
    case SP_WF_BF16: X(SP_WF_BF16); break;                                                 \
    case SP_WF_F16: X(SP_WF_F16); break;                                                   \
    case SP_WF_MXFP4: X(SP_WF_MXFP4); break;                                               \
    case SP_WF_NVFP4: X(SP_WF_NVFP4); break;                                               \
    case SP_WF_FP8_BLOCK: X(SP_WF_FP8_BLOCK); break;                                       \
    default: other; break;                                                                 \
    }

/* Runtime-dispatched element decoder (uniform format). */
static __device__ __forceinline__ float spc_elem_any(const sp_weight &w, int64_t r, int64_t c)
{
    switch (w.format) {
    case SP_WF_F32: return spc_elem<SP_WF_F32>(w, r, c);
    case SP_WF_BF16: return spc_elem<SP_WF_BF16>(w, r, c);
    case SP_WF_F16: return spc_elem<SP_WF_F16>(w, r, c);
    case SP_WF_MXFP4: return spc_elem<SP_WF_MXFP4>(w, r, c);
    case SP_WF_NVFP4: return spc_elem<SP_WF_NVFP4>(w, r, c);
    case SP_WF_FP8_BLOCK: return spc_elem<SP_WF_FP8_BLOCK>(w, r, c);
    default: return 0.0f;
    }
}

/* 16 read-only bytes at p (16-byte aligned) of a weight streamed through once
 * (cp_async.cuh, spc_l2_evict_first): loaded evict-first, not kept in L1. */
static __device__ __forceinline__ uint4 spc_ldg16_stream(const void *p)
{
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p), "l"(spc_l2_evict_first()));
    return v;
}

/* Elements per 16-byte chunk. */
template <int FMT> struct spc_chunk {
    static constexpr int N = FMT == SP_WF_F32 ? 4
                             : (FMT == SP_WF_BF16 || FMT == SP_WF_F16) ? 8
                             : FMT == SP_WF_FP8_BLOCK ? 16
                                                     : 32;
};

/* Loads the 16 weight bytes of chunk j of a row (vectorized when `vec`: row base and
 * row_bytes 16-byte aligned). */
static __device__ __forceinline__ uint4 spc_load16(const unsigned char *row, int64_t j, bool vec)
{
    if (vec)
        return spc_ldg16_stream(row + 16 * j);
    const unsigned char *p = row + 16 * j;
    uint32_t v[4];
#pragma unroll
    for (int q = 0; q < 4; q++)
        v[q] = (uint32_t)p[4 * q] | ((uint32_t)p[4 * q + 1] << 8) | ((uint32_t)p[4 * q + 2] << 16) |
               ((uint32_t)p[4 * q + 3] << 24);
    return make_uint4(v[0], v[1], v[2], v[3]);
}

/* ---- the block dot product (issue 11) ----------------------------------------------
 *
 * spc_block_rows: R consecutive rows of w against TT token vectors, one block of
 * SPC_SLOTS threads, in the order of cuda_ops.h (chunk j of a row -> slot j % SPC_SLOTS,
 * each slot its chunks ascending, element by element with fmaf, the warp butterfly, then
 * the four warps in a fixed tree), so results are bit-identical for any R, TT, U and
 * n_tok. What R, TT and U change is the schedule: U chunks per row (U * R 16-byte loads
 * per thread, and their scales) are loaded before the first is used; x is read with
 * float4 loads when aligned, once per token for all R rows; a chunk is decoded in groups
 * of 8 elements (so x and the decoded weights fit registers); FP4 and FP8 are decoded by
 * exponent arithmetic (the magnitude bits placed in a float and scaled by an exact power
 * of two), giving the same values as spc_e2m1 / spc_e4m3 (FP8 chunks holding a NaN code
 * take the reference decoder). FP4 with |scale| < 4 folds the power of two into the
 * scale: one product per code, the same single rounding of e2m1(code) * scale (checked
 * for every code and every E8M0 / E4M3 scale byte). Four warps share a row rather than
 * one so that a matrix of few rows (2048 x 8192) still fills the GPU with loads. */

/* The float value of an E2M1 code's magnitude bits m3 = code & 7, placed at bits 22..24,
 * times 2^126 (exact, denormal in between), with the sign folded into the factor. */
static __device__ __forceinline__ float spc_e2m1_fast(uint32_t mag_at22, uint32_t sign_at31)
{
    return __fmul_rn(__uint_as_float(mag_at22), __uint_as_float(0x7e800000u | sign_at31));
}

/* E4M3 magnitude bits (7) placed at bits 20..26, times 2^120 (exact; not for NaN codes). */
static __device__ __forceinline__ float spc_e4m3_fast(uint32_t mag_at20, uint32_t sign_at31)
{
    return __fmul_rn(__uint_as_float(mag_at20), __uint_as_float(0x7b800000u | sign_at31));
}

template <int FMT> struct spc_group {
    static constexpr int G = FMT == SP_WF_F32 ? 4 : 8; /* elements decoded at a time */
};

/* Per-chunk scale factors, loaded with the raw chunk. */
template <int FMT>
static __device__ __forceinline__ void spc_chunk_scales(const sp_weight &w, int64_t r, int64_t j,
                                                        float &s0, float &s1)
{
    if (FMT == SP_WF_FP8_BLOCK) {
        s0 = s1 = *(const float *)(w.scales + (size_t)((r + w.row_offset) / 128) * w.scale_row_bytes +
                                   4 * (size_t)((16 * j) / 128));
    } else if (FMT == SP_WF_MXFP4) {
        s0 = s1 = spc_e8m0(__ldg(w.scales + (size_t)r * w.scale_row_bytes + (size_t)j));
    } else if (FMT == SP_WF_NVFP4) {
        const unsigned char *sc = w.scales + (size_t)r * w.scale_row_bytes + 2 * (size_t)j;
        s0 = __fmul_rn(spc_e4m3(__ldg(sc)), w.global_scale);
        s1 = __fmul_rn(spc_e4m3(__ldg(sc + 1)), w.global_scale);
    } else {
        s0 = s1 = 1.0f;
    }
}

/* Elements [G*g, G*g + G) of a full chunk, exactly spc_elem's values. */
template <int FMT, int g>
static __device__ __forceinline__ void spc_decode_group(uint4 raw, float s0, float s1, bool fp8_nan,
                                                        float *out)
{
    const uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
    if (FMT == SP_WF_F32) {
#pragma unroll
        for (int i = 0; i < 4; i++)
            out[i] = spc_bits_f(u[i]);
    } else if (FMT == SP_WF_BF16) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            out[2 * i] = spc_bits_f(u[i] << 16);
            out[2 * i + 1] = spc_bits_f(u[i] & 0xffff0000u);
        }
    } else if (FMT == SP_WF_F16) {
#pragma unroll
        for (int i = 0; i < 8; i++)
            out[i] = spc_f16((u[i / 2] >> (16 * (i & 1))) & 0xffffu);
    } else if (FMT == SP_WF_FP8_BLOCK) {
        /* words 2g, 2g + 1: bytes 8g .. 8g + 7 */
        if (!fp8_nan) {
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const uint32_t word = u[2 * g + i / 4];
                const int b = i & 3; /* byte in word: bits 8b .. 8b + 7 */
                uint32_t mag = (b <= 2 ? word << (20 - 8 * b) : word >> 4) & 0x07f00000u;
                uint32_t sign = (word << (24 - 8 * b)) & 0x80000000u;
                out[i] = __fmul_rn(spc_e4m3_fast(mag, sign), s0);
            }
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++)
                out[i] = __fmul_rn(spc_e4m3((u[2 * g + i / 4] >> (8 * (i & 3))) & 0xffu), s0);
        }
    } else {
        /* FP4: word g holds codes 8g .. 8g + 7 (nibble k at bits 4k .. 4k + 3) */
        const uint32_t word = u[g];
        const float s = g < 2 ? s0 : s1;
        if (fabsf(s) < 4.0f) {
            /* s * 2^126 is exact and finite: one product per code, (code bits as a float)
             * * (s * 2^126) = e2m1(code) * s rounded once, as the two-step form */
            const float sp = __fmul_rn(s, 0x1p126f);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                uint32_t mag = (k <= 5 ? word << (22 - 4 * k) : word >> (4 * k - 22)) & 0x01c00000u;
                uint32_t sign = (word << (28 - 4 * k)) & 0x80000000u;
                out[k] = __fmul_rn(__uint_as_float(mag | sign), sp);
            }
        } else { /* large or NaN scales */
#pragma unroll
            for (int k = 0; k < 8; k++) {
                uint32_t mag = (k <= 5 ? word << (22 - 4 * k) : word >> (4 * k - 22)) & 0x01c00000u;
                uint32_t sign = (word << (28 - 4 * k)) & 0x80000000u;
                out[k] = __fmul_rn(spc_e2m1_fast(mag, sign), s);
            }
        }
    }
}

/* Whether an FP8 chunk holds a NaN code (0x7f / 0xff). */
static __device__ __forceinline__ bool spc_fp8_has_nan(uint4 raw)
{
    uint32_t a = __vcmpeq4(raw.x & 0x7f7f7f7fu, 0x7f7f7f7fu) | __vcmpeq4(raw.y & 0x7f7f7f7fu, 0x7f7f7f7fu) |
                 __vcmpeq4(raw.z & 0x7f7f7f7fu, 0x7f7f7f7fu) | __vcmpeq4(raw.w & 0x7f7f7f7fu, 0x7f7f7f7fu);
    return a != 0;
}

/* Loads G consecutive floats of x (float4 when xvec). */
template <int G>
static __device__ __forceinline__ void spc_load_x(const float *p, bool xvec, float *o)
{
    if (xvec) {
#pragma unroll
        for (int q = 0; q < G / 4; q++) {
            float4 v = __ldg((const float4 *)p + q);
            o[4 * q] = v.x;
            o[4 * q + 1] = v.y;
            o[4 * q + 2] = v.z;
            o[4 * q + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < G; i++)
            o[i] = __ldg(p + i);
    }
}

/* acc[t * R + rr] += x_t[chunk j] . row (r0 + rr)[chunk j] for the U chunks j0 + STRIDE u
 * (u < nu), raw/scales already loaded. */
template <int FMT, int TT, int R, int U, int STRIDE>
static __device__ __forceinline__ void spc_consume(const uint4 (&raw)[U][R], const float (&s0)[U][R],
                                                   const float (&s1)[U][R], int64_t j0, int nu,
                                                   const float *x, int64_t x_stride, int nt,
                                                   bool xvec, float *acc)
{
    constexpr int CH = spc_chunk<FMT>::N, G = spc_group<FMT>::G, NG = CH / G;
#pragma unroll
    for (int u = 0; u < U; u++) {
        if (u >= nu)
            break;
        const int64_t j = j0 + STRIDE * u;
        bool nan[R];
#pragma unroll
        for (int rr = 0; rr < R; rr++)
            nan[rr] = FMT == SP_WF_FP8_BLOCK ? spc_fp8_has_nan(raw[u][rr]) : false;
#pragma unroll
        for (int g = 0; g < NG; g++) {
            float wv[R][G];
#pragma unroll
            for (int rr = 0; rr < R; rr++) {
                switch (g) { /* g is a compile-time constant after unrolling */
                case 0: spc_decode_group<FMT, 0>(raw[u][rr], s0[u][rr], s1[u][rr], nan[rr], wv[rr]); break;
                case 1: spc_decode_group<FMT, 1>(raw[u][rr], s0[u][rr], s1[u][rr], nan[rr], wv[rr]); break;
                case 2: spc_decode_group<FMT, 2>(raw[u][rr], s0[u][rr], s1[u][rr], nan[rr], wv[rr]); break;
                default: spc_decode_group<FMT, 3>(raw[u][rr], s0[u][rr], s1[u][rr], nan[rr], wv[rr]); break;
                }
            }
#pragma unroll
            for (int t = 0; t < TT; t++)
                if (t < nt) {
                    float xv[G];
                    spc_load_x<G>(x + t * x_stride + j * CH + g * G, xvec, xv);
#pragma unroll
                    for (int rr = 0; rr < R; rr++)
#pragma unroll
                        for (int i = 0; i < G; i++)
                            acc[t * R + rr] = fmaf(xv[i], wv[rr][i], acc[t * R + rr]);
                }
        }
    }
}

/* The dot-product block: SPC_SLOTS threads (4 warps) share every output of a launch's
 * rows. Slot s = threadIdx.x owns the chunks j with j % SPC_SLOTS == s. Every kernel
 * that computes a row-major product launches blocks of exactly this many threads. */
#define SPC_SLOTS 128

/* Rows r0 .. r0 + nr - 1 of wa (rr < SPLIT) and of wb (rr >= SPLIT: row r0 + rr - SPLIT;
 * the same shape and format as wa) against nt <= TT tokens (nr <= SPLIT and <= R - SPLIT
 * when they differ; rows past nr repeat row r0 and are not to be stored), computed by the
 * whole block (block-uniform arguments; every thread must call it): acc[t * R + rr],
 * every thread holding the full sums. Two matrices of one x (gate and up) share a block
 * so that all their loads are in flight at once.
 * The order per output (cuda_ops.h): slot s accumulates its chunks ascending with fmaf,
 * element by element; each warp adds its 32 slots by the xor-butterfly (16, 8, 4, 2, 1);
 * the four warp sums are added as (w0 + w1) + (w2 + w3). */
template <int FMT, int TT, int R, int U, int SPLIT = R>
static __device__ __forceinline__ void spc_block_rows(const sp_weight &wa, const sp_weight &wb,
                                                      int64_t r0, int nr, const float *x,
                                                      int64_t x_stride, int nt, bool vec, bool xvec,
                                                      float *acc)
{
    constexpr int CH = spc_chunk<FMT>::N;
    const int slot = threadIdx.x;
    const int64_t cols = wa.cols;
    const int64_t nfull = cols / CH;
    const unsigned char *rowp[R];
    int64_t rix[R];
#pragma unroll
    for (int rr = 0; rr < R; rr++) {
        const int q = rr < SPLIT ? rr : rr - SPLIT;
        const sp_weight &w = rr < SPLIT ? wa : wb;
        rix[rr] = q < nr ? r0 + q : r0;
        rowp[rr] = w.data + (size_t)rix[rr] * w.row_bytes;
    }
#pragma unroll
    for (int i = 0; i < TT * R; i++)
        acc[i] = 0.0f;
    int64_t j = slot;
    uint4 raw[U][R];
    float s0[U][R], s1[U][R];
    /* rounds of up to U chunks per row (the last round of a slot may hold fewer): all
     * their loads are issued before the first is used */
    bool waited = false;
    for (; j < nfull; j += SPC_SLOTS * U) {
        const int64_t left = (nfull - j + SPC_SLOTS - 1) / SPC_SLOTS;
        const int nu = left < U ? (int)left : U;
#pragma unroll
        for (int u = 0; u < U; u++)
            if (u < nu) {
#pragma unroll
                for (int rr = 0; rr < R; rr++) {
                    raw[u][rr] = spc_load16(rowp[rr], j + SPC_SLOTS * u, vec);
                    spc_chunk_scales<FMT>(rr < SPLIT ? wa : wb, rix[rr], j + SPC_SLOTS * u,
                                          s0[u][rr], s1[u][rr]);
                }
            }
        if (!waited) { /* the first weights are on their way: now x may be read */
            spc_pdl_wait();
            waited = true;
        }
        spc_consume<FMT, TT, R, U, SPC_SLOTS>(raw, s0, s1, j, nu, x, x_stride, nt, xvec, acc);
    }
    if (!waited)
        spc_pdl_wait();
    /* the partial last chunk belongs to slot nfull % SPC_SLOTS, after its full chunks */
    if (slot == (int)(nfull % SPC_SLOTS) && nfull * CH < cols) {
        for (int64_t c = nfull * CH; c < cols; c++) {
#pragma unroll
            for (int rr = 0; rr < R; rr++) {
                float wv = spc_elem<FMT>(rr < SPLIT ? wa : wb, rix[rr], c);
#pragma unroll
                for (int t = 0; t < TT; t++)
                    if (t < nt)
                        acc[t * R + rr] = fmaf(__ldg(x + t * x_stride + c), wv, acc[t * R + rr]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < TT * R; i++) {
        float v = acc[i];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            v = __fadd_rn(v, __shfl_xor_sync(SPC_FULL_MASK, v, off));
        acc[i] = v;
    }
    __shared__ float part[SPC_SLOTS / 32][TT * R];
    __syncthreads(); /* an earlier call's readers are done with part */
    if ((slot & 31) == 0) {
#pragma unroll
        for (int i = 0; i < TT * R; i++)
            part[slot >> 5][i] = acc[i];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < TT * R; i++)
        acc[i] = __fadd_rn(__fadd_rn(part[0][i], part[1][i]), __fadd_rn(part[2][i], part[3][i]));
}

/* Stores the block's outputs: thread i < TT * R writes output i (token i / R, row i % R)
 * when it is valid, as y[(t0 + t) * ld + r0 + rr] (+ bias[r] when bias); with map, token
 * t0 + t goes to y row map[t0 + t] instead. */
template <int TT, int R>
static __device__ __forceinline__ void spc_block_store(const float *acc, int64_t r0, int nr,
                                                       int64_t t0, int nt, float *y, int64_t ld,
                                                       const float *bias, const int32_t *map = NULL)
{
    const int i = threadIdx.x;
    if (i >= TT * R)
        return;
    const int t = i / R, rr = i % R;
    if (t >= nt || rr >= nr)
        return;
    float v = acc[0];
#pragma unroll
    for (int q = 1; q < TT * R; q++) /* a register pick, not a dynamic index */
        if (q == i)
            v = acc[q];
    const int64_t r = r0 + rr, row = map ? (int64_t)map[t0 + t] : t0 + t;
    y[row * ld + r] = bias ? __fadd_rn(v, bias[r]) : v;
}

/* 16-byte vector loads are possible for this weight (base and row pitch aligned). */
static inline bool spc_weight_vec_ok(const sp_weight *w)
{
    return ((uintptr_t)w->data % 16) == 0 && (w->row_bytes % 16) == 0;
}

static __device__ __forceinline__ bool spc_weight_vec_ok_dev(const sp_weight &w)
{
    return ((uintptr_t)w.data % 16) == 0 && (w.row_bytes % 16) == 0;
}

/* Transposed product for one column c and TT tokens (nt valid): acc[t] = bias +
 * sum_i x[t, i] * W[row0 + i, c], i ascending, fmaf. */
template <int FMT, int TT>
static __device__ __forceinline__ void spc_col_t(const sp_weight &w, int64_t row0, int64_t n_in,
                                                 int64_t c, const float *x, int64_t x_stride, int nt,
                                                 float b, float *acc)
{
#pragma unroll
    for (int t = 0; t < TT; t++)
        acc[t] = b;
    for (int64_t i = 0; i < n_in; i++) {
        float wv = spc_elem<FMT>(w, row0 + i, c);
#pragma unroll
        for (int t = 0; t < TT; t++)
            if (t < nt)
                acc[t] = fmaf(__ldg(x + t * x_stride + i), wv, acc[t]);
    }
}

static inline int spc_status(cudaError_t e) { return (int)e; }


/* Checks the last launch. */
static inline int spc_launch_status(void)
{
    return (int)cudaGetLastError();
}

#endif
