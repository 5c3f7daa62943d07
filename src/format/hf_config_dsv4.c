/* hf_config_dsv4.c: DeepSeek-V4's config fields, normalized into sp_dsv4_config.
 *
 * Two spellings reach us: transformers 5 (`layer_types` with compressed_sparse_attention /
 * heavily_compressed_attention, `compress_rates`, `mlp_layer_types`, `rope_parameters`
 * nested as {"main": .., "compress": ..}) and the hub's original one (`compress_ratios`
 * per layer 0/4/128, `num_hash_layers`, `qk_rope_head_dim`, `rope_theta` for the main
 * RoPE and `compress_rope_theta` + `rope_scaling` for the compressed one). Both are read
 * the way DeepseekV4Config.__post_init__ folds them: explicit fields win over legacy ones,
 * YaRN applies to the "compress" RoPE only and with attention_factor 1 unless given. */
#include "format/hf_config.h"
#include "util/error.h"
#include "util/json.h"

#include <math.h>
#include <string.h>

bool sp_hf_config_is_dsv4(const cJSON *j)
{
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    return cJSON_IsString(mt) && strcmp(mt->valuestring, "deepseek_v4") == 0;
}

/* partial_rotary_factor: explicit, else qk_rope_head_dim / head_dim, else 64/512. */
static sp_status rotary_factor(const cJSON *j, const char *what, double *out, sp_error *err)
{
    int64_t rope_hd, hd;
    sp_status st;
    if ((st = sp_json_int(j, "qk_rope_head_dim", what, 0, 0, 4096, &rope_hd, err)) ||
        (st = sp_json_int(j, "head_dim", what, 512, 1, 4096, &hd, err)))
        return st;
    double def = rope_hd > 0 ? (double)rope_hd / (double)hd : 64.0 / 512.0;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "partial_rotary_factor");
    if (!p || cJSON_IsNull(p)) {
        *out = def;
        return SP_OK;
    }
    return sp_json_num(j, "partial_rotary_factor", what, def, 1e-6, 1.0, out, err);
}

static sp_status nested_rope(const cJSON *obj, const char *field, const char *what, double theta,
                             double prf, sp_rope_config *r, sp_error *err)
{
    memset(r, 0, sizeof *r);
    r->partial_rotary_factor = prf;
    sp_status st = sp_json_num(obj, "rope_theta", what, theta, 1e-3, 1e15, &r->theta, err);
    if (st == SP_OK)
        st = sp_rope_params_parse(obj, field, what, r, err);
    return st;
}

sp_status sp_dsv4_parse_rope(const cJSON *j, const char *what, sp_hf_config *c, sp_error *err)
{
    double theta, ctheta, prf;
    sp_status st;
    if ((st = sp_json_num(j, "rope_theta", what, 10000.0, 1e-3, 1e15, &theta, err)) ||
        (st = sp_json_num(j, "compress_rope_theta", what, 160000.0, 1e-3, 1e15, &ctheta, err)) ||
        (st = rotary_factor(j, what, &prf, err)))
        return st;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
    const cJSON *main_rp = cJSON_IsObject(rp) ? cJSON_GetObjectItemCaseSensitive(rp, "main") : NULL;
    const cJSON *comp_rp = cJSON_IsObject(rp) ? cJSON_GetObjectItemCaseSensitive(rp, "compress") : NULL;
    if (cJSON_IsObject(main_rp) && cJSON_IsObject(comp_rp)) {
        if ((st = nested_rope(main_rp, "rope_parameters.main", what, theta, prf, &c->rope, err)))
            return st;
        return nested_rope(comp_rp, "rope_parameters.compress", what, ctheta, prf,
                           &c->dsv4.rope_compress, err);
    }
    /* flat: main is plain RoPE at rope_theta; compress takes the scaling (rope_parameters'
     * or rope_scaling's keys) at compress_rope_theta, YaRN with attention_factor 1 */
    memset(&c->rope, 0, sizeof c->rope);
    c->rope.type = SP_ROPE_DEFAULT;
    c->rope.theta = theta;
    c->rope.partial_rotary_factor = prf;
    sp_rope_config *r = &c->dsv4.rope_compress;
    memset(r, 0, sizeof *r);
    r->type = SP_ROPE_DEFAULT;
    r->theta = ctheta;
    r->partial_rotary_factor = prf;
    const cJSON *src = cJSON_IsObject(rp) ? rp : cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    if (!cJSON_IsObject(src))
        return SP_OK;
    const char *field = src == rp ? "rope_parameters" : "rope_scaling";
    if ((st = sp_rope_params_parse(src, field, what, r, err)))
        return st;
    r->theta = ctheta;
    if (r->type == SP_ROPE_YARN && !r->has_attention_factor) {
        r->has_attention_factor = true;
        r->attention_factor = 1.0;
    }
    return SP_OK;
}

