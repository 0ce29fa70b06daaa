/*
 * test_cpu_fp_env.c — the CPU backend computes in its own floating-point environment: a
 * caller whose thread flushes subnormals (x86 MXCSR flush-to-zero and denormals-are-zero,
 * as XLA's CPU threads set) gets the same bytes as one that does not, and has its state
 * back after the call. Data with tiny scales, so that decoded values, products and sums
 * are subnormal in f32; MXFP8 and bf16 x MXFP4, compact scales, f32 C, 1 and 2 threads.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxfuse.h"
#include "testutil.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>

enum { M = 33, N = 40, K = 96 };

static void run(mxf_dtype fa, mxf_dtype fb, const void *a, const uint8_t *sa, const void *b,
                const uint8_t *sb, float *c, float *amax) {
  const int64_t sha[2] = {M, K}, shb[2] = {N, K}, ssa[2] = {M, K / 32}, ssb[2] = {N, K / 32}, shc[2] = {M, N},
                sh1[1] = {1};
  mxf_gemm_amax_desc d;
  memset(&d, 0, sizeof d);
  d.a = tu_tensor((void *)a, fa, 2, sha);
  d.b = tu_tensor((void *)b, fb == MXF_E2M1 ? MXF_E2M1X2 : fb, 2, shb);
  if (fb == MXF_E2M1) d.b.shape[1] = K / 2;
  if (fa != MXF_BF16) d.sfa = tu_tensor((void *)sa, MXF_E8M0, 2, ssa);
  d.sfb = tu_tensor((void *)sb, MXF_E8M0, 2, ssb);
  d.c = tu_tensor(c, MXF_F32, 2, shc);
  d.amax = tu_tensor(amax, MXF_F32, 1, sh1);
  d.sf_vec = 32;
  const mxf_status st = mxf_gemm_amax(&d, NULL);
  TU_CHECK(st == MXF_OK, "gemm_amax: %s", mxf_last_error());
}

int main(void) {
  const char *core = tu_cpu_core_asked();
  if (core && strcmp(core, "c") != 0)
    return tu_skip("test_cpu_fp_env", "MXF_CONFIG asks for a vendor core, which keeps its own environment");
  tu_rng r;
  tu_rng_init(&r, tu_seed());
  static uint8_t a8[M * K], b8[N * K], b4[N * K / 2], sa[M * K / 32], sb[N * K / 32];
  static uint16_t a16[M * K];
  for (int i = 0; i < M * K; ++i)
    a8[i] = (uint8_t)tu_u32(&r), a16[i] = tu_bf16_activation(&r) & 0x87FFu;
  for (int i = 0; i < N * K; ++i)
    b8[i] = (uint8_t)tu_u32(&r);
  for (int i = 0; i < N * K / 2; ++i)
    b4[i] = (uint8_t)tu_u32(&r) & 0x77u;
  for (int i = 0; i < M * K / 32; ++i)
    sa[i] = (uint8_t)tu_range(&r, 1, 8); /* 2^-126 .. 2^-119 */
  for (int i = 0; i < N * K / 32; ++i)
    sb[i] = (uint8_t)tu_range(&r, 100, 130);
  for (int i = 0; i < M * K; ++i)
    if ((a8[i] & 0x7F) == 0x7F) a8[i] &= 0xF0; /* no NaN codes: NaN payloads may differ */
  for (int i = 0; i < N * K; ++i)
    if ((b8[i] & 0x7F) == 0x7F) b8[i] &= 0xF0;
  static float want[M * N], got[M * N];
  for (int pair = 0; pair < 2; ++pair) {
    const mxf_dtype fa = pair ? MXF_BF16 : MXF_E4M3, fb = pair ? MXF_E2M1 : MXF_E4M3;
    const void *a = pair ? (const void *)a16 : a8, *b = pair ? (const void *)b4 : b8;
    for (int threads = 1; threads <= 2; ++threads) {
      char nt[8];
      snprintf(nt, sizeof nt, "%d", threads);
      setenv("MXF_NUM_THREADS", nt, 1);
      float amax_want = 0, amax_got = 0;
      run(fa, fb, a, sa, b, sb, want, &amax_want);
      const unsigned before = _mm_getcsr();
      _mm_setcsr(before | 0x8040u); /* flush-to-zero, denormals-are-zero */
      run(fa, fb, a, sa, b, sb, got, &amax_got);
      const unsigned after = _mm_getcsr();
      _mm_setcsr(before);
      int64_t subnormal = 0;
      for (int i = 0; i < M * N; ++i)
        subnormal += want[i] != 0 && want[i] > -1.2e-38f && want[i] < 1.2e-38f;
      TU_CHECK(subnormal > 0, "%s: the data gives subnormal outputs (%lld)", pair ? "bf16 x MXFP4" : "MXFP8",
               (long long)subnormal);
      TU_CHECK(memcmp(want, got, sizeof want) == 0 && memcmp(&amax_want, &amax_got, sizeof amax_got) == 0,
               "%s, %d threads: C or amax differ under the caller's flush-to-zero",
               pair ? "bf16 x MXFP4" : "MXFP8", threads);
      TU_CHECK(after == (before | 0x8040u), "%s: the caller's MXCSR 0x%x came back as 0x%x",
               pair ? "bf16 x MXFP4" : "MXFP8", before | 0x8040u, after);
    }
  }
  return tu_finish("test_cpu_fp_env");
}
#else
int main(void) { return tu_skip("test_cpu_fp_env", "x86 only (MXCSR)"); }
#endif
