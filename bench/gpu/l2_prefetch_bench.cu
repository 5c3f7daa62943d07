/* l2_prefetch_bench.cu: whether a weight matrix prefetched into L2 while the memory is idle
 * is then read faster, and what each way of prefetching costs (issue 11: a decode step's
 * short kernels leave the DRAM idle for tens of microseconds a layer).
 *
 * A "read" is a bandwidth-bound pass over a matrix of `mb` MB (each warp 16-byte loads,
 * evict-first as decode.cuh's spc_ldg16_stream, summed so nothing is optimized away), on
 * all SMs (4 blocks of 256 threads an SM). Before each timed read the L2 is flushed by
 * writing 256 MB elsewhere. Cases:
 *   cold            the read alone
 *   again           the read right after an identical read (what L2 keeps of it)
 *   tma B/C         flushed, then a kernel of B blocks issuing cp.async.bulk.prefetch.L2 of
 *                   C bytes each, synchronized, then the read (and the prefetch kernel's time)
 *   line B          the same with prefetch.global.L2 of each 128-byte line, B blocks
 *   spin+side       flushed, a 10 us spin kernel on stream 1 with the prefetch (tma) on
 *                   stream 2 started with it, then the read on stream 1: the overlap the
 *                   engine would get, against spin then read with no prefetch
 *   nvcc -O3 -std=c++17 -arch=sm_90a bench/gpu/l2_prefetch_bench.cu -o l2pf && ./l2pf [mb...] */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_check.cuh"

__global__ void k_read(const uint4 *p, size_t n16, float *out)
{
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    uint32_t acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++)
            asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                         : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                         : "l"(p + i + u * stride), "l"(pol));
#pragma unroll
        for (int u = 0; u < 4; u++)
            acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n16; i += stride) {
        const uint4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u)
        out[0] = 1.0f;
}

__global__ void k_flush(uint4 *p, size_t n16)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x)
        p[i] = make_uint4((uint32_t)i, 1, 2, 3);
}

__global__ void k_pf_tma(const unsigned char *p, size_t bytes, unsigned chunk)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x * chunk;
    for (size_t o = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * chunk; o < bytes; o += stride) {
        const size_t len = bytes - o < chunk ? bytes - o : chunk;
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + o), "r"((unsigned)len) : "memory");
    }
}

__global__ void k_pf_line(const unsigned char *p, size_t bytes)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x * 128;
    for (size_t o = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 128; o < bytes; o += stride)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p + o));
}

__global__ void k_spin(long long ns)
{
    const long long t0 = clock64();
    const long long cycles = ns * 198 / 100; /* about 1.98 GHz */
    while (clock64() - t0 < cycles) {
    }
}

static int g_sms;
static float *g_out;
static uint4 *g_flush;
static const size_t FLUSH16 = (256u << 20) / 16;

static void flush(cudaStream_t s)
{
    k_flush<<<g_sms * 4, 256, 0, s>>>(g_flush, FLUSH16);
}

static void read_all(cudaStream_t s, const void *w, size_t bytes)
{
    k_read<<<g_sms * 4, 256, 0, s>>>((const uint4 *)w, bytes / 16, g_out);
}

/* Median of `reps` timings of `body` between two events on s; `pre` runs untimed first. */
template <typename Pre, typename Body>
static float timed(cudaStream_t s, int reps, Pre pre, Body body)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    float t[32];
    for (int r = 0; r < reps; r++) {
        pre();
        CK(cudaStreamSynchronize(s));
        CK(cudaEventRecord(a, s));
        body();
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&t[r], a, b));
    }
    for (int i = 0; i < reps; i++)
        for (int j = i + 1; j < reps; j++)
            if (t[j] < t[i]) {
                float x = t[i];
                t[i] = t[j], t[j] = x;
            }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return t[reps / 2] * 1000.0f; /* us */
}

