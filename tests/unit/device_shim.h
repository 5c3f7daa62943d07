/* device_shim.h: the CPU backend given a GPU's device-side ops, for tests of the engine's
 * device paths on a machine without a GPU: greedy picks, draws and speculative
 * verification computed in backend (here host) memory by the host's references
 * (sp_argmax, sp_sample_row, sp_spec_verify_rows), only ids coming back, and every `leave`-th
 * draw or verification call's rows left to the host (-1) as the CUDA kernels leave rows they
 * cannot decide. The ops take no context: one shim for the whole test process. */
#ifndef TEST_DEVICE_SHIM_H
#define TEST_DEVICE_SHIM_H

#include "backend/backend.h"

typedef struct test_shim_counts {
    int draw_calls, draw_left;     /* logits_sample calls, those that left their rows */
    int verify_calls, verify_left; /* spec_verify calls, those left to the host */
} test_shim_counts;

extern test_shim_counts g_shim;

/* *out = *own with the shim's logits_argmax, logits_sample and spec_verify; leave 0: no call
 * leaves its rows. Resets g_shim. */
void test_shim_ops(const sp_backend_ops *own, sp_backend_ops *out, int leave);
/* *out = *own with nothing decided on the device (no picks, draws or verification): every
 * row comes back, the host decides (the reference runs of a device-path test). */
void test_host_ops(const sp_backend_ops *own, sp_backend_ops *out);

#endif
