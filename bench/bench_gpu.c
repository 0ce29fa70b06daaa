/*
 * bench_gpu.c — GPU benchmarks of mxfuse against cuBLAS / cuBLASLt, in one process.
 *
 *   mxf_bench_gpu [--only gemm|mixed|proj|plan] [--shape MxNxK] [--iters N] [--quick] [out.json]
 *
 * --shape keeps only the gemm and mixed sections' rows of that shape (for profilers).
 *
 * Each section is one function (bench_gemm_section, and the proj_rope and plan sections
 * beside it) that appends rows to one table and one JSON file. Method (docs/performance.md):
 * CUDA events around each launch, warm-up first, the median of >= 20 timed launches,
 * inputs rotated among enough buffer sets to exceed the 60 MB L2 twice, random data
 * (never zeros). FLOPs = 2·M·N·K; bytes = every input read once + C written once.
 * Ratios are speed ratios measured in this process: baseline time / our time (> 1 means
 * we are faster).
 *
 * gemm section, per shape M×N×K:
 *   cuBLAS BF16           cublasGemmEx, bf16 A/B/C, f32 compute, TN
 *   cuBLASLt FP8          e4m3 × e4m3 -> bf16, per-tensor A/B scales, TN
 *   gemm_amax mxfp8->bf16 / mxfp8->f32 / mxfp4->bf16: our kernel choice (sm90 where it
 *                         takes the problem), plus "[portable]" rows with the portable
 *                         kernel forced when the default was another one
 */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mxfuse.h"
#include "testutil.h"

#define L2_BYTES (60.0 * 1024 * 1024)
#define HBM_GBPS 4800.0

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));      \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

/* ------------------------------------------------------------ shared harness */
typedef struct bench_ctx {
  int iters, warmup;
  FILE *json;
  int json_rows;
  char device[320];
  const char *shape; /* --shape: only this gemm / mixed shape ("MxNxK"), or NULL */
  cudaStream_t stream;
  cudaEvent_t ev[2 * 64];
} bench_ctx;

/* One timed operation: launches set `i` of its rotated inputs; returns 0 on success. */
typedef int (*launch_fn)(void *state, int set);

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Median milliseconds of ctx->iters launches (after warm-up), NAN on failure. */
static double time_median(bench_ctx *ctx, launch_fn fn, void *state, int nsets) {
  for (int i = 0; i < ctx->warmup; ++i)
    if (fn(state, i % nsets)) return NAN;
  CK(cudaStreamSynchronize(ctx->stream));
  float ms[64];
  int n = ctx->iters > 64 ? 64 : ctx->iters;
  for (int i = 0; i < n; ++i) {
    CK(cudaEventRecord(ctx->ev[2 * i], ctx->stream));
    if (fn(state, (ctx->warmup + i) % nsets)) return NAN;
    CK(cudaEventRecord(ctx->ev[2 * i + 1], ctx->stream));
  }
  CK(cudaStreamSynchronize(ctx->stream));
  for (int i = 0; i < n; ++i) CK(cudaEventElapsedTime(&ms[i], ctx->ev[2 * i], ctx->ev[2 * i + 1]));
  qsort(ms, (size_t)n, sizeof(float), cmp_float);
  return n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
}

/* Milliseconds per launch with the host out of the way: `reps` launches (cycling the
 * sets) captured into one CUDA graph, the median over ctx->iters graph launches divided
 * by reps; NAN on failure. What a caller replaying graphs (decode loops) sees. */
static double time_graph(bench_ctx *ctx, launch_fn fn, void *state, int nsets) {
  const int reps = 20;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  double r = NAN;
  if (cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return NAN;
  int bad = 0;
  for (int i = 0; i < reps && !bad; ++i) bad = fn(state, i % nsets);
  if (cudaStreamEndCapture(ctx->stream, &graph) != cudaSuccess || bad ||
      cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess)
    goto done;
  for (int i = 0; i < 2; ++i)
    if (cudaGraphLaunch(exec, ctx->stream) != cudaSuccess) goto done;
  CK(cudaStreamSynchronize(ctx->stream));
  float ms[64];
  int n = ctx->iters > 64 ? 64 : ctx->iters;
  for (int i = 0; i < n; ++i) {
    CK(cudaEventRecord(ctx->ev[2 * i], ctx->stream));
    CK(cudaGraphLaunch(exec, ctx->stream));
    CK(cudaEventRecord(ctx->ev[2 * i + 1], ctx->stream));
  }
  CK(cudaStreamSynchronize(ctx->stream));
  for (int i = 0; i < n; ++i) CK(cudaEventElapsedTime(&ms[i], ctx->ev[2 * i], ctx->ev[2 * i + 1]));
  qsort(ms, (size_t)n, sizeof(float), cmp_float);
  r = (n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2])) / reps;
done:
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError(); /* a refused capture leaves nothing behind */
  return r;
}

/* Buffer sets so that the rotated inputs span at least twice the L2. */
static int rotation_sets(double bytes_per_set) {
  int n = (int)ceil(2.0 * L2_BYTES / (bytes_per_set > 1 ? bytes_per_set : 1));
  return n < 2 ? 2 : n > 32 ? 32 : n;
}

static void print_header(void) {
  printf("%-22s %-26s %9s %9s %9s %9s %9s  %s\n", "shape", "op", "ms", "TFLOP/s", "GB/s", "x cuBLAS", "x LtFP8",
         "kernel");
}

/* One table row + one JSON record. ratios: baseline ms / ms (NAN when not measured). */
static void report(bench_ctx *ctx, const char *section, const char *shape, const char *op, const char *kernel,
                   double ms, double flops, double bytes, double base_bf16, double base_fp8) {
  double tflops = flops / (ms * 1e-3) / 1e12, gbps = bytes / (ms * 1e-3) / 1e9;
  double r1 = base_bf16 / ms, r2 = base_fp8 / ms;
  printf("%-22s %-26s %9.4f %9.1f %9.1f %9.2f %9.2f  %s\n", shape, op, ms, tflops, gbps, r1, r2, kernel);
  if (ctx->json) {
    fprintf(ctx->json,
            "%s\n  {\"section\": \"%s\", \"shape\": \"%s\", \"op\": \"%s\", \"kernel\": \"%s\", \"ms\": %.6f, "
            "\"tflops\": %.3f, \"gbps\": %.2f, \"hbm_fraction\": %.4f, \"ratio_vs_cublas_bf16\": %.4f, "
            "\"ratio_vs_cublaslt_fp8\": %.4f, \"device\": \"%s\"}",
            ctx->json_rows ? "," : "", section, shape, op, kernel, isnan(ms) ? -1.0 : ms,
            isnan(tflops) ? -1.0 : tflops, isnan(gbps) ? -1.0 : gbps, isnan(gbps) ? -1.0 : gbps / HBM_GBPS,
            isnan(r1) ? -1.0 : r1, isnan(r2) ? -1.0 : r2, ctx->device);
    ctx->json_rows++;
  }
}

/* Random bytes on the host, copied to nsets device buffers. `gen` maps a random u32 to a
 * byte pattern of the dtype (never all zeros). */
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 11);
}

enum { FILL_E4M3, FILL_E2M1, FILL_E8M0, FILL_BF16 };

