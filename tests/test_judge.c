/*
 * test_judge.c — the acceptance rule of SPEC §5 (judge/judge.h) on hand-made cases:
 * δ of a small dot product against its value worked out by hand, outputs whose rounding
 * no summation order can change (determined: only their code passes), outputs on a
 * rounding tie or under heavy cancellation (undetermined: every code between the ends
 * passes, one beyond fails), NaN / inf / overflowing operands, f32 C, amax, and a tiny
 * proj_rope request with exact integer data in which two staged values sit exactly on a
 * bf16 tie: those blocks (and, through RoPE, the pair's two outputs) are undetermined,
 * every other block is determined and a single changed code or scale byte in one of
 * them is caught.
 */
#include <math.h>
#include <string.h>

#include "formats.h"
#include "judge.h"
#include "testutil.h"

static mxj_verdict verdict(mxf_dtype c, const mxj_ref *r, uint32_t code) {
  return mxj_gemm_judge(c, r, code, NULL, 0);
}

static void test_codes(void) {
  int nan = 0;
  TU_CHECK(mxj_code_ordinal(MXF_BF16, 0x8000, &nan) == 0 && !nan, "bf16 -0 sits at 0");
  TU_CHECK(mxj_code_ordinal(MXF_BF16, 0x8001, NULL) == -1 && mxj_code_ordinal(MXF_BF16, 0x0001, NULL) == 1,
           "bf16 neighbours of 0");
  mxj_code_ordinal(MXF_E4M3, 0xFF, &nan);
  TU_CHECK(nan, "e4m3 0xFF is NaN");
  mxj_code_ordinal(MXF_E5M2, 0x7C, &nan);
  TU_CHECK(!nan, "e5m2 0x7C is inf, not NaN");
  TU_CHECK(mxj_code_ordinal(MXF_E2M1, 0x9, NULL) == -1, "e2m1 -0.5");
  uint8_t packed[2] = {0x21, 0x43};
  TU_CHECK(mxj_code_at(MXF_E2M1, packed, 0) == 1 && mxj_code_at(MXF_E2M1, packed, 3) == 4, "packed e2m1");
  TU_CHECK(mxj_encode(MXF_BF16, 1.0f) == 0x3F80 && mxj_encode(MXF_E4M3, 1000.0f) == 0x7E, "encoders");
}

