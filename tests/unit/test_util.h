/* test_util.h: helpers shared by the cmocka tests: fixture paths, reference files,
 * error metrics, temporary directories, and a safetensors writer for building small
 * (and deliberately broken) checkpoints. */
#ifndef SP_TEST_UTIL_H
#define SP_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "specula.h"
#include <cjson/cJSON.h>

/* "<fixtures>/<rel>" in a static buffer (overwritten by the next call). */
const char *fixture_path(const char *rel);

/* Reads a whole file (NUL-terminated); aborts the test on failure. */
char *read_all(const char *path, size_t *n);
cJSON *read_json(const char *path);
float *read_floats(const char *path, size_t *n);

/* Deterministic uniform floats in [-1, 1) (xorshift64), for kernel test inputs. */
float test_frand(void);

/* ||a - b|| / ||b|| over n values. */
double rel_l2(const float *a, const float *b, size_t n);

/* Makes a fresh temporary directory; returns a malloc'd path. */
char *make_temp_dir(void);
/* Removes a directory tree made by make_temp_dir. */
void remove_tree(const char *path);
/* Writes text to dir/name. */
void write_text(const char *dir, const char *name, const char *text);
/* Copies a file. */
void copy_file(const char *from, const char *to);

/* A tensor to write: name, dtype string, shape, raw bytes. */
typedef struct st_entry {
    const char *name;
    const char *dtype;
    int n_dims;
    int64_t shape[4];
    const void *data;
    size_t n_bytes;
} st_entry;

/* Writes a valid safetensors file (header + data in entry order). */
void write_safetensors(const char *path, const st_entry *e, size_t n);
/* Writes raw header JSON + data bytes (for malformed files). */
void write_raw_safetensors(const char *path, const char *header, const void *data,
                           size_t n_data, uint64_t header_len_override);

/* An edit to one tensor of a fixture copy (copy_fixture): a new dtype and/or shape (the
 * data is reused, zero-padded when it grows), removal, or a patch of its bytes. The name
 * "*" matches every tensor. */
typedef struct tensor_edit {
    const char *name;
    const char *dtype;  /* NULL: keep */
    int n_dims;         /* > 0: new shape */
    int64_t shape[4];
    bool drop;
    const char *rename; /* not NULL: the tensor's new name */
    void (*patch)(unsigned char *data, size_t n_bytes, const char *dtype, void *ctx);
    void *patch_ctx;
} tensor_edit;

/* Copies tests/fixtures/models/<name> (single-file checkpoints) into a temp dir with the
 * edits applied. qcfg replaces config.json's quantization_config (NULL keeps it, ""
 * removes it). Returns the malloc'd directory (remove_tree + free it). */
char *copy_fixture(const char *name, const tensor_edit *edits, size_t n_edits, const char *qcfg);
/* A copy of a fixture with every BF16/F32 value scaled by (1 + amount * r), r uniform in
 * [-1, 1] (one fixed stream): a draft that mostly, not always, agrees with its target. */
char *perturbed_fixture(const char *name, float amount);

/* Opens a model directory with n_threads workers; fails the test on error. */
/* The device model tests run on: SPECULA_TEST_DEVICE, default "cpu". */
const char *test_device(void);
sp_model *open_model_dir(const char *dir, int n_threads);
/* tests/fixtures/models/<name>; _on: on the given device whatever SPECULA_TEST_DEVICE says. */
sp_model *open_fixture_model(const char *name, int n_threads);
sp_model *open_fixture_model_on(const char *name, int n_threads, const char *device);

/* Runs a shell command; returns its exit status (-1 if it could not run). Output goes to
 * out_path when not NULL. */
/* One generation's tokens and statistics (plain or speculative), and the check that a
 * speculative run produced exactly the plain run's tokens, count and stop reason. */
typedef struct run_out {
    int32_t tokens[128];
    sp_generate_stats st;
    sp_spec_stats ss;
} run_out;
void expect_same(const char *what, const run_out *plain, const run_out *spec);

int run_cmd(const char *cmd);

/* Fails unless count[0..n) (total draws) fits the probabilities p at p = 1e-6 (chi-square,
 * bins expecting fewer than 5 pooled; a draw of a probability-0 token always fails);
 * prints the statistic and the total variation distance. */
void chi2_check(const char *what, const int64_t *count, const double *p, int64_t n, int64_t total);

#endif
