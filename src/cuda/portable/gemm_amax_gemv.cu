/*
 * gemm_amax_gemv.cu — gemm_amax at few rows of A (M <= 128) with MX weights: the
 * weight-streaming kernel for any sm_80+ GPU (docs/spec.md §1; chosen in
 * gemm_amax_cuda.cu).
 *
 * Scope (mxf_gemv_plan): A bf16 (no scales) or MX (e4m3 / e5m2 / e2m1 with e8m0 scales,
 * dequantized once to bf16 by a pre-pass), k-major, M <= 128; B e2m1 or e4m3 codes with
 * e8m0 scales per 32, k-major, compact or swizzled scales; K a multiple of 32; C of any
 * dtype but e2m1, any strides; L >= 1; alpha; amax overwrite / accumulate.
 *
 * At small M the run is bound by reading B once; so B never goes through shared memory:
 * each warp owns 16 rows of B, each thread loads the codes of its fragment straight into
 * registers (fp4: 8 bytes per row and 64-k chunk, fp8: 16), dequantizes them in registers
 * and feeds mma.sync m16n8k16 with B's rows as the MMA's M side and the tokens as its N
 * side (8 per MMA, MT groups of 8). The activations come from L1 / L2 (every CTA reads
 * them; they are small at these M).
 *
 * K order: thread t (= lane % 4) owns the 16 consecutive k at 16t of each 64-k chunk;
 * the dequantization pairs values (k, k+4) (fp4, one nibble shift) or (k, k+2) (fp8, one
 * byte shift) into bf16x2, and the activations are permuted with PRMT into the same pairs
 * (the sum does not care about the order, only that both sides agree).
 *
 * Dequantization, exact (SPEC §1.2's window): a code's bits placed into a bf16 give code *
 * 2^-c (c = 126 e2m1, 120 e4m3; subnormal codes land in bf16 subnormals), times the scale
 * multiplier 2^(b - 127 + c) as a bf16 (one bf16x2 product per pair), or, where that
 * leaves bf16's range, times 2^c and then the scale (two products, one rounding). A warp
 * takes the exact element-wise path (formats.h decoders) for a chunk with a NaN scale or
 * an e4m3 NaN code: they propagate.
 *
 * Split-K: the grid is (tiles of 64 rows of B, K splits, L). With more than one split
 * every CTA stores its partial tile (f32) in the workspace and counts itself in; the last
 * one of a tile adds the partials in split order (the result does not depend on which
 * CTA finishes last) and runs the epilogue: alpha, amax, C. The amax goes through a
 * workspace slot that the last tile to finish writes to *amax (mxf_amax_cta_commit_last),
 * so a run is two launches: the kernel and, before it, the counters' memset (bf16 A) or
 * the activations' pre-pass, which zeroes them.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "core/internal.h"
#include "cuda/amax.cuh"
#include "cuda/c_store.cuh"
#include "cuda/cuda_util.h"
#include "cuda/portable/portable_ops.h"

namespace {

constexpr int WARPS = 4, THREADS = 32 * WARPS;
constexpr int BN = 16 * WARPS; /* rows of B per CTA */
constexpr int CHUNK = 64;      /* k per chunk */

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
  int accumulate;
  float *part;         /* split partials: [l][tile][split][BN][8 MT] */
  unsigned *counters;  /* [l][tile], then the amax slot and ticket (zeroed before the kernel) */
  int tiles, splits, chunks_per_split, nchunks;
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

/* The 16 codes of a thread's row chunk: fp4 in w.x, w.y; fp8 in w.x .. w.w. */
struct row_codes {
  uint4 w;
  uint32_t s; /* scale byte */
};

/* Pair p (0..7) of a row chunk as bf16x2 without the scale: fp4 pairs (k, k+4) of word
 * p / 4, fp8 pairs (k, k+2) of word p / 2. */
