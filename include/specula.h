/* specula.h: the public interface of the specula inference engine.
 *
 * Everything a program needs to load a Hugging Face checkpoint, evaluate tokens and
 * generate text, and nothing about kernels or file formats. Handles are opaque.
 *
 * Conventions
 *   - Fallible functions return sp_status and take `sp_error *err` last. On failure the
 *     message names the file, the field and the offending value. `err` may be NULL.
 *   - Lifetimes: open/close for objects backed by files, new/free for objects the
 *     library allocates and the caller owns.
 *   - Nothing here calls exit() or abort() on bad input.
 *   - A model is read-only after sp_model_open and may be shared by sessions; a session
 *     is used by one thread at a time.
 */
#ifndef SPECULA_H
#define SPECULA_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>

/* SP_API marks the public functions: the library is compiled with -fvisibility=hidden,
 * so these are the only symbols a shared build of it would export. */
#if defined(__GNUC__) || defined(__clang__)
#define SP_API __attribute__((visibility("default")))
#else
#define SP_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sp_status {
    SP_OK = 0,
    SP_ERR_IO,          /* a file could not be opened, read or mapped */
    SP_ERR_FORMAT,      /* a file is malformed or lies about itself */
    SP_ERR_UNSUPPORTED, /* well-formed, but not something specula implements */
    SP_ERR_INVALID_ARG, /* the caller passed a bad value (token id, length, option) */
    SP_ERR_NOMEM,       /* allocation failed, or the machine cannot hold the model */
    SP_ERR_LIMIT,       /* a resource budget was exceeded (context, recursion, time) */
    SP_ERR_TEMPLATE,    /* a chat template raised or failed to render */
    SP_ERR_INTERNAL,    /* a bug in specula */
} sp_status;

#define SP_ERROR_MSG_BYTES 1024
typedef struct sp_error {
    sp_status status;
    char msg[SP_ERROR_MSG_BYTES];
} sp_error;

/* Human name of a status ("format error", ...). Never NULL. */
SP_API const char *sp_status_name(sp_status status);

/* ---- models ---------------------------------------------------------------------- */

typedef struct sp_model sp_model;

/* Arithmetic of the matrix products (docs/NUMERICS.md). Both are batch-invariant: a
 * position's logits do not depend on what else is in the pass.
 * EXACT: fp32 activations times the exactly decoded weights (relative L2 ~1e-6 against
 *        transformers in fp32).
 * FAST:  activations rounded to bf16 before each product, bf16 dot-product instructions
 *        where the CPU has them (AVX512_BF16); ~1e-3 relative L2 against transformers. */
typedef enum sp_precision { SP_PRECISION_EXACT = 0, SP_PRECISION_FAST = 1 } sp_precision;

typedef struct sp_model_params {
    int64_t n_ctx;       /* context the caller intends to use, for the memory check; 0 = default */
    int n_threads;       /* worker threads for kernels; 0 = all online CPUs */
    bool skip_mem_check; /* do not refuse when the estimate exceeds available memory */
    uint64_t reserved_bytes; /* memory other models of this process need (a speculative
                                target when opening its draft): budgeted with this one when
                                both are on the same device */
    const char *device;  /* "cpu", "cuda", "cuda:N" or "auto"/NULL: the first usable GPU,
                            else the CPU */
    sp_precision precision; /* default EXACT; the CLI defaults to FAST. FAST: the CPU's
                               BF16 dot products; on CUDA, BF16 weights on tensor cores
                               (other formats stay EXACT). sp_model_precision says which
                               the model computes in */
    /* Called while the weights are copied to a device, or on the CPU to aligned memory
     * (below): bytes copied so far of total, after every 256 MiB and once at the end, from
     * the opening thread. NULL: none. */
    void (*load_progress)(void *ctx, uint64_t done, uint64_t total);
    void *load_progress_ctx;
    /* CPU: compute on the checkpoint's memory mapping as it is. By default a shard whose
     * tensors the safetensors header leaves off 64-byte boundaries (Python's writer pads
     * the header to 8 bytes only) is copied once into aligned memory, where the kernels'
     * 32- and 64-byte loads never straddle two cache lines; with map_weights nothing is
     * copied and pages load on first use. */
    bool map_weights;
} sp_model_params;

SP_API sp_model_params sp_model_default_params(void);

/* Opens a Hugging Face model directory: config.json, model.safetensors or
 * model.safetensors.index.json + shards, generation_config.json when present.
 * Validates every tensor the architecture needs and refuses when the machine cannot
 * hold weights + KV cache for params->n_ctx. */
SP_API sp_status sp_model_open(const char *dir, const sp_model_params *params, sp_model **out,
                        sp_error *err);
SP_API void sp_model_close(sp_model *model);

SP_API int64_t sp_model_n_vocab(const sp_model *model);
SP_API int64_t sp_model_n_ctx_max(const sp_model *model); /* max_position_embeddings */
SP_API const char *sp_model_arch_name(const sp_model *model); /* e.g. "LlamaForCausalLM" */
/* The precision the model computes in, and the CPU kernel level in use ("generic",
 * "avx2", "avx512", "avx512bf16"; cpuid, SPECULA_ISA). */
