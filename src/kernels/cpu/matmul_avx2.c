/* matmul_avx2.c: the 8-lane row kernels compiled with -mavx2 -mfma -mf16c (see
 * CMakeLists.txt); called only when cpuid reports those (cpu_isa.c). */
#include "kernels/cpu/matmul_tiles.h"

#if !SP_SIMD_AVX2
#error "matmul_avx2.c must be compiled with -mavx2 -mfma -mf16c"
#endif

sp_mm_kernel sp_mm_pick_avx2(const sp_weight *w)
{
    return pick_tiles(w, "avx2");
}