static void test_gemm(void) {
  /* δ by hand: t = (3, 1), Σt = 4, Σt² = 10, K = 2:
   * 2^-24 (8 √2 √10 + (2/8 + 2) 4) = 2^-24 (8 √20 + 9) */
  const double a0[2] = {1, 2}, b0[2] = {3, 0.5};
  mxj_ref r = mxj_gemm_ref(a0, b0, 2, 1.0);
  const double want_delta = 0x1p-24 * (8.0 * sqrt(20.0) + 9.0);
  TU_CHECK(r.ref == 4.0 && fabs(r.delta - want_delta) <= 1e-15 * want_delta && !r.wide, "ref 4, delta %.9g",
           r.delta);
  mxj_ref ra = mxj_gemm_ref(a0, b0, 2, -0.5);
  TU_CHECK(ra.ref == -2.0 && fabs(ra.delta - 0.5 * want_delta) <= 1e-15 * want_delta,
           "alpha scales ref and delta");
  /* determined: bf16 4.0 and nothing else */
  TU_CHECK(verdict(MXF_BF16, &r, 0x4080) == MXJ_EXACT, "bf16 4.0 exact");
  TU_CHECK(verdict(MXF_BF16, &r, 0x4081) == MXJ_WRONG && verdict(MXF_BF16, &r, 0x407F) == MXJ_WRONG,
           "a neighbour of a determined code is wrong");
  TU_CHECK(verdict(MXF_E4M3, &r, 0x48) == MXJ_EXACT && verdict(MXF_E4M3, &r, 0x49) == MXJ_WRONG, "e4m3 4.0");

  /* a tie: 1 + 2^-8 lies halfway between bf16 1 and 1 + 2^-7 */
  const double a1[2] = {1, 0x1p-8}, b1[2] = {1, 1};
  r = mxj_gemm_ref(a1, b1, 2, 1.0);
  mxj_counts n;
  mxj_counts_init(&n);
  TU_CHECK(mxj_gemm_judge(MXF_BF16, &r, 0x3F80, &n, 0) == MXJ_WITHIN, "tie: lower code within");
  TU_CHECK(mxj_gemm_judge(MXF_BF16, &r, 0x3F81, &n, 1) == MXJ_WITHIN, "tie: upper code within");
  TU_CHECK(mxj_gemm_judge(MXF_BF16, &r, 0x3F82, &n, 2) == MXJ_WRONG, "tie: two codes up is wrong");
  TU_CHECK(mxj_gemm_judge(MXF_BF16, &r, 0x3F7F, &n, 3) == MXJ_WRONG, "tie: one code down is wrong");
  TU_CHECK(n.within == 2 && n.wrong == 2 && n.exact == 0 && n.first_wrong == 2 && n.equal == 1 &&
               n.max_step == 1,
           "counts of the tie: within %lld wrong %lld first %lld equal %lld step %lld", (long long)n.within,
           (long long)n.wrong, (long long)n.first_wrong, (long long)n.equal, (long long)n.max_step);

  /* heavy cancellation: ref = 1 with ±2^20 terms, δ ≈ 1.2: codes from about -0.2 to 2.2 */
  const double a2[3] = {0x1p20, -0x1p20, 1}, b2[3] = {1, 1, 1};
  r = mxj_gemm_ref(a2, b2, 3, 1.0);
  TU_CHECK(r.ref == 1.0 && r.delta > 1.1 && r.delta < 1.3, "cancellation: delta %.6g", r.delta);
  mxj_counts_init(&n);
  TU_CHECK(mxj_gemm_judge(MXF_BF16, &r, 0x4000, &n, 0) == MXJ_WITHIN, "2.0 within");
  TU_CHECK(n.max_step == 128, "step %lld (2.0 is 128 codes above 1.0)", (long long)n.max_step);
  TU_CHECK(verdict(MXF_BF16, &r, 0x0000) == MXJ_WITHIN && verdict(MXF_BF16, &r, 0xBE00) == MXJ_WITHIN,
           "0 and -0.125 within");
  TU_CHECK(verdict(MXF_BF16, &r, 0x4040) == MXJ_WRONG && verdict(MXF_BF16, &r, 0xBF80) == MXJ_WRONG,
           "3.0 and -1.0 wrong");
  TU_CHECK(mxj_gemm_judge(MXF_F32, &r, mxf_f32_bits(2.0f), NULL, 0) == MXJ_WITHIN &&
               mxj_gemm_judge(MXF_F32, &r, mxf_f32_bits(2.5f), NULL, 0) == MXJ_WRONG,
           "f32 C within delta + ulp of ref");

  /* all products zero: δ = 0, +0 is determined and -0 is not +0 */
  const double z[2] = {0, 0};
  r = mxj_gemm_ref(z, b1, 2, 1.0);
  TU_CHECK(r.delta == 0.0 && verdict(MXF_E4M3, &r, 0x00) == MXJ_EXACT &&
               verdict(MXF_E4M3, &r, 0x80) == MXJ_WRONG,
           "exact zero");
  r = mxj_gemm_ref(z, b1, 2, -1.0); /* -0: either zero (the ends encode to -0 and +0) */
  TU_CHECK(verdict(MXF_E4M3, &r, 0x00) == MXJ_WITHIN && verdict(MXF_E4M3, &r, 0x80) == MXJ_WITHIN &&
               verdict(MXF_E4M3, &r, 0x01) == MXJ_WRONG,
           "negative zero");

  /* NaN: any NaN for 16-bit C, the one NaN code of SPEC §0 for fp8 */
  const double an[2] = {NAN, 1};
  r = mxj_gemm_ref(an, b1, 2, 1.0);
  TU_CHECK(verdict(MXF_BF16, &r, 0x7FC0) == MXJ_EXACT && verdict(MXF_BF16, &r, 0xFFC1) == MXJ_EXACT &&
               verdict(MXF_BF16, &r, 0x3F80) == MXJ_WRONG,
           "NaN, bf16");
  TU_CHECK(verdict(MXF_E4M3, &r, 0x7F) == MXJ_EXACT && verdict(MXF_E4M3, &r, 0xFF) == MXJ_WRONG &&
               verdict(MXF_E5M2, &r, 0x7F) == MXJ_EXACT && verdict(MXF_E2M1, &r, 0x7) == MXJ_EXACT,
           "NaN, fp8 and e2m1");
  TU_CHECK(verdict(MXF_F32, &r, 0x7FC00000u) == MXJ_EXACT && verdict(MXF_F32, &r, 0) == MXJ_WRONG,
           "NaN, f32");
  /* a finite reference never allows NaN */
  r = mxj_gemm_ref(a1, b1, 2, 1.0);
  TU_CHECK(verdict(MXF_BF16, &r, 0x7FC0) == MXJ_WRONG && verdict(MXF_F32, &r, 0x7FC00000u) == MXJ_WRONG,
           "NaN for a number");

  /* a true infinity is exact in any order; e4m3 saturates */
  const double ai[2] = {INFINITY, 1};
  r = mxj_gemm_ref(ai, b1, 2, 1.0);
  TU_CHECK(!r.wide && verdict(MXF_BF16, &r, 0x7F80) == MXJ_EXACT &&
               verdict(MXF_BF16, &r, 0x7F7F) == MXJ_WRONG && verdict(MXF_E4M3, &r, 0x7E) == MXJ_EXACT &&
               verdict(MXF_F32, &r, 0x7F800000u) == MXJ_EXACT,
           "inf");
  /* f32 overflow of the sum: C = inf is the rounding of a value within the bound */
  const double ab[2] = {0x1.fffffep127, 0x1p104}, bb[2] = {1, 1};
  r = mxj_gemm_ref(ab, bb, 2, 1.0);
  TU_CHECK(r.wide && verdict(MXF_F32, &r, 0x7FC00000u) == MXJ_WITHIN, "overflowing intermediates: anything");
  /* a dequantized value beyond f32 meets a tiny one: the f32 order decides */
  const double aw[2] = {0x1p130, 1}, bw[2] = {0x1p-130, 1};
  r = mxj_gemm_ref(aw, bw, 2, 1.0);
  TU_CHECK(r.wide && r.ref == 2.0 && verdict(MXF_BF16, &r, 0x7F80) == MXJ_WITHIN,
           "a value beyond f32: anything");
  /* products below 2^-126 carry their own size in δ (rounded to the subnormal grid or flushed) */
  const double as[2] = {0x1p-100, 0}, bs[2] = {0x1p-40, 0};
  r = mxj_gemm_ref(as, bs, 2, 1.0);
  TU_CHECK(r.delta >= 0x1p-140, "tiny products: delta %g", r.delta);

  /* amax */
  TU_CHECK(mxj_amax_ok(1.0f, 1.0, 0, 100) && !mxj_amax_ok(1.001f, 1.0, 0, 100) &&
               !mxj_amax_ok(NAN, 1.0, 0, 100),
           "amax finite");
  TU_CHECK(mxj_amax_ok(NAN, 1.0, 1, 100) && !mxj_amax_ok(1.0f, 1.0, 1, 100), "amax NaN");
  TU_CHECK(mxj_amax_ok(INFINITY, INFINITY, 0, 100) && !mxj_amax_ok(3e38f, INFINITY, 0, 100), "amax inf");
}

