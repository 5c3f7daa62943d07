/* test_util.c: helpers shared by the cmocka tests (see test_util.h). */
#define _GNU_SOURCE
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

const char *fixture_path(const char *rel)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", SPECULA_FIXTURES_DIR, rel);
    return buf;
}

char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)sz + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    buf[sz] = 0;
    if (n)
        *n = (size_t)sz;
    return buf;
}

cJSON *read_json(const char *path)
{
    char *t = read_all(path, NULL);
    cJSON *j = cJSON_Parse(t);
    free(t);
    if (!j)
        fail_msg("bad JSON in %s", path);
    return j;
}

float *read_floats(const char *path, size_t *n)
{
    size_t bytes;
    char *b = read_all(path, &bytes);
    *n = bytes / sizeof(float);
    return (float *)b;
}

double rel_l2(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

char *make_temp_dir(void)
{
    char tmpl[] = "/tmp/specula-test-XXXXXX";
    char *d = mkdtemp(tmpl);
    assert_non_null(d);
    return strdup(d);
}

void remove_tree(const char *path)
{
    char cmd[4200];
    if (strncmp(path, "/tmp/specula-test-", 18) != 0)
        return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", path);
}

void write_text(const char *dir, const char *name, const char *text)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

void copy_file(const char *from, const char *to)
{
    size_t n;
    char *b = read_all(from, &n);
    FILE *f = fopen(to, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
    free(b);
}

static void put_u64(FILE *f, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    fwrite(b, 1, 8, f);
}

void write_safetensors(const char *path, const st_entry *e, size_t n)
{
    char *hdr = malloc(1 << 20);
    assert_non_null(hdr);
    size_t o = 0, off = 0;
    o += (size_t)sprintf(hdr + o, "{");
    for (size_t i = 0; i < n; i++) {
        o += (size_t)sprintf(hdr + o, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "",
                             e[i].name, e[i].dtype);
        for (int d = 0; d < e[i].n_dims; d++)
            o += (size_t)sprintf(hdr + o, "%s%lld", d ? "," : "", (long long)e[i].shape[d]);
        o += (size_t)sprintf(hdr + o, "],\"data_offsets\":[%zu,%zu]}", off, off + e[i].n_bytes);
        off += e[i].n_bytes;
    }
    o += (size_t)sprintf(hdr + o, "}");
    while (o % 8)
        hdr[o++] = ' ';
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    put_u64(f, o);
    fwrite(hdr, 1, o, f);
    for (size_t i = 0; i < n; i++)
        fwrite(e[i].data, 1, e[i].n_bytes, f);
    fclose(f);
    free(hdr);
}

void write_raw_safetensors(const char *path, const char *header, const void *data,
                           size_t n_data, uint64_t header_len_override)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    put_u64(f, header_len_override ? header_len_override : strlen(header));
    fwrite(header, 1, strlen(header), f);
    if (n_data)
        fwrite(data, 1, n_data, f);
    fclose(f);
}

int run_cmd(const char *cmd)
{
    int st = system(cmd);
    if (st == -1)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
