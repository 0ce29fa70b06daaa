/*
 * gemm_amax_sm90.cu — block-scaled GEMM + amax for Hopper (sm_90a): TMA + mbarrier
 * pipeline, exact dequantization to bf16 inside the mainloop, register-sourced wgmma.
 *
 * Scope (mxf_sm90_gemm_amax_plan): k-major A and B; e4m3/e5m2 with e8m0 scales per 32,
 * e2m1 with e8m0 per 32 or 16 or ue4m3 per 16; compact or swizzled scales; n-major C of any
 * dtype; any M, N, K >= 1 (rows 16-byte aligned), L >= 1; alpha; amax overwrite/accumulate.
 * Mixed pairs (docs/spec.md §1.1): A and B in different formats (or scale formats) run
 * with the B pre-pass (b_convert_any when the formats differ); a bf16 A runs swapped, as
 * the pre-pass's operand (a bf16 copy), the MX B in registers.
 *
 * Launches on the caller's stream:
 *   0. (fp8 codes with the f16 path on, see make_geometry) sf_rows: each row's reference
 *      exponent R and factor 2^(R - 127), and which tiles qualify (sm90_dequant.cuh, "The
 *      f16 path").
 *   1. sf_prepare: every scale byte of A and B (A alone with the B pre-pass) becomes a
 *      bf16 multiplier (and, with the f16 path, also an f16 multiplier 2^(b - R)), regrouped per
 *      (tile, k-stage) so each stage's scales are one contiguous bulk copy. Scales of rows
 *      beyond M/N and of k-blocks beyond K become 1.0, so SF padding is never read and
 *      zero-filled tails contribute exactly 0 even when a padding byte is 0xFF. Its first
 *      thread also prepares *amax (overwrite: +0; accumulate: canonical, as amax.cuh) and
 *      its first block zeroes the split tiles' flags.
 *   1b. (M of at least BP_TILES_M rows of tiles, see make_geometry) the B pre-pass: B
 *      dequantized once to bf16 in the workspace, in the layout of the tile the wgmmas
 *      read; the mainloop then converts A alone (see "The B pre-pass"). One launch
 *      (prep_bp_kernel) runs it beside step 1, which then prepares A's scales only, and
 *      on the narrow tiles not even those when they are e8m0 in the swizzled layout: the
 *      kernel then reads the bytes as they are (kernel_args::sfr, sf_raw_layout).
 *   2. gemm_kernel (persistent, one CTA per SM, 384 threads; 512 on the three-warpgroup
 *      narrow tiles, see make_geometry), a programmatic dependent
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
 * Few rows of A, or A much smaller than B (plan_problem's rule): the kernel runs the
 * swapped problem C^T = B A^T. B's rows become the tiles' rows, dequantized
 * in registers like A's; the caller's A goes through the B pre-pass (the smaller operand,
 * once); with at most 128 columns the tiles are 128 wide (m64n128 wgmmas, 8 stages); the
 * epilogue writes C transposed (kernel_args::tc).
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
#include <stdlib.h>
#include <string.h>

#include "cuda/amax.cuh"
#include "cuda/sm90/sm90_dequant.cuh"
#include "cuda/sm90/sm90_host.h"
#include "cuda/sm90/sm90_ops.h"
#include "cuda/sm90/sm90_ptx.cuh"

namespace mxf_sm90 {

/* ------------------------------------------------------------ tile geometry */
constexpr int BM = 128;            /* tile rows (A side), two consumer warpgroups x 64 */
constexpr int BN = 256;            /* tile columns (B side), one wgmma N */
constexpr int BK = 64;             /* k values per stage */
constexpr int NS = 4;              /* raw stages in the ring */
constexpr int NBB = 3;             /* bf16 B buffers (see the consumer loop) */
constexpr int RAW_A = BM * 64;     /* bytes of raw A per stage (fp8; e2m1 uses half) */
constexpr int RAW_B = BN * 64;
constexpr int SF_A = BM * 4 * 2;   /* up to 4 k-blocks per stage, bf16 each */
constexpr int SF_B = BN * 4 * 2;
constexpr int STAGE = RAW_A + RAW_B + SF_A + SF_B;
constexpr int BBUF = BN * BK * 2;  /* one bf16 B tile */
constexpr int EPI = 16 * 128;      /* per consumer warp: 16 rows x 128 bytes of C staging */
constexpr int FAC = (BN + BM) * 4;  /* the f16 path's factors of one tile */
constexpr int SMEM_BYTES = NS * STAGE + NBB * BBUF + 256 + 8 * EPI + 3 * FAC + 1024;
constexpr int GROUP_M = 8;         /* tile raster: groups of 8 m-tiles, n inside */
constexpr int EARLY_STAGES = 1;    /* A stages loaded before the preparation is waited for (raw scales) */
static_assert(STAGE % 1024 == 0 && BBUF % 1024 == 0, "1024-byte aligned buffers");
static_assert(SMEM_BYTES <= 227 * 1024, "fits one SM");
/* With the B pre-pass (see "The B pre-pass") a stage is raw A, B's bf16 tile and A's
 * scales; no bf16 ring, no f16 path. The narrow tile
 * (NB = 128 columns, operands swapped for few rows: see make_geometry) fits 8 of them. */
constexpr int BN_NARROW = 128;
/* The narrow tile may have three consumer warpgroups (WG = 3: 192-row tiles, 512 threads;
 * with A's scale bytes read as they are only, see make_geometry). */
constexpr int bp_ns(int nb, int wg) { return nb == BN ? 5 : wg == 2 ? 8 : 6; }
constexpr int bp_stage(int nb, int wg) { return 64 * 64 * wg + nb * BK * 2 + SF_A; }
constexpr int bp_smem_bytes(int nb, int wg) { return bp_ns(nb, wg) * bp_stage(nb, wg) + 256 + 4 * wg * EPI + 1024; }
static_assert(bp_stage(BN, 2) % 1024 == 0 && bp_stage(BN_NARROW, 2) % 1024 == 0 && bp_stage(BN_NARROW, 3) % 1024 == 0,
              "1024-byte aligned stages");
static_assert(bp_smem_bytes(BN, 2) <= 227 * 1024 && bp_smem_bytes(BN_NARROW, 2) <= 227 * 1024 &&
                  bp_smem_bytes(BN_NARROW, 3) <= 227 * 1024,
              "fits one SM");

struct kernel_args {
  int m, n, l;
  int tiles_m, tiles_n, nks, nkb; /* k-stages, k-blocks per stage (2 or 4) */
  int rb;                         /* raw bytes per row per stage: 64 (fp8) or 32 (e2m1) */
  int cdt;                        /* mxf_dtype of C */
  int tc;                         /* C transposed: tile element (i, j) is C's (j, i) (operands swapped; with BP only) */
  int cst;                        /* 16-bit C of the wide pre-pass tiles through the ring (epilogue_slots; tma_c) */
  int64_t c_ms, c_ls;
  void *c;
  const uint16_t *sfa, *sfb;      /* prepared scales in the workspace (bf16 multipliers) */
  /* The narrow tiles with A's scales e8m0 in the swizzled layout (16-byte aligned): the
   * kernel reads them as they are (sfa unused; raw_scales) */
  const uint8_t *sfr;             /* A's scale bytes, or null */
  int64_t sfr_ls;                 /* bytes per batch: R K' 512 */
  int sfr_kq, sfr_r, kb;          /* K' = ceil(kb / 4), R = ceil(m / 128); k-blocks of a row */
  int64_t d16;                    /* the f16 path's multipliers: sfa + d16, sfb + d16 */
  const float *fa, *fb;           /* per (batch, tile, row): the f16 path's 2^(R - 127) */
  const int *oka, *okb;           /* per (batch, tile): every row of the tile qualifies */
  int f16;                        /* the f16 path is enabled (geometry::f16); the arrays above are set */
  float alpha;
  float *amax;
  /* work units (see unit_work): whole tiles, then the last partial wave split along K */
  int units, whole, split;
  float *partial;                 /* (split - 1) f32 tiles per split tile, in the workspace */
  unsigned int *flags;            /* per split tile: parts written (zeroed by sf_prepare) */
};

struct prep_args {
  const uint8_t *sfa, *sfb;
  uint16_t *wa, *wb;
  uint16_t *wa16, *wb16;          /* fp8 codes: the f16 path's multipliers, else null */
  const float *fa, *fb;           /* the row factors written by sf_rows_kernel */
  int *oka, *okb;                 /* its tile marks, cleared here for tiles with a row that does not qualify */
  int64_t m, n, l, kb;
  int nks, tiles_m, tiles_n, nkb, sf_vec;
  int items_a, items_b;           /* (batch, tile, stage group, row) items per side */
  int ue4m3;
  mxf_sf_layout la, lb;
  float *amax;
  int accumulate;
  unsigned int *flags;
  int nflags;
};

__device__ __forceinline__ void tile_coords(int t, int tiles_m, int tiles_n, int &l, int &mt, int &nt) {
  const int per_l = tiles_m * tiles_n;
  l = t / per_l;
  const int r = t - l * per_l;
  const int band = GROUP_M * tiles_n;
  const int g = r / band;
  const int first = g * GROUP_M;
  const int gsz = min(tiles_m - first, GROUP_M);
  const int rr = r - g * band;
  mt = first + rr % gsz;
  nt = rr / gsz;
}

/*
 * Work units. A persistent CTA b takes units b, b + grid, ... Units [0, whole) are whole
 * tiles in raster order. When the tiles do not fill the last wave (r = tiles % grid > 0),
 * the last r tiles are split along K into `split` parts (split * r <= grid, so the parts
 * run side by side in the last round instead of r CTAs running whole tiles while the rest
 * idle); with at most half as many tiles as SMs, every tile is split (whole = 0, one unit
 * per CTA, grid = tiles * split). Part p < split - 1 of a split tile is a writer: it stores its f32 partial sums
 * and counts itself in the tile's flag; the last part, the finisher, runs on the highest
 * CTA index of the tile's parts (dispatched last, so its writers are already resident),
 * waits for split - 1 counts, adds the partial sums in part order and runs the epilogue.
 */
enum { ROLE_WHOLE = 0, ROLE_WRITER = 1, ROLE_FINISHER = 2 };
struct work_unit {
  int tile, ks0, ks1, role;
  int idx, part; /* split tiles: index among them, part */
};

__device__ __forceinline__ work_unit unit_work(int u, int whole, int split, int nks) {
  work_unit w;
  if (u < whole) {
    w.tile = u, w.ks0 = 0, w.ks1 = nks, w.role = ROLE_WHOLE, w.idx = 0, w.part = 0;
    return w;
  }
  const int v = u - whole, i = v / split, part = v - i * split;
  w.tile = whole + i;
  w.ks0 = part * nks / split;
  w.ks1 = (part + 1) * nks / split;
  w.role = part + 1 < split ? ROLE_WRITER : ROLE_FINISHER;
  w.idx = i;
  w.part = part;
  return w;
}

/* ------------------------------------------------------------ scale preparation */
struct rows_args {
  const uint8_t *sfa, *sfb;
  float *fa, *fb;
  int *oka, *okb;
  int64_t m, n, kb;
  int tiles_m, tiles_n, l;
  mxf_sf_layout la, lb;
};

/* A row's scale bytes are read as quads, k-blocks 4G .. 4G + 3: consecutive bytes in both
 * layouts, quad G + 1 lying sf_quad_step bytes after quad G. `on` bit j: k-block 4G + j
 * exists (the others read as 0). */
__device__ __forceinline__ int64_t sf_quad_step(mxf_sf_layout lay) { return lay == MXF_SF_COMPACT ? 4 : 512; }
__device__ __forceinline__ uint32_t sf_quad_on(int64_t kb_left) {
  return kb_left >= 4 ? 0xFu : kb_left > 0 ? (1u << kb_left) - 1u : 0u;
}
__device__ __forceinline__ uint32_t sf_quad(const uint8_t *src, uint32_t on, mxf_sf_layout lay) {
  if (on == 0xFu && lay != MXF_SF_COMPACT) return __ldg(reinterpret_cast<const uint32_t *>(src)); /* 4-byte aligned */
  uint32_t w = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j)
    if ((on >> j) & 1u) w |= (uint32_t)__ldg(src + j) << (8 * j);
  return w;
}

/* The f16 path's row factors (sm90_dequant.cuh): 8 lanes per (batch, side, tile, row),
 * lane c taking the row's quads c, c + 8, ...; rows beyond M / N get 1.0. The lane 0 of a
 * tile's row 0 marks the tile as qualifying; sf_prepare_kernel, launched after, clears the
 * mark when a row of the tile does not. */
template <int FMT>
__global__ void __launch_bounds__(256) sf_rows_kernel(const rows_args a) {
  const int rows_l = a.tiles_m * BM + a.tiles_n * BN; /* rows per batch */
  const int total = a.l * rows_l, c = threadIdx.x & 7;
  const int nq = (int)((a.kb + 3) / 4);
  for (int w0 = ((blockIdx.x * blockDim.x + threadIdx.x) >> 5) * 4; w0 < total; w0 += ((gridDim.x * blockDim.x) >> 5) * 4) {
    const int wi = w0 + ((threadIdx.x & 31) >> 3); /* every lane of the warp runs the shuffles */
    const int l = wi / rows_l, i = wi - l * rows_l;
    const bool is_a = i < a.tiles_m * BM;
    const int j = is_a ? i : i - a.tiles_m * BM, lg = is_a ? 7 : 8;
    const int tile = j >> lg, r = j & ((1 << lg) - 1), tiles = is_a ? a.tiles_m : a.tiles_n;
    const int64_t mn = is_a ? a.m : a.n, row = (int64_t)j;
    const bool live = wi < total && row < mn;
    uint32_t hi = 0u, lo = 0xFFFFFFFFu, nan = 0u; /* per byte lane */
    if (live) {
      const mxf_sf_layout lay = is_a ? a.la : a.lb;
      const uint8_t *base = (is_a ? a.sfa : a.sfb) + mxf_gemm_sf_offset(lay, mn, a.kb, row, 0, l);
      const int64_t step = sf_quad_step(lay);
#pragma unroll 2
      for (int q = c; q < nq; q += 8) {
        const uint32_t on = sf_quad_on(a.kb - 4 * (int64_t)q);
        const uint32_t w = sf_quad(base + q * step, on, lay);
        const uint32_t mask = (on & 1u ? 0xFFu : 0u) | (on & 2u ? 0xFF00u : 0u) | (on & 4u ? 0xFF0000u : 0u) |
                              (on & 8u ? 0xFF000000u : 0u);
        nan |= __vcmpeq4(w, 0xFFFFFFFFu) & mask;
        hi = __vmaxu4(hi, w & mask);
        lo = __vminu4(lo, w | ~mask);
      }
    }
#pragma unroll
    for (int off = 4; off > 0; off >>= 1) {
      nan |= __shfl_xor_sync(0xFFFFFFFFu, nan, off);
      hi = __vmaxu4(hi, __shfl_xor_sync(0xFFFFFFFFu, hi, off));
      lo = __vminu4(lo, __shfl_xor_sync(0xFFFFFFFFu, lo, off));
    }
    if (wi < total && c == 0) {
      uint32_t bits = 0x3F800000u;
      if (live) {
        const uint32_t h2 = __vmaxu4(hi, hi >> 16), l2 = __vminu4(lo, lo >> 16 | 0xFFFF0000u);
        bits = f16_row_factor<FMT>(max(h2 & 0xFFu, (h2 >> 8) & 0xFFu), min(l2 & 0xFFu, (l2 >> 8) & 0xFFu), nan != 0u);
      }
      (is_a ? a.fa : a.fb)[(((int64_t)l * tiles + tile) << lg) + r] = __uint_as_float(bits);
      if (r == 0) (is_a ? a.oka : a.okb)[l * tiles + tile] = 1;
    }
  }
}

