/* hf_config.c: parsing and normalizing config.json / generation_config.json
 * (see hf_config.h for what is normalized and why). */
#include "format/hf_config.h"
#include "util/error.h"
#include "util/fileio.h"
#include "util/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONFIG_MAX_BYTES (16u << 20)

const char *sp_rope_type_name(sp_rope_type t)
{
    switch (t) {
    case SP_ROPE_DEFAULT: return "default";
    case SP_ROPE_LINEAR: return "linear";
    case SP_ROPE_LLAMA3: return "llama3";
    case SP_ROPE_YARN: return "yarn";
    }
    return "?";
}

/* Reads the RoPE description from rope_parameters (transformers 5) or rope_theta +
 * rope_scaling (older files). */
static sp_status parse_rope(const cJSON *j, const char *what, sp_hf_config *c, sp_error *err)
{
    if (sp_hf_config_is_dsv4(j))
        return sp_dsv4_parse_rope(j, what, c, err);
    sp_rope_config *r = &c->rope;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    const cJSON *src = NULL;
    const char *field = "rope_scaling";
    sp_status st = sp_json_num(j, "rope_theta", what, 10000.0, 1e-3, 1e15, &r->theta, err);
    if (st != SP_OK)
        return st;
    if (cJSON_IsObject(rp)) {
        if (!cJSON_GetObjectItemCaseSensitive(rp, "rope_type") &&
            !cJSON_GetObjectItemCaseSensitive(rp, "rope_theta") &&
            !cJSON_GetObjectItemCaseSensitive(rp, "type"))
            return sp_err(err, SP_ERR_UNSUPPORTED,
                          "%s: field 'rope_parameters': per-layer-type RoPE parameters are not "
                          "supported",
                          what);
        src = rp;
        field = "rope_parameters";
        if ((st = sp_json_num(rp, "rope_theta", what, r->theta, 1e-3, 1e15, &r->theta, err)))
            return st;
    } else if (cJSON_IsObject(rs)) {
        src = rs;
    } else if (rp && !cJSON_IsNull(rp)) {
        return sp_err(err, SP_ERR_FORMAT, "%s: field 'rope_parameters' is not an object", what);
    } else if (rs && !cJSON_IsNull(rs)) {
        return sp_err(err, SP_ERR_FORMAT, "%s: field 'rope_scaling' is not an object", what);
    }
    if ((st = sp_json_num(j, "partial_rotary_factor", what, 1.0, 1e-6, 1.0,
                          &r->partial_rotary_factor, err)))
        return st;
    r->type = SP_ROPE_DEFAULT;
    if (!src)
        return SP_OK;
    return sp_rope_params_parse(src, field, what, r, err);
}

