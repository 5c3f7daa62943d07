/* cmd_logits.c: `specula logits -m DIR --tokens 1,2,3 -o FILE` writes little-endian
 * float32 logits, one row of vocab_size floats per input position. */
#include "cli.h"
#include "commands.h"

#include <stdio.h>
#include <stdlib.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "cmd_logits writes native floats and assumes a little-endian machine"
#endif

int cmd_logits(int argc, char **argv)
{
    const char *model_dir = NULL, *tokens_s = NULL, *out_path = NULL;
    int64_t threads = 0, batch = 0;
    const char *device = NULL;
    const char *precision_s = NULL;
    cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &model_dir, "model directory (config.json + safetensors)", 0},
        {"--tokens", NULL, CLI_STR, &tokens_s, "comma-separated input token ids", 0},
        {"--output", "-o", CLI_STR, &out_path, "output file (float32 [n_tokens, vocab])", 0},
        {"--threads", "-t", CLI_INT, &threads, "worker threads (default: all CPUs)", 0},
        CLI_DEVICE_OPT(device),
        {"--precision", NULL, CLI_STR, &precision_s, "matmul arithmetic: fast (bf16 inputs, default) or exact (fp32)", 0},
        {"--batch", NULL, CLI_INT, &batch, "most tokens per forward pass (default 256; 512 on a GPU)", 0},
        {0},
    };
    const char *usage = "specula logits -m DIR --tokens 1,2,3 -o FILE";
    int rc = cli_parse(argc, argv, opts, usage);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    if (!model_dir || !tokens_s || !out_path) {
        fprintf(stderr, "specula: logits needs -m, --tokens and -o\nusage: %s\n", usage);
        return CLI_USAGE;
    }
    int32_t *tokens;
    size_t n;
    if (cli_parse_tokens(tokens_s, &tokens, &n) != 0) {
        fprintf(stderr, "specula: --tokens: cannot parse '%s' as comma-separated ids\n", tokens_s);
        return CLI_USAGE;
    }
    if (n == 0) {
        free(tokens);
        return cli_failf("--tokens: the token list is empty");
    }
    sp_error err = {0};
    sp_model_params mp = cli_model_params(threads, device);
    if (cli_precision(precision_s, &mp.precision) != CLI_OK)
        return CLI_USAGE;
    mp.n_ctx = (int64_t)n;
    sp_model *m = NULL;
    sp_session *s = NULL;
    float *logits = NULL;
    FILE *f = NULL;
    rc = CLI_OK;
    if (cli_model_open(model_dir, &mp, &m, &err) != SP_OK) {
        rc = cli_fail(&err);
        goto done;
    }
    int64_t V = sp_model_n_vocab(m);
    if ((int64_t)n > sp_model_n_ctx_max(m)) {
        rc = cli_failf("%zu tokens exceed the model's context of %lld", n,
                       (long long)sp_model_n_ctx_max(m));
        goto done;
    }
    sp_session_params sp = {.n_ctx = (int64_t)n, .n_batch = batch};
    if (sp_session_new(m, &sp, &s, &err) != SP_OK) {
        rc = cli_fail(&err);
        goto done;
    }
    logits = malloc(n * (size_t)V * sizeof(float));
    if (!logits) {
        rc = cli_failf("out of memory for %zu x %lld logits", n, (long long)V);
        goto done;
    }
    if (sp_session_eval(s, tokens, n, logits, &err) != SP_OK) {
        rc = cli_fail(&err);
        goto done;
    }
    f = fopen(out_path, "wb");
    if (!f || fwrite(logits, sizeof(float), n * (size_t)V, f) != n * (size_t)V) {
        rc = cli_failf("%s: cannot write logits", out_path);
        goto done;
    }
done:
    if (f && fclose(f) != 0 && rc == CLI_OK)
        rc = cli_failf("%s: cannot write logits", out_path);
    free(logits);
    free(tokens);
    sp_session_free(s);
    sp_model_close(m);
    return rc;
}
