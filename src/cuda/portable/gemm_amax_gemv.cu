/*
 * gemm_amax_gemv.cu — gemm_amax at few rows of A with MX weights (cuda/gemv), any sm_80+
 * GPU: the weight-streaming kernel and its launch. What it does, when it is chosen and its
 * numbers: docs/kernels/gemm_amax_gemv.md. Its geometry (tiles, K splits, warps, workspace)
 * is chosen with the plan (gemv_geometry_of, gemm_amax_heuristics.cu; constants in
 * gemv_shape.h); the launch reads it.
 *
 * K order: thread t (= lane % 4) owns the 16 consecutive k at 16t of each 64-k chunk;
 * the dequantization pairs values (k, k+4) (fp4, one nibble shift) or (k, k+2) (fp8, one
 * byte shift) into bf16x2, and the activations are permuted with PRMT into the same pairs
 * (the sum does not care about the order, only that both sides agree).
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "core/internal.h"
#include "cuda/amax.cuh"
#include "cuda/c_store.cuh"
#include "cuda/cp_async.cuh"
#include "cuda/cuda_util.h"
#include "cuda/pdl.cuh"
#include "cuda/portable/gemv_shape.h"
#include "cuda/portable/portable_ops.h"

namespace {

using namespace mxf_gemv;

enum { W_E2M1 = 0, W_E4M3 = 1 };

struct gemv_params {
  int m, n, l;
  int64_t k;
  const uint16_t *a; /* bf16 (M, K) rows, batch stride a_ls, row stride a_ms (values) */
  int64_t a_ms, a_ls;
  const uint8_t *b; /* codes; row stride b_rs and batch stride b_ls in bytes */
  int64_t b_rs, b_ls;
  const uint8_t *sfb;
  int sfb_swz;
  int64_t kb;
  int wfmt;
  uint8_t *c;
  int c_dtype;
  int64_t c_ms, c_ns, c_ls;
  float alpha;
  float *amax;
  float *part;        /* split partials: [l][tile][split][M][16 TR] */
  unsigned *counters; /* [l][tile] with split-K (zeroed before the kernel) */
  int tiles, splits, chunks_per_split, chunks_per_warp, nchunks;
};

__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
               "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t x, uint32_t y) {
  __nv_bfloat162 a = *reinterpret_cast<__nv_bfloat162 *>(&x), b = *reinterpret_cast<__nv_bfloat162 *>(&y);
  __nv_bfloat162 r = __hmul2(a, b);
  return *reinterpret_cast<uint32_t *>(&r);
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&h);
}

/* Pair p (0..7) of a row chunk as bf16x2 without the scale: fp4 pairs (k, k+4) of word
 * p / 4, fp8 pairs (k, k+2) of word p / 2. */
template <int WF> __device__ __forceinline__ uint32_t code_pair(const uint4 &w, int p) {
  if (WF == W_E2M1) { /* the pair's nibbles n (at 4j and 4j + 16 of x) times 2^6 + 2^12 (no
                        * carries): n's code bits land at 6..8, its sign at 15 */
    const int j = p & 3;
    const uint32_t x = (p < 4 ? w.x : w.y) >> (j >= 2 ? 8 : 0);
    return ((x & ((j & 1) ? 0x00F000F0u : 0x000F000Fu)) * ((j & 1) ? 0x104u : 0x1040u)) & 0x81C081C0u;
  }
  const uint32_t word = p < 2 ? w.x : p < 4 ? w.y : p < 6 ? w.z : w.w;
  const uint32_t x = word >> (8 * (p & 1));
  return ((x & 0x007F007Fu) << 4) | ((x & 0x00800080u) << 8);
}

/* The same pair p decoded exactly (formats.h) with its scale, rounded to bf16 (exact
 * inside the window). */
