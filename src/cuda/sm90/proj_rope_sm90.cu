/*
 * proj_rope_sm90.cu — projection GEMM + RoPE + dual MXFP8 (SPEC §2) for Hopper (sm_90a):
 * TMA + mbarrier pipeline, wgmma m64n192k16 (bf16 -> f32), persistent grid, the whole
 * epilogue inside the CTA.
 *
 * Page: docs/kernels/proj_rope_sm90.md. Scope (sm90_supports, proj_rope_heuristics.cu):
 * D = 192 (one head = one wgmma N), any rope split, any T >= 1, K % 8 == 0 (TMA row strides
 * are multiples of 16 bytes), any H, both w orientations, bf16 or MXFP8 inputs, the
 * fp32-epilogue flag. Tensors read by TMA must be 16-byte aligned, the codes and the column
 * scales 4-byte and the row scales 2-byte aligned (proj_rope_cuda.cu refuses a run whose
 * pointers are not).
 *
 * MXFP8 inputs (K % 32 == 0): a small first launch regroups the scales as bf16 multipliers
 * per (tile, stage) (sf_prepare_kernel); the kernel's TMA loads the raw e4m3 codes into
 * the upper half of each stage and the consumers dequantize them in place into the bf16
 * tiles (mx_convert, sm90_dequant.cuh: exact for scale bytes in SPEC §1.2's window
 * [16, 232]; below it values under 2^-126 round to bf16's subnormal grid) before the
 * wgmmas; selected with MXF_CONFIG=mxfp8=mainloop (mainloop_fits, proj_rope_heuristics.cu). By default the
 * standalone dequantize kernels (portable/quantize_portable.cu) first write bf16 copies of
 * x and w into the workspace and the bf16 kernel runs on them.
 *
 * The kernel: one CTA per SM, 512 threads (16 warps), tiles of 128 tokens x one head.
 *   warp 0        producer: one thread issues the TMA loads of x (128 x 64 k) and w
 *                 (192 x 64 k, or 64 k x 192 in three 64-column boxes) into a ring of 4
 *                 stages (split Y layout) or 3 (f32 Y layout) with full/empty mbarriers.
 *   warpgroups 1,2 consumers, 64 tokens each:
 *     mainloop: per stage 4 wgmma m64n192k16, A and B from 128B-swizzled shared memory;
 *       the out-in weight (H*D, K) is a K-major B, the in-out (K, H*D) an MN-major B
 *       (descriptor LBO = 8 KB between 64-column boxes, SBO = 1 KB between 8-k groups,
 *       transpose bit set). One wgmma group in flight; a stage is released once the
 *       group after it was issued and the one reading it completed.
 *     staging: thread (warp w, lane l) holds rows 16w + l/4 (+8) and the column pairs
 *       (8j + 2(l%4), +1); it rounds them to bf16 (unless fp32 epilogue) and writes them
 *       to the tile Y in shared memory (layouts at ylayout: the nope columns as bf16 and
 *       the rope columns as f32 for DeepSeek's split, all f32 otherwise), then goes on
 *       with the next tile at once.
 *   warps 1-3 and warpgroup 3 (7 warps): the epilogue, overlapping the consumers' next
 *     mainloop: RoPE in place on Y's row pairs (cos/sin fetched before Y is ready;
 *     __fmul_rn/__fsub_rn/__fadd_rn, no FMA), then the 24 blocks of 32 x 32 quantized in
 *     both directions with formats.h's rule, a block by one warp from one read of it
 *     (lane = 4 columns x 8 rows; shuffles for the column and the row amax; 4-byte code
 *     stores, 32 consecutive bytes per 8 lanes in both outputs). Work is dealt
 *     round-robin to the warps.
 *   Y hand-off: named barriers FULL (consumers arrive, epilogue waits) and EMPTY (the
 *   reverse); one Y buffer, so the epilogue of tile i must finish within the mainloop of
 *   tile i + 1. All warps run with the launch's 128 registers (no setmaxnreg).
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_util.h"
#include "cuda/portable/portable_ops.h"
#include "cuda/sm90/sm90_dequant.cuh"
#include "cuda/sm90/sm90_host.h"
#include "cuda/sm90/sm90_ops.h"
#include "cuda/sm90/proj_rope_sm90_shape.h"
#include "cuda/sm90/sm90_ptx.cuh"


namespace mxf_sm90_proj {

using namespace mxf_sm90;

using mxf_proj90::BK; /* proj_rope_sm90_shape.h */
using mxf_proj90::BM;
using mxf_proj90::BN;
constexpr int THREADS = 512;
constexpr int A_BYTES = BM * BK * 2;
constexpr int B_BYTES = BN * BK * 2;
constexpr int STAGE = A_BYTES + B_BYTES;
/*
 * The staged tile Y, in one of two layouts (template parameter L):
 *   L = 0 (Y_F32): all 192 columns as f32, row stride SD = 200 floats (= 8 mod 32: the
 *          consumers' 8-byte staging writes are conflict-free); 3 pipeline stages. Any
 *          rope split, the fp32 epilogue, the in-mainloop MXFP8 path.
 *   L = 1 (Y_SPLIT): DeepSeek's split (nope 128 + rope 64) with bf16 staging: the nope
 *          columns hold bf16 values and are stored as bf16 (Yn, 256-byte rows), the rope
 *          columns as f32 (Yr, 256-byte rows, RoPE's results are f32), 64 KB instead of
 *          100 KB, which buys a fourth pipeline stage. Both parts swizzle their 16-byte
 *          chunks (yn_chunk, yr_chunk) so that staging writes and the epilogue's reads
 *          take the fewest shared-memory wavefronts their sizes allow.
 */
