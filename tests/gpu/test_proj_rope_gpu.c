/*
 * test_proj_rope_gpu.c — proj_rope on the CUDA backend against the CPU backend and an
 * f64 oracle (SPEC §2, §5). Skips (exit 77) without CUDA or without a device.
 *
 * Each case builds one random problem on the host (seed printed; replay with MXF_SEED),
 * runs it on the CPU backend and on the CUDA backend (device copies of the same bytes,
 * outputs poisoned with 0xA5, guard bytes after each output), and checks per direction:
 *   - against the f64 reference of SPEC §2.3 (tools/judge.h) on every 32-token block,
 *     or on 12 random ones and the last when T > 512: every determined block (no f32
 *     summation order can change its staged values) equal bit for bit (SPEC §5), and on
 *     random data the cuDNN criterion, >= 95 % of dequantized values within
 *     0.1 + 0.1 |ref|;
 *   - against the CPU backend on every byte: integer data (small integers, power-of-two
 *     scales: every f32 sum is exact in any order) and NaN / inf injected into x (and a
 *     NaN x scale on the MXFP8 path; propagation does not depend on summation order)
 *     identical; random data >= 99.9 % of scale bytes and >= 99 % of codes identical;
 *   - guard bytes after every output untouched.
 * Coverage: T in {1, 31, 32, 130, 2048, 4096}, bf16 and MXFP8 inputs, out-in and in-out
 * weights, D = 192 (nope 128 + rope 64) and D = 96 (64 + 32), the fp32 epilogue, K not a
 * multiple of 64 (and of 8, which the sm90 kernel refuses), inputs one element off a
 * 16-byte boundary and outputs one or two bytes off their alignment (run-time fallbacks to
 * the portable kernel), NaNs of both signs. On a cc 9.0 device every
 * case runs with the default kernel choice and with MXF_CONFIG=proj=portable (MXFP8 cases
 * also with mxfp8=prepass and mxfp8=mainloop).
 * MXF_GPU_TEST_SMALL=1 keeps only small cases (for compute-sanitizer).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "gpu_util.h"
#include "judge.h"
#include "mxfuse.h"
#include "testutil.h"

#if defined(MXF_WITH_CUDA)

enum { DATA_RANDOM = 0, DATA_INT = 1, DATA_NANINF = 2 };

typedef struct pcase {
  int64_t t, k, h, d, rope;
  int mx, out_in, fp32, data, shift;
  int oshift; /* bytes by which every output pointer is moved off its allocation's alignment */
} pcase;

typedef struct pin {
  uint8_t *x, *w, *xs, *ws; /* as the library reads them (bf16 as uint16 bytes) */
  uint16_t *cosv, *sinv;
  size_t xb, wb, xsb, wsb, csb;
} pin;

typedef struct pout {
  uint8_t *q_row, *s_row, *q_col, *s_col;
} pout;

static long kernel_counts[3]; /* sm90, portable, other */

static int no_mainloop(void) {
  const char *e = getenv("MXF_GPU_TEST_NO_MAINLOOP");
  return e && *e && strcmp(e, "0") != 0;
}
static const int GUARD = 16;

static int64_t n_out(const pcase *c) { return c->t * c->h * c->d; }
static int64_t n_srow(const pcase *c) { return c->t * c->h * (c->d / 32); }
static int64_t n_scol(const pcase *c) { return (c->t + 31) / 32 * c->h * c->d; }

static uint16_t bf16_of(float v) { return mxf_f32_to_bf16(v); }

