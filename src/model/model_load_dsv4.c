/* model_load_dsv4.c: binding a DeepSeek-V4 checkpoint (docs/DEEPSEEK_V4.md).
 *
 * Tensor names are the hub's original ones, which is also what transformers 5.17's
 * save_pretrained writes back (its conversion mapping reversed), with or without a
 * "model." prefix on the layers:
 *
 *   [model.]layers.{L}.attn_norm / ffn_norm .weight          [H]
 *   [model.]layers.{L}.hc_attn_fn / hc_ffn_fn                [(2+N)N, N H]  (+ _base, _scale [3])
 *   [model.]layers.{L}.attn.wq_a, q_norm, wq_b, wkv, norm, wo_a, wo_b, attn_sink
 *   [model.]layers.{L}.attn.compressor.wkv, wgate, ape, norm          (CSA and HCA layers)
 *   [model.]layers.{L}.attn.indexer.compressor.wkv, wgate, ape, norm, indexer.wq_b,
 *                           indexer.weights_proj                      (CSA layers)
 *   [model.]layers.{L}.ffn.gate.weight, gate.bias (routed) or gate.tid2eid (hash, I64/I32)
 *   [model.]layers.{L}.ffn.experts.{e}.w1/w3/w2, ffn.shared_experts.w1/w3/w2
 *   embed.weight | model.embed_tokens.weight, head.weight | lm_head.weight,
 *   [model.]norm.weight, hc_head_fn / _base / _scale | model.hc_head.hc_fn / hc_base / hc_scale */
#include "model/bind.h"
#include "model/load_internal.h"
#include "util/ckd.h"
#include "util/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool has(sp_model *m, const char *name) { return sp_checkpoint_find(m->ckpt, name, NULL) != NULL; }

/* The first of two spellings the checkpoint has (the first when neither: its error names it). */
static const char *pick(sp_model *m, const char *a, const char *b) { return has(m, a) || !has(m, b) ? a : b; }

sp_status sp_dsv4_dims(sp_model *m, sp_error *err)
{
    const sp_hf_config *c = m->cfg;
    const sp_dsv4_config *d = &c->dsv4;
    if (!d->present)
        return sp_err(err, SP_ERR_FORMAT, "%s: DeepseekV4ForCausalLM needs model_type \"deepseek_v4\"", c->path);
    if (c->q_lora_rank <= 0)
        return sp_err(err, SP_ERR_FORMAT, "%s: field 'q_lora_rank' must be positive for DeepSeek-V4", c->path);
    int64_t hd = c->head_dim, ihd = d->index_head_dim;
    m->n_kv_heads = 1;
    m->qk_dim = m->v_dim = hd;
    m->q_dim = m->n_heads * hd;
    m->kv_dim_k = hd;
    m->v4_cw = 2 * hd;
    /* side row per position: compressor kv | gate (cw each), compressed entry (hd),
     * indexer kv | gate (2 ihd each), indexer entry (ihd) */
    size_t side;
    if (sp_ckd_mul_size(&side, 2, (size_t)m->v4_cw) || sp_ckd_add_size(&side, side, (size_t)(hd + 5 * ihd)))
        return sp_err(err, SP_ERR_FORMAT, "%s: head_dim %lld: cache row size overflows", c->path, (long long)hd);
    m->v4_side = m->kv_dim_v = (int64_t)side;
    m->attn_scale = 1.0f / sqrtf((float)hd);
    int64_t rot = (int64_t)((double)hd * c->rope.partial_rotary_factor);
    sp_status st = sp_rope_init(&m->rope, &c->rope, rot, c->max_pos, c->path, err);
    if (st == SP_OK)
        st = sp_rope_init(&m->rope_c, &d->rope_compress, rot, c->max_pos, c->path, err);
    return st;
}

/* tid2eid [V, k] (I64 or I32) into owned int32 rows, each id checked against E. */
static sp_status bind_hash(sp_model *m, const char *name, int32_t *dst, sp_error *err)
{
    const char *file;
    const sp_st_tensor *t = sp_checkpoint_find(m->ckpt, name, &file);
    int64_t V = m->n_vocab, k = m->cfg->n_experts_per_tok, E = m->cfg->n_experts;
    if (!t)
        return sp_err(err, SP_ERR_FORMAT, "%s: required tensor '%s' is missing", m->dir, name);
    if ((t->dtype != SP_DTYPE_I64 && t->dtype != SP_DTYPE_I32) || t->n_dims != 2 || t->shape[0] != V ||
        t->shape[1] != k)
        return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s' must be I64 or I32 [%lld, %lld]", file, name,
                      (long long)V, (long long)k);
    for (int64_t i = 0; i < V * k; i++) {
        int64_t v;
        if (t->dtype == SP_DTYPE_I64) {
            memcpy(&v, t->data + 8 * i, 8);
        } else {
            int32_t x;
            memcpy(&x, t->data + 4 * i, 4);
            v = x;
        }
        if (v < 0 || v >= E)
            return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s': entry [%lld, %lld] = %lld is not an expert id in [0, %lld)",
                          file, name, (long long)(i / k), (long long)(i % k), (long long)v, (long long)E);
        dst[i] = (int32_t)v;
    }
    return SP_OK;
}

