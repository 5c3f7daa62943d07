/* tok_normalize.c: tokenizers' normalizers (NFC/NFD/NFKC/NFKD through utf8proc,
 * Lowercase, Strip, StripAccents, Replace, Prepend, Append, BertNormalizer, ByteLevel,
 * Sequence). Each reads a range of the arena and appends its output. */
#include "text/tok/tok_internal.h"
#include "text/tok/unicode.h"
#include "util/error.h"
#include "util/utf8.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

void sp_normalizer_free(sp_normalizer *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->n_children; i++)
        sp_normalizer_free(n->children[i]);
    free(n->children);
    sp_pattern_fini(&n->pattern);
    free(n->content);
    free(n);
}

static sp_status nomem(sp_error *err)
{
    return sp_err(err, SP_ERR_NOMEM, "out of memory while normalizing");
}

static sp_status unicode_form(sp_tok_ctx *c, size_t off, size_t n, utf8proc_option_t opt,
                              size_t *oo, size_t *on, sp_error *err)
{
    utf8proc_uint8_t *res = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)c->buf + off, (utf8proc_ssize_t)n,
                                      &res, opt | UTF8PROC_STABLE);
    if (r < 0) {
        free(res);
        return sp_err(err, SP_ERR_INTERNAL, "unicode normalization failed: %s",
                      utf8proc_errmsg(r));
    }
    *oo = sp_ctx_append(c, (const char *)res, (size_t)r);
    free(res);
    *on = (size_t)r;
    return *oo == SIZE_MAX ? nomem(err) : SP_OK;
}

/* Rust char::to_lowercase: full mapping; only U+0130 expands (to "i\u0307"). */
static sp_status lowercase(sp_tok_ctx *c, size_t off, size_t n, size_t *oo, size_t *on,
                           sp_error *err)
{
    if (!sp_ctx_reserve(c, n * 2 + 8))
        return nomem(err);
    size_t start = c->n;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = sp_utf8_decode((const unsigned char *)c->buf + off + i, n - i, &cp);
        i += l ? l : 1;
        if (cp == 0x130) {
            c->n += sp_utf8_encode('i', c->buf + c->n);
            c->n += sp_utf8_encode(0x307, c->buf + c->n);
            continue;
        }
        c->n += sp_utf8_encode((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), c->buf + c->n);
    }
    *oo = start;
    *on = c->n - start;
    return SP_OK;
}

static sp_status strip(const sp_normalizer *nz, sp_tok_ctx *c, size_t off, size_t n,
                       size_t *oo, size_t *on)
{
    const unsigned char *s = (const unsigned char *)c->buf + off;
    size_t b = 0, e = n;
    while (nz->left && b < e) {
        uint32_t cp;
        size_t l = sp_utf8_decode(s + b, e - b, &cp);
        if (!l || !sp_uc_is_whitespace(cp))
            break;
        b += l;
    }
    while (nz->right && e > b) {
        size_t k = e - 1;
        while (k > b && (s[k] & 0xc0) == 0x80)
            k--;
        uint32_t cp;
        if (!sp_utf8_decode(s + k, e - k, &cp) || !sp_uc_is_whitespace(cp))
            break;
        e = k;
    }
    *oo = off + b;
    *on = e - b;
    return SP_OK;
}

/* What map_chars does with one code point. */
typedef enum char_action { CH_KEEP, CH_DROP, CH_SPACE, CH_PAD } char_action;

/* One pass over the text: each code point kept, dropped, replaced by ' ' (CH_SPACE) or
 * surrounded by spaces (CH_PAD), as action() says. Output appended to the buffer. */
static sp_status map_chars(sp_tok_ctx *c, size_t off, size_t n, char_action (*action)(uint32_t),
                           size_t *oo, size_t *on, sp_error *err)
{
    if (!sp_ctx_reserve(c, n * 3))
        return nomem(err);
    size_t start = c->n;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = sp_utf8_decode((const unsigned char *)c->buf + off + i, n - i, &cp);
        if (!l)
            l = 1;
        char_action act = action(cp);
        if (act == CH_SPACE) {
            c->buf[c->n++] = ' ';
        } else if (act != CH_DROP) {
            if (act == CH_PAD)
                c->buf[c->n++] = ' ';
            memcpy(c->buf + c->n, c->buf + off + i, l);
            c->n += l;
            if (act == CH_PAD)
                c->buf[c->n++] = ' ';
        }
        i += l;
    }
    *oo = start;
    *on = c->n - start;
    return SP_OK;
}

/* StripAccents: drop combining marks (Mn, Mc, Me). */
static char_action drop_mark(uint32_t cp)
{
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
    return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME ? CH_DROP
                                                                                                : CH_KEEP;
}

static sp_status replace(const sp_normalizer *nz, sp_tok_ctx *c, size_t off, size_t n,
                         size_t *oo, size_t *on, sp_error *err)
{
    sp_span *spans = NULL;
    size_t ns = 0, cap = 0;
    sp_status st = sp_pattern_spans(&nz->pattern, c->buf + off, n, false, &spans, &ns, &cap, err);
    if (st != SP_OK) {
        free(spans);
        return st;
    }
    size_t start = c->n;
    for (size_t i = 0; i < ns && st == SP_OK; i++) {
        size_t r = spans[i].match ? sp_ctx_append(c, nz->content, nz->content_len)
                                  : sp_ctx_append(c, c->buf + off + spans[i].s, spans[i].e - spans[i].s);
        if (r == SIZE_MAX)
            st = nomem(err);
    }
    free(spans);
    *oo = start;
    *on = c->n - start;
    return st;
}