constexpr int SD = BN + 8;
constexpr int Y_NOPE = 128;        /* Y_SPLIT: the bf16 columns */
constexpr int SR_BYTES = BM * 8;   /* row-direction scale bytes of a tile, 8 per token (6 used) */
template <int L> struct ylayout {
  static constexpr int NS = L ? 4 : 3; /* pipeline stages */
  static constexpr int Y_BYTES = L ? BM * Y_NOPE * 2 + BM * (BN - Y_NOPE) * 4 : BM * SD * 4;
  static constexpr int SMEM_BYTES = NS * STAGE + Y_BYTES + SR_BYTES + 64 + 1024;
};
/* Y_SPLIT: byte offset of 16-byte chunk c of row r in Yn / Yr */
__device__ __forceinline__ uint32_t yn_chunk(int r, int c) {
  return 16u * (uint32_t)(r * 16 + (c ^ ((r & 7) ^ ((r & 8) >> 1))));
}
__device__ __forceinline__ uint32_t yr_chunk(int r, int c) { return 16u * (uint32_t)(r * 16 + (c ^ (2 * (r & 3)))); }
constexpr int YR_OFF = BM * Y_NOPE * 2; /* Yr after Yn */
constexpr int BAR_FULL = 1, BAR_EMPTY = 2; /* named barriers of the Y hand-off */
constexpr int EPI_WARPS = 7;               /* epilogue: warps 1-3 of warpgroup 0 and warpgroup 3 */
constexpr int HANDOFF = 256 + 32 * EPI_WARPS; /* their threads: consumers + epilogue */
constexpr int BAR_ROPE = 3;                /* the epilogue warps: RoPE done */
static_assert(A_BYTES % 1024 == 0 && STAGE % 1024 == 0, "1024-byte aligned swizzled tiles");
static_assert(ylayout<0>::SMEM_BYTES <= 227 * 1024 && ylayout<1>::SMEM_BYTES <= 227 * 1024, "fits one SM");
/* MXFP8 inputs: the stage's raw codes land in its upper half (w, then x) and are converted
 * in place into the bf16 tiles; the stage's scales (bf16, prepared) sit after the barriers. */
constexpr int RAW_W = 20480, RAW_X = 32768; /* raw w: 192 x 64 bytes; raw x: 128 x 64 bytes */
using mxf_proj90::SCW_BYTES;
using mxf_proj90::SCX_BYTES;
constexpr int SC_STAGE = SCX_BYTES + SCW_BYTES;
constexpr int SMEM_BYTES_MX = ylayout<0>::SMEM_BYTES + ylayout<0>::NS * SC_STAGE; /* the MX kernel: L = 0 */
constexpr int BAR_RAW = 4, BAR_CVT = 5; /* consumers: raw codes read; bf16 tiles written */
static_assert(RAW_X + BM * 64 == STAGE && RAW_W + BN * 64 == RAW_X && RAW_W >= A_BYTES, "raw codes in the stage");
static_assert(SMEM_BYTES_MX <= 227 * 1024, "fits one SM");

/* ------------------------------------------------------------ kernel arguments */
struct kargs {
  int t, h, rope, nope;
  int tiles_m, tiles, nks;
  int fp32_epi;
  const uint16_t *cosv, *sinv;
  uint8_t *q_row, *s_row, *q_col, *s_col;
  const uint16_t *scx, *scw; /* MXFP8: prepared bf16 scales per (tile, stage), see sf_prepare */
};

/* Tile t -> (token tile mt, head h): bands of GROUP_M token tiles, heads outer inside a
 * band, so the CTAs running at once share one band of x (<= 12.6 MB at K = 1536) and a
 * few heads of w in L2 whatever T is. */
constexpr int GROUP_M = 32;
__device__ __forceinline__ void tile_coords(int t, int tiles_m, int &mt, int &h, int heads) {
  const int band = GROUP_M * heads;
  const int g = t / band, first = g * GROUP_M;
  const int gsz = min(tiles_m - first, GROUP_M);
  const int r = t - g * band;
  mt = first + r % gsz;
  h = r / gsz;
}

/* SPEC §2.3 step 2 for a pair: one bf16 rounding each (cvt.rn: round to nearest even). */
__device__ __forceinline__ void round_bf16_pair(float &x, float &y) {
  const uint32_t d = mxf_f32x2_to_bf16x2(x, y);
  x = __uint_as_float(d << 16);
  y = __uint_as_float(d & 0xFFFF0000u);
}

/*
 * RoPE (SPEC §2.3 step 3) in place on Y. The tile's 64 row pairs (rows 2k, 2k + 1) are
 * dealt round-robin to the epilogue warps: warp e takes k = e, e + 7, ... (at most 10).
 *
 * Fast path (DeepSeek's split: rope = 64 after nope = 128, offsets known at compile time):
 * lane l takes the pairs 2(l%16), 2(l%16) + 1 of row 2k + l/16. rope_fetch loads the
 * warp's cos/sin words (two bf16 each) before the tile's Y is ready, so the L2 latency
 * hides behind the consumers' mainloop; rope_apply reads 4 floats per row pair (all of
 * them first), then writes 2 + 2 per row. Each lane's addresses advance by a constant 14
 * rows per step. Rows past T are left alone (their words are not loaded).
 */
constexpr int ROPE_PAIRS = BM / 2;
constexpr int ROPE_PER_WARP = (ROPE_PAIRS + EPI_WARPS - 1) / EPI_WARPS;
using mxf_proj90::FAST_ROPE; /* the fast path's split */
constexpr int FAST_NOPE = BN - FAST_ROPE;
constexpr int ROPE_STEP = 2 * EPI_WARPS;                 /* rows between a warp's row pairs */
struct rope_words {
  uint32_t c0[ROPE_PER_WARP], s0[ROPE_PER_WARP], s1[ROPE_PER_WARP], c1[ROPE_PER_WARP];
};

/* step i of warp e exists (k = e + 7i < 64) and its row is a token (< T) */
__device__ __forceinline__ bool rope_step_ok(const kargs &a, int t0, int e, int i) {
  return (i < ROPE_PER_WARP - 1 || e + EPI_WARPS * i < ROPE_PAIRS) && t0 + ROPE_STEP * i < a.t;
}

