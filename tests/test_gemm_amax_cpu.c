/*
 * test_gemm_amax_cpu.c — gemm_amax on the CPU backend against an f64 oracle (SPEC §1, §5).
 *
 * The oracle is written here: a plain triple loop over values decoded with formats.h,
 * the scale-factor offsets taken from the SPEC §1.1 formula (not from the library).
 * Requests go through the public API (plan + run, and the one-call form).
 *
 * Coverage: every supported format combination (e4m3 / e5m2 / e2m1 operands in one format
 * or mixed, a bf16 A without scales, e8m0 / ue4m3 scales each operand its own, sf_vec
 * 32 / 16) x all six C dtypes x SF layouts (compact 3-D, compact
 * 2-D, swizzled physical, swizzled logical 6-D) x A/B/C majors, with alpha and
 * accumulate toggled, random shapes that are multiples of nothing (K just above a block
 * boundary included), padded leading dims and batch strides, L up to 3, thread counts
 * 1 / 2 / 3, and special inputs: NaN codes, NaN scales, inf codes, extreme scale bytes,
 * tiny scale bytes (products below 2^-126, which the onednn core must leave to f32),
 * chunked runs (more rows than one X chunk); B packed (SPEC §7) for every combination at
 * decode sizes and beyond (section 6 of main), its buffer ending where an inaccessible
 * page begins (a kernel that reads past it faults). All padding (SF rows >= MN, k-blocks >= Kb,
 * operand bytes between rows and batches) is 0xFF and the workspace is 0xFF (NaN) before
 * each run; C and amax are poisoned and C's padding must come back untouched.
 *
 * Contract checked (SPEC §5), every element judged by judge/judge.h: where no f32
 * summation order can change the rounding (determined) C equals that code bit for bit,
 * elsewhere it lies between the codes of ref ± δ (f32 C: within δ + ulp(ref)), NaN
 * exactly where ref is NaN; >= 99.9 % of narrow codes equal encode(ref) per C dtype over
 * the whole run (a single case: at most 1 % + 2 differ); amax within relative
 * 1e-6·sqrt(K), NaN exactly when ref has a NaN; accumulate = max(old, new) with NaN
 * propagating from either side. Undetermined elements are counted and printed. Outside
 * the exactness window (extreme scale bytes) a sanity bound replaces the contract: each
 * element within the encodings of ref ± 1e-5·Σ|terms|, skipped where an f32
 * intermediate may overflow (a dequantized value or Σ|terms| >= 2^120).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "judge.h"
#include "mxfuse.h"
#include "testutil.h"

enum { SF_COMPACT3, SF_COMPACT2, SF_SWZ_PHYS, SF_SWZ_LOGICAL, SF_FORMS };
/* SP_TINY: e8m0 scale bytes 60..66, so that most products lie below 2^-126 (f32
 * subnormal partial sums, exact in f32; what bf16 units would flush) */
enum { SP_NONE, SP_NAN_CODE, SP_NAN_SCALE, SP_INF, SP_EXTREME, SP_TINY, SP_COUNT };

typedef struct gcase {
  int64_t m, n, k, l;
  mxf_dtype fa, fa_desc;   /* A's format (bf16 or MX); how a is described (e2m1: values, e2m1x2 or u8) */
  mxf_dtype fb, fb_desc;   /* B's format and description */
  mxf_dtype sfa, sfa_desc; /* e8m0 or e4m3 (none for a bf16 A); described as e8m0 / u8 / i8 / e4m3 */
  mxf_dtype sfb, sfb_desc;
  int sf_vec;
  int sfa_form, sfb_form;
  int a_mmajor, b_nmajor, c_mmajor;
  mxf_dtype c, c_desc;
  int use_alpha;
  float alpha;
  int accumulate;
  int one_call;
  int special;
  int threads; /* 0: default, else MXF_NUM_THREADS */
  int no_rate; /* its codes stay out of the per-dtype rate of main() (one large case would decide it) */
  int packed;  /* B packed (SPEC §7) and taken with MXF_AMAX_B_PACKED */
} gcase;

/* ------------------------------------------------------------ helpers */
static int64_t rup(int64_t v, int64_t to) { return (v + to - 1) / to * to; }
static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static void *xalloc(size_t n) {
  void *p = aligned_alloc(64, rup((int64_t)(n ? n : 1), 64));
  if (!p) {
    fprintf(stderr, "test: out of memory\n");
    exit(2);
  }
  return p;
}

/* SPEC §1.1 swizzled offset, written out independently of formats.h. */
static int64_t spec_swz(int64_t r, int64_t kb, int64_t l, int64_t mn, int64_t kbs) {
  int64_t R = cdiv(mn, 128), Kq = cdiv(kbs, 4);
  return l * R * Kq * 512 + ((r / 128) * Kq + kb / 4) * 512 + (r % 32) * 16 + ((r / 32) % 4) * 4 + (kb % 4);
}

static int64_t sf_off(int form, int64_t r, int64_t kb, int64_t l, int64_t mn, int64_t kbs) {
  if (form == SF_COMPACT3 || form == SF_COMPACT2) return (l * mn + r) * kbs + kb;
  return spec_swz(r, kb, l, mn, kbs);
}

static size_t sf_bytes(int form, int64_t mn, int64_t kbs, int64_t l) {
  if (form == SF_COMPACT3 || form == SF_COMPACT2) return (size_t)(l * mn * kbs);
  return (size_t)(l * cdiv(mn, 128) * cdiv(kbs, 4) * 512);
}

