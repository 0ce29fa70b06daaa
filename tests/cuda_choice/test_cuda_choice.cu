/*
 * test_cuda_choice — the CUDA backend's kernel choice, run on the CPU: drives each op's
 * chooser (gemm_amax_heuristics.cu, proj_rope_heuristics.cu) with the properties of three
 * devices (cc 9.0 with 132 SMs, cc 8.0 with 108, cc 8.9 with 142) over a table of problems
 * (the benchmarks' and the GPU tests' shapes, every format, mixed pair, layout and C dtype,
 * M from 1 to 16384, proj_rope over T) and MXF_CONFIG overrides, prints each chosen config
 * (kernel, geometry, workspace size and layout) as one line, and compares the lines with a
 * golden file. No GPU and no CUDA runtime call.
 *
 *   test_cuda_choice GOLDEN           compare; print the first differing lines
 *   test_cuda_choice --record GOLDEN  rewrite GOLDEN from the current choosers
 *
 * A change of the choice shows here as a diff of the golden file, to be recorded on purpose.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "core/validate.h" /* a C header */
}
#include "cuda/gemm_amax_config.h"
#include "cuda/proj_rope_config.h"

/* ------------------------------------------------------------ output */
static char *g_out;
static size_t g_len, g_cap;
static long g_problems;

static void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void out(const char *fmt, ...) {
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  const int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (g_len + (size_t)n + 1 > g_cap) {
    g_cap = (g_len + (size_t)n + 1) * 2;
    g_out = static_cast<char *>(realloc(g_out, g_cap));
    if (!g_out) abort();
  }
  memcpy(g_out + g_len, line, (size_t)n + 1);
  g_len += (size_t)n;
}

/* ------------------------------------------------------------ devices and overrides */
struct device {
  const char *name;
  mxf_cuda_device_info_t info;
};
/* compute capability, SM count and opt-in shared memory per block of an H100 / H200
 * (SXM), an A100 and an L40S */
static const device k_devices[] = {
    {"cc90", {9, 0, 90, 132, 232448}}, {"cc80", {8, 0, 80, 108, 166912}}, {"cc89", {8, 9, 89, 142, 101376}}};
enum { N_DEVICES = sizeof k_devices / sizeof k_devices[0] };

static bool override_of(const char *text, mxf_cuda_override *ov) {
  if (mxf_override_parse(text, &mxf_cuda_config_keys, ov, sizeof *ov) != MXF_OK) {
    fprintf(stderr, "test_cuda_choice: MXF_CONFIG '%s' refused: %s\n", text, mxf_last_error());
    return false;
  }
  return true;
}

/* ------------------------------------------------------------ gemm_amax */
static const char *dt(mxf_dtype d) { return mxf_dtype_name(d); }

/* The sm_90a geometry's fields, in the order of k_sm90_legend. */
static const char k_sm90_legend[] =
    "sm90 geometry: fmt nkb rb kbytes bdt bany kbytes_b tiles_m tiles_n nks ws_a ws_b grid whole split tail "
    "ws_part ws_flags f16 ws_f16 bp ws_bp bc_group swapped nb wg sfraw c_ring | offsets: wb w16 wb16 fac_a "
    "fac_b "
    "tile_ok_a tile_ok_b part flags bp f16_offset";
static void print_sm90_geometry(const char *tag, const mxf_sm90::geometry &g) {
  const mxf_sm90::ws_layout &w = g.ws;
  out(" %s{%d %d %d %lld %s %d %lld %lld %lld %lld %zu %zu %lld %lld %lld %lld %zu %zu %d %zu %d %zu %d %d "
      "%d %d %d "
      "%d | %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %lld}",
      tag, g.fmt, g.nkb, g.rb, (long long)g.kbytes, dt(g.bdt), g.bany, (long long)g.kbytes_b,
      (long long)g.tiles_m, (long long)g.tiles_n, (long long)g.nks, g.ws_a, g.ws_b, (long long)g.grid,
      (long long)g.whole, (long long)g.split, (long long)g.tail, g.ws_part, g.ws_flags, g.f16, g.ws_f16, g.bp,
      g.ws_bp, g.bc_group, g.swapped, g.nb, g.wg, g.sfraw, g.c_ring, w.wb, w.w16, w.wb16, w.fac_a, w.fac_b,
      w.tile_ok_a, w.tile_ok_b, w.part, w.flags, w.bp, (long long)w.f16_offset);
}

