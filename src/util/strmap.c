/* strmap.c: linear-probing string hash map (see strmap.h). */
#include "util/strmap.h"

#include <stdlib.h>
#include <string.h>

uint32_t sp_hash_bytes(const void *data, size_t len)
{
    /* 64-bit FNV-1a folded to 32 bits, then mixed: cheap and good enough for keys that
     * are mostly short tokens. */
    const unsigned char *p = data;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return (uint32_t)h;
}

bool sp_strmap_init(sp_strmap *m, size_t expected)
{
    size_t cap = 16;
    while (cap < expected * 2 + 2)
        cap <<= 1;
    m->slots = calloc(cap, sizeof *m->slots);
    m->cap = m->slots ? cap : 0;
    m->n = 0;
    return m->slots != NULL;
}

void sp_strmap_fini(sp_strmap *m)
{
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static uint64_t head_of(const char *key, uint32_t len)
{
    uint64_t h = 0;
    memcpy(&h, key, len < 8 ? len : 8);
    return h;
}

static sp_strmap_slot *find_slot(sp_strmap_slot *slots, size_t cap, const char *key,
                                 uint32_t len, uint32_t hash, uint64_t head)
{
    size_t mask = cap - 1;
    size_t i = hash & mask;
    for (;;) {
        sp_strmap_slot *s = &slots[i];
        if (!s->key || (s->hash == hash && s->len == len && s->head == head &&
                        (len <= 8 || memcmp(s->key + 8, key + 8, len - 8) == 0)))
            return s;
        i = (i + 1) & mask;
    }
}

static bool grow(sp_strmap *m)
{
    size_t cap = m->cap * 2;
    sp_strmap_slot *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return false;
    for (size_t i = 0; i < m->cap; i++) {
        sp_strmap_slot *s = &m->slots[i];
        if (s->key)
            *find_slot(slots, cap, s->key, s->len, s->hash, s->head) = *s;
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return true;
}

int sp_strmap_put(sp_strmap *m, const char *key, size_t len, int64_t value)
{
    if (len > UINT32_MAX)
        return -1;
    if ((m->n + 1) * 2 > m->cap && !grow(m))
        return -1;
    uint32_t h = sp_hash_bytes(key, len);
    uint64_t head = head_of(key, (uint32_t)len);
    sp_strmap_slot *s = find_slot(m->slots, m->cap, key, (uint32_t)len, h, head);
    if (s->key)
        return 0;
    s->key = key;
    s->len = (uint32_t)len;
    s->hash = h;
    s->head = head;
    s->value = value;
    m->n++;
    return 1;
}

void sp_strmap_prefetch(const sp_strmap *m, uint32_t hash)
{
    if (m->cap)
        __builtin_prefetch(&m->slots[hash & (m->cap - 1)]);
}

bool sp_strmap_get(const sp_strmap *m, const char *key, size_t len, int64_t *value)
{
    return sp_strmap_get_hashed(m, key, len, sp_hash_bytes(key, len), value);
}

bool sp_strmap_get_hashed(const sp_strmap *m, const char *key, size_t len, uint32_t h,
                          int64_t *value)
{
    if (!m->cap || len > UINT32_MAX)
        return false;
    sp_strmap_slot *s = find_slot(m->slots, m->cap, key, (uint32_t)len, h, head_of(key, (uint32_t)len));
    if (!s->key)
        return false;
    if (value)
        *value = s->value;
    return true;
}
