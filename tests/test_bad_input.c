/*
 * test_bad_input.c — every refusal of SPEC §4, table-driven.
 *
 * Each case starts from a valid descriptor of its op and breaks exactly one thing; it
 * must be refused with the stated status and a message naming the tensor and the rule,
 * in the plan form and in the one-call form, with every poisoned output buffer left
 * byte-for-byte untouched. Run-time cases (NULL / misaligned pointers, small workspace,
 * wrong plan) break the args of a valid plan. A set of valid but unusual requests must
 * pass validation, so the validator is not over-strict.
 */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h" /* to force a workspace requirement in one run-time case */
#include "testutil.h"

#define POOL (1u << 20)
#define NIN 8
#define NOUT 4
#define POISON 0xA5

static uint8_t *g_in[NIN], *g_out[NOUT];
static int g_cases;

static void poison_outputs(void) {
  for (int i = 0; i < NOUT; ++i)
    tu_poison(g_out[i], POOL, POISON);
}

static int outputs_untouched(void) {
  for (int i = 0; i < NOUT; ++i)
    if (!tu_all_bytes(g_out[i], POOL, POISON)) return 0;
  return 1;
}

static mxf_tensor ten(void *data, mxf_dtype dt, int ndim, int64_t s0, int64_t s1, int64_t s2) {
  mxf_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dt;
  t.ndim = ndim;
  t.shape[0] = s0;
  t.shape[1] = s1;
  t.shape[2] = s2;
  return t;
}

static void strides(mxf_tensor *t, int64_t s0, int64_t s1, int64_t s2) {
  t->stride[0] = s0;
  t->stride[1] = s1;
  t->stride[2] = s2;
}

static void set6(int64_t *v, int64_t a, int64_t b, int64_t c, int64_t d, int64_t e, int64_t f) {
  v[0] = a, v[1] = b, v[2] = c, v[3] = d, v[4] = e, v[5] = f;
}

/* Checks a refusal: status, message substrings, untouched outputs. */
static void expect_refusal(const char *form, const char *what, mxf_status got, mxf_status want,
                           const char *s1, const char *s2) {
  const char *msg = mxf_last_error();
  if (getenv("MXF_TEST_VERBOSE")) printf("  %-34s %-8s %s\n", what, form, msg);
  TU_CHECK(got == want, "%s [%s]: status %s, expected %s (message: %s)", what, form, mxf_status_string(got),
           mxf_status_string(want), msg);
  TU_CHECK(strstr(msg, s1) != NULL, "%s [%s]: message lacks \"%s\": %s", what, form, s1, msg);
  if (s2) TU_CHECK(strstr(msg, s2) != NULL, "%s [%s]: message lacks \"%s\": %s", what, form, s2, msg);
  TU_CHECK(outputs_untouched(), "%s [%s]: an output buffer was written", what, form);
}

enum { ONECALL_ONLY = 1, PLAN_ONLY = 2, DESC_NULL = 4, NEEDS_NO_GPU = 8 };

/* An op's three public forms, over an untyped descriptor, so that one function drives
 * the cases of every op. run builds the args from the descriptor's data pointers. */
typedef struct op_forms {
  mxf_status (*plan)(mxf_plan **plan, const void *desc);
  mxf_status (*call)(const void *desc);
  mxf_status (*run)(const mxf_plan *plan, const void *desc, void *ws, size_t ws_size);
} op_forms;

/* One case: a refusal with status `want` in the plan form (unless ONECALL_ONLY), which
 * must leave the plan NULL, and in the one-call form (unless PLAN_ONLY). */
static void expect_refused(const op_forms *op, const void *desc, const char *what, mxf_status want,
                           const char *s1, const char *s2, int flags) {
  static char not_null;
  if ((flags & NEEDS_NO_GPU) && mxf_cuda_device_count() > 0) return;
  ++g_cases;
  if (!(flags & ONECALL_ONLY)) {
    mxf_plan *plan = (mxf_plan *)&not_null; /* must come back NULL */
    poison_outputs();
    mxf_status st = op->plan(&plan, desc);
    expect_refusal("plan", what, st, want, s1, s2);
    TU_CHECK(plan == NULL, "%s [plan]: plan not NULL after a refusal", what);
    if (st == MXF_OK) mxf_plan_destroy(plan);
  }
  if (!(flags & PLAN_ONLY)) {
    poison_outputs();
    expect_refusal("one-call", what, op->call(desc), want, s1, s2);
  }
}

/* ================================================================ gemm_amax */
enum { GM = 45, GN = 40, GK = 96, GL = 2 };

static mxf_gemm_amax_desc gemm_base(void) {
  mxf_gemm_amax_desc d;
  memset(&d, 0, sizeof d);
  d.a = ten(g_in[0], MXF_E4M3, 3, GM, GK, GL);
  strides(&d.a, GK, 1, GM * GK);
  d.b = ten(g_in[1], MXF_E4M3, 3, GN, GK, GL);
  strides(&d.b, GK, 1, GN * GK);
  d.sfa = ten(g_in[2], MXF_E8M0, 3, GL, GM, 3);
  d.sfb = ten(g_in[3], MXF_U8, 3, GL, GN, 3);
  d.c = ten(g_out[0], MXF_F32, 3, GM, GN, GL);
  strides(&d.c, GN, 1, GM * GN);
  d.amax = ten(g_out[1], MXF_F32, 1, 1, 0, 0);
  d.sf_vec = 32;
  return d;
}

static void to_e2m1(mxf_gemm_amax_desc *d) {
  d->a.dtype = MXF_E2M1;
  d->b.dtype = MXF_E2M1;
}

#define G(name) static void name(mxf_gemm_amax_desc *d)
G(g_a_ndim4) { d->a.ndim = 4, d->a.shape[3] = 1; }
G(g_a_f32) { d->a.dtype = MXF_F32; }
G(g_c_i8) { d->c.dtype = MXF_I8; }
G(g_c_e8m0) { d->c.dtype = MXF_E8M0; }
G(g_sfa_f16) { d->sfa.dtype = MXF_F16; }
G(g_ue4m3_fp8) { d->sfa.dtype = d->sfb.dtype = MXF_E4M3; }
G(g_sfvec16_fp8) { d->sf_vec = 16; }
G(g_sfvec64) { d->sf_vec = 64; }
G(g_ue4m3_sfvec32) { to_e2m1(d), d->sfa.dtype = d->sfb.dtype = MXF_E4M3; }
G(g_bf16_a_with_sfa) { d->a.dtype = MXF_BF16; }
G(g_mx_a_without_sfa) { memset(&d->sfa, 0, sizeof d->sfa); }
G(g_b_bf16) { d->b.dtype = MXF_BF16; }
G(g_sfvec16_mixed) { d->b.dtype = MXF_E2M1, d->sf_vec = 16; }
G(g_sfvec16_bf16_fp8) { d->a.dtype = MXF_BF16, memset(&d->sfa, 0, sizeof d->sfa), d->sf_vec = 16; }
G(g_ue4m3_sfb_sfvec32) { d->b.dtype = MXF_E2M1, d->sfb.dtype = MXF_E4M3; }
G(g_c_m_wrong) { d->c.shape[0] = GM - 1; }
G(g_b_k_wrong) { d->b.shape[1] = 64, strides(&d->b, 64, 1, GN * 64); }
G(g_b_l_wrong) { d->b.shape[2] = 3; }
G(g_c_2d) { d->c.ndim = 2; }
G(g_a_no_unit) { strides(&d->a, GK, 2, GM * GK * 2); }
G(g_a_implicit) { strides(&d->a, 0, 0, 0); }
G(g_a_ld_small) { strides(&d->a, 80, 1, GM * 80); }
G(g_a_ld_misaligned) { strides(&d->a, 100, 1, GM * 112); }
G(g_a_batch_misaligned) { strides(&d->a, GK, 1, 4328); }
G(g_c_ld_misaligned) { strides(&d->c, 41, 1, GM * 44); }
G(g_c_batch_overlap) { strides(&d->c, GN, 1, GN * 44); }
G(g_c_both_unit) { strides(&d->c, 1, 1, GM * GN); }
G(g_e2m1_m_major) { to_e2m1(d), strides(&d->a, 1, 64, 64 * GK); }
G(g_e2m1_odd_k) { to_e2m1(d), d->a.shape[1] = 95; }
G(g_u8_m_major) {
  d->a.dtype = MXF_U8, d->b.dtype = MXF_E2M1, d->a.shape[1] = GK / 2;
  strides(&d->a, 1, 64, 64 * GK / 2);
}
G(g_c_e2m1_m_major) { d->c.dtype = MXF_E2M1, strides(&d->c, 1, 64, 64 * GN); }
G(g_c_e2m1_odd_n) { d->c.dtype = MXF_E2M1, d->c.shape[1] = 39, strides(&d->c, 64, 1, 64 * GM); }
G(g_sfa_shape) { d->sfa.shape[2] = 4; }
G(g_sfb_2d_l2) { d->sfb.ndim = 2, d->sfb.shape[0] = GN, d->sfb.shape[1] = 3; }
G(g_sfa_logical_strides) {
  d->sfa.ndim = 6;
  set6(d->sfa.shape, 32, 4, 1, 4, 1, GL);
  set6(d->sfa.stride, 32, 8, 8, 2, 2, 1);
}
G(g_sfa_compact_strided) { strides(&d->sfa, GM * 4, 4, 1); }
G(g_amax_f16) { d->amax.dtype = MXF_F16; }
G(g_amax_two) { d->amax.shape[0] = 2; }
G(g_amax_absent) { d->amax.ndim = 0; }
G(g_flags) { d->flags = 0x4; }
G(g_zero_k) {
  d->a.shape[1] = 0;
  d->b.shape[1] = 0;
}
G(g_neg_stride) { strides(&d->b, -GK, 1, GN * GK); }
G(g_device_mix) { d->b.device = MXF_DEVICE_CUDA(0); }
G(g_device_neg) { d->a.device = -1; }
G(g_dtype_99) { d->sfb.dtype = (mxf_dtype)99; }
G(g_c_no_data) { d->c.data = NULL; }
G(g_amax_no_data) { d->amax.data = NULL; }
G(g_null) { (void)d; }
G(g_all_cuda) {
  d->a.device = d->b.device = d->sfa.device = d->sfb.device = d->c.device = d->amax.device =
      MXF_DEVICE_CUDA(0);
}
G(g_sf_example) {
  /* the SPEC-style example: M=300, K=512, sf_vec=32, sfa given as (1, 3, 4) */
  d->a = ten(g_in[0], MXF_E4M3, 2, 300, 512, 0);
  d->b = ten(g_in[1], MXF_E4M3, 2, GN, 512, 0);
  d->c = ten(g_out[0], MXF_F32, 2, 300, GN, 0);
  d->sfa = ten(g_in[2], MXF_E8M0, 3, 1, 3, 4);
  d->sfb = ten(g_in[3], MXF_E8M0, 2, GN, 16, 0);
}

