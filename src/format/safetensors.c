/* safetensors.c: parsing and validating the safetensors header (see safetensors.h). */
#include "format/safetensors.h"
#include "util/ckd.h"
#include "util/error.h"
#include "util/json.h"
#include "util/utf8.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int cmp_by_name(const void *a, const void *b)
{
    return strcmp(((const sp_st_tensor *)a)->name, ((const sp_st_tensor *)b)->name);
}

static int cmp_by_offset(const void *a, const void *b)
{
    const sp_st_tensor *x = *(const sp_st_tensor *const *)a;
    const sp_st_tensor *y = *(const sp_st_tensor *const *)b;
    /* data pointers hold offsets (from base NULL+0) until validation finishes */
    uintptr_t xb = (uintptr_t)x->data, yb = (uintptr_t)y->data;
    if (xb != yb)
        return xb < yb ? -1 : 1;
    return x->n_bytes < y->n_bytes ? -1 : x->n_bytes > y->n_bytes;
}

/* Reads one tensor entry; offsets are stored temporarily in data (as an integer) and
 * n_bytes (as end - begin). */
static sp_status parse_entry(const cJSON *e, const char *what, sp_st_tensor *t,
                             uint64_t *begin, uint64_t *end, sp_error *err)
{
    if (!cJSON_IsObject(e))
        return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s': entry is not an object", what,
                      t->name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt))
        return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s': field 'dtype' missing or not a string",
                      what, t->name);
    t->dtype = sp_dtype_from_name(dt->valuestring);
    if (t->dtype == SP_DTYPE_UNKNOWN)
        return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%s'", what, t->name,
                      dt->valuestring);
    if (!cJSON_IsArray(sh))
        return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s': field 'shape' missing or not an array",
                      what, t->name);
    int rank = cJSON_GetArraySize(sh);
    if (rank > SP_ST_MAX_DIMS)
        return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s': rank %d exceeds %d", what, t->name,
                      rank, SP_ST_MAX_DIMS);
    t->n_dims = rank;
    uint64_t n_el = 1;
    int i = 0;
    for (const cJSON *d = sh->child; d; d = d->next, i++) {
        int64_t v;
        sp_status st = sp_json_as_int(d, what, "shape", 0, INT64_MAX, &v, err);
        if (st != SP_OK) {
            sp_err_prefix(err, "tensor '%s'", t->name);
            return st;
        }
        t->shape[i] = v;
        if (sp_ckd_mul_u64(&n_el, n_el, (uint64_t)v))
            return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s': element count overflows", what,
                          t->name);
    }
    t->n_elements = n_el;
    uint64_t n_bits;
    if (sp_ckd_mul_u64(&n_bits, n_el, sp_dtype_bits(t->dtype)))
        return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s': byte size overflows", what, t->name);
    if (n_bits % 8)
        return sp_err(err, SP_ERR_FORMAT,
                      "%s: tensor '%s': %llu elements of %s do not fill whole bytes", what,
                      t->name, (unsigned long long)n_el, sp_dtype_name(t->dtype));
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
        return sp_err(err, SP_ERR_FORMAT,
                      "%s: tensor '%s': field 'data_offsets' must be an array of two integers",
                      what, t->name);
    int64_t b, en;
    sp_status st = sp_json_as_int(off->child, what, "data_offsets", 0, INT64_MAX, &b, err);
    if (st == SP_OK)
        st = sp_json_as_int(off->child->next, what, "data_offsets", 0, INT64_MAX, &en, err);
    if (st != SP_OK) {
        sp_err_prefix(err, "tensor '%s'", t->name);
        return st;
    }
    if (en < b)
        return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s': data_offsets [%lld, %lld] end before begin",
                      what, t->name, (long long)b, (long long)en);
    if ((uint64_t)(en - b) != n_bits / 8)
        return sp_err(err, SP_ERR_FORMAT,
                      "%s: tensor '%s': data_offsets [%lld, %lld] hold %lld bytes but shape and "
                      "dtype %s need %llu",
                      what, t->name, (long long)b, (long long)en, (long long)(en - b),
                      sp_dtype_name(t->dtype), (unsigned long long)(n_bits / 8));
    *begin = (uint64_t)b;
    *end = (uint64_t)en;
    return SP_OK;
}

