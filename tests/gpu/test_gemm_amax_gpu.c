/*
 * test_gemm_amax_gpu.c — gemm_amax on the CUDA backend against the CPU backend and an
 * f64 oracle (SPEC §1, §5). Skips (exit 77) without CUDA or without a device.
 *
 * Each case builds one random problem on the host (seed printed; replay with MXF_SEED),
 * runs it on the CPU backend (host tensors) and on the CUDA backend (device copies of the
 * same bytes, C and amax poisoned with 0xA5 first), and checks the CUDA result
 *   - against the f64 oracle written here (decoded values from formats.h, the SF offset
 *     from the SPEC §1.1 formula), every element judged by SPEC §5 through
 *     tools/judge.h: bit for bit where no f32 summation order can change the rounding
 *     (determined), between the codes of ref ± δ elsewhere (f32 C: within δ + ulp(ref));
 *     narrower C >= 99.9 % equal to encode(ref); amax within relative 1e-6·sqrt(K), NaN
 *     exactly when ref has a NaN;
 *   - against the CPU backend: the same NaN positions, the same amax class (NaN / inf /
 *     finite);
 *   - C's padding bytes (between rows and batches, the other nibble of e2m1) untouched.
 * Outside the exactness window (scale bytes 0, 1, 253, 254) a sanity bound replaces the
 * contract: NaN where the CPU has NaN, finite values within 1e-5·Σ|terms| of the CPU.
 *
 * Coverage: MXFP8 (e4m3, e5m2), MXFP4, NVFP4 (ue4m3 / 16) and e2m1 + e8m0 / 16 x every C
 * dtype x compact / swizzled SF x k/m-major A x k/n-major B x n/m-major C x padded
 * leading dims and batch strides x alpha x overwrite / accumulate (previous amax -1,
 * -0, NaN, large, small); shapes 300x200x96, 1x4096x1024, L=3, K=33 and random ones
 * that are multiples of nothing; NaN / inf codes and NaN scales; scale ranges that do and
 * do not qualify for the sm_90a kernel's f16 path. On a cc 9.0 device every case runs
 * five times, the kernel choice overridden through MXF_CONFIG (docs/kernels/README.md): with
 * the default choice (the sm_90a kernel swaps A and B for few rows of A), with the sm_90a
 * kernel's f16 path enabled for any tile count (f16=on), with its B pre-pass enabled for
 * any tile count (bpre=on, converting in the large problems' groups of 8 stages,
 * bcwide=on; the small problems of the other modes take groups of 2), these two unswapped
 * (swap=off), with A and B swapped for any M (swap=on: C written transposed; wg3=on:
 * 128-column tiles on three consumer warpgroups wherever allowed; each plan of this mode
 * runs under another MXF_CONFIG than it was made with, which a run must not read) and with
 * the portable kernel forced (gemm=portable); the mixed pairs once more with the
 * weight-streaming kernel put first (gemm=gemv). MXF_GPU_TEST_SMALL=1 keeps only small
 * cases; MXF_GPU_TEST_MODES=default,gemv,... only the named modes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats.h"
#include "gpu_util.h"
#include "judge.h"
#include "mxfuse.h"
#include "testutil.h"

#if defined(MXF_WITH_CUDA)

enum { SP_NONE, SP_NANINF, SP_EXTREME };

typedef struct gcase {
  int64_t m, n, k, l;
  mxf_dtype fa, fb;   /* formats of A (bf16 or MX) and B (MX) */
  mxf_dtype sfa, sfb; /* their scales' formats (sfa unused with a bf16 A: no scales) */
  int sf_vec;
  int sfa_swz, sfb_swz;
  int a_mmajor, b_nmajor, c_mmajor;
  int pad;
  mxf_dtype c;
  int use_alpha;
  float alpha;
  int accumulate;
  float prev; /* previous amax contents when accumulating */
  int special;
  int sf_lo, sf_hi;   /* e8m0 scale bytes of A drawn from [sf_lo, sf_hi] (0, 0: the default range) */
  int sfb_lo, sfb_hi; /* and of B */
  int widen;          /* widen one A row's and one B row's scale bytes (see run_all, 8.) */
} gcase;

typedef struct gprob {
  int64_t as[3], bs[3], cs[3]; /* strides in values: (row, col, batch) */
  int64_t kb;
  size_t a_bytes, b_bytes, c_bytes, sfa_bytes, sfb_bytes;
  uint8_t *a, *b, *sfa, *sfb;
  mxj_ref *ref; /* (l, m, n): the judge's reference and bound */
  double *asum; /* extreme scales: Σ|terms| per element, for the sanity bound */
  double *tiny; /* extreme scales: allowance for operands below 2^-126 (inf: one met an f32 overflow) */
} gprob;

static const char *kernel_mode = "default";
/* When set: MXF_CONFIG during each run, another than the plan was made with (plans keep
 * their choice; a run reads no override). */
static const char *run_config;
static long kernel_counts[5]; /* sm90, portable, gemv, refused, other */
static long g_equal[MXF_DTYPE_COUNT], g_total[MXF_DTYPE_COUNT], g_undet[MXF_DTYPE_COUNT];

/* ------------------------------------------------------------ helpers */
static int64_t rup(int64_t v, int64_t to) { return (v + to - 1) / to * to; }
static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int ab_bits(mxf_dtype ab) { return ab == MXF_E2M1 ? 4 : ab == MXF_BF16 ? 16 : 8; }
static int c_bits(mxf_dtype c) {
  return c == MXF_F32 ? 32 : (c == MXF_F16 || c == MXF_BF16) ? 16 : c == MXF_E2M1 ? 4 : 8;
}

/* SPEC §1.1, written out here rather than taken from the library. */
static int64_t sf_offset(int swz, int64_t r, int64_t kb, int64_t l, int64_t mn, int64_t kbs) {
  if (!swz) return (l * mn + r) * kbs + kb;
  int64_t R = cdiv(mn, 128), Kq = cdiv(kbs, 4);
  return l * R * Kq * 512 + ((r / 128) * Kq + kb / 4) * 512 + (r % 32) * 16 + ((r / 32) % 4) * 4 + (kb % 4);
}
static size_t sf_size(int swz, int64_t mn, int64_t kbs, int64_t l) {
  return swz ? (size_t)(l * cdiv(mn, 128) * cdiv(kbs, 4) * 512) : (size_t)(l * mn * kbs);
}

