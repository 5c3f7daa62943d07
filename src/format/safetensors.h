/* safetensors.h: one validated, memory-mapped .safetensors file.
 *
 * On-disk layout:
 *   [0, 8)          u64 little-endian N, the header length (N <= 100,000,000)
 *   [8, 8+N)        UTF-8 JSON object: {"__metadata__": {str: str}?,
 *                     "<name>": {"dtype": "BF16", "shape": [..], "data_offsets": [b, e]}, ...}
 *   [8+N, EOF)      tensor bytes; offsets are relative to 8+N, row-major, little-endian
 *
 * Validation follows the reference implementation: offsets sorted, contiguous from 0,
 * without gaps or overlaps; e - b == elements * bits / 8 with overflow-checked
 * arithmetic; the last offset equals the data size; names unique; rank <= 8.
 * Tensor data is a read-only view into the mapping, valid until close. Data may be
 * unaligned: readers must use memcpy-style loads. */
#ifndef SP_FORMAT_SAFETENSORS_H
#define SP_FORMAT_SAFETENSORS_H

#include "specula.h"
#include "util/dtype.h"
#include "util/fileio.h"

#define SP_ST_MAX_DIMS 8
#define SP_ST_MAX_HEADER_BYTES 100000000ull

typedef struct sp_st_tensor {
    char *name;
    sp_dtype dtype;
    int n_dims;
    int64_t shape[SP_ST_MAX_DIMS];
    uint64_t n_elements;
    const unsigned char *data;
    size_t n_bytes;
} sp_st_tensor;

typedef struct sp_safetensors {
    sp_mapped_file file;    /* empty when parsed from a caller's buffer */
    const char *path;       /* for messages */
    sp_st_tensor *tensors;  /* sorted by name */
    size_t n_tensors;
} sp_safetensors;

sp_status sp_safetensors_open(const char *path, sp_safetensors **out, sp_error *err);
/* Parses a buffer the caller keeps alive (tests, fuzzing). `what` names it in messages. */
sp_status sp_safetensors_parse(const unsigned char *data, size_t n_bytes, const char *what,
                               sp_safetensors **out, sp_error *err);
void sp_safetensors_close(sp_safetensors *st);

const sp_st_tensor *sp_safetensors_find(const sp_safetensors *st, const char *name);

#endif
