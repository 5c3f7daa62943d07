/* matmul_avx512bf16_fma.c: the avx512bf16 level's BF16 kernels with each vdpbf16ps
 * formed by two fp32 FMAs (the same bits; see matmul_avx512bf16.c, which this compiles a
 * second time with SP_BF16_DOT_FMA set). matmul.c calls it where vdpbf16ps is slow. */
#define SP_BF16_DOT_FMA 1
#include "kernels/cpu/matmul_avx512bf16.c"
