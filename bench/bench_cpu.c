/*
 * bench_cpu.c — CPU backend benchmark: gemm_amax against OpenBLAS sgemm, in one process.
 *
 * Cases (M = N = K = 2048 unless given as argv[2..4], L = 1, random data, never zeros):
 *   sgemm   OpenBLAS cblas_sgemm on f32 operands already in memory (the baseline; only
 *           when built with CBLAS)
 *   mxfp8   gemm_amax, e4m3 A/B, e8m0 scales (swizzled), sf_vec 32, bf16 C
 *   mxfp4   gemm_amax, e2m1 A/B, e8m0 scales (swizzled), sf_vec 32, bf16 C
 * and proj_rope on the DeepSeek-V3 Q up-projection (K = 1536, H = 128, D = 192, rope 64,
 * w out-in), T = MXF_BENCH_PROJ_T tokens (default 256; 0 skips the group):
 *   psgemm  cblas_sgemm on the GEMM of that shape (T x H*D x K, f32; only with CBLAS)
 *   pbf16   proj_rope, bf16 x / w
 *   pmxfp8  proj_rope, e4m3 x / w with e8m0 scales
 * Each: warm-up, then the median of MXF_BENCH_RUNS (default 7, at least 5) timed runs,
 * each after a pause of MXF_BENCH_SETTLE_MS (the vendor libraries' threads spin on after
 * their calls and would take a core from the next case; the rounds interleave the cases).
 * MXF_BENCH_ONLY=name,name,... runs only those cases (the sgemm baselines always run),
 * e.g. MXF_BENCH_ONLY=pbf16 to profile one.
 * The op timings cover the whole run (dequantization, GEMM, epilogue), through the plan
 * API with a preallocated workspace; 256 sampled elements of each gemm_amax case's C are
 * then judged by SPEC §5 (judge/judge.h), and a wrong one fails the benchmark.
 *
 * Before them (cases readbw, decode, invariance; dec_mxfp4, dec_nvfp4, dec_mxfp8,
 * dec_pbf16, dec_pmxfp8 pick one weight format, MXF_BENCH_DECODE_M=1,4 some batch sizes):
 *   readbw      the memory's read bandwidth: all threads summing a buffer of
 *               MXF_BENCH_READ_MIB (default 256) MiB, beyond the last-level cache
 *   decode      bf16 A (M x K) x weights (N x K) for M in {1, 4, 16, 64} and (N, K) in
 *               {(7168, 2048), (2048, 7168), (24576, 1536)}, MXFP4 / NVFP4-style / MXFP8
 *               weights with compact scales, f32 C on the default core: time, GB/s of
 *               weight bytes (codes + scales), its share of the read bandwidth measured
 *               around the row (before and after it, 3 reads each: the machine's
 *               bandwidth drifts between rows), and
 *               OpenBLAS sgemm on the weights dequantized to f32 beforehand, in one
 *               process: each side's runs back to back, the caches flushed (64 MiB
 *               read) before each, so that the weights come from memory; the same weights
 *               packed (SPEC §7, mxf_pack_weights) timed the same way beside them (packed
 *               ms, and its share of the read bandwidth on the same byte count); and (dec_pbf16,
 *               dec_pmxfp8) proj_rope at T in {1, 4, 16} tokens, bf16 and MXFP8 inputs, w
 *               out-in (24576 x 1536), against sgemm of its GEMM on f32 weights
 *   invariance  one bf16 x MXFP4 problem computed whole, by rows of 1, by column halves,
 *               with 1 and 2 threads, by rows of 1 with B packed: bytes of C that differ
 *               (0 by SPEC §5.1; a nonzero count fails the benchmark)
 * Then (MXF_BENCH_ONLY lists "grouped", or is unset) grouped_gemm_amax against a loop
 * of gemm_amax on the DeepSeek-V3 MoE shapes: bench_grouped.c.
 * Then the workspace that plans ask for (plan only, nothing run): the cases above and a
 * serving loop's weight, gemm_amax MXFP8 with B = 7168 x 2048 and M = 64 (and the sum
 * over M = 1..64: what one-call plans of those shapes would hold between them).
 *
 * Prints tables with the ratio to the group's sgemm and writes JSON to argv[1] (default
 * bench_cpu.json). Build: part of the CMake build (target mxf_bench_cpu); run:
 *   ./build/mxf_bench_cpu [out.json] [M N K]
 * Figures and what they mean: docs/kernels/cpu.md (Measured).
 */
#if !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#endif
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "formats.h"
#include "judge.h"
#include "mxfuse.h"
#include "testutil.h"

#if defined(MXF_HAVE_CBLAS)
#include <cblas.h>
#endif