static mxf_tensor sf_tensor(int swz, void *data, mxf_dtype dt, int64_t mn, int64_t kbs, int64_t l,
                            int32_t dev) {
  mxf_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dt;
  t.device = dev;
  if (swz) {
    int64_t s[6] = {l, cdiv(mn, 128), cdiv(kbs, 4), 32, 4, 4};
    t.ndim = 6;
    for (int i = 0; i < 6; ++i)
      t.shape[i] = s[i];
  } else {
    t.ndim = 3, t.shape[0] = l, t.shape[1] = mn, t.shape[2] = kbs;
  }
  return t;
}

/* Strides of a (rows, cols, l) matrix: unit stride along cols when col_unit, leading
 * dim and batch stride rounded to 16 bytes, padded at random when asked. */
static void mat_layout(tu_rng *r, int64_t rows, int64_t cols, int64_t l, int bits, int col_unit, int pad,
                       int64_t s[3], size_t *bytes) {
  int64_t per16 = 128 / bits;
  int64_t inner = col_unit ? cols : rows, outer = col_unit ? rows : cols;
  int64_t ld = rup(inner + (pad ? tu_range(r, 0, 40) : 0), per16);
  int64_t span = (outer - 1) * ld + inner;
  int64_t ls = rup(span + (pad ? tu_range(r, 0, 70) : 0), per16);
  s[0] = col_unit ? ld : 1;
  s[1] = col_unit ? 1 : ld;
  s[2] = ls;
  *bytes = (size_t)(((l - 1) * ls + span) * bits + 7) / 8 + 16;
}

static mxf_tensor mat_tensor(void *data, mxf_dtype dt, int64_t rows, int64_t cols, int64_t l,
                             const int64_t s[3], int32_t dev) {
  mxf_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dt;
  t.device = dev;
  t.ndim = 3;
  t.shape[0] = rows, t.shape[1] = cols, t.shape[2] = l;
  t.stride[0] = s[0], t.stride[1] = s[1], t.stride[2] = s[2];
  return t;
}

static uint16_t get_code(const uint8_t *buf, mxf_dtype ab, int64_t idx) {
  uint16_t h;
  if (ab == MXF_BF16) return memcpy(&h, buf + 2 * idx, 2), h;
  return ab == MXF_E2M1 ? mxf_e2m1_get(buf, idx) : buf[idx];
}
static void set_code(uint8_t *buf, mxf_dtype ab, int64_t idx, uint16_t c) {
  if (ab == MXF_E2M1)
    mxf_e2m1_set(buf, idx, (uint8_t)c);
  else if (ab == MXF_BF16)
    memcpy(buf + 2 * idx, &c, 2);
  else
    buf[idx] = (uint8_t)c;
}
static double decode_ab(mxf_dtype ab, uint16_t c) {
  return ab == MXF_BF16   ? mxf_bf16_to_f32(c)
         : ab == MXF_E4M3 ? mxf_e4m3_to_f32((uint8_t)c)
         : ab == MXF_E5M2 ? mxf_e5m2_to_f32((uint8_t)c)
                          : mxf_e2m1_to_f32((uint8_t)c);
}
static double decode_sf(mxf_dtype sf, uint8_t c) {
  return sf == MXF_E4M3 ? mxf_e4m3_to_f32(c) : mxf_e8m0_to_f32(c);
}

/* A random finite code; bf16: an activation (tu_bf16_activation). */
static uint16_t rand_code(tu_rng *r, mxf_dtype ab) {
  if (ab == MXF_BF16) return tu_bf16_activation(r);
  uint32_t u = tu_u32(r);
  if (ab == MXF_E2M1) return (uint8_t)(u & 0xF);
  uint8_t c = (uint8_t)u;
  if (ab == MXF_E4M3 && (c & 0x7F) == 0x7F) c ^= 0x01;
  if (ab == MXF_E5M2 && (c & 0x7F) >= 0x7C) c &= 0xBB; /* clears bit 2: exponent < 31 */
  return c;
}

/* A random scale byte inside the exactness window, magnitudes near 1 unless the case
 * names a range. */
static uint8_t rand_scale(tu_rng *r, const gcase *gc, int is_b) {
  const mxf_dtype sf = is_b ? gc->sfb : gc->sfa;
  if (sf == MXF_E8M0 && gc->sf_hi)
    return (uint8_t)(is_b ? tu_range(r, gc->sfb_lo, gc->sfb_hi) : tu_range(r, gc->sf_lo, gc->sf_hi));
  if (sf == MXF_E8M0) return (uint8_t)tu_range(r, 118, 136);
  uint8_t c = (uint8_t)tu_range(r, 0x08, 0x50); /* ue4m3: 2^-6 .. 2^3, subnormals too */
  if (tu_range(r, 0, 19) == 0) c |= 0x80;       /* a negative scale now and then */
  return c;
}

static void fill_operand(tu_rng *r, const gcase *gc, int is_b, uint8_t *buf, size_t bytes, uint8_t *sf,
                         size_t sf_bytes, int sf_swz, int64_t rows, const int64_t s[3], int64_t kb) {
  const mxf_dtype f = is_b ? gc->fb : gc->fa;
  memset(buf, 0xFF, bytes); /* padding: NaN codes that must never be read */
  memset(sf, 0xFF, sf_bytes);
  for (int64_t l = 0; l < gc->l; ++l)
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t k = 0; k < gc->k; ++k)
        set_code(buf, f, l * s[2] + i * s[0] + k * s[1], rand_code(r, f));
      for (int64_t b = 0; b < kb && f != MXF_BF16; ++b)
        sf[sf_offset(sf_swz, i, b, l, rows, kb)] = rand_scale(r, gc, is_b);
    }
}

/* NaN / inf codes and NaN scales at a few random places. */
static void inject_specials(tu_rng *r, const gcase *gc, gprob *p) {
  for (int t = 0; t < 3; ++t) {
    int64_t l = tu_range(r, 0, gc->l - 1), i = tu_range(r, 0, gc->m - 1), k = tu_range(r, 0, gc->k - 1);
    int64_t idx = l * p->as[2] + i * p->as[0] + k * p->as[1];
    if (gc->fa == MXF_E4M3) set_code(p->a, gc->fa, idx, t & 1 ? 0xFF : 0x7F);
    if (gc->fa == MXF_E5M2) set_code(p->a, gc->fa, idx, t == 0 ? 0x7E : t == 1 ? 0x7C : 0xFC);
    if (gc->fa == MXF_BF16) set_code(p->a, gc->fa, idx, t == 0 ? 0x7FC1 : t == 1 ? 0x7F80 : 0xFF80);
  }
  {
    int64_t l = tu_range(r, 0, gc->l - 1), j = tu_range(r, 0, gc->n - 1), b = tu_range(r, 0, p->kb - 1);
    p->sfb[sf_offset(gc->sfb_swz, j, b, l, gc->n, p->kb)] = gc->sfb == MXF_E4M3 ? 0x7F : 0xFF;
  }
}

