/*
 * test_proj_rope_cpu.c — projection GEMM + RoPE + dual MXFP8 on the CPU backend
 * (SPEC §2) against an oracle written here: y accumulated in f64 from the decoded
 * inputs and rounded once to f32, then staging, RoPE and both quantization directions
 * in f32 exactly as SPEC §2.3 words them, on the tests' formats and MXFP8 rule
 * (tests/common/oracle.c, independent of src/formats.h).
 *
 * Every case is judged by SPEC §5 through judge/judge.h, whose reference (the same chain
 * on formats.h) must first equal this oracle byte for byte: every determined block (all
 * its staged values beyond the reach of any f32 summation order) equals the reference
 * bit for bit; undetermined blocks are counted, and those that differ printed.
 * Three kinds of data:
 *   - a hand-checked case (T=2, K=32, H=1, D=32, rope=8) whose dequantized outputs and
 *     scale bytes are written below;
 *   - integer data (small integers, power-of-two scales), where every f32 sum is exact
 *     in any order, so the backend must equal the oracle byte for byte — also with NaN
 *     and inf injected;
 *   - random data, where the backend's f32 GEMM may round differently from the f64 sum
 *     and flip a bf16 staging rounding: over the whole run >= 99.9 % of scale bytes and
 *     >= 99 % of codes equal the oracle's.
 * Always: the cuDNN criterion (>= 95 % of dequantized values within 0.1 + 0.1·|ref| per
 * direction), both weight orientations, bf16 and MXFP8 inputs, with and without the
 * fp32 epilogue, T = 1, 33, 130 and 300, non-default nope/rope, shapes over several of
 * the CPU backend's tiles in each direction, and every output byte written (two runs
 * over different poison agree). With the core left to the library: where a large
 * gemm_amax plan takes oneDNN, large proj_rope plans do too.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "judge.h"
#include "oracle.h"
#include "testutil.h"

/* ------------------------------------------------------------ problem */
typedef struct prob {
  int64_t t, k, h, d, rope;
  int mxfp8, out_in, fp32;
  /* inputs as the library gets them */
  uint16_t *xb, *wb;           /* bf16 */
  uint8_t *xq, *wq, *xs, *wsc; /* e4m3 codes, e8m0 scales */
  uint16_t *cosv, *sinv;
  /* decoded logical inputs: x̂ (T, K), ŵ (N, K) */
  float *xh, *wh;
} prob;

static int64_t pn(const prob *p) { return p->h * p->d; }

typedef struct outs {
  uint8_t *q_row, *s_row, *q_col, *s_col;
  float *ref; /* oracle only: the f32 values that were quantized, (T, H, D) */
} outs;

static int64_t n_srow(const prob *p) { return p->t * p->h * (p->d / 32); }
static int64_t n_scol(const prob *p) { return (p->t + 31) / 32 * p->h * p->d; }

static outs outs_alloc(const prob *p, int with_ref) {
  outs o;
  int64_t n = p->t * pn(p);
  o.q_row = (uint8_t *)tu_malloc((size_t)n);
  o.q_col = (uint8_t *)tu_malloc((size_t)n);
  o.s_row = (uint8_t *)tu_malloc((size_t)n_srow(p));
  o.s_col = (uint8_t *)tu_malloc((size_t)n_scol(p));
  o.ref = with_ref ? (float *)tu_malloc(sizeof(float) * (size_t)n) : NULL;
  return o;
}

static void outs_free(outs *o) {
  free(o->q_row);
  free(o->q_col);
  free(o->s_row);
  free(o->s_col);
  free(o->ref);
}

/* SPEC §2.3 in f64 then f32, straight from its words. */
static void oracle(const prob *p, outs *o) {
  const int64_t T = p->t, K = p->k, H = p->h, D = p->d, N = pn(p), rope = p->rope, nope = D - rope;
  const int64_t half = rope / 2;
  float *out = o->ref;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k)
        acc += (double)p->xh[t * K + k] * (double)p->wh[n * K + k];
      float y = (float)acc;
      out[t * N + n] = p->fp32 ? y : tu_bf16_round(y);
    }
  float *pairs = (float *)tu_malloc(sizeof(float) * (size_t)(rope > 0 ? rope : 1));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      float *y = out + t * N + h * D;
      for (int64_t i = 0; i < rope; ++i)
        pairs[i] = y[nope + i];
      for (int64_t j = 0; j < half; ++j) {
        float pv = pairs[2 * j], qv = pairs[2 * j + 1];
        float c0 = tu_bf16_value(p->cosv[t * rope + j]), s0 = tu_bf16_value(p->sinv[t * rope + j]);
        float s1 = tu_bf16_value(p->sinv[t * rope + half + j]),
              c1 = tu_bf16_value(p->cosv[t * rope + half + j]);
        float a = pv * c0;
        float b = qv * s0;
        float c = pv * s1;
        float d = qv * c1;
        y[nope + j] = a - b;
        y[nope + half + j] = c + d;
      }
    }
  free(pairs);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t b = 0; b < D / 32; ++b)
        o->s_row[(t * H + h) * (D / 32) + b] =
            tu_mx_block(out + t * N + h * D + 32 * b, 32, 1, o->q_row + t * N + h * D + 32 * b, 1);
  for (int64_t tb = 0; tb < (T + 31) / 32; ++tb) {
    int nt = (int)(T - 32 * tb < 32 ? T - 32 * tb : 32);
    for (int64_t n = 0; n < N; ++n)
      o->s_col[tb * N + n] = tu_mx_block(out + 32 * tb * N + n, nt, N, o->q_col + 32 * tb * N + n, N);
  }
}