int mxf_bench_grouped(int runs); /* bench_grouped.c */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* A pause before each timed run: the thread pools of OpenBLAS (and of oneDNN's OpenMP)
 * keep spinning for a while after their call returns (OpenBLAS: 2^28 cycles by default),
 * and on a machine of few cores they would take a core from the case timed next. */
#define MXF_BENCH_SETTLE_MS 150
static void settle(void) {
  struct timespec ts = {0, MXF_BENCH_SETTLE_MS * 1000000L};
  nanosleep(&ts, NULL);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n & 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* xorshift + Box-Muller: the bench only needs varied, non-zero data */
static uint64_t g_state = 0x9E3779B97F4A7C15ull;
static double urand(void) {
  g_state ^= g_state << 13, g_state ^= g_state >> 7, g_state ^= g_state << 17;
  return ((double)(g_state >> 11) + 0.5) * 0x1.0p-53;
}
static double nrand(void) { return sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand()); }

static void *xalloc(size_t n) {
  void *p = aligned_alloc(64, (n + 63) / 64 * 64);
  if (!p) {
    fprintf(stderr, "bench: out of memory (%zu bytes)\n", n);
    exit(2);
  }
  return p;
}

/* Reads 64 MiB (twice a large last-level cache) so that what a run reads next comes from
 * memory. */
static volatile uint64_t g_flush_sum;
static void flush_caches(void) {
  static uint64_t *buf;
  const size_t words = ((size_t)64 << 20) / sizeof(uint64_t);
  if (!buf) {
    buf = xalloc(words * sizeof(uint64_t));
    for (size_t i = 0; i < words; ++i)
      buf[i] = i;
  }
  uint64_t s = 0;
  for (size_t i = 0; i < words; i += 8)
    s += buf[i];
  g_flush_sum += s;
}

static int g_runs = 7;

typedef struct result {
  const char *name, *what;
  char core[48]; /* the plan's mxf_plan_backend, "" for sgemm */
  double ms;
  int group;
  int64_t m, n, k;
} result;

/* A prepared case: run() performs one timed unit of work, returns 0 on success. */
typedef struct bench_case {
  const char *name, *what;
  char core[48];
  int group; /* 0: gemm_amax at M N K, 1: proj_rope; ratios are to the group's sgemm */
  int (*run)(struct bench_case *);
  /* gemm_amax, proj_rope */
  mxf_plan *plan;
  mxf_gemm_amax_args args;
  mxf_proj_rope_args pargs;
  void *ws;
  size_t wsn;
  /* sgemm */
  int64_t m, n, k; /* and gemm_amax's M N K */
  int e2;          /* gemm_amax: e2m1 operands (else e4m3) */
  float *fa, *fb, *fc;
  void *bufs[10];
  float amax;
  double t[64];
} bench_case;

static int run_gemm_amax(bench_case *b) {
  return mxf_gemm_amax_run(b->plan, &b->args, b->ws, b->wsn, NULL) == MXF_OK ? 0 : -1;
}

/* Random operands (quantized normal data, block scales spread over 14 binades), plan,
 * workspace. Returns 0 on success. */
static int setup_gemm_amax(bench_case *bc, int64_t M, int64_t N, int64_t K, mxf_dtype ab, int quiet) {
  int sf_vec = 32;
  int64_t kb = (K + sf_vec - 1) / sf_vec;
  int e2 = ab == MXF_E2M1;
  size_t a_n = (size_t)(e2 ? M * K / 2 : M * K), b_n = (size_t)(e2 ? N * K / 2 : N * K);
  uint8_t *a = xalloc(a_n), *b = xalloc(b_n);
  size_t sfa_n = mxf_sf_size(M, K, 1, sf_vec, MXF_SF_SWIZZLED),
         sfb_n = mxf_sf_size(N, K, 1, sf_vec, MXF_SF_SWIZZLED);
  uint8_t *sfa = xalloc(sfa_n), *sfb = xalloc(sfb_n);
  uint16_t *c = xalloc((size_t)(M * N) * 2);
  for (size_t i = 0; i < a_n; ++i)
    a[i] = e2 ? mxf_e2m1_pack(mxf_f32_to_e2m1((float)(2 * nrand())), mxf_f32_to_e2m1((float)(2 * nrand())))
              : mxf_f32_to_e4m3((float)(96 * nrand()));
  for (size_t i = 0; i < b_n; ++i)
    b[i] = e2 ? mxf_e2m1_pack(mxf_f32_to_e2m1((float)(2 * nrand())), mxf_f32_to_e2m1((float)(2 * nrand())))
              : mxf_f32_to_e4m3((float)(96 * nrand()));
  memset(sfa, 127, sfa_n), memset(sfb, 127, sfb_n);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t k = 0; k < kb; ++k)
      sfa[mxf_sf_swizzled_offset(r, k, 0, M, K, sf_vec)] = (uint8_t)(120 + urand() * 14);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t k = 0; k < kb; ++k)
      sfb[mxf_sf_swizzled_offset(r, k, 0, N, K, sf_vec)] = (uint8_t)(120 + urand() * 14);
  bc->bufs[0] = a, bc->bufs[1] = b, bc->bufs[2] = sfa, bc->bufs[3] = sfb, bc->bufs[4] = c;

  int64_t R = (M + 127) / 128, Rn = (N + 127) / 128, Kq = (kb + 3) / 4;
  mxf_gemm_amax_desc d;
  memset(&d, 0, sizeof d);
  d.a = (mxf_tensor){a, ab, MXF_DEVICE_CPU, 3, {M, K, 1}, {0}};
  d.b = (mxf_tensor){b, ab, MXF_DEVICE_CPU, 3, {N, K, 1}, {0}};
  d.sfa = (mxf_tensor){sfa, MXF_E8M0, MXF_DEVICE_CPU, 6, {1, R, Kq, 32, 4, 4}, {0}};
  d.sfb = (mxf_tensor){sfb, MXF_E8M0, MXF_DEVICE_CPU, 6, {1, Rn, Kq, 32, 4, 4}, {0}};
  d.c = (mxf_tensor){c, MXF_BF16, MXF_DEVICE_CPU, 3, {M, N, 1}, {0}};
  d.amax = (mxf_tensor){&bc->amax, MXF_F32, MXF_DEVICE_CPU, 1, {1}, {0}};
  d.sf_vec = sf_vec;
  if (mxf_gemm_amax_plan(&bc->plan, &d) != MXF_OK) {
    if (!quiet) fprintf(stderr, "bench: gemm_amax plan failed: %s\n", mxf_last_error());
    return -1;
  }
  snprintf(bc->core, sizeof bc->core, "%s", mxf_plan_backend(bc->plan));
  bc->wsn = mxf_plan_workspace_size(bc->plan);
  bc->ws = bc->wsn ? xalloc(bc->wsn) : NULL;
  if (bc->ws) memset(bc->ws, 0, bc->wsn);
  bc->args = (mxf_gemm_amax_args){a, b, sfa, sfb, c, &bc->amax, NULL};
  bc->run = run_gemm_amax;
  bc->m = M, bc->n = N, bc->k = K, bc->e2 = e2;
  return 0;
}

/* Value k of operand row r (rows of K codes, swizzled e8m0 scales of sf_vec 32). */
static double gemm_operand(const bench_case *bc, const uint8_t *x, const uint8_t *sf, int64_t rows, int64_t r,
                           int64_t k) {
  const float code = bc->e2 ? mxf_e2m1_to_f32((uint8_t)(x[(r * bc->k + k) / 2] >> ((k & 1) * 4)) & 0xF)
                            : mxf_e4m3_to_f32(x[r * bc->k + k]);
  return (double)code * mxf_e8m0_to_f32(sf[mxf_sf_swizzled_offset(r, k / 32, 0, rows, bc->k, 32)]);
}

/* The last run's C judged by SPEC §5 (judge.h) on `samples` elements spread over it;
 * returns the wrong ones. */
static int64_t judge_gemm_amax(const bench_case *bc, int samples) {
  double *a = xalloc((size_t)bc->k * sizeof(double)), *b = xalloc((size_t)bc->k * sizeof(double));
  mxj_counts n;
  mxj_counts_init(&n);
  for (int s = 0; s < samples; ++s) {
    const int64_t i = (int64_t)(urand() * (double)bc->m) % bc->m,
                  j = (int64_t)(urand() * (double)bc->n) % bc->n;
    for (int64_t k = 0; k < bc->k; ++k) {
      a[k] = gemm_operand(bc, bc->args.a, bc->args.sfa, bc->m, i, k);
      b[k] = gemm_operand(bc, bc->args.b, bc->args.sfb, bc->n, j, k);
    }
    const mxj_ref r = mxj_gemm_ref(a, b, bc->k, 1.0);
    mxj_gemm_judge(MXF_BF16, &r, mxj_code_at(MXF_BF16, bc->args.c, i * bc->n + j), &n, i * bc->n + j);
  }
  free(a), free(b);
  if (n.wrong)
    fprintf(stderr, "bench: %s (%s): %lld of %d sampled C elements wrong by SPEC 5 (first at %lld)\n",
            bc->name, bc->core, (long long)n.wrong, samples, (long long)n.first_wrong);
  return n.wrong;
}

#if defined(MXF_HAVE_CBLAS)
static int run_sgemm(bench_case *b) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b->m, (int)b->n, (int)b->k, 1.0f, b->fa,
              (int)b->k, b->fb, (int)b->k, 0.0f, b->fc, (int)b->n);
  return 0;
}

static int setup_sgemm(bench_case *b, int64_t M, int64_t N, int64_t K) {
  b->m = M, b->n = N, b->k = K;
  b->fa = xalloc((size_t)(M * K) * 4), b->fb = xalloc((size_t)(N * K) * 4),
  b->fc = xalloc((size_t)(M * N) * 4);
  for (int64_t i = 0; i < M * K; ++i)
    b->fa[i] = (float)nrand();
  for (int64_t i = 0; i < N * K; ++i)
    b->fb[i] = (float)nrand();
  b->bufs[0] = b->fa, b->bufs[1] = b->fb, b->bufs[2] = b->fc;
  b->run = run_sgemm;
  return 0;
}
#endif

#define PROJ_K 1536
#define PROJ_H 128
#define PROJ_D 192
#define PROJ_ROPE 64

static int run_proj(bench_case *b) {
  return mxf_proj_rope_run(b->plan, &b->pargs, b->ws, b->wsn, NULL) == MXF_OK ? 0 : -1;
}

static mxf_tensor host_tensor(void *p, mxf_dtype dt, int nd, int64_t d0, int64_t d1, int64_t d2) {
  mxf_tensor t = {p, dt, MXF_DEVICE_CPU, nd, {d0, d1, d2}, {0}};
  return t;
}

