/* spec_draft_mtp.c: drafting with the target model's own multi-token prediction module.
 *
 * MTP position i takes the target's last hidden state h_i and its token t_{i+1}, and
 * predicts t_{i+2} (engine/forward_mtp.c). When the target holds positions [0, T) and
 * t_T is pending (sampled, not evaluated), a draft is:
 *   1. catch up: the MTP session computes every position i < T it lacks from the target's
 *      recorded h_i and t_{i+1} (t_T: the pending token); these are its "real" positions;
 *   2. draft token 1 = pick(logits of MTP position T - 1), a prediction of t_{T+1};
 *   3. chain: draft token j + 1 comes from MTP position T - 1 + j, which takes draft token j
 *      and, in place of the target's h (not computed yet), the MTP block's own output at
 *      the previous position, as DeepSeek chains one module for several tokens.
 * Chained positions are never kept: the next draft truncates the MTP session to its real
 * positions (those the target kept) before catching up. The target's truncation also cuts
 * the MTP session (runtime/session.c), so its cache never holds a position whose inputs
 * the target has since changed. Verification is the ordinary one: greedy output equals
 * plain decoding, sampled drafts carry their distribution q. */
#include "runtime/spec_draft.h"
#include "util/error.h"

/* Steps 1: the MTP session holds positions [0, T) computed from the target's own states. */
static sp_status catch_up(sp_session *s, sp_session *t, int32_t pending, sp_error *err)
{
    int64_t T = sp_session_n_past(t), have = sp_session_n_past(s);
    if (have > sp_session_mtp_real(s))
        have = sp_session_mtp_real(s);
    if (have > T - 1) /* re-evaluate T - 1 at least: its logits give draft token 1 */
        have = T - 1;
    sp_session_truncate(s, have, NULL);
    const int32_t *tok = sp_session_tokens(t);
    sp_status st = SP_OK;
    if (T - 1 > have) /* positions [have, T - 1): tokens recorded at have + 1 .. T - 1 */
        st = sp_session_eval_mtp(s, tok + have + 1, sp_session_hidden(t, have), (size_t)(T - 1 - have),
                                 NULL, err);
    if (st == SP_OK)
        st = sp_session_eval_mtp(s, &pending, sp_session_hidden(t, T - 1), 1, NULL, err);
    sp_session_set_mtp_real(s, st == SP_OK ? T : have);
    return st;
}

sp_status sp_drafter_propose_mtp(sp_drafter *d, int32_t pending, int32_t k, int32_t *out,
                                 const double **q, int64_t *n_q, int32_t *n_out, sp_error *err)
{
    const sp_drafter_config *c = sp_drafter_config_of(d);
    sp_session *s = c->session, *t = c->target;
    int64_t T = sp_session_n_past(t);
    *n_q = sp_drafter_n_vocab(d);
    if (T < 1 || !sp_session_tokens(t))
        return sp_err(err, SP_ERR_INVALID_ARG, "MTP drafting: the target session has not recorded "
                      "its hidden states (create the MTP session before the target evaluates)");
    if (k > sp_session_n_ctx(s) - T + 1) /* chained positions reach T - 2 + k */
        k = (int32_t)(sp_session_n_ctx(s) - T + 1);
    sp_status st = catch_up(s, t, pending, err);
    for (int32_t i = 0; i < k && st == SP_OK; i++) {
        int32_t tok;
        sp_pick r = sp_drafter_pick(d, sp_session_last_logits(s), i, &tok, &q[i]);
        if (r == SP_PICK_END)
            break;
        out[(*n_out)++] = tok;
        if (r == SP_PICK_LAST || i + 1 == k)
            break;
        int64_t at = sp_session_n_past(s);
        st = sp_session_eval_mtp(s, &tok, sp_session_hidden(s, at - 1), 1, NULL, err);
    }
    return st;
}

void sp_drafter_rollback_mtp(sp_drafter *d, int64_t n_valid)
{
    sp_session *s = sp_drafter_config_of(d)->session;
    int64_t keep = sp_session_mtp_real(s); /* position i reads the target's token i + 1 */
    if (keep > n_valid - 1)
        keep = n_valid > 0 ? n_valid - 1 : 0;
    if (sp_session_n_past(s) > keep)
        sp_session_truncate(s, keep, NULL);
    sp_session_set_mtp_real(s, keep);
}
