/* fuzz_json.c: the JSON readers: cJSON parsing with the typed getters and the
 * duplicate-key check (util/json.c), the pull scanner walking and decoding every value
 * (util/json_scan.c), and string arrays with U+0000 (tools/json_text.c, the CLI's). */
#include "fuzz.h"
#include "util/json.h"
#include "util/json_scan.h"
#include "json_text.h"

#include <stdlib.h>

static void walk_cjson(const cJSON *v, int depth)
{
    if (depth > 64)
        return;
    if (cJSON_IsObject(v)) {
        (void)sp_json_duplicate_key(v);
        int64_t i;
        double d;
        bool b;
        const char *s;
        sp_error err;
        for (const cJSON *c = v->child; c; c = c->next) {
            (void)sp_json_int(v, c->string, "fuzz", 0, INT64_MIN, INT64_MAX, &i, &err);
            (void)sp_json_num(v, c->string, "fuzz", 0, -1e308, 1e308, &d, &err);
            (void)sp_json_bool(v, c->string, "fuzz", false, &b, &err);
            (void)sp_json_str(v, c->string, "fuzz", NULL, &s, &err);
        }
    }
    for (const cJSON *c = v->child; c; c = c->next)
        walk_cjson(c, depth + 1);
}

/* Decodes every string and integer the scanner can reach. */
static bool walk_scan(sp_jscan *j, char **buf, size_t *cap, int depth)
{
    char c = sp_jscan_peek(j);
    size_t len;
    int64_t iv;
    if (depth > 300)
        return sp_jscan_skip(j);
    if (c == '"')
        return sp_jscan_string(j, buf, cap, &len);
    if (c == '{' || c == '[') {
        j->pos++;
        bool first = true;
        while (sp_jscan_next(j, c == '{' ? '}' : ']', &first)) {
            if (c == '{' && (!sp_jscan_string(j, buf, cap, &len) || !sp_jscan_expect(j, ':')))
                return false;
            if (!walk_scan(j, buf, cap, depth + 1))
                return false;
        }
        return !j->failed;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        size_t at = j->pos;
        if (sp_jscan_int(j, &iv))
            return true;
        j->failed = false;
        j->pos = at;
    }
    return sp_jscan_skip(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    sp_error err = {0};
    cJSON *root;
    if (sp_json_parse(text, size, "fuzz.json", &root, &err) == SP_OK) {
        walk_cjson(root, 0);
        cJSON_Delete(root);
    }
    sp_jscan j;
    sp_jscan_init(&j, text, size, "fuzz.json", &err);
    char *buf = NULL;
    size_t cap = 0;
    (void)walk_scan(&j, &buf, &cap, 0);
    free(buf);
    sp_jscan_init(&j, text, size, "fuzz.json", &err);
    (void)sp_jscan_skip(&j);
    cli_json_strs strs;
    if (cli_json_parse_string_array(text, size, "fuzz.json", &strs, &err) == SP_OK)
        cli_json_strs_free(&strs);
    return 0;
}
