/* metrics.c: Prometheus text exposition of the server's counters and histograms
 * (format 0.0.4: # HELP / # TYPE lines, cumulative le buckets, _sum and _count). */
#include "metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_BUCKETS 14
static const double latency_buckets[N_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                  0.25,  0.5,    1.0,   2.5,  5.0,   10.0, 30.0};

typedef struct histogram {
    int64_t counts[N_BUCKETS]; /* per bucket, not cumulative; +Inf is count */
    int64_t count;
    double sum;
} histogram;

#define N_STATUS 16
struct sp_metrics {
    pthread_mutex_t mu;
    int status_code[N_STATUS];
    int64_t status_count[N_STATUS];
    int64_t prompt_tokens, generation_tokens;
    int64_t running, waiting;
    histogram ttft, itl, e2e;
    int64_t spec_drafts, spec_drafted, spec_accepted;
    int64_t spec_accepted_pos[SP_METRICS_MAX_POS], spec_drafted_pos[SP_METRICS_MAX_POS];
};

sp_metrics *sp_metrics_new(void)
{
    sp_metrics *m = calloc(1, sizeof *m);
    if (m)
        pthread_mutex_init(&m->mu, NULL);
    return m;
}

void sp_metrics_free(sp_metrics *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void sp_metrics_request(sp_metrics *m, int status)
{
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < N_STATUS; i++) {
        if (m->status_code[i] == status || m->status_code[i] == 0) {
            m->status_code[i] = status;
            m->status_count[i]++;
            break;
        }
    }
    pthread_mutex_unlock(&m->mu);
}

void sp_metrics_tokens(sp_metrics *m, int64_t n_prompt, int64_t n_generated)
{
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += n_prompt;
    m->generation_tokens += n_generated;
    pthread_mutex_unlock(&m->mu);
}

static void observe(sp_metrics *m, histogram *h, double v)
{
    pthread_mutex_lock(&m->mu);
    int b = 0;
    while (b < N_BUCKETS && v > latency_buckets[b])
        b++;
    if (b < N_BUCKETS)
        h->counts[b]++;
    h->count++;
    h->sum += v;
    pthread_mutex_unlock(&m->mu);
}

void sp_metrics_ttft(sp_metrics *m, double s) { observe(m, &m->ttft, s); }
void sp_metrics_itl(sp_metrics *m, double s) { observe(m, &m->itl, s); }
void sp_metrics_e2e(sp_metrics *m, double s) { observe(m, &m->e2e, s); }

void sp_metrics_spec(sp_metrics *m, int n_drafted, int n_accepted)
{
    pthread_mutex_lock(&m->mu);
    if (n_drafted > 0)
        m->spec_drafts++;
    m->spec_drafted += n_drafted;
    m->spec_accepted += n_accepted;
    for (int i = 0; i < n_drafted && i < SP_METRICS_MAX_POS; i++) {
        m->spec_drafted_pos[i]++;
        if (i < n_accepted)
            m->spec_accepted_pos[i]++;
    }
    pthread_mutex_unlock(&m->mu);
}

void sp_metrics_gauges(sp_metrics *m, int64_t running, int64_t waiting)
{
    pthread_mutex_lock(&m->mu);
    m->running = running;
    m->waiting = waiting;
    pthread_mutex_unlock(&m->mu);
}

typedef struct outbuf {
    char *p;
    size_t len, cap;
    int failed;
} outbuf;

