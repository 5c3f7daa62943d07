/* test_cuda_tc.c: the fast-precision BF16 tensor-core products (cuda_tc.cu,
 * cuda_tc_gemm.cu) against a double-precision reference of the same rounded inputs, and
 * their contract: a token's outputs are bit-identical alone, in any batch (the few-token
 * and the GEMM schedules, the scratch whole, in pieces or absent), run to run, and the
 * fused forms (several matrices, SwiGLU) equal the separate products. Without a GPU every test skips. Timings: bench/gpu/tc_speed.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define CUDA_TEST_SEED 0x7c15a3e1d00dfeedull
#include "cuda_test_harness.h"

/* the GEMM's scratch (x as bf16), as a backend owns one */
#define SCRATCH_BYTES ((size_t)8 << 20)
static void *g_scratch;

static void *scratch(void)
{
    if (!g_scratch)
        g_scratch = dev_alloc(SCRATCH_BYTES);
    return g_scratch;
}

static int mm(const sp_weight *w, const float *x, int64_t n_tok, float *y, const float *bias)
{
    return spc_matmul_tc(g_stream, w, x, n_tok, y, bias, scratch(), SCRATCH_BYTES);
}

/* float -> bf16 bits, round to nearest even (finite inputs) */
static uint16_t bf16_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf16_float(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A BF16 matrix on the device with `pad` spare elements a row (a row pitch wider than the
 * row, as a view of a fused tensor has); host keeps the values. */
typedef struct tc_matrix {
    sp_weight d;
    float *host; /* [rows, cols] decoded */
    void *dev;
} tc_matrix;

static tc_matrix make_bf16(int64_t rows, int64_t cols, int64_t pad, float scale)
{
    tc_matrix m;
    const int64_t pitch = cols + pad;
    uint16_t *bits = calloc((size_t)(rows * pitch + 1), 2);
    m.host = malloc((size_t)(rows * cols + 1) * 4);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            uint16_t b = bf16_bits(frand() * scale);
            bits[r * pitch + c] = b;
            m.host[r * cols + c] = bf16_float(b);
        }
    m.dev = dev_from(bits, (size_t)(rows * pitch + 1) * 2);
    free(bits);
    memset(&m.d, 0, sizeof m.d);
    m.d.format = SP_WF_BF16;
    m.d.rows = rows;
    m.d.cols = cols;
    m.d.data = m.dev;
    m.d.row_bytes = (size_t)pitch * 2;
    m.d.global_scale = 1.0f;
    return m;
}

static void free_matrix(tc_matrix *m)
{
    spc_free(m->dev);
    free(m->host);
}

/* y against sum over c of bf16(x) W in double: error within 2e-6 of the sum of |terms|
 * (fp32 accumulation of BF16 products); returns the worst such ratio. */
static double check_against_reference(const tc_matrix *m, const float *x, int64_t n_tok,
                                      const float *y, const float *bias)
{
    double worst = 0;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < m->d.rows; r++) {
            double s = bias ? bias[r] : 0, mag = bias ? fabs(bias[r]) : 0;
            for (int64_t c = 0; c < m->d.cols; c++) {
                double term = (double)bf16_float(bf16_bits(x[t * m->d.cols + c])) *
                              m->host[r * m->d.cols + c];
                s += term;
                mag += fabs(term);
            }
            double e = fabs(y[t * m->d.rows + r] - s) / (mag > 0 ? mag : 1);
            if (!(e <= 2e-6))
                fail_msg("tc %lldx%lld, %lld tokens: y[%lld][%lld] = %.9g, reference %.9g",
                         (long long)m->d.rows, (long long)m->d.cols, (long long)n_tok, (long long)t,
                         (long long)r, y[t * m->d.rows + r], s);
            if (e > worst)
                worst = e;
        }
    return worst;
}

/* One product of rows x cols with n_tok tokens (x offset by x_off floats from an aligned
 * allocation) checked against the reference. */
static double check_tc(int64_t rows, int64_t cols, int64_t pad, int64_t n_tok, int with_bias,
                       int64_t x_off)
{
    tc_matrix m = make_bf16(rows, cols, pad, 1.0f);
    float *x = malloc((size_t)(n_tok * cols + x_off + 1) * 4), *b = malloc((size_t)rows * 4);
    fill(x, n_tok * cols + x_off, 1.0f);
    fill(b, rows, 0.5f);
    float *dx = dev_from(x, (size_t)(n_tok * cols + x_off + 1) * 4), *db = dev_from(b, (size_t)rows * 4);
    float *dy = dev_poison(n_tok * rows);
    CK(mm(&m.d, dx + x_off, n_tok, dy, with_bias ? db : NULL));
    float *y = host_of(dy, n_tok * rows);
    double worst = check_against_reference(&m, x + x_off, n_tok, y, with_bias ? b : NULL);
    free(y);
    free(x);
    free(b);
    spc_free(dx);
    spc_free(db);
    spc_free(dy);
    free_matrix(&m);
    return worst;
}