SP_API sp_precision sp_model_precision(const sp_model *model);
SP_API const char *sp_cpu_kernels_name(void);
/* Bytes of the checkpoint tensors the model uses (packed formats count as stored). */
SP_API uint64_t sp_model_weight_bytes(const sp_model *model);
/* Weights plus a session for n_ctx tokens (0 = default): what the memory check budgets;
 * pass it as reserved_bytes when opening a draft model. */
SP_API uint64_t sp_model_budget_bytes(const sp_model *model, int64_t n_ctx);
/* The device the model runs on ("cpu (2 threads)", "cuda:0 NVIDIA H100 80GB HBM3"), and
 * the bytes of device memory its weights take there (0 on the CPU: the weights stay mapped). */
SP_API const char *sp_model_device(const sp_model *model);
SP_API uint64_t sp_model_device_bytes(const sp_model *model);
/* Whether this build can run on CUDA, and how many devices it sees (0 without). */
SP_API int sp_cuda_device_count(void);
/* End-of-sequence ids (generation_config.json, else config.json). Borrowed until close. */
SP_API const int32_t *sp_model_eos_ids(const sp_model *model, size_t *n_ids);

/* What specula made of a checkpoint (specula inspect prints it). Strings are borrowed from
 * the model and stay valid until sp_model_close. */
#define SP_MODEL_INFO_MAX_FORMATS 8
typedef struct sp_model_info {
    const char *architecture;  /* config.json's architectures[0] ("LlamaForCausalLM") */
    int64_t n_vocab, n_embd, n_layers;
    int64_t n_moe_layers;      /* layers whose feed-forward is a mixture of experts */
    int64_t n_mtp_layers;      /* multi-token prediction modules bound (--draft mtp), 0 or 1 */
    int64_t n_heads, n_kv_heads, head_dim;
    int64_t n_experts, n_experts_per_tok; /* config.json's (0 when it has none) */
    int64_t expert_width;      /* moe_intermediate_size, else intermediate_size */
    const char *rope_type;     /* "default", "yarn", "llama3", ... */
    int64_t rope_dim;          /* rotated dims per head */
    float rope_attention_factor;
    bool quantized;            /* false: quant_algo and quant_source are NULL */
    const char *quant_method;  /* "none", "MXFP4 (gpt-oss)", "NVFP4 (ModelOpt)", ... */
    const char *quant_algo;    /* quant_algo / format as the config writes it */
    const char *quant_source;  /* "config.json" or "hf_quant_config.json" */
    bool act_quant_declared;   /* the config declares quantized input activations */
    size_t n_input_scales;     /* activation scales in the checkpoint: sp_model_input_scale */
    uint64_t weight_bytes;     /* as sp_model_weight_bytes */
    uint64_t packed_bytes;     /* bytes of packed quantized weights and their scales */
    /* Matrices bound per weight format, in a fixed order (F32, BF16, F16, MXFP4, NVFP4,
     * FP8 block), formats with no matrix left out; an LM head tied to the embedding counts once. */
    size_t n_formats;
    struct { const char *name; int64_t n_matrices; } formats[SP_MODEL_INFO_MAX_FORMATS];
    const char *device;        /* as sp_model_device */
    uint64_t device_bytes;     /* as sp_model_device_bytes */
    uint64_t device_total_bytes; /* the device's own memory; 0 when it is the host's */
    uint64_t host_copy_bytes;  /* host memory of the aligned weight copies a CPU model made
                                  (sp_model_params.map_weights); 0: it computes on the mapping */
    int64_t default_n_ctx;     /* the context a session gets with n_ctx = 0 */
    uint64_t session_bytes;    /* KV cache + pass buffers of a default session */
    /* Weight bytes one decode token reads (an estimate for rooflines): every matrix but the
     * experts a token does not route to (n_experts - n_experts_per_tok per MoE layer) and
     * the embedding table beyond its one row (unless it is the LM head too). */
    uint64_t token_bytes;
} sp_model_info;

SP_API void sp_model_get_info(const sp_model *model, sp_model_info *info);
/* Device-to-device copy bandwidth of the model's device in GB/s (bytes read + written per
 * second, best of 5 copies of 512 MiB), measured now; 0 on the CPU or when it cannot be
 * measured (not enough free memory). */
SP_API double sp_model_copy_bandwidth(const sp_model *model);
/* Activation scale i < info.n_input_scales: its tensor name (borrowed until close) and value.
 * specula runs FP4 and FP8 checkpoints weight-only, so these are reported, not applied.
 * Returns false when i is out of range. */
SP_API bool sp_model_input_scale(const sp_model *model, size_t i, const char **tensor, float *value);

/* ---- sessions: a KV cache and scratch buffers over one model ----------------------- */

typedef struct sp_session sp_session;

typedef struct sp_session_params {
    int64_t n_ctx;   /* KV cache capacity in tokens; 0 = min(max_position_embeddings, 4096) */
    int64_t n_batch; /* most tokens per forward pass; longer inputs are chunked; 0 = 256 on
                        the CPU, 512 on a GPU */
} sp_session_params;

SP_API sp_session_params sp_session_default_params(void);

SP_API sp_status sp_session_new(sp_model *model, const sp_session_params *params,
                         sp_session **out, sp_error *err);
SP_API void sp_session_free(sp_session *session);