static mxf_tensor sf_tensor(int form, void *data, mxf_dtype dt, int64_t mn, int64_t kbs, int64_t l) {
  mxf_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dt;
  int64_t R = cdiv(mn, 128), Kq = cdiv(kbs, 4);
  switch (form) {
  case SF_COMPACT3: t.ndim = 3, t.shape[0] = l, t.shape[1] = mn, t.shape[2] = kbs; break;
  case SF_COMPACT2: t.ndim = 2, t.shape[0] = mn, t.shape[1] = kbs; break;
  case SF_SWZ_PHYS: {
    int64_t s[6] = {l, R, Kq, 32, 4, 4};
    t.ndim = 6;
    for (int i = 0; i < 6; ++i)
      t.shape[i] = s[i];
    break;
  }
  default: {
    int64_t s[6] = {32, 4, R, 4, Kq, l}, st[6] = {16, 4, Kq * 512, 1, 512, R * Kq * 512};
    t.ndim = 6;
    for (int i = 0; i < 6; ++i)
      t.shape[i] = s[i], t.stride[i] = st[i];
    break;
  }
  }
  return t;
}

static double decode_ab(mxf_dtype ab, uint16_t c) {
  return ab == MXF_BF16   ? mxf_bf16_to_f32(c)
         : ab == MXF_E4M3 ? mxf_e4m3_to_f32((uint8_t)c)
         : ab == MXF_E5M2 ? mxf_e5m2_to_f32((uint8_t)c)
                          : mxf_e2m1_to_f32((uint8_t)c);
}
/* values per 16 bytes, and bytes of n values */
static int64_t per16(mxf_dtype ab) { return ab == MXF_E2M1 ? 32 : ab == MXF_BF16 ? 8 : 16; }
static size_t ab_bytes(mxf_dtype ab, int64_t n) {
  return (size_t)(ab == MXF_E2M1 ? cdiv(n, 2) : ab == MXF_BF16 ? 2 * n : n);
}
static double decode_sf(mxf_dtype sf, uint8_t c) {
  return sf == MXF_E4M3 ? mxf_e4m3_to_f32(c) : mxf_e8m0_to_f32(c);
}

static int c_bits(mxf_dtype c) {
  return c == MXF_F32 ? 32 : (c == MXF_F16 || c == MXF_BF16) ? 16 : c == MXF_E2M1 ? 4 : 8;
}

/* ------------------------------------------------------------ one case */
typedef struct buffers {
  uint8_t *a, *b, *sfa, *sfb, *c;
  size_t a_n, b_n, sfa_n, sfb_n, c_n;
  int64_t a_ms, a_ks, a_ls, b_ns, b_ks, b_ls, c_ms, c_ns, c_ls; /* value strides */
  uint8_t *c_live; /* per C storage unit (element, or nibble for e2m1): 1 if logical */
} buffers;

static uint8_t rand_code(tu_rng *r, mxf_dtype ab) {
  /* mostly quantized normal data (codes cluster in the top binades of the format, as
   * MX-quantized tensors do), sometimes any finite code (subnormals, extremes) */
  if (tu_range(r, 0, 6)) {
    double x = tu_normal(r);
    return ab == MXF_E4M3   ? mxf_f32_to_e4m3((float)(x * 96.0))
           : ab == MXF_E5M2 ? mxf_f32_to_e5m2((float)(x * 8192.0))
                            : mxf_f32_to_e2m1((float)(x * 2.0));
  }
  for (;;) {
    uint8_t c = (uint8_t)tu_u32(r);
    if (ab == MXF_E2M1) return c & 0xF;
    if (ab == MXF_E4M3 && (c & 0x7F) == 0x7F) continue;
    if (ab == MXF_E5M2 && (c & 0x7F) >= 0x7C) continue;
    return c;
  }
}

static uint8_t rand_scale(tu_rng *r, mxf_dtype sf, int special) {
  const int extreme = special == SP_EXTREME;
  if (sf == MXF_E8M0 && special == SP_TINY) return (uint8_t)tu_range(r, 60, 66);
  if (sf == MXF_E4M3) {
    if (extreme) {
      static const uint8_t ex[] = {0x00, 0x01, 0x7E, 0xFE, 0x80, 0x08, 0x7F};
      if (tu_range(r, 0, 2) == 0) return ex[tu_range(r, 0, 6)];
    }
    for (;;) { /* ue4m3: sign included, zero allowed, NaN excluded */
      uint8_t c = (uint8_t)tu_u32(r);
      if ((c & 0x7F) == 0x7F) continue;
      if ((c & 0x7F) > 0x58 && tu_range(r, 0, 3)) continue;
      if ((c & 0x80) && tu_range(r, 0, 3)) continue; /* mostly positive, as in practice */
      return c;
    }
  }
  if (extreme && tu_range(r, 0, 2) == 0) {
    static const uint8_t ex[] = {0, 1, 253, 254, 0xFF};
    return ex[tu_range(r, 0, 4)];
  }
  return (uint8_t)tu_range(r, 123, 131);
}

static void put_ab(mxf_dtype ab, uint8_t *p, int64_t i, uint16_t code) {
  if (ab == MXF_E2M1)
    mxf_e2m1_set(p, i, (uint8_t)code);
  else if (ab == MXF_BF16)
    memcpy(p + 2 * i, &code, 2);
  else
    p[i] = (uint8_t)code;
}
static uint16_t get_ab(mxf_dtype ab, const uint8_t *p, int64_t i) {
  uint16_t h;
  if (ab == MXF_BF16) return memcpy(&h, p + 2 * i, 2), h;
  return ab == MXF_E2M1 ? mxf_e2m1_get(p, i) : p[i];
}