/* ------------------------------------------------------------ inputs */
static void gen_inputs(tu_rng *r, const pcase *c, pin *in) {
  const int64_t T = c->t, K = c->k, N = c->h * c->d;
  memset(in, 0, sizeof *in);
  const double wsd = 1.0 / sqrt((double)K);
  if (!c->mx) {
    in->xb = (size_t)(T * K) * 2, in->wb = (size_t)(N * K) * 2;
    uint16_t *x = tu_malloc(in->xb), *w = tu_malloc(in->wb);
    for (int64_t i = 0; i < T * K; ++i) {
      float v = c->data != DATA_RANDOM ? (float)tu_range(r, -4, 4) : (float)tu_normal(r);
      if (c->data == DATA_NANINF && tu_u32(r) % 4000u == 0) {
        const uint32_t k3 = tu_u32(r) % 3u; /* NaN of either sign, or -inf */
        v = k3 == 0 ? NAN : k3 == 1 ? -NAN : -INFINITY;
      }
      x[i] = bf16_of(v);
    }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const float v = c->data != DATA_RANDOM ? (float)tu_range(r, -4, 4) : (float)(tu_normal(r) * wsd);
        w[c->out_in ? n * K + k : k * N + n] = bf16_of(v);
      }
    in->x = (uint8_t *)x, in->w = (uint8_t *)w;
  } else {
    const int64_t KB = K / 32;
    in->xb = (size_t)(T * K), in->wb = (size_t)(N * K);
    in->xsb = (size_t)(T * KB), in->wsb = (size_t)(N * KB);
    in->x = tu_malloc(in->xb), in->w = tu_malloc(in->wb);
    in->xs = tu_malloc(in->xsb), in->ws = tu_malloc(in->wsb);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t b = 0; b < KB; ++b) {
        uint8_t s = c->data != DATA_RANDOM ? 127 : (uint8_t)tu_range(r, 121, 124);
        if (c->data == DATA_NANINF && tu_u32(r) % 300u == 0) s = 0xFF;
        in->xs[t * KB + b] = s;
      }
    const int wlog = (int)floor(0.5 * log2((double)K));
    for (int64_t i = 0; i < N * KB; ++i)
      in->ws[i] = c->data != DATA_RANDOM ? 127 : (uint8_t)tu_range(r, 122 - wlog, 124 - wlog);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < K; ++k) {
        const float v = c->data != DATA_RANDOM ? (float)tu_range(r, -4, 4) : (float)(tu_normal(r) * 16.0);
        uint8_t code = mxf_f32_to_e4m3(v);
        if (c->data == DATA_NANINF && tu_u32(r) % 5000u == 0) code = 0x7F;
        in->x[t * K + k] = code;
      }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const float v = c->data != DATA_RANDOM ? (float)tu_range(r, -4, 4) : (float)(tu_normal(r) * 16.0);
        in->w[c->out_in ? n * K + k : k * N + n] = mxf_f32_to_e4m3(v);
      }
  }
  in->csb = (size_t)(T * c->rope) * 2;
  in->cosv = tu_malloc(in->csb + 2), in->sinv = tu_malloc(in->csb + 2);
  for (int64_t i = 0; i < T * c->rope; ++i) {
    const double a = tu_uniform(r) * 6.283185307179586;
    in->cosv[i] = bf16_of(c->data != DATA_RANDOM ? (float)tu_range(r, -1, 1) : (float)cos(a));
    in->sinv[i] = bf16_of(c->data != DATA_RANDOM ? (float)tu_range(r, -1, 1) : (float)sin(a));
  }
}

static void free_inputs(pin *in) {
  free(in->x), free(in->w), free(in->xs), free(in->ws), free(in->cosv), free(in->sinv);
}

/* ------------------------------------------------------------ running */
/* set: run_proj plans from the geometry alone (no data pointers in the descriptor) */
static int plan_without_data;

/* Runs on `dev` with the given (host or device) pointers; returns the status and the
 * kernel name of the plan. */