/* proj_rope descriptor of T tokens (data pointers from bufs when given) */
static mxf_proj_rope_desc proj_desc(int64_t T, int mxfp8, void *const *bufs) {
  const int64_t n = PROJ_H * PROJ_D, kb = PROJ_K / 32;
  const mxf_dtype dt = mxfp8 ? MXF_E4M3 : MXF_BF16;
  void *const none[10] = {0};
  if (!bufs) bufs = none;
  mxf_proj_rope_desc d;
  memset(&d, 0, sizeof d);
  d.x = host_tensor(bufs[0], dt, 2, T, PROJ_K, 0);
  d.w = host_tensor(bufs[1], dt, 2, n, PROJ_K, 0);
  if (mxfp8) {
    d.x_scale = host_tensor(bufs[2], MXF_E8M0, 2, T, kb, 0);
    d.w_scale = host_tensor(bufs[3], MXF_E8M0, 2, n, kb, 0);
  }
  d.cos = host_tensor(bufs[4], MXF_BF16, 2, T, PROJ_ROPE, 0);
  d.sin = host_tensor(bufs[5], MXF_BF16, 2, T, PROJ_ROPE, 0);
  d.out_row = host_tensor(bufs[6], MXF_E4M3, 3, T, PROJ_H, PROJ_D);
  d.out_scales_row = host_tensor(bufs[7], MXF_E8M0, 3, T, PROJ_H, PROJ_D / 32);
  d.out_col = host_tensor(bufs[8], MXF_E4M3, 3, T, PROJ_H, PROJ_D);
  d.out_scales_col = host_tensor(bufs[9], MXF_E8M0, 3, (T + 31) / 32, PROJ_H, PROJ_D);
  d.flags = MXF_PROJ_W_OUT_IN;
  return d;
}

static int setup_proj(bench_case *bc, int64_t T, int mxfp8) {
  const int64_t n = PROJ_H * PROJ_D, kb = PROJ_K / 32;
  const size_t es = mxfp8 ? 1 : 2;
  const size_t sz[10] = {(size_t)(T * PROJ_K) * es,
                         (size_t)(n * PROJ_K) * es,
                         mxfp8 ? (size_t)(T * kb) : 0,
                         mxfp8 ? (size_t)(n * kb) : 0,
                         (size_t)(T * PROJ_ROPE) * 2,
                         (size_t)(T * PROJ_ROPE) * 2,
                         (size_t)(T * n),
                         (size_t)(T * n / 32),
                         (size_t)(T * n),
                         (size_t)((T + 31) / 32 * n)};
  for (int i = 0; i < 10; ++i)
    bc->bufs[i] = sz[i] ? xalloc(sz[i]) : NULL;
  for (int i = 0; i < 2; ++i) { /* x, w: normal data, w ten times smaller */
    const double sd = i ? 0.05 : 1.0;
    for (size_t j = 0; j < sz[i] / es; ++j) {
      if (mxfp8)
        ((uint8_t *)bc->bufs[i])[j] = mxf_f32_to_e4m3((float)(96 * nrand()));
      else
        ((uint16_t *)bc->bufs[i])[j] = mxf_f32_to_bf16((float)(sd * nrand()));
    }
  }
  for (int i = 2; i < 4; ++i)
    for (size_t j = 0; j < sz[i]; ++j)
      ((uint8_t *)bc->bufs[i])[j] = (uint8_t)(i == 2 ? 120 + urand() * 4 : 116 + urand() * 4);
  for (int64_t j = 0; j < T * PROJ_ROPE; ++j) {
    const double a = 6.283185307179586 * urand();
    ((uint16_t *)bc->bufs[4])[j] = mxf_f32_to_bf16((float)cos(a));
    ((uint16_t *)bc->bufs[5])[j] = mxf_f32_to_bf16((float)sin(a));
  }
  mxf_proj_rope_desc d = proj_desc(T, mxfp8, bc->bufs);
  if (mxf_proj_rope_plan(&bc->plan, &d) != MXF_OK) {
    fprintf(stderr, "bench: proj_rope plan failed: %s\n", mxf_last_error());
    return -1;
  }
  snprintf(bc->core, sizeof bc->core, "%s", mxf_plan_backend(bc->plan));
  bc->wsn = mxf_plan_workspace_size(bc->plan);
  bc->ws = bc->wsn ? xalloc(bc->wsn) : NULL;
  if (bc->ws) memset(bc->ws, 0, bc->wsn);
  void **b = bc->bufs;
  bc->pargs = (mxf_proj_rope_args){b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9]};
  bc->run = run_proj;
  return 0;
}

/* Workspace of a gemm_amax plan, MXFP8 (e4m3, e8m0 swizzled, sf_vec 32), bf16 C, k-major
 * A and B, n-major C, L = 1: geometry only. 0 if the plan is refused. */
static size_t gemm_workspace(int64_t M, int64_t N, int64_t K) {
  int64_t kb = (K + 31) / 32, Kq = (kb + 3) / 4;
  float amax;
  mxf_gemm_amax_desc d;
  memset(&d, 0, sizeof d);
  d.a = (mxf_tensor){NULL, MXF_E4M3, MXF_DEVICE_CPU, 3, {M, K, 1}, {0}};
  d.b = (mxf_tensor){NULL, MXF_E4M3, MXF_DEVICE_CPU, 3, {N, K, 1}, {0}};
  d.sfa = (mxf_tensor){NULL, MXF_E8M0, MXF_DEVICE_CPU, 6, {1, (M + 127) / 128, Kq, 32, 4, 4}, {0}};
  d.sfb = (mxf_tensor){NULL, MXF_E8M0, MXF_DEVICE_CPU, 6, {1, (N + 127) / 128, Kq, 32, 4, 4}, {0}};
  d.c = (mxf_tensor){NULL, MXF_BF16, MXF_DEVICE_CPU, 3, {M, N, 1}, {0}};
  d.amax = (mxf_tensor){&amax, MXF_F32, MXF_DEVICE_CPU, 1, {1}, {0}};
  d.sf_vec = 32;
  mxf_plan *plan = NULL;
  if (mxf_gemm_amax_plan(&plan, &d) != MXF_OK) return 0;
  size_t n = mxf_plan_workspace_size(plan);
  mxf_plan_destroy(plan);
  return n;
}

static size_t proj_workspace(int64_t T, int mxfp8) {
  mxf_proj_rope_desc d = proj_desc(T, mxfp8, NULL);
  mxf_plan *plan = NULL;
  if (mxf_proj_rope_plan(&plan, &d) != MXF_OK) return 0;
  size_t n = mxf_plan_workspace_size(plan);
  mxf_plan_destroy(plan);
  return n;
}