static void fill_operand(tu_rng *r, const gcase *g, mxf_dtype ab, int64_t mn, int64_t ms, int64_t ks,
                         int64_t ls, uint8_t *p) {
  for (int64_t l = 0; l < g->l; ++l)
    for (int64_t i = 0; i < mn; ++i)
      for (int64_t k = 0; k < g->k; ++k)
        put_ab(ab, p, i * ms + k * ks + l * ls, ab == MXF_BF16 ? tu_bf16_activation(r) : rand_code(r, ab));
}

static void fill_sf(tu_rng *r, const gcase *g, mxf_dtype sf, int form, int64_t mn, uint8_t *p) {
  int64_t kbs = cdiv(g->k, g->sf_vec);
  for (int64_t l = 0; l < g->l; ++l)
    for (int64_t i = 0; i < mn; ++i)
      for (int64_t kb = 0; kb < kbs; ++kb)
        p[sf_off(form, i, kb, l, mn, kbs)] = rand_scale(r, sf, g->special);
}

static const char *dn(mxf_dtype d) { return mxf_dtype_name(d); }

static void describe(const gcase *g, char *buf, size_t n) {
  snprintf(buf, n,
           "M=%lld N=%lld K=%lld L=%lld a=%s(%s) b=%s(%s) sfa=%s(%s) sfb=%s(%s) vec=%d sfa=%d sfb=%d a_m=%d "
           "b_n=%d "
           "c_m=%d c=%s(%s) alpha=%s%g acc=%d onecall=%d special=%d threads=%d",
           (long long)g->m, (long long)g->n, (long long)g->k, (long long)g->l, dn(g->fa), dn(g->fa_desc),
           dn(g->fb), dn(g->fb_desc), g->fa == MXF_BF16 ? "none" : dn(g->sfa),
           g->fa == MXF_BF16 ? "-" : dn(g->sfa_desc), dn(g->sfb), dn(g->sfb_desc), g->sf_vec, g->sfa_form,
           g->sfb_form, g->a_mmajor, g->b_nmajor, g->c_mmajor, dn(g->c), dn(g->c_desc),
           g->use_alpha ? "" : "off/", (double)g->alpha, g->accumulate, g->one_call, g->special, g->threads);
}

static mxf_tensor op_tensor(void *data, mxf_dtype ab, mxf_dtype desc_dt, int64_t mn, int64_t k, int64_t l,
                            int64_t ms, int64_t ks, int64_t ls) {
  mxf_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = desc_dt;
  t.ndim = 3;
  int bytes = ab == MXF_E2M1 && desc_dt != MXF_E2M1; /* e2m1 described by bytes: k halves */
  t.shape[0] = mn, t.shape[1] = bytes ? k / 2 : k, t.shape[2] = l;
  t.stride[0] = bytes ? ms / 2 : ms, t.stride[1] = ks, t.stride[2] = bytes ? ls / 2 : ls;
  return t;
}

static long g_eq[MXF_DTYPE_COUNT], g_cmp[MXF_DTYPE_COUNT], g_undet[MXF_DTYPE_COUNT];