static mxf_status run_proj(const pcase *c, int32_t dev, const void *x, const void *w, const void *xs,
                           const void *ws, const void *cosv, const void *sinv, const pout *o, char *kernel,
                           size_t kernel_len) {
  const int64_t T = c->t, K = c->k, N = c->h * c->d;
  int64_t sx[2] = {T, K}, sxs[2] = {T, K / 32};
  int64_t sw[2] = {c->out_in ? N : K, c->out_in ? K : N};
  int64_t sws[2] = {c->out_in ? N : K / 32, c->out_in ? K / 32 : N};
  int64_t scs[2] = {T, c->rope};
  int64_t so[3] = {T, c->h, c->d}, ssr[3] = {T, c->h, c->d / 32}, ssc[3] = {(T + 31) / 32, c->h, c->d};
  mxf_proj_rope_desc d;
  memset(&d, 0, sizeof d);
  const mxf_dtype in_dt = c->mx ? MXF_E4M3 : MXF_BF16;
  d.x = tu_tensor((void *)x, in_dt, 2, sx);
  d.w = tu_tensor((void *)w, in_dt, 2, sw);
  if (c->mx) {
    d.x_scale = tu_tensor((void *)xs, MXF_E8M0, 2, sxs);
    d.w_scale = tu_tensor((void *)ws, MXF_E8M0, 2, sws);
  }
  d.cos = tu_tensor((void *)cosv, MXF_BF16, 2, scs);
  d.sin = tu_tensor((void *)sinv, MXF_BF16, 2, scs);
  d.out_row = tu_tensor(o->q_row, MXF_E4M3, 3, so);
  d.out_scales_row = tu_tensor(o->s_row, MXF_E8M0, 3, ssr);
  d.out_col = tu_tensor(o->q_col, MXF_E4M3, 3, so);
  d.out_scales_col = tu_tensor(o->s_col, MXF_E8M0, 3, ssc);
  mxf_tensor *all[] = {&d.x,   &d.w,       &d.x_scale,        &d.w_scale, &d.cos,
                       &d.sin, &d.out_row, &d.out_scales_row, &d.out_col, &d.out_scales_col};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
    all[i]->device = dev;
  d.flags = (c->out_in ? MXF_PROJ_W_OUT_IN : 0u) | (c->fp32 ? MXF_PROJ_FP32_EPILOGUE : 0u);
  if (plan_without_data)
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
      all[i]->data = NULL;
  mxf_plan *plan = NULL;
  mxf_status st = mxf_proj_rope_plan(&plan, &d);
  if (st != MXF_OK) return st;
  snprintf(kernel, kernel_len, "%s", mxf_plan_backend(plan));
  const size_t wsz = mxf_plan_workspace_size(plan);
  void *wsp = NULL;
  if (wsz) wsp = dev == MXF_DEVICE_CPU ? tu_malloc(wsz) : gu_dmalloc(wsz);
  mxf_proj_rope_args a = {x, w, xs, ws, cosv, sinv, o->q_row, o->s_row, o->q_col, o->s_col};
  st = mxf_proj_rope_run(plan, &a, wsp, wsz, NULL);
  if (dev != MXF_DEVICE_CPU) {
    GU_CUDA(cudaDeviceSynchronize());
    cudaFree(wsp);
  } else {
    free(wsp);
  }
  mxf_plan_destroy(plan);
  return st;
}

/* ------------------------------------------------------------ comparison */
/* One direction of the CUDA result g: jc is its verdict against the f64 reference on the
 * sampled token blocks; w is the CPU backend's result, compared on every byte. */
static void compare_dir(const pcase *c, const char *tag, const char *dir, int col, const pout *g,
                        const pout *w, const mxj_proj_counts *jc) {
  const uint8_t *gq = col ? g->q_col : g->q_row, *wq = col ? w->q_col : w->q_row;
  const uint8_t *gs = col ? g->s_col : g->s_row, *wsc = col ? w->s_col : w->s_row;
  const int64_t ns = col ? n_scol(c) : n_srow(c), nq = n_out(c);
  int64_t s_bad = 0, q_bad = 0;
  for (int64_t i = 0; i < ns; ++i)
    s_bad += gs[i] != wsc[i];
  for (int64_t i = 0; i < nq; ++i)
    q_bad += gq[i] != wq[i];
  if (c->data != DATA_RANDOM) {
    TU_CHECK(s_bad == 0 && q_bad == 0,
             "%s %s: exact data: %lld scale bytes, %lld codes differ from the cpu backend", tag, dir,
             (long long)s_bad, (long long)q_bad);
  } else {
    /* tiny outputs: one flipped block is allowed (0.1 % of fewer than 1000 blocks is < 1) */
    TU_CHECK((double)s_bad <= 0.001 * (double)ns || s_bad <= 1,
             "%s %s: %lld of %lld scale bytes differ (> 0.1 %%)", tag, dir, (long long)s_bad, (long long)ns);
    TU_CHECK((double)q_bad <= 0.01 * (double)nq || q_bad <= 32, "%s %s: %lld of %lld codes differ (> 1 %%)",
             tag, dir, (long long)q_bad, (long long)nq);
    TU_CHECK(mxj_cudnn_ok(jc), "%s %s: cuDNN criterion: %lld of %lld within 0.1 + 0.1|ref|", tag, dir,
             (long long)jc->close, (long long)jc->close_n);
  }
  const int64_t fw = jc->blocks.first_wrong;
  TU_CHECK(jc->blocks.wrong == 0,
           "%s %s: %lld of %lld determined blocks differ from the f64 reference; first: block %lld (scale "
           "byte gpu "
           "%u)",
           tag, dir, (long long)jc->blocks.wrong, (long long)(jc->blocks.exact + jc->blocks.wrong),
           (long long)fw, jc->blocks.wrong ? gs[fw] : 0u);
}

