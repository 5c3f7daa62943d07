/* generate.c: plain autoregressive generation (prefill, then one token per pass).
 * Speculative generation (speculative.c) must produce exactly the tokens this loop
 * produces under greedy decoding. */
#include "model/model.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/stop.h"
#include "util/clock.h"
#include "util/error.h"

#include <string.h>

sp_sampling_params sp_model_sampling_defaults(const sp_model *m)
{
    sp_sampling_params p = sp_sampling_default_params();
    if (m->cfg->gen_do_sample) {
        p.temperature = (float)m->cfg->gen_temperature;
        p.top_k = (int32_t)m->cfg->gen_top_k;
        p.top_p = (float)m->cfg->gen_top_p;
        p.min_p = (float)m->cfg->gen_min_p;
    }
    return p;
}

int32_t sp_model_draft_tokens(const sp_model *m)
{
    int64_t k = m->cfg->gen_num_assistant_tokens;
    return k > INT32_MAX ? INT32_MAX : (int32_t)k;
}

/* The greedy picks after the first on their way through the stop rules. */
typedef struct emit_ctx {
    const sp_stop_rules *rules;
    int32_t *out_tokens;
    sp_generate_stats *stats;
    bool stopped;
} emit_ctx;

static bool emit_pick(void *p, int32_t tok)
{
    emit_ctx *e = p;
    e->stopped = !sp_stop_emit(e->rules, tok, e->out_tokens, e->stats);
    return !e->stopped;
}

/* Greedy decoding after the prompt's pick `first`: the loop below, with the steps fed on
 * the device where the backend picks there (sp_session_decode_greedy), asked for no more
 * steps than the context and n_predict leave. */
static sp_status decode_greedy(sp_session *s, int32_t first, const sp_stop_rules *rules,
                               int32_t *out_tokens, sp_generate_stats *stats, sp_error *err)
{
    if (!sp_stop_emit(rules, first, out_tokens, stats))
        return SP_OK;
    int64_t room = sp_session_n_ctx(s) - sp_session_n_past(s);
    int64_t left = rules->gp->n_predict - stats->n_generated; /* > 0: emit went on */
    emit_ctx e = {rules, out_tokens, stats, false};
    size_t n = 0;
    sp_status st = room <= 0 ? SP_OK
                             : sp_session_decode_greedy(s, first, (size_t)(left < room ? left : room),
                                                        emit_pick, &e, &n, err);
    if (st == SP_OK && !e.stopped)
        stats->stop_reason = "context";
    return st;
}

sp_status sp_generate(sp_session *s, const int32_t *prompt, size_t n_prompt,
                      const sp_generate_params *gp, sp_token_fn on_token, void *ctx,
                      int32_t *out_tokens, sp_generate_stats *stats, sp_error *err)
{
    sp_generate_stats st0 = {0};
    st0.stop_reason = "length";
    st0.n_prompt = (int64_t)n_prompt;
    if (!stats)
        stats = &st0;
    *stats = st0;
    if (n_prompt == 0)
        return sp_err(err, SP_ERR_INVALID_ARG, "the prompt is empty");
    if (gp->n_predict < 0)
        return sp_err(err, SP_ERR_INVALID_ARG, "cannot generate %lld tokens",
                      (long long)gp->n_predict);
    sp_status st = sp_sampling_check(&gp->sampling, err);
    if (st != SP_OK)
        return st;
    sp_rng rng;
    sp_rng_seed(&rng, gp->sampling.seed);
    /* the picks and draws come from the evals (on the device where the backend can); a
     * draw takes the stream's next uniform, as sp_sampler_sample would from the logits */
    const bool greedy = gp->sampling.temperature == 0.0f;
    int32_t next = -1;
    double t0 = sp_now_ms();
    st = greedy ? sp_session_eval_greedy(s, prompt, n_prompt, &next, err)
                : sp_session_eval_sample(s, prompt, n_prompt, &gp->sampling, sp_rng_uniform(&rng),
                                         &next, err);
    double t1 = sp_now_ms();
    stats->prefill_ms = t1 - t0;
    sp_stop_rules rules = {sp_session_model(s), gp, on_token, ctx};
    if (st == SP_OK && gp->n_predict > 0 && greedy)
        st = decode_greedy(s, next, &rules, out_tokens, stats, err);
    while (st == SP_OK && gp->n_predict > 0 && !greedy) {
        int32_t tok = next;
        if (!sp_stop_emit(&rules, tok, out_tokens, stats))
            break;
        if (sp_session_n_past(s) >= sp_session_n_ctx(s)) {
            stats->stop_reason = "context";
            break;
        }
        st = sp_session_eval_sample(s, &tok, 1, &gp->sampling, sp_rng_uniform(&rng), &next, err);
    }
    stats->decode_ms = sp_now_ms() - t1;
    return st;
}
