/* cuda_ops.cu: devices, memory, and the per-row / element-wise kernels (see cuda_ops.h). */
#include "kernels/cuda/decode.cuh"
#include "kernels/cuda/rmsnorm_row.cuh"

#include <stdlib.h>

#include <math.h>
#include <string.h>

/* ---- errors, devices, memory ------------------------------------------------------- */

extern "C" const char *spc_error_string(int code)
{
    if (code == 0)
        return "no error";
    return cudaGetErrorString((cudaError_t)code);
}

extern "C" int spc_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky-free error */
        return 0;
    }
    return n;
}

int spc_pdl_enabled = 0;
int spc_sm_count = 0;
thread_local unsigned long long spc_pdl_prev_blocks = 0;

extern "C" int spc_device_open(int index, spc_device_info *info, void **stream)
{
    int n = spc_device_count();
    if (index < 0 || index >= n)
        return (int)cudaErrorInvalidDevice;
    cudaError_t e = cudaSetDevice(index);
    if (e != cudaSuccess)
        return (int)e;
    if (info) {
        cudaDeviceProp p;
        memset(info, 0, sizeof *info);
        if ((e = cudaGetDeviceProperties(&p, index)) != cudaSuccess)
            return (int)e;
        strncpy(info->name, p.name, sizeof info->name - 1);
        info->cc_major = p.major;
        info->cc_minor = p.minor;
        info->sm_count = p.multiProcessorCount;
        const char *env = getenv("SPECULA_CUDA_PDL");
        spc_pdl_enabled = p.major < 9 || (env && !strcmp(env, "0")) ? 0
                          : env && !strcmp(env, "all")               ? 2
                                                                     : 1;
        spc_sm_count = p.multiProcessorCount;
        spc_attention_setup();
        if ((e = cudaMemGetInfo(&info->free_mem, &info->total_mem)) != cudaSuccess)
            return (int)e;
    }
    if (stream) {
        cudaStream_t s;
        if ((e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) != cudaSuccess)
            return (int)e;
        *stream = (void *)s;
    }
    return 0;
}

extern "C" int spc_stream_destroy(void *stream)
{
    return stream ? (int)cudaStreamDestroy((cudaStream_t)stream) : 0;
}

extern "C" int spc_mem_info(size_t *free_bytes, size_t *total_bytes)
{
    size_t f = 0, t = 0;
    cudaError_t e = cudaMemGetInfo(&f, &t);
    if (free_bytes)
        *free_bytes = f;
    if (total_bytes)
        *total_bytes = t;
    return (int)e;
}

extern "C" int spc_malloc(void **p, size_t bytes)
{
    *p = NULL;
    if (bytes == 0)
        return 0;
    cudaError_t e = cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
        *p = NULL;
        (void)cudaGetLastError();
    }
    return (int)e;
}

extern "C" int spc_free(void *p) { return p ? (int)cudaFree(p) : 0; }

extern "C" int spc_memset(void *stream, void *p, int value, size_t bytes)
{
    return bytes ? (int)cudaMemsetAsync(p, value, bytes, (cudaStream_t)stream) : 0;
}

static int cpy(void *stream, void *dst, const void *src, size_t n, cudaMemcpyKind k, bool sync)
{
    if (!n)
        return 0;
    cudaError_t e = cudaMemcpyAsync(dst, src, n, k, (cudaStream_t)stream);
    if (e == cudaSuccess && sync)
        e = cudaStreamSynchronize((cudaStream_t)stream);
    return (int)e;
}

extern "C" int spc_memcpy_h2d(void *s, void *d, const void *src, size_t n) { return cpy(s, d, src, n, cudaMemcpyHostToDevice, false); }
extern "C" int spc_memcpy_d2h(void *s, void *d, const void *src, size_t n) { return cpy(s, d, src, n, cudaMemcpyDeviceToHost, false); }
extern "C" int spc_memcpy_d2d(void *s, void *d, const void *src, size_t n) { return cpy(s, d, src, n, cudaMemcpyDeviceToDevice, false); }
extern "C" int spc_memcpy_h2d_sync(void *s, void *d, const void *src, size_t n) { return cpy(s, d, src, n, cudaMemcpyHostToDevice, true); }
extern "C" int spc_memcpy_d2h_sync(void *s, void *d, const void *src, size_t n) { return cpy(s, d, src, n, cudaMemcpyDeviceToHost, true); }

