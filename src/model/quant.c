/* quant.c: quantization configs and packed-tensor binding (see quant.h). */
#include "model/quant.h"
#include "util/dtype.h"
#include "util/error.h"
#include "util/fileio.h"
#include "util/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUPPORTED "mxfp4; modelopt NVFP4 / W4A16_NVFP4; compressed-tensors nvfp4-pack-quantized; " \
                  "fp8 with 128x128 weight blocks"

const char *sp_quant_method_name(sp_quant_method m)
{
    switch (m) {
    case SP_QUANT_NONE: return "none";
    case SP_QUANT_MXFP4: return "MXFP4 (gpt-oss fused experts or per matrix)";
    case SP_QUANT_NVFP4_MODELOPT: return "NVFP4 (ModelOpt)";
    case SP_QUANT_NVFP4_CT: return "NVFP4 (compressed-tensors)";
    case SP_QUANT_FP8_BLOCK: return "FP8 E4M3, 128x128 block scales";
    }
    return "?";
}

void sp_quant_free(sp_quant *q)
{
    for (size_t i = 0; i < q->n_input_scales; i++)
        free(q->input_scales[i].tensor);
    free(q->input_scales);
    free(q->algo);
    memset(q, 0, sizeof *q);
}

static const char *str_field(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static sp_status set_algo(sp_quant *q, const char *algo, sp_error *err)
{
    free(q->algo);
    q->algo = strdup(algo ? algo : "");
    return q->algo ? SP_OK : sp_err(err, SP_ERR_NOMEM, "out of memory");
}

static sp_status modelopt_algo(sp_quant *q, const char *algo, const char *what, const char *field,
                               sp_error *err)
{
    if (!algo)
        return sp_err(err, SP_ERR_FORMAT, "%s: field '%s' is missing", what, field);
    if (strcmp(algo, "NVFP4") && strcmp(algo, "W4A16_NVFP4"))
        return sp_err(err, SP_ERR_UNSUPPORTED, "%s: field '%s': ModelOpt quant_algo '%s' is not "
                      "supported (supported: %s)", what, field, algo, SUPPORTED);
    q->method = SP_QUANT_NVFP4_MODELOPT;
    q->act_quant_declared = !strcmp(algo, "NVFP4");
    return set_algo(q, algo, err);
}

/* compressed-tensors: every declared format must be nvfp4-pack-quantized. */
static sp_status compressed_tensors(sp_quant *q, const cJSON *qc, const char *what, sp_error *err)
{
    const char *top = str_field(qc, "format");
    int n_nvfp4 = top && !strcmp(top, "nvfp4-pack-quantized");
    if (top && !n_nvfp4)
        return sp_err(err, SP_ERR_UNSUPPORTED, "%s: field 'quantization_config.format': "
                      "compressed-tensors format '%s' is not supported (supported: %s)", what, top,
                      SUPPORTED);
    const cJSON *groups = cJSON_GetObjectItemCaseSensitive(qc, "config_groups");
    for (const cJSON *g = groups ? groups->child : NULL; g; g = g->next) {
        const char *f = str_field(g, "format");
        if (f && strcmp(f, "nvfp4-pack-quantized"))
            return sp_err(err, SP_ERR_UNSUPPORTED, "%s: field 'quantization_config.config_groups.%s."
                          "format': '%s' is not supported (supported: %s)", what, g->string, f,
                          SUPPORTED);
        n_nvfp4 += f != NULL;
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(g, "weights");
        const cJSON *bits = cJSON_GetObjectItemCaseSensitive(w, "num_bits");
        const cJSON *gs = cJSON_GetObjectItemCaseSensitive(w, "group_size");
        const char *type = str_field(w, "type");
        if (w && (!cJSON_IsNumber(bits) || bits->valuedouble != 4 || !type || strcmp(type, "float") ||
                  !cJSON_IsNumber(gs) || gs->valuedouble != 16))
            return sp_err(err, SP_ERR_UNSUPPORTED, "%s: field 'quantization_config.config_groups.%s."
                          "weights': only 4-bit float weights in groups of 16 (NVFP4) are "
                          "supported", what, g->string);
        n_nvfp4 += w != NULL && !f;
        const cJSON *act = cJSON_GetObjectItemCaseSensitive(g, "input_activations");
        if (act && !cJSON_IsNull(act))
            q->act_quant_declared = true;
    }
    if (!n_nvfp4)
        return sp_err(err, SP_ERR_UNSUPPORTED, "%s: field 'quantization_config': a compressed-tensors "
                      "config without an nvfp4-pack-quantized group is not supported (supported: %s)",
                      what, SUPPORTED);
    q->method = SP_QUANT_NVFP4_CT;
    return set_algo(q, "nvfp4-pack-quantized", err);
}

static sp_status fp8_blocks(sp_quant *q, const cJSON *qc, const char *what, sp_error *err)
{
    const cJSON *bs = cJSON_GetObjectItemCaseSensitive(qc, "weight_block_size");
    if (!cJSON_IsArray(bs) || cJSON_GetArraySize(bs) != 2 ||
        !cJSON_IsNumber(cJSON_GetArrayItem(bs, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(bs, 1)) ||
        cJSON_GetArrayItem(bs, 0)->valuedouble != 128 || cJSON_GetArrayItem(bs, 1)->valuedouble != 128)
        return sp_err(err, SP_ERR_UNSUPPORTED, "%s: field 'quantization_config.weight_block_size': "
                      "only FP8 with [128, 128] weight blocks is supported", what);
    const char *fmt = str_field(qc, "fmt");
    if (fmt && strcmp(fmt, "e4m3"))
        return sp_err(err, SP_ERR_UNSUPPORTED, "%s: field 'quantization_config.fmt': FP8 format '%s' "
                      "is not supported (only e4m3)", what, fmt);
    q->method = SP_QUANT_FP8_BLOCK;
    return set_algo(q, "fp8 e4m3 [128, 128]", err);
}

static sp_status from_config(sp_quant *q, const cJSON *qc, const char *what, sp_error *err)
{
    if (!cJSON_IsObject(qc))
        return sp_err(err, SP_ERR_FORMAT, "%s: field 'quantization_config' is not an object", what);
    const char *method = str_field(qc, "quant_method");
    if (!method)
        return sp_err(err, SP_ERR_FORMAT, "%s: field 'quantization_config.quant_method' is missing "
                      "or not a string", what);
    if (!strcmp(method, "mxfp4")) {
        q->method = SP_QUANT_MXFP4;
        return set_algo(q, "mxfp4", err);
    }
    if (!strcmp(method, "modelopt"))
        return modelopt_algo(q, str_field(qc, "quant_algo"), what, "quantization_config.quant_algo", err);
    if (!strcmp(method, "compressed-tensors"))
        return compressed_tensors(q, qc, what, err);
    if (!strcmp(method, "fp8"))
        return fp8_blocks(q, qc, what, err);
    return sp_err(err, SP_ERR_UNSUPPORTED, "%s: field 'quantization_config.quant_method': '%s' is "
                  "not supported (supported: %s)", what, method, SUPPORTED);
}

sp_status sp_quant_load(sp_quant *q, const cJSON *config, const char *config_path,
                        const char *dir, sp_error *err)
{
    memset(q, 0, sizeof *q);
    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(config, "quantization_config");
    if (qc && !cJSON_IsNull(qc)) {
        q->source = "config.json";
        return from_config(q, qc, config_path, err);
    }
    char *path = sp_path_join(dir, "hf_quant_config.json");
    if (!path)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    sp_status st = SP_OK;
    if (sp_file_exists(path)) {
        cJSON *j;
        st = sp_json_parse_file(path, 1u << 20, &j, err);
        if (st == SP_OK) {
            const cJSON *qz = cJSON_GetObjectItemCaseSensitive(j, "quantization");
            if (!cJSON_IsObject(qz))
                st = sp_err(err, SP_ERR_FORMAT, "%s: field 'quantization' is missing or not an "
                            "object", path);
            else
                st = modelopt_algo(q, str_field(qz, "quant_algo"), path, "quantization.quant_algo", err);
            q->source = "hf_quant_config.json";
            cJSON_Delete(j);
        }
    }
    free(path);
    return st;
}

/* ---- binding -------------------------------------------------------------------------- */

static sp_status record_input_scale(sp_quant *q, const char *name, float v, sp_error *err)
{
    if (q->n_input_scales == q->cap_input_scales) {
        size_t cap = q->cap_input_scales ? 2 * q->cap_input_scales : 64;
        sp_input_scale *p = realloc(q->input_scales, cap * sizeof *p);
        if (!p)
            return sp_err(err, SP_ERR_NOMEM, "out of memory");
        q->input_scales = p;
        q->cap_input_scales = cap;
    }
    char *n = strdup(name);
    if (!n)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    q->input_scales[q->n_input_scales++] = (sp_input_scale){n, v};
    return SP_OK;
}

static void shape_text(const sp_st_tensor *t, char *buf, size_t n)
{
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->n_dims && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (o < n)
        snprintf(buf + o, n - o, "]");
}

static bool shape_is(const sp_st_tensor *t, int n, const int64_t *dims)
{
    if (t->n_dims != n)
        return false;
    for (int i = 0; i < n; i++)
        if (t->shape[i] != dims[i])
            return false;
    return true;
}

static sp_status bad_shape(const char *file, const sp_st_tensor *t, int n, const int64_t *dims,
                           const char *why, sp_error *err)
{
    char got[96], want[96];
    shape_text(t, got, sizeof got);
    size_t o = (size_t)snprintf(want, sizeof want, "[");
    for (int i = 0; i < n && o < sizeof want; i++)
        o += (size_t)snprintf(want + o, sizeof want - o, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (o < sizeof want)
        snprintf(want + o, sizeof want - o, "]");
    return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s' has shape %s; expected %s (%s)", file, t->name,
                  got, want, why);
}

/* A tensor that must exist with one of two dtypes. */
/* `near` names the file of the tensor this one belongs with (NULL when there is none). */
static sp_status need(sp_tensor_lookup find, void *ctx, const char *near, const char *name, sp_dtype dt,
                      sp_dtype dt2, const char *why, const sp_st_tensor **t, const char **file, sp_error *err)
{
    *t = find(ctx, name, file);
    if (!*t && near)
        return sp_err(err, SP_ERR_FORMAT, "%s: required tensor '%s' (%s) is missing from the checkpoint",
                      near, name, why);
    if (!*t)
        return sp_err(err, SP_ERR_FORMAT, "required tensor '%s' (%s) is missing from the checkpoint",
                      name, why);
    if ((*t)->dtype != dt && (*t)->dtype != dt2)
        return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s' has dtype %s; expected %s (%s)", *file,
                      name, sp_dtype_name((*t)->dtype), sp_dtype_name(dt), why);
    return SP_OK;
}

/* One float from a one-element F32/BF16/F16 tensor. */
static sp_status scalar(const sp_st_tensor *t, const char *file, float *v, sp_error *err)
{
    if (t->n_elements != 1)
        return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s' has %llu elements; expected a scalar",
                      file, t->name, (unsigned long long)t->n_elements);
    uint16_t h;
    switch (t->dtype) {
    case SP_DTYPE_F32: memcpy(v, t->data, 4); break;
    case SP_DTYPE_BF16: memcpy(&h, t->data, 2); *v = sp_bf16_to_f32(h); break;
    case SP_DTYPE_F16: memcpy(&h, t->data, 2); *v = sp_f16_to_f32(h); break;
    default:
        return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s' has dtype %s; expected F32", file,
                      t->name, sp_dtype_name(t->dtype));
    }
    return SP_OK;
}

