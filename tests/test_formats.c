/*
 * test_formats.c — every number format of SPEC §0 against independent restatements.
 *
 * Decoding: every code of e4m3, e5m2, e2m1, e8m0, bf16 and f16 equals the value of a
 * textbook formula (sign·2^e·(1+m/2^M), subnormals, inf/NaN patterns) evaluated here.
 * Encoding: a dense f32 sweep (strided and random bit patterns, every code, every
 * midpoint between adjacent codes and its f32 neighbours, subnormals, ±0, ±inf, NaN,
 * values just beyond max) is encoded by src/formats.h and by mxf_convert, and compared
 * with a nearest-value search over the codes (ties to the even code, SPEC §0
 * saturation / overflow rules). Also: the MXFP8 scale rule against a search over scale
 * bytes, e2m1 nibble packing, the swizzled scale offset against the C-contiguous index
 * of its physical shape, and mxf_convert's argument checks (nothing written on error).
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "testutil.h"

/* ------------------------------------------------------------ independent formats */
enum { SPECIAL_IEEE, SPECIAL_FN, SPECIAL_NONE }; /* top exponent = inf/NaN | only s.1..1 NaN | none */

typedef struct ref_format {
  const char *name;
  mxf_dtype dtype;
  int ebits, mbits, bias, special, bits;
  int saturate;      /* fp8/fp4: beyond max -> max; else overflow to inf */
  unsigned nan_code; /* SPEC §0 NaN encoding for saturating formats */
  unsigned (*enc)(float);
  float (*dec)(unsigned);
  /* derived */
  unsigned sign, maxmag;
  double *vals; /* value of magnitude codes 0..maxmag */
} ref_format;

static unsigned enc_e4m3(float x) { return mxf_f32_to_e4m3(x); }
static unsigned enc_e5m2(float x) { return mxf_f32_to_e5m2(x); }
static unsigned enc_e2m1(float x) { return mxf_f32_to_e2m1(x); }
static unsigned enc_bf16(float x) { return mxf_f32_to_bf16(x); }
static unsigned enc_f16(float x) { return mxf_f32_to_f16(x); }
static float dec_e4m3(unsigned c) { return mxf_e4m3_to_f32((uint8_t)c); }
static float dec_e5m2(unsigned c) { return mxf_e5m2_to_f32((uint8_t)c); }
static float dec_e2m1(unsigned c) { return mxf_e2m1_to_f32((uint8_t)c); }
static float dec_bf16(unsigned c) { return mxf_bf16_to_f32((uint16_t)c); }
static float dec_f16(unsigned c) { return mxf_f16_to_f32((uint16_t)c); }

static ref_format g_fmts[] = {
    {"e4m3", MXF_E4M3, 4, 3, 7, SPECIAL_FN, 8, 1, 0x7F, enc_e4m3, dec_e4m3, 0, 0, NULL},
    {"e5m2", MXF_E5M2, 5, 2, 15, SPECIAL_IEEE, 8, 1, 0x7F, enc_e5m2, dec_e5m2, 0, 0, NULL},
    {"e2m1", MXF_E2M1, 2, 1, 1, SPECIAL_NONE, 4, 1, 0x7, enc_e2m1, dec_e2m1, 0, 0, NULL},
    {"bf16", MXF_BF16, 8, 7, 127, SPECIAL_IEEE, 16, 0, 0, enc_bf16, dec_bf16, 0, 0, NULL},
    {"f16", MXF_F16, 5, 10, 15, SPECIAL_IEEE, 16, 0, 0, enc_f16, dec_f16, 0, 0, NULL},
};
#define NFMT ((int)(sizeof g_fmts / sizeof g_fmts[0]))

/* The value of a code by the textbook formula. */
static double ref_decode(const ref_format *f, unsigned code) {
  unsigned sign = (code >> (f->ebits + f->mbits)) & 1u;
  unsigned e = (code >> f->mbits) & ((1u << f->ebits) - 1u), m = code & ((1u << f->mbits) - 1u);
  unsigned emax_field = (1u << f->ebits) - 1u;
  double v;
  if (f->special == SPECIAL_IEEE && e == emax_field)
    v = m ? NAN : INFINITY;
  else if (f->special == SPECIAL_FN && e == emax_field && m == (1u << f->mbits) - 1u)
    v = NAN;
  else if (e == 0)
    v = ldexp((double)m / (double)(1u << f->mbits), 1 - f->bias);
  else
    v = ldexp(1.0 + (double)m / (double)(1u << f->mbits), (int)e - f->bias);
  return sign ? -v : v;
}