static void print_gemm_config(const mxf_cuda_gemm_config &c, const char *name) {
  out(" -> %s ws=%zu", name, c.workspace);
  if (c.kernel == MXF_KERNEL_SM90) {
    out(" run{%lldx%lld %s/%s}", (long long)c.sm90.run.m, (long long)c.sm90.run.n, dt(c.sm90.run.a_fmt),
        dt(c.sm90.run.b_fmt));
    print_sm90_geometry("g", c.sm90.g);
    if (c.sm90.g.wg == 3) print_sm90_geometry("g2", c.sm90.g2);
  } else if (c.kernel == MXF_KERNEL_GEMV) {
    const mxf_gemv::geometry &g = c.gemv;
    out(" gemv{mt=%d tr=%d warps=%d tiles=%d splits=%d cps=%d cpw=%d nchunks=%d ws_a=%zu ws_counters=%zu "
        "ws_part=%zu off_counters=%zu off_part=%zu pdl=%d}",
        g.mt, g.tr, g.warps, g.tiles, g.splits, g.chunks_per_split, g.chunks_per_warp, g.nchunks, g.ws_a,
        g.ws_counters, g.ws_part, g.off_counters, g.off_part, g.pdl);
  }
  out("\n");
}

struct gemm_case {
  int64_t m, n, k, l;
  mxf_dtype fa, fb, sfa, sfb;
  int sf_vec;
  mxf_dtype c;
  int a_mmajor, b_nmajor, c_mmajor, sfa_swz, sfb_swz, pad;
};