static void run_case(tu_rng *r, const gcase *g) {
  char what[512];
  describe(g, what, sizeof what);
  int64_t M = g->m, N = g->n, K = g->k, L = g->l, kbs = cdiv(K, g->sf_vec);
  const int a_bf16 = g->fa == MXF_BF16;
  const int64_t align_a = per16(g->fa), align_b = per16(g->fb);
  buffers B;
  memset(&B, 0, sizeof B);

  /* operand geometry: padded leading dims and batch strides, 16-byte aligned rows */
  if (!g->a_mmajor) {
    B.a_ks = 1, B.a_ms = rup(K + tu_range(r, 0, 40), align_a),
    B.a_ls = rup(M * B.a_ms + tu_range(r, 0, 50), align_a);
  } else {
    B.a_ms = 1, B.a_ks = rup(M + tu_range(r, 0, 40), align_a),
    B.a_ls = rup(K * B.a_ks + tu_range(r, 0, 50), align_a);
  }
  if (!g->b_nmajor) {
    B.b_ks = 1, B.b_ns = rup(K + tu_range(r, 0, 40), align_b),
    B.b_ls = rup(N * B.b_ns + tu_range(r, 0, 50), align_b);
  } else {
    B.b_ns = 1, B.b_ks = rup(N + tu_range(r, 0, 40), align_b),
    B.b_ls = rup(K * B.b_ks + tu_range(r, 0, 50), align_b);
  }
  int cb = c_bits(g->c);
  int64_t align_c = 128 / cb;
  if (!g->c_mmajor) {
    B.c_ns = 1, B.c_ms = rup(N + tu_range(r, 0, 20), align_c),
    B.c_ls = rup(M * B.c_ms + tu_range(r, 0, 30), align_c);
  } else {
    B.c_ms = 1, B.c_ns = rup(M + tu_range(r, 0, 20), align_c),
    B.c_ls = rup(N * B.c_ns + tu_range(r, 0, 30), align_c);
  }
  B.a_n = ab_bytes(g->fa, L * B.a_ls);
  B.b_n = ab_bytes(g->fb, L * B.b_ls);
  B.sfa_n = a_bf16 ? 0 : sf_bytes(g->sfa_form, M, kbs, L);
  B.sfb_n = sf_bytes(g->sfb_form, N, kbs, L);
  int64_t c_units = L * B.c_ls;
  B.c_n = (size_t)(cb == 4 ? cdiv(c_units, 2) : c_units * (cb / 8));
  B.a = xalloc(B.a_n), B.b = xalloc(B.b_n), B.sfa = xalloc(B.sfa_n), B.sfb = xalloc(B.sfb_n),
  B.c = xalloc(B.c_n);
  /* padding that must never be read: 0xFF is NaN for fp8 codes and e8m0 / e4m3 scales */
  memset(B.a, 0xFF, B.a_n), memset(B.b, 0xFF, B.b_n), memset(B.sfa, 0xFF, B.sfa_n),
      memset(B.sfb, 0xFF, B.sfb_n);
  fill_operand(r, g, g->fa, M, B.a_ms, B.a_ks, B.a_ls, B.a);
  fill_operand(r, g, g->fb, N, B.b_ns, B.b_ks, B.b_ls, B.b);
  if (!a_bf16) fill_sf(r, g, g->sfa, g->sfa_form, M, B.sfa);
  fill_sf(r, g, g->sfb, g->sfb_form, N, B.sfb);

  /* special inputs */
  if (g->special == SP_NAN_CODE && g->fa != MXF_E2M1) {
    int64_t m = tu_range(r, 0, M - 1), k = tu_range(r, 0, K - 1), l = tu_range(r, 0, L - 1);
    put_ab(g->fa, B.a, m * B.a_ms + k * B.a_ks + l * B.a_ls,
           g->fa == MXF_BF16   ? 0xFFC1
           : g->fa == MXF_E4M3 ? 0xFF
                               : 0x7E);
  } else if (g->special == SP_NAN_SCALE || g->special == SP_NAN_CODE) {
    int64_t n = tu_range(r, 0, N - 1), kb = tu_range(r, 0, kbs - 1), l = tu_range(r, 0, L - 1);
    B.sfb[sf_off(g->sfb_form, n, kb, l, N, kbs)] = g->sfb == MXF_E4M3 ? 0x7F : 0xFF;
  } else if (g->special == SP_INF && (g->fa == MXF_E5M2 || g->fa == MXF_BF16)) {
    for (int t = 0; t < 3; ++t) {
      int64_t m = tu_range(r, 0, M - 1), k = tu_range(r, 0, K - 1), l = tu_range(r, 0, L - 1);
      const uint16_t pos = g->fa == MXF_BF16 ? 0x7F80 : 0x7C, neg = g->fa == MXF_BF16 ? 0xFF80 : 0xFC;
      put_ab(g->fa, B.a, m * B.a_ms + k * B.a_ks + l * B.a_ls, t == 1 ? neg : pos);
    }
  }

  /* f64 oracle: the judge's reference and bound per element */
  size_t nref = (size_t)(M * N * L);
  mxj_ref *ref = xalloc(nref * sizeof(mxj_ref));
  double *sabs = xalloc(nref * sizeof(double));
  double *ad = xalloc((size_t)(M * K) * sizeof(double)), *bd = xalloc((size_t)(N * K) * sizeof(double));
  double alpha = g->use_alpha ? (double)g->alpha : 1.0;
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k)
        ad[m * K + k] =
            decode_ab(g->fa, get_ab(g->fa, B.a, m * B.a_ms + k * B.a_ks + l * B.a_ls)) *
            (a_bf16 ? 1.0 : decode_sf(g->sfa, B.sfa[sf_off(g->sfa_form, m, k / g->sf_vec, l, M, kbs)]));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        bd[n * K + k] = decode_ab(g->fb, get_ab(g->fb, B.b, n * B.b_ns + k * B.b_ks + l * B.b_ls)) *
                        decode_sf(g->sfb, B.sfb[sf_off(g->sfb_form, n, k / g->sf_vec, l, N, kbs)]);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double sa = 0.0;
        const double *x = ad + m * K, *y = bd + n * K;
        for (int64_t k = 0; k < K && g->special == SP_EXTREME; ++k)
          sa += fabs(x[k] * y[k]);
        ref[(l * M + m) * N + n] = mxj_gemm_ref(x, y, K, alpha);
        sabs[(l * M + m) * N + n] = fabs(alpha) * sa;
      }
    /* extreme scales: mark elements whose f32 intermediates may overflow (a dequantized
     * value or the sum of |terms| near 2^128) as beyond checking */
    if (g->special == SP_EXTREME) {
      for (int64_t m = 0; m < M; ++m) {
        int big = 0;
        for (int64_t k = 0; k < K; ++k)
          big |= !(fabs(ad[m * K + k]) < 0x1p120);
        if (big)
          for (int64_t n = 0; n < N; ++n)
            sabs[(l * M + m) * N + n] = INFINITY;
      }
      for (int64_t n = 0; n < N; ++n) {
        int big = 0;
        for (int64_t k = 0; k < K; ++k)
          big |= !(fabs(bd[n * K + k]) < 0x1p120);
        if (big)
          for (int64_t m = 0; m < M; ++m)
            sabs[(l * M + m) * N + n] = INFINITY;
      }
    }
  }
  double ref_amax = 0.0;
  int ref_nan = 0;
  for (size_t i = 0; i < nref; ++i) {
    if (isnan(ref[i].ref))
      ref_nan = 1;
    else if (fabs(ref[i].ref) > ref_amax)
      ref_amax = fabs(ref[i].ref);
  }

  /* descriptors */
  mxf_gemm_amax_desc d;
  memset(&d, 0, sizeof d);
  d.a = op_tensor(B.a, g->fa, g->fa_desc, M, K, L, B.a_ms, B.a_ks, B.a_ls);
  d.b = op_tensor(B.b, g->fb, g->fb_desc, N, K, L, B.b_ns, B.b_ks, B.b_ls);
  if (!a_bf16) d.sfa = sf_tensor(g->sfa_form, B.sfa, g->sfa_desc, M, kbs, L); /* bf16 A: absent */
  d.sfb = sf_tensor(g->sfb_form, B.sfb, g->sfb_desc, N, kbs, L);
  {
    mxf_tensor t;
    memset(&t, 0, sizeof t);
    int bytes = g->c == MXF_E2M1 && g->c_desc != MXF_E2M1;
    t.data = B.c, t.dtype = g->c_desc, t.ndim = 3;
    t.shape[0] = M, t.shape[1] = bytes ? N / 2 : N, t.shape[2] = L;
    t.stride[0] = bytes ? B.c_ms / 2 : B.c_ms, t.stride[1] = B.c_ns,
    t.stride[2] = bytes ? B.c_ls / 2 : B.c_ls;
    d.c = t;
  }
  float *amax = xalloc(sizeof(float));
  {
    int64_t one = 1;
    d.amax = tu_tensor(amax, MXF_F32, 1, &one);
  }
  d.sf_vec = g->sf_vec;
  d.flags = g->accumulate ? MXF_AMAX_ACCUMULATE : 0;
  float alpha_f = g->alpha;
  d.alpha = g->use_alpha ? &alpha_f : NULL;
  /* packed B: packed from the tensors as described, into a buffer that ends where an
   * inaccessible page begins (a read past its size faults), poisoned before */
  uint8_t *pk = NULL;
  size_t pk_n = 0;
  const void *b_run = B.b, *sfb_run = B.sfb;
  if (g->packed) {
    size_t pn = 0;
    if (!TU_CHECK(mxf_pack_weights_size(&d.b, &d.sfb, g->sf_vec, &pn) == MXF_OK, "pack size: %s [%s]",
                  mxf_last_error(), what))
      goto out;
    pk = tu_malloc_guarded(pn), pk_n = pn;
    memset(pk, 0xFF, pn);
    if (!TU_CHECK(mxf_pack_weights(&d.b, &d.sfb, g->sf_vec, pk, pn) == MXF_OK, "pack: %s [%s]",
                  mxf_last_error(), what))
      goto out;
    d.b.data = pk, d.sfb.data = NULL, d.flags |= MXF_AMAX_B_PACKED;
    b_run = pk, sfb_run = NULL;
  }

  /* poison: C 0xA5; amax NaN-free garbage when overwriting, a chosen old value otherwise */
  memset(B.c, 0xA5, B.c_n);
  float old = 0.0f;
  if (g->accumulate) {
    int pick = (int)tu_range(r, 0, 5);
    old = pick == 0   ? -INFINITY
          : pick == 1 ? 0.0f
          : pick == 2 ? (float)(ref_amax * 2.0 + 1.0)
          : pick == 3 ? NAN
                      : (float)(ref_amax * 0.5);
  } else {
    old = tu_range(r, 0, 1) ? NAN : 1.0e30f;
  }
  *amax = old;

  char env[8];
  if (g->threads) {
    snprintf(env, sizeof env, "%d", g->threads);
    setenv("MXF_NUM_THREADS", env, 1);
  } else {
    unsetenv("MXF_NUM_THREADS");
  }
  mxf_status st;
  if (g->one_call) {
    st = mxf_gemm_amax(&d, NULL);
  } else {
    mxf_plan *plan = NULL;
    st = mxf_gemm_amax_plan(&plan, &d);
    if (st == MXF_OK) {
      const char *be = mxf_plan_backend(plan);
      TU_CHECK(tu_cpu_core_fits(be, g->m * g->n * g->k == 0), "backend '%s' [%s]", be ? be : "(null)", what);
      tu_cpu_core_count(be);
      size_t wsn = mxf_plan_workspace_size(plan);
      void *ws = wsn ? xalloc(wsn) : NULL;
      if (ws) memset(ws, 0xFF, wsn); /* NaN everywhere: the kernel must not read stale data */
      mxf_gemm_amax_args args = {B.a, b_run, a_bf16 ? NULL : B.sfa,         sfb_run,
                                 B.c, amax,  g->use_alpha ? &alpha_f : NULL};
      st = mxf_gemm_amax_run(plan, &args, ws, wsn, NULL);
      free(ws);
    }
    mxf_plan_destroy(plan);
  }
  unsetenv("MXF_NUM_THREADS");
  if (!TU_CHECK(st == MXF_OK, "status %s: %s [%s]", mxf_status_string(st), mxf_last_error(), what)) goto out;

  /* C: judged element by element (SPEC §5), padding untouched */
  {
    int extreme = g->special == SP_EXTREME;
    long bad = 0;
    mxj_counts jc;
    mxj_counts_init(&jc);
    uint32_t wrong_code = 0;
    B.c_live = xalloc((size_t)c_units);
    memset(B.c_live, 0, (size_t)c_units);
    for (int64_t l = 0; l < L; ++l)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          int64_t o = m * B.c_ms + n * B.c_ns + l * B.c_ls, i = (l * M + m) * N + n;
          B.c_live[o] = 1;
          const uint32_t code = mxj_code_at(g->c, B.c, o);
          if (extreme) {
            /* outside the exactness window: only a sanity bound, skipped where f32
             * intermediates may overflow */
            double rv = ref[i].ref, sa = sabs[i];
            float got = mxj_decode(g->c, code);
            if (isnan(rv)) {
              if (g->c != MXF_E2M1)
                bad += !isnan(got);
              else
                bad += code != 0x7;
              continue;
            }
            if (!(sa < 0x1p120)) continue;
            double slack = 1e-5 * sa + 0x1p-120;
            float lo = (float)(rv - slack), hi = (float)(rv + slack);
            if (g->c == MXF_F32) {
              bad += !(got >= lo && got <= hi);
            } else {
              int n3;
              int64_t olo = mxj_code_ordinal(g->c, mxj_encode(g->c, lo), NULL),
                      ohi = mxj_code_ordinal(g->c, mxj_encode(g->c, hi), NULL);
              int64_t og = mxj_code_ordinal(g->c, code, &n3);
              bad += n3 || og < olo - 1 || og > ohi + 1;
            }
            continue;
          }
          if (mxj_gemm_judge(g->c, &ref[i], code, &jc, i) == MXJ_WRONG && jc.wrong == 1) wrong_code = code;
        }
    TU_CHECK(bad == 0, "%ld C elements outside the sanity bound [%s]", bad, what);
    if (!extreme) {
      const mxj_ref *w = jc.wrong ? &ref[jc.first_wrong] : NULL;
      TU_CHECK(jc.wrong == 0,
               "%lld C elements wrong by SPEC §5; first (l, m, n) = (%lld, %lld, %lld): code 0x%x, ref %.9g, "
               "bound %.3g [%s]",
               (long long)jc.wrong, (long long)(jc.first_wrong / (M * N)),
               (long long)(jc.first_wrong / N % M), (long long)(jc.first_wrong % N), wrong_code,
               w ? w->ref : 0.0, w ? w->delta : 0.0, what);
    }
    if (g->c != MXF_F32 && !extreme) {
      /* the >= 99.9 % of SPEC §5 is a rate: checked per C dtype over all cases in main();
       * a single case only has to be close to it */
      const long cmp = (long)mxj_counts_total(&jc), eq = (long)jc.equal;
      TU_CHECK(cmp - eq <= 2 + cmp / 100, "only %ld of %ld C codes equal encode(ref) [%s]", eq, cmp, what);
      if (!g->no_rate) g_eq[g->c] += eq, g_cmp[g->c] += cmp, g_undet[g->c] += (long)jc.within;
    }
    /* padding of C untouched */
    long touched = 0;
    for (int64_t u = 0; u < c_units; ++u) {
      if (B.c_live[u]) continue;
      if (cb == 4)
        touched += mxf_e2m1_get(B.c, u) != ((u & 1) ? 0xA : 0x5);
      else
        touched += !tu_all_bytes(B.c + u * (cb / 8), (size_t)(cb / 8), 0xA5);
    }
    if (cb == 4 && (c_units & 1)) touched += (B.c[c_units / 2] >> 4) != 0xA;
    TU_CHECK(touched == 0, "%ld C padding elements written [%s]", touched, what);

    /* amax */
    float got = *amax;
    if (extreme) {
      int big = 0;
      double smax = 0.0;
      for (size_t i = 0; i < nref; ++i)
        big |= !(sabs[i] < 0x1p120), smax = sabs[i] > smax ? sabs[i] : smax;
      if (ref_nan || (g->accumulate && isnan(old)))
        TU_CHECK(isnan(got), "amax %g, expected NaN [%s]", (double)got, what);
      else if (!big) {
        double want = ref_amax;
        if (g->accumulate && (double)old > want) want = old;
        TU_CHECK(fabs((double)got - want) <= 1e-5 * smax + 0x1p-120, "amax %.9g, expected %.9g (sanity) [%s]",
                 (double)got, want, what);
      }
    } else {
      const int want_nan = ref_nan || (g->accumulate && isnan(old));
      double want = ref_amax;
      if (g->accumulate && (double)old > want) want = old;
      TU_CHECK(mxj_amax_ok(got, want, want_nan, K), "amax %.9g, expected %.9g%s [%s]", (double)got, want,
               want_nan ? " (NaN)" : "", what);
    }
  }