static void ref_format_init(ref_format *f) {
  f->sign = 1u << (f->ebits + f->mbits);
  unsigned mag = f->sign - 1u;
  while (!isfinite(ref_decode(f, mag)))
    --mag;
  f->maxmag = mag;
  f->vals = (double *)tu_malloc(sizeof(double) * (mag + 1));
  for (unsigned c = 0; c <= mag; ++c)
    f->vals[c] = ref_decode(f, c);
}

/* Largest magnitude code whose value is <= a (0 <= a), by bisecting the ascending table. */
static unsigned ref_floor(const ref_format *f, double a) {
  unsigned l = 0, h = f->maxmag;
  while (l < h) {
    unsigned mid = (l + h + 1) / 2;
    if (f->vals[mid] <= a)
      l = mid;
    else
      h = mid - 1;
  }
  return l;
}

/* Nearest magnitude code to a >= 0 (a <= max), ties to the even code. The 8- and 4-bit
 * formats scan every code; the 16-bit ones bisect the value table. */
static unsigned ref_nearest(const ref_format *f, double a) {
  if (f->bits <= 8) {
    unsigned best = 0;
    double bd = INFINITY;
    for (unsigned c = 0; c <= f->maxmag; ++c) {
      double d = fabs(f->vals[c] - a);
      if (d < bd || (d == bd && (c & 1u) == 0)) bd = d, best = c;
    }
    return best;
  }
  unsigned lo = ref_floor(f, a);
  if (lo == f->maxmag) return lo;
  double dl = a - f->vals[lo], dh = f->vals[lo + 1] - a;
  if (dl < dh) return lo;
  if (dh < dl) return lo + 1;
  return (lo & 1u) ? lo + 1 : lo;
}

/* SPEC §0 encoding; returns ~0u for "any NaN" (bf16/f16). */
static unsigned ref_encode(const ref_format *f, float x) {
  if (isnan(x)) return f->saturate ? f->nan_code : ~0u;
  unsigned s = signbit(x) ? f->sign : 0u;
  double a = fabs((double)x), max = f->vals[f->maxmag];
  if (a > max) {
    if (f->saturate) return s | f->maxmag;
    /* RNE between max (odd mantissa) and 2^(emax+1) = inf: the tie goes to inf */
    int emax = (int)((1u << f->ebits) - 2u) - f->bias;
    double half = (max + ldexp(1.0, emax + 1)) / 2;
    return s | (a >= half ? f->maxmag + 1u : f->maxmag);
  }
  return s | ref_nearest(f, a);
}

static int is_tie(const ref_format *f, float x) {
  double a = fabs((double)x);
  if (isnan(a) || !(a < f->vals[f->maxmag])) return 0;
  unsigned lo = ref_floor(f, a);
  return (f->vals[lo] + f->vals[lo + 1]) / 2 == a;
}

/* ------------------------------------------------------------ decode */
static double ref_e8m0(unsigned b) { return b == 0xFFu ? NAN : ldexp(1.0, (int)b - 127); }

static int same_value(float got, double want) {
  if (isnan(want)) return isnan(got);
  return (double)got == want && !signbit(got) == !signbit(want);
}

