/*
 * validate.c — every rule of SPEC §1–§4 about a request, in one place.
 *
 * Public descriptors become normalized problems (internal.h): logical extents, strides
 * counted in values, dtypes resolved (u8/i8 scales -> e8m0, packed e2m1 -> e2m1, ...).
 * Each refusal names the op, the tensor, the rule, the actual and the expected values.
 * The run-time checks (pointers, alignment, workspace) live here too.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/packed.h"
#include "core/validate.h"

/* ------------------------------------------------------------ formatting */
typedef struct strbuf {
  char s[160];
} strbuf;

static const char *fmt_ints(strbuf *b, const int64_t *v, int n) {
  size_t used = 0;
  b->s[0] = '\0';
  used += (size_t)snprintf(b->s + used, sizeof b->s - used, "(");
  for (int i = 0; i < n && used < sizeof b->s; ++i)
    used += (size_t)snprintf(b->s + used, sizeof b->s - used, "%s%" PRId64, i ? ", " : "", v[i]);
  if (used < sizeof b->s) snprintf(b->s + used, sizeof b->s - used, ")");
  return b->s;
}

static const char *fmt_shape(strbuf *b, const mxf_tensor *t) { return fmt_ints(b, t->shape, t->ndim); }

static const char *fmt_device(strbuf *b, int32_t device) {
  if (device == MXF_DEVICE_CPU)
    snprintf(b->s, sizeof b->s, "cpu");
  else
    snprintf(b->s, sizeof b->s, "cuda:%d", (int)MXF_DEVICE_ORDINAL(device));
  return b->s;
}

/* ------------------------------------------------------------ per-request context */
typedef struct vctx {
  const char *op; /* "gemm_amax", ... */
  int need_data;  /* one-call form */
  int have_device;
  int32_t device;
  const char *first; /* name of the tensor that fixed the device */
} vctx;

#define FAIL(...) return mxf_set_error(MXF_ERR_INVALID_VALUE, __VA_ARGS__)
#define TRY(x)                                                                                               \
  do {                                                                                                       \
    mxf_status st_ = (x);                                                                                    \
    if (st_ != MXF_OK) return st_;                                                                           \
  } while (0)

#define MXF_MAX_EXTENT (INT64_C(1) << 40)

/* Strides of t in its own units: explicit ones, or C-contiguous when all are zero.
 * Returns 1 when the strides were explicit. */
static int tensor_strides(const mxf_tensor *t, int64_t s[MXF_MAX_DIMS]) {
  int explicit_ = 0;
  for (int i = 0; i < t->ndim; ++i)
    explicit_ |= t->stride[i] != 0;
  if (explicit_) {
    for (int i = 0; i < t->ndim; ++i)
      s[i] = t->stride[i];
    return 1;
  }
  int64_t acc = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= t->shape[i];
  }
  return 0;
}

/* The rules every tensor of every op obeys: a dimension count in range, a valid dtype,
 * positive extents, non-negative strides, a sane size, one device per op, data present
 * in the one-call form. */
static mxf_status check_tensor(vctx *v, const char *name, const mxf_tensor *t) {
  strbuf b1, b2;
  if (t->ndim < 1 || t->ndim > MXF_MAX_DIMS)
    FAIL("%s: %s has ndim %d; expected a tensor of 1 to %d dimensions", v->op, name, (int)t->ndim,
         MXF_MAX_DIMS);
  if (!mxf_dtype_traits_of(t->dtype)) FAIL("%s: %s has an invalid dtype (%d)", v->op, name, (int)t->dtype);
  for (int i = 0; i < t->ndim; ++i) {
    if (t->shape[i] < 0)
      FAIL("%s: %s has shape %s; every extent must be >= 0", v->op, name, fmt_shape(&b1, t));
    if (t->shape[i] > MXF_MAX_EXTENT)
      FAIL("%s: %s has shape %s; extents above 2^40 are refused", v->op, name, fmt_shape(&b1, t));
    if (t->stride[i] < 0 || t->stride[i] > MXF_MAX_EXTENT)
      FAIL("%s: %s has strides %s; strides must be in [0, 2^40]", v->op, name,
           fmt_ints(&b1, t->stride, t->ndim));
  }
  /* element count and strided span, in bytes, must fit in 62 bits (no overflow of a byte
   * offset or size in any backend) */
  int64_t s[MXF_MAX_DIMS], count = 1, span = 1;
  tensor_strides(t, s);
  const int64_t bytes = mxf_dtype_traits_of(t->dtype)->bits / 8,
                limit = (INT64_C(1) << 62) / (bytes ? bytes : 1);
  for (int i = 0; i < t->ndim; ++i) {
    int64_t part;
    if (__builtin_mul_overflow(count, t->shape[i], &count) ||
        (t->shape[i] > 0 && (__builtin_mul_overflow(t->shape[i] - 1, s[i], &part) ||
                             __builtin_add_overflow(span, part, &span))) ||
        count > limit || span > limit)
      FAIL("%s: %s has shape %s; its bytes exceed 2^62", v->op, name, fmt_shape(&b1, t));
  }
  if (t->device < 0)
    FAIL("%s: %s has device %d; expected MXF_DEVICE_CPU (0) or MXF_DEVICE_CUDA(i) (1 + i)", v->op, name,
         (int)t->device);
  if (!v->have_device) {
    v->have_device = 1;
    v->device = t->device;
    v->first = name;
  } else if (t->device != v->device) {
    FAIL("%s: %s is on %s but %s is on %s; all tensors of one op must be on one device", v->op, name,
         fmt_device(&b1, t->device), v->first, fmt_device(&b2, v->device));
  }
  if (v->need_data && !t->data && count > 0)
    FAIL("%s: %s has no data (NULL); the one-call form needs every tensor's data pointer", v->op, name);
  return MXF_OK;
}

/* A tensor that must be absent: data NULL and ndim 0. */
static mxf_status check_absent(vctx *v, const char *name, const mxf_tensor *t, const char *why) {
  if (t->data || t->ndim != 0)
    FAIL("%s: %s must be absent (data NULL, ndim 0) %s; got ndim %d, data %p", v->op, name, why, (int)t->ndim,
         t->data);
  return MXF_OK;
}

static mxf_status check_dtype(vctx *v, const char *name, const mxf_tensor *t, unsigned kinds,
                              const char *expected) {
  if (!mxf_dtype_is(t->dtype, kinds))
    FAIL("%s: %s has dtype %s; expected %s", v->op, name, mxf_dtype_name(t->dtype), expected);
  return MXF_OK;
}

static mxf_status check_dtype_is(vctx *v, const char *name, const mxf_tensor *t, mxf_dtype want,
                                 const char *extra) {
  if (t->dtype != want)
    FAIL("%s: %s has dtype %s; expected %s%s", v->op, name, mxf_dtype_name(t->dtype), mxf_dtype_name(want),
         extra);
  return MXF_OK;
}

/* t must have exactly the shape `want`; `expected` spells it with names, e.g.
 * "(T=4096, rope=64)". */
static mxf_status check_shape(vctx *v, const char *name, const mxf_tensor *t, int ndim, const int64_t *want,
                              const char *expected) {
  int ok = t->ndim == ndim;
  for (int i = 0; ok && i < ndim; ++i)
    ok = t->shape[i] == want[i];
  if (!ok) {
    strbuf b;
    FAIL("%s: %s has shape %s; expected %s", v->op, name, fmt_shape(&b, t), expected);
  }
  return MXF_OK;
}

/* C-contiguous: all-zero strides, or explicit ones equal to the contiguous strides
 * (strides of extent-1 dimensions are never used and may hold anything). */
static int64_t tensor_count(const mxf_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; ++i)
    n *= t->shape[i];
  return n;
}

static mxf_status check_contiguous(vctx *v, const char *name, const mxf_tensor *t) {
  int64_t s[MXF_MAX_DIMS];
  if (!tensor_strides(t, s) || tensor_count(t) == 0) return MXF_OK; /* an empty one addresses nothing */
  int64_t want[MXF_MAX_DIMS], acc = 1;
  int ok = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    want[i] = acc;
    acc *= t->shape[i];
    if (t->shape[i] > 1 && s[i] != want[i]) ok = 0;
  }
  if (!ok) {
    strbuf b1, b2;
    FAIL("%s: %s has strides %s; expected C-contiguous %s or all zero", v->op, name,
         fmt_ints(&b1, t->stride, t->ndim), fmt_ints(&b2, want, t->ndim));
  }
  return MXF_OK;
}

/* ------------------------------------------------------------ gemm_amax (SPEC §1) */
/* One of a, b, c as a normalized strided matrix (extents and strides in values). */
typedef struct gemm_mat {
  int64_t rows, cols, l;
  int64_t rs, cs, ls;
  int col_unit; /* unit stride along cols (k-major A/B, n-major C) */
} gemm_mat;

/* Role of a gemm matrix: its dimension names and what it may hold. */
typedef struct gemm_role {
  const char *name, *rdim, *cdim; /* "a", "M", "K" */
  const char *rmajor, *cmajor;    /* "m-major", "k-major" */
  int output;
} gemm_role;