typedef struct gemm_case {
  const char *what;
  void (*f)(mxf_gemm_amax_desc *);
  mxf_status st;
  const char *s1, *s2;
  int flags;
} gemm_case;

static const gemm_case gemm_cases[] = {
    {"a with 4 dims", g_a_ndim4, MXF_ERR_INVALID_VALUE, "gemm_amax: a has shape (45, 96, 2, 1)",
     "expected (M, K, L) or (M, K)", 0},
    {"a f32", g_a_f32, MXF_ERR_INVALID_VALUE, "a has dtype f32", "expected bf16, e4m3, e5m2, e2m1", 0},
    {"b bf16", g_b_bf16, MXF_ERR_INVALID_VALUE, "b has dtype bf16", "expected e4m3, e5m2, e2m1", 0},
    {"bf16 a with sfa", g_bf16_a_with_sfa, MXF_ERR_INVALID_VALUE, "a is bf16, so sfa must be absent",
     "got (2, 45, 3)", 0},
    {"e4m3 a without sfa", g_mx_a_without_sfa, MXF_ERR_INVALID_VALUE, "a is e4m3, so sfa is required",
     "only a bf16 a has no scales", 0},
    {"c i8", g_c_i8, MXF_ERR_INVALID_VALUE, "c has dtype i8", "expected f32, f16, bf16", 0},
    {"c e8m0", g_c_e8m0, MXF_ERR_INVALID_VALUE, "c has dtype e8m0", "expected f32", 0},
    {"sfa f16", g_sfa_f16, MXF_ERR_INVALID_VALUE, "sfa has dtype f16", "expected e8m0", 0},
    {"ue4m3 scales with fp8", g_ue4m3_fp8, MXF_ERR_INVALID_VALUE, "sfa has dtype e4m3 (ue4m3) with sf_vec 32",
     "need e2m1 operands", 0},
    {"sf_vec 16 with fp8", g_sfvec16_fp8, MXF_ERR_INVALID_VALUE, "sf_vec=16 with a e4m3 and b e4m3",
     "e4m3 and e5m2 take sf_vec 32", 0},
    {"sf_vec 16 with e4m3 a, e2m1 b", g_sfvec16_mixed, MXF_ERR_INVALID_VALUE,
     "sf_vec=16 with a e4m3 and b e2m1", "needs an e2m1 b and an e2m1 or bf16 a", 0},
    {"sf_vec 16 with bf16 a, e4m3 b", g_sfvec16_bf16_fp8, MXF_ERR_INVALID_VALUE,
     "sf_vec=16 with a bf16 and b e4m3", "needs an e2m1 b", 0},
    {"ue4m3 sfb with sf_vec 32", g_ue4m3_sfb_sfvec32, MXF_ERR_INVALID_VALUE,
     "sfb has dtype e4m3 (ue4m3) with sf_vec 32", "ue4m3 scales need e2m1 operands and sf_vec 16", 0},
    {"sf_vec 64", g_sfvec64, MXF_ERR_INVALID_VALUE, "sf_vec=64", "expected 16 or 32", 0},
    {"ue4m3 with sf_vec 32", g_ue4m3_sfvec32, MXF_ERR_INVALID_VALUE,
     "sfa has dtype e4m3 (ue4m3) with sf_vec 32", "sf_vec 16", 0},
    {"c M wrong", g_c_m_wrong, MXF_ERR_INVALID_VALUE, "c has shape (44, 40, 2)", "expected (M=45, N=40)", 0},
    {"b K wrong", g_b_k_wrong, MXF_ERR_INVALID_VALUE, "b has shape (40, 64, 2)", "expected K=96", 0},
    {"b L wrong", g_b_l_wrong, MXF_ERR_INVALID_VALUE, "b has L=3 but a has L=2", "L must agree", 0},
    {"c 2-D with L=2", g_c_2d, MXF_ERR_INVALID_VALUE, "c has L=1 but a has L=2", "L must agree", 0},
    {"a without unit stride", g_a_no_unit, MXF_ERR_INVALID_VALUE, "a has strides (96, 2, 8640)",
     "exactly one of the M and K strides must be 1", 0},
    {"a batched, all-zero strides", g_a_implicit, MXF_ERR_INVALID_VALUE,
     "a has strides (192, 2, 1) (C-contiguous", "give explicit strides", 0},
    {"a ld < K", g_a_ld_small, MXF_ERR_INVALID_VALUE, "a is k-major with leading stride 80 < K=96",
     "rows would overlap", 0},
    {"a ld not 16 B", g_a_ld_misaligned, MXF_ERR_INVALID_VALUE, "a has leading stride 100 (100 bytes)",
     "16-byte aligned", 0},
    {"a batch not 16 B", g_a_batch_misaligned, MXF_ERR_INVALID_VALUE, "a has batch stride 4328",
     "16-byte aligned", 0},
    {"c ld not 16 B", g_c_ld_misaligned, MXF_ERR_INVALID_VALUE, "c has leading stride 41 (164 bytes)",
     "16-byte aligned", 0},
    {"c batches overlap", g_c_batch_overlap, MXF_ERR_INVALID_VALUE, "c has batch stride 1760 < 1800",
     "overlap", 0},
    {"c both strides unit", g_c_both_unit, MXF_ERR_INVALID_VALUE, "c has strides (1, 1, 1800)", "both 1", 0},
    {"e2m1 a m-major", g_e2m1_m_major, MXF_ERR_INVALID_VALUE, "a is e2m1 and m-major", "must be k-major", 0},
    {"e2m1 odd K", g_e2m1_odd_k, MXF_ERR_INVALID_VALUE, "a is e2m1 with K=95", "must be even", 0},
    {"packed u8 a m-major", g_u8_m_major, MXF_ERR_INVALID_VALUE,
     "a is packed e2m1 (u8) with strides (1, 64, 3072)", "must be k-major", 0},
    {"e2m1 c m-major", g_c_e2m1_m_major, MXF_ERR_INVALID_VALUE, "c is e2m1 and m-major", "C must be n-major",
     0},
    {"e2m1 c odd N", g_c_e2m1_odd_n, MXF_ERR_INVALID_VALUE, "c is e2m1 with N=39", "must be even", 0},
    {"sfa compact Kb wrong", g_sfa_shape, MXF_ERR_INVALID_VALUE,
     "sfa has shape (2, 45, 4); expected (32, 4, 1, 4, 1, 2) or (2, 1, 1, 32, 4, 4) or (2, 45, 3)",
     "M=45, K=96", 0},
    {"sfb 2-D with L=2", g_sfb_2d_l2, MXF_ERR_INVALID_VALUE, "sfb has shape (40, 3); expected",
     "N=40, K=96, L=2", 0},
    {"sfa logical with wrong strides", g_sfa_logical_strides, MXF_ERR_INVALID_VALUE,
     "sfa is swizzled (32, 4, R, 4, K', L) with strides (32, 8, 8, 2, 2, 1)",
     "expected (16, 4, 512, 1, 512, 512)", 0},
    {"sfa compact strided", g_sfa_compact_strided, MXF_ERR_INVALID_VALUE, "sfa has strides (180, 4, 1)",
     "expected C-contiguous (135, 3, 1)", 0},
    {"amax f16", g_amax_f16, MXF_ERR_INVALID_VALUE, "amax has dtype f16", "expected f32", 0},
    {"amax 2 elements", g_amax_two, MXF_ERR_INVALID_VALUE, "amax has shape (2)", "one element", 0},
    {"amax absent", g_amax_absent, MXF_ERR_INVALID_VALUE, "amax has ndim 0", "1 to 6 dimensions", 0},
    {"unknown flag", g_flags, MXF_ERR_INVALID_VALUE, "flags 0x4", "unknown bits", 0},
    {"K = 0", g_zero_k, MXF_ERR_INVALID_VALUE, "a has shape (45, 0, 2)", "K=0 is refused", 0},
    {"negative stride", g_neg_stride, MXF_ERR_INVALID_VALUE, "b has strides (-96, 1, 3840)",
     "strides must be in [0, 2^40]", 0},
    {"mixed devices", g_device_mix, MXF_ERR_INVALID_VALUE, "b is on cuda:0 but a is on cpu", "one device", 0},
    {"negative device", g_device_neg, MXF_ERR_INVALID_VALUE, "a has device -1", "MXF_DEVICE_CUDA", 0},
    {"dtype 99", g_dtype_99, MXF_ERR_INVALID_VALUE, "sfb has an invalid dtype (99)", "sfb", 0},
    {"c data NULL (one call)", g_c_no_data, MXF_ERR_INVALID_VALUE, "c has no data", "one-call form",
     ONECALL_ONLY},
    {"amax data NULL (one call)", g_amax_no_data, MXF_ERR_INVALID_VALUE, "amax has no data", "one-call form",
     ONECALL_ONLY},
    {"desc NULL", g_null, MXF_ERR_INVALID_VALUE, "gemm_amax: desc is NULL", "NULL", DESC_NULL},
    {"SPEC example SF shape", g_sf_example, MXF_ERR_INVALID_VALUE,
     "gemm_amax: sfa has shape (1, 3, 4); expected (32, 4, 3, 4, 4, 1) or (1, 3, 4, 32, 4, 4) or (1, 300, "
     "16)",
     "for M=300, K=512", 0},
    {"cuda tensors, no GPU", g_all_cuda, MXF_ERR_NOT_SUPPORTED, "CUDA device 0", "", NEEDS_NO_GPU},
};

