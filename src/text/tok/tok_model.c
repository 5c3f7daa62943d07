/* tok_model.c: the tokenization models: BPE (as tokenizers' BPE: byte fallback, unknown
 * token fusing, ignore_merges, subword prefix/suffix, merges applied lowest rank first,
 * leftmost on ties), WordPiece (greedy longest match) and WordLevel. BPE results for
 * words up to 256 bytes are cached; the cache never changes results. */
#include "text/tok/tok_internal.h"
#include "util/error.h"
#include "util/strmap.h"
#include "util/utf8.h"

#include <stdlib.h>
#include <string.h>

#define CACHE_MAX_WORD 256

bool sp_tok_ids_push(sp_tok_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *v = realloc(ids->v, cap * sizeof *v);
        if (!v)
            return false;
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return true;
}

static int32_t vocab_id(const sp_tokenizer *t, const char *s, size_t n)
{
    int64_t v;
    return sp_strmap_get(&t->vocab_map, s, n, &v) ? (int32_t)v : -1;
}

/* ---- merge map ------------------------------------------------------------------------ */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    return x ^ (x >> 33);
}

static bool merge_get(const sp_merge_map *m, uint32_t a, uint32_t b, uint32_t *rank,
                      uint32_t *merged)
{
    if (!m->cap)
        return false;
    uint64_t key = (((uint64_t)a << 32) | b) + 1;
    size_t mask = m->cap - 1, i = mix64(key) & mask;
    for (;;) {
        const sp_merge_slot *sl = &m->slots[i];
        if (sl->key == 0)
            return false;
        if (sl->key == key) {
            *rank = sl->rank;
            *merged = sl->merged;
            return true;
        }
        i = (i + 1) & mask;
    }
}

static sp_merge_slot *merge_slot(sp_merge_slot *slots, size_t cap, uint64_t key)
{
    size_t mask = cap - 1, i = mix64(key) & mask;
    while (slots[i].key && slots[i].key != key)
        i = (i + 1) & mask;
    return &slots[i];
}

/* Moves every entry into a table of cap slots. */
static bool merge_resize(sp_merge_map *m, size_t cap)
{
    sp_merge_slot *g = calloc(cap, sizeof *g);
    if (!g)
        return false;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key)
            *merge_slot(g, cap, m->slots[i].key) = m->slots[i];
    free(m->slots);
    m->slots = g;
    m->cap = cap;
    return true;
}

/* Inserts or overwrites (later merges win, as collecting into a HashMap does). */
bool sp_merge_put(sp_merge_map *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t merged)
{
    if ((m->n + 1) * 2 > m->cap && !merge_resize(m, m->cap ? m->cap * 2 : 1024))
        return false;
    uint64_t key = (((uint64_t)a << 32) | b) + 1;
    sp_merge_slot *sl = merge_slot(m->slots, m->cap, key);
    if (!sl->key)
        m->n++;
    *sl = (sp_merge_slot){key, rank, merged};
    return true;
}

bool sp_merge_reserve(sp_merge_map *m, size_t reserve)
{
    size_t cap = 1024;
    while (cap < 2 * reserve + 2)
        cap *= 2;
    return m->cap >= cap || merge_resize(m, cap);
}

void sp_merge_prefetch(const sp_merge_map *m, uint32_t a, uint32_t b)
{
    if (m->cap)
        __builtin_prefetch(&m->slots[mix64((((uint64_t)a << 32) | b) + 1) & (m->cap - 1)]);
}

void sp_merge_map_free(sp_merge_map *m)
{
    free(m->slots);
    memset(m, 0, sizeof *m);
}

/* ---- BPE -------------------------------------------------------------------------------- */

typedef struct sym {
    int32_t id;
    int32_t prev, next;
    uint32_t len; /* 0 = merged away */
} sym;

typedef struct heap_item {
    uint32_t rank, pos, merged;
} heap_item;

typedef struct sp_bpe_work {
    sym *syms;
    size_t n, cap;
    heap_item *heap;
    size_t hn, hcap;
} bpe_scratch;