static int bits_of(mxf_dtype d) {
  return d == MXF_F32 ? 32 : (d == MXF_F16 || d == MXF_BF16) ? 16 : d == MXF_E2M1 ? 4 : 8;
}
static int64_t rup(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

/* a (rows, cols, l) matrix, unit stride along cols when col_unit, leading dimension and
 * batch stride rounded to 16 bytes (plus `pad` values, then rounded) */
static mxf_tensor mat(mxf_dtype d, int64_t rows, int64_t cols, int64_t l, int col_unit, int pad) {
  mxf_tensor t;
  memset(&t, 0, sizeof t);
  t.dtype = d;
  t.ndim = 3;
  t.shape[0] = rows, t.shape[1] = cols, t.shape[2] = l;
  const int64_t per16 = 128 / bits_of(d), inner = col_unit ? cols : rows, outer = col_unit ? rows : cols;
  const int64_t ld = rup(inner + (pad ? 24 : 0), per16), span = (outer - 1) * ld + inner;
  t.stride[0] = col_unit ? ld : 1;
  t.stride[1] = col_unit ? 1 : ld;
  t.stride[2] = rup(span + (pad ? 40 : 0), per16);
  return t;
}

static mxf_tensor sf(mxf_dtype d, int swz, int64_t mn, int64_t kbs, int64_t l) {
  mxf_tensor t;
  memset(&t, 0, sizeof t);
  t.dtype = d;
  if (swz) {
    const int64_t s[6] = {l, (mn + 127) / 128, (kbs + 3) / 4, 32, 4, 4};
    t.ndim = 6;
    for (int i = 0; i < 6; ++i)
      t.shape[i] = s[i];
  } else {
    t.ndim = 3, t.shape[0] = l, t.shape[1] = mn, t.shape[2] = kbs;
  }
  return t;
}

static const char *const k_gemm_configs[] = {"",
                                             "gemm=portable",
                                             "gemm=gemv",
                                             "gemm=sm90",
                                             "swap=on,wg3=on",
                                             "swap=off,f16=on",
                                             "swap=off,bpre=on,bcwide=on",
                                             "swap=off,bpre=off,f16=off",
                                             "wg3=off,sfraw=off",
                                             "cring=off,bcwide=off"};

/* every device under the default choice; with `switches`, also every override (the sm_90a
 * kernel's switches on cc 9.0 only) */
static int run_gemm(const gemm_case &gc, bool switches = false) {
  mxf_gemm_amax_desc d;
  memset(&d, 0, sizeof d);
  const int64_t kb = (gc.k + gc.sf_vec - 1) / gc.sf_vec;
  d.a = mat(gc.fa, gc.m, gc.k, gc.l, !gc.a_mmajor, gc.pad);
  d.b = mat(gc.fb, gc.n, gc.k, gc.l, !gc.b_nmajor, gc.pad);
  if (gc.fa != MXF_BF16) d.sfa = sf(gc.sfa, gc.sfa_swz, gc.m, kb, gc.l);
  d.sfb = sf(gc.sfb, gc.sfb_swz, gc.n, kb, gc.l);
  d.c = mat(gc.c, gc.m, gc.n, gc.l, !gc.c_mmajor, gc.pad);
  const int64_t one = 1;
  memset(&d.amax, 0, sizeof d.amax);
  d.amax.dtype = MXF_F32, d.amax.ndim = 1, d.amax.shape[0] = one;
  d.sf_vec = gc.sf_vec;
  mxf_gemm_problem p;
  int32_t device = 0;
  char head[256];
  snprintf(head, sizeof head, "gemm %lldx%lldx%lld l=%lld %s/%s sf=%s/%s/%d c=%s %s%s%s sf=%s%s%s",
           (long long)gc.m, (long long)gc.n, (long long)gc.k, (long long)gc.l, dt(gc.fa), dt(gc.fb),
           gc.fa == MXF_BF16 ? "-" : dt(gc.sfa), dt(gc.sfb), gc.sf_vec, dt(gc.c), gc.a_mmajor ? "A:m" : "A:k",
           gc.b_nmajor ? ",B:n" : ",B:k", gc.c_mmajor ? ",C:m" : ",C:n", gc.sfa_swz ? "swz" : "cmp",
           gc.sfb_swz ? ",swz" : ",cmp", gc.pad ? " pad" : "");
  if (mxf_validate_gemm_amax(&d, 0, &p, &device) != MXF_OK) {
    out("%s: refused by the validator: %s\n", head, mxf_last_error());
    return 1;
  }
  ++g_problems;
  out("%s\n", head);
  for (int di = 0; di < N_DEVICES; ++di)
    for (size_t ci = 0; ci < sizeof k_gemm_configs / sizeof *k_gemm_configs; ++ci) {
      if (ci > 0 && (!switches || (di > 0 && ci != 1 && ci != 2))) continue;
      mxf_cuda_override ov;
      if (!override_of(k_gemm_configs[ci], &ov)) return 0;
      mxf_cuda_gemm_config cfg;
      char name[96];
      if (mxf_cuda_gemm_amax_choose(&p, &k_devices[di].info, &ov, &cfg, name, sizeof name) != MXF_OK) {
        out("  %s %s -> refused: %s\n", k_devices[di].name, k_gemm_configs[ci], mxf_last_error());
        continue;
      }
      out("  %s %s", k_devices[di].name, k_gemm_configs[ci]);
      print_gemm_config(cfg, name);
    }
  return 1;
}

struct fmt {
  mxf_dtype fa, fb, sfa, sfb;
  int sf_vec;
};
static const fmt k_formats[] = {
    {MXF_E4M3, MXF_E4M3, MXF_E8M0, MXF_E8M0, 32}, {MXF_E5M2, MXF_E5M2, MXF_E8M0, MXF_E8M0, 32},
    {MXF_E2M1, MXF_E2M1, MXF_E8M0, MXF_E8M0, 32}, {MXF_E2M1, MXF_E2M1, MXF_E4M3, MXF_E4M3, 16},
    {MXF_E2M1, MXF_E2M1, MXF_E8M0, MXF_E8M0, 16},
};
static const fmt k_mixed[] = {
    {MXF_BF16, MXF_E2M1, MXF_E8M0, MXF_E8M0, 32}, {MXF_BF16, MXF_E4M3, MXF_E8M0, MXF_E8M0, 32},
    {MXF_BF16, MXF_E5M2, MXF_E8M0, MXF_E8M0, 32}, {MXF_BF16, MXF_E2M1, MXF_E8M0, MXF_E4M3, 16},
    {MXF_E4M3, MXF_E2M1, MXF_E8M0, MXF_E8M0, 32}, {MXF_E5M2, MXF_E2M1, MXF_E8M0, MXF_E8M0, 32},
    {MXF_E2M1, MXF_E4M3, MXF_E8M0, MXF_E8M0, 32}, {MXF_E4M3, MXF_E5M2, MXF_E8M0, MXF_E8M0, 32},
    {MXF_E2M1, MXF_E2M1, MXF_E4M3, MXF_E8M0, 16},
};
static const mxf_dtype k_cdtypes[] = {MXF_F32, MXF_F16, MXF_BF16, MXF_E4M3, MXF_E5M2, MXF_E2M1};
#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

static gemm_case make(const fmt &f, mxf_dtype c, int64_t m, int64_t n, int64_t k, int64_t l) {
  gemm_case g;
  memset(&g, 0, sizeof g);
  g.fa = f.fa, g.fb = f.fb, g.sfa = f.sfa, g.sfb = f.sfb, g.sf_vec = f.sf_vec, g.c = c;
  g.m = m, g.n = c == MXF_E2M1 && (n & 1) ? n + 1 : n, g.l = l;
  g.k = (f.fa == MXF_E2M1 || f.fb == MXF_E2M1) && (k & 1) ? k + 1 : k;
  g.sfa_swz = g.sfb_swz = 1;
  return g;
}

static int gemm_table(void) {
  int ok = 1;
  /* the benchmark's gemm section: its shapes, every format, bf16 and f32 C, swizzled scales */
  static const int64_t bench[][3] = {
      {4096, 24576, 1536}, {16384, 24576, 1536}, {8192, 8192, 8192}, {2048, 7168, 2048}, {128, 24576, 1536}};
  for (int si = 0; si < COUNT(bench); ++si)
    for (int fi = 0; fi < COUNT(k_formats); ++fi)
      for (int c = 0; c < 3; c += 2)
        ok &= run_gemm(make(k_formats[fi], k_cdtypes[c], bench[si][0], bench[si][1], bench[si][2], 1), true);
  /* the benchmark's mixed section: M in {1, 16, 64, 128, 4096} on DeepSeek-V3's weights, every
   * mixed pair, bf16 C */
  static const int64_t nk[][2] = {{7168, 2048}, {2048, 7168}, {24576, 1536}};
  static const int64_t ms[] = {1, 16, 64, 128, 4096};
  for (int i = 0; i < COUNT(nk); ++i)
    for (int j = 0; j < COUNT(ms); ++j)
      for (int fi = 0; fi < COUNT(k_mixed); ++fi)
        ok &= run_gemm(make(k_mixed[fi], MXF_BF16, ms[j], nk[i][0], nk[i][1], 1));
  /* M from 1 to 16384: every format and the decode pairs on one weight shape */
  static const int64_t msweep[] = {1,   2,   3,   8,   9,    15,   16,   17,   31,   32,   33,
                                   63,  64,  65,  100, 127,  128,  129,  192,  255,  256,  257,
                                   384, 512, 640, 768, 1024, 1536, 2048, 3072, 4096, 8192, 16384};
  for (int j = 0; j < COUNT(msweep); ++j) {
    for (int fi = 0; fi < COUNT(k_formats); ++fi)
      ok &= run_gemm(make(k_formats[fi], MXF_BF16, msweep[j], 7168, 2048, 1));
    ok &= run_gemm(make(k_mixed[0], MXF_BF16, msweep[j], 7168, 2048, 1));
    ok &= run_gemm(make(k_mixed[4], MXF_BF16, msweep[j], 24576, 1536, 1));
  }
  /* the GPU test's named shapes, each format, f32 and bf16 C */
  static const int64_t named[][4] = {{300, 200, 96, 1}, {1, 4096, 1024, 1}, {77, 45, 33, 3},
                                     {129, 257, 64, 2}, {128, 128, 32, 1},  {5, 3, 34, 1},
                                     {260, 9, 130, 3}};
  for (int si = 0; si < COUNT(named); ++si)
    for (int fi = 0; fi < COUNT(k_formats); ++fi)
      for (int c = 0; c < 3; c += 2)
        ok &= run_gemm(
            make(k_formats[fi], k_cdtypes[c], named[si][0], named[si][1], named[si][2], named[si][3]), true);
  /* every format x every C dtype, row- and column-major C, compact and swizzled scales */
  for (int fi = 0; fi < COUNT(k_formats); ++fi)
    for (int c = 0; c < COUNT(k_cdtypes); ++c)
      for (int v = 0; v < 2; ++v) {
        gemm_case g = make(k_formats[fi], k_cdtypes[c], 300, 600, 256, 2);
        g.c_mmajor = v && k_cdtypes[c] != MXF_E2M1;
        g.sfa_swz = g.sfb_swz = v;
        ok &= run_gemm(g);
      }
  /* the layouts, exhaustively, for MXFP8 on an odd shape, padded */
  for (int lay = 0; lay < 16; ++lay) {
    gemm_case g = make(k_formats[lay & 1], lay & 8 ? MXF_BF16 : MXF_F32, 133, 71, 97, 2);
    g.a_mmajor = (lay >> 1) & 1, g.b_nmajor = (lay >> 2) & 1, g.c_mmajor = (lay >> 3) & 1;
    g.sfa_swz = lay & 1, g.sfb_swz = !(lay & 1), g.pad = 1;
    ok &= run_gemm(g);
  }
  /* whole tiles, more tiles than a wave, several whole tiles a CTA, the f16 path's shapes */
  static const int64_t whole[][4] = {{300, 600, 128, 1},   {256, 512, 64, 2},    {128, 384, 160, 2},
                                     {129, 300, 200, 34},  {256, 512, 128, 34},  {200, 260, 192, 34},
                                     {100, 300, 200, 60},  {128, 512, 128, 40},  {1024, 8192, 96, 1},
                                     {2048, 4096, 320, 1}, {1280, 2304, 200, 3}, {2048, 4096, 192, 1},
                                     {1280, 2304, 320, 2}, {200, 300, 64, 2},    {300, 600, 256, 2}};
  for (int si = 0; si < COUNT(whole); ++si)
    for (int fi = 0; fi < 3; ++fi)
      for (int c = 0; c < 3; ++c)
        ok &= run_gemm(
            make(k_formats[fi], k_cdtypes[c], whole[si][0], whole[si][1], whole[si][2], whole[si][3]),
            c != 1);
  /* the mixed pairs: the GPU test's decode shapes and larger ones, each C dtype once */
  static const int64_t dec[][4] = {
      {1, 2100, 1024, 1},  {16, 1000, 2048, 1}, {64, 700, 544, 2}, {128, 515, 1056, 1}, {7, 4096, 96, 1},
      {2, 34000, 2112, 1}, {3, 8000, 1568, 1},  {1, 4500, 256, 2}, {1, 4300, 8256, 1},  {600, 520, 320, 1},
      {1100, 316, 192, 3}, {50, 70, 96, 1},     {77, 45, 33, 3},   {300, 200, 96, 1}};
  for (int fi = 0; fi < COUNT(k_mixed); ++fi)
    for (int si = 0; si < COUNT(dec); ++si) {
      gemm_case g =
          make(k_mixed[fi], k_cdtypes[(si + fi) % 6], dec[si][0], dec[si][1], dec[si][2], dec[si][3]);
      g.sfa_swz = g.sfb_swz = si & 1;
      g.c_mmajor = si == 9 && g.c != MXF_E2M1;
      ok &= run_gemm(g, true);
    }
  /* the CUDA-graph test's shapes */
  {
    gemm_case g = make(k_formats[0], MXF_BF16, 300, 200, 96, 1);
    g.sfa_swz = g.sfb_swz = 0;
    ok &= run_gemm(g);
    g = make(k_formats[3], MXF_F32, 257, 132, 160, 2);
    ok &= run_gemm(g);
    g = make(k_formats[2], MXF_E4M3, 64, 1008, 512, 1);
    g.sfa_swz = g.sfb_swz = 0;
    ok &= run_gemm(g);
  }
  return ok;
}

/* ------------------------------------------------------------ proj_rope */
static const char *const k_proj_configs[] = {"", "proj=portable", "mxfp8=mainloop", "mxfp8=prepass"};

static int run_proj(int64_t t, int64_t k, int64_t h, int64_t d, int64_t rope, int mx, int out_in, int fp32) {
  const int64_t n = h * d;
  mxf_proj_rope_desc desc;
  memset(&desc, 0, sizeof desc);
  auto t2 = [](mxf_dtype dtype, int64_t a, int64_t b) {
    mxf_tensor x;
    memset(&x, 0, sizeof x);
    x.dtype = dtype, x.ndim = 2, x.shape[0] = a, x.shape[1] = b;
    return x;
  };
  auto t3 = [](mxf_dtype dtype, int64_t a, int64_t b, int64_t c) {
    mxf_tensor x;
    memset(&x, 0, sizeof x);
    x.dtype = dtype, x.ndim = 3, x.shape[0] = a, x.shape[1] = b, x.shape[2] = c;
    return x;
  };
  const mxf_dtype in = mx ? MXF_E4M3 : MXF_BF16;
  desc.x = t2(in, t, k);
  desc.w = out_in ? t2(in, n, k) : t2(in, k, n);
  if (mx) {
    desc.x_scale = t2(MXF_E8M0, t, k / 32);
    desc.w_scale = out_in ? t2(MXF_E8M0, n, k / 32) : t2(MXF_E8M0, k / 32, n);
  }
  desc.cos = t2(MXF_BF16, t, rope);
  desc.sin = t2(MXF_BF16, t, rope);
  desc.out_row = t3(MXF_E4M3, t, h, d);
  desc.out_scales_row = t3(MXF_E8M0, t, h, d / 32);
  desc.out_col = t3(MXF_E4M3, t, h, d);
  desc.out_scales_col = t3(MXF_E8M0, (t + 31) / 32, h, d);
  desc.flags = (out_in ? MXF_PROJ_W_OUT_IN : 0u) | (fp32 ? MXF_PROJ_FP32_EPILOGUE : 0u);
  char head[160];
  snprintf(head, sizeof head, "proj T=%lld K=%lld H=%lld D=%lld rope=%lld %s%s%s", (long long)t, (long long)k,
           (long long)h, (long long)d, (long long)rope, mx ? "mxfp8" : "bf16", out_in ? " out-in" : " in-out",
           fp32 ? " fp32-epilogue" : "");
  mxf_proj_problem p;
  int32_t device = 0;
  if (mxf_validate_proj_rope(&desc, 0, &p, &device) != MXF_OK) {
    out("%s: refused by the validator: %s\n", head, mxf_last_error());
    return 1;
  }
  ++g_problems;
  out("%s\n", head);
  for (int di = 0; di < N_DEVICES; ++di)
    for (int ci = 0; ci < COUNT(k_proj_configs); ++ci) {
      if (ci > 1 && (di > 0 || !mx)) continue;
      mxf_cuda_override ov;
      if (!override_of(k_proj_configs[ci], &ov)) return 0;
      mxf_cuda_proj_config cfg;
      char name[96];
      if (mxf_cuda_proj_rope_choose(&p, &k_devices[di].info, &ov, &cfg, name, sizeof name) != MXF_OK) {
        out("  %s %s -> refused: %s\n", k_devices[di].name, k_proj_configs[ci], mxf_last_error());
        continue;
      }
      out("  %s %s -> %s ws=%zu portable{nc64=%d smem=%d ws=%zu}", k_devices[di].name, k_proj_configs[ci],
          name, cfg.workspace, cfg.portable.nc64, cfg.portable.smem, cfg.portable.workspace);
      if (cfg.kernel == MXF_KERNEL_SM90) {
        const mxf_proj90::geometry &g = cfg.sm90;
        out(" sm90{mainloop=%d variant=%d tiles_m=%lld nks=%lld grid=%u sf_blocks=%u ws=%zu off_w=%zu}",
            g.mainloop, g.variant, (long long)g.tiles_m, (long long)g.nks, g.grid, g.sf_blocks, g.workspace,
            g.off_w);
      }
      out("\n");
    }
  return 1;
}

static int proj_table(void) {
  int ok = 1;
  /* the benchmark's (K=1536 H=128 D=192, DeepSeek's q_b) and the GPU test's T values */
  static const int64_t tv[] = {1,   7,   31,  32,   33,   64,   127,  128,  129,
                               130, 256, 512, 1000, 1024, 2048, 4096, 8192, 16384};
  for (int i = 0; i < COUNT(tv); ++i)
    for (int mx = 0; mx < 2; ++mx)
      for (int out_in = 0; out_in < 2; ++out_in)
        ok &= run_proj(tv[i], 1536, 128, 192, 64, mx, out_in, 0);
  for (int i = 0; i < COUNT(tv); i += 3)
    for (int mx = 0; mx < 2; ++mx)
      ok &= run_proj(tv[i], 1536, 128, 192, 64, mx, 1, 1);
  /* the GPU test's other geometries */
  static const int64_t tt[] = {1, 31, 32, 130, 2048, 4096};
  for (int i = 0; i < COUNT(tt); ++i)
    for (int mx = 0; mx < 2; ++mx)
      ok &= run_proj(tt[i], 256, 4, 96, 32, mx, i & 1, 0);
  ok &= run_proj(130, 288, 3, 192, 64, 0, 1, 0);
  ok &= run_proj(67, 100, 3, 192, 64, 0, 1, 0);
  ok &= run_proj(77, 256, 2, 192, 64, 0, 1, 0);
  ok &= run_proj(70, 96, 2, 192, 64, 0, 1, 0);
  ok &= run_proj(45, 64, 4, 192, 190, 0, 0, 1);
  ok &= run_proj(100, 96, 3, 32, 32, 1, 1, 0);
  /* D beyond what a CTA's shared memory stages: the portable kernel's Y tiles in the workspace */
  ok &= run_proj(100, 64, 2, 1024, 64, 0, 1, 0);
  ok &= run_proj(100, 64, 1, 20480, 64, 1, 1, 0);
  return ok;
}

/* ------------------------------------------------------------ main */
static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  const long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = static_cast<char *>(malloc((size_t)n + 1));
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) free(buf), buf = NULL;
  fclose(f);
  if (buf) buf[n] = 0, *len = (size_t)n;
  return buf;
}