template <int WF> __device__ __forceinline__ uint32_t exact_pair(const uint4 &w, int p, float sc) {
  uint32_t c0, c1;
  if (WF == W_E2M1) {
    const uint32_t x = p < 4 ? w.x : w.y;
    c0 = (x >> (4 * (p & 3))) & 0xF;
    c1 = (x >> (4 * (p & 3) + 16)) & 0xF;
    return pack_bf16(mxf_e2m1_to_f32((uint8_t)c0) * sc, mxf_e2m1_to_f32((uint8_t)c1) * sc);
  }
  const uint32_t word = p < 2 ? w.x : p < 4 ? w.y : p < 6 ? w.z : w.w;
  c0 = (word >> (8 * (p & 1))) & 0xFF;
  c1 = (word >> (8 * (p & 1) + 16)) & 0xFF;
  return pack_bf16(mxf_e4m3_to_f32((uint8_t)c0) * sc, mxf_e4m3_to_f32((uint8_t)c1) * sc);
}

/* The activation pair matching code pair p, from the natural bf16 words u[0..7] of the
 * thread's 16 k (word i = k 2i, 2i+1). */
template <int WF> __device__ __forceinline__ uint32_t act_pair(const uint32_t (&u)[8], int p) {
  if (WF == W_E2M1) { /* (k, k+4) with k = 8 (p / 4) + p % 4 */
    const int base = 4 * (p >> 2), j = p & 3;
    return prmt(u[base + (j >> 1)], u[base + (j >> 1) + 2], (j & 1) ? 0x7632u : 0x5410u);
  }
  /* (k, k+2) with k = 4 (p / 2) + p % 2 */
  const int i = p >> 1;
  return prmt(u[2 * i], u[2 * i + 1], (p & 1) ? 0x7632u : 0x5410u);
}

/* A scale byte b's multiplier, one bf16: either 2^(b - 127 + c) ("fast", where every byte
 * of the CTA's split allows it: one product restores the placed code and applies the
 * scale) or 2^(b - 127) (b = 0: the subnormal 2^-127; b = 255: NaN), applied
 * after the code is restored (two products, still one rounding). c = 126 (e2m1) / 120
 * (e4m3), the placed code's offset (code_pair). */
template <int WF> struct wscale {
  static constexpr uint32_t C = WF == W_E2M1 ? 126u : 120u;
  static constexpr uint32_t UNPLACE = WF == W_E2M1 ? 0x7E807E80u : 0x7B807B80u; /* 2^c, 2^c */
  __device__ static bool fast_ok(uint32_t b) { return b + C <= 254u; }
  __device__ static uint16_t mul(uint32_t b, bool fast) {
    return (uint16_t)(fast ? (b + C) << 7 : b == 255u ? 0x7FC0u : b ? b << 7 : 0x40u);
  }
  /* the multipliers of rows g (low half) and g + 8 (high half) from their raw scale bytes
   * (one per 16-bit half): fast, one multiply-add for both */
  __device__ static uint32_t mul2(uint32_t raw, bool fast) {
    if (fast) return raw * 128u + ((C << 7) | (C << 23));
    return mul(raw & 0xFFFFu, false) | (uint32_t)mul(raw >> 16, false) << 16;
  }
};

/* One chunk of the thread's rows g (codes w0) and g + 8 (w1), their raw scale bytes in
 * the halves of `raw`, times its activations u, into acc. `fast`: the CTA's scales take
 * the one-product multipliers (CTA-uniform). */