/* Scale bytes outside the exactness window (e8m0 only: every ue4m3 product is exact). */
static void inject_extremes(tu_rng *r, const gcase *gc, gprob *p) {
  static const uint8_t ext[4] = {0, 1, 253, 254};
  for (int t = 0; t < 6; ++t) {
    int64_t l = tu_range(r, 0, gc->l - 1), b = tu_range(r, 0, p->kb - 1);
    if ((t & 1) || gc->fa == MXF_BF16) {
      int64_t j = tu_range(r, 0, gc->n - 1);
      p->sfb[sf_offset(gc->sfb_swz, j, b, l, gc->n, p->kb)] = ext[tu_range(r, 0, 3)];
    } else {
      int64_t i = tu_range(r, 0, gc->m - 1);
      p->sfa[sf_offset(gc->sfa_swz, i, b, l, gc->m, p->kb)] = ext[tu_range(r, 0, 3)];
    }
  }
}

/* One scale byte of an A row in the second row tile (batch 0) 25 binades below the range
 * and one of a B row in the second column tile (last batch) 25 above: those two tiles'
 * rows then span more than the sm90 kernel's f16 window, the others do not. */
static void widen_rows(tu_rng *r, const gcase *gc, gprob *p) {
  const int64_t i = gc->m > 128 ? tu_range(r, 128, gc->m < 256 ? gc->m - 1 : 255) : 0;
  const int64_t j = gc->n > 256 ? tu_range(r, 256, gc->n < 512 ? gc->n - 1 : 511) : 0;
  p->sfa[sf_offset(gc->sfa_swz, i, tu_range(r, 0, p->kb - 1), 0, gc->m, p->kb)] = (uint8_t)(gc->sf_lo - 25);
  p->sfb[sf_offset(gc->sfb_swz, j, tu_range(r, 0, p->kb - 1), gc->l - 1, gc->n, p->kb)] =
      (uint8_t)(gc->sfb_hi + 25);
}

/* f64 oracle: ref = alpha * Σ Â·B̂ with its bound (tools/judge.h); for extreme scales also
 * Σ|Â·B̂| and the allowance of dequantized values below 2^-126, which a GPU may round to
 * bf16's subnormal grid or flush (SPEC §1.2): each such term may be off by all of itself
 * plus 2^-133 times the other factor. A tiny value meeting an infinite (f32-overflowing)
 * one may give NaN instead of inf: no bound. */
static void oracle(const gcase *gc, gprob *p) {
  const int64_t M = gc->m, N = gc->n, K = gc->k, L = gc->l;
  double *ad = tu_malloc(sizeof(double) * (size_t)(M * K)), *bd = tu_malloc(sizeof(double) * (size_t)(N * K));
  double alpha = gc->use_alpha ? gc->alpha : 1.0;
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k)
        ad[i * K + k] =
            decode_ab(gc->fa, get_code(p->a, gc->fa, l * p->as[2] + i * p->as[0] + k * p->as[1])) *
            (gc->fa == MXF_BF16
                 ? 1.0
                 : decode_sf(gc->sfa, p->sfa[sf_offset(gc->sfa_swz, i, k / gc->sf_vec, l, M, p->kb)]));
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k)
        bd[j * K + k] =
            decode_ab(gc->fb, get_code(p->b, gc->fb, l * p->bs[2] + j * p->bs[0] + k * p->bs[1])) *
            decode_sf(gc->sfb, p->sfb[sf_offset(gc->sfb_swz, j, k / gc->sf_vec, l, N, p->kb)]);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double sa = 0.0, st = 0.0;
        const double *x = ad + i * K, *y = bd + j * K;
        for (int64_t k = 0; k < K && gc->special == SP_EXTREME; ++k) {
          double t = x[k] * y[k];
          sa += fabs(t);
          const double ax = fabs(x[k]), ay = fabs(y[k]), lo = 0x1p-126, hi = 0x1.fffffep127;
          if (ax < lo || ay < lo) {
            if ((ax < lo && ay > hi) || (ay < lo && ax > hi))
              st = INFINITY;
            else
              st += fabs(t) + 0x1p-133 * (ax + ay);
          }
        }
        p->ref[(l * M + i) * N + j] = mxj_gemm_ref(x, y, K, alpha);
        p->asum[(l * M + i) * N + j] = fabs(alpha) * sa;
        p->tiny[(l * M + i) * N + j] = fabs(alpha) * st;
      }
  }
  free(ad);
  free(bd);
}

static void describe(const gcase *gc, char *s, size_t n) {
  snprintf(s, n,
           "[%s] M=%lld N=%lld K=%lld L=%lld a=%s b=%s sf=%s,%s/%d sfa=%s sfb=%s A=%s B=%s C=%s/%s pad=%d "
           "alpha=%g acc=%d prev=%g special=%d scales=[%d,%d]/[%d,%d] widen=%d",
           kernel_mode, (long long)gc->m, (long long)gc->n, (long long)gc->k, (long long)gc->l,
           mxf_dtype_name(gc->fa), mxf_dtype_name(gc->fb), gc->fa == MXF_BF16 ? "-" : mxf_dtype_name(gc->sfa),
           mxf_dtype_name(gc->sfb), gc->sf_vec, gc->sfa_swz ? "swz" : "compact",
           gc->sfb_swz ? "swz" : "compact", gc->a_mmajor ? "m-major" : "k-major",
           gc->b_nmajor ? "n-major" : "k-major", mxf_dtype_name(gc->c), gc->c_mmajor ? "m-major" : "n-major",
           gc->pad, gc->use_alpha ? (double)gc->alpha : 1.0, gc->accumulate, (double)gc->prev, gc->special,
           gc->sf_lo, gc->sf_hi, gc->sfb_lo, gc->sfb_hi, gc->widen);
}

