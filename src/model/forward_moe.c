/* forward_moe.c: the mixture-of-experts block.
 *
 *   logits = router(xn) (+ bias)                 fp32, one row per token
 *   (ids, w) = route(logits)                     per token (moe_route.c)
 *   y_e = expert_e(xn rows routed to e)          tokens grouped by expert, one batched
 *                                                matmul per expert (row results do not
 *                                                depend on the group: see matmul.h)
 *   out = sum over the token's experts in ascending id of w * y_e  (+ shared experts)
 *
 * The order of the weighted sum is fixed per token (ascending expert id, as transformers'
 * index_add_ loop), so a token's output never depends on which tokens share its batch. */
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "model/forward_internal.h"
#include "model/moe_route.h"

#include <math.h>
#include <string.h>

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

/* gpt-oss activation over interleaved (gate, up) pairs: gu [n, 2I] -> h [n, I]. */
static void gptoss_glu(const float *gu, int64_t n, int64_t I, float alpha, float limit, float *h)
{
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < I; i++) {
            float g = gu[t * 2 * I + 2 * i], u = gu[t * 2 * I + 2 * i + 1];
            g = g > limit ? limit : g;
            u = u > limit ? limit : u < -limit ? -limit : u;
            float glu = g * (1.0f / (1.0f + expf(-(g * alpha))));
            h[t * I + i] = (u + 1.0f) * glu;
        }
}

/* One expert over the cnt gathered rows of s->moe.xg; result in s->moe.y. */
static void run_expert(sp_session *s, const sp_layer *L, const sp_expert *x, int64_t cnt)
{
    const sp_model *m = s->m;
    sp_pool *pool = m->pool;
    sp_moe_scratch *ms = &s->moe;
    int64_t H = m->n_embd, I = L->expert_inter;
    if (m->arch->act == SP_ACT_GPTOSS_GLU) {
        if (x->in_major)
            sp_matmul_t(pool, &x->gate, 0, H, ms->xg, H, cnt, ms->g, 2 * I, x->gate_up_bias);
        else
            sp_matmul(pool, &x->gate, ms->xg, cnt, ms->g, x->gate_up_bias);
        gptoss_glu(ms->g, cnt, I, (float)m->cfg->swiglu_alpha, (float)m->cfg->swiglu_limit, ms->u);
        if (x->in_major)
            sp_matmul_t(pool, &x->down, 0, I, ms->u, I, cnt, ms->y, H, x->down_bias);
        else
            sp_matmul(pool, &x->down, ms->u, cnt, ms->y, x->down_bias);
        return;
    }
    sp_matmul(pool, &x->gate, ms->xg, cnt, ms->g, NULL);
    sp_matmul(pool, &x->up, ms->xg, cnt, ms->u, NULL);
    sp_swiglu(ms->g, ms->u, cnt * I, ms->g);
    sp_matmul(pool, &x->down, ms->g, cnt, ms->y, NULL);
}

/* Groups the (token, slot) selections by expert: list[offset[e] .. offset[e+1]). */
static void group_by_expert(sp_moe_scratch *ms, int64_t n, int64_t E, int64_t k)
{
    memset(ms->count, 0, (size_t)(E + 1) * sizeof *ms->count);
    for (int64_t i = 0; i < n * k; i++)
        ms->count[ms->ids[i] + 1]++;
    for (int64_t e = 0; e < E; e++)
        ms->count[e + 1] += ms->count[e];
    memcpy(ms->fill, ms->count, (size_t)E * sizeof *ms->fill);
    for (int64_t i = 0; i < n * k; i++) /* token order within an expert */
        ms->list[ms->fill[ms->ids[i]]++] = (int32_t)i;
}

static void shared_experts(sp_session *s, const sp_layer *L, int64_t n)
{
    sp_pool *pool = s->m->pool;
    sp_moe_scratch *ms = &s->moe;
    int64_t I = L->sh_gate.rows, H = s->m->n_embd;
    sp_matmul(pool, &L->sh_gate, s->xn, n, ms->g, NULL);
    sp_matmul(pool, &L->sh_up, s->xn, n, ms->u, NULL);
    sp_swiglu(ms->g, ms->u, n * I, ms->g);
    sp_matmul(pool, &L->sh_down, ms->g, n, ms->y, NULL);
    sp_add_inplace(s->ffn, ms->y, n * H);
}

void sp_forward_moe(sp_session *s, int64_t l, int64_t n)
{
    sp_model *m = s->m;
    const sp_layer *L = &m->layers[l];
    sp_moe_scratch *ms = &s->moe;
    int64_t E = L->n_experts, k = L->top_k, H = m->n_embd;
    sp_matmul(m->pool, &L->router, s->xn, n, ms->router, L->router_bias);
    sp_trace_emit(s, (int)l, SP_OP_MOE_ROUTER, n, E, ms->router);
    sp_route_cfg rc = route_cfg(m, L);
    for (int64_t t = 0; t < n; t++)
        sp_moe_route(&rc, ms->router + t * E, ms->ids + t * k, ms->w + t * k, ms->route_tmp);
    if (SP_TRACE_ON(s)) {
        for (int64_t t = 0; t < n; t++)
            for (int64_t j = 0; j < k; j++) {
                ms->sel[t * 2 * k + j] = (float)ms->ids[t * k + j];
                ms->sel[t * 2 * k + k + j] = ms->w[t * k + j];
            }
        sp_trace_emit(s, (int)l, SP_OP_MOE_EXPERTS, n, 2 * k, ms->sel);
    }
    group_by_expert(ms, n, E, k);
    for (int64_t e = 0; e < E; e++) {
        int64_t b = ms->count[e], cnt = ms->count[e + 1] - b;
        if (!cnt)
            continue;
        for (int64_t r = 0; r < cnt; r++)
            memcpy(ms->xg + r * H, s->xn + (ms->list[b + r] / k) * H, (size_t)H * sizeof(float));
        run_expert(s, L, &L->experts[e], cnt);
        for (int64_t r = 0; r < cnt; r++)
            memcpy(ms->slots + (size_t)ms->list[b + r] * (size_t)H, ms->y + r * H,
                   (size_t)H * sizeof(float));
    }
    /* weighted sum per token, ascending expert id */
    for (int64_t t = 0; t < n; t++) {
        float *out = s->ffn + t * H;
        memset(out, 0, (size_t)H * sizeof(float));
        int32_t done = -1;
        for (int64_t j = 0; j < k; j++) {
            int64_t pick = -1;
            for (int64_t q = 0; q < k; q++)
                if (ms->ids[t * k + q] > done && (pick < 0 || ms->ids[t * k + q] < ms->ids[t * k + pick]))
                    pick = q;
            done = ms->ids[t * k + pick];
            float wv = ms->w[t * k + pick];
            const float *y = ms->slots + (size_t)(t * k + pick) * (size_t)H;
            for (int64_t h = 0; h < H; h++) {
                float p = y[h] * wv;
                out[h] += p;
            }
        }
    }
    if (L->sh_gate.format != SP_WF_NONE)
        shared_experts(s, L, n);
}