template <int MT, int WF>
__device__ __forceinline__ void chunk_mma(float (&acc)[MT][4], const uint4 &w0, const uint4 &w1, uint32_t raw,
                                          bool fast, const uint32_t (&u)[MT][8]) {
  using S = wscale<WF>;
  const uint32_t mm = S::mul2(raw, fast), m0 = prmt(mm, mm, 0x1010u), m1 = prmt(mm, mm, 0x3232u);
  uint32_t wa[8], wb[8]; /* row g and row g + 8: 8 pairs each */
  bool exact = false;
  if (WF == W_E4M3) { /* a NaN code takes the element-wise path (e2m1 has none) */
    const uint32_t n0 =
        __vcmpeq4(w0.x & 0x7F7F7F7Fu, 0x7F7F7F7Fu) | __vcmpeq4(w0.y & 0x7F7F7F7Fu, 0x7F7F7F7Fu) |
        __vcmpeq4(w0.z & 0x7F7F7F7Fu, 0x7F7F7F7Fu) | __vcmpeq4(w0.w & 0x7F7F7F7Fu, 0x7F7F7F7Fu);
    const uint32_t n1 =
        __vcmpeq4(w1.x & 0x7F7F7F7Fu, 0x7F7F7F7Fu) | __vcmpeq4(w1.y & 0x7F7F7F7Fu, 0x7F7F7F7Fu) |
        __vcmpeq4(w1.z & 0x7F7F7F7Fu, 0x7F7F7F7Fu) | __vcmpeq4(w1.w & 0x7F7F7F7Fu, 0x7F7F7F7Fu);
    exact = __any_sync(0xFFFFFFFFu, (n0 | n1) != 0u);
  }
  if (exact) {
    const float sc0 = mxf_e8m0_to_f32((uint8_t)raw), sc1 = mxf_e8m0_to_f32((uint8_t)(raw >> 16));
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      wa[q] = exact_pair<WF>(w0, q, sc0);
      wb[q] = exact_pair<WF>(w1, q, sc1);
    }
  } else if (fast) {
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      wa[q] = bf16x2_mul(code_pair<WF>(w0, q), m0);
      wb[q] = bf16x2_mul(code_pair<WF>(w1, q), m1);
    }
  } else {
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      wa[q] = bf16x2_mul(bf16x2_mul(code_pair<WF>(w0, q), S::UNPLACE), m0);
      wb[q] = bf16x2_mul(bf16x2_mul(code_pair<WF>(w1, q), S::UNPLACE), m1);
    }
  }
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int s = 0; s < 4; ++s)
      mma_bf16(acc[j], wa[2 * s], wb[2 * s], wa[2 * s + 1], wb[2 * s + 1], act_pair<WF>(u[j], 2 * s),
               act_pair<WF>(u[j], 2 * s + 1));
}

/* A thread's activations, tokens 8j + g (thread t's 16 k of a chunk as the natural bf16
 * words; zeros past M and past K), from the split's first chunk. */
template <int MT> struct a_stream {
  const uint4 *src[MT]; /* the token's row at the thread's first k (a valid address past M) */
  int nin;              /* chunks of the split that hold the thread's k (K is a multiple of 32) */
  bool in_m[MT];

  __device__ __forceinline__ a_stream(const gemv_params &p, const uint16_t *a_base, int64_t k0, int g,
                                      int t) {
    const int64_t left = p.k - (k0 + 16 * t);
    nin = left > 0 ? (int)((left + CHUNK - 1) / CHUNK) : 0;
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      const int m = 8 * j + g;
      in_m[j] = m < p.m;
      src[j] = reinterpret_cast<const uint4 *>(a_base + (int64_t)(in_m[j] ? m : 0) * p.a_ms + k0 + 16 * t);
    }
  }
  /* chunk i of the split */
  __device__ __forceinline__ void load(uint32_t (&u)[MT][8], int i) const {
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      if (in_m[j] && i < nin) {
        const uint4 x0 = __ldg(src[j] + i * (CHUNK / 8)), x1 = __ldg(src[j] + i * (CHUNK / 8) + 1);
        u[j][0] = x0.x, u[j][1] = x0.y, u[j][2] = x0.z, u[j][3] = x0.w;
        u[j][4] = x1.x, u[j][5] = x1.y, u[j][6] = x1.z, u[j][7] = x1.w;
      } else {
#pragma unroll
        for (int x = 0; x < 8; ++x)
          u[j][x] = 0u;
      }
    }
  }
};

/* The ring (per warp, DEPTH chunks of its 16 TR rows, RING bytes): chunk slot = 16 TR rows
 * x RB bytes, row r at r * RB, so a thread's reads of rows g and g + 8 of a tile (8 bytes
 * at 8t for fp4, 16 at 16t for fp8) meet no bank conflict. */
template <int WF, int TR> struct ring_geom {
  static constexpr int RB = WF == W_E2M1 ? CHUNK / 2 : CHUNK; /* bytes of a row's chunk */
  static constexpr int SLOT = 16 * TR * RB;
  static constexpr int DEPTH = RING / SLOT; /* chunks in flight */
};

/* A lane's share of the warp's chunks of B: 16-byte copies (fp4: one a chunk and tile,
 * fp8: two), their sources at the warp's first chunk, zeros past N and past K (K is a
 * multiple of 32, so a copy is all in or all out). */
