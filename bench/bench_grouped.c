/*
 * bench_grouped.c — the CPU benchmark's MoE case (part of mxf_bench_cpu): grouped_gemm_amax
 * against a loop of gemm_amax calls over the same groups, on DeepSeek-V3's MoE
 * up-projection on one expert-parallel rank (src/host_moe.h: 32 experts, N = 4096,
 * K = 7168, a random top-8 routing of T tokens, MXF_BENCH_MOE_T, default 256, with 4 of
 * the 32 experts empty), MXFP8 (e4m3 x e4m3, e8m0 per 32) and bf16 x MXFP4 (e2m1 B, e8m0
 * per 32), bf16 C. Both through the one-call form (plans cached, the loop's one per group
 * size), warm-up then the median of the timed runs, interleaved; the two C and amax must
 * agree bit for bit (one GEMM core, one summation order). Prints the times, their ratio
 * and the workspaces: the grouped plan's, and the loop's largest and sum over its plans.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "host_moe.h"
#include "mxfuse.h"

int mxf_bench_grouped(int runs);

static double ms_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* n bytes of random codes (a 1 MiB random block, repeated: the timing does not depend on
 * the values), no NaN or inf among them for fp8 (mask) */
static uint8_t *random_bytes(mxf_rng *r, size_t n, uint8_t mask, int bf16) {
  uint8_t *p = aligned_alloc(64, (n + 63) / 64 * 64);
  if (!p) return NULL;
  const size_t block = (size_t)1 << 20;
  for (size_t i = 0; i < n && i < block; ++i) {
    uint8_t b = (uint8_t)mxf_rng_u64(r);
    if (bf16 && (i & 1)) b = (uint8_t)(0x3C + (b & 3)); /* bf16 high byte: values near 1 */
    p[i] = b & mask;
  }
  for (size_t i = block; i < n; i += block)
    memcpy(p + i, p, n - i < block ? n - i : block);
  return p;
}

static mxf_tensor t2(void *d, mxf_dtype dt, int nd, int64_t a, int64_t b, int64_t c) {
  mxf_tensor t;
  memset(&t, 0, sizeof t);
  t.data = d, t.dtype = dt, t.ndim = nd, t.shape[0] = a, t.shape[1] = b, t.shape[2] = c;
  return t;
}