sp_status sp_rope_params_parse(const cJSON *src, const char *field, const char *what,
                               sp_rope_config *r, sp_error *err)
{
    sp_status st;
    if ((st = sp_json_num(src, "partial_rotary_factor", what, r->partial_rotary_factor, 1e-6,
                          1.0, &r->partial_rotary_factor, err)))
        return st;
    const char *type;
    if ((st = sp_json_str(src, "rope_type", what, NULL, &type, err)))
        return st;
    if (!type && (st = sp_json_str(src, "type", what, "default", &type, err)))
        return st;
    if (strcmp(type, "default") == 0) {
        r->type = SP_ROPE_DEFAULT;
        return SP_OK;
    }
    if (strcmp(type, "linear") == 0) {
        r->type = SP_ROPE_LINEAR;
        if ((st = sp_json_num(src, "factor", what, NAN, 1e-6, 1e6, &r->factor, err)))
            return st;
        if (isnan(r->factor))
            return sp_err(err, SP_ERR_FORMAT, "%s: field '%s.factor' is required for linear RoPE",
                          what, field);
        return SP_OK;
    }
    if (strcmp(type, "llama3") == 0) {
        r->type = SP_ROPE_LLAMA3;
        if ((st = sp_json_num(src, "factor", what, NAN, 1e-6, 1e6, &r->factor, err)) ||
            (st = sp_json_num(src, "low_freq_factor", what, NAN, 1e-6, 1e6, &r->low_freq_factor,
                              err)) ||
            (st = sp_json_num(src, "high_freq_factor", what, NAN, 1e-6, 1e6,
                              &r->high_freq_factor, err)) ||
            (st = sp_json_int(src, "original_max_position_embeddings", what, -1, 1, 1 << 30,
                              &r->original_max_pos, err)))
            return st;
        if (isnan(r->factor) || isnan(r->low_freq_factor) || isnan(r->high_freq_factor) ||
            r->original_max_pos < 0)
            return sp_err(err, SP_ERR_FORMAT,
                          "%s: field '%s': llama3 RoPE needs factor, low_freq_factor, "
                          "high_freq_factor and original_max_position_embeddings",
                          what, field);
        if (r->high_freq_factor <= r->low_freq_factor)
            return sp_err(err, SP_ERR_FORMAT,
                          "%s: field '%s': high_freq_factor %g must exceed low_freq_factor %g",
                          what, field, r->high_freq_factor, r->low_freq_factor);
        return SP_OK;
    }
    if (strcmp(type, "yarn") == 0) {
        r->type = SP_ROPE_YARN;
        double af;
        if ((st = sp_json_num(src, "factor", what, NAN, 1e-6, 1e6, &r->factor, err)) ||
            (st = sp_json_int(src, "original_max_position_embeddings", what, -1, 1, 1 << 30,
                              &r->original_max_pos, err)) ||
            (st = sp_json_num(src, "beta_fast", what, 32.0, 1e-6, 1e6, &r->beta_fast, err)) ||
            (st = sp_json_num(src, "beta_slow", what, 1.0, 1e-6, 1e6, &r->beta_slow, err)) ||
            (st = sp_json_num(src, "attention_factor", what, NAN, 0, 1e6, &af, err)) ||
            (st = sp_json_num(src, "mscale", what, 0, -1e6, 1e6, &r->mscale, err)) ||
            (st = sp_json_num(src, "mscale_all_dim", what, 0, -1e6, 1e6, &r->mscale_all_dim,
                              err)) ||
            (st = sp_json_bool(src, "truncate", what, true, &r->truncate, err)))
            return st;
        r->has_attention_factor = !isnan(af);
        r->attention_factor = af;
        return SP_OK;
    }
    return sp_err(err, SP_ERR_UNSUPPORTED, "%s: field '%s': RoPE type '%s' is not supported",
                  what, field, type);
}

/* eos_token_id may be an int or a list of ints. */
static sp_status parse_eos(const cJSON *j, const char *what, sp_hf_config *c, sp_error *err)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "eos_token_id");
    if (!e || cJSON_IsNull(e))
        return SP_OK;
    c->n_eos_ids = 0;
    if (cJSON_IsArray(e)) {
        for (const cJSON *x = e->child; x; x = x->next) {
            int64_t v;
            sp_status st = sp_json_as_int(x, what, "eos_token_id", 0, INT32_MAX, &v, err);
            if (st != SP_OK)
                return st;
            if (c->n_eos_ids == SP_MAX_EOS_IDS)
                return sp_err(err, SP_ERR_FORMAT, "%s: field 'eos_token_id': more than %d ids",
                              what, SP_MAX_EOS_IDS);
            c->eos_ids[c->n_eos_ids++] = (int32_t)v;
        }
        return SP_OK;
    }
    int64_t v;
    sp_status st = sp_json_as_int(e, what, "eos_token_id", 0, INT32_MAX, &v, err);
    if (st == SP_OK) {
        c->eos_ids[0] = (int32_t)v;
        c->n_eos_ids = 1;
    }
    return st;
}

static sp_status parse_layer_types(const cJSON *j, const char *what, sp_hf_config *c,
                                   sp_error *err)
{
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(j, "layer_types");
    sp_status st = sp_json_int(j, "sliding_window", what, 0, 0, INT32_MAX, &c->sliding_window,
                               err);
    if (st != SP_OK)
        return st;
    if (cJSON_IsArray(lt)) {
        if (cJSON_GetArraySize(lt) != c->n_layers)
            return sp_err(err, SP_ERR_FORMAT,
                          "%s: field 'layer_types' has %d entries but num_hidden_layers is %lld",
                          what, cJSON_GetArraySize(lt), (long long)c->n_layers);
        int i = 0;
        for (const cJSON *x = lt->child; x; x = x->next, i++) {
            if (!cJSON_IsString(x))
                return sp_err(err, SP_ERR_FORMAT, "%s: field 'layer_types[%d]' is not a string",
                              what, i);
            if (strcmp(x->valuestring, "sliding_attention") == 0 ||
                (sp_hf_config_is_dsv4(j) && (!strcmp(x->valuestring, "compressed_sparse_attention") ||
                                             !strcmp(x->valuestring, "heavily_compressed_attention"))))
                c->layer_sliding[i] = true; /* V4: every layer has the window (hf_config_dsv4.c) */
            else if (strcmp(x->valuestring, "full_attention") != 0)
                return sp_err(err, SP_ERR_UNSUPPORTED,
                              "%s: field 'layer_types[%d]': attention type '%s' is not supported",
                              what, i, x->valuestring);
        }
    } else if (c->sliding_window > 0) {
        bool use = true;
        int64_t first = 0;
        if (cJSON_GetObjectItemCaseSensitive(j, "use_sliding_window")) {
            if ((st = sp_json_bool(j, "use_sliding_window", what, false, &use, err)) ||
                (st = sp_json_int(j, "max_window_layers", what, 0, 0, SP_MAX_LAYERS, &first,
                                  err)))
                return st;
        }
        for (int64_t i = first; use && i < c->n_layers; i++)
            c->layer_sliding[i] = true;
    }
    bool any = false;
    for (int64_t i = 0; i < c->n_layers; i++)
        any |= c->layer_sliding[i];
    if (any && c->sliding_window <= 0)
        return sp_err(err, SP_ERR_FORMAT,
                      "%s: 'layer_types' asks for sliding attention but 'sliding_window' is not set",
                      what);
    return SP_OK;
}