static mxf_status check_gemm_matrix(vctx *v, const gemm_role *r, const mxf_tensor *t, int bits, gemm_mat *m) {
  strbuf b1;
  const char *n = r->name;
  if (t->ndim != 2 && t->ndim != 3)
    FAIL("%s: %s has shape %s; expected (%s, %s, L) or (%s, %s)", v->op, n, fmt_shape(&b1, t), r->rdim,
         r->cdim, r->rdim, r->cdim);
  int64_t s[MXF_MAX_DIMS];
  int explicit_ = tensor_strides(t, s);
  int packed_bytes = mxf_dtype_is(t->dtype, MXF_DK_E2M1_BYTES);
  int e2m1 = packed_bytes || t->dtype == MXF_E2M1;
  m->rows = t->shape[0];
  m->cols = t->shape[1];
  m->l = t->ndim == 3 ? t->shape[2] : 1;
  if (m->rows == 0 || m->cols == 0 || m->l == 0) { /* empty: addresses nothing, any strides do */
    if (packed_bytes) m->cols *= 2;
    m->col_unit = 1;
    m->rs = m->cols;
    m->cs = 1;
    m->ls = m->rows * m->cols;
    return MXF_OK;
  }
  m->rs = s[0];
  m->cs = s[1];
  m->ls = t->ndim == 3 ? s[2] : 0;
  if (packed_bytes) {
    /* described in bytes = pairs: the packed dimension must be the unit-stride one */
    if (m->cs != 1 && m->cols > 1)
      FAIL("%s: %s is packed e2m1 (%s) with strides %s; e2m1 must be %s (unit stride along %s)", v->op, n,
           mxf_dtype_name(t->dtype), fmt_ints(&b1, t->stride, t->ndim), r->cmajor, r->cdim);
    m->cols *= 2;
    m->rs *= 2;
    m->ls *= 2;
    m->cs = 1;
  } else if (e2m1 && m->cols % 2 != 0) {
    FAIL("%s: %s is e2m1 with %s=%" PRId64 "; the packed (innermost) extent must be even", v->op, n, r->cdim,
         m->cols);
  }
  /* Which dimension has the unit stride (strides of extent-1 dimensions are unused). */
  if (m->cols == 1 && m->rows > 1 && m->rs == 1)
    m->col_unit = 0;
  else if (m->cs == 1 || m->cols == 1)
    m->col_unit = 1;
  else if (m->rs == 1 || m->rows == 1)
    m->col_unit = 0;
  else
    FAIL("%s: %s has strides %s%s; exactly one of the %s and %s strides must be 1 (%s or %s)%s", v->op, n,
         fmt_ints(&b1, s, t->ndim), explicit_ ? "" : " (C-contiguous, from all-zero strides)", r->rdim,
         r->cdim, r->cmajor, r->rmajor,
         explicit_ ? ""
                   : "; give explicit strides, e.g. (cols, 1, rows*cols) for a batched row-major matrix");
  if (m->col_unit && m->rs == 1 && m->rows > 1 && m->cols > 1)
    FAIL("%s: %s has strides %s; the %s and %s strides are both 1 (elements overlap)", v->op, n,
         fmt_ints(&b1, s, t->ndim), r->rdim, r->cdim);
  if (e2m1 && !m->col_unit)
    FAIL("%s: %s is e2m1 and %s; e2m1 %s must be %s (packed along %s)", v->op, n, r->rmajor,
         r->output ? "C" : "operands", r->cmajor, r->cdim);
  /* leading dimension: no overlapping rows, every row start 16-byte aligned */
  int64_t ld = m->col_unit ? m->rs : m->cs;
  int64_t inner = m->col_unit ? m->cols : m->rows, outer = m->col_unit ? m->rows : m->cols;
  const char *major = m->col_unit ? r->cmajor : r->rmajor;
  const char *inner_name = m->col_unit ? r->cdim : r->rdim;
  int64_t unit = packed_bytes ? 2 : 1; /* values per described element */
  if (outer > 1) {
    if (ld < inner)
      FAIL("%s: %s is %s with leading stride %" PRId64 " < %s=%" PRId64 " (values); rows would overlap",
           v->op, n, major, ld / unit, inner_name, inner / unit);
    if ((ld * bits) % 128 != 0)
      FAIL("%s: %s has leading stride %" PRId64 " (%" PRId64 "%s bytes); every row start must be 16-byte "
           "aligned (leading stride a multiple of 16 bytes)",
           v->op, n, ld / unit, ld * bits / 8, (ld * bits) % 8 ? ".5" : "");
  } else {
    /* unused stride: give backends an aligned, non-overlapping value */
    ld = mxf_round_up(inner * bits, 128) / bits;
    if (m->col_unit)
      m->rs = ld;
    else
      m->cs = ld;
  }
  int64_t span = (outer - 1) * ld + inner; /* values of one matrix */
  if (m->l > 1) {
    if ((m->ls * bits) % 128 != 0)
      FAIL("%s: %s has batch stride %" PRId64 " (%" PRId64 "%s bytes); every matrix start must be 16-byte "
           "aligned (batch stride a multiple of 16 bytes)",
           v->op, n, m->ls / unit, m->ls * bits / 8, (m->ls * bits) % 8 ? ".5" : "");
    if (r->output && m->ls < span)
      FAIL("%s: %s has batch stride %" PRId64 " < %" PRId64 " (the span of one matrix); output batches "
           "would overlap",
           v->op, n, m->ls / unit, span / unit);
  } else {
    m->ls = mxf_round_up(span * bits, 128) / bits;
  }
  return MXF_OK;
}

/* SF tensor of an operand with `mn` rows: swizzled (logical 6-D or physical 6-D) or
 * compact (3-D, or 2-D when L == 1), told apart by shape. */
static mxf_status check_gemm_sf(vctx *v, const char *name, const mxf_tensor *t, const char *mn_name,
                                int64_t mn, int64_t k, int64_t l, int sf_vec, mxf_sf_layout *layout) {
  int64_t R = mxf_cdiv(mn, 128), kb = mxf_cdiv(k, sf_vec), kq = mxf_cdiv(kb, 4);
  const int64_t logical[6] = {32, 4, R, 4, kq, l};
  const int64_t physical[6] = {l, R, kq, 32, 4, 4};
  const int64_t compact[3] = {l, mn, kb};
  strbuf b1, b2, b3, b4, b5;
  int match = 0; /* 1 logical, 2 physical, 3 compact 3-D, 4 compact 2-D */
  if (t->ndim == 6 && !memcmp(t->shape, logical, sizeof logical))
    match = 1;
  else if (t->ndim == 6 && !memcmp(t->shape, physical, sizeof physical))
    match = 2;
  else if (t->ndim == 3 && !memcmp(t->shape, compact, sizeof compact))
    match = 3;
  else if (t->ndim == 2 && l == 1 && t->shape[0] == mn && t->shape[1] == kb)
    match = 4;
  if (!match) {
    char extra[64] = "";
    if (l == 1) snprintf(extra, sizeof extra, " or (%" PRId64 ", %" PRId64 ")", mn, kb);
    FAIL("%s: %s has shape %s; expected %s or %s or %s%s for %s=%" PRId64 ", K=%" PRId64 ", L=%" PRId64
         ", sf_vec=%d",
         v->op, name, fmt_shape(&b1, t), fmt_ints(&b2, logical, 6), fmt_ints(&b3, physical, 6),
         fmt_ints(&b4, compact, 3), extra, mn_name, mn, k, l, sf_vec);
  }
  if (match == 1) {
    /* the logical view of the physical (L, R, K', 32, 4, 4) bytes, permuted */
    const int64_t want[6] = {16, 4, kq * 512, 1, 512, R * kq * 512};
    int64_t s[MXF_MAX_DIMS];
    if (tensor_strides(t, s)) {
      for (int i = 0; i < 6; ++i)
        if (t->shape[i] > 1 && s[i] != want[i])
          FAIL("%s: %s is swizzled (32, 4, R, 4, K', L) with strides %s; expected %s (the permuted dense "
               "(L, R, K', 32, 4, 4) layout) or all zero",
               v->op, name, fmt_ints(&b1, s, 6), fmt_ints(&b5, want, 6));
    }
  } else {
    TRY(check_contiguous(v, name, t));
  }
  *layout = match <= 2 ? MXF_SF_SWIZZLED : MXF_SF_COMPACT;
  return MXF_OK;
}

static mxf_dtype gemm_operand_format(mxf_dtype d) {
  if (d == MXF_E4M3 || d == MXF_E5M2) return d;
  return MXF_E2M1; /* e2m1 values, or e2m1x2/u8/i8 bytes */
}

static const unsigned gemm_mx_kinds = MXF_DK_FP8 | MXF_DK_E2M1_VALUES | MXF_DK_E2M1_BYTES;
static const char *const gemm_mx_list = "e4m3, e5m2, e2m1, e2m1x2, u8 or i8 (u8/i8 = packed e2m1 pairs)";
static const char *const gemm_sf_list = "e8m0, u8, i8 (read as e8m0) or e4m3 (ue4m3)";
static const gemm_role gemm_role_b = {"b", "N", "K", "n-major", "k-major", 0};

/* sf_vec against the formats and scale dtypes (SPEC §1.1): sf_vec 32 takes e8m0 scales
 * and any formats; sf_vec 16 (NVFP4-style) an e2m1 B and an e2m1 or bf16 A (fa
 * MXF_DTYPE_INVALID: B alone, for the packing), each scale e8m0 or ue4m3. */
