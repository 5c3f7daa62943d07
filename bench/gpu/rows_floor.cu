/* rows_floor.cu: how close the fast BF16 rows kernel (k_tc_rows, through
 * spc_matmul_tc_multi) comes to what one launch can read. For gpt-oss's one-token Q/K/V
 * (4096 + 512 + 512 rows x 2880, one launch), o (2880 x 4096) and LM head (201088 x 2880)
 * and llama-1B's Q/K/V and o: microseconds a launch in CUDA graphs of 40 launches, the
 * weights rotating through copies (no L2 reuse),
 *   - alone: product after product (no programmatic dependence, as the engine's default
 *     after a kernel that fills the device);
 *   - chain: each product a programmatic dependent of a one-block kernel that writes x
 *     (as the norm before Q/K/V), that kernel's own chain subtracted;
 *   - floor: a kernel that only streams the same bytes (16-byte loads, several in flight
 *     a thread, grid-stride), in a few shapes of grid: the best of them is what a launch
 *     of that many bytes can take;
 *   - reads only: the rows kernel's own pattern (its grid of 8-warp blocks walking 16-row
 *     groups, a warp's slices of 256 bytes a row, 1-4 items' loads at once) with nothing
 *     computed: what its schedule of reads could reach; also through cp.async into its
 *     rings of shared-memory slots, alone and with the kernel's per-item work added piece
 *     by piece (fragment reads and mma chain, then the fold's barriers).
 * A benchmark: it prints and asserts nothing. Built with the CUDA library (CMake target
 * rows_floor, packed by bench/gpu/pack-perf-build.sh). What it found: docs/BENCHMARKS_GPU.md,
 * "The BF16 rows kernel against a kernel that only reads" and "The rows kernel's ring on a
 * 128-byte line". */
#include "kernels/cuda/cuda_ops.h"

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/cuda_tc.cuh"

#include "bench_check.cuh"
#include "bench_fill.cuh"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern int spc_pdl_enabled; /* cuda_ops.cu: 0 none, 2 every launch a dependent */

static const int LAUNCHES = 40, REPS = 5;

/* the norm's stand-in: one block writes x (after letting its dependent launch) */
__global__ void k_write_x(float *x, int64_t n, int seed)
{
    asm volatile("griddepcontrol.launch_dependents;");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        x[i] = (float)((i * 7 + seed) % 13) * 0.0625f - 0.375f;
}

/* reads n16 16-byte words, U in flight a thread */
template <int U> __global__ void k_stream(const uint4 *__restrict__ p, size_t n16, unsigned *out)
{
    const size_t T = (size_t)gridDim.x * blockDim.x;
    uint32_t acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16; i += U * T) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            v[u] = i + u * T < n16 ? __ldcs(p + i + u * T) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < U; u++)
            acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x9e3779b9u) /* never, in practice: keeps the loads */
        out[blockIdx.x] = acc;
}


/* the rows kernel's reads alone: block b walks 16-row groups b, b + gridDim.x, ..; its warp
 * w slices w, w + 8, .. of SEGB bytes a row (one item: 16 row segments, half a warp or
 * less a segment), D items' loads issued together, then consumed; nothing computed */