static sp_status bind_hc(sp_model *m, const char *pre, const char *which, sp_weight *fn, const float **base,
                         const float **scale, sp_error *err)
{
    int64_t N = m->cfg->dsv4.hc_mult, mix = (2 + N) * N;
    char n[320];
    sp_status st;
    if ((st = sp_bind_matrix(m, sp_name(n, sizeof n, "%shc_%s_fn", pre, which), mix, N * m->n_embd, true, fn, err)) ||
        (st = sp_bind_vector(m, sp_name(n, sizeof n, "%shc_%s_base", pre, which), mix, true, base, err)))
        return st;
    return sp_bind_vector(m, sp_name(n, sizeof n, "%shc_%s_scale", pre, which), 3, true, scale, err);
}

static sp_status bind_compressor(sp_model *m, const char *pre, int64_t rate, int64_t width, int64_t hd,
                                 sp_weight *wkv, sp_weight *wgate, const float **ape, const float **norm,
                                 sp_error *err)
{
    char n[320];
    sp_status st;
    if ((st = sp_bind_matrix(m, sp_name(n, sizeof n, "%swkv.weight", pre), width, m->n_embd, true, wkv, err)) ||
        (st = sp_bind_matrix(m, sp_name(n, sizeof n, "%swgate.weight", pre), width, m->n_embd, true, wgate, err)) ||
        (st = sp_bind_vector2(m, sp_name(n, sizeof n, "%sape", pre), rate, width, true, ape, err)))
        return st;
    return sp_bind_vector(m, sp_name(n, sizeof n, "%snorm.weight", pre), hd, true, norm, err);
}

static sp_status bind_attention(sp_model *m, const char *lp, sp_dsv4_layer *v, sp_error *err)
{
    const sp_hf_config *c = m->cfg;
    const sp_dsv4_config *d = &c->dsv4;
    int64_t H = m->n_embd, hd = m->head_dim, nh = m->n_heads, qr = c->q_lora_rank;
    int64_t G = d->o_groups, R = d->o_lora_rank, ih = d->index_n_heads, ihd = d->index_head_dim;
    char n[320], pre[300];
    sp_status st;
#define A(s) sp_name(n, sizeof n, "%sattn.%s", lp, s)
    if ((st = sp_bind_matrix(m, A("wq_a.weight"), qr, H, true, &v->wq_a, err)) ||
        (st = sp_bind_vector(m, A("q_norm.weight"), qr, true, &v->q_norm, err)) ||
        (st = sp_bind_matrix(m, A("wq_b.weight"), nh * hd, qr, true, &v->wq_b, err)) ||
        (st = sp_bind_matrix(m, A("wkv.weight"), hd, H, true, &v->wkv, err)) ||
        (st = sp_bind_vector(m, A("norm.weight"), hd, true, &v->kv_norm, err)) ||
        (st = sp_bind_matrix(m, A("wo_a.weight"), G * R, nh * hd / G, true, &v->wo_a, err)) ||
        (st = sp_bind_matrix(m, A("wo_b.weight"), H, G * R, true, &v->wo_b, err)) ||
        (st = sp_bind_vector(m, A("attn_sink"), nh, true, &v->sinks, err)))
        return st;
#undef A
    if (v->rate == 0)
        return SP_OK;
    snprintf(pre, sizeof pre, "%sattn.compressor.", lp);
    if ((st = bind_compressor(m, pre, v->rate, v->indexer ? 2 * hd : hd, hd, &v->c_wkv, &v->c_wgate, &v->c_ape,
                              &v->c_norm, err)))
        return st;
    if (!v->indexer)
        return SP_OK;
    snprintf(pre, sizeof pre, "%sattn.indexer.compressor.", lp);
    if ((st = bind_compressor(m, pre, v->rate, 2 * ihd, ihd, &v->i_wkv, &v->i_wgate, &v->i_ape, &v->i_norm, err)) ||
        (st = sp_bind_matrix(m, sp_name(n, sizeof n, "%sattn.indexer.wq_b.weight", lp), ih * ihd, qr, true,
                             &v->i_wq_b, err)))
        return st;
    return sp_bind_matrix(m, sp_name(n, sizeof n, "%sattn.indexer.weights_proj.weight", lp), ih, H, true,
                          &v->i_wproj, err);
}