static void test_decode(void) {
  for (int fi = 0; fi < NFMT; ++fi) {
    ref_format *f = &g_fmts[fi];
    unsigned ncodes = 1u << f->bits;
    long bad = 0;
    /* every code through formats.h and through mxf_convert */
    size_t bytes = f->bits == 4 ? ncodes / 2 : (size_t)ncodes * (size_t)(f->bits / 8);
    uint8_t *codes = (uint8_t *)tu_malloc(bytes);
    for (unsigned c = 0; c < ncodes; ++c) {
      if (f->bits == 16)
        ((uint16_t *)codes)[c] = (uint16_t)c;
      else if (f->bits == 8)
        codes[c] = (uint8_t)c;
      else if (c & 1u)
        codes[c / 2] = (uint8_t)((codes[c / 2] & 0xFu) | (c << 4));
      else
        codes[c / 2] = (uint8_t)c;
    }
    float *out = (float *)tu_malloc(sizeof(float) * (ncodes + 3));
    tu_poison(out, sizeof(float) * (ncodes + 3), 0xA5);
    mxf_status st = mxf_convert(codes, f->dtype, out, MXF_F32, ncodes);
    TU_CHECK(st == MXF_OK, "%s decode via mxf_convert: status %d (%s)", f->name, st, mxf_last_error());
    for (unsigned c = 0; c < ncodes; ++c) {
      double want = ref_decode(f, c);
      float got = f->dec(c);
      if (!same_value(got, want) || !same_value(out[c], want)) {
        if (++bad <= 5)
          TU_CHECK(0, "%s decode of code 0x%x: formats.h %a, mxf_convert %a, expected %a", f->name, c, got,
                   out[c], want);
      }
    }
    TU_CHECK(bad == 0, "%s: %ld of %u codes decode wrong", f->name, bad, ncodes);
    TU_CHECK(tu_all_bytes(out + ncodes, 3 * sizeof(float), 0xA5), "%s decode wrote past n", f->name);
    /* spot checks of the table itself against SPEC §0's numbers */
    if (f->dtype == MXF_E4M3)
      TU_CHECK(f->vals[f->maxmag] == 448.0 && f->vals[1] == ldexp(1, -9), "e4m3 range");
    if (f->dtype == MXF_E5M2) TU_CHECK(f->vals[f->maxmag] == 57344.0, "e5m2 max");
    if (f->dtype == MXF_E2M1) {
      static const double mags[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
      TU_CHECK(memcmp(mags, f->vals, sizeof mags) == 0 && f->maxmag == 7, "e2m1 magnitudes");
    }
    free(codes);
    free(out);
  }
  /* e8m0: all 256 bytes */
  uint8_t b[256];
  float out[259];
  for (int i = 0; i < 256; ++i)
    b[i] = (uint8_t)i;
  tu_poison(out, sizeof out, 0xA5);
  mxf_status st = mxf_convert(b, MXF_E8M0, out, MXF_F32, 256);
  TU_CHECK(st == MXF_OK, "e8m0 decode via mxf_convert: %s", mxf_last_error());
  long bad = 0;
  for (int i = 0; i < 256; ++i)
    if (!same_value(mxf_e8m0_to_f32((uint8_t)i), ref_e8m0((unsigned)i)) ||
        !same_value(out[i], ref_e8m0((unsigned)i)))
      if (++bad <= 5) TU_CHECK(0, "e8m0 byte %d decodes to %a / %a", i, mxf_e8m0_to_f32((uint8_t)i), out[i]);
  TU_CHECK(bad == 0, "e8m0: %ld of 256 bytes decode wrong", bad);
  TU_CHECK(mxf_e8m0_to_f32(0) == ldexp(1.0, -127) && mxf_e8m0_to_f32(127) == 1.0f &&
               isnan(mxf_e8m0_to_f32(255)),
           "e8m0 anchors 0 -> 2^-127, 127 -> 1, 0xFF -> NaN");
  TU_CHECK(tu_all_bytes(out + 256, 3 * sizeof(float), 0xA5), "e8m0 decode wrote past n");
}

/* ------------------------------------------------------------ encode sweep */
typedef struct fvec {
  float *v;
  size_t n, cap;
} fvec;

static void push(fvec *s, float x) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 1 << 20;
    float *p = (float *)realloc(s->v, s->cap * sizeof(float));
    if (!p) exit(2);
    s->v = p;
  }
  s->v[s->n++] = x;
}

static void push_pm(fvec *s, float x) {
  push(s, x);
  push(s, -x);
}

static void push_around(fvec *s, float x, int ulps) {
  float lo = x, hi = x;
  push_pm(s, x);
  for (int i = 0; i < ulps; ++i) {
    lo = nextafterf(lo, -INFINITY);
    hi = nextafterf(hi, INFINITY);
    push_pm(s, lo);
    push_pm(s, hi);
  }
}

static float from_bits(uint32_t u) { return mxf_f32_from_bits(u); }