extern "C" int spc_host_alloc(void **p, size_t bytes)
{
    *p = NULL;
    cudaError_t e = cudaHostAlloc(p, bytes ? bytes : 1, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        *p = NULL;
        (void)cudaGetLastError();
    }
    return (int)e;
}

extern "C" void spc_host_free(void *p)
{
    if (p)
        cudaFreeHost(p);
}

extern "C" int spc_event_new(void **ev)
{
    cudaEvent_t e = NULL;
    cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    *ev = r == cudaSuccess ? (void *)e : NULL;
    return (int)r;
}

extern "C" int spc_timing_event_new(void **ev)
{
    cudaEvent_t e = NULL;
    cudaError_t r = cudaEventCreate(&e);
    *ev = r == cudaSuccess ? (void *)e : NULL;
    return (int)r;
}

extern "C" int spc_event_elapsed_ms(void *from, void *to, float *ms)
{
    return (int)cudaEventElapsedTime(ms, (cudaEvent_t)from, (cudaEvent_t)to);
}

extern "C" int spc_event_record(void *ev, void *stream)
{
    return (int)cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)stream);
}

extern "C" int spc_event_sync(void *ev) { return (int)cudaEventSynchronize((cudaEvent_t)ev); }

extern "C" void spc_event_free(void *ev)
{
    if (ev)
        cudaEventDestroy((cudaEvent_t)ev);
}

extern "C" int spc_stream_sync(void *stream)
{
    return (int)cudaStreamSynchronize((cudaStream_t)stream);
}

/* ---- launch helpers ---------------------------------------------------------------- */

#define EW_THREADS 256

static unsigned ew_blocks(int64_t n) { return spc_grid_blocks(n, EW_THREADS); }

/* ---- RMSNorm ----------------------------------------------------------------------- */

template <int NR>
__global__ void __launch_bounds__(RN_THREADS)
k_rmsnorm(const float *x, int64_t xs, const float *__restrict__ w, int64_t dim, float eps,
          float *out, int64_t os)
{
    spc_pdl_trigger();
    rn_w<NR> wl;
    wl.load(w, dim); /* the norm weights do not depend on the previous kernel */
    spc_pdl_wait();  /* launched as a programmatic dependent */
    rn_row<false>(NULL, x + (int64_t)blockIdx.x * xs, rn_res_mem{NULL}, wl, dim, eps,
                  out + (int64_t)blockIdx.x * os);
}

/* x += r (row by row), then out = rmsnorm(x): the two ops of a residual step in one
 * launch, with exactly spc_add's and k_rmsnorm's arithmetic (each thread adds, stores and
 * squares the elements it later normalizes). */
template <int NR>
__global__ void __launch_bounds__(RN_THREADS)
k_add_rmsnorm(float *x, int64_t xs, const float *__restrict__ r, int64_t rs,
              const float *__restrict__ w, int64_t dim, float eps, float *out, int64_t os)
{
    spc_pdl_trigger();
    rn_w<NR> wl;
    wl.load(w, dim); /* the norm weights do not depend on the previous kernel */
    spc_pdl_wait();  /* launched as a programmatic dependent */
    float *xr = x + (int64_t)blockIdx.x * xs;
    rn_row<true>(xr, xr, rn_res_mem{r + (int64_t)blockIdx.x * rs}, wl, dim, eps,
                 out + (int64_t)blockIdx.x * os);
}

extern "C" int spc_add_rmsnorm(void *stream, float *x, int64_t x_stride, const float *r,
                               int64_t r_stride, const float *w, int64_t rows, int64_t dim,
                               float eps, float *out, int64_t out_stride)
{
    if (rows < 0 || dim <= 0 || rows > 0x7fffffff)
        return rows == 0 ? 0 : (int)cudaErrorInvalidValue;
    if (rows == 0)
        return 0;
    spc_launch(rn_pick(dim, k_add_rmsnorm<8>, k_add_rmsnorm<12>, k_add_rmsnorm<RN_REG>),
               dim3((unsigned)rows), dim3(RN_THREADS), (cudaStream_t)stream, true, x, x_stride, r,
               r_stride, w, dim, eps, out, out_stride);
    return spc_launch_status();
}