static void fill_host(uint8_t *h, size_t n, int kind) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t u = rnd();
    switch (kind) {
    case FILL_E4M3: {
      uint8_t c = (uint8_t)u;
      if ((c & 0x7F) == 0x7F) c ^= 1; /* no NaN */
      if ((c & 0x78) > 0x58) c &= 0xDF; /* keep magnitudes moderate */
      h[i] = c;
      break;
    }
    case FILL_E2M1: h[i] = (uint8_t)u; break;
    case FILL_E8M0: h[i] = (uint8_t)(122 + u % 10); break;
    default: /* bf16 pairs in [-2, 2): sign, exponent 126..127, random mantissa */
      h[i] = (i & 1) ? (uint8_t)(0x3F | (u & 0x80)) : (uint8_t)u;
      break;
    }
  }
}

static void **alloc_sets(int nsets, size_t bytes, int kind) {
  void **d = calloc((size_t)nsets, sizeof(void *));
  uint8_t *h = malloc(bytes ? bytes : 1);
  fill_host(h, bytes, kind);
  for (int s = 0; s < nsets; ++s) {
    CK(cudaMalloc(&d[s], bytes ? bytes : 16));
    CK(cudaMemcpy(d[s], h, bytes, cudaMemcpyHostToDevice));
  }
  free(h);
  return d;
}

static void free_sets(void **d, int nsets) {
  if (!d) return;
  for (int s = 0; s < nsets; ++s) cudaFree(d[s]);
  free(d);
}

/* ------------------------------------------------------------ gemm section */
typedef struct cublas_state {
  cublasHandle_t h;
  int64_t m, n, k;
  void **a, **b, *c;
} cublas_state;

static int launch_cublas_bf16(void *st, int set) {
  cublas_state *s = st;
  const float alpha = 1.0f, beta = 0.0f;
  /* TN: C (m×n, col-major) = A^T B with A stored (k×m) and B (k×n) col-major, i.e. the
   * row-major (M, K) and (N, K) matrices: the k-major layout of gemm_amax. */
  cublasStatus_t e = cublasGemmEx(s->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)s->m, (int)s->n, (int)s->k, &alpha, s->a[set],
                                  CUDA_R_16BF, (int)s->k, s->b[set], CUDA_R_16BF, (int)s->k, &beta, s->c, CUDA_R_16BF,
                                  (int)s->m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  return e != CUBLAS_STATUS_SUCCESS;
}

/* cuBLAS BF16 on (m, n, k) on ctx's stream: k-major operands (rotated input sets, their
 * count returned), bf16 C. */
static int cublas_open(bench_ctx *ctx, cublas_state *cb, int64_t m, int64_t n, int64_t k) {
  memset(cb, 0, sizeof *cb);
  cb->m = m, cb->n = n, cb->k = k;
  const size_t abf = (size_t)(m * k * 2), bbf = (size_t)(n * k * 2), cbf = (size_t)(m * n * 2);
  const int nsets = rotation_sets((double)(abf + bbf));
  cublasCreate(&cb->h);
  cublasSetStream(cb->h, ctx->stream);
  cb->a = alloc_sets(nsets, abf, FILL_BF16);
  cb->b = alloc_sets(nsets, bbf, FILL_BF16);
  CK(cudaMalloc(&cb->c, cbf));
  return nsets;
}

static void cublas_close(cublas_state *cb, int nsets) {
  free_sets(cb->a, nsets);
  free_sets(cb->b, nsets);
  cudaFree(cb->c);
  cublasDestroy(cb->h);
}

/* Median ms of cuBLAS BF16 on (m, n, k). */
static double time_cublas_bf16(bench_ctx *ctx, int64_t m, int64_t n, int64_t k) {
  cublas_state cb;
  const int nsets = cublas_open(ctx, &cb, m, n, k);
  const double ms = time_median(ctx, launch_cublas_bf16, &cb, nsets);
  cublas_close(&cb, nsets);
  return ms;
}

typedef struct lt_state {
  cublasLtHandle_t h;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
  void *ws;
  size_t ws_size;
  void **a, **b, *c;
  float *scales; /* device: a_scale, b_scale */
  cudaStream_t stream;
} lt_state;

static int launch_lt_fp8(void *st, int set) {
  lt_state *s = st;
  const float alpha = 1.0f, beta = 0.0f;
  cublasStatus_t e = cublasLtMatmul(s->h, s->op, &alpha, s->a[set], s->la, s->b[set], s->lb, &beta, s->c, s->lc, s->c,
                                    s->lc, &s->algo, s->ws, s->ws_size, s->stream);
  if (e != CUBLAS_STATUS_SUCCESS) printf("  (cublasLtMatmul: %s)\n", cublasGetStatusString(e));
  return e != CUBLAS_STATUS_SUCCESS;
}

/* Describes the cuBLASLt FP8 GEMM in one of a few configurations (the library refuses some
 * on some versions): 0 = per-tensor A/B scales, 1 = no scales, 2 = scales + fast
 * accumulation. D (and C) are bf16, A/B e4m3, TN, compute and scale type f32. */
static const char *const lt_variant_name[3] = {"per-tensor scales", "no scales", "per-tensor scales, fast accum"};

static int lt_describe(lt_state *s, int variant, int64_t m, int64_t n, int64_t k) {
  if (s->op) cublasLtMatmulDescDestroy(s->op), s->op = NULL;
  if (s->la) cublasLtMatrixLayoutDestroy(s->la), s->la = NULL;
  if (s->lb) cublasLtMatrixLayoutDestroy(s->lb), s->lb = NULL;
  if (s->lc) cublasLtMatrixLayoutDestroy(s->lc), s->lc = NULL;
  if (cublasLtMatmulDescCreate(&s->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return 1;
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N; /* FP8 needs TN */
  cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (variant != 1) {
    const float *pa = s->scales, *pb = s->scales + 1;
    cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &pa, sizeof pa);
    cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &pb, sizeof pb);
  }
  if (variant == 2) {
    const int8_t fast = 1;
    cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
  }
  cublasLtMatrixLayoutCreate(&s->la, CUDA_R_8F_E4M3, (uint64_t)k, (uint64_t)m, k);
  cublasLtMatrixLayoutCreate(&s->lb, CUDA_R_8F_E4M3, (uint64_t)k, (uint64_t)n, k);
  cublasLtMatrixLayoutCreate(&s->lc, CUDA_R_16BF, (uint64_t)m, (uint64_t)n, m);
  return 0;
}

/* Sets up the cuBLASLt FP8 per-tensor GEMM: the first configuration and algorithm that
 * runs on this problem (a heuristic is no promise); 0 on success. */