template <int WF, int TR> struct b_stream {
  static constexpr int RB = ring_geom<WF, TR>::RB, PARTS = RB / 16, PER_LANE = 16 * TR * PARTS / 32;
  const uint8_t *src[PER_LANE]; /* the copy's source in the warp's first chunk */
  int nin[PER_LANE];            /* chunks of the warp the copy reads (0 past N) */
  uint32_t dst[PER_LANE];       /* offset in a slot */

  __device__ __forceinline__ b_stream(const gemv_params &p, const uint8_t *b_base, int64_t row0, int64_t k0,
                                      int lane) {
#pragma unroll
    for (int j = 0; j < PER_LANE; ++j) {
      const int idx = lane + 32 * j, r = idx / PARTS, part = idx % PARTS;
      const int64_t row = row0 + r, kk = k0 + part * (WF == W_E2M1 ? 32 : 16), left = p.k - kk;
      nin[j] = row < p.n && left > 0 ? (int)((left + CHUNK - 1) / CHUNK) : 0;
      src[j] = b_base + (row < p.n ? row : 0) * p.b_rs + (WF == W_E2M1 ? kk / 2 : kk);
      dst[j] = (uint32_t)(r * RB + 16 * part);
    }
  }
  /* chunk i of the warp into the slot at shared address s */
  __device__ __forceinline__ void issue(uint32_t s, int i) const {
#pragma unroll
    for (int j = 0; j < PER_LANE; ++j) {
      const bool in = i < nin[j];
      mxf_cp_async_16_zfill(s + dst[j], src[j] + (in ? i : 0) * RB, in ? 16u : 0u);
    }
  }
};

/* Row r's codes of a chunk from its slot (thread t's 16 k). */
template <int WF> __device__ __forceinline__ uint4 slot_codes(const uint8_t *slot, int r, int t) {
  constexpr int RB = ring_geom<WF, 1>::RB;
  if (WF == W_E2M1) {
    const uint2 v = *reinterpret_cast<const uint2 *>(slot + r * RB + 8 * t);
    return make_uint4(v.x, v.y, 0u, 0u);
  }
  return *reinterpret_cast<const uint4 *>(slot + r * RB + 16 * t);
}

/* The raw scale bytes of the CTA's 16 TR rows for the split's blocks [kb0, kb0 + nb) into
 * sf[nb][TR][16] (16 bits each; row r of tile r / 16 at slot 2 (r % 8) + (r % 16) / 8, so a
 * thread's rows g and g + 8 are one 32-bit word), 127 (the scale 1) past N and past K.
 * Every thread of the CTA takes groups of 4 blocks of one row, G groups with all their
 * loads before the first store. Returns whether every byte b has b + c <= 254 (wscale's
 * fast multipliers), the same in every thread; ends with a barrier of the CTA. */
template <int WF, int TR>
__device__ __forceinline__ bool load_scales(uint16_t *sf, const gemv_params &p, int64_t trow0, int kb0, int nb,
                                            int64_t l) {
  constexpr int BN = 16 * TR, G = 4;
  const int groups = BN * ((nb + 3) / 4);
  const mxf_sf_layout lay = p.sfb_swz ? MXF_SF_SWIZZLED : MXF_SF_COMPACT;
  uint32_t hi = 0; /* the largest byte */
#pragma unroll 1
  for (int e0 = threadIdx.x; e0 < groups; e0 += G * blockDim.x) {
    uint32_t v[G][4];
#pragma unroll
    for (int q = 0; q < G; ++q) {
      const int e = e0 + q * blockDim.x, r = e % BN, b0 = 4 * (e / BN);
      const int64_t row = trow0 + r;
      const bool in = e < groups && row < p.n;
      const uint8_t *src = p.sfb + mxf_gemm_sf_offset(lay, p.n, p.kb, in ? row : 0, 0, l);
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int kb = kb0 + b0 + x;
        v[q][x] = in && b0 + x < nb && kb < p.kb ? __ldg(src + (p.sfb_swz ? (kb >> 2) * 512 + (kb & 3) : kb)) : 127u;
      }
    }
#pragma unroll
    for (int q = 0; q < G; ++q) {
      const int e = e0 + q * blockDim.x, r = e % BN, b0 = 4 * (e / BN);
      if (e >= groups) break;
      const int slot = (r >> 4) * 16 + 2 * (r & 7) + ((r >> 3) & 1);
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        hi = max(hi, v[q][x]);
        if (b0 + x < nb) sf[(b0 + x) * BN + slot] = (uint16_t)v[q][x];
      }
    }
  }
  return __syncthreads_and(wscale<WF>::fast_ok(hi)) != 0;
}

