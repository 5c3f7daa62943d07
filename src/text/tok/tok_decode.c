/* tok_decode.c: tokenizers' decoders (ByteLevel, Metaspace, ByteFallback, Fuse, Strip,
 * Replace, WordPiece, BPEDecoder, Sequence), each a transformation of a list of token
 * strings, as Decoder::decode_chain. */
#include "text/tok/tok_internal.h"
#include "text/tok/unicode.h"
#include "util/error.h"
#include "util/utf8.h"

#include <stdlib.h>
#include <string.h>

void sp_decoder_free(sp_decoder *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n_children; i++)
        sp_decoder_free(d->children[i]);
    free(d->children);
    free(d->a);
    free(d->b);
    free(d);
}

void sp_strlist_free(sp_strlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->s[i]);
    free(l->s);
    free(l->len);
    memset(l, 0, sizeof *l);
}

bool sp_strlist_push(sp_strlist *l, const char *s, size_t n)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **a = realloc(l->s, cap * sizeof *a);
        if (!a)
            return false;
        l->s = a;
        size_t *b = realloc(l->len, cap * sizeof *b);
        if (!b)
            return false;
        l->len = b;
        l->cap = cap;
    }
    char *c = malloc(n + 1);
    if (!c)
        return false;
    memcpy(c, s, n);
    c[n] = '\0';
    l->s[l->n] = c;
    l->len[l->n++] = n;
    return true;
}

/* Replaces item i by an owned buffer. */
static void set_item(sp_strlist *l, size_t i, char *s, size_t n)
{
    free(l->s[i]);
    l->s[i] = s;
    l->len[i] = n;
}

static sp_status nomem(sp_error *err)
{
    return sp_err(err, SP_ERR_NOMEM, "out of memory while decoding");
}

/* Inverse of sp_byte_level_char: code point -> byte, or -1. */
extern const uint32_t sp_byte_level_char[256];
static int byte_of_char(uint32_t cp)
{
    if (cp >= 0x21 && cp <= 0x7e)
        return (int)cp;
    if ((cp >= 0xa1 && cp <= 0xac) || (cp >= 0xae && cp <= 0xff))
        return (int)cp;
    if (cp >= 0x100 && cp <= 0x144)
        for (int b = 0; b < 256; b++)
            if (sp_byte_level_char[b] == cp)
                return b;
    return -1;
}

static sp_status byte_level(sp_strlist *l, sp_error *err)
{
    size_t total = 0;
    for (size_t i = 0; i < l->n; i++)
        total += l->len[i];
    unsigned char *bytes = malloc(total + 1);
    char *out = malloc(3 * total + 1);
    if (!bytes || !out) {
        free(bytes);
        free(out);
        return nomem(err);
    }
    size_t nb = 0;
    for (size_t i = 0; i < l->n; i++) {
        const unsigned char *s = (const unsigned char *)l->s[i];
        size_t start = nb;
        bool all = true;
        for (size_t k = 0; k < l->len[i];) {
            uint32_t cp;
            size_t cl = sp_utf8_decode(s + k, l->len[i] - k, &cp);
            int b = cl ? byte_of_char(cp) : -1;
            if (b < 0) {
                all = false;
                break;
            }
            bytes[nb++] = (unsigned char)b;
            k += cl;
        }
        if (!all) { /* a character outside the byte alphabet: keep the token's own bytes */
            nb = start;
            memcpy(bytes + nb, s, l->len[i]);
            nb += l->len[i];
        }
    }
    size_t on = sp_utf8_lossy(bytes, nb, out);
    free(bytes);
    for (size_t i = 0; i < l->n; i++)
        free(l->s[i]);
    l->s[0] = out;
    l->len[0] = on;
    l->n = 1;
    return SP_OK;
}

static bool is_byte_token(const char *s, size_t n, unsigned *b)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return false;
    unsigned v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return false;
        v = v * 16 + (unsigned)d;
    }
    *b = v;
    return true;
}

static bool flush_bytes(sp_strlist *out, unsigned char *bytes, size_t *nb)
{
    if (!*nb)
        return true;
    bool ok;
    if (sp_utf8_valid((const char *)bytes, *nb, NULL)) {
        ok = sp_strlist_push(out, (const char *)bytes, *nb);
    } else {
        ok = true;
        for (size_t i = 0; i < *nb && ok; i++)
            ok = sp_strlist_push(out, "\xef\xbf\xbd", 3);
    }
    *nb = 0;
    return ok;
}

