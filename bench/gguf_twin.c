/* gguf_twin.c: see gguf_twin.h.
 *
 * GGUF v3 layout (little endian):
 *   "GGUF" u32 version=3, u64 n_tensors, u64 n_kv
 *   n_kv x (string key, u32 type, value)          string = u64 length + bytes
 *   n_tensors x (string name, u32 n_dims, u64 ne[n_dims] (innermost first), u32 ggml type,
 *                u64 offset from the data section, a multiple of 32)
 *   zero padding to 32, then the tensor data.
 * Names (llama.cpp's llama-arch.cpp): token_embd, output_norm, output, blk.N.attn_norm,
 * attn_q/k/v/output, ffn_norm, ffn_gate/up/down; gpt-oss adds post_attention_norm,
 * attn_sinks, ffn_gate_inp (router), ffn_{gate,up,down}_exps (+ .bias). 1-D tensors are
 * stored F32 (as convert_hf_to_gguf does).
 * MXFP4 (ggml type 39): blocks of 32 values as 17 bytes, the E8M0 scale byte then 16
 * bytes whose byte j holds value j (low nibble) and value j + 16 (high nibble); HF's
 * gpt-oss blocks hold values 2j and 2j + 1 in byte j. gpt-oss's fused gate_up rows
 * interleave gate (even) and up (odd), split here into ffn_gate_exps / ffn_up_exps. */
#include "gguf_twin.h"

#include <stdbool.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GT_U32 = 4, GT_F32 = 6, GT_STRING = 8 };
enum { GG_F32 = 0, GG_BF16 = 30, GG_MXFP4 = 39 };

typedef struct out_tensor {
    char name[96];
    int n_dims;
    uint64_t ne[4];
    uint32_t type;
    uint64_t bytes, offset;
    /* how to produce the bytes */
    int kind; /* 0 copy, 1 bf16 -> f32, 2 mxfp4 experts, 3 bf16 rows of parity p */
    const sp_st_out *src, *src_scales;
    int parity; /* kinds 2, 3 on fused gate_up: 0 gate (even rows), 1 up (odd), -1 all */
} out_tensor;

static void w_u32(FILE *f, uint32_t v) { fwrite(&v, 4, 1, f); }
static void w_u64(FILE *f, uint64_t v) { fwrite(&v, 8, 1, f); }
static void w_str(FILE *f, const char *s)
{
    w_u64(f, strlen(s));
    fwrite(s, 1, strlen(s), f);
}
static void kv_u32(FILE *f, const char *arch, const char *key, uint32_t v)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    w_str(f, k);
    w_u32(f, GT_U32);
    w_u32(f, v);
}
static void kv_f32(FILE *f, const char *arch, const char *key, float v)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    w_str(f, k);
    w_u32(f, GT_F32);
    fwrite(&v, 4, 1, f);
}
static void kv_str(FILE *f, const char *key, const char *v)
{
    w_str(f, key);
    w_u32(f, GT_STRING);
    w_str(f, v);
}

static unsigned char *materialize(const sp_st_out *s)
{
    unsigned char *b = malloc(s->n_bytes);
    if (!b)
        return NULL;
    if (s->data)
        memcpy(b, s->data, s->n_bytes);
    else
        s->fill(s->fill_ctx, b, 0, s->n_bytes);
    return b;
}

/* Maps an HF name to the GGUF name (NULL = handled elsewhere / skipped). */
static const char *map_name(const char *hf, char *out, size_t cap, int *layer)
{
    static const struct { const char *hf, *gg; } m[] = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"post_attention_layernorm.weight", NULL},
        {"self_attn.q_proj.weight", "attn_q.weight"},   {"self_attn.q_proj.bias", "attn_q.bias"},
        {"self_attn.k_proj.weight", "attn_k.weight"},   {"self_attn.k_proj.bias", "attn_k.bias"},
        {"self_attn.v_proj.weight", "attn_v.weight"},   {"self_attn.v_proj.bias", "attn_v.bias"},
        {"self_attn.o_proj.weight", "attn_output.weight"}, {"self_attn.o_proj.bias", "attn_output.bias"},
        {"self_attn.sinks", "attn_sinks.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"}, {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"},
        {"mlp.router.weight", "ffn_gate_inp.weight"}, {"mlp.router.bias", "ffn_gate_inp.bias"},
    };
    *layer = -1;
    if (!strcmp(hf, "model.embed_tokens.weight"))
        return snprintf(out, cap, "token_embd.weight"), out;
    if (!strcmp(hf, "model.norm.weight"))
        return snprintf(out, cap, "output_norm.weight"), out;
    if (!strcmp(hf, "lm_head.weight"))
        return snprintf(out, cap, "output.weight"), out;
    int l, used = 0;
    if (sscanf(hf, "model.layers.%d.%n", &l, &used) != 1 || !used)
        return NULL;
    *layer = l;
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        if (!strcmp(hf + used, m[i].hf)) {
            if (!m[i].gg)
                return NULL;
            snprintf(out, cap, "blk.%d.%s", l, m[i].gg);
            return out;
        }
    return NULL;
}

