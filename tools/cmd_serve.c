/* cmd_serve.c: `specula serve -m DIR [--draft DIR|ngram] [--host H] [--port P]
 * [--parallel N] [--queue N] [--ctx N] [--api-key KEY] [--max-body BYTES]`: the
 * OpenAI-compatible server (src/server/). */
#include "cli.h"
#include "commands.h"
#include "server.h"

#include <stdio.h>
#include <string.h>

int cmd_serve(int argc, char **argv)
{
    const char *model_dir = NULL, *draft = NULL, *host = "127.0.0.1", *api_key = NULL,
               *device = NULL, *precision_s = NULL, *draft_device = NULL;
    double draft_p_min = 0;
    int64_t port = 8080, parallel = 4, queue = 16, n_ctx = 0, threads = 0, draft_k = 4;
    int64_t grace_ms = 10000;
    uint64_t max_body = 8u << 20;
    cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &model_dir, "model directory (with tokenizer.json)", 0},
        {"--draft", NULL, CLI_STR, &draft, "a draft model DIR or 'ngram': drafts verified in the batch", 0},
        {"--draft-k", NULL, CLI_INT, &draft_k, "most draft tokens per step (default 4)", 0},
        {"--draft-p-min", NULL, CLI_FLOAT, &draft_p_min, "end a model draft below this draft probability", 0},
        {"--draft-device", NULL, CLI_STR, &draft_device, "device of a draft model (default: the target's)", 0},
        {"--host", NULL, CLI_STR, &host, "address to bind (default 127.0.0.1)", 0},
        {"--port", NULL, CLI_INT, &port, "port (default 8080; 0 = any free port)", 0},
        {"--parallel", "-np", CLI_INT, &parallel, "sequences decoded together (default 4)", 0},
        {"--queue", NULL, CLI_INT, &queue, "requests that may wait beyond those (default 16)", 0},
        {"--ctx", "-c", CLI_INT, &n_ctx, "context per sequence (default min(model, 4096))", 0},
        {"--api-key", NULL, CLI_STR, &api_key, "require Authorization: Bearer KEY", 0},
        {"--max-body", NULL, CLI_U64, &max_body, "largest request body in bytes (default 8 MiB)", 0},
        {"--threads", "-t", CLI_INT, &threads, "worker threads (default: all CPUs)", 0},
        {"--grace-ms", NULL, CLI_INT, &grace_ms, "SIGTERM: time running requests get (default 10000)", 0},
        CLI_DEVICE_OPT(device),
        {"--precision", NULL, CLI_STR, &precision_s, "matmul arithmetic: fast (bf16 inputs, default) or exact (fp32)", 0},
        {0},
    };
    const char *usage = "specula serve -m DIR [--draft DIR|ngram] [--host 127.0.0.1] [--port 8080] "
                        "[--parallel N] [--queue N] [--ctx N] [--api-key KEY] [--max-body BYTES] [--device D]";
    int rc = cli_parse(argc, argv, opts, usage);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    if (!model_dir) {
        fprintf(stderr, "specula: serve needs -m DIR\nusage: %s\n", usage);
        return CLI_USAGE;
    }
    if (draft && (!strcmp(draft, "self") || !strcmp(draft, "none") || !strcmp(draft, "mtp"))) {
        fprintf(stderr, "specula: serve: --draft %s: serve drafts with a draft model DIR or 'ngram'%s\n",
                draft, strcmp(draft, "mtp") ? "" : " (MTP drafts are not served yet: use generate, run, chat or bench)");
        return CLI_USAGE;
    }
    if (port < 0 || port > 65535 || parallel < 1 || parallel > 1024 || queue < 0 ||
        queue > 1 << 20 || n_ctx < 0 || draft_k < 1 || draft_k > SP_SPEC_MAX_K || grace_ms < 0 ||
        max_body < 1 || !(draft_p_min >= 0 && draft_p_min <= 1)) {
        fprintf(stderr, "specula: serve: an option is out of range (port 0-65535, parallel "
                "1-1024, queue >= 0, draft-k 1-%d, draft-p-min 0-1)\n", SP_SPEC_MAX_K);
        return CLI_USAGE;
    }
    sp_precision precision;
    if (cli_precision(precision_s, &precision) != CLI_OK)
        return CLI_USAGE;
    sp_server_config cfg = {
        .model_dir = model_dir, .draft = draft, .draft_device = draft_device,
        .draft_p_min = (float)draft_p_min, .host = host, .port = (int)port,
        .n_parallel = (int)parallel, .n_queue = (int)queue, .n_ctx = n_ctx, .api_key = api_key,
        .max_body_bytes = (size_t)max_body, .n_threads = cli_threads(threads),
        .draft_k = (int)draft_k, .grace_ms = (int)grace_ms, .device = cli_device(device),
        .precision = precision,
    };
    return sp_server_run(&cfg) == 0 ? CLI_OK : CLI_ERR;
}