static mxf_status check_sf_vec_rule(vctx *v, int sf_vec, const mxf_tensor *a, mxf_dtype fa,
                                    const mxf_tensor *b, mxf_dtype fb, mxf_dtype sfa, mxf_dtype sfb) {
  if (sf_vec == 32) {
    if (sfa == MXF_E4M3 || sfb == MXF_E4M3)
      FAIL("%s: %s has dtype e4m3 (ue4m3) with sf_vec 32; ue4m3 scales need e2m1 operands and sf_vec 16 "
           "(sf_vec 32 takes e8m0)",
           v->op, sfa == MXF_E4M3 ? "sfa" : "sfb");
  } else if (fa == MXF_DTYPE_INVALID) {
    if (fb != MXF_E2M1)
      FAIL("%s: sf_vec=16 with b %s; sf_vec 16 (NVFP4-style) needs an e2m1 b (e4m3 and e5m2 take sf_vec 32)",
           v->op, mxf_dtype_name(b->dtype));
  } else if (fb != MXF_E2M1 || (fa != MXF_BF16 && fa != MXF_E2M1)) {
    FAIL("%s: sf_vec=16 with a %s and b %s; sf_vec 16 (NVFP4-style) needs an e2m1 b and an e2m1 or bf16 a "
         "(e4m3 and e5m2 take sf_vec 32)",
         v->op, mxf_dtype_name(a->dtype), mxf_dtype_name(b->dtype));
  }
  return MXF_OK;
}

mxf_status mxf_validate_pack_weights(const mxf_tensor *b, const mxf_tensor *sfb, int sf_vec, int need_data,
                                     mxf_gemm_problem *p, int32_t *device) {
  vctx v = {"pack_weights", need_data, 0, 0, NULL};
  strbuf b1;
  if (!b) FAIL("pack_weights: b is NULL");
  if (!sfb) FAIL("pack_weights: sfb is NULL");
  if (sf_vec != 16 && sf_vec != 32) FAIL("pack_weights: sf_vec=%d; expected 16 or 32", sf_vec);
  TRY(check_tensor(&v, "b", b));
  TRY(check_tensor(&v, "sfb", sfb));
  TRY(check_dtype(&v, "b", b, gemm_mx_kinds, gemm_mx_list));
  TRY(check_dtype(&v, "sfb", sfb, MXF_DK_SCALE_E8M0 | MXF_DK_SCALE_UE4M3, gemm_sf_list));
  const mxf_dtype fb = gemm_operand_format(b->dtype), sf = sfb->dtype == MXF_E4M3 ? MXF_E4M3 : MXF_E8M0;
  TRY(check_sf_vec_rule(&v, sf_vec, NULL, MXF_DTYPE_INVALID, b, fb, MXF_DTYPE_INVALID, sf));
  gemm_mat B;
  TRY(check_gemm_matrix(&v, &gemm_role_b, b, mxf_dtype_bits(fb), &B));
  if (B.cols == 0)
    FAIL("pack_weights: b has shape %s; K=0 is refused (an empty reduction has no scale blocks)",
         fmt_shape(&b1, b));
  mxf_sf_layout lb;
  TRY(check_gemm_sf(&v, "sfb", sfb, "N", B.rows, B.cols, B.l, sf_vec, &lb));
  memset(p, 0, sizeof *p);
  p->n = B.rows, p->k = B.cols, p->l = B.l;
  p->b_fmt = fb, p->sfb_fmt = sf, p->sf_vec = sf_vec, p->kb = mxf_cdiv(B.cols, sf_vec);
  p->sfb_layout = lb;
  p->b_ns = B.rs, p->b_ks = B.cs, p->b_ls = B.ls;
  *device = v.device;
  return MXF_OK;
}

mxf_status mxf_validate_gemm_amax(const mxf_gemm_amax_desc *d, int need_data, mxf_gemm_problem *p,
                                  int32_t *device) {
  vctx v = {"gemm_amax", need_data, 0, 0, NULL};
  strbuf b1;
  if (!d) FAIL("gemm_amax: desc is NULL");
  const unsigned known = MXF_AMAX_ACCUMULATE | MXF_AMAX_B_PACKED;
  if (d->flags & ~known)
    FAIL("gemm_amax: flags 0x%x has unknown bits 0x%x; known: MXF_AMAX_ACCUMULATE (0x1), MXF_AMAX_B_PACKED "
         "(0x2)",
         d->flags, d->flags & ~known);
  const int packed = (d->flags & MXF_AMAX_B_PACKED) != 0;
  if (d->sf_vec != 16 && d->sf_vec != 32) FAIL("gemm_amax: sf_vec=%d; expected 16 or 32", d->sf_vec);

  TRY(check_tensor(&v, "a", &d->a));
  TRY(check_tensor(&v, "b", &d->b));

  /* formats (SPEC §1.1): A bf16 or MX, B MX, each MX operand with its own scales */
  if (d->a.dtype != MXF_BF16)
    TRY(check_dtype(&v, "a", &d->a, gemm_mx_kinds,
                    "bf16, e4m3, e5m2, e2m1, e2m1x2, u8 or i8 (u8/i8 = packed e2m1 pairs)"));
  TRY(check_dtype(&v, "b", &d->b, gemm_mx_kinds, gemm_mx_list));
  const mxf_dtype fa = d->a.dtype == MXF_BF16 ? MXF_BF16 : gemm_operand_format(d->a.dtype);
  const mxf_dtype fb = gemm_operand_format(d->b.dtype);
  if (fa == MXF_BF16) {
    if (d->sfa.data || d->sfa.ndim != 0)
      FAIL("gemm_amax: a is bf16, so sfa must be absent (data NULL, ndim 0); got %s",
           d->sfa.ndim > 0 && d->sfa.ndim <= MXF_MAX_DIMS ? fmt_shape(&b1, &d->sfa) : "a tensor");
  } else {
    if (!d->sfa.data && d->sfa.ndim == 0)
      FAIL("gemm_amax: a is %s, so sfa is required; got an absent sfa (only a bf16 a has no scales)",
           mxf_dtype_name(d->a.dtype));
    TRY(check_tensor(&v, "sfa", &d->sfa));
  }
  if (packed) { /* SPEC §7.1: described as packed, its bytes inside b's */
    if (d->sfb.data)
      FAIL("gemm_amax: MXF_AMAX_B_PACKED: sfb's data must be NULL (its scales are in the packed b); got %p",
           d->sfb.data);
    v.need_data = 0;
  }
  TRY(check_tensor(&v, "sfb", &d->sfb));
  v.need_data = need_data;
  TRY(check_tensor(&v, "c", &d->c));
  TRY(check_tensor(&v, "amax", &d->amax));
  if (!(mxf_dtype_is(d->c.dtype, MXF_DK_FLOAT | MXF_DK_FP8 | MXF_DK_E2M1_VALUES) ||
        d->c.dtype == MXF_E2M1X2 || d->c.dtype == MXF_U8))
    FAIL("gemm_amax: c has dtype %s; expected f32, f16, bf16, e4m3, e5m2, e2m1, e2m1x2 or u8 (u8 = packed "
         "e2m1 pairs)",
         mxf_dtype_name(d->c.dtype));
  mxf_dtype sfa = MXF_DTYPE_INVALID;
  if (fa != MXF_BF16) {
    TRY(check_dtype(&v, "sfa", &d->sfa, MXF_DK_SCALE_E8M0 | MXF_DK_SCALE_UE4M3, gemm_sf_list));
    sfa = d->sfa.dtype == MXF_E4M3 ? MXF_E4M3 : MXF_E8M0;
  }
  TRY(check_dtype(&v, "sfb", &d->sfb, MXF_DK_SCALE_E8M0 | MXF_DK_SCALE_UE4M3, gemm_sf_list));
  const mxf_dtype sfb = d->sfb.dtype == MXF_E4M3 ? MXF_E4M3 : MXF_E8M0;
  TRY(check_sf_vec_rule(&v, d->sf_vec, &d->a, fa, &d->b, fb, sfa, sfb));

  /* matrices */
  static const gemm_role ra = {"a", "M", "K", "m-major", "k-major", 0};
  static const gemm_role rc = {"c", "M", "N", "m-major", "n-major", 1};
  gemm_mat A, B, C;
  /* bits per value of the normalized formats (e2m1 however described: 4) */
  TRY(check_gemm_matrix(&v, &ra, &d->a, mxf_dtype_bits(fa), &A));
  TRY(check_gemm_matrix(&v, &gemm_role_b, &d->b, mxf_dtype_bits(fb), &B));
  mxf_dtype fc = mxf_dtype_is(d->c.dtype, MXF_DK_E2M1_VALUES | MXF_DK_E2M1_BYTES) ? MXF_E2M1 : d->c.dtype;
  TRY(check_gemm_matrix(&v, &rc, &d->c, mxf_dtype_bits(fc), &C));
  if (B.cols != A.cols)
    FAIL("gemm_amax: b has shape %s, K=%" PRId64 "; expected K=%" PRId64 " as in a", fmt_shape(&b1, &d->b),
         B.cols, A.cols);
  if (C.rows != A.rows || C.cols != B.rows)
    FAIL("gemm_amax: c has shape %s, (M, N)=(%" PRId64 ", %" PRId64 "); expected (M=%" PRId64 ", N=%" PRId64
         ") from a and b",
         fmt_shape(&b1, &d->c), C.rows, C.cols, A.rows, B.rows);
  if (A.cols == 0)
    FAIL("gemm_amax: a has shape %s; K=0 is refused (an empty reduction has no scale blocks); M, N or L may "
         "be 0",
         fmt_shape(&b1, &d->a));
  if (B.l != A.l) FAIL("gemm_amax: b has L=%" PRId64 " but a has L=%" PRId64 "; L must agree", B.l, A.l);
  if (C.l != A.l) FAIL("gemm_amax: c has L=%" PRId64 " but a has L=%" PRId64 "; L must agree", C.l, A.l);

  /* scale factors */
  mxf_sf_layout la = MXF_SF_COMPACT, lb;
  if (fa != MXF_BF16) TRY(check_gemm_sf(&v, "sfa", &d->sfa, "M", A.rows, A.cols, A.l, d->sf_vec, &la));
  TRY(check_gemm_sf(&v, "sfb", &d->sfb, "N", B.rows, A.cols, A.l, d->sf_vec, &lb));

  /* amax */
  TRY(check_dtype_is(&v, "amax", &d->amax, MXF_F32, ""));
  for (int i = 0; i < d->amax.ndim; ++i)
    if (d->amax.shape[i] != 1)
      FAIL("gemm_amax: amax has shape %s; expected one element, e.g. (1) or (1, 1, 1)",
           fmt_shape(&b1, &d->amax));

  memset(p, 0, sizeof *p);
  p->m = A.rows;
  p->n = B.rows;
  p->k = A.cols;
  p->l = A.l;
  p->a_fmt = fa;
  p->b_fmt = fb;
  p->sfa_fmt = sfa;
  p->sfb_fmt = sfb;
  p->c = fc;
  p->sf_vec = d->sf_vec;
  p->kb = mxf_cdiv(p->k, d->sf_vec);
  p->sfa_layout = la;
  p->sfb_layout = lb;
  p->a_ms = A.rs;
  p->a_ks = A.cs;
  p->a_ls = A.ls;
  p->b_ns = B.rs;
  p->b_ks = B.cs;
  p->b_ls = B.ls;
  p->c_ms = C.rs;
  p->c_ns = C.cs;
  p->c_ls = C.ls;
  p->flags = d->flags;
  *device = v.device;
  if (packed && MXF_DEVICE_IS_CUDA(v.device))
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED,
                         "gemm_amax: MXF_AMAX_B_PACKED takes host tensors (packed weights are the CPU's "
                         "layout, SPEC §7); the tensors are on %s",
                         fmt_device(&b1, v.device));
  return MXF_OK;
}

