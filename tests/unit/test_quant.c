/* test_quant.c: quantized weights and the MoE pieces the parity fixtures cannot isolate.
 *
 *  - column-dependent FP4 weights: every (row, column) gets a different code and every
 *    block a different scale, so a nibble-order, block-order or scale-indexing mistake
 *    shows up as a wrong column (decoder, fast matmul and one-hot extraction agree);
 *  - FP8 128x128 block scales with partial edge blocks, through row views;
 *  - the transposed product (gpt-oss unquantized experts, MLA absorption) against its
 *    reference, and invariant to threads and batch;
 *  - routing on hand-made logits (ties, group masking, renormalization, scaling);
 *  - expert tables at equal steps (sp_expert_steps_of): found, and refused for any entry
 *    off its step, of another shape, input-major, or with a bias where others have none;
 *  - bad quantized checkpoints: mismatched blocks/scales, wrong scale dtype, unknown
 *    quant_method, packed weights without a config: clear errors naming the tensor. */
#include "test_util.h"
#include "backend/backend.h"
#include "format/safetensors.h"
#include "kernels/cpu/matmul.h"
#include "model/moe_route.h"
#include "util/dtype.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static const float E2M1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};

/* code(r, c) differs along rows and columns; scales differ per block. */
static unsigned code_at(int64_t r, int64_t c) { return (unsigned)((r * 7 + c * 3 + c / 5) % 16); }

static void make_fp4(sp_wformat f, int64_t rows, int64_t cols, sp_weight *w, unsigned char **data,
                     unsigned char **scales)
{
    int64_t bs = f == SP_WF_MXFP4 ? 32 : 16;
    *data = calloc((size_t)(rows * cols / 2), 1);
    *scales = calloc((size_t)(rows * cols / bs), 1);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            unsigned char *b = *data + r * cols / 2 + c / 2;
            *b |= (unsigned char)(code_at(r, c) << (c % 2 ? 4 : 0)); /* low nibble = even */
        }
    for (int64_t i = 0; i < rows * cols / bs; i++) /* MXFP4: 2^(s-127); NVFP4: E4M3 codes */
        (*scales)[i] = f == SP_WF_MXFP4 ? (unsigned char)(120 + i % 13) : (unsigned char)(40 + (i * 11) % 60);
    memset(w, 0, sizeof *w);
    w->format = f;
    w->rows = rows;
    w->cols = cols;
    w->data = *data;
    w->row_bytes = (size_t)cols / 2;
    w->scales = *scales;
    w->scale_row_bytes = (size_t)(cols / bs);
    w->global_scale = f == SP_WF_NVFP4 ? 0.375f : 1.0f;
}

static float expected_fp4(const sp_weight *w, int64_t r, int64_t c)
{
    int64_t bs = w->format == SP_WF_MXFP4 ? 32 : 16;
    uint8_t s = w->scales[r * w->scale_row_bytes + c / bs];
    float scale = w->format == SP_WF_MXFP4 ? ldexpf(1.0f, (int)s - 127) : sp_e4m3_to_f32(s) * w->global_scale;
    return E2M1[code_at(r, c)] * scale;
}

