/* wgmma_bits.cu: the measurement behind cuda_tc_wgmma.cu's claim that its GEMM gives the
 * mma.sync kernels' bits. On random chains of 8 k16 products (a 128-column slice; unit
 * operands and operands spread over 2^-20..2^20) it compares, bit for bit:
 *  - mma.sync m16n8k16 with the natural k slots against the same pairs in permuted slots
 *    (cuda_tc.cuh's mapping, reversed): does the k16 sum depend on the slot order?
 *  - mma.sync against wgmma m64nNk16 (N 8 and 32; A from registers in mma.sync's fragment
 *    layout, B from shared memory, K-major without swizzle) on the same pairs;
 * and both against a double-precision sum (that the layouts are right at all). H200,
 * 2026-11-28: 0 outputs differ in every comparison (13.6M outputs).
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/gpu/wgmma_bits.cu
 *   ./a.out        (SWAP=1 also runs the descriptor with LBO and SBO exchanged: wrong sums) */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_bf16.h>
#include <vector>
#define S 8 /* steps a chain (a 128-column slice) */
__device__ __forceinline__ uint32_t ld2(const __nv_bfloat16 *p) {
    return *reinterpret_cast<const uint32_t *>(p);
}
__device__ __forceinline__ void mma(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                    uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// A: [trial][S][64][16], B: [trial][S][N][16], out: [trial][64][N]; perm: k-slot permutation (slot
// -> column)
template <int N>
__global__ void k_mma(const __nv_bfloat16 *A, const __nv_bfloat16 *B, const int *perm, float *out) {
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const __nv_bfloat16 *a = A + (size_t)blockIdx.x * S * 64 * 16,
                        *b = B + (size_t)blockIdx.x * S * N * 16;
    float c[N / 8][4] = {};
    for (int s = 0; s < S; s++) {
        const __nv_bfloat16 *as = a + s * 64 * 16, *bs = b + s * N * 16;
        auto pa = [&](int r, int slot) {
            __nv_bfloat162 v;
            v.x = as[r * 16 + perm[slot]];
            v.y = as[r * 16 + perm[slot + 1]];
            return *reinterpret_cast<uint32_t *>(&v);
        };
        const int r0 = 16 * w + g;
        uint32_t a0 = pa(r0, 2 * q), a1 = pa(r0 + 8, 2 * q), a2 = pa(r0, 2 * q + 8),
                 a3 = pa(r0 + 8, 2 * q + 8);
        for (int nt = 0; nt < N / 8; nt++) {
            const int n = nt * 8 + g;
            __nv_bfloat162 v0, v1;
            v0.x = bs[n * 16 + perm[2 * q]];
            v0.y = bs[n * 16 + perm[2 * q + 1]];
            v1.x = bs[n * 16 + perm[2 * q + 8]];
            v1.y = bs[n * 16 + perm[2 * q + 9]];
            mma(c[nt], a0, a1, a2, a3, *reinterpret_cast<uint32_t *>(&v0),
                *reinterpret_cast<uint32_t *>(&v1));
        }
    }
    float *o = out + (size_t)blockIdx.x * 64 * N;
    for (int nt = 0; nt < N / 8; nt++) {
        const int r0 = 16 * w + g, n = nt * 8 + 2 * q;
        o[r0 * N + n] = c[nt][0];
        o[r0 * N + n + 1] = c[nt][1];
        o[(r0 + 8) * N + n] = c[nt][2];
        o[(r0 + 8) * N + n + 1] = c[nt][3];
    }
}
__device__ __forceinline__ uint64_t desc(const void *p, int lbo, int sbo) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a >> 4) & 0x3fff) | ((uint64_t)((lbo >> 4) & 0x3fff) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3fff) << 32);
}
template <int N>
__device__ __forceinline__ void wg(float (&d)[N / 2], uint32_t a0, uint32_t a1, uint32_t a2,
                                   uint32_t a3, uint64_t db);