static long peak_rss_kib(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

/* A serving loop: one MXFP8 weight (n, k), batch sizes M = 1..max_m through the one-call
 * form, each run once; the growth of the process's peak RSS over the loop, in MiB (the
 * inputs are allocated before the first reading). */
static double one_call_rss_growth(int64_t max_m, int64_t n, int64_t k) {
  int64_t kb = k / 32;
  uint8_t *a = xalloc((size_t)(max_m * k)), *b = xalloc((size_t)(n * k)), *sa = xalloc((size_t)(max_m * kb)),
          *sb = xalloc((size_t)(n * kb));
  uint16_t *c = xalloc((size_t)(max_m * n) * 2);
  for (int64_t i = 0; i < max_m * k; ++i)
    a[i] = mxf_f32_to_e4m3((float)(96 * nrand()));
  for (int64_t i = 0; i < n * k; ++i)
    b[i] = mxf_f32_to_e4m3((float)(96 * nrand()));
  memset(sa, 124, (size_t)(max_m * kb)), memset(sb, 124, (size_t)(n * kb));
  memset(c, 0, (size_t)(max_m * n) * 2);
  float amax = 0;
  long rss0 = peak_rss_kib();
  for (int64_t m = 1; m <= max_m; ++m) {
    mxf_gemm_amax_desc d;
    memset(&d, 0, sizeof d);
    d.a = (mxf_tensor){a, MXF_E4M3, MXF_DEVICE_CPU, 2, {m, k}, {0}};
    d.b = (mxf_tensor){b, MXF_E4M3, MXF_DEVICE_CPU, 2, {n, k}, {0}};
    d.sfa = (mxf_tensor){sa, MXF_E8M0, MXF_DEVICE_CPU, 2, {m, kb}, {0}};
    d.sfb = (mxf_tensor){sb, MXF_E8M0, MXF_DEVICE_CPU, 2, {n, kb}, {0}};
    d.c = (mxf_tensor){c, MXF_BF16, MXF_DEVICE_CPU, 2, {m, n}, {0}};
    d.amax = (mxf_tensor){&amax, MXF_F32, MXF_DEVICE_CPU, 1, {1}, {0}};
    d.sf_vec = 32;
    if (mxf_gemm_amax(&d, NULL) != MXF_OK) {
      fprintf(stderr, "bench: one call M=%lld failed: %s\n", (long long)m, mxf_last_error());
      break;
    }
  }
  double growth = (double)(peak_rss_kib() - rss0) / 1024.0;
  free(a), free(b), free(sa), free(sb), free(c);
  return growth;
}

/* Whether case `name` runs: MXF_BENCH_ONLY unset, or it lists the name. */
static int wanted(const char *name) { return tu_env_lists("MXF_BENCH_ONLY", name); }

/* ------------------------------------------------------------ read bandwidth, decode, invariance */
/* The machine's read bandwidth: every thread (MXF_NUM_THREADS, else the CPUs the process
 * may run on) sums its share of a buffer of MXF_BENCH_READ_MIB (default 256 MiB, beyond
 * any last-level cache) as 64-bit words; GB/s of the median run. */
typedef struct read_job {
  const uint64_t *p;
  size_t n;
  uint64_t sum;
} read_job;

static void *read_thread(void *v) {
  read_job *j = (read_job *)v;
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i + 4 <= j->n; i += 4)
    s0 += j->p[i], s1 += j->p[i + 1], s2 += j->p[i + 2], s3 += j->p[i + 3];
  j->sum = s0 + s1 + s2 + s3;
  return NULL;
}