extern "C" int spc_rmsnorm(void *stream, const float *x, int64_t x_stride, const float *w,
                           int64_t rows, int64_t dim, float eps, float *out, int64_t out_stride)
{
    if (rows < 0 || dim <= 0 || rows > 0x7fffffff)
        return rows == 0 ? 0 : (int)cudaErrorInvalidValue;
    if (rows == 0)
        return 0;
    spc_launch(rn_pick(dim, k_rmsnorm<8>, k_rmsnorm<12>, k_rmsnorm<RN_REG>), dim3((unsigned)rows),
               dim3(RN_THREADS), (cudaStream_t)stream, true, x, x_stride, w, dim, eps, out,
               out_stride);
    return spc_launch_status();
}

/* ---- element-wise ------------------------------------------------------------------ */

__global__ void k_add(float *y, const float *x, int64_t n)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    SPC_GRID_STRIDE(i, n) y[i] = __fadd_rn(y[i], x[i]);
}

__global__ void k_scale(float *x, int64_t n, float f)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    SPC_GRID_STRIDE(i, n) x[i] = __fmul_rn(x[i], f);
}

__global__ void k_swiglu(const float *g, const float *u, int64_t n, float *out)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    SPC_GRID_STRIDE(i, n) out[i] = __fmul_rn(spc_silu(g[i]), u[i]);
}

__global__ void k_gptoss_glu(const float *gu, int64_t n_tok, int64_t I, float alpha, float limit,
                             float *h)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    SPC_GRID_STRIDE(k, n_tok * I)
    {
        int64_t t = k / I, i = k % I;
        h[k] = spc_glu_oss(gu[t * 2 * I + 2 * i], gu[t * 2 * I + 2 * i + 1], alpha, limit);
    }
}

extern "C" int spc_add(void *stream, float *y, const float *x, int64_t n)
{
    if (n <= 0)
        return n < 0 ? (int)cudaErrorInvalidValue : 0;
    spc_launch(k_add, dim3(ew_blocks(n)), dim3(EW_THREADS), (cudaStream_t)stream, true, y, x, n);
    return spc_launch_status();
}

extern "C" int spc_scale(void *stream, float *x, int64_t n, float factor)
{
    if (n <= 0)
        return n < 0 ? (int)cudaErrorInvalidValue : 0;
    spc_launch(k_scale, dim3(ew_blocks(n)), dim3(EW_THREADS), (cudaStream_t)stream, true, x, n,
               factor);
    return spc_launch_status();
}

extern "C" int spc_swiglu(void *stream, const float *g, const float *u, int64_t n, float *out)
{
    if (n <= 0)
        return n < 0 ? (int)cudaErrorInvalidValue : 0;
    spc_launch(k_swiglu, dim3(ew_blocks(n)), dim3(EW_THREADS), (cudaStream_t)stream, true, g, u, n,
               out);
    return spc_launch_status();
}

extern "C" int spc_gptoss_glu(void *stream, const float *gu, int64_t n_tok, int64_t I, float alpha,
                              float limit, float *h)
{
    if (n_tok < 0 || I < 0)
        return (int)cudaErrorInvalidValue;
    if (n_tok * I == 0)
        return 0;
    spc_launch(k_gptoss_glu, dim3(ew_blocks(n_tok * I)), dim3(EW_THREADS), (cudaStream_t)stream,
               true, gu, n_tok, I, alpha, limit, h);
    return spc_launch_status();
}

extern "C" int spc_copy2d(void *stream, float *dst, int64_t dst_stride, const float *src,
                          int64_t src_stride, int64_t rows, int64_t width)
{
    if (rows < 0 || width < 0 || (rows > 1 && (dst_stride < width || src_stride < width)))
        return (int)cudaErrorInvalidValue;
    if (!rows || !width)
        return 0;
    return (int)cudaMemcpy2DAsync(dst, (size_t)(rows > 1 ? dst_stride : width) * sizeof(float), src,
                                  (size_t)(rows > 1 ? src_stride : width) * sizeof(float),
                                  (size_t)width * sizeof(float), (size_t)rows,
                                  cudaMemcpyDeviceToDevice, (cudaStream_t)stream);
}

__global__ void k_kv_store(float *dst, int64_t dst_stride, const int32_t *pos, const float *src,
                           int64_t src_stride, int64_t width)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    const int64_t r = blockIdx.x;
    float *d = dst + (int64_t)pos[r] * dst_stride;
    const float *s = src + r * src_stride;
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x)
        d[i] = s[i];
}