void sp_tok_ctx_fini(sp_tok_ctx *c)
{
    if (c->bpe) {
        free(c->bpe->syms);
        free(c->bpe->heap);
        free(c->bpe);
    }
    free(c->buf);
    free(c->a.v);
    free(c->b.v);
    memset(c, 0, sizeof *c);
}

void sp_bpe_cache_free(sp_tok_model *m)
{
    for (size_t i = 0; i < m->cache_cap; i++) {
        free(m->cache[i].key);
        free(m->cache[i].ids);
    }
    free(m->cache);
    m->cache = NULL;
    m->cache_cap = 0;
}

static bool heap_less(heap_item a, heap_item b)
{
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

static bool heap_push(bpe_scratch *w, heap_item x)
{
    if (w->hn == w->hcap) {
        size_t cap = w->hcap ? w->hcap * 2 : 64;
        heap_item *h = realloc(w->heap, cap * sizeof *h);
        if (!h)
            return false;
        w->heap = h;
        w->hcap = cap;
    }
    size_t i = w->hn++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(x, w->heap[p]))
            break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = x;
    return true;
}

static heap_item heap_pop(bpe_scratch *w)
{
    heap_item top = w->heap[0], last = w->heap[--w->hn];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        heap_item mv = last;
        if (l < w->hn && heap_less(w->heap[l], mv))
            m = l, mv = w->heap[l];
        if (r < w->hn && heap_less(w->heap[r], mv))
            m = r;
        if (m == i)
            break;
        w->heap[i] = w->heap[m];
        i = m;
    }
    if (w->hn)
        w->heap[i] = last;
    return top;
}

static bool add_sym(bpe_scratch *w, int32_t id, uint32_t len)
{
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        sym *s = realloc(w->syms, cap * sizeof *s);
        if (!s)
            return false;
        w->syms = s;
        w->cap = cap;
    }
    int32_t i = (int32_t)w->n;
    if (w->n)
        w->syms[w->n - 1].next = i;
    w->syms[w->n++] = (sym){id, i - 1, -1, len};
    return true;
}

static bool try_queue(const sp_merge_map *m, bpe_scratch *w, size_t pos)
{
    int32_t nx = w->syms[pos].next;
    uint32_t rank, merged;
    if (nx < 0 || !merge_get(m, (uint32_t)w->syms[pos].id, (uint32_t)w->syms[nx].id, &rank, &merged))
        return true;
    return heap_push(w, (heap_item){rank, (uint32_t)pos, merged});
}

static bool merge_all(const sp_merge_map *m, bpe_scratch *w)
{
    w->hn = 0;
    for (size_t i = 0; i + 1 < w->n; i++)
        if (!try_queue(m, w, i))
            return false;
    while (w->hn) {
        heap_item top = heap_pop(w);
        sym *s = &w->syms[top.pos];
        if (s->len == 0 || s->next < 0)
            continue;
        sym *r = &w->syms[s->next];
        uint32_t rank, merged;
        if (!merge_get(m, (uint32_t)s->id, (uint32_t)r->id, &rank, &merged) || merged != top.merged)
            continue; /* expired entry */
        s->id = (int32_t)top.merged;
        s->len += r->len;
        r->len = 0;
        s->next = r->next;
        if (r->next >= 0)
            w->syms[r->next].prev = (int32_t)top.pos;
        if (s->prev >= 0 && !try_queue(m, w, (size_t)s->prev))
            return false;
        if (!try_queue(m, w, top.pos))
            return false;
    }
    return true;
}

