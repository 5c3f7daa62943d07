/* fuzz.h: the contract of every fuzz target under fuzz/. Each target is one small file
 * that defines LLVMFuzzerTestOneInput; it is linked either with libFuzzer (SPECULA_FUZZ=ON,
 * clang) or with replay_main.c, which feeds it every file of the corpus and regression
 * folders, so the normal test suite (any compiler) replays them. A target must return 0
 * for every input: bad input is an error status, never a crash, a hang or a leak. */
#ifndef SP_FUZZ_H
#define SP_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Splits an input at its first NUL byte: [0, *n1) and [*n1 + 1, size) (empty when there is
 * no NUL). Both parts are copied NUL-terminated into malloc'd buffers. */
int fuzz_split(const uint8_t *data, size_t size, char **a, size_t *na, char **b, size_t *nb);

#endif