extern "C" int spc_kv_store(void *stream, float *dst, int64_t dst_stride, const int32_t *pos,
                            const float *src, int64_t src_stride, int64_t rows, int64_t width)
{
    if (rows < 0 || width < 0 || rows > 2147483647 || dst_stride < width)
        return (int)cudaErrorInvalidValue;
    if (!rows || !width)
        return 0;
    spc_launch(k_kv_store, dim3((unsigned)rows), dim3(256), (cudaStream_t)stream, true, dst,
               dst_stride, pos, src, src_stride, width);
    return spc_launch_status();
}

/* ---- recorded work ----------------------------------------------------------------- */

extern "C" int spc_capture_begin(void *stream)
{
    return (int)cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeThreadLocal);
}

extern "C" int spc_capture_end(void *stream, void **exec)
{
    *exec = NULL;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture((cudaStream_t)stream, &g);
    if (e == cudaSuccess) {
        cudaGraphExec_t x = NULL;
        e = cudaGraphInstantiate(&x, g, 0);
        if (e == cudaSuccess)
            *exec = (void *)x;
    }
    if (g)
        cudaGraphDestroy(g);
    (void)cudaGetLastError(); /* a failed capture leaves no sticky error behind */
    return (int)e;
}

extern "C" int spc_graph_launch(void *stream, void *exec)
{
    return (int)cudaGraphLaunch((cudaGraphExec_t)exec, (cudaStream_t)stream);
}

extern "C" void spc_graph_free(void *exec)
{
    if (exec)
        cudaGraphExecDestroy((cudaGraphExec_t)exec);
}

/* ---- RoPE -------------------------------------------------------------------------- */

#define ROPE_THREADS 128
#define ROPE_MAX 2048

/* RoPE of one head vector v (d rotated dims) in place, buf: d floats of shared memory;
 * every thread of the block calls it. */
static __device__ __forceinline__ void rope_head(float *v, int64_t d, const float *c,
                                                 const float *s, int interleaved, float *buf)
{
    int64_t half = d / 2;
    for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
        buf[i] = interleaved ? v[2 * i] : v[i];
        buf[i + half] = interleaved ? v[2 * i + 1] : v[i + half];
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
        float a = buf[i], b = buf[i + half];
        v[i] = __fsub_rn(__fmul_rn(a, c[i]), __fmul_rn(b, s[i]));
        v[i + half] = __fadd_rn(__fmul_rn(b, c[i]), __fmul_rn(a, s[i]));
    }
}

__global__ void __launch_bounds__(ROPE_THREADS)
k_rope(float *x, int64_t n_heads, int64_t tok_stride, int64_t head_stride, int64_t d,
       const float *__restrict__ cos_sin, int interleaved)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    __shared__ float buf[ROPE_MAX];
    int64_t t = blockIdx.y, h = blockIdx.x;
    const float *c = cos_sin + t * d;
    rope_head(x + t * tok_stride + h * head_stride, d, c, c + d / 2, interleaved, buf);
}

/* grid (ceil((nq + nk) (d / 2) / ROPE_THREADS) + 1, n): one rotated pair (i, i + d / 2) of
 * a q or k head a thread, as rope_head computes it (k's also stored to the cache, with the
 * head's unrotated tail), then the v row in the last block. Heads share blocks, so a
 * prefill launches ~4x fewer blocks than one per head (gpt-oss-20b, 512 tokens: 37k). */