/* The per-character symbols of a word, with byte fallback and unknown-token handling. */
static sp_status initial_symbols(const sp_tokenizer *t, const char *s, size_t n, bpe_scratch *w,
                                 sp_error *err)
{
    const sp_tok_model *m = &t->model;
    const unsigned char *u = (const unsigned char *)s;
    int32_t unk_id = -1;
    uint32_t unk_len = 0;
    bool plain = !m->prefix && !m->suffix;
    char tmp[512];
    w->n = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = sp_utf8_decode(u + i, n - i, &cp);
        if (!l)
            return sp_err(err, SP_ERR_INTERNAL, "invalid UTF-8 reached the BPE model");
        bool first = i == 0, last = i + l == n;
        const char *tok = s + i;
        size_t tl = l;
        int32_t id;
        if (plain && cp < 0x30000) {
            id = m->char_ids[cp];
        } else {
            size_t o = 0;
            if (!first && m->prefix && m->prefix_len + l + m->suffix_len < sizeof tmp) {
                memcpy(tmp, m->prefix, m->prefix_len);
                o = m->prefix_len;
            }
            memcpy(tmp + o, s + i, l);
            o += l;
            if (last && m->suffix && o + m->suffix_len < sizeof tmp) {
                memcpy(tmp + o, m->suffix, m->suffix_len);
                o += m->suffix_len;
            }
            tok = tmp;
            tl = o;
            id = vocab_id(t, tmp, o);
        }
        i += l;
        if (id >= 0) {
            if (unk_id >= 0 && !add_sym(w, unk_id, unk_len))
                return sp_err(err, SP_ERR_NOMEM, "out of memory");
            unk_id = -1;
            if (!add_sym(w, id, (uint32_t)l))
                return sp_err(err, SP_ERR_NOMEM, "out of memory");
            continue;
        }
        if (m->byte_fallback) {
            bool all = true;
            for (size_t k = 0; k < tl; k++)
                all &= m->byte_ids[(unsigned char)tok[k]] >= 0;
            if (all) {
                for (size_t k = 0; k < tl; k++)
                    if (!add_sym(w, m->byte_ids[(unsigned char)tok[k]], 1))
                        return sp_err(err, SP_ERR_NOMEM, "out of memory");
                continue;
            }
        }
        if (m->unk_id >= 0) {
            if (unk_id >= 0 && m->fuse_unk) {
                unk_len += (uint32_t)l;
            } else {
                if (unk_id >= 0 && !add_sym(w, unk_id, unk_len))
                    return sp_err(err, SP_ERR_NOMEM, "out of memory");
                unk_id = m->unk_id;
                unk_len = (uint32_t)l;
            }
        }
    }
    if (unk_id >= 0 && !add_sym(w, unk_id, unk_len))
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    return SP_OK;
}

static sp_bpe_cache_entry *cache_slot(const sp_tok_model *m, const char *s, size_t n)
{
    if (!m->cache_cap || n > CACHE_MAX_WORD)
        return NULL;
    return &m->cache[sp_hash_bytes(s, n) & (m->cache_cap - 1)];
}

static void cache_store(sp_bpe_cache_entry *e, const char *s, size_t n, const int32_t *ids,
                        size_t k)
{
    char *key = malloc(n ? n : 1);
    int32_t *v = malloc((k ? k : 1) * sizeof *v);
    if (!key || !v) {
        free(key);
        free(v);
        return;
    }
    free(e->key);
    free(e->ids);
    if (n)
        memcpy(key, s, n);
    if (k) /* an empty result (empty vocabulary) has no ids: ids may be NULL */
        memcpy(v, ids, k * sizeof *v);
    *e = (sp_bpe_cache_entry){key, (uint32_t)n, (uint32_t)k, v};
}