static int lt_setup(lt_state *s, int64_t m, int64_t n, int64_t k) {
  if (cublasLtCreate(&s->h) != CUBLAS_STATUS_SUCCESS) return 1;
  CK(cudaMalloc((void **)&s->scales, 2 * sizeof(float)));
  const float sc[2] = {0.5f, 0.25f};
  CK(cudaMemcpy(s->scales, sc, sizeof sc, cudaMemcpyHostToDevice));
  s->ws_size = 32u << 20;
  CK(cudaMalloc(&s->ws, s->ws_size));
  const float alpha = 1.0f, beta = 0.0f;
  void *a = NULL, *b = NULL, *c = NULL;
  CK(cudaMalloc(&a, (size_t)(m * k)));
  CK(cudaMalloc(&b, (size_t)(n * k)));
  CK(cudaMalloc(&c, (size_t)(m * n) * 2));
  CK(cudaMemset(a, 0x38, (size_t)(m * k)));
  CK(cudaMemset(b, 0x38, (size_t)(n * k)));
  int ok = 1;
  for (int v = 0; v < 3 && ok; ++v) {
    if (lt_describe(s, v, m, n, k)) continue;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    uint64_t wsz = s->ws_size;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof wsz);
    cublasLtMatmulHeuristicResult_t res[8];
    int found = 0;
    cublasStatus_t e = cublasLtMatmulAlgoGetHeuristic(s->h, s->op, s->la, s->lb, s->lc, s->lc, pref, 8, res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (e != CUBLAS_STATUS_SUCCESS || found == 0) {
      printf("  (cuBLASLt FP8, %s: no algorithm: %s, %d found)\n", lt_variant_name[v], cublasGetStatusString(e),
             found);
      continue;
    }
    for (int i = 0; i < found; ++i) {
      e = cublasLtMatmul(s->h, s->op, &alpha, a, s->la, b, s->lb, &beta, c, s->lc, c, s->lc, &res[i].algo, s->ws,
                         s->ws_size, 0);
      cudaError_t ce = cudaDeviceSynchronize();
      if (e == CUBLAS_STATUS_SUCCESS && ce == cudaSuccess) {
        s->algo = res[i].algo;
        printf("  (cuBLASLt FP8: %s, algorithm %d of %d)\n", lt_variant_name[v], i, found);
        ok = 0;
        break;
      }
      if (i == 0 || i == found - 1)
        printf("  (cuBLASLt FP8, %s, algorithm %d of %d: %s / %s)\n", lt_variant_name[v], i, found,
               cublasGetStatusString(e), cudaGetErrorString(ce));
    }
  }
  cudaFree(a), cudaFree(b), cudaFree(c);
  return ok;
}

static void lt_teardown(lt_state *s) {
  if (s->la) cublasLtMatrixLayoutDestroy(s->la);
  if (s->lb) cublasLtMatrixLayoutDestroy(s->lb);
  if (s->lc) cublasLtMatrixLayoutDestroy(s->lc);
  if (s->op) cublasLtMatmulDescDestroy(s->op);
  if (s->h) cublasLtDestroy(s->h);
  cudaFree(s->ws);
  cudaFree(s->scales);
}

typedef struct mxf_state {
  mxf_plan *plan;
  void *ws;
  size_t ws_size;
  void **a, **b, **sfa, **sfb, *c;
  float *amax;
  cudaStream_t stream;
} mxf_state;

static int launch_mxf(void *st, int set) {
  mxf_state *s = st;
  mxf_gemm_amax_args a = {s->a[set], s->b[set], s->sfa[set], s->sfb[set], s->c, s->amax, NULL};
  mxf_status e = mxf_gemm_amax_run(s->plan, &a, s->ws, s->ws_size, s->stream);
  if (e != MXF_OK) fprintf(stderr, "gemm_amax run: %s\n", mxf_last_error());
  return e != MXF_OK;
}

static mxf_tensor dev_tensor(mxf_dtype dt, int ndim, const int64_t *shape) {
  mxf_tensor t;
  memset(&t, 0, sizeof t);
  t.dtype = dt;
  t.device = MXF_DEVICE_CUDA(0);
  t.ndim = ndim;
  for (int i = 0; i < ndim; ++i) t.shape[i] = shape[i];
  return t;
}

/* Times our gemm_amax on (m, n, k): ab e4m3 or e2m1, e8m0 scales / 32, swizzled SF,
 * k-major A and B, n-major C of dtype c. force_portable: plan with the portable kernel. */
/* The gemm_amax geometry of the section: ab e4m3 or e2m1, e8m0 scales / 32, swizzled SF,
 * k-major A and B, n-major C of dtype c (no data pointers). */
static mxf_gemm_amax_desc gemm_desc(int64_t m, int64_t n, int64_t k, mxf_dtype ab, mxf_dtype c) {
  const int64_t kb = (k + 31) / 32, kq = (kb + 3) / 4;
  mxf_gemm_amax_desc d;
  memset(&d, 0, sizeof d);
  const int64_t sa[2] = {m, k}, sb[2] = {n, k}, sc[2] = {m, n}, one = 1;
  const int64_t swa[6] = {1, (m + 127) / 128, kq, 32, 4, 4}, swb[6] = {1, (n + 127) / 128, kq, 32, 4, 4};
  d.a = dev_tensor(ab, 2, sa);
  d.b = dev_tensor(ab, 2, sb);
  d.c = dev_tensor(c, 2, sc);
  d.sfa = dev_tensor(MXF_E8M0, 6, swa);
  d.sfb = dev_tensor(MXF_E8M0, 6, swb);
  d.amax = dev_tensor(MXF_F32, 1, &one);
  d.sf_vec = 32;
  return d;
}

static void bench_mxf(bench_ctx *ctx, const char *shape, const char *opname, int64_t m, int64_t n, int64_t k,
                      mxf_dtype ab, mxf_dtype c, double base_bf16, double base_fp8, int force_portable,
                      char *kernel_out, size_t kernel_out_size) {
  const int64_t kb = (k + 31) / 32, kq = (kb + 3) / 4;
  const size_t a_bytes = (size_t)(m * k * (ab == MXF_E2M1 ? 1 : 2) / 2),
               b_bytes = (size_t)(n * k * (ab == MXF_E2M1 ? 1 : 2) / 2);
  const size_t sfa_bytes = (size_t)(((m + 127) / 128) * kq * 512),
               sfb_bytes = (size_t)(((n + 127) / 128) * kq * 512);
  const size_t c_bytes = (size_t)(m * n) * (c == MXF_F32 ? 4 : 2);
  mxf_gemm_amax_desc d = gemm_desc(m, n, k, ab, c);
  if (force_portable) setenv("MXF_CONFIG", "gemm=portable", 1);
  mxf_state s;
  memset(&s, 0, sizeof s);
  mxf_status st = mxf_gemm_amax_plan(&s.plan, &d);
  if (force_portable) unsetenv("MXF_CONFIG");
  if (st != MXF_OK) {
    printf("%-22s %-26s refused: %s\n", shape, opname, mxf_last_error());
    snprintf(kernel_out, kernel_out_size, "refused");
    return;
  }
  snprintf(kernel_out, kernel_out_size, "%s", mxf_plan_backend(s.plan));
  const int nsets = rotation_sets((double)(a_bytes + b_bytes + sfa_bytes + sfb_bytes));
  const int fill = ab == MXF_E2M1 ? FILL_E2M1 : FILL_E4M3;
  s.a = alloc_sets(nsets, a_bytes, fill);
  s.b = alloc_sets(nsets, b_bytes, fill);
  s.sfa = alloc_sets(nsets, sfa_bytes, FILL_E8M0);
  s.sfb = alloc_sets(nsets, sfb_bytes, FILL_E8M0);
  CK(cudaMalloc(&s.c, c_bytes));
  CK(cudaMalloc((void **)&s.amax, sizeof(float)));
  s.ws_size = mxf_plan_workspace_size(s.plan);
  if (s.ws_size) CK(cudaMalloc(&s.ws, s.ws_size));
  s.stream = ctx->stream;
  double ms = time_median(ctx, launch_mxf, &s, nsets);
  float amax = 0;
  CK(cudaMemcpy(&amax, s.amax, sizeof amax, cudaMemcpyDeviceToHost));
  if (!(amax > 0) || isinf(amax)) printf("  (warning: amax %g: expected a positive finite value)\n", (double)amax);
  const double flops = 2.0 * (double)m * (double)n * (double)k;
  const double bytes = (double)(a_bytes + b_bytes + sfa_bytes + sfb_bytes + c_bytes);
  report(ctx, "gemm", shape, opname, kernel_out, ms, flops, bytes, base_bf16, base_fp8);
  free_sets(s.a, nsets);
  free_sets(s.b, nsets);
  free_sets(s.sfa, nsets);
  free_sets(s.sfb, nsets);
  cudaFree(s.c);
  cudaFree(s.amax);
  cudaFree(s.ws);
  mxf_plan_destroy(s.plan);
}

