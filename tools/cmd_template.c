/* cmd_template.c: chat templates on the command line.
 *   specula template -t PATH --context FILE [--now ISO8601]
 * prints the rendered text exactly (nothing added); a template error prints the message
 * on stderr and exits 3. `specula tokenize -t PATH --chat FILE` renders, then encodes
 * the text as apply_chat_template(tokenize=True) does (special tokens in the text are
 * matched; no second BOS is added). */
#include "cli.h"
#include "commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONTEXT_MAX_BYTES (256u << 20)

static int template_fail(const sp_error *err)
{
    cli_fail(err);
    return err->status == SP_ERR_TEMPLATE || err->status == SP_ERR_LIMIT ? CLI_TEMPLATE_ERR : CLI_ERR;
}

/* "path: " before a context file's message. */
static void prefix_path(sp_error *err, const char *path)
{
    char old[SP_ERROR_MSG_BYTES];
    memcpy(old, err->msg, sizeof old);
    old[sizeof old - 1] = '\0';
    snprintf(err->msg, sizeof err->msg, "%.500s: %.500s", path, old);
}

typedef struct render_mode {
    const char *now;
    bool plain_syntax, no_defaults;
    int64_t bench; /* > 0: render this many more times and report the timing on stderr */
} render_mode;

/* The first render compiles; the timed ones reuse the compiled template, as a server does. */
static int bench_renders(sp_chat *chat, const char *ctx, size_t n, const sp_render_options *opt,
                         int64_t runs)
{
    double best = 1e300, total = 0;
    size_t bytes = 0;
    for (int64_t i = 0; i < runs; i++) {
        sp_error err = {0};
        char *out;
        double t0 = cli_now_ms();
        if (sp_chat_render(chat, ctx, n, opt, &out, &bytes, &err) != SP_OK)
            return template_fail(&err);
        double ms = cli_now_ms() - t0;
        free(out);
        total += ms;
        best = ms < best ? ms : best;
    }
    fprintf(stderr, "template render: %lld runs, mean %.4f ms, best %.4f ms, %zu bytes out\n",
            (long long)runs, total / (double)runs, best, bytes);
    return CLI_OK;
}

/* Renders; on success *out holds the text. Returns a CLI exit code. */
static int render(const char *path, const char *context_path, const render_mode *mode, char **out,
                  size_t *len)
{
    sp_error err = {0};
    char *ctx;
    size_t n;
    if (cli_read_file(context_path, CONTEXT_MAX_BYTES, &ctx, &n, &err) != SP_OK)
        return cli_fail(&err);
    sp_chat *chat;
    if (sp_chat_open(path, &chat, &err) != SP_OK) {
        free(ctx);
        return cli_fail(&err);
    }
    sp_chat_set_plain(chat, mode->plain_syntax, mode->no_defaults);
    sp_render_options opt = {.now = mode->now};
    int rc = CLI_OK;
    double t0 = cli_now_ms();
    if (sp_chat_render(chat, ctx, n, &opt, out, len, &err) != SP_OK)
        rc = template_fail((err.status == SP_ERR_FORMAT ? prefix_path(&err, context_path) : (void)0, &err));
    if (rc == CLI_OK && mode->bench > 0) {
        fprintf(stderr, "template compile + first render: %.3f ms\n", cli_now_ms() - t0);
        rc = bench_renders(chat, ctx, n, &opt, mode->bench);
    }
    sp_chat_close(chat);
    free(ctx);
    return rc;
}

int cmd_template(int argc, char **argv)
{
    const char *path = NULL, *context = NULL;
    render_mode mode = {0};
    cli_opt opts[] = {
        {"--tokenizer", "-t", CLI_STR, &path, "model dir, tokenizer_config.json or .jinja file", 0},
        {"--context", NULL, CLI_STR, &context, "JSON object of template variables", 0},
        {"--now", NULL, CLI_STR, &mode.now, "fixed time for strftime_now (ISO 8601)", 0},
        {"--plain-syntax", NULL, CLI_FLAG, &mode.plain_syntax, "Jinja2 defaults: no trim_blocks/lstrip_blocks", 0},
        {"--no-defaults", NULL, CLI_FLAG, &mode.no_defaults, "only the context's variables (no special tokens, tools=None, ...)", 0},
        {"--bench", NULL, CLI_INT, &mode.bench, "render N more times, timing on stderr", 0},
        {0},
    };
    const char *usage = "specula template -t PATH --context FILE [--now ISO8601] [--plain-syntax] [--no-defaults] [--bench N]";
    int rc = cli_parse(argc, argv, opts, usage);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    if (!path || !context) {
        fprintf(stderr, "specula: template needs -t and --context\nusage: %s\n", usage);
        return CLI_USAGE;
    }
    char *out;
    size_t len;
    rc = render(path, context, &mode, &out, &len);
    if (rc == CLI_OK) {
        fwrite(out, 1, len, stdout);
        free(out);
    }
    return rc;
}

int cli_tokenize_chat(sp_tokenizer *t, const char *path, const char *context_path)
{
    char *text;
    size_t len;
    render_mode mode = {0};
    int rc = render(path, context_path, &mode, &text, &len);
    if (rc != CLI_OK)
        return rc;
    int32_t *ids;
    size_t n;
    sp_error err = {0};
    if (sp_tokenizer_encode(t, text, len, false, &ids, &n, &err) != SP_OK) {
        free(text);
        return cli_fail(&err);
    }
    putchar('[');
    for (size_t i = 0; i < n; i++)
        printf(i ? ", %d" : "%d", ids[i]);
    puts("]");
    free(ids);
    free(text);
    return CLI_OK;
}