__device__ __forceinline__ void rope_fetch(const kargs &a, int m0, int e, int lane, rope_words &w) {
  const int t0 = m0 + 2 * e + (lane >> 4);
  const int64_t o = (int64_t)t0 * (FAST_ROPE / 2) + (lane & 15); /* in 32-bit words: pairs 2(l%16), +1 */
  const uint32_t *ct = reinterpret_cast<const uint32_t *>(a.cosv) + o;
  const uint32_t *st = reinterpret_cast<const uint32_t *>(a.sinv) + o;
#pragma unroll
  for (int i = 0; i < ROPE_PER_WARP; ++i) {
    if (rope_step_ok(a, t0, e, i)) {
      constexpr int H2 = FAST_ROPE / 4; /* the second half's words */
      const int r = i * ROPE_STEP * (FAST_ROPE / 2);
      w.c0[i] = ct[r];
      w.s0[i] = st[r];
      w.s1[i] = st[r + H2];
      w.c1[i] = ct[r + H2];
    }
  }
}

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }

/* Address of the f32 element (r, c) of Y, c % 2 == 0 (layout L = 0), or c >= Y_NOPE (L = 1). */
template <int L> __device__ __forceinline__ uint32_t yf_addr(uint32_t ybase, int r, int c) {
  if (L == 0) return ybase + 4u * (uint32_t)(r * SD + c);
  const int b = 4 * (c - Y_NOPE);
  return ybase + YR_OFF + yr_chunk(r, b >> 4) + (uint32_t)(b & 15);
}

template <int L>
__device__ __forceinline__ void rope_apply(const kargs &a, uint32_t ybase, int m0, int e, int lane,
                                           const rope_words &w) {
  constexpr int P = FAST_ROPE / 2;
  const int row0 = 2 * e + (lane >> 4), p = 2 * (lane & 15), t0 = m0 + row0;
  float o[ROPE_PER_WARP][4];
#pragma unroll
  for (int i = 0; i < ROPE_PER_WARP; ++i) {
    o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    if (rope_step_ok(a, t0, e, i)) {
      const float4 y = lds_f32x4(yf_addr<L>(ybase, row0 + ROPE_STEP * i, FAST_NOPE + 2 * p)); /* pairs p, p + 1 */
      o[i][0] = __fsub_rn(__fmul_rn(y.x, bf16_lo(w.c0[i])), __fmul_rn(y.y, bf16_lo(w.s0[i])));
      o[i][1] = __fsub_rn(__fmul_rn(y.z, bf16_hi(w.c0[i])), __fmul_rn(y.w, bf16_hi(w.s0[i])));
      o[i][2] = __fadd_rn(__fmul_rn(y.x, bf16_lo(w.s1[i])), __fmul_rn(y.y, bf16_lo(w.c1[i])));
      o[i][3] = __fadd_rn(__fmul_rn(y.z, bf16_hi(w.s1[i])), __fmul_rn(y.w, bf16_hi(w.c1[i])));
    }
  }
  warp_sync_shared(); /* every lane of a row has read its pairs before any lane writes */
#pragma unroll
  for (int i = 0; i < ROPE_PER_WARP; ++i) {
    if (rope_step_ok(a, t0, e, i)) {
      const int r = row0 + ROPE_STEP * i;
      sts_f32x2(yf_addr<L>(ybase, r, FAST_NOPE + p), o[i][0], o[i][1]);
      sts_f32x2(yf_addr<L>(ybase, r, FAST_NOPE + P + p), o[i][2], o[i][3]);
    }
  }
}

/* Any other split (up to 96 pairs a row): warp e takes rows e, e + 7, ...; lane l takes
 * pairs l, l + 32, l + 64 of one row at a time; all of a row's pairs are read before any
 * of its results is written. */
__device__ __forceinline__ void rope_generic(const kargs &a, uint32_t ybase, int m0, int e, int lane) {
  const int P = a.rope >> 1;
  for (int row = e; row < BM && (int64_t)m0 + row < a.t; row += EPI_WARPS) { /* warp-uniform bound */
    const int64_t t = (int64_t)m0 + row;
    const uint32_t yr = ybase + 4u * (uint32_t)(row * SD + a.nope);
    float o0[3], o1[3];
#pragma unroll
    for (int u = 0; u < 3; ++u) {
      const int p = lane + 32 * u;
      o0[u] = o1[u] = 0.f;
      if (p < P) {
        const uint16_t *ct = a.cosv + t * a.rope, *st = a.sinv + t * a.rope;
        const float c0 = mxf_bf16_to_f32(ct[p]), s0 = mxf_bf16_to_f32(st[p]);
        const float s1 = mxf_bf16_to_f32(st[P + p]), c1 = mxf_bf16_to_f32(ct[P + p]);
        const float2 y = lds_f32x2(yr + 8u * p);
        o0[u] = __fsub_rn(__fmul_rn(y.x, c0), __fmul_rn(y.y, s0));
        o1[u] = __fadd_rn(__fmul_rn(y.x, s1), __fmul_rn(y.y, c1));
      }
    }
    warp_sync_shared();
#pragma unroll
    for (int u = 0; u < 3; ++u) {
      const int p = lane + 32 * u;
      if (p < P) {
        sts_f32(yr + 4u * p, o0[u]);
        sts_f32(yr + 4u * (P + p), o1[u]);
      }
    }
    warp_sync_shared();
  }
}

/*
 * Quantization (SPEC §2.3 step 4, formats.h's rule) of the 32 x 32 block of Y at rows
 * row0 .. row0 + 31 (one 32-token block), columns 32cb .. 32cb + 31, in both directions by
 * one warp from one read of the block. Lane l holds 4 columns 4(l%8) .. +3 of the 8 rows
 * 8(l/8) .. +7: eight 16-byte reads of f32 (each 8-lane phase reads 128 consecutive bytes
 * of one row: conflict-free in both layouts), or on Y_SPLIT's bf16 columns eight 8-byte
 * reads (two wavefronts per read, the minimum for 256 bytes, thanks to yn_chunk's swizzle).
 *   columns: per-column amax over the lane's 8 rows, then across the 4 row groups (two
 *            shuffles per column); 4 scale bytes per lane of row group 0, one 4-byte word.
 *   rows:    per-row amax over the lane's 4 columns, then a transposing reduction over the
 *            8 lanes of a row group (xor 4, 2, 1: 4 + 2 + 1 shuffles), after which lane l
 *            holds the amax of row 8(l/8) + l%8; its scale byte goes to the per-tile table
 *            in shared memory (written out a token at a time later, write_row_scales) and
 *            its multiplier is broadcast back to the row's 8 lanes (8 shuffles).
 *   codes:   per row one 4-code word in each direction; 8 lanes write a row's 32
 *            consecutive bytes (a full sector) of q_row and of q_col (same layout).
 * Amax reductions run as trees of fmaxf(|a|, |b|) (a NaN operand yields the other one, NaN
 * only when both are) closed by fmaxf(0, .): the maximum over the non-NaN values from 0,
 * as formats.h's chain of mxf_amax_step computes it. Rows past T (the last band of the
 * last tile) are set to zero before the amax and never stored.
 */
