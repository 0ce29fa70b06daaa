/* judge.c — SPEC §5's acceptance rule (judge.h; the rule: docs/spec.md §5). */
#include "judge.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"

/* ------------------------------------------------------------ counts */
void mxj_counts_init(mxj_counts *n) {
  memset(n, 0, sizeof *n);
  n->first_wrong = -1;
}

int64_t mxj_counts_total(const mxj_counts *n) { return n->exact + n->within + n->wrong; }

static void count(mxj_counts *n, mxj_verdict v, int equal, int64_t step, int64_t index) {
  if (!n) return;
  n->equal += equal;
  if (v == MXJ_EXACT) {
    ++n->exact;
  } else if (v == MXJ_WITHIN) {
    ++n->within;
    if (step > n->max_step) n->max_step = step;
  } else if (n->wrong++ == 0) {
    n->first_wrong = index;
  }
}

double mxj_share(int64_t part, int64_t whole) { return whole ? (double)part / (double)whole : 1.0; }

/* ------------------------------------------------------------ codes */
uint32_t mxj_encode(mxf_dtype c, float x) {
  switch (c) {
  case MXF_F32: return mxf_f32_bits(x);
  case MXF_F16: return mxf_f32_to_f16(x);
  case MXF_BF16: return mxf_f32_to_bf16(x);
  case MXF_E4M3: return mxf_f32_to_e4m3(x);
  case MXF_E5M2: return mxf_f32_to_e5m2(x);
  default: return mxf_f32_to_e2m1(x);
  }
}

float mxj_decode(mxf_dtype c, uint32_t code) {
  switch (c) {
  case MXF_F32: return mxf_f32_from_bits(code);
  case MXF_F16: return mxf_f16_to_f32((uint16_t)code);
  case MXF_BF16: return mxf_bf16_to_f32((uint16_t)code);
  case MXF_E4M3: return mxf_e4m3_to_f32((uint8_t)code);
  case MXF_E5M2: return mxf_e5m2_to_f32((uint8_t)code);
  default: return mxf_e2m1_to_f32((uint8_t)code);
  }
}

uint32_t mxj_code_at(mxf_dtype c, const void *p, int64_t i) {
  const uint8_t *b = p;
  switch (c) {
  case MXF_F32: {
    uint32_t u;
    memcpy(&u, b + i * 4, 4);
    return u;
  }
  case MXF_F16:
  case MXF_BF16: {
    uint16_t h;
    memcpy(&h, b + i * 2, 2);
    return h;
  }
  case MXF_E2M1:
  case MXF_E2M1X2: return mxf_e2m1_get(b, i);
  default: return b[i];
  }
}

int64_t mxj_code_ordinal(mxf_dtype c, uint32_t code, int *nan) {
  uint32_t mag, sign;
  int isnan_ = 0;
  switch (c) {
  case MXF_F32: mag = code & 0x7FFFFFFFu, sign = code >> 31, isnan_ = mag > 0x7F800000u; break;
  case MXF_F16: mag = code & 0x7FFFu, sign = (code >> 15) & 1u, isnan_ = mag > 0x7C00u; break;
  case MXF_BF16: mag = code & 0x7FFFu, sign = (code >> 15) & 1u, isnan_ = mag > 0x7F80u; break;
  case MXF_E4M3: mag = code & 0x7Fu, sign = (code >> 7) & 1u, isnan_ = mag == 0x7Fu; break;
  case MXF_E5M2: mag = code & 0x7Fu, sign = (code >> 7) & 1u, isnan_ = mag > 0x7Cu; break;
  case MXF_E2M1:
  case MXF_E2M1X2: mag = code & 0x7u, sign = (code >> 3) & 1u; break;
  default: mag = code & 0xFFu, sign = 0, isnan_ = mag == 0xFFu; break; /* e8m0 scale bytes */
  }
  if (nan) *nan = isnan_;
  return sign ? -(int64_t)mag : (int64_t)mag;
}

/* The same code: bit for bit, except that any NaN matches any NaN in f32 / f16 / bf16
 * (SPEC §0: NaN stays NaN, its payload unspecified; fp8 and e2m1 have one NaN code). */
