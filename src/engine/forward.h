/* forward.h: the forward pass as the runtime calls it — the tokens of one or several
 * sequences, each with its own KV cache and length, evaluated together.
 *
 * Every weight matrix is read once per pass for all the tokens in it; a pass holds at most
 * the model's compute capacity (sp_model_reserve) and longer inputs are split into several
 * passes. A token's logits depend only on its sequence's tokens, never on the other
 * sequences or on how the tokens were split into passes (every op is row-local and
 * attention reads the KV cache). */
#ifndef SP_ENGINE_FORWARD_H
#define SP_ENGINE_FORWARD_H

#include "engine/kv_cache.h"
#include "engine/trace_points.h"

/* Who watches a sequence's op outputs, and an explicit fault-injection hook: when perturb
 * is set, the output of perturb_op at perturb_layer is multiplied by perturb_factor (in
 * backend memory, before later ops read it) — for demonstrating and testing diagnostics.
 * Observers only read. */
typedef struct sp_observer {
    sp_trace_cb cb; /* may be NULL */
    void *ctx;
    bool perturb;
    int perturb_layer;
    sp_op perturb_op;
    float perturb_factor;
} sp_observer;

/* Speculative sampling's verification of drafts on the device (sp_seq_eval.spec). */
typedef struct sp_spec_req {
    const float *draft_rows; /* backend memory [n - 1, n_vocab]: the draft's logits of each
                              * draft, or NULL: q one-hot at each (a deterministic draft) */
    sp_sample_req p, q;      /* the target's and the draft's draws (u unused) */
    const double *u;         /* [n - 1] the acceptance uniforms */
    double v;                /* the residual's uniform (a rejection) */
    double v_bonus;          /* the bonus token's (every draft accepted) */
} sp_spec_req;

typedef struct sp_seq_eval {
    sp_kv *kv;
    int64_t pos0;          /* the sequence's length before these tokens */
    const int32_t *tokens; /* [n], validated by the caller */
    int64_t n;
    float *logits;         /* host [n, n_vocab]: every row's logits, or NULL */
    float *last;           /* host [n_vocab]: the last row's logits, or NULL */
    int32_t *last_id;      /* host, or NULL: where the backend picks greedily on the device
                            * (logits_argmax), the last row's pick, and then neither
                            * logits nor last is written (only the id is read back);
                            * otherwise -1, and last gets the logits as without it. Only
                            * with logits NULL. */
    const sp_sample_req *sample; /* with last_id, or NULL: the last row's pick is this draw
                            * (kernels/sample_row.h) instead of the greedy one; where the
                            * backend draws on the device (logits_sample), only the id comes
                            * back, else -1 and last gets the logits (the caller draws) */
    int32_t *ids;          /* host [n], or NULL: with logits, every row's greedy pick where the
                            * backend picks on the device (logits then not written); otherwise
                            * ids[0] = -1 and logits gets every row as without it. Only for
                            * a call of this one sequence, n <= SP_LOGIT_ROWS rows that
                            * fit one pass (so its rows come back all one way) */
    const sp_spec_req *spec; /* with logits and ids, or NULL: the rows verify the drafts
                            * tokens[1 ..] by runtime/spec_verify.c's rule. Where the backend
                            * verifies (spec_verify), ids[0] = the drafts accepted and ids[1]
                            * the next token, and nothing else comes back; otherwise ids[0] =
                            * -1 and logits gets every row */
    float *keep;           /* backend memory [n_vocab], or NULL: the last row's logits are
                            * copied there on the device (a draft's row, for spec) */
    const sp_observer *obs; /* NULL: not observed */
    /* Multi-token prediction (forward_mtp.c). hidden_in (host [n, n_embd]): the rows are MTP
     * positions: row j takes tokens[j] and the main model's hidden state hidden_in[j], runs
     * the MTP module (its block is layer n_layers, cached in kv) and its shared head. Every
     * sequence of a call is MTP or none is. hidden_out (host [n, n_embd]) receives each
     * row's last hidden state before the final norm (main model or MTP block), or NULL. */
    const float *hidden_in;
    float *hidden_out;
} sp_seq_eval;

/* Evaluates the sequences' tokens in passes of at most max_tokens (0: the capacity), writing
 * their k/v rows into the caches at pos0... . Backend failures (a failed kernel launch)
 * come back as a status naming the op. */
sp_status sp_forward(sp_model *m, const sp_seq_eval *seqs, int64_t n_seqs, int64_t max_tokens,
                     sp_error *err);

/* Greedy decoding of one sequence (cache kv, length pos0) with each step's token fed on
 * the device (forward_chain.c): evaluates `first` at pos0, then each step's pick at the
 * next position, handing the picks to cb in order, until max_steps picks or cb returns
 * false (cb NULL: every step). The picks, and the cache rows of positions pos0 .. pos0 +
 * *n_steps - 1, are those of evaluating the steps one at a time with last_id; rows past
 * them may have been written by a step queued ahead. Only where sp_forward_chain_ok
 * (picks on the device, queued copies; not DeepSeek-V4, not observed, not MTP); the model is
 * held for the whole chain. max_steps <= kv->n_ctx - pos0. */
typedef bool (*sp_chain_cb)(void *ctx, int32_t pick);
bool sp_forward_chain_ok(const sp_model *m, const sp_observer *obs);
sp_status sp_forward_greedy_chain(sp_model *m, sp_kv *kv, int64_t pos0, int32_t first,
                                  int64_t max_steps, sp_chain_cb cb, void *ctx,
                                  int64_t *n_steps, sp_error *err);

/* Grows the model's pass buffers to hold cap tokens (never shrinks). */
sp_status sp_model_reserve(sp_model *m, int64_t cap, sp_error *err);

#endif
