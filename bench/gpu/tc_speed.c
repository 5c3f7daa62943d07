/* tc_speed.c: the fast-precision tensor-core products (spc_matmul_tc, cuda_tc.cu) timed on
 * llama-1B's matrix shapes at 1, 4 and 512 tokens (gate/up as the fused SwiGLU product):
 * microseconds a call, weight bytes per second and TFLOP/s. A benchmark, not a test: it
 * prints and asserts nothing.
 *
 *   tc_speed [--reps R]
 *
 * Weights are random BF16 reused call after call (a matrix under ~50 MB stays in an H100's
 * L2: the few-token figures of the small shapes are upper bounds; `specula bench` and ncu
 * give the model's). Exits 77 without a GPU or below compute capability 8.0. */
#include "kernels/cuda/cuda_ops.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "tc_speed: %s: %s (%d)\n", what, spc_error_string(rc), rc);
    return 1;
}

/* A device BF16 matrix of small random values (1/128 <= |w| < 1/64). */
static int random_bf16(int64_t rows, int64_t cols, void **out)
{
    const size_t n = (size_t)(rows * cols);
    uint16_t *h = malloc(n * 2);
    if (!h)
        return 2; /* cudaErrorMemoryAllocation */
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        h[i] = (uint16_t)(0x3c00u | (s & 0x807fu)); /* any sign and mantissa, exponent 2^-7 */
    }
    int rc = spc_malloc(out, n * 2);
    if (!rc)
        rc = spc_memcpy_h2d_sync(NULL, *out, h, n * 2);
    free(h);
    return rc;
}

int main(int argc, char **argv)
{
    int reps = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc && atoi(argv[i + 1]) > 0)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--reps R]\n", argv[0]);
            return 2;
        }
    }
    if (spc_device_count() < 1) {
        printf("tc_speed: no CUDA device\n");
        return 77;
    }
    void *stream = NULL;
    spc_device_info info;
    int rc = spc_device_open(0, &info, &stream);
    if (rc)
        return fail("spc_device_open", rc);
    if (!spc_tc_supported()) {
        printf("tc_speed: %s is below compute capability 8.0\n", info.name);
        return 77;
    }
    printf("%s, %d reps a shape, many tokens on %s\n", info.name, reps, spc_tc_gemm_name());
    /* llama-1B: o_proj, Q/K/V as one matrix, gate/up + SwiGLU (two 8192-row matrices),
     * down, LM head */
    const int64_t shapes[][3] = {{2048, 2048, 0}, {3072, 2048, 0}, {8192, 2048, 1},
                                 {2048, 8192, 0}, {32000, 2048, 0}};
    const int64_t toks[] = {1, 4, 512};
    void *scratch = NULL;
    const size_t scratch_bytes = (size_t)32 << 20;
    if ((rc = spc_malloc(&scratch, scratch_bytes)) != 0)
        return fail("scratch", rc);
    for (int si = 0; si < 5; si++) {
        const int64_t N = shapes[si][0], K = shapes[si][1], sw = shapes[si][2];
        const int64_t rows = sw ? 2 * N : N;
        void *wd = NULL;
        if ((rc = random_bf16(rows, K, &wd)) != 0)
            return fail("weights", rc);
        sp_weight w[2];
        memset(w, 0, sizeof w);
        for (int i = 0; i < 2; i++) {
            w[i].format = SP_WF_BF16, w[i].rows = N, w[i].cols = K;
            w[i].data = (unsigned char *)wd + (sw ? (size_t)(i * N * K) * 2 : 0);
            w[i].row_bytes = (size_t)K * 2, w[i].global_scale = 1.0f;
        }
        for (int ti = 0; ti < 3; ti++) {
            const int64_t nt = toks[ti];
            void *dx = NULL, *dy = NULL;
            if ((rc = random_bf16(nt, 2 * K, &dx)) || (rc = spc_malloc(&dy, (size_t)(nt * N) * 4)))
                return fail("setup", rc);
            double t0 = 0;
            for (int r = -2; r < reps && !rc; r++) { /* two warm-up calls */
                if (r == 0 && !(rc = spc_stream_sync(stream)))
                    t0 = now_s();
                rc = sw ? spc_matmul_tc_swiglu(stream, &w[0], &w[1], dx, nt, dy, scratch,
                                               scratch_bytes)
                        : spc_matmul_tc(stream, &w[0], dx, nt, dy, NULL, scratch, scratch_bytes);
            }
            if (rc || (rc = spc_stream_sync(stream)))
                return fail("spc_matmul_tc", rc);
            const double s = (now_s() - t0) / reps;
            printf("tc %5lld x %5lld%s, %3lld tokens: %8.1f us, %7.0f GB/s, %6.1f TFLOP/s\n",
                   (long long)rows, (long long)K, sw ? " swiglu" : "", (long long)nt, s * 1e6,
                   (double)rows * K * 2 / s / 1e9, 2.0 * (double)rows * K * nt / s / 1e12);
            spc_free(dx);
            spc_free(dy);
        }
        spc_free(wd);
    }
    spc_free(scratch);
    spc_stream_destroy(stream);
    return 0;
}
