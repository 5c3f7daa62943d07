/* make_random_model.c: writes random checkpoints (config.json + model.safetensors) of
 * realistic shapes for benchmarks: BF16 weights ~ N(0, 0.02), unit-ish norms.
 *
 * usage: make_random_model OUT_DIR [--preset llama-100m|llama-1b|llama-tiny|gptoss-mxfp4|gptoss-20b|gptoss-120b]
 *                         [--gguf FILE]
 * llama-100m: vocab 32000, hidden 768, 12 layers, 12 heads / 4 KV heads, MLP 2048,
 *   tied embeddings: 100M parameters, 200 MB.
 * llama-1b: the issue-11 reference shape: vocab 32000, hidden 2048, 16 layers, 32 heads /
 *   8 KV heads, MLP 8192, untied LM head: 1.1B parameters, 2.06 GiB.
 * --gguf FILE also writes the GGUF twin (same shapes, types and values) for llama.cpp
 *   (bench/gguf_twin.c). Its Q/K rows are not permuted as convert_hf_to_gguf does, so
 *   llama.cpp computes another function of them: the twin is for timing only.
 * gptoss-mxfp4: GptOssForCausalLM as the hub ships it (MXFP4 expert blocks + UE8M0
 *   scales, BF16 elsewhere): vocab 32000, hidden 1024, 8 layers, 16 heads / 4 KV heads of
 *   64, 32 experts of width 1024, top-4, sliding window 128 on even layers: 0.85B
 *   parameters, 0.6 GB.
 * gptoss-20b, gptoss-120b: the exact dimensions of openai/gpt-oss-20b and -120b (vocab
 *   201088, hidden 2880, expert width 2880, 64 heads / 8 KV heads of 64, top-4, window
 *   128; 24 layers x 32 experts: 13 GB, 36 layers x 128 experts: 61 GiB), same layout.
 *   They share the vocabulary, so one can draft for the other. */
#include "format/safetensors_write.h"
#include "gguf_twin.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct shape {
    int64_t vocab, hidden, inter, layers, heads, kv_heads;
    int untied; /* a separate lm_head.weight */
} shape;

typedef struct fill_ctx {
    uint64_t seed;
    float mean, std;
} fill_ctx;

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* llama-1b: one hash per value and the Irwin-Hall sum of its four 16-bit parts
 * (approximately normal, same mean and std) instead of Box-Muller: ~10x faster, so the
 * 2 GiB checkpoint is written in seconds on a benchmark machine. */
static int g_fast_fill;

/* Deterministic per byte offset, so chunked generation gives the same file. */
static void fill_bf16(void *vctx, unsigned char *buf, size_t offset, size_t n)
{
    fill_ctx *c = vctx;
    if (g_fast_fill) {
        for (size_t i = 0; i + 1 < n; i += 2) {
            uint64_t r = mix(c->seed ^ (offset + i) * 0x9e3779b97f4a7c15ull);
            /* sum of 4 uniforms on [0, 1): mean 2, variance 4/12 */
            float z = (float)((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48)) *
                          (1.0f / 65536.0f) - 2.0f;
            float v = c->mean + c->std * z * 1.7320508f;
            uint32_t u;
            memcpy(&u, &v, 4);
            u += 0x7fffu + ((u >> 16) & 1u);
            buf[i] = (unsigned char)(u >> 16);
            buf[i + 1] = (unsigned char)(u >> 24);
        }
        return;
    }
    for (size_t i = 0; i + 1 < n; i += 2) {
        uint64_t r = mix(c->seed ^ (offset + i) * 0x9e3779b97f4a7c15ull);
        double u1 = ((r >> 11) + 1) * (1.0 / 9007199254740993.0);
        double u2 = (double)(mix(r) >> 11) * (1.0 / 9007199254740992.0);
        float v = c->mean + c->std * (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
        uint32_t u;
        memcpy(&u, &v, 4);
        u += 0x7fffu + ((u >> 16) & 1u);
        buf[i] = (unsigned char)(u >> 16);
        buf[i + 1] = (unsigned char)(u >> 24);
    }
}

static const char *gguf_path; /* --gguf FILE */

/* Writes dir/model.safetensors (and the GGUF twin when asked) and frees the tensor
 * tables; returns the exit code. */
static int write_tensors(const char *dir, sp_st_out *t, size_t k, fill_ctx *ctx, char (*names)[128],
                         const gguf_hparams *hp)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    sp_error err = {0};
    int rc = 0;
    if (sp_safetensors_write(path, t, k, &err) != SP_OK) {
        fprintf(stderr, "%s\n", err.msg);
        rc = 1;
    }
    if (!rc && gguf_path)
        rc = gguf_twin_write(gguf_path, hp, t, k);
    free(t);
    free(ctx);
    free(names);
    return rc;
}