static sp_status byte_fallback(sp_strlist *l, sp_error *err)
{
    sp_strlist out = {0};
    unsigned char *bytes = malloc(l->n + 1);
    size_t nb = 0;
    bool ok = bytes != NULL;
    for (size_t i = 0; i < l->n && ok; i++) {
        unsigned b;
        if (is_byte_token(l->s[i], l->len[i], &b)) {
            bytes[nb++] = (unsigned char)b;
            continue;
        }
        ok = flush_bytes(&out, bytes, &nb) && sp_strlist_push(&out, l->s[i], l->len[i]);
    }
    ok = ok && flush_bytes(&out, bytes, &nb);
    free(bytes);
    if (!ok) {
        sp_strlist_free(&out);
        return nomem(err);
    }
    sp_strlist_free(l);
    *l = out;
    return SP_OK;
}

static sp_status fuse(sp_strlist *l, sp_error *err)
{
    size_t total = 0;
    for (size_t i = 0; i < l->n; i++)
        total += l->len[i];
    char *s = malloc(total + 1);
    if (!s)
        return nomem(err);
    size_t o = 0;
    for (size_t i = 0; i < l->n; i++) {
        memcpy(s + o, l->s[i], l->len[i]);
        o += l->len[i];
        free(l->s[i]);
    }
    s[o] = '\0';
    if (!l->cap) {
        sp_strlist tmp = {0};
        if (!sp_strlist_push(&tmp, s, o)) {
            free(s);
            return nomem(err);
        }
        free(s);
        *l = tmp;
        return SP_OK;
    }
    l->s[0] = s;
    l->len[0] = o;
    l->n = 1;
    return SP_OK;
}

/* Per-token character rewrite: every occurrence of `from` (a string) becomes `to`. */
static sp_status replace(const sp_decoder *d, sp_strlist *l, sp_error *err)
{
    for (size_t i = 0; i < l->n; i++) {
        if (!d->a_len)
            continue;
        size_t cap = l->len[i] * (d->b_len > d->a_len ? d->b_len : 1) + 1, o = 0;
        char *s = malloc(cap + d->b_len);
        if (!s)
            return nomem(err);
        const char *p = l->s[i];
        size_t n = l->len[i];
        for (size_t k = 0; k < n;) {
            if (k + d->a_len <= n && memcmp(p + k, d->a, d->a_len) == 0) {
                memcpy(s + o, d->b, d->b_len);
                o += d->b_len;
                k += d->a_len;
            } else {
                s[o++] = p[k++];
            }
        }
        s[o] = '\0';
        set_item(l, i, s, o);
    }
    return SP_OK;
}

static sp_status strip(const sp_decoder *d, sp_strlist *l, sp_error *err)
{
    (void)err;
    for (size_t i = 0; i < l->n; i++) {
        const unsigned char *s = (const unsigned char *)l->s[i];
        size_t n = l->len[i], b = 0, e = n;
        for (int64_t k = 0; k < d->start && b < n; k++) {
            uint32_t cp;
            size_t cl = sp_utf8_decode(s + b, n - b, &cp);
            if (!cl || cp != d->ch)
                break;
            b += cl;
        }
        for (int64_t k = 0; k < d->stop && e > b; k++) {
            size_t j = e - 1;
            while (j > b && (s[j] & 0xc0) == 0x80)
                j--;
            uint32_t cp;
            if (!sp_utf8_decode(s + j, e - j, &cp) || cp != d->ch)
                break;
            e = j;
        }
        memmove(l->s[i], l->s[i] + b, e - b);
        l->s[i][e - b] = '\0';
        l->len[i] = e - b;
    }
    return SP_OK;
}

static sp_status metaspace(const sp_decoder *d, sp_strlist *l, sp_error *err)
{
    char rep[8];
    size_t rl = sp_utf8_encode(d->ch, rep);
    for (size_t i = 0; i < l->n; i++) {
        char *s = malloc(l->len[i] + 1);
        if (!s)
            return nomem(err);
        size_t o = 0;
        for (size_t k = 0; k < l->len[i];) {
            if (rl && k + rl <= l->len[i] && memcmp(l->s[i] + k, rep, rl) == 0) {
                if (!(i == 0 && d->prepend))
                    s[o++] = ' ';
                k += rl;
            } else {
                s[o++] = l->s[i][k++];
            }
        }
        s[o] = '\0';
        set_item(l, i, s, o);
    }
    return SP_OK;
}

