/*
 * gemm_amax_sm90.cu — block-scaled GEMM + amax for Hopper (sm_90a): TMA + mbarrier
 * pipeline, exact dequantization to bf16 inside the mainloop, register-sourced wgmma.
 * This file: the description and the launch. The parts: gemm_sm90_common.cuh (arguments,
 * tile raster, work units), gemm_sm90_prep.cuh (scale preparation, B pre-pass),
 * gemm_sm90_mainloop.cuh, gemm_sm90_epilogue.cuh, gemm_sm90_kernel.cuh; the instances per
 * format gemm_sm90_{e4m3,e5m2,e2m1}.cu; the configuration gemm_amax_heuristics.cu.
 *
 * Scope (mxf_sm90::plan_gemm, gemm_amax_heuristics.cu, which also makes every choice the
 * launch reads from the plan's config): k-major A and B; e4m3/e5m2 with e8m0 scales per 32,
 * e2m1 with e8m0 per 32 or 16 or ue4m3 per 16; compact or swizzled scales; n-major C of any
 * dtype; any M, N, K >= 1 (rows 16-byte aligned), L >= 1; alpha; amax overwrite/accumulate.
 * Mixed pairs (docs/spec.md §1.1): A and B in different formats (or scale formats) run
 * with the B pre-pass (b_convert_any when the formats differ); a bf16 A runs swapped, as
 * the pre-pass's operand (a bf16 copy), the MX B in registers.
 *
 * Launches on the caller's stream:
 *   0. (fp8 codes with the f16 path on, see gemm_amax_heuristics.cu) sf_rows: each row's reference
 *      exponent R and factor 2^(R - 127), and which tiles qualify (sm90_dequant.cuh, "The
 *      f16 path").
 *   1. sf_prepare: every scale byte of A and B (A alone with the B pre-pass) becomes a
 *      bf16 multiplier (and, with the f16 path, also an f16 multiplier 2^(b - R)), regrouped per
 *      (tile, k-stage) so each stage's scales are one contiguous bulk copy. Scales of rows
 *      beyond M/N and of k-blocks beyond K become 1.0, so SF padding is never read and
 *      zero-filled tails contribute exactly 0 even when a padding byte is 0xFF. Its first
 *      thread also prepares *amax (overwrite: +0; accumulate: canonical, as amax.cuh) and
 *      its first block zeroes the split tiles' flags.
 *   1b. (M of at least BP_TILES_M rows of tiles, see gemm_amax_heuristics.cu) the B pre-pass: B
 *      dequantized once to bf16 in the workspace, in the layout of the tile the wgmmas
 *      read; the mainloop then converts A alone (see "The B pre-pass"). One launch
 *      (prep_bp_kernel) runs it beside step 1, which then prepares A's scales only, and
 *      on the narrow tiles not even those when they are e8m0 in the swizzled layout: the
 *      kernel then reads the bytes as they are (kernel_args::sfa_raw, geometry::sfraw).
 *   2. gemm_kernel (persistent, one CTA per SM, 384 threads; 512 on the three-warpgroup
 *      narrow tiles, see gemm_amax_heuristics.cu), a programmatic dependent
 *      launch: it is scheduled while step 1 ends and waits for its results after setting
 *      up its barriers (reading A's scale bytes as they are, the producer first loads the
 *      first unit's first stage of A, which does not depend on step 1). Over the work units of
 *      unit_work: whole tiles, then the last partial wave's tiles split along K;
 *        warpgroup 0   producer: one thread issues TMA loads of raw A (128 x 64 k) and B
 *                      (256 x 64 k) codes and bulk copies of their scales into a 4-stage
 *                      ring (full/empty mbarriers); setmaxnreg 24.
 *        warpgroups 1,2 consumers (64 rows of the 128-row tile each), setmaxnreg 240:
 *          - A: each thread reads its raw codes from shared memory, dequantizes them to
 *            bf16 in registers = the wgmma A fragment (no shared-memory round trip);
 *          - B: thread t dequantizes raw row t of B into a 128B-swizzled bf16 tile (3
 *            buffers in a ring), fence.proxy.async, one named barrier;
 *          - wgmma m64n256k16 (A registers, B shared), async, one stage in flight while
 *            the next stage is converted;
 *          - a tile that qualifies for the f16 path (all its rows) runs the same loop in
 *            f16 (hardware e4m3 -> f16 conversion, one f16 product by 2^(b - R)), and its
 *            sums are multiplied by the column and row factors before the epilogue;
 *          - with the B pre-pass, B's bf16 tile arrives by TMA into a 5-stage ring, and a
 *            consumer converts its A fragment, issues the wgmmas and releases a slot once
 *            the wgmmas that read it are done: no B conversion, no barrier per stage;
 *          - epilogue: alpha, amax (warp -> CTA -> one atomicMax per CTA), C in its
 *            dtype: tiles wholly inside C (bf16 / f16 / f32) through a 2 KB per-warp
 *            shared staging area (transposed C of the wide tiles: 8 KB per warpgroup)
 *            as whole 128-byte lines, edge tiles and other dtypes
 *            element by element with formats.h's encoders; the wide pre-pass tiles'
 *            bf16 / f16 C goes into the unit's last two ring slots instead, and the
 *            producer stores it with tensor copies before it loads into them
 *            (epilogue_slots).
 *
 * Few rows of A, or A much smaller than B (swap_pays in gemm_amax_heuristics.cu): the kernel runs the
 * swapped problem C^T = B A^T. B's rows become the tiles' rows, dequantized
 * in registers like A's; the caller's A goes through the B pre-pass (the smaller operand,
 * once); with at most 128 columns the tiles are 128 wide (m64n128 wgmmas, 8 stages); the
 * epilogue writes C transposed (kernel_args::c_transposed).
 *
 * K order inside a stage is permuted (the sum does not care): thread q (= lane % 4) of a
 * wgmma A fragment owns the 16 consecutive raw k of its row starting at 16q, so it reads
 * them with one 16-byte load; the B conversion writes the same permutation.
 *
 * Dequantization (sm90_dequant.cuh), code * scale to bf16: the code's bits are placed into
 * a bf16 (value code * 2^-c, c = 120 e4m3 / 112 e5m2 / 126 e2m1) and multiplied by
 * scale * 2^c (one bf16x2 product per pair, exact while the result is a normal bf16). Per
 * warp and stage (uniform branch): if a scale * 2^c overflows bf16 (e8m0 byte > 134 e4m3 /
 * > 142 e5m2 / > 128 e2m1, ue4m3 scale >= 4) it multiplies by 2^c and then by the scale
 * (two products); if a code is NaN/inf (e4m3 NaN, e5m2 inf/NaN) those lanes are patched to
 * the exact bf16 NaN/inf before the scale. 0xFF (NaN) scales propagate as NaN.
 * Rounding outside SPEC §1.2's window: with scale bytes below 16 (or tiny ue4m3 scales) a
 * dequantized value below 2^-126 is a bf16 subnormal and may be rounded to the 2^-133
 * grid (or flushed to 0 below 2^-134); with bytes above 232 large values stay exact until
 * bf16's overflow to inf, which f32 shares. Inside the window the result is exact.
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "cuda/gemm_amax_config.h"
#include "cuda/sm90/gemm_sm90_prep.cuh"
#include "cuda/sm90/sm90_ops.h"

using namespace mxf_sm90;

/* prep_bp_kernel<FMT, gs> on the stream (gs: geometry::bc_group, 2 or BC_STAGES). */
template <int FMT>
static void launch_prep_bp(int gs, unsigned blocks, const prep_args &pa, const bconv_args &ba, int pblocks,
                           cudaStream_t stream) {
  if (gs == 2) prep_bp_kernel<FMT, 2><<<blocks, 256, 0, stream>>>(pa, ba, pblocks);
  else prep_bp_kernel<FMT, BC_STAGES><<<blocks, 256, 0, stream>>>(pa, ba, pblocks);
}

