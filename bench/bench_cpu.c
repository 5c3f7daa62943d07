/* bench_cpu.c: kernel-level CPU measurements for docs/BENCHMARKS.md and
 * bench/compare-llama-cpp.sh.
 *
 *   bench_cpu membw [--threads N] [--mib M]     DRAM read bandwidth: N threads sum a
 *       buffer of M MiB (default 1024) with 512-bit loads (256-bit without AVX-512); best
 *       of 5 passes, GB/s.
 *   bench_cpu matmul [--threads N] [--rows R] [--cols C] [--tokens T] [--precision P]
 *       [--format bf16|mxfp4] [--isa L] [--mib M] [--offset B]
 *       y = x W^T over enough distinct random matrices that they never sit in cache
 *       (M MiB of them, default 512; --mib 1 measures one or a few small ones from L2/L3);
 *       prints GB/s of weights read and GFLOP/s, median of 7 passes. Each matrix starts B
 *       bytes (0-63, default 0) past a 64-byte boundary: a checkpoint's tensors sit wherever
 *       its safetensors header leaves them (llama-1b's random one: 8 mod 16).
 *   bench_cpu cputime --model DIR [--tokens P] [--precision P] [--reps R] [--threads N]
 *       the process's CPU time (all N threads, default 1) per prefill of P tokens
 *       (default 128) and per decode step, median after an untimed pass: comparable
 *       while other work shares the cores; with N > 1, CPU time above the 1-thread
 *       figure is what the threads cost (waiting, spinning, contention). Wall time too.
 *   bench_cpu attention [--threads N] [--heads H] [--kv-heads G] [--dim D] [--ctx C]
 *       [--tokens T]   causal attention of T queries (the last T positions of a
 *       C-position fp32 cache; defaults 12 / 4 / 64 / 512 / 512: a 512-token prefill of the
 *       125M model's layer), median of 7 passes, ms and GFLOP/s (4 flops a key and dim).
 *   bench_cpu verify --model DIR [--threads N] [--precision P] [--kmax K] [--reps R]
 *       speculative verify cost: after a 128-token prefill, the median time of one pass
 *       over k+1 tokens (k = 0..K) at that position, as a multiple of one decode step.
 * The default build is portable; SPECULA_ISA lowers the kernel level as for specula. */
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/matmul.h"
#include "util/clock.h"
#include "util/dtype.h"
#include "util/threadpool.h"
#include "specula.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct bw_arg {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} bw_arg;

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint64_t *p, size_t n)
{
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 16 <= n; i += 16) {
        s0 = _mm256_add_epi64(s0, _mm256_loadu_si256((const __m256i *)(p + i)));
        s1 = _mm256_add_epi64(s1, _mm256_loadu_si256((const __m256i *)(p + i + 4)));
        s2 = _mm256_add_epi64(s2, _mm256_loadu_si256((const __m256i *)(p + i + 8)));
        s3 = _mm256_add_epi64(s3, _mm256_loadu_si256((const __m256i *)(p + i + 12)));
    }
    s0 = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
    uint64_t o[4];
    _mm256_storeu_si256((__m256i *)o, s0);
    return o[0] + o[1] + o[2] + o[3];
}

/* 512-bit loads: on an Intel Xeon (Emerald Rapids) VM two threads read 30 GB/s this way
 * against 24-26 with 256-bit loads (2026-11-28). */
__attribute__((target("avx512f"))) static uint64_t sum_avx512(const uint64_t *p, size_t n)
{
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 32 <= n; i += 32) {
        s0 = _mm512_add_epi64(s0, _mm512_loadu_si512((const void *)(p + i)));
        s1 = _mm512_add_epi64(s1, _mm512_loadu_si512((const void *)(p + i + 8)));
        s2 = _mm512_add_epi64(s2, _mm512_loadu_si512((const void *)(p + i + 16)));
        s3 = _mm512_add_epi64(s3, _mm512_loadu_si512((const void *)(p + i + 24)));
    }
    return (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
}
#endif

