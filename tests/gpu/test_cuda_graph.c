/*
 * test_cuda_graph.c — a gemm_amax run (plan form, caller workspace) captured in a CUDA
 * graph and replayed on new inputs. Skips (exit 77) without CUDA or without a device.
 *
 * For each configuration: plan, allocate the workspace, capture one mxf_gemm_amax_run on
 * a stream into a graph, instantiate it; then 3 times: write fresh random inputs into the
 * same device buffers, poison C (and set the previous amax when accumulating), launch the
 * graph, judge C by SPEC §5 against the f64 result (tools/judge.h: bit for bit where no f32
 * summation order can change the rounding, within the bound elsewhere), and compare C and
 * amax with the CPU backend run on the same inputs (narrow C >= 99.9 % equal; amax within
 * 2e-6·sqrt(K), i.e. both backends within SPEC §5's 1e-6·sqrt(K) of the exact result).
 * Capturing proves the run allocates nothing and never synchronizes; replaying proves it
 * reads its pointers at replay time, not from the capture's data.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "gpu_util.h"
#include "judge.h"
#include "mxfuse.h"
#include "testutil.h"

#if defined(MXF_WITH_CUDA)

typedef struct gconf {
  int64_t m, n, k, l;
  mxf_dtype ab, sf, c;
  int sf_vec;
  int accumulate;
} gconf;

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static uint8_t rand_code(tu_rng *r, mxf_dtype ab) {
  uint8_t c = (uint8_t)tu_u32(r);
  if (ab == MXF_E2M1) return c; /* two nibbles, both finite */
  if ((c & 0x7F) == 0x7F) c ^= 1;
  return c;
}

/* Value k of row `row` of a k-major operand (codes, compact scales) of batch l, decoded. */
static double dec_op(const gconf *g, const uint8_t *x, const uint8_t *sf, int64_t rows, int64_t row,
                     int64_t k, int64_t l) {
  const int64_t K = g->k, kb = cdiv(K, g->sf_vec), i = (l * rows + row) * K + k;
  double v = g->ab == MXF_E2M1   ? mxf_e2m1_to_f32(mxf_e2m1_get(x, i))
             : g->ab == MXF_E4M3 ? mxf_e4m3_to_f32(x[i])
                                 : mxf_e5m2_to_f32(x[i]);
  const uint8_t sb = sf[(l * rows + row) * kb + k / g->sf_vec];
  return v * (g->sf == MXF_E8M0 ? mxf_e8m0_to_f32(sb) : mxf_e4m3_to_f32(sb));
}