/* Appends tokens to the session and runs the forward pass. When `logits` is not NULL it
 * receives one row of n_vocab floats per token ([n_tokens, n_vocab]); when it is NULL
 * only the last row is computed and can be read with sp_session_last_logits.
 * The logits of a position do not depend on how the input is split across calls. */
SP_API sp_status sp_session_eval(sp_session *session, const int32_t *tokens, size_t n_tokens,
                          float *logits, sp_error *err);
/* sp_session_eval for greedy decoding: *next receives the last position's greedy pick
 * (the argmax, lowest id on ties, as temperature 0 samples). Where the backend picks on
 * the device (CUDA) only the id is read back, not n_vocab logits, and
 * sp_session_last_logits returns NULL until the next eval; elsewhere the logits are read
 * back as by sp_session_eval and stay readable. */
SP_API sp_status sp_session_eval_greedy(sp_session *session, const int32_t *tokens,
                                        size_t n_tokens, int32_t *next, sp_error *err);
/* Called with each greedy pick in order; returns whether to go on. */
typedef bool (*sp_pick_fn)(void *ctx, int32_t pick);
/* Greedy decoding from `first`: evaluates first, then each pick in turn, handing every
 * pick to on_pick (NULL: take them all), until max_new picks (at most the context left,
 * n_ctx - n_past) or on_pick returns false. *n_new receives the number of picks; the
 * session then holds first and every pick but the last (n_past grows by *n_new): the picks
 * and the session are those of sp_session_eval_greedy called in a loop. Where the backend
 * picks on the device (CUDA), a step's token goes from the pick before to the step on the
 * device and the next step is queued before the host reads this one's pick, so the GPU does
 * not wait for the host between tokens; stopping early then costs the one step queued
 * ahead, and the model serves no other session until the call returns. */
SP_API sp_status sp_session_decode_greedy(sp_session *session, int32_t first, size_t max_new,
                                          sp_pick_fn on_pick, void *ctx, size_t *n_new,
                                          sp_error *err);
/* sp_session_eval with every row's greedy pick in picks[n_tokens] (what greedy speculative
 * verification compares drafts with): where the backend picks on the device and the rows
 * fit one pass of the LM head (n_tokens <= 32 and the session's batch), only the picks
 * come back and `logits` ([n_tokens, n_vocab], host) is left alone; otherwise `logits`
 * gets every row and the picks are taken from it. The last logits are readable
 * (sp_session_last_logits) only in the second case. */
SP_API sp_status sp_session_eval_picks(sp_session *session, const int32_t *tokens,
                                       size_t n_tokens, float *logits, int32_t *picks,
                                       sp_error *err);
/* Logits of the last evaluated position; valid until the next eval. */
SP_API const float *sp_session_last_logits(const sp_session *session);
SP_API int64_t sp_session_n_past(const sp_session *session);
SP_API int64_t sp_session_n_ctx(const sp_session *session);
/* Forgets every position >= n_past (KV rollback). */
SP_API sp_status sp_session_truncate(sp_session *session, int64_t n_past, sp_error *err);

/* ---- sampling and generation -------------------------------------------------------- */

typedef struct sp_sampling_params {
    float temperature; /* 0 = greedy (argmax) */
    int32_t top_k;     /* 0 = off */
    float top_p;       /* 1 = off */
    float min_p;       /* 0 = off */
    uint64_t seed;
} sp_sampling_params;

SP_API sp_sampling_params sp_sampling_default_params(void);
/* The model's defaults from generation_config.json (greedy when it does not sample). */
SP_API sp_sampling_params sp_model_sampling_defaults(const sp_model *model);

/* sp_session_eval drawing the last position's token: *next receives the draw of params
 * with the uniform u in [0, 1) (what sp_sampler_next draws from the same logits when its
 * stream's next uniform is u: one definition, docs/NUMERICS.md "Sampling"; temperature 0 is
 * the greedy pick). Where the backend draws on the device (CUDA), only the token comes back
 * and the last logits are not kept; else they are, and the draw is made here. */
SP_API sp_status sp_session_eval_sample(sp_session *session, const int32_t *tokens,
                                        size_t n_tokens, const sp_sampling_params *params,
                                        double u, int32_t *next, sp_error *err);
/* generation_config.json's num_assistant_tokens: how many tokens per round this model
 * drafts when it is the assistant (draft) of transformers' assisted generation; 0 when
 * the file does not say. */
SP_API int32_t sp_model_draft_tokens(const sp_model *model);

typedef struct sp_generate_params {
    int64_t n_predict;           /* most tokens to generate */
    sp_sampling_params sampling;
    bool ignore_eos;             /* keep going after an end-of-sequence token */
} sp_generate_params;

typedef struct sp_generate_stats {
    int64_t n_prompt, n_generated;
    double prefill_ms, decode_ms;
    const char *stop_reason; /* "eos", "length", "context" or "callback" (static string) */
} sp_generate_stats;

/* Called with each generated token; return false to stop. */
typedef bool (*sp_token_fn)(void *ctx, int32_t token);

/* Appends the prompt to the session, then samples up to n_predict tokens. The
 * end-of-sequence token, when produced, is included (as transformers does) and ends
 * generation. out_tokens (optional) receives the generated ids: at most
 * min(n_predict, n_ctx - n_past - n_prompt + 1) of them, since generation stops when the
 * context is full (n_past counted before the call; the last token is not evaluated), so a
 * huge n_predict needs no huge buffer. */
