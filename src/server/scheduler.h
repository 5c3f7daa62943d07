/* scheduler.h: continuous batching. One thread owns the model and a pool of --parallel
 * sessions; every step it puts each running sequence's next tokens (a prompt chunk while
 * prefilling, one token while decoding, pending + k drafts while speculating) into one
 * sp_batch_eval call, samples each sequence with its own sampler, detokenizes, applies
 * stop strings, and publishes the text for the HTTP threads.
 *
 * Drafts (drafts.h) come from n-gram prompt lookup or from a draft model run for all
 * sequences together, one draft-model pass per draft position.
 *
 * Determinism: a sequence's output is a function of its request alone. Logits do not
 * depend on the batch (sp_batch_eval's contract), each sequence has its own sampler seeded
 * from its request, and its drafts depend on its own tokens (n-grams) or on its own draft
 * session and draft sampler (a draft model). Greedy sequences verify drafts exactly (the
 * verify rows are the plain decode rows: output equals plain decoding); sampled ones with
 * the lossless rule of sp_generate_spec (sp_draft_verifier: accept with min(1, p/q), else
 * draw from norm(max(0, p - q)); q one-hot for n-grams), which keeps the target
 * distribution and is seeded per request, though its tokens differ from plain sampling's
 * for the same seed.
 *
 * Threads: sp_sched_* functions are thread-safe. A sp_seq is shared between the HTTP
 * thread that created it and the scheduler; its "shared" fields are read under
 * sp_sched_lock. Reference-counted: the creator calls sp_seq_release once. The scheduler
 * publishes each token under the lock as it is accepted, but wakes a sequence's HTTP
 * thread (its own condition variable) once per step, after the whole batch is done: not
 * every thread for every token of every sequence. */
#ifndef SP_SERVER_SCHEDULER_H
#define SP_SERVER_SCHEDULER_H

#include "drafts.h"
#include "metrics.h"
#include "openai_request.h"
#include "specula.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sp_seq_token {
    int32_t id;
    float logprob;
    int32_t n_top;
    int32_t top_ids[SP_OAI_MAX_TOP_LOGPROBS];
    float top_lps[SP_OAI_MAX_TOP_LOGPROBS];
} sp_seq_token;

typedef struct sp_seq {
    /* input: set before sp_sched_submit, read-only afterwards */
    int32_t *prompt; /* owned */
    size_t n_prompt;
    int64_t max_tokens; /* most tokens to generate (already capped by the context) */
    sp_sampling_params sampling;
    char *stop[SP_OAI_MAX_STOP]; /* owned */
    size_t n_stop;
    bool logprobs;
    int32_t n_top;
    bool ignore_eos;
    bool keep_special; /* detokenize special tokens (the reasoning/tool parsers need them) */
    double t_arrival;  /* seconds, monotonic */

    /* shared: under sp_sched_lock */
    char *text; /* published text: stop strings removed, possible stop prefixes held back */
    size_t text_len, text_cap;
    sp_seq_token *toks; /* one per generated token (not EOS) when logprobs */
    size_t n_toks, toks_cap;
    int64_t n_generated; /* includes an EOS */
    bool done;
    const char *finish_reason; /* "stop", "length", "cancelled", "error" */
    char error[SP_ERROR_MSG_BYTES];
    bool cancel;
    int refs;
    pthread_cond_t changed; /* signalled once per step that published to it, and at the end */

    /* scheduler thread only */
    int slot;
    size_t n_prefilled;
    int64_t n_sampled; /* n_generated as the scheduler counts it, published under the lock */
    int32_t pending; /* sampled, not yet evaluated */
    sp_sampler *sampler;
    sp_draft_verifier *verifier; /* sampled sequences with drafts */
    sp_draft_sampler *drafter;   /* sequences with a draft model */
    sp_detokenizer *detok;
    char *gen; /* all decoded text (before stop truncation) */
    size_t gen_len, gen_cap, emitted;
    int32_t *hist; /* prompt + generated ids, for n-gram drafts */
    size_t n_hist, hist_cap;
    double t_last;
    struct sp_seq *next; /* waiting queue */
} sp_seq;

typedef struct sp_sched_config {
    sp_model *model;
    sp_tokenizer *tok;
    pthread_mutex_t *text_mu; /* serializes tokenizer use with the HTTP threads */
    sp_metrics *metrics;
    int n_parallel, n_queue;
    int64_t n_ctx;
    int64_t prefill_chunk; /* most prompt tokens per step, over all prefilling sequences */
    bool ngram;            /* n-gram drafts */
    sp_model *draft_model; /* or a draft model (NULL: none); closed by the caller */
    float draft_p_min;     /* end a model draft under this draft probability (0: off) */
    int draft_k, ngram_min, ngram_max;
} sp_sched_config;

typedef struct sp_sched sp_sched;

sp_status sp_sched_new(const sp_sched_config *cfg, sp_sched **out, sp_error *err);
/* Stops the thread (after sp_sched_drain) and frees the sessions. */
void sp_sched_free(sp_sched *s);

/* A new sequence with one reference (the caller's). prompt is taken over. */
sp_seq *sp_seq_new(int32_t *prompt, size_t n_prompt);
void sp_seq_release(sp_sched *s, sp_seq *q);

/* Admits the sequence: 0, or 429 when --parallel run and --queue wait, or 503 when
 * draining. */
int sp_sched_submit(sp_sched *s, sp_seq *q);
/* Asks the scheduler to drop the sequence at its next step. */
void sp_sched_cancel(sp_sched *s, sp_seq *q);
void sp_sched_lock(sp_sched *s);
void sp_sched_unlock(sp_sched *s);
/* With the lock held: waits until q has more text than text_seen, more tokens than
 * toks_seen, or is done, or timeout_ms passes. */
void sp_sched_wait_locked(sp_sched *s, sp_seq *q, size_t text_seen, size_t toks_seen,
                          int timeout_ms);
void sp_sched_counts(sp_sched *s, int64_t *running, int64_t *waiting);
/* Stops admitting, lets running and waiting sequences finish for up to grace_ms, then
 * cancels the rest and waits for the batch to empty. */
void sp_sched_drain(sp_sched *s, int grace_ms);

double sp_server_now(void); /* monotonic seconds */

#endif
