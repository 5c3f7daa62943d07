/* cuda_test_harness.h: what every CUDA kernel test file shares — the stream and the
 * have-a-GPU flag (set by the file's main), NEED_GPU (skip without a device), CK (fail on a
 * CUDA error, named), a seeded xorshift generator (CUDA_TEST_SEED, defined before this
 * header, picks the sequence) and device buffers: copies to and from the host and
 * NaN-poisoned outputs, bit comparisons of results, random fills, and
 * the cmocka group setup that opens the device. One test file per executable includes it. */
#ifndef SPECULA_TESTS_CUDA_TEST_HARNESS_H
#define SPECULA_TESTS_CUDA_TEST_HARNESS_H

#include "kernels/cuda/cuda_ops.h"
#include "util/dtype.h"

#include <stdio.h>
#include <stdlib.h>

#ifndef CUDA_TEST_SEED
#define CUDA_TEST_SEED 0x9e3779b97f4a7c15ull
#endif

static void *g_stream;
static int g_have_gpu = -1;

#define NEED_GPU()                                                                         \
    do {                                                                                   \
        if (!g_have_gpu) {                                                                 \
            printf("no CUDA device: skipped\n");                                           \
            skip();                                                                        \
        }                                                                                  \
    } while (0)

#define CK(call)                                                                           \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        if (rc_)                                                                           \
            fail_msg("%s: %s (%d)", #call, spc_error_string(rc_), rc_);                    \
    } while (0)

static uint64_t g_rng = CUDA_TEST_SEED;

static inline uint32_t rnd32(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}

/* Uniform in [-1, 1). */
static inline float frand(void) { return (float)((double)rnd32() / 2147483648.0 - 1.0); }

static inline void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    CK(spc_malloc(&p, bytes ? bytes : 4));
    return p;
}

static inline void *dev_from(const void *h, size_t bytes)
{
    void *p = dev_alloc(bytes);
    if (bytes)
        CK(spc_memcpy_h2d_sync(g_stream, p, h, bytes));
    return p;
}

/* A device buffer of n floats poisoned with NaN (every output must be written). */
static inline float *dev_poison(int64_t n)
{
    float *p = dev_alloc((size_t)n * 4);
    if (n)
        CK(spc_memset(g_stream, p, 0xff, (size_t)n * 4));
    return p;
}

static inline void to_host(void *h, const void *d, size_t bytes)
{
    CK(spc_stream_sync(g_stream));
    if (bytes)
        CK(spc_memcpy_d2h_sync(g_stream, h, d, bytes));
}

/* A malloc'd host copy of bytes of device memory. */
static inline void *host_copy(const void *d, size_t bytes)
{
    void *h = malloc(bytes ? bytes : 4);
    to_host(h, d, bytes);
    return h;
}

/* A malloc'd host copy of n floats of device memory. */
static inline float *host_of(const float *d, int64_t n) { return (float *)host_copy(d, (size_t)n * 4); }

/* Equal bits (two NaNs count as equal: the GPU's canonical NaN has other payload bits). */
static inline int same_bits(float a, float b)
{
    if (a != a && b != b)
        return 1;
    return sp_f32_bits(a) == sp_f32_bits(b);
}

/* How many of n floats differ from b's in their bits. */
static inline int64_t count_diff_bits(const float *a, const float *b, int64_t n)
{
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++)
        d += !same_bits(a[i], b[i]);
    return d;
}

static inline void fill(float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = frand() * scale;
}

/* cmocka group setup / teardown: without a device every test skips (NEED_GPU); with one,
 * device 0 and its stream are opened once and named. */
static int cuda_group_setup(void **state)
{
    (void)state;
    g_have_gpu = spc_device_count() > 0;
    if (!g_have_gpu) {
        printf("no CUDA device: skipped (every test in this file)\n");
        return 0;
    }
    spc_device_info info;
    int rc = spc_device_open(0, &info, &g_stream);
    if (rc) {
        printf("spc_device_open failed: %s\n", spc_error_string(rc));
        return -1;
    }
    printf("device: %s, cc %d.%d, %d SMs, %.1f / %.1f GiB free\n", info.name, info.cc_major,
           info.cc_minor, info.sm_count, info.free_mem / 1073741824.0, info.total_mem / 1073741824.0);
    return 0;
}

static int cuda_group_teardown(void **state)
{
    (void)state;
    if (g_have_gpu && g_stream)
        spc_stream_destroy(g_stream);
    return 0;
}

#endif