/* ------------------------------------------------------------ one case */
static void run_case(tu_rng *r, const gcase *gc) {
  char what[512];
  describe(gc, what, sizeof what);
  const int64_t M = gc->m, N = gc->n, K = gc->k, L = gc->l;
  gprob p;
  memset(&p, 0, sizeof p);
  p.kb = cdiv(K, gc->sf_vec);
  const int a_bf16 = gc->fa == MXF_BF16;
  mat_layout(r, M, K, L, ab_bits(gc->fa), !gc->a_mmajor, gc->pad, p.as, &p.a_bytes);
  mat_layout(r, N, K, L, ab_bits(gc->fb), !gc->b_nmajor, gc->pad, p.bs, &p.b_bytes);
  mat_layout(r, M, N, L, c_bits(gc->c), !gc->c_mmajor, gc->pad, p.cs, &p.c_bytes);
  p.sfa_bytes = a_bf16 ? 16 : sf_size(gc->sfa_swz, M, p.kb, L); /* bf16 A: none (16 unused bytes) */
  p.sfb_bytes = sf_size(gc->sfb_swz, N, p.kb, L);
  p.a = tu_malloc(p.a_bytes);
  p.b = tu_malloc(p.b_bytes);
  p.sfa = tu_malloc(p.sfa_bytes);
  p.sfb = tu_malloc(p.sfb_bytes);
  fill_operand(r, gc, 0, p.a, p.a_bytes, p.sfa, p.sfa_bytes, gc->sfa_swz, M, p.as, p.kb);
  fill_operand(r, gc, 1, p.b, p.b_bytes, p.sfb, p.sfb_bytes, gc->sfb_swz, N, p.bs, p.kb);
  if (gc->special == SP_NANINF) inject_specials(r, gc, &p);
  if (gc->special == SP_EXTREME) inject_extremes(r, gc, &p);
  if (gc->widen) widen_rows(r, gc, &p);
  const size_t nout = (size_t)(M * N * L);
  p.ref = tu_malloc(sizeof(mxj_ref) * nout);
  p.asum = tu_malloc(sizeof(double) * nout);
  p.tiny = tu_malloc(sizeof(double) * nout);
  oracle(gc, &p);

  /* descriptors: host (CPU backend) and device (CUDA backend) */
  uint8_t *c_cpu = tu_malloc(p.c_bytes), *c_gpu = tu_malloc(p.c_bytes);
  memset(c_cpu, 0xA5, p.c_bytes);
  float amax_cpu = gc->prev, amax_gpu;
  mxf_gemm_amax_desc d;
  memset(&d, 0, sizeof d);
  d.sf_vec = gc->sf_vec;
  d.flags = gc->accumulate ? MXF_AMAX_ACCUMULATE : 0u;
  int64_t one = 1;
  d.a = mat_tensor(p.a, gc->fa, M, K, L, p.as, MXF_DEVICE_CPU);
  d.b = mat_tensor(p.b, gc->fb, N, K, L, p.bs, MXF_DEVICE_CPU);
  d.c = mat_tensor(c_cpu, gc->c, M, N, L, p.cs, MXF_DEVICE_CPU);
  if (!a_bf16) d.sfa = sf_tensor(gc->sfa_swz, p.sfa, gc->sfa, M, p.kb, L, MXF_DEVICE_CPU);
  d.sfb = sf_tensor(gc->sfb_swz, p.sfb, gc->sfb, N, p.kb, L, MXF_DEVICE_CPU);
  d.amax = tu_tensor(&amax_cpu, MXF_F32, 1, &one);
  const float *alpha = gc->use_alpha ? &gc->alpha : NULL;

  mxf_plan *plan = NULL;
  int ok = 1;
  GU_MXF_OK(mxf_gemm_amax_plan(&plan, &d), ok = 0);
  if (ok) {
    size_t ws = mxf_plan_workspace_size(plan);
    void *w = ws ? tu_malloc(ws) : NULL;
    mxf_gemm_amax_args a = {p.a, p.b, a_bf16 ? NULL : p.sfa, p.sfb, c_cpu, &amax_cpu, alpha};
    GU_MXF_OK(mxf_gemm_amax_run(plan, &a, w, ws, NULL), ok = 0);
    free(w);
  }
  mxf_plan_destroy(plan);
  plan = NULL;

  /* the same bytes on the device */
  void *da = gu_to_device(p.a, p.a_bytes), *db = gu_to_device(p.b, p.b_bytes);
  void *dsfa = gu_to_device(p.sfa, p.sfa_bytes), *dsfb = gu_to_device(p.sfb, p.sfb_bytes);
  void *dc = gu_dmalloc(p.c_bytes);
  float *damax = gu_dmalloc(sizeof(float));
  gu_dpoison(dc, p.c_bytes, 0xA5);
  if (gc->accumulate)
    GU_CUDA(cudaMemcpy(damax, &gc->prev, sizeof(float), cudaMemcpyHostToDevice));
  else
    gu_dpoison(damax, sizeof(float), 0xA5);
  const int32_t dev = GU_TEST_DEVICE;
  d.a = mat_tensor(da, gc->fa, M, K, L, p.as, dev);
  d.b = mat_tensor(db, gc->fb, N, K, L, p.bs, dev);
  d.c = mat_tensor(dc, gc->c, M, N, L, p.cs, dev);
  if (!a_bf16) d.sfa = sf_tensor(gc->sfa_swz, dsfa, gc->sfa, M, p.kb, L, dev);
  d.sfb = sf_tensor(gc->sfb_swz, dsfb, gc->sfb, N, p.kb, L, dev);
  d.amax = tu_tensor(damax, MXF_F32, 1, &one);
  d.amax.device = dev;
  int gok = 1;
  GU_MXF_OK(mxf_gemm_amax_plan(&plan, &d), gok = 0; printf("  case %s\n", what));
  if (gok) {
    const char *kn = mxf_plan_backend(plan);
    kernel_counts[tu_kernel_is(kn, "cuda/sm90")       ? 0
                  : tu_kernel_is(kn, "cuda/portable") ? 1
                  : tu_kernel_is(kn, "cuda/gemv")     ? 2
                                                      : 4]++;
    size_t ws = mxf_plan_workspace_size(plan);
    void *w = ws ? gu_dmalloc(ws) : NULL;
    if (w) gu_dpoison(w, ws, 0xFF);
    cudaStream_t s;
    GU_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    mxf_gemm_amax_args a = {da, db, a_bf16 ? NULL : dsfa, dsfb, dc, damax, alpha};
    char plan_config[128] = "";
    if (run_config) {
      snprintf(plan_config, sizeof plan_config, "%s", getenv("MXF_CONFIG") ? getenv("MXF_CONFIG") : "");
      setenv("MXF_CONFIG", run_config, 1);
    }
    GU_MXF_OK(mxf_gemm_amax_run(plan, &a, w, ws, s), gok = 0; printf("  case %s\n", what));
    if (run_config) setenv("MXF_CONFIG", plan_config, 1);
    GU_CUDA(cudaStreamSynchronize(s));
    GU_CUDA(cudaStreamDestroy(s));
    if (w) GU_CUDA(cudaFree(w));
  } else {
    kernel_counts[3]++;
  }
  mxf_plan_destroy(plan);
  gu_to_host(c_gpu, dc, p.c_bytes);
  gu_to_host(&amax_gpu, damax, sizeof(float));
  GU_CUDA(cudaFree(da));
  GU_CUDA(cudaFree(db));
  GU_CUDA(cudaFree(dsfa));
  GU_CUDA(cudaFree(dsfb));
  GU_CUDA(cudaFree(dc));
  GU_CUDA(cudaFree(damax));

  if (ok && gok) {
    const int extreme = gc->special == SP_EXTREME;
    double ref_amax = 0.0;
    int ref_nan = 0;
    long bad = 0, nan_mismatch = 0;
    mxj_counts jc;
    mxj_counts_init(&jc);
    int ext_unbounded = 0;
    double ext_bound = 0.0;
    const int narrow = gc->c != MXF_F32;
    /* mask of C's logical bytes / nibbles, to check the padding stayed poisoned */
    uint8_t *mask = tu_malloc(p.c_bytes);
    memset(mask, 0, p.c_bytes);
    for (int64_t l = 0; l < L; ++l)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          const int64_t idx = l * p.cs[2] + i * p.cs[0] + j * p.cs[1], e = (l * M + i) * N + j;
          const int cb = c_bits(gc->c);
          if (cb == 4)
            mask[idx >> 1] |= (uint8_t)(0xF << ((idx & 1) * 4));
          else
            memset(mask + idx * cb / 8, 0xFF, (size_t)cb / 8);
          const mxj_ref *jr = &p.ref[e];
          const double ref = jr->ref;
          if (isnan(ref))
            ref_nan = 1;
          else if (fabs(ref) > ref_amax)
            ref_amax = fabs(ref);
          const uint32_t g = mxj_code_at(gc->c, c_gpu, idx), cpu = mxj_code_at(gc->c, c_cpu, idx);
          const float gv = mxj_decode(gc->c, g), cv = mxj_decode(gc->c, cpu);
          if (extreme) {
            /* no bound where a tiny value meets an overflowing one, or where f32 partial
             * sums may overflow (their order then decides between inf, -inf and NaN) */
            const double tiny = p.tiny[e], asum = p.asum[e];
            if (isinf(tiny) || asum > 1e37) {
              ext_unbounded = 1;
              continue;
            }
            if (tiny + 1e-5 * asum > ext_bound) ext_bound = tiny + 1e-5 * asum;
          }
          if (isnan(gv) != isnan(cv)) {
            if (++nan_mismatch <= 5)
              printf("  NaN mismatch at (%lld,%lld,%lld): gpu %g cpu %g ref %g\n", (long long)i, (long long)j,
                     (long long)l, (double)gv, (double)cv, ref);
            continue;
          }
          if (extreme) {
            /* sanity only: finite results near the CPU's, infinities where sums are huge */
            if (isnan(gv)) continue;
            const double bound = 1e-5 * p.asum[e] + p.tiny[e] + 1e-30 * (double)K;
            const int fine = (isinf(gv) || isinf(cv)) ? gv == cv : fabs((double)gv - (double)cv) <= bound;
            if (!fine && ++bad <= 5)
              printf("  extreme-scale mismatch at (%lld,%lld,%lld): gpu %g cpu %g\n", (long long)i,
                     (long long)j, (long long)l, (double)gv, (double)cv);
            continue;
          }
          if (mxj_gemm_judge(gc->c, jr, g, &jc, e) == MXJ_WRONG && jc.wrong <= 5)
            printf("  wrong at (%lld,%lld,%lld): gpu 0x%x (cpu 0x%x), f64 reference %.9g, bound %.3g\n",
                   (long long)i, (long long)j, (long long)l, g, cpu, ref, jr->delta);
        }
    long pad_bad = 0;
    for (size_t b = 0; b < p.c_bytes; ++b)
      if (((c_gpu[b] ^ 0xA5) & (uint8_t)~mask[b]) != 0) ++pad_bad;
    free(mask);

    TU_CHECK(nan_mismatch == 0, "%ld NaN positions differ from the CPU backend: %s", nan_mismatch, what);
    TU_CHECK(bad == 0, "%ld elements off the sanity bound: %s", bad, what);
    TU_CHECK(jc.wrong == 0, "%lld elements wrong by SPEC section 5: %s", (long long)jc.wrong, what);
    TU_CHECK(pad_bad == 0, "%ld padding bytes of C were written: %s", pad_bad, what);
    const long n_total = (long)mxj_counts_total(&jc), n_equal = (long)jc.equal;
    if (!extreme && narrow && n_total > 0) {
      /* SPEC's >= 99.9 % is a rate, checked per C dtype over the whole run in main();
       * one case only has to be close to it */
      TU_CHECK(n_total - n_equal <= 2 + n_total / 100, "only %ld of %ld codes equal encode(ref): %s", n_equal,
               n_total, what);
      g_equal[gc->c] += n_equal, g_total[gc->c] += n_total, g_undet[gc->c] += (long)jc.within;
    }
    /* amax */
    const int prev_nan = gc->accumulate && isnan(gc->prev);
    const double prev = gc->accumulate && !isnan(gc->prev) ? gc->prev : 0.0;
    const int want_nan = ref_nan || prev_nan;
    const double want_amax = ref_amax > prev ? ref_amax : prev;
    TU_CHECK(ext_unbounded || isnan(amax_gpu) == isnan(amax_cpu), "amax gpu %g vs cpu %g (NaN class): %s",
             (double)amax_gpu, (double)amax_cpu, what);
    if (extreme) {
      if (!ext_unbounded && !isnan(amax_gpu) && !isnan(amax_cpu))
        TU_CHECK((isinf(amax_gpu) || isinf(amax_cpu))
                     ? amax_gpu == amax_cpu
                     : fabs((double)amax_gpu - (double)amax_cpu) <= ext_bound + 1e-30 * (double)K,
                 "amax gpu %g vs cpu %g: %s", (double)amax_gpu, (double)amax_cpu, what);
    } else {
      TU_CHECK(mxj_amax_ok(amax_gpu, want_amax, want_nan, K) && (want_nan || amax_gpu >= 0),
               "amax %.9g; expected %.9g%s: %s", (double)amax_gpu, want_amax, want_nan ? " (NaN)" : "", what);
      if (!want_nan) TU_CHECK(!signbit(amax_gpu), "amax is -0 or negative: %s", what);
    }
  }

  free(p.a);
  free(p.b);
  free(p.sfa);
  free(p.sfb);
  free(p.ref);
  free(p.asum);
  free(p.tiny);
  free(c_cpu);
  free(c_gpu);
}