/* compress_rates {"compressed_sparse_attention": m, "heavily_compressed_attention": m'}
 * (or compress_rate_csa / compress_rate_hca), defaults 4 and 128. */
static sp_status rates(const cJSON *j, const char *what, int64_t *csa, int64_t *hca, sp_error *err)
{
    sp_status st;
    if ((st = sp_json_int(j, "compress_rate_csa", what, 4, 1, 1 << 20, csa, err)) ||
        (st = sp_json_int(j, "compress_rate_hca", what, 128, 1, 1 << 20, hca, err)))
        return st;
    const cJSON *cr = cJSON_GetObjectItemCaseSensitive(j, "compress_rates");
    if (!cr || cJSON_IsNull(cr))
        return SP_OK;
    if (!cJSON_IsObject(cr))
        return sp_err(err, SP_ERR_FORMAT, "%s: field 'compress_rates' is not an object", what);
    if ((st = sp_json_int(cr, "compressed_sparse_attention", what, *csa, 1, 1 << 20, csa, err)))
        return st;
    return sp_json_int(cr, "heavily_compressed_attention", what, *hca, 1, 1 << 20, hca, err);
}

static sp_status attention_types(const cJSON *j, const char *what, sp_hf_config *c, sp_error *err)
{
    int64_t csa, hca, n = c->n_layers;
    sp_status st = rates(j, what, &csa, &hca, err);
    if (st != SP_OK)
        return st;
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(j, "layer_types");
    const cJSON *cr = cJSON_GetObjectItemCaseSensitive(j, "compress_ratios");
    for (int64_t i = 0; i < n; i++) { /* default: 2 HCA, then CSA/HCA alternating */
        bool is_csa = i >= 2 && (i - 2) % 2 == 1;
        c->dsv4.compress_rate[i] = is_csa ? csa : hca;
        c->dsv4.indexer[i] = is_csa;
    }
    if (cJSON_IsArray(lt)) {
        int i = 0;
        for (const cJSON *x = lt->child; x && i < n; x = x->next, i++) {
            bool s = !strcmp(x->valuestring, "sliding_attention");
            bool is_csa = !strcmp(x->valuestring, "compressed_sparse_attention");
            c->dsv4.compress_rate[i] = s ? 0 : is_csa ? csa : hca;
            c->dsv4.indexer[i] = is_csa;
        }
    } else if (cJSON_IsArray(cr)) {
        if (cJSON_GetArraySize(cr) < n)
            return sp_err(err, SP_ERR_FORMAT,
                          "%s: field 'compress_ratios' has %d entries but num_hidden_layers is %lld",
                          what, cJSON_GetArraySize(cr), (long long)n);
        int i = 0;
        for (const cJSON *x = cr->child; x && i < n; x = x->next, i++) {
            int64_t r;
            if ((st = sp_json_as_int(x, what, "compress_ratios", 0, 1 << 20, &r, err)))
                return st;
            if (r != 0 && r != 4 && r != 128)
                return sp_err(err, SP_ERR_UNSUPPORTED,
                              "%s: field 'compress_ratios[%d]': %lld is not one of 0, 4, 128", what,
                              i, (long long)r);
            c->dsv4.compress_rate[i] = r == 0 ? 0 : r == 4 ? csa : hca;
            c->dsv4.indexer[i] = r == 4;
        }
    }
    for (int64_t i = 0; i < n; i++)
        c->layer_sliding[i] = true;
    return SP_OK;
}