__global__ void __launch_bounds__(ROPE_THREADS)
k_rope_kv_store(float *q, float *k, const float *v, int64_t nq, int64_t nk, int64_t hd, int64_t d,
                int64_t vw, const float *__restrict__ cos_sin, const int32_t *pos, float *kc,
                float *vc)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    const int64_t t = blockIdx.y, half = d / 2, nrot = (nq + nk) * half;
    const int64_t j = (int64_t)blockIdx.x * ROPE_THREADS + threadIdx.x;
    if ((int64_t)blockIdx.x * ROPE_THREADS >= nrot) { /* the v row */
        float *dst = vc + (int64_t)pos[t] * vw;
        for (int64_t i = threadIdx.x; i < vw; i += ROPE_THREADS)
            dst[i] = v[t * vw + i];
        return;
    }
    if (j >= nrot)
        return;
    const int64_t h = j / half, i = j % half;
    const float *c = cos_sin + t * d, *s = c + half;
    float *x = h < nq ? q + (t * nq + h) * hd : k + (t * nk + (h - nq)) * hd;
    const float a = x[i], b = x[i + half];
    const float r0 = __fsub_rn(__fmul_rn(a, c[i]), __fmul_rn(b, s[i]));
    const float r1 = __fadd_rn(__fmul_rn(b, c[i]), __fmul_rn(a, s[i]));
    x[i] = r0;
    x[i + half] = r1;
    if (h >= nq) {
        float *dst = kc + (int64_t)pos[t] * nk * hd + (h - nq) * hd;
        dst[i] = r0;
        dst[i + half] = r1;
        for (int64_t u = d + i; u < hd; u += half) /* dims past the rotation, as they are */
            dst[u] = x[u];
    }
}

extern "C" int spc_rope_kv_store(void *stream, float *q, float *k, const float *v, int64_t n,
                                 int64_t n_q_heads, int64_t n_kv_heads, int64_t head_dim,
                                 int64_t rot_dim, int64_t v_width, const float *cos_sin,
                                 const int32_t *pos, float *k_cache, float *v_cache)
{
    if (n < 0 || n > 65535 || n_q_heads < 0 || n_kv_heads < 0 || head_dim < 0 || v_width < 0 ||
        rot_dim < 2 || rot_dim > head_dim || head_dim > ROPE_MAX || n_q_heads + n_kv_heads >= 0x7fffffff)
        return (int)cudaErrorInvalidValue;
    if (!n)
        return 0;
    const int64_t pair_blocks = ((n_q_heads + n_kv_heads) * (rot_dim / 2) + ROPE_THREADS - 1) / ROPE_THREADS;
    dim3 grid((unsigned)(pair_blocks + 1), (unsigned)n);
    spc_launch(k_rope_kv_store, grid, dim3(ROPE_THREADS), (cudaStream_t)stream, true, q, k, v,
               n_q_heads, n_kv_heads, head_dim, rot_dim, v_width, cos_sin, pos, k_cache, v_cache);
    return spc_launch_status();
}

extern "C" int spc_rope(void *stream, float *x, int64_t n_tok, int64_t n_heads, int64_t tok_stride,
                        int64_t head_stride, int64_t rot_dim, const float *cos_sin, int interleaved)
{
    if (n_tok < 0 || n_heads < 0 || rot_dim < 0 || rot_dim > ROPE_MAX || n_tok > 65535 ||
        n_heads > 0x7fffffff)
        return (int)cudaErrorInvalidValue;
    if (!n_tok || !n_heads || rot_dim < 2)
        return 0;
    dim3 grid((unsigned)n_heads, (unsigned)n_tok);
    spc_launch(k_rope, dim3(grid), dim3(ROPE_THREADS), (cudaStream_t)stream, true, x, n_heads,
               tok_stride, head_stride, rot_dim, cos_sin, interleaved);
    return spc_launch_status();
}

/* ---- argmax ------------------------------------------------------------------------
 * sp_argmax's result without its scan: each thread keeps the first of the largest
 * non-NaN values it sees, the warps and then the block merge them (larger value, else the
 * lower index: the same pick in any order); a NaN at index 0 gives 0, as the scan does.
 * Each thread keeps AM_LOADS loads in flight at a time (16-byte ones where the row
 * allows): a row is read in a few memory round trips, not one a value. With scratch, a
 * row's AMS_CHUNK-value pieces go to blocks of their own (a gpt-oss row of 201,088 values
 * to 25 SMs instead of one: 25.7 us for the one block on an H200), each writing its pick to
 * the scratch; the block that completes a row's count merges them, the same rule again. */

#define AM_THREADS 1024 /* one block a row */
#define AM_LOADS 8
#define AMS_THREADS 256 /* a block a piece of the row */
#define AMS_CHUNK ((int64_t)AMS_THREADS * AM_LOADS * 4)

static __device__ __forceinline__ void am_take(float v, int64_t i, float &bv, int64_t &bi)
{
    if (v == v && (bi < 0 || v > bv || (v == bv && i < bi))) {
        bv = v;
        bi = i;
    }
}