static mxf_status check_ptr(const char *op, const char *name, const void *ptr, uintptr_t align,
                            const char *why);

/* ------------------------------------------------------------ grouped_gemm_amax (SPEC §6) */
/* Strides of t, explicit (tensor_strides), into s. */
static void explicit_strides(const mxf_tensor *t, int64_t s[MXF_MAX_DIMS]) { tensor_strides(t, s); }

/* The view of group 0 of a G-first tensor (G, rows, cols) or SF tensor as gemm_amax
 * takes it for L = 1: the leading dimension dropped (3-D), or G replaced by 1 (an SF
 * tensor's 6-D forms). Returns the extent of the group dimension (0: no such form). */
static int64_t group_view(const mxf_tensor *t, int sf, mxf_tensor *out) {
  int64_t s[MXF_MAX_DIMS];
  *out = *t;
  if (t->ndim < 1 || t->ndim > MXF_MAX_DIMS) return 0;
  explicit_strides(t, s);
  if (t->ndim == 3) {
    out->ndim = 2;
    for (int i = 0; i < 2; ++i)
      out->shape[i] = t->shape[i + 1], out->stride[i] = s[i + 1];
    out->shape[2] = out->stride[2] = 0;
    return t->shape[0];
  }
  if (sf && t->ndim == 6) {
    for (int i = 0; i < 6; ++i)
      out->stride[i] = s[i];
    if (t->shape[3] == 32 && t->shape[4] == 4 && t->shape[5] == 4) { /* physical (G, R, K', 32, 4, 4) */
      out->shape[0] = 1;
      return t->shape[0];
    }
    out->shape[5] = 1; /* logical (32, 4, R, 4, K', G) */
    return t->shape[5];
  }
  return 0;
}

/* A (G) tensor of dtype `dt`, one value per group, contiguous. */
static mxf_status check_per_group(vctx *v, const char *name, const mxf_tensor *t, mxf_dtype dt, int64_t g) {
  TRY(check_tensor(v, name, t));
  TRY(check_dtype_is(v, name, t, dt, dt == MXF_I32 ? " (int32)" : ""));
  const int64_t want[1] = {g};
  char exp[48];
  snprintf(exp, sizeof exp, "(G=%" PRId64 ") from b", g);
  TRY(check_shape(v, name, t, 1, want, exp));
  if (t->stride[0] > 1 && g > 1)
    FAIL("%s: %s has stride %" PRId64 "; expected 1 (contiguous)", v->op, name, t->stride[0]);
  return MXF_OK;
}

static int tensor_given(const mxf_tensor *t) { return t->data || t->ndim != 0; }

/* A group stride in values (packed e2m1 bytes count two) of the leading dimension. */
static int64_t group_stride(const mxf_tensor *t) {
  int64_t s[MXF_MAX_DIMS];
  explicit_strides(t, s);
  return s[0] * (mxf_dtype_is(t->dtype, MXF_DK_E2M1_BYTES) ? 2 : 1);
}

mxf_status mxf_validate_grouped_gemm_amax(const mxf_grouped_gemm_amax_desc *d, int need_data,
                                          mxf_grouped_problem *p, int32_t *device) {
  vctx v = {"grouped_gemm_amax", need_data, 0, 0, NULL};
  strbuf b1;
  if (!d) FAIL("grouped_gemm_amax: desc is NULL");
  if (d->flags & MXF_AMAX_B_PACKED)
    FAIL("grouped_gemm_amax: flags has MXF_AMAX_B_PACKED; packed weights (SPEC §7) are gemm_amax's, the "
         "grouped op takes b as it is");
  const int has_offs = tensor_given(&d->offs), has_counts = tensor_given(&d->counts);
  if (has_offs == has_counts)
    FAIL("grouped_gemm_amax: %s; give offs (contiguous layout: a (M, K)) or counts (masked layout: a (G, "
         "Mmax, "
         "K)), exactly one",
         has_offs ? "both offs and counts are given" : "neither offs nor counts is given");
  const int masked = has_counts;
  /* every given tensor: one device, data in the one-call form */
  TRY(check_tensor(&v, "a", &d->a));
  TRY(check_tensor(&v, "b", &d->b));
  if (tensor_given(&d->sfa)) TRY(check_tensor(&v, "sfa", &d->sfa));
  TRY(check_tensor(&v, "sfb", &d->sfb));
  TRY(check_tensor(&v, "c", &d->c));
  TRY(check_tensor(&v, "amax", &d->amax));
  if (d->b.ndim != 3) FAIL("grouped_gemm_amax: b has shape %s; expected (G, N, K)", fmt_shape(&b1, &d->b));
  const int64_t groups = d->b.shape[0];
  TRY(check_per_group(&v, masked ? "counts" : "offs", masked ? &d->counts : &d->offs, MXF_I32, groups));
  if (tensor_given(&d->group_alpha))
    TRY(check_per_group(&v, "group_alpha", &d->group_alpha, MXF_F32, groups));
  if (tensor_given(&d->group_amax)) TRY(check_per_group(&v, "group_amax", &d->group_amax, MXF_F32, groups));
  const int a_dims = masked ? 3 : 2;
  if (d->a.ndim != a_dims)
    FAIL("grouped_gemm_amax: a has shape %s; expected %s in the %s layout", fmt_shape(&b1, &d->a),
         masked ? "(G, Mmax, K)" : "(M, K)", masked ? "masked (counts)" : "contiguous (offs)");
  if (d->c.ndim != a_dims)
    FAIL("grouped_gemm_amax: c has shape %s; expected %s in the %s layout", fmt_shape(&b1, &d->c),
         masked ? "(G, Mmax, N)" : "(M, N)", masked ? "masked (counts)" : "contiguous (offs)");

  /* one group's view, judged by gemm_amax's rules (SPEC §1) */
  mxf_gemm_amax_desc g;
  memset(&g, 0, sizeof g);
  g.amax = d->amax;
  g.sf_vec = d->sf_vec;
  g.flags = d->flags;
  struct {
    const char *name;
    const mxf_tensor *t;
    mxf_tensor *view;
    int grouped, sf;
  } parts[] = {{"a", &d->a, &g.a, masked, 0},
               {"b", &d->b, &g.b, 1, 0},
               {"sfa", &d->sfa, &g.sfa, masked, 1},
               {"sfb", &d->sfb, &g.sfb, 1, 1},
               {"c", &d->c, &g.c, masked, 0}};
  for (size_t i = 0; i < sizeof parts / sizeof *parts; ++i) {
    const mxf_tensor *t = parts[i].t;
    if (!parts[i].grouped || !tensor_given(t)) {
      *parts[i].view = *t;
      continue;
    }
    int64_t gn = group_view(t, parts[i].sf, parts[i].view);
    if (gn != groups)
      FAIL("grouped_gemm_amax: %s has shape %s; expected %s with G=%" PRId64 " groups (from b)", v.op,
           fmt_shape(&b1, t),
           parts[i].sf ? "(G, MN, Kb) compact or (G, R, K', 32, 4, 4) / (32, 4, R, 4, K', G) swizzled"
                       : "G leading",
           groups);
  }
  mxf_gemm_problem gp;
  int32_t dev;
  memset(&gp, 0, sizeof gp);
  mxf_status st = mxf_validate_gemm_amax(&g, need_data, &gp, &dev);
  if (st != MXF_OK) {
    char msg[1024];
    const char *e = mxf_last_error();
    snprintf(msg, sizeof msg, "%s", strncmp(e, "gemm_amax: ", 11) ? e : e + 11);
    return mxf_set_error(st, "grouped_gemm_amax: %s (a group's operands, as gemm_amax takes them)", msg);
  }
  memset(p, 0, sizeof *p);
  p->gemm = gp;
  p->groups = groups;
  p->masked = masked;
  p->group_alpha = tensor_given(&d->group_alpha);
  p->group_amax = tensor_given(&d->group_amax);
  /* group strides: 16-byte aligned; C's groups must not overlap */
  struct {
    const char *name;
    const mxf_tensor *t;
    int64_t *gs;
    int bits;
  } gsv[] = {{"b", &d->b, &p->b_gs, mxf_dtype_bits(gp.b_fmt)},
             {"a", &d->a, &p->a_gs, mxf_dtype_bits(gp.a_fmt)},
             {"c", &d->c, &p->c_gs, mxf_dtype_bits(gp.c)}};
  for (int i = 0; i < (masked ? 3 : 1); ++i) {
    int64_t gs = group_stride(gsv[i].t);
    if (groups > 1 && (gs * gsv[i].bits) % 128 != 0)
      FAIL("grouped_gemm_amax: %s has group stride %" PRId64 " values (%" PRId64 " bits); every group must "
           "start 16-byte aligned",
           gsv[i].name, gs, gs * gsv[i].bits);
    *gsv[i].gs = gs;
  }
  if (masked && groups > 1) {
    int64_t span = (gp.m - 1) * gp.c_ms + (gp.n - 1) * gp.c_ns + 1;
    if (p->c_gs < span)
      FAIL("grouped_gemm_amax: c has group stride %" PRId64 " < %" PRId64 " (the span of one group); output "
           "groups would overlap",
           p->c_gs, span);
  }
  *device = v.device;
  return MXF_OK;
}

