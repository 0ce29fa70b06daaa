/*
 * cmd_gemm.c — `mxfuse gemm-amax`: the block-scaled GEMM + amax of SPEC §1 on tensors
 * read from files, with an optional f64 reference check (the metrics of SPEC §5).
 *
 * File layouts: A is (M, K) or (L, M, K) C-ordered (k-major; with --a-mmajor the file
 * holds (K, M) or (L, K, M)); B likewise with N. Scale factors are compact (MN, Kb) /
 * (L, MN, Kb), or swizzled (R, K', 32, 4, 4) / (L, R, K', 32, 4, 4) / flat bytes.
 * C is written (M, N) or (L, M, N), amax as a (1,) f32 array.
 *
 * --check judges C and amax by SPEC §5 through judge/judge.h (each element of C against
 * its f64 reference and f32-accumulation bound); --check-output SRC judges outputs saved
 * earlier (by --out) instead of computing them.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_files.h"
#include "formats.h"
#include "judge.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: mxfuse gemm-amax [--in FILE.safetensors] [--a A] [--b B] [--sfa SFA] [--sfb SFB]\n"
          "                        [--out DEST] [options]\n"
          "\n"
          "C = alpha * (A*SFA) (B*SFB)^T in the dtype of --c-dtype, and amax = max |C| before\n"
          "conversion (docs/spec.md section 1). Inputs named a, b, sfa, sfb; outputs c and amax.\n"
          "A and B may have different formats (e.g. MXFP8 x MXFP4), and A may be bf16, which\n"
          "has no scales (no sfa).\n"
          "\n"
          "  --a, --b, --sfa, --sfb SPEC   operands (see below)\n"
          "  --in FILE.safetensors         default source of the operands, by name\n"
          "  --a-dtype T       bf16 | e4m3 | e5m2 | e2m1 (one code per byte, as ml_dtypes saves\n"
          "                    it) | e2m1x2 (packed pairs, innermost extent K/2); default: the\n"
          "                    file's dtype, e4m3 for raw bytes\n"
          "  --b-dtype T       e4m3 | e5m2 | e2m1 | e2m1x2; default as for A\n"
          "  --ab-dtype T      both (e4m3 | e5m2 | e2m1 | e2m1x2)\n"
          "  --sf-dtype T      e8m0 (default) | ue4m3, for both scale tensors\n"
          "  --sf-vec N        values per scale: 32 (default) or 16 (default with ue4m3)\n"
          "  --c-dtype T       f32 (default) | f16 | bf16 | e4m3 | e5m2 | e2m1\n"
          "  --alpha X         scale of the result (default 1)\n"
          "  --a-mmajor        the A file holds (K, M): A is m-major\n"
          "  --b-nmajor        the B file holds (K, N): B is n-major\n" FC_USAGE_COMMON FC_USAGE_CHECK_OUTPUT
          "\n" FC_USAGE_OPERANDS
          "Shapes: A (M, K) or (L, M, K); B (N, K) or (L, N, K); scales compact (MN, Kb) or\n"
          "(L, MN, Kb), or swizzled (R, K', 32, 4, 4), (L, R, K', 32, 4, 4) or flat.\n");
}

typedef struct gemm_ref_stats {
  double fro_err, fro_ref, amax_ref; /* f32 C: the relative Frobenius error, for information */
  int amax_ref_nan;
  int64_t checked;
  mxj_counts c;
  mxj_ref wrong_ref; /* the first wrong element's reference and code */
  uint32_t wrong_code;
} gemm_ref_stats;

/* Index (in values) of A's element (m, k, l) for the file layout. */
static inline int64_t op_index(int64_t r, int64_t k, int64_t l, int64_t rows, int64_t kk, int major_k) {
  return major_k ? (l * rows + r) * kk + k : (l * kk + k) * rows + r;
}

