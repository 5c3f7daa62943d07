/* model_load_moe.c: binding of mixture-of-experts and multi-head latent attention layers.
 *
 * Expert weights come in three on-disk layouts, all read in place:
 *   per expert   <prefix>.experts.{e}.<gate|up|down>.weight [I, H] / [H, I]  (hub layout of
 *                Qwen3-MoE, Mixtral (w1/w3/w2), DeepSeek; any dense or quantized format)
 *   fused        <prefix>.experts.gate_up_proj [E, 2I, H] + down_proj [E, H, I] (transformers 5
 *                in-memory layout, should a checkpoint carry it): gate = rows [0, I), up = [I, 2I)
 *   gpt-oss      mlp.experts.gate_up_proj_blocks/_scales (MXFP4, [E, 2I, H/32, 16], rows
 *                interleaved gate/up) or unquantized gate_up_proj [E, H, 2I] used as x @ W;
 *                down_proj likewise; biases gate_up_proj_bias [E, 2I], down_proj_bias [E, H]. */
#include "model/bind.h"
#include "model/load_internal.h"
#include "util/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const sp_st_tensor *lookup(void *ctx, const char *name, const char **file)
{
    return sp_checkpoint_find(((sp_model *)ctx)->ckpt, name, file);
}

static bool has(sp_model *m, const char *name)
{
    return sp_checkpoint_find(m->ckpt, name, NULL) != NULL;
}

/* ---- routing parameters --------------------------------------------------------------- */

static sp_status check_routing(const sp_model *m, sp_error *err)
{
    const sp_hf_config *c = m->cfg;
    int64_t E = c->n_experts, k = c->n_experts_per_tok;
    if (E <= 0)
        return sp_err(err, SP_ERR_FORMAT, "%s: an MoE layer needs a positive expert count "
                      "(num_experts / num_local_experts / n_routed_experts)", c->path);
    if (k <= 0 || k > E)
        return sp_err(err, SP_ERR_FORMAT, "%s: field 'num_experts_per_tok' = %lld must be in [1, %lld]",
                      c->path, (long long)k, (long long)E);
    if (m->arch->moe == SP_MOE_SIGMOID_GROUP) {
        int64_t g = c->n_group, tg = c->topk_group;
        if (g <= 0 || E % g || E / g < 2)
            return sp_err(err, SP_ERR_FORMAT, "%s: field 'n_group' = %lld must divide the %lld experts "
                          "into groups of at least 2", c->path, (long long)g, (long long)E);
        if (tg <= 0 || tg > g || k > tg * (E / g))
            return sp_err(err, SP_ERR_FORMAT, "%s: field 'topk_group' = %lld: must be in [1, n_group] "
                          "and leave at least num_experts_per_tok experts", c->path, (long long)tg);
    }
    return SP_OK;
}

/* ---- experts ---------------------------------------------------------------------------- */

static sp_status bind_per_expert(sp_model *m, const char *prefix, int64_t e, int64_t I,
                                 sp_expert *x, sp_error *err)
{
    const sp_arch *a = m->arch;
    int64_t H = m->n_embd;
    char n[512];
    sp_status st;
    snprintf(n, sizeof n, "%s.experts.%lld.%s.weight", prefix, (long long)e, a->expert_gate);
    if ((st = sp_bind_matrix(m, n, I, H, true, &x->gate, err)))
        return st;
    snprintf(n, sizeof n, "%s.experts.%lld.%s.weight", prefix, (long long)e, a->expert_up);
    if ((st = sp_bind_matrix(m, n, I, H, true, &x->up, err)))
        return st;
    snprintf(n, sizeof n, "%s.experts.%lld.%s.weight", prefix, (long long)e, a->expert_down);
    return sp_bind_matrix(m, n, H, I, true, &x->down, err);
}

static sp_status bind_fused(sp_model *m, const char *prefix, int64_t E, int64_t e, int64_t I,
                            sp_expert *x, sp_error *err)
{
    int64_t H = m->n_embd;
    char n[512];
    sp_weight gu;
    snprintf(n, sizeof n, "%s.experts.gate_up_proj", prefix);
    sp_status st = sp_bind_matrix_slice(m, n, E, e, 2 * I, H, &gu, err);
    if (st != SP_OK)
        return st;
    x->gate = sp_weight_rows(&gu, 0, I);
    x->up = sp_weight_rows(&gu, I, I);
    snprintf(n, sizeof n, "%s.experts.down_proj", prefix);
    return sp_bind_matrix_slice(m, n, E, e, H, I, &x->down, err);
}

