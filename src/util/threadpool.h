/* threadpool.h: a fixed pool of worker threads running one parallel-for at a time.
 *
 * sp_pool_run(pool, n, fn, ctx) calls fn(ctx, begin, end, thread) on disjoint ranges
 * covering [0, n) and returns when all are done. The split of [0, n) into ranges depends
 * only on n and the thread count, never on timing; kernels never split one output
 * element's reduction across threads, so results do not depend on the thread count.
 * The caller's thread takes part in the work. Not reentrant: one run at a time. */
#ifndef SP_UTIL_THREADPOOL_H
#define SP_UTIL_THREADPOOL_H

#include "specula.h"
#include <stdint.h>

typedef struct sp_pool sp_pool;
typedef void (*sp_pool_fn)(void *ctx, int64_t begin, int64_t end, int thread);

/* n_threads <= 0 means all online CPUs. */
sp_status sp_pool_new(int n_threads, sp_pool **out, sp_error *err);
void sp_pool_free(sp_pool *pool);
int sp_pool_n_threads(const sp_pool *pool);

/* Splits [0, n) into at most n_threads ranges whose sizes are multiples of `grain`
 * (except the last). pool may be NULL: runs inline. */
void sp_pool_run(sp_pool *pool, int64_t n, int64_t grain, sp_pool_fn fn, void *ctx);

int sp_cpu_count(void);

#endif
