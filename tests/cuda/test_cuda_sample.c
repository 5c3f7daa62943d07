/* test_cuda_sample.c: the device's draws (cuda_sample.cu) against the host sampler
 * (runtime/sampler.c, sp_sample_row): the same token bit for bit for rows of random
 * logits with ties, -0 / +0, infinities and NaN, vocabularies from 1 to gpt-oss's 201,088,
 * every warper alone and together (top-k below, at and above the vocabulary; top-p heads
 * that fit the device's sorted head and heads the device leaves to the host, id -1, only
 * where the host's head is longer than SP_SAMPLE_HEAD), greedy rows beside sampled rows in
 * one launch, u at 0 and just below 1, and the same launch twice giving the same ids; one
 * scratch for launches of 1 to 32 rows in a random order (the kernels' counters and
 * histograms found at 0 whatever the launch before it).
 * Without a GPU every test skips. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_TEST_SEED 0x5a3c9e1177d1f00dull
#include "cuda_test_harness.h"
#include "runtime/sampler.h"

/* Logits of one row: `spread` wide, values from `distinct` levels (0: continuous), with a
 * few -0, +0, -inf, +inf (when inf) and NaN (when nan). */
static void fill_row(float *x, int64_t V, float spread, int distinct, bool inf, bool nan)
{
    for (int64_t i = 0; i < V; i++) {
        uint32_t r = rnd32();
        x[i] = distinct ? (float)((int)(r % (uint32_t)distinct)) * spread / (float)distinct
                        : frand() * spread;
        if (r % 61 == 0)
            x[i] = (r & 64) ? -0.0f : 0.0f;
        if (inf && r % 211 == 0)
            x[i] = -INFINITY;
        if (nan && r % 293 == 0)
            x[i] = NAN;
    }
    if (inf && V > 4 && rnd32() % 3 == 0)
        x[rnd32() % (uint32_t)V] = INFINITY;
}

/* One scratch for every launch of the file, zeroed once, as a backend keeps one: each
 * launch (of any number of rows) leaves its counters as it found them. */
static void *g_scratch;

/* The device's ids for rows [rows, V] with reqs against sp_sample_row's; returns how many
 * rows the device left to the host (-1), each checked to be a top-p row. */
static int check_rows(const float *x, int64_t rows, int64_t V, const sp_sample_req *reqs)
{
    float *dx = dev_from(x, (size_t)(rows * V) * sizeof(float));
    sp_sample_req *dr = dev_from(reqs, (size_t)rows * sizeof *reqs);
    int32_t *di = dev_alloc((size_t)rows * sizeof(int32_t));
    const size_t sb = spc_sample_scratch_bytes(SPC_SAMPLE_MAX_ROWS, 201088); /* the largest vocabulary */
    assert_true(spc_sample_scratch_bytes(rows, V) <= sb);
    if (!g_scratch) {
        g_scratch = dev_alloc(sb);
        CK(spc_memset(g_stream, g_scratch, 0, sb));
    }
    void *scratch = g_scratch;
    int32_t *ids = malloc((size_t)rows * sizeof *ids), *again = malloc((size_t)rows * sizeof *again);
    assert_non_null(ids);
    assert_non_null(again);
    CK(spc_sample_rows(g_stream, dx, rows, V, V, dr, di, scratch, sb));
    to_host(ids, di, (size_t)rows * sizeof *ids);
    CK(spc_sample_rows(g_stream, dx, rows, V, V, dr, di, scratch, sb));
    to_host(again, di, (size_t)rows * sizeof *again);
    assert_memory_equal(ids, again, (size_t)rows * sizeof *ids);
    sp_sample_work wk;
    assert_int_equal(sp_sample_work_init(&wk, V), SP_OK);
    int host_rows = 0;
    for (int64_t r = 0; r < rows; r++) {
        int32_t want = sp_sample_row(&reqs[r], x + r * V, V, &wk);
        if (ids[r] == -1) { /* left to the host: only a top-p row whose head is long */
            assert_true(reqs[r].inv_t > 0.0 && reqs[r].top_p < 1.0f);
            host_rows++;
            continue;
        }
        if (ids[r] != want)
            fail_msg("row %lld of %lld (V %lld, inv_t %g, top_k %d, top_p %g, min_p %g, u %.17g): "
                     "device %d, host %d", (long long)r, (long long)rows, (long long)V, reqs[r].inv_t,
                     reqs[r].top_k, (double)reqs[r].top_p, (double)reqs[r].min_p, reqs[r].u, ids[r],
                     want);
    }
    sp_sample_work_free(&wk);
    free(ids);
    free(again);
    spc_free(dx);
    spc_free(dr);
    spc_free(di);
    return host_rows;
}