static void test_fp4_column_dependent(void **state)
{
    (void)state;
    sp_pool *pool;
    assert_int_equal(sp_pool_new(3, &pool, NULL), SP_OK);
    sp_wformat fmts[] = {SP_WF_MXFP4, SP_WF_NVFP4};
    for (int fi = 0; fi < 2; fi++) {
        int64_t rows = 24, cols = 96;
        sp_weight w;
        unsigned char *d, *s;
        make_fp4(fmts[fi], rows, cols, &w, &d, &s);
        float *x = calloc((size_t)cols, sizeof(float)), *y = malloc((size_t)rows * sizeof(float));
        for (int64_t c = 0; c < cols; c++) {
            for (int64_t r = 0; r < rows; r++)
                if (sp_weight_at(&w, r, c) != expected_fp4(&w, r, c))
                    fail_msg("%s decoder: (%lld, %lld) = %g, want %g", sp_wformat_name(w.format),
                             (long long)r, (long long)c, sp_weight_at(&w, r, c), expected_fp4(&w, r, c));
            memset(x, 0, (size_t)cols * sizeof(float));
            x[c] = 1.0f; /* one-hot input extracts column c through the fast kernel */
            sp_matmul(pool, &w, x, 1, y, NULL);
            for (int64_t r = 0; r < rows; r++)
                if (y[r] != expected_fp4(&w, r, c))
                    fail_msg("%s matmul: column %lld row %lld = %g, want %g", sp_wformat_name(w.format),
                             (long long)c, (long long)r, y[r], expected_fp4(&w, r, c));
        }
        /* random activations, several tokens: fast path vs reference */
        int64_t nt = 5;
        float *xs = malloc((size_t)(nt * cols) * sizeof(float));
        float *ys = malloc((size_t)(nt * rows) * sizeof(float)), *yr = malloc((size_t)(nt * rows) * sizeof(float));
        for (int64_t i = 0; i < nt * cols; i++)
            xs[i] = test_frand();
        sp_matmul(pool, &w, xs, nt, ys, NULL);
        sp_matmul_ref(&w, xs, nt, yr, NULL);
        assert_true(rel_l2(ys, yr, (size_t)(nt * rows)) < 1e-5);
        for (int64_t t = 0; t < nt; t++) {
            sp_matmul(NULL, &w, xs + t * cols, 1, y, NULL);
            assert_memory_equal(y, ys + t * rows, (size_t)rows * sizeof(float));
        }
        free(xs);
        free(ys);
        free(yr);
        free(x);
        free(y);
        free(d);
        free(s);
    }
    sp_pool_free(pool);
}

/* The bit-level scale decoders against their definitions, all 256 codes. */
static void test_scale_decoders_exhaustive(void **state)
{
    (void)state;
    for (int b = 0; b < 256; b++) {
        int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
        float want = e == 15 && m == 7 ? NAN : e == 0 ? (float)m / 512.0f : ldexpf(1.0f + (float)m / 8.0f, e - 7);
        if (s)
            want = -want;
        float got = sp_e4m3_to_f32((uint8_t)b);
        /* NaN-ness must match both ways; the sign is compared for numbers only (a NaN's
         * sign bit carries no meaning) */
        if (!isnan(got) != !isnan(want) || (!isnan(want) && (got != want || signbit(got) != signbit(want))))
            fail_msg("E4M3 0x%02x: %g, want %g", b, got, want);
        float want8 = b == 255 ? NAN : ldexpf(1.0f, b - 127), got8 = sp_e8m0_to_f32((uint8_t)b);
        if (!isnan(got8) != !isnan(want8) || (!isnan(want8) && got8 != want8))
            fail_msg("E8M0 0x%02x: %g, want %g", b, got8, want8);
    }
}

static void test_fp8_block_views(void **state)
{
    (void)state;
    int64_t rows = 200, cols = 150; /* partial blocks on both edges */
    unsigned char *d = malloc((size_t)(rows * cols));
    float sc[2][2] = {{0.5f, 0.125f}, {2.0f, 0.03125f}};
    for (int64_t i = 0; i < rows * cols; i++)
        d[i] = (unsigned char)((i * 37) % 256 == 127 || (i * 37) % 256 == 255 ? 1 : (i * 37) % 256);
    sp_weight w = {.format = SP_WF_FP8_BLOCK, .rows = rows, .cols = cols, .data = d,
                   .row_bytes = (size_t)cols, .scales = (const unsigned char *)sc,
                   .scale_row_bytes = 8, .global_scale = 1.0f};
    for (int64_t r = 0; r < rows; r += 7)
        for (int64_t c = 0; c < cols; c += 3)
            assert_true(sp_weight_at(&w, r, c) == sp_e4m3_to_f32(d[r * cols + c]) * sc[r / 128][c / 128]);
    sp_weight v = sp_weight_rows(&w, 100, 100);
    for (int64_t r = 0; r < 100; r++)
        for (int64_t c = 0; c < cols; c += 5)
            assert_true(sp_weight_at(&v, r, c) == sp_weight_at(&w, 100 + r, c));
    float x[150], y[100], yr[100];
    for (int i = 0; i < 150; i++)
        x[i] = test_frand();
    sp_matmul(NULL, &v, x, 1, y, NULL);
    sp_matmul_ref(&v, x, 1, yr, NULL);
    assert_true(rel_l2(y, yr, 100) < 1e-5);
    free(d);
}