SP_API sp_status sp_generate(sp_session *session, const int32_t *prompt, size_t n_prompt,
                      const sp_generate_params *params, sp_token_fn on_token, void *ctx,
                      int32_t *out_tokens, sp_generate_stats *stats, sp_error *err);

/* A sampler with its own random stream (xoshiro256** seeded from params.seed), drawing as
 * transformers' generate does: temperature, top-k, top-p, min-p, in that order;
 * temperature 0 is greedy (the first index among equal maxima). Its arithmetic (fixed sum
 * order, its own exp: docs/NUMERICS.md, "Sampling") is the one a GPU draws with, so a
 * token is the same wherever it was drawn. */
typedef struct sp_sampler sp_sampler;
SP_API sp_status sp_sampler_new(const sp_sampling_params *params, int64_t n_vocab, sp_sampler **out,
                         sp_error *err);
SP_API void sp_sampler_free(sp_sampler *sampler);
/* The next token drawn from logits[n_vocab]. */
SP_API int32_t sp_sampler_next(sp_sampler *sampler, const float *logits);
/* The next uniform of the sampler's stream, the one sp_sampler_next would draw with (at a
 * temperature): for a draw made in a pass instead (sp_batch_item.u,
 * sp_session_eval_sample), which then gives sp_sampler_next's token. */
SP_API double sp_sampler_uniform(sp_sampler *sampler);

/* Log-probabilities of raw logits (log_softmax in double, as OpenAI's logprobs report
 * them): *token_lp receives token's; top_ids/top_lps (may be NULL when n_top is 0)
 * receive the n_top most likely ids, most likely first, lower id first among ties. */
SP_API void sp_logprobs(const float *logits, int64_t n_vocab, int32_t token, float *token_lp,
                 int32_t n_top, int32_t *top_ids, float *top_lps);

/* Several sessions of one model evaluated together in one forward pass: each item appends
 * its tokens to its own session (its own KV cache and length), as sp_session_eval does.
 * A session's logits are bit-identical to evaluating it alone. logits: [n_tokens, n_vocab]
 * or NULL (then only the last row is kept: sp_session_last_logits). pick, when not NULL,
 * receives the last row's greedy pick (as sp_session_eval_greedy's); where the backend
 * picks on the device and every item of the pass has logits NULL and a pick, only the
 * picks are read back and the items' last logits are not kept. Sessions must be distinct
 * and belong to `model`. */
typedef struct sp_batch_verify sp_batch_verify;
typedef struct sp_batch_item {
    sp_session *session;
    const int32_t *tokens;
    size_t n_tokens;
    float *logits;
    int32_t *pick;
    const sp_sampling_params *sampling; /* with pick, or NULL: the pick is the draw of these */
    double u;                           /* parameters with this uniform (sp_session_eval_sample) */
    int32_t keep;            /* > 0: the last row's logits are also kept on the device, in the
                                session's kept row keep - 1 (sp_session_keep_rows): a draft's
                                row for its target's verification (sp_batch_verify) */
    sp_batch_verify *verify; /* or NULL: see sp_batch_verify */
    double *dist;            /* or NULL; with sampling: where the draw is made on the host (the
                                last logits came back: sp_session_last_logits non-NULL after
                                the pass), the row's distribution under sampling (n_vocab
                                values, sp_draft_sampler_next's q) from the same pass over it */
} sp_batch_item;
SP_API sp_status sp_batch_eval(sp_model *model, const sp_batch_item *items, size_t n_items,
                        sp_error *err);

/* Room for n kept rows of logits in the session's device memory (sp_batch_item.keep); a
 * larger n than before makes new room (rows kept before are lost). */
SP_API sp_status sp_session_keep_rows(sp_session *session, int32_t n, sp_error *err);
/* Whether target's passes verify drafts on the device (sp_batch_verify) with draft's kept
 * rows (draft NULL: deterministic drafts): the backend verifies there, and a draft session
 * is on the same kind of device, the same device, with the same vocabulary. */
SP_API bool sp_session_can_verify(const sp_session *target, const sp_session *draft);

typedef struct sp_tokenizer sp_tokenizer;

/* ---- speculative decoding ------------------------------------------------------------
 * Draft k tokens, verify them with one target pass over k + 1 positions, keep the longest
 * accepted prefix plus one target token, roll both KV caches back logically. Lossless:
 * greedy output equals sp_generate's token for token (a position's logits are identical
 * alone or in a verify batch); sampled output has exactly the target's distribution
 * (accept with min(1, p/q), resample from norm(max(0, p - q))). */

typedef enum sp_draft_kind {
    SP_DRAFT_MODEL = 1, /* a second model (its own session) */
    SP_DRAFT_NGRAM,     /* prompt lookup over the prompt and the generated text */
    SP_DRAFT_SELF,      /* the target drafts for itself (a second session of the same model):
                           every draft must be accepted, a check of KV and positions */
    SP_DRAFT_MTP,       /* the target's own multi-token prediction module (DeepSeek-V3): draft
                           is its MTP session (sp_session_new_mtp) */
} sp_draft_kind;

