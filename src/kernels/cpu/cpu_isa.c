/* cpu_isa.c: cpuid-based selection of the kernel level (see cpu_isa.h). */
#include "kernels/cpu/cpu_isa.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static atomic_int active_isa = -1;

#if defined(SP_HAVE_AVX2_KERNELS) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
/* F16C from cpuid leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know
 * "f16c" and rejects the build. The AVX2 check before it covers the OS's AVX state. */
static bool has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

sp_isa sp_isa_detected(void)
{
#if defined(SP_HAVE_AVX2_KERNELS) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c()))
        return SP_ISA_GENERIC;
#ifdef SP_HAVE_AVX512_KERNELS
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
#ifdef SP_HAVE_AVX512BF16_KERNELS
        if (__builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vnni"))
            return SP_ISA_AVX512_BF16;
#endif
        return SP_ISA_AVX512;
    }
#endif
    return SP_ISA_AVX2;
#else
    return SP_ISA_GENERIC;
#endif
}

static sp_isa from_env(sp_isa best)
{
    const char *e = getenv("SPECULA_ISA");
    if (!e || !*e)
        return best;
    static const char *names[] = {"generic", "avx2", "avx512", "avx512bf16"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(e, names[i]))
            return (sp_isa)i < best ? (sp_isa)i : best;
    return best;
}

sp_isa sp_isa_active(void)
{
    int a = atomic_load_explicit(&active_isa, memory_order_relaxed);
    if (a < 0) {
        a = (int)from_env(sp_isa_detected());
        atomic_store(&active_isa, a);
    }
    return (sp_isa)a;
}

sp_isa sp_isa_set(sp_isa isa)
{
    sp_isa best = sp_isa_detected();
    atomic_store(&active_isa, (int)(isa < best ? isa : best));
    return sp_isa_active();
}

const char *sp_isa_name(sp_isa isa)
{
    switch (isa) {
    case SP_ISA_GENERIC: return "generic";
    case SP_ISA_AVX2: return "avx2";
    case SP_ISA_AVX512: return "avx512";
    case SP_ISA_AVX512_BF16: return "avx512bf16";
    }
    return "?";
}
