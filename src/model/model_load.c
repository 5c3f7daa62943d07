/* model_load.c: sp_model_open — config, checkpoint, architecture binding, memory check.
 * Family-specific binding of mixture-of-experts and MLA layers lives in
 * model_load_moe.c; this file handles what every family shares. */
#include "model/bind.h"
#include "model/load_internal.h"
#include "util/error.h"
#include "util/fileio.h"


#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sp_status bind_gqa(sp_model *m, int64_t l, sp_layer *L, sp_error *err)
{
    char n[256];
    const sp_hf_config *c = m->cfg;
    int64_t H = m->n_embd, qd = m->n_heads * m->head_dim, kd = m->n_kv_heads * m->head_dim;
    bool bias = m->arch->always_bias || c->attention_bias;
    sp_status st;
#define P(suffix) sp_name(n, sizeof n, "model.layers.%lld.self_attn.%s", (long long)l, suffix)
    if ((st = sp_bind_matrix(m, P("q_proj.weight"), qd, H, true, &L->wq, err)) ||
        (st = sp_bind_matrix(m, P("k_proj.weight"), kd, H, true, &L->wk, err)) ||
        (st = sp_bind_matrix(m, P("v_proj.weight"), kd, H, true, &L->wv, err)) ||
        (st = sp_bind_matrix(m, P("o_proj.weight"), H, qd, true, &L->wo, err)))
        return st;
    if (bias && ((st = sp_bind_vector(m, P("q_proj.bias"), qd, true, &L->bq, err)) ||
                 (st = sp_bind_vector(m, P("k_proj.bias"), kd, true, &L->bk, err)) ||
                 (st = sp_bind_vector(m, P("v_proj.bias"), kd, true, &L->bv, err)) ||
                 (st = sp_bind_vector(m, P("o_proj.bias"), H, true, &L->bo, err))))
        return st;
    if (m->arch->qk_norm &&
        ((st = sp_bind_vector(m, P("q_norm.weight"), m->head_dim, true, &L->q_norm, err)) ||
         (st = sp_bind_vector(m, P("k_norm.weight"), m->head_dim, true, &L->k_norm, err))))
        return st;
    if (m->arch->sinks && (st = sp_bind_vector(m, P("sinks"), m->n_heads, true, &L->sinks, err)))
        return st;
#undef P
    return SP_OK;
}

static sp_status bind_dense_mlp(sp_model *m, int64_t l, int64_t inter, sp_layer *L,
                                sp_error *err)
{
    char n[256];
    int64_t H = m->n_embd;
    sp_status st;
#define P(suffix) sp_name(n, sizeof n, "model.layers.%lld.mlp.%s", (long long)l, suffix)
    if ((st = sp_bind_matrix(m, P("gate_proj.weight"), inter, H, true, &L->w_gate, err)) ||
        (st = sp_bind_matrix(m, P("up_proj.weight"), inter, H, true, &L->w_up, err)) ||
        (st = sp_bind_matrix(m, P("down_proj.weight"), H, inter, true, &L->w_down, err)))
        return st;
#undef P
    return SP_OK;
}

sp_status sp_bind_layer(sp_model *m, int64_t l, sp_layer *L, sp_error *err)
{
    char n[256];
    sp_status st;
    L->sliding = m->cfg->layer_sliding[l];
    if ((st = sp_bind_vector(m, sp_name(n, sizeof n, "model.layers.%lld.input_layernorm.weight",
                                        (long long)l),
                             m->n_embd, true, &L->attn_norm, err)) ||
        (st = sp_bind_vector(m,
                             sp_name(n, sizeof n, "model.layers.%lld.post_attention_layernorm.weight",
                                     (long long)l),
                             m->n_embd, true, &L->mlp_norm, err)))
        return st;
    st = m->arch->attn == SP_ATTN_MLA ? sp_bind_mla(m, l, L, err) : bind_gqa(m, l, L, err);
    if (st != SP_OK)
        return st;
    L->moe = sp_arch_layer_is_moe(m->arch, m->cfg, l);
    if (L->moe)
        return sp_bind_moe(m, l, L, err);
    if (m->cfg->intermediate_size <= 0)
        return sp_err(err, SP_ERR_FORMAT, "%s: field 'intermediate_size' is required", m->cfg->path);
    return bind_dense_mlp(m, l, m->cfg->intermediate_size, L, err);
}

