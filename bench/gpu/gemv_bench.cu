/* gemv_bench.cu: one-token BF16 matrix-vector products (issue 11) of cuda_matmul.cu
 * (included) in TB/s, on 16-byte-aligned weights and on weights 8 bytes off (a safetensors
 * shard copied as is before exec_weights.c aligned it: the byte-load path), bit for bit
 * between two runs. A harness for trying other schedules (a persistent pipelined one
 * was tried: 0-15% per product, nothing end to end; not kept). Weights rotate through a 2.7 GB
 * pool (no L2 reuse); graphs of 40 launches, each launch alone ("back to back", PDL lets
 * the next one's first loads overlap) and after a one-block kernel that writes x
 * ("chain", as a norm before a product; the lone chain of that kernel subtracted).
 *   nvcc -O3 -std=c++17 --fmad=false -arch=sm_90a -Isrc -Iinclude bench/gpu/gemv_bench.cu */
#include "../../src/kernels/cuda/cuda_matmul.cu"

/* cuda_ops.cu's launch state, which this harness does not link: every launch a programmatic
 * dependent (as SPECULA_CUDA_PDL=all) */
int spc_pdl_enabled = 2;
int spc_sm_count = 0;
thread_local unsigned long long spc_pdl_prev_blocks = 0;


#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#include "bench_check.cuh"
#include "bench_fill.cuh"

__global__ void k_fillf(float *p, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u;
        p[i] = (float)(int)(h >> 8) / 8388608.0f - 1.0f;
    }
}

static int g_nsm;
static cudaStream_t g_s;
static unsigned char *g_pool;
static const size_t POOL = (size_t)5 << 29;

static sp_weight mkw(int64_t rows, int64_t cols, size_t off)
{
    sp_weight w;
    memset(&w, 0, sizeof w);
    w.format = SP_WF_BF16;
    w.rows = rows;
    w.cols = cols;
    w.row_bytes = (size_t)cols * 2;
    w.data = g_pool + off;
    w.global_scale = 1.0f;
    return w;
}

/* offset of launch i for a matrix of `bytes` (rotating through the pool) */
static size_t rot(size_t bytes, int i)
{
    size_t n = POOL / ((bytes + 4095) / 4096 * 4096);
    return (size_t)(i % (int)n) * ((bytes + 4095) / 4096 * 4096);
}

template <typename F> static float time_graph(F launch, int per_graph = 40, int reps = 20)
{
    cudaGraph_t gr;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(g_s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < per_graph; i++)
        launch(i);
    CK(cudaStreamEndCapture(g_s, &gr));
    CK(cudaGraphInstantiate(&ge, gr, 0));
    for (int i = 0; i < 3; i++)
        CK(cudaGraphLaunch(ge, g_s));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> ts;
    for (int r = 0; r < 5; r++) {
        CK(cudaEventRecord(a, g_s));
        for (int i = 0; i < reps; i++)
            CK(cudaGraphLaunch(ge, g_s));
        CK(cudaEventRecord(b, g_s));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        ts.push_back(ms * 1000.0f / (reps * per_graph));
    }
    CK(cudaGetLastError());
    std::sort(ts.begin(), ts.end());
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(gr);
    return ts[2]; /* median, us per launch */
}

static float *g_x, *g_y, *g_yref, *g_xsrc;

/* a one-block kernel that writes x (as the norm before a product does): the product
 * after it waits for it (PDL) before its first x read */
__global__ void k_dep(const float *__restrict__ src, float *__restrict__ dst, int n)
{
    spc_pdl_trigger();
    spc_pdl_wait();
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        dst[i] = src[i];
}

static int g_cols;
static void dep(void)
{
    spc_launch(k_dep, dim3(1), dim3(256), g_s, true, (const float *)g_xsrc, g_x, g_cols);
}

/* us per launch back to back, and per (dep, launch) pair minus a lone dep chain */
static float g_tdep;
template <typename F> static void time2(F launch, float *bb, float *ch)
{
    *bb = time_graph(launch);
    *ch = time_graph([&](int i) { dep(); launch(i); }) - g_tdep;
}