static fvec build_sweep(tu_rng *r) {
  fvec s = {NULL, 0, 0};
  /* every f32 bit pattern in strides, from a random start */
  for (uint64_t u = tu_range(r, 0, 4092); u < (1ull << 32); u += 4093)
    push(&s, from_bits((uint32_t)u));
  /* random patterns, random f32 subnormals, random values of every magnitude near 1 */
  for (int i = 0; i < (1 << 18); ++i)
    push(&s, from_bits(tu_u32(r)));
  for (int i = 0; i < (1 << 14); ++i)
    push(&s, from_bits(tu_u32(r) & 0x807FFFFFu));
  for (int i = 0; i < (1 << 16); ++i)
    push(&s, (float)(tu_normal(r) * ldexp(1.0, (int)tu_range(r, -30, 20))));
  /* specials */
  push_pm(&s, 0.0f);
  push_pm(&s, INFINITY);
  push_pm(&s, FLT_MAX);
  push_pm(&s, FLT_MIN);
  push_pm(&s, from_bits(1));
  push(&s, NAN);
  push(&s, -NAN);
  push(&s, from_bits(0x7F800001u)); /* signalling payloads */
  push(&s, from_bits(0xFFBFFFFFu));
  /* per format: every code value, every midpoint and their neighbours, beyond max */
  for (int fi = 0; fi < NFMT; ++fi) {
    const ref_format *f = &g_fmts[fi];
    for (unsigned c = 0; c <= f->maxmag; ++c) {
      push_around(&s, (float)f->vals[c], 1);
      if (c < f->maxmag) push_around(&s, (float)((f->vals[c] + f->vals[c + 1]) / 2), 1);
    }
    double max = f->vals[f->maxmag], ulp = max - f->vals[f->maxmag - 1];
    push_around(&s, (float)(max + ulp / 2), 2); /* the tie beyond max (inf for bf16/f16) */
    push_around(&s, (float)(max * 1.0625), 1);
    push_around(&s, (float)(max * 2), 1);
    push_around(&s, (float)(f->vals[1] / 2), 2); /* half the smallest subnormal */
    push_around(&s, (float)(f->vals[1] / 4), 2);
  }
  return s;
}

static unsigned code_at(const uint8_t *buf, int bits, size_t i) {
  if (bits == 16) return ((const uint16_t *)buf)[i];
  if (bits == 8) return buf[i];
  return (buf[i / 2] >> (4 * (i & 1))) & 0xFu;
}

static void test_encode(tu_rng *r) {
  fvec s = build_sweep(r);
  printf("encode sweep: %zu f32 values\n", s.n);
  for (int fi = 0; fi < NFMT; ++fi) {
    const ref_format *f = &g_fmts[fi];
    size_t bytes = f->bits == 4 ? (s.n + 1) / 2 : s.n * (size_t)(f->bits / 8);
    uint8_t *buf = (uint8_t *)tu_malloc(bytes + 8);
    tu_poison(buf, bytes + 8, 0xA5);
    mxf_status st = mxf_convert(s.v, MXF_F32, buf, f->dtype, (int64_t)s.n);
    TU_CHECK(st == MXF_OK, "%s encode via mxf_convert: %s", f->name, mxf_last_error());
    TU_CHECK(tu_all_bytes(buf + bytes, 8, 0xA5), "%s encode wrote past n", f->name);
    long bad = 0, ties = 0, sat = 0;
    for (size_t i = 0; i < s.n; ++i) {
      float x = s.v[i];
      unsigned want = ref_encode(f, x), got = f->enc(x), bulk = code_at(buf, f->bits, i);
      int ok;
      if (want == ~0u)
        ok = isnan(f->dec(got)) && isnan(f->dec(bulk));
      else
        ok = got == want && bulk == want;
      if (!ok && ++bad <= 8)
        TU_CHECK(0, "%s encode of %a (0x%08x): formats.h 0x%x, mxf_convert 0x%x, expected 0x%x", f->name, x,
                 mxf_f32_bits(x), got, bulk, want);
      if (is_tie(f, x)) ++ties;
      if (!isnan(x) && fabs((double)x) > f->vals[f->maxmag]) ++sat;
    }
    TU_CHECK(bad == 0, "%s: %ld of %zu encodings wrong", f->name, bad, s.n);
    /* the sweep really exercises ties and the region beyond max */
    TU_CHECK(ties >= 2 * (long)f->maxmag && sat > 10, "%s: sweep has %ld ties, %ld beyond max", f->name, ties,
             sat);
    printf("  %s: %zu values, %ld exact ties, %ld beyond max, %ld wrong\n", f->name, s.n, ties, sat, bad);
    free(buf);
  }
  /* SPEC §0 anchors, stated directly */
  TU_CHECK(mxf_f32_to_e4m3(1000.0f) == 0x7E && mxf_f32_to_e4m3(-INFINITY) == 0xFE &&
               mxf_f32_to_e4m3(NAN) == 0x7F,
           "e4m3 saturation / NaN");
  TU_CHECK(mxf_f32_to_e5m2(INFINITY) == 0x7B && mxf_f32_to_e5m2(-1e9f) == 0xFB &&
               mxf_f32_to_e5m2(-NAN) == 0x7F,
           "e5m2 saturation / NaN");
  TU_CHECK(mxf_f32_to_e2m1(7.0f) == 0x7 && mxf_f32_to_e2m1(-INFINITY) == 0xF && mxf_f32_to_e2m1(NAN) == 0x7 &&
               mxf_f32_to_e2m1(2.5f) == 0x4 && mxf_f32_to_e2m1(0.25f) == 0x0 && mxf_f32_to_e2m1(0.75f) == 0x2,
           "e2m1 saturation / NaN / ties");
  TU_CHECK(mxf_f32_to_bf16(FLT_MAX) == 0x7F80 && mxf_f32_to_f16(65520.0f) == 0x7C00 &&
               mxf_f32_to_f16(65519.996f) == 0x7BFF && mxf_f32_to_f16(-1e6f) == 0xFC00,
           "bf16 / f16 overflow to inf");
  free(s.v);
}

