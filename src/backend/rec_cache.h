/* rec_cache.h: which passes a backend has recorded — a small least-recently-used map from
 * a pass's key (sp_rec_key bytes) to the backend's recording (a CUDA graph), with the rule
 * of when to record: on a key's second sighting, so a pass shape seen once (a prompt of
 * odd length) costs no recording, while a decode step or a verify pass of a fixed k is
 * recorded on its second step and replayed from then on. A key whose recording failed is
 * never tried again (while it stays in the map). Not thread-safe: the caller holds the
 * model's lock (one pass at a time). */
#ifndef SP_BACKEND_REC_CACHE_H
#define SP_BACKEND_REC_CACHE_H

#include "backend/backend.h"

#include <stdbool.h>
#include <stdint.h>

#define SP_REC_SLOTS 16

typedef struct sp_rec_slot {
    unsigned char *key;
    size_t len;
    void *rec;     /* the recording, NULL while only seen */
    bool failed;   /* recording it failed once: never again */
    uint64_t used; /* last use, for eviction */
} sp_rec_slot;

typedef struct sp_rec_cache {
    sp_rec_slot slot[SP_REC_SLOTS];
    uint64_t tick;
    void (*free_rec)(void *rec); /* frees a recording on eviction */
} sp_rec_cache;

/* The recording for key, or NULL. */
void *sp_rec_find(sp_rec_cache *rc, sp_rec_key key);
/* Whether key should be recorded now (seen before, never failed): returns its slot, else
 * notes the sighting (evicting the least recently used slot) and returns NULL. */
sp_rec_slot *sp_rec_want(sp_rec_cache *rc, sp_rec_key key);
void sp_rec_clear(sp_rec_cache *rc);

#endif