/* prep_bp_any_kernel<e2, B's format> on the stream; false for a format without an
 * instance (the heuristics take no other). */
template <bool E2>
static bool launch_prep_bp_any_e2(mxf_dtype bdt, unsigned blocks, const prep_args &pa, const bany_args &ba,
                                  int pblocks, cudaStream_t stream) {
  switch (bdt) {
  case MXF_BF16: prep_bp_any_kernel<E2, MXF_BF16><<<blocks, 256, 0, stream>>>(pa, ba, pblocks); return true;
  case MXF_E4M3: prep_bp_any_kernel<E2, MXF_E4M3><<<blocks, 256, 0, stream>>>(pa, ba, pblocks); return true;
  case MXF_E5M2: prep_bp_any_kernel<E2, MXF_E5M2><<<blocks, 256, 0, stream>>>(pa, ba, pblocks); return true;
  case MXF_E2M1: prep_bp_any_kernel<E2, MXF_E2M1><<<blocks, 256, 0, stream>>>(pa, ba, pblocks); return true;
  default: return false;
  }
}
static bool launch_prep_bp_any(bool e2, mxf_dtype bdt, unsigned blocks, const prep_args &pa, const bany_args &ba,
                               int pblocks, cudaStream_t stream) {
  return e2 ? launch_prep_bp_any_e2<true>(bdt, blocks, pa, ba, pblocks, stream)
            : launch_prep_bp_any_e2<false>(bdt, blocks, pa, ba, pblocks, stream);
}