static mxf_status gemm_plan_f(mxf_plan **plan, const void *d) { return mxf_gemm_amax_plan(plan, d); }
static mxf_status gemm_call_f(const void *d) { return mxf_gemm_amax(d, NULL); }
static mxf_status gemm_run_f(const mxf_plan *plan, const void *dv, void *ws, size_t n) {
  const mxf_gemm_amax_desc *d = dv;
  float one = 1.0f;
  mxf_gemm_amax_args a = {d->a.data, d->b.data, d->sfa.data, d->sfb.data, d->c.data, d->amax.data, &one};
  return mxf_gemm_amax_run(plan, &a, ws, n, NULL);
}
static const op_forms gemm_forms = {gemm_plan_f, gemm_call_f, gemm_run_f};

static void run_gemm_cases(void) {
  for (size_t i = 0; i < sizeof gemm_cases / sizeof *gemm_cases; ++i) {
    const gemm_case *c = &gemm_cases[i];
    mxf_gemm_amax_desc d = gemm_base();
    c->f(&d);
    expect_refused(&gemm_forms, (c->flags & DESC_NULL) ? NULL : &d, c->what, c->st, c->s1, c->s2, c->flags);
  }
  /* the plan form's output pointer */
  mxf_gemm_amax_desc d = gemm_base();
  poison_outputs();
  ++g_cases;
  expect_refusal("plan", "plan pointer NULL", mxf_gemm_amax_plan(NULL, &d), MXF_ERR_INVALID_VALUE,
                 "gemm_amax_plan: plan (the output pointer) is NULL", NULL);
}

/* ================================================================ proj_rope */
enum { PT = 33, PK = 64, PH = 3, PD = 64, PR = 32 };

static mxf_proj_rope_desc proj_base(void) {
  mxf_proj_rope_desc d;
  memset(&d, 0, sizeof d);
  d.x = ten(g_in[0], MXF_BF16, 2, PT, PK, 0);
  d.w = ten(g_in[1], MXF_BF16, 2, PK, PH * PD, 0);
  d.cos = ten(g_in[2], MXF_BF16, 2, PT, PR, 0);
  d.sin = ten(g_in[3], MXF_BF16, 2, PT, PR, 0);
  d.out_row = ten(g_out[0], MXF_E4M3, 3, PT, PH, PD);
  d.out_scales_row = ten(g_out[1], MXF_E8M0, 3, PT, PH, PD / 32);
  d.out_col = ten(g_out[2], MXF_E4M3, 3, PT, PH, PD);
  d.out_scales_col = ten(g_out[3], MXF_U8, 3, 2, PH, PD);
  return d;
}

/* the MXFP8 path, out-in weight */
static void to_mxfp8(mxf_proj_rope_desc *d) {
  d->flags |= MXF_PROJ_W_OUT_IN;
  d->x.dtype = MXF_E4M3;
  d->w = ten(g_in[1], MXF_E4M3, 2, PH * PD, PK, 0);
  d->x_scale = ten(g_in[4], MXF_E8M0, 2, PT, PK / 32, 0);
  d->w_scale = ten(g_in[5], MXF_U8, 2, PH * PD, PK / 32, 0);
}

#define P(name) static void name(mxf_proj_rope_desc *d)
P(p_x_f32) { d->x.dtype = MXF_F32; }
P(p_w_e4m3) { d->w.dtype = MXF_E4M3; }
P(p_x_3d) { d->x.ndim = 3, d->x.shape[2] = 1; }
P(p_out_row_2d) { d->out_row.ndim = 2; }
P(p_d48) { d->out_row.shape[2] = 48; }
P(p_rope_odd) { d->cos.shape[1] = 31, d->sin.shape[1] = 31; }
P(p_rope_gt_d) { d->cos.shape[1] = 96, d->sin.shape[1] = 96; }
P(p_cos_t) { d->cos.shape[0] = 32; }
P(p_sin_rope) { d->sin.shape[1] = 16; }
P(p_cos_f32) { d->cos.dtype = MXF_F32; }
P(p_w_hd) { d->w.shape[1] = 190; }
P(p_w_k) { d->w.shape[0] = 60; }
P(p_w_orient) { d->flags |= MXF_PROJ_W_OUT_IN; }
P(p_out_col_shape) { d->out_col.shape[2] = 32; }
P(p_out_row_e5m2) { d->out_row.dtype = MXF_E5M2; }
P(p_srow_shape) { d->out_scales_row.shape[2] = 3; }
P(p_scol_shape) { d->out_scales_col.shape[0] = 1; }
P(p_scol_f32) { d->out_scales_col.dtype = MXF_F32; }
P(p_xscale_present) { d->x_scale = ten(g_in[4], MXF_E8M0, 2, PT, 2, 0); }
P(p_x_strided) { strides(&d->x, 1, PT, 0); }
P(p_out_row_padded) { strides(&d->out_row, PH * 80, 80, 1); }
P(p_flags) { d->flags = 0x8; }
P(p_k48) {
  to_mxfp8(d);
  d->x.shape[1] = 48, d->w.shape[1] = 48;
}
P(p_xscale_shape) { to_mxfp8(d), d->x_scale.shape[1] = 3; }
P(p_wscale_orient) { to_mxfp8(d), d->w_scale.shape[0] = 2, d->w_scale.shape[1] = PH * PD; }
P(p_wscale_bf16) { to_mxfp8(d), d->w_scale.dtype = MXF_BF16; }
P(p_xscale_absent) { to_mxfp8(d), memset(&d->x_scale, 0, sizeof d->x_scale); }
P(p_sin_device) { d->sin.device = MXF_DEVICE_CUDA(1); }
P(p_out_col_nodata) { d->out_col.data = NULL; }
P(p_wscale_nodata) { to_mxfp8(d), d->w_scale.data = NULL; }
P(p_null) { (void)d; }
P(p_mxfp8_w_bf16) { to_mxfp8(d), d->w.dtype = MXF_BF16; }