/* ------------------------------------------------------------ one case */
static void *dev_copy_shifted(const void *h, size_t n, int shift, size_t elem) {
  uint8_t *d = gu_dmalloc(n + 32);
  if (n) GU_CUDA(cudaMemcpy(d + (size_t)shift * elem, h, n, cudaMemcpyHostToDevice));
  return d;
}

static void run_case(tu_rng *r, const pcase *c) {
  char tag[200];
  snprintf(tag, sizeof tag, "T=%lld K=%lld H=%lld D=%lld rope=%lld %s %s%s%s%s%s", (long long)c->t,
           (long long)c->k, (long long)c->h, (long long)c->d, (long long)c->rope, c->mx ? "mxfp8" : "bf16",
           c->out_in ? "out-in" : "in-out", c->fp32 ? " fp32-epilogue" : "",
           c->data == DATA_INT      ? " int-data"
           : c->data == DATA_NANINF ? " nan/inf"
                                    : "",
           c->shift ? " shifted" : "", c->oshift ? " misaligned-outputs" : "");
  pin in;
  gen_inputs(r, c, &in);
  const int64_t nq = n_out(c), nsr = n_srow(c), nsc = n_scol(c);
  pout want;
  want.q_row = tu_malloc((size_t)nq), want.q_col = tu_malloc((size_t)nq);
  want.s_row = tu_malloc((size_t)nsr), want.s_col = tu_malloc((size_t)nsc);
  char kname[64];
  mxf_status st =
      run_proj(c, MXF_DEVICE_CPU, in.x, in.w, in.xs, in.ws, in.cosv, in.sinv, &want, kname, sizeof kname);
  if (!TU_CHECK(st == MXF_OK, "%s: cpu status %s (%s)", tag, mxf_status_string(st), mxf_last_error())) {
    free_inputs(&in);
    return;
  }
  /* the f64 reference on every token block, or on 12 random ones and the last */
  const int64_t TB = (c->t + 31) / 32;
  uint8_t *tb_sel = tu_malloc((size_t)TB);
  for (int64_t tb = 0; tb < TB; ++tb)
    tb_sel[tb] = TB <= 16;
  for (int i = 0; i < 12 && TB > 16; ++i)
    tb_sel[tu_range(r, 0, TB - 1)] = 1;
  tb_sel[TB - 1] = 1;
  const mxj_proj_inputs ji = {.t = c->t,
                              .k = c->k,
                              .h = c->h,
                              .d = c->d,
                              .rope = c->rope,
                              .mxfp8 = c->mx,
                              .w_out_in = c->out_in,
                              .fp32_epilogue = c->fp32,
                              .x = in.x,
                              .w = in.w,
                              .x_scale = in.xs,
                              .w_scale = in.ws,
                              .cos = in.cosv,
                              .sin = in.sinv};
  mxj_proj_ref jr;
  if (!TU_CHECK(mxj_proj_ref_alloc(&jr, c->t, c->h, c->d, c->data == DATA_RANDOM) == 0 &&
                    mxj_proj_reference(&ji, tb_sel, NULL, &jr, NULL, NULL) == 0,
                "%s: the f64 reference: out of memory", tag)) {
    free_inputs(&in);
    return;
  }

  const size_t in_elem = c->mx ? 1 : 2;
  uint8_t *xd = dev_copy_shifted(in.x, in.xb, c->shift, in_elem),
          *wd = dev_copy_shifted(in.w, in.wb, c->shift, in_elem);
  uint8_t *xsd = c->mx ? dev_copy_shifted(in.xs, in.xsb, 0, 1) : NULL;
  uint8_t *wsd = c->mx ? dev_copy_shifted(in.ws, in.wsb, 0, 1) : NULL;
  uint8_t *cd = dev_copy_shifted(in.cosv, in.csb, c->shift, 2),
          *sd = dev_copy_shifted(in.sinv, in.csb, c->shift, 2);
  pout gd, got;
  const size_t os = (size_t)c->oshift;
  gd.q_row = gu_dmalloc((size_t)nq + GUARD + os), gd.q_col = gu_dmalloc((size_t)nq + GUARD + os);
  gd.s_row = gu_dmalloc((size_t)nsr + GUARD + os), gd.s_col = gu_dmalloc((size_t)nsc + GUARD + os);
  /* what the op sees: every output moved by os bytes (misaligned when os is odd) */
  const pout go = {gd.q_row + os, gd.s_row + os, gd.q_col + os, gd.s_col + os};
  got.q_row = tu_malloc((size_t)nq + GUARD), got.q_col = tu_malloc((size_t)nq + GUARD);
  got.s_row = tu_malloc((size_t)nsr + GUARD), got.s_col = tu_malloc((size_t)nsc + GUARD);

  /* on the H200: the default choice, the portable kernel, and for MXFP8 both sm90 paths
   * (dequantization in the mainloop and by a pre-pass) whatever T */
  static const char *mode_env[4] = {NULL, "proj=portable", "mxfp8=prepass",
                                    "mxfp8=mainloop"}; /* MXF_CONFIG */
  /* MXF_GPU_TEST_NO_MAINLOOP=1 leaves out the in-mainloop MXFP8 path (the gpu-check's
   * racecheck run: its reports there are open, docs/decisions.md, proj_rope: MXFP8 inputs) */
  const int modes = gu_device_cc() == 90 ? (c->mx ? (no_mainloop() ? 3 : 4) : 2) : 1;
  for (int mode = 0; mode < modes; ++mode) {
    if (mode_env[mode])
      setenv("MXF_CONFIG", mode_env[mode], 1);
    else
      unsetenv("MXF_CONFIG");
    gu_dpoison(go.q_row, (size_t)nq + GUARD, 0xA5), gu_dpoison(go.q_col, (size_t)nq + GUARD, 0xA5);
    gu_dpoison(go.s_row, (size_t)nsr + GUARD, 0xA5), gu_dpoison(go.s_col, (size_t)nsc + GUARD, 0xA5);
    st = run_proj(c, MXF_DEVICE_CUDA(0), xd + c->shift * in_elem, wd + c->shift * in_elem, xsd, wsd,
                  cd + c->shift * 2, sd + c->shift * 2, &go, kname, sizeof kname);
    char mtag[280];
    snprintf(mtag, sizeof mtag, "%s [%s]", tag, st == MXF_OK ? kname : "?");
    /* a plan made with pointers off the sm90 kernel's alignment names (and runs) the
     * portable kernel */
    TU_CHECK(!((c->shift || c->oshift % 4) && tu_kernel_is(kname, "cuda/sm90")),
             "%s: a plan with misaligned pointers names %s", tag, kname);
    if (!TU_CHECK(st == MXF_OK, "%s: cuda status %s (%s)", mtag, mxf_status_string(st), mxf_last_error()))
      continue;
    kernel_counts[tu_kernel_is(kname, "cuda/sm90") ? 0 : tu_kernel_is(kname, "cuda/portable") ? 1 : 2]++;
    gu_to_host(got.q_row, go.q_row, (size_t)nq + GUARD), gu_to_host(got.q_col, go.q_col, (size_t)nq + GUARD);
    gu_to_host(got.s_row, go.s_row, (size_t)nsr + GUARD),
        gu_to_host(got.s_col, go.s_col, (size_t)nsc + GUARD);
    TU_CHECK(tu_all_bytes(got.q_row + nq, GUARD, 0xA5) && tu_all_bytes(got.q_col + nq, GUARD, 0xA5) &&
                 tu_all_bytes(got.s_row + nsr, GUARD, 0xA5) && tu_all_bytes(got.s_col + nsc, GUARD, 0xA5),
             "%s: bytes past the end of an output were written", mtag);
    const mxj_proj_outputs gh = {got.q_row, got.s_row, got.q_col, got.s_col};
    mxj_proj_counts jc[2];
    mxj_proj_judge(&ji, tb_sel, NULL, &jr, &gh, jc);
    compare_dir(c, mtag, "rows", 0, &got, &want, &jc[0]);
    compare_dir(c, mtag, "cols", 1, &got, &want, &jc[1]);
  }
  /* a plan made from the geometry alone names the sm90 kernel on cc 9.0; its run with
   * misaligned pointers is refused, naming the tensor, and writes nothing */
  if (gu_device_cc() == 90 && c->d == 192 && (c->shift || c->oshift % 4)) {
    unsetenv("MXF_CONFIG");
    gu_dpoison(go.q_row, (size_t)nq + GUARD, 0xA5);
    plan_without_data = 1;
    st = run_proj(c, MXF_DEVICE_CUDA(0), xd + c->shift * in_elem, wd + c->shift * in_elem, xsd, wsd,
                  cd + c->shift * 2, sd + c->shift * 2, &go, kname, sizeof kname);
    plan_without_data = 0;
    gu_to_host(got.q_row, go.q_row, (size_t)nq + GUARD);
    TU_CHECK(!tu_kernel_is(kname, "cuda/sm90") ||
                 (st == MXF_ERR_INVALID_VALUE && strstr(mxf_last_error(), "aligned") &&
                  tu_all_bytes(got.q_row, (size_t)nq + GUARD, 0xA5)),
             "%s [%s, planned without pointers]: a misaligned run: %s (%s)", tag, kname,
             mxf_status_string(st), mxf_last_error());
  }
  unsetenv("MXF_CONFIG");

  cudaFree(xd), cudaFree(wd), cudaFree(xsd), cudaFree(wsd), cudaFree(cd), cudaFree(sd);
  cudaFree(gd.q_row), cudaFree(gd.q_col), cudaFree(gd.s_row), cudaFree(gd.s_col);
  free(got.q_row), free(got.q_col), free(got.s_row), free(got.s_col);
  free(want.q_row), free(want.q_col), free(want.s_row), free(want.s_col);
  free(tb_sel);
  mxj_proj_ref_free(&jr);
  free_inputs(&in);
}

