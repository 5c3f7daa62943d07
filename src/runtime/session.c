/* session.c: creating sessions from a size plan, evaluating tokens, KV rollback
 * (see session.h and specula.h). */
#include "runtime/session.h"
#include "util/ckd.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

#define DEFAULT_CTX 4096
#define DEFAULT_BATCH 256

sp_session_params sp_session_default_params(void)
{
    sp_session_params p = {0};
    return p;
}

/* A bump allocator over one block, so a session is a handful of allocations. */
typedef struct plan {
    size_t n_floats;
    float *base;
} plan;

static float *take(plan *p, size_t n)
{
    float *r = p->base ? p->base + p->n_floats : NULL;
    p->n_floats += (n + 15) & ~(size_t)15; /* 64-byte granules */
    return r;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* Widest expert activation: gpt-oss's interleaved gate/up (2 I) or a shared expert. */
static size_t expert_width(const sp_model *m)
{
    size_t w = 0;
    for (int64_t l = 0; l < m->n_layers; l++) {
        const sp_layer *L = &m->layers[l];
        if (!L->moe)
            continue;
        w = max_sz(w, 2 * (size_t)L->expert_inter);
        if (L->sh_gate.format != SP_WF_NONE)
            w = max_sz(w, (size_t)L->sh_gate.rows);
    }
    return w;
}

static void lay_out(sp_session *s, plan *p)
{
    const sp_model *m = s->m;
    size_t B = (size_t)s->n_batch, H = (size_t)m->n_embd;
    size_t inter = (size_t)(m->cfg->intermediate_size > 0 ? m->cfg->intermediate_size : 0);
    size_t E = (size_t)m->cfg->n_experts, K = (size_t)m->cfg->n_experts_per_tok;
    s->x = take(p, B * H);
    s->xn = take(p, B * H);
    s->q = take(p, B * (size_t)m->q_dim);
    s->k = take(p, B * (size_t)m->kv_dim_k);
    s->v = take(p, B * (size_t)m->kv_dim_v);
    s->att = take(p, B * (size_t)(m->n_heads * m->v_dim));
    s->o = take(p, B * H);
    s->gate = take(p, B * inter);
    s->up = take(p, B * inter);
    s->ffn = take(p, B * H);
    if (m->arch->attn == SP_ATTN_MLA) {
        size_t nh = (size_t)m->n_heads;
        s->mla_a = take(p, B * max_sz((size_t)m->mla_q_lora, (size_t)m->kv_dim_k));
        s->mla_b = take(p, B * nh * (size_t)(m->mla_nope + m->mla_rope));
        s->mla_c = take(p, B * nh * (size_t)m->mla_v);
        s->mla_t = take(p, B * (size_t)m->mla_kv_lora);
        s->mla_u = take(p, B * (size_t)m->mla_v);
    }
    s->rope_cs = take(p, B * (size_t)m->rope.dim);
    s->attn_scratch = take(p, (size_t)sp_pool_n_threads(m->pool) * (size_t)s->n_ctx);
    s->logits = take(p, (size_t)m->n_vocab);
    if (E && K) {
        size_t ew = expert_width(m);
        s->moe.router = take(p, B * E);
        s->moe.w = take(p, B * K);
        s->moe.sel = take(p, B * 2 * K);
        s->moe.route_tmp = take(p, 2 * E);
        s->moe.xg = take(p, B * H);
        s->moe.g = take(p, B * ew);
        s->moe.u = take(p, B * ew);
        s->moe.y = take(p, B * H);
        s->moe.slots = take(p, B * K * H);
    }
}

sp_status sp_session_new(sp_model *m, const sp_session_params *params, sp_session **out,
                         sp_error *err)
{
    *out = NULL;
    sp_session_params p = params ? *params : sp_session_default_params();
    int64_t n_ctx = p.n_ctx > 0 ? p.n_ctx : (m->cfg->max_pos < DEFAULT_CTX ? m->cfg->max_pos : DEFAULT_CTX);
    int64_t n_batch = p.n_batch > 0 ? p.n_batch : DEFAULT_BATCH;
    if (n_ctx > m->cfg->max_pos)
        return sp_err(err, SP_ERR_LIMIT,
                      "context of %lld tokens exceeds the model's max_position_embeddings %lld",
                      (long long)n_ctx, (long long)m->cfg->max_pos);
    if (n_batch > n_ctx)
        n_batch = n_ctx;
    sp_session *s = calloc(1, sizeof *s);
    if (!s)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    s->m = m;
    s->n_ctx = n_ctx;
    s->n_batch = n_batch;
    size_t kv_floats;
    if (sp_ckd_mul3_size(&kv_floats, (size_t)m->n_layers, (size_t)n_ctx,
                         (size_t)(m->kv_dim_k + m->kv_dim_v))) {
        free(s);
        return sp_err(err, SP_ERR_NOMEM, "KV cache size overflows");
    }
    plan sizing = {0, NULL};
    lay_out(s, &sizing);
    size_t K = (size_t)m->cfg->n_experts_per_tok, E = (size_t)m->cfg->n_experts;
    s->kv_mem = malloc(kv_floats * sizeof(float));
    s->k_cache = calloc((size_t)m->n_layers, sizeof *s->k_cache);
    s->v_cache = calloc((size_t)m->n_layers, sizeof *s->v_cache);
    float *scratch = malloc(sizing.n_floats * sizeof(float));
    s->moe.ids = calloc((size_t)n_batch * (K ? K : 1), sizeof(int32_t));
    s->moe.list = calloc((size_t)n_batch * (K ? K : 1), sizeof(int32_t));
    s->moe.count = calloc(E + 1, sizeof(int32_t));
    s->moe.fill = calloc(E + 1, sizeof(int32_t));
    if (!s->kv_mem || !s->k_cache || !s->v_cache || !scratch || !s->moe.ids || !s->moe.list ||
        !s->moe.count || !s->moe.fill) {
        free(scratch);
        sp_session_free(s);
        return sp_err(err, SP_ERR_NOMEM, "out of memory allocating a %lld-token session",
                      (long long)n_ctx);
    }
    plan real = {0, scratch};
    lay_out(s, &real);
    for (int64_t l = 0; l < m->n_layers; l++) {
        s->k_cache[l] = s->kv_mem + (size_t)l * (size_t)n_ctx * (size_t)(m->kv_dim_k + m->kv_dim_v);
        s->v_cache[l] = s->k_cache[l] + (size_t)n_ctx * (size_t)m->kv_dim_k;
    }
    *out = s;
    return SP_OK;
}

void sp_session_free(sp_session *s)
{
    if (!s)
        return;
    free(s->x); /* the scratch block starts at x */
    free(s->kv_mem);
    free(s->k_cache);
    free(s->v_cache);
    free(s->moe.ids);
    free(s->moe.list);
    free(s->moe.count);
    free(s->moe.fill);
    free(s);
}

sp_status sp_session_eval(sp_session *s, const int32_t *tokens, size_t n_tokens, float *logits,
                          sp_error *err)
{
    if (n_tokens == 0)
        return sp_err(err, SP_ERR_INVALID_ARG, "no tokens to evaluate");
    if ((int64_t)n_tokens > s->n_ctx - s->n_past)
        return sp_err(err, SP_ERR_LIMIT,
                      "%zu tokens do not fit: %lld of the %lld-token context are used",
                      n_tokens, (long long)s->n_past, (long long)s->n_ctx);
    for (size_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= s->m->n_vocab)
            return sp_err(err, SP_ERR_INVALID_ARG,
                          "token %zu: id %d is outside the vocabulary [0, %lld)", i, tokens[i],
                          (long long)s->m->n_vocab);
    return sp_forward(s, tokens, (int64_t)n_tokens, logits, err);
}

const float *sp_session_last_logits(const sp_session *s)
{
    return s->has_logits ? s->logits : NULL;
}

int64_t sp_session_n_past(const sp_session *s) { return s->n_past; }
int64_t sp_session_n_ctx(const sp_session *s) { return s->n_ctx; }

sp_status sp_session_truncate(sp_session *s, int64_t n_past, sp_error *err)
{
    if (n_past < 0 || n_past > s->n_past)
        return sp_err(err, SP_ERR_INVALID_ARG, "cannot truncate to %lld: session holds %lld",
                      (long long)n_past, (long long)s->n_past);
    s->n_past = n_past;
    s->has_logits = false;
    return SP_OK;
}

void sp_session_set_trace(sp_session *s, sp_trace_cb cb, void *ctx)
{
    s->trace = cb;
    s->trace_ctx = ctx;
}

sp_status sp_batch_eval(sp_model *m, const sp_batch_item *items, size_t n_items, sp_error *err)
{
    for (size_t i = 0; i < n_items; i++) {
        if (!items[i].session || items[i].session->m != m)
            return sp_err(err, SP_ERR_INVALID_ARG, "batch item %zu: session is not of this model", i);
        for (size_t j = 0; j < i; j++)
            if (items[j].session == items[i].session)
                return sp_err(err, SP_ERR_INVALID_ARG, "batch items %zu and %zu share a session", j, i);
    }
    for (size_t i = 0; i < n_items; i++) {
        sp_status st = sp_session_eval(items[i].session, items[i].tokens, items[i].n_tokens,
                                       items[i].logits, err);
        if (st != SP_OK)
            return st;
    }
    return SP_OK;
}
