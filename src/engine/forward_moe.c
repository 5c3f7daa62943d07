/* forward_moe.c: the mixture-of-experts block.
 *
 *   logits = router(xn) (+ bias)                 fp32, one row per token
 *   (ids, w) = route(logits)                     per token (moe_route.h)
 *   out = sum over the token's experts in ascending id of w * expert(xn)   (backend moe_ffn)
 *         (+ shared experts: a dense SwiGLU MLP)
 *
 * Routing is a pure per-token function and the weighted sum's order is fixed per token, so
 * a token's output never depends on which tokens share its pass; the backend may group the
 * pass's tokens by expert to read each expert's weights once. */
#include "engine/forward_internal.h"
#include "util/error.h"

void sp_expert_formats(const sp_layer *hl, sp_wformat *row_format, bool *row_major_only)
{
    sp_wformat f = SP_WF_NONE;
    bool mixed = false, in_major = false;
    for (int64_t e = 0; e < hl->n_experts; e++) {
        const sp_expert *x = &hl->experts[e];
        if (x->in_major) {
            in_major = true;
            continue;
        }
        const sp_weight *ws[3] = {&x->gate, &x->up, &x->down};
        for (int i = 0; i < 3; i++) {
            if (ws[i]->format == SP_WF_NONE)
                continue;
            mixed = mixed || (f != SP_WF_NONE && ws[i]->format != f);
            f = ws[i]->format;
        }
    }
    *row_format = mixed ? SP_WF_NONE : f;
    *row_major_only = !in_major;
}

static sp_route_cfg route_cfg(const sp_model *m, const sp_layer *L)
{
    const sp_hf_config *c = m->cfg;
    sp_route_cfg r = {
        .kind = m->arch->moe,
        .n_experts = L->n_experts,
        .top_k = L->top_k,
        .norm = m->arch->norm_topk_default || c->norm_topk_prob,
        .n_group = c->n_group,
        .topk_group = c->topk_group,
        .scaling = (float)c->routed_scaling_factor,
        .score_bias = L->score_bias,
    };
    if (r.kind == SP_MOE_SIGMOID_GROUP)
        r.norm = c->has_norm_topk_prob ? c->norm_topk_prob : true; /* DeepseekV3Config default */
    return r;
}

/* The chosen experts as trace rows: k ids then k weights, as floats (read back). */
static void emit_selection(sp_pass *P, int64_t l, int64_t k)
{
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    int64_t n = P->n;
    float *rows = sp_compute_view_staging(c, (size_t)(n * 2 * k + n * 2 * k));
    if (!rows) {
        P->st = sp_err(P->err, SP_ERR_NOMEM, "out of memory reading the chosen experts back");
        return;
    }
    int32_t *ids = (int32_t *)(rows + n * 2 * k);
    float *w = rows + n * 2 * k + n * k;
    sp_status st = be->ops->download(be, ids, c->moe_ids, (size_t)(n * k) * sizeof *ids, P->err);
    if (st == SP_OK)
        st = be->ops->download(be, w, c->moe_w, (size_t)(n * k) * sizeof *w, P->err);
    if (st != SP_OK) {
        P->st = st;
        return;
    }
    for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < k; j++) {
            rows[t * 2 * k + j] = (float)ids[t * k + j];
            rows[t * 2 * k + k + j] = w[t * k + j];
        }
    /* host rows already: offered directly (no perturbation applies to a selection) */
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seg *g = &P->segs[i];
        const sp_observer *o = g->seq->obs;
        if (!o || !o->cb)
            continue;
        sp_trace_event ev = {(int)l, SP_OP_MOE_EXPERTS, g->pos0, g->n, 2 * k, rows + g->row0 * 2 * k,
                             g->seq->tokens + g->first};
        o->cb(o->ctx, &ev);
    }
}

static void shared_experts(sp_pass *P, const sp_layer *L)
{
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    int64_t H = P->m->n_embd;
    be->ops->matmul_swiglu(be, &L->sh_gate, &L->sh_up, c->xn, P->n, c->gate, c->up);
    be->ops->matmul(be, &L->sh_down, c->gate, P->n, c->o, NULL);
    be->ops->add(be, c->ffn, c->o, P->n * H);
}

bool sp_forward_moe(sp_pass *P, int64_t l, const float *next_norm)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    const sp_layer *L = &P->w->layers[l];
    int64_t E = L->n_experts, k = L->top_k, H = m->n_embd;
    be->ops->matmul(be, &L->router, c->xn, P->n, c->router, L->router_bias);
    sp_emit(P, (int)l, SP_OP_MOE_ROUTER, E, c->router);
    sp_route_cfg rc = route_cfg(m, L);
    sp_moe_args a = {
        .row_format = SP_WF_NONE,
        .experts = L->experts,
        .n_experts = E,
        .top_k = k,
        .n_embd = H,
        .inter = L->expert_inter,
        .glu = m->arch->act == SP_ACT_GPTOSS_GLU ? SP_GLU_GPTOSS : SP_GLU_SWIGLU,
        .alpha = (float)m->cfg->swiglu_alpha,
        .limit = (float)m->cfg->swiglu_limit,
        .x = c->xn,
        .n_tok = P->n,
        .ids = c->moe_ids,
        .w = c->moe_w,
        .out = c->ffn,
        .scratch = c->moe_scratch,
        .steps = L->expert_steps,
    };
    sp_expert_formats(&m->layers[l], &a.row_format, &a.row_major_only);
    const bool then_norm = next_norm && be->moe_adds_norm && !SP_TRACE_ON(P) &&
                           L->sh_gate.format == SP_WF_NONE;
    if (then_norm) {
        a.then_x = c->x;
        a.then_w = next_norm;
        a.then_eps = (float)m->cfg->rms_norm_eps;
        a.then_xn = c->xn;
    }
    if (be->ops->moe_route_ffn) { /* one op; the selection is read back after it */
        be->ops->moe_route_ffn(be, &rc, c->router, c->moe_ids, c->moe_w, &a);
        if (SP_TRACE_ON(P))
            emit_selection(P, l, k);
    } else {
        be->ops->moe_route(be, &rc, c->router, P->n, c->moe_ids, c->moe_w);
        if (SP_TRACE_ON(P))
            emit_selection(P, l, k);
        be->ops->moe_ffn(be, &a);
    }
    if (L->sh_gate.format != SP_WF_NONE)
        shared_experts(P, L);
    return then_norm;
}
