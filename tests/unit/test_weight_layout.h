/* test_weight_layout.h: the stored layout of a rows x cols test matrix of any weight
 * format, as the loader binds one (row pitch, scale pitch; FP4 two codes a byte, one
 * scale byte per 32 (MXFP4) or 16 (NVFP4) columns, FP8 an fp32 scale per 128 x 128
 * block), for the kernel and diagnostics tests that build random weights. Header-only:
 * the CUDA tests include it too. */
#ifndef SP_TEST_WEIGHT_LAYOUT_H
#define SP_TEST_WEIGHT_LAYOUT_H

#include "kernels/weight.h"

#include <stddef.h>
#include <string.h>

/* Fills w's format, shape and pitches (data and scales left NULL, global scale 1, the
 * name "test"); returns the bytes of its scale tensor (0 for an unscaled format). */
static inline size_t test_weight_layout(sp_weight *w, sp_wformat f, int64_t rows, int64_t cols)
{
    memset(w, 0, sizeof *w);
    w->format = f;
    w->rows = rows;
    w->cols = cols;
    w->global_scale = 1.0f;
    w->name = "test";
    switch (f) {
    case SP_WF_F32: w->row_bytes = (size_t)cols * 4; return 0;
    case SP_WF_BF16:
    case SP_WF_F16: w->row_bytes = (size_t)cols * 2; return 0;
    case SP_WF_MXFP4:
    case SP_WF_NVFP4:
        w->row_bytes = (size_t)(cols + 1) / 2;
        w->scale_row_bytes = (size_t)(cols + (f == SP_WF_MXFP4 ? 31 : 15)) / (f == SP_WF_MXFP4 ? 32 : 16);
        return w->scale_row_bytes * (size_t)rows;
    case SP_WF_FP8_BLOCK:
        w->row_bytes = (size_t)cols;
        w->scale_row_bytes = 4 * (size_t)((cols + 127) / 128);
        return w->scale_row_bytes * (size_t)((rows + 127) / 128);
    default: return 0;
    }
}

#endif
