/* cmd_inspect.c: `specula inspect -m DIR [--json]` loads a checkpoint and reports what
 * specula made of it: architecture and dimensions, which layers are dense or MoE, the
 * weight formats bound (and their bytes), the quantization scheme and where it was
 * declared, and every activation scale an NVFP4 checkpoint carries. specula runs FP4 and
 * FP8 checkpoints weight-only (activations stay fp32), so those scales are reported here
 * and not applied. */
#include "cli.h"
#include "commands.h"

#include <stdio.h>
#include <string.h>

static void print_text(const sp_model *m, const sp_model_info *in)
{
    printf("architecture   %s\n", in->architecture);
    printf("dimensions     vocab %lld, hidden %lld, layers %lld (%lld MoE), heads %lld / kv %lld, "
           "head_dim %lld\n", (long long)in->n_vocab, (long long)in->n_embd, (long long)in->n_layers,
           (long long)in->n_moe_layers, (long long)in->n_heads, (long long)in->n_kv_heads, (long long)in->head_dim);
    if (in->n_moe_layers)
        printf("experts        %lld, top-%lld, width %lld\n", (long long)in->n_experts,
               (long long)in->n_experts_per_tok, (long long)in->expert_width);
    if (in->n_mtp_layers)
        printf("mtp            %lld multi-token prediction module (--draft mtp)\n", (long long)in->n_mtp_layers);
    printf("rope           %s, dim %lld, attention factor %g\n", in->rope_type,
           (long long)in->rope_dim, (double)in->rope_attention_factor);
    printf("quantization   %s", in->quant_method);
    if (in->quantized)
        printf(" (%s from %s; weight-only: activations stay fp32)", in->quant_algo, in->quant_source);
    printf("\nmatrices      ");
    for (size_t f = 0; f < in->n_formats; f++)
        printf(" %s %lld", in->formats[f].name, (long long)in->formats[f].n_matrices);
    printf("\nweights        %.2f MiB bound (%.2f MiB packed quantized)\n",
           (double)in->weight_bytes / 1048576.0, (double)in->packed_bytes / 1048576.0);
    printf("device         %s", in->device);
    if (in->device_total_bytes)
        printf(", %.1f MiB of weights there", (double)in->device_bytes / 1048576.0);
    printf("; a %lld-token session adds %.1f MiB (KV cache + pass buffers)\n",
           (long long)in->default_n_ctx, (double)in->session_bytes / 1048576.0);
    if (in->act_quant_declared || in->n_input_scales)
        printf("input scales   %zu (config %s quantized activations; not applied)\n",
               in->n_input_scales, in->act_quant_declared ? "declares" : "does not declare");
    const char *name;
    float value;
    for (size_t i = 0; sp_model_input_scale(m, i, &name, &value); i++)
        printf("  %s = %.9g\n", name, (double)value);
}

static void print_json(const sp_model *m, const sp_model_info *in)
{
    printf("{\"architecture\": \"%s\", \"vocab\": %lld, \"hidden\": %lld, \"layers\": %lld, "
           "\"moe_layers\": %lld, \"quant_method\": \"%s\", \"quant_source\": \"%s\", "
           "\"weight_bytes\": %llu, \"packed_bytes\": %llu, \"formats\": {",
           in->architecture, (long long)in->n_vocab, (long long)in->n_embd, (long long)in->n_layers,
           (long long)in->n_moe_layers, in->quant_method,
           in->quant_source ? in->quant_source : "", (unsigned long long)in->weight_bytes,
           (unsigned long long)in->packed_bytes);
    for (size_t f = 0; f < in->n_formats; f++)
        printf("%s\"%s\": %lld", f ? ", " : "", in->formats[f].name, (long long)in->formats[f].n_matrices);
    printf("}, \"input_scales\": {");
    const char *name;
    float value;
    for (size_t i = 0; sp_model_input_scale(m, i, &name, &value); i++)
        printf("%s\"%s\": %.9g", i ? ", " : "", name, (double)value);
    printf("}, \"device\": \"%s\", \"device_weight_bytes\": %llu, \"session_bytes\": %llu}\n",
           in->device, (unsigned long long)in->device_bytes,
           (unsigned long long)in->session_bytes);
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
    sp_model_info info;
    sp_model_get_info(m, &info);
    if (json)
        print_json(m, &info);
    else
        print_text(m, &info);
    sp_model_close(m);
    return CLI_OK;
}
