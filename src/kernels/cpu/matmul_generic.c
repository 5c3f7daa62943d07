/* matmul_generic.c: the portable row kernels (baseline x86-64 or any CPU). */
#include "kernels/cpu/matmul_tiles.h"

sp_mm_kernel sp_mm_pick_generic(const sp_weight *w)
{
    return pick_tiles(w, "generic");
}