/* Random bytes (MXFP4 codes: every code equally likely). */
static void fill_u8(void *vctx, unsigned char *buf, size_t offset, size_t n)
{
    fill_ctx *c = vctx;
    size_t i = 0;
    if (g_fast_fill) /* the big presets: eight bytes per hash */
        for (; i < n && (offset + i) % 8; i++)
            buf[i] = (unsigned char)(mix(c->seed ^ (offset + i)) >> 24);
    if (g_fast_fill)
        for (; i + 8 <= n; i += 8) {
            uint64_t r = mix(c->seed ^ (offset + i) * 0x9e3779b97f4a7c15ull);
            memcpy(buf + i, &r, 8);
        }
    for (; i < n; i++)
        buf[i] = (unsigned char)(mix(c->seed ^ (offset + i) * 0x9e3779b97f4a7c15ull) >> 24);
}

/* UE8M0 scales 2^-7 or 2^-6: code magnitudes average ~2.2, so weights are ~N(0, 0.02)-ish. */
static void fill_e8m0(void *vctx, unsigned char *buf, size_t offset, size_t n)
{
    fill_ctx *c = vctx;
    for (size_t i = 0; i < n; i++)
        buf[i] = (unsigned char)(120 + (mix(c->seed ^ (offset + i)) & 1));
}

typedef struct gptoss_shape {
    int64_t V, H, I, NL, NH, KV, HD, E;
} gptoss_shape;

static int write_gptoss(const char *dir, gptoss_shape g)
{
    const int64_t V = g.V, H = g.H, I = g.I, NL = g.NL, NH = g.NH, KV = g.KV, HD = g.HD, E = g.E;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 1;
    }
    fprintf(f, "{\"architectures\": [\"GptOssForCausalLM\"], \"model_type\": \"gpt_oss\", "
               "\"vocab_size\": %lld, \"hidden_size\": %lld, \"intermediate_size\": %lld, "
               "\"num_hidden_layers\": %lld, \"num_attention_heads\": %lld, \"num_key_value_heads\": %lld, "
               "\"head_dim\": %lld, \"num_local_experts\": %lld, \"num_experts_per_tok\": 4, "
               "\"sliding_window\": 128, \"max_position_embeddings\": 131072, \"rms_norm_eps\": 1e-05, "
               "\"attention_bias\": true, \"swiglu_limit\": 7.0, \"tie_word_embeddings\": false, "
               "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 32.0, \"beta_fast\": 32.0, "
               "\"beta_slow\": 1.0, \"truncate\": false, \"original_max_position_embeddings\": 4096}, "
               "\"rope_theta\": 150000, \"eos_token_id\": 2, \"layer_types\": [",
            (long long)V, (long long)H, (long long)I, (long long)NL, (long long)NH, (long long)KV,
            (long long)HD, (long long)E);
    for (int64_t l = 0; l < NL; l++)
        fprintf(f, "%s\"%s\"", l ? ", " : "", l % 2 ? "full_attention" : "sliding_attention");
    fprintf(f, "], \"quantization_config\": {\"quant_method\": \"mxfp4\", \"modules_to_not_convert\": "
               "[\"model.layers.*.self_attn\", \"model.layers.*.mlp.router\", \"model.embed_tokens\", "
               "\"lm_head\"]}}\n");
    fclose(f);
    size_t cap = 4 + (size_t)NL * 20, k = 0;
    sp_st_out *t = calloc(cap, sizeof *t);
    fill_ctx *ctx = calloc(cap, sizeof *ctx);
    char (*names)[128] = calloc(cap, 128);
    if (!t || !ctx || !names)
        return 1;
#define ADDT(nm, dt, fn, nd, d0, d1, d2, d3, bytes, mean_, std_)                                  \
    do {                                                                                          \
        snprintf(names[k], 128, "%s", nm);                                                        \
        ctx[k] = (fill_ctx){0x5678 + k, mean_, std_};                                             \
        t[k] = (sp_st_out){names[k], dt, nd, {d0, d1, d2, d3}, NULL, (size_t)(bytes), fn, &ctx[k]}; \
        k++;                                                                                      \
    } while (0)
