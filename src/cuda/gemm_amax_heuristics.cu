/*
 * gemm_amax_heuristics.cu — gemm_amax's kernel choice on the CUDA backend, made once when
 * a plan is made (docs/kernels/): which kernel, and for the sm_90a kernel its config
 * (swap, tile, warpgroups, B pre-pass, f16 path, split-K, C stores). Every rule is a named
 * predicate fitted to measurements (docs/decisions.md); MXF_CONFIG (cuda_config.c) may
 * force each. The launches only read the config. Host code.
 *
 *   mixed pair (A bf16 or another MX format than B), M <= GEMV_M_MAX, MX weights that
 *   the weight-streaming kernel takes               -> cuda/gemv     (portable/gemm_amax_gemv.cu)
 *   cc 9.0 and the sm_90a kernel takes the problem  -> cuda/sm90     (sm90/)
 *   a mixed pair the weight-streaming kernel takes  -> cuda/gemv
 *   any other problem on cc >= 8.0                  -> cuda/portable (portable/)
 * gemm=portable|gemv|sm90 puts that kernel first wherever it takes the problem (portable
 * takes every one).
 */
#include <stdio.h>
#include <string.h>

#include "cuda/gemm_amax_config.h"
#include "cuda/portable/gemv_shape.h"

namespace mxf_sm90 {

/* An override field: the value asked for, or the rule's when it asks for none. */
static int pick(int8_t asked, bool rule) { return asked != MXF_CHOOSE ? asked : rule; }

/* Whether (codes v, scales sf per sf_vec) is an MX operand the kernel takes, and its FMT:
 * e4m3 / e5m2 with e8m0 per 32, e2m1 with e8m0 per 32 or 16 or ue4m3 per 16. */
static bool mx_operand(mxf_dtype v, mxf_dtype sf, int sf_vec, int *fmt) {
  if (v == MXF_E4M3 || v == MXF_E5M2) {
    *fmt = v == MXF_E4M3 ? FMT_E4M3 : FMT_E5M2;
    return sf == MXF_E8M0 && sf_vec == 32;
  }
  *fmt = FMT_E2M1;
  return v == MXF_E2M1 &&
         ((sf == MXF_E8M0 && (sf_vec == 32 || sf_vec == 16)) || (sf == MXF_E4M3 && sf_vec == 16));
}

/* The B pre-pass's stage group (gemm_amax_sm90.cu, "The B pre-pass"): BC_STAGES, or 2
 * when groups of BC_STAGES give fewer than 8 warps a SM. */
static bool wide_groups_fill(int64_t rows, int64_t nks, int64_t sms) {
  return (rows + 3) / 4 * ((nks + BC_STAGES - 1) / BC_STAGES) >= 8 * sms;
}

/* A's scales may be read by the kernel as they are (kernel_args::sfa_raw): e8m0 in the
 * swizzled layout, on the narrow tiles (the launch tests the pointer's alignment). The
 * wide pre-pass kernels can too, but there the preparation pass is a small part of the
 * run and the prepared multipliers save the consumers work: with MXFP4 they ran up to
 * 11 % slower (docs/decisions.md, gemm_amax: scale preparation, raw scale bytes). */
static bool raw_scales_fit(const mxf_gemm_problem *p, int nb) {
  return nb == BN_NARROW && p->sfa_fmt == MXF_E8M0 && p->sfa_layout == MXF_SF_SWIZZLED;
}

/* Three warpgroups on 192-row tiles: ~1.3x the time of a 128-row tile's stage for 1.5x
 * the rows (docs/decisions.md, gemm_amax: swapped runs, narrow tiles), so they pay from
 * ~1.3 waves of 128-row tiles. */
static bool three_warpgroups_pay(const mxf_gemm_problem *p, int64_t sms) {
  return (p->m + BM - 1) / BM * p->l * 10 >= 13 * sms;
}

/* The f16 path halves the mainloop's instructions but costs a launch and a pass over the
 * scales, and a second set of multipliers: it pays when the stages each CTA runs are many
 * enough against the scale bytes. Fitted to measurements (docs/decisions.md, gemm_amax:
 * the f16 path): one stage per 32 KiB of scales, plus 16 stages for the launch. */
static bool f16_pays(int64_t cta_stages, int64_t sf_bytes) {
  return cta_stages * 32768 >= sf_bytes + (1 << 19);
}

/* The workspace layout of geometry g of problem p (ws_layout). */
static void lay_out(const mxf_gemm_problem *p, geometry *g) {
  ws_layout &w = g->ws;
  const int64_t rows_a = p->l * g->tiles_m * g->tm(), rows_b = p->l * g->tiles_n * BN;
  w.wb = g->ws_a;
  w.w16 = g->ws_a + g->ws_b;
  w.wb16 = w.w16 + g->ws_a;
  w.fac_a = w.w16 + g->ws_a + g->ws_b;
  w.fac_b = w.fac_a + (size_t)rows_a * sizeof(float);
  w.tile_ok_a = w.fac_a + (size_t)mxf_round_up((rows_a + rows_b) * 4, 256);
  w.tile_ok_b = w.tile_ok_a + (size_t)(p->l * g->tiles_m) * sizeof(int);
  w.part = w.w16 + g->ws_f16;
  w.flags = w.part + g->ws_part;
  w.bp = w.flags + g->ws_flags;
  w.f16_offset = (int64_t)(g->ws_a + g->ws_b) / 2;
}

/* The geometry of problem p on num_sms SMs (0: a default count, for the workspace bound);
 * swapped: p is the caller's problem with A and B swapped, C written transposed; it then runs
 * with the B pre-pass of the (small) caller's A. wg3: the narrow tile may take three
 * consumer warpgroups when A's scales are read as they are. */
static bool make_geometry(const mxf_gemm_problem *p, int num_sms, const mxf_cuda_override *ov, geometry *g,
                          int swapped, bool wg3) {
  memset(g, 0, sizeof *g);
  if (p->m < 1 || p->n < 1 || p->k < 1 || p->l < 1) return false;
  if (swapped && p->c == MXF_E2M1)
    return false; /* a pair of e2m1 values shares a byte: one thread per pair */
  g->swapped = swapped;
  g->nb = swapped && p->n <= BN_NARROW ? BN_NARROW : BN;
  if (p->a_ks != 1 || p->b_ks != 1 || p->c_ns != 1) return false;
  /* A (the register operand) in an MX format; B in A's or, through the pre-pass, another
   * one (docs/spec.md §1.1's mixed pairs, bf16 B included: the swapped bf16 A) */
  int fa, fb;
  if (!mx_operand(p->a_fmt, p->sfa_fmt, p->sf_vec, &fa)) return false;
  if (!(p->b_fmt == MXF_BF16 ? p->sfb_fmt == MXF_DTYPE_INVALID
                             : mx_operand(p->b_fmt, p->sfb_fmt, p->sf_vec, &fb)))
    return false;
  const bool mixed = p->a_fmt != p->b_fmt || p->sfa_fmt != p->sfb_fmt;
  g->fmt = fa;
  g->bdt = p->b_fmt;
  g->bany = p->a_fmt != p->b_fmt;
  g->rb = fa == FMT_E2M1 ? 32 : 64;
  g->kbytes = row_bytes(p->a_fmt, p->k);
  g->kbytes_b = row_bytes(p->b_fmt, p->k);
  if (p->a_fmt == MXF_E2M1 && (p->k % 2 || p->a_ms % 2 || p->a_ls % 2)) return false;
  if (p->b_fmt == MXF_E2M1 && (p->k % 2 || p->b_ns % 2 || p->b_ls % 2)) return false;
  switch (p->c) {
  case MXF_F32:
  case MXF_F16:
  case MXF_BF16:
  case MXF_E4M3:
  case MXF_E5M2:
  case MXF_E2M1: break;
  default: return false;
  }
  if (p->c == MXF_E2M1 && (p->c_ms % 2 || p->c_ls % 2)) return false;
  g->nkb = BK / p->sf_vec;
  const int64_t sms = num_sms > 0 ? num_sms : 132;
  g->sfraw = raw_scales_fit(p, g->nb) && ov->sfraw != 0;
  g->wg = wg3 && g->sfraw && pick(ov->wg3, three_warpgroups_pay(p, sms)) ? 3 : 2;
  const int64_t tm = g->tm();
  g->tiles_m = (p->m + tm - 1) / tm;
  g->tiles_n = (p->n + g->nb - 1) / g->nb;
  g->nks = (p->k + BK - 1) / BK;
  if (g->tiles_m * g->tiles_n * p->l > (1ll << 30) || g->nks > (1ll << 24) ||
      p->kb != (p->k + p->sf_vec - 1) / p->sf_vec)
    return false;
  if (p->l * (g->tiles_m * BM + g->tiles_n * BN) * g->nks >= (1ll << 31))
    return false; /* sf_prepare's items */
  /* TMA: strides of the rows and batches actually used must be multiples of 16 bytes */
  const int64_t a_row = row_bytes(p->a_fmt, p->a_ms), b_row = row_bytes(p->b_fmt, p->b_ns);
  const int64_t a_bat = row_bytes(p->a_fmt, p->a_ls), b_bat = row_bytes(p->b_fmt, p->b_ls);
  if (p->m > 1 && (a_row % 16 || a_row < g->kbytes)) return false;
  if (p->n > 1 && (b_row % 16 || b_row < g->kbytes_b)) return false;
  if (p->l > 1 && (a_bat % 16 || a_bat <= 0 || b_bat % 16 || b_bat <= 0)) return false;
  if (g->kbytes >= (1ll << 32) || g->kbytes_b >= (1ll << 32) || p->m >= (1ll << 31) || p->n >= (1ll << 31) ||
      a_row >= (1ll << 39) || b_row >= (1ll << 39) || a_bat >= (1ll << 39) || b_bat >= (1ll << 39))
    return false;
  g->ws_a = g->wg == 3 ? 0 : (size_t)mxf_round_up(p->l * g->tiles_m * g->nks * BM * g->nkb * 2, 256);
  g->ws_b = (size_t)mxf_round_up(p->l * g->tiles_n * g->nks * BN * g->nkb * 2, 256);
  /* persistent grid and the split of the last partial wave (unit_work) */
  const int64_t tiles = g->tiles_m * g->tiles_n * p->l;
  g->grid = tiles < sms ? tiles : sms;
  g->tail = tiles % g->grid;
  g->split = g->tail ? g->grid / g->tail : 1;
  if (2 * tiles <= sms) g->tail = tiles, g->split = sms / tiles; /* few tiles: all split, up to 4 CTAs each */
  if (g->split > 4) g->split = 4;
  if (g->split > g->nks) g->split = g->nks;
  if (g->split < 2) g->split = 1, g->tail = 0;
  g->whole = tiles - g->tail;
  if (g->whole == 0) g->grid = g->tail * g->split; /* one unit per CTA (the finisher after its writers) */
  g->ws_part = (size_t)(g->tail * (g->split - 1)) * tm * g->nb * sizeof(float);
  g->ws_flags = (size_t)mxf_round_up(g->tail * 4, 256);
  /* The B pre-pass writes B once as bf16 (3 bytes of traffic per value) and lightens
   * every stage of the mainloop; with many rows of tiles that is won back (docs/decisions.md,
   * gemm_amax: the B pre-pass). Swapped runs and mixed pairs always take it. */
  g->bp = swapped || mixed ? 1 : pick(ov->bpre, g->tiles_m >= BP_TILES_M);
  g->ws_bp = g->bp ? (size_t)mxf_round_up(p->l * p->n * g->nks * BK * 2, 256) : 0;
  if (g->bp) g->ws_b = 0;
  g->bc_group =
      g->bp && !g->bany ? (pick(ov->bcwide, wide_groups_fill(p->l * p->n, g->nks, sms)) ? BC_STAGES : 2) : 0;
  const int64_t cta_stages =
      (g->whole + g->grid - 1) / g->grid * g->nks + (g->tail ? (g->nks + g->split - 1) / g->split : 0);
  const int64_t sf_bytes = p->l * (g->tiles_m * BM + g->tiles_n * BN) * p->kb;
  g->f16 = !g->bp && g->fmt != FMT_E2M1 && pick(ov->f16, f16_pays(cta_stages, sf_bytes));
  g->ws_f16 = 0;
  if (g->f16)
    g->ws_f16 = g->ws_a + g->ws_b +
                (size_t)mxf_round_up(p->l * (g->tiles_m * BM + g->tiles_n * BN) * 4, 256) +
                (size_t)mxf_round_up(p->l * (g->tiles_m + g->tiles_n) * 4, 256);
  /* 16-bit C of the wide pre-pass tiles through the ring's slots where C's strides suit
   * the tensor copies (the launch tests C's alignment) */
  g->c_ring = g->bp && g->nb == BN && (p->c == MXF_BF16 || p->c == MXF_F16) && p->c_ms % 8 == 0 &&
              (p->l == 1 || p->c_ls % 8 == 0) && ov->cring != 0;
  lay_out(p, g);
  return true;
}

/* p with A and B swapped (C^T = B A^T): the caller's B becomes A, its A becomes B; C
 * keeps the caller's strides (the kernel writes it transposed, kernel_args::c_transposed). */
static mxf_gemm_problem swapped_problem(const mxf_gemm_problem *p) {
  mxf_gemm_problem s = *p;
  s.m = p->n, s.n = p->m;
  s.a_ms = p->b_ns, s.a_ks = p->b_ks, s.a_ls = p->b_ls;
  s.b_ns = p->a_ms, s.b_ks = p->a_ks, s.b_ls = p->a_ls;
  s.sfa_layout = p->sfb_layout, s.sfb_layout = p->sfa_layout;
  s.a_fmt = p->b_fmt, s.b_fmt = p->a_fmt;
  s.sfa_fmt = p->sfb_fmt, s.sfb_fmt = p->sfa_fmt;
  return s;
}

/*
 * Whether the swapped problem pays, a rule fitted to measurements (docs/decisions.md,
 * gemm_amax: swapped runs, narrow tiles). Swapped, B's rows are the tiles' rows, converted
 * in registers like A's, and A goes through the pre-pass once. That pays
 * - with M <= 128 (128-column tiles): a tile row of the plain problem converts all of B
 *   in the mainloop on tiles_n CTAs, too few for the SMs;
 * - below the pre-pass's threshold (BP_TILES_M rows of tiles), with M a multiple of 256:
 *   whole wide tiles (edge tiles of the wide kernel store element by element);
 * - above it, with N >= 2M: the pre-pass then converts the operand of half the size or
 *   less (at 16384 x 24576 x 1536 the swapped run was 8 % slower).
 */
static bool swap_pays(const mxf_gemm_problem *p) {
  return p->m <= BN_NARROW || ((p->m + BM - 1) / BM < BP_TILES_M ? p->m % BN == 0 : p->n >= 2 * p->m);
}

/* A bf16 A (no scales) runs swapped only: the register operand is the MX one, A the
 * pre-pass's bf16 copy. */
bool plan_gemm(const mxf_gemm_problem *p, int num_sms, const mxf_cuda_override *ov, gemm_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  const bool a_bf16 = p->a_fmt == MXF_BF16;
  bool ok = false;
  if (a_bf16 || pick(ov->swap, swap_pays(p))) {
    cfg->run = swapped_problem(p);
    ok = make_geometry(&cfg->run, num_sms, ov, &cfg->g, 1, true);
    if (!ok && a_bf16) return false;
  }
  if (!ok) {
    cfg->run = *p;
    if (!make_geometry(p, num_sms, ov, &cfg->g, 0, true)) return false;
  }
  cfg->workspace = cfg->g.sum();
  if (cfg->g.wg == 3) {
    if (!make_geometry(&cfg->run, num_sms, ov, &cfg->g2, cfg->g.swapped, false)) return false;
    if (cfg->g2.sum() > cfg->workspace) cfg->workspace = cfg->g2.sum();
  }
  return true;
}

/* The config in words: "128x256 swap prepass f16 split4". */
static void describe(const gemm_config *c, char *out, size_t n) {
  const geometry &g = c->g;
  snprintf(out, n, " %dx%d%s%s%s%s", g.tm(), g.nb, g.swapped ? " swap" : "",
           !g.bp             ? ""
           : g.bany          ? " convert"
           : g.bc_group == 2 ? " prepass2"
                             : " prepass",
           g.f16 ? " f16" : "", g.sfraw ? " rawsf" : "");
  if (g.split > 1) {
    const size_t len = strlen(out);
    snprintf(out + len, n - len, " split%d", (int)g.split);
  }
}

} /* namespace mxf_sm90 */