static int64_t sf_off(int swz, int64_t mn, int64_t kbn, int64_t r, int64_t kb, int64_t l) {
  if (!swz) return (l * mn + r) * kbn + kb;
  return mxf_sf_swz_offset(r, kb, l, mxf_cdiv(mn, 128), mxf_cdiv(kbn, 4));
}

static int is_mx_dtype(mxf_dtype d) {
  return d == MXF_E4M3 || d == MXF_E5M2 || d == MXF_E2M1 || d == MXF_E2M1X2;
}

/* Decoded, scaled operand (rows x K) of batch l in f64 (sf NULL: a bf16 operand, unscaled). */
static void decode_operand(double *out, const tio_tensor *t, const tio_tensor *sf, int sf_swz, int64_t rows,
                           int64_t K, int64_t l, int major_k, int sf_vec, mxf_dtype code_dt) {
  int64_t kbn = mxf_cdiv(K, sf_vec);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < K; ++k) {
      double s = sf ? fc_decode(sf->dtype, sf->data, sf_off(sf_swz, rows, kbn, r, k / sf_vec, l)) : 1.0;
      out[r * K + k] = fc_decode(code_dt, t->data, op_index(r, k, l, rows, K, major_k)) * s;
    }
}

/* Leading dimension (in described elements) whose rows are a multiple of 16 bytes. */
static int64_t padded_ld(mxf_dtype dt, int64_t ld) {
  int64_t bytes = tio_dtype_bytes(dt, ld);
  int64_t padded = (bytes + 15) / 16 * 16;
  return dt == MXF_E2M1 ? padded * 2 : padded;
}

/* Copies `rows` rows of `ld` elements into rows of `new_ld` elements (zero padding). */
static uint8_t *pad_rows(const void *src, int64_t rows, mxf_dtype dt, int64_t ld, int64_t new_ld,
                         size_t *bytes) {
  size_t rb = (size_t)tio_dtype_bytes(dt, ld), nb = (size_t)tio_dtype_bytes(dt, new_ld);
  uint8_t *p = calloc((size_t)(rows > 0 ? rows : 1), nb);
  if (!p) return NULL;
  for (int64_t r = 0; r < rows; ++r)
    memcpy(p + (size_t)r * nb, (const uint8_t *)src + (size_t)r * rb, rb);
  *bytes = (size_t)rows * nb;
  return p;
}

/* Strides (rows, k, batch) of an operand stored (L, rows, K) with leading dimension ld,
 * or (L, K, rows) when it is rows-major (m- / n-major). */
static void operand_strides(mxf_tensor *t, int rows_major, int64_t ld, int64_t rows, int64_t K) {
  t->stride[0] = rows_major ? 1 : ld;
  t->stride[1] = rows_major ? ld : 1;
  t->stride[2] = (rows_major ? K : rows) * ld;
}

