/* tok_added.c: matching added tokens in text before the model sees it, as tokenizers'
 * AddedVocabulary does: leftmost-longest over all token contents (a byte trie),
 * non-overlapping, then the single_word / lstrip / rstrip rules. */
#include "text/tok/tok_internal.h"
#include "text/tok/unicode.h"
#include "util/error.h"
#include "util/utf8.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* Rust regex's \w: Alphabetic, marks, decimal digits, connector punctuation, joiners. */
static bool is_word_char(uint32_t c)
{
    if (c == 0x200c || c == 0x200d)
        return true;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        return false;
    }
}

static size_t prev_char(const unsigned char *s, size_t i, uint32_t *cp)
{
    size_t k = i - 1;
    while (k > 0 && (s[k] & 0xc0) == 0x80)
        k--;
    if (!sp_utf8_decode(s + k, i - k, cp))
        *cp = 0xfffd;
    return k;
}

/* Longest token starting at s[i]; returns its length and sets *tok, or 0. */
static size_t longest_at(const sp_trie *t, const unsigned char *s, size_t n, size_t i,
                         int32_t *tok)
{
    size_t best = 0;
    int32_t node = 0;
    for (size_t k = i; k < n; k++) {
        int32_t ch = t->nodes[node].next_first;
        while (ch >= 0 && t->nodes[ch].byte != s[k])
            ch = t->nodes[ch].sibling;
        if (ch < 0)
            break;
        node = ch;
        if (t->nodes[node].token >= 0) {
            best = k + 1 - i;
            *tok = t->nodes[node].token;
        }
    }
    return best;
}

static sp_status split_one(const sp_tokenizer *tk, const sp_trie *t, sp_tok_ctx *c, sp_piece pc,
                           sp_pieces *out, sp_error *err)
{
    const unsigned char *s = (const unsigned char *)c->buf + pc.off;
    size_t n = pc.len, start_offset = 0, pos = 0;
    bool ok = true;
    while (pos < n && ok) {
        size_t ms = 0, ml = 0;
        int32_t ti = -1;
        for (size_t i = pos; i < n; i++) {
            if (!t->first_byte[s[i]])
                continue;
            ml = longest_at(t, s, n, i, &ti);
            if (ml) {
                ms = i;
                break;
            }
        }
        if (!ml)
            break;
        size_t start = ms, stop = ms + ml;
        pos = stop;
        const sp_added_token *a = &tk->added[ti];
        if (a->single_word) {
            uint32_t cp;
            bool start_space = start == 0 || (prev_char(s, start, &cp), !is_word_char(cp));
            bool stop_space = stop == n || !sp_utf8_decode(s + stop, n - stop, &cp) ||
                              !is_word_char(cp);
            if (!start_space || !stop_space)
                continue;
        }
        if (a->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                uint32_t cp;
                size_t k = prev_char(s, ns, &cp);
                if (!sp_uc_is_whitespace(cp))
                    break;
                ns = k;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip) {
            uint32_t cp;
            size_t l;
            while (stop < n && (l = sp_utf8_decode(s + stop, n - stop, &cp)) && sp_uc_is_whitespace(cp))
                stop += l;
        }
        if (start_offset < start)
            ok = sp_pieces_push(out, (sp_piece){pc.off + start_offset, start - start_offset, -1,
                                                pc.at_origin && start_offset == 0});
        ok = ok && sp_pieces_push(out, (sp_piece){pc.off + start, stop - start, a->id, false});
        start_offset = stop;
    }
    if (ok && start_offset < n)
        ok = sp_pieces_push(out, (sp_piece){pc.off + start_offset, n - start_offset, -1,
                                            pc.at_origin && start_offset == 0});
    return ok ? SP_OK : sp_err(err, SP_ERR_NOMEM, "out of memory splitting added tokens");
}

sp_status sp_added_split(const sp_tokenizer *tk, const sp_trie *t, sp_tok_ctx *c, sp_error *err)
{
    c->b.n = 0;
    for (size_t i = 0; i < c->a.n; i++) {
        sp_piece pc = c->a.v[i];
        sp_status st;
        if (pc.token >= 0 || t->n <= 1)
            st = (pc.token >= 0 || pc.len) && !sp_pieces_push(&c->b, pc)
                     ? sp_err(err, SP_ERR_NOMEM, "out of memory")
                     : SP_OK;
        else
            st = split_one(tk, t, c, pc, &c->b, err);
        if (st != SP_OK)
            return st;
    }
    sp_pieces tmp = c->a;
    c->a = c->b;
    c->b = tmp;
    return SP_OK;
}
