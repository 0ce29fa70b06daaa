/*
 * demo.c — `mxfuse demo`: the fused operations on DeepSeek-V3-shaped random data, on
 * the best backend present, each timed and checked against an f64 oracle computed here.
 *
 * Shapes (T tokens: 4096 on a GPU, 128 on the CPU, --tokens to change):
 *   gemm_amax MXFP8  A (T, 1536) e4m3 x B (24576 = 128 heads x 192, 1536) e4m3, e8m0
 *                    scales per 32 in the swizzled layout, bf16 C, amax
 *   gemm_amax MXFP4  A (T, 2048) e2m1 x B (7168, 2048) e2m1, e8m0 per 32, swizzled, bf16 C
 *   gemm_amax bf16 x MXFP4  bf16 activations (no scales) x the same MXFP4 weights, at a
 *                    decode shape (M = 16) and at M = T; on the CPU at M = 16 also on
 *                    the weights packed (SPEC §7, the CPU's layout)
 *   proj_rope        x (T, 1536) -> (T, 128, 192), rope 64 (YaRN rotary table), w out-in,
 *                    once with bf16 inputs, once with MXFP8 inputs
 *   quantize         the (T, 128*192) output shape, bf16 in, both directions
 *   grouped_gemm_amax DeepSeek-V3's MoE up-projection on one expert-parallel rank
 *                    (src/host_moe.h): 32 experts, B (32, 4096, 7168), a random top-8
 *                    routing of the T tokens (4 of the rank's experts never picked), A
 *                    (M, 7168) the routed rows, offs their groups' ends; MXFP8 (e4m3,
 *                    e8m0 per 32, SFA swizzled over A's rows) and bf16 x MXFP4; bf16 C.
 *                    Its cost on the CPU is the experts' weights (940 MB of MXFP8 codes
 *                    dequantized per run, whatever T): about 4 s a run on 2 cores.
 * The checks are samples (a full f64 GEMM would dwarf the run), judged by SPEC §5 through
 * judge/judge.h: 320 C elements and the amax for the GEMMs; for proj_rope every row and
 * column block of the last 32-token block and a random one, on three random heads;
 * random blocks for quantize (bit-exact). Exit status 0 only if every check passes; an op
 * that the backend reports as not supported is shown as such and does not fail the run.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "formats.h"
#include "host_moe.h"
#include "judge.h"

/* ------------------------------------------------------------ problem constants */
enum {
  DS_K = 1536, /* q_lora_rank: input features of the Q up-projection */
  DS_H = 128,  /* heads */
  DS_D = 192,  /* head dim = nope 128 + rope 64 */
  DS_ROPE = 64,
  DS_HD = DS_H * DS_D,
  FP4_N = 7168, /* hidden size: the MXFP4 GEMM's N */
  FP4_K = 2048,
  GEMM_SAMPLES = 320,
  PROJ_CHECK_HEADS = 3, /* heads whose blocks the proj_rope check judges */
  QUANT_ROW_BLOCKS = 512,
  QUANT_COL_BLOCKS = 96,
};

static const char *CMD = "demo";

/* ------------------------------------------------------------ results table */
typedef enum row_state { ROW_PASSED, ROW_FAILED, ROW_UNSUPPORTED, ROW_ERROR } row_state;

typedef struct demo_row {
  char op[40], shape[40], backend[96];
  double ms;
  double work; /* flops, or bytes moved for quantize */
  int bytes;   /* work counts bytes (GB/s) rather than flops */
  row_state state;
  char check[200];
} demo_row;

typedef struct demo {
  int32_t device;
  int64_t t;
  int warmup, runs;
  int json;
  uint64_t seed;
  mxf_cli_rng rng;
  demo_row rows[12];
  int nrows;
} demo;

static void *xalloc(size_t bytes) {
  void *p = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  if (!p) {
    mxf_cli_err(CMD, "out of host memory (%zu bytes)", bytes);
    exit(MXF_CLI_FAIL);
  }
  return p;
}

/* ------------------------------------------------------------ device mirrors */
/* On the CPU the op reads and writes the host buffers themselves; on a GPU device copies. */
static void *dev_in(demo *dm, const void *host, size_t bytes) {
  void *d = mxf_cli_dev_mirror(CMD, dm->device, host, bytes);
  if (!d) exit(MXF_CLI_FAIL);
  return d;
}

static void *dev_out(demo *dm, void *host, size_t bytes) {
  void *d = dm->device == MXF_DEVICE_CPU ? host : mxf_cli_dev_alloc(CMD, dm->device, bytes);
  if (!d) exit(MXF_CLI_FAIL);
  if (mxf_cli_dev_memset(CMD, dm->device, d, 0xA5, bytes) != 0) exit(MXF_CLI_FAIL);
  return d;
}

static void dev_release(demo *dm, void *dev, const void *host) { mxf_cli_dev_release(dm->device, dev, host); }

static int fetch(demo *dm, void *host, const void *dev, size_t bytes) {
  return mxf_cli_dev_download(CMD, dm->device, host, dev, bytes);
}

static mxf_tensor tens(void *data, mxf_dtype dtype, int32_t device, int ndim, int64_t d0, int64_t d1,
                       int64_t d2) {
  mxf_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = ndim;
  t.shape[0] = d0;
  t.shape[1] = d1;
  t.shape[2] = d2;
  return t;
}

/* ------------------------------------------------------------ running one op */
typedef struct launch {
  mxf_cli_op op;
  const mxf_plan *plan;
  const void *args;
  void *ws;
  size_t ws_size;
} launch;

static mxf_status launch_once(void *p) {
  const launch *l = p;
  return mxf_cli_run(l->op, l->plan, l->args, l->ws, l->ws_size);
}

/* Records a failed library call in the row: "not supported" keeps the run green. */
static void row_status(demo_row *row, const char *what, mxf_status st) {
  if (st == MXF_ERR_NOT_SUPPORTED) {
    row->state = ROW_UNSUPPORTED;
    snprintf(row->check, sizeof row->check, "not supported: %s", mxf_last_error());
  } else {
    row->state = ROW_ERROR;
    snprintf(row->check, sizeof row->check, "%s: %s: %s", what, mxf_status_string(st), mxf_last_error());
    mxf_cli_err_status(CMD, what, st);
  }
}

/* Plans (already done by the caller: plan_st/plan), times warm-up + runs, frees the plan.
 * Returns 1 when the op ran and its outputs are ready to check. */
static int run_timed(demo *dm, demo_row *row, mxf_cli_op op, mxf_status plan_st, mxf_plan *plan,
                     const void *args) {
  if (plan_st != MXF_OK) {
    row_status(row, "plan", plan_st);
    return 0;
  }
  snprintf(row->backend, sizeof row->backend, "%s", mxf_plan_backend(plan));
  launch l = {op, plan, args, NULL, mxf_plan_workspace_size(plan)};
  if (l.ws_size && !(l.ws = mxf_cli_dev_alloc(CMD, dm->device, l.ws_size))) exit(MXF_CLI_FAIL);
  mxf_status st = mxf_cli_time_median(CMD, dm->device, dm->warmup, dm->runs, launch_once, &l, &row->ms);
  if (st == MXF_OK && mxf_cli_dev_sync(CMD, dm->device) != 0) st = MXF_ERR_CUDA;
  if (l.ws) mxf_cli_dev_free(dm->device, l.ws);
  mxf_plan_destroy(plan);
  if (st != MXF_OK) {
    row_status(row, "run", st);
    return 0;
  }
  return 1;
}