typedef struct proj_case {
  const char *what;
  void (*f)(mxf_proj_rope_desc *);
  mxf_status st;
  const char *s1, *s2;
  int flags;
} proj_case;

static const proj_case proj_cases[] = {
    {"x f32", p_x_f32, MXF_ERR_INVALID_VALUE, "proj_rope: x has dtype f32", "expected bf16 or e4m3", 0},
    {"w e4m3 with bf16 x", p_w_e4m3, MXF_ERR_INVALID_VALUE, "w has dtype e4m3", "expected bf16 like x", 0},
    {"w bf16 with e4m3 x", p_mxfp8_w_bf16, MXF_ERR_INVALID_VALUE, "w has dtype bf16", "expected e4m3 like x",
     0},
    {"x 3-D", p_x_3d, MXF_ERR_INVALID_VALUE, "x has shape (33, 64, 1)", "expected (T, K)", 0},
    {"out_row 2-D", p_out_row_2d, MXF_ERR_INVALID_VALUE, "out_row has shape (33, 3)", "expected (T, H, D)",
     0},
    {"D = 48", p_d48, MXF_ERR_INVALID_VALUE, "out_row has shape (33, 3, 48)", "D=48 must be a multiple of 32",
     0},
    {"rope odd", p_rope_odd, MXF_ERR_INVALID_VALUE, "cos has shape (33, 31)", "rope=31 must be even", 0},
    {"rope > D", p_rope_gt_d, MXF_ERR_INVALID_VALUE, "cos has shape (33, 96)", "exceeds the head dim D=64",
     0},
    {"cos T", p_cos_t, MXF_ERR_INVALID_VALUE, "proj_rope: cos has shape (32, 32); expected (T=33, rope=32)",
     NULL, 0},
    {"sin rope", p_sin_rope, MXF_ERR_INVALID_VALUE,
     "proj_rope: sin has shape (33, 16); expected (T=33, rope=32)", NULL, 0},
    {"cos f32", p_cos_f32, MXF_ERR_INVALID_VALUE, "cos has dtype f32", "expected bf16", 0},
    {"w H*D", p_w_hd, MXF_ERR_INVALID_VALUE, "w has shape (64, 190); 190 is not H*D = 3*64 = 192", NULL, 0},
    {"w K", p_w_k, MXF_ERR_INVALID_VALUE, "w has shape (60, 192); expected (K=64, H*D=192)", "in-out", 0},
    {"w orientation", p_w_orient, MXF_ERR_INVALID_VALUE, "w has shape (64, 192); 64 is not H*D", "out-in", 0},
    {"out_col shape", p_out_col_shape, MXF_ERR_INVALID_VALUE, "out_col has shape (33, 3, 32)",
     "expected (T=33, H=3, D=64)", 0},
    {"out_row e5m2", p_out_row_e5m2, MXF_ERR_INVALID_VALUE, "out_row has dtype e5m2", "expected e4m3", 0},
    {"out_scales_row shape", p_srow_shape, MXF_ERR_INVALID_VALUE, "out_scales_row has shape (33, 3, 3)",
     "D/32=2", 0},
    {"out_scales_col shape", p_scol_shape, MXF_ERR_INVALID_VALUE, "out_scales_col has shape (1, 3, 64)",
     "ceil(T/32)=2", 0},
    {"out_scales_col f32", p_scol_f32, MXF_ERR_INVALID_VALUE, "out_scales_col has dtype f32", "expected e8m0",
     0},
    {"x_scale on bf16 path", p_xscale_present, MXF_ERR_INVALID_VALUE, "x_scale must be absent", "bf16 path",
     0},
    {"x strided", p_x_strided, MXF_ERR_INVALID_VALUE, "x has strides (1, 33)",
     "expected C-contiguous (64, 1)", 0},
    {"out_row padded", p_out_row_padded, MXF_ERR_INVALID_VALUE, "out_row has strides (240, 80, 1)",
     "C-contiguous", 0},
    {"unknown flag", p_flags, MXF_ERR_INVALID_VALUE, "flags 0x8", "unknown bits", 0},
    {"MXFP8 K = 48", p_k48, MXF_ERR_INVALID_VALUE, "K=48 must be a multiple of 32", "MXFP8", 0},
    {"x_scale shape", p_xscale_shape, MXF_ERR_INVALID_VALUE,
     "x_scale has shape (33, 3); expected (T=33, K/32=2)", NULL, 0},
    {"w_scale orientation", p_wscale_orient, MXF_ERR_INVALID_VALUE,
     "w_scale has shape (2, 192); expected (H*D=192, K/32=2)", "out-in", 0},
    {"w_scale bf16", p_wscale_bf16, MXF_ERR_INVALID_VALUE, "w_scale has dtype bf16", "expected e8m0", 0},
    {"x_scale absent on MXFP8", p_xscale_absent, MXF_ERR_INVALID_VALUE, "x is e4m3 (MXFP8 codes)",
     "got an absent x_scale", 0},
    {"sin on another device", p_sin_device, MXF_ERR_INVALID_VALUE, "sin is on cuda:1 but x is on cpu",
     "one device", 0},
    {"out_col data NULL", p_out_col_nodata, MXF_ERR_INVALID_VALUE, "out_col has no data", "one-call form",
     ONECALL_ONLY},
    {"w_scale data NULL", p_wscale_nodata, MXF_ERR_INVALID_VALUE, "w_scale has no data", "one-call form",
     ONECALL_ONLY},
    {"desc NULL", p_null, MXF_ERR_INVALID_VALUE, "proj_rope: desc is NULL", NULL, DESC_NULL},
};

static mxf_status proj_plan_f(mxf_plan **plan, const void *d) { return mxf_proj_rope_plan(plan, d); }
static mxf_status proj_call_f(const void *d) { return mxf_proj_rope(d, NULL); }
static mxf_status proj_run_f(const mxf_plan *plan, const void *dv, void *ws, size_t n) {
  const mxf_proj_rope_desc *d = dv;
  mxf_proj_rope_args a = {
      d->x.data,   d->w.data,       d->x_scale.data,        d->w_scale.data, d->cos.data,
      d->sin.data, d->out_row.data, d->out_scales_row.data, d->out_col.data, d->out_scales_col.data};
  return mxf_proj_rope_run(plan, &a, ws, n, NULL);
}
static const op_forms proj_forms = {proj_plan_f, proj_call_f, proj_run_f};

static void run_proj_cases(void) {
  for (size_t i = 0; i < sizeof proj_cases / sizeof *proj_cases; ++i) {
    const proj_case *c = &proj_cases[i];
    mxf_proj_rope_desc d = proj_base();
    c->f(&d);
    expect_refused(&proj_forms, (c->flags & DESC_NULL) ? NULL : &d, c->what, c->st, c->s1, c->s2, c->flags);
  }
}

/* ================================================================ quantize / dequantize */
enum { QR = 45, QC = 70 };

static mxf_quantize_desc quant_base(void) {
  mxf_quantize_desc d;
  memset(&d, 0, sizeof d);
  d.x = ten(g_in[0], MXF_F32, 2, QR, QC, 0);
  d.q_row = ten(g_out[0], MXF_E4M3, 2, QR, QC, 0);
  d.s_row = ten(g_out[1], MXF_E8M0, 2, QR, 3, 0);
  d.q_col = ten(g_out[2], MXF_E4M3, 2, QR, QC, 0);
  d.s_col = ten(g_out[3], MXF_U8, 2, 2, QC, 0);
  d.directions = MXF_QUANT_ROWS | MXF_QUANT_COLS;
  return d;
}

