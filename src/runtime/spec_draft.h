/* spec_draft.h: draft sources for speculative decoding.
 *
 * A drafter proposes up to k tokens continuing seq[0 .. n_seq) and says, per token,
 * which distribution q it was drawn from (NULL: deterministic, q one-hot). After
 * verification the caller reports how much of the sequence is still valid, and a
 * model drafter rolls its own KV cache back to it. Drafters keep all of their state (KV
 * cache, scratch, random stream) apart from the target's. */
#ifndef SP_RUNTIME_SPEC_DRAFT_H
#define SP_RUNTIME_SPEC_DRAFT_H

#include "runtime/sampler.h"
#include "runtime/session.h"

typedef struct sp_drafter sp_drafter;

typedef struct sp_drafter_config {
    sp_draft_kind kind;
    sp_session *session;          /* MODEL / SELF */
    const sp_sampling_params *sampling; /* the target's: drafts sample from the same warpers */
    int32_t k_max;
    float p_min;
    int32_t ngram_min, ngram_max;
    int64_t target_vocab;         /* drafts at or beyond it are never proposed */
    bool stop_at_eos;             /* end a draft after an end-of-sequence token */
    const sp_model *eos_model;    /* whose EOS ids end a draft (the target) */
    uint64_t seed;                /* the drafting stream */
} sp_drafter_config;

sp_status sp_drafter_new(const sp_drafter_config *c, sp_drafter **out, sp_error *err);
void sp_drafter_free(sp_drafter *d);

/* Proposes up to k (<= k_max) tokens into out[]; q[i] is the distribution token i was
 * drawn from (length *n_q) or NULL. *n_out may be 0. seq[i] sits at position base + i
 * (a model drafter's session holds positions [0, base) already, like the target's). */
sp_status sp_drafter_propose(sp_drafter *d, const int32_t *seq, int64_t n_seq, int64_t base,
                             int32_t k, int32_t *out, const double **q, int64_t *n_q,
                             int32_t *n_out, sp_error *err);
/* Positions [0, n_valid) are what the target kept: drop any draft state beyond them. */
void sp_drafter_rollback(sp_drafter *d, int64_t n_valid);

#endif