/*
 * Scale preparation: one thread per (side, batch, tile, group of SP_STAGES k-stages, row).
 * It loads the group's scale bytes as quads (sf_quad) before converting any, then stores
 * each stage's nkb multipliers in one store (two with the f16 path's); a warp's stores of
 * a stage are 32 consecutive rows.
 */
constexpr int SP_STAGES = 8;

template <int NKB> __device__ __forceinline__ void sf_prepare_item(const prep_args &a, int e) {
  constexpr int NQ = SP_STAGES * NKB / 4; /* quads per item */
  const int ngr = (a.nks + SP_STAGES - 1) / SP_STAGES;
  const bool is_a = e < a.items_a;
  const int i = is_a ? e : e - a.items_a;
  const int lg = is_a ? 7 : 8; /* log2 of BM, BN */
  const int r = i & ((1 << lg) - 1), rest = i >> lg;
  const int gr = rest % ngr, tl = rest / ngr;
  const int tiles = is_a ? a.tiles_m : a.tiles_n;
  const int tile = tl % tiles, l = tl / tiles;
  const int64_t mn = is_a ? a.m : a.n, row = ((int64_t)tile << lg) + r;
  const mxf_sf_layout lay = is_a ? a.la : a.lb;
  /* the f16 path: factor bits of the row (0: it does not qualify, its tile never takes
   * the path, the values are left at 1.0) */
  const uint32_t fbits = a.wa16 ? __float_as_uint((is_a ? a.fa : a.fb)[((int64_t)tl << lg) + r]) : 0u;
  if (a.wa16 && gr == 0 && fbits == 0) (is_a ? a.oka : a.okb)[tl] = 0; /* a row that does not qualify */
  const int64_t q0 = (int64_t)gr * NQ; /* the item's first quad */
  const uint8_t *base = (is_a ? a.sfa : a.sfb) + (row < mn ? mxf_gemm_sf_offset(lay, mn, a.kb, row, 0, l) : 0);
  const int64_t step = sf_quad_step(lay);
  uint32_t w[NQ], on[NQ];
#pragma unroll
  for (int q = 0; q < NQ; ++q) {
    on[q] = row < mn ? sf_quad_on(a.kb - 4 * (q0 + q)) : 0u;
    w[q] = sf_quad(base + (q0 + q) * step, on[q], lay);
  }
#pragma unroll
  for (int q = 0; q < NQ; ++q) {
    uint32_t p01, p23, h01 = 0, h23 = 0;
    scale_quad(w[q], on[q], a.ue4m3, p01, p23);
    if (a.wa16) f16_quad(w[q], on[q], fbits, h01, h23);
    /* the quad's stages: two (NKB 2: k-blocks 0, 1 and 2, 3) or one */
#pragma unroll
    for (int h = 0; h < 4 / NKB; ++h) {
      const int ks = gr * SP_STAGES + q * (4 / NKB) + h;
      if (ks >= a.nks) break;
      const int64_t off = ((((int64_t)tl * a.nks + ks) << lg) + r) * NKB;
      uint16_t *dst = (is_a ? a.wa : a.wb) + off, *dst16 = a.wa16 ? (is_a ? a.wa16 : a.wb16) + off : nullptr;
      if (NKB == 2) {
        *reinterpret_cast<uint32_t *>(dst) = h ? p23 : p01;
        if (dst16) *reinterpret_cast<uint32_t *>(dst16) = h ? h23 : h01;
      } else {
        *reinterpret_cast<uint2 *>(dst) = make_uint2(p01, p23);
        if (dst16) *reinterpret_cast<uint2 *>(dst16) = make_uint2(h01, h23);
      }
    }
  }
}

__device__ __forceinline__ void sf_prepare_blocks(const prep_args &a, int bx, int nbx) {
  for (int e = bx * blockDim.x + threadIdx.x; e < a.items_a + a.items_b; e += nbx * blockDim.x) {
    if (a.nkb == 2) sf_prepare_item<2>(a, e);
    else sf_prepare_item<4>(a, e);
  }
  if (bx == 0)
    for (int i = threadIdx.x; i < a.nflags; i += blockDim.x) a.flags[i] = 0;
  if (bx == 0 && threadIdx.x == 0) {
    /* the amax contract of amax.cuh: overwrite -> +0; accumulate -> -0/negatives -> +0,
     * NaN -> 0x7FFFFFFF, so one unsigned atomicMax per CTA is exact */
    unsigned int *p = reinterpret_cast<unsigned int *>(a.amax);
    *p = a.accumulate ? mxf_amax_canonical(*p) : 0u;
  }
}

/* The gemm kernel is launched as a programmatic dependent of the preparation kernel: the
 * preparation lets it be scheduled at once, and it waits (grid_dependency_wait) for the
 * preparation's results before reading any. */
__global__ void __launch_bounds__(256) sf_prepare_kernel(const prep_args a) {
  allow_dependent_launch();
  sf_prepare_blocks(a, blockIdx.x, gridDim.x);
}

/*
 * The B pre-pass. With many rows of tiles, every B tile is converted once per row of
 * tiles in the mainloop, and the conversion's shared-memory traffic (raw reads, the bf16
 * tile's stores, the barrier between the warpgroups) is what bounds the kernel
 * (docs/decisions.md, gemm_amax: the B pre-pass).
 * Then B is converted once, here, to bf16 in the workspace: row n of batch l is
 * nks * 64 values, stage by stage, each stage's 64 in the order the consumers' A fragments
 * use (k16 step s, position 2 qq + e of its first and second half: raw k 16 qq + 4 s + j,
 * j = 2 half + e for fp8, half + 2 e for e2m1 — dequant_word's pairs), so a TMA box of it
 * is the tile the wgmmas read. Values: code * scale rounded once to bf16 with the
 * mainloop's modes (one product when scale * 2^c fits bf16, two otherwise, NaN/inf codes
 * exact); k beyond K reads 0; k-blocks beyond the scales' K get scale 1.0.
 *
 * A warp takes 4 rows (8 lanes each) and G consecutive stages of them: lane c of a row
 * writes the 16-byte chunk c of every stage (k16 step c / 2, its first or second half),
 * so each store covers 4 whole 128-byte lines. The group's code words are all loaded
 * before the first is converted; lane c < G reads and converts the scales of the group's
 * stage c, which the row's lanes then take by shuffle. G is 8 (BC_STAGES), or 2 when that
 * leaves fewer than 8 warps a SM (bc_group): a warp's chain of loads and conversions is
 * what the pass waits for then, and at 128 x 24576 x 1536 groups of 2 made the whole call
 * 10 % faster (groups of 2 on the large shapes: +1 %; docs/decisions.md, gemm_amax: the B pre-pass).
 */
constexpr int BC_STAGES = 8;
struct bconv_args {
  const uint8_t *b, *sfb;
  uint4 *out;
  int64_t b_row, b_bat, kbytes, n, kb;
  int64_t units;                  /* (4-row group, stage group) pairs */
  int64_t rows;                   /* l * n */
  int nks, ngr, nkb, rb, ue4m3;   /* ngr: stage groups per row */
  mxf_sf_layout lb;
};

template <int FMT, int G> __device__ __forceinline__ void b_convert_blocks(const bconv_args &a, int bx, int nbx) {
  constexpr uint32_t K = fmt_consts<FMT>::K;
  const int lane = threadIdx.x & 31, c = lane & 7, half = c & 1, st = c >> 1;
  const int src0 = lane & ~7; /* the row's first lane */
  /* the byte offset of word qq in a stage: fp8 16 qq + 4 st; e2m1 8 qq + 4 (st / 2), of
   * which the 16-bit half st % 2 */
  const int woff = FMT == FMT_E2M1 ? 4 * (st >> 1) : 4 * st, wstep = FMT == FMT_E2M1 ? 8 : 16;
  const int e2hi = FMT == FMT_E2M1 ? (st & 1) : 0;
  for (int64_t u = ((int64_t)bx * blockDim.x + threadIdx.x) >> 5; u < a.units; u += ((int64_t)nbx * blockDim.x) >> 5) {
    const int64_t rq = u / a.ngr;
    const int ks0 = (int)(u - rq * a.ngr) * G;
    const int nst = min(G, a.nks - ks0);
    const int64_t rr = 4 * rq + (lane >> 3);
    const bool valid = rr < a.rows;
    const int64_t l = valid ? rr / a.n : 0, n = valid ? rr - l * a.n : 0;
    const uint8_t *src = a.b + l * a.b_bat + n * a.b_row + (int64_t)ks0 * a.rb + woff;
    /* the group's code words; zero beyond K */
    uint32_t w[G][4];
    const int64_t left = a.kbytes - (int64_t)ks0 * a.rb - woff; /* code bytes from src on */
    const bool whole = (int64_t)(ks0 + nst) * a.rb <= a.kbytes; /* a word ends at most 4 bytes before its stage */
    if (valid && whole && nst == G) { /* all but a row's last group when K % (64 G) != 0 */
#pragma unroll
      for (int s = 0; s < G; ++s)
#pragma unroll
        for (int qq = 0; qq < 4; ++qq) w[s][qq] = __ldg(reinterpret_cast<const uint32_t *>(src + s * a.rb + qq * wstep));
    } else {
#pragma unroll
      for (int s = 0; s < G; ++s)
#pragma unroll
        for (int qq = 0; qq < 4; ++qq) {
          const int64_t off = (int64_t)s * a.rb + qq * wstep;
          uint32_t v = 0;
          if (valid && s < nst) {
            if (whole) {
              v = __ldg(reinterpret_cast<const uint32_t *>(src + off));
            } else {
              for (int b = 0; b < 4; ++b)
                if (off + b < left) v |= (uint32_t)src[off + b] << (8 * b);
            }
          }
          w[s][qq] = v;
        }
    }
    /* lane c: the scales of stage ks0 + c as bf16 pairs (k-blocks 0,1 and 2,3) */
    uint32_t s01 = 0x3F803F80u, s23 = 0x3F803F80u;
    if (valid && c < nst) {
      const int64_t kb0 = (int64_t)(ks0 + c) * a.nkb;
      const uint8_t *sf = a.sfb + mxf_gemm_sf_offset(a.lb, a.n, a.kb, n, kb0, l);
      const uint32_t on = sf_quad_on(a.kb - kb0) & ((1u << a.nkb) - 1u); /* the stage's k-blocks */
      const uint32_t sw = sf_quad(sf, on, a.lb) | (a.nkb == 2 ? 0x7F7F0000u : 0u); /* past nkb: unused, 1.0 */
      scale_quad(sw, a.nkb == 2 ? on | 0xCu : on, a.ue4m3, s01, s23);
    }
    uint4 *dst = a.out + ((rr * a.nks + ks0) << 3) + c;
#pragma unroll
    for (int s = 0; s < G; ++s) {
      const uint32_t p01 = __shfl_sync(0xFFFFFFFFu, s01, src0 + s), p23 = __shfl_sync(0xFFFFFFFFu, s23, src0 + s);
      if (!valid || s >= nst) continue;
      /* word qq's scale pair: k-block qq / 2 of the stage (nkb 2) or qq (nkb 4) */
      const auto pick = [&](uint32_t x01, uint32_t x23, int qq) {
        const uint32_t pr = a.nkb == 2 || qq < 2 ? x01 : x23;
        return prmt(pr, 0u, (a.nkb == 2 ? (qq >> 1) : (qq & 1)) ? 0x3232u : 0x1010u);
      };
      uint32_t special = 0;
      if constexpr (FMT != FMT_E2M1) {
#pragma unroll
        for (int qq = 0; qq < 4; ++qq) special |= fp8_special<FMT>(w[s][qq]);
        special &= 0x80808080u;
      }
      const uint32_t over = fold_check<FMT>(p01) | (a.nkb == 2 ? 0u : fold_check<FMT>(p23));
      uint32_t o[4];
      if (special) {
#pragma unroll
        for (int qq = 0; qq < 4; ++qq) {
          uint32_t h0, h1;
          const uint32_t s2 = pick(p01, p23, qq);
          dequant_word<FMT, FMT == FMT_E2M1 ? MODE_TWO : MODE_EXACT>(w[s][qq], w[s][qq] << 4, e2hi, s2, s2, h0, h1);
          o[qq] = half ? h1 : h0;
        }
      } else if (MXF_FOLD_OVER(over)) {
#pragma unroll
        for (int qq = 0; qq < 4; ++qq)
          o[qq] = bf16x2_mul(bf16x2_mul(place_pair<FMT>(w[s][qq], w[s][qq] << 4, e2hi, half), K), pick(p01, p23, qq));
      } else {
        const uint32_t f01 = fold_scale<FMT>(p01), f23 = a.nkb == 2 ? f01 : fold_scale<FMT>(p23);
#pragma unroll
        for (int qq = 0; qq < 4; ++qq)
          o[qq] = bf16x2_mul(place_pair<FMT>(w[s][qq], w[s][qq] << 4, e2hi, half), pick(f01, f23, qq));
      }
      dst[8 * s] = make_uint4(o[0], o[1], o[2], o[3]);
    }
  }
}

/* With the B pre-pass, A's scale preparation (blocks [0, pblocks)) and B's conversion (the
 * rest, in groups of G stages) in one launch. */
template <int FMT, int G>
__global__ void __launch_bounds__(256) prep_bp_kernel(const prep_args pa, const bconv_args ba, int pblocks) {
  allow_dependent_launch();
  if ((int)blockIdx.x < pblocks) sf_prepare_blocks(pa, blockIdx.x, pblocks);
  else b_convert_blocks<FMT, G>(ba, blockIdx.x - pblocks, gridDim.x - pblocks);
}

/*
 * The B pre-pass of a mixed pair (A and B in different formats, docs/spec.md §1.1): the
 * same bf16 tile layout as b_convert_blocks, in the k order of the register operand A's
 * fragments (E2: A is e2m1), from B codes of any MX format or from bf16 B (a copy). One
 * thread per 16-byte chunk of the layout (8 values; the 8 chunks of a row's stage on
 * consecutive threads, so the stores are whole lines), element by element with formats.h:
 * code * scale in f32 is exact for every pair of formats (at most 8 significant bits,
 * exponents inside f32's range down to its subnormals), rounded once to bf16 (exact
 * inside SPEC §1.2's window), NaN / inf kept; k beyond K is 0 (its scale never read).
 */
struct bany_args {
  const uint8_t *b, *sfb;
  uint4 *out;
  int64_t b_row, b_bat;           /* bytes */
  int64_t n, k, kb, chunks;       /* chunks: l * n * nks * 8 */
  int nks, sf_shift, ue4m3;       /* sf_shift: log2 sf_vec */
  int idx32;                      /* chunks < 2^32: 32-bit index arithmetic */
  mxf_sf_layout lb;
};

template <int BDT> __device__ __forceinline__ float b_any_code(const uint8_t *row, int64_t k) {
  if constexpr (BDT == MXF_E2M1) return mxf_e2m1_to_f32(mxf_e2m1_get(row, k));
  else if constexpr (BDT == MXF_E4M3) return mxf_e4m3_to_f32(row[k]);
  else return mxf_e5m2_to_f32(row[k]);
}