/* Shared memory of a CTA of `warps` warps whose splits have `cps` chunks: each warp's ring
 * (reused for the warps' partial sums at the end), then the tile's scales of the split. */
constexpr size_t smem_of(int tr, int warps, int cps) {
  return (size_t)warps * RING + (size_t)cps * sf_chunk_bytes(tr);
}

template <int MT, int WF, int TR>
__global__ void __launch_bounds__(32 * MAX_WARPS, MT <= 2 ? 2 : 1)
    gemv_kernel(const __grid_constant__ gemv_params p) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ uint32_t red[32];
  __shared__ unsigned last;
  constexpr int BN = 16 * TR, Q = TR * MT * 4; /* rows of the CTA's tile; a thread's sums */
  using RG = ring_geom<WF, TR>;
  constexpr int SLOT = RG::SLOT, DEPTH = RG::DEPTH;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5, g = lane >> 2,
            t = lane & 3;
  const int tile = blockIdx.x, split = blockIdx.y;
  const int64_t l = blockIdx.z;
  const int64_t trow0 = (int64_t)tile * BN; /* the tile's first row of B */
  const uint16_t *a_base = p.a + l * p.a_ls;
  const uint8_t *b_base = p.b + l * p.b_ls;
  float acc[TR][MT][4];
#pragma unroll
  for (int r = 0; r < TR; ++r)
#pragma unroll
    for (int j = 0; j < MT; ++j)
      acc[r][j][0] = acc[r][j][1] = acc[r][j][2] = acc[r][j][3] = 0.0f;

  /* the warp's chunks: its share of the split's, streamed through its ring DEPTH ahead of
   * the one being multiplied; the tile's scales of the whole split beside the rings */
  uint8_t *my_ring = smem + warp * RING;
  uint16_t *sf = reinterpret_cast<uint16_t *>(smem + nwarps * RING); /* [2 cps][TR][16] */
  const uint32_t ring_s = mxf_smem_addr(my_ring);
  const int cs0 = split * p.chunks_per_split;
  const int csn = min(p.nchunks, cs0 + p.chunks_per_split) - cs0;
  const int c0 = cs0 + warp * p.chunks_per_warp;
  const int nc = max(0, min(csn - warp * p.chunks_per_warp, p.chunks_per_warp));
  const b_stream<WF, TR> bs(p, b_base, trow0, (int64_t)c0 * CHUNK, lane);