template <>
__device__ __forceinline__ void wg<8>(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                      uint32_t a3, uint64_t db) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, %8, 1, 1, 1, 0;"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db));
}
template <>
__device__ __forceinline__ void wg<32>(float (&d)[16], uint32_t a0, uint32_t a1, uint32_t a2,
                                       uint32_t a3, uint64_t db) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, "
                 "1, 1, 1, 0;"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db));
}
// B in shared memory, K-major without swizzle: core matrix (8 tokens x 8 k, 16 bytes a row)
// (nb, kb) at nb * SBO + kb * LBO; slot order = perm (the same k-slot content as k_mma).
template <int N>
__global__ void k_wgmma(const __nv_bfloat16 *A, const __nv_bfloat16 *B, const int *perm, float *out,
                        int swap) {
    __shared__ __align__(128) __nv_bfloat16 bs_all[S][N * 16];
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const __nv_bfloat16 *a = A + (size_t)blockIdx.x * S * 64 * 16,
                        *b = B + (size_t)blockIdx.x * S * N * 16;
    const int LBO = 128, SBO = 256; // core (nb, kb) at nb*256 + kb*128 bytes
    for (int i = threadIdx.x; i < S * N * 16; i += 128) {
        const int s = i / (N * 16), n = (i / 16) % N, slot = i % 16;
        const int nb = n / 8, r = n % 8, kb = slot / 8, e = slot % 8;
        const int byte = nb * SBO + kb * LBO + r * 16 + e * 2;
        bs_all[s][byte / 2] = b[(size_t)s * N * 16 + n * 16 + perm[slot]];
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    float d[N / 2];
    for (int i = 0; i < N / 2; i++)
        d[i] = 0.0f;
    for (int s = 0; s < S; s++) {
        const __nv_bfloat16 *as = a + s * 64 * 16;
        auto pa = [&](int r, int slot) {
            __nv_bfloat162 v;
            v.x = as[r * 16 + perm[slot]];
            v.y = as[r * 16 + perm[slot + 1]];
            return *reinterpret_cast<uint32_t *>(&v);
        };
        const int r0 = 16 * w + g;
        uint32_t a0 = pa(r0, 2 * q), a1 = pa(r0 + 8, 2 * q), a2 = pa(r0, 2 * q + 8),
                 a3 = pa(r0 + 8, 2 * q + 8);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        wg<N>(d, a0, a1, a2, a3, swap ? desc(bs_all[s], SBO, LBO) : desc(bs_all[s], LBO, SBO));
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    }
    float *o = out + (size_t)blockIdx.x * 64 * N;
    for (int nt = 0; nt < N / 8; nt++) {
        const int r0 = 16 * w + g, n = nt * 8 + 2 * q;
        o[r0 * N + n] = d[4 * nt];
        o[r0 * N + n + 1] = d[4 * nt + 1];
        o[(r0 + 8) * N + n] = d[4 * nt + 2];
        o[(r0 + 8) * N + n + 1] = d[4 * nt + 3];
    }
}
static float bf(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint64_t rs = 88172645463325252ull;
static uint64_t rnd() {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}
static uint16_t rbf(int wide) {
    float f = ((rnd() >> 11) * (1.0 / 9007199254740992.0)) * 2 - 1;
    if (wide)
        f = ldexpf(f, (int)(rnd() % 40) - 20);
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16); // truncation: any bf16
}
template <int N> static void run(int trials, int wide, const char *pname, const int *hperm) {
    size_t na = (size_t)trials * S * 64 * 16, nb = (size_t)trials * S * N * 16,
           no = (size_t)trials * 64 * N;
    std::vector<uint16_t> ha(na), hb(nb);
    for (auto &x : ha)
        x = rbf(wide);
    for (auto &x : hb)
        x = rbf(wide);
    __nv_bfloat16 *da, *db;
    float *o1, *o2, *o3, *o4;
    int *dp, *did;
    cudaMalloc(&da, na * 2);
    cudaMalloc(&db, nb * 2);
    cudaMalloc(&o1, no * 4);
    cudaMalloc(&o2, no * 4);
    cudaMalloc(&o3, no * 4);
    cudaMalloc(&o4, no * 4);
    cudaMalloc(&dp, 64);
    cudaMalloc(&did, 64);
    int id[16];
    for (int i = 0; i < 16; i++)
        id[i] = i;
    cudaMemcpy(da, ha.data(), na * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(db, hb.data(), nb * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dp, hperm, 64, cudaMemcpyHostToDevice);
    cudaMemcpy(did, id, 64, cudaMemcpyHostToDevice);
    cudaError_t e;
    k_mma<N><<<trials, 128>>>(da, db, did, o1); // natural slots
    k_mma<N><<<trials, 128>>>(da, db, dp, o2);  // permuted slots
    if ((e = cudaDeviceSynchronize())) {
        printf("N=%d mma: %s\n", N, cudaGetErrorString(e));
        exit(1);
    }
    k_wgmma<N><<<trials, 128>>>(da, db, dp, o3, 0); // permuted slots, LBO = K step
    if ((e = cudaDeviceSynchronize())) {
        printf("N=%d wgmma: %s\n", N, cudaGetErrorString(e));
        exit(1);
    }
    cudaMemset(o4, 0, no * 4);
    if (getenv("SWAP"))
        k_wgmma<N><<<trials, 128>>>(da, db, dp, o4, 1); // descriptor fields swapped
    if ((e = cudaDeviceSynchronize())) {
        printf("N=%d wgmma swapped: %s\n", N, cudaGetErrorString(e));
        exit(1);
    }
    std::vector<float> r1(no), r2(no), r3(no), r4(no);
    cudaMemcpy(r1.data(), o1, no * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(r2.data(), o2, no * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(r3.data(), o3, no * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(r4.data(), o4, no * 4, cudaMemcpyDeviceToHost);
    // double reference for the first trials: is the wgmma layout right at all?
    double e1 = 0, e3 = 0, e4 = 0;
    for (int t = 0; t < 4 && t < trials; t++)
        for (int r = 0; r < 64; r++)
            for (int n = 0; n < N; n++) {
                double ref = 0, mag = 0;
                for (int s = 0; s < S; s++)
                    for (int k = 0; k < 16; k++) {
                        double p = (double)bf(ha[((size_t)t * S + s) * 1024 + r * 16 + k]) *
                                   bf(hb[(((size_t)t * S + s) * N + n) * 16 + k]);
                        ref += p;
                        mag += fabs(p);
                    }
                size_t i = (size_t)t * 64 * N + r * N + n;
                mag = mag > 0 ? mag : 1;
                e1 = fmax(e1, fabs(r1[i] - ref) / mag);
                e3 = fmax(e3, fabs(r3[i] - ref) / mag);
                e4 = fmax(e4, fabs(r4[i] - ref) / mag);
            }
    long d12 = 0, d23 = 0, d24 = 0;
    for (size_t i = 0; i < no; i++) {
        d12 += memcmp(&r1[i], &r2[i], 4) != 0;
        d23 += memcmp(&r2[i], &r3[i], 4) != 0;
        d24 += memcmp(&r2[i], &r4[i], 4) != 0;
    }
    printf("N=%2d %s %s: %zu outputs; rel err vs double: mma %.2e wgmma %.2e wgmma-swapped %.2e; "
           "bits differ: mma natural vs perm %ld, mma perm vs wgmma %ld, vs wgmma-swapped %ld\n",
           N, wide ? "wide " : "unit ", pname, no, e1, e3, e4, d12, d23, d24);
    cudaFree(da);
    cudaFree(db);
    cudaFree(o1);
    cudaFree(o2);
    cudaFree(o3);
    cudaFree(o4);
    cudaFree(dp);
    cudaFree(did);
}
int main() {
    // the fast kernels' slot -> column map inside one k16 mma (cuda_tc.cuh): slot 2q,2q+1 <-
    // 8q,8q+1 ... for the step's first mma: columns {0-3, 8-11, 16-19, 24-27} of 32; as a map of 16
    // slots onto 16 distinct "columns" of the k16 operand: slot s<8 -> 4(s/2) + s%2, s>=8 ->
    // 4((s-8)/2) + 2 + s%2
    int tcmap[16], rev[16], idp[16];
    for (int s = 0; s < 16; s++) {
        tcmap[s] = s < 8 ? 4 * (s / 2) + s % 2 : 4 * ((s - 8) / 2) + 2 + s % 2;
        rev[s] = 15 - s;
        idp[s] = s;
    }
    for (int wide = 0; wide < 2; wide++) {
        run<8>(2048, wide, "identity", idp);
        run<8>(2048, wide, "tc-map  ", tcmap);
        run<8>(2048, wide, "reversed", rev);
        run<32>(1024, wide, "tc-map  ", tcmap);
        run<32>(1024, wide, "reversed", rev);
    }
    return 0;
}