/* ------------------------------------------------------------ reference helpers */
/* Distance in representable steps between two codes of a sign-magnitude format whose
 * magnitude bits are `mag_mask` (so that -0 and +0 are the same point). */
static int code_steps(uint32_t a, uint32_t b, uint32_t sign_bit, uint32_t mag_mask) {
  long oa = (long)(a & mag_mask), ob = (long)(b & mag_mask);
  if (a & sign_bit) oa = -oa;
  if (b & sign_bit) ob = -ob;
  long d = oa - ob;
  return (int)(d < 0 ? -d : d);
}

/* MXFP8 row quantization of an f32 (rows, cols) matrix, cols % 32 == 0, with the
 * library's mxf_quantize on the CPU. */
static int quantize_rows(const float *x, int64_t rows, int64_t cols, uint8_t *q, uint8_t *s) {
  mxf_quantize_desc d;
  memset(&d, 0, sizeof d);
  d.x = tens((void *)x, MXF_F32, MXF_DEVICE_CPU, 2, rows, cols, 0);
  d.q_row = tens(q, MXF_E4M3, MXF_DEVICE_CPU, 2, rows, cols, 0);
  d.s_row = tens(s, MXF_E8M0, MXF_DEVICE_CPU, 2, rows, cols / 32, 0);
  d.directions = MXF_QUANT_ROWS;
  mxf_status st = mxf_quantize(&d, NULL);
  if (st == MXF_OK) return 0;
  mxf_cli_err_status(CMD, "preparing MXFP8 inputs with mxf_quantize", st);
  return -1;
}

