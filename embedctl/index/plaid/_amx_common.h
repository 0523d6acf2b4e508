/* What the AMX kernels share (_kernels_amx.c in the indexing library, _search_amx.c in the search library): the
 * compile-time gate, the run-time check and tile permission, the tile configuration and bfloat16 rounding.
 *
 * EMBEDCTL_AMX is defined only for x86-64 Linux with gcc >= 11 or clang >= 12; elsewhere each kernel's entry
 * points exist and report "unavailable". */
#ifndef EMBEDCTL_AMX_COMMON_H
#define EMBEDCTL_AMX_COMMON_H

#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>

#if !defined(EMBEDCTL_PORTABLE) && defined(__x86_64__) && defined(__linux__) && \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#define EMBEDCTL_AMX 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* CPU has AMX-TILE, AMX-BF16, AVX-512 F/BW, the OS enables the tile state, and this process may use it (the
 * permission is the process's: asking again is harmless). */
static int amx_ready_here(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    if (!((d >> 22) & 1) || !((d >> 24) & 1) || !((b >> 16) & 1) || !((b >> 30) & 1)) return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1)) return 0;  /* OSXSAVE */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0xE6) != 0xE6) return 0;            /* the OS saves AVX-512 state */
    if (((lo >> 17) & 3) != 3) return 0;           /* ... and the tile state */
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

/* amx_ready_here(), asked once per file that includes this header (cpuid is a VM exit under a hypervisor; the
 * answer cannot change; a race only asks twice). */
static int amx_ready_once(void) {
    static int ready = -1;
    if (ready < 0) ready = amx_ready_here();
    return ready;
}

struct tile_config {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* Palette 1, all eight tiles 16 rows of 64 bytes (16 float32 or 32 bfloat16). */
static inline void full_tiles(struct tile_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->palette_id = 1;
    for (int t = 0; t < 8; t++) { cfg->rows[t] = 16; cfg->colsb[t] = 64; }
}

static inline uint16_t to_bf16(float f) {  /* round to nearest even (inputs are finite) */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static inline float from_bf16(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
#endif
#endif
