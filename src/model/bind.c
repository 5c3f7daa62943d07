/* bind.c: checked binding of checkpoint tensors (see bind.h). */
#include "model/bind.h"
#include "util/dtype.h"
#include "util/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *sp_name(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    return buf;
}

static void shape_str(const sp_st_tensor *t, char *buf, size_t n)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < t->n_dims && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (o < n)
        snprintf(buf + o, n - o, "]");
}

static sp_wformat dense_format(sp_dtype dt)
{
    switch (dt) {
    case SP_DTYPE_F32: return SP_WF_F32;
    case SP_DTYPE_BF16: return SP_WF_BF16;
    case SP_DTYPE_F16: return SP_WF_F16;
    default: return SP_WF_NONE;
    }
}

static sp_status find(sp_model *m, const char *name, bool required, const sp_st_tensor **t,
                      const char **file, sp_error *err)
{
    *t = sp_checkpoint_find(m->ckpt, name, file);
    if (!*t && required)
        return sp_err(err, SP_ERR_FORMAT, "%s: required tensor '%s' is missing", m->dir, name);
    return SP_OK;
}

static const sp_st_tensor *lookup(void *ctx, const char *name, const char **file)
{
    return sp_checkpoint_find(((sp_model *)ctx)->ckpt, name, file);
}

/* A matrix stored in a quantized format: name is "<base>.weight" (or compressed-tensors'
 * "<base>.weight_packed"). */
static sp_status bind_quantized(sp_model *m, const char *name, const sp_st_tensor *t,
                                const char *file, int64_t rows, int64_t cols, sp_weight *out,
                                sp_error *err)
{
    char base[512];
    size_t n = strlen(name);
    const char *suffix = n > 14 && !strcmp(name + n - 14, ".weight_packed") ? ".weight_packed" : ".weight";
    size_t sl = strlen(suffix);
    if (n <= sl || strcmp(name + n - sl, suffix) || n - sl >= sizeof base)
        return sp_err(err, SP_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; expected F32, BF16 or F16",
                      file, t->name, sp_dtype_name(t->dtype));
    memcpy(base, name, n - sl);
    base[n - sl] = '\0';
    uint64_t before = m->quant.packed_bytes;
    sp_status st = sp_quant_bind(&m->quant, lookup, m, base, t, file, rows, cols, out, err);
    if (st == SP_OK)
        m->weight_bytes += m->quant.packed_bytes - before;
    return st;
}

static sp_status bad_dtype(const char *file, const sp_st_tensor *t, sp_error *err)
{
    return sp_err(err, SP_ERR_UNSUPPORTED,
                  "%s: tensor '%s' has dtype %s; expected F32, BF16 or F16 (quantized weights "
                  "need a quantization_config)",
                  file, t->name, sp_dtype_name(t->dtype));
}

sp_status sp_bind_matrix(sp_model *m, const char *name, int64_t rows, int64_t cols,
                         bool required, sp_weight *out, sp_error *err)
{
    memset(out, 0, sizeof *out);
    const sp_st_tensor *t;
    const char *file;
    char packed[512];
    size_t nl = strlen(name);
    t = sp_checkpoint_find(m->ckpt, name, &file);
    if (!t && m->quant.method == SP_QUANT_NVFP4_CT && nl > 7 && nl < sizeof packed - 8 &&
        !strcmp(name + nl - 7, ".weight")) {
        snprintf(packed, sizeof packed, "%s_packed", name);
        if ((t = sp_checkpoint_find(m->ckpt, packed, &file)))
            name = packed;
    }
    if (!t)
        return required ? sp_err(err, SP_ERR_FORMAT, "%s: required tensor '%s' is missing", m->dir, name)
                        : SP_OK;
    sp_wformat f = dense_format(t->dtype);
    if (f == SP_WF_NONE)
        return bind_quantized(m, name, t, file, rows, cols, out, err);
    if (t->n_dims != 2 || t->shape[0] != rows || t->shape[1] != cols) {
        char got[128];
        shape_str(t, got, sizeof got);
        return sp_err(err, SP_ERR_FORMAT,
                      "%s: tensor '%s' has shape %s; config.json implies [%lld, %lld]", file, name,
                      got, (long long)rows, (long long)cols);
    }
    out->format = f;
    out->rows = rows;
    out->cols = cols;
    out->data = t->data;
    out->row_bytes = (size_t)cols * (sp_dtype_bits(t->dtype) / 8);
    out->global_scale = 1.0f;
    out->name = t->name;
    m->weight_bytes += t->n_bytes;
    return SP_OK;
}

