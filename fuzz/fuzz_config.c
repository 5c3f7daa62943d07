/* fuzz_config.c: config.json (+ generation_config.json) normalization for every
 * architecture, then the model built from it.
 *
 * The input is config.json, optionally followed by a NUL byte and generation_config.json.
 * Step 1 parses and normalizes it (format/hf_config.c). Step 2, when that succeeds and the
 * architecture is known, writes it into a scratch directory beside the checkpoint of a
 * fixture of the same family and opens the model (dimensions, RoPE, MoE/MLA fields, tensor
 * binding), then evaluates two tokens in a small session: odd but accepted values must
 * compute, not crash. Property: SP_OK, or an error naming the file. */
#include "format/hf_config.h"
#include "model/arch.h"
#include "specula.h"
#include "util/error.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef SPECULA_FIXTURES_DIR
#error "SPECULA_FIXTURES_DIR must name tests/fixtures"
#endif

static const struct {
    const char *arch, *fixture;
} FAMILY[] = {
    {"LlamaForCausalLM", "llama_mha_bf16"},         {"MistralForCausalLM", "llama_mha_bf16"},
    {"Qwen3ForCausalLM", "qwen3_gqa2_tied"},        {"Qwen3MoeForCausalLM", "qwen3moe_mixed_bf16"},
    {"MixtralForCausalLM", "mixtral_window"},       {"GptOssForCausalLM", "gptoss_mxfp4"},
    {"DeepseekV3ForCausalLM", "deepseekv3_qlora_yarn"}, {"DeepseekV4ForCausalLM", "dsv4_sqrtsoftplus_bf16"},
};

static char scratch[256];

/* Removes the scratch directory and the files open_model puts there, at exit. */
static void remove_scratch(void)
{
    static const char *names[] = {"model.safetensors", "config.json", "generation_config.json"};
    char p[512];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", scratch, names[i]);
        unlink(p);
    }
    rmdir(scratch);
}

static void write_file(const char *dir, const char *name, const void *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    if (n && fwrite(p, 1, n, f) != n)
        abort();
    fclose(f);
}

static void open_model(const char *fixture, const char *cfg, size_t n_cfg, const char *gen, size_t n_gen)
{
    if (!scratch[0]) {
        snprintf(scratch, sizeof scratch, "/tmp/specula-fuzz-config-XXXXXX");
        if (!mkdtemp(scratch))
            abort();
        atexit(remove_scratch);
    }
    char link[512], target[512];
    snprintf(link, sizeof link, "%s/model.safetensors", scratch);
    snprintf(target, sizeof target, "%s/models/%s/model.safetensors", SPECULA_FIXTURES_DIR, fixture);
    unlink(link);
    if (symlink(target, link) != 0)
        abort();
    write_file(scratch, "config.json", cfg, n_cfg);
    char gpath[512];
    snprintf(gpath, sizeof gpath, "%s/generation_config.json", scratch);
    unlink(gpath);
    if (gen)
        write_file(scratch, "generation_config.json", gen, n_gen);
    sp_model_params mp = sp_model_default_params();
    mp.n_threads = 1;
    mp.device = "cpu"; /* the parser and loader are the target, not a GPU */
    sp_model *m = NULL;
    sp_error err = {0};
    if (sp_model_open(scratch, &mp, &m, &err) != SP_OK) {
        if (!strstr(err.msg, scratch) && err.status != SP_ERR_NOMEM) {
            fprintf(stderr, "fuzz_config: message does not name the model: %s\n", err.msg);
            abort();
        }
        return;
    }
    sp_session *s = NULL;
    sp_session_params sp = {.n_ctx = 8};
    if (sp_session_new(m, &sp, &s, &err) == SP_OK) {
        int32_t toks[2] = {1, 2};
        if (sp_model_n_vocab(m) > 2)
            sp_session_eval(s, toks, 2, NULL, &err);
        sp_session_free(s);
    }
    sp_model_close(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t n_cfg = nul ? (size_t)(nul - data) : size;
    const char *gen = nul ? (const char *)nul + 1 : NULL;
    size_t n_gen = nul ? size - n_cfg - 1 : 0;
    sp_hf_config *c = NULL;
    sp_error err = {0};
    if (sp_hf_config_parse((const char *)data, n_cfg, gen, n_gen, "fuzz/config.json", &c, &err) != SP_OK) {
        if (!strstr(err.msg, "config.json") && err.status != SP_ERR_NOMEM) {
            fprintf(stderr, "fuzz_config: message does not name config.json: %s\n", err.msg);
            abort();
        }
        return 0;
    }
    const sp_arch *a = sp_arch_find(c->arch);
    const char *fixture = NULL;
    for (size_t i = 0; a && i < sizeof FAMILY / sizeof FAMILY[0]; i++)
        if (strcmp(FAMILY[i].arch, c->arch) == 0)
            fixture = FAMILY[i].fixture;
    if (a)
        for (int64_t l = 0; l < c->n_layers; l++)
            (void)sp_arch_layer_is_moe(a, c, l);
    sp_hf_config_free(c);
    if (fixture)
        open_model(fixture, (const char *)data, n_cfg, gen, n_gen);
    return 0;
}