static void bench_gemm_shape(bench_ctx *ctx, int64_t m, int64_t n, int64_t k) {
  char shape[64], kernel[96];
  snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)m, (long long)n, (long long)k);
  if (ctx->shape && strcmp(ctx->shape, shape)) return;
  const double flops = 2.0 * (double)m * (double)n * (double)k;

  /* cuBLAS BF16 */
  const size_t abf = (size_t)(m * k * 2), bbf = (size_t)(n * k * 2), cbf = (size_t)(m * n * 2);
  const double t_bf16 = time_cublas_bf16(ctx, m, n, k);
  report(ctx, "gemm", shape, "cublas_bf16", "cublasGemmEx", t_bf16, flops, (double)(abf + bbf + cbf), t_bf16, NAN);

  /* cuBLASLt FP8 per-tensor */
  lt_state lt;
  memset(&lt, 0, sizeof lt);
  double t_fp8 = NAN;
  const size_t a8 = (size_t)(m * k), b8 = (size_t)(n * k);
  const int nsets = rotation_sets((double)(a8 + b8));
  if (lt_setup(&lt, m, n, k) == 0) {
    lt.a = alloc_sets(nsets, a8, FILL_E4M3);
    lt.b = alloc_sets(nsets, b8, FILL_E4M3);
    CK(cudaMalloc(&lt.c, cbf));
    lt.stream = ctx->stream;
    t_fp8 = time_median(ctx, launch_lt_fp8, &lt, nsets);
    report(ctx, "gemm", shape, "cublaslt_fp8_e4m3", "cublasLtMatmul", t_fp8, flops, (double)(a8 + b8 + cbf), t_bf16,
           t_fp8);
    free_sets(lt.a, nsets);
    free_sets(lt.b, nsets);
    cudaFree(lt.c);
  } else {
    printf("%-22s %-26s no cuBLASLt FP8 algorithm\n", shape, "cublaslt_fp8_e4m3");
  }
  lt_teardown(&lt);

  static const struct {
    const char *name;
    mxf_dtype ab, c;
  } ops[3] = {{"gemm_amax_mxfp8_bf16", MXF_E4M3, MXF_BF16},
              {"gemm_amax_mxfp8_f32", MXF_E4M3, MXF_F32},
              {"gemm_amax_mxfp4_bf16", MXF_E2M1, MXF_BF16}};
  for (int i = 0; i < 3; ++i) {
    bench_mxf(ctx, shape, ops[i].name, m, n, k, ops[i].ab, ops[i].c, t_bf16, t_fp8, 0, kernel, sizeof kernel);
    if (!tu_kernel_is(kernel, "cuda/portable") && strcmp(kernel, "refused") != 0) {
      char name[64];
      snprintf(name, sizeof name, "%s[portable]", ops[i].name);
      bench_mxf(ctx, shape, name, m, n, k, ops[i].ab, ops[i].c, t_bf16, t_fp8, 1, kernel, sizeof kernel);
    }
  }
}

static void bench_gemm_section(bench_ctx *ctx, int quick) {
  printf("\n== gemm_amax (ratios: baseline ms / our ms; > 1 = faster) ==\n");
  print_header();
  static const int64_t shapes[][3] = {
      {4096, 24576, 1536}, {16384, 24576, 1536}, {8192, 8192, 8192}, {2048, 7168, 2048}, {128, 24576, 1536}};
  const int n = quick ? 2 : (int)(sizeof shapes / sizeof shapes[0]);
  for (int i = 0; i < n; ++i) {
    const int idx = quick && i == 1 ? 4 : i; /* quick: one large and the memory-bound shape */
    bench_gemm_shape(ctx, shapes[idx][0], shapes[idx][1], shapes[idx][2]);
  }
  printf("(memory-bound 128x24576x1536: GB/s against %.0f GB/s HBM)\n", HBM_GBPS);
}

/* ------------------------------------------------------------ mixed-format section
 * Weight-only and mixed MX GEMMs (SPEC §1.1): for M in {1, 16, 64, 128, 4096} and the
 * DeepSeek-V3 weight shapes (N, K): bf16 activations x MXFP4 weights (no sfa) and MXFP8 x
 * MXFP4, bf16 C, against cuBLAS BF16 on the same shape with bf16 weights, and against
 * dequantize-then-cuBLAS, bounded below by cuBLAS plus a copy moving the dequantization's
 * bytes (reading 0.5 and writing 2 bytes per weight). "wGB/s": GB/s of the weight bytes
 * (codes + scales), the memory-bound figure for M <= 128. */
static int launch_copy(void *st, int set) {
  void **p = st; /* dst, src, bytes */
  (void)set;
  return cudaMemcpyAsync(p[0], p[1], (size_t)(uintptr_t)p[2], cudaMemcpyDeviceToDevice, (cudaStream_t)p[3]) !=
         cudaSuccess;
}

