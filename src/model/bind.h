/* bind.h: turning checkpoint tensors into typed model parts, with the checks that make
 * a wrong checkpoint fail at load instead of printing garbage: presence, dtype and shape
 * against config.json. Messages name the tensor, the file and the mismatch. */
#ifndef SP_MODEL_BIND_H
#define SP_MODEL_BIND_H

#include "model/model.h"

/* A matrix [rows, cols] stored as F32, BF16 or F16 (quantized formats: see quant.h).
 * When `required` is false and the tensor is absent, out->format is SP_WF_NONE. */
sp_status sp_bind_matrix(sp_model *m, const char *name, int64_t rows, int64_t cols,
                         bool required, sp_weight *out, sp_error *err);
/* One [rows, cols] slice of a 3-D tensor [n, rows, cols] (fused experts). */
sp_status sp_bind_matrix_slice(sp_model *m, const char *name, int64_t n, int64_t index,
                               int64_t rows, int64_t cols, sp_weight *out, sp_error *err);
/* A vector of n elements converted to owned fp32; *out is NULL when absent and optional. */
sp_status sp_bind_vector(sp_model *m, const char *name, int64_t n, bool required,
                         const float **out, sp_error *err);
/* Like sp_bind_vector for a [n_outer, n] tensor: returns the owned [n_outer * n] floats. */
sp_status sp_bind_vector2(sp_model *m, const char *name, int64_t n_outer, int64_t n,
                          bool required, const float **out, sp_error *err);

/* printf-style name builder into a caller buffer (names are short). */
const char *sp_name(char *buf, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