__device__ __forceinline__ float amax4(float4 v) { return fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))); }

template <int L>
__device__ __forceinline__ void quant_block(const kargs &a, uint32_t ybase, uint32_t srbase, int m0, int h, int row0,
                                            int cb, int lane) {
  const int64_t tb0 = (int64_t)m0 + row0;
  const int nrows = a.t - tb0 < 32 ? (int)(a.t - tb0) : 32;
  const int cq = lane & 7, rg = lane >> 3, col = 32 * cb + 4 * cq;
  float4 v[8];
  if (L == 0 || col >= Y_NOPE) {
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = lds_f32x4(yf_addr<L>(ybase, row0 + 8 * rg + i, col));
  } else { /* 4 bf16 of Yn: 8 bytes of chunk col / 8 */
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint2 u = lds_v2(ybase + yn_chunk(row0 + 8 * rg + i, col >> 3) + 8u * (uint32_t)(cq & 1));
      v[i] = make_float4(bf16_lo(u.x), bf16_hi(u.x), bf16_lo(u.y), bf16_hi(u.y));
    }
  }
  if (nrows < 32) { /* warp-uniform: only the last band of the last token tile */
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (8 * rg + i >= nrows) v[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  /* columns */
  float c[4];
  {
    float x0 = fmaxf(fabsf(v[0].x), fabsf(v[1].x)), x1 = fmaxf(fabsf(v[2].x), fabsf(v[3].x));
    float x2 = fmaxf(fabsf(v[4].x), fabsf(v[5].x)), x3 = fmaxf(fabsf(v[6].x), fabsf(v[7].x));
    c[0] = fmaxf(fmaxf(x0, x1), fmaxf(x2, x3));
    x0 = fmaxf(fabsf(v[0].y), fabsf(v[1].y)), x1 = fmaxf(fabsf(v[2].y), fabsf(v[3].y));
    x2 = fmaxf(fabsf(v[4].y), fabsf(v[5].y)), x3 = fmaxf(fabsf(v[6].y), fabsf(v[7].y));
    c[1] = fmaxf(fmaxf(x0, x1), fmaxf(x2, x3));
    x0 = fmaxf(fabsf(v[0].z), fabsf(v[1].z)), x1 = fmaxf(fabsf(v[2].z), fabsf(v[3].z));
    x2 = fmaxf(fabsf(v[4].z), fabsf(v[5].z)), x3 = fmaxf(fabsf(v[6].z), fabsf(v[7].z));
    c[2] = fmaxf(fmaxf(x0, x1), fmaxf(x2, x3));
    x0 = fmaxf(fabsf(v[0].w), fabsf(v[1].w)), x1 = fmaxf(fabsf(v[2].w), fabsf(v[3].w));
    x2 = fmaxf(fabsf(v[4].w), fabsf(v[5].w)), x3 = fmaxf(fabsf(v[6].w), fabsf(v[7].w));
    c[3] = fmaxf(fmaxf(x0, x1), fmaxf(x2, x3));
  }
#pragma unroll
  for (int off = 8; off < 32; off <<= 1)
#pragma unroll
    for (int j = 0; j < 4; ++j) c[j] = fmaxf(c[j], __shfl_xor_sync(0xFFFFFFFFu, c[j], off));
  uint32_t bc = 0;
  float ic[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint8_t b = mxf_e8m0_from_amax(fmaxf(0.f, c[j]));
    ic[j] = mxf_e8m0_inv(b);
    bc |= (uint32_t)b << (8 * j);
  }
  /* rows: lane (rg, cq) ends with the amax of row 8rg + cq */
  float r[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) r[i] = amax4(v[i]);
  float s4[4], s2[2];
  const bool k4 = cq & 4, k2 = cq & 2, k1 = cq & 1;
#pragma unroll
  for (int j = 0; j < 4; ++j) s4[j] = fmaxf(k4 ? r[j + 4] : r[j], __shfl_xor_sync(0xFFFFFFFFu, k4 ? r[j] : r[j + 4], 4));
#pragma unroll
  for (int j = 0; j < 2; ++j) s2[j] = fmaxf(k2 ? s4[j + 2] : s4[j], __shfl_xor_sync(0xFFFFFFFFu, k2 ? s4[j] : s4[j + 2], 2));
  const float rm = fmaxf(0.f, fmaxf(k1 ? s2[1] : s2[0], __shfl_xor_sync(0xFFFFFFFFu, k1 ? s2[0] : s2[1], 1)));
  const uint8_t br = mxf_e8m0_from_amax(rm);
  const float irow = mxf_e8m0_inv(br);
  if (8 * rg + cq < nrows) sts_u8(srbase + 8u * (uint32_t)(row0 + 8 * rg + cq) + cb, br);
  /* codes */
  const int64_t rs = (int64_t)a.h * BN; /* one token's codes */
  const int64_t off0 = ((tb0 + 8 * rg) * a.h + h) * BN + 32 * cb + 4 * cq;
  uint8_t *qr = a.q_row + off0, *qc = a.q_col + off0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float ir = __shfl_sync(0xFFFFFFFFu, irow, (lane & 24) | i);
    const uint32_t wr = mxf_mx_encode4(v[i].x, v[i].y, v[i].z, v[i].w, ir, ir, ir, ir);
    const uint32_t wc = mxf_mx_encode4(v[i].x, v[i].y, v[i].z, v[i].w, ic[0], ic[1], ic[2], ic[3]);
    if (8 * rg + i < nrows) {
      *reinterpret_cast<uint32_t *>(qr) = wr;
      *reinterpret_cast<uint32_t *>(qc) = wc;
    }
    qr += rs;
    qc += rs;
  }
  if (rg == 0) *reinterpret_cast<uint32_t *>(a.s_col + ((tb0 >> 5) * a.h + h) * BN + 32 * cb + 4 * cq) = bc;
}