/* ------------------------------------------------------------ case generation */
typedef struct fmt {
  mxf_dtype fa, fb, sfa, sfb; /* sfa unused with a bf16 A */
  int sf_vec;
} fmt;
static const fmt k_formats[] = {
    {MXF_E4M3, MXF_E4M3, MXF_E8M0, MXF_E8M0, 32}, {MXF_E5M2, MXF_E5M2, MXF_E8M0, MXF_E8M0, 32},
    {MXF_E2M1, MXF_E2M1, MXF_E8M0, MXF_E8M0, 32}, {MXF_E2M1, MXF_E2M1, MXF_E4M3, MXF_E4M3, 16},
    {MXF_E2M1, MXF_E2M1, MXF_E8M0, MXF_E8M0, 16},
};
enum { N_FORMATS = sizeof k_formats / sizeof k_formats[0] };
/* SPEC §1.1's mixed pairs: bf16 A (no scales) and A, B of different MX formats */
static const fmt k_mixed[] = {
    {MXF_BF16, MXF_E2M1, MXF_E8M0, MXF_E8M0, 32}, {MXF_BF16, MXF_E4M3, MXF_E8M0, MXF_E8M0, 32},
    {MXF_BF16, MXF_E5M2, MXF_E8M0, MXF_E8M0, 32}, {MXF_BF16, MXF_E2M1, MXF_E8M0, MXF_E4M3, 16},
    {MXF_E4M3, MXF_E2M1, MXF_E8M0, MXF_E8M0, 32}, {MXF_E5M2, MXF_E2M1, MXF_E8M0, MXF_E8M0, 32},
    {MXF_E2M1, MXF_E4M3, MXF_E8M0, MXF_E8M0, 32}, {MXF_E4M3, MXF_E5M2, MXF_E8M0, MXF_E8M0, 32},
    {MXF_E2M1, MXF_E2M1, MXF_E4M3, MXF_E8M0, 16},
};
enum { N_MIXED = sizeof k_mixed / sizeof k_mixed[0] };
static const mxf_dtype k_cdtypes[] = {MXF_F32, MXF_F16, MXF_BF16, MXF_E4M3, MXF_E5M2, MXF_E2M1};