static sp_status bind_ffn(sp_model *m, const char *lp, sp_layer *L, sp_dsv4_layer *v, int32_t *hash,
                          sp_error *err)
{
    const sp_hf_config *c = m->cfg;
    int64_t H = m->n_embd, E = c->n_experts, I = c->moe_intermediate_size;
    char n[320];
    sp_status st;
    L->moe = true;
    L->n_experts = E;
    L->top_k = c->n_experts_per_tok;
    L->expert_inter = I;
    if ((st = sp_bind_matrix(m, sp_name(n, sizeof n, "%sffn.gate.weight", lp), E, H, true, &L->router, err)))
        return st;
    L->router.keep_exact = true; /* its logits pick the experts (docs/NUMERICS.md) */
    if (v->hash) {
        if ((st = bind_hash(m, sp_name(n, sizeof n, "%sffn.gate.tid2eid", lp), hash, err)))
            return st;
        v->tid2eid = hash;
    } else if ((st = sp_bind_vector(m, sp_name(n, sizeof n, "%sffn.gate.bias", lp), E, false, &L->score_bias, err))) {
        return st;
    }
    if (!(L->experts = calloc((size_t)E, sizeof *L->experts)))
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    for (int64_t e = 0; e < E; e++) {
        sp_expert *x = &L->experts[e];
#define X(w) sp_name(n, sizeof n, "%sffn.experts.%lld." w ".weight", lp, (long long)e)
        if ((st = sp_bind_matrix(m, X("w1"), I, H, true, &x->gate, err)) ||
            (st = sp_bind_matrix(m, X("w3"), I, H, true, &x->up, err)) ||
            (st = sp_bind_matrix(m, X("w2"), H, I, true, &x->down, err)))
            return st;
#undef X
    }
#define S(w) sp_name(n, sizeof n, "%sffn.shared_experts." w ".weight", lp)
    if ((st = sp_bind_matrix(m, S("w1"), I, H, true, &L->sh_gate, err)) ||
        (st = sp_bind_matrix(m, S("w3"), I, H, true, &L->sh_up, err)))
        return st;
    return sp_bind_matrix(m, S("w2"), H, I, true, &L->sh_down, err);
#undef S
}

/* Layer l under the name prefix lp ("layers.3.", "model.layers.3.", "mtp.0."). */
static sp_status bind_layer(sp_model *m, const char *lp, int64_t l, int32_t *hash, sp_error *err)
{
    const sp_dsv4_config *d = &m->cfg->dsv4;
    sp_layer *L = &m->layers[l];
    sp_dsv4_layer *v = &m->v4[l];
    char n[320];
    bool mtp = l == m->n_layers; /* the MTP block: sliding attention, routed MoE */
    v->rate = mtp ? 0 : d->compress_rate[l];
    v->indexer = !mtp && d->indexer[l];
    v->hash = !mtp && d->hash_moe[l];
    L->v4 = v;
    L->sliding = true;
    sp_status st;
    if ((st = sp_bind_vector(m, sp_name(n, sizeof n, "%sattn_norm.weight", lp), m->n_embd, true, &L->attn_norm, err)) ||
        (st = sp_bind_vector(m, sp_name(n, sizeof n, "%sffn_norm.weight", lp), m->n_embd, true, &L->mlp_norm, err)) ||
        (st = bind_hc(m, lp, "attn", &v->hc_attn_fn, &v->hc_attn_base, &v->hc_attn_scale, err)) ||
        (st = bind_hc(m, lp, "ffn", &v->hc_ffn_fn, &v->hc_ffn_base, &v->hc_ffn_scale, err)) ||
        (st = bind_attention(m, lp, v, err)))
        return st;
    return bind_ffn(m, lp, L, v, hash, err);
}