int mxf_cmd_gemm_amax(int argc, char **argv) {
  const char *cmd = "gemm-amax";
  if (mxf_cli_wants_help(argc, argv)) {
    usage(stdout);
    return MXF_CLI_OK;
  }
  fc_ctx c;
  fc_init(&c, cmd);
  const char *sa = NULL, *sb = NULL, *ssfa = NULL, *ssfb = NULL, *given = NULL, *v;
  mxf_dtype a_want = MXF_DTYPE_INVALID, b_want = MXF_DTYPE_INVALID, sf_want = MXF_E8M0, c_dt = MXF_F32;
  int64_t sf_vec = 0;
  int a_mmajor = 0, b_nmajor = 0;
  float alpha = 1.0f;
  int have_alpha = 0;
  for (int i = 1; i < argc; ++i) {
    const char *o = argv[i];
    int common = fc_common_opt(&c, argc, argv, &i);
    if (common < 0) return MXF_CLI_USAGE;
    if (common) continue;
    v = NULL;
#define OPT(name) (v = mxf_cli_opt(cmd, argc, argv, &i, name))
    if (OPT("--a"))
      sa = v;
    else if (OPT("--b"))
      sb = v;
    else if (OPT("--sfa"))
      ssfa = v;
    else if (OPT("--sfb"))
      ssfb = v;
    else if (OPT("--check-output"))
      given = v;
    else if (OPT("--ab-dtype") || OPT("--a-dtype") || OPT("--b-dtype")) {
      const mxf_dtype t = tio_dtype_parse(v);
      const int for_a = strcmp(o, "--b-dtype") != 0, for_b = strcmp(o, "--a-dtype") != 0;
      if (!is_mx_dtype(t) && !(t == MXF_BF16 && !for_b)) {
        mxf_cli_err(cmd, "%s: '%s' is not one of %se4m3, e5m2, e2m1, e2m1x2", o, v, for_b ? "" : "bf16, ");
        return MXF_CLI_USAGE;
      }
      if (for_a) a_want = t;
      if (for_b) b_want = t;
    } else if (OPT("--sf-dtype")) {
      if (!strcmp(v, "e8m0"))
        sf_want = MXF_E8M0;
      else if (!strcmp(v, "ue4m3") || !strcmp(v, "e4m3"))
        sf_want = MXF_E4M3;
      else {
        mxf_cli_err(cmd, "--sf-dtype: '%s' is not e8m0 or ue4m3", v);
        return MXF_CLI_USAGE;
      }
    } else if (OPT("--sf-vec")) {
      if (mxf_cli_parse_i64(cmd, "--sf-vec", v, 16, 32, &sf_vec)) return MXF_CLI_USAGE;
    } else if (OPT("--c-dtype")) {
      if (fc_c_dtype_opt(&c, v, &c_dt)) return MXF_CLI_USAGE;
    } else if (OPT("--alpha")) {
      if (fc_alpha_opt(&c, v, &alpha)) return MXF_CLI_USAGE;
      have_alpha = 1;
    } else if (!strcmp(o, "--a-mmajor"))
      a_mmajor = 1;
    else if (!strcmp(o, "--b-nmajor"))
      b_nmajor = 1;
    else {
      mxf_cli_err(cmd, "unknown argument %s (mxfuse gemm-amax --help)", o);
      return MXF_CLI_USAGE;
    }
    if (v && !*v) return MXF_CLI_USAGE; /* an option without its value (reported) */
#undef OPT
  }
  if (sf_vec && sf_vec != 16 && sf_vec != 32) {
    mxf_cli_err(cmd, "--sf-vec: 16 or 32");
    return MXF_CLI_USAGE;
  }
  if (!sf_vec) sf_vec = sf_want == MXF_E4M3 ? 16 : 32;
  if (fc_check_output_opt(&c, given)) return MXF_CLI_USAGE;
  const char *out = c.out;

  int rc = MXF_CLI_FAIL;
  fc_operand A, B, SFA, SFB;
  memset(&SFA, 0, sizeof SFA);
  void *da = NULL, *db = NULL, *dsfa = NULL, *dsfb = NULL, *dc = NULL, *damax = NULL;
  uint8_t *hc = NULL, *a_pad = NULL, *b_pad = NULL;
  float amax = NAN;
  mxf_plan *plan = NULL;
  double *ra = NULL, *rb = NULL;
  char sh[256];
  if (fc_operand_get(&c, sa, "a", 1, &A) < 0 || fc_operand_get(&c, sb, "b", 1, &B) < 0) goto done;

  /* operand dtypes: as given, else the file's (a bf16 file is a bf16 A), else e4m3 */
  if (a_want == MXF_DTYPE_INVALID)
    a_want = is_mx_dtype(A.t->dtype) || A.t->dtype == MXF_BF16 ? A.t->dtype : MXF_E4M3;
  if (b_want == MXF_DTYPE_INVALID) b_want = is_mx_dtype(B.t->dtype) ? B.t->dtype : MXF_E4M3;
  const int a_bf16 = a_want == MXF_BF16;
  if (a_bf16 && ssfa) {
    mxf_cli_err(cmd, "--sfa %s: a is bf16, which has no scales; drop --sfa (or give --a-dtype)", ssfa);
    goto done;
  }
  if ((!a_bf16 && fc_operand_get(&c, ssfa, "sfa", 1, &SFA) < 0) ||
      fc_operand_get(&c, ssfb, "sfb", 1, &SFB) < 0)
    goto done;
  if (fc_as(&c, &A, a_want) || fc_as(&c, &B, b_want)) goto done;
  if ((!a_bf16 && fc_as(&c, &SFA, sf_want)) || fc_as(&c, &SFB, sf_want)) goto done;
  const mxf_dtype a_code = a_want == MXF_E2M1X2 ? MXF_E2M1 : a_want,
                  b_code = b_want == MXF_E2M1X2 ? MXF_E2M1 : b_want;
  /* logical values per described element */
  const int a_kscale = a_want == MXF_E2M1X2 ? 2 : 1, b_kscale = b_want == MXF_E2M1X2 ? 2 : 1;

  /* geometry */
  if (A.t->ndim < 2 || A.t->ndim > 3 || B.t->ndim != A.t->ndim) {
    mxf_cli_err(cmd,
                "%s has shape %s and %s has %d dimensions; A and B are (M, K) / (N, K) or "
                "(L, M, K) / (L, N, K)",
                A.what, mxf_cli_shape_str(sh, sizeof sh, A.t->shape, A.t->ndim), B.what, B.t->ndim);
    goto done;
  }
  int nd = A.t->ndim;
  int64_t L = nd == 3 ? A.t->shape[0] : 1;
  int64_t M = a_mmajor ? A.t->shape[nd - 1] : A.t->shape[nd - 2];
  int64_t Kd = a_mmajor ? A.t->shape[nd - 2] : A.t->shape[nd - 1];
  int64_t N = b_nmajor ? B.t->shape[nd - 1] : B.t->shape[nd - 2];
  int64_t Kbd = b_nmajor ? B.t->shape[nd - 2] : B.t->shape[nd - 1];
  int64_t LB = nd == 3 ? B.t->shape[0] : 1;
  if (Kbd * b_kscale != Kd * a_kscale || LB != L) {
    mxf_cli_err(cmd, "%s is (M=%lld, K=%lld, L=%lld) but %s is (N=%lld, K=%lld, L=%lld): K and L must agree",
                A.what, (long long)M, (long long)(Kd * a_kscale), (long long)L, B.what, (long long)N,
                (long long)(Kbd * b_kscale), (long long)LB);
    goto done;
  }
  int64_t K = Kd * a_kscale, Kb = mxf_cdiv(K, sf_vec);
  mxf_gemm_amax_desc d;
  memset(&d, 0, sizeof d);
  d.a.dtype = a_want;
  d.b.dtype = b_want;
  d.a.ndim = d.b.ndim = 3;
  d.a.device = d.b.device = d.sfb.device = d.c.device = d.amax.device = c.device;
  if (!a_bf16) d.sfa.device = c.device;
  int64_t ashape[3] = {M, Kd, L}, bshape[3] = {N, Kbd, L};
  memcpy(d.a.shape, ashape, sizeof ashape);
  memcpy(d.b.shape, bshape, sizeof bshape);
  /* rows must start 16-byte aligned: pad the file's rows when they are not */
  const void *a_host = A.t->data, *b_host = B.t->data;
  size_t a_bytes = A.t->nbytes, b_bytes = B.t->nbytes;
  {
    int64_t ald = padded_ld(a_want, a_mmajor ? M : Kd), bld = padded_ld(b_want, b_nmajor ? N : Kbd);
    int64_t arows = L * (a_mmajor ? Kd : M), brows = L * (b_nmajor ? Kbd : N);
    if (ald != (a_mmajor ? M : Kd)) {
      if (!(a_pad = pad_rows(A.t->data, arows, a_want, a_mmajor ? M : Kd, ald, &a_bytes))) goto oom;
      a_host = a_pad;
    }
    if (bld != (b_nmajor ? N : Kbd)) {
      if (!(b_pad = pad_rows(B.t->data, brows, b_want, b_nmajor ? N : Kbd, bld, &b_bytes))) goto oom;
      b_host = b_pad;
    }
    operand_strides(&d.a, a_mmajor, ald, M, Kd);
    operand_strides(&d.b, b_nmajor, bld, N, Kbd);
  }
  /* scale tensors: normalize to (L, MN, Kb) or (L, R, K', 32, 4, 4) */
  fc_operand *sfs[2] = {&SFA, &SFB};
  mxf_tensor *sfd[2] = {&d.sfa, &d.sfb};
  int64_t mns[2] = {M, N};
  int swz[2] = {0, 0};
  for (int s = a_bf16 ? 1 : 0; s < 2; ++s) { /* a bf16 A has no sfa: its descriptor stays absent */
    tio_tensor *t = sfs[s]->t;
    mxf_tensor *x = sfd[s];
    x->dtype = sf_want;
    int64_t R = mxf_cdiv(mns[s], 128), Kq = mxf_cdiv(Kb, 4);
    if (t->ndim == 2 || t->ndim == 3) {
      x->ndim = 3;
      x->shape[0] = t->ndim == 3 ? t->shape[0] : 1;
      x->shape[1] = t->shape[t->ndim - 2];
      x->shape[2] = t->shape[t->ndim - 1];
      swz[s] = 0;
    } else if (t->ndim == 5 || t->ndim == 6 || t->ndim == 1) {
      x->ndim = 6;
      int64_t per = R * Kq * 512;
      x->shape[0] = t->ndim == 6 ? t->shape[0] : t->ndim == 5 ? 1 : (per ? t->shape[0] / per : 0);
      if (t->ndim == 1 && (per == 0 || t->shape[0] % per)) {
        mxf_cli_err(cmd,
                    "%s holds %lld bytes; flat swizzled scales for MN=%lld, K=%lld need a multiple of %lld",
                    sfs[s]->what, (long long)t->shape[0], (long long)mns[s], (long long)K, (long long)per);
        goto done;
      }
      int64_t tail[5] = {R, Kq, 32, 4, 4};
      for (int i = 0; i < 5; ++i)
        x->shape[1 + i] = t->ndim == 1 ? tail[i] : t->shape[t->ndim - 5 + i];
      swz[s] = 1;
    } else {
      mxf_cli_err(cmd, "%s has shape %s; scales are (MN, Kb), (L, MN, Kb) or swizzled", sfs[s]->what,
                  mxf_cli_shape_str(sh, sizeof sh, t->shape, t->ndim));
      goto done;
    }
  }
  d.c.dtype = c_dt;
  d.c.ndim = 3;
  d.c.shape[0] = M;
  d.c.shape[1] = N;
  d.c.shape[2] = L;
  int64_t cld = padded_ld(c_dt, N);
  d.c.stride[0] = cld;
  d.c.stride[1] = 1;
  d.c.stride[2] = M * cld;
  d.amax.dtype = MXF_F32;
  d.amax.ndim = 1;
  d.amax.shape[0] = 1;
  d.sf_vec = (int)sf_vec;
  d.alpha = have_alpha ? &alpha : NULL;

  /* plan (validates everything), then move data */
  mxf_status st = mxf_gemm_amax_plan(&plan, &d);
  if (st != MXF_OK) {
    mxf_cli_err_status(cmd, "gemm_amax", st);
    goto done;
  }
  size_t cbytes = (size_t)tio_dtype_bytes(c_dt, M * N * L);
  size_t crow = (size_t)tio_dtype_bytes(c_dt, N), cldb = (size_t)tio_dtype_bytes(c_dt, cld);
  size_t cdev_bytes = cldb * (size_t)(M * L);
  if (!given) fc_stage(&c, "copying inputs");
  if (!given && (!(da = fc_upload(&c, a_host, a_bytes)) || !(db = fc_upload(&c, b_host, b_bytes)) ||
                 (!a_bf16 && !(dsfa = fc_upload(&c, SFA.t->data, SFA.t->nbytes))) ||
                 !(dsfb = fc_upload(&c, SFB.t->data, SFB.t->nbytes)) ||
                 !(dc = fc_dev_output(&c, cdev_bytes)) || !(damax = fc_dev_output(&c, 4))))
    goto done;
  mxf_gemm_amax_args args = {da, db, dsfa, dsfb, dc, damax, have_alpha ? &alpha : NULL};
  double ms = 0.0;
  int64_t cshape[3], one = 1;
  int cnd = 0;
  if (nd == 3) cshape[cnd++] = L;
  cshape[cnd++] = M;
  cshape[cnd++] = N;
  if (given) { /* judge what SRC holds: C and amax as --out wrote them */
    fc_operand GC, GA;
    if (fc_output_get(&c, given, "c", c_dt, cnd, cshape, &GC) ||
        fc_output_get(&c, given, "amax", MXF_F32, 1, &one, &GA) ||
        !(hc = tio_copy_aligned(GC.t->data, cbytes)))
      goto done;
    memcpy(&amax, GA.t->data, 4);
  } else {
    if (fc_run(&c, MXF_CLI_GEMM_AMAX, "gemm_amax", plan, &args, &ms) != MXF_OK) goto done;
    hc = tio_copy_aligned(NULL, cdev_bytes);
    if (!hc || fc_download(&c, hc, dc, cdev_bytes) || fc_download(&c, &amax, damax, 4)) goto done;
    if (cldb != crow) /* drop the row padding */
      for (int64_t r = 0; r < M * L; ++r)
        memmove(hc + (size_t)r * crow, hc + (size_t)r * cldb, crow);
  }

  /* outputs */
  tio_tensor outs[2] = {tio_tensor_view("c", c_dt, cnd, cshape, hc),
                        tio_tensor_view("amax", MXF_F32, 1, &one, &amax)};
  if (fc_save(&c, out, outs, 2)) goto done;

  /* reference check: each element of C judged against its f64 reference (SPEC §5) */
  gemm_ref_stats rs;
  memset(&rs, 0, sizeof rs);
  mxj_counts_init(&rs.c);
  int64_t row_step = 1;
  int sampled_amax_ok = 1;
  int pass = 1;
  double tol = mxj_amax_tolerance(K);
  if (c.check) {
    ra = malloc(sizeof(double) * (size_t)(M * K > 0 ? M * K : 1));
    rb = malloc(sizeof(double) * (size_t)(N * K > 0 ? N * K : 1));
    if (!ra || !rb) {
      mxf_cli_err(cmd, "--check: out of memory for the reference");
      goto done;
    }
    /* big problems: every row_step-th row of C, about 2^32 multiply-adds in all */
    double macs = (double)M * (double)N * (double)K * (double)L;
    row_step = macs > 4294967296.0 ? (int64_t)ceil(macs / 4294967296.0) : 1;
    double work = (double)mxf_cdiv(M, row_step) * (double)N * (double)L, done_ = 0;
    for (int64_t l = 0; l < L; ++l) {
      decode_operand(ra, A.t, SFA.t, swz[0], M, K, l, !a_mmajor, (int)sf_vec, a_code);
      decode_operand(rb, B.t, SFB.t, swz[1], N, K, l, !b_nmajor, (int)sf_vec, b_code);
      for (int64_t m = 0; m < M; m += row_step) {
        fc_progress(&c, "checking against the f64 reference", done_, work);
        for (int64_t n = 0; n < N; ++n) {
          const mxj_ref r = mxj_gemm_ref(ra + m * K, rb + n * K, K, (double)alpha);
          const int64_t idx = (l * M + m) * N + n;
          const uint32_t code = mxj_code_at(c_dt, hc, idx);
          if (isnan(r.ref))
            rs.amax_ref_nan = 1;
          else if (fabs(r.ref) > rs.amax_ref)
            rs.amax_ref = fabs(r.ref);
          if (mxj_gemm_judge(c_dt, &r, code, &rs.c, idx) == MXJ_WRONG && rs.c.wrong == 1)
            rs.wrong_ref = r, rs.wrong_code = code;
          if (c_dt == MXF_F32 && isfinite(r.ref)) {
            double got = fc_decode(c_dt, hc, idx);
            if (isfinite(got)) rs.fro_err += (got - r.ref) * (got - r.ref), rs.fro_ref += r.ref * r.ref;
          }
        }
        done_ += (double)N;
        rs.checked += N;
      }
    }
    fc_stage_done(&c);
    if (row_step > 1) { /* amax covers all of C: compare with the sampled rows and with C itself */
      double cmax = 0;
      int cnan = 0;
      for (int64_t i = 0; i < M * N * L; ++i) {
        double cv = fc_decode(c_dt, hc, i);
        if (isnan(cv))
          cnan = 1;
        else if (fabs(cv) > cmax)
          cmax = fabs(cv);
      }
      sampled_amax_ok = isnan(amax)
                            ? (rs.amax_ref_nan || cnan)
                            : !rs.amax_ref_nan && (double)amax >= rs.amax_ref * (1 - tol) &&
                                  (c_dt != MXF_F32 || isinf(cmax) || fabs((double)amax - cmax) <= tol * cmax);
    }
  }
  double rel_fro = rs.fro_ref > 0 ? sqrt(rs.fro_err / rs.fro_ref) : sqrt(rs.fro_err);
  double amax_rel = rs.amax_ref > 0 ? fabs((double)amax - rs.amax_ref) / rs.amax_ref : fabs((double)amax);
  int amax_ok = row_step > 1 ? sampled_amax_ok : mxj_amax_ok(amax, rs.amax_ref, rs.amax_ref_nan, K);
  if (c.check) pass = amax_ok && rs.c.wrong == 0;
  const double c_equal = mxj_share(rs.c.equal, rs.checked);

  char devs[32];
  mxf_cli_device_str(devs, sizeof devs, c.device);
  if (c.json) {
    printf("{\"command\": \"gemm-amax\", \"device\": \"%s\", \"backend\": ", devs);
    mxf_cli_json_str(stdout, mxf_plan_backend(plan));
    printf(", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"l\": %lld, \"a_dtype\": \"%s\", \"b_dtype\": \"%s\", "
           "\"sf_dtype\": \"%s\", \"sf_vec\": %d, \"c_dtype\": \"%s\", \"time_ms\": %.3f, \"amax\": ",
           (long long)M, (long long)N, (long long)K, (long long)L, tio_dtype_name(a_code),
           tio_dtype_name(b_code), sf_want == MXF_E4M3 ? "ue4m3" : "e8m0", (int)sf_vec, tio_dtype_name(c_dt),
           ms);
    if (isfinite(amax))
      printf("%.9g, ", (double)amax);
    else
      printf("\"%s\", ", isnan(amax) ? "nan" : "inf");
    fc_json_outputs(stdout, out, outs, 2);
    if (c.check) {
      printf(", \"check\": {\"passed\": %s, \"tolerance\": %.3g, ", pass ? "true" : "false", tol);
      if (given) {
        printf("\"checked_output\": ");
        mxf_cli_json_str(stdout, given);
        printf(", ");
      }
      printf("\"c_determined_equal\": %lld, \"c_undetermined_within\": %lld, \"c_wrong\": %lld, ",
             (long long)rs.c.exact, (long long)rs.c.within, (long long)rs.c.wrong);
      if (rs.c.wrong) printf("\"c_first_wrong\": %lld, ", (long long)rs.c.first_wrong);
      printf("\"c_codes_equal\": %.6f, \"c_max_code_step\": %lld, ", c_equal, (long long)rs.c.max_step);
      if (c_dt == MXF_F32) printf("\"c_rel_frobenius\": %.6g, ", rel_fro);
      printf("\"row_step\": %lld, \"checked\": %lld, \"amax_ref\": ", (long long)row_step,
             (long long)rs.checked);
      if (rs.amax_ref_nan)
        printf("\"nan\"");
      else if (isinf(rs.amax_ref))
        printf("\"inf\"");
      else
        printf("%.9g", rs.amax_ref);
      printf(", \"amax_rel_err\": %.6g}", isfinite(amax_rel) ? amax_rel : -1.0);
    }
    printf("}\n");
  } else {
    printf("gemm-amax: M=%lld N=%lld K=%lld L=%lld, A %s x B %s, %s scales (sf_vec %d) -> C %s\n",
           (long long)M, (long long)N, (long long)K, (long long)L, tio_dtype_name(a_code),
           tio_dtype_name(b_code), sf_want == MXF_E4M3 ? "ue4m3" : "e8m0", (int)sf_vec, tio_dtype_name(c_dt));
    if (given)
      printf("  c and amax read from %s (the operation did not run; plan: device %s, backend %s)\n", given,
             devs, mxf_plan_backend(plan));
    else
      printf("  device %s, backend %s, %.3f ms\n", devs, mxf_plan_backend(plan), ms);
    printf("  amax = %.9g\n", (double)amax);
    if (out) printf("  wrote c %s and amax to %s\n", mxf_cli_shape_str(sh, sizeof sh, cshape, cnd), out);
    if (c.check) {
      printf("  check: C, %lld elements: %lld determined and equal, %lld undetermined within the bound "
             "(largest step %lld), %lld wrong\n",
             (long long)rs.checked, (long long)rs.c.exact, (long long)rs.c.within, (long long)rs.c.max_step,
             (long long)rs.c.wrong);
      if (rs.c.wrong) {
        const int64_t w = rs.c.first_wrong;
        char at[64];
        if (L > 1)
          snprintf(at, sizeof at, "%lld, ", (long long)(w / (M * N)));
        else
          at[0] = 0;
        printf("  check: first wrong C[%s%lld, %lld] = %.9g (code 0x%x); f64 reference %.9g ± %.3g, encoded "
               "0x%x\n",
               at, (long long)(w / N % M), (long long)(w % N), fc_decode(c_dt, hc, w), rs.wrong_code,
               rs.wrong_ref.ref, rs.wrong_ref.delta, mxj_encode(c_dt, (float)rs.wrong_ref.ref));
      }
      printf("  check: C equal to encode(ref) %.4f%% (typical data: >= 99.9%%)", 100.0 * c_equal);
      if (c_dt == MXF_F32) printf(", relative Frobenius error %.3g", rel_fro);
      printf("\n");
      if (row_step > 1)
        printf("  check: amax %.9g vs %.9g, the largest |ref| of the sampled rows (must not be below it)\n",
               (double)amax, rs.amax_ref_nan ? NAN : rs.amax_ref);
      else
        printf("  check: amax %.9g vs reference %.9g (relative error %.3g, limit %.3g)\n", (double)amax,
               rs.amax_ref_nan ? NAN : rs.amax_ref, amax_rel, tol);
      if (row_step > 1)
        printf("  check: sampled every %lld-th row of C (%lld elements); amax checked against them and C\n",
               (long long)row_step, (long long)rs.checked);
      printf("  check: %s\n", pass ? "passed" : "FAILED");
    }
  }
  rc = pass ? MXF_CLI_OK : MXF_CLI_FAIL;
  goto done;
oom:
  mxf_cli_err(cmd, "out of memory");
done:
  fc_stage_done(&c);
  mxf_plan_destroy(plan);
  fc_dev_free(&c, da);
  fc_dev_free(&c, db);
  fc_dev_free(&c, dsfa);
  fc_dev_free(&c, dsfb);
  mxf_cli_dev_free(c.device, dc);
  mxf_cli_dev_free(c.device, damax);
  free(hc);
  free(a_pad);
  free(b_pad);
  free(ra);
  free(rb);
  fc_free(&c);
  return rc;
}