template <bool E2, int BDT> __device__ __forceinline__ void b_convert_any(const bany_args &a, int bx, int nbx) {
  for (int64_t i = (int64_t)bx * blockDim.x + threadIdx.x; i < a.chunks; i += (int64_t)nbx * blockDim.x) {
    const int c = (int)(i & 7), st = c >> 1, half = c & 1;
    int64_t l, n;
    int ks;
    if (a.idx32) {
      const uint32_t u = (uint32_t)(i >> 3), rr = u / (uint32_t)a.nks, l32 = rr / (uint32_t)a.n;
      ks = (int)(u - rr * (uint32_t)a.nks), l = l32, n = rr - l32 * (uint32_t)a.n;
    } else {
      const int64_t u = i >> 3, rr = u / a.nks;
      ks = (int)(u - rr * a.nks), l = rr / a.n, n = rr - l * a.n;
    }
    const uint8_t *row = a.b + l * a.b_bat + n * a.b_row;
    uint32_t o[4];
#pragma unroll
    for (int qq = 0; qq < 4; ++qq) {
      /* the pair (k0, k0 + dk): fp8 fragments k 16 qq + 4 st + 2 half + e, e2m1 ones + half + 2 e */
      const int64_t k0 = (int64_t)ks * BK + 16 * qq + 4 * st + (E2 ? half : 2 * half), dk = E2 ? 2 : 1;
      if constexpr (BDT == MXF_BF16) {
        const uint16_t *r16 = reinterpret_cast<const uint16_t *>(row);
        const uint32_t lo = k0 < a.k ? r16[k0] : 0u, hi = k0 + dk < a.k ? r16[k0 + dk] : 0u;
        o[qq] = lo | hi << 16;
      } else {
        /* k0 and k0 + dk lie in one block of 16 */
        const float sc =
            k0 < a.k ? mxf_scale_to_f32(a.sfb[mxf_gemm_sf_offset(a.lb, a.n, a.kb, n, k0 >> a.sf_shift, l)], a.ue4m3)
                     : 0.0f;
        const float v0 = k0 < a.k ? b_any_code<BDT>(row, k0) * sc : 0.0f;
        const float v1 = k0 + dk < a.k ? b_any_code<BDT>(row, k0 + dk) * sc : 0.0f;
        o[qq] = (uint32_t)mxf_f32_to_bf16(v0) | (uint32_t)mxf_f32_to_bf16(v1) << 16;
      }
    }
    a.out[i] = make_uint4(o[0], o[1], o[2], o[3]);
  }
}

template <bool E2, int BDT>
__global__ void __launch_bounds__(256) prep_bp_any_kernel(const prep_args pa, const bany_args ba, int pblocks) {
  allow_dependent_launch();
  if ((int)blockIdx.x < pblocks) sf_prepare_blocks(pa, blockIdx.x, pblocks);
  else b_convert_any<E2, BDT>(ba, blockIdx.x - pblocks, gridDim.x - pblocks);
}

/* ------------------------------------------------------------ shared memory map */
/* BP = 0: stages of raw A, raw B and both scales, then the bf16 B ring; BP = 1 (B from the
 * pre-pass): stages of raw A, B's bf16 tile (raw_b) and A's scales. */
template <int BP, int NB = BN, int WG = 2> struct smem_map_t {
  static_assert(NB == BN || BP, "the narrow tile runs with the B pre-pass only");
  static_assert(WG == 2 || (BP && NB == BN_NARROW), "three consumer warpgroups: narrow tile only");
  static constexpr int tm = 64 * WG;          /* tile rows */
  static constexpr int raw_a_bytes = tm * 64; /* a stage's raw A (fp8; e2m1 uses half) */
  static constexpr int ns = BP ? bp_ns(NB, WG) : NS, stage = BP ? bp_stage(NB, WG) : STAGE;
  static constexpr int bp_tile = NB * BK * 2; /* bytes of a stage's bf16 B tile (pre-pass) */
  static constexpr int ring = ns * stage + (BP ? 0 : NBB * BBUF); /* bytes before the barriers */
  uint32_t base; /* shared-window address, 1024-aligned */
  __device__ __forceinline__ uint32_t raw_a(int s) const { return base + s * stage; }
  __device__ __forceinline__ uint32_t raw_b(int s) const { return base + s * stage + raw_a_bytes; }
  __device__ __forceinline__ uint32_t sf_a(int s) const {
    return base + s * stage + raw_a_bytes + (BP ? bp_tile : RAW_B);
  }
  __device__ __forceinline__ uint32_t sf_b(int s) const { return sf_a(s) + SF_A; }
  __device__ __forceinline__ uint32_t bbuf(int i) const { return base + NS * STAGE + i * BBUF; }
  __device__ __forceinline__ uint32_t full(int i) const { return base + ring + 8 * i; }
  __device__ __forceinline__ uint32_t empty(int i) const { return full(ns) + 8 * i; }
  __device__ __forceinline__ uint32_t amax() const { return full(2 * ns); }
  /* slot i's C to store (kernel_args::cst): 3 words, see epilogue_slots */
  __device__ __forceinline__ uint32_t cst(int i) const { return amax() + 8 + 12 * i; }
  __device__ __forceinline__ uint32_t epi(int w) const { return base + ring + 256 + w * EPI; }
  __device__ __forceinline__ uint32_t factors(int i) const { return epi(4 * WG) + i * FAC; }
};
using smem_map = smem_map_t<0>;

/* Raw codes and scales of one stage as one consumer thread sees them. */
struct stage_regs {
  uint32_t a0[4], a1[4];  /* A rows ar0, ar0 + 8: raw words s = 0..3 (e2m1: 2 per register) */
  uint32_t b[4][4];       /* B row: raw word s of thread-q's k range, [q][s] */
};
struct stage_scales {
  uint32_t a0, a1;        /* A scales (bf16x2, or f16x2 on the f16 path) */
  uint32_t b[4];          /* B scales per q */
};

/* Converts a stage's A fragment into fr. */
template <int FMT, int MODE>
__device__ __forceinline__ void convert_a(const stage_regs &r, const stage_scales &sc, uint32_t (&fr)[16]) {
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const int reg = FMT == FMT_E2M1 ? (s >> 1) : s;
    const int hi = FMT == FMT_E2M1 ? (s & 1) : 0;
    dequant_word<FMT, MODE>(r.a0[reg], r.a0[reg] << 4, hi, sc.a0, sc.a0, fr[4 * s + 0], fr[4 * s + 2]);
    dequant_word<FMT, MODE>(r.a1[reg], r.a1[reg] << 4, hi, sc.a1, sc.a1, fr[4 * s + 1], fr[4 * s + 3]);
  }
}

/* Converts a stage's A fragment into fr and (WB) its B row into the bf16 tile row at bt. */
template <int FMT, int MODE, bool WB = true>
__device__ __forceinline__ void convert_stage(const stage_regs &r, const stage_scales &sc, uint32_t (&fr)[16],
                                              uint32_t bt, int n) {
  convert_a<FMT, MODE>(r, sc, fr);
  if constexpr (WB) {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      uint32_t h0[4], h1[4];
#pragma unroll
      for (int qq = 0; qq < 4; ++qq) {
        const uint32_t w = r.b[qq][FMT == FMT_E2M1 ? (s >> 1) : s];
        dequant_word<FMT, MODE>(w, w << 4, FMT == FMT_E2M1 ? (s & 1) : 0, sc.b[qq], sc.b[qq], h0[qq], h1[qq]);
      }
      sts_v4(bt + (((2 * s) ^ (n & 7)) << 4), h0[0], h0[1], h0[2], h0[3]);
      sts_v4(bt + (((2 * s + 1) ^ (n & 7)) << 4), h1[0], h1[1], h1[2], h1[3]);
    }
  }
}

/* fp8_special over the A words of a stage (0 for e2m1), before the mask */
template <int FMT> __device__ __forceinline__ uint32_t a_special(const stage_regs &r) {
  uint32_t special = 0;
  if constexpr (FMT != FMT_E2M1) {
#pragma unroll
    for (int s = 0; s < 4; ++s) special |= fp8_special<FMT>(r.a0[s]) | fp8_special<FMT>(r.a1[s]);
  }
  return special;
}

/* The bf16 path of a stage (WB: A and B; else A alone): NaN/inf codes anywhere in this
 * thread's words -> exact; a scale too large to fold 2^c into -> two products; else one
 * product per pair. */
template <int FMT, bool WB = true>
__device__ __forceinline__ void convert_stage_bf16(const stage_regs &r, const stage_scales &sc, uint32_t (&fr)[16],
                                                   uint32_t bt, int n) {
  uint32_t special = a_special<FMT>(r);
  if constexpr (FMT != FMT_E2M1) {
    if constexpr (WB) {
#pragma unroll
      for (int c = 0; c < 4; ++c)
#pragma unroll
        for (int s = 0; s < 4; ++s) special |= fp8_special<FMT>(r.b[c][s]);
    }
    special &= 0x80808080u;
  }
  uint32_t over = fold_check<FMT>(sc.a0) | fold_check<FMT>(sc.a1);
  if constexpr (WB) {
#pragma unroll
    for (int c = 0; c < 4; ++c) over |= fold_check<FMT>(sc.b[c]);
  }

  /* one mode per warp: lanes in different modes would run both paths one after the other
   * (with MXFP4 activations, scales above 2^1 are common and need MODE_TWO) */
  const bool w_special = FMT != FMT_E2M1 && __any_sync(0xFFFFFFFFu, special != 0);
  const bool w_over = __any_sync(0xFFFFFFFFu, MXF_FOLD_OVER(over));
  if (!w_special && !w_over) {
    stage_scales fs; /* folded scales: scale * 2^c */
    fs.a0 = fold_scale<FMT>(sc.a0);
    fs.a1 = fold_scale<FMT>(sc.a1);
    if constexpr (WB) {
#pragma unroll
      for (int c = 0; c < 4; ++c) fs.b[c] = fold_scale<FMT>(sc.b[c]);
    }
    convert_stage<FMT, MODE_FOLD, WB>(r, fs, fr, bt, n);
  } else if (!w_special) {
    convert_stage<FMT, MODE_TWO, WB>(r, sc, fr, bt, n);
  } else {
    convert_stage<FMT, FMT == FMT_E2M1 ? MODE_TWO : MODE_EXACT, WB>(r, sc, fr, bt, n);
  }
}

/* A stage's raw A rows ar0 and ar0 + 8: raw k 16q .. 16q + 15. */
template <int FMT>
__device__ __forceinline__ void load_a_codes(stage_regs &r, uint32_t raw_a, int ar0, int q) {
  if constexpr (FMT == FMT_E2M1) {
    /* 32-byte rows, 32B swizzle: 16-byte chunk c of row r sits at chunk c ^ ((r >> 2) & 1) */
    const uint32_t off = ((((q >> 1) ^ ((ar0 >> 2) & 1))) << 4) + 8 * (q & 1);
    const uint2 w0 = lds_v2(raw_a + ar0 * 32 + off);
    const uint2 w1 = lds_v2(raw_a + (ar0 + 8) * 32 + off);
    r.a0[0] = w0.x; r.a0[1] = w0.y; r.a1[0] = w1.x; r.a1[1] = w1.y;
    r.a0[2] = r.a0[3] = r.a1[2] = r.a1[3] = 0;
  } else {
    /* 64-byte rows, 64B swizzle: chunk c of row r sits at chunk c ^ ((r >> 1) & 3) */
    const uint32_t off = (q ^ ((ar0 >> 1) & 3)) << 4;
    const uint4 w0 = lds_v4(raw_a + ar0 * 64 + off);
    const uint4 w1 = lds_v4(raw_a + (ar0 + 8) * 64 + off);
    r.a0[0] = w0.x; r.a0[1] = w0.y; r.a0[2] = w0.z; r.a0[3] = w0.w;
    r.a1[0] = w1.x; r.a1[1] = w1.y; r.a1[2] = w1.z; r.a1[3] = w1.w;
  }
}

/* load_a_codes and the rows' scales from the stage's prepared A-scale area. */
template <int FMT>
__device__ __forceinline__ void load_a(stage_regs &r, stage_scales &sc, uint32_t raw_a, uint32_t sf_a, int nkb,
                                       int ar0, int q) {
  const int kq = nkb == 2 ? (q >> 1) : q;
  sc.a0 = dup16(lds_u16(sf_a + 2 * (ar0 * nkb + kq)));
  sc.a1 = dup16(lds_u16(sf_a + 2 * ((ar0 + 8) * nkb + kq)));
  load_a_codes<FMT>(r, raw_a, ar0, q);
}

/* A's scale bytes read as they are (kernel_args::sfr): a stage's area holds the 512-byte
 * blocks of the swizzled layout (SPEC §1.1: 128 rows x 4 k-blocks) that hold the tile's
 * rows, one for 128-row tiles, two (blocks r0 / 128 and the next) for 192-row tiles,
 * which start at row r0 % 128 = 0 or 64 of the first; row ar0 + 8's byte lies 128 bytes
 * after row ar0's. A k-block beyond the scales' K (padding, maybe 0xFF) reads as byte
 * 127, 1.0. */
struct raw_scales {
  bool on;     /* kernel_args::sfr is set */
  int off;     /* the byte of row ar0 and this thread's k-block of a stage, less the stage's */
  int ks_live; /* stages ks < ks_live hold this thread's k-block */
};
/* Whether the kernel of NB columns reads A's scale bytes as they are (only the narrow
 * tiles get sfr, see sf_raw_layout). */
template <int NB> __device__ __forceinline__ bool raw_scales_on(const kernel_args &p) {
  return NB == BN_NARROW && p.sfr != nullptr;
}
/* r0: the tile's first row, modulo 128. The offsets below are formats.h's
 * mxf_sf_swz_offset in 32-bit arithmetic (calling it cost the 128-row shape ~1 %:
 * docs/decisions.md, gemm_amax: scale preparation, raw scale bytes). */
template <int NB> __device__ __forceinline__ raw_scales make_raw_scales(const kernel_args &p, int ar0, int q, int r0) {
  const int kq = p.nkb == 2 ? (q >> 1) : q, rr = r0 + ar0;
  raw_scales rs;
  rs.on = raw_scales_on<NB>(p);
  rs.off = (rr >> 7) * 512 + (rr & 31) * 16 + ((rr >> 5) & 3) * 4 + kq;
  rs.ks_live = (p.kb - kq + p.nkb - 1) / p.nkb;
  return rs;
}
/* The producer's bulk copies of a stage's scale blocks (raw_scales) for tile mt, k-stage ks,
 * batch l: `blocks` of 512 bytes from the tile's first row's block (the second clamped to
 * the last block: its rows are then beyond M). */
__device__ __forceinline__ void load_raw_scales(const kernel_args &p, uint32_t dst, int tm, int blocks, int l, int mt,
                                                int ks, uint32_t bar) {
  const int b0 = (mt * tm) >> 7, kt = (ks * p.nkb) >> 2;
  const uint8_t *src = p.sfr + l * p.sfr_ls + ((int64_t)b0 * p.sfr_kq + kt) * 512;
  bulk_load(dst, src, 512u, bar);
  if (blocks == 2) bulk_load(dst + 512, b0 + 1 < p.sfr_r ? src + (int64_t)p.sfr_kq * 512 : src, 512u, bar);
}

/* convert_stage_bf16 without B, from the rows' scale bytes b0, b1: MODE_FOLD's multipliers
 * come from the bytes (e8m0_fold_pair), the other modes' from scale_bf16. */
template <int FMT>
__device__ __forceinline__ void convert_a_raw(const stage_regs &r, uint32_t b0, uint32_t b1, uint32_t (&fr)[16]) {
  const bool w_special = FMT != FMT_E2M1 && __any_sync(0xFFFFFFFFu, (a_special<FMT>(r) & 0x80808080u) != 0);
  const bool w_over = __any_sync(0xFFFFFFFFu, max(b0, b1) > e8m0_fold_max<FMT>());
  stage_scales sc;
  if (!w_special && !w_over) {
    sc.a0 = e8m0_fold_pair<FMT>(b0);
    sc.a1 = e8m0_fold_pair<FMT>(b1);
    convert_a<FMT, MODE_FOLD>(r, sc, fr);
    return;
  }
  sc.a0 = dup16(scale_bf16((uint8_t)b0, 0));
  sc.a1 = dup16(scale_bf16((uint8_t)b1, 0));
  if (!w_special) convert_a<FMT, MODE_TWO>(r, sc, fr);
  else convert_a<FMT, FMT == FMT_E2M1 ? MODE_TWO : MODE_EXACT>(r, sc, fr);
}