static int same_code(mxf_dtype c, uint32_t a, uint32_t b) {
  if (a == b) return 1;
  if (c != MXF_F32 && c != MXF_F16 && c != MXF_BF16) return 0;
  int na, nb;
  mxj_code_ordinal(c, a, &na);
  mxj_code_ordinal(c, b, &nb);
  return na && nb;
}

static int64_t steps(mxf_dtype c, uint32_t a, uint32_t b) {
  int64_t d = mxj_code_ordinal(c, a, NULL) - mxj_code_ordinal(c, b, NULL);
  return d < 0 ? -d : d;
}

/* ------------------------------------------------------------ gemm_amax */
mxj_ref mxj_gemm_ref(const double *a, const double *b, int64_t k, double alpha) {
  /* One pass sums in k order and watches for the unusual: a nonzero product below 2^-126,
   * one large enough for Σ|t| to reach 2^127, an operand beyond f32, inf, NaN. Only then
   * a second pass works out the allowance of the tiny products and whether f32 overflows. */
  const double large = 0x1p127 / (double)(k > 0 ? k : 1);
  double s = 0.0, q = 0.0;
  int odd = 0;
  for (int64_t i = 0; i < k; ++i) {
    const double t = a[i] * b[i], at = fabs(t), ab = fabs(a[i]) + fabs(b[i]);
    s += t;
    q += t * t;
    if (!(at >= 0x1p-126 && at < large && ab < 0x1p127) && !(at == 0.0 && ab < 0x1p127)) odd = 1;
  }
  double sa = 0.0, tiny = 0.0;
  int big = 0;
  for (int64_t i = 0; odd && i < k; ++i) {
    const double x = fabs(a[i]), y = fabs(b[i]), at = fabs(a[i] * b[i]);
    sa += at < INFINITY ? at : 0.0; /* true infinities are exact in f32 too */
    if (at < 0x1p-126) tiny += at;
    big |= (x > FLT_MAX && x < INFINITY) || (y > FLT_MAX && y < INFINITY);
  }
  mxj_ref r;
  r.ref = alpha * s;
  r.delta =
      (0x1p-24 * (8.0 * sqrt((double)k) * sqrt(q) + ((double)k / 8.0 + 2.0) * fabs(s)) + tiny) * fabs(alpha);
  r.wide = big || !(sa < 0x1p127);
  return r;
}

/* The spacing of f32 values at |v|. */
static double f32_ulp(double v) {
  double a = fabs(v);
  if (!(a >= 0x1p-126)) return 0x1p-149;
  int e;
  frexp(a, &e);
  return ldexp(1.0, (e > 128 ? 128 : e) - 24);
}

static mxj_verdict judge_f32(const mxj_ref *r, uint32_t code) {
  const double ref = r->ref, tol = r->delta + f32_ulp(ref);
  const float lo = (float)(ref - r->delta), hi = (float)(ref + r->delta), got = mxf_f32_from_bits(code);
  if (mxf_f32_bits(lo) == mxf_f32_bits(hi) && code == mxf_f32_bits(lo)) return MXJ_EXACT;
  if (isnan(got)) return MXJ_WRONG;
  if (isinf(got)) /* the f32 rounding of a value within the bound overflows on that side */
    return (got > 0 ? (float)(ref + tol) == INFINITY : (float)(ref - tol) == -INFINITY) ? MXJ_WITHIN
                                                                                        : MXJ_WRONG;
  return fabs((double)got - ref) <= tol ? MXJ_WITHIN : MXJ_WRONG;
}