/* ------------------------------------------------------------ running the library */
static mxf_status run_lib(const prob *p, outs *o, int one_call) {
  const int64_t T = p->t, K = p->k, N = pn(p);
  int64_t sx[2] = {T, K}, sxs[2] = {T, K / 32};
  int64_t sw[2] = {p->out_in ? N : K, p->out_in ? K : N};
  int64_t sws[2] = {p->out_in ? N : K / 32, p->out_in ? K / 32 : N};
  int64_t scs[2] = {T, p->rope};
  int64_t so[3] = {T, p->h, p->d}, ssr[3] = {T, p->h, p->d / 32}, ssc[3] = {(T + 31) / 32, p->h, p->d};
  mxf_proj_rope_desc d;
  memset(&d, 0, sizeof d);
  if (p->mxfp8) {
    d.x = tu_tensor(p->xq, MXF_E4M3, 2, sx);
    d.w = tu_tensor(p->wq, MXF_E4M3, 2, sw);
    d.x_scale = tu_tensor(p->xs, MXF_E8M0, 2, sxs);
    d.w_scale = tu_tensor(p->wsc, MXF_E8M0, 2, sws);
  } else {
    d.x = tu_tensor(p->xb, MXF_BF16, 2, sx);
    d.w = tu_tensor(p->wb, MXF_BF16, 2, sw);
  }
  d.cos = tu_tensor(p->cosv, MXF_BF16, 2, scs);
  d.sin = tu_tensor(p->sinv, MXF_BF16, 2, scs);
  d.out_row = tu_tensor(o->q_row, MXF_E4M3, 3, so);
  d.out_scales_row = tu_tensor(o->s_row, MXF_E8M0, 3, ssr);
  d.out_col = tu_tensor(o->q_col, MXF_E4M3, 3, so);
  d.out_scales_col = tu_tensor(o->s_col, MXF_E8M0, 3, ssc);
  d.flags = (p->out_in ? MXF_PROJ_W_OUT_IN : 0u) | (p->fp32 ? MXF_PROJ_FP32_EPILOGUE : 0u);
  if (one_call) return mxf_proj_rope(&d, NULL);
  mxf_plan *plan = NULL;
  mxf_status st = mxf_proj_rope_plan(&plan, &d);
  if (st != MXF_OK) return st;
  TU_CHECK(tu_cpu_core_fits(mxf_plan_backend(plan), p->t * p->k == 0), "backend '%s'",
           mxf_plan_backend(plan));
  tu_cpu_core_count(mxf_plan_backend(plan));
  size_t wsz = mxf_plan_workspace_size(plan);
  void *ws = wsz ? tu_malloc(wsz) : NULL;
  mxf_proj_rope_args a = {d.x.data, d.w.data, d.x_scale.data, d.w_scale.data, p->cosv,
                          p->sinv,  o->q_row, o->s_row,       o->q_col,       o->s_col};
  st = mxf_proj_rope_run(plan, &a, ws, wsz, NULL);
  free(ws);
  mxf_plan_destroy(plan);
  return st;
}

static void poison_outs(const prob *p, outs *o, uint8_t byte) {
  tu_poison(o->q_row, (size_t)(p->t * pn(p)), byte);
  tu_poison(o->q_col, (size_t)(p->t * pn(p)), byte);
  tu_poison(o->s_row, (size_t)n_srow(p), byte);
  tu_poison(o->s_col, (size_t)n_scol(p), byte);
}

static int outs_equal(const prob *p, const outs *a, const outs *b) {
  return memcmp(a->q_row, b->q_row, (size_t)(p->t * pn(p))) == 0 &&
         memcmp(a->q_col, b->q_col, (size_t)(p->t * pn(p))) == 0 &&
         memcmp(a->s_row, b->s_row, (size_t)n_srow(p)) == 0 &&
         memcmp(a->s_col, b->s_col, (size_t)n_scol(p)) == 0;
}