/* ------------------------------------------------------------ MXFP8 scale rule */
static unsigned ref_scale(float amax) {
  float c = mxf_f32_from_bits(0x3B124925u);
  volatile float s = amax * c; /* one f32 rounding */
  if (isnan(s)) return 0xFF;
  for (int b = 0; b <= 254; ++b)
    if (ldexp(1.0, b - 127) >= (double)s) return (unsigned)b;
  return 254;
}

static void test_scale_rule(tu_rng *r) {
  float c = mxf_f32_from_bits(MXF_INV_448_BITS);
  TU_CHECK(fabs((double)c - 1.0 / 448) <= fabs((double)nextafterf(c, 1) - 1.0 / 448) &&
               fabs((double)c - 1.0 / 448) <= fabs((double)nextafterf(c, 0) - 1.0 / 448),
           "0x3B124925 is the f32 nearest 1/448");
  fvec s = {NULL, 0, 0};
  push(&s, 0.0f);
  push(&s, -0.0f);
  push(&s, INFINITY);
  push(&s, NAN);
  push(&s, FLT_MAX);
  for (int k = -149; k <= 127; ++k) {
    push_around(&s, ldexpf(1.0f, k), 3);
    push_around(&s, ldexpf(448.0f, k), 3);
    push_around(&s, ldexpf(1.5f, k), 1);
    /* the amax whose scaled value lands on 2^k: the byte flips there */
    double t = ldexp(1.0, k) / (double)c;
    if (t < FLT_MAX) push_around(&s, (float)t, 4);
  }
  for (uint64_t u = tu_range(r, 0, 1020); u <= 0x7F800000u; u += 1021)
    push(&s, from_bits((uint32_t)u));
  for (int i = 0; i < (1 << 16); ++i)
    push(&s, from_bits(tu_u32(r) & 0x007FFFFFu)); /* subnormals */
  for (int i = 0; i < (1 << 16); ++i)
    push(&s, from_bits(tu_u32(r) & 0x7FFFFFFFu));
  long bad = 0, zeros = 0;
  int seen[256] = {0}, distinct = 0;
  for (size_t i = 0; i < s.n; ++i) {
    float a = s.v[i];
    if (signbit(a) && !(a == 0)) continue; /* amax is never negative */
    unsigned want = ref_scale(a), got = mxf_e8m0_from_amax(a);
    if (got != want && ++bad <= 8) TU_CHECK(0, "e8m0_from_amax(%a) = %u, expected %u", a, got, want);
    zeros += want == 0;
    distinct += !seen[want]++;
  }
  TU_CHECK(bad == 0, "scale rule: %ld of %zu amax values wrong", bad, s.n);
  /* finite amax reaches bytes 0..247 (FLT_MAX/448 < 2^120); inf gives 254, NaN 0xFF */
  TU_CHECK(zeros > 100 && distinct >= 250 && seen[254] && seen[255],
           "scale sweep: %ld zero bytes, %d distinct", zeros, distinct);
  TU_CHECK(mxf_e8m0_from_amax(0.0f) == 0 && mxf_e8m0_from_amax(INFINITY) == 254 &&
               mxf_e8m0_from_amax(NAN) == 0xFF && mxf_e8m0_from_amax(448.0f) == 127 &&
               mxf_e8m0_from_amax(449.0f) == 128,
           "scale anchors: 0 -> 0, inf -> 254, NaN -> 0xFF, 448 -> 127, 449 -> 128");
  for (unsigned b = 0; b <= 254; ++b) {
    double want = b == 254 ? 0.0 : ldexp(1.0, 127 - (int)b);
    if ((double)mxf_e8m0_inv((uint8_t)b) != want) {
      TU_CHECK(0, "e8m0_inv(%u) = %a, expected %a", b, mxf_e8m0_inv((uint8_t)b), want);
      break;
    }
  }
  printf("scale rule: %zu amax values checked\n", s.n);
  free(s.v);
}