static int bench_threads(void) {
  const char *e = getenv("MXF_NUM_THREADS");
  if (e && atoi(e) >= 1) return atoi(e);
  cpu_set_t set; /* the library's default: the CPUs this process may run on */
  long n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  if (n < 1) n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

/* GB/s of the median of `runs` reads of the buffer (written once, kept for the decode
 * rows' own measurements). */
static uint64_t *g_read_buf;
static size_t g_read_words;
static double read_bandwidth_runs(int runs) {
  if (!g_read_buf) {
    const char *e = getenv("MXF_BENCH_READ_MIB");
    g_read_words = ((size_t)(e && atoi(e) > 0 ? atoi(e) : 256) << 20) / 8;
    g_read_buf = xalloc(g_read_words * 8);
    for (size_t i = 0; i < g_read_words; ++i)
      g_read_buf[i] = i;
  }
  const size_t words = g_read_words;
  const int nt = bench_threads();
  pthread_t th[64];
  read_job jobs[64];
  double t[64];
  for (int round = -1; round < runs; ++round) {
    const double t0 = now_ms();
    for (int i = 0; i < nt; ++i) {
      jobs[i] = (read_job){g_read_buf + words / (size_t)nt * (size_t)i, words / (size_t)nt, 0};
      pthread_create(&th[i], NULL, read_thread, &jobs[i]);
    }
    for (int i = 0; i < nt; ++i)
      pthread_join(th[i], NULL);
    if (round >= 0) t[round] = now_ms() - t0;
  }
  uint64_t s = 0;
  for (int i = 0; i < nt; ++i)
    s += jobs[i].sum;
  const double ms = median(t, runs);
  return s == 0 ? 0.0 : (double)(words / (size_t)nt * (size_t)nt * 8) / (ms * 1e6);
}
static double read_bandwidth(void) { return read_bandwidth_runs(g_runs); }

/* A decode problem: bf16 A (M x K), weights B (N x K) in format `fmt` (e2m1 with e8m0
 * scales per 32 = MXFP4, e2m1 with ue4m3 per 16 = NVFP4-style, e4m3 with e8m0 per 32 =
 * MXFP8), compact scales, f32 C. */
typedef struct decode_op {
  int64_t m, n, k;
  mxf_dtype fmt, sf;
  int sf_vec;
  uint16_t *a;
  uint8_t *b, *sb;
  float *c, amax;
  size_t b_bytes, sb_bytes; /* what a run reads of the weights */
  uint8_t *pk;              /* the whole B packed (SPEC §7) */
  mxf_plan *plan;
  void *ws;
  size_t wsn;
} decode_op;

/* rows [n0, n0 + n) of B and their scales as gemm_amax takes them */
static void decode_weights(const decode_op *o, int64_t n0, int64_t n, mxf_tensor *b, mxf_tensor *sfb) {
  const int64_t kb = o->k / o->sf_vec;
  const int e2 = o->fmt == MXF_E2M1;
  *b = (mxf_tensor){o->b + (e2 ? n0 * o->k / 2 : n0 * o->k), o->fmt, MXF_DEVICE_CPU, 2, {n, o->k}, {0}};
  *sfb = (mxf_tensor){o->sb + n0 * kb, o->sf, MXF_DEVICE_CPU, 2, {n, kb}, {0}};
}

/* packed: the whole B, packed (o->pk) */
static int decode_plan(decode_op *o, int64_t m0, int64_t m, int64_t n0, int64_t n, float *c, int64_t ldc,
                       mxf_plan **plan, int packed) {
  mxf_gemm_amax_desc d;
  memset(&d, 0, sizeof d);
  d.a = (mxf_tensor){o->a + m0 * o->k, MXF_BF16, MXF_DEVICE_CPU, 2, {m, o->k}, {0}};
  decode_weights(o, n0, n, &d.b, &d.sfb);
  if (packed) d.flags = MXF_AMAX_B_PACKED, d.b.data = o->pk, d.sfb.data = NULL;
  d.c = (mxf_tensor){c, MXF_F32, MXF_DEVICE_CPU, 2, {m, n}, {ldc, 1}};
  d.amax = (mxf_tensor){&o->amax, MXF_F32, MXF_DEVICE_CPU, 1, {1}, {0}};
  d.sf_vec = o->sf_vec;
  if (mxf_gemm_amax_plan(plan, &d) != MXF_OK) {
    fprintf(stderr, "bench: decode plan failed: %s\n", mxf_last_error());
    return -1;
  }
  return 0;
}

static int decode_run(decode_op *o, mxf_plan *plan, int64_t m0, int64_t n0, float *c, int packed) {
  const int64_t kb = o->k / o->sf_vec;
  const int e2 = o->fmt == MXF_E2M1;
  const size_t wsn = mxf_plan_workspace_size(plan);
  if (wsn > o->wsn) {
    free(o->ws);
    o->ws = xalloc(wsn), o->wsn = wsn;
  }
  mxf_gemm_amax_args args = {
      o->a + m0 * o->k, o->b + (e2 ? n0 * o->k / 2 : n0 * o->k), NULL, o->sb + n0 * kb, c, &o->amax, NULL};
  if (packed) args.b = o->pk, args.sfb = NULL;
  return mxf_gemm_amax_run(plan, &args, o->ws, o->wsn, NULL) == MXF_OK ? 0 : -1;
}

static void decode_alloc(decode_op *o, int64_t m, int64_t n, int64_t k, mxf_dtype fmt, mxf_dtype sf,
                         int sf_vec) {
  memset(o, 0, sizeof *o);
  o->m = m, o->n = n, o->k = k, o->fmt = fmt, o->sf = sf, o->sf_vec = sf_vec;
  const int e2 = fmt == MXF_E2M1;
  o->b_bytes = (size_t)(e2 ? n * k / 2 : n * k), o->sb_bytes = (size_t)(n * (k / sf_vec));
  o->a = xalloc((size_t)(m * k) * 2), o->b = xalloc(o->b_bytes), o->sb = xalloc(o->sb_bytes);
  o->c = xalloc((size_t)(m * n) * 4);
  for (int64_t i = 0; i < m * k; ++i)
    o->a[i] = mxf_f32_to_bf16((float)nrand());
  for (size_t i = 0; i < o->b_bytes; ++i)
    o->b[i] = e2 ? mxf_e2m1_pack(mxf_f32_to_e2m1((float)(2 * nrand())), mxf_f32_to_e2m1((float)(2 * nrand())))
                 : mxf_f32_to_e4m3((float)(96 * nrand()));
  for (size_t i = 0; i < o->sb_bytes; ++i)
    o->sb[i] = sf == MXF_E4M3 ? mxf_f32_to_e4m3((float)(0.5 + 4 * urand())) : (uint8_t)(120 + urand() * 14);
  mxf_tensor b, sfb;
  decode_weights(o, 0, n, &b, &sfb);
  size_t pn = 0;
  if (mxf_pack_weights_size(&b, &sfb, sf_vec, &pn) != MXF_OK || !(o->pk = xalloc(pn)) ||
      mxf_pack_weights(&b, &sfb, sf_vec, o->pk, pn) != MXF_OK) {
    fprintf(stderr, "bench: packing the weights failed: %s\n", mxf_last_error());
    exit(1);
  }
}

static void decode_free(decode_op *o) {
  free(o->a), free(o->b), free(o->sb), free(o->pk), free(o->c), free(o->ws);
  mxf_plan_destroy(o->plan);
}

/* B dequantized into f32 (what sgemm is given: 4 bytes a value). */
static float *decode_weights_f32(const decode_op *o) {
  float *f = xalloc((size_t)(o->n * o->k) * 4);
  const int64_t kb = o->k / o->sf_vec;
  for (int64_t r = 0; r < o->n; ++r)
    for (int64_t k = 0; k < o->k; ++k) {
      const float code = o->fmt == MXF_E2M1
                             ? mxf_e2m1_to_f32((uint8_t)(o->b[(r * o->k + k) / 2] >> ((k & 1) * 4)) & 0xF)
                             : mxf_e4m3_to_f32(o->b[r * o->k + k]);
      f[r * o->k + k] = code * mxf_scale_to_f32(o->sb[r * kb + k / o->sf_vec], o->sf == MXF_E4M3);
    }
  return f;
}

typedef struct decode_result {
  const char *fmt; /* the table's name: mxfp4, ... (gemm_amax), pbf16, pmxfp8 (proj_rope) */
  const char *what;
  int64_t m, n, k;
  double ms, gbs, read_gbs, of_read, sgemm_ms; /* read_gbs: measured around the row */
  double packed_ms, packed_of_read;            /* the weights packed (gemm_amax); 0: none */
} decode_result;

static decode_result g_dec[64];
static int g_ndec;

/* One decode row: the op's runs (fn(ctx)) back to back, then (packed_fn, if any) its runs
 * on the weights packed, then sgemm's (m x n x k on the f32 a and b), as a model's layers
 * run, each run after the caches are flushed so that the weights come from memory; the
 * pause before the op's runs lets OpenBLAS's threads of the previous row's sgemm park.
 * weight_bytes: what a run reads of the weights (the packed row: the same count). */
static int decode_row(const char *fmt, const char *what, int (*fn)(void *), int (*packed_fn)(void *),
                      void *ctx, int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c,
                      double weight_bytes, double read_gbs) {
  double t[64], tp[64], ts[64];
  /* the read bandwidth around the row (this machine's drifts between rows), if asked */
  const double bw0 = read_gbs > 0 ? read_bandwidth_runs(3) : 0.0;
  settle();
  for (int side = 0; side < (packed_fn ? 2 : 1); ++side)
    for (int round = -2; round < g_runs; ++round) {
      flush_caches();
      const double t0 = now_ms();
      if ((side ? packed_fn : fn)(ctx)) return -1;
      if (round >= 0) (side ? tp : t)[round] = now_ms() - t0;
    }
  for (int round = -2; round < g_runs; ++round) {
    flush_caches();
    const double t0 = now_ms();
#if defined(MXF_HAVE_CBLAS)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0f, a, (int)k, b, (int)k,
                0.0f, c, (int)n);
#else
    (void)a, (void)b, (void)c;
#endif
    if (round >= 0) ts[round] = now_ms() - t0;
  }
  decode_result *r = &g_dec[g_ndec++];
  r->fmt = fmt, r->what = what, r->m = m, r->n = n, r->k = k;
  r->ms = median(t, g_runs);
#if defined(MXF_HAVE_CBLAS)
  r->sgemm_ms = median(ts, g_runs);
#else
  r->sgemm_ms = 0;
#endif
  r->gbs = weight_bytes / (r->ms * 1e6);
  r->read_gbs = read_gbs > 0 ? 0.5 * (bw0 + read_bandwidth_runs(3)) : 0.0;
  r->of_read = r->read_gbs > 0 ? r->gbs / r->read_gbs : 0;
  r->packed_ms = packed_fn ? median(tp, g_runs) : 0.0;
  r->packed_of_read = packed_fn && r->read_gbs > 0 ? weight_bytes / (r->packed_ms * 1e6) / r->read_gbs : 0.0;
  return 0;
}

typedef struct decode_call {
  decode_op *o;
  mxf_plan *plan, *packed; /* B as it is, and packed */
} decode_call;
static int run_decode_call(void *v) {
  const decode_call *d = (const decode_call *)v;
  return decode_run(d->o, d->plan, 0, 0, d->o->c, 0);
}
static int run_decode_packed(void *v) {
  const decode_call *d = (const decode_call *)v;
  return decode_run(d->o, d->packed, 0, 0, d->o->c, 1);
}
static int run_case(void *v) { return ((bench_case *)v)->run((bench_case *)v); }