/*
 * One k-stage of one consumer thread: A fragment into `fr`, raw B row ct into the bf16
 * ring buffer, barrier, 4 wgmmas, then wait until the previous stage's wgmmas are done
 * (so the other fragment array and the bf16 buffer two stages back are free again).
 *
 * Why three bf16 buffers: stage g writes buffer g%3, last read by stage g-3's wgmmas. This
 * thread's warpgroup finished those at the end of stage g-2; the other warpgroup finished
 * them before it reached the named barrier of stage g-1, which this thread has passed.
 */
template <int FMT, int H>
__device__ __forceinline__ void consume_stage(float (&acc)[128], uint32_t (&fr)[16], const smem_map &sm,
                                              uint32_t g, int ks, int nkb, int ct, int ar0, int q,
                                              int lane) {
  const int slot = (int)(g % NS);
  mbar_wait(sm.full(slot), (g / NS) & 1u);

  stage_regs r;
  stage_scales sc;
  load_a<FMT>(r, sc, sm.raw_a(slot), sm.sf_a(slot), nkb, ar0, q);
  /* ---- B: raw row n = ct */
  const int n = ct;
  if (nkb == 2) {
    const uint32_t t = lds_u32(sm.sf_b(slot) + 4 * n);
    sc.b[0] = sc.b[1] = dup16(t & 0xFFFFu);
    sc.b[2] = sc.b[3] = dup16(t >> 16);
  } else {
    const uint2 t = lds_v2(sm.sf_b(slot) + 8 * n);
    sc.b[0] = dup16(t.x & 0xFFFFu);
    sc.b[1] = dup16(t.x >> 16);
    sc.b[2] = dup16(t.y & 0xFFFFu);
    sc.b[3] = dup16(t.y >> 16);
  }
  if constexpr (FMT == FMT_E2M1) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const uint4 v = lds_v4(sm.raw_b(slot) + n * 32 + ((c ^ ((n >> 2) & 1)) << 4));
      r.b[2 * c][0] = v.x; r.b[2 * c][1] = v.y; r.b[2 * c][2] = r.b[2 * c][3] = 0;
      r.b[2 * c + 1][0] = v.z; r.b[2 * c + 1][1] = v.w; r.b[2 * c + 1][2] = r.b[2 * c + 1][3] = 0;
    }
  } else {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const uint4 v = lds_v4(sm.raw_b(slot) + n * 64 + ((c ^ ((n >> 1) & 3)) << 4));
      r.b[c][0] = v.x; r.b[c][1] = v.y; r.b[c][2] = v.z; r.b[c][3] = v.w;
    }
  }

  const int bi = (int)(g % NBB);
  const uint32_t bt = sm.bbuf(bi) + n * 128;
  if constexpr (H) {
    convert_stage<FMT, MODE_F16>(r, sc, fr, bt, n); /* f16 multipliers, NaN/inf codes exact */
  } else {
    convert_stage_bf16<FMT>(r, sc, fr, bt, n);
  }

  fence_proxy_async();
  __syncwarp();
  if (lane == 0) mbar_arrive(sm.empty(slot)); /* raw stage consumed */
  named_bar_sync(1, 256);

  wgmma_fence();
  const uint64_t desc = wgmma_desc_sw128(sm.bbuf(bi));
#pragma unroll
  for (int s = 0; s < 4; ++s)
    wgmma_m64n256k16_rs<H>(acc, fr[4 * s + 0], fr[4 * s + 1], fr[4 * s + 2], fr[4 * s + 3], desc + 2 * s,
                           (ks > 0 || s > 0) ? 1u : 0u); /* ks: stage index within the unit */
  wgmma_commit();
  wgmma_wait<1>();
}

/* ------------------------------------------------------------ epilogue */
template <int CDT>
__device__ __forceinline__ void store_pair(uint8_t *c, int64_t off, float v0, float v1, bool two) {
  if constexpr (CDT == MXF_F32) {
    float *p = reinterpret_cast<float *>(c) + off;
    if (two) *reinterpret_cast<float2 *>(p) = make_float2(v0, v1);
    else p[0] = v0;
  } else if constexpr (CDT == MXF_BF16 || CDT == MXF_F16) {
    uint16_t *p = reinterpret_cast<uint16_t *>(c) + off;
    const uint16_t a = CDT == MXF_BF16 ? mxf_f32_to_bf16(v0) : mxf_f32_to_f16(v0);
    if (two) {
      const uint16_t b = CDT == MXF_BF16 ? mxf_f32_to_bf16(v1) : mxf_f32_to_f16(v1);
      *reinterpret_cast<uint32_t *>(p) = (uint32_t)a | ((uint32_t)b << 16);
    } else {
      p[0] = a;
    }
  } else if constexpr (CDT == MXF_E4M3 || CDT == MXF_E5M2) {
    uint8_t *p = c + off;
    const uint8_t a = CDT == MXF_E4M3 ? mxf_f32_to_e4m3(v0) : mxf_f32_to_e5m2(v0);
    if (two) {
      const uint8_t b = CDT == MXF_E4M3 ? mxf_f32_to_e4m3(v1) : mxf_f32_to_e5m2(v1);
      *reinterpret_cast<uint16_t *>(p) = (uint16_t)(a | (b << 8));
    } else {
      p[0] = a;
    }
  } else { /* e2m1: the pair is one byte (off is even); keep the high nibble if col+1 >= N */
    uint8_t *p = c + (off >> 1);
    const uint8_t a = mxf_f32_to_e2m1(v0);
    if (two) *p = mxf_e2m1_pack(a, mxf_f32_to_e2m1(v1));
    else *p = (uint8_t)((*p & 0xF0u) | a);
  }
}

/* Any tile, any C dtype: element by element with bounds checks; folds the amax of the
 * elements inside C into fm. Transposed C (p.tc; never e2m1, see make_geometry) takes
 * the two values of a pair one by one: they lie in two rows of C. */
template <int CDT, int NB, bool TC, int TM>
__device__ __forceinline__ void store_checked(const float (&acc)[NB / 2], const kernel_args &p, int l, int mt, int nt,
                                              int ar0, int q, float &fm) {
  uint8_t *c = static_cast<uint8_t *>(p.c);
  const int64_t cbase = (int64_t)l * p.c_ls;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = mt * TM + ar0 + 8 * h;
    if (row >= p.m) continue;
#pragma unroll
    for (int j = 0; j < NB / 8; ++j) {
      const int col = nt * NB + 8 * j + 2 * q;
      if (col >= p.n) continue;
      const float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
      const bool two = col + 1 < p.n;
      fm = mxf_amax_fold_f32(fm, v0);
      if (two) fm = mxf_amax_fold_f32(fm, v1);
      if (CDT != MXF_E2M1 && TC && p.tc) {
        const int64_t off = cbase + (int64_t)col * p.c_ms + row;
        store_pair<CDT>(c, off, v0, 0.0f, false);
        if (two) store_pair<CDT>(c, off + p.c_ms, v1, 0.0f, false);
      } else {
        store_pair<CDT>(c, cbase + (int64_t)row * p.c_ms + col, v0, v1, two);
      }
    }
  }
}

/* Chunk ch of the warp's 16 staged rows of 128 bytes (16-byte slot s of row r at
 * s ^ (r % 8)) to C: lane takes slot rslot = lane % 8 of rows 4i + rrow (those below
 * nrows), rrow = lane / 8, at crow + i * rstep + 128 ch, crow being its address in row
 * rrow of chunk 0. Orders the staging writes before it and the next chunk's after it. */
__device__ __forceinline__ void flush_lines(uint32_t stg, uint8_t *crow, int64_t rstep, int ch, int rrow, int rslot,
                                            int nrows) {
  warp_sync_shared();
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = 4 * i + rrow;
    const uint4 v = lds_v4(stg + row * 128 + ((rslot ^ (row & 7)) << 4));
    if (row < nrows) *reinterpret_cast<uint4 *>(crow + i * rstep + 128 * ch) = v;
  }
  warp_sync_shared();
}

/* The address of 16-byte slot rslot from column col0 in row row0 + rrow of C, elements
 * of esize bytes (where a lane of flush_lines or flush_rows_t stores its first piece), and
 * in rstep the bytes of 4 rows (flush_lines' step). */
__device__ __forceinline__ uint8_t *c_lane_row(const kernel_args &p, int esize, int l, int64_t row0, int64_t col0,
                                               int rrow, int rslot, int64_t &rstep) {
  rstep = 4 * esize * p.c_ms;
  return static_cast<uint8_t *>(p.c) + esize * ((int64_t)l * p.c_ls + (row0 + rrow) * p.c_ms + col0) + 16 * rslot;
}

/* The four pairs of C's 16-bit dtype that one stmatrix (plain or .trans) takes for 8-column
 * groups j0 and j0 + 1 of the warp's accumulators: r[m] is the pair of group j0 + m / 2,
 * rows + 8 (m % 2). */
template <int CDT, int NB>
__device__ __forceinline__ void quad_pairs(const float (&acc)[NB / 2], int j0, uint32_t (&r)[4]) {
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const int j = j0 + (m >> 1), h = m & 1;
    const float lo = acc[4 * j + 2 * h], hi = acc[4 * j + 2 * h + 1];
    r[m] = CDT == MXF_BF16 ? mxf_f32x2_to_bf16x2(lo, hi) : pack_f16x2(lo, hi);
  }
}

/* Chunk ch (64 columns) of the warp's 16 rows of 16-bit results into 16 rows of 128 bytes
 * at stg by stmatrix from the accumulator layout, 16-byte slot s of row r at s ^ (r % 8)
 * (the 128-byte swizzle: no bank conflicts on either side). */
template <int CDT, int NB>
__device__ __forceinline__ void stage16(const float (&acc)[NB / 2], int ch, uint32_t stg, int lane) {
  /* stmatrix: lane gives row 8 (m % 2) + lane % 8 of matrix m = lane / 8, slot + m / 2 */
  const int mrow = 8 * ((lane >> 3) & 1) + (lane & 7);
  const uint32_t waddr = stg + mrow * 128;
  const uint32_t wslot = (uint32_t)(lane >> 4), wsw = (uint32_t)(mrow & 7);
#pragma unroll
  for (int jj = 0; jj < 4; ++jj) {
    uint32_t r[4];
    quad_pairs<CDT, NB>(acc, 8 * ch + 2 * jj, r);
    stmatrix_x4(waddr + (((2 * jj + wslot) ^ wsw) << 4), r[0], r[1], r[2], r[3]);
  }
}

/*
 * A tile of 16-bit C (bf16 / f16) with 16-byte stores of whole 128-byte lines: per
 * 64-column chunk the warp's 16 x 64 results go through its 2 KB of shared memory
 * (stage16) and come back as 8 lanes per row; rows from nrows on (beyond M) are skipped.
 */
template <int CDT, int NB>
__device__ __forceinline__ void store_full16(const float (&acc)[NB / 2], const kernel_args &p, uint32_t stg, int l,
                                             int64_t row0, int nt, int lane, int nrows) {
  /* read back: lane takes slot lane % 8 of rows 4i + lane / 8 */
  const int rrow = lane >> 3, rslot = lane & 7;
  int64_t rstep;
  uint8_t *crow = c_lane_row(p, 2, l, row0, (int64_t)nt * NB, rrow, rslot, rstep);
#pragma unroll
  for (int ch = 0; ch < NB / 64; ++ch) {
    stage16<CDT, NB>(acc, ch, stg, lane);
    flush_lines(stg, crow, rstep, ch, rrow, rslot, nrows);
  }
}

/* A tile of f32 C, like store_full16: per 32-column chunk the warp's 16 x 32 results
 * go through its 2 KB of shared memory (8-byte pairs; 16-byte slot s of row r at
 * s ^ (r % 8)) and come back as 8 lanes per 128-byte row. */
template <int NB>
__device__ __forceinline__ void store_full32(const float (&acc)[NB / 2], const kernel_args &p, uint32_t stg, int l,
                                             int64_t row0, int nt, int lane, int nrows) {
  const int q = lane & 3, wrow = lane >> 2; /* accumulator layout: rows wrow, wrow + 8 */
  const int rrow = lane >> 3, rslot = lane & 7;
  int64_t rstep;
  uint8_t *crow = c_lane_row(p, 4, l, row0, (int64_t)nt * NB, rrow, rslot, rstep);
#pragma unroll
  for (int ch = 0; ch < NB / 32; ++ch) {
#pragma unroll
    for (int jj = 0; jj < 4; ++jj)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = 8 * h + wrow, slot = 2 * jj + (q >> 1), j = 4 * ch + jj;
        sts_f32x2(stg + row * 128 + ((slot ^ (row & 7)) << 4) + 8 * (q & 1), acc[4 * j + 2 * h],
                  acc[4 * j + 2 * h + 1]);
      }
    flush_lines(stg, crow, rstep, ch, rrow, rslot, nrows);
  }
}

/* The transposed stores' staging: rows of C of RB bytes (32 or 64), 16-byte slot s of row
 * r at s ^ ((r / (128 / RB)) % (RB / 16)), so that 8 consecutive rows fill the banks. */
template <int RB> __device__ __forceinline__ uint32_t t_slot(int row, int s) {
  return (uint32_t)(s ^ ((row / (128 / RB)) & (RB / 16 - 1))) << 4;
}

/* Chunk ch of the warp's NR = 2048 / RB staged rows of C (elements of RB / 16 bytes; C
 * rows row0c + NR ch + r, from column col0) to C: lane takes slot lane % S (S = RB / 16) of
 * rows (32 / S) i + lane / S, those below ncols. Orders the staging writes before it and
 * the next chunk's after it. */
template <int RB>
__device__ __forceinline__ void flush_rows_t(uint32_t stg, const kernel_args &p, int l, int64_t row0c, int64_t col0,
                                             int ch, int lane, int ncols) {
  constexpr int S = RB / 16, NR = 2048 / RB, PER = 32 / S;
  const int rrow = lane / S, rslot = lane % S;
  int64_t rstep4; /* flush_lines' step, unused here */
  uint8_t *crow = c_lane_row(p, RB / 16, l, row0c + NR * ch, col0, rrow, rslot, rstep4);
  warp_sync_shared();
#pragma unroll
  for (int i = 0; i < NR / PER; ++i) {
    const int row = PER * i + rrow;
    const uint4 v = lds_v4(stg + row * RB + t_slot<RB>(row, rslot));
    if (NR * ch + row < ncols) *reinterpret_cast<uint4 *>(crow + (RB / 16) * (int64_t)(PER * i) * p.c_ms) = v;
  }
  warp_sync_shared();
}

/*
 * A tile of 16-bit C, transposed (p.tc): the warp's 16 tile rows are 16 consecutive
 * columns of C, its NB tile columns NB rows of C. Per 64-column chunk, stmatrix .trans
 * writes each 8 x 8 block transposed into the warp's 2 KB as 64 rows of C of 32 bytes
 * (t_slot: no bank conflicts), which come back as 2 lanes per row, 16 rows per store
 * (flush_rows_t); rows of C from ncols on (beyond N) are skipped.
 */
template <int CDT, int NB>
__device__ __forceinline__ void store_full16_t(const float (&acc)[NB / 2], const kernel_args &p, uint32_t stg, int l,
                                               int64_t row0, int nt, int lane, int ncols) {
  /* stmatrix: lane gives stored row 8 (m / 2) + lane % 8 (+ 16 jj) of matrix m = lane / 8, half m % 2 */
  const int wrow = 8 * (lane >> 4) + (lane & 7), whalf = (lane >> 3) & 1;
#pragma unroll
  for (int ch = 0; ch < NB / 64; ++ch) {
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      uint32_t r[4];
      quad_pairs<CDT, NB>(acc, 8 * ch + 2 * jj, r);
      const int row = 16 * jj + wrow;
      stmatrix_x4_trans(stg + row * 32 + t_slot<32>(row, whalf), r[0], r[1], r[2], r[3]);
    }
    flush_rows_t<32>(stg, p, l, (int64_t)nt * NB, row0, ch, lane, ncols);
  }
}

