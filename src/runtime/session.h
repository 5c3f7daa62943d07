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

#endif