template <int WF> __device__ __forceinline__ uint32_t code_pair(const uint4 &w, int p) {
  if (WF == W_E2M1) {
    const uint32_t x = (p < 4 ? w.x : w.y) >> (4 * (p & 3));
    return ((x & 0x00070007u) << 6) | ((x & 0x00080008u) << 12);
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

template <int MT, int WF>
__device__ __forceinline__ void chunk_mma(float (&acc)[MT][4], const row_codes &r0, const row_codes &r1,
                                          const gemv_params &p, const uint16_t *a_base, int64_t k0, int g, int t) {
  /* the placed code is code * 2^-c, c = 126 (e2m1) / 120 (e4m3); the scale multiplier
   * 2^(b - 127 + c) fits bf16 while b + c <= 254: one product; above, the code is first
   * restored (times 2^c, exact) and then multiplied by the scale 2^(b - 127) (bf16 bits b
   * << 7; b = 0 is the subnormal 2^-127): two products, still one rounding */
  constexpr int C = WF == W_E2M1 ? 126 : 120;
  constexpr uint32_t UNPLACE = WF == W_E2M1 ? 0x7E807E80u : 0x7B807B80u; /* 2^c, 2^c */
  const uint32_t b0 = r0.s, b1 = r1.s;
  bool special = b0 == 255u || b1 == 255u; /* a NaN scale */
  if (WF == W_E4M3) {
    const uint32_t m0 = __vcmpeq4(r0.w.x & 0x7F7F7F7Fu, 0x7F7F7F7Fu) | __vcmpeq4(r0.w.y & 0x7F7F7F7Fu, 0x7F7F7F7Fu) |
                        __vcmpeq4(r0.w.z & 0x7F7F7F7Fu, 0x7F7F7F7Fu) | __vcmpeq4(r0.w.w & 0x7F7F7F7Fu, 0x7F7F7F7Fu);
    const uint32_t m1 = __vcmpeq4(r1.w.x & 0x7F7F7F7Fu, 0x7F7F7F7Fu) | __vcmpeq4(r1.w.y & 0x7F7F7F7Fu, 0x7F7F7F7Fu) |
                        __vcmpeq4(r1.w.z & 0x7F7F7F7Fu, 0x7F7F7F7Fu) | __vcmpeq4(r1.w.w & 0x7F7F7F7Fu, 0x7F7F7F7Fu);
    special = special || (m0 | m1) != 0u; /* a NaN code */
  }
  uint32_t wa[8], wb[8]; /* row g and row g + 8: 8 pairs each */
  if (__any_sync(0xFFFFFFFFu, special)) {
    const float sc0 = mxf_e8m0_to_f32((uint8_t)b0), sc1 = mxf_e8m0_to_f32((uint8_t)b1);
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      wa[q] = exact_pair<WF>(r0.w, q, sc0);
      wb[q] = exact_pair<WF>(r1.w, q, sc1);
    }
  } else if (!__any_sync(0xFFFFFFFFu, b0 + C > 254u || b1 + C > 254u)) {
    const uint32_t s0 = (b0 + C) << 7, s1 = (b1 + C) << 7;
    const uint32_t m0 = s0 | (s0 << 16), m1 = s1 | (s1 << 16);
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      wa[q] = bf16x2_mul(code_pair<WF>(r0.w, q), m0);
      wb[q] = bf16x2_mul(code_pair<WF>(r1.w, q), m1);
    }
  } else {
    const uint32_t s0 = b0 ? b0 << 7 : 0x40u, s1 = b1 ? b1 << 7 : 0x40u;
    const uint32_t m0 = s0 | (s0 << 16), m1 = s1 | (s1 << 16);
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      wa[q] = bf16x2_mul(bf16x2_mul(code_pair<WF>(r0.w, q), UNPLACE), m0);
      wb[q] = bf16x2_mul(bf16x2_mul(code_pair<WF>(r1.w, q), UNPLACE), m1);
    }
  }
#pragma unroll
  for (int j = 0; j < MT; ++j) {
    const int m = 8 * j + g;
    uint32_t u[8];
    if (m < p.m && k0 + 16 * t < p.k) {
      const uint4 *src = reinterpret_cast<const uint4 *>(a_base + (int64_t)m * p.a_ms + k0 + 16 * t);
      const uint4 x0 = __ldg(src), x1 = __ldg(src + 1);
      u[0] = x0.x, u[1] = x0.y, u[2] = x0.z, u[3] = x0.w, u[4] = x1.x, u[5] = x1.y, u[6] = x1.z, u[7] = x1.w;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) u[i] = 0u;
    }
