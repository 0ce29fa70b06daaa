/*
 * bench_cpu.c — CPU backend benchmark: gemm_amax against OpenBLAS sgemm, in one process.
 *
 * Cases (M = N = K = 2048 unless given as argv[2..4], L = 1, random data, never zeros):
 *   sgemm   OpenBLAS cblas_sgemm on f32 operands already in memory (the baseline; only
 *           when built with CBLAS)
 *   mxfp8   gemm_amax, e4m3 A/B, e8m0 scales (swizzled), sf_vec 32, bf16 C
 *   mxfp4   gemm_amax, e2m1 A/B, e8m0 scales (swizzled), sf_vec 32, bf16 C
 * Each: warm-up, then the median of MXF_BENCH_RUNS (default 7, at least 5) timed runs.
 * The gemm_amax timing covers the whole run (dequantization, GEMM, epilogue), through
 * the plan API with a preallocated workspace.
 *
 * Prints a table with the ratio to sgemm and writes JSON to argv[1] (default
 * bench_cpu.json). Build: part of the CMake build (target mxf_bench_cpu); run:
 *   ./build/mxf_bench_cpu [out.json] [M N K]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats.h"
#include "mxfuse.h"

#if defined(MXF_HAVE_CBLAS)
#include <cblas.h>
#endif

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
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

static int g_runs = 7;

typedef struct result {
  const char *name, *what;
  double ms;
} result;

/* A prepared case: run() performs one timed unit of work, returns 0 on success. */
typedef struct bench_case {
  const char *name, *what;
  int (*run)(struct bench_case *);
  /* gemm_amax */
  mxf_plan *plan;
  mxf_gemm_amax_args args;
  void *ws;
  size_t wsn;
  /* sgemm */
  int64_t m, n, k;
  float *fa, *fb, *fc;
  void *bufs[5];
  float amax;
  double t[64];
} bench_case;

static int run_gemm_amax(bench_case *b) {
  return mxf_gemm_amax_run(b->plan, &b->args, b->ws, b->wsn, NULL) == MXF_OK ? 0 : -1;
}

/* Random operands (quantized normal data, block scales spread over 14 binades), plan,
 * workspace. Returns 0 on success. */
static int setup_gemm_amax(bench_case *bc, int64_t M, int64_t N, int64_t K, mxf_dtype ab, char *backend,
                           size_t backend_n) {
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
    fprintf(stderr, "bench: gemm_amax plan failed: %s\n", mxf_last_error());
    return -1;
  }
  snprintf(backend, backend_n, "%s", mxf_plan_backend(bc->plan));
  bc->wsn = mxf_plan_workspace_size(bc->plan);
  bc->ws = bc->wsn ? xalloc(bc->wsn) : NULL;
  if (bc->ws) memset(bc->ws, 0, bc->wsn);
  bc->args = (mxf_gemm_amax_args){a, b, sfa, sfb, c, &bc->amax, NULL};
  bc->run = run_gemm_amax;
  return 0;
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
  double gflop = 2.0 * (double)M * (double)N * (double)K * 1e-9;

  bench_case cases[3];
  memset(cases, 0, sizeof cases);
  int nc = 0;
  char be8[64] = "", be4[64] = "";
#if defined(MXF_HAVE_CBLAS)
  cases[nc] = (bench_case){.name = "sgemm", .what = "OpenBLAS cblas_sgemm, f32 in/out"};
  if (setup_sgemm(&cases[nc++], M, N, K)) return 1;
#endif
  cases[nc] = (bench_case){.name = "mxfp8", .what = "gemm_amax e4m3 x e4m3, e8m0/32, bf16 C"};
  if (setup_gemm_amax(&cases[nc++], M, N, K, MXF_E4M3, be8, sizeof be8)) return 1;
  cases[nc] = (bench_case){.name = "mxfp4", .what = "gemm_amax e2m1 x e2m1, e8m0/32, bf16 C"};
  if (setup_gemm_amax(&cases[nc++], M, N, K, MXF_E2M1, be4, sizeof be4)) return 1;

  /* rounds interleave the cases so that a load change on the machine hits all alike */
  for (int round = -2; round < g_runs; ++round)
    for (int i = 0; i < nc; ++i) {
      double t0 = now_ms();
      if (cases[i].run(&cases[i])) {
        fprintf(stderr, "bench: %s failed: %s\n", cases[i].name, mxf_last_error());
        return 1;
      }
      if (round >= 0) cases[i].t[round] = now_ms() - t0;
    }
  result res[3];
  int nres = 0;
  double base = -1.0;
  for (int i = 0; i < nc; ++i) {
    res[nres++] = (result){cases[i].name, cases[i].what, median(cases[i].t, g_runs)};
    if (cases[i].run != run_gemm_amax) base = res[nres - 1].ms;
    free(cases[i].ws);
    mxf_plan_destroy(cases[i].plan);
    for (int j = 0; j < 5; ++j)
      free(cases[i].bufs[j]);
  }

  printf("CPU gemm benchmark, M=%lld N=%lld K=%lld, median of %d runs, backend %s\n", (long long)M,
         (long long)N, (long long)K, g_runs, be8[0] ? be8 : "?");
  printf("%-6s %-42s %10s %10s %12s\n", "case", "what", "ms", "GFLOP/s", "time/sgemm");
  for (int i = 0; i < nres; ++i) {
    char ratio[32] = "-";
    if (base > 0 && res[i].ms > 0) snprintf(ratio, sizeof ratio, "%.3f", res[i].ms / base);
    printf("%-6s %-42s %10.2f %10.1f %12s\n", res[i].name, res[i].what, res[i].ms,
           res[i].ms > 0 ? gflop / (res[i].ms * 1e-3) : 0.0, ratio);
  }

  FILE *f = fopen(out, "w");
  if (!f) {
    fprintf(stderr, "bench: cannot write %s\n", out);
    return 1;
  }
  fprintf(f, "{\n  \"device\": \"cpu\",\n  \"backend\": \"%s\",\n  \"runs\": %d,\n  \"results\": [\n", be8,
          g_runs);
  for (int i = 0; i < nres; ++i) {
    fprintf(f,
            "    {\"op\": \"%s\", \"what\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"l\": 1, \"ms\": "
            "%.4f, "
            "\"gflops\": %.2f",
            res[i].name, res[i].what, (long long)M, (long long)N, (long long)K, res[i].ms,
            res[i].ms > 0 ? gflop / (res[i].ms * 1e-3) : 0.0);
    if (base > 0 && res[i].ms > 0)
      fprintf(f, ", \"baseline\": \"sgemm\", \"baseline_ms\": %.4f, \"ratio\": %.4f", base, res[i].ms / base);
    fprintf(f, "}%s\n", i + 1 < nres ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  fclose(f);
  printf("wrote %s\n", out);
  return 0;
}