static gcase random_case(tu_rng *r, const fmt *f, mxf_dtype c, int64_t m, int64_t n, int64_t k, int64_t l) {
  gcase gc;
  memset(&gc, 0, sizeof gc);
  gc.m = m, gc.n = n, gc.k = k, gc.l = l;
  gc.fa = f->fa, gc.fb = f->fb, gc.sfa = f->sfa, gc.sfb = f->sfb, gc.sf_vec = f->sf_vec;
  gc.c = c;
  if (c == MXF_E2M1 && (n & 1)) gc.n = n + 1; /* e2m1 C: packed along N, N even */
  gc.sfa_swz = (int)tu_range(r, 0, 1);
  gc.sfb_swz = (int)tu_range(r, 0, 1);
  if (f->fa != MXF_E2M1) gc.a_mmajor = tu_range(r, 0, 2) == 0;
  if (f->fb != MXF_E2M1) gc.b_nmajor = tu_range(r, 0, 2) == 0;
  if (c != MXF_E2M1) gc.c_mmajor = tu_range(r, 0, 3) == 0;
  gc.pad = (int)tu_range(r, 0, 1);
  gc.use_alpha = tu_range(r, 0, 2) == 0;
  gc.alpha = (float)(tu_range(r, 0, 1) ? 0.375 : -1.75);
  gc.accumulate = tu_range(r, 0, 3) == 0;
  static const float prevs[5] = {-1.0f, -0.0f, 0.5f, 1e30f, 0.0f};
  gc.prev = prevs[tu_range(r, 0, 4)];
  if (gc.accumulate && tu_range(r, 0, 5) == 0) gc.prev = mxf_f32_from_bits(0xFFC00001u); /* a -NaN */
  return gc;
}

static int64_t even_if(int64_t k, const fmt *f) {
  return (f->fa == MXF_E2M1 || f->fb == MXF_E2M1) && (k & 1) ? k + 1 : k;
}

/* 9. the mixed pairs: every pair x two C dtypes on a random shape; decode shapes (few
 * rows of A against a wide B, K over many blocks), a larger shape with bf16 C and a
 * batched one (L = 3, tiles split along K); NaN / inf and extreme scales */
static void run_mixed(tu_rng *r, int small) {
  for (int fi = 0; fi < N_MIXED; ++fi) {
    const fmt *f = &k_mixed[fi];
    for (int ci = 0; ci < 6; ci += small ? 5 : 2) {
      gcase gc = random_case(r, f, k_cdtypes[(ci + fi) % 6], tu_range(r, 1, small ? 70 : 300),
                             tu_range(r, 1, small ? 70 : 300), even_if(tu_range(r, 1, small ? 90 : 260), f),
                             tu_range(r, 1, 3));
      run_case(r, &gc);
    }
    /* {2, 34000, 2112}: enough rows of B for the weight-streaming kernel to run one warp a
     * CTA without split-K, so a warp streams 33 chunks of 64 k and its ring wraps; the next
     * two: two 16-row tiles a warp, K split among 4 / 2 warps of a CTA (a partial last
     * warp; L = 2); the last: K past what one CTA's scales in shared memory hold, split
     * over two CTAs for that alone */
    static const int64_t dec[][4] = {{1, 2100, 1024, 1}, {16, 1000, 2048, 1}, {64, 700, 544, 2},
                                     {128, 515, 1056, 1}, {7, 4096, 96, 1},    {2, 34000, 2112, 1},
                                     {3, 8000, 1568, 1},  {1, 4500, 256, 2},   {1, 4300, 8256, 1}};
    for (int si = 0; si < 9; si += small ? 2 : 1) {
      gcase gc =
          random_case(r, f, si & 1 ? MXF_BF16 : MXF_F32, dec[si][0], dec[si][1], dec[si][2], dec[si][3]);
      if (si == 4) gc.special = SP_NANINF;
      run_case(r, &gc);
    }
    if (!small) {
      gcase gc = random_case(r, f, MXF_BF16, 600, 520, 320, 1);
      gc.a_mmajor = gc.b_nmajor = gc.c_mmajor = 0;
      run_case(r, &gc);
      gc = random_case(r, f, fi & 1 ? MXF_F32 : MXF_BF16, 1100, 300 + 2 * fi, 192, 3);
      gc.a_mmajor = gc.b_nmajor = gc.c_mmajor = 0;
      run_case(r, &gc);
      if (f->sfb == MXF_E8M0) {
        gc = random_case(r, f, MXF_F32, 50, 70, 96, 1);
        gc.special = SP_EXTREME, gc.c_mmajor = 0;
        run_case(r, &gc);
      }
    }
  }
}