/* Chunk ch (64 columns) of the warpgroup's 64 rows of 16-bit results, transposed, into
 * 64 rows of C of 128 bytes at buf by stmatrix .trans: the warpgroup's 64 tile rows are
 * 64 consecutive columns of C, warp wq's 16 the 16-byte slots 2 wq, 2 wq + 1; slot s of
 * row r at s ^ (r % 8) (the 128-byte swizzle: no bank conflicts). */
template <int CDT, int NB>
__device__ __forceinline__ void stage16_t(const float (&acc)[NB / 2], int ch, uint32_t buf, int wq, int lane) {
  /* stmatrix: lane gives stored row 8 (m / 2) + lane % 8 (+ 16 jj) of matrix m = lane / 8, half m % 2 */
  const int wrow = 8 * (lane >> 4) + (lane & 7), wslot = 2 * wq + ((lane >> 3) & 1);
#pragma unroll
  for (int jj = 0; jj < 4; ++jj) {
    uint32_t r[4];
    quad_pairs<CDT, NB>(acc, 8 * ch + 2 * jj, r);
    const int row = 16 * jj + wrow;
    stmatrix_x4_trans(buf + row * 128 + ((uint32_t)(wslot ^ (row & 7)) << 4), r[0], r[1], r[2], r[3]);
  }
}

/*
 * A tile of 16-bit C, transposed (p.tc), by warpgroup: per 64-column chunk of the tile the
 * four warps write their blocks into the warpgroup's 8 KB (buf, stage16_t) and each warp
 * stores 16 of its 64 rows of C as whole lines (flush_lines), rows of C from ncols on
 * skipped. Named barrier bar (the warpgroup's 128 threads) orders the chunk's writes
 * before its reads and its reads before the next chunk's writes; the caller's vote on bar
 * orders the previous tile's reads before the first chunk.
 */
template <int CDT, int NB>
__device__ __forceinline__ void store_full16_tw(const float (&acc)[NB / 2], const kernel_args &p, uint32_t buf, int l,
                                                int64_t col0, int nt, int wq, int lane, int ncols, uint32_t bar) {
  const int rrow = lane >> 3, rslot = lane & 7;
#pragma unroll
  for (int ch = 0; ch < NB / 64; ++ch) {
    if (ch > 0) named_bar_sync(bar, 128);
    stage16_t<CDT, NB>(acc, ch, buf, wq, lane);
    named_bar_sync(bar, 128);
    const int r0 = 64 * ch + 16 * wq; /* the warp's first row of C in the chunk, after nt * NB */
    int64_t rstep;
    uint8_t *crow = c_lane_row(p, 2, l, (int64_t)nt * NB + r0, col0, rrow, rslot, rstep);
    flush_lines(buf + 16 * wq * 128, crow, rstep, 0, rrow, rslot, ncols - r0);
  }
}

/* A tile of f32 C, transposed (p.tc): per 32-column chunk, the warp's values go into its
 * 2 KB as 32 rows of C of 64 bytes (t_slot; two-way bank conflicts at most) and come back
 * as 4 lanes per row, 8 rows per store (flush_rows_t); rows of C from ncols on are skipped. */
template <int NB>
__device__ __forceinline__ void store_full32_t(const float (&acc)[NB / 2], const kernel_args &p, uint32_t stg, int l,
                                               int64_t row0, int nt, int lane, int ncols) {
  const int q = lane & 3, wcol = lane >> 2; /* accumulator layout: tile rows wcol, wcol + 8 */
#pragma unroll
  for (int ch = 0; ch < NB / 32; ++ch) {
#pragma unroll
    for (int jj = 0; jj < 4; ++jj)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1, row = 8 * jj + 2 * q + (e & 1), col = 8 * h + wcol;
        sts_f32(stg + row * 64 + t_slot<64>(row, col >> 2) + 4 * (col & 3), acc[4 * (4 * ch + jj) + e]);
      }
    flush_rows_t<64>(stg, p, l, (int64_t)nt * NB, row0, ch, lane, ncols);
  }
}

/*
 * A tile of f32 C, transposed (p.tc), by warpgroup (the wide tile): its 64 tile rows are
 * 64 columns of C, 256 bytes. Per 32-column chunk of the tile the four warps write their
 * values into the warpgroup's 8 KB (buf) as 32 rows of C of 256 bytes (warp w's 16-byte
 * slots 4w .. 4w + 3; slot s of row r at s ^ (r % 8): no bank conflicts), and each warp
 * stores 8 of those rows, 16 lanes per row; rows of C from ncols on are skipped. Named
 * barrier bar (the warpgroup's 128 threads) orders writes and reads as in store_full16_tw.
 */
template <int NB>
__device__ __forceinline__ void store_full32_tw(const float (&acc)[NB / 2], const kernel_args &p, uint32_t buf, int l,
                                                int64_t col0, int nt, int wq, int lane, int ncols, uint32_t bar) {
  const int q = lane & 3, wcol = lane >> 2; /* accumulator layout: tile rows 16 wq + wcol (+ 8), columns 8 j + 2 q (+ 1) */
  const int rrow = lane >> 4, rslot = lane & 15;
#pragma unroll
  for (int ch = 0; ch < NB / 32; ++ch) {
    named_bar_sync(bar, 128);
#pragma unroll
    for (int jj = 0; jj < 4; ++jj)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = 8 * jj + 2 * q + (e & 1), slot = 4 * wq + 2 * (e >> 1) + (wcol >> 2);
        sts_f32(buf + row * 256 + ((uint32_t)(slot ^ (row & 7)) << 4) + 4 * (wcol & 3), acc[4 * (4 * ch + jj) + e]);
      }
    named_bar_sync(bar, 128);
    const int r0 = 32 * ch + 8 * wq; /* the warp's first row of C in the chunk, after nt * NB */
    int64_t rstep4;
    uint8_t *crow = c_lane_row(p, 4, l, (int64_t)nt * NB + r0, col0, rrow, rslot, rstep4);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = 8 * wq + 2 * i + rrow;
      const uint4 v = lds_v4(buf + row * 256 + ((uint32_t)(rslot ^ (row & 7)) << 4));
      if (r0 + 2 * i + rrow < ncols) *reinterpret_cast<uint4 *>(crow + (rstep4 >> 1) * i) = v;
    }
  }
}

/* acc *= alpha (the epilogues' first step). */
template <int NV> __device__ __forceinline__ void apply_alpha(float (&acc)[NV], float alpha) {
  if (alpha != 1.0f) {
#pragma unroll
    for (int i = 0; i < NV; ++i) acc[i] *= alpha;
  }
}

/* The amax of a consumer thread's results, in 8 chains rather than one of NV: all of them
 * (all), or those inside the tile's first rlim rows and clim columns (acc[i]: row
 * ar0 + 8 ((i >> 1) & 1), column 8 (i >> 2) + 2q + (i & 1)). */
template <int NV>
__device__ __forceinline__ float thread_amax(const float (&acc)[NV], bool all, int ar0, int q, int rlim, int clim) {
  float t8[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (all) {
#pragma unroll
    for (int i = 0; i < NV; ++i) t8[i & 7] = mxf_amax_fold_f32(t8[i & 7], acc[i]);
  } else {
#pragma unroll
    for (int i = 0; i < NV; ++i)
      if (ar0 + 8 * ((i >> 1) & 1) < rlim && 8 * (i >> 2) + 2 * q + (i & 1) < clim)
        t8[i & 7] = mxf_amax_fold_f32(t8[i & 7], acc[i]);
  }
  float t = t8[0];
#pragma unroll
  for (int i = 1; i < 8; ++i) t = mxf_amax_fold_f32(t, t8[i]);
  return t;
}

/*
 * C = alpha * acc in C's dtype, amax folded into fm. For bf16 / f16 / f32, a tile wholly
 * inside C takes the fast path: amax over all values, hardware conversion (16-bit C),
 * whole 16-byte pieces of lines through the staging area (the core admits only C whose
 * row starts are 16-byte aligned, SPEC §1). With the narrow tile, so does a tile whose
 * lines of C are whole (its columns inside C; transposed, its rows): amax over the values
 * inside C, lines beyond C's edge skipped (M < 128 runs swapped on such tiles). (In the
 * wide kernels that made ptxas serialize the wgmmas, C7515.) The hardware conversion
 * quiets NaN into the canonical NaN rather than SPEC §0's payload-keeping rule, so a warp
 * holding a NaN takes the element-wise path. Other dtypes and other edge tiles take that
 * path always. The wide tiles' transposed C goes through each warpgroup's 8 KB rather than
 * each warp's 2 KB (store_full16_tw, store_full32_tw): a warp's 16 tile rows are only 32
 * (64) bytes of a line of C, its warpgroup's 64 rows a whole line (or two): 2-4.5 % less
 * time on the swapped large shapes (docs/decisions.md, gemm_amax: the epilogue); a warpgroup
 * holding a NaN then takes the element-wise path. (The narrow tiles measured slower so.)
 */
template <int CDT, int NB, bool TC, class SM>
__device__ __forceinline__ void epilogue(float (&acc)[NB / 2], const kernel_args &p, const SM &sm, int l, int mt,
                                         int nt, int ct, int ar0, int q, float &fm) {
  constexpr int TM = SM::tm;
  apply_alpha(acc, p.alpha);
  if constexpr (CDT == MXF_BF16 || CDT == MXF_F16 || CDT == MXF_F32) {
    const int rlim = p.m - mt * TM, clim = p.n - nt * NB; /* tile rows / columns inside C */
    const bool tc = TC && p.tc;
    constexpr bool EDGE = NB != BN; /* edge tiles on the fast path */
    if (EDGE ? (tc ? rlim >= TM : clim >= NB) : (rlim >= TM && clim >= NB)) {
      const float t = thread_amax(acc, !EDGE || (rlim >= TM && clim >= NB), ar0, q, rlim, clim);
      const uint32_t stg = sm.epi(ct >> 5);
      const int64_t row0 = (int64_t)mt * TM + (ar0 & ~15);
      const int nrows = EDGE ? rlim - (ar0 & ~15) : 16; /* the warp's rows inside C (not transposed) */
      /* transposed wide tiles: by warpgroup (its 8 KB, named barrier 2 + warpgroup, its
       * first column of C) */
      const bool by_wg = tc && !EDGE;
      const int wg = ct >> 7;
      const uint32_t wbuf = sm.epi(4 * wg), wbar = 2 + (uint32_t)wg;
      const int64_t wcol0 = (int64_t)mt * TM + 64 * wg;
      if (CDT == MXF_F32) {
        fm = mxf_amax_fold_f32(fm, t);
        if (by_wg) store_full32_tw<NB>(acc, p, wbuf, l, wcol0, nt, (ct >> 5) & 3, ct & 31, NB, wbar);
        else if (tc) store_full32_t<NB>(acc, p, stg, l, row0, nt, ct & 31, clim);
        else store_full32<NB>(acc, p, stg, l, row0, nt, ct & 31, nrows);
        return;
      }
      if (by_wg) { /* the vote too */
        if (!named_bar_any(wbar, 128, t != t)) {
          fm = mxf_amax_fold_f32(fm, t);
          store_full16_tw<CDT, NB>(acc, p, wbuf, l, wcol0, nt, (ct >> 5) & 3, ct & 31, NB, wbar);
          return;
        }
      } else if (!__any_sync(0xFFFFFFFFu, t != t)) {
        fm = mxf_amax_fold_f32(fm, t);
        if (tc) store_full16_t<CDT, NB>(acc, p, stg, l, row0, nt, ct & 31, clim);
        else store_full16<CDT, NB>(acc, p, stg, l, row0, nt, ct & 31, nrows);
        return;
      }
    }
  }
  store_checked<CDT, NB, TC, TM>(acc, p, l, mt, nt, ar0, q, fm);
}

/*
 * The wide pre-pass tiles' 16-bit C through the ring (kernel_args::cst): the unit's last
 * two stages keep their slots (mainloop_bp's hold), and once both warpgroups' wgmmas are
 * done, warpgroup w writes its 64 x 256 half of the tile (amax folded, no NaN in the
 * warpgroup: the hardware conversion) into the first 32 KB of slot w as four 64 x 64
 * boxes of C with the 128-byte swizzle (plain: 64 rows of C; transposed: 64 columns), and
 * its first thread leaves the boxes' coordinates in the slot's words (cst: first box's
 * inner and outer coordinate, then batch << 2 | transposed << 1 | 1). Each warp then
 * releases both slots: the producer, before loading into such a slot, stores its boxes
 * with tensor copies and waits until they have read it (store_slot). The consumers go on to
 * the next unit at once: the tensor pipe waits for the conversion and the shared-memory
 * writes only, not for C's stores. Edge tiles and a warpgroup holding a NaN store their
 * half element by element (store_checked) and leave the slot's words at 0.
 */
template <int CDT, class SM>
__device__ __forceinline__ void epilogue_slots(float (&acc)[BN / 2], const kernel_args &p, const SM &sm, uint32_t g,
                                               int l, int mt, int nt, int ct, int ar0, int q, float &fm) {
  constexpr int TM = 128;
  const int lane = ct & 31, wq = (ct >> 5) & 3, wg = ct >> 7;
  const int s0 = (int)((g - 2) % SM::ns), s1 = (int)((g - 1) % SM::ns), slot = wg ? s1 : s0;
  apply_alpha(acc, p.alpha);
  named_bar_sync(1, 256); /* both warpgroups' wgmmas have read the slots */
  bool staged = false;
  if (p.m - mt * TM >= TM && p.n - nt * BN >= BN) {
    const float t = thread_amax(acc, true, ar0, q, TM, BN);
    staged = !named_bar_any(2 + (uint32_t)wg, 128, t != t);
    if (staged) {
      fm = mxf_amax_fold_f32(fm, t);
      const uint32_t base = sm.raw_a(slot);
#pragma unroll
      for (int ch = 0; ch < 4; ++ch) {
        if (p.tc) stage16_t<CDT, BN>(acc, ch, base + ch * 8192, wq, lane);
        else stage16<CDT, BN>(acc, ch, base + ch * 8192 + wq * 2048, lane);
      }
      fence_proxy_async();
      if ((ct & 127) == 0) {
        const int r0 = mt * TM + 64 * wg, c0 = nt * BN; /* the half's first row and column of the tile */
        sts_u32(sm.cst(slot), (uint32_t)(p.tc ? r0 : c0));
        sts_u32(sm.cst(slot) + 4, (uint32_t)(p.tc ? c0 : r0));
        sts_u32(sm.cst(slot) + 8, (uint32_t)l << 2 | (uint32_t)p.tc << 1 | 1u);
      }
    }
  }
  if (!staged) store_checked<CDT, BN, true, TM>(acc, p, l, mt, nt, ar0, q, fm);
  __syncwarp();
  if (lane == 0) {
    mbar_arrive(sm.empty(s0));
    mbar_arrive(sm.empty(s1));
  }
}

/* The producer's side of epilogue_slots: slot s's boxes of C, if any, stored and read. */
template <class SM>
__device__ __forceinline__ void store_slot(const SM &sm, int s, const CUtensorMap *map) {
  const uint32_t f = lds_u32(sm.cst(s) + 8);
  if (!f) return;
  const int c0 = (int)lds_u32(sm.cst(s)), c1 = (int)lds_u32(sm.cst(s) + 4), l = (int)(f >> 2);
  const bool tc = (f >> 1) & 1u;
#pragma unroll
  for (int ch = 0; ch < 4; ++ch)
    tma_store_3d(map, sm.raw_a(s) + ch * 8192, tc ? c0 : c0 + 64 * ch, tc ? c1 + 64 * ch : c1, l);
  bulk_commit();
  sts_u32(sm.cst(s) + 8, 0u);
  bulk_wait_read();
}

/* ------------------------------------------------------------ the f16 path */
/* Whether a tile takes the f16 path: enabled, and every row of its A and B tiles qualifies. */
template <int FMT> __device__ __forceinline__ bool f16_tile(const kernel_args &p, int l, int mt, int nt) {
  if constexpr (FMT == FMT_E2M1) return false;
  else return p.f16 && __ldg(p.oka + l * p.tiles_m + mt) != 0 && __ldg(p.okb + l * p.tiles_n + nt) != 0;
}
/*
 * Per unit: whether its tile takes the f16 path (every row of its A and B tiles qualifies;
 * read one unit ahead) and the tile's factors, copied one unit ahead into one of three
 * shared areas by cp.async (thread ct: B row ct and A row ct % 128). The area of unit
 * i + 1 was last read by the epilogue of unit i - 2, which every consumer left before the
 * first stage barrier of unit i - 1; the copies of unit i are waited for at its start,
 * before its first stage barrier, which orders them before the epilogue's reads.
 */
template <int FMT> __device__ __forceinline__ bool prefetch_unit_f16(const kernel_args &p, int u, int ct, uint32_t fac) {
  if constexpr (FMT == FMT_E2M1) {
    return false;
  } else {
    if (u >= p.units || !p.f16) return false;
    int l, mt, nt;
    tile_coords(unit_work(u, p.whole, p.split, p.nks).tile, p.tiles_m, p.tiles_n, l, mt, nt);
    cp_async_4(fac + 4 * ct, p.fb + ((int64_t)l * p.tiles_n + nt) * BN + ct);
    if (ct < BM) cp_async_4(fac + 4 * (BN + ct), p.fa + ((int64_t)l * p.tiles_m + mt) * BM + ct);
    cp_async_commit();
    return f16_tile<FMT>(p, l, mt, nt);
  }
}

/* acc <- (acc * 2^eB) * 2^eA with the tile's factors at fac (B's 256, then A's 128): the
 * sums of the bf16 path (sm90_dequant.cuh, "The f16 path"). */
__device__ __forceinline__ void apply_factors(float (&acc)[128], uint32_t fac, int ar0, int q) {
  const float a0 = __uint_as_float(lds_u32(fac + 4 * (BN + ar0)));
  const float a1 = __uint_as_float(lds_u32(fac + 4 * (BN + ar0 + 8)));
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const float2 b = lds_f32x2(fac + 4 * (8 * j + 2 * q));
    acc[4 * j + 0] = acc[4 * j + 0] * b.x * a0;
    acc[4 * j + 1] = acc[4 * j + 1] * b.y * a0;
    acc[4 * j + 2] = acc[4 * j + 2] * b.x * a1;
    acc[4 * j + 3] = acc[4 * j + 3] * b.y * a1;
  }
}

