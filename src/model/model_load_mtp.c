/* model_load_mtp.c: binding DeepSeek-V3's multi-token prediction (MTP) module.
 *
 * A checkpoint with num_nextn_predict_layers = n carries n MTP modules after the main
 * layers, in the hub layout (DeepSeek-V3: model.layers.61.*):
 *
 *   model.layers.L.enorm.weight               [H]      RMSNorm of the token embedding
 *   model.layers.L.hnorm.weight               [H]      RMSNorm of the main model's hidden state
 *   model.layers.L.eh_proj.weight             [H, 2H]  over [enorm(embed); hnorm(h)]
 *   model.layers.L.{input_layernorm, post_attention_layernorm, self_attn.*, mlp.*}
 *                                                      an ordinary decoder layer L
 *   model.layers.L.shared_head.norm.weight    [H]
 *   model.layers.L.shared_head.head.weight    [V, H]   (a copy of lm_head; lm_head when absent)
 *   model.layers.L.embed_tokens.weight        [V, H]   (a copy; the main embedding is used)
 *
 * Only the first module (L = num_hidden_layers) is bound: it is the one DeepSeek-V3 ships
 * and the one drafting chains (forward_mtp.c). transformers drops these tensors when it
 * saves, so a checkpoint without eh_proj simply has no MTP (n_mtp = 0), whatever its config
 * says; one with eh_proj must carry the whole module. DeepSeek-V4's module (mtp.0.*) is
 * bound by model_load_dsv4.c. */
#include "model/bind.h"
#include "model/load_internal.h"
#include "util/error.h"

#include <stdio.h>

sp_status sp_bind_mtp(sp_model *m, sp_error *err)
{
    int64_t L = m->n_layers, H = m->n_embd;
    char n[256];
    if (m->cfg->n_nextn <= 0 || m->arch->attn != SP_ATTN_MLA || L >= SP_MAX_LAYERS ||
        !sp_checkpoint_find(m->ckpt, sp_name(n, sizeof n, "model.layers.%lld.eh_proj.weight", (long long)L), NULL))
        return SP_OK;
    m->n_mtp = 1; /* from here the model's cleanup owns layers[L] */
    sp_mtp *t = &m->mtp;
    sp_status st;
#define P(suffix) sp_name(n, sizeof n, "model.layers.%lld.%s", (long long)L, suffix)
    if ((st = sp_bind_vector(m, P("enorm.weight"), H, true, &t->enorm, err)) ||
        (st = sp_bind_vector(m, P("hnorm.weight"), H, true, &t->hnorm, err)) ||
        (st = sp_bind_matrix(m, P("eh_proj.weight"), H, 2 * H, true, &t->eh_proj, err)) ||
        (st = sp_bind_vector(m, P("shared_head.norm.weight"), H, true, &t->head_norm, err)) ||
        (st = sp_bind_matrix(m, P("shared_head.head.weight"), m->n_vocab, H, false, &t->head, err)))
        return st;
#undef P
    if (t->head.format == SP_WF_NONE)
        t->head = m->lm_head;
    return sp_bind_layer(m, L, &m->layers[L], err);
}
