/* cmd_check.c: `specula check -m DIR [--draft DIR|mtp] [--tokens IDS | -p TEXT]`: the self-tests
 * of src/diag/check.h, one line per check (pass / warn / FAIL and the reason). Exit 1 when
 * any check fails. Without a prompt, the generation checks use what the model's users send:
 * a one-message conversation rendered through its chat template; a model without a
 * template gets a fixed spread of ids. */
#include "cli.h"
#include "commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "Hello! What is 2+2?" rendered through dir's chat template and encoded; false without one. */
static bool chat_prompt(const char *dir, sp_tokenizer *tok, int32_t **ids, size_t *n)
{
    static const char ctx[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hello! What is 2+2?\"}], "
                              "\"add_generation_prompt\": true}";
    sp_chat *chat = NULL;
    char *text = NULL;
    size_t len = 0;
    bool ok = sp_chat_open(dir, &chat, NULL) == SP_OK &&
              sp_chat_render(chat, ctx, sizeof ctx - 1, NULL, &text, &len, NULL) == SP_OK &&
              sp_tokenizer_encode(tok, text, len, false, ids, n, NULL) == SP_OK && *n > 0;
    if (!ok) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    free(text);
    sp_chat_close(chat);
    return ok;
}

int cmd_check(int argc, char **argv)
{
    const char *dir = NULL, *draft_dir = NULL, *tokens_s = NULL, *prompt = NULL;
    int64_t threads = 0;
    const char *device = NULL;
    const char *precision_s = NULL;
    cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &dir, "model directory", 0},
        {"--draft", NULL, CLI_STR, &draft_dir, "a draft model to check with it, or 'mtp'", 0},
        {"--tokens", NULL, CLI_STR, &tokens_s, "prompt ids for the generation checks", 0},
        {"--prompt", "-p", CLI_STR, &prompt, "prompt text for the generation checks", 0},
        {"--threads", "-t", CLI_INT, &threads, "worker threads (default: all CPUs)", 0},
        CLI_DEVICE_OPT(device),
        {"--precision", NULL, CLI_STR, &precision_s, "matmul arithmetic: fast (bf16 inputs, default) or exact (fp32)", 0},
        {0},
    };
    const char *usage = "specula check -m DIR [--draft DIR|mtp] [--tokens IDS | -p TEXT]";
    int rc = cli_parse(argc, argv, opts, usage);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    if (!dir) {
        fprintf(stderr, "specula: check needs -m\nusage: %s\n", usage);
        return CLI_USAGE;
    }
    sp_error err = {0};
    sp_model *m = NULL, *d = NULL;
    sp_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    sp_model_params mp = cli_model_params(threads, device);
    if (cli_precision(precision_s, &mp.precision) != CLI_OK)
        return CLI_USAGE;
    if (cli_model_open(dir, &mp, &m, &err) != SP_OK) {
        rc = cli_fail(&err);
        goto done;
    }
    if (cli_has_tokenizer(dir) && sp_tokenizer_open(dir, &tok, &err) != SP_OK) {
        rc = cli_fail(&err);
        goto done;
    }
    bool mtp = draft_dir && !strcmp(draft_dir, "mtp"); /* checked whenever the model has it */
    if (draft_dir && !mtp) {
        mp.reserved_bytes = sp_model_budget_bytes(m, 0);
        if (sp_model_open(draft_dir, &mp, &d, &err) != SP_OK) {
            rc = cli_fail(&err);
            goto done;
        }
    }
    if (prompt && tok) {
        if (sp_tokenizer_encode_prompt(tok, prompt, strlen(prompt), &ids, &n, &err) != SP_OK) {
            rc = cli_fail(&err);
            goto done;
        }
    } else if (prompt) {
        rc = cli_failf("-p needs a tokenizer.json in %s", dir);
        goto done;
    } else if (tokens_s) {
        if (cli_parse_tokens(tokens_s, &ids, &n) != 0 || n == 0) {
            rc = cli_failf("--tokens: cannot parse '%s'", tokens_s);
            goto done;
        }
    } else if (tok && chat_prompt(dir, tok, &ids, &n)) {
        /* the conversation the chat-template check renders, as the model's users send it */
    } else { /* a fixed spread of ids */
        n = 8;
        ids = malloc(n * sizeof *ids);
        for (size_t i = 0; ids && i < n; i++)
            ids[i] = (int32_t)((i * 7919 + 13) % (size_t)sp_model_n_vocab(m));
    }
    for (size_t i = 0; ids && i < n; i++)
        if (ids[i] < 0 || ids[i] >= sp_model_n_vocab(m) || (d && ids[i] >= sp_model_n_vocab(d))) {
            rc = cli_failf("prompt id %d is outside the vocabulary", ids[i]);
            goto done;
        }
    if ((int64_t)n > sp_model_n_ctx_max(m)) {
        rc = cli_failf("a prompt of %zu tokens exceeds the model's context of %lld", n,
                       (long long)sp_model_n_ctx_max(m));
        goto done;
    }
    sp_check_inputs in = {m, dir, tok, d, ids, n, mtp};
    sp_check_results *rep;
    if (sp_check_model(&in, &rep, &err) != SP_OK) {
        rc = cli_fail(&err);
        goto done;
    }
    int fails = 0, warns = 0;
    size_t n_checks = sp_check_results_count(rep);
    for (size_t i = 0; i < n_checks; i++) {
        const char *name, *detail;
        sp_check_status cs = sp_check_results_get(rep, i, &name, &detail);
        printf("%-4s  %-26s %s\n", sp_check_status_name(cs), name, detail);
        fails += cs == SP_CHECK_FAIL;
        warns += cs == SP_CHECK_WARN;
    }
    printf("%zu checks: %d failed, %d warnings (%s precision, %s kernels)\n", n_checks, fails, warns,
           cli_precision_name(m), cli_kernels_name(m));
    sp_check_results_free(rep);
    rc = fails ? CLI_ERR : CLI_OK;
done:
    free(ids);
    sp_tokenizer_close(tok);
    sp_model_close(d);
    sp_model_close(m);
    return rc;
}
