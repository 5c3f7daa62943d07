/* speculative.c: speculative generation (see specula.h) and draft compatibility.
 *
 * State between rounds: seq = prompt + generated tokens; the target's KV cache holds all
 * of seq but its last token (`pending`), exactly as in plain decoding. A round:
 *   1. the drafter proposes d1..dm continuing seq (m <= k, limited by the token budget,
 *      the context and the gate);
 *   2. the target evaluates [pending, d1..dm] in one pass: rows r0..rm;
 *   3. greedy: accept while d_i == argmax r_{i-1}; stochastic: the acceptance rule
 *      (spec_verify.c) with p_i = the target's sampling distribution of r_{i-1}, on the
 *      device where the backend verifies (the draft's rows kept there, or one-hot drafts:
 *      two ints come back, the host's tokens), else on the host;
 *   4. one more token comes from the target: the replacement at the first rejection, or
 *      the bonus token from r_m when all were accepted;
 *   5. both KV caches are cut back to the kept prefix (a length decrement).
 * Tokens are emitted one at a time with plain decoding's stop checks (callback, EOS,
 * n_predict, context), so generation ends exactly where plain decoding would. */
#include "model/model.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/spec_draft.h"
#include "runtime/stop.h"
#include "runtime/spec_verify.h"
#include "util/assert.h"
#include "util/ckd.h"
#include "util/clock.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

#define GATE_PAUSE_MIN 8
#define GATE_PAUSE_MAX 128

typedef struct spec_run {
    sp_session *t;
    const sp_generate_params *gp;
    sp_token_fn on_token;
    void *ctx;
    int32_t *out_tokens;
    sp_generate_stats *stats;
    sp_spec_stats *ss;

    sp_sampler *smp;
    sp_rng accept_rng, resample_rng;
    sp_drafter *drafter;
    int32_t *seq;      /* prompt + generated; seq[i] sits at position n_prompt_total - n_prompt + i */
    int64_t n_seq, n_prompt, n_prompt_total;
    int64_t seq_cap;   /* entries allocated in seq (prompt + what the context can hold) */
    float *rows;       /* [k_max + 1, n_vocab] verify logits */
    double *p;         /* [n_vocab] target distribution */
    bool spec_dev;     /* sampled drafts verified on the device where they can be */
    bool done;

    /* acceptance gate */
    bool adaptive;
    int32_t k_cur, k_max;
    double ema;        /* rolling acceptance rate */
    int64_t pause_left, pause_len;
    /* cost gate (greedy): rolling ms a token of plain steps and of speculative rounds (0:
     * none measured yet), and the rounds before the first plain steps */
    bool cost_gate;
    double plain_ms, spec_ms;
    int64_t rounds, cost_pause; /* cost_pause: its next pause (the acceptance gate's apart) */
} spec_run;

/* Emits one token with plain decoding's stop rules; returns false when generation ends. */
static bool emit(spec_run *r, int32_t tok)
{
    sp_stop_rules rules = {sp_session_model(r->t), r->gp, r->on_token, r->ctx};
    SP_ASSERT(r->n_seq < r->seq_cap);
    r->seq[r->n_seq++] = tok;
    return sp_stop_emit(&rules, tok, r->out_tokens, r->stats);
}

/* The target's next token from one row of logits (a uniform of the resampling stream at a
 * temperature). */
static int32_t target_sample(spec_run *r, const float *row)
{
    return sp_sampler_sample(r->smp, row, &r->resample_rng);
}

/* How many draft tokens this round may have. */
static int32_t round_budget(const spec_run *r)
{
    int64_t room = sp_session_n_ctx(r->t) - sp_session_n_past(r->t) - 1; /* verify: pending + drafts */
    int64_t left = r->gp->n_predict - r->stats->n_generated - 1;
    int64_t k = r->k_cur;
    k = k < room ? k : room;
    k = k < left ? k : left;
    return (int32_t)(k > 0 ? k : 0);
}

static void gate_update(spec_run *r, int32_t drafted, int32_t accepted)
{
    if (!drafted || !r->adaptive)
        return;
    double rate = (double)accepted / drafted;
    r->ema = 0.8 * r->ema + 0.2 * rate;
    if (accepted == drafted)
        r->k_cur = r->k_cur + 1 < r->k_max ? r->k_cur + 1 : r->k_max;
    else if (2 * accepted < drafted && r->k_cur > 1)
        r->k_cur--;
    if (r->k_cur == 1 && r->ema < 0.25) { /* speculation does not pay: plain steps for a while */
        r->pause_left = r->pause_len;
        r->pause_len = r->pause_len * 2 < GATE_PAUSE_MAX ? r->pause_len * 2 : GATE_PAUSE_MAX;
        r->ema = 0.5;
    } else if (r->ema > 0.5) {
        r->pause_len = GATE_PAUSE_MIN;
    }
}

