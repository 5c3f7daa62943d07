/* tok_pattern.c: tokenizers' Pattern::find_matches and SplitDelimiterBehavior, plus the
 * text arena and piece lists (see tok_internal.h). */
#include "text/tok/tok_internal.h"
#include "text/tok/unicode.h"
#include "util/error.h"
#include "util/utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

bool sp_ctx_reserve(sp_tok_ctx *c, size_t extra)
{
    if (c->n + extra + 1 <= c->cap)
        return true;
    size_t cap = c->cap ? c->cap : 4096;
    while (cap < c->n + extra + 1)
        cap *= 2;
    char *p = realloc(c->buf, cap);
    if (!p)
        return false;
    c->buf = p;
    c->cap = cap;
    return true;
}

size_t sp_ctx_append(sp_tok_ctx *c, const char *s, size_t n)
{
    /* s may point into the arena itself: remember where, since reserving may move it */
    bool inside = c->buf && s >= c->buf && s < c->buf + c->cap;
    size_t src = inside ? (size_t)(s - c->buf) : 0;
    if (!sp_ctx_reserve(c, n))
        return SIZE_MAX;
    size_t off = c->n;
    if (n)
        memmove(c->buf + off, inside ? c->buf + src : s, n);
    c->n += n;
    return off;
}

static const char *find_bytes(const char *h, size_t hn, const char *nd, size_t nn)
{
    if (nn == 0 || hn < nn)
        return NULL;
    for (size_t i = 0; i + nn <= hn; i++) {
        const char *p = memchr(h + i, nd[0], hn - nn - i + 1);
        if (!p)
            return NULL;
        if (memcmp(p, nd, nn) == 0)
            return p;
        i = (size_t)(p - h);
    }
    return NULL;
}

bool sp_pieces_push(sp_pieces *p, sp_piece x)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        sp_piece *v = realloc(p->v, cap * sizeof *v);
        if (!v)
            return false;
        p->v = v;
        p->cap = cap;
    }
    p->v[p->n++] = x;
    return true;
}

void sp_pattern_fini(sp_pattern *p)
{
    free(p->str);
    sp_regex_free(p->re);
    memset(p, 0, sizeof *p);
}

static bool push_span(sp_span **v, size_t *n, size_t *cap, size_t s, size_t e, bool m)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        sp_span *g = realloc(*v, c * sizeof *g);
        if (!g)
            return false;
        *v = g;
        *cap = c;
    }
    (*v)[(*n)++] = (sp_span){s, e, m};
    return true;
}

static bool char_matches(const sp_pattern *p, uint32_t cp)
{
    switch (p->kind) {
    case SP_PAT_WHITESPACE: return sp_uc_is_whitespace(cp);
    case SP_PAT_NUMERIC: return sp_uc_is_numeric(cp);
    case SP_PAT_PUNCT: return sp_uc_is_punctuation(cp);
    case SP_PAT_CHAR: return cp == p->ch;
    default: return false;
    }
}

sp_status sp_pattern_spans(const sp_pattern *p, const char *s, size_t n, bool invert,
                           sp_span **spans, size_t *n_spans, size_t *cap, sp_error *err)
{
    *n_spans = 0;
    if (n == 0)
        return push_span(spans, n_spans, cap, 0, 0, invert) ? SP_OK
                                                           : sp_err(err, SP_ERR_NOMEM, "out of memory");
    size_t prev = 0;
    bool ok = true;
    const unsigned char *u = (const unsigned char *)s;
    if (p->kind == SP_PAT_STRING || p->kind == SP_PAT_REGEX) {
        size_t pos = 0;
        while (pos <= n && ok) {
            size_t ms, me;
            if (p->kind == SP_PAT_STRING) {
                if (p->str_len == 0)
                    break;
                const char *hit = find_bytes(s + pos, n - pos, p->str, p->str_len);
                if (!hit)
                    break;
                ms = (size_t)(hit - s);
                me = ms + p->str_len;
            } else {
                int r = sp_regex_find(p->re, s, n, pos, &ms, &me, err);
                if (r < 0)
                    return err ? err->status : SP_ERR_LIMIT;
                if (r == 0)
                    break;
            }
            if (prev != ms)
                ok = push_span(spans, n_spans, cap, prev, ms, invert);
            ok = ok && push_span(spans, n_spans, cap, ms, me, !invert);
            prev = me;
            if (me == ms) { /* empty match: step over one character */
                if (ms >= n)
                    break;
                size_t l = sp_utf8_seq_len(u + ms, n - ms);
                pos = ms + (l ? l : 1);
            } else {
                pos = me;
            }
        }
        if (ok && prev != n)
            ok = push_span(spans, n_spans, cap, prev, n, invert);
    } else {
        size_t i = 0, last = 0;
        while (i < n && ok) {
            uint32_t cp;
            size_t l = sp_utf8_decode(u + i, n - i, &cp);
            if (!l)
                return sp_err(err, SP_ERR_INTERNAL, "invalid UTF-8 inside the tokenizer");
            if (char_matches(p, cp)) {
                if (last < i)
                    ok = push_span(spans, n_spans, cap, last, i, invert);
                ok = ok && push_span(spans, n_spans, cap, i, i + l, !invert);
                last = i + l;
            }
            i += l;
        }
        if (ok && n > last)
            ok = push_span(spans, n_spans, cap, last, n, invert);
    }
    return ok ? SP_OK : sp_err(err, SP_ERR_NOMEM, "out of memory");
}

size_t sp_split_apply(const sp_span *sp, size_t n, sp_split_behavior b, sp_span *out)
{
    size_t o = 0;
    bool prev_match = false;
    switch (b) {
    case SP_SPLIT_ISOLATED:
        for (size_t i = 0; i < n; i++)
            out[o++] = (sp_span){sp[i].s, sp[i].e, false};
        break;
    case SP_SPLIT_REMOVED:
        for (size_t i = 0; i < n; i++)
            if (!sp[i].match)
                out[o++] = (sp_span){sp[i].s, sp[i].e, false};
        break;
    case SP_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < n; i++) {
            if (sp[i].match == prev_match && o > 0)
                out[o - 1].e = sp[i].e;
            else
                out[o++] = (sp_span){sp[i].s, sp[i].e, false};
            prev_match = sp[i].match;
        }
        break;
    case SP_SPLIT_MERGED_PREV:
        for (size_t i = 0; i < n; i++) {
            if (sp[i].match && !prev_match && o > 0)
                out[o - 1].e = sp[i].e;
            else
                out[o++] = (sp_span){sp[i].s, sp[i].e, false};
            prev_match = sp[i].match;
        }
        break;
    case SP_SPLIT_MERGED_NEXT: {
        /* walk backwards, then reverse */
        for (size_t k = n; k-- > 0;) {
            if (sp[k].match && !prev_match && o > 0)
                out[o - 1].s = sp[k].s;
            else
                out[o++] = (sp_span){sp[k].s, sp[k].e, false};
            prev_match = sp[k].match;
        }
        for (size_t i = 0; i < o / 2; i++) {
            sp_span t = out[i];
            out[i] = out[o - 1 - i];
            out[o - 1 - i] = t;
        }
        break;
    }
    }
    return o;
}