static void *bw_worker(void *v)
{
    bw_arg *a = v;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) {
        a->sum = sum_avx512(a->p, a->n);
        return NULL;
    }
    if (__builtin_cpu_supports("avx2")) {
        a->sum = sum_avx2(a->p, a->n);
        return NULL;
    }
#endif
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 8 <= a->n; i += 8) {
        s0 += a->p[i] ^ a->p[i + 4];
        s1 += a->p[i + 1] ^ a->p[i + 5];
        s2 += a->p[i + 2] ^ a->p[i + 6];
        s3 += a->p[i + 3] ^ a->p[i + 7];
    }
    a->sum = s0 + s1 + s2 + s3;
    return NULL;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int membw(int threads, int64_t mib)
{
    size_t n = (size_t)mib * 1048576 / 8;
    uint64_t *buf = aligned_alloc(64, n * 8); /* whole lines: no load splits one */
    if (!buf)
        return 1;
    for (size_t i = 0; i < n; i++)
        buf[i] = i * 0x9e3779b97f4a7c15ull;
    double best = 0;
    for (int pass = 0; pass < 5; pass++) {
        pthread_t th[64];
        bw_arg a[64];
        double t0 = sp_now_ms();
        for (int t = 0; t < threads; t++) {
            a[t] = (bw_arg){buf + n / (size_t)threads * (size_t)t, n / (size_t)threads, 0};
            pthread_create(&th[t], NULL, bw_worker, &a[t]);
        }
        uint64_t s = 0;
        for (int t = 0; t < threads; t++) {
            pthread_join(th[t], NULL);
            s += a[t].sum;
        }
        double gbs = (double)(n * 8) / ((sp_now_ms() - t0) * 1e6);
        if (gbs > best)
            best = gbs;
        if (s == 42)
            printf(" ");
    }
    printf("membw: %.1f GB/s (%d threads, %lld MiB, best of 5)\n", best, threads, (long long)mib);
    free(buf);
    return 0;
}

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int matmul(int threads, int64_t rows, int64_t cols, int64_t tokens, sp_precision prec,
                  sp_wformat fmt, double mib, int woff)
{
    size_t row_bytes = fmt == SP_WF_MXFP4 ? (size_t)cols / 2 : (size_t)cols * 2;
    size_t wbytes = row_bytes * (size_t)rows, sbytes = fmt == SP_WF_MXFP4 ? (size_t)(rows * cols / 32) : 0;
    int n_mats = (int)(mib * 1048576 / (double)(wbytes + sbytes)) + 1; /* >= mib MiB */
    if (tokens > 16 && mib >= 512)
        n_mats = 2;
    sp_weight *w = calloc((size_t)n_mats, sizeof *w);
    unsigned char **mem = calloc((size_t)n_mats, sizeof *mem);
    for (int m = 0; m < n_mats; m++) {
        mem[m] = aligned_alloc(64, (wbytes + sbytes + 64 + 63) / 64 * 64);
        unsigned char *wm = mem[m] + woff;
        for (size_t i = 0; i < wbytes; i += 2) {
            uint16_t h = fmt == SP_WF_MXFP4 ? (uint16_t)rand() : sp_f32_to_bf16((float)rand() / RAND_MAX - 0.5f);
            memcpy(wm + i, &h, 2);
        }
        for (size_t i = 0; i < sbytes; i++)
            wm[wbytes + i] = (unsigned char)(120 + rand() % 4);
        w[m] = (sp_weight){.format = fmt, .rows = rows, .cols = cols, .data = wm,
                           .row_bytes = row_bytes, .global_scale = 1.0f};
        if (sbytes) {
            w[m].scales = wm + wbytes;
            w[m].scale_row_bytes = (size_t)cols / 32;
        }
    }
    float *x = malloc((size_t)(tokens * cols) * 4), *y = malloc((size_t)(tokens * rows) * 4);
    for (int64_t i = 0; i < tokens * cols; i++)
        x[i] = (float)rand() / RAND_MAX - 0.5f;
    sp_pool *pool;
    if (sp_pool_new(threads, &pool, NULL) != SP_OK)
        return 1;
    double t[7], c[7];
    int reps = tokens > 16 ? 3 : 1;
    for (int pass = 0; pass < 7; pass++) {
        double t0 = sp_now_ms(), c0 = cpu_ms();
        for (int r = 0; r < reps; r++)
            for (int m = 0; m < n_mats; m++)
                sp_matmul_prec(pool, prec, &w[m], x, tokens, y, NULL);
        t[pass] = (sp_now_ms() - t0) / (reps * n_mats);
        c[pass] = (cpu_ms() - c0) / (reps * n_mats);
    }
    qsort(t, 7, sizeof t[0], cmp_d);
    qsort(c, 7, sizeof c[0], cmp_d);
    double ms = t[3];
    printf("cpu %.3f ms (%.1f GFLOP/s per CPU second); ", c[3], 2.0 * (double)(rows * cols * tokens) / (c[3] * 1e6));
    printf("matmul %s %lldx%lld tokens=%lld %s [%s]: %.3f ms, %.1f GB/s weights, %.1f GFLOP/s\n",
           sp_wformat_name(fmt), (long long)rows, (long long)cols, (long long)tokens,
           prec == SP_PRECISION_FAST ? "fast" : "exact", sp_matmul_kernel_name_n(&w[0], prec, tokens), ms,
           (double)(wbytes + sbytes) / (ms * 1e6), 2.0 * (double)(rows * cols * tokens) / (ms * 1e6));
    sp_pool_free(pool);
    for (int m = 0; m < n_mats; m++)
        free(mem[m]);
    free(mem);
    free(w);
    free(x);
    free(y);
    return 0;
}