static sp_status affix(sp_tok_ctx *c, size_t off, size_t n, const char *a, size_t al,
                       bool prepend, size_t *oo, size_t *on, sp_error *err)
{
    if (n == 0) { /* tokenizers leaves empty strings alone */
        *oo = off;
        *on = 0;
        return SP_OK;
    }
    if (!sp_ctx_reserve(c, n + al))
        return nomem(err);
    size_t start = c->n;
    if (prepend)
        sp_ctx_append(c, a, al);
    sp_ctx_append(c, c->buf + off, n);
    if (!prepend)
        sp_ctx_append(c, a, al);
    *oo = start;
    *on = c->n - start;
    return SP_OK;
}

/* BertNormalizer clean_text: drop NUL, U+FFFD and controls; whitespace becomes ' '
 * (Rust char::is_whitespace). */
static char_action bert_clean(uint32_t cp)
{
    if (cp == 0 || cp == 0xfffd || sp_uc_is_control(cp))
        return CH_DROP;
    return sp_uc_is_whitespace(cp) ? CH_SPACE : CH_KEEP;
}

/* BertNormalizer handle_chinese_chars: spaces around CJK ideographs. */
static char_action bert_chinese(uint32_t cp)
{
    return sp_uc_is_cjk(cp) ? CH_PAD : CH_KEEP;
}

/* BertNormalizer strip_accents: drop non-spacing marks (Mn) after NFD. */
static char_action drop_nonspacing(uint32_t cp)
{
    return sp_uc_is_mark_nonspacing(cp) ? CH_DROP : CH_KEEP;
}

static sp_status bert(const sp_normalizer *nz, sp_tok_ctx *c, size_t off, size_t n, size_t *oo,
                      size_t *on, sp_error *err)
{
    sp_status st;
    if (nz->clean_text && (st = map_chars(c, off, n, bert_clean, &off, &n, err)))
        return st;
    if (nz->chinese && (st = map_chars(c, off, n, bert_chinese, &off, &n, err)))
        return st;
    if (nz->strip_accents) {
        if ((st = unicode_form(c, off, n, UTF8PROC_DECOMPOSE, &off, &n, err)) ||
            (st = map_chars(c, off, n, drop_nonspacing, &off, &n, err)))
            return st;
    }
    if (nz->lowercase && (st = lowercase(c, off, n, &off, &n, err)))
        return st;
    *oo = off;
    *on = n;
    return SP_OK;
}

/* The ByteLevel normalizer maps every byte to its byte-level character. */
extern const uint32_t sp_byte_level_char[256];

static sp_status byte_level(sp_tok_ctx *c, size_t off, size_t n, size_t *oo, size_t *on,
                            sp_error *err)
{
    if (!sp_ctx_reserve(c, n * 2))
        return nomem(err);
    size_t start = c->n;
    for (size_t i = 0; i < n; i++)
        c->n += sp_utf8_encode(sp_byte_level_char[(unsigned char)c->buf[off + i]], c->buf + c->n);
    *oo = start;
    *on = c->n - start;
    return SP_OK;
}

sp_status sp_normalize(const sp_normalizer *nz, sp_tok_ctx *c, size_t off, size_t n,
                       size_t *oo, size_t *on, sp_error *err)
{
    switch (nz->kind) {
    case SP_NORM_NFC: return unicode_form(c, off, n, UTF8PROC_COMPOSE, oo, on, err);
    case SP_NORM_NFD: return unicode_form(c, off, n, UTF8PROC_DECOMPOSE, oo, on, err);
    case SP_NORM_NFKC:
        return unicode_form(c, off, n, UTF8PROC_COMPOSE | UTF8PROC_COMPAT, oo, on, err);
    case SP_NORM_NFKD:
        return unicode_form(c, off, n, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, oo, on, err);
    case SP_NORM_LOWERCASE: return lowercase(c, off, n, oo, on, err);
    case SP_NORM_STRIP: return strip(nz, c, off, n, oo, on);
    case SP_NORM_STRIP_ACCENTS: return map_chars(c, off, n, drop_mark, oo, on, err);
    case SP_NORM_REPLACE: return replace(nz, c, off, n, oo, on, err);
    case SP_NORM_PREPEND: return affix(c, off, n, nz->content, nz->content_len, true, oo, on, err);
    case SP_NORM_APPEND: return affix(c, off, n, nz->content, nz->content_len, false, oo, on, err);
    case SP_NORM_BERT: return bert(nz, c, off, n, oo, on, err);
    case SP_NORM_BYTE_LEVEL: return byte_level(c, off, n, oo, on, err);
    case SP_NORM_SEQUENCE:
        *oo = off;
        *on = n;
        for (size_t i = 0; i < nz->n_children; i++) {
            sp_status st = sp_normalize(nz->children[i], c, *oo, *on, oo, on, err);
            if (st != SP_OK)
                return st;
        }
        return SP_OK;
    }
    return sp_err(err, SP_ERR_INTERNAL, "unknown normalizer");
}