out:
  tu_free_guarded(pk, pk_n);
  free(B.a), free(B.b), free(B.sfa), free(B.sfb), free(B.c), free(B.c_live);
  free(ref), free(sabs), free(ad), free(bd), free(amax);
}

/* ------------------------------------------------------------ the sampled cross-product */
typedef struct fmt_combo {
  mxf_dtype fa, fb, sfa, sfb; /* sfa unused with a bf16 A */
  int sf_vec;
} fmt_combo;

/* One format (the first five, indexed by section 3), then the mixed pairs of SPEC §1.1 */
static const fmt_combo g_combos[] = {
    {MXF_E4M3, MXF_E4M3, MXF_E8M0, MXF_E8M0, 32},
    {MXF_E5M2, MXF_E5M2, MXF_E8M0, MXF_E8M0, 32},
    {MXF_E2M1, MXF_E2M1, MXF_E8M0, MXF_E8M0, 32},
    {MXF_E2M1, MXF_E2M1, MXF_E8M0, MXF_E8M0, 16},
    {MXF_E2M1, MXF_E2M1, MXF_E4M3, MXF_E4M3, 16},
    /* mixed MX pairs */
    {MXF_E4M3, MXF_E2M1, MXF_E8M0, MXF_E8M0, 32},
    {MXF_E2M1, MXF_E4M3, MXF_E8M0, MXF_E8M0, 32},
    {MXF_E5M2, MXF_E4M3, MXF_E8M0, MXF_E8M0, 32},
    {MXF_E4M3, MXF_E5M2, MXF_E8M0, MXF_E8M0, 32},
    {MXF_E5M2, MXF_E2M1, MXF_E8M0, MXF_E8M0, 32},
    {MXF_E2M1, MXF_E5M2, MXF_E8M0, MXF_E8M0, 32},
    {MXF_E2M1, MXF_E2M1, MXF_E8M0, MXF_E4M3, 16},
    {MXF_E2M1, MXF_E2M1, MXF_E4M3, MXF_E8M0, 16},
    /* bf16 A (no scales) */
    {MXF_BF16, MXF_E4M3, MXF_E8M0, MXF_E8M0, 32},
    {MXF_BF16, MXF_E5M2, MXF_E8M0, MXF_E8M0, 32},
    {MXF_BF16, MXF_E2M1, MXF_E8M0, MXF_E8M0, 32},
    {MXF_BF16, MXF_E2M1, MXF_E8M0, MXF_E8M0, 16},
    {MXF_BF16, MXF_E2M1, MXF_E8M0, MXF_E4M3, 16},
};
static const mxf_dtype g_cdt[] = {MXF_F32, MXF_F16, MXF_BF16, MXF_E4M3, MXF_E5M2, MXF_E2M1};
static const int64_t g_shapes[][3] = {{37, 29, 100}, {5, 3, 33},    {70, 41, 66},   {1, 17, 130},
                                      {33, 1, 47},   {129, 47, 35}, {19, 133, 200}, {45, 38, 18}};