/* T=33 (a partial column block), K=32, H=1, D=32 (nope 24, rope 8), bf16 inputs:
 * x[t, 0] = 1 + t % 4, w[d, 0] = d + 1, everything else 0, so y[t, d] = (1 + t % 4)(d + 1)
 * exactly (at most 128: exact in bf16) and cos = 1, sin = 0 keep it through RoPE. Two
 * values are moved onto a bf16 tie (their f32 GEMM may round either way): y[5, 3] =
 * 2·4 + 2^-5 = 8 + 2^-5 (halfway between 8 and 8 + 2^-4) and y[7, 24] = 4·25 + 0.25
 * (between 100 and 100.5), the first value of RoPE pair 0: features 24 and 28. */
static void test_proj(void) {
  enum { T = 33, K = 32, D = 32, R = 8 };
  static uint16_t x[T * K], w[D * K], cs[T * R], sn[T * R];
  memset(x, 0, sizeof x), memset(w, 0, sizeof w);
  for (int t = 0; t < T; ++t)
    x[t * K] = mxf_f32_to_bf16((float)(1 + t % 4));
  for (int d = 0; d < D; ++d)
    w[d * K] = mxf_f32_to_bf16((float)(d + 1));
  x[5 * K + 1] = mxf_f32_to_bf16(1.0f), w[3 * K + 1] = mxf_f32_to_bf16(0x1p-5f);
  x[7 * K + 2] = mxf_f32_to_bf16(1.0f), w[24 * K + 2] = mxf_f32_to_bf16(0.25f);
  for (int i = 0; i < T * R; ++i)
    cs[i] = mxf_f32_to_bf16(1.0f), sn[i] = 0;
  const mxj_proj_inputs in = {
      .t = T, .k = K, .h = 1, .d = D, .rope = R, .w_out_in = 1, .x = x, .w = w, .cos = cs, .sin = sn};
  mxj_proj_ref ref;
  if (!TU_CHECK(mxj_proj_ref_alloc(&ref, T, 1, D, 1) == 0, "alloc")) return;
  TU_CHECK(mxj_proj_reference(&in, NULL, NULL, &ref, NULL, NULL) == 0, "reference");
  /* token 0: values 1..32, amax 32 -> s = 32/448 -> 2^-3: byte 124; 1 · 8 = 8 -> e4m3 0x50 */
  TU_CHECK(ref.val[0] == 1.0f && ref.val[31] == 32.0f && ref.q.s_row[0] == 124 && ref.q.q_row[0] == 0x50,
           "token 0: value %g, scale %u, code 0x%02x", (double)ref.val[0], ref.q.s_row[0], ref.q.q_row[0]);
  TU_CHECK(ref.val[7 * D + 24] == 100.0f, "the tie y[7, 24] staged to bf16 100 (ties to even)");
  int undet_rows = 0, undet_cols = 0;
  for (int t = 0; t < T; ++t)
    undet_rows += !ref.det_row[t];
  for (int i = 0; i < 2 * D; ++i)
    undet_cols += !ref.det_col[i];
  TU_CHECK(undet_rows == 2 && !ref.det_row[5] && !ref.det_row[7], "undetermined row blocks: %d", undet_rows);
  TU_CHECK(undet_cols == 3 && !ref.det_col[3] && !ref.det_col[24] && !ref.det_col[28] && ref.det_col[D + 3],
           "undetermined column blocks: %d (d = 3, and the pair's two outputs 24, 28)", undet_cols);

  /* the reference itself passes */
  static uint8_t qr[T * D], sr[T], qc[T * D], sc[2 * D];
  memcpy(qr, ref.q.q_row, sizeof qr), memcpy(sr, ref.q.s_row, sizeof sr);
  memcpy(qc, ref.q.q_col, sizeof qc), memcpy(sc, ref.q.s_col, sizeof sc);
  mxj_proj_outputs got = {qr, sr, qc, sc};
  mxj_proj_counts c[2];
  mxj_proj_judge(&in, NULL, NULL, &ref, &got, c);
  TU_CHECK(c[0].blocks.exact == 31 && c[0].blocks.within == 2 && c[0].blocks.wrong == 0,
           "rows: %lld/%lld/%lld", (long long)c[0].blocks.exact, (long long)c[0].blocks.within,
           (long long)c[0].blocks.wrong);
  TU_CHECK(c[1].blocks.exact == 61 && c[1].blocks.within == 3 && c[1].blocks.wrong == 0,
           "cols: %lld/%lld/%lld", (long long)c[1].blocks.exact, (long long)c[1].blocks.within,
           (long long)c[1].blocks.wrong);
  TU_CHECK(c[0].codes == T * D && c[0].codes_equal == T * D && c[1].scales == 2 * D && mxj_cudnn_ok(&c[0]) &&
               mxj_cudnn_ok(&c[1]) && c[1].close == T * D,
           "rates");

  /* a changed code in an undetermined block is not judged; in a determined one it is */
  qr[5 * D + 10] ^= 0x01;
  mxj_proj_judge(&in, NULL, NULL, &ref, &got, c);
  TU_CHECK(c[0].blocks.wrong == 0 && c[0].blocks.within == 2 && c[0].blocks.max_step == 1,
           "undetermined block changed: wrong %lld, step %lld", (long long)c[0].blocks.wrong,
           (long long)c[0].blocks.max_step);
  qr[9 * D + 30] ^= 0x01;
  sc[D + 7] += 1;
  mxj_proj_judge(&in, NULL, NULL, &ref, &got, c);
  TU_CHECK(c[0].blocks.wrong == 1 && c[0].blocks.first_wrong == 9, "a changed code: wrong %lld at %lld",
           (long long)c[0].blocks.wrong, (long long)c[0].blocks.first_wrong);
  TU_CHECK(c[1].blocks.wrong == 1 && c[1].blocks.first_wrong == D + 7,
           "a changed scale byte (partial block)");

  /* a selection judges only its blocks */
  const uint8_t tb_sel[2] = {0, 1};
  mxj_proj_judge(&in, tb_sel, NULL, &ref, &got, c);
  TU_CHECK(c[0].blocks.exact == 1 && c[0].blocks.wrong == 0 && c[1].blocks.wrong == 1 &&
               c[1].blocks.exact == 31,
           "token block 1 alone");
  mxj_proj_ref_free(&ref);
}

int main(void) {
  test_codes();
  test_gemm();
  test_proj();
  return tu_finish("test_judge");
}