/* A packed matrix's view: rows of row_bytes at data, scale rows of scale_row_bytes. */
static sp_weight packed_view(sp_wformat f, int64_t rows, int64_t cols, const unsigned char *data,
                             size_t row_bytes, const unsigned char *scales, size_t scale_row_bytes,
                             float global_scale, const char *name)
{
    return (sp_weight){.format = f, .rows = rows, .cols = cols, .data = data, .row_bytes = row_bytes,
                       .scales = scales, .scale_row_bytes = scale_row_bytes,
                       .global_scale = global_scale, .name = name};
}

/* An FP4 code tensor of a rows x cols matrix: cols a multiple of the scale block, shape
 * [rows, cols / 2] (two E2M1 codes a byte). */
static sp_status fp4_codes_shape(const char *file, const sp_st_tensor *t, int64_t rows, int64_t cols,
                                 int64_t block, const char *what, sp_error *err)
{
    if (cols % block)
        return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s': %s needs an input width divisible by "
                      "%lld, config.json implies %lld", file, t->name, what, (long long)block,
                      (long long)cols);
    int64_t dims[2] = {rows, cols / 2};
    if (!shape_is(t, 2, dims))
        return bad_shape(file, t, 2, dims, "two E2M1 codes a byte", err);
    return SP_OK;
}