/* Rows of A up to which a mixed pair streams its weights through cuda/gemv rather than
 * the sm_90a kernel (docs/kernels/gemm_amax_gemv.md): at 16 rows the gemv is faster on
 * the three decode shapes, at 64 the sm_90a kernel (docs/decisions.md). */
#define GEMV_M_MAX 16

/* The weight-streaming kernel's geometry of p on `sms` SMs (0: a default count); false when
 * it does not take p (docs/kernels/gemm_amax_gemv.md). */
static bool gemv_geometry_of(const mxf_gemm_problem *p, int sms, mxf_gemv::geometry *g) {
  using namespace mxf_gemv;
  if (p->m < 1 || p->m > 128 || p->n < 1 || p->k < 32 || p->k % 32 || p->sf_vec != 32) return false;
  if (p->b_fmt != MXF_E2M1 && p->b_fmt != MXF_E4M3) return false;
  if (p->sfb_fmt != MXF_E8M0 || p->a_ks != 1 || p->b_ks != 1 || p->c == MXF_E2M1) return false;
  if (p->a_fmt != MXF_BF16 && (p->sfa_fmt != MXF_E8M0)) return false;
  if (p->n >= (1 << 30) || p->l >= 65536) return false;
  const int64_t nsm = sms > 0 ? sms : 132, want = WARPS_PER_SM * nsm, split_below = SPLIT_BELOW * nsm;
  g->mt = p->m <= 8 ? 1 : p->m <= 16 ? 2 : p->m <= 32 ? 4 : p->m <= 64 ? 8 : 16;
  /* two 16-row tiles a warp where that still gives every SM a CTA */
  g->tr = rows_of(g->mt) == 2 && (p->n + 31) / 32 * p->l >= nsm ? 2 : 1;
  g->tiles = (int)((p->n + 16 * g->tr - 1) / (16 * g->tr));
  g->nchunks = (int)((p->k + CHUNK - 1) / CHUNK);
  /* about WARPS_PER_SM warps an SM in one wave: a tile's K split first among the warps of
   * its CTA (partials added in shared memory; at least 2 chunks a warp), then, where
   * MAX_WARPS warps a tile leave fewer than SPLIT_BELOW an SM, among CTAs (partials through
   * the workspace, whose traffic, BN x M f32 per split written and read back, stays within
   * a quarter of the tile's weight bytes; 16 an SM through split-K measured slower than 8
   * without: 1 x 2048 x 7168 0.0130 against 0.0122 ms) */
  const int64_t ctas = (int64_t)g->tiles * p->l;
  const int max_w = g->nchunks / 2 > 1 ? g->nchunks / 2 : 1;
  int64_t w = want / ctas;
  if (w > MAX_WARPS) w = MAX_WARPS;
  if (w > max_w) w = max_w;
  if (w < 1) w = 1;
  int splits = ctas * w >= split_below ? 1 : (int)(split_below / (ctas * w));
  const int max_by_k = g->nchunks / (2 * (int)w) > 1 ? g->nchunks / (2 * (int)w) : 1;
  const int64_t wbytes = p->b_fmt == MXF_E2M1 ? p->k / 2 : p->k; /* a row's */
  const int64_t by_part = wbytes / (32 * p->m);
  const int max_by_part = by_part > 1 ? (int)(by_part < 32 ? by_part : 32) : 1;
  if (splits > max_by_k) splits = max_by_k;
  if (splits > max_by_part) splits = max_by_part;
  /* the split's scales in shared memory */
  const int max_cps = max_split_chunks(g->tr), min_splits = (g->nchunks + max_cps - 1) / max_cps;
  if (splits < min_splits) splits = min_splits;
  if (splits < 1) splits = 1;
  g->chunks_per_split = (g->nchunks + splits - 1) / splits;
  g->splits = (g->nchunks + g->chunks_per_split - 1) / g->chunks_per_split;
  g->chunks_per_warp = (int)((g->chunks_per_split + w - 1) / w);
  g->warps = (g->chunks_per_split + g->chunks_per_warp - 1) / g->chunks_per_warp;
  const int64_t bn = 16 * g->tr;
  g->ws_a = p->a_fmt == MXF_BF16 ? 0 : (size_t)mxf_round_up(p->l * p->m * p->k * 2, 256);
  g->ws_counters = g->splits > 1 ? (size_t)mxf_round_up((int64_t)g->tiles * p->l * 4, 256) : 0;
  g->ws_part = g->splits > 1 ? (size_t)((int64_t)g->tiles * p->l * g->splits * bn * p->m * 4) : 0;
  g->off_counters = g->ws_a;
  g->off_part = g->ws_a + g->ws_counters;
  return true;
}

