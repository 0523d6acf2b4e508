/* What the PLAID search kernels (_search_kernels.c, _warp_kernels.c: one library) share. */
#ifndef EMBEDCTL_SEARCH_COMMON_H
#define EMBEDCTL_SEARCH_COMMON_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_LQ 4096 /* query tokens */
#define MAX_TOP 1024 /* the most columns (rows) a top-m selection keeps */

/* gcc on x86-64 Linux: one copy per instruction set, picked at load time; elsewhere the plain version. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#define HAVE_AVX512_PATHS 1 /* functions with target("avx512f") and a run-time check of the CPU */
#include <immintrin.h>
#else
#define CLONES
#endif

#endif
