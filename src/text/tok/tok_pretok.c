/* tok_pretok.c: tokenizers' pre-tokenizers (Split, ByteLevel, Digits, Metaspace,
 * Punctuation, Whitespace, WhitespaceSplit, BertPreTokenizer, CharDelimiterSplit,
 * Sequence). Each maps every non-token piece of ctx->a to sub-pieces in ctx->b; empty
 * pieces are dropped, as PreTokenizedString::split does. */
#include "text/tok/tok_internal.h"
#include "util/error.h"
#include "util/utf8.h"

#include <stdlib.h>
#include <string.h>

/* GPT-2's byte-to-character map: printable bytes map to themselves, the rest to U+0100+. */
const uint32_t sp_byte_level_char[256] = {
    0x100, 0x101, 0x102, 0x103, 0x104, 0x105, 0x106, 0x107, 0x108, 0x109, 0x10a, 0x10b,
    0x10c, 0x10d, 0x10e, 0x10f, 0x110, 0x111, 0x112, 0x113, 0x114, 0x115, 0x116, 0x117,
    0x118, 0x119, 0x11a, 0x11b, 0x11c, 0x11d, 0x11e, 0x11f, 0x120, 0x21, 0x22, 0x23,
    0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f,
    0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x3b,
    0x3c, 0x3d, 0x3e, 0x3f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47,
    0x48, 0x49, 0x4a, 0x4b, 0x4c, 0x4d, 0x4e, 0x4f, 0x50, 0x51, 0x52, 0x53,
    0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x5b, 0x5c, 0x5d, 0x5e, 0x5f,
    0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x6b,
    0x6c, 0x6d, 0x6e, 0x6f, 0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77,
    0x78, 0x79, 0x7a, 0x7b, 0x7c, 0x7d, 0x7e, 0x121, 0x122, 0x123, 0x124, 0x125,
    0x126, 0x127, 0x128, 0x129, 0x12a, 0x12b, 0x12c, 0x12d, 0x12e, 0x12f, 0x130, 0x131,
    0x132, 0x133, 0x134, 0x135, 0x136, 0x137, 0x138, 0x139, 0x13a, 0x13b, 0x13c, 0x13d,
    0x13e, 0x13f, 0x140, 0x141, 0x142, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,
    0xa8, 0xa9, 0xaa, 0xab, 0xac, 0x143, 0xae, 0xaf, 0xb0, 0xb1, 0xb2, 0xb3,
    0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf,
    0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb,
    0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7,
    0xd8, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xe1, 0xe2, 0xe3,
    0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xeb, 0xec, 0xed, 0xee, 0xef,
    0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb,
    0xfc, 0xfd, 0xfe, 0xff,
};

void sp_pretok_free(sp_pretok *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_children; i++)
        sp_pretok_free(p->children[i]);
    free(p->children);
    sp_pattern_fini(&p->pattern);
    free(p);
}

static sp_status nomem(sp_error *err)
{
    return sp_err(err, SP_ERR_NOMEM, "out of memory while pre-tokenizing");
}

typedef struct span_buf {
    sp_span *spans, *kept;
    size_t n, cap, kept_cap;
} span_buf;

/* Splits one piece by pattern + behavior, pushing sub-pieces to out. */
static sp_status split_piece(const sp_pattern *pat, bool invert, sp_split_behavior b,
                             sp_tok_ctx *c, sp_piece pc, sp_pieces *out, span_buf *sb,
                             sp_error *err)
{
    sp_status st = sp_pattern_spans(pat, c->buf + pc.off, pc.len, invert, &sb->spans, &sb->n,
                                    &sb->cap, err);
    if (st != SP_OK)
        return st;
    if (sb->kept_cap < sb->n) {
        sp_span *k = realloc(sb->kept, sb->n * sizeof *k);
        if (!k)
            return nomem(err);
        sb->kept = k;
        sb->kept_cap = sb->n;
    }
    size_t nk = sp_split_apply(sb->spans, sb->n, b, sb->kept);
    for (size_t i = 0; i < nk; i++) {
        if (sb->kept[i].e == sb->kept[i].s)
            continue;
        sp_piece np = {pc.off + sb->kept[i].s, sb->kept[i].e - sb->kept[i].s, -1,
                       pc.at_origin && sb->kept[i].s == 0};
        if (!sp_pieces_push(out, np))
            return nomem(err);
    }
    return SP_OK;
}

/* Built-in patterns, compiled into the pre-tokenizer's pattern at load time. */
const char sp_gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char sp_whitespace_pattern[] = "\\w+|[^\\w\\s]+";

static sp_status byte_map(sp_tok_ctx *c, sp_piece *pc, sp_error *err)
{
    if (!sp_ctx_reserve(c, pc->len * 2))
        return nomem(err);
    size_t start = c->n;
    for (size_t i = 0; i < pc->len; i++)
        c->n += sp_utf8_encode(sp_byte_level_char[(unsigned char)c->buf[pc->off + i]],
                               c->buf + c->n);
    pc->off = start;
    pc->len = c->n - start;
    return SP_OK;
}

static sp_status byte_level(const sp_pretok *p, sp_tok_ctx *c, sp_piece pc, sp_pieces *out,
                            span_buf *sb, sp_error *err)
{
    sp_status st;
    if (p->add_prefix_space && (pc.len == 0 || c->buf[pc.off] != ' ')) {
        if (!sp_ctx_reserve(c, pc.len + 1))
            return nomem(err);
        size_t start = c->n;
        c->buf[c->n++] = ' ';
        sp_ctx_append(c, c->buf + pc.off, pc.len);
        pc.off = start;
        pc.len += 1;
    }
    size_t first = out->n;
    if (p->use_regex) {
        if ((st = split_piece(&p->pattern, false, SP_SPLIT_ISOLATED, c, pc, out, sb, err)))
            return st;
    } else if (pc.len && !sp_pieces_push(out, pc)) {
        return nomem(err);
    }
    for (size_t i = first; i < out->n; i++)
        if ((st = byte_map(c, &out->v[i], err)))
            return st;
    return SP_OK;
}