mxf_status mxf_validate_routing(const mxf_grouped_problem *p, const int32_t *r) {
  const int64_t rows = p->gemm.m;
  int64_t prev = 0;
  for (int64_t g = 0; g < p->groups; ++g) {
    const int64_t x = r[g];
    if (p->masked) {
      if (x < 0 || x > rows)
        FAIL("grouped_gemm_amax: counts[%" PRId64 "]=%" PRId64
             "; a group's count must be in [0, Mmax=%" PRId64 "]; nothing written",
             g, x, rows);
      continue;
    }
    if (x < prev)
      FAIL("grouped_gemm_amax: offs[%" PRId64 "]=%" PRId64 " < %" PRId64 " (offs[%" PRId64 "]); group ends "
           "must be nondecreasing from 0; nothing written",
           g, x, prev, g - 1);
    if (x > rows)
      FAIL("grouped_gemm_amax: offs[%" PRId64 "]=%" PRId64 " > M=%" PRId64 "; group ends must be at most M "
           "(a's rows); nothing written",
           g, x, rows);
    prev = x;
  }
  return MXF_OK;
}

/* The pointers of a gemm_amax run (and of each group of a grouped one): present, rows
 * 16-byte aligned, no sfa for a bf16 a. */
static mxf_status check_gemm_ptrs(const char *on, const mxf_gemm_problem *p, const mxf_gemm_amax_args *a) {
  TRY(check_ptr(on, "a", a->a, 16, "row starts must be 16-byte aligned"));
  TRY(check_ptr(on, "b", a->b, 16, "row starts must be 16-byte aligned"));
  if (p->a_fmt == MXF_BF16) {
    if (a->sfa)
      FAIL("%s_run: args->sfa is %p; a is bf16, so sfa must be NULL (bf16 a has no scales)", on, a->sfa);
  } else {
    TRY(check_ptr(on, "sfa", a->sfa, 1, ""));
  }
  if (p->flags & MXF_AMAX_B_PACKED) {
    if (a->sfb)
      FAIL("%s_run: args->sfb is %p; with MXF_AMAX_B_PACKED the scales are in the packed b, so sfb must be "
           "NULL",
           on, a->sfb);
  } else {
    TRY(check_ptr(on, "sfb", a->sfb, 1, ""));
  }
  TRY(check_ptr(on, "c", a->c, 16, "row starts must be 16-byte aligned"));
  TRY(check_ptr(on, "amax", a->amax, 4, "an f32"));
  if (p->flags & MXF_AMAX_B_PACKED) { /* the buffer must be the plan's B (SPEC §7.1) */
    const mxf_packed_geom g = mxf_packed_geom_of(p);
    char why[160];
    if (mxf_packed_header_check(&g, (const uint8_t *)a->b, why, sizeof why))
      FAIL("%s_run: args->b is not the packed weights the plan's b and sfb describe: %s (SPEC §7.2)", on,
           why);
  }
  return MXF_OK;
}

static mxf_status check_grouped_run(const mxf_plan *plan, const mxf_grouped_gemm_amax_args *a) {
  const char *on = "grouped_gemm_amax";
  const mxf_grouped_problem *p = &plan->p.grouped;
  const mxf_gemm_amax_args g = {a->a, a->b, a->sfa, a->sfb, a->c, a->amax, NULL};
  TRY(check_gemm_ptrs(on, &p->gemm, &g));
  const char *given = p->masked ? "counts" : "offs", *other = p->masked ? "offs" : "counts";
  TRY(check_ptr(on, given, p->masked ? (const void *)a->counts : (const void *)a->offs, 4, "int32"));
  if (p->masked ? (const void *)a->offs : (const void *)a->counts)
    FAIL("%s_run: args->%s is set; the plan is for the %s layout, which takes %s", on, other,
         p->masked ? "masked" : "contiguous", given);
  const struct {
    const char *name;
    const void *ptr;
    int want;
  } opt[] = {{"group_alpha", a->group_alpha, p->group_alpha}, {"group_amax", a->group_amax, p->group_amax}};
  for (int i = 0; i < 2; ++i) {
    if (opt[i].want)
      TRY(check_ptr(on, opt[i].name, opt[i].ptr, 4, "f32"));
    else if (opt[i].ptr)
      FAIL("%s_run: args->%s is set, but the plan's desc had no %s", on, opt[i].name, opt[i].name);
  }
  return MXF_OK;
}

/* ------------------------------------------------------------ proj_rope (SPEC §2) */
static const char *scale_list = "e8m0, u8 or i8 (read as e8m0)";