static const sp_st_out *find(const sp_st_out *t, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(t[i].name, name))
            return &t[i];
    return NULL;
}

int gguf_twin_write(const char *path, const gguf_hparams *hp, const sp_st_out *t, size_t n)
{
    bool moe = !strcmp(hp->arch, "gpt-oss");
    out_tensor *o = calloc(n + 8 * (size_t)hp->n_layer, sizeof *o);
    size_t k = 0;
    if (!o)
        return 1;
    for (size_t i = 0; i < n; i++) {
        char nm[96];
        int layer;
        const sp_st_out *s = &t[i];
        const char *g = map_name(s->name, nm, sizeof nm, &layer);
        if (!g && strstr(s->name, "post_attention_layernorm.weight"))
            g = (snprintf(nm, sizeof nm, "blk.%d.%s", layer,
                          moe ? "post_attention_norm.weight" : "ffn_norm.weight"), nm);
        if (g) {
            out_tensor *x = &o[k++];
            snprintf(x->name, sizeof x->name, "%s", g);
            x->src = s;
            x->n_dims = s->n_dims;
            for (int d = 0; d < s->n_dims; d++)
                x->ne[d] = (uint64_t)s->shape[s->n_dims - 1 - d];
            if (s->n_dims == 1) {
                x->type = GG_F32;
                x->kind = 1;
                x->bytes = x->ne[0] * 4;
            } else {
                x->type = GG_BF16;
                x->kind = 0;
                x->bytes = s->n_bytes;
            }
            continue;
        }
        /* gpt-oss experts: blocks [E, R, C/32, 16] + scales [E, R, C/32]; biases [E, R] */
        const char *suffix = layer >= 0 ? strstr(s->name, "mlp.experts.") : NULL;
        if (!suffix)
            continue;
        suffix += strlen("mlp.experts.");
        int64_t E = s->shape[0], R = s->shape[1];
        if (!strcmp(suffix, "gate_up_proj_blocks") || !strcmp(suffix, "down_proj_blocks")) {
            char sn[128];
            snprintf(sn, sizeof sn, "model.layers.%d.mlp.experts.%s_scales", layer,
                     suffix[0] == 'g' ? "gate_up_proj" : "down_proj");
            int parts = suffix[0] == 'g' ? 2 : 1;
            for (int p = 0; p < parts; p++) {
                out_tensor *x = &o[k++];
                snprintf(x->name, sizeof x->name, "blk.%d.ffn_%s_exps.weight", layer,
                         parts == 1 ? "down" : p == 0 ? "gate" : "up");
                x->src = s;
                x->src_scales = find(t, n, sn);
                x->kind = 2;
                x->parity = parts == 1 ? -1 : p;
                x->type = GG_MXFP4;
                x->n_dims = 3;
                x->ne[0] = (uint64_t)s->shape[2] * 32;
                x->ne[1] = (uint64_t)(R / parts);
                x->ne[2] = (uint64_t)E;
                x->bytes = x->ne[0] / 32 * 17 * x->ne[1] * x->ne[2];
            }
        } else if (!strcmp(suffix, "gate_up_proj_bias") || !strcmp(suffix, "down_proj_bias")) {
            int parts = suffix[0] == 'g' ? 2 : 1;
            for (int p = 0; p < parts; p++) {
                out_tensor *x = &o[k++];
                snprintf(x->name, sizeof x->name, "blk.%d.ffn_%s_exps.bias", layer,
                         parts == 1 ? "down" : p == 0 ? "gate" : "up");
                x->src = s;
                x->kind = 3;
                x->parity = parts == 1 ? -1 : p;
                x->type = GG_F32;
                x->n_dims = 2;
                x->ne[0] = (uint64_t)(R / parts);
                x->ne[1] = (uint64_t)E;
                x->bytes = x->ne[0] * x->ne[1] * 4;
            }
        }
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        free(o);
        return 1;
    }
    uint64_t off = 0;
    for (size_t i = 0; i < k; i++) {
        o[i].offset = off;
        off += (o[i].bytes + 31) & ~(uint64_t)31;
    }
    fwrite("GGUF", 1, 4, f);
    w_u32(f, 3);
    w_u64(f, k);
    w_u64(f, moe ? 18 : 13); /* key-value pairs written below */
    kv_str(f, "general.architecture", hp->arch);
    kv_str(f, "general.name", "specula random twin");
    kv_str(f, "tokenizer.ggml.model", "none"); /* n_vocab dummy tokens from vocab_size */
    kv_u32(f, hp->arch, "vocab_size", hp->n_vocab);
    kv_u32(f, hp->arch, "context_length", hp->n_ctx);
    kv_u32(f, hp->arch, "embedding_length", hp->n_embd);
    kv_u32(f, hp->arch, "feed_forward_length", hp->n_ff);
    kv_u32(f, hp->arch, "block_count", hp->n_layer);
    kv_u32(f, hp->arch, "attention.head_count", hp->n_head);
    kv_u32(f, hp->arch, "attention.head_count_kv", hp->n_head_kv);
    kv_f32(f, hp->arch, "rope.freq_base", hp->rope_theta);
    kv_f32(f, hp->arch, "attention.layer_norm_rms_epsilon", hp->rms_eps);
    kv_u32(f, hp->arch, "attention.key_length", hp->head_dim);
    if (moe) {
        kv_u32(f, hp->arch, "attention.value_length", hp->head_dim);
        kv_u32(f, hp->arch, "expert_count", hp->n_expert);
        kv_u32(f, hp->arch, "expert_used_count", hp->n_expert_used);
        kv_u32(f, hp->arch, "expert_feed_forward_length", hp->n_ff);
        kv_u32(f, hp->arch, "attention.sliding_window", hp->sliding_window);
    }
    for (size_t i = 0; i < k; i++) {
        w_str(f, o[i].name);
        w_u32(f, (uint32_t)o[i].n_dims);
        for (int d = 0; d < o[i].n_dims; d++)
            w_u64(f, o[i].ne[d]);
        w_u32(f, o[i].type);
        w_u64(f, o[i].offset);
    }
    long pos = ftell(f);
    static const unsigned char zeros[32];
    fwrite(zeros, 1, (size_t)((32 - pos % 32) % 32), f);
    int rc = 0;
    for (size_t i = 0; i < k && !rc; i++) {
        out_tensor *x = &o[i];
        unsigned char *src = materialize(x->src), *sc = NULL, *buf = NULL;
        if (!src) {
            rc = 1;
            break;
        }
        if (x->kind == 0) {
            fwrite(src, 1, x->bytes, f);
        } else if (x->kind == 1) {
            buf = malloc(x->bytes);
            for (uint64_t e = 0; e < x->ne[0]; e++) {
                uint32_t u = (uint32_t)(src[2 * e] | src[2 * e + 1] << 8) << 16;
                memcpy(buf + 4 * e, &u, 4);
            }
            fwrite(buf, 1, x->bytes, f);
        } else if (x->kind == 3) {
            int parts = x->parity < 0 ? 1 : 2;
            buf = malloc(x->bytes);
            for (uint64_t e = 0; e < x->ne[1]; e++)
                for (uint64_t r = 0; r < x->ne[0]; r++) {
                    uint64_t srow = parts == 1 ? r : 2 * r + (uint64_t)x->parity;
                    size_t si = 2 * (e * x->ne[0] * (uint64_t)parts + srow);
                    uint32_t u = (uint32_t)(src[si] | src[si + 1] << 8) << 16;
                    memcpy(buf + 4 * (e * x->ne[0] + r), &u, 4);
                }
            fwrite(buf, 1, x->bytes, f);
        } else { /* MXFP4 experts */
            sc = materialize(x->src_scales);
            int parts = x->parity < 0 ? 1 : 2;
            uint64_t nb = x->ne[0] / 32, rows = x->ne[1], E = x->ne[2];
            buf = malloc(17 * nb);
            for (uint64_t e = 0; e < E && sc; e++)
                for (uint64_t r = 0; r < rows; r++) {
                    uint64_t srow = e * rows * (uint64_t)parts + (parts == 1 ? r : 2 * r + (uint64_t)x->parity);
                    for (uint64_t b = 0; b < nb; b++) {
                        const unsigned char *hb = src + (srow * nb + b) * 16;
                        unsigned char *gb = buf + 17 * b, v[32];
                        for (int j = 0; j < 16; j++) {
                            v[2 * j] = hb[j] & 15;
                            v[2 * j + 1] = hb[j] >> 4;
                        }
                        gb[0] = sc[srow * nb + b];
                        for (int j = 0; j < 16; j++)
                            gb[1 + j] = (unsigned char)(v[j] | v[j + 16] << 4);
                    }
                    fwrite(buf, 1, 17 * nb, f);
                }
            if (!sc)
                rc = 1;
        }
        fwrite(zeros, 1, (size_t)(((x->bytes + 31) & ~(uint64_t)31) - x->bytes), f);
        free(src);
        free(sc);
        free(buf);
    }
    if (fclose(f) != 0)
        rc = 1;
    free(o);
    if (rc)
        fprintf(stderr, "%s: writing the GGUF twin failed\n", path);
    return rc;
}