static void bench_mixed_shape(bench_ctx *ctx, int64_t m, int64_t n, int64_t k) {
  char shape[64];
  snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)m, (long long)n, (long long)k);
  if (ctx->shape && strcmp(ctx->shape, shape)) return;
  const double flops = 2.0 * (double)m * (double)n * (double)k;
  const int64_t kb = (k + 31) / 32, kq = (kb + 3) / 4;
  /* cuBLAS BF16 with bf16 weights */
  const size_t bbf = (size_t)(n * k * 2), cbf = (size_t)(m * n * 2);
  const double t_bf16 = time_cublas_bf16(ctx, m, n, k);
  report(ctx, "mixed", shape, "cublas_bf16 (bf16 w)", "cublasGemmEx", t_bf16, flops, (double)bbf, t_bf16, NAN);
  double t_bf16_graph = NAN;
  if (m <= 128) {
    cublas_state cb;
    const int nsets = cublas_open(ctx, &cb, m, n, k);
    t_bf16_graph = time_graph(ctx, launch_cublas_bf16, &cb, nsets);
    cublas_close(&cb, nsets);
    report(ctx, "mixed", shape, "cublas_bf16 (graph)", "cublasGemmEx (graph)", t_bf16_graph, flops, (double)bbf,
           t_bf16_graph, NAN);
  }
  /* the dequantization's bytes, as one copy */
  const size_t wq = (size_t)(n * k / 2), wsf = (size_t)(((n + 127) / 128) * kq * 512);
  const size_t copy_bytes = (size_t)(n * k * 5 / 4);
  void *src, *dst;
  CK(cudaMalloc(&src, copy_bytes));
  CK(cudaMalloc(&dst, copy_bytes));
  void *cp[4] = {dst, src, (void *)(uintptr_t)copy_bytes, ctx->stream};
  const double t_copy = time_median(ctx, launch_copy, cp, 1);
  cudaFree(src);
  cudaFree(dst);
  report(ctx, "mixed", shape, "dequant_bound+cublas", "memcpy+cublasGemmEx", t_copy + t_bf16, flops, (double)(wq + wsf),
         t_bf16, t_copy + t_bf16);
  static const struct {
    const char *name;
    mxf_dtype fa;
  } ops[2] = {{"gemm_amax_bf16_x_mxfp4", MXF_BF16}, {"gemm_amax_mxfp8_x_mxfp4", MXF_E4M3}};
  /* at decode sizes also the other of the two kernels that take mixed pairs (the kernel
   * choice's evidence: gemm_amax_cuda.cu, GEMV_M_MAX) */
  char first[32] = ""; /* the default's kernel ("cuda/sm90") */
  for (int v = 0; v < 4; ++v) {
    const int i = v >> 1, alt = v & 1;
    if (alt && m > 128) continue;
    if (alt) setenv("MXF_CONFIG", tu_kernel_is(first, "cuda/gemv") ? "gemm=sm90" : "gemm=gemv", 1);
    mxf_gemm_amax_desc d = gemm_desc(m, n, k, MXF_E2M1, MXF_BF16);
    d.a.dtype = ops[i].fa;
    if (ops[i].fa == MXF_BF16) memset(&d.sfa, 0, sizeof d.sfa);
    mxf_state s;
    memset(&s, 0, sizeof s);
    const mxf_status pst = mxf_gemm_amax_plan(&s.plan, &d);
    if (alt) unsetenv("MXF_CONFIG");
    if (pst != MXF_OK) {
      printf("%-22s %-26s refused: %s\n", shape, ops[i].name, mxf_last_error());
      continue;
    }
    if (!alt) {
      snprintf(first, sizeof first, "%s", mxf_plan_backend(s.plan));
      first[strcspn(first, " ")] = '\0';
    }
    if (alt && tu_kernel_is(mxf_plan_backend(s.plan), first)) { /* no other kernel takes it */
      mxf_plan_destroy(s.plan);
      continue;
    }
    const size_t a_bytes = (size_t)(m * k) * (ops[i].fa == MXF_BF16 ? 2 : 1);
    const size_t sfa_bytes = ops[i].fa == MXF_BF16 ? 0 : (size_t)(((m + 127) / 128) * kq * 512);
    const int nsets = rotation_sets((double)(a_bytes + wq + wsf + sfa_bytes));
    s.a = alloc_sets(nsets, a_bytes, ops[i].fa == MXF_BF16 ? FILL_BF16 : FILL_E4M3);
    s.b = alloc_sets(nsets, wq, FILL_E2M1);
    s.sfb = alloc_sets(nsets, wsf, FILL_E8M0);
    s.sfa = sfa_bytes ? alloc_sets(nsets, sfa_bytes, FILL_E8M0) : calloc((size_t)nsets, sizeof(void *));
    CK(cudaMalloc(&s.c, cbf));
    CK(cudaMalloc((void **)&s.amax, sizeof(float)));
    s.ws_size = mxf_plan_workspace_size(s.plan);
    if (s.ws_size) CK(cudaMalloc(&s.ws, s.ws_size));
    s.stream = ctx->stream;
    const double ms = time_median(ctx, launch_mxf, &s, nsets);
    report(ctx, "mixed", shape, ops[i].name, mxf_plan_backend(s.plan), ms, flops, (double)(wq + wsf), t_bf16,
           t_copy + t_bf16);
    if (m <= 128) { /* decode sizes: also replayed from a graph, against cuBLAS replayed so */
      char name[64], kern[112];
      snprintf(name, sizeof name, "%s (graph)", ops[i].name);
      snprintf(kern, sizeof kern, "%s (graph)", mxf_plan_backend(s.plan));
      report(ctx, "mixed", shape, name, kern, time_graph(ctx, launch_mxf, &s, nsets), flops, (double)(wq + wsf),
             t_bf16_graph, NAN);
    }
    free_sets(s.a, nsets);
    free_sets(s.b, nsets);
    free_sets(s.sfb, nsets);
    if (sfa_bytes)
      free_sets(s.sfa, nsets);
    else
      free(s.sfa);
    cudaFree(s.c);
    cudaFree(s.amax);
    cudaFree(s.ws);
    mxf_plan_destroy(s.plan);
  }
}

static void bench_mixed_section(bench_ctx *ctx, int quick) {
  printf("\n== mixed formats: bf16 / MXFP8 activations x MXFP4 weights, bf16 C ==\n");
  printf("(GB/s = weight bytes (codes + scales) per second; x cuBLAS = cuBLAS BF16 on bf16 weights ms / ms; "
         "x LtFP8 column = dequant_bound+cublas ms / ms)\n");
  print_header();
  static const int64_t nk[3][2] = {{7168, 2048}, {2048, 7168}, {24576, 1536}};
  static const int64_t ms[5] = {1, 16, 64, 128, 4096};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) {
      if (quick && (i || (j != 1 && j != 4))) continue;
      bench_mixed_shape(ctx, ms[j], nk[i][0], nk[i][1]);
    }
}

/* ------------------------------------------------------------ proj_rope section
 * DeepSeek-V3 Q up-projection, K = 1536, H = 128, D = 192 (nope 128 + rope 64), per T
 * (the 128, 1024, 4096, 16384, and 256, 512 where the MXFP8 paths cross over):
 *   cublas_bf16_gemm       cuBLAS BF16 GEMM alone, x (T, K) x w (H*D, K)^T -> bf16 (the floor)
 *   proj_rope_bf16         our fused op, bf16 x / w (out-in, TE layout); also in-out
 *   proj_rope_mxfp8        our fused op, e4m3 x / w with e8m0 scales (out-in)
 *   [portable] rows        the portable kernel forced, where the default was another one
 *   [mainloop] / [prepass] the two sm90 MXFP8 paths forced (MXF_CONFIG mxfp8=...): dequantization
 *                          in the mainloop or by a pre-pass into bf16 copies
 *   unfused_gemm_quant     cuBLAS BF16 GEMM + our quantize kernel (bf16 in, both
 *                          directions) on the (T, H*D) result; RoPE omitted, so this chain
 *                          does less work than the fused op
 * then the quantize / dequantize kernels alone on (T, H*D): GB/s = bytes read + written.
 * "x cuBLAS" = cuBLAS GEMM ms / our ms (> 1 = faster); the line after each T gives the
 * time ratios the targets are stated in (ours / cuBLAS GEMM alone). */
typedef struct proj_state {
  mxf_plan *plan;
  void *ws;
  size_t ws_size;
  void **x, **w, **xs, **wsc, *cosv, *sinv;
  void *q_row, *s_row, *q_col, *s_col;
  cudaStream_t stream;
} proj_state;

static int launch_proj(void *st, int set) {
  proj_state *s = st;
  mxf_proj_rope_args a = {s->x[set], s->w[set], s->xs ? s->xs[set] : NULL, s->wsc ? s->wsc[set] : NULL,
                          s->cosv, s->sinv, s->q_row, s->s_row, s->q_col, s->s_col};
  mxf_status e = mxf_proj_rope_run(s->plan, &a, s->ws, s->ws_size, s->stream);
  if (e != MXF_OK) fprintf(stderr, "proj_rope run: %s\n", mxf_last_error());
  return e != MXF_OK;
}

