/*
 * gemm_sm90_epilogue.cuh — the Hopper gemm_amax kernel's epilogue: alpha, amax, and C in
 * its dtype (whole lines through shared staging, transposed C, edge tiles element by
 * element, 16-bit C through the load ring's slots).
 */
#ifndef MXF_GEMM_SM90_EPILOGUE_CUH
#define MXF_GEMM_SM90_EPILOGUE_CUH

#include "cuda/sm90/gemm_sm90_mainloop.cuh"

namespace mxf_sm90 {

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
 * elements inside C into fm. Transposed C (p.c_transposed; never e2m1, see gemm_amax_heuristics.cu) takes
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
      if (CDT != MXF_E2M1 && TC && p.c_transposed) {
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
 * A tile of 16-bit C, transposed (p.c_transposed): the warp's 16 tile rows are 16 consecutive
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
 * A tile of 16-bit C, transposed (p.c_transposed), by warpgroup: per 64-column chunk of the tile the
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

/* A tile of f32 C, transposed (p.c_transposed): per 32-column chunk, the warp's values go into its
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
 * A tile of f32 C, transposed (p.c_transposed), by warpgroup (the wide tile): its 64 tile rows are
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
    const bool tc = TC && p.c_transposed;
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
 * The wide pre-pass tiles' 16-bit C through the ring (kernel_args::c_ring): the unit's last
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
        if (p.c_transposed) stage16_t<CDT, BN>(acc, ch, base + ch * 8192, wq, lane);
        else stage16<CDT, BN>(acc, ch, base + ch * 8192 + wq * 2048, lane);
      }
      fence_proxy_async();
      if ((ct & 127) == 0) {
        const int r0 = mt * TM + 64 * wg, c0 = nt * BN; /* the half's first row and column of the tile */
        sts_u32(sm.cst(slot), (uint32_t)(p.c_transposed ? r0 : c0));
        sts_u32(sm.cst(slot) + 4, (uint32_t)(p.c_transposed ? c0 : r0));
        sts_u32(sm.cst(slot) + 8, (uint32_t)l << 2 | (uint32_t)p.c_transposed << 1 | 1u);
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

} /* namespace mxf_sm90 */

#endif