static void test_matmul_transposed(void **state)
{
    (void)state;
    sp_pool *p1, *p3;
    assert_int_equal(sp_pool_new(1, &p1, NULL), SP_OK);
    assert_int_equal(sp_pool_new(3, &p3, NULL), SP_OK);
    int64_t rows = 70, cols = 301; /* cols % 8 != 0: vector groups plus a scalar tail */
    float *wf = malloc((size_t)(rows * cols) * sizeof(float));
    uint16_t *wb = malloc((size_t)(rows * cols) * sizeof(uint16_t));
    for (int64_t i = 0; i < rows * cols; i++) {
        wf[i] = test_frand();
        wb[i] = sp_f32_to_bf16(wf[i]);
    }
    sp_weight ws[2] = {
        {.format = SP_WF_F32, .rows = rows, .cols = cols, .data = (void *)wf, .row_bytes = 4 * (size_t)cols, .global_scale = 1},
        {.format = SP_WF_BF16, .rows = rows, .cols = cols, .data = (void *)wb, .row_bytes = 2 * (size_t)cols, .global_scale = 1},
    };
    int64_t nt = 6, row0 = 9, n_in = 50, xs = 64, ys = 320;
    float *x = malloc((size_t)(nt * xs) * sizeof(float)), *bias = malloc((size_t)cols * sizeof(float));
    float *y = calloc((size_t)(nt * ys), sizeof(float)), *yr = calloc((size_t)(nt * ys), sizeof(float));
    float *y3 = calloc((size_t)(nt * ys), sizeof(float)), *y1 = calloc((size_t)ys, sizeof(float));
    for (int64_t i = 0; i < nt * xs; i++)
        x[i] = test_frand();
    for (int64_t i = 0; i < cols; i++)
        bias[i] = test_frand();
    for (int k = 0; k < 2; k++) {
        sp_matmul_t(p1, &ws[k], row0, n_in, x, xs, nt, y, ys, bias);
        sp_matmul_t_ref(&ws[k], row0, n_in, x, xs, nt, yr, ys, bias);
        for (int64_t t = 0; t < nt; t++)
            assert_true(rel_l2(y + t * ys, yr + t * ys, (size_t)cols) < 1e-5);
        sp_matmul_t(p3, &ws[k], row0, n_in, x, xs, nt, y3, ys, bias);
        assert_memory_equal(y, y3, (size_t)(nt * ys) * sizeof(float));
        for (int64_t t = 0; t < nt; t++) {
            sp_matmul_t(p3, &ws[k], row0, n_in, x + t * xs, xs, 1, y1, ys, bias);
            assert_memory_equal(y1, y + t * ys, (size_t)cols * sizeof(float));
        }
    }
    free(wf);
    free(wb);
    free(x);
    free(bias);
    free(y);
    free(yr);
    free(y3);
    free(y1);
    sp_pool_free(p1);
    sp_pool_free(p3);
}

