/* test_threadpool.c: sp_pool_run (src/util/threadpool.h) under its contract:
 *  - every index of [0, n) is visited exactly once, for thread counts 1..4 and many
 *    (n, grain) shapes, runs back to back (a late worker must not touch the next run);
 *  - the ranges tile [0, n) in one size, a multiple of grain, the last one shorter at
 *    most: what a range covers never depends on which thread runs it or when;
 *  - the `thread` a task gets is below the thread count and never held by two running
 *    tasks at once (per-thread scratch indexed by it stays private);
 *  - a slow range (its thread descheduled, say) is still finished once. */
#include "test_util.h"
#include "util/threadpool.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_N = 1000 };

typedef struct job {
    atomic_int *hits;   /* [n] visits per index */
    int64_t *len;       /* [n] length of the range starting at each index (0: none) */
    atomic_int busy[8]; /* tasks running with each thread index */
    atomic_int bad;     /* contract violations seen */
    int n_threads;
    int64_t slow_at;    /* the range starting here sleeps a little (-1: none) */
} job;

static void task(void *ctx, int64_t b, int64_t e, int thread)
{
    job *j = ctx;
    if (thread < 0 || thread >= j->n_threads || b < 0 || b >= e || e > MAX_N) {
        atomic_fetch_add(&j->bad, 1);
        return;
    }
    if (atomic_fetch_add(&j->busy[thread], 1) != 0)
        atomic_fetch_add(&j->bad, 1);
    j->len[b] = e - b; /* ranges are disjoint: no two tasks write one slot */
    if (b == j->slow_at)
        nanosleep(&(struct timespec){0, 200000}, NULL);
    for (int64_t i = b; i < e; i++)
        atomic_fetch_add(&j->hits[i], 1);
    atomic_fetch_sub(&j->busy[thread], 1);
}

static void run_shapes(int n_threads, int slow)
{
    sp_pool *pool;
    assert_int_equal(sp_pool_new(n_threads, &pool, NULL), SP_OK);
    atomic_int *hits = calloc(MAX_N, sizeof *hits);
    int64_t *len = calloc(MAX_N, sizeof *len);
    assert_non_null(hits);
    assert_non_null(len);
    for (int rep = 0; rep < 400; rep++) {
        int64_t n = 1 + (rep * 37) % (MAX_N - 3), grain = 1 + rep % 17;
        job j = {.hits = hits, .len = len, .n_threads = n_threads, .slow_at = slow ? (rep * 13) % n : -1};
        for (int64_t i = 0; i < n; i++) {
            atomic_store(&hits[i], 0);
            len[i] = 0;
        }
        sp_pool_run(pool, n, grain, task, &j);
        assert_int_equal(atomic_load(&j.bad), 0);
        for (int64_t i = 0; i < n; i++)
            assert_int_equal(atomic_load(&hits[i]), 1);
        int64_t size = len[0];
        for (int64_t b = 0; b < n; b += len[b]) {
            assert_true(len[b] > 0);
            if (b + len[b] < n) { /* all but the last: the one size, whole grains */
                assert_int_equal(len[b], size);
                assert_int_equal(len[b] % grain, 0);
            }
        }
    }
    free(hits);
    free(len);
    sp_pool_free(pool);
}

static void test_every_index_once(void **state)
{
    (void)state;
    for (int t = 1; t <= 4; t++)
        run_shapes(t, 0);
}

static void test_slow_ranges(void **state)
{
    (void)state;
    for (int t = 2; t <= 4; t++)
        run_shapes(t, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_index_once),
        cmocka_unit_test(test_slow_ranges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