/* Runs twice over different poison; both runs must agree (every byte written, same
 * result). Returns 0 if the library refused. */
static int run_checked(const prob *p, outs *got, int one_call, const char *tag) {
  outs again = outs_alloc(p, 0);
  poison_outs(p, got, 0xA5);
  poison_outs(p, &again, 0x5A);
  mxf_status st = run_lib(p, got, one_call);
  if (st == MXF_OK) st = run_lib(p, &again, !one_call);
  int ok = TU_CHECK(st == MXF_OK, "%s: status %s (%s)", tag, mxf_status_string(st), mxf_last_error());
  if (ok)
    TU_CHECK(outs_equal(p, got, &again), "%s: outputs differ between two runs over different poison", tag);
  outs_free(&again);
  return ok;
}

/* ------------------------------------------------------------ comparisons */
/* Over the whole run, per direction (row, col), random data only. */
typedef struct stats {
  int64_t scales, scales_eq, codes, codes_eq, undetermined, undetermined_differ;
} stats;
static stats g_random[2];

static int bytes_equal(const uint8_t *a, const uint8_t *b, int64_t n) { return memcmp(a, b, (size_t)n) == 0; }

/* exact: integer data, byte-for-byte equality with the oracle. cudnn: apply the cuDNN
 * criterion (not to data with an injected inf, which zeroes the other values of its
 * blocks). Every case: the judge's reference equals the oracle, and the judge's verdict. */
static void compare(const prob *p, const outs *got, const outs *want, int exact, int cudnn, const char *tag) {
  const int64_t nq = p->t * pn(p);
  const mxj_proj_inputs in = {.t = p->t,
                              .k = p->k,
                              .h = p->h,
                              .d = p->d,
                              .rope = p->rope,
                              .mxfp8 = p->mxfp8,
                              .w_out_in = p->out_in,
                              .fp32_epilogue = p->fp32,
                              .x = p->mxfp8 ? (const void *)p->xq : p->xb,
                              .w = p->mxfp8 ? (const void *)p->wq : p->wb,
                              .x_scale = p->xs,
                              .w_scale = p->wsc,
                              .cos = p->cosv,
                              .sin = p->sinv};
  mxj_proj_ref jr;
  if (!TU_CHECK(mxj_proj_ref_alloc(&jr, p->t, p->h, p->d, 1) == 0 &&
                    mxj_proj_reference(&in, NULL, NULL, &jr, NULL, NULL) == 0,
                "%s: the judge's reference: out of memory", tag))
    return;
  TU_CHECK(bytes_equal(jr.q.q_row, want->q_row, nq) && bytes_equal(jr.q.q_col, want->q_col, nq) &&
               bytes_equal(jr.q.s_row, want->s_row, n_srow(p)) &&
               bytes_equal(jr.q.s_col, want->s_col, n_scol(p)),
           "%s: the judge's reference (formats.h) differs from the oracle (oracle.c)", tag);
  const mxj_proj_outputs g = {got->q_row, got->s_row, got->q_col, got->s_col};
  mxj_proj_counts c[2];
  mxj_proj_judge(&in, NULL, NULL, &jr, &g, c);
  for (int col = 0; col < 2; ++col) {
    const char *dir = col ? "col" : "row";
    const mxj_counts *b = &c[col].blocks;
    TU_CHECK(b->wrong == 0, "%s %s: %lld determined blocks differ from the reference; first: block %lld", tag,
             dir, (long long)b->wrong, (long long)b->first_wrong);
    const int64_t undet_differ = mxj_counts_total(b) - b->equal;
    if (undet_differ)
      printf("  %s %s: %lld of %lld blocks undetermined, %lld of them differ (largest code step %lld)\n", tag,
             dir, (long long)b->within, (long long)mxj_counts_total(b), (long long)undet_differ,
             (long long)b->max_step);
    if (exact) {
      const uint8_t *gq = col ? got->q_col : got->q_row, *wq = col ? want->q_col : want->q_row;
      int64_t fe = -1;
      for (int64_t e = 0; e < nq && fe < 0; ++e)
        if (gq[e] != wq[e]) fe = e;
      TU_CHECK(
          c[col].scales_equal == c[col].scales && c[col].codes_equal == c[col].codes,
          "%s %s: exact data, %lld/%lld scale bytes and %lld/%lld codes differ; first code (t=%lld, n=%lld) "
          "got 0x%02x want 0x%02x",
          tag, dir, (long long)(c[col].scales - c[col].scales_equal), (long long)c[col].scales,
          (long long)(c[col].codes - c[col].codes_equal), (long long)c[col].codes,
          (long long)(fe < 0 ? 0 : fe / pn(p)), (long long)(fe < 0 ? 0 : fe % pn(p)), fe < 0 ? 0 : gq[fe],
          fe < 0 ? 0 : wq[fe]);
    } else {
      stats *s = &g_random[col];
      s->scales += c[col].scales, s->scales_eq += c[col].scales_equal;
      s->codes += c[col].codes, s->codes_eq += c[col].codes_equal;
      s->undetermined += b->within, s->undetermined_differ += undet_differ;
    }
    if (cudnn)
      TU_CHECK(mxj_cudnn_ok(&c[col]), "%s %s: cuDNN criterion: only %lld of %lld within 0.1 + 0.1|ref|", tag,
               dir, (long long)c[col].close, (long long)c[col].close_n);
  }
  mxj_proj_ref_free(&jr);
}

