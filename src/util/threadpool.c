/* threadpool.c: persistent pthread workers woken per parallel-for (see threadpool.h).
 * Workers spin briefly (SPIN_ROUNDS pause instructions, a few tens of microseconds) on a
 * generation counter before sleeping on a condition variable, because decode issues
 * hundreds of short parallel-fors per token; between tokens, while another model (a
 * draft) runs, or when nothing runs, they sleep: no core spins for an idle pool. */
#include "util/threadpool.h"
#include "util/error.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

struct sp_pool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    atomic_uint_fast64_t generation;
    atomic_int pending;
    atomic_bool quit;
    /* the current job */
    sp_pool_fn fn;
    void *ctx;
    int64_t n, chunk;
    sp_precision precision;
    void *scratch;
    size_t scratch_bytes;
};

/* ~2000 x pause (tens of cycles each): about 20-60 us before a worker sleeps. */
#define SPIN_ROUNDS 2000

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

typedef struct worker_arg {
    sp_pool *pool;
    int index;
} worker_arg;

int sp_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void run_share(sp_pool *p, int index)
{
    int64_t b = (int64_t)index * p->chunk;
    int64_t e = b + p->chunk;
    if (e > p->n)
        e = p->n;
    if (b < e)
        p->fn(p->ctx, b, e, index);
}

static void *worker_main(void *arg)
{
    worker_arg *wa = arg;
    sp_pool *p = wa->pool;
    int index = wa->index;
    free(wa);
    uint_fast64_t seen = 0;
    for (;;) {
        uint_fast64_t g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen &&
               !atomic_load(&p->quit)) {
            if (++spins < SPIN_ROUNDS) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->quit))
                pthread_cond_wait(&p->wake, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->quit))
            return NULL;
        seen = g;
        run_share(p, index);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
}

sp_status sp_pool_new(int n_threads, sp_pool **out, sp_error *err)
{
    *out = NULL;
    if (n_threads <= 0)
        n_threads = sp_cpu_count();
    if (n_threads > 512)
        n_threads = 512;
    sp_pool *p = calloc(1, sizeof *p);
    if (!p)
        return sp_err(err, SP_ERR_NOMEM, "thread pool: out of memory");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    atomic_init(&p->generation, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->quit, false);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
        if (!p->threads) {
            sp_pool_free(p);
            return sp_err(err, SP_ERR_NOMEM, "thread pool: out of memory");
        }
        for (int i = 1; i < n_threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (!wa || (wa->pool = p, wa->index = i,
                        pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0)) {
                free(wa);
                p->n_threads = i; /* threads [1, i) exist */
                sp_pool_free(p);
                return sp_err(err, SP_ERR_NOMEM, "thread pool: cannot start thread %d", i);
            }
        }
    }
    *out = p;
    return SP_OK;
}

void sp_pool_free(sp_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, true);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++)
        pthread_join(p->threads[i - 1], NULL);
    free(p->threads);
    free(p->scratch);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    free(p);
}

int sp_pool_n_threads(const sp_pool *p)
{
    return p ? p->n_threads : 1;
}

void sp_pool_run(sp_pool *p, int64_t n, int64_t grain, sp_pool_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    int nt = p ? p->n_threads : 1;
    int64_t n_grains = (n + grain - 1) / grain;
    if (nt <= 1 || n_grains <= 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    int64_t per = (n_grains + nt - 1) / nt;
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->chunk = per * grain;
    atomic_store_explicit(&p->pending, nt - 1, memory_order_release);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_acq_rel);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_share(p, 0);
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0)
        sched_yield();
}

void sp_pool_set_precision(sp_pool *p, sp_precision prec)
{
    if (p)
        p->precision = prec;
}

sp_precision sp_pool_precision(const sp_pool *p)
{
    return p ? p->precision : SP_PRECISION_EXACT;
}

void *sp_pool_scratch(sp_pool *p, size_t bytes)
{
    if (!p)
        return NULL;
    if (bytes > p->scratch_bytes) {
        /* grow geometrically so a prefill's sizes settle after a few calls */
        size_t want = bytes + bytes / 2;
        free(p->scratch); /* contents need not survive */
        p->scratch_bytes = 0;
        p->scratch = malloc(want);
        if (!p->scratch)
            return NULL;
        p->scratch_bytes = want;
    }
    return p->scratch;
}