/* The stages [0, nk) of a unit. */
template <int FMT, int H>
__device__ __forceinline__ void mainloop(float (&acc)[128], uint32_t (&fa)[16], uint32_t (&fb)[16], const smem_map &sm,
                                         uint32_t &g, int nk, int nkb, int ct, int ar0, int q, int lane) {
  int ks = 0;
  for (; ks + 1 < nk; ks += 2) {
    consume_stage<FMT, H>(acc, fa, sm, g++, ks, nkb, ct, ar0, q, lane);
    consume_stage<FMT, H>(acc, fb, sm, g++, ks + 1, nkb, ct, ar0, q, lane);
  }
  if (ks < nk) consume_stage<FMT, H>(acc, fa, sm, g++, ks, nkb, ct, ar0, q, lane);
}

/*
 * One k-stage with B from the pre-pass: the stage's B tile is already bf16 in the layout
 * the wgmmas read, so a consumer thread converts its A fragment only, issues the 4 wgmmas
 * and goes on; no barrier between the warpgroups. The slot is released once the wgmmas
 * that read it are done: stage g - 1's here, after the wait; a unit's last stage at its end.
 */
template <int FMT, int NB, class SM>
__device__ __forceinline__ void consume_stage_bp(float (&acc)[NB / 2], uint32_t (&fr)[16], const SM &sm, uint32_t g,
                                                 int ks, int ks0, int nkb, int ar0, int q, int lane,
                                                 const raw_scales &rs, int keep) {
  constexpr int ns = SM::ns;
  const int slot = (int)(g % ns);
  mbar_wait(sm.full(slot), (g / ns) & 1u);
  stage_regs r;
  if (rs.on) {
    load_a_codes<FMT>(r, sm.raw_a(slot), ar0, q);
    const uint32_t a = sm.sf_a(slot) + rs.off + (nkb == 2 ? ((ks0 + ks) & 1) << 1 : 0);
    const bool live = ks0 + ks < rs.ks_live;
    const uint32_t b0 = lds_u8(a), b1 = lds_u8(a + 128);
    convert_a_raw<FMT>(r, live ? b0 : 127u, live ? b1 : 127u, fr);
  } else {
    stage_scales sc;
    load_a<FMT>(r, sc, sm.raw_a(slot), sm.sf_a(slot), nkb, ar0, q);
    convert_stage_bf16<FMT, false>(r, sc, fr, 0u, 0);
  }
  wgmma_fence();
  const uint64_t desc = wgmma_desc_sw128(sm.raw_b(slot));
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const uint32_t acc_on = (ks > 0 || s > 0) ? 1u : 0u;
    if constexpr (NB == BN)
      wgmma_m64n256k16_rs<0>(acc, fr[4 * s + 0], fr[4 * s + 1], fr[4 * s + 2], fr[4 * s + 3], desc + 2 * s, acc_on);
    else
      wgmma_m64n128k16_rs(acc, fr[4 * s + 0], fr[4 * s + 1], fr[4 * s + 2], fr[4 * s + 3], desc + 2 * s, acc_on);
  }
  wgmma_commit();
  wgmma_wait<1>();
  if (ks > 0 && (NB != BN || ks != keep) && lane == 0) mbar_arrive(sm.empty((int)((g - 1) % ns)));
}

/* The stages [0, nk) of a unit, nk >= 1 (unit_work), two per trip (fragments fa, fb).
 * Two loop shapes, each what ptxas compiles well: with a last odd stage after the loop it
 * serialized the narrow tile's wgmmas (C7514 / C7515: copies of the accumulators while
 * in flight), so the narrow loop leaves from either stage; that shape took ptxas minutes
 * on the wide e5m2 kernel, which keeps the stage after the loop. */
template <int FMT, int NB, class SM>
__device__ __forceinline__ void mainloop_bp(float (&acc)[NB / 2], uint32_t (&fa)[16], uint32_t (&fb)[16], const SM &sm,
                                            uint32_t &g, int ks0, int nk, int nkb, int ar0, int q, int lane,
                                            const raw_scales &rs, bool hold) {
  const int keep = hold ? nk - 1 : -1; /* held: the last two stages' slots (epilogue_slots) */
  if constexpr (NB != BN) {
    for (int ks = 0;; ks += 2) {
      consume_stage_bp<FMT, NB, SM>(acc, fa, sm, g++, ks, ks0, nkb, ar0, q, lane, rs, keep);
      if (ks + 1 >= nk) break;
      consume_stage_bp<FMT, NB, SM>(acc, fb, sm, g++, ks + 1, ks0, nkb, ar0, q, lane, rs, keep);
      if (ks + 2 >= nk) break;
    }
  } else {
    int ks = 0;
    for (; ks + 1 < nk; ks += 2) {
      consume_stage_bp<FMT, NB, SM>(acc, fa, sm, g++, ks, ks0, nkb, ar0, q, lane, rs, keep);
      consume_stage_bp<FMT, NB, SM>(acc, fb, sm, g++, ks + 1, ks0, nkb, ar0, q, lane, rs, keep);
    }
    if (ks < nk) consume_stage_bp<FMT, NB, SM>(acc, fa, sm, g++, ks, ks0, nkb, ar0, q, lane, rs, keep);
  }
  wgmma_wait<0>();
  if (!hold && lane == 0) mbar_arrive(sm.empty((int)((g - 1) % SM::ns)));
}

/* The kernel's last parameter: C's tensor map where epilogue_slots may run (the wide
 * pre-pass kernels), else nothing (the other kernels' parameters stay as they were). */
template <bool ON> struct c_map {
  CUtensorMap map;
};
template <> struct c_map<false> {};

/* ------------------------------------------------------------ the kernel */
template <int FMT, int BP, int NB, int WG>
__global__ void __launch_bounds__(128 * (WG + 1), 1)
    gemm_kernel(const __grid_constant__ CUtensorMap tma_a, const __grid_constant__ CUtensorMap tma_b,
                const kernel_args p, const __grid_constant__ c_map<BP && NB == BN> tma_c) {
  extern __shared__ uint8_t smem_raw[];
  using SM = smem_map_t<BP, NB, WG>;
  constexpr int NV = NB / 2;   /* accumulators per consumer thread */
  constexpr int ns = SM::ns;
  constexpr int TM = SM::tm;   /* tile rows */
  constexpr int CT = 128 * WG; /* consumer threads */
  SM sm;
  sm.base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  uint32_t *s_amax = reinterpret_cast<uint32_t *>(smem_raw + (sm.amax() - smem_addr(smem_raw)));
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int i = 0; i < ns; ++i) {
      mbar_init(sm.full(i), 1);
      mbar_init(sm.empty(i), 4 * WG); /* one arrival per consumer warp */
    }
    *s_amax = 0;
    if constexpr (BP && NB == BN) {
      for (int i = 0; i < 3 * ns; ++i) sts_u32(sm.cst(0) + 4 * i, 0u); /* the slots' C words */
    }
    mbar_init_fence();
  }
  __syncthreads();
  /* the preparation's results (see sf_prepare_kernel): the producer waits below */
  if (tid >= 128) grid_dependency_wait();

  if (tid < 128) {
    /* ---------------- producer */
    setmaxnreg_dec<24>();
    if (tid == 0) {
      tma_prefetch_desc(&tma_a);
      tma_prefetch_desc(&tma_b);
      const bool raw = raw_scales_on<NB>(p); /* A's scales as they are (raw_scales) */
      constexpr int blocks = WG == 2 ? 1 : 2;
      const uint32_t sfa_bytes = raw ? 512u * blocks : BM * p.nkb * 2, sfb_bytes = BP ? 0 : BN * p.nkb * 2;
      const uint32_t tx = (uint32_t)TM * p.rb + (BP ? SM::bp_tile : BN * p.rb) + sfa_bytes + sfb_bytes;
      /* a stage's A codes and scales into slot s (sfa: the unit's prepared scales) */
      const auto load_a_stage = [&](int s, int ks, int l, int mt, const uint16_t *sfa) {
        const uint32_t fb = sm.full(s);
        mbar_arrive_expect_tx(fb, tx);
        tma_load_3d(sm.raw_a(s), &tma_a, ks * p.rb, mt * TM, l, fb);
        if (raw)
          load_raw_scales(p, sm.sf_a(s), TM, blocks, l, mt, ks, fb);
        else
          bulk_load(sm.sf_a(s), sfa + (int64_t)ks * BM * p.nkb, sfa_bytes, fb);
      };
      /* With raw scales, A's codes and scales do not come from the preparation: the first
       * unit's first stage loads them while the preparation still runs, B after it. One
       * stage: loading the whole ring so (12.6 MB from all CTAs at 128 x 24576 x 1536,
       * while the preparation reads its own input) was 1-4 % slower on the narrow shapes
       * (docs/decisions.md, gemm_amax: scale preparation, raw scale bytes). */
      int early = 0;
      if (raw && (int)blockIdx.x < p.units) {
        const work_unit w = unit_work(blockIdx.x, p.whole, p.split, p.nks);
        int l, mt, nt;
        tile_coords(w.tile, p.tiles_m, p.tiles_n, l, mt, nt);
        early = min(EARLY_STAGES, w.ks1 - w.ks0);
        for (int i = 0; i < early; ++i) load_a_stage(i, w.ks0 + i, l, mt, nullptr);
      }
      grid_dependency_wait();
      int slot = 0;
      uint32_t phase = 0;
      for (int u = blockIdx.x; u < p.units; u += gridDim.x) {
        const work_unit w = unit_work(u, p.whole, p.split, p.nks);
        int l, mt, nt;
        tile_coords(w.tile, p.tiles_m, p.tiles_n, l, mt, nt);
        const bool h = !BP && f16_tile<FMT>(p, l, mt, nt);
        const int64_t d = h ? p.d16 : 0;
        const uint16_t *sfa = p.sfa + d + ((int64_t)(l * p.tiles_m + mt) * p.nks) * (BM * p.nkb);
        const uint16_t *sfb = p.sfb + d + ((int64_t)(l * p.tiles_n + nt) * p.nks) * (BN * p.nkb);
        for (int ks = w.ks0; ks < w.ks1; ++ks) {
          const uint32_t fb = sm.full(slot);
          if (early > 0) {
            --early; /* A is on its way (slot = the stage, first pass) */
          } else {
            mbar_wait(sm.empty(slot), phase ^ 1u);
            if constexpr (BP && NB == BN) {
              if (p.cst) store_slot(sm, slot, &tma_c.map);
            }
            load_a_stage(slot, ks, l, mt, sfa);
          }
          tma_load_3d(sm.raw_b(slot), &tma_b, ks * (BP ? BK : p.rb), nt * NB, l, fb); /* BP: bf16 elements */
          if (!BP) bulk_load(sm.sf_b(slot), sfb + (int64_t)ks * BN * p.nkb, sfb_bytes, fb);
          if (++slot == ns) {
            slot = 0;
            phase ^= 1u;
          }
        }
      }
      if constexpr (BP && NB == BN) {
        if (p.cst) { /* the last units' C (epilogue_slots) */
          for (int i = 0; i < ns; ++i) {
            mbar_wait(sm.empty(slot), phase ^ 1u);
            store_slot(sm, slot, &tma_c.map);
            if (++slot == ns) {
              slot = 0;
              phase ^= 1u;
            }
          }
          bulk_wait_all();
        }
      }
    }
    return;
  }

  /* ---------------- consumers */
  /* 128 x 24 + CT x this <= 64 K registers. ptxas compiles the code after this for these
   * registers (the wide kernels' stage loop uses up to 237 of the 240; the launch's share,
   * 65536 / threads, still bounds what a single instruction may need: docs/decisions.md,
   * Compiler and register limits). */
  setmaxnreg_inc<WG == 2 ? 240 : 160>();
  const int ct = tid - 128;                 /* 0 .. CT - 1 */
  const int lane = tid & 31;
  const int q = lane & 3;
  const int ar0 = (ct >> 7) * 64 + ((ct >> 5) & 3) * 16 + (lane >> 2); /* A row in the tile */
  float acc[NV];