static void run_all(tu_rng *r, int small) {
  /* 1. every format x every C dtype on a random small shape */
  for (int fi = 0; fi < N_FORMATS; ++fi)
    for (int ci = 0; ci < 6; ++ci) {
      if (small && ci != fi % 6 && ci != (fi + 3) % 6) continue; /* two C dtypes per format */
      const fmt *f = &k_formats[fi];
      int64_t m = tu_range(r, 1, small ? 70 : 300), n = tu_range(r, 1, small ? 70 : 300);
      int64_t k = even_if(tu_range(r, 1, small ? 80 : 200), f), l = tu_range(r, 1, 3);
      gcase gc = random_case(r, f, k_cdtypes[ci], m, n, k, l);
      run_case(r, &gc);
    }
  /* 2. the named shapes, each format, f32 and bf16 C */
  static const int64_t shapes[][4] = {{300, 200, 96, 1}, {1, 4096, 1024, 1}, {77, 45, 33, 3},
                                      {129, 257, 64, 2}, {128, 128, 32, 1},  {5, 3, 34, 1},
                                      {260, 9, 130, 3}};
  const int nshapes = small ? 0 : (int)(sizeof shapes / sizeof shapes[0]);
  for (int si = 0; si < nshapes; ++si)
    for (int fi = 0; fi < N_FORMATS; ++fi)
      for (int ci = 0; ci < 3; ci += 2) {
        const fmt *f = &k_formats[fi];
        gcase gc = random_case(r, f, k_cdtypes[ci], shapes[si][0], shapes[si][1], even_if(shapes[si][2], f),
                               shapes[si][3]);
        run_case(r, &gc);
      }
  /* 3. layouts exhaustively for MXFP8 on one odd shape */
  for (int lay = 0; lay < 16; lay += small ? 3 : 1) {
    gcase gc = random_case(r, &k_formats[lay & 1], lay & 8 ? MXF_BF16 : MXF_F32, small ? 37 : 133,
                           small ? 29 : 71, small ? 45 : 97, 2);
    gc.a_mmajor = (lay >> 1) & 1;
    gc.b_nmajor = (lay >> 2) & 1;
    gc.c_mmajor = (lay >> 3) & 1;
    gc.sfa_swz = lay & 1;
    gc.sfb_swz = !(lay & 1);
    gc.pad = 1;
    run_case(r, &gc);
  }
  /* 4. NaN / inf injection and extreme scale bytes, each format */
  for (int fi = 0; fi < N_FORMATS; ++fi)
    for (int sp = SP_NANINF; sp <= SP_EXTREME; ++sp) {
      const fmt *f = &k_formats[fi];
      if (sp == SP_EXTREME && f->sfb != MXF_E8M0) continue;
      gcase gc =
          random_case(r, f, tu_range(r, 0, 1) ? MXF_F32 : k_cdtypes[tu_range(r, 1, 5)], tu_range(r, 1, 90),
                      tu_range(r, 1, 90), even_if(tu_range(r, 1, 100), f), tu_range(r, 1, 2));
      gc.special = sp;
      if (sp == SP_EXTREME) gc.c = MXF_F32, gc.c_mmajor = 0;
      run_case(r, &gc);
    }
  /* 5. tiles wholly inside C next to edge tiles (the sm90 kernel stores those with wide
   * vector stores), padded or not, alpha or not, NaN / inf codes */
  static const int64_t whole[][4] = {{300, 600, 128, 1}, {256, 512, 64, 2}, {128, 384, 160, 2}};
  for (int si = small; si < 3; ++si)
    for (int fi = 0; fi < 3; fi += 2)
      for (int ci = 0; ci < 3; ++ci)
        for (int v = 0; v < 3; ++v) {
          if (small && (fi || ci == 1 || v == 1)) continue; /* f32 and bf16 */
          const fmt *f = &k_formats[fi];
          gcase gc = random_case(r, f, k_cdtypes[ci], whole[si][0], whole[si][1], whole[si][2], whole[si][3]);
          gc.c_mmajor = 0;
          gc.pad = v == 1;
          if (v == 2) gc.special = SP_NANINF;
          run_case(r, &gc);
        }
  /* 6. more tiles than a wave of 132 SMs (the H200): the sm90 kernel splits the last
   * partial wave's tiles along K (4 parts of 1 stage each with edge tiles, f32 C; 2 parts
   * of whole tiles, bf16 C, MXFP4) and sums the parts before the epilogue; with M <= 128
   * (A and B swapped, 128-column tiles) 2 parts of edge tiles (f16 C) and of whole tiles
   * (bf16 C) */
  if (!small) {
    gcase gc = random_case(r, &k_formats[0], MXF_F32, 129, 300, 200, 34);
    gc.a_mmajor = gc.b_nmajor = gc.c_mmajor = 0;
    run_case(r, &gc);
    gc = random_case(r, &k_formats[2], MXF_BF16, 256, 512, 128, 34);
    gc.c_mmajor = 0;
    gc.accumulate = 0;
    run_case(r, &gc);
    gc = random_case(r, &k_formats[1], MXF_BF16, 200, 260, 192, 34);
    gc.a_mmajor = gc.b_nmajor = gc.c_mmajor = 0;
    gc.sf_lo = gc.sfb_lo = 124, gc.sf_hi = gc.sfb_hi = 131; /* e5m2 on the f16 path (see 8.) */
    run_case(r, &gc);
    gc = random_case(r, &k_formats[0], MXF_F16, 100, 300, 200, 60);
    gc.a_mmajor = gc.b_nmajor = gc.c_mmajor = 0;
    run_case(r, &gc);
    gc = random_case(r, &k_formats[1], MXF_BF16, 128, 512, 128, 40);
    gc.a_mmajor = gc.b_nmajor = gc.c_mmajor = 0;
    run_case(r, &gc);
  }
  /* 7. two or more whole tiles per CTA: with 16-bit C the sm90 kernel writes a wide tile's
   * C into the unit's last two slots of its load ring and stores it from there while the
   * next unit's first stages load, also when the units have no more stages than that
   * (K = 96: 2 stages) or are split parts, and after the last unit; with NaN / inf codes
   * some tiles take the element-wise path between ring-stored ones. f32 C (through the
   * warps' own staging) on the same shapes */
  if (!small) {
    static const int64_t multi[][4] = {{1024, 8192, 96, 1}, {2048, 4096, 320, 1}, {1280, 2304, 200, 3},
                                       {1024, 8192, 96, 1}, {2048, 4096, 192, 1}, {1280, 2304, 320, 2}};
    static const mxf_dtype multi_c[] = {MXF_BF16, MXF_BF16, MXF_F16, MXF_F32, MXF_F32, MXF_F32};
    for (int si = 0; si < (int)(sizeof multi_c / sizeof multi_c[0]); ++si) {
      gcase gc = random_case(r, &k_formats[si % 3 == 1 ? 2 : 0], multi_c[si], multi[si][0], multi[si][1],
                             multi[si][2], multi[si][3]);
      gc.a_mmajor = gc.b_nmajor = gc.c_mmajor = 0;
      if (si % 3 == 2) gc.special = SP_NANINF;
      run_case(r, &gc);
    }
  }
  /* 8. the sm90 kernel's f16 path (fp8 codes, sm90_dequant.cuh): a tile takes it when
   * every row of its A and B tiles has scale bytes within the format's window (e4m3 21
   * binades, e5m2 8) around an exponent within 64 of 2^0; other tiles take the bf16 path.
   * Narrow scales (both formats on the f16 path) with one A and one B row widened so that
   * two tiles alone fall back; A and B scales far from 1 in opposite directions (products
   * near 1), on both sides of the exponent limit: e4m3 f16, f16, bf16, f16, bf16; e5m2
   * f16, f16, bf16, f16 (2^64), bf16. */
  static const int ranges[][4] = {
      {124, 131, 124, 131}, {70, 77, 176, 183}, {44, 51, 200, 207}, {184, 191, 66, 73}, {190, 197, 58, 65}};
  for (int fi = 0; fi < 2; ++fi)
    for (int ri = 0; ri < 5; ri += small ? 4 : 1) {
      gcase gc = random_case(r, &k_formats[fi], ri & 1 ? MXF_F32 : MXF_BF16, small ? 200 : 300,
                             small ? 300 : 600, small ? 64 : 256, 2);
      gc.a_mmajor = gc.b_nmajor = gc.c_mmajor = 0;
      gc.sf_lo = ranges[ri][0], gc.sf_hi = ranges[ri][1], gc.sfb_lo = ranges[ri][2],
      gc.sfb_hi = ranges[ri][3];
      gc.widen = ri == 0;
      run_case(r, &gc);
    }
  run_mixed(r, small);
  /* 10. amax accumulate with each kind of previous value */
  static const uint32_t prevs[] = {0xBF800000u /* -1 */,   0x80000000u /* -0 */,  0x7FC00000u /* NaN */,
                                   0x7149F2CAu /* 1e30 */, 0x3F000000u /* 0.5 */, 0x7F800000u /* inf */};
  for (int i = 0; i < 6; i += small ? 2 : 1) {
    gcase gc = random_case(r, &k_formats[i % N_FORMATS], MXF_F32, 33, 65, 64, 1);
    gc.accumulate = 1;
    gc.prev = mxf_f32_from_bits(prevs[i]);
    run_case(r, &gc);
  }
}