#pragma unroll
  for (int i = 0; i < DEPTH; ++i) {
    if (i < nc) bs.issue(ring_s + i * SLOT, i);
    mxf_cp_async_commit();
  }
  /* B and its scales are the caller's, written before the launch before this one: they
   * may be read before that one completes; the activations, the counters and C not */
  const bool fast = load_scales<WF, TR>(sf, p, trow0, 2 * cs0, 2 * csn, l);
  mxf_pdl_wait();
  /* up to 16 tokens, each chunk's activations are loaded one chunk ahead (two register
   * sets taking turns) */
  constexpr bool AHEAD = MT <= 2;
  const a_stream<MT> as(p, a_base, (int64_t)c0 * CHUNK, g, t);
  uint32_t ua[MT][8], ub[MT][8];
  if (AHEAD && nc > 0) as.load(ua, 0);
  auto step = [&](int i, uint32_t(&cur)[MT][8], uint32_t(&nxt)[MT][8]) {
    if (!AHEAD)
      as.load(cur, i);
    else if (i + 1 < nc)
      as.load(nxt, i + 1);
    mxf_cp_async_wait<DEPTH - 1>(); /* this lane's part of chunk i */
    __syncwarp();                   /* and every lane's */
    const int so = (i % DEPTH) * SLOT;
    uint4 w0[TR], w1[TR];
    uint32_t raw[TR];
    const uint16_t *sfc = sf + (2 * (c0 - cs0 + i) + (t >> 1)) * (16 * TR) + 2 * g;
#pragma unroll
    for (int r = 0; r < TR; ++r) {
      w0[r] = slot_codes<WF>(my_ring + so, 16 * r + g, t);
      w1[r] = slot_codes<WF>(my_ring + so, 16 * r + g + 8, t);
      raw[r] = *reinterpret_cast<const uint32_t *>(sfc + 16 * r);
    }
    __syncwarp(); /* the slot is read: refill it */
    if (i + DEPTH < nc) bs.issue(ring_s + so, i + DEPTH);
    mxf_cp_async_commit();
#pragma unroll
    for (int r = 0; r < TR; ++r)
      chunk_mma<MT, WF>(acc[r], w0[r], w1[r], raw[r], fast, cur);
  };
  for (int i = 0; i < nc; i += 2) {
    step(i, ua, ub);
    if (i + 1 < nc) step(i + 1, ub, ua);
  }
  mxf_cp_async_wait<0>();

  /* the warps' partial sums through shared memory (inside the rings), added in warp
   * order by the warp that owns each of the thread's Q sums (q % nwarps), which leaves
   * the total in warp 0's entry; sum q is acc[q / (4 MT)][(q / 4) % MT][q % 4]. The loops
   * over the sums stay rolled (one copy of the C conversion). */
  float *rb = reinterpret_cast<float *>(smem); /* [warp][Q][32] */
  if (nwarps > 1) __syncthreads();             /* every warp is done with its ring */
#pragma unroll
  for (int q = 0; q < Q; ++q)
    rb[(warp * Q + q) * 32 + lane] = acc[q / (4 * MT)][(q / 4) % MT][q % 4];
  if (nwarps > 1) {
    __syncthreads();
#pragma unroll 1
    for (int q = warp; q < Q; q += nwarps) {
      float s = 0.0f;
      for (int w = 0; w < nwarps; ++w)
        s += rb[(w * Q + q) * 32 + lane];
      rb[q * 32 + lane] = s;
    }
  } else {
    __syncwarp();
  }
  /* sum q's row of the tile and token */
  auto row_of = [&](int q) { return 16 * (q / (4 * MT)) + g + ((q >> 1) & 1) * 8; };
  auto tok_of = [&](int q) { return 8 * ((q / 4) % MT) + 2 * t + (q & 1); };

  /* split-K: the partials in split order, by the tile's last CTA */
  const int64_t tid_tile = l * p.tiles + tile;
  if (p.splits > 1) {
    const int64_t psize = (int64_t)BN * p.m; /* a partial: the tile's rows x the M tokens */
    float *mine = p.part + (tid_tile * p.splits + split) * psize;
#pragma unroll 1
    for (int q = warp; q < Q; q += nwarps)
      if (tok_of(q) < p.m) mine[tok_of(q) * BN + row_of(q)] = rb[q * 32 + lane];
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&p.counters[tid_tile], 1u) == (unsigned)(p.splits - 1);
    __syncthreads();
    if (!last) return;
    __threadfence();
    const float *all = p.part + tid_tile * p.splits * psize;
#pragma unroll 1
    for (int q = warp; q < Q; q += nwarps) {
      if (tok_of(q) >= p.m) continue;
      float s = 0.0f;
      for (int sp = 0; sp < p.splits; ++sp)
        s += __ldcg(all + sp * psize + tok_of(q) * BN + row_of(q));
      rb[q * 32 + lane] = s;
    }
  }

  /* epilogue: alpha once, amax before the conversion, C in its dtype */
  uint32_t amax_bits = 0;
  const int64_t cb = l * p.c_ls;
#pragma unroll 1
  for (int q = warp; q < Q; q += nwarps) {
    const int64_t n = trow0 + row_of(q);
    const int m = tok_of(q);
    if (n >= p.n || m >= p.m) continue;
    const float x = rb[q * 32 + lane] * p.alpha;
    amax_bits = mxf_amax_fold(amax_bits, x);
    mxf_c_store_one(p.c, p.c_dtype, cb + (int64_t)m * p.c_ms + n * p.c_ns, x);
  }
  mxf_amax_cta_commit(amax_bits, p.amax, red); /* *amax prepared by the launch before (mxf_amax_prepare) */
}