static sp_status bind_nvfp4(sp_quant *q, sp_tensor_lookup find, void *ctx, const char *base,
                            const sp_st_tensor *t, const char *file, int64_t rows, int64_t cols,
                            sp_weight *out, sp_error *err)
{
    bool ct = q->method == SP_QUANT_NVFP4_CT;
    char n[512];
    sp_status st = fp4_codes_shape(file, t, rows, cols, SP_NVFP4_BLOCK, "NVFP4", err);
    if (st != SP_OK)
        return st;
    const sp_st_tensor *s, *g;
    const char *sf, *gf;
    snprintf(n, sizeof n, "%s.weight_scale", base);
    st = need(find, ctx, file, n, SP_DTYPE_F8_E4M3, SP_DTYPE_F8_E4M3, "NVFP4 block scales", &s, &sf, err);
    if (st != SP_OK)
        return st;
    int64_t sdims[2] = {rows, cols / SP_NVFP4_BLOCK};
    if (!shape_is(s, 2, sdims))
        return bad_shape(sf, s, 2, sdims, "one E4M3 scale per 16 inputs", err);
    snprintf(n, sizeof n, "%s.%s", base, ct ? "weight_global_scale" : "weight_scale_2");
    g = find(ctx, n, &gf);
    if (!g)
        return sp_err(err, SP_ERR_FORMAT, "%s: required tensor '%s' (NVFP4 per-tensor scale) is missing "
                      "from the checkpoint", file, n);
    float gv;
    if ((st = scalar(g, gf, &gv, err)))
        return st;
    if (!(gv > 0) || !isfinite(gv))
        return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s' = %g; a per-tensor scale must be "
                      "positive and finite", gf, n, (double)gv);
    /* ModelOpt stores a multiplier, compressed-tensors its reciprocal */
    if (ct && !isfinite(1.0f / gv))
        return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s' = %g; its reciprocal overflows a float", gf, n,
                      (double)gv);
    *out = packed_view(SP_WF_NVFP4, rows, cols, t->data, (size_t)cols / 2, s->data,
                       (size_t)cols / SP_NVFP4_BLOCK, ct ? 1.0f / gv : gv, t->name);
    q->packed_bytes += t->n_bytes + s->n_bytes + g->n_bytes;
    const sp_st_tensor *in;
    const char *inf;
    snprintf(n, sizeof n, "%s.%s", base, ct ? "input_global_scale" : "input_scale");
    if ((in = find(ctx, n, &inf))) {
        float iv;
        if ((st = scalar(in, inf, &iv, err)) || (st = record_input_scale(q, n, iv, err)))
            return st;
    }
    return SP_OK;
}

