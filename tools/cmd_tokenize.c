/* cmd_tokenize.c: `specula tokenize -t PATH [--add-special] (--text TEXT | --json-in FILE)`
 * and `specula detokenize -t PATH --json-in FILE`, the tokenizer's CLI contract:
 *   tokenize --text      prints one JSON array of ids
 *   tokenize --json-in   FILE holds a JSON array of strings; prints an array of id arrays
 *   detokenize --json-in FILE holds a JSON array of id arrays; prints an array of strings
 *                        (special tokens kept, as decode(skip_special_tokens=False)) */
#include "cli.h"
#include "commands.h"
#include "json_text.h"

#include <cjson/cJSON.h>
#include <math.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INPUT_MAX_BYTES (1u << 30)

static void print_ids(const int32_t *ids, size_t n)
{
    putchar('[');
    for (size_t i = 0; i < n; i++)
        printf(i ? ", %d" : "%d", ids[i]);
    putchar(']');
}

/* The JSON value of a file: nothing but whitespace (or NULs) may follow it. */
static sp_status parse_json_file(const char *path, cJSON **out, sp_error *err)
{
    char *text;
    size_t len;
    sp_status st = cli_read_file(path, INPUT_MAX_BYTES, &text, &len, err);
    if (st != SP_OK)
        return st;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!j) {
        size_t off = end && end >= text ? (size_t)(end - text) : 0;
        snprintf(err->msg, sizeof err->msg, "%s: malformed JSON near byte %zu", path, off);
        st = err->status = SP_ERR_FORMAT;
    }
    for (const char *p = end; j && p < text + len; p++)
        if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t' && *p != '\0') {
            snprintf(err->msg, sizeof err->msg, "%s: trailing data after JSON value at byte %zu",
                     path, (size_t)(p - text));
            st = err->status = SP_ERR_FORMAT;
            cJSON_Delete(j);
            j = NULL;
        }
    free(text);
    *out = j;
    return st;
}

/* One token id of file `what`. */
static sp_status json_id(const cJSON *v, const char *what, int32_t *out, sp_error *err)
{
    double d = v->valuedouble;
    if (cJSON_IsBool(v))
        snprintf(err->msg, sizeof err->msg, "%s: field 'ids': expected an integer, got a boolean", what);
    else if (!cJSON_IsNumber(v))
        snprintf(err->msg, sizeof err->msg, "%s: field 'ids': expected an integer", what);
    else if (!isfinite(d) || d != floor(d) || d < -9007199254740992.0 || d > 9007199254740992.0)
        snprintf(err->msg, sizeof err->msg, "%s: field 'ids': expected an integer, got %g", what, d);
    else if (d < INT32_MIN || d > INT32_MAX)
        snprintf(err->msg, sizeof err->msg, "%s: field 'ids': value %lld is outside [%lld, %lld]", what,
                 (long long)d, (long long)INT32_MIN, (long long)INT32_MAX);
    else {
        *out = (int32_t)d;
        return SP_OK;
    }
    return err->status = SP_ERR_FORMAT;
}

