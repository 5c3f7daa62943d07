/* moe_route.c: expert selection (see moe_route.h). */
#include "model/moe_route.h"

#include <math.h>

/* Index of the largest v[i] (lowest index on ties) among i with v[i] not -inf and not
 * taken; -1 if none. */
static int64_t best(const float *v, int64_t n, const bool *taken)
{
    int64_t b = -1;
    for (int64_t i = 0; i < n; i++)
        if (!taken[i] && (b < 0 || v[i] > v[b]))
            b = i;
    return b;
}

/* Top-k of v into ids (best first). */
static void top_k(const float *v, int64_t n, int64_t k, int32_t *ids)
{
    bool taken[4096];
    bool *t = taken;
    for (int64_t i = 0; i < n; i++)
        t[i] = false;
    for (int64_t j = 0; j < k; j++) {
        int64_t b = best(v, n, t);
        ids[j] = (int32_t)b;
        t[b] = true;
    }
}

static void softmax_inplace(float *v, int64_t n)
{
    float m = v[0];
    for (int64_t i = 1; i < n; i++)
        m = v[i] > m ? v[i] : m;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        v[i] = expf(v[i] - m);
        sum += v[i];
    }
    for (int64_t i = 0; i < n; i++)
        v[i] /= sum;
}

static void renorm(float *w, int64_t k, float eps)
{
    float sum = 0.0f;
    for (int64_t j = 0; j < k; j++)
        sum += w[j];
    sum += eps;
    for (int64_t j = 0; j < k; j++)
        w[j] /= sum;
}

static void route_sigmoid_group(const sp_route_cfg *c, const float *logits, int32_t *ids,
                                float *w, float *scratch)
{
    int64_t E = c->n_experts, G = c->n_group, per = E / G;
    float *s = scratch, *choice = scratch + E;
    for (int64_t i = 0; i < E; i++) {
        s[i] = 1.0f / (1.0f + expf(-logits[i]));
        choice[i] = s[i] + (c->score_bias ? c->score_bias[i] : 0.0f);
    }
    float gscore[1024];
    for (int64_t g = 0; g < G; g++) { /* sum of the group's two best choices */
        int32_t two[2];
        top_k(choice + g * per, per, 2, two);
        gscore[g] = choice[g * per + two[0]] + choice[g * per + two[1]];
    }
    int32_t keep[1024];
    top_k(gscore, G, c->topk_group, keep);
    bool kept[1024] = {false};
    for (int64_t j = 0; j < c->topk_group; j++)
        kept[keep[j]] = true;
    for (int64_t i = 0; i < E; i++)
        if (!kept[i / per])
            choice[i] = -INFINITY;
    top_k(choice, E, c->top_k, ids);
    for (int64_t j = 0; j < c->top_k; j++)
        w[j] = s[ids[j]];
    if (c->norm)
        renorm(w, c->top_k, 1e-20f);
    for (int64_t j = 0; j < c->top_k; j++)
        w[j] *= c->scaling;
}

/* torch's softplus (beta 1, threshold 20), then the square root. */
static float sqrt_softplus(float x)
{
    return sqrtf(x > 20.0f ? x : log1pf(expf(x)));
}

static void route_dsv4(const sp_route_cfg *c, const float *logits, int32_t *ids, float *w,
                       float *scratch)
{
    int64_t E = c->n_experts, k = c->top_k;
    float *s = scratch, *choice = scratch + E;
    for (int64_t i = 0; i < E; i++) {
        s[i] = c->sqrt_softplus ? sqrt_softplus(logits[i]) : 1.0f / (1.0f + expf(-logits[i]));
        choice[i] = s[i] + (c->score_bias ? c->score_bias[i] : 0.0f);
    }
    if (c->kind == SP_MOE_DSV4)
        top_k(choice, E, k, ids);
    for (int64_t j = 0; j < k; j++)
        w[j] = s[ids[j]];
    renorm(w, k, 1e-20f);
    for (int64_t j = 0; j < k; j++)
        w[j] *= c->scaling;
}

void sp_moe_route(const sp_route_cfg *c, const float *logits, int32_t *ids, float *w,
                  float *scratch)
{
    int64_t E = c->n_experts, k = c->top_k;
    switch (c->kind) {
    case SP_MOE_SOFTMAX_TOPK:
        for (int64_t i = 0; i < E; i++)
            scratch[i] = logits[i];
        softmax_inplace(scratch, E);
        top_k(scratch, E, k, ids);
        for (int64_t j = 0; j < k; j++)
            w[j] = scratch[ids[j]];
        if (c->norm)
            renorm(w, k, 0.0f);
        return;
    case SP_MOE_TOPK_SOFTMAX:
        top_k(logits, E, k, ids);
        for (int64_t j = 0; j < k; j++)
            w[j] = logits[ids[j]];
        softmax_inplace(w, k);
        return;
    case SP_MOE_SIGMOID_GROUP: route_sigmoid_group(c, logits, ids, w, scratch); return;
    case SP_MOE_DSV4:
    case SP_MOE_HASH: route_dsv4(c, logits, ids, w, scratch); return;
    case SP_MOE_NONE: return;
    }
}
