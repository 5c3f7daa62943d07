/* spec_draft.h: draft sources for speculative decoding.
 *
 * A drafter proposes up to k tokens continuing seq[0 .. n_seq) and says, per token,
 * which distribution q it was drawn from (NULL: deterministic, q one-hot). After
 * verification the caller reports how much of the sequence is still valid, and a
 * model drafter rolls its own KV cache back to it. Drafters keep all of their state (KV
 * cache, scratch, random stream) apart from the target's.
 *
 * An MTP drafter runs the target model's multi-token prediction module (its session is an
 * MTP session of the target: runtime/session.h); see spec_draft_mtp.c.
 *
 * A model drafter without a session only picks tokens (sp_drafter_pick) from draft logits
 * its caller evaluated: the server runs every sequence's draft step in one batched pass of
 * the draft model, and picks each sequence's token with the rule sp_drafter_propose uses. */
#ifndef SP_RUNTIME_SPEC_DRAFT_H
#define SP_RUNTIME_SPEC_DRAFT_H

#include "runtime/sampler.h"
#include "runtime/session.h"

typedef struct sp_drafter sp_drafter;

typedef struct sp_drafter_config {
    sp_draft_kind kind;
    sp_session *session;          /* MODEL / SELF / MTP; NULL: the caller evaluates (pick only) */
    sp_session *target;           /* MTP: the target session (its recorded hidden states) */
    const sp_model *draft_model;  /* MODEL without a session: whose logits are picked from */
    const sp_sampling_params *sampling; /* the target's: drafts sample from the same warpers */
    int32_t k_max;
    float p_min;
    int32_t ngram_min, ngram_max;
    int64_t target_vocab;         /* drafts at or beyond it are never proposed */
    bool stop_at_eos;             /* end a draft after an end-of-sequence token */
    const sp_model *eos_model;    /* whose EOS ids end a draft (the target) */
    uint64_t seed;                /* the drafting stream */
    bool keep_rows;               /* MODEL / SELF with a session, sampling: the draft's rows
                                   * stay on the device (its session's kept rows) for the
                                   * target's verification there, the draws made there */
} sp_drafter_config;

sp_status sp_drafter_new(const sp_drafter_config *c, sp_drafter **out, sp_error *err);
void sp_drafter_free(sp_drafter *d);

/* Proposes up to k (<= k_max) tokens into out[]; q[i] is the distribution token i was
 * drawn from (length *n_q) or NULL. *n_out may be 0. seq[i] sits at position base + i
 * (a model drafter's session holds positions [0, base) already, like the target's). */
sp_status sp_drafter_propose(sp_drafter *d, const int32_t *seq, int64_t n_seq, int64_t base,
                             int32_t k, int32_t *out, const double **q, int64_t *n_q,
                             int32_t *n_out, sp_error *err);
/* Whether the last proposal's distributions are the session's kept rows on the device
 * (its q[i] are then NULL, not one-hot, but for draws the device left to the host, whose
 * rows came back and whose distributions were written with the draw: sp_drafter_q_slot). */
bool sp_drafter_kept(const sp_drafter *d);
/* The distribution of draft i on the host from session s's kept row i (for a verification
 * the device left to the host): into the drafter's q[i], the row read back into a buffer the
 * drafter keeps. */
sp_status sp_drafter_q_kept(sp_drafter *d, sp_session *s, int32_t i, const double **q,
                            sp_error *err);
/* The drafter's q[i] (n_vocab values): where a draw made on the host in a pass writes draft
 * i's distribution (sp_batch_item.dist); NULL for a greedy drafter or i out of range. */
double *sp_drafter_q_slot(sp_drafter *d, int32_t i);

/* The drafting stream's next uniform (a draw made in a pass: sp_draft_sampler_uniform). */
double sp_drafter_uniform(sp_drafter *d);

/* What sp_drafter_pick decided about draft token i. */
typedef enum sp_pick {
    SP_PICK_END,  /* the draft ends before it: top probability under p_min, or a token the
                     target does not have */
    SP_PICK_MORE, /* *tok is a draft token; the draft may go on */
    SP_PICK_LAST, /* *tok is a draft token and ends the draft (end of sequence) */
} sp_pick;

/* Draft token i (< k_max) of a model drafter from the draft model's logits [n_vocab]:
 * greedy: the argmax; sampled: drawn from the target's warpers applied to the logits, with
 * the drafting stream; *q receives that distribution (valid until token i of the next
 * draft) or NULL when greedy. */
sp_pick sp_drafter_pick(sp_drafter *d, const float *logits, int32_t i, int32_t *tok,
                        const double **q);
/* Whether sp_drafter_pick reads nothing of the logits but their argmax (greedy, no
 * p_min): the draft model may then be evaluated for picks only (sp_session_eval_greedy). */
bool sp_drafter_greedy(const sp_drafter *d);
/* sp_drafter_pick's decision about a token already picked (the argmax; greedy drafters). */
sp_pick sp_drafter_take(const sp_drafter *d, int32_t tok);
int64_t sp_drafter_n_vocab(const sp_drafter *d);

/* Positions [0, n_valid) are what the target kept: drop any draft state beyond them. */
void sp_drafter_rollback(sp_drafter *d, int64_t n_valid);

/* spec_draft_mtp.c: an MTP draft of up to k tokens continuing the target's sequence, whose
 * pending (not yet evaluated) token is `pending`; tokens are picked as sp_drafter_pick. */
sp_status sp_drafter_propose_mtp(sp_drafter *d, int32_t pending, int32_t k, int32_t *out,
                                 const double **q, int64_t *n_q, int32_t *n_out, sp_error *err);
/* MTP rollback: what the MTP session keeps of n_valid target positions. */
void sp_drafter_rollback_mtp(sp_drafter *d, int64_t n_valid);
const sp_drafter_config *sp_drafter_config_of(const sp_drafter *d);

#endif