#define BF(nm, d0, d1, mean_, std_) \
    ADDT(nm, "BF16", fill_bf16, ((d1) != 0) + 1, d0, d1, 0, 0, (d0) * ((d1) != 0 ? (d1) : 1) * 2, mean_, std_)
    char nm[128];
    BF("model.embed_tokens.weight", V, H, 0.0f, 0.02f);
    BF("lm_head.weight", V, H, 0.0f, 0.02f);
    BF("model.norm.weight", H, 0, 1.0f, 0.05f);
    for (int64_t l = 0; l < NL; l++) {
#define L(suffix) (snprintf(nm, sizeof nm, "model.layers.%lld.%s", (long long)l, suffix), nm)
        BF(L("input_layernorm.weight"), H, 0, 1.0f, 0.05f);
        BF(L("post_attention_layernorm.weight"), H, 0, 1.0f, 0.05f);
        BF(L("self_attn.q_proj.weight"), NH * HD, H, 0.0f, 0.02f);
        BF(L("self_attn.q_proj.bias"), NH * HD, 0, 0.0f, 0.02f);
        BF(L("self_attn.k_proj.weight"), KV * HD, H, 0.0f, 0.02f);
        BF(L("self_attn.k_proj.bias"), KV * HD, 0, 0.0f, 0.02f);
        BF(L("self_attn.v_proj.weight"), KV * HD, H, 0.0f, 0.02f);
        BF(L("self_attn.v_proj.bias"), KV * HD, 0, 0.0f, 0.02f);
        BF(L("self_attn.o_proj.weight"), H, NH * HD, 0.0f, 0.02f);
        BF(L("self_attn.o_proj.bias"), H, 0, 0.0f, 0.02f);
        BF(L("self_attn.sinks"), NH, 0, 0.0f, 0.5f);
        BF(L("mlp.router.weight"), E, H, 0.0f, 0.05f);
        BF(L("mlp.router.bias"), E, 0, 0.0f, 0.1f);
        ADDT(L("mlp.experts.gate_up_proj_blocks"), "U8", fill_u8, 4, E, 2 * I, H / 32, 16,
             E * 2 * I * H / 2, 0.0f, 0.0f);
        ADDT(L("mlp.experts.gate_up_proj_scales"), "U8", fill_e8m0, 3, E, 2 * I, H / 32, 0,
             E * 2 * I * H / 32, 0.0f, 0.0f);
        BF(L("mlp.experts.gate_up_proj_bias"), E, 2 * I, 0.0f, 0.02f);
        ADDT(L("mlp.experts.down_proj_blocks"), "U8", fill_u8, 4, E, H, I / 32, 16, E * H * I / 2,
             0.0f, 0.0f);
        ADDT(L("mlp.experts.down_proj_scales"), "U8", fill_e8m0, 3, E, H, I / 32, 0, E * H * I / 32,
             0.0f, 0.0f);
        BF(L("mlp.experts.down_proj_bias"), E, H, 0.0f, 0.02f);
#undef L
    }
    gguf_hparams hp = {"gpt-oss", 4096, (uint32_t)H, (uint32_t)I, (uint32_t)NL, (uint32_t)NH, (uint32_t)KV,
                       (uint32_t)V, (uint32_t)HD, (uint32_t)E, 4, 128, 150000.0f, 1e-5f};
    return write_tensors(dir, t, k, ctx, names, &hp);
}