template <int D, int SEGB>
__global__ void k_pattern(const unsigned char *__restrict__ w, int64_t rows, int64_t row_bytes,
                          unsigned *out)
{
    constexpr int PER = 16 * SEGB / 16 / 32; /* 16-byte loads a lane an item */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, W = blockDim.x >> 5;
    const int64_t groups = (rows + 15) / 16, S = (row_bytes + SEGB - 1) / SEGB;
    const int64_t per_group = (S - warp + W - 1) / W; /* the warp's items of a group */
    const int64_t n = per_group * ((groups - blockIdx.x + gridDim.x - 1) / gridDim.x);
    uint32_t acc = 0;
    for (int64_t base = 0; base < n; base += D) {
        uint4 v[D][PER];
#pragma unroll
        for (int d = 0; d < D; d++) {
            const int64_t it = base + d, g = blockIdx.x + (it / per_group) * gridDim.x;
            const int64_t s = warp + (it % per_group) * W;
#pragma unroll
            for (int i = 0; i < PER; i++) {
                const int idx = lane + 32 * i, r = idx / (SEGB / 16), c = idx % (SEGB / 16);
                const int64_t row = g * 16 + r, cb = s * SEGB + c * 16;
                v[d][i] = it < n && row < rows && cb < row_bytes
                              ? __ldcs(reinterpret_cast<const uint4 *>(w + row * row_bytes + cb))
                              : make_uint4(0, 0, 0, 0);
            }
        }
#pragma unroll
        for (int d = 0; d < D; d++)
#pragma unroll
            for (int i = 0; i < PER; i++)
                acc ^= v[d][i].x ^ v[d][i].y ^ v[d][i].z ^ v[d][i].w;
    }
    if (acc == 0x9e3779b9u)
        out[blockIdx.x] = acc;
}

/* k_pattern's reads of 256 bytes a row through cp.async into a ring of D 4 KB slots a warp,
 * as the rows kernel copies its weights: item it + D issued once item it has arrived and
 * been read (one word a lane); HINT: with the L2 evict-first hint (the copies of the rows
 * kernel's edge items). Nothing computed, or (MMA) the rows kernel's fragment reads of
 * the item and its chain of 8 mma against a fixed x, with (SYNC 1) the fold's two barriers
 * after each of the block's groups, or (SYNC 2) also x's fragments from shared memory and
 * the slice sums stored there and folded between the barriers (128 threads, as NT 1). */