static int swizzle(const uint8_t *compact, uint8_t *swz, int64_t mn, int64_t k) {
  mxf_status st = mxf_sf_swizzle(compact, swz, mn, k, 1, 32, 0xFF);
  if (st != MXF_OK) {
    mxf_cli_err_status(CMD, "mxf_sf_swizzle", st);
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------ inputs */
typedef struct inputs {
  int64_t t;
  /* x: (T, 1536) as f32 normals, e4m3 + compact scales, bf16 */
  uint8_t *x8, *x8s;
  uint16_t *xbf;
  /* w: (24576, 1536) out-in, e4m3 + compact scales, bf16 */
  uint8_t *w8, *w8s;
  uint16_t *wbf;
  /* MXFP4 GEMM operands: packed e2m1 codes, compact e8m0 scales; bf16 activations (T, 2048) */
  uint8_t *a4, *a4s, *b4, *b4s;
  uint16_t *a16;
  /* rotary table (T, 64) bf16 */
  uint16_t *cosv, *sinv;
  int64_t pos0;
  /* quantize input (T, 24576) bf16 */
  uint16_t *qin;
} inputs;

/* YaRN-scaled rotary frequencies with DeepSeek-V3's settings (base 10000, factor 40,
 * original context 4096, beta_fast 32, beta_slow 1; mscale = mscale_all_dim so the
 * magnitude correction is 1): the fast dimensions keep the original frequency, the slow
 * ones are interpolated by the factor, with a linear ramp between. */
static double yarn_corr_dim(double rotations, int dim) {
  const double base = 10000.0, orig = 4096.0, two_pi = 6.283185307179586;
  return dim * log(orig / (rotations * two_pi)) / (2.0 * log(base));
}

static void make_rope(demo *dm, inputs *in) {
  const double base = 10000.0, factor = 40.0;
  const int half = DS_ROPE / 2;
  double low = floor(yarn_corr_dim(32.0, DS_ROPE)), high = ceil(yarn_corr_dim(1.0, DS_ROPE));
  if (low < 0) low = 0;
  if (high > DS_ROPE - 1) high = DS_ROPE - 1;
  if (high <= low) high = low + 0.001;
  double theta[DS_ROPE / 2];
  for (int j = 0; j < half; j++) {
    double extra = pow(base, -2.0 * j / DS_ROPE), inter = extra / factor;
    double ramp = (j - low) / (high - low);
    ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
    theta[j] = inter * ramp + extra * (1.0 - ramp);
  }
  /* positions somewhere in a 160k context, so the angles are large as in real use */
  in->pos0 = in->t < 163840 ? (int64_t)mxf_cli_rng_below(&dm->rng, (uint64_t)(163840 - in->t)) : 0;
  for (int64_t t = 0; t < in->t; t++)
    for (int j = 0; j < half; j++) {
      double a = (double)(in->pos0 + t) * theta[j];
      uint16_t c = mxf_f32_to_bf16((float)cos(a)), s = mxf_f32_to_bf16((float)sin(a));
      in->cosv[t * DS_ROPE + j] = in->cosv[t * DS_ROPE + half + j] = c;
      in->sinv[t * DS_ROPE + j] = in->sinv[t * DS_ROPE + half + j] = s;
    }
}

static int make_inputs(demo *dm, inputs *in) {
  const int64_t T = dm->t, K = DS_K;
  mxf_cli_rng *r = &dm->rng;
  in->t = T;
  /* x: activations, a per-token magnitude between 1/4 and 4 */
  float *xf = xalloc(sizeof(float) * (size_t)(T * K));
  mxf_cli_rng_normal(r, xf, (size_t)(T * K));
  for (int64_t t = 0; t < T; t++) {
    float g = (float)exp2(4.0 * mxf_cli_rng_uniform(r) - 2.0);
    for (int64_t k = 0; k < K; k++)
      xf[t * K + k] *= g;
  }
  in->x8 = xalloc((size_t)(T * K));
  in->x8s = xalloc((size_t)(T * K / 32));
  in->xbf = xalloc(sizeof(uint16_t) * (size_t)(T * K));
  for (int64_t i = 0; i < T * K; i++)
    in->xbf[i] = mxf_f32_to_bf16(xf[i]);
  if (quantize_rows(xf, T, K, in->x8, in->x8s) != 0) return -1;
  free(xf);

  /* w: weights ~ N(0, 0.02^2), generated and quantized in slabs of rows */
  const int64_t slab = 1024;
  float *wf = xalloc(sizeof(float) * (size_t)(slab * K));
  in->w8 = xalloc((size_t)(DS_HD * K));
  in->w8s = xalloc((size_t)(DS_HD * K / 32));
  in->wbf = xalloc(sizeof(uint16_t) * (size_t)(DS_HD * K));
  for (int64_t r0 = 0; r0 < DS_HD; r0 += slab) {
    int64_t n = DS_HD - r0 < slab ? DS_HD - r0 : slab;
    mxf_cli_rng_normal(r, wf, (size_t)(n * K));
    for (int64_t i = 0; i < n * K; i++) {
      wf[i] *= 0.02f;
      in->wbf[r0 * K + i] = mxf_f32_to_bf16(wf[i]);
    }
    if (quantize_rows(wf, n, K, in->w8 + r0 * K, in->w8s + r0 * (K / 32)) != 0) return -1;
  }
  free(wf);

  /* MXFP4: codes of 2*N(0,1) (the whole e2m1 range shows up) and scale bytes drawn
   * directly around 2^0 for A and 2^-6 for B */
  float tmp[64];
  in->a4 = xalloc((size_t)(T * FP4_K / 2));
  in->b4 = xalloc((size_t)(FP4_N * FP4_K / 2));
  in->a4s = xalloc((size_t)(T * FP4_K / 32));
  in->b4s = xalloc((size_t)(FP4_N * FP4_K / 32));
  for (int64_t i = 0; i < T * FP4_K; i += 64) {
    mxf_cli_rng_normal(r, tmp, 64);
    for (int j = 0; j < 64; j += 2)
      in->a4[(i + j) / 2] = mxf_e2m1_pack(mxf_f32_to_e2m1(2 * tmp[j]), mxf_f32_to_e2m1(2 * tmp[j + 1]));
  }
  for (int64_t i = 0; i < (int64_t)FP4_N * FP4_K; i += 64) {
    mxf_cli_rng_normal(r, tmp, 64);
    for (int j = 0; j < 64; j += 2)
      in->b4[(i + j) / 2] = mxf_e2m1_pack(mxf_f32_to_e2m1(2 * tmp[j]), mxf_f32_to_e2m1(2 * tmp[j + 1]));
  }
  for (int64_t i = 0; i < T * FP4_K / 32; i++)
    in->a4s[i] = (uint8_t)(124 + mxf_cli_rng_below(r, 7));
  const int64_t t16 = T > 16 ? T : 16; /* the decode row's 16 tokens at least */
  in->a16 = xalloc(sizeof(uint16_t) * (size_t)(t16 * FP4_K));
  for (int64_t i = 0; i < t16 * FP4_K; i += 64) {
    mxf_cli_rng_normal(r, tmp, 64);
    for (int j = 0; j < 64; j++)
      in->a16[i + j] = mxf_f32_to_bf16(tmp[j]);
  }
  for (int64_t i = 0; i < (int64_t)FP4_N * FP4_K / 32; i++)
    in->b4s[i] = (uint8_t)(118 + mxf_cli_rng_below(r, 7));

  in->cosv = xalloc(sizeof(uint16_t) * (size_t)(T * DS_ROPE));
  in->sinv = xalloc(sizeof(uint16_t) * (size_t)(T * DS_ROPE));
  make_rope(dm, in);

  /* quantize input: the projection output's shape, per-(token, head) magnitudes. Each
   * (token, head) row is a random window of a pool of normals: 100M values at T=4096
   * would otherwise cost seconds of Box-Muller for data whose only job is to be varied */
  const int64_t pool_n = (int64_t)1 << 20;
  float *pool = xalloc(sizeof(float) * (size_t)pool_n);
  mxf_cli_rng_normal(r, pool, (size_t)pool_n);
  in->qin = xalloc(sizeof(uint16_t) * (size_t)(T * DS_HD));
  for (int64_t t = 0; t < T; t++)
    for (int h = 0; h < DS_H; h++) {
      float g = (float)exp2(8.0 * mxf_cli_rng_uniform(r) - 4.0);
      const float *src = pool + mxf_cli_rng_below(r, (uint64_t)(pool_n - DS_D));
      for (int d = 0; d < DS_D; d++)
        in->qin[t * DS_HD + h * DS_D + d] = mxf_f32_to_bf16(g * src[d]);
    }
  free(pool);
  return 0;
}

static void free_inputs(inputs *in) {
  free(in->x8), free(in->x8s), free(in->xbf), free(in->w8), free(in->w8s), free(in->wbf);
  free(in->a4), free(in->a4s), free(in->b4), free(in->b4s), free(in->a16), free(in->cosv), free(in->sinv),
      free(in->qin);
}

/* ------------------------------------------------------------ gemm_amax */
typedef struct gemm_case {
  mxf_dtype fa, fb; /* bf16 (A only: no scales), e4m3 or e2m1 */
  int64_t m, n, k;
  const void *a, *b;      /* host values: bf16, e4m3 bytes or packed e2m1 */
  const uint8_t *as, *bs; /* compact scales (as NULL for bf16 A) */
  int packed;             /* B packed first (SPEC §7, the CPU's layout) */
} gemm_case;

static double gemm_decode(const gemm_case *g, mxf_dtype f, const void *vals, const uint8_t *sc, int64_t row,
                          int64_t k) {
  const int64_t i = row * g->k + k;
  if (f == MXF_BF16) return mxf_bf16_to_f32(((const uint16_t *)vals)[i]);
  const double s = mxf_e8m0_to_f32(sc[row * (g->k / 32) + k / 32]);
  const uint8_t *codes = vals;
  return (f == MXF_E2M1 ? mxf_e2m1_to_f32(mxf_e2m1_get(codes, i)) : mxf_e4m3_to_f32(codes[i])) * s;
}

static size_t operand_bytes(mxf_dtype f, int64_t n) {
  return (size_t)(f == MXF_E2M1 ? n / 2 : f == MXF_BF16 ? 2 * n : n);
}

static const char *format_name(mxf_dtype f) {
  return f == MXF_E2M1 ? "MXFP4" : f == MXF_BF16 ? "bf16" : "MXFP8";
}

/* amax covers all of C (count bf16 values): it must round to the largest |C| (C and amax
 * come from the same f32 accumulators) and cannot be below any sampled |ref| beyond f32
 * error. */
static int bf16_amax_ok(const uint16_t *c, int64_t count, float amax, double max_ref, int64_t k) {
  float max_c = 0.0f;
  int c_nan = 0;
  for (int64_t i = 0; i < count; i++) {
    float v = mxf_bf16_to_f32(c[i]);
    if (v != v) c_nan = 1;
    max_c = mxf_amax_step(max_c, v);
  }
  return isfinite(amax) && !c_nan &&
         code_steps(mxf_f32_to_bf16(amax), mxf_f32_to_bf16(max_c), 0x8000u, 0x7FFFu) <= 1 &&
         (double)amax >= max_ref * (1.0 - 1e-6 * sqrt((double)k)) - 1e-30;
}

/* The row's verdict on a bf16 C (count values) from the sampled elements' counts and its
 * amax. */
static void gemm_verdict(demo_row *row, const mxj_counts *jc, const uint16_t *c, int64_t count, float amax,
                         double max_ref, int64_t k) {
  const int amax_ok = bf16_amax_ok(c, count, amax, max_ref, k), ok = jc->wrong == 0 && amax_ok;
  row->state = ok ? ROW_PASSED : ROW_FAILED;
  snprintf(row->check, sizeof row->check,
           "%s (C %d sampled: %" PRId64 " determined and equal, %" PRId64
           " undetermined within the bound, %" PRId64 " wrong; amax %.6g %s)",
           ok ? "passed" : "FAILED", GEMM_SAMPLES, jc->exact, jc->within, jc->wrong, (double)amax,
           amax_ok ? "ok" : "WRONG");
}

static void gemm_check(demo *dm, demo_row *row, const gemm_case *g, const uint16_t *c, float amax) {
  mxj_counts jc;
  mxj_counts_init(&jc);
  double max_ref = 0.0;
  double *ra = xalloc(sizeof(double) * (size_t)g->k), *rb = xalloc(sizeof(double) * (size_t)g->k);
  for (int64_t i = 0; i < GEMM_SAMPLES; i++) {
    int64_t m = (i == 0) ? 0 : (i == 1) ? g->m - 1 : (int64_t)mxf_cli_rng_below(&dm->rng, (uint64_t)g->m);
    int64_t n = (i == 0) ? 0 : (i == 1) ? g->n - 1 : (int64_t)mxf_cli_rng_below(&dm->rng, (uint64_t)g->n);
    for (int64_t k = 0; k < g->k; k++)
      ra[k] = gemm_decode(g, g->fa, g->a, g->as, m, k), rb[k] = gemm_decode(g, g->fb, g->b, g->bs, n, k);
    const mxj_ref r = mxj_gemm_ref(ra, rb, g->k, 1.0);
    if (fabs(r.ref) > max_ref) max_ref = fabs(r.ref);
    const uint16_t got = c[m * g->n + n];
    if (mxj_gemm_judge(MXF_BF16, &r, got, &jc, m * g->n + n) == MXJ_WRONG && jc.wrong <= 5)
      /* the first few, to look at with the printed seed */
      fprintf(stderr, "mxfuse demo: C[%" PRId64 ", %" PRId64 "] = %g, f64 reference %.9g, bound %.3g\n", m, n,
              mxf_bf16_to_f32(got), r.ref, r.delta);
  }
  free(ra), free(rb);
  gemm_verdict(row, &jc, c, g->m * g->n, amax, max_ref, g->k);
}

static void demo_gemm(demo *dm, const gemm_case *g) {
  demo_row *row = &dm->rows[dm->nrows++];
  const int64_t M = g->m, N = g->n, K = g->k, kb = K / 32;
  if (g->fa == g->fb)
    snprintf(row->op, sizeof row->op, "gemm_amax %s %s", format_name(g->fa), mxf_dtype_name(g->fa));
  else
    snprintf(row->op, sizeof row->op, "gemm_amax %s x %s%s", format_name(g->fa), format_name(g->fb),
             g->packed ? " packed" : "");
  const int a_mx = g->fa != MXF_BF16;
  snprintf(row->shape, sizeof row->shape, "M=%" PRId64 " N=%" PRId64 " K=%" PRId64, M, N, K);
  row->work = 2.0 * (double)M * (double)N * (double)K;

  size_t a_bytes = operand_bytes(g->fa, M * K), b_bytes = operand_bytes(g->fb, N * K);
  size_t sfa_bytes = a_mx ? mxf_sf_size(M, K, 1, 32, MXF_SF_SWIZZLED) : 1,
         sfb_bytes = mxf_sf_size(N, K, 1, 32, MXF_SF_SWIZZLED);
  size_t c_bytes = sizeof(uint16_t) * (size_t)(M * N);
  if (!sfa_bytes || !sfb_bytes) {
    row_status(row, "mxf_sf_size", MXF_ERR_INTERNAL);
    return;
  }
  uint8_t *sfa = xalloc(sfa_bytes), *sfb = xalloc(sfb_bytes);
  uint16_t *c = xalloc(c_bytes);
  float amax = 0.0f;
  if ((a_mx && swizzle(g->as, sfa, M, K) != 0) || swizzle(g->bs, sfb, N, K) != 0) {
    row->state = ROW_ERROR;
    snprintf(row->check, sizeof row->check, "mxf_sf_swizzle: %s", mxf_last_error());
    free(sfa), free(sfb), free(c);
    return;
  }
  void *da = dev_in(dm, g->a, a_bytes), *db = dev_in(dm, g->b, b_bytes);
  void *dsfa = a_mx ? dev_in(dm, sfa, sfa_bytes) : NULL, *dsfb = dev_in(dm, sfb, sfb_bytes);
  void *dc = dev_out(dm, c, c_bytes), *damax = dev_out(dm, &amax, sizeof amax);

  mxf_gemm_amax_desc d;
  memset(&d, 0, sizeof d);
  d.a = tens(NULL, g->fa, dm->device, 2, M, K, 0);
  d.b = tens(NULL, g->fb, dm->device, 2, N, K, 0);
  /* swizzled scales, physical form (L, R, K', 32, 4, 4); a bf16 A has none */
  if (a_mx) {
    d.sfa = tens(NULL, MXF_E8M0, dm->device, 6, 1, mxf_cdiv(M, 128), mxf_cdiv(kb, 4));
    d.sfa.shape[3] = 32, d.sfa.shape[4] = 4, d.sfa.shape[5] = 4;
  }
  d.sfb = tens(NULL, MXF_E8M0, dm->device, 6, 1, mxf_cdiv(N, 128), mxf_cdiv(kb, 4));
  d.sfb.shape[3] = 32, d.sfb.shape[4] = 4, d.sfb.shape[5] = 4;
  d.c = tens(NULL, MXF_BF16, dm->device, 2, M, N, 0);
  d.amax = tens(NULL, MXF_F32, dm->device, 1, 1, 0, 0);
  d.sf_vec = 32;
  /* packed: B and its swizzled scales packed on the host (mxf_pack_weights), then taken
   * with the flag; the packing is not timed (a model's weights are packed once) */
  uint8_t *pk = NULL;
  void *dpk = NULL;
  if (g->packed) {
    mxf_tensor hb = d.b, hs = d.sfb;
    hb.data = (void *)g->b, hs.data = sfb, hb.device = hs.device = MXF_DEVICE_CPU;
    size_t pk_bytes = 0;
    mxf_status ps = mxf_pack_weights_size(&hb, &hs, 32, &pk_bytes);
    if (ps == MXF_OK) ps = mxf_pack_weights(&hb, &hs, 32, pk = xalloc(pk_bytes), pk_bytes);
    if (ps != MXF_OK) {
      row_status(row, "mxf_pack_weights", ps);
      free(pk);
      pk = NULL;
    } else {
      dpk = dev_in(dm, pk, pk_bytes);
      d.flags = MXF_AMAX_B_PACKED;
    }
  }
  if (!g->packed || dpk) { /* (a packing that failed is in the row already) */
    mxf_plan *plan = NULL;
    const mxf_status st = mxf_gemm_amax_plan(&plan, &d);
    mxf_gemm_amax_args args = {da, dpk ? dpk : db, dsfa, dpk ? NULL : dsfb, dc, damax, NULL};
    if (run_timed(dm, row, MXF_CLI_GEMM_AMAX, st, plan, &args)) {
      if (fetch(dm, c, dc, c_bytes) != 0 || fetch(dm, &amax, damax, sizeof amax) != 0) exit(MXF_CLI_FAIL);
      gemm_check(dm, row, g, c, amax);
    }
  }
  if (dpk) dev_release(dm, dpk, pk);
  free(pk);
  dev_release(dm, da, g->a), dev_release(dm, db, g->b), dev_release(dm, dsfb, sfb);
  if (dsfa) dev_release(dm, dsfa, sfa);
  dev_release(dm, dc, c), dev_release(dm, damax, &amax);
  free(sfa), free(sfb), free(c);
}

/* ------------------------------------------------------------ grouped_gemm_amax (MoE) */
/* DeepSeek-V3's MoE up-projection on one expert-parallel rank (host_moe.h), the routed
 * rows of T tokens in the contiguous layout; sampled C elements judged against B of their
 * row's group, and amax. */
static void demo_moe(demo *dm, int fp4) {
  demo_row *row = &dm->rows[dm->nrows++];
  const int64_t G = MXF_MOE_LOCAL, N = MXF_MOE_N, K = MXF_MOE_K, kb = K / 32;
  int32_t offs[MXF_MOE_LOCAL];
  mxf_rng r;
  mxf_rng_init(&r, dm->seed ^ 0x4D6F45u);
  const int64_t M = mxf_moe_route(&r, dm->t, offs, NULL);
  int empty = 0;
  for (int64_t g = 0; g < G; ++g)
    empty += offs[g] == (g ? offs[g - 1] : 0);
  snprintf(row->op, sizeof row->op, "grouped %s", fp4 ? "bf16 x MXFP4" : "MXFP8");
  snprintf(row->shape, sizeof row->shape, "G=%d(%d empty) M=%d N=%d K=%d", (int)(G % 100), empty % 100,
           (int)(M % 1000000), (int)N, (int)K);
  row->work = 2.0 * (double)M * (double)N * (double)K;
  const mxf_dtype fa = fp4 ? MXF_BF16 : MXF_E4M3, fb = fp4 ? MXF_E2M1 : MXF_E4M3;
  const size_t a_bytes = operand_bytes(fa, M * K), b_bytes = operand_bytes(fb, G * N * K);
  uint8_t *a = xalloc(a_bytes ? a_bytes : 1), *b = xalloc(b_bytes), *as = xalloc((size_t)(M * kb) + 1);
  uint8_t *bs = xalloc((size_t)(G * N * kb));
  /* codes: uniform random bytes without NaN (e4m3 0x7F / 0xFF); bf16 activations near 1;
   * scales over a few binades */
  for (size_t i = 0; i < b_bytes; i += 8) {
    uint64_t v = mxf_rng_u64(&r);
    for (size_t j = 0; j < 8 && i + j < b_bytes; ++j, v >>= 8)
      b[i + j] = fp4 ? (uint8_t)v : (uint8_t)(v & 0xF7);
  }
  for (int64_t i = 0; i < M * K; ++i) {
    const uint64_t v = mxf_rng_u64(&r);
    if (fp4)
      ((uint16_t *)a)[i] = (uint16_t)(0x3F00u | (v & 0xFFu) | (((v >> 8) & 1u) << 15));
    else
      a[i] = (uint8_t)(v & 0xF7);
  }
  for (int64_t i = 0; i < M * kb; ++i)
    as[i] = (uint8_t)(120 + mxf_rng_u64(&r) % 12);
  for (int64_t i = 0; i < G * N * kb; ++i)
    bs[i] = (uint8_t)(116 + mxf_rng_u64(&r) % 12);
  /* SFA swizzled over A's rows (the groups start anywhere in its 128-row atoms) */
  const size_t sfa_bytes = fp4 ? 1 : mxf_sf_size(M, K, 1, 32, MXF_SF_SWIZZLED);
  uint8_t *sfa = xalloc(sfa_bytes);
  uint16_t *c = xalloc(sizeof(uint16_t) * (size_t)(M * N) + 2);
  float amax = 0.0f;
  if (!fp4 && swizzle(as, sfa, M, K) != 0) {
    row->state = ROW_ERROR;
    snprintf(row->check, sizeof row->check, "mxf_sf_swizzle: %s", mxf_last_error());
    free(a), free(b), free(as), free(bs), free(sfa), free(c);
    return;
  }
  void *da = dev_in(dm, a, a_bytes), *db = dev_in(dm, b, b_bytes),
       *dsfb = dev_in(dm, bs, (size_t)(G * N * kb));
  void *dsfa = fp4 ? NULL : dev_in(dm, sfa, sfa_bytes), *doffs = dev_in(dm, offs, sizeof offs);
  void *dc = dev_out(dm, c, sizeof(uint16_t) * (size_t)(M * N)), *damax = dev_out(dm, &amax, sizeof amax);
  mxf_grouped_gemm_amax_desc d;
  memset(&d, 0, sizeof d);
  d.a = tens(NULL, fa, dm->device, 2, M, K, 0);
  d.b = tens(NULL, fb, dm->device, 3, G, N, K);
  if (!fp4) {
    d.sfa = tens(NULL, MXF_E8M0, dm->device, 6, 1, mxf_cdiv(M, 128), mxf_cdiv(kb, 4));
    d.sfa.shape[3] = 32, d.sfa.shape[4] = 4, d.sfa.shape[5] = 4;
  }
  d.sfb = tens(NULL, MXF_E8M0, dm->device, 3, G, N, kb);
  d.c = tens(NULL, MXF_BF16, dm->device, 2, M, N, 0);
  d.amax = tens(NULL, MXF_F32, dm->device, 1, 1, 0, 0);
  d.offs = tens(NULL, MXF_I32, dm->device, 1, G, 0, 0);
  d.sf_vec = 32;
  mxf_plan *plan = NULL;
  mxf_status st = M > 0 ? mxf_grouped_gemm_amax_plan(&plan, &d) : MXF_ERR_INVALID_VALUE;
  if (M == 0) mxf_cli_err(CMD, "no token routed to the rank (T too small)");
  mxf_grouped_gemm_amax_args args = {da, db, dsfa, dsfb, dc, damax, doffs, NULL, NULL, NULL, NULL};
  if (run_timed(dm, row, MXF_CLI_GROUPED_GEMM_AMAX, st, plan, &args)) {
    if (fetch(dm, c, dc, sizeof(uint16_t) * (size_t)(M * N)) != 0 ||
        fetch(dm, &amax, damax, sizeof amax) != 0)
      exit(MXF_CLI_FAIL);
    mxj_counts jc;
    mxj_counts_init(&jc);
    double max_ref = 0.0, *ra = xalloc(sizeof(double) * (size_t)K), *rb = xalloc(sizeof(double) * (size_t)K);
    for (int64_t i = 0; i < GEMM_SAMPLES; i++) {
      const int64_t m = i == 0 ? 0 : i == 1 ? M - 1 : (int64_t)mxf_cli_rng_below(&dm->rng, (uint64_t)M);
      const int64_t n = i == 0 ? 0 : i == 1 ? N - 1 : (int64_t)mxf_cli_rng_below(&dm->rng, (uint64_t)N);
      int64_t g = 0;
      while (offs[g] <= m)
        ++g;
      const gemm_case ga = {fa, fb, M, N, K, a, b + operand_bytes(fb, g * N * K), as, bs + g * N * kb, 0};
      for (int64_t k = 0; k < K; k++)
        ra[k] = gemm_decode(&ga, fa, a, as, m, k), rb[k] = gemm_decode(&ga, fb, ga.b, ga.bs, n, k);
      const mxj_ref rf = mxj_gemm_ref(ra, rb, K, 1.0);
      if (fabs(rf.ref) > max_ref) max_ref = fabs(rf.ref);
      mxj_gemm_judge(MXF_BF16, &rf, c[m * N + n], &jc, m * N + n);
    }
    free(ra), free(rb);
    gemm_verdict(row, &jc, c, M * N, amax, max_ref, K);
  }
  dev_release(dm, da, a), dev_release(dm, db, b), dev_release(dm, dsfb, bs), dev_release(dm, doffs, offs);
  if (dsfa) dev_release(dm, dsfa, sfa);
  dev_release(dm, dc, c), dev_release(dm, damax, &amax);
  free(a), free(b), free(as), free(bs), free(sfa), free(c);
}

/* ------------------------------------------------------------ proj_rope */
typedef struct proj_out {
  uint8_t *row, *srow, *col, *scol;
} proj_out;

/* Judges every row and column block of the last 32-token block and a random one, on
 * PROJ_CHECK_HEADS random heads, against the reference of SPEC §2.3 (judge/judge.h). */
static void proj_check(demo *dm, demo_row *row, const inputs *in, int mx, const proj_out *o) {
  const int64_t T = in->t, TB = mxf_cdiv(T, 32);
  uint8_t *tb_sel = xalloc((size_t)TB), h_sel[DS_H];
  memset(tb_sel, 0, (size_t)TB), memset(h_sel, 0, sizeof h_sel);
  tb_sel[TB - 1] = tb_sel[mxf_cli_rng_below(&dm->rng, (uint64_t)TB)] = 1;
  for (int i = 0; i < PROJ_CHECK_HEADS; i++)
    h_sel[mxf_cli_rng_below(&dm->rng, DS_H)] = 1;
  const mxj_proj_inputs ji = {.t = T,
                              .k = DS_K,
                              .h = DS_H,
                              .d = DS_D,
                              .rope = DS_ROPE,
                              .mxfp8 = mx,
                              .w_out_in = 1,
                              .x = mx ? (const void *)in->x8 : in->xbf,
                              .w = mx ? (const void *)in->w8 : in->wbf,
                              .x_scale = mx ? in->x8s : NULL,
                              .w_scale = mx ? in->w8s : NULL,
                              .cos = in->cosv,
                              .sin = in->sinv};
  mxj_proj_ref ref;
  if (mxj_proj_ref_alloc(&ref, T, DS_H, DS_D, 0) ||
      mxj_proj_reference(&ji, tb_sel, h_sel, &ref, NULL, NULL)) {
    mxf_cli_err(CMD, "out of host memory for the proj_rope reference");
    exit(MXF_CLI_FAIL);
  }
  const mxj_proj_outputs got = {o->row, o->srow, o->col, o->scol};
  mxj_proj_counts c[2];
  mxj_proj_judge(&ji, tb_sel, h_sel, &ref, &got, c);
  mxj_proj_ref_free(&ref);
  free(tb_sel);
  const int ok = c[0].blocks.wrong == 0 && c[1].blocks.wrong == 0;
  row->state = ok ? ROW_PASSED : ROW_FAILED;
  snprintf(row->check, sizeof row->check,
           "%s (blocks: rows %" PRId64 " determined and equal + %" PRId64 " undetermined, cols %" PRId64
           " + %" PRId64 "; %" PRId64 " wrong; codes equal %.2f%%)",
           ok ? "passed" : "FAILED", c[0].blocks.exact, c[0].blocks.within, c[1].blocks.exact,
           c[1].blocks.within, c[0].blocks.wrong + c[1].blocks.wrong,
           100.0 * mxj_share(c[0].codes_equal + c[1].codes_equal, c[0].codes + c[1].codes));
}

static void demo_proj(demo *dm, const inputs *in, int mx) {
  demo_row *row = &dm->rows[dm->nrows++];
  const int64_t T = in->t, K = DS_K, TB = mxf_cdiv(T, 32);
  snprintf(row->op, sizeof row->op, "proj_rope %s", mx ? "MXFP8-in" : "BF16-in");
  snprintf(row->shape, sizeof row->shape, "T=%" PRId64 " K=%d H=%d D=%d", T, DS_K, DS_H, DS_D);
  row->work = 2.0 * (double)T * (double)DS_HD * (double)K;

  size_t out_bytes = (size_t)(T * DS_HD), srow_bytes = (size_t)(T * DS_HD / 32),
         scol_bytes = (size_t)(TB * DS_HD);
  proj_out o = {xalloc(out_bytes), xalloc(srow_bytes), xalloc(out_bytes), xalloc(scol_bytes)};
  size_t x_bytes = (size_t)(T * K) * (mx ? 1 : 2), w_bytes = (size_t)(DS_HD * K) * (mx ? 1 : 2);
  void *dx = dev_in(dm, mx ? (const void *)in->x8 : in->xbf, x_bytes);
  void *dw = dev_in(dm, mx ? (const void *)in->w8 : in->wbf, w_bytes);
  void *dxs = mx ? dev_in(dm, in->x8s, (size_t)(T * K / 32)) : NULL;
  void *dws = mx ? dev_in(dm, in->w8s, (size_t)(DS_HD * K / 32)) : NULL;
  size_t rope_bytes = sizeof(uint16_t) * (size_t)(T * DS_ROPE);
  void *dcos = dev_in(dm, in->cosv, rope_bytes), *dsin = dev_in(dm, in->sinv, rope_bytes);
  void *drow = dev_out(dm, o.row, out_bytes), *dsrow = dev_out(dm, o.srow, srow_bytes);
  void *dcol = dev_out(dm, o.col, out_bytes), *dscol = dev_out(dm, o.scol, scol_bytes);

  mxf_proj_rope_desc d;
  memset(&d, 0, sizeof d);
  mxf_dtype xt = mx ? MXF_E4M3 : MXF_BF16;
  d.x = tens(NULL, xt, dm->device, 2, T, K, 0);
  d.w = tens(NULL, xt, dm->device, 2, DS_HD, K, 0);
  if (mx) {
    d.x_scale = tens(NULL, MXF_E8M0, dm->device, 2, T, K / 32, 0);
    d.w_scale = tens(NULL, MXF_E8M0, dm->device, 2, DS_HD, K / 32, 0);
  }
  d.cos = tens(NULL, MXF_BF16, dm->device, 2, T, DS_ROPE, 0);
  d.sin = d.cos;
  d.out_row = tens(NULL, MXF_E4M3, dm->device, 3, T, DS_H, DS_D);
  d.out_col = d.out_row;
  d.out_scales_row = tens(NULL, MXF_E8M0, dm->device, 3, T, DS_H, DS_D / 32);
  d.out_scales_col = tens(NULL, MXF_E8M0, dm->device, 3, TB, DS_H, DS_D);
  d.flags = MXF_PROJ_W_OUT_IN;
  mxf_plan *plan = NULL;
  mxf_status st = mxf_proj_rope_plan(&plan, &d);
  mxf_proj_rope_args args = {dx, dw, dxs, dws, dcos, dsin, drow, dsrow, dcol, dscol};
  if (run_timed(dm, row, MXF_CLI_PROJ_ROPE, st, plan, &args)) {
    if (fetch(dm, o.row, drow, out_bytes) || fetch(dm, o.srow, dsrow, srow_bytes) ||
        fetch(dm, o.col, dcol, out_bytes) || fetch(dm, o.scol, dscol, scol_bytes))
      exit(MXF_CLI_FAIL);
    proj_check(dm, row, in, mx, &o);
  }
  dev_release(dm, dx, mx ? (const void *)in->x8 : in->xbf),
      dev_release(dm, dw, mx ? (const void *)in->w8 : in->wbf);
  if (mx) dev_release(dm, dxs, in->x8s), dev_release(dm, dws, in->w8s);
  dev_release(dm, dcos, in->cosv), dev_release(dm, dsin, in->sinv);
  dev_release(dm, drow, o.row), dev_release(dm, dsrow, o.srow), dev_release(dm, dcol, o.col),
      dev_release(dm, dscol, o.scol);
  free(o.row), free(o.srow), free(o.col), free(o.scol);
}

/* ------------------------------------------------------------ quantize */
static void quant_check(demo *dm, demo_row *row, const inputs *in, const proj_out *o) {
  const int64_t T = in->t, C = DS_HD, nblk = C / 32;
  int64_t n = 0, bad = 0;
  float v[32];
  uint8_t codes[32];
  for (int i = 0; i < QUANT_ROW_BLOCKS; i++) {
    int64_t t = (int64_t)mxf_cli_rng_below(&dm->rng, (uint64_t)T),
            j = (int64_t)mxf_cli_rng_below(&dm->rng, (uint64_t)nblk);
    for (int e = 0; e < 32; e++)
      v[e] = mxf_bf16_to_f32(in->qin[t * C + j * 32 + e]);
    uint8_t b = mxf_mx_quantize_block(v, 32, 1, codes, 1);
    int same = o->srow[t * nblk + j] == b && memcmp(o->row + t * C + j * 32, codes, 32) == 0;
    n++, bad += !same;
  }
  for (int i = 0; i < QUANT_COL_BLOCKS; i++) {
    int64_t tb = (int64_t)mxf_cli_rng_below(&dm->rng, (uint64_t)mxf_cdiv(T, 32));
    int64_t c = (int64_t)mxf_cli_rng_below(&dm->rng, (uint64_t)C);
    int64_t t0 = tb * 32, cnt = T - t0 < 32 ? T - t0 : 32;
    for (int64_t e = 0; e < cnt; e++)
      v[e] = mxf_bf16_to_f32(in->qin[(t0 + e) * C + c]);
    uint8_t b = mxf_mx_quantize_block(v, (int)cnt, 1, codes, 1);
    int same = o->scol[tb * C + c] == b;
    for (int64_t e = 0; e < cnt; e++)
      same &= o->col[(t0 + e) * C + c] == codes[e];
    n++, bad += !same;
  }
  row->state = bad == 0 ? ROW_PASSED : ROW_FAILED;
  snprintf(row->check, sizeof row->check,
           "%s (%" PRId64 "/%" PRId64 " sampled blocks bit-exact: %d rows, %d cols)",
           bad ? "FAILED" : "passed", n - bad, n, QUANT_ROW_BLOCKS, QUANT_COL_BLOCKS);
}

static void demo_quantize(demo *dm, const inputs *in) {
  demo_row *row = &dm->rows[dm->nrows++];
  const int64_t T = in->t, C = DS_HD, TB = mxf_cdiv(T, 32);
  snprintf(row->op, sizeof row->op, "quantize MXFP8 rows+cols");
  snprintf(row->shape, sizeof row->shape, "%" PRId64 "x%d bf16", T, DS_HD);
  size_t in_bytes = sizeof(uint16_t) * (size_t)(T * C), q_bytes = (size_t)(T * C);
  size_t srow_bytes = (size_t)(T * C / 32), scol_bytes = (size_t)(TB * C);
  row->work = (double)(in_bytes + 2 * q_bytes + srow_bytes + scol_bytes);
  row->bytes = 1;
  proj_out o = {xalloc(q_bytes), xalloc(srow_bytes), xalloc(q_bytes), xalloc(scol_bytes)};
  void *dx = dev_in(dm, in->qin, in_bytes);
  void *dqr = dev_out(dm, o.row, q_bytes), *dsr = dev_out(dm, o.srow, srow_bytes);
  void *dqc = dev_out(dm, o.col, q_bytes), *dsc = dev_out(dm, o.scol, scol_bytes);
  mxf_quantize_desc d;
  memset(&d, 0, sizeof d);
  d.x = tens(NULL, MXF_BF16, dm->device, 2, T, C, 0);
  d.q_row = tens(NULL, MXF_E4M3, dm->device, 2, T, C, 0);
  d.s_row = tens(NULL, MXF_E8M0, dm->device, 2, T, C / 32, 0);
  d.q_col = d.q_row;
  d.s_col = tens(NULL, MXF_E8M0, dm->device, 2, TB, C, 0);
  d.directions = MXF_QUANT_ROWS | MXF_QUANT_COLS;
  mxf_plan *plan = NULL;
  mxf_status st = mxf_quantize_plan(&plan, &d);
  mxf_quantize_args args = {dx, dqr, dsr, dqc, dsc};
  if (run_timed(dm, row, MXF_CLI_QUANTIZE, st, plan, &args)) {
    if (fetch(dm, o.row, dqr, q_bytes) || fetch(dm, o.srow, dsr, srow_bytes) ||
        fetch(dm, o.col, dqc, q_bytes) || fetch(dm, o.scol, dsc, scol_bytes))
      exit(MXF_CLI_FAIL);
    quant_check(dm, row, in, &o);
  }
  dev_release(dm, dx, in->qin);
  dev_release(dm, dqr, o.row), dev_release(dm, dsr, o.srow), dev_release(dm, dqc, o.col),
      dev_release(dm, dsc, o.scol);
  free(o.row), free(o.srow), free(o.col), free(o.scol);
}

/* ------------------------------------------------------------ output */
static const char *state_word(row_state s) {
  switch (s) {
  case ROW_PASSED: return "passed";
  case ROW_FAILED: return "FAILED";
  case ROW_UNSUPPORTED: return "not supported";
  case ROW_ERROR: return "error";
  }
  return "?";
}

static void throughput_str(const demo *dm, const demo_row *r, char *buf, size_t n) {
  if (r->state == ROW_UNSUPPORTED || r->state == ROW_ERROR || r->ms <= 0) {
    snprintf(buf, n, "-");
    return;
  }
  double per_s = r->work / (r->ms * 1e-3);
  if (r->bytes)
    snprintf(buf, n, "%.1f GB/s", per_s * 1e-9);
  else if (dm->device != MXF_DEVICE_CPU)
    snprintf(buf, n, "%.1f TFLOP/s", per_s * 1e-12);
  else
    snprintf(buf, n, "%.1f GFLOP/s", per_s * 1e-9);
}

static void print_table(const demo *dm) {
  printf("%-30s %-26s %-32s %10s %15s  %s\n", "op", "shape", "backend", "time ms", "throughput", "check");
  for (int i = 0; i < dm->nrows; i++) {
    const demo_row *r = &dm->rows[i];
    char tp[32], ms[32];
    throughput_str(dm, r, tp, sizeof tp);
    if (r->state == ROW_UNSUPPORTED || r->state == ROW_ERROR)
      snprintf(ms, sizeof ms, "-");
    else
      snprintf(ms, sizeof ms, "%.3f", r->ms);
    printf("%-30s %-26s %-32s %10s %15s  %s\n", r->op, r->shape, r->backend[0] ? r->backend : "-", ms, tp,
           r->check);
  }
}

static void print_json(const demo *dm, int ok, double prep_s) {
  char dev[32];
  printf("{\"seed\": %" PRIu64 ", \"device\": ", dm->seed);
  mxf_cli_json_str(stdout, mxf_cli_device_str(dev, sizeof dev, dm->device));
  printf(", \"tokens\": %" PRId64 ", \"warmup\": %d, \"runs\": %d, \"prepare_s\": %.3f, \"ops\": [", dm->t,
         dm->warmup, dm->runs, prep_s);
  for (int i = 0; i < dm->nrows; i++) {
    const demo_row *r = &dm->rows[i];
    int ran = r->state == ROW_PASSED || r->state == ROW_FAILED;
    printf("%s\n  {\"op\": ", i ? "," : "");
    mxf_cli_json_str(stdout, r->op);
    printf(", \"shape\": ");
    mxf_cli_json_str(stdout, r->shape);
    printf(", \"backend\": ");
    mxf_cli_json_str(stdout, r->backend);
    printf(", \"status\": ");
    mxf_cli_json_str(stdout, state_word(r->state));
    if (ran)
      printf(", \"time_ms\": %.6f, \"%s\": %.6g", r->ms, r->bytes ? "bytes_per_s" : "flop_per_s",
             r->work / (r->ms * 1e-3));
    printf(", \"check\": ");
    mxf_cli_json_str(stdout, r->check);
    printf("}");
  }
  printf("\n], \"passed\": %s}\n", ok ? "true" : "false");
}

/* ------------------------------------------------------------ the command */
static void usage(FILE *f) {
  fprintf(f,
          "usage: mxfuse demo [--device cpu|cuda[:N]|auto] [--seed N] [--tokens T] [--runs N] [--json]\n"
          "\n"
          "Runs the fused operations on DeepSeek-V3-shaped random data on one backend, times them\n"
          "(median of --runs runs after warm-up) and judges a random sample of every result by SPEC\n"
          "section 5 against an f64 reference (determined outputs bit for bit):\n"
          "  gemm_amax MXFP8   M=T, N=24576 (128 heads x 192), K=1536, e4m3 + e8m0/32 swizzled, bf16 C\n"
          "  gemm_amax MXFP4   M=T, N=7168, K=2048, e2m1 + e8m0/32 swizzled, bf16 C\n"
          "  gemm_amax bf16 x MXFP4  bf16 activations x those weights, M=16 and M=T; M=16 also packed (CPU)\n"
          "  proj_rope         T tokens, K=1536, H=128, D=192 (rope 64, YaRN table), bf16 and MXFP8 inputs\n"
          "  quantize          (T, 24576) bf16 -> MXFP8, rows and columns\n"
          "\n"
          "options:\n"
          "  --device D   cpu, cuda, cuda:N or auto (default: auto = the first CUDA device if any)\n"
          "  --seed N     seed of the random inputs and samples (default: from the clock; printed)\n"
          "  --tokens T   tokens (default 4096 on a GPU, 128 on the CPU)\n"
          "  --runs N     timed runs per op (default 20 on a GPU, 3 on the CPU), after warm-up\n"
          "  --json       print a JSON summary instead of the table\n"
          "\n"
          "Exit status: 0 when every check passed (ops the backend does not support yet are listed\n"
          "as such), 1 when a check or an operation failed, 2 for a bad command line.\n");
}

int mxf_cmd_demo(int argc, char **argv) {
  demo dm;
  memset(&dm, 0, sizeof dm);
  const char *dev_text = "auto";
  int64_t tokens = 0, runs = 0;
  int have_seed = 0;
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (mxf_cli_is_help(argv[i])) {
      usage(stdout);
      return MXF_CLI_OK;
    } else if ((v = mxf_cli_opt(CMD, argc, argv, &i, "--device"))) {
      if (!*v) return MXF_CLI_USAGE;
      dev_text = v;
    } else if ((v = mxf_cli_opt(CMD, argc, argv, &i, "--seed"))) {
      if (!*v || mxf_cli_parse_seed(CMD, "--seed", v, &dm.seed) != 0) return MXF_CLI_USAGE;
      have_seed = 1;
    } else if ((v = mxf_cli_opt(CMD, argc, argv, &i, "--tokens"))) {
      if (!*v || mxf_cli_parse_i64(CMD, "--tokens", v, 1, 1 << 20, &tokens) != 0) return MXF_CLI_USAGE;
    } else if ((v = mxf_cli_opt(CMD, argc, argv, &i, "--runs"))) {
      if (!*v || mxf_cli_parse_i64(CMD, "--runs", v, 1, 1000, &runs) != 0) return MXF_CLI_USAGE;
    } else if (strcmp(argv[i], "--json") == 0) {
      dm.json = 1;
    } else {
      mxf_cli_err(CMD, "unknown argument '%s' (mxfuse demo --help)", argv[i]);
      return MXF_CLI_USAGE;
    }
  }
  if (mxf_cli_parse_device(CMD, "--device", dev_text, &dm.device) != 0) return MXF_CLI_USAGE;
  int gpu = dm.device != MXF_DEVICE_CPU;
  dm.t = tokens ? tokens : gpu ? 4096 : 128;
  dm.warmup = gpu ? 3 : 1;
  dm.runs = runs ? (int)runs : gpu ? 20 : 3;
  if (!have_seed) dm.seed = mxf_cli_default_seed();
  mxf_cli_rng_init(&dm.rng, dm.seed);

  char dev[32];
  mxf_cli_device_str(dev, sizeof dev, dm.device);
  FILE *info = dm.json ? stderr : stdout;
  fprintf(info,
          "mxfuse demo %s: device %s, T=%" PRId64 " tokens, seed %" PRIu64
          " (replay: mxfuse demo --device %s --tokens %" PRId64 " --seed %" PRIu64 ")\n",
          mxf_version_string(), dev, dm.t, dm.seed, dev, dm.t, dm.seed);
  fflush(info);

  double t0 = mxf_cli_now_ms();
  inputs in;
  memset(&in, 0, sizeof in);
  if (make_inputs(&dm, &in) != 0) return MXF_CLI_FAIL;
  double prep_s = (mxf_cli_now_ms() - t0) * 1e-3;
  fprintf(info,
          "inputs ready in %.1f s (rotary positions %" PRId64 "..%" PRId64
          "); timing: median of %d runs after %d warm-up\n\n",
          prep_s, in.pos0, in.pos0 + dm.t - 1, dm.runs, dm.warmup);
  fflush(info);

  gemm_case g8 = {MXF_E4M3, MXF_E4M3, dm.t, DS_HD, DS_K, in.x8, in.w8, in.x8s, in.w8s, 0};
  gemm_case g4 = {MXF_E2M1, MXF_E2M1, dm.t, FP4_N, FP4_K, in.a4, in.b4, in.a4s, in.b4s, 0};
  gemm_case w4_decode = {MXF_BF16, MXF_E2M1, 16, FP4_N, FP4_K, in.a16, in.b4, NULL, in.b4s, 0};
  gemm_case w4_packed = {MXF_BF16, MXF_E2M1, 16, FP4_N, FP4_K, in.a16, in.b4, NULL, in.b4s, 1};
  gemm_case w4_prefill = {MXF_BF16, MXF_E2M1, dm.t, FP4_N, FP4_K, in.a16, in.b4, NULL, in.b4s, 0};
  demo_gemm(&dm, &g8);
  demo_gemm(&dm, &g4);
  demo_gemm(&dm, &w4_decode);
  if (dm.device == MXF_DEVICE_CPU) demo_gemm(&dm, &w4_packed); /* the CPU's layout (SPEC §7) */
  if (dm.t != 16) demo_gemm(&dm, &w4_prefill);
  demo_proj(&dm, &in, 0);
  demo_proj(&dm, &in, 1);
  demo_quantize(&dm, &in);
  free_inputs(&in);
  demo_moe(&dm, 0);
  demo_moe(&dm, 1);

  int ok = 1, supported = 0;
  for (int i = 0; i < dm.nrows; i++) {
    ok &= dm.rows[i].state == ROW_PASSED || dm.rows[i].state == ROW_UNSUPPORTED;
    supported += dm.rows[i].state != ROW_UNSUPPORTED;
  }
  if (dm.json) {
    print_json(&dm, ok, prep_s);
  } else {
    print_table(&dm);
    printf("\n%s: %d op%s ran, %d not supported on %s; total %.1f s\n",
           ok ? "all checks passed" : "CHECKS FAILED", supported, supported == 1 ? "" : "s",
           dm.nrows - supported, dev, (mxf_cli_now_ms() - t0) * 1e-3);
  }
  return ok ? MXF_CLI_OK : MXF_CLI_FAIL;
}