static sp_status parse_core(const cJSON *j, const char *what, sp_hf_config *c, sp_error *err)
{
    sp_status st;
    if ((st = sp_json_int_req(j, "vocab_size", what, 1, 1 << 24, &c->vocab_size, err)) ||
        (st = sp_json_int_req(j, "hidden_size", what, 1, 1 << 17, &c->hidden_size, err)) ||
        (st = sp_json_int(j, "intermediate_size", what, 0, 0, 1 << 20, &c->intermediate_size,
                          err)) ||
        (st = sp_json_int_req(j, "num_hidden_layers", what, 1, SP_MAX_LAYERS, &c->n_layers,
                              err)) ||
        (st = sp_json_int_req(j, "num_attention_heads", what, 1, 4096, &c->n_heads, err)) ||
        (st = sp_json_int(j, "num_key_value_heads", what, c->n_heads, 1, c->n_heads,
                          &c->n_kv_heads, err)) ||
        (st = sp_json_num(j, "rms_norm_eps", what, 1e-6, 1e-30, 1.0, &c->rms_norm_eps, err)) ||
        (st = sp_json_int(j, "max_position_embeddings", what, 2048, 1, 1 << 24, &c->max_pos,
                          err)) ||
        (st = sp_json_bool(j, "tie_word_embeddings", what, false, &c->tie_word_embeddings,
                           err)) ||
        (st = sp_json_bool(j, "attention_bias", what, false, &c->attention_bias, err)) ||
        (st = sp_json_bool(j, "mlp_bias", what, false, &c->mlp_bias, err)) ||
        (st = sp_json_int(j, "bos_token_id", what, -1, 0, INT32_MAX, &c->bos_id, err)))
        return st;
    if (c->n_heads % c->n_kv_heads)
        return sp_err(err, SP_ERR_FORMAT,
                      "%s: num_attention_heads %lld is not a multiple of num_key_value_heads %lld",
                      what, (long long)c->n_heads, (long long)c->n_kv_heads);
    int64_t def_hd = c->hidden_size % c->n_heads ? 0 : c->hidden_size / c->n_heads;
    if ((st = sp_json_int(j, "head_dim", what, def_hd, 1, 4096, &c->head_dim, err)))
        return st;
    if (c->head_dim == 0)
        return sp_err(err, SP_ERR_FORMAT,
                      "%s: hidden_size %lld is not a multiple of num_attention_heads %lld and "
                      "head_dim is not given",
                      what, (long long)c->hidden_size, (long long)c->n_heads);
    const char *act;
    if ((st = sp_json_str(j, "hidden_act", what, "silu", &act, err)))
        return st;
    if (strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0)
        return sp_err(err, SP_ERR_UNSUPPORTED, "%s: field 'hidden_act': '%s' is not supported",
                      what, act);
    if ((st = parse_rope(j, what, c, err)) || (st = parse_eos(j, what, c, err)))
        return st;
    return parse_layer_types(j, what, c, err);
}

