/* cuda_replay_clock.c: see cuda_replay_clock.h. A ring of RING (start, end) event pairs:
 * replay i records pair i % RING; at replay i + 1 the pair of replay i is read (its end
 * waited for, which the decode loop has already done by reading its picks back), with the
 * end of replay i - 1 still in the ring for the gap before it. */
#ifdef SPECULA_HAVE_CUDA
#include "backend/cuda_replay_clock.h"
#include "kernels/cuda/cuda_ops.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

enum { RING = 4, MAX_SAMPLES = 1 << 16 };

struct sp_replay_clock {
    void *start[RING], *end[RING];
    long n;                /* replays recorded */
    float *busy, *gap;     /* [MAX_SAMPLES] microseconds */
    long n_busy, n_gap;
};

sp_replay_clock *sp_replay_clock_new(void)
{
    sp_replay_clock *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->busy = malloc(MAX_SAMPLES * sizeof(float));
    c->gap = malloc(MAX_SAMPLES * sizeof(float));
    bool ok = c->busy && c->gap;
    for (int i = 0; i < RING && ok; i++)
        ok = !spc_timing_event_new(&c->start[i]) && !spc_timing_event_new(&c->end[i]);
    if (!ok) {
        sp_replay_clock_free(c);
        return NULL;
    }
    return c;
}

/* The samples of replay i (its pair recorded, and i - 1's end for the gap). */
static void take(sp_replay_clock *c, long i)
{
    int k = (int)(i % RING), p = (int)((i + RING - 1) % RING);
    float ms;
    if (spc_event_sync(c->end[k]))
        return;
    if (!spc_event_elapsed_ms(c->start[k], c->end[k], &ms) && c->n_busy < MAX_SAMPLES)
        c->busy[c->n_busy++] = ms * 1e3f;
    if (i > 0 && !spc_event_elapsed_ms(c->end[p], c->start[k], &ms) && c->n_gap < MAX_SAMPLES)
        c->gap[c->n_gap++] = ms * 1e3f;
}

void sp_replay_clock_before(sp_replay_clock *c, void *stream)
{
    if (!c)
        return;
    if (c->n > 0)
        take(c, c->n - 1);
    spc_event_record(c->start[c->n % RING], stream);
}

void sp_replay_clock_after(sp_replay_clock *c, void *stream)
{
    if (!c)
        return;
    spc_event_record(c->end[c->n % RING], stream);
    c->n++;
}

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float median(float *v, long n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_f);
    return n ? v[n / 2] : 0.0f;
}

void sp_replay_clock_free(sp_replay_clock *c)
{
    if (!c)
        return;
    if (c->n > 0)
        take(c, c->n - 1);
    if (c->n_gap)
        fprintf(stderr,
                "specula: cuda: %ld graph replays: each ran %.1f us on the GPU (median), and "
                "%.1f us passed between one's end and the next's start (median of %ld)\n",
                c->n, median(c->busy, c->n_busy), median(c->gap, c->n_gap), c->n_gap);
    else if (c->n_busy)
        fprintf(stderr, "specula: cuda: 1 graph replay: it ran %.1f us on the GPU\n",
                median(c->busy, c->n_busy));
    for (int i = 0; i < RING; i++) {
        spc_event_free(c->start[i]);
        spc_event_free(c->end[i]);
    }
    free(c->busy);
    free(c->gap);
    free(c);
}

#endif /* SPECULA_HAVE_CUDA */