/* The proj_rope geometry of the section (no data pointers). */
static mxf_proj_rope_desc proj_desc(int64_t t, int64_t k, int64_t h, int64_t d, int64_t rope, int mxfp8,
                                    int out_in) {
  const int64_t n = h * d;
  const mxf_dtype in_dt = mxfp8 ? MXF_E4M3 : MXF_BF16;
  mxf_proj_rope_desc dsc;
  memset(&dsc, 0, sizeof dsc);
  const int64_t sx[2] = {t, k}, sxs[2] = {t, k / 32}, sw[2] = {out_in ? n : k, out_in ? k : n};
  const int64_t sws[2] = {out_in ? n : k / 32, out_in ? k / 32 : n}, scs[2] = {t, rope};
  const int64_t so[3] = {t, h, d}, ssr[3] = {t, h, d / 32}, ssc[3] = {(t + 31) / 32, h, d};
  dsc.x = dev_tensor(in_dt, 2, sx);
  dsc.w = dev_tensor(in_dt, 2, sw);
  if (mxfp8) {
    dsc.x_scale = dev_tensor(MXF_E8M0, 2, sxs);
    dsc.w_scale = dev_tensor(MXF_E8M0, 2, sws);
  }
  dsc.cos = dev_tensor(MXF_BF16, 2, scs);
  dsc.sin = dev_tensor(MXF_BF16, 2, scs);
  dsc.out_row = dev_tensor(MXF_E4M3, 3, so);
  dsc.out_scales_row = dev_tensor(MXF_E8M0, 3, ssr);
  dsc.out_col = dev_tensor(MXF_E4M3, 3, so);
  dsc.out_scales_col = dev_tensor(MXF_E8M0, 3, ssc);
  dsc.flags = out_in ? MXF_PROJ_W_OUT_IN : 0u;
  return dsc;
}

/* Times the fused op; returns its median ms (NAN if refused). */
static double bench_proj_op(bench_ctx *ctx, const char *shape, const char *opname, int64_t t, int64_t k,
                            int64_t h, int64_t d, int64_t rope, int mxfp8, int out_in, int force_portable,
                            double base, char *kernel_out, size_t kernel_out_size) {
  const int64_t n = h * d;
  const size_t es = mxfp8 ? 1 : 2;
  const size_t xb = (size_t)(t * k) * es, wb = (size_t)(n * k) * es;
  const size_t xsb = mxfp8 ? (size_t)(t * (k / 32)) : 0, wsb = mxfp8 ? (size_t)(n * (k / 32)) : 0;
  const size_t csb = (size_t)(t * rope) * 2, qb = (size_t)(t * n), srb = (size_t)(t * n / 32),
               scb = (size_t)((t + 31) / 32 * n);
  mxf_proj_rope_desc dsc = proj_desc(t, k, h, d, rope, mxfp8, out_in);
  if (force_portable) setenv("MXF_CONFIG", "proj=portable", 1);
  proj_state s;
  memset(&s, 0, sizeof s);
  mxf_status st = mxf_proj_rope_plan(&s.plan, &dsc);
  if (force_portable) unsetenv("MXF_CONFIG");
  if (st != MXF_OK) {
    printf("%-22s %-26s refused: %s\n", shape, opname, mxf_last_error());
    snprintf(kernel_out, kernel_out_size, "refused");
    return NAN;
  }
  snprintf(kernel_out, kernel_out_size, "%s", mxf_plan_backend(s.plan));
  const int nsets = rotation_sets((double)(xb + wb + xsb + wsb));
  s.x = alloc_sets(nsets, xb, mxfp8 ? FILL_E4M3 : FILL_BF16);
  s.w = alloc_sets(nsets, wb, mxfp8 ? FILL_E4M3 : FILL_BF16);
  if (mxfp8) {
    s.xs = alloc_sets(nsets, xsb, FILL_E8M0);
    s.wsc = alloc_sets(nsets, wsb, FILL_E8M0);
  }
  void **cs = alloc_sets(1, csb, FILL_BF16), **sn = alloc_sets(1, csb, FILL_BF16);
  s.cosv = cs[0], s.sinv = sn[0];
  CK(cudaMalloc(&s.q_row, qb));
  CK(cudaMalloc(&s.q_col, qb));
  CK(cudaMalloc(&s.s_row, srb));
  CK(cudaMalloc(&s.s_col, scb));
  s.ws_size = mxf_plan_workspace_size(s.plan);
  if (s.ws_size) CK(cudaMalloc(&s.ws, s.ws_size));
  s.stream = ctx->stream;
  const double ms = time_median(ctx, launch_proj, &s, nsets);
  const double flops = 2.0 * (double)t * (double)n * (double)k;
  const double bytes = (double)(xb + wb + xsb + wsb + 2 * csb + 2 * qb + srb + scb);
  report(ctx, "proj", shape, opname, kernel_out, ms, flops, bytes, base, NAN);
  free_sets(s.x, nsets);
  free_sets(s.w, nsets);
  free_sets(s.xs, nsets);
  free_sets(s.wsc, nsets);
  free_sets(cs, 1);
  free_sets(sn, 1);
  cudaFree(s.q_row), cudaFree(s.q_col), cudaFree(s.s_row), cudaFree(s.s_col), cudaFree(s.ws);
  mxf_plan_destroy(s.plan);
  return ms;
}

typedef struct chain_state {
  cublas_state *cb;
  mxf_plan *quant;
  void *q_row, *s_row, *q_col, *s_col;
  cudaStream_t stream;
} chain_state;

/* cuBLAS GEMM into c, then our quantize of c (both directions). */
static int launch_chain(void *st, int set) {
  chain_state *s = st;
  if (launch_cublas_bf16(s->cb, set)) return 1;
  mxf_quantize_args a = {s->cb->c, s->q_row, s->s_row, s->q_col, s->s_col};
  return mxf_quantize_run(s->quant, &a, NULL, 0, s->stream) != MXF_OK;
}

typedef struct quant_state {
  mxf_plan *plan;
  int dequant;
  void **x;
  void *q_row, *s_row, *q_col, *s_col, *y;
  cudaStream_t stream;
} quant_state;

static int launch_quant(void *st, int set) {
  quant_state *s = st;
  if (s->dequant) {
    mxf_dequantize_args a = {s->q_row, s->s_row, s->y};
    return mxf_dequantize_run(s->plan, &a, NULL, 0, s->stream) != MXF_OK;
  }
  mxf_quantize_args a = {s->x[set], s->q_row, s->s_row, s->q_col, s->s_col};
  return mxf_quantize_run(s->plan, &a, NULL, 0, s->stream) != MXF_OK;
}