sp_status sp_bind_matrix_slice(sp_model *m, const char *name, int64_t n, int64_t index,
                               int64_t rows, int64_t cols, sp_weight *out, sp_error *err)
{
    memset(out, 0, sizeof *out);
    const sp_st_tensor *t;
    const char *file;
    sp_status st = find(m, name, true, &t, &file, err);
    if (st != SP_OK)
        return st;
    sp_wformat f = dense_format(t->dtype);
    if (f == SP_WF_NONE)
        return bad_dtype(file, t, err);
    if (t->n_dims != 3 || t->shape[0] != n || t->shape[1] != rows || t->shape[2] != cols) {
        char got[128];
        shape_str(t, got, sizeof got);
        return sp_err(err, SP_ERR_FORMAT,
                      "%s: tensor '%s' has shape %s; config.json implies [%lld, %lld, %lld]", file,
                      name, got, (long long)n, (long long)rows, (long long)cols);
    }
    out->format = f;
    out->rows = rows;
    out->cols = cols;
    out->row_bytes = (size_t)cols * (sp_dtype_bits(t->dtype) / 8);
    out->data = t->data + (size_t)index * (size_t)rows * out->row_bytes;
    out->global_scale = 1.0f;
    out->name = t->name;
    if (index == 0)
        m->weight_bytes += t->n_bytes;
    return SP_OK;
}

static float *own(sp_model *m, size_t n, sp_error *err)
{
    if (m->n_owned == m->cap_owned) {
        size_t cap = m->cap_owned ? m->cap_owned * 2 : 64;
        float **p = realloc(m->owned, cap * sizeof *p);
        if (p)
            m->owned = p;
        size_t *q = p ? realloc(m->owned_n, cap * sizeof *q) : NULL;
        if (!q) {
            sp_err(err, SP_ERR_NOMEM, "out of memory");
            return NULL;
        }
        m->owned_n = q;
        m->cap_owned = cap;
    }
    float *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) {
        sp_err(err, SP_ERR_NOMEM, "out of memory");
        return NULL;
    }
    m->owned_n[m->n_owned] = n;
    m->owned[m->n_owned++] = v;
    return v;
}

static sp_status convert(const sp_st_tensor *t, const char *file, float *v, size_t n,
                         sp_error *err)
{
    const unsigned char *d = t->data;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        switch (t->dtype) {
        case SP_DTYPE_F32: memcpy(&v[i], d + 4 * i, 4); break;
        case SP_DTYPE_BF16:
            memcpy(&h, d + 2 * i, 2);
            v[i] = sp_bf16_to_f32(h);
            break;
        case SP_DTYPE_F16:
            memcpy(&h, d + 2 * i, 2);
            v[i] = sp_f16_to_f32(h);
            break;
        default: return bad_dtype(file, t, err);
        }
    }
    return SP_OK;
}

sp_status sp_bind_vector2(sp_model *m, const char *name, int64_t n_outer, int64_t n,
                          bool required, const float **out, sp_error *err)
{
    *out = NULL;
    const sp_st_tensor *t;
    const char *file;
    sp_status st = find(m, name, required, &t, &file, err);
    if (st != SP_OK || !t)
        return st;
    bool ok = n_outer > 0 ? (t->n_dims == 2 && t->shape[0] == n_outer && t->shape[1] == n)
                          : (t->n_dims == 1 && t->shape[0] == n);
    if (!ok) {
        char got[128];
        shape_str(t, got, sizeof got);
        if (n_outer > 0)
            return sp_err(err, SP_ERR_FORMAT,
                          "%s: tensor '%s' has shape %s; config.json implies [%lld, %lld]", file,
                          name, got, (long long)n_outer, (long long)n);
        return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s' has shape %s; config.json implies [%lld]",
                      file, name, got, (long long)n);
    }
    size_t count = (size_t)(n_outer > 0 ? n_outer : 1) * (size_t)n;
    float *v = own(m, count, err);
    if (!v)
        return sp_err(err, SP_ERR_NOMEM, "out of memory converting '%s'", name);
    st = convert(t, file, v, count, err);
    if (st == SP_OK)
        *out = v;
    return st;
}

sp_status sp_bind_vector(sp_model *m, const char *name, int64_t n, bool required,
                         const float **out, sp_error *err)
{
    return sp_bind_vector2(m, name, 0, n, required, out, err);
}