/* The warp's picks merged into every lane (a lane without one has bi < 0). */
static __device__ __forceinline__ void am_warp_merge(float &bv, int64_t &bi)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(SPC_FULL_MASK, bv, off);
        const int64_t oi = __shfl_xor_sync(SPC_FULL_MASK, bi, off);
        if (oi >= 0)
            am_take(ov, oi, bv, bi);
    }
}

/* The thread's pick of values [c0, c1) of row l (c0 a multiple of 4), T threads. */
template <int T>
static __device__ __forceinline__ void am_scan(const float *l, int64_t c0, int64_t c1, bool vec,
                                               float &bv, int64_t &bi)
{
    int64_t tail = c0;
    if (vec) { /* rows 16-byte aligned: float4 a load, AM_LOADS of them in flight */
        const float4 *l4 = (const float4 *)l;
        const int64_t e4 = c1 / 4;
        for (int64_t b = c0 / 4 + threadIdx.x; b < e4; b += (int64_t)T * AM_LOADS) {
            float4 v[AM_LOADS];
#pragma unroll
            for (int u = 0; u < AM_LOADS; u++) {
                const int64_t j = b + (int64_t)u * T;
                v[u] = j < e4 ? __ldcg(l4 + j) : make_float4(NAN, NAN, NAN, NAN);
            }
#pragma unroll
            for (int u = 0; u < AM_LOADS; u++) {
                const int64_t j = 4 * (b + (int64_t)u * T);
                am_take(v[u].x, j, bv, bi);
                am_take(v[u].y, j + 1, bv, bi);
                am_take(v[u].z, j + 2, bv, bi);
                am_take(v[u].w, j + 3, bv, bi);
            }
        }
        tail = e4 * 4 > c0 ? e4 * 4 : c0;
    }
    for (int64_t b = tail + threadIdx.x; b < c1; b += (int64_t)T * AM_LOADS) {
        float v[AM_LOADS];
#pragma unroll
        for (int u = 0; u < AM_LOADS; u++) {
            const int64_t j = b + (int64_t)u * T;
            v[u] = j < c1 ? __ldcg(l + j) : NAN;
        }
#pragma unroll
        for (int u = 0; u < AM_LOADS; u++)
            am_take(v[u], b + (int64_t)u * T, bv, bi);
    }
}

/* The block's picks merged into thread 0's (T threads, a multiple of 32 up to 1024). The
 * shared memory is reused: a second call needs a barrier after the first one's reads. */
template <int T> static __device__ __forceinline__ void am_block_merge(float &bv, int64_t &bi)
{
    __shared__ float sv[T / 32];
    __shared__ int64_t si[T / 32];
    am_warp_merge(bv, bi);
    if ((threadIdx.x & 31) == 0) {
        sv[threadIdx.x >> 5] = bv;
        si[threadIdx.x >> 5] = bi;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        bv = threadIdx.x < T / 32 ? sv[threadIdx.x] : -INFINITY;
        bi = threadIdx.x < T / 32 ? si[threadIdx.x] : -1;
        am_warp_merge(bv, bi);
    }
}

/* sp_argmax's scan stays at 0 when the first value is a NaN */
static __device__ __forceinline__ int32_t am_id(const float *l, int64_t bi)
{
    return (int32_t)(bi < 0 || l[0] != l[0] ? 0 : bi);
}

__global__ void __launch_bounds__(AM_THREADS)
k_argmax(const float *logits, int64_t n, int64_t stride, int32_t *ids, bool vec)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    const float *l = logits + (int64_t)blockIdx.x * stride;
    float bv = -INFINITY;
    int64_t bi = -1;
    am_scan<AM_THREADS>(l, 0, n, vec, bv, bi);
    am_block_merge<AM_THREADS>(bv, bi);
    if (threadIdx.x == 0)
        ids[blockIdx.x] = am_id(l, bi);
}

/* One piece's pick in the scratch. */
struct am_part {
    float v;
    int64_t i; /* < 0: none */
};

/* Block (x, y): piece x of row y; count[y] (zero between launches) counts the pieces in,
 * part[y * gridDim.x + x] holds their picks. */