static void out(outbuf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out(outbuf *o, const char *fmt, ...)
{
    if (o->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->failed = 1;
            return;
        }
        if ((size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        size_t cap = o->cap * 2 + (size_t)n + 1;
        char *p = realloc(o->p, cap);
        if (!p) {
            o->failed = 1;
            return;
        }
        o->p = p;
        o->cap = cap;
    }
}

static void out_histogram(outbuf *o, const char *name, const char *help, const histogram *h)
{
    out(o, "# HELP specula_%s %s\n# TYPE specula_%s histogram\n", name, help, name);
    int64_t cum = 0;
    for (int b = 0; b < N_BUCKETS; b++) {
        cum += h->counts[b];
        out(o, "specula_%s_bucket{le=\"%g\"} %lld\n", name, latency_buckets[b], (long long)cum);
    }
    out(o, "specula_%s_bucket{le=\"+Inf\"} %lld\n", name, (long long)h->count);
    out(o, "specula_%s_sum %.6f\nspecula_%s_count %lld\n", name, h->sum, name,
        (long long)h->count);
}

char *sp_metrics_render(sp_metrics *m, size_t *len)
{
    outbuf o = {malloc(4096), 0, 4096, 0};
    if (!o.p)
        return NULL;
    o.p[0] = 0;
    pthread_mutex_lock(&m->mu);
    out(&o, "# HELP specula_requests_total HTTP requests answered, by status code.\n"
            "# TYPE specula_requests_total counter\n");
    for (int i = 0; i < N_STATUS && m->status_code[i]; i++)
        out(&o, "specula_requests_total{status=\"%d\"} %lld\n", m->status_code[i],
            (long long)m->status_count[i]);
    out(&o, "# HELP specula_num_requests_running Sequences in the running batch.\n"
            "# TYPE specula_num_requests_running gauge\nspecula_num_requests_running %lld\n",
        (long long)m->running);
    out(&o, "# HELP specula_num_requests_waiting Requests admitted and queued.\n"
            "# TYPE specula_num_requests_waiting gauge\nspecula_num_requests_waiting %lld\n",
        (long long)m->waiting);
    out(&o, "# HELP specula_prompt_tokens_total Prompt tokens evaluated.\n"
            "# TYPE specula_prompt_tokens_total counter\nspecula_prompt_tokens_total %lld\n",
        (long long)m->prompt_tokens);
    out(&o, "# HELP specula_generation_tokens_total Tokens generated.\n"
            "# TYPE specula_generation_tokens_total counter\nspecula_generation_tokens_total %lld\n",
        (long long)m->generation_tokens);
    out_histogram(&o, "time_to_first_token_seconds", "Time from arrival to the first token.",
                  &m->ttft);
    out_histogram(&o, "inter_token_latency_seconds", "Time between tokens of a sequence.",
                  &m->itl);
    out_histogram(&o, "e2e_request_latency_seconds", "Time from arrival to the last token.",
                  &m->e2e);
    out(&o, "# HELP specula_spec_decode_num_drafts Verify rounds with at least one draft token.\n"
            "# TYPE specula_spec_decode_num_drafts counter\nspecula_spec_decode_num_drafts %lld\n",
        (long long)m->spec_drafts);
    out(&o, "# HELP specula_spec_decode_num_draft_tokens Draft tokens proposed.\n"
            "# TYPE specula_spec_decode_num_draft_tokens counter\n"
            "specula_spec_decode_num_draft_tokens %lld\n",
        (long long)m->spec_drafted);
    out(&o, "# HELP specula_spec_decode_num_accepted_tokens Draft tokens accepted.\n"
            "# TYPE specula_spec_decode_num_accepted_tokens counter\n"
            "specula_spec_decode_num_accepted_tokens %lld\n",
        (long long)m->spec_accepted);
    out(&o, "# HELP specula_spec_decode_num_accepted_tokens_per_pos Rounds whose draft position "
            "was accepted.\n# TYPE specula_spec_decode_num_accepted_tokens_per_pos counter\n");
    for (int i = 0; i < SP_METRICS_MAX_POS && m->spec_drafted_pos[i]; i++)
        out(&o, "specula_spec_decode_num_accepted_tokens_per_pos{position=\"%d\"} %lld\n", i,
            (long long)m->spec_accepted_pos[i]);
    out(&o, "# HELP specula_spec_decode_acceptance_per_pos Accepted / proposed at each draft "
            "position.\n# TYPE specula_spec_decode_acceptance_per_pos gauge\n");
    for (int i = 0; i < SP_METRICS_MAX_POS && m->spec_drafted_pos[i]; i++)
        out(&o, "specula_spec_decode_acceptance_per_pos{position=\"%d\"} %.6f\n", i,
            (double)m->spec_accepted_pos[i] / (double)m->spec_drafted_pos[i]);
    pthread_mutex_unlock(&m->mu);
    if (o.failed) {
        free(o.p);
        return NULL;
    }
    *len = o.len;
    return o.p;
}