/* ------------------------------------------------------------ e2m1 packing */
static void test_e2m1_packing(tu_rng *r) {
  int n = (int)tu_range(r, 101, 777) | 1; /* odd: a lone low nibble at the end */
  uint8_t *codes = (uint8_t *)tu_malloc((size_t)n), *p = (uint8_t *)tu_malloc((size_t)(n + 1) / 2 + 1);
  for (int i = 0; i < n; ++i)
    codes[i] = (uint8_t)tu_range(r, 0, 15);
  tu_poison(p, (size_t)(n + 1) / 2 + 1, 0xA5);
  for (int i = 0; i + 1 < n; i += 2)
    p[i / 2] = mxf_e2m1_pack(codes[i], codes[i + 1]);
  mxf_e2m1_set(p, n - 1, codes[n - 1]);
  long bad = 0;
  for (int i = 0; i < n; ++i) {
    unsigned want = i & 1 ? (unsigned)p[i / 2] >> 4 : p[i / 2] & 0xFu;
    if (want != codes[i] || mxf_e2m1_get(p, i) != codes[i]) ++bad;
  }
  TU_CHECK(bad == 0, "e2m1 pack/get: %ld of %d wrong", bad, n);
  TU_CHECK(p[(n - 1) / 2] >> 4 == 0xA && p[(n + 1) / 2] == 0xA5,
           "e2m1 set of the last value kept its neighbour");
  TU_CHECK(mxf_e2m1_pack(0x13, 0xF2) == 0x23, "e2m1_pack masks to nibbles, low first");
  for (int t = 0; t < 1000; ++t) {
    int i = (int)tu_range(r, 0, n - 1);
    uint8_t c = (uint8_t)tu_u32(r); /* high bits must be ignored */
    uint8_t before = p[i / 2];
    mxf_e2m1_set(p, i, c);
    uint8_t keep = (i & 1) ? (before & 0x0F) : (before & 0xF0),
            mine = (i & 1) ? p[i / 2] >> 4 : p[i / 2] & 0xF;
    uint8_t other = (i & 1) ? (p[i / 2] & 0x0F) : (p[i / 2] & 0xF0);
    if (mine != (c & 0xF) || other != keep) {
      TU_CHECK(0, "e2m1_set(%d, 0x%02x): byte 0x%02x -> 0x%02x", i, c, before, p[i / 2]);
      break;
    }
  }
  free(codes);
  free(p);
}

/* ------------------------------------------------------------ swizzled scale layout */
static void test_swizzle_offset(tu_rng *r) {
  for (int t = 0; t < 24; ++t) {
    int64_t mn = tu_range(r, 1, 700), k = tu_range(r, 1, 1100), l = tu_range(r, 1, 3);
    int sf_vec = (t & 1) ? 16 : 32;
    if (t == 0) mn = 128, k = 4 * 32, l = 1;
    int64_t R = (mn + 127) / 128, Kb = (k + sf_vec - 1) / sf_vec, Kq = (Kb + 3) / 4;
    int64_t total = l * R * Kq * 512;
    TU_CHECK(mxf_sf_size(mn, k, l, sf_vec, MXF_SF_SWIZZLED) == (size_t)total,
             "mxf_sf_size swizzled (%lld,%lld,%lld)", (long long)mn, (long long)k, (long long)l);
    TU_CHECK(mxf_sf_size(mn, k, l, sf_vec, MXF_SF_COMPACT) == (size_t)(l * mn * Kb), "mxf_sf_size compact");
    uint8_t *seen = (uint8_t *)calloc((size_t)total, 1);
    long bad = 0, dup = 0;
    for (int64_t b = 0; b < l; ++b)
      for (int64_t row = 0; row < R * 128; ++row)
        for (int64_t kb = 0; kb < Kq * 4; ++kb) {
          /* physical C-contiguous shape (L, R, K', 32, 4, 4) */
          int64_t idx[6] = {b, row / 128, kb / 4, row % 32, (row / 32) % 4, kb % 4};
          int64_t ext[6] = {l, R, Kq, 32, 4, 4}, want = 0;
          for (int d = 0; d < 6; ++d)
            want = want * ext[d] + idx[d];
          int64_t got = mxf_sf_swz_offset(row, kb, b, R, Kq);
          if (got != want) ++bad;
          if (row < mn && kb < Kb && mxf_sf_swizzled_offset(row, kb, b, mn, k, sf_vec) != want) ++bad;
          if (want >= 0 && want < total && seen[want]++) ++dup;
        }
    TU_CHECK(bad == 0 && dup == 0,
             "swizzled offset (mn=%lld k=%lld l=%lld sf_vec=%d): %ld wrong, %ld collide", (long long)mn,
             (long long)k, (long long)l, sf_vec, bad, dup);
    free(seen);
  }
}