static int attention(int threads, int64_t heads, int64_t kv_heads, int64_t dim, int64_t ctx,
                     int64_t tokens)
{
    if (tokens < 1 || tokens > ctx || dim < 1 || kv_heads < 1 || heads < kv_heads ||
        heads % kv_heads || threads < 1) {
        fprintf(stderr, "attention: need 1 <= tokens <= ctx, dim >= 1, threads >= 1 and heads a "
                        "multiple of kv-heads (got %lld, %lld, %lld, %d, %lld / %lld)\n",
                (long long)tokens, (long long)ctx, (long long)dim, threads, (long long)heads,
                (long long)kv_heads);
        return 2;
    }
    size_t nq = (size_t)(tokens * heads * dim), nkv = (size_t)(ctx * kv_heads * dim);
    float *q = malloc(nq * 4), *k = malloc(nkv * 4), *v = malloc(nkv * 4), *o = malloc(nq * 4);
    float *scr = malloc((size_t)threads * SP_ATTN_GROUP * (size_t)ctx * 4);
    if (!q || !k || !v || !o || !scr) {
        fprintf(stderr, "attention: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < nq; i++)
        q[i] = (float)rand() / RAND_MAX - 0.5f;
    for (size_t i = 0; i < nkv; i++) {
        k[i] = (float)rand() / RAND_MAX - 0.5f;
        v[i] = (float)rand() / RAND_MAX - 0.5f;
    }
    sp_pool *pool;
    if (sp_pool_new(threads, &pool, NULL) != SP_OK)
        return 1;
    sp_attn_args a = {.q = q, .q_stride = heads * dim, .k_cache = k, .v_cache = v,
                      .n_heads = heads, .n_kv_heads = kv_heads, .qk_dim = dim, .v_dim = dim,
                      .pos0 = ctx - tokens, .n_tok = tokens, .scale = 0.125f, .out = o,
                      .scratch = scr, .n_ctx = ctx};
    double t[7], keys = (double)tokens * (double)(2 * ctx - tokens + 1) / 2;
    for (int pass = 0; pass < 7; pass++) {
        double t0 = sp_now_ms();
        sp_attention(pool, &a);
        t[pass] = sp_now_ms() - t0;
    }
    qsort(t, 7, sizeof t[0], cmp_d);
    printf("attention %lld/%lld heads x %lld dims, %lld queries over %lld positions [%s]: %.3f ms, "
           "%.1f GFLOP/s\n", (long long)heads, (long long)kv_heads, (long long)dim,
           (long long)tokens, (long long)ctx, sp_isa_name(sp_isa_active()), t[3],
           4.0 * keys * (double)(heads * dim) / (t[3] * 1e6));
    sp_pool_free(pool);
    free(q);
    free(k);
    free(v);
    free(o);
    free(scr);
    return 0;
}

static int verify_curve(const char *dir, int threads, sp_precision prec, int kmax, int reps)
{
    sp_model_params mp = sp_model_default_params();
    mp.n_threads = threads;
    mp.precision = prec;
    sp_model *m;
    sp_session *s;
    sp_error err = {0};
    if (sp_model_open(dir, &mp, &m, &err) != SP_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    sp_session_params sp = {.n_ctx = 256};
    if (sp_session_new(m, &sp, &s, &err) != SP_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int32_t toks[160];
    for (int i = 0; i < 160; i++)
        toks[i] = (int32_t)((i * 7919 + 13) % sp_model_n_vocab(m));
    if (sp_session_eval(s, toks, 128, NULL, &err) != SP_OK)
        return 1;
    double base = 0, t[64];
    if (reps > 64)
        reps = 64;
    printf("verify cost, %s precision, %d threads (pass over k+1 tokens at position 128):\n",
           prec == SP_PRECISION_FAST ? "fast" : "exact", threads);
    for (int k = 0; k <= kmax; k++) {
        for (int r = 0; r < reps; r++) {
            sp_session_truncate(s, 128, NULL);
            double t0 = sp_now_ms();
            if (sp_session_eval(s, toks + 128, (size_t)k + 1, NULL, &err) != SP_OK)
                return 1;
            t[r] = sp_now_ms() - t0;
        }
        qsort(t, (size_t)reps, sizeof t[0], cmp_d);
        double med = t[reps / 2];
        if (k == 0)
            base = med;
        printf("k=%d: %.2f ms, %.2fx one decode step\n", k, med, med / base);
    }
    sp_session_free(s);
    sp_model_close(m);
    return 0;
}


/* The process's CPU time per prefill of `tokens` tokens and per decode step after it: on
 * a machine shared with other work, what the engine costs regardless of what else runs
 * on the cores (wall-clock numbers need a quiet machine; they are printed beside). */
static int cpu_time(const char *dir, sp_precision prec, int64_t tokens, int reps, int threads)
{
    enum { GEN = 8 };
    sp_model_params mp = sp_model_default_params();
    mp.n_threads = threads;
    mp.precision = prec;
    mp.device = "cpu";
    mp.n_ctx = tokens + GEN;
    sp_model *m;
    sp_session *s;
    sp_error err = {0};
    if (sp_model_open(dir, &mp, &m, &err) != SP_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    sp_session_params sp = {.n_ctx = tokens + GEN, .n_batch = tokens};
    int32_t *toks = malloc((size_t)(tokens + GEN) * sizeof *toks);
    if (!toks || sp_session_new(m, &sp, &s, &err) != SP_OK) {
        fprintf(stderr, "%s\n", toks ? err.msg : "out of memory");
        return 1;
    }
    for (int64_t i = 0; i < tokens + GEN; i++)
        toks[i] = (int32_t)((i * 7919 + 13) % sp_model_n_vocab(m));
    double pf[64], dc[64], pw[64], dw[64];
    if (reps > 64)
        reps = 64;
    for (int r = -1; r < reps; r++) { /* r = -1: untimed warm-up */
        sp_session_truncate(s, 0, NULL);
        double t0 = cpu_ms(), w0 = sp_now_ms();
        if (sp_session_eval(s, toks, (size_t)tokens, NULL, &err) != SP_OK)
            return 1;
        double t1 = cpu_ms(), w1 = sp_now_ms();
        for (int g = 0; g < GEN; g++)
            if (sp_session_eval(s, toks + tokens + g, 1, NULL, &err) != SP_OK)
                return 1;
        if (r >= 0) {
            pf[r] = t1 - t0;
            dc[r] = (cpu_ms() - t1) / GEN;
            pw[r] = w1 - w0;
            dw[r] = (sp_now_ms() - w1) / GEN;
        }
    }
    qsort(pf, (size_t)reps, sizeof pf[0], cmp_d);
    qsort(dc, (size_t)reps, sizeof dc[0], cmp_d);
    qsort(pw, (size_t)reps, sizeof pw[0], cmp_d);
    qsort(dw, (size_t)reps, sizeof dw[0], cmp_d);
    printf("%s, %d thread(s), %s precision: prefill %lld tokens %.1f ms CPU (%.1f tok/s per CPU "
           "second), decode %.2f ms CPU per token; wall: prefill %.1f ms, decode %.2f ms "
           "(medians of %d)\n",
           dir, threads, prec == SP_PRECISION_FAST ? "fast" : "exact", (long long)tokens, pf[reps / 2],
           (double)tokens / pf[reps / 2] * 1e3, dc[reps / 2], pw[reps / 2], dw[reps / 2], reps);
    free(toks);
    sp_session_free(s);
    sp_model_close(m);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_cpu membw|matmul|attention|verify|cputime [options]\n");
        return 2;
    }
    int threads = 2, cpu_threads = 1; /* cputime defaults to one thread */
    int64_t mib = 0, rows = 2048, cols = 8192, tokens = 0; /* 0: the mode's default */
    int woff = 0;
    sp_precision prec = SP_PRECISION_EXACT;
    sp_wformat fmt = SP_WF_BF16;
    const char *model = NULL;
    int kmax = 8, reps = 7;
    int64_t heads = 12, kv_heads = 4, dim = 64, ctx = 512;
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *o = argv[i], *v = argv[i + 1];
        if (!strcmp(o, "--threads")) threads = cpu_threads = atoi(v);
        else if (!strcmp(o, "--mib")) mib = atoll(v);
        else if (!strcmp(o, "--offset")) woff = atoi(v) & 63;
        else if (!strcmp(o, "--rows")) rows = atoll(v);
        else if (!strcmp(o, "--cols")) cols = atoll(v);
        else if (!strcmp(o, "--tokens")) tokens = atoll(v);
        else if (!strcmp(o, "--precision")) prec = !strcmp(v, "fast") ? SP_PRECISION_FAST : SP_PRECISION_EXACT;
        else if (!strcmp(o, "--model")) model = v;
        else if (!strcmp(o, "--heads")) heads = atoll(v);
        else if (!strcmp(o, "--kv-heads")) kv_heads = atoll(v);
        else if (!strcmp(o, "--dim")) dim = atoll(v);
        else if (!strcmp(o, "--ctx")) ctx = atoll(v);
        else if (!strcmp(o, "--kmax")) kmax = atoi(v);
        else if (!strcmp(o, "--reps")) reps = atoi(v);
        else if (!strcmp(o, "--format")) fmt = !strcmp(v, "mxfp4") ? SP_WF_MXFP4 : SP_WF_BF16;
        else {
            fprintf(stderr, "unknown option %s\n", o);
            return 2;
        }
    }
    if (!strcmp(argv[1], "membw"))
        return membw(threads, mib ? mib : 1024);
    if (!strcmp(argv[1], "matmul"))
        return matmul(threads, rows, cols, tokens ? tokens : 1, prec, fmt, mib ? (double)mib : 512.0,
                      woff);
    if (!strcmp(argv[1], "attention"))
        return attention(threads, heads, kv_heads, dim, ctx, tokens ? tokens : ctx);
    if (!strcmp(argv[1], "verify") && model)
        return verify_curve(model, threads, prec, kmax, reps);
    if (!strcmp(argv[1], "cputime") && model)
        return cpu_time(model, prec, tokens > 1 ? tokens : 128, reps, cpu_threads > 0 ? cpu_threads : 1);
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
}