static sp_status bind_fp8(sp_quant *q, sp_tensor_lookup find, void *ctx, const char *base,
                          const sp_st_tensor *t, const char *file, int64_t rows, int64_t cols,
                          sp_weight *out, sp_error *err)
{
    int64_t dims[2] = {rows, cols};
    if (!shape_is(t, 2, dims))
        return bad_shape(file, t, 2, dims, "config.json", err);
    char n[512];
    snprintf(n, sizeof n, "%s.weight_scale_inv", base);
    const sp_st_tensor *s;
    const char *sf;
    sp_status st = need(find, ctx, file, n, SP_DTYPE_F32, SP_DTYPE_F32, "FP8 128x128 block scales", &s, &sf, err);
    if (st != SP_OK)
        return st;
    int64_t sdims[2] = {(rows + SP_FP8_BLOCK - 1) / SP_FP8_BLOCK, (cols + SP_FP8_BLOCK - 1) / SP_FP8_BLOCK};
    if (!shape_is(s, 2, sdims))
        return bad_shape(sf, s, 2, sdims, "one scale per 128x128 block", err);
    *out = packed_view(SP_WF_FP8_BLOCK, rows, cols, t->data, (size_t)cols, s->data,
                       4 * (size_t)sdims[1], 1.0f, t->name);
    q->packed_bytes += t->n_bytes + s->n_bytes;
    return SP_OK;
}