int main(int argc, char **argv)
{
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    g_sms = prop.multiProcessorCount;
    printf("%s, %d SMs, L2 %d MB, persisting max %d MB\n", prop.name, g_sms, prop.l2CacheSize >> 20,
           prop.persistingL2CacheMaxSize >> 20);
    CK(cudaMalloc(&g_out, 4));
    CK(cudaMalloc(&g_flush, FLUSH16 * 16));
    cudaStream_t s, s2;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t ev;
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    const int reps = 9;
    double mbs[8] = {8.4, 23.6, 29.5, 40};
    int n_mb = 4;
    if (argc > 1) {
        n_mb = argc - 1 < 8 ? argc - 1 : 8;
        for (int i = 0; i < n_mb; i++)
            mbs[i] = atof(argv[1 + i]);
    }
    for (int m = 0; m < n_mb; m++) {
        const size_t bytes = (size_t)(mbs[m] * 1e6) / 16 * 16;
        unsigned char *w;
        CK(cudaMalloc(&w, bytes));
        CK(cudaMemset(w, 1, bytes));
        auto fl = [&] { flush(s); };
        const float cold = timed(s, reps, fl, [&] { read_all(s, w, bytes); });
        const float again = timed(s, reps, [&] { flush(s); read_all(s, w, bytes); }, [&] { read_all(s, w, bytes); });
        printf("%.1f MB: cold %.1f us (%.2f TB/s), again %.1f us (%.2f TB/s)\n", mbs[m], cold,
               bytes / cold / 1e6, again, bytes / again / 1e6);
        const int blocks[3] = {g_sms, 2 * g_sms, 8};
        const unsigned chunks[3] = {4096, 16384, 65536};
        for (int bi = 0; bi < 3; bi++)
            for (int ci = 0; ci < 3; ci++) {
                const int B = blocks[bi];
                const unsigned C = chunks[ci];
                auto pf = [&] { k_pf_tma<<<B, 32, 0, s>>>(w, bytes, C); };
                const float tpf = timed(s, reps, fl, pf);
                const float after = timed(s, reps, [&] { flush(s); pf(); }, [&] { read_all(s, w, bytes); });
                printf("  tma %4d blocks x 32, %5u B: prefetch kernel %.1f us, read after %.1f us (%.2f TB/s)\n",
                       B, C, tpf, after, bytes / after / 1e6);
            }
        for (int bi = 0; bi < 2; bi++) {
            const int B = blocks[bi];
            auto pf = [&] { k_pf_line<<<B, 256, 0, s>>>(w, bytes); };
            const float tpf = timed(s, reps, fl, pf);
            const float after = timed(s, reps, [&] { flush(s); pf(); }, [&] { read_all(s, w, bytes); });
            printf("  line %4d blocks x 256: prefetch kernel %.1f us, read after %.1f us (%.2f TB/s)\n", B,
                   tpf, after, bytes / after / 1e6);
        }
        for (int spin_us = 5; spin_us <= 15; spin_us += 5) {
            const float plain = timed(s, reps, fl, [&] {
                k_spin<<<1, 32, 0, s>>>(spin_us * 1000);
                read_all(s, w, bytes);
            });
            const float side = timed(s, reps, fl, [&] {
                CK(cudaEventRecord(ev, s));
                CK(cudaStreamWaitEvent(s2, ev, 0));
                k_pf_tma<<<g_sms, 32, 0, s2>>>(w, bytes, 16384);
                k_spin<<<1, 32, 0, s>>>(spin_us * 1000);
                read_all(s, w, bytes);
                CK(cudaEventRecord(ev, s2));
                CK(cudaStreamWaitEvent(s, ev, 0));
            });
            const float side_line = timed(s, reps, fl, [&] {
                CK(cudaEventRecord(ev, s));
                CK(cudaStreamWaitEvent(s2, ev, 0));
                k_pf_line<<<g_sms, 256, 0, s2>>>(w, bytes);
                k_spin<<<1, 32, 0, s>>>(spin_us * 1000);
                read_all(s, w, bytes);
                CK(cudaEventRecord(ev, s2));
                CK(cudaStreamWaitEvent(s, ev, 0));
            });
            printf("  spin %d us then read: %.1f us; with a side-stream prefetch: tma %.1f us, line %.1f us\n",
                   spin_us, plain, side, side_line);
        }
        CK(cudaFree(w));
    }
    return 0;
}