/* The row-direction scales of a finished tile from the shared table: thread et of the
 * epilogue writes token et's 6 bytes. */
__device__ __forceinline__ void write_row_scales(const kargs &a, uint32_t srbase, int m0, int h, int et) {
  if (et >= BM || m0 + et >= a.t) return;
  const uint2 sc = lds_v2(srbase + 8u * et);
  uint16_t *d = reinterpret_cast<uint16_t *>(a.s_row + ((int64_t)(m0 + et) * a.h + h) * (BN / 32));
  d[0] = (uint16_t)sc.x, d[1] = (uint16_t)(sc.x >> 16), d[2] = (uint16_t)sc.y;
}

/* ------------------------------------------------------------ MXFP8 in the mainloop */
/* Prepared scales: per (token tile, stage) 128 rows x 2 k-blocks of x, per (head, stage)
 * 192 rows x 2 k-blocks of w (out-in: [row][kb]; in-out: [kb][column]), each the bf16
 * multiplier of sm90_dequant.cuh; 1.0 for tokens past T and k-blocks past K (TMA fills
 * those codes with zeros). One bulk copy each per stage. */
__global__ void __launch_bounds__(256) sf_prepare_kernel(const uint8_t *xs, const uint8_t *wsc, uint16_t *px,
                                                         uint16_t *pw, int t, int kbs, int nks, int tiles_m,
                                                         int heads, int hd, int w_out_in) {
  const int nx = tiles_m * nks * (BM * 2), nw = heads * nks * (BN * 2);
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < nx + nw; e += gridDim.x * blockDim.x) {
    uint16_t v = 0x3F80u;
    if (e < nx) {
      const int r = e % (BM * 2), rest = e / (BM * 2), ks = rest % nks, mt = rest / nks;
      const int tok = mt * BM + (r >> 1), kb = 2 * ks + (r & 1);
      if (tok < t && kb < kbs) v = scale_bf16(xs[(int64_t)tok * kbs + kb], 0);
      px[e] = v;
    } else {
      const int f = e - nx, r = f % (BN * 2), rest = f / (BN * 2), ks = rest % nks, h = rest / nks;
      const int n = w_out_in ? r >> 1 : r % BN, kb = 2 * ks + (w_out_in ? r & 1 : r / BN);
      if (kb < kbs)
        v = scale_bf16(wsc[w_out_in ? (int64_t)(h * BN + n) * kbs + kb : (int64_t)kb * hd + h * BN + n], 0);
      pw[f] = v;
    }
  }
}

/* 16 e4m3 codes with their scale pairs (one pair for all, or 8 pairs: codes 2i, 2i + 1)
 * -> 16 bf16 at o0 (codes 0-7) and o1 (8-15). The dequantization mode is chosen per
 * chunk and warp (sm90_dequant.cuh); all lanes of the warp call this together. */
template <int NP>
__device__ __forceinline__ void mx_chunk(uint4 raw, const uint32_t (&s2)[NP], uint32_t o0, uint32_t o1) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  uint32_t sp = 0, over = 0, h[8];
#pragma unroll
  for (int j = 0; j < 4; ++j) sp |= fp8_special<FMT_E4M3>(w[j]);
#pragma unroll
  for (int i = 0; i < NP; ++i) over |= fold_check<FMT_E4M3>(s2[i]);
  /* one mode per warp (lanes in different modes would run both paths) */
  const bool w_special = __any_sync(0xFFFFFFFFu, (sp & 0x80808080u) != 0);
  const bool w_over = __any_sync(0xFFFFFFFFu, MXF_FOLD_OVER(over));
  if (!w_special && !w_over) {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      dequant_word<FMT_E4M3, MODE_FOLD>(w[j], 0, 0, fold_scale<FMT_E4M3>(s2[NP == 1 ? 0 : 2 * j]),
                                        fold_scale<FMT_E4M3>(s2[NP == 1 ? 0 : 2 * j + 1]), h[2 * j], h[2 * j + 1]);
  } else if (!w_special) {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      dequant_word<FMT_E4M3, MODE_TWO>(w[j], 0, 0, s2[NP == 1 ? 0 : 2 * j], s2[NP == 1 ? 0 : 2 * j + 1], h[2 * j],
                                       h[2 * j + 1]);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      dequant_word<FMT_E4M3, MODE_EXACT>(w[j], 0, 0, s2[NP == 1 ? 0 : 2 * j], s2[NP == 1 ? 0 : 2 * j + 1], h[2 * j],
                                         h[2 * j + 1]);
  }
  sts_v4(o0, h[0], h[1], h[2], h[3]);
  sts_v4(o1, h[4], h[5], h[6], h[7]);
}

/*
 * One stage's raw codes -> the bf16 tiles the wgmmas read, in place (stage address st,
 * scales at sc). Chunks of 16 codes: x has 128 rows x 4, w 192 x 4 (out-in) or 64 k-rows
 * x 12 (in-out); consumer thread ct takes x chunks ct, ct + 256 and w chunks ct, ct + 256,
 * ct + 512. Raw tiles are 64-byte rows in TMA's 64B swizzle (16-byte chunk c of row r at
 * c ^ ((r >> 1) & 3)); the bf16 tiles are the 128B-swizzled layouts of the bf16 path.
 * The bf16 x tile does not overlap any raw codes, so x is converted first; the bf16 w tile
 * overlaps both raw tiles, so every thread has read its raw x and w chunks (w into
 * registers) before the barrier BAR_RAW and writes w's bf16 tile only after it.
 */
