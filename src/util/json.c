/* json.c: typed, range-checked access to cJSON objects (see json.h). */
#include "util/json.h"
#include "util/error.h"
#include "util/fileio.h"
#include "util/utf8.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

sp_status sp_json_parse(const char *text, size_t len, const char *what, cJSON **out,
                        sp_error *err)
{
    /* JSON text is UTF-8 (RFC 8259) and tokenizers (Rust strings) reject anything else;
     * cJSON copies string bytes as they are, so without this a token, a special token or a
     * template could carry invalid UTF-8 into text the library promises is valid */
    size_t bad;
    if (!sp_utf8_valid(text, len, &bad))
        return sp_err(err, SP_ERR_FORMAT, "%s: not valid UTF-8 (byte %zu)", what, bad);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!j) {
        size_t off = end && end >= text ? (size_t)(end - text) : 0;
        return sp_err(err, SP_ERR_FORMAT, "%s: malformed JSON near byte %zu", what, off);
    }
    /* Only whitespace (and NULs: safetensors pads with spaces) may follow the value. */
    for (const char *p = end; p < text + len; p++) {
        if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t' && *p != '\0') {
            cJSON_Delete(j);
            return sp_err(err, SP_ERR_FORMAT, "%s: trailing data after JSON value at byte %zu",
                          what, (size_t)(p - text));
        }
    }
    *out = j;
    return SP_OK;
}

sp_status sp_json_parse_file(const char *path, size_t max_bytes, cJSON **out, sp_error *err)
{
    char *buf;
    size_t n;
    sp_status st = sp_read_file(path, max_bytes, &buf, &n, err);
    if (st != SP_OK)
        return st;
    st = sp_json_parse(buf, n, path, out, err);
    free(buf);
    return st;
}

typedef struct key_ref {
    const char *s;
    size_t i; /* position in the object */
} key_ref;

static int key_ref_cmp(const void *a, const void *b)
{
    const key_ref *x = a, *y = b;
    int c = strcmp(x->s, y->s);
    return c ? c : (x->i > y->i) - (x->i < y->i);
}

/* O(n log n): the keys are sorted (by name, then position), so duplicates are neighbours;
 * the answer is the duplicated key that comes first in the object, as a pairwise scan
 * would find it. A 16 MB config.json of distinct keys takes milliseconds, not minutes. */
const char *sp_json_duplicate_key(const cJSON *obj)
{
    if (!cJSON_IsObject(obj))
        return NULL;
    size_t n = 0;
    for (const cJSON *a = obj->child; a; a = a->next)
        n += a->string != NULL;
    if (n < 2)
        return NULL;
    key_ref *keys = malloc(n * sizeof *keys); /* n items exist in memory: no overflow */
    if (!keys) { /* no memory to sort: the pairwise scan needs none */
        for (const cJSON *a = obj->child; a; a = a->next)
            for (const cJSON *b = a->next; b; b = b->next)
                if (a->string && b->string && strcmp(a->string, b->string) == 0)
                    return a->string;
        return NULL;
    }
    size_t k = 0, pos = 0;
    for (const cJSON *a = obj->child; a; a = a->next, pos++)
        if (a->string)
            keys[k++] = (key_ref){a->string, pos};
    qsort(keys, n, sizeof *keys, key_ref_cmp);
    const char *dup = NULL;
    size_t dup_pos = SIZE_MAX;
    for (size_t i = 1; i < n; i++)
        if (strcmp(keys[i - 1].s, keys[i].s) == 0 && keys[i - 1].i < dup_pos &&
            (i < 2 || strcmp(keys[i - 2].s, keys[i].s) != 0)) {
            dup = keys[i - 1].s;
            dup_pos = keys[i - 1].i;
        }
    free(keys);
    return dup;
}

bool sp_json_absent(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return !v || cJSON_IsNull(v);
}

sp_status sp_json_as_int(const cJSON *v, const char *what, const char *field, int64_t min,
                         int64_t max, int64_t *out, sp_error *err)
{
    if (cJSON_IsBool(v))
        return sp_err(err, SP_ERR_FORMAT, "%s: field '%s': expected an integer, got a boolean",
                      what, field);
    if (!cJSON_IsNumber(v))
        return sp_err(err, SP_ERR_FORMAT, "%s: field '%s': expected an integer", what, field);
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < -9007199254740992.0 || d > 9007199254740992.0)
        return sp_err(err, SP_ERR_FORMAT, "%s: field '%s': expected an integer, got %g", what,
                      field, d);
    int64_t i = (int64_t)d;
    if (i < min || i > max)
        return sp_err(err, SP_ERR_FORMAT,
                      "%s: field '%s': value %lld is outside [%lld, %lld]", what, field,
                      (long long)i, (long long)min, (long long)max);
    *out = i;
    return SP_OK;
}

sp_status sp_json_int(const cJSON *obj, const char *key, const char *what, int64_t def,
                      int64_t min, int64_t max, int64_t *out, sp_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return SP_OK;
    }
    return sp_json_as_int(v, what, key, min, max, out, err);
}

sp_status sp_json_int_req(const cJSON *obj, const char *key, const char *what, int64_t min,
                          int64_t max, int64_t *out, sp_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v))
        return sp_err(err, SP_ERR_FORMAT, "%s: required field '%s' is missing", what, key);
    return sp_json_as_int(v, what, key, min, max, out, err);
}

sp_status sp_json_num(const cJSON *obj, const char *key, const char *what, double def,
                      double min, double max, double *out, sp_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return SP_OK;
    }
    if (!cJSON_IsNumber(v))
        return sp_err(err, SP_ERR_FORMAT, "%s: field '%s': expected a number", what, key);
    double d = v->valuedouble;
    if (!isfinite(d) || d < min || d > max)
        return sp_err(err, SP_ERR_FORMAT, "%s: field '%s': value %g is outside [%g, %g]", what,
                      key, d, min, max);
    *out = d;
    return SP_OK;
}

sp_status sp_json_bool(const cJSON *obj, const char *key, const char *what, bool def,
                       bool *out, sp_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return SP_OK;
    }
    if (!cJSON_IsBool(v))
        return sp_err(err, SP_ERR_FORMAT, "%s: field '%s': expected true or false", what, key);
    *out = cJSON_IsTrue(v);
    return SP_OK;
}

sp_status sp_json_str(const cJSON *obj, const char *key, const char *what, const char *def,
                      const char **out, sp_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return SP_OK;
    }
    if (!cJSON_IsString(v))
        return sp_err(err, SP_ERR_FORMAT, "%s: field '%s': expected a string", what, key);
    *out = v->valuestring;
    return SP_OK;
}