#define Q(name) static void name(mxf_quantize_desc *d)
Q(q_dir0) { d->directions = 0; }
Q(q_dir4) { d->directions = 5; }
Q(q_x_f16) { d->x.dtype = MXF_F16; }
Q(q_x_3d) { d->x.ndim = 3, d->x.shape[2] = 1; }
Q(q_qrow_shape) { d->q_row.shape[1] = 69; }
Q(q_srow_shape) { d->s_row.shape[1] = 2; }
Q(q_scol_shape) { d->s_col.shape[0] = 1; }
Q(q_qcol_u8) { d->q_col.dtype = MXF_U8; }
Q(q_scol_f32) { d->s_col.dtype = MXF_F32; }
Q(q_x_strided) { strides(&d->x, 80, 1, 0); }
Q(q_scol_nodata) { d->s_col.data = NULL; }
Q(q_qrow_strided) { strides(&d->q_row, 1, QR, 0); }
Q(q_null) { (void)d; }

typedef struct quant_case {
  const char *what;
  void (*f)(mxf_quantize_desc *);
  const char *s1, *s2;
  int flags;
} quant_case;

static const quant_case quant_cases[] = {
    {"no direction", q_dir0, "quantize: directions 0x0", "MXF_QUANT_ROWS", 0},
    {"unknown direction bit", q_dir4, "quantize: directions 0x5", "MXF_QUANT_COLS", 0},
    {"x f16", q_x_f16, "x has dtype f16", "expected f32 or bf16", 0},
    {"x 3-D", q_x_3d, "x has shape (45, 70, 1)", "expected (rows, cols)", 0},
    {"q_row shape", q_qrow_shape, "q_row has shape (45, 69); expected (rows=45, cols=70)", NULL, 0},
    {"s_row shape", q_srow_shape, "s_row has shape (45, 2); expected (rows=45, ceil(cols/32)=3)", NULL, 0},
    {"s_col shape", q_scol_shape, "s_col has shape (1, 70); expected (ceil(rows/32)=2, cols=70)", NULL, 0},
    {"q_col u8", q_qcol_u8, "q_col has dtype u8", "expected e4m3", 0},
    {"s_col f32", q_scol_f32, "s_col has dtype f32", "expected e8m0", 0},
    {"x padded rows", q_x_strided, "x has strides (80, 1)", "C-contiguous (70, 1)", 0},
    {"q_row transposed", q_qrow_strided, "q_row has strides (1, 45)", "C-contiguous", 0},
    {"s_col data NULL", q_scol_nodata, "s_col has no data", "one-call form", ONECALL_ONLY},
    {"desc NULL", q_null, "quantize: desc is NULL", NULL, DESC_NULL},
};

static mxf_status quant_plan_f(mxf_plan **plan, const void *d) { return mxf_quantize_plan(plan, d); }
static mxf_status quant_call_f(const void *d) { return mxf_quantize(d, NULL); }
static mxf_status quant_run_f(const mxf_plan *plan, const void *dv, void *ws, size_t n) {
  const mxf_quantize_desc *d = dv;
  int rows = (d->directions & MXF_QUANT_ROWS) != 0, cols = (d->directions & MXF_QUANT_COLS) != 0;
  mxf_quantize_args a = {d->x.data, rows ? d->q_row.data : NULL, rows ? d->s_row.data : NULL,
                         cols ? d->q_col.data : NULL, cols ? d->s_col.data : NULL};
  return mxf_quantize_run(plan, &a, ws, n, NULL);
}
static const op_forms quant_forms = {quant_plan_f, quant_call_f, quant_run_f};

static void run_quant_cases(void) {
  for (size_t i = 0; i < sizeof quant_cases / sizeof *quant_cases; ++i) {
    const quant_case *c = &quant_cases[i];
    mxf_quantize_desc d = quant_base();
    c->f(&d);
    expect_refused(&quant_forms, (c->flags & DESC_NULL) ? NULL : &d, c->what, MXF_ERR_INVALID_VALUE, c->s1,
                   c->s2, c->flags);
  }
}

static mxf_dequantize_desc dequant_base(void) {
  mxf_dequantize_desc d;
  memset(&d, 0, sizeof d);
  d.q = ten(g_in[0], MXF_E4M3, 2, QR, QC, 0);
  d.s = ten(g_in[1], MXF_E8M0, 2, 2, QC, 0);
  d.y = ten(g_out[0], MXF_F32, 2, QR, QC, 0);
  d.direction = MXF_QUANT_COLS;
  return d;
}

#define D(name) static void name(mxf_dequantize_desc *d)
D(d_dir3) { d->direction = 3; }
D(d_dir0) { d->direction = 0; }
D(d_q_e5m2) { d->q.dtype = MXF_E5M2; }
D(d_s_rows) { d->s.shape[0] = QR, d->s.shape[1] = 3; }
D(d_y_f16) { d->y.dtype = MXF_F16; }
D(d_y_shape) { d->y.shape[0] = QC, d->y.shape[1] = QR; }
D(d_y_nodata) { d->y.data = NULL; }
D(d_s_i8_strided) { d->s.dtype = MXF_I8, strides(&d->s, 80, 1, 0); }

typedef struct dequant_case {
  const char *what;
  void (*f)(mxf_dequantize_desc *);
  const char *s1, *s2;
  int flags;
} dequant_case;

static const dequant_case dequant_cases[] = {
    {"both directions", d_dir3, "dequantize: direction 0x3", "exactly one", 0},
    {"no direction", d_dir0, "dequantize: direction 0x0", "exactly one", 0},
    {"q e5m2", d_q_e5m2, "q has dtype e5m2", "expected e4m3", 0},
    {"s in the row shape", d_s_rows, "s has shape (45, 3); expected (ceil(rows/32)=2, cols=70)", NULL, 0},
    {"y f16", d_y_f16, "y has dtype f16", "expected f32 or bf16", 0},
    {"y transposed shape", d_y_shape, "y has shape (70, 45); expected (rows=45, cols=70) like q", NULL, 0},
    {"s padded", d_s_i8_strided, "s has strides (80, 1)", "C-contiguous (70, 1)", 0},
    {"y data NULL", d_y_nodata, "y has no data", "one-call form", ONECALL_ONLY},
};

static mxf_status dequant_plan_f(mxf_plan **plan, const void *d) { return mxf_dequantize_plan(plan, d); }
static mxf_status dequant_call_f(const void *d) { return mxf_dequantize(d, NULL); }
static mxf_status dequant_run_f(const mxf_plan *plan, const void *dv, void *ws, size_t n) {
  const mxf_dequantize_desc *d = dv;
  mxf_dequantize_args a = {d->q.data, d->s.data, d->y.data};
  return mxf_dequantize_run(plan, &a, ws, n, NULL);
}
static const op_forms dequant_forms = {dequant_plan_f, dequant_call_f, dequant_run_f};

static void run_dequant_cases(void) {
  for (size_t i = 0; i < sizeof dequant_cases / sizeof *dequant_cases; ++i) {
    const dequant_case *c = &dequant_cases[i];
    mxf_dequantize_desc d = dequant_base();
    c->f(&d);
    expect_refused(&dequant_forms, &d, c->what, MXF_ERR_INVALID_VALUE, c->s1, c->s2, c->flags);
  }
}

/* ================================================================ run-time refusals */
static void run_case(const char *what, mxf_status st, const char *s1, const char *s2) {
  ++g_cases;
  expect_refusal("run", what, st, MXF_ERR_INVALID_VALUE, s1, s2);
}