#pragma unroll
    for (int s = 0; s < 4; ++s)
      mma_bf16(acc[j], wa[2 * s], wb[2 * s], wa[2 * s + 1], wb[2 * s + 1], act_pair<WF>(u, 2 * s),
               act_pair<WF>(u, 2 * s + 1));
  }
}

/* Codes and scale of row `row`, chunk at k0 (zeros past N and past K). */
template <int WF>
__device__ __forceinline__ void load_row(row_codes &r, const gemv_params &p, const uint8_t *b_base, int64_t row,
                                         int64_t k0, int t, int64_t l) {
  const int64_t kk = k0 + 16 * t; /* K is a multiple of 32: a thread's 16 k are all in or all out */
  if (row >= p.n || kk >= p.k) {
    r.w = make_uint4(0u, 0u, 0u, 0u);
    r.s = 127;
    return;
  }
  if (WF == W_E2M1) {
    const uint2 v = __ldg(reinterpret_cast<const uint2 *>(b_base + row * p.b_rs + kk / 2));
    r.w = make_uint4(v.x, v.y, 0u, 0u);
  } else {
    r.w = __ldg(reinterpret_cast<const uint4 *>(b_base + row * p.b_rs + kk));
  }
  r.s = __ldg(p.sfb + mxf_gemm_sf_offset(p.sfb_swz ? MXF_SF_SWIZZLED : MXF_SF_COMPACT, p.n, p.kb, row, kk / 32, l));
}

template <int MT, int WF> __global__ void __launch_bounds__(THREADS) gemv_kernel(const __grid_constant__ gemv_params p) {
  __shared__ uint32_t red[32];
  __shared__ unsigned last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int tile = blockIdx.x, split = blockIdx.y;
  const int64_t l = blockIdx.z;
  const int64_t row0 = (int64_t)tile * BN + 16 * warp + g, row1 = row0 + 8;
  const uint16_t *a_base = p.a + l * p.a_ls;
  const uint8_t *b_base = p.b + l * p.b_ls;
  float acc[MT][4];
#pragma unroll
  for (int j = 0; j < MT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

  const int c0 = split * p.chunks_per_split;
  const int c1 = min(p.nchunks, c0 + p.chunks_per_split);
  /* two chunks of codes in flight ahead of the one being multiplied */
  row_codes q0[3], q1[3];
#pragma unroll
  for (int i = 0; i < 2; ++i)
    if (c0 + i < c1) {
      load_row<WF>(q0[i], p, b_base, row0, (int64_t)(c0 + i) * CHUNK, t, l);
      load_row<WF>(q1[i], p, b_base, row1, (int64_t)(c0 + i) * CHUNK, t, l);
    }
  for (int c = c0; c < c1; c += 3) {
#pragma unroll
    for (int i = 0; i < 3; ++i) {
      const int cc = c + i;
      if (cc >= c1) break;
      const int nx = (i + 2) % 3;
      if (cc + 2 < c1) {
        load_row<WF>(q0[nx], p, b_base, row0, (int64_t)(cc + 2) * CHUNK, t, l);
        load_row<WF>(q1[nx], p, b_base, row1, (int64_t)(cc + 2) * CHUNK, t, l);
      }
      chunk_mma<MT, WF>(acc, q0[i], q1[i], p, a_base, (int64_t)cc * CHUNK, g, t);
    }
  }

  /* split-K: the partials in split order, by the tile's last CTA */
  const int64_t tid_tile = l * p.tiles + tile;
  if (p.splits > 1) {
    float *mine = p.part + (tid_tile * p.splits + split) * (int64_t)(BN * 8 * MT);
#pragma unroll
    for (int j = 0; j < MT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = 16 * warp + g + (e >> 1) * 8, m = 8 * j + 2 * t + (e & 1);
        mine[r * 8 * MT + m] = acc[j][e];
      }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&p.counters[tid_tile], 1u) == (unsigned)(p.splits - 1);
    __syncthreads();
    if (!last) return;
    __threadfence();
    const float *all = p.part + tid_tile * p.splits * (int64_t)(BN * 8 * MT);
#pragma unroll
    for (int j = 0; j < MT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = 16 * warp + g + (e >> 1) * 8, m = 8 * j + 2 * t + (e & 1);
        float s = 0.0f;
        for (int sp = 0; sp < p.splits; ++sp) s += __ldcg(all + sp * (int64_t)(BN * 8 * MT) + r * 8 * MT + m);
        acc[j][e] = s;
      }
  }

  /* epilogue: alpha once, amax before the conversion, C in its dtype */
  uint32_t amax_bits = 0;
  const int64_t cb = l * p.c_ls;
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t n = (e >> 1) ? row1 : row0;
      const int m = 8 * j + 2 * t + (e & 1);
      if (n >= p.n || m >= p.m) continue;
      const float x = acc[j][e] * p.alpha;
      amax_bits = mxf_amax_fold(amax_bits, x);
      mxf_c_store_one(p.c, p.c_dtype, cb + (int64_t)m * p.c_ms + n * p.c_ns, x);
    }
  const unsigned ctas = (unsigned)(p.tiles * p.l); /* the tiles' finishing CTAs */
  mxf_amax_cta_commit_last(amax_bits, p.counters + ctas, p.counters + ctas + 1, ctas, p.amax, p.accumulate, red);
}