int main(int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-' || argc % 2) { /* OUT_DIR first, then option pairs */
        fprintf(stderr, "usage: %s OUT_DIR [--preset llama-100m|llama-1b|llama-tiny|gptoss-mxfp4|gptoss-20b|gptoss-120b] [--gguf FILE]\n",
                argv[0]);
        return argc >= 2 && !strcmp(argv[1], "--help") ? 0 : 2;
    }
    const char *dir = argv[1], *preset = "llama-100m";
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--preset"))
            preset = argv[i + 1];
        else if (!strcmp(argv[i], "--gguf"))
            gguf_path = argv[i + 1];
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    shape s = {32000, 768, 2048, 12, 12, 4, 0};
    if (!strcmp(preset, "llama-tiny"))
        s = (shape){512, 128, 256, 2, 4, 2, 0};
    else if (!strcmp(preset, "llama-1b"))
        s = (shape){32000, 2048, 8192, 16, 32, 8, 1}, g_fast_fill = 1;
    else if (strcmp(preset, "llama-100m") && strncmp(preset, "gptoss-", 7)) {
        fprintf(stderr, "unknown preset %s\n", preset);
        return 2;
    }
    mkdir(dir, 0755);
    if (!strcmp(preset, "gptoss-mxfp4"))
        return write_gptoss(dir, (gptoss_shape){32000, 1024, 1024, 8, 16, 4, 64, 32});
    g_fast_fill = !strncmp(preset, "gptoss-", 7);
    if (!strcmp(preset, "gptoss-20b"))
        return write_gptoss(dir, (gptoss_shape){201088, 2880, 2880, 24, 64, 8, 64, 32});
    if (!strcmp(preset, "gptoss-120b"))
        return write_gptoss(dir, (gptoss_shape){201088, 2880, 2880, 36, 64, 8, 64, 128});
    if (strncmp(preset, "llama-", 6)) {
        fprintf(stderr, "unknown preset %s\n", preset);
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 1;
    }
    fprintf(f,
            "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
            "\"vocab_size\": %lld, \"hidden_size\": %lld, \"intermediate_size\": %lld, "
            "\"num_hidden_layers\": %lld, \"num_attention_heads\": %lld, "
            "\"num_key_value_heads\": %lld, \"max_position_embeddings\": 4096, "
            "\"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0, \"tie_word_embeddings\": %s, "
            "\"bos_token_id\": 1, \"eos_token_id\": 2, \"torch_dtype\": \"bfloat16\"}\n",
            (long long)s.vocab, (long long)s.hidden, (long long)s.inter, (long long)s.layers,
            (long long)s.heads, (long long)s.kv_heads, s.untied ? "false" : "true");
    fclose(f);
    int64_t hd = s.hidden / s.heads, qd = s.heads * hd, kd = s.kv_heads * hd;
    size_t n_t = 3 + (size_t)s.layers * 9, k = 0;
    sp_st_out *t = calloc(n_t, sizeof *t);
    fill_ctx *ctx = calloc(n_t, sizeof *ctx);
    char (*names)[128] = calloc(n_t, 128);
    if (!t || !ctx || !names)
        return 1;
#define ADD(nm, d0, d1, mean_, std_)                                                        \
    do {                                                                                    \
        snprintf(names[k], 128, "%s", nm);                                                  \
        ctx[k] = (fill_ctx){0x1234 + k, mean_, std_};                                       \
        t[k] = (sp_st_out){names[k], "BF16", (d1) ? 2 : 1, {d0, d1}, NULL,                  \
                           (size_t)(d0) * (size_t)((d1) ? (d1) : 1) * 2, fill_bf16, &ctx[k]}; \
        k++;                                                                                \
    } while (0)
    char nm[128];
    ADD("model.embed_tokens.weight", s.vocab, s.hidden, 0.0f, 0.02f);
    ADD("model.norm.weight", s.hidden, 0, 1.0f, 0.05f);
    if (s.untied)
        ADD("lm_head.weight", s.vocab, s.hidden, 0.0f, 0.02f);
    for (int64_t l = 0; l < s.layers; l++) {
#define L(suffix) (snprintf(nm, sizeof nm, "model.layers.%lld.%s", (long long)l, suffix), nm)
        ADD(L("input_layernorm.weight"), s.hidden, 0, 1.0f, 0.05f);
        ADD(L("post_attention_layernorm.weight"), s.hidden, 0, 1.0f, 0.05f);
        ADD(L("self_attn.q_proj.weight"), qd, s.hidden, 0.0f, 0.02f);
        ADD(L("self_attn.k_proj.weight"), kd, s.hidden, 0.0f, 0.02f);
        ADD(L("self_attn.v_proj.weight"), kd, s.hidden, 0.0f, 0.02f);
        ADD(L("self_attn.o_proj.weight"), s.hidden, qd, 0.0f, 0.02f);
        ADD(L("mlp.gate_proj.weight"), s.inter, s.hidden, 0.0f, 0.02f);
        ADD(L("mlp.up_proj.weight"), s.inter, s.hidden, 0.0f, 0.02f);
        ADD(L("mlp.down_proj.weight"), s.hidden, s.inter, 0.0f, 0.02f);
#undef L
    }
    gguf_hparams hp = {"llama", 4096, (uint32_t)s.hidden, (uint32_t)s.inter, (uint32_t)s.layers,
                       (uint32_t)s.heads, (uint32_t)s.kv_heads, (uint32_t)s.vocab,
                       (uint32_t)(s.hidden / s.heads), 0, 0, 0, 500000.0f, 1e-5f};
    return write_tensors(dir, t, k, ctx, names, &hp);
}
