/* safetensors_write.h: writing safetensors files (header padded to 8 bytes, tensors in
 * the order given). Used by tools that create checkpoints (bench models) and by tests. */
#ifndef SP_FORMAT_SAFETENSORS_WRITE_H
#define SP_FORMAT_SAFETENSORS_WRITE_H

#include "specula.h"
#include <stddef.h>
#include <stdint.h>

typedef struct sp_st_out {
    const char *name;
    const char *dtype; /* safetensors dtype string, e.g. "BF16" */
    int n_dims;
    int64_t shape[8];
    /* data for the tensor: either bytes (n_bytes long) or a generator called to fill
     * chunks, so multi-GB tensors need not exist in memory */
    const void *data;
    size_t n_bytes;
    void (*fill)(void *ctx, unsigned char *buf, size_t offset, size_t n);
    void *fill_ctx;
} sp_st_out;

sp_status sp_safetensors_write(const char *path, const sp_st_out *t, size_t n, sp_error *err);

#endif