template <int D, bool HINT, bool MMA, int SYNC = 0>
__global__ void k_pattern_cp(const unsigned char *__restrict__ w, int64_t rows, int64_t row_bytes,
                             unsigned *out)
{
    /* the rings on 128-byte lines, as the rows kernel's since 4a5c6a4 (16 bytes past one,
     * its copies cost three times the L2 requests) */
    extern __shared__ __align__(128) unsigned char rf_ring[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, W = blockDim.x >> 5;
    unsigned char *ring = rf_ring + warp * D * 4096;
    /* SYNC 2: the slice sums through shared memory (after the rings: 64 slots of 512 bytes)
     * and the x fragments from a staged row (after them) */
    float(*part)[4][32] = reinterpret_cast<float(*)[4][32]>(rf_ring + 8 * D * 4096);
    unsigned char *xs = rf_ring + 8 * D * 4096 + 64 * 512;
    if (SYNC == 2) {
        for (int i = threadIdx.x; i < 6144 / 4; i += blockDim.x)
            reinterpret_cast<uint32_t *>(xs)[i] = 0x3f803f80u ^ (uint32_t)i;
        __syncthreads();
    }
    const int64_t groups = (rows + 15) / 16, S = (row_bytes + 255) / 256;
    const int64_t per_group = (S - warp + W - 1) / W;
    const int64_t n = per_group * ((groups - blockIdx.x + gridDim.x - 1) / gridDim.x);
    auto issue = [&](int64_t it, unsigned char *slot) {
        if (it < n) {
            const int64_t g = blockIdx.x + (it / per_group) * gridDim.x;
            const int64_t sl = warp + (it % per_group) * W;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int idx = lane + 32 * i, r = idx / 16, c = idx % 16;
                const int64_t row = g * 16 + r, cb = sl * 256 + c * 16;
                const bool ok = row < rows && cb < row_bytes;
                unsigned char *dst = slot + r * 256 + ((c ^ (r & 7)) << 4);
                const unsigned char *src = ok ? w + row * row_bytes + cb : w;
                if (HINT)
                    spc_cp16_or_zero_stream(dst, src, ok);
                else
                    spc_cp16_or_zero(dst, src, ok);
            }
        }
        spc_cp_commit();
    };
    uint32_t acc = 0;
#pragma unroll
    for (int d = 0; d < D; d++)
        issue(d, ring + d * 4096);
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    const int g = lane >> 2, q = lane & 3;
    const uint32_t b[4] = {0x3f803f80u ^ (uint32_t)lane, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u};
    for (int64_t it = 0; it < n; it++) {
        spc_cp_wait<D - 1>();
        __syncwarp();
        unsigned char *slot = ring + (int)(it % D) * 4096;
        if (MMA) { /* the rows kernel's fragment reads, then its chain of 8 mma (x fixed) */
            uint4 lo[4], hi[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int cc = ((4 * u + q) ^ g) << 4;
                lo[u] = *reinterpret_cast<const uint4 *>(slot + g * 256 + cc);
                hi[u] = *reinterpret_cast<const uint4 *>(slot + (g + 8) * 256 + cc);
            }
            __syncwarp();
            issue(it + D, slot);
            float d[4] = {0.f, 0.f, 0.f, 0.f};
            const int64_t k = warp + (it % per_group) * W; /* the item's slice */
#pragma unroll
            for (int u = 0; u < 4; u++) {
                if (SYNC == 2) {
                    const uint4 v = *reinterpret_cast<const uint4 *>(
                        xs + ((k * 4 + u) % 90) * 64 + (lane & 3) * 16);
                    const uint32_t bx[4] = {v.x, v.y, v.z, v.w};
                    tc_mma2(d, lo[u], hi[u], bx);
                } else {
                    tc_mma2(d, lo[u], hi[u], b);
                }
            }
            if (SYNC == 2) {
#pragma unroll
                for (int r = 0; r < 4; r++)
                    part[k][r][lane] = d[r];
            } else {
#pragma unroll
                for (int r = 0; r < 4; r++)
                    c[r] = __fadd_rn(c[r], d[r]);
            }
            if (SYNC && it % per_group == per_group - 1) { /* the fold's two barriers a group */
                __syncthreads();
                if (SYNC == 2 && threadIdx.x < 128)
                    for (int64_t kk = 0; kk < S; kk++)
                        c[0] = __fadd_rn(c[0], part[kk][threadIdx.x >> 5][lane]);
                __syncthreads();
            }
        } else {
            const uint4 v = *reinterpret_cast<const uint4 *>(slot + lane * 16);
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
            __syncwarp();
            issue(it + D, slot);
        }
    }
    spc_cp_wait<0>();
    acc ^= __float_as_uint(c[0] + c[1] + c[2] + c[3]);
    if (acc == 0x9e3779b9u)
        out[blockIdx.x] = acc;
}

static void launch_pdl(void (*k)(float *, int64_t, int), cudaStream_t s, float *x, int64_t n)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1);
    cfg.blockDim = dim3(256);
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, k, x, n, 3));
}

struct shape {
    const char *name;
    int n;           /* matrices in the launch */
    int64_t rows[3]; /* each */
    int64_t cols;
};

/* us a launch of a recorded sequence (rec called LAUNCHES times with i) */
template <typename F> static double time_graph(void *stream, F rec)
{
    cudaStream_t s = (cudaStream_t)stream;
    void *exec = NULL;
    CK(spc_capture_begin(stream));
    for (int i = 0; i < LAUNCHES; i++)
        rec(i);
    CK(spc_capture_end(stream, &exec));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(spc_graph_launch(stream, exec)); /* warm-up */
    CK(cudaEventRecord(a, s));
    for (int r = 0; r < REPS; r++)
        CK(spc_graph_launch(stream, exec));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    spc_graph_free(exec);
    return 1e3 * ms / (REPS * LAUNCHES);
}