static int one_format(mxf_rng *r, int64_t tokens, int runs, int mxfp4) {
  const int64_t G = MXF_MOE_LOCAL, N = MXF_MOE_N, K = MXF_MOE_K, KB = K / 32;
  int32_t offs[MXF_MOE_LOCAL];
  const int64_t M = mxf_moe_route(r, tokens, offs, NULL);
  const mxf_dtype fa = mxfp4 ? MXF_BF16 : MXF_E4M3, fb = mxfp4 ? MXF_E2M1 : MXF_E4M3;
  const size_t a_bytes = (size_t)(M * K * (mxfp4 ? 2 : 1)), b_bytes = (size_t)(G * N * K / (mxfp4 ? 2 : 1));
  uint8_t *a = random_bytes(r, a_bytes, mxfp4 ? 0xFF : 0x77, mxfp4), *b = random_bytes(r, b_bytes, 0x77, 0);
  uint8_t *sfa = random_bytes(r, (size_t)(M * KB), 0x03, 0),
          *sfb = random_bytes(r, (size_t)(G * N * KB), 0x03, 0);
  uint16_t *c1 = aligned_alloc(64, (size_t)(M * N * 2)), *c2 = aligned_alloc(64, (size_t)(M * N * 2));
  if (!a || !b || !sfa || !sfb || !c1 || !c2) {
    fprintf(stderr, "bench: grouped: out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < (size_t)(M * KB); ++i)
    sfa[i] += 125; /* scale bytes 125..128 */
  for (size_t i = 0; i < (size_t)(G * N * KB); ++i)
    sfb[i] += 118;
  float amax1 = 0, amax2 = 0;
  mxf_grouped_gemm_amax_desc gd;
  memset(&gd, 0, sizeof gd);
  gd.a = t2(a, fa, 2, M, K, 0);
  gd.b = t2(b, fb, 3, G, N, K);
  if (!mxfp4) gd.sfa = t2(sfa, MXF_E8M0, 2, M, KB, 0);
  gd.sfb = t2(sfb, MXF_E8M0, 3, G, N, KB);
  gd.c = t2(c1, MXF_BF16, 2, M, N, 0);
  gd.amax = t2(&amax1, MXF_F32, 1, 1, 0, 0);
  gd.offs = t2(offs, MXF_I32, 1, G, 0, 0);
  gd.sf_vec = 32;
  size_t ws_grouped = 0, ws_loop_max = 0, ws_loop_sum = 0;
  if (mxf_grouped_gemm_amax_workspace_size(&gd, &ws_grouped) != MXF_OK) {
    fprintf(stderr, "bench: grouped: %s\n", mxf_last_error());
    return 1;
  }
  double tg[64], tl[64];
  int empty = 0;
  for (int round = -1; round < runs; ++round) {
    double t0 = ms_now();
    if (mxf_grouped_gemm_amax(&gd, NULL) != MXF_OK) {
      fprintf(stderr, "bench: grouped: %s\n", mxf_last_error());
      return 1;
    }
    double t1 = ms_now();
    amax2 = 0;
    int64_t r0 = 0;
    empty = 0;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t rows = offs[g] - r0;
      if (rows == 0) {
        ++empty;
        continue;
      }
      float am = 0;
      mxf_gemm_amax_desc d;
      memset(&d, 0, sizeof d);
      d.a = t2(a + r0 * K * (mxfp4 ? 2 : 1), fa, 2, rows, K, 0);
      d.b = t2(b + (size_t)(g * N * K / (mxfp4 ? 2 : 1)), fb, 2, N, K, 0);
      if (!mxfp4) d.sfa = t2(sfa + r0 * KB, MXF_E8M0, 2, rows, KB, 0);
      d.sfb = t2(sfb + g * N * KB, MXF_E8M0, 2, N, KB, 0);
      d.c = t2(c2 + r0 * N, MXF_BF16, 2, rows, N, 0);
      d.amax = t2(&am, MXF_F32, 1, 1, 0, 0);
      d.sf_vec = 32;
      if (mxf_gemm_amax(&d, NULL) != MXF_OK) {
        fprintf(stderr, "bench: gemm_amax loop: %s\n", mxf_last_error());
        return 1;
      }
      if (am > amax2) amax2 = am;
      if (round == -1) {
        size_t w = 0;
        mxf_gemm_amax_workspace_size(&d, &w);
        ws_loop_sum += w;
        ws_loop_max = w > ws_loop_max ? w : ws_loop_max;
      }
      r0 = offs[g];
    }
    double t2_ = ms_now();
    if (round >= 0) tg[round] = t1 - t0, tl[round] = t2_ - t1;
  }
  const int same = !memcmp(c1, c2, (size_t)(M * N * 2)) && amax1 == amax2;
  qsort(tg, (size_t)runs, sizeof *tg, cmp_d);
  qsort(tl, (size_t)runs, sizeof *tl, cmp_d);
  const double mg = tg[runs / 2], ml = tl[runs / 2];
  printf("%-22s T=%-5lld M=%-5lld %2d of %d experts empty  grouped %9.1f ms  loop %9.1f ms  ratio %.3f  "
         "workspace grouped %.2f MB, loop max %.2f MB / sum %.2f MB  %s\n",
         mxfp4 ? "bf16 x MXFP4 (e2m1)" : "MXFP8 (e4m3 x e4m3)", (long long)tokens, (long long)M, empty,
         (int)G, mg, ml, mg / ml, ws_grouped * 1e-6, ws_loop_max * 1e-6, ws_loop_sum * 1e-6,
         same ? "C and amax equal" : "C OR AMAX DIFFER");
  free(a), free(b), free(sfa), free(sfb), free(c1), free(c2);
  return same ? 0 : 1;
}

int mxf_bench_grouped(int runs) {
  int64_t tokens = 256;
  const char *env = getenv("MXF_BENCH_MOE_T");
  if (env && atoll(env) > 0) tokens = atoll(env);
  if (runs > 64) runs = 64;
  if (runs < 1) runs = 1;
  mxf_rng r;
  mxf_rng_init(&r, 52);
  printf(
      "\nCPU grouped_gemm_amax (DeepSeek-V3 MoE up-projection, one EP rank: %d experts, N=%d, K=%d, top-%d "
      "of %d), median of %d runs\n",
      MXF_MOE_LOCAL, MXF_MOE_N, MXF_MOE_K, MXF_MOE_TOPK, MXF_MOE_EXPERTS, runs);
  int bad = one_format(&r, tokens, runs, 0);
  bad |= one_format(&r, tokens, runs, 1);
  mxf_plan_cache_clear();
  return bad;
}
