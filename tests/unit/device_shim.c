/* device_shim.c: the CPU backend's device-style ops for tests (see device_shim.h). */
#include "device_shim.h"

#include "runtime/sampler.h"
#include "runtime/spec_verify.h"

#include <stdlib.h>

test_shim_counts g_shim;
static int g_leave;

static void shim_argmax(sp_backend *be, const float *logits, int64_t rows, int64_t n_vocab,
                        int32_t *ids)
{
    (void)be;
    for (int64_t r = 0; r < rows; r++)
        ids[r] = sp_argmax(logits + r * n_vocab, n_vocab);
}

static bool leaves(int calls) { return g_leave > 0 && calls % g_leave == g_leave - 1; }

static void shim_draw(sp_backend *be, const float *logits, int64_t rows, int64_t n_vocab,
                      const sp_sample_req *reqs, int32_t *ids)
{
    (void)be;
    sp_sample_work wk;
    if (sp_sample_work_init(&wk, n_vocab) != SP_OK)
        abort(); /* a test's out-of-memory */
    const bool leave = leaves(g_shim.draw_calls++);
    for (int64_t r = 0; r < rows; r++) {
        ids[r] = sp_sample_row(&reqs[r], logits + r * n_vocab, n_vocab, &wk);
        if (leave && reqs[r].inv_t > 0.0) {
            ids[r] = -1;
            g_shim.draw_left++;
        }
    }
    sp_sample_work_free(&wk);
}

static void shim_verify(sp_backend *be, const float *target, const float *draft, int64_t m,
                        int64_t n_vocab, const sp_sample_req *reqs, const sp_spec_args *args,
                        int32_t *out)
{
    (void)be;
    if (args->m != m || sp_spec_verify_rows(target, draft, m, n_vocab, reqs, args, out) != SP_OK)
        abort(); /* the engine's arguments disagree, or out of memory */
    if (leaves(g_shim.verify_calls++)) {
        out[0] = out[1] = -1;
        g_shim.verify_left++;
    }
}

void test_host_ops(const sp_backend_ops *own, sp_backend_ops *out)
{
    *out = *own;
    out->logits_argmax = NULL;
    out->logits_sample = NULL;
    out->spec_verify = NULL;
}

void test_shim_ops(const sp_backend_ops *own, sp_backend_ops *out, int leave)
{
    *out = *own;
    out->logits_argmax = shim_argmax;
    out->logits_sample = shim_draw;
    out->spec_verify = shim_verify;
    g_leave = leave;
    g_shim = (test_shim_counts){0};
}