static void run_conf(tu_rng *r, const gconf *g) {
  const int64_t M = g->m, N = g->n, K = g->k, L = g->l, kb = cdiv(K, g->sf_vec);
  const int abits = g->ab == MXF_E2M1 ? 4 : 8, cbytes = g->c == MXF_F32 ? 4 : g->c == MXF_BF16 ? 2 : 1;
  const size_t a_bytes = (size_t)(M * K * L * abits / 8), b_bytes = (size_t)(N * K * L * abits / 8);
  const size_t sfa_bytes = (size_t)(L * M * kb), sfb_bytes = (size_t)(L * N * kb);
  const size_t c_bytes = (size_t)(M * N * L * cbytes);
  uint8_t *a = tu_malloc(a_bytes), *b = tu_malloc(b_bytes), *sfa = tu_malloc(sfa_bytes),
          *sfb = tu_malloc(sfb_bytes);
  uint8_t *c_cpu = tu_malloc(c_bytes), *c_gpu = tu_malloc(c_bytes);
  void *da = gu_dmalloc(a_bytes), *db = gu_dmalloc(b_bytes), *dsfa = gu_dmalloc(sfa_bytes),
       *dsfb = gu_dmalloc(sfb_bytes), *dc = gu_dmalloc(c_bytes);
  float *damax = gu_dmalloc(sizeof(float));

  /* C-contiguous tensors: a (L, M, K) row-major per batch = strides (K, 1, M*K) */
  mxf_gemm_amax_desc d;
  memset(&d, 0, sizeof d);
  const int32_t dev = GU_TEST_DEVICE;
  mxf_tensor *ts[3] = {&d.a, &d.b, &d.c};
  const int64_t rows[3] = {M, N, M}, cols[3] = {K, K, N};
  const mxf_dtype dts[3] = {g->ab, g->ab, g->c};
  void *ptrs[3] = {da, db, dc};
  for (int i = 0; i < 3; ++i) {
    ts[i]->data = ptrs[i];
    ts[i]->dtype = dts[i];
    ts[i]->device = dev;
    ts[i]->ndim = 3;
    ts[i]->shape[0] = rows[i], ts[i]->shape[1] = cols[i], ts[i]->shape[2] = L;
    ts[i]->stride[0] = cols[i], ts[i]->stride[1] = 1, ts[i]->stride[2] = rows[i] * cols[i];
  }
  const int64_t sfa_shape[3] = {L, M, kb}, sfb_shape[3] = {L, N, kb}, one = 1;
  d.sfa = tu_tensor(dsfa, g->sf, 3, sfa_shape);
  d.sfb = tu_tensor(dsfb, g->sf, 3, sfb_shape);
  d.amax = tu_tensor(damax, MXF_F32, 1, &one);
  d.sfa.device = d.sfb.device = d.amax.device = dev;
  d.sf_vec = g->sf_vec;
  d.flags = g->accumulate ? MXF_AMAX_ACCUMULATE : 0u;
  const float alpha = 0.75f;

  mxf_plan *plan = NULL;
  int ok = 1;
  GU_MXF_OK(mxf_gemm_amax_plan(&plan, &d), ok = 0);
  if (!ok) return;
  printf("graph case M=%lld N=%lld K=%lld L=%lld %s/%s/%d -> %s acc=%d: kernel %s\n", (long long)M,
         (long long)N, (long long)K, (long long)L, mxf_dtype_name(g->ab), mxf_dtype_name(g->sf), g->sf_vec,
         mxf_dtype_name(g->c), g->accumulate, mxf_plan_backend(plan));
  const size_t ws = mxf_plan_workspace_size(plan);
  void *w = ws ? gu_dmalloc(ws) : NULL;
  cudaStream_t s;
  GU_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  mxf_gemm_amax_args args = {da, db, dsfa, dsfb, dc, damax, &alpha};
  GU_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  mxf_status st = mxf_gemm_amax_run(plan, &args, w, ws, s);
  cudaError_t ce = cudaStreamEndCapture(s, &graph);
  TU_CHECK(st == MXF_OK, "run under capture: %s: %s", mxf_status_string(st), mxf_last_error());
  TU_CHECK(ce == cudaSuccess, "end capture: %s", cudaGetErrorString(ce));
  if (st != MXF_OK || ce != cudaSuccess) return;
  GU_CUDA(cudaGraphInstantiate(&exec, graph, 0));

  for (int rep = 0; rep < 3; ++rep) {
    for (size_t i = 0; i < a_bytes; ++i)
      a[i] = rand_code(r, g->ab);
    for (size_t i = 0; i < b_bytes; ++i)
      b[i] = rand_code(r, g->ab);
    for (size_t i = 0; i < sfa_bytes; ++i)
      sfa[i] = (uint8_t)(g->sf == MXF_E8M0 ? tu_range(r, 120, 134) : tu_range(r, 0x10, 0x48));
    for (size_t i = 0; i < sfb_bytes; ++i)
      sfb[i] = (uint8_t)(g->sf == MXF_E8M0 ? tu_range(r, 120, 134) : tu_range(r, 0x10, 0x48));
    const float prev = rep == 1 ? 1e30f : rep == 2 ? -2.0f : 0.25f;
    GU_CUDA(cudaMemcpy(da, a, a_bytes, cudaMemcpyHostToDevice));
    GU_CUDA(cudaMemcpy(db, b, b_bytes, cudaMemcpyHostToDevice));
    GU_CUDA(cudaMemcpy(dsfa, sfa, sfa_bytes, cudaMemcpyHostToDevice));
    GU_CUDA(cudaMemcpy(dsfb, sfb, sfb_bytes, cudaMemcpyHostToDevice));
    gu_dpoison(dc, c_bytes, 0xA5);
    if (g->accumulate)
      GU_CUDA(cudaMemcpy(damax, &prev, sizeof prev, cudaMemcpyHostToDevice));
    else
      gu_dpoison(damax, sizeof(float), 0xA5);
    GU_CUDA(cudaGraphLaunch(exec, s));
    GU_CUDA(cudaStreamSynchronize(s));
    float amax_gpu, amax_cpu = prev;
    gu_to_host(c_gpu, dc, c_bytes);
    gu_to_host(&amax_gpu, damax, sizeof amax_gpu);

    /* the CPU backend on the same bytes */
    mxf_gemm_amax_desc h = d;
    void *hp[3] = {a, b, c_cpu};
    mxf_tensor *hts[3] = {&h.a, &h.b, &h.c};
    for (int i = 0; i < 3; ++i)
      hts[i]->data = hp[i], hts[i]->device = MXF_DEVICE_CPU;
    h.sfa.data = sfa, h.sfb.data = sfb, h.amax.data = &amax_cpu;
    h.sfa.device = h.sfb.device = h.amax.device = MXF_DEVICE_CPU;
    h.alpha = &alpha;
    memset(c_cpu, 0xA5, c_bytes);
    int cpu_ok = 1;
    GU_MXF_OK(mxf_gemm_amax(&h, NULL), cpu_ok = 0);
    if (!cpu_ok) continue;

    /* every element judged against its f64 reference; narrow codes compared with the CPU's */
    double *ra = tu_malloc(sizeof(double) * (size_t)(M * K)),
           *rb = tu_malloc(sizeof(double) * (size_t)(N * K));
    mxj_counts jc;
    mxj_counts_init(&jc);
    long equal = 0;
    for (int64_t l = 0; l < L; ++l) {
      for (int64_t i = 0; i < M * K; ++i)
        ra[i] = dec_op(g, a, sfa, M, i / K, i % K, l);
      for (int64_t i = 0; i < N * K; ++i)
        rb[i] = dec_op(g, b, sfb, N, i / K, i % K, l);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          const int64_t idx = (l * M + i) * N + j;
          const mxj_ref ref = mxj_gemm_ref(ra + i * K, rb + j * K, K, alpha);
          const uint32_t x = mxj_code_at(g->c, c_gpu, idx), y = mxj_code_at(g->c, c_cpu, idx);
          mxj_gemm_judge(g->c, &ref, x, &jc, idx);
          equal += mxj_code_ordinal(g->c, x, NULL) == mxj_code_ordinal(g->c, y, NULL);
        }
    }
    free(ra), free(rb);
    const int64_t total = M * N * L;
    TU_CHECK(jc.wrong == 0, "replay %d: %lld elements wrong by SPEC section 5 (first at %lld)", rep,
             (long long)jc.wrong, (long long)jc.first_wrong);
    if (g->c != MXF_F32)
      TU_CHECK((double)equal >= 0.999 * (double)total, "replay %d: only %ld of %lld codes equal the CPU's",
               rep, equal, (long long)total);
    TU_CHECK(!isnan(amax_gpu) &&
                 fabs((double)amax_gpu - amax_cpu) <= 2e-6 * sqrt((double)K) * fabs((double)amax_cpu),
             "replay %d: amax gpu %.9g cpu %.9g", rep, (double)amax_gpu, (double)amax_cpu);
  }
  GU_CUDA(cudaGraphExecDestroy(exec));
  GU_CUDA(cudaGraphDestroy(graph));
  GU_CUDA(cudaStreamDestroy(s));
  mxf_plan_destroy(plan);
  if (w) GU_CUDA(cudaFree(w));
  void *dfree[6] = {da, db, dsfa, dsfb, dc, damax};
  for (int i = 0; i < 6; ++i)
    GU_CUDA(cudaFree(dfree[i]));
  free(a), free(b), free(sfa), free(sfb), free(c_cpu), free(c_gpu);
}

int main(void) {
  int rc = gu_skip_if_unavailable("test_cuda_graph");
  if (rc) return rc;
  tu_rng r;
  tu_rng_init(&r, tu_seed());
  const gconf confs[] = {
      {300, 200, 96, 1, MXF_E4M3, MXF_E8M0, MXF_BF16, 32, 0},
      {257, 132, 160, 2, MXF_E2M1, MXF_E4M3, MXF_F32, 16, 1}, /* C-contiguous rows: 16-byte multiples */
      {64, 1008, 512, 1, MXF_E2M1, MXF_E8M0, MXF_E4M3, 32, 0},
  };
  for (size_t i = 0; i < sizeof confs / sizeof confs[0]; ++i)
    run_conf(&r, &confs[i]);
  if (gu_device_cc() == 90) {
    setenv("MXF_CONFIG", "gemm=portable", 1); /* the portable kernel under capture too */
    for (size_t i = 0; i < sizeof confs / sizeof confs[0]; ++i)
      run_conf(&r, &confs[i]);
    unsetenv("MXF_CONFIG");
  }
  return tu_finish("test_cuda_graph");
}

#else /* built without CUDA */
int main(void) { return gu_skip_if_unavailable("test_cuda_graph"); }
#endif