mxj_verdict mxj_gemm_judge(mxf_dtype c, const mxj_ref *r, uint32_t code, mxj_counts *n, int64_t index) {
  const double ref = r->ref;
  const uint32_t want = mxj_encode(c, (float)ref);
  const int equal = same_code(c, code, want);
  int nan_got;
  mxj_code_ordinal(c, code, &nan_got);
  mxj_verdict v;
  if (isnan(ref) || (isinf(ref) && !r->wide)) { /* NaN and true infinities: any order */
    v = equal ? MXJ_EXACT : MXJ_WRONG;
  } else if (r->wide) {
    v = MXJ_WITHIN;
  } else if (c == MXF_F32) {
    v = judge_f32(r, code);
  } else {
    const uint32_t lo = mxj_encode(c, (float)(ref - r->delta)), hi = mxj_encode(c, (float)(ref + r->delta));
    if (lo == hi)
      v = code == lo ? MXJ_EXACT : MXJ_WRONG;
    else
      v = !nan_got && mxj_code_ordinal(c, code, NULL) >= mxj_code_ordinal(c, lo, NULL) &&
                  mxj_code_ordinal(c, code, NULL) <= mxj_code_ordinal(c, hi, NULL)
              ? MXJ_WITHIN
              : MXJ_WRONG;
  }
  count(n, v, equal, nan_got ? 0 : steps(c, code, want), index);
  return v;
}

double mxj_amax_tolerance(int64_t k) { return 1e-6 * sqrt((double)(k > 0 ? k : 1)); }

int mxj_amax_ok(float got, double want, int want_nan, int64_t k) {
  if (want_nan) return isnan(got);
  if (isnan(got)) return 0;
  if (isinf(want)) return got == INFINITY;
  return fabs((double)got - want) <= mxj_amax_tolerance(k) * want;
}

/* ------------------------------------------------------------ proj_rope */
int mxj_proj_ref_alloc(mxj_proj_ref *r, int64_t t, int64_t h, int64_t d, int with_values) {
  memset(r, 0, sizeof *r);
  const size_t n = (size_t)(t * h * d), nr = (size_t)(t * h * (d / 32)),
               nc = (size_t)(mxf_cdiv(t, 32) * h * d);
  r->q.q_row = malloc(n + 1), r->q.q_col = malloc(n + 1);
  r->q.s_row = malloc(nr + 1), r->q.s_col = malloc(nc + 1);
  r->det_row = calloc(nr + 1, 1), r->det_col = calloc(nc + 1, 1);
  if (with_values) r->val = malloc(sizeof(float) * (n + 1));
  if (!r->q.q_row || !r->q.q_col || !r->q.s_row || !r->q.s_col || !r->det_row || !r->det_col ||
      (with_values && !r->val)) {
    mxj_proj_ref_free(r);
    return -1;
  }
  return 0;
}

void mxj_proj_ref_free(mxj_proj_ref *r) {
  free(r->q.q_row), free(r->q.q_col), free(r->q.s_row), free(r->q.s_col);
  free(r->det_row), free(r->det_col), free(r->val);
  memset(r, 0, sizeof *r);
}

static double x_at(const mxj_proj_inputs *in, int64_t t, int64_t k) {
  const int64_t K = in->k;
  if (!in->mxfp8) return mxf_bf16_to_f32(((const uint16_t *)in->x)[t * K + k]);
  return (double)mxf_e4m3_to_f32(((const uint8_t *)in->x)[t * K + k]) *
         (double)mxf_e8m0_to_f32(in->x_scale[t * (K / 32) + k / 32]);
}

/* ŵ[n, k] for output feature n = h·D + d, in either orientation. */
static double w_at(const mxj_proj_inputs *in, int64_t n, int64_t k) {
  const int64_t K = in->k, N = in->h * in->d;
  const int64_t wi = in->w_out_in ? n * K + k : k * N + n;
  if (!in->mxfp8) return mxf_bf16_to_f32(((const uint16_t *)in->w)[wi]);
  const int64_t si = in->w_out_in ? n * (K / 32) + k / 32 : (k / 32) * N + n;
  return (double)mxf_e4m3_to_f32(((const uint8_t *)in->w)[wi]) * (double)mxf_e8m0_to_f32(in->w_scale[si]);
}

/* SPEC §2.3 step 2 on one y, and whether no f32 summation order can change it. */
static void stage(const mxj_ref *g, int fp32, float *y, uint8_t *det) {
  const double ref = g->ref;
  const float f = (float)ref;
  *y = fp32 ? f : mxf_round_bf16(f);
  if (isnan(ref) || (isinf(ref) && !g->wide)) {
    *det = 1;
  } else if (g->wide) {
    *det = 0;
  } else {
    const float lo = (float)(ref - g->delta), hi = (float)(ref + g->delta);
    *det = fp32 ? mxf_f32_bits(lo) == mxf_f32_bits(hi) : mxf_f32_to_bf16(lo) == mxf_f32_to_bf16(hi);
  }
}