/* Our quantize (both directions) or dequantize (rows) kernel alone on (rows, cols). */
static void bench_quant_kernel(bench_ctx *ctx, int64_t rows, int64_t cols, mxf_dtype dt, int dequant) {
  char shape[64], op[64];
  snprintf(shape, sizeof shape, "%lldx%lld", (long long)rows, (long long)cols);
  snprintf(op, sizeof op, "%s_%s", dequant ? "dequantize_rows" : "quantize_both", dt == MXF_F32 ? "f32" : "bf16");
  const int64_t sx[2] = {rows, cols}, ssr[2] = {rows, (cols + 31) / 32}, ssc[2] = {(rows + 31) / 32, cols};
  const size_t es = dt == MXF_F32 ? 4 : 2, n = (size_t)(rows * cols);
  const size_t srb = (size_t)(rows * ((cols + 31) / 32)), scb = (size_t)((rows + 31) / 32 * cols);
  quant_state s;
  memset(&s, 0, sizeof s);
  s.dequant = dequant;
  s.stream = ctx->stream;
  mxf_status st;
  if (dequant) {
    mxf_dequantize_desc d;
    memset(&d, 0, sizeof d);
    d.q = dev_tensor(MXF_E4M3, 2, sx);
    d.s = dev_tensor(MXF_E8M0, 2, ssr);
    d.y = dev_tensor(dt, 2, sx);
    d.direction = MXF_QUANT_ROWS;
    st = mxf_dequantize_plan(&s.plan, &d);
  } else {
    mxf_quantize_desc d;
    memset(&d, 0, sizeof d);
    d.x = dev_tensor(dt, 2, sx);
    d.q_row = dev_tensor(MXF_E4M3, 2, sx);
    d.s_row = dev_tensor(MXF_E8M0, 2, ssr);
    d.q_col = dev_tensor(MXF_E4M3, 2, sx);
    d.s_col = dev_tensor(MXF_E8M0, 2, ssc);
    d.directions = MXF_QUANT_ROWS | MXF_QUANT_COLS;
    st = mxf_quantize_plan(&s.plan, &d);
  }
  if (st != MXF_OK) {
    printf("%-22s %-26s refused: %s\n", shape, op, mxf_last_error());
    return;
  }
  int nsets = 1;
  double bytes;
  if (dequant) {
    void **q = alloc_sets(1, n, FILL_E4M3), **sc = alloc_sets(1, srb, FILL_E8M0);
    s.q_row = q[0], s.s_row = sc[0];
    free(q), free(sc);
    CK(cudaMalloc(&s.y, n * es));
    bytes = (double)(n + srb + n * es);
  } else {
    nsets = rotation_sets((double)(n * es));
    s.x = alloc_sets(nsets, n * es, dt == MXF_F32 ? FILL_E4M3 : FILL_BF16); /* f32: any non-NaN bytes */
    if (dt == MXF_F32) { /* make the f32 data finite: a fresh fill of small normals */
      float *h = malloc(n * 4);
      for (size_t i = 0; i < n; ++i) h[i] = ((float)(rnd() % 2001) - 1000.f) * 0.01f;
      for (int k = 0; k < nsets; ++k) CK(cudaMemcpy(s.x[k], h, n * 4, cudaMemcpyHostToDevice));
      free(h);
    }
    CK(cudaMalloc(&s.q_row, n));
    CK(cudaMalloc(&s.q_col, n));
    CK(cudaMalloc(&s.s_row, srb));
    CK(cudaMalloc(&s.s_col, scb));
    bytes = (double)(n * es + 2 * n + srb + scb);
  }
  const double ms = time_median(ctx, launch_quant, &s, nsets);
  report(ctx, "proj", shape, op, mxf_plan_backend(s.plan), ms, 0.0, bytes, NAN, NAN);
  printf("%-22s %-26s %.1f %% of %.0f GB/s\n", "", "  (HBM fraction)", 100.0 * bytes / (ms * 1e-3) / 1e9 / HBM_GBPS,
         HBM_GBPS);
  free_sets(s.x, nsets);
  cudaFree(s.q_row), cudaFree(s.q_col), cudaFree(s.s_row), cudaFree(s.s_col), cudaFree(s.y);
  mxf_plan_destroy(s.plan);
}

static void bench_proj_t(bench_ctx *ctx, int64_t t) {
  const int64_t k = 1536, h = 128, d = 192, rope = 64, n = h * d;
  char shape[64], kernel[96];
  snprintf(shape, sizeof shape, "T=%lld K=%lld H=%lld", (long long)t, (long long)k, (long long)h);
  const double flops = 2.0 * (double)t * (double)n * (double)k;

  /* the floor: cuBLAS BF16 GEMM alone on the same shape */
  cublas_state cb;
  const size_t abf = (size_t)(t * k * 2), bbf = (size_t)(n * k * 2), cbf = (size_t)(t * n * 2);
  const int nsets = cublas_open(ctx, &cb, t, n, k);
  const double t_gemm = time_median(ctx, launch_cublas_bf16, &cb, nsets);
  report(ctx, "proj", shape, "cublas_bf16_gemm", "cublasGemmEx", t_gemm, flops, (double)(abf + bbf + cbf), t_gemm, NAN);

  /* the unfused chain: cuBLAS GEMM + our quantize (RoPE omitted) */
  double t_chain = NAN;
  {
    chain_state cs;
    memset(&cs, 0, sizeof cs);
    cs.cb = &cb;
    cs.stream = ctx->stream;
    const int64_t sx[2] = {t, n}, ssr[2] = {t, n / 32}, ssc[2] = {(t + 31) / 32, n};
    mxf_quantize_desc qd;
    memset(&qd, 0, sizeof qd);
    qd.x = dev_tensor(MXF_BF16, 2, sx);
    qd.q_row = dev_tensor(MXF_E4M3, 2, sx);
    qd.s_row = dev_tensor(MXF_E8M0, 2, ssr);
    qd.q_col = dev_tensor(MXF_E4M3, 2, sx);
    qd.s_col = dev_tensor(MXF_E8M0, 2, ssc);
    qd.directions = MXF_QUANT_ROWS | MXF_QUANT_COLS;
    if (mxf_quantize_plan(&cs.quant, &qd) == MXF_OK) {
      CK(cudaMalloc(&cs.q_row, (size_t)(t * n)));
      CK(cudaMalloc(&cs.q_col, (size_t)(t * n)));
      CK(cudaMalloc(&cs.s_row, (size_t)(t * n / 32)));
      CK(cudaMalloc(&cs.s_col, (size_t)((t + 31) / 32 * n)));
      t_chain = time_median(ctx, launch_chain, &cs, nsets);
      report(ctx, "proj", shape, "unfused_gemm_quant", "cublas+cuda/portable", t_chain, flops,
             (double)(abf + bbf + 3 * cbf + 2 * t * n), t_gemm, NAN);
      cudaFree(cs.q_row), cudaFree(cs.q_col), cudaFree(cs.s_row), cudaFree(cs.s_col);
      mxf_plan_destroy(cs.quant);
    } else {
      printf("%-22s %-26s refused: %s\n", shape, "unfused_gemm_quant", mxf_last_error());
    }
  }
  cublas_close(&cb, nsets);

  double t_ops[2] = {NAN, NAN};
  for (int mx = 0; mx < 2; ++mx) {
    const char *name = mx ? "proj_rope_mxfp8" : "proj_rope_bf16";
    t_ops[mx] = bench_proj_op(ctx, shape, name, t, k, h, d, rope, mx, 1, 0, t_gemm, kernel, sizeof kernel);
    if (!tu_kernel_is(kernel, "cuda/portable") && strcmp(kernel, "refused") != 0) {
      char pname[64];
      const int sm90 = tu_kernel_is(kernel, "cuda/sm90");
      snprintf(pname, sizeof pname, "%s[portable]", name);
      bench_proj_op(ctx, shape, pname, t, k, h, d, rope, mx, 1, 1, t_gemm, kernel, sizeof kernel);
      if (mx && sm90)
        for (int path = 0; path < 2; ++path) { /* both sm90 MXFP8 paths, whichever the default took */
          static const char *paths[2] = {"mainloop", "prepass"};
          snprintf(pname, sizeof pname, "%s[%s]", name, paths[path]);
          char cfg[32];
          snprintf(cfg, sizeof cfg, "mxfp8=%s", paths[path]);
          setenv("MXF_CONFIG", cfg, 1);
          bench_proj_op(ctx, shape, pname, t, k, h, d, rope, mx, 1, 0, t_gemm, kernel, sizeof kernel);
          unsetenv("MXF_CONFIG");
        }
    }
  }
  bench_proj_op(ctx, shape, "proj_rope_bf16_in_out", t, k, h, d, rope, 0, 0, 0, t_gemm, kernel, sizeof kernel);
  printf("  T=%lld: time / cuBLAS GEMM alone: fused bf16 %.3f (floor 1.3, goal 1.05), fused mxfp8 %.3f "
         "(floor 1.5, goal 1.1), unfused gemm+quantize %.3f\n",
         (long long)t, t_ops[0] / t_gemm, t_ops[1] / t_gemm, t_chain / t_gemm);
}