/* A MX A dequantized to bf16 (M, K) rows in the workspace, exactly inside the window. */
struct a_prep {
  const uint8_t *a, *sfa;
  int fmt; /* MXF_E4M3, MXF_E5M2, MXF_E2M1 */
  int sfa_swz;
  int64_t m, k, kb, a_ms, a_ks, a_ls;
  uint16_t *out;
  unsigned *ctrl; /* the gemv kernel's split counters: zeroed here, with *amax prepared */
  int nctrl;
  float *amax;
  int accumulate;
};

/* What the kernel needs ready before it starts: its split counters zeroed and *amax
 * prepared for the atomics. One CTA. */
__device__ __forceinline__ void prepare_run(unsigned *ctrl, int n, float *amax, int accumulate) {
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    ctrl[i] = 0u;
  if (threadIdx.x == 0) mxf_amax_prepare(amax, accumulate);
}

__global__ void a_to_bf16_kernel(const __grid_constant__ a_prep q, int64_t total) {
  if (blockIdx.x == 0) prepare_run(q.ctrl, q.nctrl, q.amax, q.accumulate);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t k = i % q.k, m = (i / q.k) % q.m, l = i / (q.k * q.m);
    const int64_t idx = l * q.a_ls + m * q.a_ms + k * q.a_ks;
    float v;
    if (q.fmt == MXF_E2M1)
      v = mxf_e2m1_to_f32(mxf_e2m1_get(q.a, idx));
    else if (q.fmt == MXF_E4M3)
      v = mxf_e4m3_to_f32(q.a[idx]);
    else
      v = mxf_e5m2_to_f32(q.a[idx]);
    const uint8_t s =
        q.sfa[mxf_gemm_sf_offset(q.sfa_swz ? MXF_SF_SWIZZLED : MXF_SF_COMPACT, q.m, q.kb, m, k / 32, l)];
    q.out[i] = mxf_f32_to_bf16(v * mxf_e8m0_to_f32(s));
  }
}

/* With a bf16 A, the launch before the kernel. */
__global__ void prepare_kernel(unsigned *ctrl, int n, float *amax, int accumulate) {
  mxf_pdl_allow_dependents();
  prepare_run(ctrl, n, amax, accumulate);
}

template <int MT, int WF, int TR>
cudaError_t launch_one(dim3 grid, int warps, const gemv_params &p, bool pdl, cudaStream_t stream) {
  const size_t smem = smem_of(TR, warps, p.chunks_per_split);
  if (smem > 48 * 1024) { /* the opt-in above the default 48 KB, for the largest CTA */
    const cudaError_t e =
        mxf_set_smem_attr<gemv_kernel<MT, WF, TR>>((int)smem_of(TR, MAX_WARPS, max_split_chunks(TR)));
    if (e != cudaSuccess) return e;
  }
  return mxf_launch(gemv_kernel<MT, WF, TR>, grid, dim3(32 * warps), smem, stream, pdl, p);
}

template <int MT>
cudaError_t launch_mt(dim3 grid, int warps, int tr, const gemv_params &p, bool pdl, cudaStream_t stream) {
  if (rows_of(MT) == 2 && tr == 2)
    return p.wfmt == W_E2M1 ? launch_one<MT, W_E2M1, rows_of(MT)>(grid, warps, p, pdl, stream)
                            : launch_one<MT, W_E4M3, rows_of(MT)>(grid, warps, p, pdl, stream);
  return p.wfmt == W_E2M1 ? launch_one<MT, W_E2M1, 1>(grid, warps, p, pdl, stream)
                          : launch_one<MT, W_E4M3, 1>(grid, warps, p, pdl, stream);
}

} /* namespace */

