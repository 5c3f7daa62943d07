/* threadpool.h: a fixed pool of worker threads running one parallel-for at a time.
 *
 * sp_pool_run(pool, n, fn, ctx) calls fn(ctx, begin, end, thread) on disjoint ranges
 * (chunks) covering [0, n) and returns when all are done. The chunks depend only on n,
 * grain and the thread count; which thread runs which chunk depends on timing (each
 * thread runs its own contiguous share first, the same rows run after run, then takes
 * what is left of the others', so one slowed by other work on its core runs fewer).
 * `thread` (0 = the caller) identifies the running thread, for per-thread scratch only.
 * Kernels never split one output element's reduction across chunks, so results depend
 * neither on the thread count nor on timing. The caller's thread takes part in the work.
 * Idle workers sleep (after a short spin). Not reentrant: one run at a time. */
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

/* Splits [0, n) into chunks whose sizes are multiples of `grain` (except the last), a few
 * per thread. pool may be NULL (or have one thread): one call over [0, n), inline. */
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