#define SP_SPEC_MAX_K 64

/* A session that drafts for `target` with its model's multi-token prediction module
 * (num_nextn_predict_layers; DeepSeek-V3's model.layers.{num_hidden_layers}.*, DeepSeek-V4's
 * mtp.0.*): draft token
 * 1 from the target's last hidden state and the pending token, each further one from the
 * module's own output (docs/DEEPSEEK_V4.md, "MTP drafting"). It has its own KV cache for the
 * module's block, rolled back with the target's. Create it before the target evaluates
 * anything: from then on the target records every position's last hidden state
 * (n_ctx x hidden floats). Free it before its target. SP_ERR_UNSUPPORTED when the model has
 * no MTP module (transformers drops these weights when it saves a checkpoint) or does not
 * run on the CPU backend. */
SP_API sp_status sp_session_new_mtp(sp_session *target, sp_session **out, sp_error *err);

typedef struct sp_spec_params {
    sp_draft_kind kind;
    sp_session *draft;     /* MODEL / SELF: the drafting session; its KV cache is its own;
                              MTP: the target's MTP session */
    int32_t k;             /* most tokens per draft, 1..SP_SPEC_MAX_K (0 = 4) */
    float p_min;           /* MODEL / SELF / MTP: end a draft when the draft's top probability
                              (softmax of its logits) falls below p_min; 0 = off */
    int32_t ngram_min, ngram_max; /* NGRAM: n-gram lengths tried, longest first (0 = 1..3) */
    bool adaptive;         /* acceptance gate: shorten k when drafts are rejected, pause
                              drafting while speculation does not pay */
    bool cost_gate;        /* with adaptive, greedy only (temperature 0): pause drafting also
                              while a speculative round yields fewer tokens a millisecond than
                              a plain step, measured as generation goes (the tokens are the same
                              either way; off by default: a benchmark of speculation wants its
                              rounds, a user wants the faster of the two) */
} sp_spec_params;

typedef struct sp_spec_stats {
    int64_t drafts;   /* verify rounds that had at least one draft token */
    int64_t drafted;  /* draft tokens proposed */
    int64_t accepted; /* draft tokens accepted */
    int64_t accepted_per_pos[SP_SPEC_MAX_K]; /* rounds whose draft position i was accepted */
    int64_t drafted_per_pos[SP_SPEC_MAX_K];  /* rounds that proposed position i */
    int32_t k_max;
    int64_t plain_steps; /* target steps without a draft (no proposal, or the gate paused) */
    double draft_ms, verify_ms;
} sp_spec_stats;

/* sp_generate with speculation. The sampling seed derives three separate streams:
 * drafting, acceptance and resampling. The prompt buffer is never written. */
SP_API sp_status sp_generate_spec(sp_session *target, const int32_t *prompt, size_t n_prompt,
                           const sp_generate_params *params, const sp_spec_params *spec,
                           sp_token_fn on_token, void *ctx, int32_t *out_tokens,
                           sp_generate_stats *stats, sp_spec_stats *spec_stats, sp_error *err);

/* Drafting and verification for callers that evaluate the draft model and the k + 1
 * verify positions themselves (e.g. many sequences' drafts in one sp_batch_eval of the
 * draft model, their verify rows in one sp_batch_eval of the target with other sequences).
 * The rules are sp_generate_spec's, and so are the random streams (drafting, acceptance,
 * resampling: each seeded from params.seed as sp_generate_spec seeds it).
 *
 * A draft sampler picks draft token i (0 <= i < k_max) of the current draft from the draft
 * model's logits (its n_vocab): greedy (temperature 0) the argmax, else a draw from params'
 * warpers applied to those logits; *q receives the distribution it was drawn from
 * (draft n_vocab entries, valid until token i of the next draft; NULL when greedy).
 * next() returns false when the draft ends before token i: the draft model's top
 * probability is under p_min, or the token is not in the target's vocabulary. *last is set
 * when the token ends the draft (an end-of-sequence id of the target, with stop_at_eos). */
typedef struct sp_draft_sampler sp_draft_sampler;
SP_API sp_status sp_draft_sampler_new(const sp_model *target, const sp_model *draft,
                                      const sp_sampling_params *params, int32_t k_max,
                                      float p_min, bool stop_at_eos, sp_draft_sampler **out,
                                      sp_error *err);
SP_API void sp_draft_sampler_free(sp_draft_sampler *sampler);
SP_API bool sp_draft_sampler_next(sp_draft_sampler *sampler, const float *draft_logits, int32_t i,
                                  int32_t *token, const double **q, bool *last);
/* Whether the sampler reads nothing of the draft logits but their argmax (greedy, p_min
 * 0): then the draft model may be evaluated for its greedy picks alone
 * (sp_session_eval_greedy, sp_batch_item.pick) and each pick handed to
 * sp_draft_sampler_take, with sp_draft_sampler_next's decisions. */
SP_API bool sp_draft_sampler_greedy(const sp_draft_sampler *sampler);
/* sp_draft_sampler_next for a greedy sampler given draft token i already picked (the draft
 * logits' argmax): false when the draft ends before it, *last, and *q = NULL. */
SP_API bool sp_draft_sampler_take(sp_draft_sampler *sampler, int32_t token, int32_t i,
                                  const double **q, bool *last);

