/* clock.h: a monotonic clock in milliseconds, for timings reported by generate/bench. */
#ifndef SP_UTIL_CLOCK_H
#define SP_UTIL_CLOCK_H

#include <time.h>

static inline double sp_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

#endif