static sp_status bind_gptoss_experts(sp_model *m, const char *prefix, int64_t E, sp_layer *L,
                                     sp_error *err)
{
    int64_t H = m->n_embd, I = L->expert_inter;
    char gu[400], dn[400], n[512];
    snprintf(gu, sizeof gu, "%s.experts.gate_up_proj", prefix);
    snprintf(dn, sizeof dn, "%s.experts.down_proj", prefix);
    snprintf(n, sizeof n, "%s_blocks", gu);
    bool mx = has(m, n);
    sp_status st = SP_OK;
    uint64_t before = m->quant.packed_bytes;
    for (int64_t e = 0; e < E && st == SP_OK; e++) {
        sp_expert *x = &L->experts[e];
        if (mx) {
            st = sp_quant_bind_mxfp4_expert(&m->quant, lookup, m, gu, E, e, 2 * I, H, &x->gate, err);
            if (st == SP_OK)
                st = sp_quant_bind_mxfp4_expert(&m->quant, lookup, m, dn, E, e, H, I, &x->down, err);
        } else { /* unquantized: [E, H, 2I] and [E, I, H], used as x @ W */
            x->in_major = true;
            st = sp_bind_matrix_slice(m, gu, E, e, H, 2 * I, &x->gate, err);
            if (st == SP_OK)
                st = sp_bind_matrix_slice(m, dn, E, e, I, H, &x->down, err);
        }
    }
    m->weight_bytes += m->quant.packed_bytes - before;
    const float *gub, *db;
    snprintf(n, sizeof n, "%s_bias", gu);
    if (st == SP_OK && !(st = sp_bind_vector2(m, n, E, 2 * I, true, &gub, err))) {
        snprintf(n, sizeof n, "%s_bias", dn);
        st = sp_bind_vector2(m, n, E, H, true, &db, err);
    }
    for (int64_t e = 0; e < E && st == SP_OK; e++) {
        L->experts[e].gate_up_bias = gub + e * 2 * I;
        L->experts[e].down_bias = db + e * H;
    }
    return st;
}

static sp_status bind_experts(sp_model *m, const char *prefix, sp_layer *L, sp_error *err)
{
    int64_t E = L->n_experts;
    L->experts = calloc((size_t)E, sizeof *L->experts);
    if (!L->experts)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    if (m->arch->experts == SP_EXPERTS_GPTOSS)
        return bind_gptoss_experts(m, prefix, E, L, err);
    char n[512];
    snprintf(n, sizeof n, "%s.experts.0.%s.weight", prefix, m->arch->expert_gate);
    char nf[512];
    snprintf(nf, sizeof nf, "%s.experts.gate_up_proj", prefix);
    bool fused = !has(m, n) && has(m, nf);
    char np[520];
    snprintf(np, sizeof np, "%s_packed", n);
    if (has(m, np))
        fused = false;
    sp_status st = SP_OK;
    for (int64_t e = 0; e < E && st == SP_OK; e++)
        st = fused ? bind_fused(m, prefix, E, e, L->expert_inter, &L->experts[e], err)
                   : bind_per_expert(m, prefix, e, L->expert_inter, &L->experts[e], err);
    return st;
}

static sp_status bind_shared(sp_model *m, const char *prefix, sp_layer *L, sp_error *err)
{
    int64_t H = m->n_embd, I = L->expert_inter * m->cfg->n_shared_experts;
    char n[512];
    sp_status st;
    snprintf(n, sizeof n, "%s.shared_experts.gate_proj.weight", prefix);
    if ((st = sp_bind_matrix(m, n, I, H, true, &L->sh_gate, err)))
        return st;
    snprintf(n, sizeof n, "%s.shared_experts.up_proj.weight", prefix);
    if ((st = sp_bind_matrix(m, n, I, H, true, &L->sh_up, err)))
        return st;
    snprintf(n, sizeof n, "%s.shared_experts.down_proj.weight", prefix);
    return sp_bind_matrix(m, n, H, I, true, &L->sh_down, err);
}

sp_status sp_bind_moe(sp_model *m, int64_t l, sp_layer *L, sp_error *err)
{
    const sp_hf_config *c = m->cfg;
    sp_status st = check_routing(m, err);
    if (st != SP_OK)
        return st;
    L->n_experts = c->n_experts;
    L->top_k = c->n_experts_per_tok;
    L->expert_inter = c->moe_intermediate_size > 0 ? c->moe_intermediate_size : c->intermediate_size;
    if (L->expert_inter <= 0)
        return sp_err(err, SP_ERR_FORMAT, "%s: field 'moe_intermediate_size' (or intermediate_size) "
                      "is required for MoE layers", c->path);
    char prefix[200], n[512];
    snprintf(prefix, sizeof prefix, "model.layers.%lld.%s", (long long)l, m->arch->mlp_prefix);
    snprintf(n, sizeof n, "%s.%s.weight", prefix, m->arch->router_name);
    if ((st = sp_bind_matrix(m, n, L->n_experts, m->n_embd, true, &L->router, err)))
        return st;
    L->router.keep_exact = true; /* its logits pick the experts (docs/NUMERICS.md) */
    if (m->arch->moe == SP_MOE_TOPK_SOFTMAX) {
        snprintf(n, sizeof n, "%s.%s.bias", prefix, m->arch->router_name);
        if ((st = sp_bind_vector(m, n, L->n_experts, true, &L->router_bias, err)))
            return st;
    }
    if (m->arch->moe == SP_MOE_SIGMOID_GROUP) {
        snprintf(n, sizeof n, "%s.%s.e_score_correction_bias", prefix, m->arch->router_name);
        if ((st = sp_bind_vector(m, n, L->n_experts, true, &L->score_bias, err)))
            return st;
    }
    if ((st = bind_experts(m, prefix, L, err)))
        return st;
    if (m->arch->shared_experts && c->n_shared_experts > 0)
        return bind_shared(m, prefix, L, err);
    return SP_OK;
}

