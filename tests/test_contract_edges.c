/*
 * test_contract_edges.c — the edges of SPEC §4: outputs that overlap an input or another
 * output are refused naming both tensors (plan form and one-call form); empty problems
 * (M, N, L, T or rows of 0) run and touch nothing but a gemm's amax (0, or left as it was
 * with MXF_AMAX_ACCUMULATE); K = 0 is refused; byte sizes beyond 2^62 are refused at
 * plan time.
 */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static mxf_tensor t2(void *data, mxf_dtype dt, int64_t s0, int64_t s1) {
  const int64_t shape[2] = {s0, s1};
  return tu_tensor(data, dt, 2, shape);
}

static int has(const char *s) { return strstr(mxf_last_error(), s) != NULL; }

static void test_overlap(void) {
  enum { M = 64, N = 48, K = 64 };
  uint8_t *a = tu_malloc(M * K), *b = tu_malloc(N * K), *sfa = tu_malloc(M * 2), *sfb = tu_malloc(N * 2);
  float *c = tu_malloc(sizeof(float) * M * N), amax = 0;
  memset(a, 0x38, M * K);
  memset(b, 0x38, N * K);
  memset(sfa, 127, M * 2);
  memset(sfb, 127, N * 2);
  /* amax laid over C[0, 0] */
  mxf_gemm_amax_desc d = tu_gemm_e4m3_desc(M, N, K, a, b, sfa, sfb, c, c);
  mxf_status st = mxf_gemm_amax(&d, NULL);
  TU_CHECK(st == MXF_ERR_INVALID_VALUE && has("c [") && has("overlaps amax"), "amax over C[0,0]: %d %s", st,
           mxf_last_error());
  /* C over B's bytes, through the plan form */
  float *big = tu_malloc(sizeof(float) * M * N);
  d = tu_gemm_e4m3_desc(M, N, K, a, (uint8_t *)big + 64, sfa, sfb, big, &amax);
  mxf_plan *plan = NULL;
  st = mxf_gemm_amax_plan(&plan, &d);
  TU_CHECK(st == MXF_OK, "plan: %s", mxf_last_error());
  if (st == MXF_OK) {
    mxf_gemm_amax_args args = {a, (uint8_t *)big + 64, sfa, sfb, big, &amax, NULL};
    st = mxf_gemm_amax_run(plan, &args, NULL, 0, NULL); /* refused before the workspace is checked */
    TU_CHECK(st == MXF_ERR_INVALID_VALUE && has("c [") && has("overlaps b ["), "C over B: %d %s", st,
             mxf_last_error());
    /* the same plan on disjoint buffers runs */
    args.b = b;
    args.c = c;
    const size_t wss = mxf_plan_workspace_size(plan);
    void *ws = tu_malloc(wss);
    st = mxf_gemm_amax_run(plan, &args, ws, wss, NULL);
    free(ws);
    TU_CHECK(st == MXF_OK && amax == 1.0f * K, "disjoint run: %d amax %g %s", st, amax, mxf_last_error());
    mxf_plan_destroy(plan);
  }
  /* q_row over the bytes of x; s_col over q_row */
  enum { R = 64, C = 64 };
  float *x = tu_malloc(sizeof(float) * R * C);
  uint8_t *q = tu_malloc(R * C), *s = tu_malloc(R * C);
  memset(x, 0, sizeof(float) * R * C);
  mxf_quantize_desc qd;
  memset(&qd, 0, sizeof qd);
  qd.x = t2(x, MXF_F32, R, C);
  qd.q_row = t2((uint8_t *)x + 4, MXF_E4M3, R, C);
  qd.s_row = t2(s, MXF_E8M0, R, C / 32);
  qd.directions = MXF_QUANT_ROWS;
  st = mxf_quantize(&qd, NULL);
  TU_CHECK(st == MXF_ERR_INVALID_VALUE && has("q_row [") && has("overlaps x ["), "q_row over x: %d %s", st,
           mxf_last_error());
  qd.q_row = t2(q, MXF_E4M3, R, C);
  qd.s_row = t2(q + 8, MXF_E8M0, R, C / 32);
  st = mxf_quantize(&qd, NULL);
  TU_CHECK(st == MXF_ERR_INVALID_VALUE && has("q_row [") && has("overlaps s_row ["),
           "s_row over q_row: %d %s", st, mxf_last_error());
  free(a), free(b), free(sfa), free(sfb), free(c), free(big), free(x), free(q), free(s);
}

