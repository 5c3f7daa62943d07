/* rec_cache.c: the map of recorded passes (see rec_cache.h). */
#include "backend/rec_cache.h"

#include <stdlib.h>
#include <string.h>

static sp_rec_slot *lookup(sp_rec_cache *rc, sp_rec_key key)
{
    for (int i = 0; i < SP_REC_SLOTS; i++) {
        sp_rec_slot *s = &rc->slot[i];
        if (s->key && s->len == key.len && !memcmp(s->key, key.bytes, key.len)) {
            s->used = ++rc->tick;
            return s;
        }
    }
    return NULL;
}

static void empty(sp_rec_cache *rc, sp_rec_slot *s)
{
    if (s->rec && rc->free_rec)
        rc->free_rec(s->rec);
    free(s->key);
    memset(s, 0, sizeof *s);
}

void *sp_rec_find(sp_rec_cache *rc, sp_rec_key key)
{
    sp_rec_slot *s = lookup(rc, key);
    return s && !s->failed ? s->rec : NULL;
}

sp_rec_slot *sp_rec_want(sp_rec_cache *rc, sp_rec_key key)
{
    sp_rec_slot *s = lookup(rc, key);
    if (s)
        return s->failed || s->rec ? NULL : s;
    sp_rec_slot *victim = &rc->slot[0];
    for (int i = 1; i < SP_REC_SLOTS && victim->key; i++)
        if (!rc->slot[i].key || rc->slot[i].used < victim->used)
            victim = &rc->slot[i];
    empty(rc, victim);
    unsigned char *k = malloc(key.len ? key.len : 1);
    if (!k)
        return NULL; /* not noting a sighting only delays recording */
    memcpy(k, key.bytes, key.len);
    victim->key = k;
    victim->len = key.len;
    victim->used = ++rc->tick;
    return NULL;
}

void sp_rec_clear(sp_rec_cache *rc)
{
    for (int i = 0; i < SP_REC_SLOTS; i++)
        empty(rc, &rc->slot[i]);
}