/* A verifier checks one draft token against the target's logits at its position: it
 * returns `draft` when accepted (with probability min(1, p(draft) / q(draft)), p the
 * target's sampling distribution under params; greedy: when draft is the argmax), else a
 * replacement drawn from norm(max(0, p - q)). q: the draft's distribution (n_q entries,
 * from sp_draft_sampler_next), or NULL for deterministic drafts (n-grams, prompt lookup:
 * q one-hot at the draft). The emitted token has distribution p exactly. The token after
 * the last accepted draft is drawn as usual (sp_sampler_next). */
typedef struct sp_draft_verifier sp_draft_verifier;
SP_API sp_status sp_draft_verifier_new(const sp_sampling_params *params, int64_t n_vocab,
                                       sp_draft_verifier **out, sp_error *err);
SP_API void sp_draft_verifier_free(sp_draft_verifier *v);
SP_API int32_t sp_draft_verifier_check(sp_draft_verifier *v, const float *logits, int32_t draft,
                                       const double *q, int64_t n_q);

/* A sampled verification inside a batch (sp_batch_item.verify): the item's tokens are the
 * pending token and its drafts, drawn by a draft sampler in the draft model's passes with
 * their rows kept (sp_draft_sampler_uniform, sp_batch_item.keep: draft i in kept row i of
 * `draft`), or deterministic drafts (draft NULL); its logits buffer holds n_tokens rows
 * (and it has no pick).
 * Where the target's backend verifies (sp_session_can_verify, at most 15 drafts, a sampled
 * verifier) *only* `accepted` and `next` come back: the drafts sp_draft_verifier_check
 * would accept in order, and the token after them (its replacement, or the bonus token
 * sp_sampler_next would draw from the last row), the same tokens from the same streams
 * (the verifier's and sampler's). Elsewhere accepted is -1 and the logits hold every row:
 * check them with sp_draft_verifier_check (the drafts' distributions from
 * sp_draft_sampler_kept_q) and draw the bonus with sp_sampler_next. */
struct sp_batch_verify {
    sp_draft_verifier *verifier;
    sp_sampler *sampler; /* the bonus token's stream */
    sp_session *draft;   /* whose kept rows hold the drafts' logits, or NULL */
    int32_t accepted, next; /* out */
};
/* The uniform of the sampler's next draft draw, for a draw made in the draft's pass
 * (sp_batch_item.sampling with the sampler's params, .u, .pick; .keep = i + 1 for draft i);
 * sp_draft_sampler_drawn then takes the pass's token. */
SP_API double sp_draft_sampler_uniform(sp_draft_sampler *sampler);
/* Where draft i's distribution goes when its draw is made on the host (the pass item's
 * dist): n_vocab values of the sampler's; NULL for a greedy sampler or i out of range. */
SP_API double *sp_draft_sampler_dist(sp_draft_sampler *sampler, int32_t i);
/* sp_draft_sampler_next for draft token i drawn in the pass (its row kept on the device):
 * false when the draft ends before it, *last. on_host: the draw was made on the host (the
 * pass's logits came back, sp_session_last_logits non-NULL) with the item's dist
 * sp_draft_sampler_dist(i): *q is that distribution (valid as sp_draft_sampler_next's; a
 * verification with it is the host's, as the device would leave it to the host too), else
 * NULL. */
SP_API bool sp_draft_sampler_drawn(sp_draft_sampler *sampler, int32_t token, int32_t i,
                                   bool on_host, const double **q, bool *last);
/* The distribution of draft i from its row kept in `draft` (kept row i), for a
 * verification on the host: valid as sp_draft_sampler_next's. */
SP_API sp_status sp_draft_sampler_kept_q(sp_draft_sampler *sampler, sp_session *draft, int32_t i,
                                         const double **q, sp_error *err);

/* Whether `draft` can draft for `target`: same vocabulary up to padding (sizes within
 * 128), same BOS/EOS ids, and, when both tokenizers are given, the same tokenizer type
 * and the same token string for every id >= 5 present in both. */
SP_API sp_status sp_spec_check_compat(const sp_model *target, const sp_model *draft,
                               const sp_tokenizer *target_tok, const sp_tokenizer *draft_tok,
                               sp_error *err);

/* ---- tokenizers ------------------------------------------------------------------- */


/* path: a model directory, a tokenizer.json, or a directory holding tokenizer.json and
 * tokenizer_config.json. */
SP_API sp_status sp_tokenizer_open(const char *path, sp_tokenizer **out, sp_error *err);
SP_API void sp_tokenizer_close(sp_tokenizer *t);

/* Encodes UTF-8 text as tokenizers' Tokenizer.encode(text, add_special_tokens) does.
 * *ids is malloc'd (free() it). Invalid UTF-8 is an error. */
SP_API sp_status sp_tokenizer_encode(sp_tokenizer *t, const char *text, size_t len, bool add_special,
                              int32_t **ids, size_t *n_ids, sp_error *err);
/* Decodes as tokenizers' decode(ids, skip_special_tokens). *text is malloc'd and
 * NUL-terminated. Ids outside the vocabulary are an error. */
SP_API sp_status sp_tokenizer_decode(sp_tokenizer *t, const int32_t *ids, size_t n_ids,
                              bool skip_special, char **text, size_t *len, sp_error *err);