static void test_empty(void) {
  static uint8_t buf[4096];
  float amax = 5.0f;
  /* M = 0, N = 0, L = 0 (through a 3-D a): amax set to 0; with accumulate left */
  const int64_t mnl[3][3] = {{0, 48, 1}, {64, 0, 1}, {64, 48, 0}};
  for (int i = 0; i < 3; ++i) {
    const int64_t m = mnl[i][0], n = mnl[i][1];
    mxf_gemm_amax_desc d = tu_gemm_e4m3_desc(m, n, 64, m ? buf : NULL, n ? buf + 1024 : NULL,
                                             m ? buf + 2048 : NULL, n ? buf + 3072 : NULL, NULL, &amax);
    if (mnl[i][2] == 0) {
      d.a.ndim = d.b.ndim = d.c.ndim = 3;
      d.a.shape[2] = d.b.shape[2] = d.c.shape[2] = 0;
      d.sfa.ndim = d.sfb.ndim = 3;
      d.sfa = t2(NULL, MXF_E8M0, 0, 64);
      d.sfa.ndim = 3, d.sfa.shape[0] = 0, d.sfa.shape[1] = 64, d.sfa.shape[2] = 2;
      d.sfb = t2(NULL, MXF_E8M0, 0, 48);
      d.sfb.ndim = 3, d.sfb.shape[0] = 0, d.sfb.shape[1] = 48, d.sfb.shape[2] = 2;
    }
    amax = 5.0f;
    d.flags = MXF_AMAX_ACCUMULATE;
    mxf_status st = mxf_gemm_amax(&d, NULL);
    TU_CHECK(st == MXF_OK && amax == 5.0f, "empty gemm %d accumulate: %d amax %g %s", i, st, amax,
             mxf_last_error());
    d.flags = 0;
    st = mxf_gemm_amax(&d, NULL);
    TU_CHECK(st == MXF_OK && amax == 0.0f, "empty gemm %d: %d amax %g %s", i, st, amax, mxf_last_error());
    mxf_plan *plan = NULL;
    st = mxf_gemm_amax_plan(&plan, &d);
    TU_CHECK(st == MXF_OK && plan && tu_kernel_is(mxf_plan_backend(plan), "cpu/empty"), "empty plan: %s %s",
             plan ? mxf_plan_backend(plan) : "-", mxf_last_error());
    mxf_plan_destroy(plan);
  }
  /* K = 0 refused */
  mxf_gemm_amax_desc d = tu_gemm_e4m3_desc(64, 48, 0, buf, buf, buf, buf, buf, &amax);
  mxf_status st = mxf_gemm_amax(&d, NULL);
  TU_CHECK(st == MXF_ERR_INVALID_VALUE && has("K=0 is refused"), "K = 0: %d %s", st, mxf_last_error());
  /* quantize / dequantize with 0 rows */
  mxf_quantize_desc qd;
  memset(&qd, 0, sizeof qd);
  qd.x = t2(NULL, MXF_F32, 0, 64);
  qd.q_row = t2(NULL, MXF_E4M3, 0, 64);
  qd.s_row = t2(NULL, MXF_E8M0, 0, 2);
  qd.q_col = t2(NULL, MXF_E4M3, 0, 64);
  qd.s_col = t2(NULL, MXF_E8M0, 0, 64);
  qd.directions = MXF_QUANT_ROWS | MXF_QUANT_COLS;
  st = mxf_quantize(&qd, NULL);
  TU_CHECK(st == MXF_OK, "quantize 0 rows: %s", mxf_last_error());
  mxf_dequantize_desc dd;
  memset(&dd, 0, sizeof dd);
  dd.q = t2(NULL, MXF_E4M3, 0, 64);
  dd.s = t2(NULL, MXF_E8M0, 0, 2);
  dd.y = t2(NULL, MXF_BF16, 0, 64);
  dd.direction = MXF_QUANT_ROWS;
  st = mxf_dequantize(&dd, NULL);
  TU_CHECK(st == MXF_OK, "dequantize 0 rows: %s", mxf_last_error());
}

static void test_bytes(void) {
  /* M = N = 2^31 with f32 C: 2^62 elements, 2^64 bytes */
  float amax;
  const int64_t big = INT64_C(1) << 31;
  mxf_gemm_amax_desc d = tu_gemm_e4m3_desc(big, big, 64, NULL, NULL, NULL, NULL, NULL, &amax);
  mxf_plan *plan = NULL;
  mxf_status st = mxf_gemm_amax_plan(&plan, &d);
  TU_CHECK(st == MXF_ERR_INVALID_VALUE && has("c has shape") && has("bytes exceed 2^62"),
           "2^31 x 2^31 f32: %d %s", st, mxf_last_error());
  mxf_plan_destroy(plan);
}

int main(void) {
  test_overlap();
  test_empty();
  test_bytes();
  return tu_finish("test_contract_edges");
}
