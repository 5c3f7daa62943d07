/* cli.h: shared helpers of the specula command-line tool: option parsing, token lists,
 * error reporting. One file per subcommand (cmd_*.c) builds on these.
 *
 * Exit codes: 0 success, 1 runtime error (bad file, bad input), 2 usage error,
 * 3 template error (specula template). */
#ifndef SP_TOOLS_CLI_H
#define SP_TOOLS_CLI_H

#include "specula.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { CLI_OK = 0, CLI_ERR = 1, CLI_USAGE = 2, CLI_TEMPLATE_ERR = 3 };

typedef enum cli_kind { CLI_STR, CLI_INT, CLI_FLOAT, CLI_FLAG, CLI_U64 } cli_kind;

typedef struct cli_opt {
    const char *name;  /* "--tokens" */
    const char *alias; /* "-m" or NULL */
    cli_kind kind;
    void *dst;         /* const char **, int64_t *, double *, bool *, uint64_t * */
    const char *help;
    bool seen;
} cli_opt;

typedef struct cli_cmd {
    const char *name;
    const char *summary;
    const char *usage;
    int (*run)(int argc, char **argv);
} cli_cmd;

/* Parses argv[1..] against opts (terminated by a zero entry). Prints the problem and
 * returns CLI_USAGE on error; returns -1 when --help was asked (help already printed). */
int cli_parse(int argc, char **argv, cli_opt *opts, const char *usage);
void cli_print_help(const char *usage, const cli_opt *opts);

/* Parses "1,2,3" (spaces allowed) into a malloc'd array. */
int cli_parse_tokens(const char *s, int32_t **out, size_t *n);

/* Prints "specula: <msg>" to stderr and returns CLI_ERR. */
int cli_fail(const sp_error *err);
int cli_failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Whether dir holds a tokenizer.json. */
bool cli_has_tokenizer(const char *dir);

/* Reads SPECULA_THREADS (0 = all CPUs) unless threads > 0 was given. */
int cli_threads(int64_t threads);

/* The --device option every command that loads a model takes. */
#define CLI_DEVICE_OPT(dst) \
    {"--device", NULL, CLI_STR, &(dst), "cpu, cuda, cuda:N or auto (default; SPECULA_DEVICE)", 0}
#define CLI_MMAP_OPT(dst) \
    {"--mmap", NULL, CLI_FLAG, &(dst), "CPU: compute on the checkpoint's mapping as it is (no aligned copy)", 0}

/* Model params for --threads and --device (SPECULA_DEVICE when --device is not given);
 * SPECULA_MMAP=1 keeps a CPU model's weights on the checkpoint's mapping. */
sp_model_params cli_model_params(int64_t threads, const char *device);
/* The device string in effect ("auto" when none was given). */
const char *cli_device(const char *device);
/* sp_model_open; with --device auto, then says on stderr which device the model is on. */
sp_status cli_model_open(const char *dir, const sp_model_params *mp, sp_model **m, sp_error *err);

/* Small helpers, so the tools need nothing from the library's internals. */

/* Monotonic clock in milliseconds. */
double cli_now_ms(void);
/* Reads a whole regular file into a NUL-terminated malloc'd buffer, refusing files larger
 * than max_bytes; the message names the path. */
sp_status cli_read_file(const char *path, size_t max_bytes, char **out, size_t *n_bytes,
                        sp_error *err);
/* Whether path is a regular file. */
bool cli_file_exists(const char *path);
/* malloc'd "dir/name", or NULL when out of memory. */
char *cli_path_join(const char *dir, const char *name);

/* xoshiro256** seeded with splitmix64 (the library's sampler uses the same generator), for
 * the benchmarks' random prompts and texts: a seed gives the same inputs every time. */
typedef struct cli_rng {
    uint64_t s[4];
} cli_rng;
void cli_rng_seed(cli_rng *r, uint64_t seed);
uint64_t cli_rng_next(cli_rng *r);

/* --precision: "fast" (the CLI's default, NULL) or "exact"; prints the problem and
 * returns CLI_USAGE otherwise. */
int cli_precision(const char *s, sp_precision *out);

/* What computed m's products, for the "(fast precision, X kernels)" lines: the CPU's kernel
 * level (cpuid: avx512bf16, avx512, avx2, generic) on the CPU; on a GPU "cuda tensor-core"
 * (fast precision) or "cuda". And the precision m computes in, as a word. */
const char *cli_kernels_name(const sp_model *m);
const char *cli_precision_name(const sp_model *m);

#endif
