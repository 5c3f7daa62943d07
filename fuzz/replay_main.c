/* replay_main.c: runs a fuzz target without libFuzzer: every regular file under each
 * directory (or file) named on the command line is one input. Used by CTest
 * (fuzz_replay_<target>), so corpora and crash regressions run with any compiler and
 * under ASan/UBSan. Exits 1 when a directory is missing or a file cannot be read. */
#include "fuzz.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int run_file(const char *path, size_t *n_run)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(len > 0 ? (size_t)len : 1);
    if (!buf || (len > 0 && fread(buf, 1, (size_t)len, f) != (size_t)len)) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        free(buf);
        fclose(f);
        return 1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, len > 0 ? (size_t)len : 0);
    free(buf);
    (*n_run)++;
    return 0;
}

static int run_path(const char *path, size_t *n_run)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: %s does not exist\n", path);
        return 1;
    }
    if (!S_ISDIR(st.st_mode))
        return run_file(path, n_run);
    DIR *d = opendir(path);
    if (!d)
        return 1;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        rc |= run_path(sub, n_run);
    }
    closedir(d);
    return rc;
}

int main(int argc, char **argv)
{
    size_t n_run = 0;
    int rc = 0;
    for (int i = 1; i < argc; i++)
        rc |= run_path(argv[i], &n_run);
    printf("replay: %zu inputs\n", n_run);
    return rc;
}