#pragma unroll
  for (int i = 0; i < NV; ++i) acc[i] = 0.f;
  uint32_t fa[16], fb[16];
  float fm = 0.0f; /* amax of this thread's values: >= +0 or NaN */
  uint32_t g = 0;
  bool h_next = BP ? false : prefetch_unit_f16<FMT>(p, blockIdx.x, ct, sm.factors(0));
  int area = 0;
  for (int u = blockIdx.x; u < p.units; u += gridDim.x, area = area == 2 ? 0 : area + 1) {
    const work_unit w = unit_work(u, p.whole, p.split, p.nks);
    int l, mt, nt;
    tile_coords(w.tile, p.tiles_m, p.tiles_n, l, mt, nt);
    const bool h = h_next;
    const uint32_t fac = sm.factors(area);
    if (FMT != FMT_E2M1 && !BP) cp_async_wait_all(); /* this unit's factors */
    h_next = BP ? false : prefetch_unit_f16<FMT>(p, u + gridDim.x, ct, sm.factors(area == 2 ? 0 : area + 1));
    const int nk = w.ks1 - w.ks0;
    /* 16-bit C through the ring: whole and finishing units of two stages or more */
    const bool hold = BP && NB == BN && p.cst && nk >= 2 && w.role != ROLE_WRITER;
    if constexpr (BP) {
      const raw_scales rs = make_raw_scales<NB>(p, ar0, q, (mt * TM) & 127);
      mainloop_bp<FMT, NB, SM>(acc, fa, fb, sm, g, w.ks0, nk, p.nkb, ar0, q, lane, rs, hold);
    } else if (FMT != FMT_E2M1 && h) {
      mainloop<FMT, FMT != FMT_E2M1>(acc, fa, fb, sm, g, nk, p.nkb, ct, ar0, q, lane); /* e2m1: never here */
    } else {
      mainloop<FMT, 0>(acc, fa, fb, sm, g, nk, p.nkb, ct, ar0, q, lane);
    }
    wgmma_wait<0>();
    if (w.role != ROLE_WHOLE) {
      /* thread ct's NV sums sit at float4 index CT i + ct (coalesced) of a TM x NB slot */
      constexpr int SLOT = TM * NB;
      if (w.role == ROLE_WRITER) {
        float4 *dst = reinterpret_cast<float4 *>(p.partial + (int64_t)(w.idx * (p.split - 1) + w.part) * SLOT) + ct;
#pragma unroll
        for (int i = 0; i < NV / 4; ++i)
          __stcg(dst + CT * i, make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
        named_bar_sync(1, CT);
        if (ct == 0) red_release_add(p.flags + w.idx, 1u);
        continue;
      }
      if (ct == 0)
        while (ld_acquire(p.flags + w.idx) < (unsigned)(p.split - 1)) __nanosleep(64);
      named_bar_sync(1, CT);
      for (int part = 0; part + 1 < p.split; ++part) {
        const float4 *src = reinterpret_cast<const float4 *>(p.partial + (int64_t)(w.idx * (p.split - 1) + part) * SLOT) + ct;
#pragma unroll
        for (int i = 0; i < NV / 4; ++i) {
          const float4 v = __ldcg(src + CT * i);
          acc[4 * i] += v.x, acc[4 * i + 1] += v.y, acc[4 * i + 2] += v.z, acc[4 * i + 3] += v.w;
        }
      }
    }
    if constexpr (!BP) {
      if (FMT != FMT_E2M1 && h) apply_factors(acc, fac, ar0, q);
    }
    if constexpr (BP && NB == BN) {
      if (hold) {
        if (p.cdt == MXF_BF16) epilogue_slots<MXF_BF16>(acc, p, sm, g, l, mt, nt, ct, ar0, q, fm);
        else epilogue_slots<MXF_F16>(acc, p, sm, g, l, mt, nt, ct, ar0, q, fm);
        continue;
      }
    }
    switch (p.cdt) {
    case MXF_F32: epilogue<MXF_F32, NB, BP>(acc, p, sm, l, mt, nt, ct, ar0, q, fm); break;
    case MXF_BF16: epilogue<MXF_BF16, NB, BP>(acc, p, sm, l, mt, nt, ct, ar0, q, fm); break;
    case MXF_F16: epilogue<MXF_F16, NB, BP>(acc, p, sm, l, mt, nt, ct, ar0, q, fm); break;
    case MXF_E4M3: epilogue<MXF_E4M3, NB, BP>(acc, p, sm, l, mt, nt, ct, ar0, q, fm); break;
    case MXF_E5M2: epilogue<MXF_E5M2, NB, BP>(acc, p, sm, l, mt, nt, ct, ar0, q, fm); break;
    default: epilogue<MXF_E2M1, NB, BP>(acc, p, sm, l, mt, nt, ct, ar0, q, fm); break;
    }
  }
  /* amax: warp -> CTA (shared atomic) -> one global atomicMax */
  const uint32_t amax = mxf_amax_warp_reduce(mxf_amax_f32_bits(fm));
  if (lane == 0 && amax != 0) atomicMax(s_amax, amax);
  named_bar_sync(1, CT);
  if (ct == 0 && *s_amax != 0) atomicMax(reinterpret_cast<unsigned int *>(p.amax), *s_amax);
}

/* ------------------------------------------------------------ host side */
struct geometry {
  int fmt, nkb, rb;        /* fmt, rb: A's (the register operand's) */
  int64_t kbytes;          /* bytes of one row's k values of A */
  mxf_dtype bdt;           /* B's format; with another than A's (or other scales) B takes the pre-pass */
  int bany;                /* B's format differs from A's: the pre-pass is b_convert_any */
  int64_t kbytes_b;        /* bytes of one row's k values of B */
  int64_t tiles_m, tiles_n, nks;
  size_t ws_a, ws_b;       /* workspace bytes of the prepared scales */
  int64_t grid, whole, split, tail; /* the work units of unit_work */
  size_t ws_part, ws_flags; /* workspace bytes of the split tiles' partial sums and flags */
  int f16;                  /* fp8 codes: tiles may take the f16 path (see make_geometry) */
  size_t ws_f16;            /* then: its multipliers, row factors, tile flags */
  int bp;                   /* B converted by the pre-pass (prep_bp_kernel) */
  size_t ws_bp;             /* then: B in bf16, nks * 64 values per row */
  int tc;                   /* the problem is the caller's with A and B swapped: C transposed */
  int nb;                   /* tile columns: BN, or BN_NARROW (swapped, N <= 128) */
  int wg;                   /* consumer warpgroups: 2 (128-row tiles) or 3 (192-row narrow tiles) */
  int tm() const { return 64 * wg; } /* tile rows (smem_map_t::tm) */
  size_t ws_alt;            /* wg 3: the workspace of the same problem on 2 (the launch's fallback) */
  size_t sum() const { return ws_a + ws_b + ws_part + ws_flags + ws_f16 + ws_bp; }
  size_t total() const { return sum() > ws_alt ? sum() : ws_alt; }
};

static int64_t round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

/* Bytes of n values of format d (bf16, an 8-bit format or packed e2m1). */
static int64_t row_bytes(mxf_dtype d, int64_t n) { return d == MXF_E2M1 ? n / 2 : d == MXF_BF16 ? 2 * n : n; }

/* Whether (codes v, scales sf per sf_vec) is an MX operand the kernels take, and its FMT:
 * e4m3 / e5m2 with e8m0 per 32, e2m1 with e8m0 per 32 or 16 or ue4m3 per 16. */
static bool mx_operand(mxf_dtype v, mxf_dtype sf, int sf_vec, int *fmt) {
  if (v == MXF_E4M3 || v == MXF_E5M2) {
    *fmt = v == MXF_E4M3 ? FMT_E4M3 : FMT_E5M2;
    return sf == MXF_E8M0 && sf_vec == 32;
  }
  *fmt = FMT_E2M1;
  return v == MXF_E2M1 && ((sf == MXF_E8M0 && (sf_vec == 32 || sf_vec == 16)) || (sf == MXF_E4M3 && sf_vec == 16));
}

/* A test switch: 1 when the variable is "on", 0 when "off", -1 otherwise. */
static int env_switch(const char *name) {
  const char *v = getenv(name);
  return v && strcmp(v, "on") == 0 ? 1 : v && strcmp(v, "off") == 0 ? 0 : -1;
}

/* The B pre-pass's stage group (see "The B pre-pass"): BC_STAGES, or 2 when groups of
 * BC_STAGES give fewer than 8 warps a SM. MXF_GEMM_BCWIDE=on / off forces BC_STAGES / 2
 * (tests). */
static int bc_group(int64_t rows, int64_t nks, int64_t sms) {
  const int env = env_switch("MXF_GEMM_BCWIDE");
  if (env >= 0) return env ? BC_STAGES : 2;
  const int64_t warps = (rows + 3) / 4 * ((nks + BC_STAGES - 1) / BC_STAGES);
  return warps < 8 * sms ? 2 : BC_STAGES;
}

/* Rows of tiles from which B goes through the pre-pass (make_geometry). */
static constexpr int64_t BP_TILES_M = 6;

/* Whether A's scales are read by the kernel as they are (kernel_args::sfr): e8m0 in the
 * swizzled layout, on the narrow tiles (the pointer's alignment is the launch's test).
 * The wide pre-pass kernels can too, but there the preparation pass is a small part of
 * the run and the prepared multipliers save the consumers work: with MXFP4 (MODE_TWO's
 * scales built per stage) they ran up to 11 % slower (docs/decisions.md, gemm_amax: scale
 * preparation, raw scale bytes). */
static bool sf_raw_layout(const mxf_gemm_problem *p, int nb) {
  return nb == BN_NARROW && p->sfa_fmt == MXF_E8M0 && p->sfa_layout == MXF_SF_SWIZZLED &&
         env_switch("MXF_GEMM_SFRAW") != 0;
}

/* The geometry of problem p on num_sms SMs (0: a default count, for the workspace bound);
 * tc: p is the caller's problem with A and B swapped (swapped_problem), C written
 * transposed; it then runs with the B pre-pass of the (small) caller's A. wg3: the narrow
 * tile may take three consumer warpgroups (192-row tiles, more warps to hide the latency
 * of each one's conversion; docs/decisions.md, gemm_amax: swapped runs, narrow tiles) when
 * A's scales are read as they are. */
static bool make_geometry(const mxf_gemm_problem *p, int num_sms, geometry *g, int tc, bool wg3 = true) {
  if (p->m < 1 || p->n < 1 || p->k < 1 || p->l < 1) return false;
  if (tc && p->c == MXF_E2M1) return false; /* a pair of e2m1 values shares a byte: one thread per pair */
  g->tc = tc;
  g->nb = tc && p->n <= BN_NARROW ? BN_NARROW : BN;
  if (p->a_ks != 1 || p->b_ks != 1 || p->c_ns != 1) return false;
  /* A (the register operand) in an MX format; B in A's or, through the pre-pass, another
   * one (docs/spec.md §1.1's mixed pairs, bf16 B included: the swapped bf16 A) */
  int fa, fb;
  if (!mx_operand(p->a_fmt, p->sfa_fmt, p->sf_vec, &fa)) return false;
  if (!(p->b_fmt == MXF_BF16 ? p->sfb_fmt == MXF_DTYPE_INVALID : mx_operand(p->b_fmt, p->sfb_fmt, p->sf_vec, &fb)))
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
  case MXF_F32: case MXF_F16: case MXF_BF16: case MXF_E4M3: case MXF_E5M2: case MXF_E2M1: break;
  default: return false;
  }
  if (p->c == MXF_E2M1 && (p->c_ms % 2 || p->c_ls % 2)) return false;
  g->nkb = BK / p->sf_vec;
  /* Three warpgroups on 192-row tiles: ~1.3x the time of a 128-row tile's stage for 1.5x
   * the rows (docs/decisions.md, gemm_amax: swapped runs, narrow tiles), so they pay from ~1.3
   * waves of 128-row tiles.
   * MXF_GEMM_WG3=on / off overrides (tests). */
  const int64_t sms = num_sms > 0 ? num_sms : 132;
  const int wg_env = env_switch("MXF_GEMM_WG3");
  const bool wg_pays = wg_env >= 0 ? wg_env == 1 : (p->m + BM - 1) / BM * p->l * 10 >= 13 * sms;
  g->wg = wg3 && sf_raw_layout(p, g->nb) && wg_pays ? 3 : 2;
  const int64_t tm = g->tm();
  g->tiles_m = (p->m + tm - 1) / tm;
  g->tiles_n = (p->n + g->nb - 1) / g->nb;
  g->nks = (p->k + BK - 1) / BK;
  if (g->tiles_m * g->tiles_n * p->l > (1ll << 30) || g->nks > (1ll << 24) || p->kb != (p->k + p->sf_vec - 1) / p->sf_vec)
    return false;
  if (p->l * (g->tiles_m * BM + g->tiles_n * BN) * g->nks >= (1ll << 31)) return false; /* sf_prepare's items */
  /* TMA: strides of the rows and batches actually used must be multiples of 16 bytes */
  const int64_t a_row = row_bytes(p->a_fmt, p->a_ms), b_row = row_bytes(p->b_fmt, p->b_ns);
  const int64_t a_bat = row_bytes(p->a_fmt, p->a_ls), b_bat = row_bytes(p->b_fmt, p->b_ls);
  if (p->m > 1 && (a_row % 16 || a_row < g->kbytes)) return false;
  if (p->n > 1 && (b_row % 16 || b_row < g->kbytes_b)) return false;
  if (p->l > 1 && (a_bat % 16 || a_bat <= 0 || b_bat % 16 || b_bat <= 0)) return false;
  if (g->kbytes >= (1ll << 32) || g->kbytes_b >= (1ll << 32) || p->m >= (1ll << 31) || p->n >= (1ll << 31) ||
      a_row >= (1ll << 39) || b_row >= (1ll << 39) || a_bat >= (1ll << 39) || b_bat >= (1ll << 39))
    return false;
  g->ws_a = g->wg == 3 ? 0 : (size_t)round_up(p->l * g->tiles_m * g->nks * BM * g->nkb * 2, 256);
  g->ws_b = (size_t)round_up(p->l * g->tiles_n * g->nks * BN * g->nkb * 2, 256);
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
  g->ws_flags = (size_t)round_up(g->tail * 4, 256);
  /* The B pre-pass writes B once as bf16 (3 bytes of traffic per value) and lightens
   * every stage of the mainloop; with many rows of tiles that is won back (docs/decisions.md,
   * gemm_amax: the B pre-pass).
   * MXF_GEMM_BPRE=on / off overrides (tests). */
  const int bp_env = env_switch("MXF_GEMM_BPRE");
  g->bp = tc || mixed ? 1 : bp_env >= 0 ? bp_env : g->tiles_m >= BP_TILES_M;
  g->ws_bp = g->bp ? (size_t)round_up(p->l * p->n * g->nks * BK * 2, 256) : 0;
  if (g->bp) g->ws_b = 0;
  /* The f16 path halves the mainloop's instructions but costs a launch and a pass over
   * the scales, and a second set of multipliers: it pays when the stages each CTA runs
   * are many enough against the scale bytes. Fitted to measurements (docs/decisions.md,
   * gemm_amax: the f16 path): one stage per 32 KiB of scales, plus 16 stages for the launch.
   * MXF_GEMM_F16=on / off overrides (tests). */
  const int64_t cta_stages =
      (g->whole + g->grid - 1) / g->grid * g->nks + (g->tail ? (g->nks + g->split - 1) / g->split : 0);
  const int64_t sf_bytes = p->l * (g->tiles_m * BM + g->tiles_n * BN) * p->kb;
  const int f16_env = env_switch("MXF_GEMM_F16");
  g->f16 = !g->bp && g->fmt != FMT_E2M1 &&
           (f16_env >= 0 ? f16_env : cta_stages * 32768 >= sf_bytes + (int64_t)(1 << 19));
  g->ws_f16 = 0;
  if (g->f16)
    g->ws_f16 = g->ws_a + g->ws_b + (size_t)round_up(p->l * (g->tiles_m * BM + g->tiles_n * BN) * 4, 256) +
                (size_t)round_up(p->l * (g->tiles_m + g->tiles_n) * 4, 256);
  g->ws_alt = 0;
  if (g->wg == 3) {
    geometry g2;
    if (!make_geometry(p, num_sms, &g2, tc, false)) return false;
    g->ws_alt = g2.sum();
  }
  return true;
}

/* p with A and B swapped (C^T = B A^T): the caller's B becomes A, its A becomes B; C
 * keeps the caller's strides (the kernel writes it transposed, kernel_args::tc). */
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
 * Which problem the kernel runs, a rule fitted to measurements (docs/decisions.md,
 * gemm_amax: swapped runs, narrow tiles). Swapped, B's rows are the tiles' rows, converted
 * in registers like A's, and A goes through the pre-pass once. That pays
 * - with M <= 128 (128-column tiles): a tile row of the plain problem converts all of B
 *   in the mainloop on tiles_n CTAs, too few for the SMs;
 * - below the pre-pass's threshold (BP_TILES_M rows of tiles), with M a multiple of 256:
 *   whole wide tiles (edge tiles of the wide kernel store element by element);
 * - above it, with N >= 2M: the pre-pass then converts the operand of half the size or
 *   less (at 16384 x 24576 x 1536 the swapped run was 8 % slower).
 * A bf16 A (no scales) runs swapped only: the register operand is the MX one, A the
 * pre-pass's bf16 copy.
 * MXF_GEMM_SWAP=on / off overrides (tests). Fills *run (the problem run) and *g.
 */