static void test_tc_reference(void **state)
{
    (void)state;
    NEED_GPU();
    if (!spc_tc_supported()) {
        printf("device below compute capability 8.0: skipped\n");
        skip();
    }
    double worst = 0, w;
    /* few tokens (the rows kernel): partial row groups, column tails inside a step and a
     * slice, several slices, a row pitch wider than the row, and rows long enough that 16
     * tokens of x do not fit shared memory (x then read from global memory) */
    const int64_t shapes[][2] = {{1, 8},     {15, 40},   {17, 512},
                                 {33, 520},  {130, 1056}, {64, 2880}, {40, 4096}};
    for (int i = 0; i < 7; i++)
        for (int64_t nt = 1; nt <= 17; nt += (nt < 9 ? 1 : 7)) {
            w = check_tc(shapes[i][0], shapes[i][1], i & 1 ? 8 : 0, nt, (int)(nt & 1), 0);
            worst = w > worst ? w : worst;
        }
    /* many tokens (the GEMM): partial row and token blocks, unaligned x (the rows kernel
     * in pieces) */
    worst = fmax(worst, check_tc(200, 1056, 0, 130, 1, 0));
    worst = fmax(worst, check_tc(129, 2048 + 32, 8, 40, 0, 0));
    worst = fmax(worst, check_tc(70, 264, 0, 33, 1, 1));
    printf("tc: max error %.3g of the sum of |terms| (bound 2e-6); many tokens on %s\n", worst,
           spc_tc_gemm_name());
}

/* A token's outputs alone == in any batch (bits), and run to run: sizes that take the
 * rows kernel (1..16 tokens, one or two token tiles) and the GEMM (one or several token
 * blocks); the whole batch also with a scratch of 20 tokens (pieces) and with none
 * (16-token pieces of the rows kernel). */
static void check_invariance(int64_t rows, int64_t cols, int64_t N)
{
    const int64_t sizes[] = {1, 2, 3, 8, 9, 16, 17, 64, 129};
    tc_matrix m = make_bf16(rows, cols, 0, 1.0f);
    float *x = malloc((size_t)(N * cols) * 4);
    fill(x, N * cols, 1.0f);
    float *dx = dev_from(x, (size_t)(N * cols) * 4), *dy = dev_poison(N * rows);
    CK(mm(&m.d, dx, N, dy, NULL));
    float *full = host_of(dy, N * rows);
    for (int si = 0; si < 9; si++)
        for (int64_t off = 0; off + sizes[si] <= N; off += sizes[si] * 3 + 5) {
            const int64_t n = sizes[si];
            CK(spc_memset(g_stream, dy, 0xff, (size_t)(N * rows) * 4));
            CK(mm(&m.d, dx + off * cols, n, dy, NULL));
            float *part = host_of(dy, n * rows);
            int64_t bad = count_diff_bits(part, full + off * rows, n * rows);
            if (bad)
                fail_msg("tc %lldx%lld: %lld outputs of tokens [%lld, %lld) differ between n_tok "
                         "%lld and %lld",
                         (long long)rows, (long long)cols, (long long)bad, (long long)off,
                         (long long)(off + n), (long long)n, (long long)N);
            free(part);
        }
    const size_t small[3] = {SCRATCH_BYTES, (size_t)(20 * cols * 2), 0};
    for (int i = 0; i < 3; i++) {
        CK(spc_memset(g_stream, dy, 0xff, (size_t)(N * rows) * 4));
        CK(spc_matmul_tc(g_stream, &m.d, dx, N, dy, NULL, small[i] ? scratch() : NULL, small[i]));
        float *again = host_of(dy, N * rows);
        if (count_diff_bits(again, full, N * rows))
            fail_msg("tc %lldx%lld: %lld tokens differ with %zu bytes of scratch", (long long)rows,
                     (long long)cols, (long long)N, small[i]);
        free(again);
    }
    free(full);
    free(x);
    spc_free(dx);
    spc_free(dy);
    free_matrix(&m);
}

static void test_tc_batch_invariance(void **state)
{
    (void)state;
    NEED_GPU();
    if (!spc_tc_supported())
        skip();
    /* partial row and token blocks, K tails inside a step (520), an odd number of steps
     * (1056, 264: the last stage half full), a last slice shorter than 128, many blocks */
    check_invariance(203, 1056, 300);
    check_invariance(4096, 264, 300);
    check_invariance(16384, 520, 300);
    check_invariance(130, 520, 150);
    check_invariance(64, 2048 + 64, 40);
    printf("tc: n_tok 1/2/3/8/9/16/17/64/129 at many offsets == 300, a rerun, the scratch in "
           "pieces or absent: bit-identical\n");
}