int main(void) {
  int rc = gu_skip_if_unavailable("test_proj_rope_gpu");
  if (rc) return rc;
  const uint64_t seed = tu_seed();
  tu_rng r;
  tu_rng_init(&r, seed);
  const int small = gu_small();
  if (no_mainloop() && gu_device_cc() == 90)
    printf("MXF_GPU_TEST_NO_MAINLOOP: the in-mainloop MXFP8 path (MXF_CONFIG=mxfp8=mainloop) is not run\n");
  static const int64_t geoms[][2] = {{192, 64}, {96, 32}};
  static const int64_t tvals[] = {1, 31, 32, 130, 2048, 4096};
  const int nt = small ? 4 : 6;
  for (int gi = 0; gi < 2; ++gi)
    for (int ti = 0; ti < nt; ++ti)
      for (int mx = 0; mx < 2; ++mx)
        for (int oi = 0; oi < 2; ++oi) {
          pcase c;
          memset(&c, 0, sizeof c);
          c.t = tvals[ti];
          c.d = geoms[gi][0];
          c.rope = geoms[gi][1];
          c.mx = mx;
          c.out_in = oi;
          /* big T: few heads keep the cpu reference fast; K one block past a 64 boundary */
          c.h = c.t >= 2048 ? 2 : (small ? 3 : 5);
          c.k = c.t >= 2048 ? 1536 : (ti % 2 ? 288 : 96);
          c.fp32 = (ti + mx + oi) % 3 == 0;
          c.data = ti < 2 ? DATA_INT : DATA_RANDOM;
          run_case(&r, &c);
        }
  /* NaN / inf injection, K not a multiple of 8 (bf16), shifted inputs, a non-default split */
  {
    pcase c = {130, 288, 3, 192, 64, 0, 1, 0, DATA_NANINF, 0, 0};
    run_case(&r, &c);
    c.mx = 1;
    run_case(&r, &c);
    pcase k100 = {67, 100, 3, 192, 64, 0, 1, 0, DATA_RANDOM, 0, 0};
    run_case(&r, &k100);
    k100.out_in = 0;
    k100.k = 40;
    run_case(&r, &k100);
    pcase sh = {77, 256, 2, 192, 64, 0, 1, 0, DATA_RANDOM, 1, 0};
    run_case(&r, &sh);
    sh.mx = 1;
    sh.out_in = 0;
    run_case(&r, &sh);
    /* outputs off their alignment (the sm90 kernel needs 4-byte codes / 2-byte row scales,
     * so a plan made with these pointers runs the portable kernel's byte stores) */
    pcase mis = {70, 96, 2, 192, 64, 0, 1, 0, DATA_RANDOM, 0, 1};
    run_case(&r, &mis);
    mis.oshift = 2;
    mis.mx = 1;
    run_case(&r, &mis);
    pcase odd = {45, 64, 4, 192, 190, 0, 0, 1, DATA_RANDOM, 0, 0}; /* nope = 2 */
    run_case(&r, &odd);
    pcase d32 = {100, 96, 3, 32, 32, 1, 1, 0, DATA_RANDOM, 0, 0}; /* nope = 0 */
    run_case(&r, &d32);
  }
  printf("test_proj_rope_gpu: kernel runs: sm90 %ld, portable %ld, other %ld\n", kernel_counts[0],
         kernel_counts[1], kernel_counts[2]);
  return tu_finish("test_proj_rope_gpu");
}

#else
int main(void) { return gu_skip_if_unavailable("test_proj_rope_gpu"); }
#endif
