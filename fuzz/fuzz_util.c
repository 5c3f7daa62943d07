/* fuzz_util.c: helpers shared by the fuzz targets (see fuzz.h). */
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

static char *copy(const uint8_t *p, size_t n)
{
    char *s = malloc(n + 1);
    if (!s)
        return NULL;
    if (n)
        memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

int fuzz_split(const uint8_t *data, size_t size, char **a, size_t *na, char **b, size_t *nb)
{
    const uint8_t *nul = size ? memchr(data, 0, size) : NULL;
    *na = nul ? (size_t)(nul - data) : size;
    *nb = nul ? size - *na - 1 : 0;
    *a = copy(data, *na);
    *b = copy(nul ? nul + 1 : data, *nb);
    if (!*a || !*b) {
        free(*a);
        free(*b);
        return -1;
    }
    return 0;
}