/* A table of n experts at equal steps (fake addresses: only their arithmetic is read). */
static void steps_table(sp_expert *t, int64_t n)
{
    memset(t, 0, (size_t)n * sizeof *t);
    for (int64_t e = 0; e < n; e++) {
        sp_weight w = {.format = SP_WF_MXFP4, .rows = 64, .cols = 96, .row_bytes = 48,
                       .scale_row_bytes = 3, .global_scale = 1.0f};
        t[e].gate = t[e].up = t[e].down = w;
        t[e].gate.data = (const unsigned char *)(uintptr_t)(0x100000 + e * 4096);
        t[e].gate.scales = (const unsigned char *)(uintptr_t)(0x900000 + e * 192);
        t[e].up = t[e].gate;
        t[e].down.data = (const unsigned char *)(uintptr_t)(0x500000 + e * 3072);
        t[e].down.scales = (const unsigned char *)(uintptr_t)(0xa00000 + e * 96);
        t[e].gate_up_bias = (const float *)(uintptr_t)(0xb00000 + e * 512);
        t[e].down_bias = NULL;
    }
}

static void test_expert_steps(void **state)
{
    (void)state;
    enum { N = 5 };
    sp_expert t[N];
    steps_table(t, N);
    sp_expert_steps s = sp_expert_steps_of(t, N);
    assert_true(s.uniform);
    assert_int_equal(s.data[0], 4096);
    assert_int_equal(s.scales[0], 192);
    assert_int_equal(s.data[1], 4096);
    assert_int_equal(s.data[2], 3072);
    assert_int_equal(s.scales[2], 96);
    assert_int_equal(s.gate_up_bias, 128); /* floats */
    assert_int_equal(s.down_bias, 0);
    assert_ptr_equal(s.first.down.data, t[0].down.data);
    assert_true(sp_expert_steps_of(t, 1).uniform); /* one expert: steps 0 */
    assert_false(sp_expert_steps_of(NULL, N).uniform);
    assert_false(sp_expert_steps_of(t, 0).uniform);
    for (int c = 0; c < 7; c++) { /* each a change to entry 3 that breaks the layout */
        steps_table(t, N);
        switch (c) {
        case 0: t[3].gate.data += 16; break;
        case 1: t[3].down.scales -= 1; break;
        case 2: t[3].up.rows = 63; break;
        case 3: t[3].in_major = true; break;
        case 4: t[3].down_bias = (const float *)(uintptr_t)0xc00000; break;
        case 5: t[3].gate.format = SP_WF_NVFP4; break;
        default: t[3].gate_up_bias = NULL; break;
        }
        s = sp_expert_steps_of(t, N);
        if (s.uniform)
            fail_msg("expert steps: change %d still uniform", c);
        assert_int_equal(s.data[0], 0); /* not uniform: all zero */
    }
    steps_table(t, N); /* a bias step that is not whole floats */
    for (int64_t e = 0; e < N; e++)
        t[e].gate_up_bias = (const float *)(uintptr_t)(0xb00000 + e * 510);
    assert_false(sp_expert_steps_of(t, N).uniform);
}