template <int W_OUT_IN>
__device__ __forceinline__ void mx_convert(uint32_t st, uint32_t sc, int ct) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int a = ct + 256 * i, r = a >> 2, c = a & 3;
    const uint4 raw = lds_v4(st + RAW_X + r * 64 + ((c ^ ((r >> 1) & 3)) << 4));
    const uint32_t s2[1] = {dup16(lds_u16(sc + 2 * (2 * r + (c >> 1))))};
    const uint32_t o = st + r * 128;
    mx_chunk<1>(raw, s2, o + (((2 * c) ^ (r & 7)) << 4), o + (((2 * c + 1) ^ (r & 7)) << 4));
  }
  uint4 rw[3];
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    const int b = ct + 256 * i;
    if (W_OUT_IN) {
      const int n = b >> 2, c = b & 3;
      rw[i] = lds_v4(st + RAW_W + n * 64 + ((c ^ ((n >> 1) & 3)) << 4));
    } else {
      const int kk = b / 12, nc = b - 12 * kk;
      rw[i] = lds_v4(st + RAW_W + (nc >> 2) * 4096 + kk * 64 + (((nc & 3) ^ ((kk >> 1) & 3)) << 4));
    }
  }
  named_bar_sync(BAR_RAW, 256);
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    const int b = ct + 256 * i;
    if (W_OUT_IN) {
      const int n = b >> 2, c = b & 3;
      const uint32_t s2[1] = {dup16(lds_u16(sc + SCX_BYTES + 2 * (2 * n + (c >> 1))))};
      const uint32_t o = st + A_BYTES + n * 128;
      mx_chunk<1>(rw[i], s2, o + (((2 * c) ^ (n & 7)) << 4), o + (((2 * c + 1) ^ (n & 7)) << 4));
    } else {
      const int kk = b / 12, nc = b - 12 * kk, j = nc & 3;
      const uint32_t sa = sc + SCX_BYTES + 2 * ((kk >> 5) * BN + 16 * nc);
      const uint4 u = lds_v4(sa), v = lds_v4(sa + 16);
      const uint32_t s2[8] = {u.x, u.y, u.z, u.w, v.x, v.y, v.z, v.w};
      const uint32_t o = st + A_BYTES + (nc >> 2) * 8192 + kk * 128;
      mx_chunk<8>(rw[i], s2, o + (((2 * j) ^ (kk & 7)) << 4), o + (((2 * j + 1) ^ (kk & 7)) << 4));
    }
  }
  fence_proxy_async();
  named_bar_sync(BAR_CVT, 256);
}

