/* threadpool.c: persistent pthread workers woken per parallel-for (see threadpool.h).
 *
 * Work sharing: a run cuts [0, n) into chunks fixed by n, grain and the thread count and
 * deals them out in contiguous shares, thread i's share always the same part of [0, n)
 * for the same n. Each thread takes its own share's chunks from the front; once it is
 * empty, it takes the other threads' remaining chunks from their backs. A share is one
 * atomic word per thread (the run's generation, its first and its end chunk), so a claim
 * is a compare-and-swap that cannot succeed on a run that has ended, and a thread claiming
 * its own chunks touches only its own cache line. Fixed shares keep a product's rows on
 * the same core token after token (its weights stay in that core's caches: on the 2-core
 * VM a decode step ran 20-25% faster than with chunks handed out in turn); stealing keeps
 * a thread that is slow or descheduled (the machine is shared) from holding up the run.
 * Which thread computes a chunk varies; what a chunk computes does not.
 *
 * Waiting: a worker spins briefly (SPIN_ROUNDS pause instructions, a few tens of
 * microseconds) on the run word before sleeping on a condition variable, because decode
 * issues hundreds of short parallel-fors per token; between tokens, while another model
 * (a draft) runs, or when nothing runs, they sleep: no core spins for an idle pool. The
 * caller, once no chunk is left, waits for the chunks still running elsewhere, spinning
 * briefly and then yielding. A worker that wakes after its run ended finds the
 * generation changed or no chunk left and goes back to waiting: the caller never waits
 * for a thread that has nothing to do. */
#include "util/threadpool.h"
#include "util/error.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

/* A thread's share of the current run: generation << 32 | first unclaimed chunk << 16 |
 * end; the owner claims at the front, the others at the back. One cache line each. */
typedef struct share {
    _Alignas(64) atomic_uint_fast64_t word;
} share;

struct sp_pool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    share *shares;             /* [n_threads] */
    atomic_uint_fast64_t work; /* generation << 32 of the current run */
    atomic_int_fast64_t done;  /* chunks of the current run finished */
    atomic_bool quit;
    /* the current run: written before its generation is published, read only by a
     * thread holding one of its unfinished chunks (so never while being rewritten) */
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

static uint32_t gen_of(uint_fast64_t w) { return (uint32_t)(w >> 32); }

/* Claims a chunk of run `gen` from share s (its front or its back); -1 when none is left
 * or the run is over. */
static int64_t claim(share *s, uint32_t gen, bool front)
{
    uint_fast64_t w = atomic_load_explicit(&s->word, memory_order_acquire);
    for (;;) {
        int64_t lo = (int64_t)((w >> 16) & 0xffff), hi = (int64_t)(w & 0xffff);
        if (gen_of(w) != gen || lo >= hi)
            return -1;
        uint_fast64_t nw = front ? w + (1u << 16) : w - 1;
        /* success means the run is still `gen` and the chunk is ours: the run cannot end
         * while it is unfinished, so its fields are stable until done counts it */
        if (atomic_compare_exchange_weak_explicit(&s->word, &w, nw, memory_order_acq_rel,
                                                  memory_order_acquire))
            return front ? lo : hi - 1;
    }
}

static void run_chunk(sp_pool *p, int64_t c, int index)
{
    int64_t b = c * p->chunk;
    int64_t e = b + p->chunk < p->n ? b + p->chunk : p->n;
    p->fn(p->ctx, b, e, index);
}

/* Runs this thread's share of run `gen`, then what is left of the others' shares. */
static void run_chunks(sp_pool *p, uint32_t gen, int index)
{
    int64_t mine = 0, c;
    while ((c = claim(&p->shares[index], gen, true)) >= 0) {
        run_chunk(p, c, index);
        mine++;
    }
    for (int k = 1; k < p->n_threads; k++) {
        share *s = &p->shares[(index + k) % p->n_threads];
        while ((c = claim(s, gen, false)) >= 0) {
            run_chunk(p, c, index);
            mine++;
        }
    }
    if (mine) /* once, after this thread's last chunk: then the run may end */
        atomic_fetch_add_explicit(&p->done, mine, memory_order_release);
}

static void *worker_main(void *arg)
{
    worker_arg *wa = arg;
    sp_pool *p = wa->pool;
    int index = wa->index;
    free(wa);
    uint32_t seen = 0;
    for (;;) {
        uint32_t g;
        int spins = 0;
        while ((g = gen_of(atomic_load_explicit(&p->work, memory_order_acquire))) == seen &&
               !atomic_load(&p->quit)) {
            if (++spins < SPIN_ROUNDS) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            while (gen_of(atomic_load(&p->work)) == seen && !atomic_load(&p->quit))
                pthread_cond_wait(&p->wake, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->quit))
            return NULL;
        seen = g;
        run_chunks(p, g, index);
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
    atomic_init(&p->work, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->quit, false);
    p->shares = aligned_alloc(64, (size_t)n_threads * sizeof *p->shares);
    if (!p->shares) {
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->wake);
        free(p);
        return sp_err(err, SP_ERR_NOMEM, "thread pool: out of memory");
    }
    for (int i = 0; i < n_threads; i++)
        atomic_init(&p->shares[i].word, 0);
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
    free(p->shares);
    free(p->scratch);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    free(p);
}

int sp_pool_n_threads(const sp_pool *p)
{
    return p ? p->n_threads : 1;
}

/* Chunks per thread: enough that a thread slowed by other work on its core leaves only
 * a small tail to the others, few enough that claiming costs nothing next to a chunk. */
#define CHUNKS_PER_THREAD 8

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
    int64_t want = (int64_t)nt * CHUNKS_PER_THREAD; /* <= 512 * 8: fits a share's 16 bits */
    int64_t per = (n_grains + want - 1) / want; /* grains per chunk */
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->chunk = per * grain;
    int64_t n_chunks = (n + p->chunk - 1) / p->chunk;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    uint32_t gen = gen_of(atomic_load_explicit(&p->work, memory_order_relaxed)) + 1;
    for (int i = 0; i < nt; i++) {
        uint_fast64_t lo = (uint_fast64_t)(n_chunks * i / nt), hi = (uint_fast64_t)(n_chunks * (i + 1) / nt);
        atomic_store_explicit(&p->shares[i].word, (uint_fast64_t)gen << 32 | lo << 16 | hi,
                              memory_order_relaxed);
    }
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->work, (uint_fast64_t)gen << 32, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_chunks(p, gen, 0);
    for (int spins = 0; atomic_load_explicit(&p->done, memory_order_acquire) < n_chunks;)
        if (++spins < SPIN_ROUNDS)
            cpu_relax();
        else
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
    if (bytes > SIZE_MAX / 2)
        return NULL;
    if (bytes > p->scratch_bytes) {
        /* grow geometrically so a prefill's sizes settle after a few calls */
        size_t want = (bytes + bytes / 2 + 63) & ~(size_t)63;
        free(p->scratch); /* contents need not survive */
        p->scratch_bytes = 0;
        p->scratch = aligned_alloc(64, want); /* whole lines: no vector load splits one */
        if (!p->scratch)
            return NULL;
        p->scratch_bytes = want;
    }
    return p->scratch;
}