/* s[0..*n) with every occurrence of `from` replaced by `to` (no longer than `from`), in
 * place, in one left-to-right pass that does not rescan what it wrote: Rust's
 * str::replace, so linear (a rescan from the start after each hit was quadratic and could
 * match across a replacement). */
static void replace_shrinking(char *s, size_t *n, const char *from, const char *to)
{
    size_t fl = strlen(from), tl = strlen(to), o = 0, k = 0;
    while (k < *n) {
        if (k + fl <= *n && memcmp(s + k, from, fl) == 0) {
            memcpy(s + o, to, tl);
            o += tl;
            k += fl;
        } else {
            s[o++] = s[k++];
        }
    }
    s[o] = '\0';
    *n = o;
}

/* tokenizers' wordpiece::cleanup: these replacements, in this order. */
static void wordpiece_cleanup(char *s, size_t *n)
{
    static const char *const pairs[][2] = {{" .", "."}, {" ?", "?"}, {" !", "!"},
                                           {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
                                           {" 'm", "'m"}, {" do not", " don't"},
                                           {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++)
        replace_shrinking(s, n, pairs[p][0], pairs[p][1]);
}

static sp_status wordpiece(const sp_decoder *d, sp_strlist *l, sp_error *err)
{
    for (size_t i = 0; i < l->n; i++) {
        bool has_prefix = d->a_len && l->len[i] >= d->a_len && memcmp(l->s[i], d->a, d->a_len) == 0;
        char *s = malloc(l->len[i] + 2);
        if (!s)
            return nomem(err);
        size_t o = 0;
        if (i != 0 && !has_prefix)
            s[o++] = ' ';
        size_t from = (i != 0 && has_prefix) ? d->a_len : 0;
        memcpy(s + o, l->s[i] + from, l->len[i] - from);
        o += l->len[i] - from;
        s[o] = '\0';
        if (d->cleanup)
            wordpiece_cleanup(s, &o);
        set_item(l, i, s, o);
    }
    return SP_OK;
}

static sp_status bpe_suffix(const sp_decoder *d, sp_strlist *l, sp_error *err)
{
    for (size_t i = 0; i < l->n; i++) {
        char *s = malloc(l->len[i] + d->a_len + 2);
        if (!s)
            return nomem(err);
        size_t o = 0;
        const char *p = l->s[i];
        size_t n = l->len[i];
        for (size_t k = 0; k < n;) {
            if (d->a_len && k + d->a_len <= n && memcmp(p + k, d->a, d->a_len) == 0) {
                if (i + 1 != l->n)
                    s[o++] = ' ';
                k += d->a_len;
            } else {
                s[o++] = p[k++];
            }
        }
        s[o] = '\0';
        set_item(l, i, s, o);
    }
    return SP_OK;
}

sp_status sp_decode_chain(const sp_decoder *d, sp_strlist *l, sp_error *err)
{
    switch (d->kind) {
    case SP_DEC_BYTE_LEVEL: return l->n ? byte_level(l, err) : SP_OK;
    case SP_DEC_METASPACE: return metaspace(d, l, err);
    case SP_DEC_BYTE_FALLBACK: return byte_fallback(l, err);
    case SP_DEC_FUSE: return l->n ? fuse(l, err) : SP_OK;
    case SP_DEC_STRIP: return strip(d, l, err);
    case SP_DEC_REPLACE: return replace(d, l, err);
    case SP_DEC_WORDPIECE: return wordpiece(d, l, err);
    case SP_DEC_BPE: return bpe_suffix(d, l, err);
    case SP_DEC_SEQUENCE:
        for (size_t i = 0; i < d->n_children; i++) {
            sp_status st = sp_decode_chain(d->children[i], l, err);
            if (st != SP_OK)
                return st;
        }
        return SP_OK;
    }
    return sp_err(err, SP_ERR_INTERNAL, "unknown decoder");
}