static sp_status parse_moe(const cJSON *j, const char *what, sp_hf_config *c, sp_error *err)
{
    sp_status st;
    int64_t ne_a, ne_b, ne_c;
    if ((st = sp_json_int(j, "num_experts", what, 0, 0, 1 << 16, &ne_a, err)) ||
        (st = sp_json_int(j, "num_local_experts", what, 0, 0, 1 << 16, &ne_b, err)) ||
        (st = sp_json_int(j, "n_routed_experts", what, 0, 0, 1 << 16, &ne_c, err)) ||
        (st = sp_json_int(j, "num_experts_per_tok", what, 0, 0, 1 << 16, &c->n_experts_per_tok,
                          err)) ||
        (st = sp_json_int(j, "moe_intermediate_size", what, 0, 0, 1 << 20,
                          &c->moe_intermediate_size, err)) ||
        (st = sp_json_int(j, "decoder_sparse_step", what, 1, 1, SP_MAX_LAYERS,
                          &c->decoder_sparse_step, err)) ||
        (st = sp_json_int(j, "n_shared_experts", what, 0, 0, 1 << 10, &c->n_shared_experts,
                          err)) ||
        (st = sp_json_int(j, "n_group", what, 1, 1, 1 << 16, &c->n_group, err)) ||
        (st = sp_json_int(j, "topk_group", what, 1, 1, 1 << 16, &c->topk_group, err)) ||
        (st = sp_json_int(j, "first_k_dense_replace", what, 0, 0, SP_MAX_LAYERS,
                          &c->first_k_dense_replace, err)) ||
        (st = sp_json_num(j, "routed_scaling_factor", what, 1.0, -1e6, 1e6,
                          &c->routed_scaling_factor, err)) ||
        (st = sp_json_int(j, "num_nextn_predict_layers", what, 0, 0, 64, &c->n_nextn, err)))
        return st;
    c->n_experts = ne_a ? ne_a : ne_b ? ne_b : ne_c;
    c->has_norm_topk_prob = !sp_json_absent(j, "norm_topk_prob");
    if ((st = sp_json_bool(j, "norm_topk_prob", what, false, &c->norm_topk_prob, err)))
        return st;
    const cJSON *mol = cJSON_GetObjectItemCaseSensitive(j, "mlp_only_layers");
    if (mol && !cJSON_IsNull(mol)) {
        if (!cJSON_IsArray(mol))
            return sp_err(err, SP_ERR_FORMAT, "%s: field 'mlp_only_layers' is not a list", what);
        for (const cJSON *x = mol->child; x; x = x->next) {
            int64_t l;
            if ((st = sp_json_as_int(x, what, "mlp_only_layers", 0, c->n_layers - 1, &l, err)))
                return st;
            c->mlp_only_layer[l] = true;
        }
    }
    return SP_OK;
}

static sp_status parse_mla_and_misc(const cJSON *j, const char *what, sp_hf_config *c,
                                    sp_error *err)
{
    sp_status st;
    if ((st = sp_json_int(j, "q_lora_rank", what, 0, 0, 1 << 16, &c->q_lora_rank, err)) ||
        (st = sp_json_int(j, "kv_lora_rank", what, 0, 0, 1 << 16, &c->kv_lora_rank, err)) ||
        (st = sp_json_int(j, "qk_nope_head_dim", what, 0, 0, 4096, &c->qk_nope_head_dim,
                          err)) ||
        (st = sp_json_int(j, "qk_rope_head_dim", what, 0, 0, 4096, &c->qk_rope_head_dim, err)) ||
        (st = sp_json_int(j, "v_head_dim", what, 0, 0, 4096, &c->v_head_dim, err)) ||
        (st = sp_json_bool(j, "rope_interleave", what, true, &c->rope_interleave, err)) ||
        (st = sp_json_num(j, "swiglu_limit", what, 7.0, 0, 1e30, &c->swiglu_limit, err)) ||
        (st = sp_json_num(j, "swiglu_alpha", what, 1.702, -1e6, 1e6, &c->swiglu_alpha, err)))
        return st;
    return SP_OK;
}

static sp_status parse_generation(const cJSON *g, const char *what, sp_hf_config *c,
                                  sp_error *err)
{
    c->gen_temperature = 1.0;
    c->gen_top_p = 1.0;
    c->gen_top_k = 50;
    c->gen_min_p = 0.0;
    if (!g)
        return SP_OK;
    if (!cJSON_IsObject(g))
        return sp_err(err, SP_ERR_FORMAT, "%s: not a JSON object", what);
    sp_status st;
    if ((st = sp_json_bool(g, "do_sample", what, false, &c->gen_do_sample, err)) ||
        (st = sp_json_num(g, "temperature", what, 1.0, 0, 1e6, &c->gen_temperature, err)) ||
        (st = sp_json_num(g, "top_p", what, 1.0, 0, 1, &c->gen_top_p, err)) ||
        (st = sp_json_num(g, "min_p", what, 0.0, 0, 1, &c->gen_min_p, err)) ||
        (st = sp_json_int(g, "top_k", what, 50, 0, INT32_MAX, &c->gen_top_k, err)) ||
        (st = sp_json_int(g, "num_assistant_tokens", what, 0, 0, INT32_MAX, &c->gen_num_assistant_tokens,
                          err)) ||
        (st = sp_json_int(g, "bos_token_id", what, c->bos_id, 0, INT32_MAX, &c->bos_id, err)))
        return st;
    return parse_eos(g, what, c, err);
}