/* One matrix in MXFP4 (quant_method mxfp4, a per-matrix tensor rather than gpt-oss's
 * fused experts): `base`.weight U8 or I8 [rows, cols/2], two E2M1 codes a byte (the even
 * column in the low nibble, as gpt-oss's blocks), and one UE8M0 scale per 32 columns in
 * `base`.weight_scale or `base`.scale (U8 or F8_E8M0 [rows, cols/32]). */
static sp_status bind_mxfp4(sp_quant *q, sp_tensor_lookup find, void *ctx, const char *base,
                            const sp_st_tensor *t, const char *file, int64_t rows, int64_t cols,
                            sp_weight *out, sp_error *err)
{
    sp_status st = fp4_codes_shape(file, t, rows, cols, SP_MXFP4_BLOCK, "MXFP4", err);
    if (st != SP_OK)
        return st;
    char n[512];
    snprintf(n, sizeof n, "%s.weight_scale", base);
    if (!find(ctx, n, NULL))
        snprintf(n, sizeof n, "%s.scale", base);
    const sp_st_tensor *s;
    const char *sf;
    st = need(find, ctx, file, n, SP_DTYPE_U8, SP_DTYPE_F8_E8M0,
              "MXFP4 UE8M0 scales, as .weight_scale or .scale", &s, &sf, err);
    if (st != SP_OK)
        return st;
    int64_t sdims[2] = {rows, cols / SP_MXFP4_BLOCK};
    if (!shape_is(s, 2, sdims))
        return bad_shape(sf, s, 2, sdims, "one scale per block of 32", err);
    *out = packed_view(SP_WF_MXFP4, rows, cols, t->data, (size_t)cols / 2, s->data,
                       (size_t)cols / SP_MXFP4_BLOCK, 1.0f, t->name);
    q->packed_bytes += t->n_bytes + s->n_bytes;
    return SP_OK;
}