mxf_status mxf_validate_proj_rope(const mxf_proj_rope_desc *d, int need_data, mxf_proj_problem *p,
                                  int32_t *device) {
  vctx v = {"proj_rope", need_data, 0, 0, NULL};
  strbuf b1;
  char exp[160];
  const unsigned known = MXF_PROJ_W_OUT_IN | MXF_PROJ_FP32_EPILOGUE;
  if (!d) FAIL("proj_rope: desc is NULL");
  if (d->flags & ~known)
    FAIL("proj_rope: flags 0x%x has unknown bits 0x%x; known: MXF_PROJ_W_OUT_IN (0x1), "
         "MXF_PROJ_FP32_EPILOGUE (0x2)",
         d->flags, d->flags & ~known);
  TRY(check_tensor(&v, "x", &d->x));
  if (d->x.dtype != MXF_BF16 && d->x.dtype != MXF_E4M3)
    FAIL("proj_rope: x has dtype %s; expected bf16 or e4m3 (MXFP8 codes with x_scale)",
         mxf_dtype_name(d->x.dtype));
  int mxfp8 = d->x.dtype == MXF_E4M3;
  TRY(check_tensor(&v, "w", &d->w));
  if (mxfp8) {
    if (d->x_scale.ndim == 0 || d->w_scale.ndim == 0)
      FAIL("proj_rope: x is e4m3 (MXFP8 codes), so x_scale and w_scale are required; got an absent %s",
           d->x_scale.ndim == 0 ? "x_scale" : "w_scale");
    TRY(check_tensor(&v, "x_scale", &d->x_scale));
    TRY(check_tensor(&v, "w_scale", &d->w_scale));
  }
  TRY(check_tensor(&v, "cos", &d->cos));
  TRY(check_tensor(&v, "sin", &d->sin));
  TRY(check_tensor(&v, "out_row", &d->out_row));
  TRY(check_tensor(&v, "out_scales_row", &d->out_scales_row));
  TRY(check_tensor(&v, "out_col", &d->out_col));
  TRY(check_tensor(&v, "out_scales_col", &d->out_scales_col));

  /* geometry: T, K from x; H, D from out_row; rope from cos */
  if (d->x.ndim != 2) FAIL("proj_rope: x has shape %s; expected (T, K)", fmt_shape(&b1, &d->x));
  if (d->out_row.ndim != 3)
    FAIL("proj_rope: out_row has shape %s; expected (T, H, D)", fmt_shape(&b1, &d->out_row));
  if (d->cos.ndim != 2) FAIL("proj_rope: cos has shape %s; expected (T, rope)", fmt_shape(&b1, &d->cos));
  int64_t t = d->x.shape[0], k = d->x.shape[1], h = d->out_row.shape[1], dd = d->out_row.shape[2];
  int64_t rope = d->cos.shape[1];
  if (dd % 32 != 0 || dd == 0)
    FAIL("proj_rope: out_row has shape %s; head dim D=%" PRId64 " must be a multiple of 32 and > 0",
         fmt_shape(&b1, &d->out_row), dd);
  if (k == 0)
    FAIL("proj_rope: x has shape %s; K=0 is refused (an empty reduction); T may be 0", fmt_shape(&b1, &d->x));
  if (rope % 2 != 0)
    FAIL("proj_rope: cos has shape %s; rope=%" PRId64 " must be even (interleaved pairs)",
         fmt_shape(&b1, &d->cos), rope);
  if (rope > dd)
    FAIL("proj_rope: cos has shape %s; rope=%" PRId64 " exceeds the head dim D=%" PRId64,
         fmt_shape(&b1, &d->cos), rope, dd);
  int64_t hd = h * dd;

  snprintf(exp, sizeof exp, "(T=%" PRId64 ", H=%" PRId64 ", D=%" PRId64 ") e4m3", t, h, dd);
  const int64_t thd[3] = {t, h, dd};
  TRY(check_shape(&v, "out_row", &d->out_row, 3, thd, exp));
  TRY(check_dtype_is(&v, "out_row", &d->out_row, MXF_E4M3, ""));
  TRY(check_shape(&v, "out_col", &d->out_col, 3, thd, exp));
  TRY(check_dtype_is(&v, "out_col", &d->out_col, MXF_E4M3, ""));
  snprintf(exp, sizeof exp, "(T=%" PRId64 ", H=%" PRId64 ", D/32=%" PRId64 ")", t, h, dd / 32);
  const int64_t srow[3] = {t, h, dd / 32};
  TRY(check_shape(&v, "out_scales_row", &d->out_scales_row, 3, srow, exp));
  TRY(check_dtype(&v, "out_scales_row", &d->out_scales_row, MXF_DK_SCALE_E8M0, scale_list));
  snprintf(exp, sizeof exp, "(ceil(T/32)=%" PRId64 ", H=%" PRId64 ", D=%" PRId64 ")", mxf_cdiv(t, 32), h, dd);
  const int64_t scol[3] = {mxf_cdiv(t, 32), h, dd};
  TRY(check_shape(&v, "out_scales_col", &d->out_scales_col, 3, scol, exp));
  TRY(check_dtype(&v, "out_scales_col", &d->out_scales_col, MXF_DK_SCALE_E8M0, scale_list));

  snprintf(exp, sizeof exp, "(T=%" PRId64 ", rope=%" PRId64 ")", t, rope);
  const int64_t tr[2] = {t, rope};
  TRY(check_shape(&v, "cos", &d->cos, 2, tr, exp));
  TRY(check_dtype_is(&v, "cos", &d->cos, MXF_BF16, ""));
  TRY(check_shape(&v, "sin", &d->sin, 2, tr, exp));
  TRY(check_dtype_is(&v, "sin", &d->sin, MXF_BF16, ""));

  /* weight, in its orientation */
  int out_in = (d->flags & MXF_PROJ_W_OUT_IN) != 0;
  if (d->w.dtype != d->x.dtype)
    FAIL("proj_rope: w has dtype %s; expected %s like x", mxf_dtype_name(d->w.dtype),
         mxf_dtype_name(d->x.dtype));
  if (d->w.ndim != 2)
    FAIL("proj_rope: w has shape %s; expected %s", fmt_shape(&b1, &d->w), out_in ? "(H*D, K)" : "(K, H*D)");
  int64_t w_proj = d->w.shape[out_in ? 0 : 1], w_k = d->w.shape[out_in ? 1 : 0];
  if (w_proj != hd)
    FAIL("proj_rope: w has shape %s; %" PRId64 " is not H*D = %" PRId64 "*%" PRId64 " = %" PRId64
         " (w is %s: %s)",
         fmt_shape(&b1, &d->w), w_proj, h, dd, hd, out_in ? "out-in" : "in-out",
         out_in ? "(H*D, K)" : "(K, H*D); set MXF_PROJ_W_OUT_IN for (H*D, K)");
  if (w_k != k)
    FAIL("proj_rope: w has shape %s; expected %s (w is %s; K from x)", fmt_shape(&b1, &d->w),
         out_in ? (snprintf(exp, sizeof exp, "(H*D=%" PRId64 ", K=%" PRId64 ")", hd, k), exp)
                : (snprintf(exp, sizeof exp, "(K=%" PRId64 ", H*D=%" PRId64 ")", k, hd), exp),
         out_in ? "out-in" : "in-out");

  if (mxfp8) {
    if (k % 32 != 0)
      FAIL("proj_rope: x has shape %s; K=%" PRId64 " must be a multiple of 32 on the MXFP8 path",
           fmt_shape(&b1, &d->x), k);
    snprintf(exp, sizeof exp, "(T=%" PRId64 ", K/32=%" PRId64 ")", t, k / 32);
    const int64_t xs[2] = {t, k / 32};
    TRY(check_shape(&v, "x_scale", &d->x_scale, 2, xs, exp));
    TRY(check_dtype(&v, "x_scale", &d->x_scale, MXF_DK_SCALE_E8M0, scale_list));
    int64_t ws[2];
    if (out_in) {
      ws[0] = hd;
      ws[1] = k / 32;
      snprintf(exp, sizeof exp, "(H*D=%" PRId64 ", K/32=%" PRId64 ") (out-in, like w)", hd, k / 32);
    } else {
      ws[0] = k / 32;
      ws[1] = hd;
      snprintf(exp, sizeof exp, "(K/32=%" PRId64 ", H*D=%" PRId64 ") (in-out, like w)", k / 32, hd);
    }
    TRY(check_shape(&v, "w_scale", &d->w_scale, 2, ws, exp));
    TRY(check_dtype(&v, "w_scale", &d->w_scale, MXF_DK_SCALE_E8M0, scale_list));
  } else {
    TRY(check_absent(&v, "x_scale", &d->x_scale, "on the bf16 path"));
    TRY(check_absent(&v, "w_scale", &d->w_scale, "on the bf16 path"));
  }

  /* everything C-contiguous */
  TRY(check_contiguous(&v, "x", &d->x));
  TRY(check_contiguous(&v, "w", &d->w));
  if (mxfp8) {
    TRY(check_contiguous(&v, "x_scale", &d->x_scale));
    TRY(check_contiguous(&v, "w_scale", &d->w_scale));
  }
  TRY(check_contiguous(&v, "cos", &d->cos));
  TRY(check_contiguous(&v, "sin", &d->sin));
  TRY(check_contiguous(&v, "out_row", &d->out_row));
  TRY(check_contiguous(&v, "out_scales_row", &d->out_scales_row));
  TRY(check_contiguous(&v, "out_col", &d->out_col));
  TRY(check_contiguous(&v, "out_scales_col", &d->out_scales_col));

  memset(p, 0, sizeof *p);
  p->t = t;
  p->k = k;
  p->h = h;
  p->d = dd;
  p->rope = rope;
  p->nope = dd - rope;
  p->mxfp8 = mxfp8;
  p->w_out_in = out_in;
  p->fp32_epilogue = (d->flags & MXF_PROJ_FP32_EPILOGUE) != 0;
  const mxf_tensor *by_index[8] = {&d->x,       &d->w,       &d->x_scale,        &d->w_scale,
                                   &d->out_row, &d->out_col, &d->out_scales_row, &d->out_scales_col};
  for (int i = 0; i < 8; ++i)
    p->addr_low[i] = (uint8_t)((uintptr_t)by_index[i]->data & 15u);
  *device = v.device;
  return MXF_OK;
}

/* ------------------------------------------------------------ quantize / dequantize (SPEC §3) */
/* Codes (rows, cols) e4m3 and scales of one direction. */
static mxf_status check_mx_pair(vctx *v, const char *qname, const mxf_tensor *q, const char *sname,
                                const mxf_tensor *s, int64_t rows, int64_t cols, unsigned direction) {
  char exp[128];
  const int64_t rc[2] = {rows, cols};
  snprintf(exp, sizeof exp, "(rows=%" PRId64 ", cols=%" PRId64 ")", rows, cols);
  TRY(check_shape(v, qname, q, 2, rc, exp));
  TRY(check_dtype_is(v, qname, q, MXF_E4M3, ""));
  int64_t ss[2];
  if (direction == MXF_QUANT_ROWS) {
    ss[0] = rows;
    ss[1] = mxf_cdiv(cols, 32);
    snprintf(exp, sizeof exp, "(rows=%" PRId64 ", ceil(cols/32)=%" PRId64 ")", rows, ss[1]);
  } else {
    ss[0] = mxf_cdiv(rows, 32);
    ss[1] = cols;
    snprintf(exp, sizeof exp, "(ceil(rows/32)=%" PRId64 ", cols=%" PRId64 ")", ss[0], cols);
  }
  TRY(check_shape(v, sname, s, 2, ss, exp));
  TRY(check_dtype(v, sname, s, MXF_DK_SCALE_E8M0, scale_list));
  TRY(check_contiguous(v, qname, q));
  TRY(check_contiguous(v, sname, s));
  return MXF_OK;
}

