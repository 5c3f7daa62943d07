/* cuda_matmul.cu: y = x W^T for every weight format, the transposed product and row
 * decoding (see cuda_ops.h). One warp per output row, MM_WARPS rows per block; tokens in
 * tiles of MM_TT (grid.y), each weight chunk decoded once per tile and used for every
 * token of the tile. A token's reduction order does not depend on the tile. */
#include "kernels/cuda/decode.cuh"

#define MM_WARPS 4
#define MM_TT 8
#define MT_THREADS 128
#define MT_TT 8

template <int FMT>
__global__ void __launch_bounds__(MM_WARPS * 32)
k_matmul(const sp_weight w, const float *__restrict__ x, int64_t n_tok, float *__restrict__ y,
         const float *__restrict__ bias, bool vec)
{
    int64_t r = (int64_t)blockIdx.x * MM_WARPS + (threadIdx.x >> 5);
    if (r >= w.rows)
        return;
    int64_t t0 = (int64_t)blockIdx.y * MM_TT;
    int nt = (int)(n_tok - t0 < MM_TT ? n_tok - t0 : MM_TT);
    float acc[MM_TT];
    spc_warp_row<FMT, MM_TT>(w, r, x + t0 * w.cols, w.cols, nt, vec, acc);
    if ((threadIdx.x & 31) == 0) {
        float b = bias ? bias[r] : 0.0f;
#pragma unroll
        for (int t = 0; t < MM_TT; t++)
            if (t < nt)
                y[(t0 + t) * w.rows + r] = bias ? __fadd_rn(acc[t], b) : acc[t];
    }
}

static bool fmt_ok(sp_wformat f)
{
    return f == SP_WF_F32 || f == SP_WF_BF16 || f == SP_WF_F16 || f == SP_WF_MXFP4 ||
           f == SP_WF_NVFP4 || f == SP_WF_FP8_BLOCK;
}

extern "C" int spc_matmul(void *stream, const sp_weight *w, const float *x, int64_t n_tok, float *y,
                          const float *bias)
{
    if (!w || !fmt_ok(w->format) || n_tok < 0 || w->rows < 0 || w->cols < 0)
        return (int)cudaErrorInvalidValue;
    if (n_tok == 0 || w->rows == 0)
        return 0;
    int64_t ty = (n_tok + MM_TT - 1) / MM_TT;
    if (ty > 65535)
        return (int)cudaErrorInvalidValue;
    dim3 grid((unsigned)((w->rows + MM_WARPS - 1) / MM_WARPS), (unsigned)ty);
    cudaStream_t s = (cudaStream_t)stream;
    bool vec = spc_weight_vec_ok(w);
    sp_weight wv = *w;
    switch (w->format) {
    case SP_WF_F32: k_matmul<SP_WF_F32><<<grid, MM_WARPS * 32, 0, s>>>(wv, x, n_tok, y, bias, vec); break;
    case SP_WF_BF16: k_matmul<SP_WF_BF16><<<grid, MM_WARPS * 32, 0, s>>>(wv, x, n_tok, y, bias, vec); break;
    case SP_WF_F16: k_matmul<SP_WF_F16><<<grid, MM_WARPS * 32, 0, s>>>(wv, x, n_tok, y, bias, vec); break;
    case SP_WF_MXFP4: k_matmul<SP_WF_MXFP4><<<grid, MM_WARPS * 32, 0, s>>>(wv, x, n_tok, y, bias, vec); break;
    case SP_WF_NVFP4: k_matmul<SP_WF_NVFP4><<<grid, MM_WARPS * 32, 0, s>>>(wv, x, n_tok, y, bias, vec); break;
    default: k_matmul<SP_WF_FP8_BLOCK><<<grid, MM_WARPS * 32, 0, s>>>(wv, x, n_tok, y, bias, vec); break;
    }
    return spc_launch_status();
}

/* ---- transposed product ------------------------------------------------------------ */

template <int FMT>
__global__ void __launch_bounds__(MT_THREADS)
k_matmul_t(const sp_weight w, int64_t row0, int64_t n_in, const float *__restrict__ x,
           int64_t x_stride, int64_t n_tok, float *__restrict__ y, int64_t y_stride,
           const float *__restrict__ bias)
{
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
#define MT_LAUNCH(F) k_matmul_t<F><<<grid, MT_THREADS, 0, s>>>(wv, row0, n_in, x, x_stride, n_tok, y, y_stride, bias)
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
    k_weight_rows<<<grid, 256, 0, (cudaStream_t)stream>>>(*w, row_ids, n, out);
    return spc_launch_status();
}