/* A rolling mean (0: nothing yet) with one more value. */
static double rolling(double mean, double v) { return mean > 0 ? 0.8 * mean + 0.2 * v : v; }

#define COST_PROBE_ROUNDS 4 /* speculative rounds before the first plain steps are timed */

/* The cost gate, after a speculative round that took ms for n tokens: a first short pause
 * to time plain steps at all (after COST_PROBE_ROUNDS rounds), then plain steps for a
 * while whenever rounds are slower a token than plain steps (pauses doubling while that
 * lasts, as the acceptance gate's; one round after each to look again). */
static void cost_update(spec_run *r, double ms, int32_t n)
{
    if (!r->cost_gate || n <= 0)
        return;
    r->spec_ms = rolling(r->spec_ms, ms / n);
    if (r->pause_left > 0 || (r->plain_ms == 0 && ++r->rounds < COST_PROBE_ROUNDS))
        return;
    if (r->plain_ms == 0) {
        r->pause_left = GATE_PAUSE_MIN;
    } else if (r->spec_ms > r->plain_ms) {
        r->pause_left = r->cost_pause;
        r->cost_pause = r->cost_pause * 2 < GATE_PAUSE_MAX ? r->cost_pause * 2 : GATE_PAUSE_MAX;
    } else {
        r->cost_pause = GATE_PAUSE_MIN;
    }
}

/* Evaluates tokens on the target and gives its next token: the greedy pick or the draw of
 * the eval (made on the device where the backend can; a draw with the resampling stream's
 * next uniform, target_sample's token). */
static sp_status target_next(spec_run *r, const int32_t *tokens, size_t n, int32_t *next,
                             sp_error *err)
{
    if (r->gp->sampling.temperature == 0.0f)
        return sp_session_eval_greedy(r->t, tokens, n, next, err);
    return sp_session_eval_sample(r->t, tokens, n, &r->gp->sampling,
                                  sp_rng_uniform(&r->resample_rng), next, err);
}

/* A step without drafts: evaluate pending, sample the next token. */
static sp_status plain_step(spec_run *r, sp_error *err)
{
    int32_t pending = r->seq[r->n_seq - 1], next;
    double t0 = sp_now_ms();
    sp_status st = target_next(r, &pending, 1, &next, err);
    double ms = sp_now_ms() - t0;
    r->ss->verify_ms += ms;
    if (st != SP_OK)
        return st;
    r->ss->plain_steps++;
    if (r->cost_gate)
        r->plain_ms = rolling(r->plain_ms, ms);
    if (r->drafter)
        sp_drafter_rollback(r->drafter, sp_session_n_past(r->t));
    r->done = !emit(r, next);
    return SP_OK;
}

/* Verifies m drafts; returns the number accepted and the target's extra token. Greedy:
 * picks[i] is row i's argmax (the rows are not read); else the rows' logits. */
static int32_t verify(spec_run *r, const int32_t *d, const double *const *q, int64_t n_q,
                      int32_t m, const int32_t *picks, int32_t *extra)
{
    int64_t V = sp_model_n_vocab(sp_session_model(r->t));
    if (picks) {
        for (int32_t i = 0; i < m; i++)
            if (picks[i] != d[i]) {
                *extra = picks[i];
                return i;
            }
        *extra = picks[m];
        return m;
    }
    for (int32_t i = 0; i < m; i++) {
        const float *row = r->rows + (size_t)i * (size_t)V;
        sp_sampler_dist(r->smp, row, r->p);
        if (!sp_spec_verify_token(r->p, V, q[i], n_q, d[i], &r->accept_rng, &r->resample_rng, extra))
            return i;
    }
    *extra = target_sample(r, r->rows + (size_t)m * (size_t)V);
    return m;
}

/* The drafts' verification on the device (sp_session_eval_verify) with the uniforms the
 * host's rule would take next: *acc and *extra, the streams advanced by what the rule used;
 * or *acc = -1, the streams untouched and the rows in r->rows (the host verifies). */