mxf_status mxf_validate_quantize(const mxf_quantize_desc *d, int need_data, mxf_quant_problem *p,
                                 int32_t *device) {
  vctx v = {"quantize", need_data, 0, 0, NULL};
  strbuf b1;
  const unsigned known = MXF_QUANT_ROWS | MXF_QUANT_COLS;
  if (!d) FAIL("quantize: desc is NULL");
  if (d->directions == 0 || (d->directions & ~known))
    FAIL("quantize: directions 0x%x; expected MXF_QUANT_ROWS (0x1), MXF_QUANT_COLS (0x2) or both",
         d->directions);
  TRY(check_tensor(&v, "x", &d->x));
  if (d->directions & MXF_QUANT_ROWS) {
    TRY(check_tensor(&v, "q_row", &d->q_row));
    TRY(check_tensor(&v, "s_row", &d->s_row));
  }
  if (d->directions & MXF_QUANT_COLS) {
    TRY(check_tensor(&v, "q_col", &d->q_col));
    TRY(check_tensor(&v, "s_col", &d->s_col));
  }
  if (d->x.ndim != 2) FAIL("quantize: x has shape %s; expected (rows, cols)", fmt_shape(&b1, &d->x));
  if (d->x.dtype != MXF_F32 && d->x.dtype != MXF_BF16)
    FAIL("quantize: x has dtype %s; expected f32 or bf16", mxf_dtype_name(d->x.dtype));
  TRY(check_contiguous(&v, "x", &d->x));
  int64_t rows = d->x.shape[0], cols = d->x.shape[1];
  if (d->directions & MXF_QUANT_ROWS)
    TRY(check_mx_pair(&v, "q_row", &d->q_row, "s_row", &d->s_row, rows, cols, MXF_QUANT_ROWS));
  if (d->directions & MXF_QUANT_COLS)
    TRY(check_mx_pair(&v, "q_col", &d->q_col, "s_col", &d->s_col, rows, cols, MXF_QUANT_COLS));
  memset(p, 0, sizeof *p);
  p->rows = rows;
  p->cols = cols;
  p->x = d->x.dtype;
  p->directions = d->directions;
  *device = v.device;
  return MXF_OK;
}

mxf_status mxf_validate_dequantize(const mxf_dequantize_desc *d, int need_data, mxf_quant_problem *p,
                                   int32_t *device) {
  vctx v = {"dequantize", need_data, 0, 0, NULL};
  strbuf b1;
  char exp[128];
  if (!d) FAIL("dequantize: desc is NULL");
  if (d->direction != MXF_QUANT_ROWS && d->direction != MXF_QUANT_COLS)
    FAIL("dequantize: direction 0x%x; expected exactly one of MXF_QUANT_ROWS (0x1), MXF_QUANT_COLS (0x2)",
         d->direction);
  TRY(check_tensor(&v, "q", &d->q));
  TRY(check_tensor(&v, "s", &d->s));
  TRY(check_tensor(&v, "y", &d->y));
  if (d->q.ndim != 2) FAIL("dequantize: q has shape %s; expected (rows, cols)", fmt_shape(&b1, &d->q));
  int64_t rows = d->q.shape[0], cols = d->q.shape[1];
  TRY(check_mx_pair(&v, "q", &d->q, "s", &d->s, rows, cols, d->direction));
  const int64_t rc[2] = {rows, cols};
  snprintf(exp, sizeof exp, "(rows=%" PRId64 ", cols=%" PRId64 ") like q", rows, cols);
  TRY(check_shape(&v, "y", &d->y, 2, rc, exp));
  if (d->y.dtype != MXF_F32 && d->y.dtype != MXF_BF16)
    FAIL("dequantize: y has dtype %s; expected f32 or bf16", mxf_dtype_name(d->y.dtype));
  TRY(check_contiguous(&v, "y", &d->y));
  memset(p, 0, sizeof *p);
  p->rows = rows;
  p->cols = cols;
  p->x = d->y.dtype;
  p->directions = d->direction;
  *device = v.device;
  return MXF_OK;
}

/* ------------------------------------------------------------ run-time checks */
static const char *op_name(mxf_op op) {
  switch (op) {
  case MXF_OP_GEMM_AMAX: return "gemm_amax";
  case MXF_OP_PROJ_ROPE: return "proj_rope";
  case MXF_OP_QUANTIZE: return "quantize";
  case MXF_OP_DEQUANTIZE: return "dequantize";
  case MXF_OP_GROUPED_GEMM_AMAX: return "grouped_gemm_amax";
  }
  return "unknown op";
}

static mxf_status check_ptr(const char *op, const char *name, const void *ptr, uintptr_t align,
                            const char *why) {
  if (!ptr) FAIL("%s_run: args->%s is NULL", op, name);
  if ((uintptr_t)ptr % align != 0)
    FAIL("%s_run: args->%s (%p) is not %u-byte aligned (%s)", op, name, ptr, (unsigned)align, why);
  return MXF_OK;
}

int mxf_plan_is_empty(const mxf_plan *plan) {
  switch (plan->op) {
  case MXF_OP_GEMM_AMAX: return plan->p.gemm.m == 0 || plan->p.gemm.n == 0 || plan->p.gemm.l == 0;
  case MXF_OP_PROJ_ROPE: return plan->p.proj.t == 0 || plan->p.proj.h == 0;
  case MXF_OP_QUANTIZE:
  case MXF_OP_DEQUANTIZE: return plan->p.quant.rows == 0 || plan->p.quant.cols == 0;
  case MXF_OP_GROUPED_GEMM_AMAX: return 0; /* the backend runs it: it writes group_amax */
  }
  return 0;
}

/* ------------------------------------------------------------ overlap (SPEC §4) */
/* The bytes a tensor of a run may touch: [ptr, ptr + bytes), the span from its lowest to
 * its highest element (a conservative test: strided tensors interleaved without sharing
 * a byte count as overlapping). */
typedef struct span {
  const char *name;
  const void *ptr;
  int64_t bytes;
  int output;
} span;

static int64_t bits_bytes(int64_t values, int bits) { return (values * bits + 7) / 8; }

/* Span of a strided (rows, cols, l) matrix of `bits`-bit values. */
static int64_t matrix_bytes(int64_t rows, int64_t cols, int64_t l, int64_t rs, int64_t cs, int64_t ls,
                            int bits) {
  if (rows == 0 || cols == 0 || l == 0) return 0;
  return bits_bytes((rows - 1) * rs + (cols - 1) * cs + (l - 1) * ls + 1, bits);
}

static int64_t sf_bytes(mxf_sf_layout layout, int64_t mn, int64_t kb, int64_t l) {
  if (layout == MXF_SF_COMPACT) return l * mn * kb;
  return l * mxf_cdiv(mn, 128) * mxf_cdiv(kb, 4) * 512;
}

/* Refuses an output that shares a byte with an input or another output; the message
 * begins with `on` and `suffix` (e.g. "gemm_amax", "_run"). */
static mxf_status check_overlaps(const char *on, const char *suffix, const span *t, int n) {
  for (int i = 0; i < n; ++i) {
    if (!t[i].output || !t[i].ptr || t[i].bytes <= 0) continue;
    const uintptr_t lo = (uintptr_t)t[i].ptr, hi = lo + (uintptr_t)t[i].bytes;
    for (int j = 0; j < n; ++j) {
      if (j == i || !t[j].ptr || t[j].bytes <= 0 || (t[j].output && j < i)) continue;
      const uintptr_t lo2 = (uintptr_t)t[j].ptr, hi2 = lo2 + (uintptr_t)t[j].bytes;
      if (lo < hi2 && lo2 < hi)
        FAIL("%s%s: %s [%p, +%" PRId64 " bytes) overlaps %s [%p, +%" PRId64 " bytes); an output may "
             "overlap no input and no other output",
             on, suffix, t[i].name, t[i].ptr, t[i].bytes, t[j].name, t[j].ptr, t[j].bytes);
    }
  }
  return MXF_OK;
}