int main(void)
{
    if (spc_device_count() < 1) {
        printf("rows_floor: no CUDA device\n");
        return 77;
    }
    void *stream = NULL;
    spc_device_info info;
    CK(spc_device_open(0, &info, &stream));
    if (!spc_tc_supported()) {
        printf("rows_floor: %s has no tensor-core path\n", info.name);
        return 77;
    }
    cudaStream_t s = (cudaStream_t)stream;
    const int sms = info.sm_count;
    printf("%s, %d SMs; graphs of %d launches, %d reps\n", info.name, sms, LAUNCHES, REPS);
    const shape shapes[] = {
        {"gpt-oss Q/K/V 5120x2880", 3, {4096, 512, 512}, 2880},
        {"gpt-oss o 2880x4096", 1, {2880, 0, 0}, 4096},
        {"gpt-oss LM head 201088x2880", 1, {201088, 0, 0}, 2880},
        {"llama-1B Q/K/V 3072x2048", 3, {2048, 512, 512}, 2048},
        {"llama-1B o 2048x2048", 1, {2048, 0, 0}, 2048},
    };
    float *x = NULL, *y = NULL;
    unsigned *sink = NULL;
    CK(spc_malloc((void **)&x, 8192 * 4));
    CK(spc_malloc((void **)&y, (size_t)201088 * 4 * 4));
    CK(spc_malloc((void **)&sink, 4096 * 4));
    k_write_x<<<1, 256, 0, s>>>(x, 8192, 1);
    for (const shape &sh : shapes) {
        int64_t rows = 0;
        for (int i = 0; i < sh.n; i++)
            rows += sh.rows[i];
        const size_t bytes = (size_t)rows * sh.cols * 2;
        /* copies enough to pass 512 MB (L2 is 50-60 MB), at least 2 */
        int copies = (int)((512u << 20) / bytes) + 1;
        copies = copies < 2 ? 2 : copies > 16 ? 16 : copies;
        unsigned char *pool = NULL;
        CK(spc_malloc((void **)&pool, bytes * copies));
        k_fill_bf16<<<sms * 8, 256, 0, s>>>((unsigned short *)pool, bytes * copies / 2, 0x1234u);
        CK(spc_stream_sync(stream));
        auto product = [&](int i) {
            sp_weight w[3];
            const sp_weight *ws[3];
            float *ys[3];
            size_t off = bytes * (size_t)(i % copies);
            float *yo = y;
            for (int m = 0; m < sh.n; m++) {
                memset(&w[m], 0, sizeof w[m]);
                w[m].format = SP_WF_BF16, w[m].rows = sh.rows[m], w[m].cols = sh.cols;
                w[m].data = pool + off, w[m].row_bytes = (size_t)sh.cols * 2;
                w[m].global_scale = 1.0f;
                off += (size_t)sh.rows[m] * sh.cols * 2;
                ws[m] = &w[m], ys[m] = yo, yo += sh.rows[m];
            }
            CK(spc_matmul_tc_multi(stream, sh.n, ws, x, 1, ys, NULL, NULL, 0));
        };
        spc_pdl_enabled = 0;
        const double alone = time_graph(stream, product);
        spc_pdl_enabled = 2;
        const double chain = time_graph(stream, [&](int i) {
            launch_pdl(k_write_x, s, x, sh.cols);
            product(i);
        });
        const double norm = time_graph(stream, [&](int) { launch_pdl(k_write_x, s, x, sh.cols); });
        spc_pdl_enabled = 0;
        printf("%-28s %7.1f MB  rows kernel: alone %7.2f us %5.2f TB/s, "
               "chain %7.2f us %5.2f TB/s\n",
               sh.name, bytes / 1e6, alone, bytes / alone / 1e6, chain - norm,
               bytes / (chain - norm) / 1e6);
        /* the floor: a few grids and depths */
        const int cfg[][3] = {{2, 256, 4}, {4, 256, 4}, {4, 256, 8}, {8, 256, 4}, {16, 128, 4}};
        double best = 1e30;
        for (const auto &c : cfg) {
            const double t = time_graph(stream, [&](int i) {
                const uint4 *p = (const uint4 *)(pool + bytes * (size_t)(i % copies));
                if (c[2] == 8)
                    k_stream<8><<<sms * c[0], c[1], 0, s>>>(p, bytes / 16, sink);
                else
                    k_stream<4><<<sms * c[0], c[1], 0, s>>>(p, bytes / 16, sink);
            });
            printf("    floor %2d x %3d threads, %d in flight: %7.2f us %5.2f TB/s\n", c[0], c[1],
                   c[2], t, bytes / t / 1e6);
            best = t < best ? t : best;
        }
        printf("    rows kernel alone / best floor: %.2f\n", alone / best);
        /* the rows kernel's reads alone, as one matrix of all the rows */
        typedef void (*pattern_kernel)(const unsigned char *, int64_t, int64_t, unsigned *);
        auto pattern = [&](const char *what, pattern_kernel k, int blocks, int threads) {
            const double t = time_graph(stream, [&](int i) {
                k<<<blocks, threads, 0, s>>>(pool + bytes * (size_t)(i % copies), rows,
                                             sh.cols * 2, sink);
            });
            printf("    reads only, %-34s %7.2f us %5.2f TB/s\n", what, t, bytes / t / 1e6);
        };
        const int grp = (int)((rows + 15) / 16), b2 = grp < 2 * sms ? grp : 2 * sms;
        const int b3 = grp < 3 * sms ? grp : 3 * sms, b4 = grp < 4 * sms ? grp : 4 * sms;
        pattern("8 warps, 256 B x 16 rows, 2 at once", k_pattern<2, 256>, b2, 256);
        pattern("8 warps, 256 B x 16 rows, 3 at once", k_pattern<3, 256>, b2, 256);
        pattern("8 warps, 256 B x 16 rows, 4 at once", k_pattern<4, 256>, b2, 256);
        pattern("8 warps, 512 B x 16 rows, 2 at once", k_pattern<2, 512>, b2, 256);
        pattern("8 warps, 1 KB x 16 rows, 1 at once", k_pattern<1, 1024>, b2, 256);
        pattern("8 warps x 3 blocks, 256 B, 2 at once", k_pattern<2, 256>, b3, 256);
        pattern("4 warps x 4 blocks, 256 B, 2 at once", k_pattern<2, 256>, b4, 128);
        pattern("4 warps x 4 blocks, 256 B, 4 at once", k_pattern<4, 256>, b4, 128);
        auto pattern_cp = [&](const char *what, pattern_kernel k, int d, bool fold = false) {
            const int smem = 8 * d * 4096 + (fold ? 64 * 512 + 6144 : 0);
            CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
            const double t = time_graph(stream, [&](int i) {
                k<<<b2, 256, smem, s>>>(pool + bytes * (size_t)(i % copies), rows, sh.cols * 2,
                                        sink);
            });
            printf("    reads only, %-34s %7.2f us %5.2f TB/s\n", what, t, bytes / t / 1e6);
        };
        pattern_cp("cp.async ring of 2", k_pattern_cp<2, false, false>, 2);
        pattern_cp("cp.async ring of 3", k_pattern_cp<3, false, false>, 3);
        pattern_cp("cp.async ring of 2, evict-first", k_pattern_cp<2, true, false>, 2);
        pattern_cp("ring of 2, fragments + 8 mma an item", k_pattern_cp<2, false, true>, 2);
        pattern_cp("ring of 3, fragments + 8 mma an item", k_pattern_cp<3, false, true>, 3);
        pattern_cp("ring of 2, + 8 mma, 2 barriers a group", k_pattern_cp<2, false, true, 1>, 2);
        pattern_cp("ring of 2, + x from smem, sums' fold", k_pattern_cp<2, false, true, 2>, 2,
                   true);
        CK(spc_stream_sync(stream));
        spc_free(pool);
    }
    spc_free(x);
    spc_free(y);
    spc_free(sink);
    spc_stream_destroy(stream);
    return 0;
}
