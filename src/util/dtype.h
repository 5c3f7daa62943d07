/* dtype.h: the element types a checkpoint can hold, their sizes, and exact scalar
 * conversions to float. Bit-level decoders here are the reference the vectorized
 * kernels are tested against. */
#ifndef SP_UTIL_DTYPE_H
#define SP_UTIL_DTYPE_H

#include <stdint.h>
#include <string.h>

typedef enum sp_dtype {
    SP_DTYPE_UNKNOWN = 0,
    SP_DTYPE_BOOL,
    SP_DTYPE_U8,
    SP_DTYPE_I8,
    SP_DTYPE_F8_E4M3,
    SP_DTYPE_F8_E5M2,
    SP_DTYPE_F8_E8M0,
    SP_DTYPE_I16,
    SP_DTYPE_U16,
    SP_DTYPE_F16,
    SP_DTYPE_BF16,
    SP_DTYPE_I32,
    SP_DTYPE_U32,
    SP_DTYPE_F32,
    SP_DTYPE_I64,
    SP_DTYPE_U64,
    SP_DTYPE_F64,
    SP_DTYPE_F4,     /* packed E2M1, 4 bits */
    SP_DTYPE_F6_E2M3,
    SP_DTYPE_F6_E3M2,
    SP_DTYPE_C64,
    SP_DTYPE_COUNT
} sp_dtype;

/* Parses a safetensors dtype string; SP_DTYPE_UNKNOWN when not recognized. */
sp_dtype sp_dtype_from_name(const char *name);
const char *sp_dtype_name(sp_dtype dt);
/* Size of one element in bits (4 for F4, 6 for F6_*). */
unsigned sp_dtype_bits(sp_dtype dt);

static inline float sp_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t sp_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float sp_bf16_to_f32(uint16_t h)
{
    return sp_f32_from_bits((uint32_t)h << 16);
}

/* Round-to-nearest-even float -> bf16 (NaN stays NaN). */
static inline uint16_t sp_f32_to_bf16(float f)
{
    uint32_t u = sp_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float sp_f16_to_f32(uint16_t h);
uint16_t sp_f32_to_f16(float f);

/* OCP FP8 E4M3 "FN": bias 7, no infinities, S.1111.111 is NaN, max 448. Exact. */
static inline float sp_e4m3_to_f32(uint8_t b)
{
    uint32_t s = (uint32_t)(b >> 7) << 31, e = (b >> 3) & 15u, m = b & 7u;
    if (e == 15 && m == 7)
        return sp_f32_from_bits(0x7fc00000u | s);
    if (e == 0) /* subnormal: m * 2^-9 */
        return sp_f32_from_bits(sp_f32_bits((float)m * 0.001953125f) | s);
    return sp_f32_from_bits(s | ((e + 120u) << 23) | (m << 20));
}
/* OCP FP8 E5M2: bias 15, IEEE-like. */
float sp_e5m2_to_f32(uint8_t b);
/* UE8M0 scale: 2^(b-127); 0xFF is NaN. Exact. */
static inline float sp_e8m0_to_f32(uint8_t b)
{
    if (b == 0xff)
        return sp_f32_from_bits(0x7fc00000u);
    return sp_f32_from_bits(b ? (uint32_t)b << 23 : 0x00400000u);
}
/* E2M1 (FP4) code table: {0,.5,1,1.5,2,3,4,6} and negatives. */
extern const float sp_e2m1_table[16];

#endif
