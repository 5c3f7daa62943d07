/* hf_config.h: a Hugging Face config.json (+ generation_config.json) read into one
 * normalized struct.
 *
 * Normalization done here, so the model code sees one form:
 *   - RoPE: transformers-5 `rope_parameters` or legacy `rope_theta` + `rope_scaling`
 *     (whose kind is `rope_type` or `type`) become one sp_rope_config.
 *   - head_dim: config.head_dim when present, else hidden_size / num_attention_heads.
 *   - eos ids: generation_config.json's eos_token_id (int or list) when present, else
 *     config.json's.
 *   - per-layer attention kind from `layer_types`, or from sliding_window fields.
 *   - DeepSeek-V4 (hf_config_dsv4.c): its "main"/"compress" RoPE pair, compressed layer
 *     types and rates, MoE types, hyper-connections, indexer and output-projection fields,
 *     from the transformers-5 names or the hub's original ones (compress_ratios,
 *     num_hash_layers, qk_rope_head_dim, compress_rope_theta + rope_scaling).
 * Fields for the mixture-of-experts and MLA families are parsed when present and left
 * at their defaults otherwise; which of them an architecture requires is decided by
 * the architecture table (model/arch.c). */
#ifndef SP_FORMAT_HF_CONFIG_H
#define SP_FORMAT_HF_CONFIG_H

#include "specula.h"
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#define SP_MAX_LAYERS 1024
#define SP_MAX_EOS_IDS 16

typedef enum sp_rope_type {
    SP_ROPE_DEFAULT,
    SP_ROPE_LINEAR,
    SP_ROPE_LLAMA3,
    SP_ROPE_YARN,
} sp_rope_type;

typedef struct sp_rope_config {
    sp_rope_type type;
    double theta;
    double partial_rotary_factor;
    double factor;
    /* llama3 */
    double low_freq_factor, high_freq_factor;
    int64_t original_max_pos;
    /* yarn */
    double beta_fast, beta_slow;
    bool has_attention_factor;
    double attention_factor;
    double mscale, mscale_all_dim;
    bool truncate;
} sp_rope_config;

/* DeepSeek-V4 (zero when the model is another family). Every V4 layer attends over a
 * sliding window; compressed layers add compressed entries (one per `compress_rate`
 * tokens), CSA layers choose among them with the lightning indexer. */
typedef enum sp_dsv4_score { SP_SCORE_SQRTSOFTPLUS, SP_SCORE_SIGMOID } sp_dsv4_score;
typedef struct sp_dsv4_config {
    bool present;
    sp_rope_config rope_compress;         /* "compress": CSA/HCA layers and compressors */
    int64_t compress_rate[SP_MAX_LAYERS]; /* 0: sliding only */
    bool indexer[SP_MAX_LAYERS];          /* compressed_sparse_attention */
    bool hash_moe[SP_MAX_LAYERS];         /* mlp_layer_types "hash_moe" */
    int64_t hc_mult, hc_sinkhorn_iters;
    double hc_eps;
    int64_t o_groups, o_lora_rank;
    int64_t index_n_heads, index_head_dim, index_topk;
    int64_t n_mtp; /* num_nextn_predict_layers */
    sp_dsv4_score scoring;
} sp_dsv4_config;

typedef struct sp_hf_config {
    const char *path; /* config.json path, for messages (owned) */
    char *arch;       /* architectures[0] (owned) */
    char *model_type; /* (owned, may be NULL) */

    int64_t vocab_size, hidden_size, intermediate_size;
    int64_t n_layers, n_heads, n_kv_heads, head_dim;
    double rms_norm_eps;
    int64_t max_pos;
    bool tie_word_embeddings, attention_bias, mlp_bias;
    sp_rope_config rope;

    int64_t bos_id; /* -1 when unknown */
    int32_t eos_ids[SP_MAX_EOS_IDS];
    size_t n_eos_ids;

    /* sliding-window attention: window W (0 = none) and per-layer flags */
    int64_t sliding_window;
    bool layer_sliding[SP_MAX_LAYERS];

    /* mixture of experts */
    int64_t n_experts, n_experts_per_tok, moe_intermediate_size, decoder_sparse_step;
    int64_t n_shared_experts, n_group, topk_group, first_k_dense_replace;
    bool norm_topk_prob, has_norm_topk_prob;
    double routed_scaling_factor;
    bool mlp_only_layer[SP_MAX_LAYERS];
    int64_t n_nextn; /* num_nextn_predict_layers: DeepSeek multi-token prediction modules */

    /* multi-head latent attention (DeepSeek) */
    int64_t q_lora_rank; /* 0 = plain q_proj */
    int64_t kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    bool rope_interleave;

    /* gpt-oss */
    double swiglu_limit, swiglu_alpha;

    /* sampling defaults from generation_config.json */
    bool gen_do_sample;
    double gen_temperature, gen_top_p, gen_min_p;
    int64_t gen_top_k;
    int64_t gen_num_assistant_tokens; /* draft tokens per round when this model drafts; 0: absent */

    sp_dsv4_config dsv4;
    cJSON *json;     /* the parsed config.json, kept for family-specific fields */
    cJSON *gen_json; /* generation_config.json or NULL */
} sp_hf_config;

/* Reads dir/config.json and dir/generation_config.json (optional). */
sp_status sp_hf_config_load(const char *dir, sp_hf_config **out, sp_error *err);
/* Parses config text (tests). gen_text may be NULL. */
sp_status sp_hf_config_parse(const char *text, size_t len, const char *gen_text,
                             size_t gen_len, const char *what, sp_hf_config **out,
                             sp_error *err);
void sp_hf_config_free(sp_hf_config *cfg);

const char *sp_rope_type_name(sp_rope_type t);
/* Reads a RoPE kind and its parameters (rope_type or type, factor, ...) from one object
 * into r, whose theta and partial_rotary_factor the caller has set; `field` names the
 * object in messages. */
sp_status sp_rope_params_parse(const cJSON *src, const char *field, const char *what,
                               sp_rope_config *r, sp_error *err);
/* DeepSeek-V4 fields (hf_config_dsv4.c): called for model_type "deepseek_v4". */
bool sp_hf_config_is_dsv4(const cJSON *j);
sp_status sp_dsv4_parse_rope(const cJSON *j, const char *what, sp_hf_config *c, sp_error *err);
sp_status sp_dsv4_parse(const cJSON *j, const char *what, sp_hf_config *c, sp_error *err);

#endif
