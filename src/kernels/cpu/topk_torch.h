/* topk_torch.h: which k of n scores torch.topk(largest=True) picks on the CPU, ties included.
 *
 * DeepSeek-V4's lightning indexer scores compressed entries with sums of ReLUs, so exact
 * ties (typically several entries at 0) are common, and which of the tied entries
 * torch.topk keeps decides which entries a query attends to. torch (aten TopKImpl.h)
 * fills a queue of (value, index) pairs in index order and runs, with the comparator
 * "a > b", std::partial_sort when k * 64 <= n, else std::nth_element at k - 1; the first
 * k pairs are the result. This file replays libstdc++'s algorithms step for step
 * (introselect with median-of-three pivots and a final insertion sort; heap select), so
 * the same k indices come out. NaN scores are not supported (the indexer has none). */
#ifndef SP_KERNELS_CPU_TOPK_TORCH_H
#define SP_KERNELS_CPU_TOPK_TORCH_H

#include <stdint.h>

typedef struct sp_topk_elem {
    float v;
    int64_t i;
} sp_topk_elem;

/* q [n]: on entry q[j] = (score j, j); on return q[0..k) are the pairs torch.topk keeps
 * (in no particular order). 1 <= k <= n. */
void sp_topk_torch(sp_topk_elem *q, int64_t n, int64_t k);

#endif