sp_status sp_quant_bind(sp_quant *q, sp_tensor_lookup find, void *ctx, const char *base,
                        const sp_st_tensor *t, const char *file, int64_t rows, int64_t cols,
                        sp_weight *out, sp_error *err)
{
    sp_status st;
    if ((t->dtype == SP_DTYPE_U8 || t->dtype == SP_DTYPE_I8) && q->method == SP_QUANT_MXFP4) {
        st = bind_mxfp4(q, find, ctx, base, t, file, rows, cols, out, err);
    } else if (t->dtype == SP_DTYPE_U8) {
        if (q->method != SP_QUANT_NVFP4_MODELOPT && q->method != SP_QUANT_NVFP4_CT)
            return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s' is U8 (packed FP4) but the "
                          "checkpoint's quantization config is %s; an NVFP4 checkpoint declares "
                          "quant_algo NVFP4 (ModelOpt) or format nvfp4-pack-quantized "
                          "(compressed-tensors)", file, t->name, q->method ? q->algo : "absent");
        st = bind_nvfp4(q, find, ctx, base, t, file, rows, cols, out, err);
    } else if (t->dtype == SP_DTYPE_F8_E4M3) {
        if (q->method != SP_QUANT_FP8_BLOCK)
            return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s' is F8_E4M3 but the checkpoint's "
                          "quantization config is %s; expected quant_method fp8 with 128x128 "
                          "weight blocks", file, t->name, q->method ? q->algo : "absent");
        st = bind_fp8(q, find, ctx, base, t, file, rows, cols, out, err);
    } else {
        return sp_err(err, SP_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; expected F32, BF16, "
                      "F16 or a quantized format (%s)", file, t->name, sp_dtype_name(t->dtype),
                      SUPPORTED);
    }
    if (st == SP_OK)
        q->n_quantized++;
    return st;
}

sp_status sp_quant_bind_mxfp4_expert(sp_quant *q, sp_tensor_lookup find, void *ctx,
                                     const char *base, int64_t n_experts, int64_t e, int64_t rows,
                                     int64_t cols, sp_weight *out, sp_error *err)
{
    char n[512];
    const sp_st_tensor *b, *s;
    const char *bf, *sf;
    /* the blocks first: their file names every later message */
    snprintf(n, sizeof n, "%s_blocks", base);
    sp_status st = need(find, ctx, NULL, n, SP_DTYPE_U8, SP_DTYPE_U8, "MXFP4 blocks", &b, &bf, err);
    if (st != SP_OK)
        return st;
    if (q->method != SP_QUANT_MXFP4)
        return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s' holds MXFP4 blocks but config.json "
                      "declares %s; expected quantization_config.quant_method \"mxfp4\"", bf, n,
                      q->method ? q->algo : "no quantization_config");
    if (cols % SP_MXFP4_BLOCK)
        return sp_err(err, SP_ERR_FORMAT, "%s: tensor '%s': MXFP4 needs an input width divisible "
                      "by %d, config.json implies %lld", bf, n, SP_MXFP4_BLOCK, (long long)cols);
    int64_t bd[4] = {n_experts, rows, cols / SP_MXFP4_BLOCK, SP_MXFP4_BLOCK_BYTES};
    if (!shape_is(b, 4, bd))
        return bad_shape(bf, b, 4, bd, "[experts, rows, blocks of 32, 16 bytes]", err);
    snprintf(n, sizeof n, "%s_scales", base);
    if ((st = need(find, ctx, bf, n, SP_DTYPE_U8, SP_DTYPE_F8_E8M0, "MXFP4 UE8M0 scales", &s, &sf, err)))
        return st;
    int64_t sd[3] = {n_experts, rows, cols / SP_MXFP4_BLOCK};
    if (!shape_is(s, 3, sd))
        return bad_shape(sf, s, 3, sd, "one scale per block of 32", err);
    const size_t rb = (size_t)cols / 2, sb = (size_t)cols / SP_MXFP4_BLOCK;
    *out = packed_view(SP_WF_MXFP4, rows, cols, b->data + (size_t)e * (size_t)rows * rb, rb,
                       s->data + (size_t)e * (size_t)rows * sb, sb, 1.0f, b->name);
    if (e == 0) {
        q->packed_bytes += b->n_bytes + s->n_bytes;
        q->n_quantized++;
    }
    return SP_OK;
}