/* The decode table: M x (N, K) x weight format; MXF_BENCH_DECODE_M=1,4,... narrows M. */
static int bench_decode(double read_gbs) {
  static const int64_t shapes[][2] = {{7168, 2048}, {2048, 7168}, {24576, 1536}};
  static const int64_t ms[] = {1, 4, 16, 64};
  static const struct {
    const char *name, *what;
    mxf_dtype fmt, sf;
    int sf_vec;
  } fmts[] = {{"mxfp4", "bf16 x mxfp4", MXF_E2M1, MXF_E8M0, 32},
              {"nvfp4", "bf16 x nvfp4", MXF_E2M1, MXF_E4M3, 16},
              {"mxfp8", "bf16 x mxfp8", MXF_E4M3, MXF_E8M0, 32}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; ++s)
    for (size_t f = 0; f < sizeof fmts / sizeof *fmts; ++f) {
      char fname[16];
      snprintf(fname, sizeof fname, "dec_%s", fmts[f].name);
      if (!wanted("decode") && !wanted(fname)) continue;
      decode_op o;
      decode_alloc(&o, 64, shapes[s][0], shapes[s][1], fmts[f].fmt, fmts[f].sf, fmts[f].sf_vec);
      float *bf = decode_weights_f32(&o), *af = xalloc((size_t)(64 * o.k) * 4),
            *cf = xalloc((size_t)(64 * o.n) * 4);
      for (int64_t i = 0; i < 64 * o.k; ++i)
        af[i] = mxf_bf16_to_f32(o.a[i]);
      for (size_t mi = 0; mi < sizeof ms / sizeof *ms; ++mi) {
        char mname[32];
        snprintf(mname, sizeof mname, "%lld", (long long)ms[mi]);
        if (!tu_env_lists("MXF_BENCH_DECODE_M", mname)) continue;
        decode_call dc = {&o, NULL, NULL};
        if (decode_plan(&o, 0, ms[mi], 0, o.n, o.c, o.n, &dc.plan, 0) ||
            decode_plan(&o, 0, ms[mi], 0, o.n, o.c, o.n, &dc.packed, 1))
          return -1;
        const int bad = decode_row(fmts[f].name, fmts[f].what, run_decode_call, run_decode_packed, &dc,
                                   ms[mi], o.n, o.k, af, bf, cf, (double)(o.b_bytes + o.sb_bytes), read_gbs);
        mxf_plan_destroy(dc.plan);
        mxf_plan_destroy(dc.packed);
        if (bad) return -1;
      }
      free(bf), free(af), free(cf);
      decode_free(&o);
    }
  return 0;
}

/* proj_rope at decode sizes: T in {1, 4, 16} tokens (MXF_BENCH_DECODE_M narrows), bf16
 * and MXFP8 inputs with w out-in (24576 x 1536), the default core, against sgemm of the
 * same GEMM on w dequantized to f32 beforehand; timed as the decode rows above. */
static int bench_decode_proj(double read_gbs) {
  static const int64_t ts[] = {1, 4, 16};
  const int64_t n = PROJ_H * PROJ_D, kb = PROJ_K / 32;
  for (int f8 = 0; f8 < 2; ++f8) {
    const char *name = f8 ? "pmxfp8" : "pbf16";
    char dname[16];
    snprintf(dname, sizeof dname, "dec_%s", name);
    if (!wanted("decode") && !wanted(dname)) continue;
    float *wf = NULL, *xf = xalloc((size_t)(16 * PROJ_K) * 4), *cf = xalloc((size_t)(16 * n) * 4);
    for (size_t ti = 0; ti < sizeof ts / sizeof *ts; ++ti) {
      char tname[32];
      snprintf(tname, sizeof tname, "%lld", (long long)ts[ti]);
      if (!tu_env_lists("MXF_BENCH_DECODE_M", tname)) continue;
      bench_case bc;
      memset(&bc, 0, sizeof bc);
      if (setup_proj(&bc, ts[ti], f8)) return -1;
      const uint8_t *w8 = (const uint8_t *)bc.bufs[1], *ws8 = (const uint8_t *)bc.bufs[3];
      const uint16_t *w16 = (const uint16_t *)bc.bufs[1];
      if (!wf) {
        wf = xalloc((size_t)(n * PROJ_K) * 4);
        for (int64_t i = 0; i < n * PROJ_K; ++i)
          wf[i] = f8 ? mxf_e4m3_to_f32(w8[i]) * mxf_e8m0_to_f32(ws8[i / 32]) : mxf_bf16_to_f32(w16[i]);
      }
      for (int64_t i = 0; i < ts[ti] * PROJ_K; ++i)
        xf[i] = f8 ? mxf_e4m3_to_f32(((const uint8_t *)bc.bufs[0])[i]) *
                         mxf_e8m0_to_f32(((const uint8_t *)bc.bufs[2])[i / 32])
                   : mxf_bf16_to_f32(((const uint16_t *)bc.bufs[0])[i]);
      if (decode_row(name, f8 ? "proj_rope mxfp8 w" : "proj_rope bf16 w", run_case, NULL, &bc, ts[ti], n,
                     PROJ_K, xf, wf, cf, (double)(n * PROJ_K * (f8 ? 1 : 2) + (f8 ? n * kb : 0)), read_gbs))
        return -1;
      mxf_plan_destroy(bc.plan);
      free(bc.ws);
      for (int i = 0; i < 10; ++i)
        free(bc.bufs[i]);
    }
    free(wf), free(xf), free(cf);
  }
  return 0;
}

/* The invariance check: bf16 x MXFP4 (compact scales), M x N x K = 320 x 1024 x 2048, f32
 * C, computed whole (2 threads; more rows and columns than the streaming path takes, so
 * the blocked GEMM path), by rows of 1 (the streaming path), by column halves, with 1
 * thread and with 2 threads, and by rows of 1 with B packed (SPEC §7): the bytes of C
 * that differ from the whole (0 by SPEC §5.1). */
#define INV_M 320
#define INV_N 1024
#define INV_K 2048
typedef struct inv_result {
  const char *how;
  size_t diff;
} inv_result;
static inv_result g_inv[5];
static int g_ninv;

static int bench_invariance(void) {
  decode_op o;
  decode_alloc(&o, INV_M, INV_N, INV_K, MXF_E2M1, MXF_E8M0, 32);
  float *whole = xalloc((size_t)(o.m * o.n) * 4), *got = xalloc((size_t)(o.m * o.n) * 4);
  mxf_plan *plan = NULL;
  char asked[32] = ""; /* the caller's MXF_NUM_THREADS, put back at the end */
  if (getenv("MXF_NUM_THREADS")) snprintf(asked, sizeof asked, "%s", getenv("MXF_NUM_THREADS"));
  setenv("MXF_NUM_THREADS", "2", 1);
  if (decode_plan(&o, 0, o.m, 0, o.n, whole, o.n, &plan, 0) || decode_run(&o, plan, 0, 0, whole, 0))
    return -1;
  mxf_plan_destroy(plan);
  for (int how = 0; how < 5; ++how) {
    memset(got, 0xA5, (size_t)(o.m * o.n) * 4);
    if (how == 0 || how == 4) {
      const int packed = how == 4;
      for (int64_t m = 0; m < o.m; ++m) {
        if (decode_plan(&o, m, 1, 0, o.n, got + m * o.n, o.n, &plan, packed) ||
            decode_run(&o, plan, m, 0, got + m * o.n, packed))
          return -1;
        mxf_plan_destroy(plan);
      }
    } else if (how == 1) {
      for (int h = 0; h < 2; ++h) {
        const int64_t n0 = h * o.n / 2;
        if (decode_plan(&o, 0, o.m, n0, o.n / 2, got + n0, o.n, &plan, 0) ||
            decode_run(&o, plan, 0, n0, got + n0, 0))
          return -1;
        mxf_plan_destroy(plan);
      }
    } else {
      setenv("MXF_NUM_THREADS", how == 2 ? "1" : "2", 1);
      if (decode_plan(&o, 0, o.m, 0, o.n, got, o.n, &plan, 0) || decode_run(&o, plan, 0, 0, got, 0))
        return -1;
      mxf_plan_destroy(plan);
    }
    size_t diff = 0;
    for (size_t i = 0; i < (size_t)(o.m * o.n) * 4; ++i)
      diff += ((const uint8_t *)whole)[i] != ((const uint8_t *)got)[i];
    static const char *const hows[] = {"rows of 1", "column halves", "1 thread", "2 threads",
                                       "rows of 1, B packed"};
    g_inv[g_ninv++] = (inv_result){hows[how], diff};
  }
  if (asked[0])
    setenv("MXF_NUM_THREADS", asked, 1);
  else
    unsetenv("MXF_NUM_THREADS");
  free(whole), free(got);
  decode_free(&o);
  return 0;
}

