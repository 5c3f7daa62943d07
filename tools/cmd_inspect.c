/* cmd_inspect.c: `specula inspect -m DIR [--json]` loads a checkpoint and reports what
 * specula made of it: architecture and dimensions, which layers are dense or MoE, the
 * weight formats bound (and their bytes), the quantization scheme and where it was
 * declared, and every activation scale an NVFP4 checkpoint carries. specula runs FP4 and
 * FP8 checkpoints weight-only (activations stay fp32), so those scales are reported here
 * and not applied. */
#include "cli.h"
#include "commands.h"
#include "model/model.h"

#include <stdio.h>
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

static void print_text(const sp_model *m, const fmt_count *c, int64_t n_moe)
{
    printf("architecture   %s\n", m->cfg->arch);
    printf("dimensions     vocab %lld, hidden %lld, layers %lld (%lld MoE), heads %lld / kv %lld, "
           "head_dim %lld\n", (long long)m->n_vocab, (long long)m->n_embd, (long long)m->n_layers,
           (long long)n_moe, (long long)m->n_heads, (long long)m->n_kv_heads, (long long)m->head_dim);
    if (n_moe)
        printf("experts        %lld, top-%lld, width %lld\n", (long long)m->cfg->n_experts,
               (long long)m->cfg->n_experts_per_tok,
               (long long)(m->cfg->moe_intermediate_size > 0 ? m->cfg->moe_intermediate_size
                                                              : m->cfg->intermediate_size));
    printf("rope           %s, dim %lld, attention factor %g\n", sp_rope_type_name(m->cfg->rope.type),
           (long long)m->rope.dim, (double)m->rope.attention_factor);
    printf("quantization   %s", sp_quant_method_name(m->quant.method));
    if (m->quant.method)
        printf(" (%s from %s; weight-only: activations stay fp32)", m->quant.algo, m->quant.source);
    printf("\nmatrices      ");
    for (int f = SP_WF_F32; f <= SP_WF_FP8_BLOCK; f++)
        if (c->n[f])
            printf(" %s %lld", sp_wformat_name((sp_wformat)f), (long long)c->n[f]);
    printf("\nweights        %.2f MiB bound (%.2f MiB packed quantized)\n",
           (double)m->weight_bytes / 1048576.0, (double)m->quant.packed_bytes / 1048576.0);
    printf("device         %s", sp_model_device(m));
    if (m->be->total_bytes)
        printf(", %.1f MiB of weights there", (double)sp_model_device_bytes(m) / 1048576.0);
    printf("; a %lld-token session adds %.1f MiB (KV cache + pass buffers)\n",
           (long long)sp_model_default_ctx(m), (double)sp_model_session_bytes(m, 0, 0) / 1048576.0);
    if (m->quant.act_quant_declared || m->quant.n_input_scales)
        printf("input scales   %zu (config %s quantized activations; not applied)\n",
               m->quant.n_input_scales, m->quant.act_quant_declared ? "declares" : "does not declare");
    for (size_t i = 0; i < m->quant.n_input_scales; i++)
        printf("  %s = %.9g\n", m->quant.input_scales[i].tensor, (double)m->quant.input_scales[i].value);
}

static void print_json(const sp_model *m, const fmt_count *c, int64_t n_moe)
{
    printf("{\"architecture\": \"%s\", \"vocab\": %lld, \"hidden\": %lld, \"layers\": %lld, "
           "\"moe_layers\": %lld, \"quant_method\": \"%s\", \"quant_source\": \"%s\", "
           "\"weight_bytes\": %llu, \"packed_bytes\": %llu, \"formats\": {",
           m->cfg->arch, (long long)m->n_vocab, (long long)m->n_embd, (long long)m->n_layers,
           (long long)n_moe, sp_quant_method_name(m->quant.method),
           m->quant.source ? m->quant.source : "", (unsigned long long)m->weight_bytes,
           (unsigned long long)m->quant.packed_bytes);
    bool first = true;
    for (int f = SP_WF_F32; f <= SP_WF_FP8_BLOCK; f++)
        if (c->n[f]) {
            printf("%s\"%s\": %lld", first ? "" : ", ", sp_wformat_name((sp_wformat)f), (long long)c->n[f]);
            first = false;
        }
    printf("}, \"input_scales\": {");
    for (size_t i = 0; i < m->quant.n_input_scales; i++)
        printf("%s\"%s\": %.9g", i ? ", " : "", m->quant.input_scales[i].tensor,
               (double)m->quant.input_scales[i].value);
    printf("}, \"device\": \"%s\", \"device_weight_bytes\": %llu, \"session_bytes\": %llu}\n",
           sp_model_device(m), (unsigned long long)sp_model_device_bytes(m),
           (unsigned long long)sp_model_session_bytes(m, 0, 0));
}

int cmd_inspect(int argc, char **argv)
{
    const char *dir = NULL, *device = NULL;
    bool json = false;
    cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &dir, "model directory", 0},
        CLI_DEVICE_OPT(device),
        {"--json", NULL, CLI_FLAG, &json, "print one JSON object", 0},
        {0},
    };
    const char *usage = "specula inspect -m DIR [--device D] [--json]";
    int rc = cli_parse(argc, argv, opts, usage);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    if (!dir) {
        fprintf(stderr, "specula: inspect needs -m\nusage: %s\n", usage);
        return CLI_USAGE;
    }
    sp_error err = {0};
    sp_model_params mp = cli_model_params(1, device);
    mp.skip_mem_check = true;
    sp_model *m;
    if (sp_model_open(dir, &mp, &m, &err) != SP_OK)
        return cli_fail(&err);
    fmt_count c = {0};
    count(&c, &m->tok_embd);
    if (m->lm_head.data != m->tok_embd.data)
        count(&c, &m->lm_head);
    int64_t n_moe = 0;
    for (int64_t l = 0; l < m->n_layers; l++) {
        count_layer(&c, &m->layers[l]);
        n_moe += m->layers[l].moe;
    }
    if (json)
        print_json(m, &c, n_moe);
    else
        print_text(m, &c, n_moe);
    sp_model_close(m);
    return CLI_OK;
}