SP_API int64_t sp_tokenizer_n_vocab(const sp_tokenizer *t);
/* Id of a token string (model vocabulary or added token), or -1. */
SP_API int32_t sp_tokenizer_token_id(const sp_tokenizer *t, const char *token);
/* The token string of an id (an added token's content, else the model vocabulary's
 * entry), or NULL for an id with no token; *len gets its byte length. */
SP_API const char *sp_tokenizer_id_to_token(const sp_tokenizer *t, int32_t id, size_t *len);
/* "BPE", "WordPiece" or "WordLevel". */
SP_API const char *sp_tokenizer_model_type(const sp_tokenizer *t);
/* BOS / EOS ids from tokenizer_config.json, or -1. */
SP_API int32_t sp_tokenizer_bos_id(const sp_tokenizer *t);
SP_API int32_t sp_tokenizer_eos_id(const sp_tokenizer *t);
/* Encodes a prompt as transformers' tokenizer(text) does by default: the tokenizer's
 * post-processor, plus the BOS that tokenizer_config.json's add_bos_token asks for when
 * the post-processor does not add it. */
SP_API sp_status sp_tokenizer_encode_prompt(sp_tokenizer *t, const char *text, size_t len,
                                     int32_t **ids, size_t *n_ids, sp_error *err);

/* Streaming detokenizer: turns tokens into text as they are generated, emitting only
 * complete UTF-8 (a character split across byte-fallback tokens waits for its end). A push
 * decodes a window of at most about 20 recent tokens: after 16 tokens that complete
 * nothing, the bytes held back come out as U+FFFD, as a full decode renders bytes that
 * never form a character. */
typedef struct sp_detokenizer sp_detokenizer;
SP_API sp_status sp_detokenizer_new(sp_tokenizer *t, bool skip_special, sp_detokenizer **out,
                             sp_error *err);
/* Adds one token; text and len receive the newly completed text (borrowed until the next
 * call; may be empty). */
SP_API sp_status sp_detokenizer_push(sp_detokenizer *d, int32_t id, const char **text, size_t *len,
                              sp_error *err);
/* Text still held back at the end (an incomplete character), decoded lossily. */
SP_API sp_status sp_detokenizer_flush(sp_detokenizer *d, const char **text, size_t *len,
                               sp_error *err);
SP_API void sp_detokenizer_free(sp_detokenizer *d);

/* ---- chat templates ------------------------------------------------------------------
 * apply_chat_template as transformers does it. A template set comes from a model directory
 * (chat_template.jinja, else tokenizer_config.json's chat_template: a string, or named
 * templates where "tool_use" is chosen when the context has tools, else "default"), a
 * tokenizer_config.json, or a .jinja file. Rendering passes tokenizer_config.json's special
 * tokens, tools=None, documents=None, add_generation_prompt=False, then the context's own
 * keys on top. Hostile templates are stopped by step, recursion, memory, output and time
 * budgets (SP_ERR_LIMIT); a template that raises is SP_ERR_TEMPLATE. */
typedef struct sp_chat sp_chat;

typedef struct sp_render_options {
    const char *now;      /* ISO 8601 time for strftime_now ("2025-07-10T12:00:00"), NULL = now */
    double time_limit_ms; /* 0 = 10 s */
} sp_render_options;

SP_API sp_status sp_chat_open(const char *path, sp_chat **out, sp_error *err);
SP_API void sp_chat_close(sp_chat *chat);
/* For testing the engine against plain Jinja2: plain_syntax compiles without
 * trim_blocks/lstrip_blocks; no_defaults renders with the context's variables only (no
 * special tokens, tools, documents or add_generation_prompt). Call before rendering. */
SP_API void sp_chat_set_plain(sp_chat *chat, bool plain_syntax, bool no_defaults);
/* ctx_json: a JSON object (messages, tools, add_generation_prompt, enable_thinking, ...).
 * *out is malloc'd and NUL-terminated. opt may be NULL. */
SP_API sp_status sp_chat_render(sp_chat *chat, const char *ctx_json, size_t ctx_len,
                         const sp_render_options *opt, char **out, size_t *out_len,
                         sp_error *err);

/* ---- diagnostics ----------------------------------------------------------------------
 * Traces: every op output of every forward pass of a session as JSON lines, one line per
 * (pass, layer, op, position) with statistics of the row and a hash of its exact float bits
 * (specula trace); reading two traces back and finding where they part ways (specula diff);
 * self-tests of a checkpoint (specula check). */

typedef struct sp_trace_writer sp_trace_writer;

/* A writer of lines labelled model_label ("target", "draft") to f, which stays the caller's
 * (several writers may share one FILE: lines appear in execution order). */
SP_API sp_status sp_trace_writer_new(FILE *f, const char *model_label, sp_trace_writer **out,
                              sp_error *err);
SP_API void sp_trace_writer_free(sp_trace_writer *w);
/* Observes every forward pass of session from now on; the writer must outlive the passes. */
SP_API void sp_trace_writer_attach(sp_trace_writer *w, sp_session *session);
/* Whether `op` names a traced op ("attn_q", "mlp_out", "logits", ...). */
SP_API bool sp_trace_op_valid(const char *op);
/* Plants a divergence, for demonstrations and tests: the output of `op` at `layer` (every
 * position) is multiplied by factor before later ops read it, in the sessions this writer
 * observes. An unknown op is SP_ERR_INVALID_ARG. */
