/* topk_torch.c: libstdc++'s nth_element and partial_sort selection, replayed in C for the
 * comparator torch.topk(largest=True) uses (see topk_torch.h). Names follow libstdc++'s
 * bits/stl_algo.h and bits/stl_heap.h so the two can be read side by side. */
#include "kernels/cpu/topk_torch.h"

typedef sp_topk_elem elem;

static int comp(const elem *a, const elem *b) { return a->v > b->v; }

static void swap(elem *a, elem *b)
{
    elem t = *a;
    *a = *b;
    *b = t;
}

/* ---- heap (stl_heap.h) ---------------------------------------------------------------- */

static void push_heap(elem *first, int64_t hole, int64_t top, elem value)
{
    int64_t parent = (hole - 1) / 2;
    while (hole > top && comp(&first[parent], &value)) {
        first[hole] = first[parent];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    first[hole] = value;
}

static void adjust_heap(elem *first, int64_t hole, int64_t len, elem value)
{
    int64_t top = hole, child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (comp(&first[child], &first[child - 1]))
            child--;
        first[hole] = first[child];
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        first[hole] = first[child - 1];
        hole = child - 1;
    }
    push_heap(first, hole, top, value);
}

static void make_heap(elem *first, int64_t len)
{
    if (len < 2)
        return;
    for (int64_t parent = (len - 2) / 2;; parent--) {
        adjust_heap(first, parent, len, first[parent]);
        if (parent == 0)
            return;
    }
}

static void heap_select(elem *first, int64_t middle, int64_t last)
{
    make_heap(first, middle);
    for (int64_t i = middle; i < last; i++)
        if (comp(&first[i], &first[0])) { /* pop_heap(first, middle, i) */
            elem value = first[i];
            first[i] = first[0];
            adjust_heap(first, 0, middle, value);
        }
}

/* ---- introselect (stl_algo.h) --------------------------------------------------------- */

static void move_median_to_first(elem *result, elem *a, elem *b, elem *c)
{
    if (comp(a, b)) {
        if (comp(b, c))
            swap(result, b);
        else if (comp(a, c))
            swap(result, c);
        else
            swap(result, a);
    } else if (comp(a, c)) {
        swap(result, a);
    } else if (comp(b, c)) {
        swap(result, c);
    } else {
        swap(result, b);
    }
}

static elem *unguarded_partition(elem *first, elem *last, const elem *pivot)
{
    for (;;) {
        while (comp(first, pivot))
            first++;
        last--;
        while (comp(pivot, last))
            last--;
        if (!(first < last))
            return first;
        swap(first, last);
        first++;
    }
}

static elem *unguarded_partition_pivot(elem *first, elem *last)
{
    elem *mid = first + (last - first) / 2;
    move_median_to_first(first, first + 1, mid, last - 1);
    return unguarded_partition(first + 1, last, first);
}

static void insertion_sort(elem *first, elem *last)
{
    if (first == last)
        return;
    for (elem *i = first + 1; i != last; i++) {
        elem val = *i;
        if (comp(&val, first)) {
            for (elem *p = i; p != first; p--)
                *p = *(p - 1);
            *first = val;
        } else { /* unguarded_linear_insert */
            elem *hole = i, *next = i - 1;
            while (comp(&val, next)) {
                *hole = *next;
                hole = next;
                next--;
            }
            *hole = val;
        }
    }
}

static int64_t lg(int64_t n)
{
    int64_t r = 0;
    while (n > 1) {
        n >>= 1;
        r++;
    }
    return r;
}

static void nth_element(elem *first, elem *nth, elem *last)
{
    if (first == last || nth == last)
        return;
    int64_t depth = 2 * lg(last - first);
    while (last - first > 3) {
        if (depth == 0) {
            heap_select(first, nth - first + 1, last - first);
            swap(first, nth);
            return;
        }
        depth--;
        elem *cut = unguarded_partition_pivot(first, last);
        if (cut <= nth)
            first = cut;
        else
            last = cut;
    }
    insertion_sort(first, last);
}

void sp_topk_torch(sp_topk_elem *q, int64_t n, int64_t k)
{
    if (k * 64 <= n)
        heap_select(q, k, n); /* partial_sort's selection; its sort_heap only orders the k */
    else
        nth_element(q, q + k - 1, q + n);
}