static sp_status mlp_types(const cJSON *j, const char *what, sp_hf_config *c, sp_error *err)
{
    int64_t n_hash;
    sp_status st = sp_json_int(j, "num_hash_layers", what, 3, 0, SP_MAX_LAYERS, &n_hash, err);
    if (st != SP_OK)
        return st;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "mlp_layer_types");
    if (!mt || cJSON_IsNull(mt)) {
        for (int64_t i = 0; i < c->n_layers; i++)
            c->dsv4.hash_moe[i] = i < n_hash;
        return SP_OK;
    }
    if (!cJSON_IsArray(mt) || cJSON_GetArraySize(mt) != c->n_layers)
        return sp_err(err, SP_ERR_FORMAT,
                      "%s: field 'mlp_layer_types' must be a list of num_hidden_layers (%lld) strings",
                      what, (long long)c->n_layers);
    int i = 0;
    for (const cJSON *x = mt->child; x; x = x->next, i++) {
        if (!cJSON_IsString(x) || (strcmp(x->valuestring, "hash_moe") && strcmp(x->valuestring, "moe")))
            return sp_err(err, SP_ERR_UNSUPPORTED,
                          "%s: field 'mlp_layer_types[%d]' must be \"hash_moe\" or \"moe\"", what, i);
        c->dsv4.hash_moe[i] = !strcmp(x->valuestring, "hash_moe");
    }
    return SP_OK;
}

static sp_status scoring(const cJSON *j, const char *what, sp_hf_config *c, sp_error *err)
{
    const char *s;
    sp_status st = sp_json_str(j, "scoring_func", what, "sqrtsoftplus", &s, err);
    if (st != SP_OK)
        return st;
    if (!strcmp(s, "sqrtsoftplus"))
        c->dsv4.scoring = SP_SCORE_SQRTSOFTPLUS;
    else if (!strcmp(s, "sigmoid"))
        c->dsv4.scoring = SP_SCORE_SIGMOID;
    else /* transformers 5.17's ACT2FN has neither "softmax" nor other router functions */
        return sp_err(err, SP_ERR_UNSUPPORTED,
                      "%s: field 'scoring_func': '%s' is not supported (sqrtsoftplus, sigmoid)", what, s);
    return SP_OK;
}

sp_status sp_dsv4_parse(const cJSON *j, const char *what, sp_hf_config *c, sp_error *err)
{
    sp_dsv4_config *d = &c->dsv4;
    d->present = true;
    sp_status st;
    if ((st = attention_types(j, what, c, err)) || (st = mlp_types(j, what, c, err)) ||
        (st = scoring(j, what, c, err)) ||
        (st = sp_json_int(j, "hc_mult", what, 4, 1, 64, &d->hc_mult, err)) ||
        (st = sp_json_int(j, "hc_sinkhorn_iters", what, 20, 1, 1000, &d->hc_sinkhorn_iters, err)) ||
        (st = sp_json_num(j, "hc_eps", what, 1e-6, 0, 1, &d->hc_eps, err)) ||
        (st = sp_json_int(j, "o_groups", what, 8, 1, 4096, &d->o_groups, err)) ||
        (st = sp_json_int(j, "o_lora_rank", what, 1024, 1, 1 << 20, &d->o_lora_rank, err)) ||
        (st = sp_json_int(j, "index_n_heads", what, 64, 1, 4096, &d->index_n_heads, err)) ||
        (st = sp_json_int(j, "index_head_dim", what, 128, 2, 4096, &d->index_head_dim, err)) ||
        (st = sp_json_int(j, "index_topk", what, 512, 1, 1 << 24, &d->index_topk, err)) ||
        (st = sp_json_int(j, "num_nextn_predict_layers", what, 0, 0, 64, &d->n_mtp, err)) ||
        (st = sp_json_num(j, "swiglu_limit", what, 10.0, 0, 1e30, &c->swiglu_limit, err)) ||
        (st = sp_json_int(j, "sliding_window", what, 128, 1, INT32_MAX, &c->sliding_window, err)))
        return st;
    if (c->n_heads % d->o_groups)
        return sp_err(err, SP_ERR_FORMAT, "%s: num_attention_heads %lld is not a multiple of o_groups %lld",
                      what, (long long)c->n_heads, (long long)d->o_groups);
    int64_t rot = (int64_t)((double)c->head_dim * c->rope.partial_rotary_factor);
    if (rot % 2 || rot > c->head_dim || rot > d->index_head_dim)
        return sp_err(err, SP_ERR_FORMAT,
                      "%s: the rotary dims %lld (head_dim x partial_rotary_factor) must be even and fit "
                      "head_dim %lld and index_head_dim %lld",
                      what, (long long)rot, (long long)c->head_dim, (long long)d->index_head_dim);
    if (c->n_experts <= 0 || c->n_experts_per_tok <= 0 || c->n_experts_per_tok > c->n_experts ||
        c->moe_intermediate_size <= 0)
        return sp_err(err, SP_ERR_FORMAT,
                      "%s: DeepSeek-V4 needs n_routed_experts, num_experts_per_tok (<= experts) and "
                      "moe_intermediate_size",
                      what);
    return SP_OK;
}