/* Derives attention dimensions and checks them for the GQA families. */
static sp_status derive_dims(sp_model *m, sp_error *err)
{
    const sp_hf_config *c = m->cfg;
    m->n_vocab = c->vocab_size;
    m->n_embd = c->hidden_size;
    m->n_layers = c->n_layers;
    m->n_heads = c->n_heads;
    m->n_kv_heads = c->n_kv_heads;
    m->head_dim = c->head_dim;
    if (m->arch->attn == SP_ATTN_MLA)
        return sp_mla_dims(m, err);
    if (m->arch->attn == SP_ATTN_DSV4)
        return sp_dsv4_dims(m, err);
    m->qk_dim = m->v_dim = c->head_dim;
    m->q_dim = m->n_heads * m->head_dim;
    m->kv_dim_k = m->kv_dim_v = m->n_kv_heads * m->head_dim;
    m->attn_scale = 1.0f / sqrtf((float)m->head_dim);
    int64_t rot = (int64_t)((double)m->head_dim * c->rope.partial_rotary_factor);
    return sp_rope_init(&m->rope, &c->rope, rot, c->max_pos, c->path, err);
}

static sp_status bind_all(sp_model *m, sp_error *err)
{
    sp_status st;
    if (m->arch->attn == SP_ATTN_DSV4)
        return sp_dsv4_bind(m, err);
    if ((st = sp_bind_matrix(m, "model.embed_tokens.weight", m->n_vocab, m->n_embd, true,
                             &m->tok_embd, err)) ||
        (st = sp_bind_vector(m, "model.norm.weight", m->n_embd, true, &m->final_norm, err)))
        return st;
    if (m->cfg->tie_word_embeddings) {
        m->lm_head = m->tok_embd;
    } else {
        st = sp_bind_matrix(m, "lm_head.weight", m->n_vocab, m->n_embd, true, &m->lm_head, err);
        if (st != SP_OK) {
            if (!sp_checkpoint_find(m->ckpt, "lm_head.weight", NULL))
                sp_err(err, SP_ERR_FORMAT,
                       "%s: required tensor 'lm_head.weight' is missing and "
                       "tie_word_embeddings is false",
                       m->dir);
            return st;
        }
    }
    m->layers = calloc((size_t)m->n_layers + 1, sizeof *m->layers); /* + an MTP block */
    if (!m->layers)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    for (int64_t l = 0; l < m->n_layers; l++)
        if ((st = sp_bind_layer(m, l, &m->layers[l], err)))
            return st;
    return sp_bind_mtp(m, err);
}

sp_status sp_model_load(const char *dir, sp_model **out, sp_error *err)
{
    *out = NULL;
    sp_model *m = calloc(1, sizeof *m);
    if (!m || !(m->dir = strdup(dir))) {
        free(m);
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    }
    sp_status st = sp_hf_config_load(dir, &m->cfg, err);
    if (st == SP_OK && !(m->arch = sp_arch_find(m->cfg->arch)))
        st = sp_err(err, SP_ERR_UNSUPPORTED,
                    "%s: field 'architectures': '%s' is not supported (supported: %s)",
                    m->cfg->path, m->cfg->arch, sp_arch_supported_list());
    if (st == SP_OK)
        st = sp_quant_load(&m->quant, m->cfg->json, m->cfg->path, dir, err);
    if (st == SP_OK)
        st = derive_dims(m, err);
    if (st == SP_OK)
        st = sp_checkpoint_open(dir, &m->ckpt, err);
    if (st == SP_OK)
        st = bind_all(m, err);
    if (st != SP_OK) {
        sp_model_unload(m);
        return st;
    }
    *out = m;
    return SP_OK;
}

void sp_model_unload(sp_model *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    free(m->owned_n);
    if (m->layers)
        for (int64_t l = 0; l < m->n_layers + m->n_mtp; l++)
            free(m->layers[l].experts);
    free(m->layers);
    free(m->v4);
    free(m->v4_tid2eid);
    sp_quant_free(&m->quant);
    sp_checkpoint_close(m->ckpt);
    sp_hf_config_free(m->cfg);
    free(m->dir);
    free(m);
}

int64_t sp_model_n_vocab(const sp_model *m) { return m->n_vocab; }
int64_t sp_model_n_ctx_max(const sp_model *m) { return m->cfg->max_pos; }
const char *sp_model_arch_name(const sp_model *m) { return m->cfg->arch; }
uint64_t sp_model_weight_bytes(const sp_model *m) { return m->weight_bytes; }

const int32_t *sp_model_eos_ids(const sp_model *m, size_t *n_ids)
{
    *n_ids = m->cfg->n_eos_ids;
    return m->cfg->eos_ids;
}

bool sp_model_is_eos(const sp_model *m, int32_t token)
{
    for (size_t i = 0; i < m->cfg->n_eos_ids; i++)
        if (m->cfg->eos_ids[i] == token)
            return true;
    return false;
}
