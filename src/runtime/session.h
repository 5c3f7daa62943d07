/* session.h: a session (behind the public sp_session handle) — one sequence: its KV cache
 * (engine/kv_cache.h), its length, the last position's logits, and who observes its
 * forward passes. The working memory of a pass belongs to the model (engine/compute.h),
 * so a session is only its sequence state. Rolling back (speculative decoding) only lowers
 * n_past: later positions are overwritten by the next eval. */
#ifndef SP_RUNTIME_SESSION_H
#define SP_RUNTIME_SESSION_H

#include "engine/forward.h"
#include "model/model.h"

sp_model *sp_session_model(const sp_session *s);

/* Installs an observer called with every op output of every forward pass (NULL to
 * remove). Observers only read. */
void sp_session_set_trace(sp_session *s, sp_trace_cb cb, void *ctx);
/* Fault injection for diagnostics demos and tests: multiplies the output of `op` at
 * `layer` (every position) by factor in every later pass; factor 1 removes it. */
void sp_session_set_perturb(sp_session *s, int layer, sp_op op, float factor);

/* Multi-token prediction (sp_session_new_mtp in specula.h). A target with an MTP session
 * records each position's last hidden state (before the final norm) and token; truncating
 * it to n also truncates its MTP session to n - 1 positions (MTP position i reads the
 * target's token i + 1). An MTP session evaluates MTP positions: row j takes tokens[j]
 * (the target's token at its position + 1) and hidden[j] ([n, sp_model_hidden_width]: the target's hidden
 * state at its position, or the MTP block's own output when chaining), and records its
 * block's output as its hidden state. logits: as sp_session_eval's. */
sp_status sp_session_eval_mtp(sp_session *s, const int32_t *tokens, const float *hidden, size_t n,
                              float *logits, sp_error *err);
/* An MTP session's target (NULL: not an MTP session, or its target was freed). */
sp_session *sp_session_mtp_target(const sp_session *s);
/* The recorded hidden state of position pos < n_past, or NULL when none is recorded;
 * valid until the session evaluates again at or before pos. */
const float *sp_session_hidden(const sp_session *s, int64_t pos);
/* The recorded tokens [n_past], or NULL. */
const int32_t *sp_session_tokens(const sp_session *s);
/* An MTP session's positions [0, real) were computed from its target's own hidden states
 * (the drafter keeps it; target truncation lowers it). */
int64_t sp_session_mtp_real(const sp_session *s);
void sp_session_set_mtp_real(sp_session *s, int64_t n);

/* Speculative sampling verified on the device (speculative.c, spec_draft.c; the public
 * sp_session_keep_rows and sp_session_can_verify in specula.h). */
/* Kept row slot (backend memory), or NULL. */
const float *sp_session_kept(const sp_session *s, int32_t slot);
sp_status sp_session_kept_download(sp_session *s, int32_t slot, float *row, sp_error *err);
/* sp_session_eval_sample, the last row's logits also kept in slot; where the draw is made on
 * the host (the row came back: sp_session_last_logits non-NULL), the row's distribution under
 * params is written to dist[n_vocab] from the same pass (sp_sampler_dist_draw's). */
sp_status sp_session_eval_sample_keep(sp_session *s, const int32_t *tokens, size_t n_tokens,
                                      const sp_sampling_params *params, double u, int32_t slot,
                                      double *dist, int32_t *next, sp_error *err);
/* Evaluates tokens (the pending token, then n - 1 drafts) verifying the drafts by spec's
 * request (engine/forward.h): *n_acc drafts accepted and *next the target's next token, the
 * host rule's; or *n_acc = -1 and logits [n, n_vocab] holds every row (the caller verifies
 * on the host). */
sp_status sp_session_eval_verify(sp_session *s, const int32_t *tokens, size_t n,
                                 const sp_spec_req *spec, float *logits, int32_t *n_acc,
                                 int32_t *next, sp_error *err);

#endif
