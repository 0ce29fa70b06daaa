/*
 * gemm_sm90_common.cuh — what every part of the Hopper gemm_amax kernel shares (device and
 * host): the shared-memory budget of its stages, the arguments of the kernel and of the
 * scale preparation, the tile raster and the work units of the persistent grid.
 * The kernel: gemm_amax_sm90.cu (its description), gemm_sm90_kernel.cuh.
 */
#ifndef MXF_GEMM_SM90_COMMON_CUH
#define MXF_GEMM_SM90_COMMON_CUH

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/amax.cuh"
#include "cuda/cuda_util.h"
#include "cuda/sm90/gemm_sm90_shape.h"
#include "cuda/sm90/sm90_dequant.cuh"
#include "cuda/sm90/sm90_host.h"
#include "cuda/sm90/sm90_ptx.cuh"

namespace mxf_sm90 {

/* ------------------------------------------------------------ tile geometry */
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
 * scales; no bf16 ring, no f16 path. The narrow tile (BN_NARROW columns, operands
 * swapped for few rows: gemm_amax_heuristics.cu) fits 8 of them. */
/* The narrow tile may have three consumer warpgroups (WG = 3: 192-row tiles, 512 threads;
 * with A's scale bytes read as they are only, see gemm_amax_heuristics.cu). */
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
  int c_transposed;               /* tile element (i, j) is C's (j, i) (operands swapped; with BP only) */
  int c_ring;                     /* 16-bit C of the wide pre-pass tiles through the ring (epilogue_slots; tma_c) */
  int64_t c_ms, c_ls;
  void *c;
  const uint16_t *sfa, *sfb;      /* prepared scales in the workspace (bf16 multipliers) */
  /* The narrow tiles with A's scales e8m0 in the swizzled layout (16-byte aligned): the
   * kernel reads them as they are (sfa unused; raw_scales) */
  const uint8_t *sfa_raw;         /* A's scale bytes, or null */
  int64_t sfa_raw_ls;             /* bytes per batch: R K' 512 */
  int sfa_raw_kq, sfa_raw_rows;   /* K' = ceil(kb / 4), R = ceil(m / 128) */
  int kb;                         /* k-blocks of a row */
  int64_t f16_offset;             /* the f16 path's multipliers: sfa + f16_offset, sfb + f16_offset */
  const float *fac_a, *fac_b;     /* per (batch, tile, row): the f16 path's 2^(R - 127) */
  const int *tile_ok_a, *tile_ok_b; /* per (batch, tile): every row of the tile qualifies */
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
  const float *fac_a, *fac_b;     /* the row factors written by sf_rows_kernel */
  int *tile_ok_a, *tile_ok_b;     /* its tile marks, cleared here for tiles with a row that does not qualify */
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

/* gemm_kernel<FMT, *> of launch kind `kind` (0: wide, no pre-pass; 1: wide, B pre-pass;
 * 2: narrow; 3: narrow on three warpgroups) on the stream with its shared memory; one
 * translation unit per FMT (gemm_sm90_<fmt>.cu). cudaErrorInvalidValue for another kind. */
template <int FMT>
cudaError_t launch_gemm_kind(int kind, unsigned grid, const CUtensorMap &ma, const CUtensorMap &mb,
                             const CUtensorMap &mc, const kernel_args &ka, cudaStream_t stream);

} /* namespace mxf_sm90 */

#endif