/* progress of the long run (minutes on the full cases): one line per kernel mode */
static time_t g_start;
static void phase_done(void) {
  printf("  mode %s done: %ld checks passed, %ld failed, %lld s\n", kernel_mode, tu_passed, tu_failed,
         (long long)(time(NULL) - g_start));
  fflush(stdout);
}

/* one kernel mode: its cases under MXF_CONFIG=config (none: the default choice; plans
 * made so, run under run_with when given), unless MXF_GPU_TEST_MODES leaves it out */
static void run_mode(tu_rng *r, int small, const char *mode, const char *config, const char *run_with,
                     void (*cases)(tu_rng *, int)) {
  if (!gu_mode_on(mode)) return;
  kernel_mode = mode;
  if (config) setenv("MXF_CONFIG", config, 1);
  else unsetenv("MXF_CONFIG");
  run_config = run_with;
  cases(r, small);
  phase_done();
  run_config = NULL;
}

int main(void) {
  int rc = gu_skip_if_unavailable("test_gemm_amax_gpu");
  if (rc) return rc;
  tu_rng r;
  tu_rng_init(&r, tu_seed());
  const int small = gu_small();
  const int cc = gu_device_cc();
  printf("device cc %d.%d%s\n", cc / 10, cc % 10, small ? " (small cases only)" : "");
  g_start = time(NULL);
  run_mode(&r, small, "default", NULL, NULL, run_all);
  if (cc == 90) {
    /* the sm_90a kernel's f16 path runs by default only with at least a wave of tiles:
     * force it so that the small cases take it (tiles whose rows qualify); unswapped */
    run_mode(&r, small, "sm90-f16", "swap=off,f16=on", NULL, run_all);
    /* the B pre-pass runs by default only with many rows of tiles: force it, with the
     * large problems' stage groups (geometry::bc_group) */
    run_mode(&r, small, "sm90-bpre", "swap=off,bpre=on,bcwide=on", NULL, run_all);
    /* A and B swapped (C written transposed) for any M, with 128- or 256-column tiles;
     * the narrow tiles on three consumer warpgroups wherever A's scales allow it (by
     * default only with more than a wave of 128-row tiles). Each run under a config
     * of another geometry (and workspace): the plan's choice must hold. */
    run_mode(&r, small, "sm90-swap", "swap=on,wg3=on", "swap=off,f16=on,gemm=portable", run_all);
    /* the default choice may have taken the sm_90a kernel: cover the portable one too */
    run_mode(&r, small, "portable", "gemm=portable", NULL, run_all);
    /* the mixed pairs' decode shapes above GEMV_M_MAX (16) rows take the sm_90a kernel by
     * default: the weight-streaming kernel on them too */
    run_mode(&r, small, "gemv", "gemm=gemv", NULL, run_mixed);
    unsetenv("MXF_CONFIG");
  }
  for (int ci = 1; ci < 6; ++ci) {
    const mxf_dtype c = k_cdtypes[ci];
    if (g_total[c] == 0) continue;
    printf("C %s: %ld of %ld codes equal encode(ref) (%ld undetermined, within the bound)\n",
           mxf_dtype_name(c), g_equal[c], g_total[c], g_undet[c]);
    TU_CHECK((double)g_equal[c] >= 0.999 * (double)g_total[c],
             "C %s: only %ld of %ld codes equal encode(ref)", mxf_dtype_name(c), g_equal[c], g_total[c]);
  }
  printf("kernels used: cuda/sm90 %ld, cuda/portable %ld, cuda/gemv %ld, other %ld, refused %ld\n",
         kernel_counts[0], kernel_counts[1], kernel_counts[2], kernel_counts[4], kernel_counts[3]);
  return tu_finish("test_gemm_amax_gpu");
}

#else /* built without CUDA */
int main(void) { return gu_skip_if_unavailable("test_gemm_amax_gpu"); }
#endif