static int encode_one(sp_tokenizer *t, const char *s, size_t n, bool special)
{
    int32_t *ids;
    size_t k;
    sp_error err = {0};
    if (sp_tokenizer_encode(t, s, n, special, &ids, &k, &err) != SP_OK)
        return cli_fail(&err);
    print_ids(ids, k);
    free(ids);
    return CLI_OK;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *path = NULL, *text = NULL, *json_in = NULL, *chat = NULL;
    bool special = false;
    cli_opt opts[] = {
        {"--tokenizer", "-t", CLI_STR, &path, "model dir, tokenizer.json, or dir with it", 0},
        {"--add-special", NULL, CLI_FLAG, &special, "add the post-processor's special tokens", 0},
        {"--text", NULL, CLI_STR, &text, "text to encode; prints one JSON array", 0},
        {"--json-in", NULL, CLI_STR, &json_in, "JSON array of strings; prints array of arrays", 0},
        {"--chat", NULL, CLI_STR, &chat, "render a chat context with the chat template, then encode", 0},
        {0},
    };
    const char *usage = "specula tokenize -t PATH [--add-special] (--text TEXT | --json-in FILE | --chat FILE)";
    int rc = cli_parse(argc, argv, opts, usage);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    if (!path || (!!text + !!json_in + !!chat) != 1) {
        fprintf(stderr, "specula: tokenize needs -t and one of --text, --json-in, --chat\nusage: %s\n",
                usage);
        return CLI_USAGE;
    }
    sp_error err = {0};
    sp_tokenizer *t;
    if (sp_tokenizer_open(path, &t, &err) != SP_OK)
        return cli_fail(&err);
    if (chat) {
        rc = cli_tokenize_chat(t, path, chat);
    } else if (text) {
        rc = encode_one(t, text, strlen(text), special);
        if (rc == CLI_OK)
            putchar('\n');
    } else {
        char *buf;
        size_t n;
        cli_json_strs strs = {0};
        if (cli_read_file(json_in, INPUT_MAX_BYTES, &buf, &n, &err) != SP_OK) {
            sp_tokenizer_close(t);
            return cli_fail(&err);
        }
        if (cli_json_parse_string_array(buf, n, json_in, &strs, &err) != SP_OK) {
            free(buf);
            sp_tokenizer_close(t);
            return cli_fail(&err);
        }
        free(buf);
        putchar('[');
        for (size_t i = 0; i < strs.n && rc == CLI_OK; i++) {
            if (i)
                fputs(", ", stdout);
            rc = encode_one(t, strs.s[i], strs.len[i], special);
        }
        puts("]");
        cli_json_strs_free(&strs);
    }
    sp_tokenizer_close(t);
    return rc;
}

int cmd_detokenize(int argc, char **argv)
{
    const char *path = NULL, *json_in = NULL;
    bool skip = false;
    cli_opt opts[] = {
        {"--tokenizer", "-t", CLI_STR, &path, "model dir, tokenizer.json, or dir with it", 0},
        {"--json-in", NULL, CLI_STR, &json_in, "JSON array of id arrays", 0},
        {"--skip-special", NULL, CLI_FLAG, &skip, "drop special tokens (default: keep)", 0},
        {0},
    };
    const char *usage = "specula detokenize -t PATH --json-in FILE";
    int rc = cli_parse(argc, argv, opts, usage);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    if (!path || !json_in) {
        fprintf(stderr, "specula: detokenize needs -t and --json-in\nusage: %s\n", usage);
        return CLI_USAGE;
    }
    sp_error err = {0};
    cJSON *root;
    if (parse_json_file(json_in, &root, &err) != SP_OK)
        return cli_fail(&err);
    if (!cJSON_IsArray(root)) {
        cJSON_Delete(root);
        return cli_failf("%s: expected a JSON array of id arrays", json_in);
    }
    sp_tokenizer *t;
    if (sp_tokenizer_open(path, &t, &err) != SP_OK) {
        cJSON_Delete(root);
        return cli_fail(&err);
    }
    /* decode everything first, so an error prints nothing on stdout */
    size_t n = (size_t)cJSON_GetArraySize(root), k = 0;
    char **texts = calloc(n ? n : 1, sizeof *texts);
    size_t *lens = calloc(n ? n : 1, sizeof *lens);
    rc = texts && lens ? CLI_OK : cli_failf("out of memory");
    for (const cJSON *a = root->child; a && rc == CLI_OK; a = a->next, k++) {
        if (!cJSON_IsArray(a)) {
            rc = cli_failf("%s: item %zu is not an array of ids", json_in, k);
            break;
        }
        size_t m = (size_t)cJSON_GetArraySize(a), j = 0;
        int32_t *ids = malloc((m ? m : 1) * sizeof *ids);
        for (const cJSON *x = a->child; x && ids; x = x->next, j++) {
            if (json_id(x, json_in, &ids[j], &err) != SP_OK) {
                rc = cli_fail(&err);
                break;
            }
        }
        if (rc == CLI_OK && sp_tokenizer_decode(t, ids, m, skip, &texts[k], &lens[k], &err) != SP_OK)
            rc = cli_fail(&err);
        free(ids);
    }
    if (rc == CLI_OK) {
        putchar('[');
        for (size_t i = 0; i < n; i++) {
            if (i)
                fputs(", ", stdout);
            cli_json_write_string(stdout, texts[i], lens[i]);
        }
        puts("]");
    }
    for (size_t i = 0; texts && i < n; i++)
        free(texts[i]);
    free(texts);
    free(lens);
    sp_tokenizer_close(t);
    cJSON_Delete(root);
    return rc;
}
