/*
 * testutil.h — what every C test shares: a seeded RNG (seed printed, replay with
 * MXF_SEED=<n>), assertion counters with the closing "N passed, N failed" line, and
 * poisoning of output buffers.
 */
#ifndef MXF_TESTUTIL_H
#define MXF_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "host_rng.h"
#include "mxfuse.h"

/* ------------------------------------------------------------ RNG (src/host_rng.h) */
typedef mxf_rng tu_rng;

/* The run's seed: MXF_SEED from the environment, else from the clock; printed once. */
uint64_t tu_seed(void);
void tu_rng_init(tu_rng *r, uint64_t seed);
uint64_t tu_u64(tu_rng *r);
uint32_t tu_u32(tu_rng *r);
/* Uniform integer in [lo, hi]. */
int64_t tu_range(tu_rng *r, int64_t lo, int64_t hi);
/* Uniform double in [0, 1). */
double tu_uniform(tu_rng *r);
/* Standard normal. */
double tu_normal(tu_rng *r);

/* A bf16 activation (its bits): a few binades around 1 (2^-7 .. 2^8), one in eight of
 * 2^-40 .. 2^24, now and then ±0; sums of them stay far from f32's overflow, as
 * activations' do. The gemm tests' bf16 A. */
uint16_t tu_bf16_activation(tu_rng *r);

/* ------------------------------------------------------------ assertions */
extern long tu_passed, tu_failed;

/* Counts a check; prints the location and message of a failing one (first 50 only). */
int tu_check(int ok, const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
#define TU_CHECK(cond, ...) tu_check(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

/* Prints "<name>: N passed, N failed" and returns the exit status (0 iff none failed). */
int tu_finish(const char *name);
/* Prints "<name>: SKIPPED: <why>" and returns 77, ctest's skip status. */
int tu_skip(const char *name, const char *why);

/* ------------------------------------------------------------ buffers */
/* Fills n bytes with a poison pattern (0xA5 unless told otherwise). */
void tu_poison(void *p, size_t n, uint8_t byte);
/* 1 if all n bytes of p equal `byte`. */
int tu_all_bytes(const void *p, size_t n, uint8_t byte);
/* Whether backend name `name` (mxf_plan_backend: "cuda/sm90 128x256 prepass") is of
 * kernel `kernel` ("cuda/sm90"). */
int tu_kernel_is(const char *name, const char *kernel);
/* Whether environment variable `var` is unset or empty, or its comma-separated list holds
 * `name` (a selection of cases or modes: MXF_BENCH_ONLY, MXF_GPU_TEST_MODES). */
int tu_env_lists(const char *var, const char *name);
/* ------------------------------------------------------------ the CPU backend's GEMM core */
/* The core MXF_CONFIG's cpu key asks for ("onednn", "blas" or "c"), or NULL. */
const char *tu_cpu_core_asked(void);
/* Whether a CPU plan's backend name (mxf_plan_backend) is of the core asked for: any
 * "cpu/" one when none is or when the GEMM is empty (no core runs it). */
int tu_cpu_core_fits(const char *backend, int empty_gemm);
/* 1 when a core is asked for that this build or processor lacks: a 128^3 MXFP8 gemm plan
 * on the CPU is refused, and why holds its message (the test then skips). */
int tu_cpu_core_missing(char *why, size_t n);
/* Counts a CPU plan's core by its backend name; prints the counts ("GEMM cores used: ..."). */
void tu_cpu_core_count(const char *backend);
void tu_cpu_core_print(void);

/* malloc that never returns NULL (aborts the test, never the library). */
void *tu_malloc(size_t n);
/* n bytes (n a multiple of 64: 64-byte aligned) that end where an inaccessible page
 * begins, so that a read past them faults; never NULL. Freed by tu_free_guarded(p, n). */
void *tu_malloc_guarded(size_t n);
void tu_free_guarded(void *p, size_t n);

/* A tensor descriptor with C-contiguous strides (all zero). */
mxf_tensor tu_tensor(void *data, mxf_dtype dtype, int ndim, const int64_t *shape);

/* A gemm_amax (M, N, K) descriptor: e4m3 a and b, compact e8m0 scales (sf_vec 32), f32 C,
 * over the given buffers. */
mxf_gemm_amax_desc tu_gemm_e4m3_desc(int64_t m, int64_t n, int64_t k, void *a, void *b, void *sfa, void *sfb,
                                     void *c, float *amax);
/* Ones for it: e4m3 1.0 in a (m x k) and b (n x k), unit e8m0 scales (k / 32 a row): every
 * value of C, and the amax, equal k. */
void tu_ones_e4m3(int64_t m, int64_t n, int64_t k, void *a, void *b, void *sfa, void *sfb);

#endif
