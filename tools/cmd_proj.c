/*
 * cmd_proj.c — `mxfuse proj-rope`: projection GEMM + RoPE + dual MXFP8 (SPEC §2) on
 * tensors read from files.
 *
 * --check recomputes the whole chain on the host: y in f64 from the decoded inputs,
 * rounded to f32 (and bf16 unless --fp32-epilogue), RoPE in f32 without contraction,
 * then the MXFP8 rule of formats.h in both directions; it reports the SPEC §5 metrics
 * (identical scale bytes, identical codes, largest code step, and the cuDNN acceptance
 * criterion on dequantized values). On a CUDA device it also runs the CPU backend and
 * reports how many bytes agree with it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_files.h"
#include "formats.h"

/* The geometry of one request, as the tool sees it. */
typedef struct proj_geom {
  int64_t t, k, h, d, rope, nope;
  int mxfp8, w_out_in, fp32_epilogue;
} proj_geom;

static void usage(FILE *f) {
  fprintf(f, "usage: mxfuse proj-rope [--in FILE.safetensors] [--x X] [--w W] [--x-scale S] [--w-scale S]\n"
             "                        [--cos C] [--sin S] [--out DEST] [options]\n"
             "\n"
             "Per token t and head h: y = x W_h (f32), staged through bf16, RoPE on the last\n"
             "`rope` features (interleaved pairs in, halves out), then MXFP8 quantization along\n"
             "features (rows) and along tokens (columns) - SPEC section 2.\n"
             "\n"
             "Inputs (names in --in): x (T, K); w (H*D, K) with --w-layout out-in (default) or\n"
             "(K, H*D) with in-out; cos, sin (T, rope). bf16 (f32 files are rounded to bf16), or\n"
             "e4m3 codes when x_scale (T, K/32) and w_scale (e8m0) are given (the MXFP8 path).\n"
             "Outputs: out_row (T, H, D) e4m3, out_scales_row (T, H, D/32) e8m0,\n"
             "         out_col (T, H, D) e4m3, out_scales_col (ceil(T/32), H, D) e8m0.\n"
             "\n"
             "  --nope N          features without RoPE per head (default 128); D = nope + rope\n"
             "  --w-layout L      out-in (default) | in-out\n"
             "  --fp32-epilogue   skip the bf16 staging of y\n" FC_USAGE_COMMON "\n" FC_USAGE_OPERANDS);
}

/* Host reference of SPEC §2.3: fills out (T, H, D) f32 values and the four outputs, for
 * the tokens of the 32-token blocks tb with sel[tb] set. */
