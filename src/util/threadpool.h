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
#include <stddef.h>
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

/* The arithmetic precision the kernels use for work submitted with this pool (a model
 * sets it once at open; EXACT by default and for a NULL pool). */
void sp_pool_set_precision(sp_pool *pool, sp_precision prec);
sp_precision sp_pool_precision(const sp_pool *pool);

/* A buffer of at least `bytes` owned by the pool, valid until the next call or
 * sp_pool_free (kernels prepare their inputs in it); NULL when out of memory. Same
 * threading rule as sp_pool_run: one caller at a time. */
void *sp_pool_scratch(sp_pool *pool, size_t bytes);

#endif
