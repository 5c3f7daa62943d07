/* matmul_avx512vnni.c: the fast precision's MXFP4 products at the avx512bf16 level,
 * compiled with -mavx2 -mfma -mf16c -mavx512f -mavx512vl -mavx512vnni (see CMakeLists.txt)
 * and called only when cpuid reports AVX512_VNNI (cpu_isa.c).
 *
 * It is matmul_q8.h's kernel (MXFP4 times 8-bit inputs) with the integer sums formed by
 * vpdpbusd on 256-bit vectors instead of vpmaddubsw + vpmaddwd: the same integers, then
 * the same fp32 arithmetic, so the same bits as the avx2 level's fast MXFP4 (test_kernels
 * compares them). It replaced decoding the codes to bf16 for vdpbf16ps: on an Intel Xeon
 * (Emerald Rapids, 2026-11-28) vdpbf16ps retires one every two cycles, a quarter of the
 * fp32 FMA rate, and the bf16 decode took four more instructions a row; one core's 1280 x
 * 768 product took 0.098 / 0.200 ms for 1 / 4 tokens that way, 0.037 / 0.106 with the
 * AVX2 8-bit kernel (docs/BENCHMARKS.md). */
#include "kernels/cpu/matmul_avx2_tiles.h"
#include "kernels/cpu/matmul_q8.h"

#if !defined(__AVX512VNNI__) || !defined(__AVX512VL__)
#error "matmul_avx512vnni.c must be compiled with -mavx512vnni -mavx512vl"
#endif

sp_mm_kernel sp_mm_pick_avx512vnni_q8(void)
{
    return (sp_mm_kernel){rows_mxfp4_q8, SP_MM_PREP_Q8, "avx512vnni mxfp4 q8", prep_q8};
}