static mxf_status check_run_overlaps(const char *on, const mxf_plan *plan, const void *args) {
  switch (plan->op) {
  case MXF_OP_GEMM_AMAX: {
    const mxf_gemm_amax_args *a = args;
    const mxf_gemm_problem *p = &plan->p.gemm;
    const span t[] = {
        {"a", a->a, matrix_bytes(p->m, p->k, p->l, p->a_ms, p->a_ks, p->a_ls, mxf_dtype_bits(p->a_fmt)), 0},
        {"b", a->b,
         p->flags & MXF_AMAX_B_PACKED
             ? mxf_packed_geom_of(p).bytes
             : matrix_bytes(p->n, p->k, p->l, p->b_ns, p->b_ks, p->b_ls, mxf_dtype_bits(p->b_fmt)),
         0},
        {"sfa", a->sfa, p->a_fmt == MXF_BF16 ? 0 : sf_bytes(p->sfa_layout, p->m, p->kb, p->l), 0},
        {"sfb", a->sfb, sf_bytes(p->sfb_layout, p->n, p->kb, p->l), 0},
        {"c", a->c, matrix_bytes(p->m, p->n, p->l, p->c_ms, p->c_ns, p->c_ls, mxf_dtype_bits(p->c)), 1},
        {"amax", a->amax, 4, 1},
    };
    return check_overlaps(on, "_run", t, (int)(sizeof t / sizeof *t));
  }
  case MXF_OP_PROJ_ROPE: {
    const mxf_proj_rope_args *a = args;
    const mxf_proj_problem *p = &plan->p.proj;
    const int64_t in = p->mxfp8 ? 1 : 2, thd = p->t * p->h * p->d;
    const span t[] = {
        {"x", a->x, p->t * p->k * in, 0},
        {"w", a->w, p->h * p->d * p->k * in, 0},
        {"x_scale", a->x_scale, p->mxfp8 ? p->t * p->k / 32 : 0, 0},
        {"w_scale", a->w_scale, p->mxfp8 ? p->h * p->d * p->k / 32 : 0, 0},
        {"cos", a->cos, p->t * p->rope * 2, 0},
        {"sin", a->sin, p->t * p->rope * 2, 0},
        {"out_row", a->out_row, thd, 1},
        {"out_scales_row", a->out_scales_row, thd / 32, 1},
        {"out_col", a->out_col, thd, 1},
        {"out_scales_col", a->out_scales_col, mxf_cdiv(p->t, 32) * p->h * p->d, 1},
    };
    return check_overlaps(on, "_run", t, (int)(sizeof t / sizeof *t));
  }
  case MXF_OP_QUANTIZE: {
    const mxf_quantize_args *a = args;
    const mxf_quant_problem *p = &plan->p.quant;
    const int rows = (p->directions & MXF_QUANT_ROWS) != 0, cols = (p->directions & MXF_QUANT_COLS) != 0;
    const int64_t n = p->rows * p->cols;
    const span t[] = {
        {"x", a->x, bits_bytes(n, mxf_dtype_bits(p->x)), 0},
        {"q_row", a->q_row, rows ? n : 0, 1},
        {"s_row", a->s_row, rows ? p->rows * mxf_cdiv(p->cols, 32) : 0, 1},
        {"q_col", a->q_col, cols ? n : 0, 1},
        {"s_col", a->s_col, cols ? mxf_cdiv(p->rows, 32) * p->cols : 0, 1},
    };
    return check_overlaps(on, "_run", t, (int)(sizeof t / sizeof *t));
  }
  case MXF_OP_GROUPED_GEMM_AMAX: {
    const mxf_grouped_gemm_amax_args *a = args;
    const mxf_grouped_problem *gp = &plan->p.grouped;
    const mxf_gemm_problem *p = &gp->gemm;
    const int64_t g = gp->groups, al = gp->masked ? g : 1; /* A's, SFA's and C's batches */
    const span t[] = {
        {"a", a->a, matrix_bytes(p->m, p->k, al, p->a_ms, p->a_ks, gp->a_gs, mxf_dtype_bits(p->a_fmt)), 0},
        {"b", a->b, matrix_bytes(p->n, p->k, g, p->b_ns, p->b_ks, gp->b_gs, mxf_dtype_bits(p->b_fmt)), 0},
        {"sfa", a->sfa, p->a_fmt == MXF_BF16 ? 0 : sf_bytes(p->sfa_layout, p->m, p->kb, al), 0},
        {"sfb", a->sfb, sf_bytes(p->sfb_layout, p->n, p->kb, g), 0},
        {gp->masked ? "counts" : "offs", gp->masked ? (const void *)a->counts : (const void *)a->offs, 4 * g,
         0},
        {"group_alpha", a->group_alpha, gp->group_alpha ? 4 * g : 0, 0},
        {"c", a->c, matrix_bytes(p->m, p->n, al, p->c_ms, p->c_ns, gp->c_gs, mxf_dtype_bits(p->c)), 1},
        {"amax", a->amax, 4, 1},
        {"group_amax", a->group_amax, gp->group_amax ? 4 * g : 0, 1},
    };
    return check_overlaps(on, "_run", t, (int)(sizeof t / sizeof *t));
  }
  case MXF_OP_DEQUANTIZE: {
    const mxf_dequantize_args *a = args;
    const mxf_quant_problem *p = &plan->p.quant;
    const int64_t n = p->rows * p->cols;
    const span t[] = {
        {"q", a->q, n, 0},
        {"s", a->s,
         p->directions == MXF_QUANT_ROWS ? p->rows * mxf_cdiv(p->cols, 32) : mxf_cdiv(p->rows, 32) * p->cols,
         0},
        {"y", a->y, bits_bytes(n, mxf_dtype_bits(p->x)), 1},
    };
    return check_overlaps(on, "_run", t, (int)(sizeof t / sizeof *t));
  }
  }
  return MXF_OK;
}

mxf_status mxf_validate_pack_output(const mxf_gemm_problem *p, const void *b, const void *sfb,
                                    const void *packed, size_t packed_size) {
  const int64_t bytes = mxf_packed_geom_of(p).bytes;
  if (!packed) FAIL("pack_weights: packed is NULL");
  if (packed_size < (size_t)bytes)
    FAIL("pack_weights: packed_size %zu is too small; b and sfb pack into %" PRId64
         " bytes (mxf_pack_weights_size)",
         packed_size, bytes);
  const span t[] = {
      {"b", b, matrix_bytes(p->n, p->k, p->l, p->b_ns, p->b_ks, p->b_ls, mxf_dtype_bits(p->b_fmt)), 0},
      {"sfb", sfb, sf_bytes(p->sfb_layout, p->n, p->kb, p->l), 0},
      {"packed", packed, bytes, 1},
  };
  return check_overlaps("pack_weights", "", t, (int)(sizeof t / sizeof *t));
}

mxf_status mxf_validate_run(const mxf_plan *plan, mxf_op op, const void *args, const void *ws,
                            size_t ws_size) {
  const char *on = op_name(op);
  if (!plan) FAIL("%s_run: plan is NULL", on);
  if (plan->op != op) FAIL("%s_run: the plan was made for %s, not %s", on, op_name(plan->op), on);
  if (!args) FAIL("%s_run: args is NULL", on);
  if (mxf_plan_is_empty(plan)) { /* nothing is read or written but a gemm's amax */
    if (op == MXF_OP_GEMM_AMAX)
      TRY(check_ptr(on, "amax", ((const mxf_gemm_amax_args *)args)->amax, 4, "an f32"));
    return MXF_OK;
  }
  TRY(check_run_overlaps(on, plan, args));
  switch (op) {
  case MXF_OP_GEMM_AMAX: {
    TRY(check_gemm_ptrs(on, &plan->p.gemm, args));
    break;
  }
  case MXF_OP_PROJ_ROPE: {
    const mxf_proj_rope_args *a = args;
    const mxf_proj_problem *p = &plan->p.proj;
    uintptr_t in_align = p->mxfp8 ? 1 : 2;
    TRY(check_ptr(on, "x", a->x, in_align, "bf16"));
    TRY(check_ptr(on, "w", a->w, in_align, "bf16"));
    if (p->mxfp8) {
      TRY(check_ptr(on, "x_scale", a->x_scale, 1, ""));
      TRY(check_ptr(on, "w_scale", a->w_scale, 1, ""));
    }
    TRY(check_ptr(on, "cos", a->cos, 2, "bf16"));
    TRY(check_ptr(on, "sin", a->sin, 2, "bf16"));
    TRY(check_ptr(on, "out_row", a->out_row, 1, ""));
    TRY(check_ptr(on, "out_scales_row", a->out_scales_row, 1, ""));
    TRY(check_ptr(on, "out_col", a->out_col, 1, ""));
    TRY(check_ptr(on, "out_scales_col", a->out_scales_col, 1, ""));
    break;
  }
  case MXF_OP_QUANTIZE: {
    const mxf_quantize_args *a = args;
    const mxf_quant_problem *p = &plan->p.quant;
    TRY(check_ptr(on, "x", a->x, (uintptr_t)mxf_dtype_bits(p->x) / 8, mxf_dtype_name(p->x)));
    if (p->directions & MXF_QUANT_ROWS) {
      TRY(check_ptr(on, "q_row", a->q_row, 1, ""));
      TRY(check_ptr(on, "s_row", a->s_row, 1, ""));
    }
    if (p->directions & MXF_QUANT_COLS) {
      TRY(check_ptr(on, "q_col", a->q_col, 1, ""));
      TRY(check_ptr(on, "s_col", a->s_col, 1, ""));
    }
    break;
  }
  case MXF_OP_DEQUANTIZE: {
    const mxf_dequantize_args *a = args;
    const mxf_quant_problem *p = &plan->p.quant;
    TRY(check_ptr(on, "q", a->q, 1, ""));
    TRY(check_ptr(on, "s", a->s, 1, ""));
    TRY(check_ptr(on, "y", a->y, (uintptr_t)mxf_dtype_bits(p->x) / 8, mxf_dtype_name(p->x)));
    break;
  }
  case MXF_OP_GROUPED_GEMM_AMAX: TRY(check_grouped_run(plan, args)); break;
  }
  if (plan->workspace_size > 0) {
    if (!ws) FAIL("%s_run: workspace is NULL; the plan needs %zu bytes", on, plan->workspace_size);
    if (ws_size < plan->workspace_size)
      FAIL("%s_run: workspace_size %zu is too small; the plan needs %zu bytes", on, ws_size,
           plan->workspace_size);
  }
  return MXF_OK;
}