/* A MX A dequantized to bf16 (M, K) rows in the workspace, exactly inside the window. */
struct a_prep {
  const uint8_t *a, *sfa;
  int fmt; /* MXF_E4M3, MXF_E5M2, MXF_E2M1 */
  int sfa_swz;
  int64_t m, k, kb, a_ms, a_ks, a_ls;
  uint16_t *out;
  unsigned *ctrl; /* the gemv kernel's counters, amax slot and ticket: zeroed here */
  int nctrl;
};

__global__ void a_to_bf16_kernel(const __grid_constant__ a_prep q, int64_t total) {
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i < q.nctrl; i += blockDim.x) q.ctrl[i] = 0u;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t k = i % q.k, m = (i / q.k) % q.m, l = i / (q.k * q.m);
    const int64_t idx = l * q.a_ls + m * q.a_ms + k * q.a_ks;
    float v;
    if (q.fmt == MXF_E2M1) v = mxf_e2m1_to_f32(mxf_e2m1_get(q.a, idx));
    else if (q.fmt == MXF_E4M3) v = mxf_e4m3_to_f32(q.a[idx]);
    else v = mxf_e5m2_to_f32(q.a[idx]);
    const uint8_t s = q.sfa[mxf_gemm_sf_offset(q.sfa_swz ? MXF_SF_SWIZZLED : MXF_SF_COMPACT, q.m, q.kb, m, k / 32, l)];
    q.out[i] = mxf_f32_to_bf16(v * mxf_e8m0_to_f32(s));
  }
}

/* The run's geometry; the same function sizes the workspace and launches. */
struct gemv_geometry {
  int mt, tiles, splits, chunks_per_split, nchunks;
  size_t ws_a, ws_counters, ws_part;
  size_t total() const { return ws_a + ws_counters + ws_part; }
};

bool gemv_geometry_of(const mxf_gemm_problem *p, int sms, gemv_geometry *g) {
  if (p->m < 1 || p->m > 128 || p->n < 1 || p->k < 32 || p->k % 32 || p->sf_vec != 32) return false;
  if (p->b_fmt != MXF_E2M1 && p->b_fmt != MXF_E4M3) return false;
  if (p->sfb_fmt != MXF_E8M0 || p->a_ks != 1 || p->b_ks != 1 || p->c == MXF_E2M1) return false;
  if (p->a_fmt != MXF_BF16 && (p->sfa_fmt != MXF_E8M0)) return false;
  if (p->n >= (1 << 30) || p->l >= 65536) return false;
  g->mt = p->m <= 8 ? 1 : p->m <= 16 ? 2 : p->m <= 32 ? 4 : p->m <= 64 ? 8 : 16;
  g->tiles = (int)((p->n + BN - 1) / BN);
  g->nchunks = (int)((p->k + CHUNK - 1) / CHUNK);
  /* enough CTAs to keep the loads of B in flight on every SM (about 4 per SM), each with
   * at least 4 chunks, and partials that the finishing CTA reads back quickly (<= 16 KiB
   * per split and tile at most 32 splits) */
  const int64_t want = 4LL * (sms > 0 ? sms : 132);
  const int64_t ctas = (int64_t)g->tiles * p->l;
  int splits = ctas >= want ? 1 : (int)((want + ctas - 1) / ctas);
  const int max_by_k = g->nchunks / 4 > 1 ? g->nchunks / 4 : 1;
  const int part_kb = BN * 8 * g->mt * 4 / 1024; /* KiB of one partial */
  const int max_by_part = part_kb > 0 ? (16 * 32) / part_kb : 32;
  if (splits > max_by_k) splits = max_by_k;
  if (splits > max_by_part) splits = max_by_part;
  if (splits > 32) splits = 32;
  if (splits < 1) splits = 1;
  g->chunks_per_split = (g->nchunks + splits - 1) / splits;
  g->splits = (g->nchunks + g->chunks_per_split - 1) / g->chunks_per_split;
  g->ws_a = p->a_fmt == MXF_BF16 ? 0 : (size_t)mxf_round_up(p->l * p->m * p->k * 2, 256);
  g->ws_counters = (size_t)mxf_round_up(((int64_t)g->tiles * p->l + 2) * 4, 256); /* + amax slot, ticket */
  g->ws_part = g->splits > 1 ? (size_t)((int64_t)g->tiles * p->l * g->splits * BN * 8 * g->mt * 4) : 0;
  return true;
}