static sp_status bpe(const sp_tokenizer *t, sp_tok_ctx *c, const char *s, size_t n,
                     sp_tok_ids *out, sp_error *err)
{
    const sp_tok_model *m = &t->model;
    if (m->ignore_merges) {
        int32_t id = vocab_id(t, s, n);
        if (id >= 0)
            return sp_tok_ids_push(out, id) ? SP_OK : sp_err(err, SP_ERR_NOMEM, "out of memory");
    }
    sp_bpe_cache_entry *e = cache_slot(m, s, n);
    if (e && e->key && e->key_len == n && memcmp(e->key, s, n) == 0) {
        for (uint32_t i = 0; i < e->n_ids; i++)
            if (!sp_tok_ids_push(out, e->ids[i]))
                return sp_err(err, SP_ERR_NOMEM, "out of memory");
        return SP_OK;
    }
    if (!c->bpe && !(c->bpe = calloc(1, sizeof *c->bpe)))
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    bpe_scratch *w = c->bpe;
    sp_status st = initial_symbols(t, s, n, w, err);
    if (st == SP_OK && !merge_all(&m->merges, w))
        st = sp_err(err, SP_ERR_NOMEM, "out of memory");
    size_t first = out->n;
    for (size_t i = 0; st == SP_OK && i < w->n; i++)
        if (w->syms[i].len && !sp_tok_ids_push(out, w->syms[i].id))
            st = sp_err(err, SP_ERR_NOMEM, "out of memory");
    if (st == SP_OK && e)
        cache_store(e, s, n, out->n > first ? out->v + first : NULL, out->n - first);
    return st;
}

/* ---- WordPiece and WordLevel --------------------------------------------------------------- */

static sp_status wordpiece(const sp_tokenizer *t, const char *s, size_t n, sp_tok_ids *out,
                           sp_error *err)
{
    const sp_tok_model *m = &t->model;
    size_t n_chars = 0;
    for (size_t i = 0; i < n; i++)
        n_chars += ((unsigned char)s[i] & 0xc0) != 0x80;
    if ((int64_t)n_chars > m->max_input_chars_per_word) {
        if (m->unk_id < 0)
            return sp_err(err, SP_ERR_FORMAT, "WordPiece: unknown token is not in the vocabulary");
        return sp_tok_ids_push(out, m->unk_id) ? SP_OK : sp_err(err, SP_ERR_NOMEM, "out of memory");
    }
    size_t first = out->n, start = 0;
    char *buf = malloc(n + m->prefix_len + 1);
    if (!buf)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    while (start < n) {
        size_t end = n;
        int32_t cur = -1;
        while (start < end) {
            size_t o = 0;
            if (start > 0 && m->prefix) {
                memcpy(buf, m->prefix, m->prefix_len);
                o = m->prefix_len;
            }
            memcpy(buf + o, s + start, end - start);
            cur = vocab_id(t, buf, o + end - start);
            if (cur >= 0)
                break;
            do
                end--;
            while (end > start && ((unsigned char)s[end] & 0xc0) == 0x80);
        }
        if (cur < 0) {
            free(buf);
            out->n = first;
            if (m->unk_id < 0)
                return sp_err(err, SP_ERR_FORMAT, "WordPiece: unknown token is not in the vocabulary");
            return sp_tok_ids_push(out, m->unk_id) ? SP_OK : sp_err(err, SP_ERR_NOMEM, "out of memory");
        }
        if (!sp_tok_ids_push(out, cur)) {
            free(buf);
            return sp_err(err, SP_ERR_NOMEM, "out of memory");
        }
        start = end;
    }
    free(buf);
    return SP_OK;
}

sp_status sp_model_tokenize(const sp_tokenizer *t, sp_tok_ctx *c, const char *s, size_t n,
                            sp_tok_ids *out, sp_error *err)
{
    if (n == 0)
        return SP_OK;
    switch (t->model.kind) {
    case SP_MODEL_BPE: return bpe(t, c, s, n, out, err);
    case SP_MODEL_WORDPIECE: return wordpiece(t, s, n, out, err);
    case SP_MODEL_WORDLEVEL: {
        int32_t id = vocab_id(t, s, n);
        if (id < 0)
            id = t->model.unk_id;
        if (id < 0)
            return sp_err(err, SP_ERR_FORMAT, "WordLevel: '%.*s' is not in the vocabulary and "
                          "there is no unknown token", (int)(n > 64 ? 64 : n), s);
        return sp_tok_ids_push(out, id) ? SP_OK : sp_err(err, SP_ERR_NOMEM, "out of memory");
    }
    }
    return sp_err(err, SP_ERR_INTERNAL, "unknown model");
}