/* ------------------------------------------------------------ data */
enum { DATA_RANDOM, DATA_INTEGER, DATA_INJECT };

static uint16_t bf16_bits(float v) { return (uint16_t)(tu_f32_bits(tu_bf16_round(v)) >> 16); }

/* e4m3 codes of the integers -8..8 (exact), for the integer data */
static uint8_t int_code(int v) { return tu_e4m3_nearest((float)v); }

static void prob_alloc(prob *p) {
  const int64_t T = p->t, K = p->k, N = pn(p);
  p->xb = (uint16_t *)tu_malloc(2 * (size_t)(T * K));
  p->wb = (uint16_t *)tu_malloc(2 * (size_t)(N * K));
  p->xq = (uint8_t *)tu_malloc((size_t)(T * K));
  p->wq = (uint8_t *)tu_malloc((size_t)(N * K));
  p->xs = (uint8_t *)tu_malloc((size_t)(T * (K / 32) + 1));
  p->wsc = (uint8_t *)tu_malloc((size_t)(N * (K / 32) + 1));
  p->cosv = (uint16_t *)tu_malloc(2 * (size_t)(T * p->rope));
  p->sinv = (uint16_t *)tu_malloc(2 * (size_t)(T * p->rope));
  p->xh = (float *)tu_malloc(sizeof(float) * (size_t)(T * K));
  p->wh = (float *)tu_malloc(sizeof(float) * (size_t)(N * K));
}

static void prob_free(prob *p) {
  free(p->xb);
  free(p->wb);
  free(p->xq);
  free(p->wq);
  free(p->xs);
  free(p->wsc);
  free(p->cosv);
  free(p->sinv);
  free(p->xh);
  free(p->wh);
}

/* Stores logical w (n, k) values / codes / block scales in the chosen orientation and
 * fills the decoded views. Inputs come in logical form through the lambdas' arrays. */
static void prob_store(prob *p, const float *xv, const float *wv, const uint8_t *xc, const uint8_t *wc,
                       const uint8_t *xsc, const uint8_t *wsc) {
  const int64_t T = p->t, K = p->k, N = pn(p), KB = K / 32;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k) {
      if (p->mxfp8) {
        p->xq[t * K + k] = xc[t * K + k];
        p->xh[t * K + k] = (float)tu_mx_value(xc[t * K + k], xsc[t * KB + k / 32]);
      } else {
        p->xb[t * K + k] = bf16_bits(xv[t * K + k]);
        p->xh[t * K + k] = tu_bf16_value(p->xb[t * K + k]);
      }
    }
  if (p->mxfp8)
    for (int64_t i = 0; i < T * KB; ++i)
      p->xs[i] = xsc[i];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      int64_t at = p->out_in ? n * K + k : k * N + n;
      if (p->mxfp8) {
        p->wq[at] = wc[n * K + k];
        p->wh[n * K + k] = (float)tu_mx_value(wc[n * K + k], wsc[n * KB + k / 32]);
      } else {
        p->wb[at] = bf16_bits(wv[n * K + k]);
        p->wh[n * K + k] = tu_bf16_value(p->wb[at]);
      }
    }
  if (p->mxfp8)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t kb = 0; kb < KB; ++kb)
        p->wsc[p->out_in ? n * KB + kb : kb * N + n] = wsc[n * KB + kb];
}