int main(int argc, char **argv) {
  const char *out = argc > 1 ? argv[1] : "bench_cpu.json";
  int64_t M = 2048, N = 2048, K = 2048;
  if (argc > 4) M = atoll(argv[2]), N = atoll(argv[3]), K = atoll(argv[4]);
  if (M <= 0 || N <= 0 || K <= 0 || (K & 1)) {
    fprintf(stderr, "usage: %s [out.json] [M N K]   (K even)\n", argv[0]);
    return 2;
  }
  const char *env = getenv("MXF_BENCH_RUNS");
  if (env && atoi(env) >= 5) g_runs = atoi(env) > 64 ? 64 : atoi(env);
  /* first, before anything else raises the peak: a serving loop through the one-call form,
   * and the process's peak RSS growth over it */
  double rss_mib = one_call_rss_growth(64, 7168, 2048);
  /* the memory's read bandwidth, decode against it, the invariance check */
  const int any_decode = wanted("decode") || wanted("dec_mxfp4") || wanted("dec_nvfp4") ||
                         wanted("dec_mxfp8") || wanted("dec_pbf16") || wanted("dec_pmxfp8");
  const double read_gbs = wanted("readbw") || any_decode ? read_bandwidth() : 0.0;
  if (bench_decode(read_gbs) || bench_decode_proj(read_gbs)) return 1;
  free(g_read_buf); /* the decode rows' bandwidths are measured */
  g_read_buf = NULL;
  if (wanted("invariance") && bench_invariance()) return 1;
  int64_t T = 256;
  env = getenv("MXF_BENCH_PROJ_T");
  if (env && atoll(env) >= 0) T = atoll(env);

  /* each op on each GEMM core this build and processor have (MXF_CONFIG cpu=...: oneDNN's
   * bf16 matmul, then the f32 core the library falls back to) */
  static const char *const cores[] = {"onednn", "blas", "c"};
  int ncores = 0;
  const char *core_on[3];
  char missing[3][256];
  for (int c = 0; c < 3; ++c) {
    char cfg[32];
    snprintf(cfg, sizeof cfg, "cpu=%s", cores[c]);
    setenv("MXF_CONFIG", cfg, 1);
    bench_case probe;
    memset(&probe, 0, sizeof probe);
    missing[c][0] = '\0';
    if (setup_gemm_amax(&probe, 128, 128, 128, MXF_E4M3, 1) == 0) {
      core_on[ncores++] = cores[c];
    } else {
      snprintf(missing[c], sizeof missing[c], "%s", mxf_last_error());
    }
    free(probe.ws);
    mxf_plan_destroy(probe.plan);
    for (int j = 0; j < 10; ++j)
      free(probe.bufs[j]);
    /* every core: the default (c) and the vendor ones asked for by name */
  }
  unsetenv("MXF_CONFIG");

  bench_case cases[16];
  memset(cases, 0, sizeof cases);
  int nc = 0;
#if defined(MXF_HAVE_CBLAS)
  cases[nc] = (bench_case){.name = "sgemm", .what = "OpenBLAS cblas_sgemm, f32 in/out"};
  if (setup_sgemm(&cases[nc++], M, N, K)) return 1;
#endif
  for (int c = 0; c < ncores; ++c) {
    char cfg[32];
    snprintf(cfg, sizeof cfg, "cpu=%s", core_on[c]);
    setenv("MXF_CONFIG", cfg, 1);
    cases[nc] = (bench_case){.name = "mxfp8", .what = "gemm_amax e4m3 x e4m3, e8m0/32, bf16 C"};
    if (wanted("mxfp8") && setup_gemm_amax(&cases[nc++], M, N, K, MXF_E4M3, 0)) return 1;
    cases[nc] = (bench_case){.name = "mxfp4", .what = "gemm_amax e2m1 x e2m1, e8m0/32, bf16 C"};
    if (wanted("mxfp4") && setup_gemm_amax(&cases[nc++], M, N, K, MXF_E2M1, 0)) return 1;
  }
  unsetenv("MXF_CONFIG");
  if (T > 0) {
#if defined(MXF_HAVE_CBLAS)
    cases[nc] = (bench_case){.name = "psgemm", .what = "OpenBLAS cblas_sgemm, proj_rope's GEMM", .group = 1};
    if (setup_sgemm(&cases[nc++], T, PROJ_H * PROJ_D, PROJ_K)) return 1;
#endif
    for (int c = 0; c < ncores; ++c) {
      char cfg[32];
      snprintf(cfg, sizeof cfg, "cpu=%s", core_on[c]);
      setenv("MXF_CONFIG", cfg, 1);
      cases[nc] = (bench_case){.name = "pbf16", .what = "proj_rope bf16 x / w (out-in)", .group = 1};
      if (wanted("pbf16") && setup_proj(&cases[nc++], T, 0)) return 1;
      cases[nc] =
          (bench_case){.name = "pmxfp8", .what = "proj_rope e4m3 x / w, e8m0/32 (out-in)", .group = 1};
      if (wanted("pmxfp8") && setup_proj(&cases[nc++], T, 1)) return 1;
    }
    unsetenv("MXF_CONFIG");
  }

  /* rounds interleave the cases so that a load change on the machine hits all alike */
  for (int round = -2; round < g_runs; ++round)
    for (int i = 0; i < nc; ++i) {
      settle();
      double t0 = now_ms();
      if (cases[i].run(&cases[i])) {
        fprintf(stderr, "bench: %s failed: %s\n", cases[i].name, mxf_last_error());
        return 1;
      }
      if (round >= 0) cases[i].t[round] = now_ms() - t0;
    }
  /* the timed results are worth something only when right */
  for (int i = 0; i < nc; ++i)
    if (cases[i].run == run_gemm_amax && judge_gemm_amax(&cases[i], 256)) return 1;
  result res[16];
  int nres = 0;
  double base[2] = {-1.0, -1.0};
  size_t wsn[16];
  for (int i = 0; i < nc; ++i) {
    const int g = cases[i].group;
    res[nres] = (result){cases[i].name,           cases[i].what, "", median(cases[i].t, g_runs), g, g ? T : M,
                         g ? PROJ_H * PROJ_D : N, g ? PROJ_K : K};
    snprintf(res[nres].core, sizeof res[nres].core, "%s", cases[i].core);
    wsn[nres++] = cases[i].wsn;
#if defined(MXF_HAVE_CBLAS)
    if (cases[i].run == run_sgemm) base[g] = res[nres - 1].ms;
#endif
    free(cases[i].ws);
    mxf_plan_destroy(cases[i].plan);
    for (int j = 0; j < 10; ++j)
      free(cases[i].bufs[j]);
  }

  for (int g = 0; g < 2; ++g) {
    if (g == 0)
      printf("CPU gemm benchmark, M=%lld N=%lld K=%lld, median of %d runs, MXF_NUM_THREADS=%s\n",
             (long long)M, (long long)N, (long long)K, g_runs,
             getenv("MXF_NUM_THREADS") ? getenv("MXF_NUM_THREADS") : "(all cores)");
    else if (T > 0)
      printf("\nCPU proj_rope benchmark, T=%lld K=%d H=%d D=%d rope=%d, median of %d runs\n", (long long)T,
             PROJ_K, PROJ_H, PROJ_D, PROJ_ROPE, g_runs);
    else
      break;
    printf("%-6s %-40s %-16s %10s %10s %12s %12s\n", "case", "what", "core", "ms", "GFLOP/s", "time/sgemm",
           "workspace");
    for (int i = 0; i < nres; ++i) {
      if (res[i].group != g) continue;
      double gflop = 2.0 * (double)res[i].m * (double)res[i].n * (double)res[i].k * 1e-9;
      char ratio[32] = "-", ws[32] = "-";
      if (base[g] > 0 && res[i].ms > 0) snprintf(ratio, sizeof ratio, "%.3f", res[i].ms / base[g]);
      if (wsn[i]) snprintf(ws, sizeof ws, "%.2f MB", (double)wsn[i] * 1e-6);
      printf("%-6s %-40s %-16s %10.2f %10.1f %12s %12s\n", res[i].name, res[i].what,
             res[i].core[0] ? res[i].core : "-", res[i].ms, res[i].ms > 0 ? gflop / (res[i].ms * 1e-3) : 0.0,
             ratio, ws);
    }
  }

  for (int c = 0; c < 3; ++c)
    if (missing[c][0]) printf("core %s: not here (%s)\n", cores[c], missing[c]);

  if (read_gbs > 0)
    printf("\nread bandwidth: %.1f GB/s (%d threads, median of %d reads of a buffer beyond the LLC)\n",
           read_gbs, bench_threads(), g_runs);
  if (g_ndec) {
    printf(
        "\ndecode: bf16 A (M x K) x weights (N x K), compact scales, f32 C, default core (pbf16, pmxfp8: "
        "proj_rope, M = T tokens, w out-in); sgemm: OpenBLAS on the weights dequantized to f32 beforehand\n");
    printf("%-6s %5s %6s %6s %10s %12s %10s %10s %10s %10s %10s %12s\n", "format", "M", "N", "K", "ms",
           "weight GB/s", "read GB/s", "of read", "packed ms", "of read", "sgemm ms", "time/sgemm");
    for (int i = 0; i < g_ndec; ++i)
      printf("%-6s %5lld %6lld %6lld %10.3f %12.2f %10.1f %9.0f%% %10.3f %9.0f%% %10.3f %12.3f\n",
             g_dec[i].fmt, (long long)g_dec[i].m, (long long)g_dec[i].n, (long long)g_dec[i].k, g_dec[i].ms,
             g_dec[i].gbs, g_dec[i].read_gbs, 100.0 * g_dec[i].of_read, g_dec[i].packed_ms,
             100.0 * g_dec[i].packed_of_read, g_dec[i].sgemm_ms,
             g_dec[i].sgemm_ms > 0 ? g_dec[i].ms / g_dec[i].sgemm_ms : 0.0);
  }
  if (g_ninv) {
    printf("\ninvariance: bf16 x MXFP4, %d x %d x %d, f32 C, against the whole computed with 2 threads: "
           "bytes of C that differ (must be 0)\n",
           INV_M, INV_N, INV_K);
    for (int i = 0; i < g_ninv; ++i)
      printf("  %-20s %zu\n", g_inv[i].how, g_inv[i].diff);
  }

  if (wanted("grouped") && mxf_bench_grouped(g_runs < 5 ? g_runs : 5)) return 1;

  /* a serving loop's weight: one plan per batch size */
  const int64_t wn = 7168, wk = 2048;
  size_t ws64 = gemm_workspace(64, wn, wk), ws_sum = 0;
  for (int64_t m = 1; m <= 64; ++m)
    ws_sum += gemm_workspace(m, wn, wk);
  printf("\nworkspace, gemm_amax MXFP8 B %lldx%lld: M=64 %.2f MB, sum over M=1..64 %.1f MB\n", (long long)wn,
         (long long)wk, (double)ws64 * 1e-6, (double)ws_sum * 1e-6);
  printf("workspace, proj_rope T=4096: bf16 %.2f MB, mxfp8 %.2f MB\n", (double)proj_workspace(4096, 0) * 1e-6,
         (double)proj_workspace(4096, 1) * 1e-6);
  printf(
      "one-call form, gemm_amax MXFP8 B %lldx%lld, M=1..64 run once each: peak RSS growth %.1f MiB; arenas "
      "hold %.2f MB\n",
      (long long)wn, (long long)wk, rss_mib, (double)mxf_plan_cache_workspace_bytes() * 1e-6);

  FILE *f = fopen(out, "w");
  if (!f) {
    fprintf(stderr, "bench: cannot write %s\n", out);
    return 1;
  }
  fprintf(f, "{\n  \"device\": \"cpu\",\n  \"cores_missing\": [");
  for (int c = 0, first = 1; c < 3; ++c)
    if (missing[c][0])
      fprintf(f, "%s{\"core\": \"%s\", \"why\": \"%s\"}", first ? "" : ", ", cores[c], missing[c]), first = 0;
  fprintf(f, "],\n  \"runs\": %d,\n  \"results\": [\n", g_runs);
  for (int i = 0; i < nres; ++i) {
    const int g = res[i].group;
    double gflop = 2.0 * (double)res[i].m * (double)res[i].n * (double)res[i].k * 1e-9;
    fprintf(f,
            "    {\"op\": \"%s\", \"what\": \"%s\", \"core\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, "
            "\"l\": 1, \"ms\": %.4f, \"gflops\": %.2f, \"workspace_bytes\": %zu",
            res[i].name, res[i].what, res[i].core, (long long)res[i].m, (long long)res[i].n,
            (long long)res[i].k, res[i].ms, res[i].ms > 0 ? gflop / (res[i].ms * 1e-3) : 0.0, wsn[i]);
    if (base[g] > 0 && res[i].ms > 0)
      fprintf(f, ", \"baseline\": \"%s\", \"baseline_ms\": %.4f, \"ratio\": %.4f", g ? "psgemm" : "sgemm",
              base[g], res[i].ms / base[g]);
    fprintf(f, "},\n");
  }
  if (read_gbs > 0) fprintf(f, "    {\"op\": \"read_bandwidth\", \"gbs\": %.3f},\n", read_gbs);
  for (int i = 0; i < g_ndec; ++i)
    fprintf(f,
            "    {\"op\": \"decode\", \"what\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"ms\": "
            "%.4f, \"weight_gbs\": %.3f, \"read_gbs\": %.3f, \"of_read\": %.4f, \"packed_ms\": %.4f, "
            "\"packed_of_read\": %.4f, \"sgemm_ms\": %.4f},\n",
            g_dec[i].what, (long long)g_dec[i].m, (long long)g_dec[i].n, (long long)g_dec[i].k, g_dec[i].ms,
            g_dec[i].gbs, g_dec[i].read_gbs, g_dec[i].of_read, g_dec[i].packed_ms, g_dec[i].packed_of_read,
            g_dec[i].sgemm_ms);
  for (int i = 0; i < g_ninv; ++i)
    fprintf(f, "    {\"op\": \"invariance\", \"how\": \"%s\", \"differing_bytes\": %zu},\n", g_inv[i].how,
            g_inv[i].diff);
  fprintf(f,
          "    {\"op\": \"workspace\", \"what\": \"gemm_amax MXFP8 plans, B %lldx%lld\", \"n\": %lld, \"k\": "
          "%lld, "
          "\"workspace_bytes_m64\": %zu, \"workspace_bytes_m1_to_64\": %zu}\n",
          (long long)wn, (long long)wk, (long long)wn, (long long)wk, ws64, ws_sum);
  fprintf(f,
          ",\n    {\"op\": \"one_call_rss\", \"what\": \"gemm_amax MXFP8 one call, M = 1..64\", \"n\": %lld, "
          "\"k\": %lld, "
          "\"peak_rss_growth_mib\": %.2f}\n",
          (long long)wn, (long long)wk, rss_mib);
  fprintf(f, "  ]\n}\n");
  fclose(f);
  printf("wrote %s\n", out);
  for (int i = 0; i < g_ninv; ++i)
    if (g_inv[i].diff) return 1; /* the invariance check failed */
  return 0;
}