static double uniform(int k)
{
    return k == 0 ? 0.0 : k == 1 ? 1.0 - 0x1p-53 : (double)(rnd32() >> 1) / 2147483648.0;
}

static void test_sample_equals_host(void **state)
{
    (void)state;
    NEED_GPU();
    const int64_t vocabs[] = {1, 3, 1000, 1025, 4096, 32000, 201088};
    const struct {
        float t, top_p, min_p;
        int32_t top_k;
    } warps[] = {
        {0.0f, 1.0f, 0.0f, 0},   {1.0f, 1.0f, 0.0f, 0},   {0.7f, 0.95f, 0.0f, 0},
        {0.6f, 0.8f, 0.0f, 20},  {1.5f, 1.0f, 0.0f, 3},   {0.3f, 0.5f, 0.05f, 0},
        {2.0f, 1.0f, 0.2f, 0},   {1.0f, 0.9f, 0.0f, 5000}, {1e-3f, 0.99f, 0.01f, 1000},
        {1.0f, 1.0f, 0.0f, 1},   {0.9f, 0.999f, 0.0f, 0},
    };
    const int NW = (int)(sizeof warps / sizeof *warps);
    int host_rows = 0, rows_total = 0;
    for (size_t v = 0; v < sizeof vocabs / sizeof *vocabs; v++) {
        const int64_t V = vocabs[v];
        for (int rep = 0; rep < (V > 50000 ? 3 : 6); rep++) {
            /* launches of 1 to 32 rows in a random order on one scratch */
            const int64_t rows = V > 50000 ? 1 + rnd32() % 8 : 1 + rnd32() % SPC_SAMPLE_MAX_ROWS;
            float *x = malloc((size_t)(rows * V) * sizeof *x);
            sp_sample_req *reqs = calloc((size_t)rows, sizeof *reqs);
            assert_non_null(x);
            assert_non_null(reqs);
            for (int64_t r = 0; r < rows; r++) {
                /* wide rows peak (short top-p heads), narrow ones are flat (long heads) */
                const float spread = (r % 3 == 0) ? 2.0f : (r % 3 == 1) ? 20.0f : 60.0f;
                fill_row(x + r * V, V, spread, rep % 3 == 0 ? 7 : 0, rep % 2 == 1, rep % 3 == 2);
                const int w = (int)((r + rep) % NW);
                sp_sampling_params p = {.temperature = warps[w].t, .top_k = warps[w].top_k,
                                        .top_p = warps[w].top_p, .min_p = warps[w].min_p};
                reqs[r] = sp_sample_req_of(&p, uniform((int)(r % 5)));
            }
            host_rows += check_rows(x, rows, V, reqs);
            rows_total += (int)rows;
            free(x);
            free(reqs);
        }
    }
    printf("sample: %d rows, device == host; %d top-p rows left to the host\n", rows_total,
           host_rows);
    spc_free(g_scratch);
    g_scratch = NULL;
    assert_true(host_rows < rows_total / 4);
}

/* Bad arguments are refused, not launched. */
static void test_sample_refuses(void **state)
{
    (void)state;
    NEED_GPU();
    assert_int_not_equal(spc_sample_rows(g_stream, NULL, 1, 10, 5, NULL, NULL, NULL, 0), 0);
    assert_int_not_equal(spc_sample_rows(g_stream, NULL, 1, 10, 10, NULL, NULL, NULL, 0), 0);
    assert_int_equal(spc_sample_scratch_bytes(1, 0), 0);
    assert_int_equal(spc_sample_scratch_bytes(INT64_MAX / 4, 1000), 0);
    assert_int_equal(spc_sample_scratch_bytes(1, (int64_t)INT32_MAX + 1), 0);
    assert_int_equal(spc_sample_scratch_bytes(SPC_SAMPLE_MAX_ROWS + 1, 1000), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sample_equals_host),
        cmocka_unit_test(test_sample_refuses),
    };
    int rc = cmocka_run_group_tests(tests, cuda_group_setup, cuda_group_teardown);
    return g_have_gpu ? rc : 77;
}