static bool gemv_takes(const mxf_gemm_problem *p, const mxf_cuda_device_info_t *info,
                       mxf_cuda_gemm_config *cfg) {
  if (p->a_fmt == p->b_fmt || !gemv_geometry_of(p, info->sm_count, &cfg->gemv)) return false;
  /* early start after the one-CTA preparation only: beside the activations' pre-pass the
   * waiting CTAs held SMs it needed (16 x 7168 x 2048 MXFP8 x MXFP4: 0.0379 against
   * 0.0253 ms without) */
  cfg->gemv.pdl = info->cc >= 90 && p->a_fmt == MXF_BF16;
  cfg->workspace = cfg->gemv.total();
  return true;
}

static bool sm90_takes(const mxf_gemm_problem *p, const mxf_cuda_device_info_t *info,
                       const mxf_cuda_override *ov, mxf_cuda_gemm_config *cfg) {
#if defined(MXF_HAVE_SM90)
  if (info->cc != 90 || !mxf_sm90::plan_gemm(p, info->sm_count, ov, &cfg->sm90)) return false;
  cfg->workspace = cfg->sm90.workspace;
  return true;
#else
  (void)p, (void)info, (void)ov, (void)cfg;
  return false;
#endif
}

mxf_status mxf_cuda_gemm_amax_choose(const mxf_gemm_problem *p, const mxf_cuda_device_info_t *info,
                                     const mxf_cuda_override *ov, mxf_cuda_gemm_config *cfg, char *name,
                                     size_t name_len) {
  memset(cfg, 0, sizeof *cfg);
  cfg->sms = info->sm_count;
  cfg->cc = info->cc;
  mxf_kernel_id k = MXF_KERNEL_PORTABLE;
  if (ov->gemm == MXF_KERNEL_PORTABLE)
    k = MXF_KERNEL_PORTABLE;
  else if (ov->gemm == MXF_KERNEL_GEMV && gemv_takes(p, info, cfg))
    k = MXF_KERNEL_GEMV;
  else if (ov->gemm == MXF_KERNEL_SM90 && sm90_takes(p, info, ov, cfg))
    k = MXF_KERNEL_SM90;
  else if (p->m <= GEMV_M_MAX && gemv_takes(p, info, cfg))
    k = MXF_KERNEL_GEMV;
  else if (sm90_takes(p, info, ov, cfg))
    k = MXF_KERNEL_SM90;
  else if (gemv_takes(p, info, cfg))
    k = MXF_KERNEL_GEMV;
  else
    cfg->workspace = 0;
  cfg->kernel = k;
  switch (k) {
  case MXF_KERNEL_SM90: {
    char words[64];
    mxf_sm90::describe(&cfg->sm90, words, sizeof words);
    snprintf(name, name_len, "cuda/sm90%s", words);
    break;
  }
  case MXF_KERNEL_GEMV: snprintf(name, name_len, "cuda/gemv"); break;
  case MXF_KERNEL_PORTABLE: snprintf(name, name_len, "cuda/portable"); break;
  }
  return MXF_OK;
}