/* ---- multi-head latent attention ----------------------------------------------------------
 * Attention runs "absorbed": per token only the normalized latent c_kv [kv_lora] and the
 * shared rotary key k_rot [rope] are cached. Each head's query nope part is mapped into the
 * latent space through its slice of kv_b_proj (q_lat = W_UK^T q_nope), attention is
 * multi-query over [c_kv, k_rot] with values c_kv, and each head's latent output is mapped
 * back through W_UV. Mathematically equal to transformers' expanded keys and values. */

sp_status sp_mla_dims(sp_model *m, sp_error *err)
{
    const sp_hf_config *c = m->cfg;
    if (c->kv_lora_rank <= 0 || c->qk_rope_head_dim <= 0 || c->qk_rope_head_dim % 2 ||
        c->v_head_dim <= 0 || c->qk_nope_head_dim < 0)
        return sp_err(err, SP_ERR_FORMAT, "%s: MLA needs kv_lora_rank > 0, an even qk_rope_head_dim > 0, "
                      "v_head_dim > 0 and qk_nope_head_dim >= 0", c->path);
    m->mla_q_lora = c->q_lora_rank;
    m->mla_kv_lora = c->kv_lora_rank;
    m->mla_nope = c->qk_nope_head_dim;
    m->mla_rope = c->qk_rope_head_dim;
    m->mla_v = c->v_head_dim;
    m->n_kv_heads = 1;
    m->head_dim = m->mla_rope;
    m->qk_dim = m->mla_kv_lora + m->mla_rope;
    m->v_dim = m->mla_kv_lora;
    m->q_dim = m->n_heads * m->qk_dim;
    m->kv_dim_k = m->qk_dim;
    m->kv_dim_v = 0;
    double scale = 1.0 / sqrt((double)(m->mla_nope + m->mla_rope));
    const sp_rope_config *r = &c->rope;
    if (r->type != SP_ROPE_DEFAULT && r->mscale_all_dim != 0) {
        double ms = sp_yarn_get_mscale(r->factor, r->mscale_all_dim);
        scale *= ms * ms;
    }
    m->attn_scale = (float)scale;
    return sp_rope_init(&m->rope, r, m->mla_rope, c->max_pos, c->path, err);
}

sp_status sp_bind_mla(sp_model *m, int64_t l, sp_layer *L, sp_error *err)
{
    char n[256];
    int64_t H = m->n_embd, nh = m->n_heads, qk = m->mla_nope + m->mla_rope;
    bool bias = m->cfg->attention_bias;
    sp_status st;
#define P(suffix) sp_name(n, sizeof n, "model.layers.%lld.self_attn.%s", (long long)l, suffix)
    if (m->mla_q_lora > 0) {
        if ((st = sp_bind_matrix(m, P("q_a_proj.weight"), m->mla_q_lora, H, true, &L->wq_a, err)) ||
            (st = sp_bind_vector(m, P("q_a_layernorm.weight"), m->mla_q_lora, true, &L->q_a_norm, err)) ||
            (st = sp_bind_matrix(m, P("q_b_proj.weight"), nh * qk, m->mla_q_lora, true, &L->wq_b, err)) ||
            (bias && (st = sp_bind_vector(m, P("q_a_proj.bias"), m->mla_q_lora, true, &L->bq, err))))
            return st;
    } else if ((st = sp_bind_matrix(m, P("q_proj.weight"), nh * qk, H, true, &L->wq, err))) {
        return st;
    }
    if ((st = sp_bind_matrix(m, P("kv_a_proj_with_mqa.weight"), m->mla_kv_lora + m->mla_rope, H, true,
                             &L->wkv_a, err)) ||
        (st = sp_bind_vector(m, P("kv_a_layernorm.weight"), m->mla_kv_lora, true, &L->kv_a_norm, err)) ||
        (st = sp_bind_matrix(m, P("kv_b_proj.weight"), nh * (m->mla_nope + m->mla_v), m->mla_kv_lora,
                             true, &L->wkv_b, err)) ||
        (st = sp_bind_matrix(m, P("o_proj.weight"), H, nh * m->mla_v, true, &L->wo, err)))
        return st;
    if (bias && ((st = sp_bind_vector(m, P("kv_a_proj_with_mqa.bias"), m->mla_kv_lora + m->mla_rope,
                                      true, &L->bk, err)) ||
                 (st = sp_bind_vector(m, P("o_proj.bias"), H, true, &L->bo, err))))
        return st;
#undef P
    return SP_OK;
}