template <int MT>
cudaError_t launch_mt(dim3 grid, const gemv_params &p, int wf, cudaStream_t stream) {
  if (wf == W_E2M1)
    gemv_kernel<MT, W_E2M1><<<grid, THREADS, 0, stream>>>(p);
  else
    gemv_kernel<MT, W_E4M3><<<grid, THREADS, 0, stream>>>(p);
  return cudaGetLastError();
}

} /* namespace */

/* Whether the kernel takes p on a GPU of `sms` SMs, and the workspace it needs. */
extern "C" int mxf_gemv_gemm_amax_plan(const mxf_gemm_problem *p, int sms, size_t *ws) {
  gemv_geometry g;
  if (!gemv_geometry_of(p, sms, &g)) return 0;
  *ws = g.total();
  return 1;
}

extern "C" mxf_status mxf_gemv_gemm_amax_launch(const mxf_gemm_problem *pr, const mxf_gemm_amax_args *args, void *ws,
                                                cudaStream_t stream, int sms) {
  gemv_geometry g;
  if (!gemv_geometry_of(pr, sms, &g))
    return mxf_set_error(MXF_ERR_INTERNAL, "cuda backend: gemm_amax: the gemv kernel no longer takes the plan");
  uint8_t *w = static_cast<uint8_t *>(ws);
  gemv_params p;
  p.m = (int)pr->m, p.n = (int)pr->n, p.l = (int)pr->l, p.k = pr->k;
  p.counters = reinterpret_cast<unsigned *>(w + g.ws_a);
  p.part = reinterpret_cast<float *>(w + g.ws_a + g.ws_counters);
  /* one launch before the kernel: the activations' pre-pass, which zeroes the counters,
   * or (bf16 A) a memset of them */
  if (pr->a_fmt == MXF_BF16) {
    p.a = static_cast<const uint16_t *>(args->a);
    p.a_ms = pr->a_ms, p.a_ls = pr->a_ls;
    MXF_CUDA_TRY(cudaMemsetAsync(p.counters, 0, g.ws_counters, stream), "gemm_amax: gemv counters");
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
  p.accumulate = (pr->flags & MXF_AMAX_ACCUMULATE) != 0;
  p.tiles = g.tiles, p.splits = g.splits, p.chunks_per_split = g.chunks_per_split, p.nchunks = g.nchunks;
  const dim3 grid((unsigned)g.tiles, (unsigned)g.splits, (unsigned)pr->l);
  cudaError_t e;
  switch (g.mt) {
  case 1: e = launch_mt<1>(grid, p, p.wfmt, stream); break;
  case 2: e = launch_mt<2>(grid, p, p.wfmt, stream); break;
  case 4: e = launch_mt<4>(grid, p, p.wfmt, stream); break;
  case 8: e = launch_mt<8>(grid, p, p.wfmt, stream); break;
  default: e = launch_mt<16>(grid, p, p.wfmt, stream); break;
  }
  MXF_CUDA_TRY(e, "gemm_amax: gemv kernel launch failed");
  return MXF_OK;
}