static bool plan_problem(const mxf_gemm_problem *p, int num_sms, mxf_gemm_problem *run, geometry *g) {
  const int sw_env = env_switch("MXF_GEMM_SWAP");
  const bool a_bf16 = p->a_fmt == MXF_BF16;
  const bool pays = p->m <= BN_NARROW ||
                    ((p->m + BM - 1) / BM < BP_TILES_M ? p->m % BN == 0 : p->n >= 2 * p->m);
  if (a_bf16 || sw_env == 1 || (sw_env < 0 && pays)) {
    *run = swapped_problem(p);
    if (make_geometry(run, num_sms, g, 1)) return true;
    if (a_bf16) return false;
  }
  *run = *p;
  return make_geometry(p, num_sms, g, 0);
}

} /* namespace mxf_sm90 */

using namespace mxf_sm90;

/* gemm_kernel<FMT, BP, NB, WG> on the stream with its shared memory. */
template <int FMT, int BP, int NB = BN, int WG = 2>
static cudaError_t launch_gemm(unsigned grid, const CUtensorMap &ma, const CUtensorMap &mb, const CUtensorMap &mc,
                               const kernel_args &ka, cudaStream_t stream) {
  const int smem = BP ? bp_smem_bytes(NB, WG) : SMEM_BYTES;
  const cudaError_t e = set_smem_attr<gemm_kernel<FMT, BP, NB, WG>>(smem);
  if (e != cudaSuccess) return e;
  c_map<BP && NB == BN> cm;
  if constexpr (BP && NB == BN) cm.map = mc;
  return launch_dependent(gemm_kernel<FMT, BP, NB, WG>, grid, 128 * (WG + 1), smem, stream, ma, mb, ka, cm);
}

/* prep_bp_kernel<FMT, gs> on the stream (gs: bc_group's stage group, 2 or BC_STAGES). */
template <int FMT>
static void launch_prep_bp(int gs, unsigned blocks, const prep_args &pa, const bconv_args &ba, int pblocks,
                           cudaStream_t stream) {
  if (gs == 2) prep_bp_kernel<FMT, 2><<<blocks, 256, 0, stream>>>(pa, ba, pblocks);
  else prep_bp_kernel<FMT, BC_STAGES><<<blocks, 256, 0, stream>>>(pa, ba, pblocks);
}

/* prep_bp_any_kernel<e2, B's format> on the stream. */
template <bool E2>
static void launch_prep_bp_any_e2(mxf_dtype bdt, unsigned blocks, const prep_args &pa, const bany_args &ba,
                                  int pblocks, cudaStream_t stream) {
  switch (bdt) {
  case MXF_BF16: prep_bp_any_kernel<E2, MXF_BF16><<<blocks, 256, 0, stream>>>(pa, ba, pblocks); break;
  case MXF_E4M3: prep_bp_any_kernel<E2, MXF_E4M3><<<blocks, 256, 0, stream>>>(pa, ba, pblocks); break;
  case MXF_E5M2: prep_bp_any_kernel<E2, MXF_E5M2><<<blocks, 256, 0, stream>>>(pa, ba, pblocks); break;
  case MXF_E2M1: prep_bp_any_kernel<E2, MXF_E2M1><<<blocks, 256, 0, stream>>>(pa, ba, pblocks); break;
  default: break; /* make_geometry takes no other */
  }
}
static void launch_prep_bp_any(bool e2, mxf_dtype bdt, unsigned blocks, const prep_args &pa, const bany_args &ba,
                               int pblocks, cudaStream_t stream) {
  if (e2) launch_prep_bp_any_e2<true>(bdt, blocks, pa, ba, pblocks, stream);
  else launch_prep_bp_any_e2<false>(bdt, blocks, pa, ba, pblocks, stream);
}

extern "C" int mxf_sm90_gemm_amax_plan(const mxf_gemm_problem *p, int num_sms, size_t *workspace) {
  mxf_gemm_problem run;
  geometry g;
  *workspace = 0;
  if (!plan_problem(p, num_sms, &run, &g)) return 0;
  *workspace = g.total();
  return 1;
}

extern "C" mxf_status mxf_sm90_gemm_amax_launch(const mxf_gemm_problem *caller, const mxf_gemm_amax_args *cargs,
                                                void *ws, size_t ws_size, cudaStream_t stream, int num_sms) {
  mxf_gemm_problem run;
  geometry g;
  if (!plan_problem(caller, num_sms, &run, &g))
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cuda backend: the sm_90a gemm_amax kernel does not run this problem");
  const mxf_gemm_problem *p = &run;
  mxf_gemm_amax_args swapped_args = *cargs; /* the operands of the problem run */
  if (g.tc) {
    swapped_args.a = cargs->b, swapped_args.b = cargs->a;
    swapped_args.sfa = cargs->sfb, swapped_args.sfb = cargs->sfa;
  }
  const mxf_gemm_amax_args *args = &swapped_args;
  /* A's scales read as they are (kernel_args::sfr) when the layout allows and the bytes
   * are 16-byte aligned (bulk copies); else prepared, on two warpgroups (geometry::ws_alt) */
  const bool sfraw = sf_raw_layout(p, g.nb) && ((uintptr_t)args->sfa & 15u) == 0;
  if (g.wg == 3 && !sfraw && !make_geometry(p, num_sms, &g, g.tc, false))
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cuda backend: the sm_90a gemm_amax kernel does not run this problem");
  const size_t need = g.total();
  /* core checked the caller's workspace against the plan's, which covers both geometries
   * (geometry::ws_alt): a shortfall here is the library's own error */
  if (ws_size < need || (need && !ws))
    return mxf_set_error(MXF_ERR_INTERNAL, "cuda backend: gemm_amax: the run needs %zu workspace bytes, the plan "
                         "sized %zu", need, ws_size);
  encode_tiled_fn enc = get_encode_tiled();
  if (!enc) return mxf_set_error(MXF_ERR_CUDA, "cuda backend: cuTensorMapEncodeTiled is not available from the driver");

  const int64_t a_row = row_bytes(p->a_fmt, p->a_ms), b_row = row_bytes(p->b_fmt, p->b_ns);
  const int64_t a_bat = row_bytes(p->a_fmt, p->a_ls), b_bat = row_bytes(p->b_fmt, p->b_ls);
  /* workspace: wa | wb | [f16 path: wa16 | wb16 | fa | fb | oka | okb] | partial sums | flags
   * | [B pre-pass: B in bf16] (wa16 - wa = wb16 - wb: the producer picks a side's
   * multipliers by one offset; with the pre-pass wb is empty) */
  uint8_t *wp = static_cast<uint8_t *>(ws);
  uint16_t *wa = reinterpret_cast<uint16_t *>(wp);
  uint16_t *wb = reinterpret_cast<uint16_t *>(wp + g.ws_a);
  uint8_t *w16 = wp + g.ws_a + g.ws_b;
  float *wpart = reinterpret_cast<float *>(w16 + g.ws_f16);
  unsigned int *wflags = reinterpret_cast<unsigned int *>(w16 + g.ws_f16 + g.ws_part);
  uint4 *wbp = reinterpret_cast<uint4 *>(w16 + g.ws_f16 + g.ws_part + g.ws_flags);

  CUtensorMap map_a, map_b;
  CUresult r = make_map_codes(enc, &map_a, args->a, g.kbytes, p->m, p->l, a_row, a_bat, g.rb, g.tm());
  if (r == CUDA_SUCCESS)
    r = g.bp ? make_map_bf16(enc, &map_b, wbp, g.nks * BK, p->n, p->l, g.nb)
             : make_map_codes(enc, &map_b, args->b, g.kbytes, p->n, p->l, b_row, b_bat, g.rb, BN);
  if (r != CUDA_SUCCESS)
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cuda backend: cannot describe A/B to the TMA unit (CUresult %d)",
                         (int)r);
  const int64_t sms = num_sms > 0 ? num_sms : 132; /* bounds the preparation grids */
  const int64_t rows_a = p->l * g.tiles_m * g.tm(), rows_b = p->l * g.tiles_n * BN;
  rows_args ra;
  ra.sfa = static_cast<const uint8_t *>(args->sfa);
  ra.sfb = static_cast<const uint8_t *>(args->sfb);
  ra.fa = reinterpret_cast<float *>(w16 + g.ws_a + g.ws_b);
  ra.fb = ra.fa + rows_a;
  ra.oka = reinterpret_cast<int *>(w16 + g.ws_a + g.ws_b + round_up((rows_a + rows_b) * 4, 256));
  ra.okb = ra.oka + p->l * g.tiles_m;
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
  pa.wb16 = g.f16 ? reinterpret_cast<uint16_t *>(w16 + g.ws_a) : nullptr;
  pa.fa = ra.fa;
  pa.fb = ra.fb;
  pa.oka = ra.oka;
  pa.okb = ra.okb;
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
  pa.ue4m3 = p->sfa_fmt == MXF_E4M3; /* without the pre-pass = sfb_fmt (make_geometry) */
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
    ba.b = static_cast<const uint8_t *>(args->b);
    ba.sfb = static_cast<const uint8_t *>(args->sfb);
    ba.out = wbp;
    ba.b_row = b_row;
    ba.b_bat = b_bat;
    ba.n = p->n;
    ba.k = p->k;
    ba.kb = p->kb;
    ba.nks = (int)g.nks;
    ba.chunks = p->l * p->n * g.nks * 8;
    ba.idx32 = ba.chunks < (1ll << 32);
    ba.sf_shift = p->sf_vec == 16 ? 4 : 5;
    ba.ue4m3 = p->sfb_fmt == MXF_E4M3;
    ba.lb = p->sfb_layout;
    const int64_t bneed = (ba.chunks + 255) / 256, bmax = sms * 16;
    const unsigned all = (unsigned)pblocks + (unsigned)(bneed < bmax ? bneed : bmax);
    launch_prep_bp_any(g.fmt == FMT_E2M1, p->b_fmt, all, pa, ba, (int)pblocks, stream);
  } else {
    bconv_args ba;
    ba.b = static_cast<const uint8_t *>(args->b);
    ba.sfb = static_cast<const uint8_t *>(args->sfb);
    ba.out = wbp;
    ba.b_row = b_row;
    ba.b_bat = b_bat;
    ba.kbytes = g.kbytes_b;
    ba.n = p->n;
    ba.kb = p->kb;
    ba.rows = p->l * p->n;
    ba.nks = (int)g.nks;
    const int gs = bc_group(ba.rows, g.nks, sms);
    ba.ngr = (int)((g.nks + gs - 1) / gs);
    ba.units = (ba.rows + 3) / 4 * ba.ngr;
    ba.nkb = g.nkb;
    ba.rb = g.rb;
    ba.ue4m3 = p->sfb_fmt == MXF_E4M3;
    ba.lb = p->sfb_layout;
    const int64_t bmax = sms * 8;
    const int64_t bneed = (ba.units * 32 + 255) / 256;
    const unsigned bblocks = (unsigned)(bneed < bmax ? bneed : bmax);
    const unsigned all = (unsigned)pblocks + bblocks;
    if (g.fmt == FMT_E4M3) launch_prep_bp<FMT_E4M3>(gs, all, pa, ba, (int)pblocks, stream);
    else if (g.fmt == FMT_E5M2) launch_prep_bp<FMT_E5M2>(gs, all, pa, ba, (int)pblocks, stream);
    else launch_prep_bp<FMT_E2M1>(gs, all, pa, ba, (int)pblocks, stream);
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
  ka.tc = g.tc;
  ka.c_ms = p->c_ms;
  ka.c_ls = p->c_ls;
  ka.c = args->c;
  ka.sfa = wa;
  ka.sfb = wb;
  ka.sfr = sfraw ? static_cast<const uint8_t *>(args->sfa) : nullptr;
  ka.sfr_kq = (int)((p->kb + 3) / 4);
  ka.sfr_r = (int)((p->m + 127) / 128);
  ka.sfr_ls = (int64_t)ka.sfr_r * ka.sfr_kq * 512;
  ka.kb = (int)p->kb;
  ka.d16 = (int64_t)(g.ws_a + g.ws_b) / 2;
  /* 16-bit C of the wide pre-pass tiles through the ring's slots (epilogue_slots), where
   * C's layout suits the tensor copies; MXF_GEMM_CST=off turns it off (measurements) */
  CUtensorMap map_c;
  memset(&map_c, 0, sizeof map_c);
  ka.cst = 0;
  if (g.bp && g.nb == BN && (p->c == MXF_BF16 || p->c == MXF_F16) && env_switch("MXF_GEMM_CST") != 0 &&
      ((uintptr_t)args->c & 15u) == 0 && p->c_ms % 8 == 0 && (p->l == 1 || p->c_ls % 8 == 0)) {
    const int64_t crows = g.tc ? p->n : p->m, ccols = g.tc ? p->m : p->n;
    ka.cst = make_map_c16(enc, &map_c, args->c, ccols, crows, p->l, p->c_ms, p->c_ls, p->c == MXF_BF16) ==
             CUDA_SUCCESS;
  }
  ka.fa = ra.fa;
  ka.fb = ra.fb;
  ka.oka = ra.oka;
  ka.okb = ra.okb;
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
  switch (g.fmt * 4 + kind) {
  case FMT_E4M3 * 4: e = launch_gemm<FMT_E4M3, 0>(grid, map_a, map_b, map_c, ka, stream); break;
  case FMT_E4M3 * 4 + 1: e = launch_gemm<FMT_E4M3, 1>(grid, map_a, map_b, map_c, ka, stream); break;
  case FMT_E4M3 * 4 + 2: e = launch_gemm<FMT_E4M3, 1, BN_NARROW>(grid, map_a, map_b, map_c, ka, stream); break;
  case FMT_E4M3 * 4 + 3: e = launch_gemm<FMT_E4M3, 1, BN_NARROW, 3>(grid, map_a, map_b, map_c, ka, stream); break;
  case FMT_E5M2 * 4: e = launch_gemm<FMT_E5M2, 0>(grid, map_a, map_b, map_c, ka, stream); break;
  case FMT_E5M2 * 4 + 1: e = launch_gemm<FMT_E5M2, 1>(grid, map_a, map_b, map_c, ka, stream); break;
  case FMT_E5M2 * 4 + 2: e = launch_gemm<FMT_E5M2, 1, BN_NARROW>(grid, map_a, map_b, map_c, ka, stream); break;
  case FMT_E5M2 * 4 + 3: e = launch_gemm<FMT_E5M2, 1, BN_NARROW, 3>(grid, map_a, map_b, map_c, ka, stream); break;
  case FMT_E2M1 * 4: e = launch_gemm<FMT_E2M1, 0>(grid, map_a, map_b, map_c, ka, stream); break;
  case FMT_E2M1 * 4 + 1: e = launch_gemm<FMT_E2M1, 1>(grid, map_a, map_b, map_c, ka, stream); break;
  case FMT_E2M1 * 4 + 2: e = launch_gemm<FMT_E2M1, 1, BN_NARROW>(grid, map_a, map_b, map_c, ka, stream); break;
  default: e = launch_gemm<FMT_E2M1, 1, BN_NARROW, 3>(grid, map_a, map_b, map_c, ka, stream); break;
  }
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) return mxf_set_error(MXF_ERR_CUDA, "cuda backend: sm90 gemm_amax launch: %s", cudaGetErrorString(e));
  return MXF_OK;
}
