/* What the PLAID search kernels (_search_kernels.c, _warp_kernels.c, _search_amx.c: one library) share. */
#ifndef EMBEDCTL_SEARCH_COMMON_H
#define EMBEDCTL_SEARCH_COMMON_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_LQ 4096 /* query tokens */
#define MAX_TOP 1024 /* the most columns (rows) a top-m selection keeps */

/* gcc on x86-64 Linux: one copy per instruction set, picked at load time; elsewhere (or with
 * -DEMBEDCTL_PORTABLE, which the tests compile with to check that build) the plain version. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__) && \
    !defined(EMBEDCTL_PORTABLE)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#define HAVE_AVX512_PATHS 1 /* functions with target("avx512f") and a run-time check of the CPU */
#include <immintrin.h>
#else
#define CLONES
#endif

/* OpenMP (setup.py builds with -fopenmp where the compiler has it): the kernels that split one query across
 * threads take a thread count; without OpenMP the pragmas are ignored and they run on the calling thread,
 * with the same results. */
#ifdef _OPENMP
#include <omp.h>
#define OMP_HAVE 1
#define OMP_THREAD_NUM() omp_get_thread_num()
#else
#define OMP_HAVE 0
#define OMP_THREAD_NUM() 0
#endif
#if defined(__x86_64__) || defined(__i386__)
#define SPIN_PAUSE() __builtin_ia32_pause() /* a spin-wait's pause: the other hyperthread keeps the core */
#else
#define SPIN_PAUSE() ((void)0)
#endif
#define OMP_PRAGMA(x) _Pragma(#x)

#endif
