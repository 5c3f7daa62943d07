/* model_walk.c: visiting a model's weights (see model_walk.h). */
#include "model/model_walk.h"
#include "model/bind.h"

static void mat(const sp_walk_fns *f, void *ctx, const sp_weight *w)
{
    if (w->format != SP_WF_NONE && f->matrix)
        f->matrix(ctx, w->name ? w->name : "?", w);
}

static void vec(const sp_walk_fns *f, void *ctx, const float *v, int64_t n, const char *fmt, int64_t l)
{
    char name[256];
    if (!v || !f->vector)
        return;
    f->vector(ctx, sp_name(name, sizeof name, fmt, (long long)l), v, n);
}

/* DeepSeek-V4's own matrices (its vectors are checked as bound: see model_load_dsv4.c). */
static void walk_v4(const sp_dsv4_layer *v, const sp_walk_fns *f, void *ctx)
{
    const sp_weight *ws[] = {&v->wq_a, &v->wq_b, &v->wkv, &v->wo_a, &v->wo_b, &v->c_wkv, &v->c_wgate,
                             &v->i_wkv, &v->i_wgate, &v->i_wq_b, &v->i_wproj, &v->hc_attn_fn, &v->hc_ffn_fn};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
        mat(f, ctx, ws[i]);
}

static void walk_layer(const sp_model *m, int64_t l, const sp_walk_fns *f, void *ctx)
{
    const sp_layer *L = &m->layers[l];
    int64_t H = m->n_embd;
    bool mla = m->arch->attn == SP_ATTN_MLA;
    if (L->v4)
        walk_v4(L->v4, f, ctx);
    vec(f, ctx, L->attn_norm, H, "model.layers.%lld.input_layernorm.weight", l);
    vec(f, ctx, L->mlp_norm, H, "model.layers.%lld.post_attention_layernorm.weight", l);
    const sp_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->wq_a, &L->wq_b, &L->wkv_a, &L->wkv_b,
                             &L->w_gate, &L->w_up, &L->w_down, &L->router, &L->sh_gate, &L->sh_up,
                             &L->sh_down};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
        mat(f, ctx, ws[i]);
    vec(f, ctx, L->bq, mla ? m->mla_q_lora : m->q_dim, mla ? "model.layers.%lld.self_attn.q_a_proj.bias"
                                                           : "model.layers.%lld.self_attn.q_proj.bias", l);
    vec(f, ctx, L->bk, mla ? m->kv_dim_k : m->kv_dim_k, mla ? "model.layers.%lld.self_attn.kv_a_proj_with_mqa.bias"
                                                              : "model.layers.%lld.self_attn.k_proj.bias", l);
    vec(f, ctx, L->bv, m->kv_dim_v, "model.layers.%lld.self_attn.v_proj.bias", l);
    vec(f, ctx, L->bo, H, "model.layers.%lld.self_attn.o_proj.bias", l);
    vec(f, ctx, L->q_norm, m->head_dim, "model.layers.%lld.self_attn.q_norm.weight", l);
    vec(f, ctx, L->k_norm, m->head_dim, "model.layers.%lld.self_attn.k_norm.weight", l);
    vec(f, ctx, L->sinks, m->n_heads, "model.layers.%lld.self_attn.sinks", l);
    vec(f, ctx, L->q_a_norm, m->mla_q_lora, "model.layers.%lld.self_attn.q_a_layernorm.weight", l);
    vec(f, ctx, L->kv_a_norm, m->mla_kv_lora, "model.layers.%lld.self_attn.kv_a_layernorm.weight", l);
    vec(f, ctx, L->router_bias, L->n_experts, "model.layers.%lld.mlp.router.bias", l);
    vec(f, ctx, L->score_bias, L->n_experts, "model.layers.%lld.mlp.gate.e_score_correction_bias", l);
    for (int64_t e = 0; L->moe && e < L->n_experts; e++) {
        const sp_expert *x = &L->experts[e];
        mat(f, ctx, &x->gate);
        mat(f, ctx, &x->up);
        mat(f, ctx, &x->down);
        if (e == 0) { /* expert biases are one [E, n] tensor each */
            vec(f, ctx, x->gate_up_bias, L->n_experts * 2 * L->expert_inter,
                "model.layers.%lld.mlp.experts.gate_up_proj_bias", l);
            vec(f, ctx, x->down_bias, L->n_experts * H, "model.layers.%lld.mlp.experts.down_proj_bias", l);
        }
    }
}

void sp_model_walk(const sp_model *m, const sp_walk_fns *f, void *ctx)
{
    mat(f, ctx, &m->tok_embd);
    if (m->lm_head.data != m->tok_embd.data)
        mat(f, ctx, &m->lm_head);
    vec(f, ctx, m->final_norm, m->n_embd, "model.norm.weight", 0);
    for (int64_t l = 0; l < m->n_layers + m->n_mtp; l++)
        walk_layer(m, l, f, ctx);
    if (m->n_mtp) { /* the MTP module's own tensors (model_load_mtp.c, model_load_dsv4.c) */
        mat(f, ctx, &m->mtp.eh_proj);
        mat(f, ctx, &m->mtp.e_proj);
        mat(f, ctx, &m->mtp.h_proj);
        mat(f, ctx, &m->mtp.hc_head_fn);
        if (m->mtp.head.data != m->lm_head.data)
            mat(f, ctx, &m->mtp.head);
        vec(f, ctx, m->mtp.enorm, m->n_embd, "model.layers.%lld.enorm.weight", m->n_layers);
        vec(f, ctx, m->mtp.hnorm, m->n_embd, "model.layers.%lld.hnorm.weight", m->n_layers);
        vec(f, ctx, m->mtp.head_norm, m->n_embd, "model.layers.%lld.shared_head.norm.weight", m->n_layers);
    }
}
