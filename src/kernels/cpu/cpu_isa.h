/* cpu_isa.h: which instruction-set level the CPU kernels run at, chosen at run time.
 *
 * The library is compiled for baseline x86-64; the kernels that need AVX2 or AVX-512
 * live in their own files compiled with those flags (matmul_avx2.c, matmul_avx512.c,
 * matmul_avx512bf16.c, matmul_avx512vnni.c) and are only called after cpuid says the CPU has them. So one
 * binary runs on any x86-64 CPU and uses the best path it finds.
 *
 * The level in use is the best one detected, lowered by SPECULA_ISA=generic|avx2|avx512|
 * avx512bf16 (read once) or by sp_isa_set (tests run every level the machine has).
 * Which results are bit-identical across levels: docs/NUMERICS.md. */
#ifndef SP_KERNELS_CPU_ISA_H
#define SP_KERNELS_CPU_ISA_H

typedef enum sp_isa {
    SP_ISA_GENERIC = 0, /* portable C (SSE2 on x86-64) */
    SP_ISA_AVX2,        /* AVX2 + FMA + F16C, 8 lanes */
    SP_ISA_AVX512,      /* AVX-512 F/BW/VL/DQ, 16 lanes */
    SP_ISA_AVX512_BF16, /* AVX-512 + AVX512_BF16 (vdpbf16ps) + AVX512_VNNI (vpdpbusd): the fast precision */
} sp_isa;

/* The best level this CPU (and this build) supports. */
sp_isa sp_isa_detected(void);
/* The level the kernels use now. */
sp_isa sp_isa_active(void);
/* Lowers (or restores) the active level; clamped to the detected one. Returns the level
 * now active. Not thread-safe against running kernels: call between passes (tests). */
sp_isa sp_isa_set(sp_isa isa);
const char *sp_isa_name(sp_isa isa);

#endif