/* spc_matmul_tc_swiglu(gate, up) == spc_matmul_tc of each, then spc_swiglu (bits). */
static void check_swiglu(const tc_matrix *gate, const tc_matrix *up, const float *dx, int64_t nt)
{
    const int64_t rows = gate->d.rows;
    float *g = dev_poison(nt * rows), *u = dev_poison(nt * rows), *y = dev_poison(nt * rows);
    CK(mm(&gate->d, dx, nt, g, NULL));
    CK(mm(&up->d, dx, nt, u, NULL));
    CK(spc_swiglu(g_stream, g, u, nt * rows, g));
    CK(spc_matmul_tc_swiglu(g_stream, &gate->d, &up->d, dx, nt, y, scratch(), SCRATCH_BYTES));
    float *a = host_of(y, nt * rows), *r = host_of(g, nt * rows);
    if (count_diff_bits(a, r, nt * rows))
        fail_msg("tc swiglu %lldx%lld at %lld tokens differs from the separate ops",
                 (long long)rows, (long long)gate->d.cols, (long long)nt);
    free(a);
    free(r);
    spc_free(g);
    spc_free(u);
    spc_free(y);
}

/* spc_matmul_tc_multi == one spc_matmul_tc per matrix; spc_matmul_tc_swiglu ==
 * spc_matmul_tc(gate), spc_matmul_tc(up), spc_swiglu. */
static void test_tc_fused(void **state)
{
    (void)state;
    NEED_GPU();
    if (!spc_tc_supported())
        skip();
    const int64_t cols = 1040, rows[3] = {96, 40, 40}, ntoks[] = {1, 5, 16, 40, 150};
    tc_matrix m[3];
    for (int i = 0; i < 3; i++)
        m[i] = make_bf16(rows[i], cols, 0, 1.0f);
    float *b = malloc(96 * 4);
    fill(b, 96, 0.5f);
    float *db = dev_from(b, 96 * 4);
    for (int ti = 0; ti < 5; ti++) {
        const int64_t nt = ntoks[ti];
        float *x = malloc((size_t)(nt * cols) * 4);
        fill(x, nt * cols, 2.0f);
        float *dx = dev_from(x, (size_t)(nt * cols) * 4);
        float *ys[3], *ref[3];
        const sp_weight *ws[3] = {&m[0].d, &m[1].d, &m[2].d};
        const float *bs[3] = {db, NULL, db};
        for (int i = 0; i < 3; i++) {
            ys[i] = dev_poison(nt * rows[i]);
            ref[i] = dev_poison(nt * rows[i]);
            CK(mm(ws[i], dx, nt, ref[i], bs[i]));
        }
        CK(spc_matmul_tc_multi(g_stream, 3, ws, dx, nt, ys, bs, scratch(), SCRATCH_BYTES));
        for (int i = 0; i < 3; i++) {
            float *a = host_of(ys[i], nt * rows[i]), *r = host_of(ref[i], nt * rows[i]);
            if (count_diff_bits(a, r, nt * rows[i]))
                fail_msg("tc multi: matrix %d at %lld tokens differs from its own product", i,
                         (long long)nt);
            free(a);
            free(r);
        }
        check_swiglu(&m[1], &m[2], dx, nt); /* m[1] gate, m[2] up */
        for (int i = 0; i < 3; i++) {
            spc_free(ys[i]);
            spc_free(ref[i]);
        }
        spc_free(dx);
        free(x);
    }
    /* SwiGLU on many row blocks */
    const int64_t big[2] = {8192, 4096};
    for (int i = 0; i < 2; i++) {
        tc_matrix gm = make_bf16(big[i], 264, 0, 1.0f), um = make_bf16(big[i], 264, 0, 1.0f);
        float *x = malloc((size_t)(150 * 264) * 4);
        fill(x, 150 * 264, 2.0f);
        float *dx = dev_from(x, (size_t)(150 * 264) * 4);
        check_swiglu(&gm, &um, dx, 150);
        spc_free(dx);
        free(x);
        free_matrix(&gm);
        free_matrix(&um);
    }
    /* refused: a weight that is not BF16-aligned */
    sp_weight bad = m[0].d;
    bad.cols = 1036;
    assert_false(spc_tc_weight_ok(&bad));
    assert_int_not_equal(spc_matmul_tc(g_stream, &bad, NULL, 1, NULL, NULL, NULL, 0), 0);
    for (int i = 0; i < 3; i++)
        free_matrix(&m[i]);
    spc_free(db);
    free(b);
    printf("tc: multi and SwiGLU fused == separate at 1/5/16/40/150 tokens\n");
    spc_free(g_scratch);
    g_scratch = NULL;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tc_reference),
        cmocka_unit_test(test_tc_batch_invariance),
        cmocka_unit_test(test_tc_fused),
    };
    int rc = cmocka_run_group_tests(tests, cuda_group_setup, cuda_group_teardown);
    return g_have_gpu ? rc : 77;
}
