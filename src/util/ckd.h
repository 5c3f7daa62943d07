/* ckd.h: overflow-checked size arithmetic. Every size computed from file data goes
 * through these; they return true when the result overflowed. */
#ifndef SP_UTIL_CKD_H
#define SP_UTIL_CKD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline bool sp_ckd_add_u64(uint64_t *r, uint64_t a, uint64_t b)
{
    return __builtin_add_overflow(a, b, r);
}
static inline bool sp_ckd_mul_u64(uint64_t *r, uint64_t a, uint64_t b)
{
    return __builtin_mul_overflow(a, b, r);
}
static inline bool sp_ckd_mul_size(size_t *r, size_t a, size_t b)
{
    return __builtin_mul_overflow(a, b, r);
}
static inline bool sp_ckd_add_size(size_t *r, size_t a, size_t b)
{
    return __builtin_add_overflow(a, b, r);
}
/* r = a*b*c, checked. */
static inline bool sp_ckd_mul3_size(size_t *r, size_t a, size_t b, size_t c)
{
    size_t t;
    return __builtin_mul_overflow(a, b, &t) || __builtin_mul_overflow(t, c, r);
}

#endif