__global__ void __launch_bounds__(AMS_THREADS)
k_argmax_split(const float *logits, int64_t n, int64_t stride, int32_t *ids, bool vec,
               unsigned *count, am_part *part)
{
    spc_pdl_trigger();
    spc_pdl_wait(); /* launched as a programmatic dependent */
    const int64_t row = blockIdx.y, S = gridDim.x, c0 = (int64_t)blockIdx.x * AMS_CHUNK;
    const float *l = logits + row * stride;
    float bv = -INFINITY;
    int64_t bi = -1;
    am_scan<AMS_THREADS>(l, c0, c0 + AMS_CHUNK < n ? c0 + AMS_CHUNK : n, vec, bv, bi);
    am_block_merge<AMS_THREADS>(bv, bi);
    __shared__ bool last;
    if (threadIdx.x == 0) {
        part[row * S + blockIdx.x] = am_part{bv, bi};
        __threadfence(); /* the pick before the count */
        last = atomicAdd(count + row, 1u) == (unsigned)(S - 1);
    }
    __syncthreads(); /* also: the first merge's shared reads are done */
    if (!last)
        return;
    __threadfence(); /* every piece's pick after the count */
    bv = -INFINITY, bi = -1;
    for (int64_t p = threadIdx.x; p < S; p += AMS_THREADS) {
        const am_part *q = part + row * S + p;
        const int64_t qi = __ldcg(&q->i);
        if (qi >= 0)
            am_take(__ldcg(&q->v), qi, bv, bi);
    }
    am_block_merge<AMS_THREADS>(bv, bi);
    if (threadIdx.x == 0) {
        ids[row] = am_id(l, bi);
        count[row] = 0; /* for the next launch */
    }
}

/* The scratch's counts, one a row for up to AMS_COUNT_ROWS rows, in a fixed region before
 * the picks: a launch's picks never overlap the count of a row another launch (of more
 * rows) starts from. (With the region sized by the launch's rows, a one-row decode's pick
 * left bytes in what a five-row verify then read as its fifth row's count: that row's
 * merge never ran and its id stayed stale, every bonus token of a fully accepted k = 4
 * draft.) */
#define AMS_COUNT_ROWS 1024
static size_t am_counts_bytes(void) { return AMS_COUNT_ROWS * sizeof(unsigned); }

/* Pieces of a row of n values. */
static int64_t am_pieces(int64_t n) { return n / AMS_CHUNK + (n % AMS_CHUNK != 0); }

extern "C" size_t spc_argmax_split_bytes(int64_t rows, int64_t n_vocab)
{
    if (rows <= 0 || n_vocab <= 0 || rows > AMS_COUNT_ROWS || am_pieces(n_vocab) > 65535)
        return 0; /* the counts' region; a grid dimension's limit */
    return am_counts_bytes() + (size_t)(rows * am_pieces(n_vocab)) * sizeof(am_part);
}

extern "C" int spc_logits_argmax(void *stream, const float *logits, int64_t rows, int64_t n_vocab,
                                 int64_t stride, int32_t *ids, void *scratch, size_t scratch_bytes)
{
    if (rows < 0 || n_vocab <= 0 || rows > 0x7fffffff)
        return (int)cudaErrorInvalidValue;
    if (!rows)
        return 0;
    const int64_t st = stride ? stride : n_vocab;
    const bool vec = ((uintptr_t)logits % 16) == 0 && st % 4 == 0;
    const int64_t S = am_pieces(n_vocab);
    const size_t need = spc_argmax_split_bytes(rows, n_vocab);
    if (scratch && S > 1 && need && need <= scratch_bytes) {
        unsigned *count = (unsigned *)scratch;
        am_part *part = (am_part *)((char *)scratch + am_counts_bytes());
        spc_launch(k_argmax_split, dim3((unsigned)S, (unsigned)rows), dim3(AMS_THREADS),
                   (cudaStream_t)stream, true, logits, n_vocab, st, ids, vec, count, part);
    } else {
        spc_launch(k_argmax, dim3((unsigned)rows), dim3(AM_THREADS), (cudaStream_t)stream, true,
                   logits, n_vocab, st, ids, vec);
    }
    return spc_launch_status();
}

/* ---- testing error paths ----------------------------------------------------------- */

__global__ void k_trap(void) { __trap(); }

extern "C" int spc_debug_trap(void *stream)
{
    k_trap<<<1, 1, 0, (cudaStream_t)stream>>>();
    return spc_launch_status();
}