sp_status sp_hf_config_parse(const char *text, size_t len, const char *gen_text,
                             size_t gen_len, const char *what, sp_hf_config **out,
                             sp_error *err)
{
    *out = NULL;
    sp_hf_config *c = calloc(1, sizeof *c);
    if (!c || !(c->path = strdup(what))) {
        free(c);
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    }
    sp_status st = sp_json_parse(text, len, what, &c->json, err);
    if (st == SP_OK && !cJSON_IsObject(c->json))
        st = sp_err(err, SP_ERR_FORMAT, "%s: not a JSON object", what);
    const char *dup;
    if (st == SP_OK && (dup = sp_json_duplicate_key(c->json)))
        st = sp_err(err, SP_ERR_FORMAT, "%s: key '%s' appears twice", what, dup);
    if (st == SP_OK) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(c->json, "architectures");
        if (!cJSON_IsArray(a) || !cJSON_IsString(a->child))
            st = sp_err(err, SP_ERR_FORMAT,
                        "%s: field 'architectures' must be a list holding the model class name",
                        what);
        else if (!(c->arch = strdup(a->child->valuestring)))
            st = sp_err(err, SP_ERR_NOMEM, "out of memory");
    }
    if (st == SP_OK) {
        const char *mt = NULL;
        st = sp_json_str(c->json, "model_type", what, NULL, &mt, err);
        if (st == SP_OK && mt && !(c->model_type = strdup(mt)))
            st = sp_err(err, SP_ERR_NOMEM, "out of memory");
    }
    if (st == SP_OK)
        st = parse_core(c->json, what, c, err);
    if (st == SP_OK)
        st = parse_moe(c->json, what, c, err);
    if (st == SP_OK)
        st = parse_mla_and_misc(c->json, what, c, err);
    if (st == SP_OK && sp_hf_config_is_dsv4(c->json))
        st = sp_dsv4_parse(c->json, what, c, err);
    /* generation_config.json sits beside config.json: name it by its path in messages */
    char gwhat[1100];
    const char *slash = strrchr(what, '/');
    snprintf(gwhat, sizeof gwhat, "%.*sgeneration_config.json", slash ? (int)(slash - what + 1) : 0, what);
    if (st == SP_OK && gen_text)
        st = sp_json_parse(gen_text, gen_len, gwhat, &c->gen_json, err);
    if (st == SP_OK)
        st = parse_generation(c->gen_json, gwhat, c, err);
    if (st != SP_OK) {
        sp_hf_config_free(c);
        return st;
    }
    *out = c;
    return SP_OK;
}

sp_status sp_hf_config_load(const char *dir, sp_hf_config **out, sp_error *err)
{
    *out = NULL;
    char *cpath = sp_path_join(dir, "config.json");
    char *gpath = sp_path_join(dir, "generation_config.json");
    char *ctext = NULL, *gtext = NULL;
    size_t clen = 0, glen = 0;
    sp_status st = SP_OK;
    if (!cpath || !gpath)
        st = sp_err(err, SP_ERR_NOMEM, "out of memory");
    if (st == SP_OK)
        st = sp_read_file(cpath, CONFIG_MAX_BYTES, &ctext, &clen, err);
    if (st == SP_OK && sp_file_exists(gpath))
        st = sp_read_file(gpath, CONFIG_MAX_BYTES, &gtext, &glen, err);
    if (st == SP_OK)
        st = sp_hf_config_parse(ctext, clen, gtext, glen, cpath, out, err);
    free(ctext);
    free(gtext);
    free(cpath);
    free(gpath);
    return st;
}

void sp_hf_config_free(sp_hf_config *c)
{
    if (!c)
        return;
    cJSON_Delete(c->json);
    cJSON_Delete(c->gen_json);
    free((char *)c->path);
    free(c->arch);
    free(c->model_type);
    free(c);
}