static sp_status verify_device(spec_run *r, const int32_t *tokens, int32_t m, const float *draft_rows,
                               int32_t *acc, int32_t *extra, sp_error *err)
{
    double u[SP_SPEC_DEV_K], v;
    sp_spec_peek(&r->accept_rng, &r->resample_rng, m, u, &v);
    const sp_sample_req w = sp_sample_req_of(&r->gp->sampling, 0.0);
    /* the bonus token draws from the same stream as a replacement (target_sample) */
    const sp_spec_req req = {.draft_rows = draft_rows, .p = w, .q = w, .u = u, .v = v, .v_bonus = v};
    sp_status st = sp_session_eval_verify(r->t, tokens, (size_t)m + 1, &req, r->rows, acc, extra, err);
    if (st != SP_OK || *acc < 0)
        return st;
    sp_spec_took(&r->accept_rng, &r->resample_rng, *acc, m);
    if (*acc == m) /* the bonus token's */
        (void)sp_rng_uniform(&r->resample_rng);
    return SP_OK;
}

/* Where the drafts' distributions are (for verify_device): the draft session's kept rows,
 * or one-hot (*rows NULL); false when any is on the host (a sampled non-kept draft, or a
 * kept draft whose draw the device left to the host: the verification would build the
 * same distribution from that row and leave it to the host too, so the target's rows come
 * straight back). */
static bool drafts_on_device(const spec_run *r, const double *const *q, int32_t m, const float **rows)
{
    *rows = NULL;
    for (int32_t i = 0; i < m; i++)
        if (q[i])
            return false;
    if (sp_drafter_kept(r->drafter)) {
        *rows = sp_session_kept(sp_drafter_config_of(r->drafter)->session, 0);
        return *rows != NULL;
    }
    return true;
}

static sp_status spec_round(spec_run *r, sp_error *err)
{
    int32_t k = r->pause_left > 0 ? 0 : round_budget(r);
    if (r->pause_left > 0)
        r->pause_left--;
    int32_t drafts[SP_SPEC_MAX_K + 1], m = 0;
    const double *q[SP_SPEC_MAX_K];
    int64_t n_q = 0;
    double t0 = sp_now_ms(), t_round = t0;
    int64_t base = r->n_prompt_total - (int64_t)r->n_prompt;
    sp_status st = k > 0 ? sp_drafter_propose(r->drafter, r->seq, r->n_seq, base, k, drafts + 1, q,
                                              &n_q, &m, err)
                         : SP_OK;
    r->ss->draft_ms += sp_now_ms() - t0;
    if (st != SP_OK)
        return st;
    if (m == 0)
        return plain_step(r, err);
    int64_t past = sp_session_n_past(r->t);
    drafts[0] = r->seq[r->n_seq - 1];
    t0 = sp_now_ms();
    /* greedy: the rows' picks only (on the device where the backend can) */
    const bool greedy = r->gp->sampling.temperature == 0.0f;
    int32_t picks[SP_SPEC_MAX_K + 1], extra = -1, acc = -1;
    const float *draft_rows;
    if (greedy)
        st = sp_session_eval_picks(r->t, drafts, (size_t)m + 1, r->rows, picks, err);
    else if (r->spec_dev && m <= SP_SPEC_DEV_K && drafts_on_device(r, q, m, &draft_rows))
        st = verify_device(r, drafts, m, draft_rows, &acc, &extra, err);
    else
        st = sp_session_eval(r->t, drafts, (size_t)m + 1, r->rows, err);
    /* rows the device left to the host: the kept draft rows' distributions not yet here
     * read back */
    for (int32_t i = 0; st == SP_OK && acc < 0 && !greedy && sp_drafter_kept(r->drafter) && i < m; i++)
        if (!q[i])
            st = sp_drafter_q_kept(r->drafter, sp_drafter_config_of(r->drafter)->session, i, &q[i],
                                   err);
    if (st != SP_OK)
        return st;
    if (acc < 0)
        acc = verify(r, drafts + 1, q, n_q, m, greedy ? picks : NULL, &extra);
    r->ss->verify_ms += sp_now_ms() - t0;
    sp_session_truncate(r->t, past + 1 + acc, NULL);
    sp_drafter_rollback(r->drafter, past + 1 + acc);
    sp_spec_stats *ss = r->ss;
    ss->drafts++;
    ss->drafted += m;
    ss->accepted += acc;
    for (int32_t i = 0; i < m; i++)
        ss->drafted_per_pos[i]++;
    for (int32_t i = 0; i < acc; i++)
        ss->accepted_per_pos[i]++;
    gate_update(r, m, acc);
    cost_update(r, sp_now_ms() - t_round, acc + 1);
    for (int32_t i = 0; i < acc && !r->done; i++)
        r->done = !emit(r, drafts[1 + i]);
    if (!r->done)
        r->done = !emit(r, extra);
    return SP_OK;
}