static mxf_status no_instance(const char *what) {
  return mxf_set_error(MXF_ERR_INTERNAL, "cuda backend: sm90 gemm_amax: the config asks for %s, which has no "
                       "kernel instance", what);
}

/* The fields bconv_args and bany_args share: B's bytes, scales and the pre-pass's output. */
template <typename BA>
static void b_source(BA &ba, const mxf_gemm_problem *p, const mxf_gemm_amax_args *args, uint4 *out, int64_t b_row,
                     int64_t b_bat, const geometry &g) {
  ba.b = static_cast<const uint8_t *>(args->b);
  ba.sfb = static_cast<const uint8_t *>(args->sfb);
  ba.out = out;
  ba.b_row = b_row;
  ba.b_bat = b_bat;
  ba.n = p->n;
  ba.kb = p->kb;
  ba.nks = (int)g.nks;
  ba.ue4m3 = p->sfb_fmt == MXF_E4M3;
  ba.lb = p->sfb_layout;
}

extern "C" mxf_status mxf_sm90_gemm_amax_launch(const mxf_sm90::gemm_config *cfg, const mxf_gemm_amax_args *cargs,
                                                void *ws, size_t ws_size, cudaStream_t stream, int num_sms) {
  const mxf_gemm_problem *p = &cfg->run;
  mxf_gemm_amax_args swapped_args = *cargs; /* the operands of the problem run */
  if (cfg->g.swapped) {
    swapped_args.a = cargs->b, swapped_args.b = cargs->a;
    swapped_args.sfa = cargs->sfb, swapped_args.sfb = cargs->sfa;
  }
  const mxf_gemm_amax_args *args = &swapped_args;
  /* A's scales read as they are (kernel_args::sfa_raw) when the config says so and the bytes
   * are 16-byte aligned (bulk copies); else prepared, on two warpgroups (gemm_config::g2) */
  const bool sfraw = cfg->g.sfraw && ((uintptr_t)args->sfa & 15u) == 0;
  const geometry &g = cfg->g.wg == 3 && !sfraw ? cfg->g2 : cfg->g;
  /* core checked the caller's workspace against the plan's (gemm_config::workspace, which
   * covers g and g2) */
  (void)ws_size;
  encode_tiled_fn enc = get_encode_tiled();
  if (!enc) return mxf_set_error(MXF_ERR_CUDA, "cuda backend: cuTensorMapEncodeTiled is not available from the driver");

  const int64_t a_row = row_bytes(p->a_fmt, p->a_ms), b_row = row_bytes(p->b_fmt, p->b_ns);
  const int64_t a_bat = row_bytes(p->a_fmt, p->a_ls), b_bat = row_bytes(p->b_fmt, p->b_ls);
  /* the workspace's parts where the config lays them out (geometry::ws) */
  uint8_t *wp = static_cast<uint8_t *>(ws);
  uint16_t *wa = reinterpret_cast<uint16_t *>(wp);
  uint16_t *wb = reinterpret_cast<uint16_t *>(wp + g.ws.wb);
  uint8_t *w16 = wp + g.ws.w16;
  float *wpart = reinterpret_cast<float *>(wp + g.ws.part);
  unsigned int *wflags = reinterpret_cast<unsigned int *>(wp + g.ws.flags);
  uint4 *wbp = reinterpret_cast<uint4 *>(wp + g.ws.bp);

  CUtensorMap map_a, map_b;
  CUresult r = make_map_codes(enc, &map_a, args->a, g.kbytes, p->m, p->l, a_row, a_bat, g.rb, g.tm());
  if (r == CUDA_SUCCESS)
    r = g.bp ? make_map_bf16(enc, &map_b, wbp, g.nks * BK, p->n, p->l, g.nb)
             : make_map_codes(enc, &map_b, args->b, g.kbytes, p->n, p->l, b_row, b_bat, g.rb, BN);
  if (r != CUDA_SUCCESS)
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cuda backend: cannot describe A/B to the TMA unit (CUresult %d)",
                         (int)r);
  const int64_t sms = num_sms > 0 ? num_sms : 132; /* bounds the preparation grids (the plan's count) */
  const int64_t rows_a = p->l * g.tiles_m * g.tm(), rows_b = p->l * g.tiles_n * BN;
  rows_args ra;
  ra.sfa = static_cast<const uint8_t *>(args->sfa);
  ra.sfb = static_cast<const uint8_t *>(args->sfb);
  ra.fac_a = reinterpret_cast<float *>(wp + g.ws.fac_a);
  ra.fac_b = reinterpret_cast<float *>(wp + g.ws.fac_b);
  ra.tile_ok_a = reinterpret_cast<int *>(wp + g.ws.tile_ok_a);
  ra.tile_ok_b = reinterpret_cast<int *>(wp + g.ws.tile_ok_b);
  ra.m = p->m;
  ra.n = p->n;
  ra.kb = p->kb;
  ra.tiles_m = (int)g.tiles_m;
  ra.tiles_n = (int)g.tiles_n;
  ra.la = p->sfa_layout;
  ra.lb = p->sfb_layout;
  ra.l = (int)p->l;
  const int64_t rmax = sms * 16;
  const unsigned rows_blocks = (unsigned)((rows_a + rows_b + 31) / 32 < rmax ? (rows_a + rows_b + 31) / 32 : rmax);
  if (g.f16 && g.fmt == FMT_E4M3) sf_rows_kernel<FMT_E4M3><<<rows_blocks, 256, 0, stream>>>(ra);
  if (g.f16 && g.fmt == FMT_E5M2) sf_rows_kernel<FMT_E5M2><<<rows_blocks, 256, 0, stream>>>(ra);

  prep_args pa;
  pa.sfa = static_cast<const uint8_t *>(args->sfa);
  pa.sfb = static_cast<const uint8_t *>(args->sfb);
  pa.wa = wa;
  pa.wb = wb;
  pa.wa16 = g.f16 ? reinterpret_cast<uint16_t *>(w16) : nullptr;
  pa.wb16 = g.f16 ? reinterpret_cast<uint16_t *>(wp + g.ws.wb16) : nullptr;
  pa.fac_a = ra.fac_a;
  pa.fac_b = ra.fac_b;
  pa.tile_ok_a = ra.tile_ok_a;
  pa.tile_ok_b = ra.tile_ok_b;
  pa.m = p->m;
  pa.n = p->n;
  pa.l = p->l;
  pa.kb = p->kb;
  pa.nks = (int)g.nks;
  const int64_t ngr = (g.nks + SP_STAGES - 1) / SP_STAGES;
  /* A's scales read as they are: nothing to prepare for A */
  pa.items_a = sfraw ? 0 : (int)(p->l * g.tiles_m * ngr * BM);
  pa.items_b = g.bp ? 0 : (int)(p->l * g.tiles_n * ngr * BN);
  pa.tiles_m = (int)g.tiles_m;
  pa.tiles_n = (int)g.tiles_n;
  pa.nkb = g.nkb;
  pa.sf_vec = p->sf_vec;
  pa.ue4m3 = p->sfa_fmt == MXF_E4M3; /* without the pre-pass = sfb_fmt (gemm_amax_heuristics.cu) */
  pa.la = p->sfa_layout;
  pa.lb = p->sfb_layout;
  pa.amax = args->amax;
  pa.accumulate = (p->flags & MXF_AMAX_ACCUMULATE) != 0;
  pa.flags = wflags;
  pa.nflags = (int)g.tail;
  int64_t pblocks = ((int64_t)pa.items_a + pa.items_b + 255) / 256;
  const int64_t pmax = sms * 8;
  if (pblocks > pmax) pblocks = pmax;
  if (pblocks < 1) pblocks = 1;
  if (!g.bp) {
    sf_prepare_kernel<<<(unsigned)pblocks, 256, 0, stream>>>(pa);
  } else if (g.bany) {
    bany_args ba;
    b_source(ba, p, args, wbp, b_row, b_bat, g);
    ba.k = p->k;
    ba.chunks = p->l * p->n * g.nks * 8;
    ba.idx32 = ba.chunks < (1ll << 32);
    ba.sf_shift = p->sf_vec == 16 ? 4 : 5;
    const int64_t bneed = (ba.chunks + 255) / 256, bmax = sms * 16;
    const unsigned all = (unsigned)pblocks + (unsigned)(bneed < bmax ? bneed : bmax);
    if (!launch_prep_bp_any(g.fmt == FMT_E2M1, p->b_fmt, all, pa, ba, (int)pblocks, stream))
      return no_instance("a B pre-pass of this format");
  } else {
    bconv_args ba;
    b_source(ba, p, args, wbp, b_row, b_bat, g);
    ba.kbytes = g.kbytes_b;
    ba.rows = p->l * p->n;
    ba.nks = (int)g.nks;
    const int gs = g.bc_group;
    ba.ngr = (int)((g.nks + gs - 1) / gs);
    ba.units = (ba.rows + 3) / 4 * ba.ngr;
    ba.nkb = g.nkb;
    ba.rb = g.rb;
    const int64_t bmax = sms * 8;
    const int64_t bneed = (ba.units * 32 + 255) / 256;
    const unsigned bblocks = (unsigned)(bneed < bmax ? bneed : bmax);
    const unsigned all = (unsigned)pblocks + bblocks;
    switch (g.fmt) {
    case FMT_E4M3: launch_prep_bp<FMT_E4M3>(gs, all, pa, ba, (int)pblocks, stream); break;
    case FMT_E5M2: launch_prep_bp<FMT_E5M2>(gs, all, pa, ba, (int)pblocks, stream); break;
    case FMT_E2M1: launch_prep_bp<FMT_E2M1>(gs, all, pa, ba, (int)pblocks, stream); break;
    default: return no_instance("a B pre-pass of this format");
    }
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return mxf_set_error(MXF_ERR_CUDA, "cuda backend: sm90 scale preparation: %s", cudaGetErrorString(e));

  kernel_args ka;
  ka.m = (int)p->m;
  ka.n = (int)p->n;
  ka.l = (int)p->l;
  ka.tiles_m = (int)g.tiles_m;
  ka.tiles_n = (int)g.tiles_n;
  ka.nks = (int)g.nks;
  ka.nkb = g.nkb;
  ka.rb = g.rb;
  ka.cdt = (int)p->c;
  ka.c_transposed = g.swapped;
  ka.c_ms = p->c_ms;
  ka.c_ls = p->c_ls;
  ka.c = args->c;
  ka.sfa = wa;
  ka.sfb = wb;
  ka.sfa_raw = sfraw ? static_cast<const uint8_t *>(args->sfa) : nullptr;
  ka.sfa_raw_kq = (int)((p->kb + 3) / 4);
  ka.sfa_raw_rows = (int)((p->m + 127) / 128);
  ka.sfa_raw_ls = (int64_t)ka.sfa_raw_rows * ka.sfa_raw_kq * 512;
  ka.kb = (int)p->kb;
  ka.f16_offset = g.ws.f16_offset;
  /* 16-bit C of the wide pre-pass tiles through the ring's slots (epilogue_slots), where
   * the config allows (geometry::c_ring) and C is 16-byte aligned */
  CUtensorMap map_c;
  memset(&map_c, 0, sizeof map_c);
  ka.c_ring = 0;
  if (g.c_ring && ((uintptr_t)args->c & 15u) == 0) {
    const int64_t crows = g.swapped ? p->n : p->m, ccols = g.swapped ? p->m : p->n;
    ka.c_ring = make_map_c16(enc, &map_c, args->c, ccols, crows, p->l, p->c_ms, p->c_ls, p->c == MXF_BF16) ==
             CUDA_SUCCESS;
  }
  ka.fac_a = ra.fac_a;
  ka.fac_b = ra.fac_b;
  ka.tile_ok_a = ra.tile_ok_a;
  ka.tile_ok_b = ra.tile_ok_b;
  ka.f16 = g.f16;
  ka.alpha = args->alpha ? *args->alpha : 1.0f;

  ka.amax = args->amax;
  ka.units = (int)(g.whole + g.tail * g.split);
  ka.whole = (int)g.whole;
  ka.split = (int)g.split;
  ka.partial = wpart;
  ka.flags = wflags;
  const unsigned grid = (unsigned)g.grid;
  /* kernel: 0 no pre-pass, 1 pre-pass, 2 narrow (always with the pre-pass), 3 narrow on three warpgroups */
  const int kind = g.bp + (g.nb == BN_NARROW) + (g.wg == 3);
  if (kind < 0 || kind > 3) return no_instance("a tile shape");
  switch (g.fmt) {
  case FMT_E4M3: e = launch_gemm_kind<FMT_E4M3>(kind, grid, map_a, map_b, map_c, ka, stream); break;
  case FMT_E5M2: e = launch_gemm_kind<FMT_E5M2>(kind, grid, map_a, map_b, map_c, ka, stream); break;
  case FMT_E2M1: e = launch_gemm_kind<FMT_E2M1>(kind, grid, map_a, map_b, map_c, ka, stream); break;
  default: return no_instance("a register-operand format");
  }
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) return mxf_set_error(MXF_ERR_CUDA, "cuda backend: sm90 gemm_amax launch: %s", cudaGetErrorString(e));
  return MXF_OK;
}