static sp_status metaspace(const sp_pretok *p, sp_tok_ctx *c, sp_piece pc, sp_pieces *out,
                           span_buf *sb, sp_error *err)
{
    /* replace ' ' by the replacement, then maybe prepend it */
    if (!sp_ctx_reserve(c, pc.len * p->repl_len + p->repl_len))
        return nomem(err);
    size_t start = c->n;
    /* tokenizers tests starts_with(replacement) after replacing spaces */
    bool starts = (pc.len >= p->repl_len &&
                   memcmp(c->buf + pc.off, p->repl_utf8, p->repl_len) == 0) ||
                  (pc.len && c->buf[pc.off] == ' ');
    bool prepend = p->prepend == SP_PREPEND_ALWAYS ||
                   (p->prepend == SP_PREPEND_FIRST && pc.at_origin);
    if (prepend && !starts) {
        memcpy(c->buf + c->n, p->repl_utf8, p->repl_len);
        c->n += p->repl_len;
    }
    for (size_t i = 0; i < pc.len; i++) {
        char ch = c->buf[pc.off + i];
        if (ch == ' ') {
            memcpy(c->buf + c->n, p->repl_utf8, p->repl_len);
            c->n += p->repl_len;
        } else {
            c->buf[c->n++] = ch;
        }
    }
    sp_piece np = {start, c->n - start, -1, pc.at_origin};
    if (!p->split)
        return np.len && !sp_pieces_push(out, np) ? nomem(err) : SP_OK;
    sp_pattern pat = {.kind = SP_PAT_CHAR, .ch = p->replacement};
    return split_piece(&pat, false, SP_SPLIT_MERGED_NEXT, c, np, out, sb, err);
}

static sp_status apply_one(const sp_pretok *p, const sp_tokenizer *t, sp_tok_ctx *c,
                           sp_piece pc, sp_pieces *out, span_buf *sb, sp_error *err)
{
    sp_pattern pat = {0};
    sp_status st;
    switch (p->kind) {
    case SP_PRE_SPLIT: return split_piece(&p->pattern, p->invert, p->behavior, c, pc, out, sb, err);
    case SP_PRE_BYTE_LEVEL: return byte_level(p, c, pc, out, sb, err);
    case SP_PRE_DIGITS:
        pat.kind = SP_PAT_NUMERIC;
        return split_piece(&pat, false, p->individual_digits ? SP_SPLIT_ISOLATED : SP_SPLIT_CONTIGUOUS,
                           c, pc, out, sb, err);
    case SP_PRE_METASPACE: return metaspace(p, c, pc, out, sb, err);
    case SP_PRE_PUNCTUATION:
        pat.kind = SP_PAT_PUNCT;
        return split_piece(&pat, false, p->behavior, c, pc, out, sb, err);
    case SP_PRE_WHITESPACE:
        return split_piece(&p->pattern, true, SP_SPLIT_REMOVED, c, pc, out, sb, err);
    case SP_PRE_WHITESPACE_SPLIT:
        pat.kind = SP_PAT_WHITESPACE;
        return split_piece(&pat, false, SP_SPLIT_REMOVED, c, pc, out, sb, err);
    case SP_PRE_CHAR_DELIMITER:
        return split_piece(&p->pattern, false, SP_SPLIT_REMOVED, c, pc, out, sb, err);
    case SP_PRE_BERT: {
        sp_pieces tmp = {0};
        pat.kind = SP_PAT_WHITESPACE;
        st = split_piece(&pat, false, SP_SPLIT_REMOVED, c, pc, &tmp, sb, err);
        sp_pattern punct = {.kind = SP_PAT_PUNCT};
        for (size_t i = 0; st == SP_OK && i < tmp.n; i++)
            st = split_piece(&punct, false, SP_SPLIT_ISOLATED, c, tmp.v[i], out, sb, err);
        free(tmp.v);
        return st;
    }
    case SP_PRE_SEQUENCE: break;
    }
    (void)t;
    return sp_err(err, SP_ERR_INTERNAL, "unexpected pre-tokenizer");
}

static sp_status run(const sp_pretok *p, const sp_tokenizer *t, sp_tok_ctx *c, span_buf *sb,
                     sp_error *err)
{
    if (p->kind == SP_PRE_SEQUENCE) {
        for (size_t i = 0; i < p->n_children; i++) {
            sp_status st = run(p->children[i], t, c, sb, err);
            if (st != SP_OK)
                return st;
        }
        return SP_OK;
    }
    c->b.n = 0;
    for (size_t i = 0; i < c->a.n; i++) {
        sp_piece pc = c->a.v[i];
        sp_status st;
        if (pc.token >= 0)
            st = sp_pieces_push(&c->b, pc) ? SP_OK : nomem(err);
        else
            st = apply_one(p, t, c, pc, &c->b, sb, err);
        if (st != SP_OK)
            return st;
    }
    sp_pieces tmp = c->a;
    c->a = c->b;
    c->b = tmp;
    return SP_OK;
}

sp_status sp_pretokenize(const sp_pretok *p, const sp_tokenizer *t, sp_tok_ctx *c, sp_error *err)
{
    span_buf sb = {0};
    sp_status st = run(p, t, c, &sb, err);
    free(sb.spans);
    free(sb.kept);
    return st;
}