static sp_status check_params(const sp_session *t, const sp_spec_params *sp, sp_error *err)
{
    if (sp->k < 0 || sp->k > SP_SPEC_MAX_K)
        return sp_err(err, SP_ERR_INVALID_ARG, "draft-k %d must be in [1, %d]", sp->k, SP_SPEC_MAX_K);
    if (!(sp->p_min >= 0 && sp->p_min <= 1))
        return sp_err(err, SP_ERR_INVALID_ARG, "draft-p-min %g must be in [0, 1]", (double)sp->p_min);
    if (sp->kind == SP_DRAFT_NGRAM) {
        int32_t lo = sp->ngram_min ? sp->ngram_min : 1, hi = sp->ngram_max ? sp->ngram_max : 3;
        if (lo < 0 || hi < lo || hi > 64)
            return sp_err(err, SP_ERR_INVALID_ARG, "n-gram sizes [%d, %d] must satisfy 1 <= min <= max <= 64",
                          lo, hi);
        return SP_OK;
    }
    if (sp->kind == SP_DRAFT_MTP) {
        if (!sp->draft || sp_session_mtp_target(sp->draft) != t)
            return sp_err(err, SP_ERR_INVALID_ARG, "MTP drafting needs the target's MTP session "
                          "(sp_session_new_mtp)");
        return SP_OK;
    }
    if (sp->kind != SP_DRAFT_MODEL && sp->kind != SP_DRAFT_SELF)
        return sp_err(err, SP_ERR_INVALID_ARG, "unknown draft kind %d", (int)sp->kind);
    if (!sp->draft || sp->draft == t)
        return sp_err(err, SP_ERR_INVALID_ARG, "a model draft needs its own session (not the target's)");
    if (sp->kind == SP_DRAFT_SELF && sp_session_model(sp->draft) != sp_session_model(t))
        return sp_err(err, SP_ERR_INVALID_ARG, "self drafting needs a session of the target model");
    if (sp_session_n_past(sp->draft) != sp_session_n_past(t))
        return sp_err(err, SP_ERR_INVALID_ARG, "the draft session holds %lld positions and the "
                      "target's %lld: give both the same prefix", (long long)sp_session_n_past(sp->draft),
                      (long long)sp_session_n_past(t));
    if (sp_session_n_ctx(sp->draft) < sp_session_n_ctx(t))
        return sp_err(err, SP_ERR_INVALID_ARG, "the draft session holds %lld tokens, less than the "
                      "target's %lld", (long long)sp_session_n_ctx(sp->draft), (long long)sp_session_n_ctx(t));
    return SP_OK;
}

static void run_free(spec_run *r)
{
    sp_sampler_free(r->smp);
    sp_drafter_free(r->drafter);
    free(r->seq);
    free(r->rows);
    free(r->p);
}