extern "C" mxf_status mxf_gemv_gemm_amax_launch(const mxf_gemm_problem *pr, const mxf_gemv::geometry *geo,
                                                const mxf_gemm_amax_args *args, void *ws, cudaStream_t stream) {
  const mxf_gemv::geometry &g = *geo;
  uint8_t *w = static_cast<uint8_t *>(ws);
  const int accumulate = (pr->flags & MXF_AMAX_ACCUMULATE) != 0;
  gemv_params p;
  p.m = (int)pr->m, p.n = (int)pr->n, p.l = (int)pr->l, p.k = pr->k;
  p.counters = reinterpret_cast<unsigned *>(w + g.off_counters);
  p.part = reinterpret_cast<float *>(w + g.off_part);
  /* one launch before the kernel: the activations' pre-pass, which zeroes the counters,
   * or (bf16 A) a memset of them */
  if (pr->a_fmt == MXF_BF16) {
    p.a = static_cast<const uint16_t *>(args->a);
    p.a_ms = pr->a_ms, p.a_ls = pr->a_ls;
    prepare_kernel<<<1, 256, 0, stream>>>(p.counters, (int)(g.ws_counters / 4), args->amax, accumulate);
    MXF_CUDA_CHECK_LAUNCH("gemm_amax: gemv preparation launch failed");
  } else {
    a_prep q;
    q.a = static_cast<const uint8_t *>(args->a);
    q.sfa = static_cast<const uint8_t *>(args->sfa);
    q.fmt = (int)pr->a_fmt;
    q.sfa_swz = pr->sfa_layout == MXF_SF_SWIZZLED;
    q.m = pr->m, q.k = pr->k, q.kb = pr->kb, q.a_ms = pr->a_ms, q.a_ks = pr->a_ks, q.a_ls = pr->a_ls;
    q.out = reinterpret_cast<uint16_t *>(w);
    q.ctrl = p.counters;
    q.nctrl = (int)(g.ws_counters / 4);
    q.amax = args->amax;
    q.accumulate = accumulate;
    const int64_t total = pr->l * pr->m * pr->k;
    const int blocks = (int)((total + 255) / 256 < 4096 ? (total + 255) / 256 : 4096);
    a_to_bf16_kernel<<<blocks, 256, 0, stream>>>(q, total);
    MXF_CUDA_CHECK_LAUNCH("gemm_amax: activation pre-pass launch failed");
    p.a = q.out;
    p.a_ms = pr->k, p.a_ls = pr->m * pr->k;
  }
  const int fp4 = pr->b_fmt == MXF_E2M1;
  p.b = static_cast<const uint8_t *>(args->b);
  p.b_rs = fp4 ? pr->b_ns / 2 : pr->b_ns;
  p.b_ls = fp4 ? pr->b_ls / 2 : pr->b_ls;
  p.sfb = static_cast<const uint8_t *>(args->sfb);
  p.sfb_swz = pr->sfb_layout == MXF_SF_SWIZZLED;
  p.kb = pr->kb;
  p.wfmt = fp4 ? W_E2M1 : W_E4M3;
  p.c = static_cast<uint8_t *>(args->c);
  p.c_dtype = (int)pr->c;
  p.c_ms = pr->c_ms, p.c_ns = pr->c_ns, p.c_ls = pr->c_ls;
  p.alpha = args->alpha ? *args->alpha : 1.0f;
  p.amax = args->amax;
  p.tiles = g.tiles, p.splits = g.splits, p.chunks_per_split = g.chunks_per_split, p.nchunks = g.nchunks;
  p.chunks_per_warp = g.chunks_per_warp;
  const dim3 grid((unsigned)g.tiles, (unsigned)g.splits, (unsigned)pr->l);
  const bool pdl = g.pdl;
  cudaError_t e;
  switch (g.mt) {
  case 1: e = launch_mt<1>(grid, g.warps, g.tr, p, pdl, stream); break;
  case 2: e = launch_mt<2>(grid, g.warps, g.tr, p, pdl, stream); break;
  case 4: e = launch_mt<4>(grid, g.warps, g.tr, p, pdl, stream); break;
  case 8: e = launch_mt<8>(grid, g.warps, g.tr, p, pdl, stream); break;
  default: e = launch_mt<16>(grid, g.warps, g.tr, p, pdl, stream); break;
  }
  MXF_CUDA_TRY(e, "gemm_amax: gemv kernel launch failed");
  return MXF_OK;
}