SP_API sp_status sp_trace_writer_set_perturb(sp_trace_writer *w, int layer, const char *op,
                                      float factor, sp_error *err);
/* The residual stream's magnitude (the seed-004 |X|): for each layer, the root mean square
 * of its output (mlp_residual; DeepSeek-V4: over all hyper-connection streams) at the
 * latest position traced, into rms[0 .. min(n, cap)); *final_norm_rms (may be NULL): the
 * final norm's output there, which a healthy norm brings back near the norm weights' scale
 * however large the residual grew. Returns n, the layers seen. */
SP_API size_t sp_trace_writer_residuals(const sp_trace_writer *w, double *rms, size_t cap,
                                        double *final_norm_rms);
/* The experts the latest traced pass routed this session's positions to (a verify batch's,
 * say): for each layer, the number of distinct expert ids its positions chose, into
 * distinct[0 .. min(n, cap)) (0 for a layer without experts). Returns n, the layers seen
 * (up to the last MoE layer). */
SP_API size_t sp_trace_writer_experts(const sp_trace_writer *w, int32_t *distinct, size_t cap);
/* Lines written so far; whether a write failed. */
SP_API int64_t sp_trace_writer_lines(const sp_trace_writer *w);
SP_API bool sp_trace_writer_failed(const sp_trace_writer *w);

/* A trace file read into memory. */
typedef struct sp_trace sp_trace;
SP_API sp_status sp_trace_open(const char *path, sp_trace **out, sp_error *err);
SP_API void sp_trace_close(sp_trace *t);
SP_API size_t sp_trace_n_records(const sp_trace *t);

/* One line of a trace. Strings are borrowed until sp_trace_close. */
typedef struct sp_trace_record {
    const char *model, *op;
    int64_t pass, position;
    int layer;                /* -1 for model-level ops (embed, final_norm, logits) */
    int32_t token;
    double mean, std, min, max, amax, l2; /* over the finite values */
    int64_t n_nan, n_inf;
    uint64_t hash;            /* FNV-1a of the exact float bits */
} sp_trace_record;
/* Record i < sp_trace_n_records(t); false when out of range. */
SP_API bool sp_trace_get(const sp_trace *t, size_t i, sp_trace_record *out);

/* Where two traces differ. Traces of the same computation are walked by index; others (a
 * prefill against token-by-token decoding, a speculative run against a plain one) are
 * matched by (model, layer, op, position, context). A record differs when its hash differs
 * (tol = 0) or when its relative difference exceeds tol. After the first divergence the
 * growth steps follow the same model and position through the later layers. */
typedef struct sp_trace_report sp_trace_report;
typedef struct sp_trace_match {
    size_t a, b;     /* record indices in A and B */
    double rel_diff;
} sp_trace_match;
typedef struct sp_trace_summary {
    bool by_index;       /* aligned by index (else by key) */
    size_t n_compared;   /* records compared */
    bool diverged;
    sp_trace_match first; /* the first divergence, when diverged */
    size_t n_growth;
} sp_trace_summary;
SP_API sp_status sp_trace_compare(const sp_trace *a, const sp_trace *b, double tol,
                           sp_trace_report **out, sp_error *err);
SP_API void sp_trace_report_free(sp_trace_report *r);
SP_API void sp_trace_report_summary(const sp_trace_report *r, sp_trace_summary *out);
/* Growth step i < summary.n_growth. */
SP_API sp_trace_match sp_trace_report_growth(const sp_trace_report *r, size_t i);

/* Self-tests of a checkpoint, each a pass / warn / fail with its reason: finite weights,
 * FP4 scales, the final norm, the chat template, speculative decoding against plain
 * decoding (self and a given draft), draft isolation, degenerate loops. */
typedef enum sp_check_status { SP_CHECK_PASS, SP_CHECK_WARN, SP_CHECK_FAIL } sp_check_status;
/* "pass", "warn" or "FAIL". */
SP_API const char *sp_check_status_name(sp_check_status s);

typedef struct sp_check_inputs {
    sp_model *model;
    const char *dir;          /* model directory (chat template) */
    sp_tokenizer *tok;        /* or NULL */
    sp_model *draft;          /* or NULL */
    const int32_t *prompt;    /* token ids for the generation checks */
    size_t n_prompt;
    bool mtp;                 /* check MTP drafting even when the model has no MTP module (it
                                 is checked whenever the model has one) */
} sp_check_inputs;

typedef struct sp_check_results sp_check_results;
/* Runs every check. An error status only for failures to run (out of memory). */
SP_API sp_status sp_check_model(const sp_check_inputs *in, sp_check_results **out, sp_error *err);
SP_API void sp_check_results_free(sp_check_results *r);
SP_API size_t sp_check_results_count(const sp_check_results *r);
/* Check i < count: its status, name and detail (borrowed until free). */
SP_API sp_check_status sp_check_results_get(const sp_check_results *r, size_t i, const char **name,
                                     const char **detail);

#ifdef __cplusplus
}
#endif
#endif /* SPECULA_H */