static void gen_problem(tu_rng *r, prob *p, int mode) {
  const int64_t T = p->t, K = p->k, N = pn(p), KB = K / 32;
  float *xv = (float *)tu_malloc(sizeof(float) * (size_t)(T * K));
  float *wv = (float *)tu_malloc(sizeof(float) * (size_t)(N * K));
  uint8_t *xc = (uint8_t *)tu_malloc((size_t)(T * K)), *wc = (uint8_t *)tu_malloc((size_t)(N * K));
  uint8_t *xsc = (uint8_t *)tu_malloc((size_t)(T * KB + 1)),
          *wsc = (uint8_t *)tu_malloc((size_t)(N * KB + 1));
  int integer = mode != DATA_RANDOM;
  for (int64_t i = 0; i < T * K; ++i) {
    xv[i] = integer ? (float)tu_range(r, -8, 8) : (float)tu_normal(r);
    int64_t c = tu_range(r, 0, 253);
    xc[i] = integer ? int_code((int)tu_range(r, -8, 8)) : (uint8_t)(c >= 0x7F ? c + 1 : c); /* no NaN codes */
  }
  for (int64_t i = 0; i < N * K; ++i) {
    wv[i] = integer ? (float)tu_range(r, -8, 8) : (float)(0.2 * tu_normal(r));
    int64_t c = tu_range(r, 0, 253);
    wc[i] = integer ? int_code((int)tu_range(r, -8, 8)) : (uint8_t)(c >= 0x7F ? c + 1 : c);
  }
  for (int64_t i = 0; i < T * KB; ++i)
    xsc[i] = (uint8_t)(integer ? tu_range(r, 126, 128) : tu_range(r, 118, 124));
  for (int64_t i = 0; i < N * KB; ++i)
    wsc[i] = (uint8_t)(integer ? tu_range(r, 126, 128) : tu_range(r, 118, 124));
  if (mode == DATA_INJECT) {
    /* a NaN in one token's x, an inf in one output's weights (bf16) or a NaN scale (e4m3) */
    int64_t t0 = tu_range(r, 0, T - 1), k0 = tu_range(r, 0, K - 1), n0 = tu_range(r, 0, N - 1);
    xv[t0 * K + k0] = NAN;
    xc[t0 * K + k0] = 0xFF;
    wv[n0 * K + tu_range(r, 0, K - 1)] = tu_range(r, 0, 1) ? INFINITY : -INFINITY;
    if (KB > 0) wsc[n0 * KB + tu_range(r, 0, KB - 1)] = 0xFF;
  }
  prob_store(p, xv, wv, xc, wc, xsc, wsc);
  for (int64_t i = 0; i < T * p->rope; ++i) {
    double a = 6.283185307179586 * tu_uniform(r);
    p->cosv[i] = bf16_bits((float)cos(a));
    p->sinv[i] = bf16_bits((float)sin(a));
  }
  free(xv);
  free(wv);
  free(xc);
  free(wc);
  free(xsc);
  free(wsc);
}

static void test_case(tu_rng *r, int64_t T, int64_t K, int64_t H, int64_t D, int64_t rope, int mxfp8,
                      int out_in, int fp32, int mode, int one_call) {
  prob p = {T, K, H, D, rope, mxfp8, out_in, fp32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  prob_alloc(&p);
  gen_problem(r, &p, mode);
  outs want = outs_alloc(&p, 1), got = outs_alloc(&p, 0);
  oracle(&p, &want);
  char tag[200];
  snprintf(tag, sizeof tag, "T=%lld K=%lld H=%lld D=%lld rope=%lld %s %s%s %s", (long long)T, (long long)K,
           (long long)H, (long long)D, (long long)rope, mxfp8 ? "mxfp8" : "bf16",
           out_in ? "out-in" : "in-out", fp32 ? " fp32-epilogue" : "",
           mode == DATA_RANDOM    ? "random"
           : mode == DATA_INTEGER ? "integer"
                                  : "inject");
  if (run_checked(&p, &got, one_call, tag))
    compare(&p, &got, &want, mode != DATA_RANDOM, mode != DATA_INJECT, tag);
  outs_free(&want);
  outs_free(&got);
  prob_free(&p);
}

/* ------------------------------------------------------------ hand-checked case */
/* T=2, K=32, H=1, D=32, rope=8 (nope 24). x0 = all ones, x1 = 2 except x1[31] = 0;
 * w[n][k] = 1 for k < n or k == 31. So y0[n] = n + 1, y1[n] = 2n: small integers, exact
 * everywhere and in bf16. RoPE on features 24..31 with cos/sin in {0, ±1, 0.5}:
 *   token 0: pairs (25,26) (27,28) (29,30) (31,32)
 *     cos = 1 0 .5 -1 | 1 1 0 .5,  sin = 0 1 .5 0 | 0 -1 1 .5
 *     out[24..27] = 25, -28, -0.5, -31;  out[28..31] = 26, 1, 29, 31.5
 *   token 1: pairs (48,50) (52,54) (56,58) (60,62)
 *     cos = .5 -1 0 1 | 0 .5 -1 1,  sin = 1 .5 -1 0 | 1 0 .5 -1
 *     out[24..27] = -26, -79, 58, 60;  out[28..31] = 48, 27, -30, 2
 * Row blocks: token 0 amax 31.5 -> s = 31.5/448 = 0.0703 -> 2^-3: byte 124, times 8;
 * token 1 amax 79 -> 0.176 -> 2^-2: byte 125, times 4. Then e4m3 (steps 8 in [64,128),
 * 16 in [128,256), 32 in [256,448], ties to even), e.g. 17*8 = 136 -> 128 -> 16,
 * 19*8 = 152 -> 160 -> 20, -31*8 = -248 -> -256 -> -32, 29*8 = 232 -> 224 -> 28,
 * -79*4 = -316 -> -320 -> -80, 27*4 = 108 -> 112 -> 28. */
static const float hand_row0[32] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10,  11,    12,  13, 14, 15, 16,
                                    16, 18, 20, 20, 20, 22, 24, 24, 24, -28, -0.5f, -32, 26, 1,  28, 32};