static void bench_proj_section(bench_ctx *ctx, int quick) {
  printf("\n== proj_rope, K=1536 H=128 D=192 (x cuBLAS: cuBLAS GEMM ms / our ms) ==\n");
  print_header();
  static const int64_t tv[] = {128, 256, 512, 1024, 4096, 16384};
  for (int i = 0; i < 6; ++i) {
    if (quick && tv[i] != 4096) continue;
    bench_proj_t(ctx, tv[i]);
  }
  bench_quant_kernel(ctx, 4096, 24576, MXF_BF16, 0);
  bench_quant_kernel(ctx, 4096, 24576, MXF_F32, 0);
  bench_quant_kernel(ctx, 4096, 24576, MXF_BF16, 1);
  bench_quant_kernel(ctx, 4096, 24576, MXF_F32, 1);
}

/* ------------------------------------------------------------ plan section
 * Host time of planning a new shape, as a serving loop meets them: one weight, a new
 * batch size on each call. Per op, PLAN_SHAPES distinct shapes planned one after the
 * other (plan + destroy timed together, nothing launched); the first plan of the process
 * is reported apart (it meets the device for the first time), then the median and the
 * largest of the others, in microseconds.
 *   gemm_amax_plan   MXFP8 (e4m3, e8m0 / 32 swizzled), bf16 C, B = 7168 x 2048, M = 1..264
 *   proj_rope_plan   MXFP8, DeepSeek-V3's K = 1536, H = 128, D = 192, T = 1..264
 */
#define PLAN_SHAPES 264

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void bench_plan_op(bench_ctx *ctx, int proj) {
  const char *op = proj ? "proj_rope_plan" : "gemm_amax_plan";
  const char *shape = proj ? "T=1..264 K=1536 H=128" : "1..264x7168x2048";
  double us[PLAN_SHAPES];
  char kernel[96] = "?";
  for (int i = 0; i < PLAN_SHAPES; ++i) {
    const int64_t rows = i + 1;
    mxf_plan *plan = NULL;
    mxf_status st;
    const double t0 = now_us();
    if (proj) {
      const mxf_proj_rope_desc d = proj_desc(rows, 1536, 128, 192, 64, 1, 1);
      st = mxf_proj_rope_plan(&plan, &d);
    } else {
      const mxf_gemm_amax_desc d = gemm_desc(rows, 7168, 2048, MXF_E4M3, MXF_BF16);
      st = mxf_gemm_amax_plan(&plan, &d);
    }
    if (st == MXF_OK && i == PLAN_SHAPES - 1) snprintf(kernel, sizeof kernel, "%s", mxf_plan_backend(plan));
    mxf_plan_destroy(plan);
    us[i] = now_us() - t0;
    if (st != MXF_OK) {
      printf("%-22s %-26s refused: %s\n", shape, op, mxf_last_error());
      return;
    }
  }
  const double first = us[0];
  qsort(us + 1, PLAN_SHAPES - 1, sizeof us[0], cmp_double);
  const int n = PLAN_SHAPES - 1;
  const double med = n % 2 ? us[1 + n / 2] : 0.5 * (us[n / 2] + us[1 + n / 2]), max = us[PLAN_SHAPES - 1];
  printf("%-22s %-26s %9.1f %9.1f %9.1f %9d  %s\n", shape, op, med, max, first, PLAN_SHAPES, kernel);
  if (ctx->json) {
    fprintf(
        ctx->json,
        "%s\n  {\"section\": \"plan\", \"shape\": \"%s\", \"op\": \"%s\", \"kernel\": \"%s\", \"ms\": %.6f, "
        "\"plans\": %d, \"plan_median_us\": %.2f, \"plan_max_us\": %.2f, \"plan_first_us\": %.2f, "
        "\"device\": \"%s\"}",
        ctx->json_rows ? "," : "", shape, op, kernel, med * 1e-3, PLAN_SHAPES, med, max, first, ctx->device);
    ctx->json_rows++;
  }
}

static void bench_plan_section(bench_ctx *ctx) {
  printf("\n== planning a new shape: host time of plan + destroy, us (the first plan of the process apart) "
         "==\n");
  printf("%-22s %-26s %9s %9s %9s %9s  %s\n", "shapes", "op", "median", "max", "first", "plans", "kernel");
  bench_plan_op(ctx, 0);
  bench_plan_op(ctx, 1);
}

/* ------------------------------------------------------------ main */
int main(int argc, char **argv) {
  const char *only = NULL, *json_path = NULL;
  int quick = 0;
  bench_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.iters = 25;
  ctx.warmup = 5;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else if (!strcmp(argv[i], "--shape") && i + 1 < argc)
      ctx.shape = argv[++i];
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
      ctx.iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (argv[i][0] != '-')
      json_path = argv[i];
    else {
      fprintf(stderr, "usage: %s [--only gemm|mixed|proj|plan] [--shape MxNxK] [--iters N] [--quick] [out.json]\n",
              argv[0]);
      return 2;
    }
  }
  if (ctx.iters < 20) ctx.iters = 20;
  if (ctx.iters > 64) ctx.iters = 64;
  if (mxf_cuda_device_count() == 0) {
    printf("mxf_bench_gpu: no CUDA device (or built without CUDA); nothing to do\n");
    return 0;
  }
  struct cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  snprintf(ctx.device, sizeof ctx.device, "%s (cc %d.%d, %d SMs)", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount);
  printf("device: %s; mxfuse %s; median of %d launches after %d warm-up\n", ctx.device, mxf_version_string(),
         ctx.iters, ctx.warmup);
  CK(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking));
  for (int i = 0; i < 128; ++i) CK(cudaEventCreate(&ctx.ev[i]));
  if (json_path) {
    ctx.json = fopen(json_path, "w");
    if (!ctx.json) {
      fprintf(stderr, "cannot write %s\n", json_path);
      return 1;
    }
    fprintf(ctx.json, "{\"device\": \"%s\", \"rows\": [", ctx.device);
  }
  if (!only || !strcmp(only, "plan")) bench_plan_section(&ctx); /* first: its first plan is the process's */
  if (!only || !strcmp(only, "gemm")) bench_gemm_section(&ctx, quick);
  if (!only || !strcmp(only, "mixed")) bench_mixed_section(&ctx, quick);
  if (!only || !strcmp(only, "proj")) bench_proj_section(&ctx, quick);
  if (ctx.json) {
    fprintf(ctx.json, "\n]}\n");
    fclose(ctx.json);
  }
  for (int i = 0; i < 128; ++i) cudaEventDestroy(ctx.ev[i]);
  cudaStreamDestroy(ctx.stream);
  return 0;
}