static sp_status check_metadata(const cJSON *meta, const char *what, sp_error *err)
{
    if (!cJSON_IsObject(meta))
        return sp_err(err, SP_ERR_FORMAT, "%s: '__metadata__' is not an object", what);
    for (const cJSON *m = meta->child; m; m = m->next)
        if (!cJSON_IsString(m))
            return sp_err(err, SP_ERR_FORMAT, "%s: '__metadata__' value for '%s' is not a string",
                          what, m->string);
    return SP_OK;
}

/* Checks that the entries tile [0, data_len) exactly, then turns offsets into pointers. */
static sp_status check_layout(sp_safetensors *st, const unsigned char *base, uint64_t data_len,
                              const char *what, sp_error *err)
{
    size_t n = st->n_tensors;
    sp_st_tensor **order = malloc((n ? n : 1) * sizeof *order);
    if (!order)
        return sp_err(err, SP_ERR_NOMEM, "%s: out of memory", what);
    for (size_t i = 0; i < n; i++)
        order[i] = &st->tensors[i];
    qsort(order, n, sizeof *order, cmp_by_offset);
    uint64_t pos = 0;
    sp_status status = SP_OK;
    for (size_t i = 0; i < n; i++) {
        uint64_t b = (uint64_t)(uintptr_t)order[i]->data;
        if (b != pos) {
            status = sp_err(err, SP_ERR_FORMAT,
                            "%s: tensor '%s': data_offsets begin at %llu but the previous tensor "
                            "ends at %llu (gap or overlap)",
                            what, order[i]->name, (unsigned long long)b, (unsigned long long)pos);
            break;
        }
        pos = b + order[i]->n_bytes;
    }
    if (status == SP_OK && pos != data_len)
        status = sp_err(err, SP_ERR_FORMAT,
                        "%s: tensors cover %llu bytes but the file holds %llu bytes of data",
                        what, (unsigned long long)pos, (unsigned long long)data_len);
    free(order);
    if (status != SP_OK)
        return status;
    for (size_t i = 0; i < n; i++)
        st->tensors[i].data = base + (uintptr_t)st->tensors[i].data;
    return SP_OK;
}

/* The offset of the first \u0000 escape inside a JSON string of the header, or SIZE_MAX. */
static size_t find_escaped_nul(const char *h, size_t n)
{
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        if (!in_str) {
            in_str = h[i] == '"';
            continue;
        }
        if (h[i] == '"') {
            in_str = false;
        } else if (h[i] == '\\' && i + 1 < n) {
            if (h[i + 1] == 'u' && i + 5 < n && memcmp(h + i + 2, "0000", 4) == 0)
                return i;
            i++; /* the escaped character */
        }
    }
    return SIZE_MAX;
}