static const float hand_row1[32] = {0,  2,  4,  6,  8,  10, 12, 14, 16,  18,  20, 22, 24, 26, 28,  30,
                                    32, 32, 36, 40, 40, 40, 44, 48, -26, -80, 56, 60, 48, 28, -30, 2};
/* Column blocks hold the two tokens of a feature: amax = max(|out0|, |out1|), e.g.
 * feature 0: 1 and 0 -> 1/448 -> 2^-8: byte 119; feature 25: -28, -79 -> byte 125. The
 * dequantized values happen to equal the row ones (every value lands on the same grid). */
static const uint8_t hand_col_scales[32] = {119, 120, 121, 121, 122, 122, 122, 122, 123, 123, 123,
                                            123, 123, 123, 123, 124, 124, 124, 124, 124, 124, 124,
                                            124, 124, 123, 125, 125, 125, 124, 123, 124, 124};

static void test_hand(int mxfp8, int out_in, int fp32) {
  prob p = {2, 32, 1, 32, 8, mxfp8, out_in, fp32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  prob_alloc(&p);
  float xv[64], wv[32 * 32];
  uint8_t xc[64], wc[32 * 32], xsc[2] = {127, 128}, wsc[32];
  for (int k = 0; k < 32; ++k) {
    xv[k] = 1.0f;
    xv[32 + k] = k < 31 ? 2.0f : 0.0f;
    xc[k] = 0x38;                      /* 1.0 with scale 2^0 */
    xc[32 + k] = k < 31 ? 0x38 : 0x00; /* 1.0 with scale 2^1 = 2 */
  }
  for (int n = 0; n < 32; ++n) {
    wsc[n] = 127;
    for (int k = 0; k < 32; ++k) {
      int one = k < n || k == 31;
      wv[n * 32 + k] = one ? 1.0f : 0.0f;
      wc[n * 32 + k] = one ? 0x38 : 0x00;
    }
  }
  prob_store(&p, xv, wv, xc, wc, xsc, wsc);
  static const float c0[8] = {1, 0, 0.5f, -1, 1, 1, 0, 0.5f}, s0[8] = {0, 1, 0.5f, 0, 0, -1, 1, 0.5f};
  static const float c1[8] = {0.5f, -1, 0, 1, 0, 0.5f, -1, 1}, s1[8] = {1, 0.5f, -1, 0, 1, 0, 0.5f, -1};
  for (int j = 0; j < 8; ++j) {
    p.cosv[j] = bf16_bits(c0[j]);
    p.sinv[j] = bf16_bits(s0[j]);
    p.cosv[8 + j] = bf16_bits(c1[j]);
    p.sinv[8 + j] = bf16_bits(s1[j]);
  }
  outs got = outs_alloc(&p, 0);
  char tag[96];
  snprintf(tag, sizeof tag, "hand case %s %s%s", mxfp8 ? "mxfp8" : "bf16", out_in ? "out-in" : "in-out",
           fp32 ? " fp32-epilogue" : "");
  if (run_checked(&p, &got, 0, tag)) {
    TU_CHECK(got.s_row[0] == 124 && got.s_row[1] == 125, "%s: row scale bytes %u %u, want 124 125", tag,
             got.s_row[0], got.s_row[1]);
    int bad_row = 0, bad_col = 0, bad_cs = 0;
    for (int d = 0; d < 32; ++d) {
      bad_row += tu_mx_value(got.q_row[d], got.s_row[0]) != hand_row0[d];
      bad_row += tu_mx_value(got.q_row[32 + d], got.s_row[1]) != hand_row1[d];
      bad_col += tu_mx_value(got.q_col[d], got.s_col[d]) != hand_row0[d];
      bad_col += tu_mx_value(got.q_col[32 + d], got.s_col[d]) != hand_row1[d];
      bad_cs += got.s_col[d] != hand_col_scales[d];
    }
    TU_CHECK(bad_row == 0, "%s: %d row values differ from the hand-computed ones", tag, bad_row);
    TU_CHECK(bad_col == 0, "%s: %d column values differ from the hand-computed ones", tag, bad_col);
    TU_CHECK(bad_cs == 0, "%s: %d column scale bytes differ from the hand-computed ones", tag, bad_cs);
    /* and the oracle agrees with the hand (a check of the oracle itself) */
    outs want = outs_alloc(&p, 1);
    oracle(&p, &want);
    compare(&p, &got, &want, 1, 1, tag);
    outs_free(&want);
  }
  outs_free(&got);
  prob_free(&p);
}

/* With the core left to the library: where it picks oneDNN for a large gemm_amax, a
 * large proj_rope takes it too, whatever its panels (a narrower last N panel once made
 * oneDNN pick an implementation the plan refused, and the whole plan fell back to f32).
 * Plans only: the shapes are DeepSeek-V3's at T = 128 and one whose H*D leaves a short
 * last N panel. */
static void test_core_choice(void) {
  if (tu_cpu_core_asked()) return;
  const int64_t g[2] = {2048, 2048}, gs[2] = {2048, 64}, one[1] = {1};
  mxf_gemm_amax_desc gd;
  memset(&gd, 0, sizeof gd);
  gd.a = tu_tensor(NULL, MXF_E4M3, 2, g), gd.b = tu_tensor(NULL, MXF_E4M3, 2, g);
  gd.sfa = tu_tensor(NULL, MXF_E8M0, 2, gs), gd.sfb = tu_tensor(NULL, MXF_E8M0, 2, gs);
  gd.c = tu_tensor(NULL, MXF_BF16, 2, g), gd.amax = tu_tensor(NULL, MXF_F32, 1, one);
  gd.sf_vec = 32;
  mxf_plan *plan = NULL;
  if (!TU_CHECK(mxf_gemm_amax_plan(&plan, &gd) == MXF_OK, "core choice: gemm plan: %s", mxf_last_error()))
    return;
  const int onednn = tu_kernel_is(mxf_plan_backend(plan), "cpu/onednn");
  printf("core choice: gemm_amax 2048^3 on %s\n", mxf_plan_backend(plan));
  mxf_plan_destroy(plan);
  if (!onednn) return;
  static const int64_t shapes[][4] = {{128, 1536, 128, 192}, {300, 1056, 11, 192}}; /* T, K, H, D */
  for (int si = 0; si < 2; ++si)
    for (int mx = 0; mx < 2; ++mx)
      for (int oi = 0; oi < 2; ++oi) {
        const int64_t T = shapes[si][0], K = shapes[si][1], H = shapes[si][2], D = shapes[si][3], N = H * D;
        const int64_t sx[2] = {T, K}, sxs[2] = {T, K / 32}, scs[2] = {T, 64};
        const int64_t sw[2] = {oi ? N : K, oi ? K : N}, sws[2] = {oi ? N : K / 32, oi ? K / 32 : N};
        const int64_t so[3] = {T, H, D}, ssr[3] = {T, H, D / 32}, ssc[3] = {(T + 31) / 32, H, D};
        const mxf_dtype dt = mx ? MXF_E4M3 : MXF_BF16;
        mxf_proj_rope_desc d;
        memset(&d, 0, sizeof d);
        d.x = tu_tensor(NULL, dt, 2, sx), d.w = tu_tensor(NULL, dt, 2, sw);
        if (mx) d.x_scale = tu_tensor(NULL, MXF_E8M0, 2, sxs), d.w_scale = tu_tensor(NULL, MXF_E8M0, 2, sws);
        d.cos = tu_tensor(NULL, MXF_BF16, 2, scs), d.sin = tu_tensor(NULL, MXF_BF16, 2, scs);
        d.out_row = tu_tensor(NULL, MXF_E4M3, 3, so), d.out_scales_row = tu_tensor(NULL, MXF_E8M0, 3, ssr);
        d.out_col = tu_tensor(NULL, MXF_E4M3, 3, so), d.out_scales_col = tu_tensor(NULL, MXF_E8M0, 3, ssc);
        d.flags = oi ? MXF_PROJ_W_OUT_IN : 0u;
        plan = NULL;
        if (TU_CHECK(mxf_proj_rope_plan(&plan, &d) == MXF_OK, "core choice: proj plan: %s", mxf_last_error()))
          TU_CHECK(tu_kernel_is(mxf_plan_backend(plan), "cpu/onednn"),
                   "core choice: proj_rope T=%lld K=%lld H=%lld D=%lld %s %s runs on %s, gemm_amax on oneDNN",
                   (long long)T, (long long)K, (long long)H, (long long)D, mx ? "MXFP8" : "bf16",
                   oi ? "out-in" : "in-out", mxf_plan_backend(plan));
        mxf_plan_destroy(plan);
      }
}

int main(void) {
  char why[512];
  if (tu_cpu_core_missing(why, sizeof why)) return tu_skip("test_proj_rope_cpu", why);
  tu_rng r;
  tu_rng_init(&r, tu_seed());
  TU_CHECK(tu_e4m3_nearest(17.0f) == 0x58 && tu_e4m3_nearest(-19.0f) == 0xDA &&
               tu_e4m3_nearest(500.0f) == 0x7E,
           "oracle: e4m3 rounding");
  TU_CHECK(tu_bf16_round(1.00390625f) == 1.0f && tu_bf16_round(1.01171875f) == 1.015625f,
           "oracle: bf16 ties to even");

  for (int mx = 0; mx < 2; ++mx)
    for (int oi = 0; oi < 2; ++oi)
      for (int f = 0; f < 2; ++f)
        test_hand(mx, oi, f);
  test_core_choice();

  /* (D, rope): DeepSeek's 192/64, and non-default splits */
  static const int64_t geo[][2] = {{192, 64}, {96, 32}, {64, 64}, {160, 32}, {32, 2}};
  static const int64_t tokens[] = {1, 33, 130, 300};
  int variant = 0;
  for (size_t ti = 0; ti < sizeof tokens / sizeof tokens[0]; ++ti)
    for (size_t gi = 0; gi < sizeof geo / sizeof geo[0]; ++gi)
      for (int mx = 0; mx < 2; ++mx)
        for (int oi = 0; oi < 2; ++oi)
          for (int f = 0; f < 2; ++f) {
            ++variant;
            int64_t H = tu_range(&r, 1, 3);
            int64_t K = mx ? 32 * tu_range(&r, 1, 5) : tu_range(&r, 1, 170);
            int mode = variant % 5 == 0 ? DATA_INJECT : (variant & 1) ? DATA_INTEGER : DATA_RANDOM;
            test_case(&r, tokens[ti], K, H, geo[gi][0], geo[gi][1], mx, oi, f, mode, variant % 3 == 0);
          }
  /* the random-data criteria on a larger shape, with K just above a block boundary */
  test_case(&r, 517, 33, 4, 192, 64, 0, 1, 0, DATA_RANDOM, 0);
  test_case(&r, 517, 288, 3, 192, 64, 1, 0, 0, DATA_RANDOM, 1);
  /* the CPU backend's tiles: tokens over two row chunks, heads over two N panels, K over
   * three K panels whose sums are added before the staging */
  test_case(&r, 2100, 96, 11, 192, 64, 0, 1, 0, DATA_RANDOM, 0);
  test_case(&r, 300, 1056, 11, 192, 64, 1, 0, 0, DATA_RANDOM, 0);
  test_case(&r, 300, 1100, 11, 192, 64, 0, 0, 1, DATA_INTEGER, 1);
  /* few tokens (the outputs as the driver's rows): outputs over two row chunks, K over
   * three panels, T not a multiple of 32 */
  test_case(&r, 130, 1100, 12, 192, 64, 0, 1, 0, DATA_RANDOM, 0);
  test_case(&r, 200, 1056, 12, 192, 64, 1, 0, 0, DATA_INTEGER, 1);
  /* the streaming path's tiles (1 MiB of sums): 64 tokens, heads over two N panels */
  test_case(&r, 64, 96, 24, 192, 64, 0, 1, 0, DATA_RANDOM, 0);
  for (int col = 0; col < 2; ++col) {
    const stats *g = &g_random[col];
    const char *dir = col ? "col" : "row";
    printf("random data, %s: %lld of %lld scale bytes and %lld of %lld codes equal the oracle; %lld blocks "
           "undetermined, %lld of them differ\n",
           dir, (long long)g->scales_eq, (long long)g->scales, (long long)g->codes_eq, (long long)g->codes,
           (long long)g->undetermined, (long long)g->undetermined_differ);
    TU_CHECK(g->scales_eq * 1000 >= g->scales * 999,
             "random data %s: only %lld of %lld scale bytes equal the oracle", dir, (long long)g->scales_eq,
             (long long)g->scales);
    TU_CHECK(g->codes_eq * 100 >= g->codes * 99, "random data %s: only %lld of %lld codes equal the oracle",
             dir, (long long)g->codes_eq, (long long)g->codes);
  }
  tu_cpu_core_print();
  return tu_finish("test_proj_rope_cpu");
}