static void run_time_cases(void) {
  mxf_plan *gp = NULL, *pp = NULL, *mp = NULL, *qp = NULL, *dp = NULL;
  mxf_gemm_amax_desc gd = gemm_base();
  mxf_proj_rope_desc pd = proj_base(), md = proj_base();
  to_mxfp8(&md);
  mxf_quantize_desc qd = quant_base();
  mxf_dequantize_desc dd = dequant_base();
  mxf_status st;
  st = mxf_gemm_amax_plan(&gp, &gd);
  TU_CHECK(st == MXF_OK, "valid gemm plan: %s", mxf_last_error());
  st = mxf_proj_rope_plan(&pp, &pd);
  TU_CHECK(st == MXF_OK, "valid proj plan: %s", mxf_last_error());
  st = mxf_proj_rope_plan(&mp, &md);
  TU_CHECK(st == MXF_OK, "valid MXFP8 proj plan: %s", mxf_last_error());
  st = mxf_quantize_plan(&qp, &qd);
  TU_CHECK(st == MXF_OK, "valid quantize plan: %s", mxf_last_error());
  st = mxf_dequantize_plan(&dp, &dd);
  TU_CHECK(st == MXF_OK, "valid dequantize plan: %s", mxf_last_error());
  if (!gp || !pp || !mp || !qp || !dp) goto done;

  /* a workspace large enough for any of them */
  size_t wss = 0;
  mxf_plan *all[5] = {gp, pp, mp, qp, dp};
  for (int i = 0; i < 5; ++i)
    if (mxf_plan_workspace_size(all[i]) > wss) wss = mxf_plan_workspace_size(all[i]);
  void *ws = tu_malloc(wss + 64);

  mxf_gemm_amax_args ga = {g_in[0], g_in[1], g_in[2], g_in[3], g_out[0], (float *)g_out[1], NULL}, a;
  size_t gws = mxf_plan_workspace_size(gp);
  poison_outputs();
  run_case("gemm plan NULL", mxf_gemm_amax_run(NULL, &ga, ws, gws, NULL), "gemm_amax_run: plan is NULL",
           NULL);
  run_case("gemm args NULL", mxf_gemm_amax_run(gp, NULL, ws, gws, NULL), "gemm_amax_run: args is NULL", NULL);
  a = ga, a.a = NULL;
  run_case("gemm a NULL", mxf_gemm_amax_run(gp, &a, ws, gws, NULL), "args->a is NULL", NULL);
  a = ga, a.sfb = NULL;
  run_case("gemm sfb NULL", mxf_gemm_amax_run(gp, &a, ws, gws, NULL), "args->sfb is NULL", NULL);
  a = ga, a.c = NULL;
  run_case("gemm c NULL", mxf_gemm_amax_run(gp, &a, ws, gws, NULL), "args->c is NULL", NULL);
  a = ga, a.amax = NULL;
  run_case("gemm amax NULL", mxf_gemm_amax_run(gp, &a, ws, gws, NULL), "args->amax is NULL", NULL);
  a = ga, a.a = g_in[0] + 1;
  run_case("gemm a misaligned", mxf_gemm_amax_run(gp, &a, ws, gws, NULL), "args->a", "16-byte aligned");
  a = ga, a.b = g_in[1] + 8;
  run_case("gemm b misaligned", mxf_gemm_amax_run(gp, &a, ws, gws, NULL), "args->b", "16-byte aligned");
  a = ga, a.c = g_out[0] + 4;
  run_case("gemm c misaligned", mxf_gemm_amax_run(gp, &a, ws, gws, NULL), "args->c", "16-byte aligned");
  a = ga, a.amax = (float *)(g_out[1] + 2);
  run_case("gemm amax misaligned", mxf_gemm_amax_run(gp, &a, ws, gws, NULL), "args->amax", "4-byte aligned");
  run_case("gemm run with a quantize plan", mxf_gemm_amax_run(qp, &ga, ws, gws, NULL),
           "gemm_amax_run: the plan was made for quantize", NULL);
  {
    /* a bf16 A has no scales: args->sfa must be NULL, and NULL is fine */
    mxf_gemm_amax_desc bd = gemm_base();
    bd.a.dtype = MXF_BF16;
    strides(&bd.a, GK, 1, GM * GK);
    memset(&bd.sfa, 0, sizeof bd.sfa);
    mxf_plan *bp = NULL;
    st = mxf_gemm_amax_plan(&bp, &bd);
    TU_CHECK(st == MXF_OK, "valid bf16 x e4m3 gemm plan: %s", mxf_last_error());
    if (bp) {
      size_t bws = mxf_plan_workspace_size(bp);
      void *bw = tu_malloc(bws + 64);
      a = ga;
      run_case("gemm bf16 a with args->sfa", mxf_gemm_amax_run(bp, &a, bw, bws, NULL), "args->sfa is",
               "a is bf16, so sfa must be NULL");
      a.sfa = NULL;
      TU_CHECK(mxf_gemm_amax_run(bp, &a, bw, bws, NULL) == MXF_OK, "bf16 a run with sfa NULL: %s",
               mxf_last_error());
      poison_outputs();
      free(bw);
      mxf_plan_destroy(bp);
    }
  }
  {
    /* Workspace rules: force a requirement if the backend needs none (white box). */
    size_t saved = gp->workspace_size;
    if (gp->workspace_size == 0) gp->workspace_size = 256;
    run_case("gemm workspace NULL", mxf_gemm_amax_run(gp, &ga, NULL, gp->workspace_size, NULL),
             "gemm_amax_run: workspace is NULL", "needs");
    void *small = tu_malloc(gp->workspace_size);
    run_case("gemm workspace small", mxf_gemm_amax_run(gp, &ga, small, gp->workspace_size - 1, NULL),
             "too small", "needs");
    free(small);
    gp->workspace_size = saved;
  }

  mxf_proj_rope_args pa = {g_in[0], g_in[1],  NULL,     NULL,     g_in[2],
                           g_in[3], g_out[0], g_out[1], g_out[2], g_out[3]},
                     pb;
  size_t pws = mxf_plan_workspace_size(pp), mws = mxf_plan_workspace_size(mp);
  pb = pa, pb.x = NULL;
  run_case("proj x NULL", mxf_proj_rope_run(pp, &pb, ws, pws, NULL), "proj_rope_run: args->x is NULL", NULL);
  pb = pa, pb.out_scales_col = NULL;
  run_case("proj out_scales_col NULL", mxf_proj_rope_run(pp, &pb, ws, pws, NULL),
           "args->out_scales_col is NULL", NULL);
  pb = pa, pb.cos = g_in[2] + 1;
  run_case("proj cos misaligned", mxf_proj_rope_run(pp, &pb, ws, pws, NULL), "args->cos", "2-byte aligned");
  pb = pa, pb.w = g_in[1] + 3;
  run_case("proj w misaligned", mxf_proj_rope_run(pp, &pb, ws, pws, NULL), "args->w", "2-byte aligned");
  pb = pa, pb.w_scale = g_in[5];
  run_case("proj MXFP8 x_scale NULL", mxf_proj_rope_run(mp, &pb, ws, mws, NULL), "args->x_scale is NULL",
           NULL);
  run_case("proj run with a gemm plan", mxf_proj_rope_run(gp, &pa, ws, pws, NULL),
           "the plan was made for gemm_amax", NULL);

  mxf_quantize_args qa = {g_in[0], g_out[0], g_out[1], g_out[2], g_out[3]}, qb;
  size_t qws = mxf_plan_workspace_size(qp);
  qb = qa, qb.x = g_in[0] + 2;
  run_case("quantize f32 x misaligned", mxf_quantize_run(qp, &qb, ws, qws, NULL), "args->x",
           "4-byte aligned");
  qb = qa, qb.q_col = NULL;
  run_case("quantize q_col NULL", mxf_quantize_run(qp, &qb, ws, qws, NULL), "args->q_col is NULL", NULL);
  qb = qa, qb.s_row = NULL;
  run_case("quantize s_row NULL", mxf_quantize_run(qp, &qb, ws, qws, NULL), "args->s_row is NULL", NULL);

  mxf_dequantize_args da = {g_in[0], g_in[1], g_out[0]}, db;
  size_t dws = mxf_plan_workspace_size(dp);
  db = da, db.y = g_out[0] + 1;
  run_case("dequantize y misaligned", mxf_dequantize_run(dp, &db, ws, dws, NULL), "args->y",
           "4-byte aligned");
  db = da, db.s = NULL;
  run_case("dequantize s NULL", mxf_dequantize_run(dp, &db, ws, dws, NULL), "args->s is NULL", NULL);
  run_case("dequantize run with a quantize plan", mxf_dequantize_run(qp, &da, ws, dws, NULL),
           "the plan was made for quantize, not dequantize", NULL);
  free(ws);
done:
  mxf_plan_destroy(gp);
  mxf_plan_destroy(pp);
  mxf_plan_destroy(mp);
  mxf_plan_destroy(qp);
  mxf_plan_destroy(dp);
}

/* ================================================================ packed weights (SPEC §7) */
/* mxf_pack_weights' refusals (nothing written to the packed buffer, g_out[2]), gemm_amax's
 * with MXF_AMAX_B_PACKED at plan time and at run time (a buffer that is not the plan's B,
 * scales given, an output overlapping the packed bytes), grouped_gemm_amax's. */