static bool same_bits(int64_t n)
{
    std::vector<uint32_t> a(n), b(n);
    CK(cudaMemcpy(a.data(), g_y, n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data(), g_yref, n * 4, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            printf("  MISMATCH at %lld: %08x vs %08x\n", (long long)i, a[i], b[i]);
            return false;
        }
    return true;
}

static void set_cols(int cols)
{
    g_cols = cols;
    g_tdep = time_graph([&](int) { dep(); });
}

/* one schedule: back to back and in a chain, TB/s */
static void row(const char *what, size_t bytes, const float *t, const float *base)
{
    printf("  %-22s %8.2f us %6.3f TB/s", what, t[0], bytes / t[0] * 1e-6);
    if (base)
        printf(" x%.2f", base[0] / t[0]);
    printf(" | chain %8.2f us %6.3f TB/s", t[1], bytes / t[1] * 1e-6);
    if (base)
        printf(" x%.2f", base[1] / t[1]);
    printf("\n");
}

/* mis: byte offset of the weights (8: the byte-load path of a misaligned checkpoint) */
static void time_mm(int64_t rows, int64_t cols, size_t mis, float *t)
{
    const size_t bytes = (size_t)rows * cols * 2;
    time2([&](int i) {
        sp_weight w = mkw(rows, cols, rot(bytes + 256, i) + mis);
        spc_matmul(g_s, &w, g_x, 1, g_y, NULL);
    }, &t[0], &t[1]);
}

static void shape_mm(int64_t rows, int64_t cols)
{
    const size_t bytes = (size_t)rows * cols * 2;
    set_cols(cols);
    printf("matmul %lld x %lld (%.1f MB), dep alone %.2f us\n", (long long)rows, (long long)cols,
           bytes * 1e-6, g_tdep);
    sp_weight w0 = mkw(rows, cols, 0);
    float tal[2], tmis[2];
    CK((cudaError_t)spc_matmul(g_s, &w0, g_x, 1, g_yref, NULL));
    time_mm(rows, cols, 0, tal);
    time_mm(rows, cols, 8, tmis);
    CK(cudaMemset(g_y, 0xff, rows * 4));
    CK((cudaError_t)spc_matmul(g_s, &w0, g_x, 1, g_y, NULL));
    CK(cudaStreamSynchronize(g_s));
    bool ok = same_bits(rows);
    row("weights +8 bytes", bytes, tmis, NULL);
    row(ok ? "aligned (rerun: same bits)" : "aligned RERUN DIFFERS", bytes, tal, tmis);
}

static void time_glu(int64_t rows, int64_t cols, size_t mis, float *t)
{
    const size_t bytes = (size_t)rows * cols * 2;
    time2([&](int i) {
        size_t o = rot(2 * bytes + 256, i) + mis;
        sp_weight a = mkw(rows, cols, o), b = mkw(rows, cols, o + bytes);
        spc_matmul_swiglu(g_s, &a, &b, g_x, 1, g_y);
    }, &t[0], &t[1]);
}

static void shape_glu(int64_t rows, int64_t cols)
{
    const size_t bytes = (size_t)rows * cols * 2;
    set_cols(cols);
    printf("swiglu 2 x %lld x %lld (%.1f MB)\n", (long long)rows, (long long)cols, 2 * bytes * 1e-6);
    sp_weight wg = mkw(rows, cols, 0), wu = mkw(rows, cols, bytes);
    float tal[2], tmis[2];
    CK((cudaError_t)spc_matmul_swiglu(g_s, &wg, &wu, g_x, 1, g_yref));
    time_glu(rows, cols, 0, tal);
    time_glu(rows, cols, 8, tmis);
    CK(cudaMemset(g_y, 0xff, rows * 4));
    CK((cudaError_t)spc_matmul_swiglu(g_s, &wg, &wu, g_x, 1, g_y));
    CK(cudaStreamSynchronize(g_s));
    bool ok = same_bits(rows);
    row("weights +8 bytes", 2 * bytes, tmis, NULL);
    row(ok ? "aligned (rerun: same bits)" : "aligned RERUN DIFFERS", 2 * bytes, tal, tmis);
}

int main(int argc, char **argv)
{
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    g_nsm = p.multiProcessorCount;
    printf("%s, %d SMs, L2 %d MB\n", p.name, g_nsm, p.l2CacheSize >> 20);
    CK(cudaStreamCreateWithFlags(&g_s, cudaStreamNonBlocking));
    CK(cudaMalloc(&g_pool, POOL));
    k_fill_bf16<<<4096, 256>>>((unsigned short *)g_pool, POOL / 2, 12345u);
    CK(cudaMalloc(&g_x, 32768 * 4));
    CK(cudaMalloc(&g_y, 262144 * 4));
    CK(cudaMalloc(&g_yref, 262144 * 4));
    k_fillf<<<64, 256>>>(g_x, 32768, 777u);
    CK(cudaMalloc(&g_xsrc, 32768 * 4));
    CK(cudaMemcpy(g_xsrc, g_x, 32768 * 4, cudaMemcpyDeviceToDevice));
    CK(cudaDeviceSynchronize());
    { /* copy bandwidth */
        unsigned char *a, *b;
        const size_t n = (size_t)512 << 20;
        CK(cudaMalloc(&a, n));
        CK(cudaMalloc(&b, n));
        float t = time_graph([&](int) { cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, g_s); }, 4, 5);
        printf("d2d copy 512 MB: %.1f us, %.3f TB/s (read + write)\n", t, 2.0 * n / t * 1e-6);
        cudaFree(a);
        cudaFree(b);
    }
    const char *only = argc > 1 ? argv[1] : "";
    if (!*only || strchr(only, 'a')) shape_mm(2048, 2048);
    if (!*only || strchr(only, 'b')) shape_mm(8192, 2048);
    if (!*only || strchr(only, 'c')) shape_mm(2048, 8192);
    if (!*only || strchr(only, 'd')) shape_mm(32000, 2048);
    if (!*only || strchr(only, 'e')) shape_mm(3072, 2048);
    if (!*only || strchr(only, 'f')) shape_glu(8192, 2048);
    if (!*only || strchr(only, 'g')) shape_mm(201088, 2880);
    if (!*only || strchr(only, 'h')) shape_mm(2880, 4096);
    return 0;
}