static sp_status parse_header(sp_safetensors *st, const unsigned char *data, size_t len,
                              const char *what, sp_error *err)
{
    if (len < 8)
        return sp_err(err, SP_ERR_FORMAT, "%s: file is %zu bytes, too small for a header", what,
                      len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | data[i];
    if (n > SP_ST_MAX_HEADER_BYTES)
        return sp_err(err, SP_ERR_FORMAT, "%s: header length %llu exceeds the %llu-byte limit",
                      what, (unsigned long long)n, SP_ST_MAX_HEADER_BYTES);
    if (8 + n > len)
        return sp_err(err, SP_ERR_FORMAT,
                      "%s: header length %llu runs past the end of the %zu-byte file", what,
                      (unsigned long long)n, len);
    const char *hdr = (const char *)data + 8;
    size_t bad;
    if (!sp_utf8_valid(hdr, (size_t)n, &bad))
        return sp_err(err, SP_ERR_FORMAT, "%s: header is not valid UTF-8 (byte %zu)", what, bad);
    /* the format: the header is a JSON object, so it begins with '{' (no BOM, no leading
     * space), and a name holding an escaped NUL would be cut short by every C API */
    if (n == 0 || hdr[0] != '{')
        return sp_err(err, SP_ERR_FORMAT, "%s: header is not a JSON object (it must begin with '{')", what);
    size_t nul_at = find_escaped_nul(hdr, (size_t)n);
    if (nul_at != SIZE_MAX)
        return sp_err(err, SP_ERR_FORMAT, "%s: header holds an escaped NUL (\\u0000) at byte %zu", what,
                      nul_at);
    cJSON *root;
    sp_status status = sp_json_parse(hdr, (size_t)n, what, &root, err);
    if (status != SP_OK)
        return status;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return sp_err(err, SP_ERR_FORMAT, "%s: header is not a JSON object", what);
    }
    size_t count = 0;
    for (const cJSON *e = root->child; e; e = e->next)
        count++;
    st->tensors = calloc(count ? count : 1, sizeof *st->tensors);
    if (!st->tensors) {
        cJSON_Delete(root);
        return sp_err(err, SP_ERR_NOMEM, "%s: out of memory", what);
    }
    for (const cJSON *e = root->child; e && status == SP_OK; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            status = check_metadata(e, what, err);
            continue;
        }
        if (!e->string[0]) {
            status = sp_err(err, SP_ERR_FORMAT, "%s: a tensor has an empty name", what);
            break;
        }
        sp_st_tensor *t = &st->tensors[st->n_tensors];
        t->name = strdup(e->string);
        if (!t->name) {
            status = sp_err(err, SP_ERR_NOMEM, "%s: out of memory", what);
            break;
        }
        st->n_tensors++;
        uint64_t b = 0, en = 0;
        status = parse_entry(e, what, t, &b, &en, err);
        t->data = (const unsigned char *)(uintptr_t)b;
        t->n_bytes = (size_t)(en - b);
    }
    cJSON_Delete(root);
    if (status != SP_OK)
        return status;
    qsort(st->tensors, st->n_tensors, sizeof *st->tensors, cmp_by_name);
    for (size_t i = 1; i < st->n_tensors; i++)
        if (strcmp(st->tensors[i - 1].name, st->tensors[i].name) == 0)
            return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s' appears twice in the header", what,
                          st->tensors[i].name);
    return check_layout(st, data + 8 + n, len - 8 - n, what, err);
}

void sp_safetensors_close(sp_safetensors *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->n_tensors; i++)
        free(st->tensors[i].name);
    free(st->tensors);
    sp_mapped_file_close(&st->file);
    free(st);
}

sp_status sp_safetensors_parse(const unsigned char *data, size_t n_bytes, const char *what,
                               sp_safetensors **out, sp_error *err)
{
    *out = NULL;
    sp_safetensors *st = calloc(1, sizeof *st);
    if (!st)
        return sp_err(err, SP_ERR_NOMEM, "%s: out of memory", what);
    st->path = what;
    sp_status status = parse_header(st, data, n_bytes, what, err);
    if (status != SP_OK) {
        sp_safetensors_close(st);
        return status;
    }
    *out = st;
    return SP_OK;
}

sp_status sp_safetensors_open(const char *path, sp_safetensors **out, sp_error *err)
{
    *out = NULL;
    sp_safetensors *st = calloc(1, sizeof *st);
    if (!st)
        return sp_err(err, SP_ERR_NOMEM, "%s: out of memory", path);
    sp_status status = sp_mapped_file_open(path, &st->file, err);
    if (status == SP_OK) {
        st->path = st->file.path;
        status = parse_header(st, st->file.data, st->file.n_bytes, st->file.path, err);
    }
    if (status != SP_OK) {
        sp_safetensors_close(st);
        return status;
    }
    *out = st;
    return SP_OK;
}

const sp_st_tensor *sp_safetensors_find(const sp_safetensors *st, const char *name)
{
    size_t lo = 0, hi = st->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->tensors[mid].name, name);
        if (c == 0)
            return &st->tensors[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}
