/* strmap.h: an open-addressing hash map from byte strings to int64 values.
 * Keys are borrowed: the caller keeps them alive and unchanged while the map is used.
 * Used for tensor-name lookup, vocabularies and merge tables. */
#ifndef SP_UTIL_STRMAP_H
#define SP_UTIL_STRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sp_strmap_slot {
    const char *key; /* NULL = empty */
    uint32_t len;
    uint32_t hash;
    uint64_t head;   /* the key's first 8 bytes (zero-padded): most keys compare in-slot */
    int64_t value;
} sp_strmap_slot;

typedef struct sp_strmap {
    sp_strmap_slot *slots;
    size_t cap; /* power of two */
    size_t n;
} sp_strmap;

uint32_t sp_hash_bytes(const void *data, size_t len);

/* Returns false when out of memory. */
bool sp_strmap_init(sp_strmap *m, size_t expected);
void sp_strmap_fini(sp_strmap *m);
/* Inserts key -> value. Returns 1 when inserted, 0 when the key already existed (its
 * value is left unchanged), -1 when out of memory or the key is too long. */
int sp_strmap_put(sp_strmap *m, const char *key, size_t len, int64_t value);
bool sp_strmap_get(const sp_strmap *m, const char *key, size_t len, int64_t *value);

/* Batched lookups (loading large vocabularies): hash keys with sp_hash_bytes, prefetch
 * their slots, then look them up with the hash: the cache misses overlap. */
void sp_strmap_prefetch(const sp_strmap *m, uint32_t hash);
bool sp_strmap_get_hashed(const sp_strmap *m, const char *key, size_t len, uint32_t hash,
                          int64_t *value);

#endif
