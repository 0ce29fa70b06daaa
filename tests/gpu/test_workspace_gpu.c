/*
 * test_workspace_gpu.c — the one-call form's memory on a CUDA device, driven as a serving
 * loop drives it: one MXFP8 weight (N = 7168, K = 2048), a new batch size M on each call
 * (264 distinct M), on one stream. The arena of that stream must end at the largest
 * workspace of those plans (mxf_plan_cache_workspace_bytes and cudaMemGetInfo both), the
 * device memory the calls leave behind may not exceed it by more than 10 % (plus the
 * allocator's 2 MiB granule), and every call's C and amax equal the plan form's on the
 * same inputs (every kernel is loaded before the memory is measured: CUDA loads modules at
 * a kernel's first launch). A one-call run that needs a larger workspace during CUDA-graph capture is
 * refused with a message, and the capture stays usable. Also prints the host time of a
 * call with a new shape. Skips (exit 77) without CUDA or a device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_util.h"

#if defined(MXF_WITH_CUDA)
enum { N = 7168, K = 2048, KB = K / 32, SHAPES = 264, MAXM = 2 * SHAPES };

typedef struct bufs {
  void *a, *b, *sa, *sb, *c, *c2, *amax, *amax2;
} bufs;

static mxf_gemm_amax_desc desc_of(const bufs *d, int64_t m, void *c, void *amax) {
  int64_t as[2] = {m, K}, bs[2] = {N, K}, sas[2] = {m, KB}, sbs[2] = {N, KB}, cs[2] = {m, N}, one[1] = {1};
  mxf_gemm_amax_desc g;
  memset(&g, 0, sizeof g);
  g.a = tu_tensor(d->a, MXF_E4M3, 2, as), g.b = tu_tensor(d->b, MXF_E4M3, 2, bs);
  g.sfa = tu_tensor(d->sa, MXF_E8M0, 2, sas), g.sfb = tu_tensor(d->sb, MXF_E8M0, 2, sbs);
  g.c = tu_tensor(c, MXF_BF16, 2, cs), g.amax = tu_tensor(amax, MXF_F32, 1, one);
  g.a.device = g.b.device = g.sfa.device = g.sfb.device = g.c.device = g.amax.device = GU_TEST_DEVICE;
  g.sf_vec = 32;
  return g;
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static void run(tu_rng *rng) {
  bufs d;
  uint8_t *h = tu_malloc((size_t)N * K);
  for (size_t i = 0; i < (size_t)N * K; ++i)
    h[i] = (uint8_t)(tu_u32(rng) & 0xF7);
  d.b = gu_to_device(h, (size_t)N * K);
  d.a = gu_to_device(h, (size_t)MAXM * K); /* A: the first rows of the same random codes */
  for (size_t i = 0; i < (size_t)N * KB; ++i)
    h[i] = (uint8_t)tu_range(rng, 120, 128);
  d.sb = gu_to_device(h, (size_t)N * KB);
  d.sa = gu_to_device(h + 7, (size_t)MAXM * KB);
  d.c = gu_dmalloc((size_t)MAXM * N * 2), d.c2 = gu_dmalloc((size_t)MAXM * N * 2);
  d.amax = gu_dmalloc(4), d.amax2 = gu_dmalloc(4);
  uint16_t *hc = tu_malloc((size_t)MAXM * N * 2), *hc2 = tu_malloc((size_t)MAXM * N * 2);
  cudaStream_t s;
  GU_CUDA(cudaStreamCreate(&s));

  int64_t ms[SHAPES];
  for (int i = 0; i < SHAPES; ++i)
    ms[i] = 2 * i + 1 + (i % 3 == 0); /* 264 distinct M in 1..528 */
  /* the largest workspace of these plans; and each plan run once (plan form, its own
   * workspace, freed), so that every kernel the loop below launches is loaded before the
   * device memory is measured (CUDA loads a kernel's module at its first launch) */
  size_t largest = 0;
  for (int i = 0; i < SHAPES; ++i) {
    mxf_gemm_amax_desc g = desc_of(&d, ms[i], NULL, NULL);
    mxf_plan *p = NULL;
    if (mxf_gemm_amax_plan(&p, &g) == MXF_OK) {
      size_t n = mxf_plan_workspace_size(p);
      if (n > largest) largest = n;
      void *ws = n ? gu_dmalloc(n) : NULL;
      mxf_gemm_amax_args args = {d.a, d.b, d.sa, d.sb, d.c2, d.amax2, NULL};
      GU_MXF_OK(mxf_gemm_amax_run(p, &args, ws, n, s));
      GU_CUDA(cudaStreamSynchronize(s));
      if (ws) GU_CUDA(cudaFree(ws));
    }
    mxf_plan_destroy(p);
  }
  mxf_plan_cache_clear();
  GU_CUDA(cudaDeviceSynchronize());
  size_t free0, total;
  GU_CUDA(cudaMemGetInfo(&free0, &total));

  int bad = 0, checked = 0;
  double t_new = 0, t_max = 0;
  for (int i = 0; i < SHAPES; ++i) {
    int64_t m = ms[i];
    mxf_gemm_amax_desc g = desc_of(&d, m, d.c, d.amax);
    double t0 = now_us();
    mxf_status st = mxf_gemm_amax(&g, s);
    double dt = now_us() - t0;
    t_new += dt;
    if (dt > t_max) t_max = dt;
    if (!TU_CHECK(st == MXF_OK, "one call M=%lld: %s", (long long)m, mxf_last_error())) break;
    if (i % 22 == 0) { /* every 22nd shape: the plan form on the same inputs, bit for bit */
      mxf_gemm_amax_desc pg = desc_of(&d, m, NULL, NULL);
      mxf_plan *p = NULL;
      GU_MXF_OK(mxf_gemm_amax_plan(&p, &pg), break);
      size_t n = mxf_plan_workspace_size(p);
      void *ws = n ? gu_dmalloc(n) : NULL;
      mxf_gemm_amax_args args = {d.a, d.b, d.sa, d.sb, d.c2, d.amax2, NULL};
      GU_MXF_OK(mxf_gemm_amax_run(p, &args, ws, n, s));
      GU_CUDA(cudaStreamSynchronize(s));
      gu_to_host(hc, d.c, (size_t)m * N * 2), gu_to_host(hc2, d.c2, (size_t)m * N * 2);
      float a1, a2;
      gu_to_host(&a1, d.amax, 4), gu_to_host(&a2, d.amax2, 4);
      bad += memcmp(hc, hc2, (size_t)m * N * 2) != 0 || a1 != a2;
      ++checked;
      if (ws) GU_CUDA(cudaFree(ws));
      mxf_plan_destroy(p);
    }
  }
  GU_CUDA(cudaStreamSynchronize(s));
  size_t free1;
  GU_CUDA(cudaMemGetInfo(&free1, &total));
  size_t held = mxf_plan_cache_workspace_bytes();
  long long used = (long long)free0 - (long long)free1;
  printf("  %d shapes: arena %zu bytes, largest workspace %zu, device memory used %lld bytes; new-shape call "
         "%.1f us mean, %.1f us max (host)\n",
         SHAPES, held, largest, used, t_new / SHAPES, t_max);
  TU_CHECK(bad == 0, "one call equals the plan form on %d of the shapes (%d differ)", checked, bad);
  TU_CHECK(held == largest, "the stream's arena holds the largest workspace: %zu vs %zu", held, largest);
  TU_CHECK(used <= (long long)(largest + largest / 10) + (2 << 20),
           "device memory left behind %lld bytes; at most the largest workspace + 10 %% (%zu)", used,
           largest + largest / 10);

  /* capture: a one-call run that needs a larger arena than the stream has is refused */
  cudaStream_t cs;
  GU_CUDA(cudaStreamCreate(&cs));
  mxf_gemm_amax_desc big = desc_of(&d, MAXM, d.c, d.amax);
  GU_CUDA(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
  mxf_status st = mxf_gemm_amax(&big, cs);
  cudaGraph_t graph = NULL;
  cudaError_t ce = cudaStreamEndCapture(cs, &graph);
  TU_CHECK(st == MXF_ERR_NOT_SUPPORTED && strstr(mxf_last_error(), "captured") != NULL,
           "a new workspace during capture is refused with a message: %s (%s)", mxf_status_string(st),
           mxf_last_error());
  TU_CHECK(ce == cudaSuccess, "the capture ends cleanly after the refusal: %s", cudaGetErrorString(ce));
  if (graph) cudaGraphDestroy(graph);
  /* warmed up on that stream first, the same call captures and replays */
  GU_MXF_OK(mxf_gemm_amax(&big, cs));
  GU_CUDA(cudaStreamSynchronize(cs));
  GU_CUDA(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
  st = mxf_gemm_amax(&big, cs);
  GU_CUDA(cudaStreamEndCapture(cs, &graph));
  TU_CHECK(st == MXF_OK, "after a warm-up the one call captures: %s", mxf_last_error());
  if (st == MXF_OK) {
    cudaGraphExec_t ex;
    GU_CUDA(cudaGraphInstantiate(&ex, graph, 0));
    GU_CUDA(cudaGraphLaunch(ex, cs));
    GU_CUDA(cudaStreamSynchronize(cs));
    GU_CUDA(cudaGraphExecDestroy(ex));
  }
  if (graph) cudaGraphDestroy(graph);
  mxf_plan_cache_clear();
  GU_CUDA(cudaDeviceSynchronize());
  TU_CHECK(mxf_plan_cache_workspace_bytes() == 0, "clear frees the arenas");
  GU_CUDA(cudaStreamDestroy(cs));
  GU_CUDA(cudaStreamDestroy(s));
  cudaFree(d.a), cudaFree(d.b), cudaFree(d.sa), cudaFree(d.sb), cudaFree(d.c), cudaFree(d.c2);
  cudaFree(d.amax), cudaFree(d.amax2);
  free(h), free(hc), free(hc2);
}
#endif

int main(void) {
  int rc = gu_skip_if_unavailable("test_workspace_gpu");
  if (rc) return rc;
#if defined(MXF_WITH_CUDA)
  tu_rng rng;
  tu_rng_init(&rng, tu_seed());
  run(&rng);
#endif
  return tu_finish("test_workspace_gpu");
}