static sp_status bind_top(sp_model *m, const char *root, sp_error *err)
{
    int64_t N = m->cfg->dsv4.hc_mult, H = m->n_embd, V = m->n_vocab;
    char n[64];
    sp_status st;
    bool hub = has(m, "hc_head_fn");
    if ((st = sp_bind_matrix(m, pick(m, "embed.weight", "model.embed_tokens.weight"), V, H, true, &m->tok_embd, err)) ||
        (st = sp_bind_vector(m, sp_name(n, sizeof n, "%snorm.weight", root), H, true, &m->final_norm, err)) ||
        (st = sp_bind_matrix(m, hub ? "hc_head_fn" : "model.hc_head.hc_fn", N, N * H, true, &m->hc_head_fn, err)) ||
        (st = sp_bind_vector(m, hub ? "hc_head_base" : "model.hc_head.hc_base", N, true, &m->hc_head_base, err)) ||
        (st = sp_bind_vector(m, hub ? "hc_head_scale" : "model.hc_head.hc_scale", 1, true, &m->hc_head_scale, err)))
        return st;
    if (m->cfg->tie_word_embeddings) {
        m->lm_head = m->tok_embd;
        return SP_OK;
    }
    return sp_bind_matrix(m, pick(m, "head.weight", "lm_head.weight"), V, H, true, &m->lm_head, err);
}

/* The MTP module (hub names mtp.0.*, DeepSeek's inference/model.py MTPBlock): enorm,
 * hnorm, e_proj, h_proj, its own hc_head and norm, and a full V4 layer (sliding attention,
 * routed MoE) bound as layers[n_layers]; embedding and head are the main model's. Bound
 * only when the checkpoint has mtp.0.e_proj.weight (transformers drops the module). */
static sp_status bind_mtp(sp_model *m, sp_error *err)
{
    int64_t H = m->n_embd, N = m->cfg->dsv4.hc_mult;
    if (m->cfg->dsv4.n_mtp <= 0 || !has(m, "mtp.0.e_proj.weight"))
        return SP_OK;
    m->n_mtp = 1; /* from here the model's cleanup owns layers[n_layers] */
    sp_mtp *t = &m->mtp;
    sp_status st;
    if ((st = sp_bind_vector(m, "mtp.0.enorm.weight", H, true, &t->enorm, err)) ||
        (st = sp_bind_vector(m, "mtp.0.hnorm.weight", H, true, &t->hnorm, err)) ||
        (st = sp_bind_vector(m, "mtp.0.norm.weight", H, true, &t->head_norm, err)) ||
        (st = sp_bind_matrix(m, "mtp.0.e_proj.weight", H, H, true, &t->e_proj, err)) ||
        (st = sp_bind_matrix(m, "mtp.0.h_proj.weight", H, H, true, &t->h_proj, err)) ||
        (st = sp_bind_matrix(m, "mtp.0.hc_head_fn", N, N * H, true, &t->hc_head_fn, err)) ||
        (st = sp_bind_vector(m, "mtp.0.hc_head_base", N, true, &t->hc_head_base, err)) ||
        (st = sp_bind_vector(m, "mtp.0.hc_head_scale", 1, true, &t->hc_head_scale, err)))
        return st;
    t->head = m->lm_head;
    return bind_layer(m, "mtp.0.", m->n_layers, NULL, err);
}

sp_status sp_dsv4_bind(sp_model *m, sp_error *err)
{
    const sp_hf_config *c = m->cfg;
    const char *root = has(m, "model.layers.0.attn_norm.weight") ? "model." : "";
    sp_status st = bind_top(m, root, err);
    if (st != SP_OK)
        return st;
    int64_t n_hash = 0;
    for (int64_t l = 0; l < m->n_layers; l++)
        n_hash += c->dsv4.hash_moe[l];
    size_t table;
    if (sp_ckd_mul3_size(&table, (size_t)(n_hash ? n_hash : 1), (size_t)m->n_vocab, (size_t)c->n_experts_per_tok))
        return sp_err(err, SP_ERR_FORMAT, "%s: hash routing tables: size overflows", c->path);
    m->layers = calloc((size_t)m->n_layers + 1, sizeof *m->layers); /* + an MTP block */
    m->v4 = calloc((size_t)m->n_layers + 1, sizeof *m->v4);
    m->v4_tid2eid = malloc(table * sizeof *m->v4_tid2eid);
    if (!m->layers || !m->v4 || !m->v4_tid2eid)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    int32_t *hash = m->v4_tid2eid;
    char lp[64];
    for (int64_t l = 0; l < m->n_layers; l++) {
        snprintf(lp, sizeof lp, "%slayers.%lld.", root, (long long)l);
        if ((st = bind_layer(m, lp, l, hash, err)))
            return st;
        if (c->dsv4.hash_moe[l])
            hash += m->n_vocab * c->n_experts_per_tok;
    }
    return bind_mtp(m, err);
}