static int reference(fc_ctx *c, const proj_geom *p, const tio_tensor *x, const tio_tensor *w,
                     const tio_tensor *xs, const tio_tensor *wsc, const tio_tensor *cs, const tio_tensor *sn,
                     const uint8_t *sel, float *out, uint8_t *qr, uint8_t *sr, uint8_t *qc, uint8_t *sc) {
  int64_t T = p->t, K = p->k, H = p->h, D = p->d, R = p->rope, HD = H * D;
  double *xd = malloc(sizeof(double) * (size_t)(T * K)), *wd = malloc(sizeof(double) * (size_t)(D * K));
  float *yf = malloc(sizeof(float) * (size_t)D);
  if (!xd || !wd || !yf) {
    free(xd), free(wd), free(yf);
    mxf_cli_err(c->cmd, "--check: out of memory for the reference");
    return -1;
  }
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k)
      xd[t * K + k] = p->mxfp8
                          ? (double)mxf_e4m3_to_f32(((const uint8_t *)x->data)[t * K + k]) *
                                (double)mxf_e8m0_to_f32(((const uint8_t *)xs->data)[t * (K / 32) + k / 32])
                          : (double)mxf_bf16_to_f32(((const uint16_t *)x->data)[t * K + k]);
  const uint16_t *cosv = cs->data, *sinv = sn->data;
  for (int64_t h = 0; h < H; ++h) {
    fc_progress(c, "checking against the host reference", (double)h, (double)H);
    for (int64_t dd = 0; dd < D; ++dd)
      for (int64_t k = 0; k < K; ++k) {
        int64_t row = h * D + dd;
        int64_t wi = p->w_out_in ? row * K + k : k * HD + row;
        int64_t si = p->w_out_in ? row * (K / 32) + k / 32 : (k / 32) * HD + row;
        wd[dd * K + k] = p->mxfp8 ? (double)mxf_e4m3_to_f32(((const uint8_t *)w->data)[wi]) *
                                        (double)mxf_e8m0_to_f32(((const uint8_t *)wsc->data)[si])
                                  : (double)mxf_bf16_to_f32(((const uint16_t *)w->data)[wi]);
      }
    for (int64_t t = 0; t < T; ++t) {
      if (!sel[t / 32]) continue;
      for (int64_t dd = 0; dd < D; ++dd) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k)
          acc += xd[t * K + k] * wd[dd * K + k];
        yf[dd] = (float)acc;
      }
      mxf_cli_proj_epilogue(yf, p->nope, R, cosv + t * R, sinv + t * R, p->fp32_epilogue,
                            out + (t * H + h) * D);
    }
  }
  /* quantize both directions with the one rule */
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H && sel[t / 32]; ++h)
      for (int64_t b = 0; b < D / 32; ++b) {
        int64_t base = (t * H + h) * D + b * 32;
        sr[(t * H + h) * (D / 32) + b] = mxf_mx_quantize_block(out + base, 32, 1, qr + base, 1);
      }
  int64_t TB = mxf_cdiv(T, 32);
  for (int64_t tb = 0; tb < TB; ++tb) {
    if (!sel[tb]) continue;
    int n = (int)(T - tb * 32 < 32 ? T - tb * 32 : 32);
    for (int64_t hd = 0; hd < HD; ++hd) {
      int64_t base = tb * 32 * HD + hd;
      sc[tb * HD + hd] = mxf_mx_quantize_block(out + base, n, HD, qc + base, HD);
    }
  }
  fc_stage_done(c);
  free(xd), free(wd), free(yf);
  return 0;
}

/* cuDNN acceptance: share of dequantized values within 0.1 + 0.1 |ref|. */
static double within_tol(const float *ref, const uint8_t *q, const uint8_t *s, int64_t T, int64_t H,
                         int64_t D, int col, const uint8_t *sel) {
  int64_t n = T * H * D, ok = 0, seen = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t t = i / (H * D), hd = i % (H * D), h = hd / D, d = hd % D;
    if (!sel[t / 32]) continue;
    ++seen;
    uint8_t sb = col ? s[(t / 32) * H * D + hd] : s[(t * H + h) * (D / 32) + d / 32];
    double v = (double)mxf_e4m3_to_f32(q[i]) * (double)mxf_e8m0_to_f32(sb);
    double r = ref[i];
    if (isnan(r) ? isnan(v) : fabs(v - r) <= 0.1 + 0.1 * fabs(r)) ++ok;
  }
  return seen ? (double)ok / (double)seen : 1.0;
}