static sp_status run_init(spec_run *r, const sp_spec_params *sp, size_t n_prompt, sp_error *err)
{
    const sp_generate_params *gp = r->gp;
    int64_t V = sp_model_n_vocab(sp_session_model(r->t));
    r->k_max = sp->k ? sp->k : 4;
    r->adaptive = sp->adaptive;
    r->cost_gate = sp->adaptive && sp->cost_gate && gp->sampling.temperature == 0.0f;
    r->k_cur = r->k_max;
    r->spec_dev = gp->sampling.temperature > 0.0f && sp_session_can_verify(r->t, NULL);
    r->ema = 1.0;
    r->pause_len = r->cost_pause = GATE_PAUSE_MIN;
    r->ss->k_max = r->k_max;
    sp_rng_seed(&r->accept_rng, gp->sampling.seed ^ SP_SPEC_STREAM_ACCEPT);
    sp_rng_seed(&r->resample_rng, gp->sampling.seed ^ SP_SPEC_STREAM_RESAMPLE);
    sp_status st = sp_sampler_new(&gp->sampling, V, &r->smp, err);
    if (st != SP_OK)
        return st;
    /* seq never holds more than the context can: n_predict is clamped to what fits
     * (the last generated token is sampled but not evaluated, hence + 1) */
    int64_t fit = sp_session_n_ctx(r->t) - sp_session_n_past(r->t) - (int64_t)n_prompt + 1;
    int64_t n_gen = gp->n_predict < fit ? gp->n_predict : fit;
    if (n_gen < 0)
        n_gen = 0;
    size_t seq_n, rows_n, seq_bytes, rows_bytes;
    if (sp_ckd_add_size(&seq_n, n_prompt, (size_t)n_gen + 1) ||
        sp_ckd_mul_size(&seq_bytes, seq_n, sizeof *r->seq) ||
        sp_ckd_mul3_size(&rows_n, (size_t)r->k_max + 1, (size_t)V, 1) ||
        sp_ckd_mul_size(&rows_bytes, rows_n, sizeof *r->rows))
        return sp_err(err, SP_ERR_INVALID_ARG, "a prompt of %zu tokens is too long", n_prompt);
    r->seq = malloc(seq_bytes);
    r->seq_cap = (int64_t)seq_n;
    r->rows = malloc(rows_bytes);
    r->p = malloc((size_t)V * sizeof *r->p);
    if (!r->seq || !r->rows || !r->p)
        return sp_err(err, SP_ERR_NOMEM, "out of memory for speculative decoding");
    sp_drafter_config dc = {
        .kind = sp->kind,
        .session = sp->draft,
        .target = r->t,
        .sampling = &gp->sampling,
        .k_max = r->k_max,
        .p_min = sp->p_min,
        .ngram_min = sp->ngram_min ? sp->ngram_min : 1,
        .ngram_max = sp->ngram_max ? sp->ngram_max : 3,
        .target_vocab = V,
        .stop_at_eos = !gp->ignore_eos,
        .eos_model = sp_session_model(r->t),
        .seed = gp->sampling.seed ^ SP_SPEC_STREAM_DRAFT,
        /* sampled drafts verified on the target's device where it can read the draft's rows */
        .keep_rows = r->spec_dev && r->k_max <= SP_SPEC_DEV_K && sp->draft &&
                     (sp->kind == SP_DRAFT_MODEL || sp->kind == SP_DRAFT_SELF) &&
                     sp_session_can_verify(r->t, sp->draft),
    };
    if (sp->kind == SP_DRAFT_NGRAM && dc.ngram_min > dc.ngram_max)
        dc.ngram_min = dc.ngram_max;
    return sp_drafter_new(&dc, &r->drafter, err);
}

sp_status sp_generate_spec(sp_session *t, const int32_t *prompt, size_t n_prompt,
                           const sp_generate_params *gp, const sp_spec_params *sp,
                           sp_token_fn on_token, void *ctx, int32_t *out_tokens,
                           sp_generate_stats *stats, sp_spec_stats *spec_stats, sp_error *err)
{
    sp_generate_stats st0 = {0};
    sp_spec_stats ss0 = {0};
    if (!stats)
        stats = &st0;
    if (!spec_stats)
        spec_stats = &ss0;
    *stats = (sp_generate_stats){.stop_reason = "length", .n_prompt = (int64_t)n_prompt};
    memset(spec_stats, 0, sizeof *spec_stats);
    if (n_prompt == 0)
        return sp_err(err, SP_ERR_INVALID_ARG, "the prompt is empty");
    if (gp->n_predict < 0)
        return sp_err(err, SP_ERR_INVALID_ARG, "cannot generate %lld tokens", (long long)gp->n_predict);
    sp_status st = check_params(t, sp, err);
    if (st != SP_OK)
        return st;
    spec_run r = {.t = t, .gp = gp, .on_token = on_token, .ctx = ctx, .out_tokens = out_tokens,
                  .stats = stats, .ss = spec_stats};
    int64_t prefix = sp_session_n_past(t); /* the session may already hold a prefix */
    if ((st = run_init(&r, sp, n_prompt, err)) != SP_OK) {
        run_free(&r);
        return st;
    }
    /* a session may already hold a prefix; a model drafter's session must hold the same */
    memcpy(r.seq, prompt, n_prompt * sizeof *prompt);
    r.n_seq = r.n_prompt = (int64_t)n_prompt;
    r.n_prompt_total = prefix + (int64_t)n_prompt;
    double t0 = sp_now_ms();
    int32_t first = -1;
    st = target_next(&r, prompt, n_prompt, &first, err);
    double t1 = sp_now_ms();
    stats->prefill_ms = t1 - t0;
    if (st == SP_OK && gp->n_predict > 0)
        r.done = !emit(&r, first);
    else
        r.done = true;
    while (st == SP_OK && !r.done) {
        if (sp_session_n_past(t) >= sp_session_n_ctx(t)) {
            stats->stop_reason = "context";
            break;
        }
        st = spec_round(&r, err);
    }
    /* leave the session as plain decoding does: everything but the last token */
    if (st == SP_OK && stats->n_generated > 0 && sp_session_n_past(t) > r.n_prompt_total + stats->n_generated - 1)
        sp_session_truncate(t, r.n_prompt_total + stats->n_generated - 1, NULL);
    stats->decode_ms = sp_now_ms() - t1;
    run_free(&r);
    return st;
}
