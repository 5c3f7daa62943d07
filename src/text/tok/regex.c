/* regex.c: PCRE2 with Oniguruma-compatible classes and resource limits (see regex.h). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/tok/regex.h"
#include "util/error.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MATCH_LIMIT 10000000u
#define DEPTH_LIMIT 10000u
#define HEAP_LIMIT_KB 65536u

struct sp_regex {
    pcre2_code *code;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
};

static const char WS[] = "\\p{White_Space}";
static const char NWS[] = "\\P{White_Space}";
static const char WORD_ITEMS[] = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}";

/* Rewrites \s \S \w \W to explicit Unicode properties (see regex.h). */
static char *rewrite(const char *p, size_t n, size_t *out_len)
{
    size_t cap = n * 4 + 256, o = 0;
    char *r = malloc(cap);
    if (!r)
        return NULL;
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        if (o + 96 > cap) {
            char *g = realloc(r, cap *= 2);
            if (!g) {
                free(r);
                return NULL;
            }
            r = g;
        }
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char e = p[i + 1];
            const char *rep = NULL;
            char buf[128];
            if (e == 's')
                rep = WS;
            else if (e == 'S')
                rep = NWS;
            else if (e == 'w')
                rep = in_class ? WORD_ITEMS : (snprintf(buf, sizeof buf, "[%s]", WORD_ITEMS), buf);
            else if (e == 'W' && !in_class)
                rep = (snprintf(buf, sizeof buf, "[^%s]", WORD_ITEMS), buf);
            if (rep) {
                size_t l = strlen(rep);
                memcpy(r + o, rep, l);
                o += l;
            } else {
                r[o++] = c;
                r[o++] = e;
            }
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            r[o++] = c;
            /* a ']' right after '[' or '[^' is a literal */
            if (i + 1 < n && p[i + 1] == '^')
                r[o++] = p[++i];
            if (i + 1 < n && p[i + 1] == ']')
                r[o++] = p[++i];
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && p[i + 1] == ':') {
            /* POSIX class [:name:] inside a class */
            const char *end = strstr(p + i, ":]");
            if (end && (size_t)(end - p) < n) {
                size_t l = (size_t)(end - (p + i)) + 2;
                memcpy(r + o, p + i, l);
                o += l;
                i += l - 1;
                continue;
            }
        }
        if (in_class && c == ']')
            in_class = false;
        r[o++] = c;
    }
    r[o] = '\0';
    *out_len = o;
    return r;
}

void sp_regex_free(sp_regex *re)
{
    if (!re)
        return;
    pcre2_match_data_free(re->md);
    pcre2_match_context_free(re->mctx);
    pcre2_jit_stack_free(re->jit_stack);
    pcre2_code_free(re->code);
    free(re);
}

sp_status sp_regex_compile(const char *pattern, size_t len, sp_regex **out, sp_error *err)
{
    *out = NULL;
    size_t rl;
    char *rw = rewrite(pattern, len, &rl);
    if (!rw)
        return sp_err(err, SP_ERR_NOMEM, "out of memory compiling a regex");
    sp_regex *re = calloc(1, sizeof *re);
    if (!re) {
        free(rw);
        return sp_err(err, SP_ERR_NOMEM, "out of memory compiling a regex");
    }
    int ec;
    PCRE2_SIZE eo;
    re->code = pcre2_compile((PCRE2_SPTR)rw, rl, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    free(rw);
    if (!re->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        sp_regex_free(re);
        return sp_err(err, SP_ERR_FORMAT, "regex '%.200s': %s (near offset %zu)", pattern,
                      (const char *)msg, (size_t)eo);
    }
    re->md = pcre2_match_data_create_from_pattern(re->code, NULL);
    re->mctx = pcre2_match_context_create(NULL);
    if (!re->md || !re->mctx) {
        sp_regex_free(re);
        return sp_err(err, SP_ERR_NOMEM, "out of memory compiling a regex");
    }
    pcre2_set_match_limit(re->mctx, MATCH_LIMIT);
    pcre2_set_depth_limit(re->mctx, DEPTH_LIMIT);
    pcre2_set_heap_limit(re->mctx, HEAP_LIMIT_KB);
    if (pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0) {
        re->jit_stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL);
        if (re->jit_stack)
            pcre2_jit_stack_assign(re->mctx, NULL, re->jit_stack);
    }
    *out = re;
    return SP_OK;
}

int sp_regex_find(sp_regex *re, const char *s, size_t n, size_t start, size_t *ms,
                  size_t *me, sp_error *err)
{
    int rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, re->md,
                         re->mctx);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        sp_err(err, rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
                            rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_JIT_STACKLIMIT
                        ? SP_ERR_LIMIT
                        : SP_ERR_INTERNAL,
               "regex match failed: %s", (const char *)msg);
        return -1;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(re->md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}
