/* weight_scan.h: what the weight self-checks ask of a matrix — its first non-finite
 * element and its largest |value| — answered from the stored bytes, in parallel over
 * rows, without decoding every element.
 *
 * The answers are those of decoding each element with sp_weight_at (kernels/cpu/matmul.h)
 * and scanning row by row, column by column: the first non-finite element in that order,
 * and the largest fabsf over the elements (NaN never larger; an infinity is). BF16, F16
 * and F32 are read by their exponent bits; a block-scaled format block by block, from its
 * scale and the largest code magnitude in it (|code value| grows with the magnitude bits
 * and one rounded product per element is monotonic in |code value|); only a block whose
 * largest product is not finite is decoded, to name the element. Decoding a 117B-parameter
 * checkpoint element by element on one core took minutes. */
#ifndef SP_DIAG_WEIGHT_SCAN_H
#define SP_DIAG_WEIGHT_SCAN_H

#include "kernels/weight.h"
#include "util/threadpool.h"

#include <stdint.h>

typedef struct sp_weight_scan {
    int64_t bad_row, bad_col; /* the first non-finite element, or -1, -1 */
    float bad_value;
    float amax;               /* the largest |value| (0 for an empty matrix) */
} sp_weight_scan;

/* Scans w (pool may be NULL: the caller's thread alone). */
void sp_weight_scan_matrix(sp_pool *pool, const sp_weight *w, sp_weight_scan *out);

#endif
