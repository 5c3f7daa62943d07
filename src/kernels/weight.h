/* weight.h: a weight matrix as the kernels see it: a read-only view, usually into a
 * memory-mapped checkpoint, in the format it was stored in.
 *
 * A matrix has `rows` outputs and `cols` inputs and is used as y = x W^T (PyTorch's
 * Linear layout, [out, in], row-major). Quantized formats keep their packed bytes and
 * block scales; kernels decode them in registers and never expand a matrix in memory.
 *
 *   format     data per row                       scales
 *   F32/BF16/F16  cols elements                   -
 *   MXFP4      cols/2 bytes, 2 E2M1 codes a byte,  UE8M0 byte per 32 inputs
 *              low nibble = even input
 *   NVFP4      as MXFP4                            E4M3 byte per 16 inputs, times `global_scale`
 *   FP8        cols E4M3 bytes                     f32 per 128x128 block ([ceil(r/128), ceil(c/128)])
 */
#ifndef SP_KERNELS_WEIGHT_H
#define SP_KERNELS_WEIGHT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum sp_wformat {
    SP_WF_NONE = 0,
    SP_WF_F32,
    SP_WF_BF16,
    SP_WF_F16,
    SP_WF_MXFP4,
    SP_WF_NVFP4,
    SP_WF_FP8_BLOCK,
} sp_wformat;

typedef struct sp_weight {
    sp_wformat format;
    int64_t rows, cols;
    const unsigned char *data;
    size_t row_bytes;
    const unsigned char *scales;
    size_t scale_row_bytes; /* bytes between scale rows */
    float global_scale;     /* NVFP4: per-tensor multiplier (1 otherwise) */
    int64_t row_offset;     /* FP8 block scales: the absolute row of row 0 (row views) */
    const char *name;       /* checkpoint tensor name, for messages and traces */
    bool keep_exact;        /* products stay in exact precision in a fast pass (a MoE router:
                               its logits pick the experts; docs/NUMERICS.md) */
} sp_weight;

static inline const unsigned char *sp_weight_row(const sp_weight *w, int64_t r)
{
    return w->data + (size_t)r * w->row_bytes;
}

/* A view of rows [r0, r0 + n) of w (fused tensors split into their parts). */
static inline sp_weight sp_weight_rows(const sp_weight *w, int64_t r0, int64_t n)
{
    sp_weight v = *w;
    v.rows = n;
    v.data = w->data + (size_t)r0 * w->row_bytes;
    if (w->format == SP_WF_FP8_BLOCK)
        v.row_offset = w->row_offset + r0;
    else if (w->scales)
        v.scales = w->scales + (size_t)r0 * w->scale_row_bytes;
    return v;
}

const char *sp_wformat_name(sp_wformat f);

#endif
