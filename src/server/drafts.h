/* drafts.h: draft tokens for the scheduler's batch (scheduler.c).
 *
 * Two sources. N-gram prompt lookup needs nothing but the sequence's own tokens. A draft
 * model keeps one session per slot of the pool (its own KV cache, at the same positions
 * as the target's) and drafts for every sequence together: one sp_batch_eval of the draft
 * model per draft position. The first of those passes also brings each draft session up
 * to its sequence: the prompt, in chunks, while the target prefills it, then the tokens the
 * target kept since the last draft. Each sequence picks its draft tokens from its own rows
 * with its own sp_draft_sampler (the rule and random streams of sp_generate_spec). After
 * verification the scheduler cuts the draft session back to what the target kept.
 *
 * Determinism: a sequence's draft depends on its own tokens, its draft session and its
 * sampler only (sp_batch_eval's rows do not depend on the batch), so its drafts — and with
 * them its sampled output — do not depend on the other sequences.
 *
 * Not thread-safe: the scheduler thread owns the pool. */
#ifndef SP_SERVER_DRAFTS_H
#define SP_SERVER_DRAFTS_H

#include "specula.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One slot's draft request for this step. */
typedef struct sp_draft_req {
    const int32_t *hist;        /* prompt + generated tokens; while decoding, the last is the
                                   pending (sampled, not yet evaluated) token */
    size_t n_hist;
    bool decoding;              /* drafts are made only while decoding; a prefilling
                                   sequence's draft session just follows its prompt */
    int k;                      /* most draft tokens wanted (0: catch up only) */
    sp_draft_sampler *sampler;
    const sp_sampling_params *sampling; /* the sampler's parameters */
    bool keep;                  /* a sampled sampler's draws made in the draft's passes, each
                                   draft's row kept in the slot's session (kept row i) for the
                                   target's verification on the device (sp_batch_verify) */
    int32_t *drafts;            /* out: [k] */
    int n_drafts;               /* out */
    const double *q[SP_SPEC_MAX_K]; /* out: the distribution of each draft (NULL: greedy, or
                                       kept on the device with a draw made there) */
} sp_draft_req;

typedef struct sp_draft_pool sp_draft_pool;

/* n_slots sessions of `draft` with n_ctx positions each; catch-up passes hold at most
 * chunk tokens in all. */
sp_status sp_draft_pool_new(sp_model *draft, int n_slots, int64_t n_ctx, int64_t chunk,
                            sp_draft_pool **out, sp_error *err);
void sp_draft_pool_free(sp_draft_pool *p);
/* The slot's draft session. */
sp_session *sp_draft_pool_session(sp_draft_pool *p, int slot);
/* A new sequence enters the slot. */
sp_status sp_draft_pool_reset(sp_draft_pool *p, int slot, sp_error *err);
/* The target kept positions [0, n_valid) of the slot's sequence. */
void sp_draft_pool_rollback(sp_draft_pool *p, int slot, int64_t n_valid);
/* Drafts for reqs[slot] (NULL: no sequence) with as many draft-model passes as the longest
 * draft needs. A sequence holding a token the draft model lacks stops drafting for good. */
sp_status sp_draft_pool_run(sp_draft_pool *p, sp_draft_req *const *reqs, sp_error *err);

/* Prompt lookup: up to k tokens that followed the latest earlier occurrence of the last n
 * tokens of hist (n from n_max down to n_min). Returns how many were written to out. */
int sp_ngram_draft(const int32_t *hist, size_t n_hist, int n_min, int n_max, int32_t *out, int k);

#endif