static void test_routing(void **state)
{
    (void)state;
    float scratch[64], w[4];
    int32_t ids[4];
    /* softmax then top-2, renormalized; the tie between experts 1 and 3 goes to 1 */
    float lg[5] = {0.0f, 2.0f, -1.0f, 2.0f, 1.0f};
    sp_route_cfg c = {.kind = SP_MOE_SOFTMAX_TOPK, .n_experts = 5, .top_k = 2, .norm = true};
    sp_moe_route(&c, lg, ids, w, scratch);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 3);
    assert_true(fabsf(w[0] - 0.5f) < 1e-7f && fabsf(w[1] - 0.5f) < 1e-7f);
    c.norm = false;
    sp_moe_route(&c, lg, ids, w, scratch);
    double z = 1 + 2 * exp(2.0) + exp(-1.0) + exp(1.0);
    assert_true(fabs(w[0] - exp(2.0) / z) < 1e-6);
    /* gpt-oss: top-k of the logits, softmax over those k */
    c = (sp_route_cfg){.kind = SP_MOE_TOPK_SOFTMAX, .n_experts = 5, .top_k = 3};
    sp_moe_route(&c, lg, ids, w, scratch);
    assert_int_equal(ids[2], 4);
    double zk = 2 * exp(2.0) + exp(1.0);
    assert_true(fabs(w[2] - exp(1.0) / zk) < 1e-6);
    /* DeepSeek: 4 groups of 2; the bias decides selection, the weights stay unbiased */
    float dl[8] = {3.0f, 2.9f, 0.1f, 0.2f, 2.0f, -3.0f, 1.0f, 1.5f};
    float bias[8] = {0, 0, 0, 5.0f, 0, 0, 0, 0};
    c = (sp_route_cfg){.kind = SP_MOE_SIGMOID_GROUP, .n_experts = 8, .top_k = 2, .norm = true,
                       .n_group = 4, .topk_group = 1, .scaling = 2.5f, .score_bias = bias};
    sp_moe_route(&c, dl, ids, w, scratch);
    /* group 1 (experts 2, 3) wins through the bias; both its experts are chosen */
    assert_int_equal(ids[0], 3);
    assert_int_equal(ids[1], 2);
    float s2 = 1.0f / (1.0f + expf(-0.1f)), s3 = 1.0f / (1.0f + expf(-0.2f));
    assert_true(fabsf(w[0] - 2.5f * s3 / (s2 + s3)) < 1e-6f);
    /* two groups kept: the best two of their four experts */
    c.topk_group = 2;
    bias[3] = 0.0f;
    sp_moe_route(&c, dl, ids, w, scratch);
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 1);
}

/* ---- bad quantized checkpoints ---------------------------------------------------------- */

static void expect_open_error(char *dir, sp_status want, const char *needle, const char *needle2)
{
    sp_model *m;
    sp_error err = {0};
    sp_model_params mp = sp_model_default_params();
    mp.device = test_device();
    mp.n_threads = 1;
    sp_status st = sp_model_open(dir, &mp, &m, &err);
    if (st == SP_OK) {
        sp_model_close(m);
        fail_msg("opened a bad checkpoint; expected '%s'", needle);
    }
    if (st != want || !strstr(err.msg, needle) || (needle2 && !strstr(err.msg, needle2)))
        fail_msg("status %d message '%s'; expected %d with '%s'", st, err.msg, want, needle);
    remove_tree(dir);
    free(dir);
}