/* SPEC §2.3 step 3 for one (t, h): RoPE of the interleaved pairs into halves, one f32
 * rounding per product and per sum; a RoPE feature is determined when its pair is. */
static void rope(const mxj_proj_inputs *in, int64_t t, const float *y, const uint8_t *dy, float *out,
                 uint8_t *det) {
  const int64_t R = in->rope, nope = in->d - R, half = R / 2;
  const uint16_t *cs = in->cos + t * R, *sn = in->sin + t * R;
  for (int64_t d = 0; d < nope; ++d)
    out[d] = y[d], det[d] = dy[d];
  for (int64_t j = 0; j < half; ++j) {
    const float p = y[nope + 2 * j], q = y[nope + 2 * j + 1];
    const float pc = p * mxf_bf16_to_f32(cs[j]), qs = q * mxf_bf16_to_f32(sn[j]);
    const float ps = p * mxf_bf16_to_f32(sn[half + j]), qc = q * mxf_bf16_to_f32(cs[half + j]);
    out[nope + j] = pc - qs;
    out[nope + half + j] = ps + qc;
    det[nope + j] = det[nope + half + j] = dy[nope + 2 * j] && dy[nope + 2 * j + 1];
  }
}

static int all_set(const uint8_t *p, int64_t n, int64_t stride) {
  for (int64_t i = 0; i < n; ++i)
    if (!p[i * stride]) return 0;
  return 1;
}

int mxj_proj_reference(const mxj_proj_inputs *in, const uint8_t *tb_sel, const uint8_t *h_sel,
                       mxj_proj_ref *r, void (*progress)(void *ctx, double done, double total), void *ctx) {
  const int64_t T = in->t, K = in->k, H = in->h, D = in->d, N = H * D, TB = mxf_cdiv(T, 32);
  double *xd = malloc(sizeof(double) * (size_t)(T * K + 1)),
         *wd = malloc(sizeof(double) * (size_t)(D * K + 1));
  float *v = malloc(sizeof(float) * (size_t)(T * D + 1)), *y = malloc(sizeof(float) * (size_t)D);
  uint8_t *det = malloc((size_t)(T * D + 1)), *dy = malloc((size_t)D);
  int rc = -1;
  if (!xd || !wd || !v || !y || !det || !dy) goto done;
  for (int64_t t = 0; t < T; ++t)
    if (!tb_sel || tb_sel[t / 32])
      for (int64_t k = 0; k < K; ++k)
        xd[t * K + k] = x_at(in, t, k);
  int64_t heads = 0, done_heads = 0;
  for (int64_t h = 0; h < H; ++h)
    heads += !h_sel || h_sel[h];
  for (int64_t h = 0; h < H; ++h) {
    if (h_sel && !h_sel[h]) continue;
    if (progress) progress(ctx, (double)done_heads++, (double)heads);
    for (int64_t d = 0; d < D; ++d)
      for (int64_t k = 0; k < K; ++k)
        wd[d * K + k] = w_at(in, h * D + d, k);
    for (int64_t t = 0; t < T; ++t) {
      if (tb_sel && !tb_sel[t / 32]) continue;
      for (int64_t d = 0; d < D; ++d) {
        const mxj_ref g = mxj_gemm_ref(xd + t * K, wd + d * K, K, 1.0);
        stage(&g, in->fp32_epilogue, y + d, dy + d);
      }
      rope(in, t, y, dy, v + t * D, det + t * D);
      /* row blocks of (t, h) */
      for (int64_t b = 0; b < D / 32; ++b) {
        const int64_t si = (t * H + h) * (D / 32) + b, q0 = (t * H + h) * D + 32 * b;
        r->q.s_row[si] = mxf_mx_quantize_block(v + t * D + 32 * b, 32, 1, r->q.q_row + q0, 1);
        r->det_row[si] = (uint8_t)all_set(det + t * D + 32 * b, 32, 1);
      }
      if (r->val) memcpy(r->val + (t * H + h) * D, v + t * D, sizeof(float) * (size_t)D);
    }
    /* column blocks of (h, d): 32 tokens, fewer in the last block */
    for (int64_t tb = 0; tb < TB; ++tb) {
      if (tb_sel && !tb_sel[tb]) continue;
      const int n = (int)(T - 32 * tb < 32 ? T - 32 * tb : 32);
      for (int64_t d = 0; d < D; ++d) {
        const int64_t si = (tb * H + h) * D + d;
        r->q.s_col[si] =
            mxf_mx_quantize_block(v + 32 * tb * D + d, n, D, r->q.q_col + (32 * tb * H + h) * D + d, N);
        r->det_col[si] = (uint8_t)all_set(det + 32 * tb * D + d, n, D);
      }
    }
  }
  if (progress) progress(ctx, (double)heads, (double)heads);
  rc = 0;
done:
  free(xd), free(wd), free(v), free(y), free(det), free(dy);
  return rc;
}