/* Prints the first differing lines of want and got (up to 10), and how many differ. */
static int compare(const char *want, const char *got) {
  int shown = 0;
  long line = 0, differ = 0;
  const char *w = want, *g = got;
  while (*w || *g) {
    ++line;
    const char *we = strchr(w, '\n'), *ge = strchr(g, '\n');
    const size_t wn = we ? (size_t)(we - w) : strlen(w), gn = ge ? (size_t)(ge - g) : strlen(g);
    if (wn != gn || memcmp(w, g, wn) != 0) {
      ++differ;
      if (shown++ < 10)
        printf("line %ld:\n  golden: %.*s\n  now:    %.*s\n", line, (int)wn, *w ? w : "(end)", (int)gn,
               *g ? g : "(end)");
    }
    w += wn + (we != NULL);
    g += gn + (ge != NULL);
  }
  return differ == 0 ? 0 : (printf("%ld of %ld lines differ\n", differ, line), 1);
}

int main(int argc, char **argv) {
  const bool record = argc == 3 && strcmp(argv[1], "--record") == 0;
  if (argc != 2 && !record) {
    fprintf(stderr, "usage: test_cuda_choice [--record] GOLDEN\n");
    return 2;
  }
  const char *path = argv[argc - 1];
  out("%s\n", k_sm90_legend);
  if (!gemm_table() || !proj_table()) return 1;
  /* quantize / dequantize: one kernel, no workspace, no choice at plan time */
  out("quantize, dequantize -> cuda/portable ws=0\n");
  printf("test_cuda_choice: %ld problems, %zu bytes of configs\n", g_problems, g_len);
  if (record) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(g_out, 1, g_len, f) != g_len || fclose(f) != 0) {
      fprintf(stderr, "test_cuda_choice: cannot write %s\n", path);
      return 1;
    }
    printf("test_cuda_choice: recorded %s\n", path);
    return 0;
  }
  size_t len = 0;
  char *want = read_file(path, &len);
  if (!want) {
    fprintf(stderr, "test_cuda_choice: cannot read %s (record it with --record)\n", path);
    return 1;
  }
  const int rc = compare(want, g_out);
  printf("test_cuda_choice: %s\n",
         rc ? "FAILED: the choice differs from the golden file" : "configs identical");
  free(want);
  free(g_out);
  return rc;
}
