/* CHECK(cond) for the C API checks written in C: on failure, writes where and what failed (and
 * vfab_last_error()) into `why` (of `why_len` bytes, in scope) and returns 1. */
#ifndef VFAB_TESTS_C_CHECK_H
#define VFAB_TESTS_C_CHECK_H

#include <stdio.h>

#include "vfab/vfab.h"

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            snprintf(why, why_len, "%s:%d: %s (last error: %s)", __FILE__, __LINE__, #cond, \
                     vfab_last_error());                                                  \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

#endif