/* ------------------------------------------------------------ the kernel */
template <int W_OUT_IN, int MX, int L>
__global__ void __launch_bounds__(THREADS, 1)
    proj_kernel(const __grid_constant__ CUtensorMap tma_x, const __grid_constant__ CUtensorMap tma_w, const kargs a) {
  static_assert(!(MX && L), "the in-mainloop MXFP8 kernel uses the f32 Y layout");
  constexpr int NS = ylayout<L>::NS, Y_BYTES = ylayout<L>::Y_BYTES;
  extern __shared__ uint8_t smem_raw[];
  /* 32-bit shared-window addresses throughout (the window's base is aligned far beyond
   * 1024 bytes, so aligning the offset aligns the address) */
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const uint32_t ybase = base + NS * STAGE;
  const uint32_t srbase = ybase + Y_BYTES;
  const uint32_t full = srbase + SR_BYTES, empty = full + 8 * NS; /* NS mbarriers each */
  const uint32_t scbase = full + 64; /* MX: NS x SC_STAGE bytes of scales */
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int i = 0; i < NS; ++i) {
      mbar_init(full + 8 * i, 1);
      mbar_init(empty + 8 * i, 8); /* one arrival per consumer warp */
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (tid < 32) {
    /* ---------------- producer (warp 0) */
    if (tid == 0) {
      tma_prefetch_desc(&tma_x);
      tma_prefetch_desc(&tma_w);
      int slot = 0;
      uint32_t phase = 0;
      for (int tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
        int mt, h;
        tile_coords(tile, a.tiles_m, mt, h, a.h);
        for (int ks = 0; ks < a.nks; ++ks) {
          mbar_wait(empty + 8 * slot, phase ^ 1u);
          const uint32_t fb = full + 8 * slot;
          const uint32_t sa = base + slot * STAGE, sb = sa + A_BYTES;
          if (MX) {
            const uint32_t sc = scbase + slot * SC_STAGE;
            mbar_arrive_expect_tx(fb, (BM + BN) * 64 + SC_STAGE);
            tma_load_3d(sa + RAW_X, &tma_x, ks * 64, mt * BM, 0, fb);
            if (W_OUT_IN) {
              tma_load_3d(sa + RAW_W, &tma_w, ks * 64, h * BN, 0, fb);
            } else {
#pragma unroll
              for (int i = 0; i < 3; ++i)
                tma_load_3d(sa + RAW_W + 4096 * i, &tma_w, h * BN + 64 * i, ks * 64, 0, fb);
            }
            bulk_load(sc, a.scx + ((int64_t)mt * a.nks + ks) * (SCX_BYTES / 2), SCX_BYTES, fb);
            bulk_load(sc + SCX_BYTES, a.scw + ((int64_t)h * a.nks + ks) * (SCW_BYTES / 2), SCW_BYTES, fb);
          } else {
            mbar_arrive_expect_tx(fb, STAGE);
            tma_load_3d(sa, &tma_x, ks * BK, mt * BM, 0, fb);
            if (W_OUT_IN) {
              tma_load_3d(sb, &tma_w, ks * BK, h * BN, 0, fb);
            } else {
#pragma unroll
              for (int i = 0; i < 3; ++i)
                tma_load_3d(sb + i * 8192, &tma_w, h * BN + 64 * i, ks * BK, 0, fb);
            }
          }
          if (++slot == NS) {
            slot = 0;
            phase ^= 1u;
          }
        }
      }
    }
    return;
  }

  if (tid < 128 || tid >= 384) {
    /* ---------------- epilogue warps (1-3 of warpgroup 0 and warpgroup 3): RoPE and both
     * quantizations of the staged tile while the consumers run the next tile's mainloop.
     * Work dealt round-robin to the 7 warps: RoPE on row pairs, then (all RoPE done) the
     * 24 blocks of 32 x 32, each quantized in both directions by one warp. The previous
     * tile's row scales are written out once Y is full again (its units are all done). */
    const int e = tid < 128 ? (tid >> 5) - 1 : (tid >> 5) - 9, lane = tid & 31;
    /* 24 blocks for 7 warps: warps 3-5 take a fourth block; warp 0, with a tenth RoPE row
     * pair, does not */
    const int ue = (e + 4) % EPI_WARPS;
    /* Y and the scale table held in registers (a shuffle's result is not recomputed from
     * the shared window's base at every use) */
    const uint32_t yb = __shfl_sync(0xFFFFFFFFu, ybase, 0), sb = yb + Y_BYTES;
    const bool fast_rope = a.rope == FAST_ROPE; /* then nope = FAST_NOPE (D = BN) */
    constexpr int BLOCKS = (BM / 32) * (BN / 32);
    int pm0 = -1, ph = 0; /* the previous tile */
    for (int tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
      int mt, h;
      tile_coords(tile, a.tiles_m, mt, h, a.h);
      const int m0 = mt * BM;
      rope_words w;
      if (L == 1 || fast_rope) rope_fetch(a, m0, e, lane, w); /* before Y is ready */
      named_bar_sync(BAR_FULL, HANDOFF);
      if (pm0 >= 0) write_row_scales(a, sb, pm0, ph, 32 * e + lane);
      if (L == 1 || fast_rope) rope_apply<L>(a, yb, m0, e, lane, w);
      else rope_generic(a, yb, m0, e, lane);
      named_bar_sync(BAR_ROPE, 32 * EPI_WARPS);
      for (int u = ue; u < BLOCKS; u += EPI_WARPS) {
        const int band = 32 * (u % (BM / 32)), cb = u / (BM / 32);
        if (m0 + band >= a.t) continue;
        quant_block<L>(a, yb, sb, m0, h, band, cb, lane);
      }
      if (tile + (int)gridDim.x < a.tiles) named_bar_arrive(BAR_EMPTY, HANDOFF); /* Y may be refilled */
      pm0 = m0, ph = h;
    }
    named_bar_sync(BAR_ROPE, 32 * EPI_WARPS); /* the last tile's table is complete */
    if (pm0 >= 0) write_row_scales(a, sb, pm0, ph, 32 * e + lane);
    return;
  }

  /* ---------------- consumers */
  const int ct = tid - 128, wg = ct >> 7, lane = ct & 31, wq = (ct >> 5) & 3;
  float acc[96];
  int slot = 0;
  uint32_t phase = 0;
  for (int tile = blockIdx.x, n = 0; tile < a.tiles; tile += gridDim.x, ++n) {
    int prev = -1;
    for (int ks = 0; ks < a.nks; ++ks) {
      mbar_wait(full + 8 * slot, phase);
      if (MX) mx_convert<W_OUT_IN>(base + slot * STAGE, scbase + slot * SC_STAGE, ct);
      const uint32_t sa = base + slot * STAGE + wg * 64 * 128, sb = base + slot * STAGE + A_BYTES;
      const uint64_t da = desc_sw128(sa, 16, 1024);
      const uint64_t db = W_OUT_IN ? desc_sw128(sb, 16, 1024) : desc_sw128(sb, 8192, 1024);
      wgmma_fence();
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const uint64_t dbs = W_OUT_IN ? db + 2 * s : db + (2048 * s >> 4);
        wgmma_m64n192k16_ss<W_OUT_IN ? 0 : 1>(acc, da + 2 * s, dbs, (ks > 0 || s > 0) ? 1u : 0u);
      }
      wgmma_commit();
      wgmma_wait<1>();
      if (prev >= 0 && lane == 0) mbar_arrive(empty + 8 * prev);
      prev = slot;
      if (++slot == NS) {
        slot = 0;
        phase ^= 1u;
      }
    }
    wgmma_wait<0>();
    if (prev >= 0 && lane == 0) mbar_arrive(empty + 8 * prev);

    /* ---- staging (SPEC §2.3 step 2) into Y once the epilogue warpgroup is done with it.
     * Thread (warp w, lane l) holds rows 16w + l/4 (+8) and columns 8j + 2(l%4) (+1).
     * Rows of tokens past T are staged too; the epilogue never reads them. */
    if (n > 0) named_bar_sync(BAR_EMPTY, HANDOFF);
    const int r0 = wg * 64 + wq * 16 + (lane >> 2), c0 = 2 * (lane & 3);
#pragma unroll
    for (int j = 0; j < 24; ++j) {
      float y0 = acc[4 * j], y1 = acc[4 * j + 1], y2 = acc[4 * j + 2], y3 = acc[4 * j + 3];
      if (L == 1 && 8 * j < Y_NOPE) { /* bf16 pairs into Yn: 4 bytes of chunk j */
        sts_u32(ybase + yn_chunk(r0, j) + 2u * c0, mxf_f32x2_to_bf16x2(y0, y1));
        sts_u32(ybase + yn_chunk(r0 + 8, j) + 2u * c0, mxf_f32x2_to_bf16x2(y2, y3));
        continue;
      }
      if (!a.fp32_epi) {
        round_bf16_pair(y0, y1);
        round_bf16_pair(y2, y3);
      }
      sts_f32x2(yf_addr<L>(ybase, r0, 8 * j + c0), y0, y1);
      sts_f32x2(yf_addr<L>(ybase, r0 + 8, 8 * j + c0), y2, y3);
    }
    named_bar_arrive(BAR_FULL, HANDOFF);
  }
}

/* ------------------------------------------------------------ host side */

template <int W_OUT_IN, int MX, int L>
static cudaError_t launch(unsigned grid, const CUtensorMap &map_x, const CUtensorMap &map_w, const kargs &a,
                          cudaStream_t stream) {
  constexpr int smem = MX ? SMEM_BYTES_MX : ylayout<L>::SMEM_BYTES;
  cudaError_t e = mxf_set_smem_attr<proj_kernel<W_OUT_IN, MX, L>>(smem);
  if (e == cudaSuccess) proj_kernel<W_OUT_IN, MX, L><<<grid, THREADS, smem, stream>>>(map_x, map_w, a);
  return e;
}

} /* namespace mxf_sm90_proj */