int mxf_cmd_proj_rope(int argc, char **argv) {
  const char *cmd = "proj-rope";
  if (mxf_cli_wants_help(argc, argv)) {
    usage(stdout);
    return MXF_CLI_OK;
  }
  fc_ctx c;
  fc_init(&c, cmd);
  const char *sx = NULL, *sw = NULL, *sxs = NULL, *sws = NULL, *scos = NULL, *ssin = NULL, *v;
  int64_t nope = 128;
  int w_out_in = 1, fp32 = 0;
  for (int i = 1; i < argc; ++i) {
    const char *o = argv[i];
    int common = fc_common_opt(&c, argc, argv, &i);
    if (common < 0) return MXF_CLI_USAGE;
    if (common) continue;
    v = NULL;
#define OPT(name) (v = mxf_cli_opt(cmd, argc, argv, &i, name))
    if (OPT("--x"))
      sx = v;
    else if (OPT("--w"))
      sw = v;
    else if (OPT("--x-scale"))
      sxs = v;
    else if (OPT("--w-scale"))
      sws = v;
    else if (OPT("--cos"))
      scos = v;
    else if (OPT("--sin"))
      ssin = v;
    else if (OPT("--nope")) {
      if (*v && mxf_cli_parse_i64(cmd, "--nope", v, 0, 1 << 20, &nope)) return MXF_CLI_USAGE;
    } else if (OPT("--w-layout")) {
      if (!strcmp(v, "out-in"))
        w_out_in = 1;
      else if (!strcmp(v, "in-out"))
        w_out_in = 0;
      else {
        mxf_cli_err(cmd, "--w-layout: '%s' is not out-in or in-out", v);
        return MXF_CLI_USAGE;
      }
    } else if (!strcmp(o, "--fp32-epilogue"))
      fp32 = 1;
    else {
      mxf_cli_err(cmd, "unknown argument %s (mxfuse proj-rope --help)", o);
      return MXF_CLI_USAGE;
    }
    if (v && !*v) return MXF_CLI_USAGE;
#undef OPT
  }
  if (fc_parse_device(&c)) return MXF_CLI_USAGE;
  const char *out = c.out;

  int rc = MXF_CLI_FAIL;
  fc_operand X, W, XS, WS, COS, SIN;
  mxf_plan *plan = NULL, *cplan = NULL;
  void *dptr[6] = {0}, *dout[4] = {0}, *cws = NULL;
  uint8_t *hout[4] = {0}, *ref[4] = {0}, *cpu[4] = {0};
  float *refv = NULL;
  uint8_t *sel = NULL;
  char sh[256];
  int hx, hw;
  if (fc_operand_get(&c, sx, "x", 1, &X) < 0 || fc_operand_get(&c, sw, "w", 1, &W) < 0 ||
      fc_operand_get(&c, scos, "cos", 1, &COS) < 0 || fc_operand_get(&c, ssin, "sin", 1, &SIN) < 0 ||
      (hx = fc_operand_get(&c, sxs, "x_scale", 0, &XS)) < 0 ||
      (hw = fc_operand_get(&c, sws, "w_scale", 0, &WS)) < 0)
    goto done;
  int mxfp8 = hx || hw;
  if (mxfp8 && !(hx && hw)) {
    mxf_cli_err(cmd, "the MXFP8 path needs both x_scale and w_scale (got only %s)", hx ? XS.what : WS.what);
    goto done;
  }
  if (mxfp8) {
    if (fc_as(&c, &X, MXF_E4M3) || fc_as(&c, &W, MXF_E4M3) || fc_as(&c, &XS, MXF_E8M0) ||
        fc_as(&c, &WS, MXF_E8M0))
      goto done;
  } else {
    if (fc_f32_to_bf16(&c, &X) || fc_f32_to_bf16(&c, &W) || fc_as(&c, &X, MXF_BF16) ||
        fc_as(&c, &W, MXF_BF16))
      goto done;
  }
  if (fc_f32_to_bf16(&c, &COS) || fc_f32_to_bf16(&c, &SIN) || fc_as(&c, &COS, MXF_BF16) ||
      fc_as(&c, &SIN, MXF_BF16))
    goto done;
  if (X.t->ndim != 2 || W.t->ndim != 2 || COS.t->ndim != 2) {
    mxf_cli_err(cmd, "x, w and cos must be 2-D (x is %s)",
                mxf_cli_shape_str(sh, sizeof sh, X.t->shape, X.t->ndim));
    goto done;
  }
  proj_geom p;
  memset(&p, 0, sizeof p);
  p.t = X.t->shape[0];
  p.k = X.t->shape[1];
  p.rope = COS.t->shape[1];
  p.nope = nope;
  p.d = nope + p.rope;
  int64_t HD = w_out_in ? W.t->shape[0] : W.t->shape[1];
  if (p.d <= 0 || HD % p.d) {
    mxf_cli_err(cmd, "%s has a projected dimension of %lld, not a multiple of D = nope + rope = %lld + %lld",
                W.what, (long long)HD, (long long)nope, (long long)p.rope);
    goto done;
  }
  p.h = HD / p.d;
  p.mxfp8 = mxfp8;
  p.w_out_in = w_out_in;
  p.fp32_epilogue = fp32;
  int64_t T = p.t, H = p.h, D = p.d, TB = mxf_cdiv(T, 32);

  mxf_proj_rope_desc d;
  memset(&d, 0, sizeof d);
  fc_operand *ins[6] = {&X, &W, &XS, &WS, &COS, &SIN};
  mxf_tensor *tin[6] = {&d.x, &d.w, &d.x_scale, &d.w_scale, &d.cos, &d.sin};
  for (int i = 0; i < 6; ++i) {
    if (!ins[i]->t) continue;
    tin[i]->dtype = ins[i]->t->dtype;
    tin[i]->ndim = ins[i]->t->ndim;
    tin[i]->device = c.device;
    for (int j = 0; j < ins[i]->t->ndim && j < MXF_MAX_DIMS; ++j)
      tin[i]->shape[j] = ins[i]->t->shape[j];
  }
  int64_t sq[3] = {T, H, D}, ssr[3] = {T, H, D / 32}, ssc[3] = {TB, H, D};
  mxf_tensor *touts[4] = {&d.out_row, &d.out_scales_row, &d.out_col, &d.out_scales_col};
  const int64_t *oshape[4] = {sq, ssr, sq, ssc};
  const char *onames[4] = {"out_row", "out_scales_row", "out_col", "out_scales_col"};
  size_t obytes[4];
  for (int i = 0; i < 4; ++i) {
    touts[i]->dtype = (i & 1) ? MXF_E8M0 : MXF_E4M3;
    touts[i]->ndim = 3;
    touts[i]->device = c.device;
    memcpy(touts[i]->shape, oshape[i], sizeof sq);
    obytes[i] = (size_t)(oshape[i][0] * oshape[i][1] * oshape[i][2]);
  }
  d.flags = (w_out_in ? MXF_PROJ_W_OUT_IN : 0) | (fp32 ? MXF_PROJ_FP32_EPILOGUE : 0);
  mxf_status st = mxf_proj_rope_plan(&plan, &d);
  if (st != MXF_OK) {
    mxf_cli_err_status(cmd, "proj_rope", st);
    goto done;
  }
  fc_stage(&c, "copying inputs");
  for (int i = 0; i < 6; ++i)
    if (ins[i]->t && !(dptr[i] = fc_upload(&c, ins[i]->t->data, ins[i]->t->nbytes))) goto done;
  for (int i = 0; i < 4; ++i)
    if (!(dout[i] = fc_dev_output(&c, obytes[i])) || !(hout[i] = tio_copy_aligned(NULL, obytes[i])))
      goto done;
  char devs[32];
  mxf_cli_device_str(devs, sizeof devs, c.device);
  mxf_proj_rope_args a = {dptr[0], dptr[1], dptr[2], dptr[3], dptr[4],
                          dptr[5], dout[0], dout[1], dout[2], dout[3]};
  double ms;
  if (fc_run(&c, MXF_CLI_PROJ_ROPE, "proj_rope", plan, &a, &ms) != MXF_OK) goto done;
  for (int i = 0; i < 4; ++i)
    if (fc_download(&c, hout[i], dout[i], obytes[i])) goto done;
  tio_tensor outs[4];
  for (int i = 0; i < 4; ++i)
    outs[i] = tio_tensor_view(onames[i], touts[i]->dtype, 3, oshape[i], hout[i]);
  if (fc_save(&c, out, outs, 4)) goto done;

  /* --check */
  int pass = 1;
  fc_cmp cmpq[2], cmps[2], cpuc[4];
  int64_t tb_step = 1;
  double crit[2] = {1, 1};
  int have_cpu = 0;
  if (c.check) {
    refv = malloc(sizeof(float) * (size_t)(T * H * D));
    for (int i = 0; i < 4; ++i)
      ref[i] = malloc(obytes[i] ? obytes[i] : 1);
    if (!refv || !ref[0] || !ref[1] || !ref[2] || !ref[3]) {
      mxf_cli_err(cmd, "--check: out of memory");
      goto done;
    }
    /* big problems: every tb_step-th block of 32 tokens (and the last), ~2^32 multiply-adds */
    double macs = (double)T * (double)(H * D) * (double)p.k;
    tb_step = macs > 4294967296.0 ? (int64_t)ceil(macs / 4294967296.0) : 1;
    sel = calloc((size_t)TB, 1);
    if (!sel) goto done;
    for (int64_t tb = 0; tb < TB; ++tb)
      sel[tb] = tb % tb_step == 0 || tb == TB - 1;
    if (reference(&c, &p, X.t, W.t, XS.t, WS.t, COS.t, SIN.t, sel, refv, ref[0], ref[1], ref[2], ref[3]))
      goto done;
    int64_t SR = H * (D / 32);
    for (int dir = 0; dir < 2; ++dir) {
      memset(&cmpq[dir], 0, sizeof cmpq[dir]);
      memset(&cmps[dir], 0, sizeof cmps[dir]);
      for (int64_t tb = 0; tb < TB; ++tb) {
        if (!sel[tb]) continue;
        int64_t nt = T - tb * 32 < 32 ? T - tb * 32 : 32, q0 = tb * 32 * HD;
        fc_cmp_add(&cmpq[dir], fc_compare_codes(MXF_E4M3, hout[2 * dir] + q0, ref[2 * dir] + q0, nt * HD),
                   q0);
        int64_t s0 = dir ? tb * HD : tb * 32 * SR, sn = dir ? HD : nt * SR;
        fc_cmp_add(&cmps[dir], fc_compare_codes(MXF_E8M0, hout[2 * dir + 1] + s0, ref[2 * dir + 1] + s0, sn),
                   s0);
      }
      crit[dir] = within_tol(refv, hout[2 * dir], hout[2 * dir + 1], T, H, D, dir, sel);
      pass &= cmps[dir].equal >= 0.999 * (double)cmps[dir].n &&
              cmpq[dir].equal >= 0.99 * (double)cmpq[dir].n && cmpq[dir].max_step <= 1 && crit[dir] >= 0.95;
    }
    if (c.device != MXF_DEVICE_CPU) {
      /* the same request on the CPU backend */
      mxf_proj_rope_desc cd = d;
      cd.x.device = cd.w.device = cd.x_scale.device = cd.w_scale.device = cd.cos.device = cd.sin.device = 0;
      cd.out_row.device = cd.out_scales_row.device = cd.out_col.device = cd.out_scales_col.device = 0;
      for (int i = 0; i < 4; ++i)
        cpu[i] = malloc(obytes[i] ? obytes[i] : 1);
      fc_stage(&c, "running the CPU backend for comparison");
      st = mxf_proj_rope_plan(&cplan, &cd);
      size_t cwsz = st == MXF_OK ? mxf_plan_workspace_size(cplan) : 0;
      if (st == MXF_OK && cwsz && !(cws = malloc(cwsz))) st = MXF_ERR_NO_MEMORY;
      if (st == MXF_OK) {
        mxf_proj_rope_args ca = {X.t->data,
                                 W.t->data,
                                 XS.t ? XS.t->data : NULL,
                                 WS.t ? WS.t->data : NULL,
                                 COS.t->data,
                                 SIN.t->data,
                                 cpu[0],
                                 cpu[1],
                                 cpu[2],
                                 cpu[3]};
        st = mxf_proj_rope_run(cplan, &ca, cws, cwsz, NULL);
      }
      fc_stage_done(&c);
      if (st != MXF_OK) {
        mxf_cli_err_status(cmd, "proj_rope on the CPU backend (for --check)", st);
      } else {
        have_cpu = 1;
        for (int i = 0; i < 4; ++i)
          cpuc[i] = fc_compare_codes((i & 1) ? MXF_E8M0 : MXF_E4M3, hout[i], cpu[i], (int64_t)obytes[i]);
        for (int dir = 0; dir < 2; ++dir)
          pass &= cpuc[2 * dir + 1].equal >= 0.999 * (double)cpuc[2 * dir + 1].n &&
                  cpuc[2 * dir].equal >= 0.99 * (double)cpuc[2 * dir].n && cpuc[2 * dir].max_step <= 1;
      }
    }
  }
  const char *dirname[2] = {"row", "col"};
  if (c.json) {
    printf("{\"command\": \"proj-rope\", \"device\": \"%s\", \"backend\": ", devs);
    mxf_cli_json_str(stdout, mxf_plan_backend(plan));
    printf(", \"t\": %lld, \"k\": %lld, \"h\": %lld, \"d\": %lld, \"rope\": %lld, \"path\": \"%s\", "
           "\"w_layout\": \"%s\", \"fp32_epilogue\": %s, \"time_ms\": %.3f, ",
           (long long)T, (long long)p.k, (long long)H, (long long)D, (long long)p.rope,
           mxfp8 ? "mxfp8" : "bf16", w_out_in ? "out-in" : "in-out", fp32 ? "true" : "false", ms);
    fc_json_outputs(stdout, out, outs, 4);
    if (c.check) {
      printf(", \"check\": {\"passed\": %s, \"token_block_step\": %lld", pass ? "true" : "false",
             (long long)tb_step);
      for (int dir = 0; dir < 2; ++dir) {
        printf(", \"%s\": {\"scales_equal\": %.6f, \"codes_equal\": %.6f, \"max_code_step\": %lld, "
               "\"within_0.1\": %.6f",
               dirname[dir], fc_cmp_equal_share(&cmps[dir]), fc_cmp_equal_share(&cmpq[dir]),
               fc_cmp_max_step(&cmpq[dir]), crit[dir]);
        if (have_cpu)
          printf(", \"cpu_scales_equal\": %.6f, \"cpu_codes_equal\": %.6f",
                 fc_cmp_equal_share(&cpuc[2 * dir + 1]), fc_cmp_equal_share(&cpuc[2 * dir]));
        printf("}");
      }
      printf("}");
    }
    printf("}\n");
  } else {
    printf("proj-rope: T=%lld K=%lld H=%lld D=%lld (nope %lld, rope %lld), %s path, w %s%s\n", (long long)T,
           (long long)p.k, (long long)H, (long long)D, (long long)nope, (long long)p.rope,
           mxfp8 ? "MXFP8" : "BF16", w_out_in ? "out-in" : "in-out", fp32 ? ", fp32 epilogue" : "");
    printf("  device %s, backend %s, %.3f ms\n", devs, mxf_plan_backend(plan), ms);
    if (out) printf("  wrote out_row, out_scales_row, out_col, out_scales_col to %s\n", out);
    if (c.check) {
      for (int dir = 0; dir < 2; ++dir) {
        printf("  check %s: scales equal %.4f%% (need >= 99.9%%), codes equal %.4f%% (need >= 99%%), max "
               "step %lld "
               "(limit 1), within 0.1+0.1|ref| %.2f%% (need >= 95%%)\n",
               dirname[dir], 100.0 * fc_cmp_equal_share(&cmps[dir]), 100.0 * fc_cmp_equal_share(&cmpq[dir]),
               fc_cmp_max_step(&cmpq[dir]), 100.0 * crit[dir]);
        if (have_cpu)
          printf("  vs cpu backend %s: scales equal %.4f%%, codes equal %.4f%%, max step %lld\n",
                 dirname[dir], 100.0 * fc_cmp_equal_share(&cpuc[2 * dir + 1]),
                 100.0 * fc_cmp_equal_share(&cpuc[2 * dir]), fc_cmp_max_step(&cpuc[2 * dir]));
      }
      if (tb_step > 1)
        printf("  check: sampled every %lld-th block of 32 tokens and the last one\n", (long long)tb_step);
      printf("  check: %s\n", pass ? "passed" : "FAILED");
    }
  }
  rc = pass ? MXF_CLI_OK : MXF_CLI_FAIL;
done:
  fc_stage_done(&c);
  mxf_plan_destroy(plan);
  mxf_plan_destroy(cplan);
  for (int i = 0; i < 6; ++i)
    fc_dev_free(&c, dptr[i]);
  for (int i = 0; i < 4; ++i) {
    mxf_cli_dev_free(c.device, dout[i]);
    free(hout[i]);
    free(ref[i]);
    free(cpu[i]);
  }
  free(cws);
  free(refv);
  free(sel);
  fc_free(&c);
  return rc;
}
