/* expert_steps.c: whether an expert table's entries lie at equal steps (sp_expert_steps in
 * backend.h), so that a kernel can compute an expert's matrices from its id. Every entry
 * is checked against entry 0 moved e steps (the steps from entry 1): pointers, shapes and
 * formats, none input-major. Pointer arithmetic is done on integers and checked for
 * overflow: a table that fails any check is simply not uniform. */
#include "backend/backend.h"

#include <stdint.h>
#include <string.h>

static bool same_shape(const sp_weight *a, const sp_weight *b)
{
    return a->format == b->format && a->rows == b->rows && a->cols == b->cols &&
           a->row_bytes == b->row_bytes && a->scale_row_bytes == b->scale_row_bytes &&
           a->global_scale == b->global_scale && a->row_offset == b->row_offset &&
           a->keep_exact == b->keep_exact;
}

static int64_t step_of(const void *p0, const void *p1)
{
    return (int64_t)((uintptr_t)p1 - (uintptr_t)p0);
}

/* Whether p is p0 moved e steps (NULL only where p0 is and the step is 0). */
static bool at_step(const void *p0, int64_t step, int64_t e, const void *p)
{
    int64_t off;
    if (__builtin_mul_overflow(e, step, &off))
        return false;
    return (uintptr_t)p == (uintptr_t)p0 + (uintptr_t)off && (p != NULL || (p0 == NULL && step == 0));
}

sp_expert_steps sp_expert_steps_of(const sp_expert *table, int64_t n)
{
    sp_expert_steps s, none;
    memset(&none, 0, sizeof none);
    s = none;
    if (!table || n < 1)
        return none;
    const sp_expert *t0 = &table[0], *t1 = n > 1 ? &table[1] : &table[0];
    const sp_weight *w0[3] = {&t0->gate, &t0->up, &t0->down};
    const sp_weight *w1[3] = {&t1->gate, &t1->up, &t1->down};
    for (int i = 0; i < 3; i++) {
        s.data[i] = step_of(w0[i]->data, w1[i]->data);
        s.scales[i] = step_of(w0[i]->scales, w1[i]->scales);
    }
    const int64_t gb = step_of(t0->gate_up_bias, t1->gate_up_bias);
    const int64_t db = step_of(t0->down_bias, t1->down_bias);
    if (gb % (int64_t)sizeof(float) || db % (int64_t)sizeof(float))
        return none;
    for (int64_t e = 0; e < n; e++) {
        const sp_expert *x = &table[e];
        const sp_weight *w[3] = {&x->gate, &x->up, &x->down};
        if (x->in_major || !at_step(t0->gate_up_bias, gb, e, x->gate_up_bias) ||
            !at_step(t0->down_bias, db, e, x->down_bias))
            return none;
        for (int i = 0; i < 3; i++)
            if (!same_shape(w[i], w0[i]) || !at_step(w0[i]->data, s.data[i], e, w[i]->data) ||
                !at_step(w0[i]->scales, s.scales[i], e, w[i]->scales))
                return none;
    }
    s.uniform = true;
    s.first = *t0;
    s.gate_up_bias = gb / (int64_t)sizeof(float);
    s.down_bias = db / (int64_t)sizeof(float);
    return s;
}
