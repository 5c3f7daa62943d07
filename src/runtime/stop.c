/* stop.c: the stop rules shared by plain and speculative decoding (see stop.h). */
#include "runtime/stop.h"

bool sp_stop_emit(const sp_stop_rules *r, int32_t tok, int32_t *out_tokens,
                  sp_generate_stats *stats)
{
    if (out_tokens)
        out_tokens[stats->n_generated] = tok;
    stats->n_generated++;
    if (r->on_token && !r->on_token(r->ctx, tok)) {
        stats->stop_reason = "callback";
        return false;
    }
    if (!r->gp->ignore_eos && sp_model_is_eos(r->m, tok)) {
        stats->stop_reason = "eos";
        return false;
    }
    if (stats->n_generated == r->gp->n_predict) {
        stats->stop_reason = "length";
        return false;
    }
    return true;
}