static void make_case(tu_rng *r, gcase *g, const fmt_combo *fc, mxf_dtype c, int form, int rep) {
  memset(g, 0, sizeof *g);
  const int64_t *s = g_shapes[tu_range(r, 0, (int64_t)(sizeof g_shapes / sizeof g_shapes[0]) - 1)];
  g->m = s[0], g->n = s[1], g->k = s[2], g->l = tu_range(r, 1, 3);
  g->fa = fc->fa, g->fb = fc->fb, g->sfa = fc->sfa, g->sfb = fc->sfb, g->sf_vec = fc->sf_vec, g->c = c;
  if ((g->fa == MXF_E2M1 || g->fb == MXF_E2M1) && (g->k & 1)) g->k += 1; /* e2m1 rows are packed along K */
  if (c == MXF_E2M1 && (g->n & 1)) g->n += 1;                            /* likewise N for e2m1 C */
  static const mxf_dtype e2_descs[] = {MXF_E2M1, MXF_E2M1X2, MXF_U8};
  static const mxf_dtype e8_descs[] = {MXF_E8M0, MXF_U8, MXF_E8M0, MXF_I8};
  g->fa_desc = g->fa == MXF_E2M1 ? e2_descs[rep % 3] : g->fa;
  g->fb_desc = g->fb == MXF_E2M1 ? e2_descs[(rep + 1) % 3] : g->fb;
  g->sfa_desc = g->sfa == MXF_E8M0 ? e8_descs[(rep + form) % 4] : g->sfa;
  g->sfb_desc = g->sfb == MXF_E8M0 ? e8_descs[(rep + form + 1) % 4] : g->sfb;
  g->c_desc = c;
  if (c == MXF_E2M1 && (rep & 1)) g->c_desc = MXF_E2M1X2;
  g->sfa_form = form;
  g->sfb_form = (form + rep) % SF_FORMS;
  g->a_mmajor = g->fa != MXF_E2M1 && (rep & 1);
  g->b_nmajor = g->fb != MXF_E2M1 && (rep & 2);
  g->c_mmajor = c != MXF_E2M1 && ((rep >> 1) ^ rep ^ form) & 1;
  g->use_alpha = tu_range(r, 0, 1);
  static const float alphas[] = {0.5f, 3.0f, 0.333333343f, -1.25f, 1.0f};
  g->alpha = alphas[tu_range(r, 0, 4)];
  g->accumulate = tu_range(r, 0, 1);
  g->one_call = tu_range(r, 0, 2) == 0;
  g->special = tu_range(r, 0, 9) < 3 ? (int)tu_range(r, 1, SP_COUNT - 1) : SP_NONE;
  g->threads = (int)tu_range(r, 0, 3); /* 0 = default, 1, 2, 3 */
  if (g->l > 1 && (g->sfa_form == SF_COMPACT2 || g->sfb_form == SF_COMPACT2)) g->l = 1; /* 2-D SF: L = 1 */
}