/* ------------------------------------------------------------ mxf_convert */
static const mxf_dtype all_dtypes[] = {MXF_F32,  MXF_F16,    MXF_BF16, MXF_E4M3, MXF_E5M2,
                                       MXF_E2M1, MXF_E2M1X2, MXF_E8M0, MXF_U8,   MXF_I8};

static size_t dtype_bytes(mxf_dtype d, int64_t n) {
  int bits = d == MXF_F32                         ? 32
             : (d == MXF_F16 || d == MXF_BF16)    ? 16
             : (d == MXF_E2M1 || d == MXF_E2M1X2) ? 4
                                                  : 8;
  return bits == 4 ? (size_t)(n + 1) / 2 : (size_t)n * (size_t)(bits / 8);
}

static void expect_error(const char *what, mxf_status want, const void *src, mxf_dtype sd, mxf_dtype dd,
                         int64_t n) {
  uint8_t dst[64];
  tu_poison(dst, sizeof dst, 0xA5);
  mxf_status st = mxf_convert(src, sd, dst, dd, n);
  const char *msg = mxf_last_error();
  TU_CHECK(st == want && strstr(msg, "mxf_convert") != NULL && tu_all_bytes(dst, sizeof dst, 0xA5),
           "%s: status %s (want %s), message \"%s\"", what, mxf_status_string(st), mxf_status_string(want),
           msg);
}

