/* attention_avx2.c: the attention inner loop compiled with -mavx2 -mfma -mf16c (see
 * CMakeLists.txt); called only when cpuid reports them. */
#include "kernels/cpu/attention_impl.h"

#if !SP_SIMD_AVX2
#error "attention_avx2.c must be compiled with -mavx2 -mfma -mf16c"
#endif

void sp_attn_rows_avx2(const sp_attn_args *a, int64_t b, int64_t e, float *scores);

void sp_attn_rows_avx2(const sp_attn_args *a, int64_t b, int64_t e, float *scores)
{
    attn_rows(a, b, e, scores);
}
