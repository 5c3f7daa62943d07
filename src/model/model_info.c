/* model_info.c: sp_model_get_info, the public summary of a loaded model (specula inspect):
 * dimensions, MoE layout, RoPE, quantization, the matrices bound per weight format, the
 * device and the memory a default session adds. */
#include "model/model.h"

#include <string.h>

typedef struct fmt_count {
    int64_t n[SP_WF_FP8_BLOCK + 1];
} fmt_count;

static void count(fmt_count *c, const sp_weight *w)
{
    if (w->format != SP_WF_NONE)
        c->n[w->format]++;
}

static void count_layer(fmt_count *c, const sp_layer *L)
{
    const sp_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->wq_a, &L->wq_b, &L->wkv_a,
                             &L->wkv_b, &L->w_gate, &L->w_up, &L->w_down, &L->router,
                             &L->sh_gate, &L->sh_up, &L->sh_down};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
        count(c, ws[i]);
    for (int64_t e = 0; L->moe && e < L->n_experts; e++) {
        count(c, &L->experts[e].gate);
        count(c, &L->experts[e].up);
        count(c, &L->experts[e].down);
    }
}

/* Stored bytes of a matrix view: its rows and their scales. */
static uint64_t stored_bytes(const sp_weight *w)
{
    if (!w->data)
        return 0;
    uint64_t b = (uint64_t)w->rows * w->row_bytes;
    if (w->scales)
        b += (uint64_t)(w->format == SP_WF_FP8_BLOCK ? (w->rows + 127) / 128 : w->rows) *
             w->scale_row_bytes;
    return b;
}

static uint64_t token_bytes(const sp_model *m)
{
    uint64_t b = m->weight_bytes, skip = 0;
    if (m->lm_head.data != m->tok_embd.data && m->tok_embd.data)
        skip += stored_bytes(&m->tok_embd) - m->tok_embd.row_bytes;
    for (int64_t l = 0; l < m->n_layers; l++) {
        const sp_layer *L = &m->layers[l];
        if (!L->moe || !L->experts || L->n_experts <= L->top_k)
            continue;
        const sp_expert *e = &L->experts[0];
        uint64_t one = stored_bytes(&e->gate) + stored_bytes(&e->up) + stored_bytes(&e->down);
        skip += (uint64_t)(L->n_experts - L->top_k) * one;
    }
    return skip < b ? b - skip : 0;
}

void sp_model_get_info(const sp_model *m, sp_model_info *info)
{
    memset(info, 0, sizeof *info);
    const sp_hf_config *cfg = m->cfg;
    info->architecture = cfg->arch;
    info->n_vocab = m->n_vocab;
    info->n_embd = m->n_embd;
    info->n_layers = m->n_layers;
    info->n_heads = m->n_heads;
    info->n_kv_heads = m->n_kv_heads;
    info->head_dim = m->head_dim;
    info->n_experts = cfg->n_experts;
    info->n_experts_per_tok = cfg->n_experts_per_tok;
    info->expert_width = cfg->moe_intermediate_size > 0 ? cfg->moe_intermediate_size
                                                        : cfg->intermediate_size;
    info->rope_type = sp_rope_type_name(cfg->rope.type);
    info->rope_dim = m->rope.dim;
    info->rope_attention_factor = m->rope.attention_factor;
    info->quantized = m->quant.method != SP_QUANT_NONE;
    info->quant_method = sp_quant_method_name(m->quant.method);
    info->quant_algo = info->quantized ? m->quant.algo : NULL;
    info->quant_source = info->quantized ? m->quant.source : NULL;
    info->act_quant_declared = m->quant.act_quant_declared;
    info->n_input_scales = m->quant.n_input_scales;
    info->weight_bytes = m->weight_bytes;
    info->packed_bytes = m->quant.packed_bytes;

    fmt_count c = {0};
    count(&c, &m->tok_embd);
    if (m->lm_head.data != m->tok_embd.data)
        count(&c, &m->lm_head);
    for (int64_t l = 0; l < m->n_layers; l++) {
        count_layer(&c, &m->layers[l]);
        info->n_moe_layers += m->layers[l].moe;
    }
    info->n_mtp_layers = m->n_mtp;
    if (m->n_mtp) {
        count_layer(&c, &m->layers[m->n_layers]);
        count(&c, &m->mtp.eh_proj);
        count(&c, &m->mtp.e_proj);
        count(&c, &m->mtp.h_proj);
        if (m->mtp.head.data != m->lm_head.data)
            count(&c, &m->mtp.head);
    }
    for (int f = SP_WF_F32; f <= SP_WF_FP8_BLOCK && info->n_formats < SP_MODEL_INFO_MAX_FORMATS; f++)
        if (c.n[f]) {
            info->formats[info->n_formats].name = sp_wformat_name((sp_wformat)f);
            info->formats[info->n_formats++].n_matrices = c.n[f];
        }

    info->device = sp_model_device(m);
    info->device_bytes = sp_model_device_bytes(m);
    info->host_copy_bytes = m->host_copy_bytes;
    info->device_total_bytes = m->be->total_bytes;
    info->default_n_ctx = sp_model_default_ctx(m);
    info->session_bytes = sp_model_session_bytes(m, 0, 0);
    info->token_bytes = token_bytes(m);
}

bool sp_model_input_scale(const sp_model *m, size_t i, const char **tensor, float *value)
{
    if (i >= m->quant.n_input_scales)
        return false;
    if (tensor)
        *tensor = m->quant.input_scales[i].tensor;
    if (value)
        *value = m->quant.input_scales[i].value;
    return true;
}