static void pack_case(const char *what, mxf_status got, mxf_status want, const char *s1, const char *s2) {
  ++g_cases;
  expect_refusal("pack", what, got, want, s1, s2);
}

static void packed_cases(void) {
  mxf_gemm_amax_desc d = gemm_base();
  size_t n = 0;
  mxf_status st = mxf_pack_weights_size(&d.b, &d.sfb, 32, &n);
  TU_CHECK(st == MXF_OK && n > 64, "pack size: %s", mxf_last_error());
  uint8_t *packed = g_out[2];
  mxf_tensor b = d.b, sfb = d.sfb;
  poison_outputs();
  pack_case("pack size NULL", mxf_pack_weights_size(&b, &sfb, 32, NULL), MXF_ERR_INVALID_VALUE,
            "pack_weights_size: bytes is NULL", NULL);
  pack_case("pack sf_vec 8", mxf_pack_weights(&b, &sfb, 8, packed, n), MXF_ERR_INVALID_VALUE,
            "pack_weights: sf_vec=8", "expected 16 or 32");
  pack_case("pack sf_vec 16 e4m3", mxf_pack_weights(&b, &sfb, 16, packed, n), MXF_ERR_INVALID_VALUE,
            "pack_weights: sf_vec=16 with b e4m3", "needs an e2m1 b");
  pack_case("pack too small", mxf_pack_weights(&b, &sfb, 32, packed, n - 1), MXF_ERR_INVALID_VALUE,
            "packed_size", "is too small");
  pack_case("pack NULL", mxf_pack_weights(&b, &sfb, 32, NULL, n), MXF_ERR_INVALID_VALUE,
            "pack_weights: packed is NULL", NULL);
  b.dtype = MXF_BF16;
  pack_case("pack bf16 b", mxf_pack_weights(&b, &sfb, 32, packed, n), MXF_ERR_INVALID_VALUE,
            "pack_weights: b has dtype bf16", "expected e4m3, e5m2, e2m1");
  b = d.b, b.data = NULL;
  pack_case("pack b data NULL", mxf_pack_weights(&b, &sfb, 32, packed, n), MXF_ERR_INVALID_VALUE,
            "pack_weights: b has no data", NULL);
  b = d.b, sfb.shape[2] = 4;
  pack_case("pack sfb shape", mxf_pack_weights(&b, &sfb, 32, packed, n), MXF_ERR_INVALID_VALUE,
            "pack_weights: sfb has shape (2, 40, 4)", "for N=40, K=96");
  sfb = d.sfb, b.device = sfb.device = MXF_DEVICE_CUDA(0);
  pack_case("pack cuda", mxf_pack_weights(&b, &sfb, 32, packed, n), MXF_ERR_NOT_SUPPORTED,
            "pack_weights: b and sfb are on cuda:0", "host memory");
  b = d.b, sfb = d.sfb;
  pack_case("pack over b", mxf_pack_weights(&b, &sfb, 32, (uint8_t *)b.data + 64, n), MXF_ERR_INVALID_VALUE,
            "overlaps b", "may overlap no input");

  /* plan time: the flag's rules */
  mxf_gemm_amax_desc pd = d;
  pd.flags = MXF_AMAX_B_PACKED, pd.b.data = packed;
  expect_refused(&gemm_forms, &pd, "packed b with sfb data", MXF_ERR_INVALID_VALUE,
                 "gemm_amax: MXF_AMAX_B_PACKED: sfb's data must be NULL", "in the packed b", 0);
  pd.sfb.data = NULL;
  pd.a.device = pd.b.device = pd.sfa.device = pd.sfb.device = pd.c.device = pd.amax.device =
      MXF_DEVICE_CUDA(0);
  expect_refused(&gemm_forms, &pd, "packed b on cuda", MXF_ERR_NOT_SUPPORTED,
                 "gemm_amax: MXF_AMAX_B_PACKED takes host tensors", "on cuda:0", 0);
  {
    mxf_grouped_gemm_amax_desc gd;
    memset(&gd, 0, sizeof gd);
    gd.flags = MXF_AMAX_B_PACKED;
    mxf_plan *gp = NULL;
    poison_outputs();
    ++g_cases;
    expect_refusal("plan", "grouped packed b", mxf_grouped_gemm_amax_plan(&gp, &gd), MXF_ERR_INVALID_VALUE,
                   "grouped_gemm_amax: flags has MXF_AMAX_B_PACKED", "the grouped op takes b as it is");
  }

  /* run time: the buffer must be the plan's B */
  pd = d, pd.flags = MXF_AMAX_B_PACKED, pd.b.data = packed, pd.sfb.data = NULL;
  mxf_plan *plan = NULL;
  st = mxf_gemm_amax_plan(&plan, &pd);
  TU_CHECK(st == MXF_OK, "packed gemm plan: %s", mxf_last_error());
  if (!plan) return;
  const size_t wsn = mxf_plan_workspace_size(plan);
  void *ws = tu_malloc(wsn + 64);
  /* packed for 41 rows of B, and the real one, into g_in[4] (an input of the runs) */
  mxf_tensor b41 = d.b, sf41 = d.sfb;
  b41.shape[0] = sf41.shape[1] = GN + 1;
  strides(&b41, GK, 1, (GN + 1) * GK);
  size_t n41 = 0;
  TU_CHECK(mxf_pack_weights_size(&b41, &sf41, 32, &n41) == MXF_OK && n41 <= POOL, "pack size 41");
  TU_CHECK(mxf_pack_weights(&b41, &sf41, 32, g_in[4], n41) == MXF_OK, "pack 41: %s", mxf_last_error());
  mxf_gemm_amax_args ga = {d.a.data, g_in[4], d.sfa.data, NULL, d.c.data, (float *)d.amax.data, NULL};
  poison_outputs();
  run_case("packed b of other N", mxf_gemm_amax_run(plan, &ga, ws, wsn, NULL),
           "args->b is not the packed weights", "its N is 41, the plan's 40");
  ga.b = g_in[5]; /* random bytes */
  run_case("packed b not packed", mxf_gemm_amax_run(plan, &ga, ws, wsn, NULL),
           "args->b is not the packed weights", "first 8 bytes");
  TU_CHECK(mxf_pack_weights(&d.b, &d.sfb, 32, g_in[4], n) == MXF_OK, "pack: %s", mxf_last_error());
  ga.b = g_in[4], ga.sfb = d.sfb.data;
  run_case("packed b with args->sfb", mxf_gemm_amax_run(plan, &ga, ws, wsn, NULL), "args->sfb is",
           "sfb must be NULL");
  ga.sfb = NULL, ga.amax = (float *)(g_in[4] + n - 4); /* within the packed bytes only */
  run_case("amax over the packed b", mxf_gemm_amax_run(plan, &ga, ws, wsn, NULL), "amax", "overlaps b");
  ga.amax = (float *)d.amax.data;
  st = mxf_gemm_amax_run(plan, &ga, ws, wsn, NULL);
  TU_CHECK(st == MXF_OK, "packed run: %s", mxf_last_error());
  poison_outputs();
  free(ws);
  mxf_plan_destroy(plan);
}

/* ================================================================ valid requests */
/* A valid request must pass validation in both forms (a backend may still refuse it as
 * not supported while its kernels are incomplete). */
static void expect_valid(const char *what, mxf_status plan_st, mxf_status run_st, mxf_status one_st) {
  if (getenv("MXF_TEST_VERBOSE"))
    printf("  valid %-40s plan %s, run %s, one-call %s %s\n", what, mxf_status_string(plan_st),
           mxf_status_string(run_st), mxf_status_string(one_st), mxf_last_error());
  TU_CHECK(plan_st == MXF_OK || plan_st == MXF_ERR_NOT_SUPPORTED, "valid %s [plan]: %s: %s", what,
           mxf_status_string(plan_st), mxf_last_error());
  TU_CHECK(run_st != MXF_ERR_INVALID_VALUE, "valid %s [run]: %s: %s", what, mxf_status_string(run_st),
           mxf_last_error());
  TU_CHECK(one_st != MXF_ERR_INVALID_VALUE, "valid %s [one-call]: %s: %s", what, mxf_status_string(one_st),
           mxf_last_error());
}

static int g_valid;