static double deq(uint8_t code, uint8_t s) {
  if (s == 0xFF || (code & 0x7F) == 0x7F) return NAN;
  return (double)mxf_e4m3_to_f32(code) * ldexp(1.0, (int)s - 127);
}

/* One block: scale byte si, n codes from q0 every qs. */
static void judge_block(mxj_proj_counts *c, const mxj_proj_ref *r, const mxj_proj_outputs *got, int col,
                        int64_t si, int64_t q0, int64_t qs, int64_t n) {
  const uint8_t *gq = col ? got->q_col : got->q_row, *gs = col ? got->s_col : got->s_row;
  const uint8_t *rq = col ? r->q.q_col : r->q.q_row, *rs = col ? r->q.s_col : r->q.s_row;
  int equal = gs[si] == rs[si];
  int64_t step = 0;
  ++c->scales;
  c->scales_equal += equal;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t qi = q0 + i * qs;
    const int e = gq[qi] == rq[qi];
    ++c->codes;
    c->codes_equal += e;
    if (!e) {
      const int64_t s = steps(MXF_E4M3, gq[qi], rq[qi]);
      equal = 0;
      if (s > step) step = s;
    }
    if (r->val) {
      const double v = deq(gq[qi], gs[si]), ref = r->val[qi];
      ++c->close_n;
      c->close += isnan(ref) ? isnan(v) : fabs(v - ref) <= 0.1 + 0.1 * fabs(ref);
    }
  }
  const uint8_t *det = col ? r->det_col : r->det_row;
  count(&c->blocks, det[si] ? (equal ? MXJ_EXACT : MXJ_WRONG) : MXJ_WITHIN, equal, step, si);
}

void mxj_proj_judge(const mxj_proj_inputs *in, const uint8_t *tb_sel, const uint8_t *h_sel,
                    const mxj_proj_ref *r, const mxj_proj_outputs *got, mxj_proj_counts out[2]) {
  const int64_t T = in->t, H = in->h, D = in->d, N = H * D, TB = mxf_cdiv(T, 32);
  for (int col = 0; col < 2; ++col) {
    memset(&out[col], 0, sizeof out[col]);
    mxj_counts_init(&out[col].blocks);
  }
  for (int64_t tb = 0; tb < TB; ++tb) {
    if (tb_sel && !tb_sel[tb]) continue;
    const int64_t n = T - 32 * tb < 32 ? T - 32 * tb : 32;
    for (int64_t h = 0; h < H; ++h) {
      if (h_sel && !h_sel[h]) continue;
      for (int64_t t = 32 * tb; t < 32 * tb + n; ++t)
        for (int64_t b = 0; b < D / 32; ++b)
          judge_block(&out[0], r, got, 0, (t * H + h) * (D / 32) + b, (t * H + h) * D + 32 * b, 1, 32);
      for (int64_t d = 0; d < D; ++d)
        judge_block(&out[1], r, got, 1, (tb * H + h) * D + d, (32 * tb * H + h) * D + d, N, n);
    }
  }
}

int mxj_cudnn_ok(const mxj_proj_counts *c) { return (double)c->close >= 0.95 * (double)c->close_n; }