static void test_convert_api(tu_rng *r) {
  int64_t n = tu_range(r, 1000, 3000) | 1;
  float *x = (float *)tu_malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; ++i)
    x[i] = (float)(tu_normal(r) * ldexp(1.0, (int)tu_range(r, -12, 12)));
  x[0] = NAN, x[1] = -INFINITY, x[2] = -0.0f;
  /* f32 -> every encodable dtype and back; bytes past n (and e2m1's last high nibble) untouched */
  for (int fi = 0; fi < NFMT + 1; ++fi) {
    const ref_format *f = &g_fmts[fi < NFMT ? fi : 2];
    mxf_dtype d = fi < NFMT ? f->dtype : MXF_E2M1X2;
    size_t bytes = dtype_bytes(d, n);
    uint8_t *q = (uint8_t *)tu_malloc(bytes + 4);
    float *back = (float *)tu_malloc(sizeof(float) * (size_t)(n + 2));
    tu_poison(q, bytes + 4, 0xA5);
    tu_poison(back, sizeof(float) * (size_t)(n + 2), 0xA5);
    TU_CHECK(mxf_convert(x, MXF_F32, q, d, n) == MXF_OK, "f32 -> %s: %s", mxf_dtype_name(d),
             mxf_last_error());
    TU_CHECK(mxf_convert(q, d, back, MXF_F32, n) == MXF_OK, "%s -> f32: %s", mxf_dtype_name(d),
             mxf_last_error());
    long bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      unsigned c = code_at(q, f->bits, (size_t)i);
      if (c != f->enc(x[i]) || !same_value(back[i], (double)f->dec(c))) ++bad;
    }
    TU_CHECK(bad == 0, "%s round trip of %lld values: %ld wrong", mxf_dtype_name(d), (long long)n, bad);
    TU_CHECK(tu_all_bytes(q + bytes, 4, 0xA5) && tu_all_bytes(back + n, 2 * sizeof(float), 0xA5),
             "%s: bytes past n written", mxf_dtype_name(d));
    if (f->bits == 4)
      TU_CHECK(q[bytes - 1] >> 4 == 0xA, "%s: odd n left the last high nibble", mxf_dtype_name(d));
    free(q);
    free(back);
  }
  /* same-dtype copies, including raw bytes and odd e2m1 counts */
  for (size_t di = 0; di < sizeof all_dtypes / sizeof all_dtypes[0]; ++di) {
    mxf_dtype d = all_dtypes[di];
    int64_t m = tu_range(r, 1, 999) | 1;
    size_t bytes = dtype_bytes(d, m);
    uint8_t *a = (uint8_t *)tu_malloc(bytes), *b = (uint8_t *)tu_malloc(bytes + 4);
    for (size_t i = 0; i < bytes; ++i)
      a[i] = (uint8_t)tu_u32(r);
    tu_poison(b, bytes + 4, 0x5A);
    TU_CHECK(mxf_convert(a, d, b, d, m) == MXF_OK, "copy %s: %s", mxf_dtype_name(d), mxf_last_error());
    int ok = memcmp(a, b, bytes - 1) == 0 && tu_all_bytes(b + bytes, 4, 0x5A);
    if (d == MXF_E2M1 || d == MXF_E2M1X2)
      ok = ok && (b[bytes - 1] & 0xF) == (a[bytes - 1] & 0xF) && (b[bytes - 1] >> 4) == 0x5;
    else
      ok = ok && b[bytes - 1] == a[bytes - 1];
    TU_CHECK(ok, "copy %s of %lld values", mxf_dtype_name(d), (long long)m);
    free(a);
    free(b);
  }
  {
    uint8_t a[3] = {0x21, 0x43, 0x65}, b[3] = {0, 0, 0};
    TU_CHECK(mxf_convert(a, MXF_E2M1, b, MXF_E2M1X2, 6) == MXF_OK && memcmp(a, b, 3) == 0,
             "e2m1 -> e2m1x2 copy");
  }
  /* n = 0 writes nothing */
  {
    uint8_t b[8];
    tu_poison(b, 8, 0xA5);
    TU_CHECK(mxf_convert(x, MXF_F32, b, MXF_E4M3, 0) == MXF_OK && tu_all_bytes(b, 8, 0xA5), "n = 0");
  }
  /* errors: nothing written, a message naming the call */
  uint8_t src[64];
  memset(src, 0x3C, sizeof src);
  expect_error("NULL src", MXF_ERR_INVALID_VALUE, NULL, MXF_F32, MXF_E4M3, 4);
  {
    mxf_status st = mxf_convert(src, MXF_F32, NULL, MXF_E4M3, 4);
    TU_CHECK(st == MXF_ERR_INVALID_VALUE && strstr(mxf_last_error(), "dst"), "NULL dst: %s",
             mxf_last_error());
  }
  expect_error("n < 0", MXF_ERR_INVALID_VALUE, src, MXF_F32, MXF_E4M3, -1);
  expect_error("dtype 0", MXF_ERR_INVALID_VALUE, src, MXF_DTYPE_INVALID, MXF_F32, 4);
  expect_error("dtype 99", MXF_ERR_INVALID_VALUE, src, MXF_F32, (mxf_dtype)99, 4);
  expect_error("dtype -1", MXF_ERR_INVALID_VALUE, src, (mxf_dtype)-1, MXF_F32, 4);
  expect_error("bf16 -> e4m3", MXF_ERR_INVALID_VALUE, src, MXF_BF16, MXF_E4M3, 4);
  expect_error("e4m3 -> e5m2", MXF_ERR_INVALID_VALUE, src, MXF_E4M3, MXF_E5M2, 4);
  expect_error("e8m0 -> e4m3", MXF_ERR_INVALID_VALUE, src, MXF_E8M0, MXF_E4M3, 4);
  expect_error("u8 -> f32", MXF_ERR_INVALID_VALUE, src, MXF_U8, MXF_F32, 4);
  expect_error("f32 -> i8", MXF_ERR_INVALID_VALUE, src, MXF_F32, MXF_I8, 4);
  expect_error("f32 -> e8m0", MXF_ERR_NOT_SUPPORTED, src, MXF_F32, MXF_E8M0, 4);
  free(x);
}

int main(void) {
  tu_rng r;
  tu_rng_init(&r, tu_seed());
  for (int fi = 0; fi < NFMT; ++fi)
    ref_format_init(&g_fmts[fi]);
  test_decode();
  test_encode(&r);
  test_scale_rule(&r);
  test_e2m1_packing(&r);
  test_swizzle_offset(&r);
  test_convert_api(&r);
  for (int fi = 0; fi < NFMT; ++fi)
    free(g_fmts[fi].vals);
  return tu_finish("test_formats");
}