/* Plan, run (with the descriptor's pointers and the plan's workspace) and one call. */
static void valid(const op_forms *op, const char *what, const void *desc) {
  mxf_plan *plan = NULL;
  mxf_status ps = op->plan(&plan, desc), rs = MXF_OK;
  if (ps == MXF_OK) {
    size_t n = mxf_plan_workspace_size(plan);
    void *ws = n ? tu_malloc(n) : NULL;
    rs = op->run(plan, desc, ws, n);
    free(ws);
    mxf_plan_destroy(plan);
  }
  expect_valid(what, ps, rs, op->call(desc));
  ++g_valid;
}

static void valid_cases(void) {
  mxf_gemm_amax_desc d;
  /* 1. the base itself: k-major, compact 3-D SF (u8 read as e8m0) */
  d = gemm_base();
  valid(&gemm_forms, "gemm base", &d);
  /* 2. padded leading dims and batch strides */
  d = gemm_base();
  strides(&d.a, 112, 1, 112 * GM + 16);
  strides(&d.b, 128, 1, 128 * GN);
  strides(&d.c, 48, 1, 48 * GM + 4);
  valid(&gemm_forms, "gemm padded leading dims", &d);
  /* 3. m-major A, n-major B, m-major C */
  d = gemm_base();
  strides(&d.a, 1, 48, 48 * GK);
  strides(&d.b, 1, 48, 48 * GK);
  strides(&d.c, 1, 48, 48 * GN);
  valid(&gemm_forms, "gemm m-major A, n-major B, m-major C", &d);
  /* 4. swizzled SF: logical 6-D (all-zero strides) for A, physical 6-D for B */
  d = gemm_base();
  d.sfa.ndim = 6;
  set6(d.sfa.shape, 32, 4, 1, 4, 1, GL);
  d.sfb.ndim = 6;
  set6(d.sfb.shape, GL, 1, 1, 32, 4, 4);
  valid(&gemm_forms, "gemm swizzled SF, both 6-D forms", &d);
  /* 5. M=300, K=512, L=1 2-D: logical swizzled SF with explicit permuted strides, compact 2-D SF */
  d = gemm_base();
  g_sf_example(&d);
  d.sfa.ndim = 6;
  set6(d.sfa.shape, 32, 4, 3, 4, 4, 1);
  set6(d.sfa.stride, 16, 4, 2048, 1, 512, 6144);
  valid(&gemm_forms, "gemm explicit logical swizzled SF + compact 2-D SF", &d);
  /* 6. e2m1 described as values, ue4m3 scales sf_vec 16, e2m1 C (values) */
  d = gemm_base();
  to_e2m1(&d);
  d.sf_vec = 16;
  d.sfa.dtype = d.sfb.dtype = MXF_E4M3;
  d.sfa.shape[2] = d.sfb.shape[2] = 6;
  d.c.dtype = MXF_E2M1;
  strides(&d.c, 64, 1, 64 * GM);
  valid(&gemm_forms, "gemm e2m1 values, NVFP4-style", &d);
  /* 7. e2m1 described as bytes (e2m1x2 a, u8 b), packed u8 C */
  d = gemm_base();
  d.a.dtype = MXF_E2M1X2, d.a.shape[1] = GK / 2;
  strides(&d.a, GK / 2, 1, GM * GK / 2);
  d.b.dtype = MXF_U8, d.b.shape[1] = GK / 2;
  strides(&d.b, GK / 2, 1, GN * GK / 2);
  d.c.dtype = MXF_U8, d.c.shape[1] = GN / 2;
  strides(&d.c, 32, 1, 32 * GM);
  valid(&gemm_forms, "gemm e2m1 bytes, MXFP4", &d);
  /* 8. e5m2, bf16 C, amax (1, 1, 1), accumulate */
  d = gemm_base();
  d.a.dtype = d.b.dtype = MXF_E5M2;
  d.c.dtype = MXF_BF16;
  d.amax.ndim = 3, d.amax.shape[1] = d.amax.shape[2] = 1;
  d.flags = MXF_AMAX_ACCUMULATE;
  valid(&gemm_forms, "gemm e5m2, bf16 C, accumulate", &d);
  /* 9. M = 1: the unused leading stride may be anything */
  d = gemm_base();
  d.a.shape[0] = 1, strides(&d.a, 7, 1, GK);
  d.c.shape[0] = 1, strides(&d.c, 3, 1, 48);
  d.sfa.shape[1] = 1;
  valid(&gemm_forms, "gemm M=1", &d);

  mxf_proj_rope_desc p;
  /* 10. T = 1, rope = D = 64 (nope 0), in-out bf16 */
  p = proj_base();
  p.x.shape[0] = 1, p.cos.shape[0] = p.sin.shape[0] = 1;
  p.cos.shape[1] = p.sin.shape[1] = 64;
  p.out_row.shape[0] = p.out_col.shape[0] = p.out_scales_row.shape[0] = 1;
  p.out_scales_col.shape[0] = 1;
  valid(&proj_forms, "proj T=1, rope=D", &p);
  /* 11. MXFP8 out-in, D=96 rope=32 (nope 64), H=2, fp32 epilogue */
  p = proj_base();
  to_mxfp8(&p);
  p.flags |= MXF_PROJ_FP32_EPILOGUE;
  p.w.shape[0] = p.w_scale.shape[0] = 2 * 96;
  p.out_row.shape[1] = p.out_col.shape[1] = p.out_scales_row.shape[1] = p.out_scales_col.shape[1] = 2;
  p.out_row.shape[2] = p.out_col.shape[2] = p.out_scales_col.shape[2] = 96;
  p.out_scales_row.shape[2] = 3;
  valid(&proj_forms, "proj MXFP8 out-in D=96 rope=32", &p);
  /* 12. MXFP8 in-out, explicit contiguous strides */
  p = proj_base();
  to_mxfp8(&p);
  p.flags = 0;
  p.w.shape[0] = PK, p.w.shape[1] = PH * PD;
  p.w_scale.shape[0] = PK / 32, p.w_scale.shape[1] = PH * PD;
  strides(&p.out_row, PH * PD, PD, 1);
  strides(&p.w, PH * PD, 1, 0);
  valid(&proj_forms, "proj MXFP8 in-out, explicit strides", &p);

  /* 13. quantize rows only, bf16: the unused column tensors are ignored */
  mxf_quantize_desc q = quant_base();
  q.x.dtype = MXF_BF16;
  q.directions = MXF_QUANT_ROWS;
  q.q_col = ten(NULL, MXF_F32, 0, 0, 0, 0);
  q.s_col.shape[0] = 99;
  valid(&quant_forms, "quantize rows only", &q);
  /* 14. dequantize rows, bf16 y, i8 scales */
  mxf_dequantize_desc dq = dequant_base();
  dq.direction = MXF_QUANT_ROWS;
  dq.s.dtype = MXF_I8, dq.s.shape[0] = QR, dq.s.shape[1] = 3;
  dq.y.dtype = MXF_BF16;
  valid(&dequant_forms, "dequantize rows bf16", &dq);
}

int main(void) {
  tu_rng rng;
  tu_rng_init(&rng, tu_seed());
  for (int i = 0; i < NIN; ++i) {
    g_in[i] = aligned_alloc(64, POOL);
    /* random finite-ish inputs; contents only matter to the valid runs */
    for (size_t j = 0; j < POOL; ++j)
      g_in[i][j] = (uint8_t)(tu_u32(&rng) & 0x3F);
  }
  for (int i = 0; i < NOUT; ++i)
    g_out[i] = aligned_alloc(64, POOL);

  run_gemm_cases();
  int n_gemm = g_cases;
  run_proj_cases();
  int n_proj = g_cases - n_gemm;
  run_quant_cases();
  int n_quant = g_cases - n_gemm - n_proj;
  run_dequant_cases();
  int n_deq = g_cases - n_gemm - n_proj - n_quant;
  run_time_cases();
  int n_run = g_cases - n_gemm - n_proj - n_quant - n_deq;
  packed_cases();
  int n_packed = g_cases - n_gemm - n_proj - n_quant - n_deq - n_run;
  valid_cases();
  printf("bad-input cases: %d (gemm_amax %d, proj_rope %d, quantize %d, dequantize %d, run-time %d, packed "
         "weights %d); valid requests: %d\n",
         g_cases, n_gemm, n_proj, n_quant, n_deq, n_run, n_packed, g_valid);
  TU_CHECK(g_cases >= 45, "only %d bad-input cases", g_cases);
  mxf_plan_cache_clear();
  for (int i = 0; i < NIN; ++i)
    free(g_in[i]);
  for (int i = 0; i < NOUT; ++i)
    free(g_out[i]);
  return tu_finish("test_bad_input");
}
