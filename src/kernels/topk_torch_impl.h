/* topk_torch_impl.h: the body of topk_torch.c (libstdc++'s nth_element and partial_sort
 * selection for torch.topk's comparator; see kernels/cpu/topk_torch.h), written once and
 * compiled twice: by the C compiler in kernels/cpu/topk_torch.c and by nvcc in
 * kernels/cuda/cuda_dsv4.cu, where one GPU thread runs it per indexer query. So both
 * backends pick the same entries from the same scores, ties included. The includer defines
 * TT_FN as the functions' qualifiers (`static`, or `static __device__`). Names follow
 * libstdc++'s bits/stl_algo.h and bits/stl_heap.h so the two can be read side by side. */
#ifndef SP_KERNELS_TOPK_TORCH_IMPL_H
#define SP_KERNELS_TOPK_TORCH_IMPL_H

#include "kernels/cpu/topk_torch.h"

typedef sp_topk_elem tt_elem;

TT_FN int tt_comp(const tt_elem *a, const tt_elem *b) { return a->v > b->v; }

TT_FN void tt_swap(tt_elem *a, tt_elem *b)
{
    tt_elem t = *a;
    *a = *b;
    *b = t;
}

/* ---- heap (stl_heap.h) ---------------------------------------------------------------- */

TT_FN void tt_push_heap(tt_elem *first, int64_t hole, int64_t top, tt_elem value)
{
    int64_t parent = (hole - 1) / 2;
    while (hole > top && tt_comp(&first[parent], &value)) {
        first[hole] = first[parent];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    first[hole] = value;
}

TT_FN void tt_adjust_heap(tt_elem *first, int64_t hole, int64_t len, tt_elem value)
{
    int64_t top = hole, child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (tt_comp(&first[child], &first[child - 1]))
            child--;
        first[hole] = first[child];
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        first[hole] = first[child - 1];
        hole = child - 1;
    }
    tt_push_heap(first, hole, top, value);
}

TT_FN void tt_make_heap(tt_elem *first, int64_t len)
{
    if (len < 2)
        return;
    for (int64_t parent = (len - 2) / 2;; parent--) {
        tt_adjust_heap(first, parent, len, first[parent]);
        if (parent == 0)
            return;
    }
}

TT_FN void tt_heap_select(tt_elem *first, int64_t middle, int64_t last)
{
    tt_make_heap(first, middle);
    for (int64_t i = middle; i < last; i++)
        if (tt_comp(&first[i], &first[0])) { /* pop_heap(first, middle, i) */
            tt_elem value = first[i];
            first[i] = first[0];
            tt_adjust_heap(first, 0, middle, value);
        }
}

/* ---- introselect (stl_algo.h) --------------------------------------------------------- */

TT_FN void tt_move_median_to_first(tt_elem *result, tt_elem *a, tt_elem *b, tt_elem *c)
{
    if (tt_comp(a, b)) {
        if (tt_comp(b, c))
            tt_swap(result, b);
        else if (tt_comp(a, c))
            tt_swap(result, c);
        else
            tt_swap(result, a);
    } else if (tt_comp(a, c)) {
        tt_swap(result, a);
    } else if (tt_comp(b, c)) {
        tt_swap(result, c);
    } else {
        tt_swap(result, b);
    }
}

TT_FN tt_elem *tt_unguarded_partition(tt_elem *first, tt_elem *last, const tt_elem *pivot)
{
    for (;;) {
        while (tt_comp(first, pivot))
            first++;
        last--;
        while (tt_comp(pivot, last))
            last--;
        if (!(first < last))
            return first;
        tt_swap(first, last);
        first++;
    }
}

TT_FN tt_elem *tt_unguarded_partition_pivot(tt_elem *first, tt_elem *last)
{
    tt_elem *mid = first + (last - first) / 2;
    tt_move_median_to_first(first, first + 1, mid, last - 1);
    return tt_unguarded_partition(first + 1, last, first);
}

TT_FN void tt_insertion_sort(tt_elem *first, tt_elem *last)
{
    if (first == last)
        return;
    for (tt_elem *i = first + 1; i != last; i++) {
        tt_elem val = *i;
        if (tt_comp(&val, first)) {
            for (tt_elem *p = i; p != first; p--)
                *p = *(p - 1);
            *first = val;
        } else { /* unguarded_linear_insert */
            tt_elem *hole = i, *next = i - 1;
            while (tt_comp(&val, next)) {
                *hole = *next;
                hole = next;
                next--;
            }
            *hole = val;
        }
    }
}

TT_FN int64_t tt_lg(int64_t n)
{
    int64_t r = 0;
    while (n > 1) {
        n >>= 1;
        r++;
    }
    return r;
}

TT_FN void tt_nth_element(tt_elem *first, tt_elem *nth, tt_elem *last)
{
    if (first == last || nth == last)
        return;
    int64_t depth = 2 * tt_lg(last - first);
    while (last - first > 3) {
        if (depth == 0) {
            tt_heap_select(first, nth - first + 1, last - first);
            tt_swap(first, nth);
            return;
        }
        depth--;
        tt_elem *cut = tt_unguarded_partition_pivot(first, last);
        if (cut <= nth)
            first = cut;
        else
            last = cut;
    }
    tt_insertion_sort(first, last);
}

/* q [n] -> q[0..k) the pairs torch.topk keeps (see topk_torch.h). */
TT_FN void tt_topk_torch(tt_elem *q, int64_t n, int64_t k)
{
    if (k * 64 <= n)
        tt_heap_select(q, k, n); /* partial_sort's selection; its sort_heap only orders the k */
    else
        tt_nth_element(q, q + k - 1, q + n);
}

#endif