/* The last position's logits of tokens 1..12 through the checkpoint in dir (malloc'd). */
static float *last_logits(const char *dir, int64_t *n_vocab)
{
    sp_model *m = open_model_dir(dir, 1);
    sp_session_params sp = sp_session_default_params();
    sp_session *s;
    sp_error err = {0};
    assert_int_equal(sp_session_new(m, &sp, &s, &err), SP_OK);
    const int32_t tok[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    assert_int_equal(sp_session_eval(s, tok, 12, NULL, &err), SP_OK);
    *n_vocab = sp_model_n_vocab(m);
    float *out = malloc((size_t)*n_vocab * sizeof *out);
    memcpy(out, sp_session_last_logits(s), (size_t)*n_vocab * sizeof *out);
    sp_session_free(s);
    sp_model_close(m);
    return out;
}

/* Per-matrix MXFP4 scales spelled .scale (DeepSeek-V4's release) read as .weight_scale:
 * the same logits, bit for bit. */
static void test_mxfp4_scale_spelling(void **state)
{
    (void)state;
    tensor_edit ren[] = {
        {.name = "model.layers.2.ffn.experts.1.w3.weight_scale", .rename = "model.layers.2.ffn.experts.1.w3.scale"},
        {.name = "model.layers.0.ffn.shared_experts.w2.weight_scale", .rename = "model.layers.0.ffn.shared_experts.w2.scale"}};
    char *a = copy_fixture("dsv4_mxfp4", NULL, 0, NULL), *b = copy_fixture("dsv4_mxfp4", ren, 2, NULL);
    int64_t va, vb;
    float *la = last_logits(a, &va), *lb = last_logits(b, &vb);
    assert_int_equal(va, vb);
    assert_memory_equal(la, lb, (size_t)va * sizeof *la);
    free(la);
    free(lb);
    remove_tree(a);
    remove_tree(b);
    free(a);
    free(b);
}

static void test_bad_quantized_checkpoints(void **state)
{
    (void)state;
    const char *gs = "model.layers.1.mlp.experts.gate_up_proj_scales";
    tensor_edit e1[] = {{.name = gs, .dtype = NULL, .n_dims = 3, .shape = {4, 192, 3, 0}, .drop = false}};
    expect_open_error(copy_fixture("gptoss_mxfp4", e1, 1, NULL), SP_ERR_FORMAT, gs, "[4, 192, 2]");
    const char *gb = "model.layers.0.mlp.experts.down_proj_blocks";
    tensor_edit e2[] = {{.name = gb, .dtype = NULL, .n_dims = 4, .shape = {4, 64, 3, 8}, .drop = false}};
    expect_open_error(copy_fixture("gptoss_mxfp4", e2, 1, NULL), SP_ERR_FORMAT, gb, "shape");
    expect_open_error(copy_fixture("gptoss_mxfp4", NULL, 0, ""), SP_ERR_FORMAT, "mxfp4", "_blocks");
    expect_open_error(copy_fixture("gptoss_mxfp4", NULL, 0, "{\"quant_method\": \"awq\", \"bits\": 4}"),
                      SP_ERR_UNSUPPORTED, "quant_method", "'awq'");
    const char *ws = "model.layers.1.self_attn.q_proj.weight_scale";
    tensor_edit e3[] = {{.name = ws, .dtype = "F32", .n_dims = 0, .shape = {0}, .drop = false}};
    expect_open_error(copy_fixture("qwen3moe_nvfp4_modelopt", e3, 1, NULL), SP_ERR_FORMAT, ws, "F8_E4M3");
    tensor_edit e4[] = {{.name = ws, .dtype = NULL, .n_dims = 2, .shape = {64, 8}, .drop = false}};
    expect_open_error(copy_fixture("qwen3moe_nvfp4_modelopt", e4, 1, NULL), SP_ERR_FORMAT, ws, "[64, 4]");
    const char *w2 = "model.layers.1.mlp.experts.2.up_proj.weight_scale_2";
    tensor_edit e5[] = {{.name = w2, .dtype = NULL, .n_dims = 0, .shape = {0}, .drop = true}};
    expect_open_error(copy_fixture("qwen3moe_nvfp4_modelopt", e5, 1, NULL), SP_ERR_FORMAT, w2, "missing");
    expect_open_error(copy_fixture("qwen3moe_nvfp4_modelopt", NULL, 0, ""), SP_ERR_FORMAT, "U8", "NVFP4");
    expect_open_error(copy_fixture("qwen3moe_nvfp4_modelopt", NULL, 0,
                                     "{\"quant_method\": \"modelopt\", \"quant_algo\": \"INT4_AWQ\"}"),
                      SP_ERR_UNSUPPORTED, "quant_algo", "INT4_AWQ");
    const char *si = "model.layers.0.self_attn.q_a_proj.weight_scale_inv";
    tensor_edit e6[] = {{.name = si, .dtype = "BF16", .n_dims = 0, .shape = {0}, .drop = false}};
    expect_open_error(copy_fixture("deepseekv3_fp8_block", e6, 1, NULL), SP_ERR_FORMAT, si, "F32");
    expect_open_error(copy_fixture("deepseekv3_fp8_block", NULL, 0,
                                     "{\"quant_method\": \"fp8\", \"weight_block_size\": [64, 64]}"),
                      SP_ERR_UNSUPPORTED, "weight_block_size", NULL);

    /* DeepSeek-V4's per-expert matrices go through the same binder: each error names the
     * checkpoint file and the tensor */
    const char *v4s2 = "model.layers.3.ffn.experts.7.w2.weight_scale_2";
    tensor_edit e7[] = {{.name = v4s2, .dtype = NULL, .n_dims = 0, .shape = {0}, .drop = true}};
    expect_open_error(copy_fixture("dsv4_nvfp4_modelopt", e7, 1, NULL), SP_ERR_FORMAT, v4s2,
                      "model.safetensors: required tensor");
    const char *v4ws = "model.layers.0.ffn.shared_experts.w1.weight_scale";
    tensor_edit e8[] = {{.name = v4ws, .dtype = NULL, .n_dims = 2, .shape = {48, 2}, .drop = false}};
    expect_open_error(copy_fixture("dsv4_nvfp4_modelopt", e8, 1, NULL), SP_ERR_FORMAT, v4ws, "expected [48, 4]");
    expect_open_error(copy_fixture("dsv4_nvfp4_modelopt", NULL, 0, ""), SP_ERR_FORMAT,
                      "model.safetensors: tensor 'model.layers.0.ffn.experts.0.w1.weight' is U8", "NVFP4");
    const char *v4si = "model.layers.1.ffn.experts.2.w2.weight_scale_inv";
    tensor_edit e9[] = {{.name = v4si, .dtype = NULL, .n_dims = 2, .shape = {1, 2}, .drop = false}};
    expect_open_error(copy_fixture("dsv4_fp8_block", e9, 1, NULL), SP_ERR_FORMAT, v4si, "expected [2, 2]");
    tensor_edit e10[] = {{.name = v4si, .dtype = NULL, .n_dims = 0, .shape = {0}, .drop = true}};
    expect_open_error(copy_fixture("dsv4_fp8_block", e10, 1, NULL), SP_ERR_FORMAT, v4si,
                      "model.safetensors: required tensor");
    expect_open_error(copy_fixture("dsv4_fp8_block", NULL, 0, ""), SP_ERR_FORMAT,
                      "model.safetensors: tensor 'model.layers.0.attn.wq_a.weight' is F8_E4M3", "fp8");
    /* per-matrix MXFP4 (I8 codes, UE8M0 .weight_scale, else .scale) */
    const char *v4ms = "model.layers.2.ffn.experts.1.w3.weight_scale";
    tensor_edit e11[] = {{.name = v4ms, .dtype = NULL, .n_dims = 0, .shape = {0}, .drop = true}};
    expect_open_error(copy_fixture("dsv4_mxfp4", e11, 1, NULL), SP_ERR_FORMAT,
                      "model.layers.2.ffn.experts.1.w3.scale", "model.safetensors: required tensor");
    tensor_edit e12[] = {{.name = v4ms, .dtype = NULL, .n_dims = 2, .shape = {64, 1}, .drop = false}};
    expect_open_error(copy_fixture("dsv4_mxfp4", e12, 1, NULL), SP_ERR_FORMAT, v4ms, "expected [64, 2]");
    expect_open_error(copy_fixture("dsv4_mxfp4", NULL, 0, ""), SP_ERR_UNSUPPORTED,
                      "model.safetensors: tensor 'model.layers.0.ffn.experts.0.w1.weight' has dtype I8", "mxfp4");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scale_decoders_exhaustive),
        cmocka_unit_test(test_fp4_column_dependent), cmocka_unit_test(test_fp8_block_views),
        cmocka_unit_test(test_matmul_transposed),    cmocka_unit_test(test_routing),
        cmocka_unit_test(test_expert_steps),
        cmocka_unit_test(test_bad_quantized_checkpoints), cmocka_unit_test(test_mxfp4_scale_spelling),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