using namespace mxf_sm90_proj;

extern "C" mxf_status mxf_sm90_proj_rope_launch(const mxf_proj_problem *p, const mxf_proj90::geometry *g,
                                                const mxf_proj_rope_args *args, void *ws, size_t ws_size,
                                                cudaStream_t stream, int num_sms) {
  /* core checked the caller's workspace against the plan's, which covers this kernel's */
  (void)ws_size;
  encode_tiled_fn enc = get_encode_tiled();
  if (!enc) return mxf_set_error(MXF_ERR_CUDA, "cuda backend: cuTensorMapEncodeTiled is not available from the driver");
  const int64_t hd = p->h * p->d;
  const void *x = args->x, *w = args->w;
  const bool mx = g->variant == mxf_proj90::Y_MX;
  cudaError_t e;
  const uint16_t *scx = nullptr, *scw = nullptr;
  if (mx) {
    uint16_t *px = static_cast<uint16_t *>(ws);
    uint16_t *pw = reinterpret_cast<uint16_t *>(static_cast<uint8_t *>(ws) + g->off_w);
    const int64_t tiles_m = g->tiles_m, nks = g->nks;
    sf_prepare_kernel<<<g->sf_blocks, 256, 0, stream>>>(
        static_cast<const uint8_t *>(args->x_scale), static_cast<const uint8_t *>(args->w_scale), px, pw, (int)p->t,
        (int)(p->k / 32), (int)nks, (int)tiles_m, (int)p->h, (int)hd, p->w_out_in);
    e = cudaGetLastError();
    if (e != cudaSuccess)
      return mxf_set_error(MXF_ERR_CUDA, "cuda backend: sm90 proj_rope scale preparation: %s", cudaGetErrorString(e));
    scx = px;
    scw = pw;
  } else if (p->mxfp8) {
    uint16_t *xb = static_cast<uint16_t *>(ws);
    uint16_t *wb = reinterpret_cast<uint16_t *>(static_cast<uint8_t *>(ws) + g->off_w);
    /* the standalone dequantize kernels (SPEC §3; bf16 out: code * scale rounded once,
     * the value the mainloop path's conversion gives inside SPEC §1.2's window) */
    const mxf_quant_problem qx = {p->t, p->k, MXF_BF16, MXF_QUANT_ROWS};
    const mxf_dequantize_args ax = {args->x, args->x_scale, xb};
    mxf_status st = mxf_portable_dequantize_launch(&qx, &ax, stream, num_sms);
    if (st != MXF_OK) return st;
    /* out-in w: (H*D, K) codes, (H*D, K/32) scales; in-out: (K, H*D) and (K/32, H*D) */
    const mxf_quant_problem qw = {p->w_out_in ? hd : p->k, p->w_out_in ? p->k : hd, MXF_BF16,
                                  p->w_out_in ? MXF_QUANT_ROWS : MXF_QUANT_COLS};
    const mxf_dequantize_args aw = {args->w, args->w_scale, wb};
    st = mxf_portable_dequantize_launch(&qw, &aw, stream, num_sms);
    if (st != MXF_OK) return st;
    x = xb;
    w = wb;
  }
  CUtensorMap map_x, map_w;
  CUresult r;
  if (mx) { /* raw codes, 64-byte boxes */
    r = make_map_codes(enc, &map_x, x, p->k, p->t, 1, p->k, 0, 64, BM);
    if (r == CUDA_SUCCESS)
      r = p->w_out_in ? make_map_codes(enc, &map_w, w, p->k, hd, 1, p->k, 0, 64, BN)
                      : make_map_codes(enc, &map_w, w, hd, p->k, 1, hd, 0, 64, 64);
  } else {
    r = make_map_bf16(enc, &map_x, x, p->k, p->t, 1, BM);
    if (r == CUDA_SUCCESS)
      r = p->w_out_in ? make_map_bf16(enc, &map_w, w, p->k, hd, 1, BN) : make_map_bf16(enc, &map_w, w, hd, p->k, 1, BK);
  }
  if (r != CUDA_SUCCESS)
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cuda backend: cannot describe x/w to the TMA unit (CUresult %d)", (int)r);

  kargs a;
  a.t = (int)p->t;
  a.h = (int)p->h;
  a.rope = (int)p->rope;
  a.nope = (int)p->nope;
  a.tiles_m = (int)((p->t + BM - 1) / BM);
  a.tiles = (int)(a.tiles_m * p->h);
  a.nks = (int)((p->k + BK - 1) / BK);
  a.fp32_epi = p->fp32_epilogue;
  a.cosv = static_cast<const uint16_t *>(args->cos);
  a.sinv = static_cast<const uint16_t *>(args->sin);
  a.q_row = static_cast<uint8_t *>(args->out_row);
  a.s_row = static_cast<uint8_t *>(args->out_scales_row);
  a.q_col = static_cast<uint8_t *>(args->out_col);
  a.s_col = static_cast<uint8_t *>(args->out_scales_col);
  a.scx = scx;
  a.scw = scw;
  const unsigned grid = g->grid;
  const bool split = g->variant == mxf_proj90::Y_SPLIT;
  if (mx)
    e = p->w_out_in ? launch<1, 1, 0>(grid, map_x, map_w, a, stream) : launch<0, 1, 0>(grid, map_x, map_w, a, stream);
  else if (split)
    e = p->w_out_in ? launch<1, 0, 1>(grid, map_x, map_w, a, stream) : launch<0, 0, 1>(grid, map_x, map_w, a, stream);
  else
    e = p->w_out_in ? launch<1, 0, 0>(grid, map_x, map_w, a, stream) : launch<0, 0, 0>(grid, map_x, map_w, a, stream);
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) return mxf_set_error(MXF_ERR_CUDA, "cuda backend: sm90 proj_rope launch: %s", cudaGetErrorString(e));
  return MXF_OK;
}