int main(void) {
  char why[512];
  if (tu_cpu_core_missing(why, sizeof why)) return tu_skip("test_gemm_amax_cpu", why);
  tu_rng rng;
  tu_rng_init(&rng, tu_seed());
  int ncombo = (int)(sizeof g_combos / sizeof g_combos[0]);
  long cases = 0;

  /* 1. the cross-product: combo x C dtype x SF form x 4 reps (majors, descriptions) */
  for (int fci = 0; fci < ncombo; ++fci)
    for (int ci = 0; ci < 6; ++ci)
      for (int form = 0; form < SF_FORMS; ++form)
        for (int rep = 0; rep < 4; ++rep) {
          gcase g;
          make_case(&rng, &g, &g_combos[fci], g_cdt[ci], form, rep);
          run_case(&rng, &g);
          ++cases;
        }

  /* 2. every special input on every combo, with f32 and a narrow C */
  for (int fci = 0; fci < ncombo; ++fci)
    for (int sp = 1; sp < SP_COUNT; ++sp)
      for (int ci = 0; ci < 6; ci += 3) {
        gcase g;
        make_case(&rng, &g, &g_combos[fci], g_cdt[ci], (int)tu_range(&rng, 0, SF_FORMS - 1),
                  (int)tu_range(&rng, 0, 3));
        g.special = sp;
        if (sp == SP_INF && g.fa != MXF_E5M2 && g.fa != MXF_BF16) { /* inf codes: e5m2 (or bf16) A */
          g.fa = g.fa_desc = MXF_E5M2, g.sfa = g.sfa_desc = MXF_E8M0, g.sf_vec = 32;
          if (g.fb == MXF_E2M1 && g.sfb == MXF_E4M3) g.sfb = g.sfb_desc = MXF_E8M0;
          g.a_mmajor = 0;
        }
        run_case(&rng, &g);
        ++cases;
      }

  /* 3. K just above a block boundary, smallest shapes */
  {
    static const int64_t ks[][2] = {{33, 32}, {34, 32}, {18, 16}, {65, 32}, {2, 16}, {1, 32}};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; ++i) {
      gcase g;
      int fci = ks[i][1] == 16 ? 3 + (int)(i & 1) : (ks[i][0] & 1) ? 0 : 2;
      make_case(&rng, &g, &g_combos[fci], g_cdt[i % 6], (int)(i % SF_FORMS), (int)i);
      g.k = ks[i][0], g.special = SP_NONE;
      if (g.c == MXF_E2M1 && (g.n & 1)) g.n += 1;
      run_case(&rng, &g);
      ++cases;
    }
  }

  /* 4. more X rows than one chunk (the workspace bound), both C orientations */
  {
    gcase g;
    make_case(&rng, &g, &g_combos[0], MXF_BF16, SF_SWZ_PHYS, 0);
    g.m = 1100, g.n = 8001, g.k = 40, g.l = 1, g.c_mmajor = 0, g.special = SP_NONE, g.a_mmajor = 1;
    run_case(&rng, &g);
    make_case(&rng, &g, &g_combos[4], MXF_F32, SF_COMPACT3, 2);
    g.m = 8003, g.n = 1100, g.k = 48, g.l = 1, g.c_mmajor = 1, g.special = SP_NONE;
    run_case(&rng, &g);
    cases += 2;
  }

  /* 5. the CPU backend's tiles: K over several K panels (sums added panel by panel),
   * columns over several N panels, rows over several row chunks, a tile's blocks kept
   * between tiles, and the streaming path's wider tiles (1 MiB of sums) over three
   * N panels (64 rows of X) and three row chunks (60 rows of Y); each with a random
   * format, SF form and majors. Their millions of
   * codes stay out of the 99.9 % rate: one case's random formats (e5m2 x e2m1 into f16,
   * say, 0.13 % of its codes near a rounding boundary) would decide it alone; each still
   * checks its own codes (run_case) */
  {
    static const int64_t sh[][4] = {/* M, N, K, L */
                                    {70, 2100, 1100, 1}, {2100, 40, 600, 2}, {2100, 2100, 40, 1},
                                    {2100, 30, 1100, 1}, {2100, 30, 40, 1},  {9, 4100, 1030, 1},
                                    {64, 8300, 40, 1},   {8300, 60, 40, 1}};
    for (size_t i = 0; i < sizeof sh / sizeof sh[0]; ++i) {
      gcase g;
      make_case(&rng, &g, &g_combos[tu_range(&rng, 0, ncombo - 1)], g_cdt[tu_range(&rng, 0, 5)],
                (int)tu_range(&rng, 0, SF_FORMS - 1), (int)tu_range(&rng, 0, 3));
      g.m = sh[i][0], g.n = sh[i][1], g.k = sh[i][2], g.l = sh[i][3];
      if (g.l > 1 && (g.sfa_form == SF_COMPACT2 || g.sfb_form == SF_COMPACT2))
        g.sfa_form = g.sfb_form = SF_COMPACT3;
      g.special = i == 0 ? SP_NAN_CODE : SP_NONE;
      g.no_rate = 1;
      run_case(&rng, &g);
      ++cases;
    }
  }

  /* 6. B packed (SPEC §7): every combo with a random C dtype, SF form and majors, at a
   * sampled shape, at decode sizes (1 to 16 rows of A: the streaming kernels, which read
   * the packed panels in place; N and K multiples of nothing, K over several chunks of
   * 512) and at 17 to 256 rows (their decoding into the core's packed layout), L up to 3,
   * special inputs sampled; and at decode sizes with whole panels and blocks (N and K
   * multiples of 16 and 32), where the kernels read the buffer's last bytes themselves */
  for (int fci = 0; fci < ncombo; ++fci)
    for (int shape = 0; shape < 4; ++shape) {
      gcase g;
      make_case(&rng, &g, &g_combos[fci], g_cdt[tu_range(&rng, 0, 5)], (int)tu_range(&rng, 0, SF_FORMS - 1),
                (int)tu_range(&rng, 0, 3));
      if (shape > 0) {
        g.m = shape == 2 ? tu_range(&rng, 17, 256) : tu_range(&rng, 1, 16);
        g.n = tu_range(&rng, 17, 150), g.k = tu_range(&rng, 520, 1700) & ~(int64_t)1;
        if (shape == 3) g.n = 16 * tu_range(&rng, 1, 9), g.k = 32 * tu_range(&rng, 16, 53);
        if (g.c == MXF_E2M1 && (g.n & 1)) g.n += 1;
      }
      g.packed = 1;
      g.no_rate = shape == 2;
      run_case(&rng, &g);
      ++cases;
    }

  printf("cases: %ld\n", cases);
  tu_cpu_core_print();
  for (int ci = 1; ci < 6; ++ci) {
    mxf_dtype c = g_cdt[ci];
    printf("  C %-5s: %ld of %ld codes equal encode(ref) (%.4f %%), %ld undetermined (within the bound)\n",
           mxf_dtype_name(c), g_eq[c], g_cmp[c], 100.0 * (double)g_eq[c] / (double)(g_cmp[c] ? g_cmp[c] : 1),
           g_undet[c]);
    TU_CHECK(g_cmp[c] > 0 && g_eq[c] * 1000 >= g_cmp[c] * 999,
             "C %s: only %ld of %ld codes equal encode(ref)", mxf_dtype_name(c), g_eq[c], g_cmp[c]);
  }
  return tu_finish("test_gemm_amax_cpu");
}
