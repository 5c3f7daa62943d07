/* dtype.c: dtype names and exact scalar decoders (see dtype.h). */
#include "util/dtype.h"

#include <math.h>
#include <string.h>

static const struct {
    const char *name;
    unsigned bits;
} dtype_info[SP_DTYPE_COUNT] = {
    [SP_DTYPE_UNKNOWN] = {"?", 0},         [SP_DTYPE_BOOL] = {"BOOL", 8},
    [SP_DTYPE_U8] = {"U8", 8},             [SP_DTYPE_I8] = {"I8", 8},
    [SP_DTYPE_F8_E4M3] = {"F8_E4M3", 8},   [SP_DTYPE_F8_E5M2] = {"F8_E5M2", 8},
    [SP_DTYPE_F8_E8M0] = {"F8_E8M0", 8},   [SP_DTYPE_I16] = {"I16", 16},
    [SP_DTYPE_U16] = {"U16", 16},          [SP_DTYPE_F16] = {"F16", 16},
    [SP_DTYPE_BF16] = {"BF16", 16},        [SP_DTYPE_I32] = {"I32", 32},
    [SP_DTYPE_U32] = {"U32", 32},          [SP_DTYPE_F32] = {"F32", 32},
    [SP_DTYPE_I64] = {"I64", 64},          [SP_DTYPE_U64] = {"U64", 64},
    [SP_DTYPE_F64] = {"F64", 64},          [SP_DTYPE_F4] = {"F4", 4},
    [SP_DTYPE_F6_E2M3] = {"F6_E2M3", 6},   [SP_DTYPE_F6_E3M2] = {"F6_E3M2", 6},
    [SP_DTYPE_C64] = {"C64", 64},
};

sp_dtype sp_dtype_from_name(const char *name)
{
    for (int i = 1; i < SP_DTYPE_COUNT; i++)
        if (strcmp(dtype_info[i].name, name) == 0)
            return (sp_dtype)i;
    return SP_DTYPE_UNKNOWN;
}

const char *sp_dtype_name(sp_dtype dt)
{
    return (dt > 0 && dt < SP_DTYPE_COUNT) ? dtype_info[dt].name : "?";
}

unsigned sp_dtype_bits(sp_dtype dt)
{
    return (dt > 0 && dt < SP_DTYPE_COUNT) ? dtype_info[dt].bits : 0;
}

float sp_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in float */
        float v = (float)man * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    if (exp == 31)
        return sp_f32_from_bits(sign | 0x7f800000u | (man << 13));
    return sp_f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t sp_f32_to_f16(float f)
{
    uint32_t u = sp_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        float v = sp_f32_from_bits(a) * 16777216.0f; /* in units of 2^-24 */
        uint32_t m = (uint32_t)lrintf(v);            /* round half to even */
        return (uint16_t)(sign | m);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
    return (uint16_t)(sign | (r >> 13));
}

float sp_e5m2_to_f32(uint8_t b)
{
    return sp_f16_to_f32((uint16_t)((uint16_t)b << 8));
}

const float sp_e2m1_table[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                 -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
