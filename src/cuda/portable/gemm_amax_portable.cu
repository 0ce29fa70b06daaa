/*
 * gemm_amax_portable.cu — block-scaled GEMM + amax for any sm_80+ GPU (SPEC §1).
 *
 * Runs every problem an mxf_gemm_problem can hold: A bf16 / e4m3 / e5m2 / e2m1 and B
 * e4m3 / e5m2 / e2m1 in any pair (one kernel instance per pair), e8m0 or ue4m3 scales
 * (each operand its own), sf_vec 16 or 32, compact or swizzled SF, k- or m-major A, k- or n-major B,
 * n- or m-major C of any dtype, any leading dims and batch strides, alpha, amax modes.
 *
 * Method: each 128x32 slab of A and of B is dequantized EXACTLY to bf16 in shared memory
 * (code * scale has at most 4 + 4 significant bits, so bf16's 8 bits hold it; a bf16 A
 * is copied as it is) and fed to
 * the tensor cores with mma.sync m16n8k16 bf16 -> f32. alpha is applied once after the
 * K loop, amax is taken on alpha*acc before the conversion to C's dtype.
 *
 * Exactness window (SPEC §1.2): dequantized values are exact as long as they are bf16
 * normal, i.e. for every e8m0 scale byte in [16, 232] (and every ue4m3 scale). Outside
 * it, a product code*scale below 2^-126 is rounded to bf16's subnormal grid (steps of
 * 2^-133, round to nearest even; below 2^-134 it flushes to 0), and a product beyond
 * f32's range (e8m0 bytes near 254) is inf; the tensor cores may additionally flush f32
 * subnormal partial sums. NaN / inf codes and 0xFF scales propagate exactly (bf16 holds
 * NaN and inf, and 0 * NaN-scale is NaN).
 *
 * CTA tile 128 (M) x 128 (N) x 32 (K), 256 threads = 8 warps as 2 (M) x 4 (N), each warp
 * 64 x 32 = 4 x 4 mma tiles. Two shared stages of bf16 [128][40] for A and B (row pad of
 * 8 keeps ldmatrix conflict-free). Register-staged pipeline: the raw codes + scale bytes
 * of slab k+1 are loaded from global memory into registers while the tensor cores work
 * on slab k, then dequantized into the other stage; one __syncthreads per slab.
 *
 * Global loads, per thread and slab: one 16-value chunk of A and one of B.
 *   K-major operand:  row = tid/2, 16 consecutive k  (16 B for fp8, 8 B for fp4, 32 B for
 *                     bf16), 1 scale (none for bf16)
 *   MN-major operand: k = tid/8,  16 consecutive rows (16 B; 32 B for bf16), 16 scales
 * as one vector load when the operand is aligned and the chunk lies inside the matrix;
 * otherwise (tails, odd strides/offsets) element by element with bounds checks: values
 * outside M/N/K contribute 0 and their scale bytes (SF padding) are never read. Except on
 * sm_90a, only the k-major vector chunk is dequantized inline; mn-major and element-by-
 * element chunks go through a non-inlined function (register pressure, see there).
 *
 * Epilogue: each thread holds 64 f32 of C; stores go straight to global memory (pairs of
 * consecutive n packed into one store when C is n-major and aligned), encoded with
 * formats.h. amax: per-thread max -> CTA reduce -> one atomicMax (amax.cuh).
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

constexpr int BM = 128, BN = 128, BK = 32;
constexpr int THREADS = 256;
constexpr int LDS = BK + 8; /* bf16 per shared row */
constexpr int GROUP_M = 8;  /* tile raster: groups of 8 M-tiles sweep N together (L2 reuse) */

/* FMT_ANY: the instance for mixed pairs and bf16 A, which picks each operand's format at
 * run time (operand::fmt); the one-format pairs have their own instances. */
enum { FMT_E4M3 = 0, FMT_E5M2 = 1, FMT_E2M1 = 2, FMT_BF16 = 3 /* A only: no scales */, FMT_ANY = 4 };

struct operand {
  const uint8_t *p;  /* codes (bf16: values) */
  const uint8_t *sf; /* scale bytes (null for bf16) */
  int64_t s_mn, s_k, s_l; /* strides in values */
  int64_t mn;             /* rows (M for A, N for B) */
  int kmajor;             /* s_k == 1 */
  int vec_ok;             /* base and strides allow the vector chunk load */
  int sf_swz;             /* swizzled SF layout */
  int sf_e4m3;            /* ue4m3 scales (else e8m0) */
  int fmt;                /* FMT_*: read by the FMT_ANY instance */
};

struct params {
  operand a, b;
  uint8_t *c;
  float *amax;
  int64_t m, n, k, l, kb;
  int64_t c_ms, c_ns, c_ls;
  int c_dtype;
  int c_pair_ok; /* n-major C, base and strides even-aligned for paired stores */
  int sf_shift; /* log2(sf_vec): 4 or 5 */
  float alpha;
  int tiles_m, tiles_n;
};

/* ---------------------------------------------------------------- decoding */
/* Exact decode of one code, any value (NaN/inf included). */
template <int FMT> __device__ __forceinline__ float decode_exact(uint32_t code) {
  if (FMT == FMT_BF16) return mxf_bf16_to_f32((uint16_t)code);
  if (FMT == FMT_E4M3) return mxf_e4m3_to_f32((uint8_t)code);
  if (FMT == FMT_E5M2) return mxf_e5m2_to_f32((uint8_t)code);
  return mxf_e2m1_to_f32((uint8_t)code);
}

/* Fast decode of a FINITE code: its bits placed into an f32 so that the f32 value is
 * code * 2^-SHIFT exactly (normals and subnormals alike: the format's exponent field
 * lands in f32's, its subnormals in f32's subnormals). SHIFT = 127 - format bias. */
template <int FMT> struct fast_fmt;
template <> struct fast_fmt<FMT_E4M3> {
  static constexpr float P = 1329227995784915872903807060280344576.0f; /* 2^120 */
  __device__ static __forceinline__ float bits(uint32_t c) {
    return __uint_as_float(((c & 0x80u) << 24) | ((c & 0x7Fu) << 20));
  }
  /* any NaN code (s.1111.111) among 4 bytes? */
  __device__ static __forceinline__ bool special4(uint32_t w) {
    return __vcmpeq4(w & 0x7F7F7F7Fu, 0x7F7F7F7Fu) != 0u;
  }
};
template <> struct fast_fmt<FMT_E5M2> {
  static constexpr float P = 5192296858534827628530496329220096.0f; /* 2^112 */
  __device__ static __forceinline__ float bits(uint32_t c) {
    return __uint_as_float(((c & 0x80u) << 24) | ((c & 0x7Fu) << 21));
  }
  /* any inf/NaN code (s.11111.xx)? */
  __device__ static __forceinline__ bool special4(uint32_t w) {
    return __vcmpgeu4(w & 0x7F7F7F7Fu, 0x7C7C7C7Cu) != 0u;
  }
};
template <> struct fast_fmt<FMT_E2M1> {
  static constexpr float P = 85070591730234615865843651857942052864.0f; /* 2^126 */
  __device__ static __forceinline__ float bits(uint32_t c) {
    return __uint_as_float(((c & 0x8u) << 28) | ((c & 0x7u) << 22));
  }
  __device__ static __forceinline__ bool special4(uint32_t) { return false; }
};

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi); /* RNE; NaN stays NaN */
  return *reinterpret_cast<uint32_t *>(&h);
}

/* ---------------------------------------------------------------- chunk staging */
/* What one thread carries from the global loads of slab k+1 to its dequantization. */
struct stage_regs {
  uint4 raw;  /* 16 codes (fp8) or 16 nibbles in raw.x/raw.y (fp4); bf16: values 0-7 */
  uint4 sc;   /* k-major: sc.x = scale byte; mn-major: 16 scale bytes; bf16: values 8-15 */
  int mode;   /* 0 = k-major vector, 1 = mn-major vector, 2 = element by element */
};

__device__ __forceinline__ int64_t sf_off(const operand &o, const params &p, int64_t row, int64_t kb,
                                          int64_t l) {
  return mxf_gemm_sf_offset(o.sf_swz ? MXF_SF_SWIZZLED : MXF_SF_COMPACT, o.mn, p.kb, row, kb, l);
}

/* Chunk coordinates of this thread: (r0, k0) and the direction of its 16 values. */
template <int FMT>
__device__ __forceinline__ void stage_load(stage_regs &s, const operand &o, const params &p, int64_t mn0,
                                           int64_t kt0, int64_t l, int tid) {
  if (o.kmajor) {
    const int64_t r = mn0 + (tid >> 1), k = kt0 + (tid & 1) * 16;
    s.mode = 2;
    if (o.vec_ok && r < o.mn && k + 16 <= p.k) {
      const int64_t v = l * o.s_l + r * o.s_mn + k; /* value index */
      if (FMT == FMT_BF16) {
        const uint4 *q = reinterpret_cast<const uint4 *>(reinterpret_cast<const uint16_t *>(o.p) + v);
        s.raw = __ldg(q);
        s.sc = __ldg(q + 1);
        s.mode = 0;
        return;
      }
      if (FMT == FMT_E2M1) {
        uint2 w = __ldg(reinterpret_cast<const uint2 *>(o.p + (v >> 1)));
        s.raw = make_uint4(w.x, w.y, 0u, 0u);
      } else {
        s.raw = __ldg(reinterpret_cast<const uint4 *>(o.p + v));
      }
      s.sc.x = __ldg(o.sf + sf_off(o, p, r, (k >> p.sf_shift), l));
      s.mode = 0;
    }
  } else {
    const int64_t r = mn0 + (tid & 7) * 16, k = kt0 + (tid >> 3);
    s.mode = 2;
    if (o.vec_ok && r + 16 <= o.mn && k < p.k) {
      if (FMT == FMT_BF16) {
        const uint4 *q = reinterpret_cast<const uint4 *>(reinterpret_cast<const uint16_t *>(o.p) + l * o.s_l +
                                                         k * o.s_k + r);
        s.raw = __ldg(q);
        s.sc = __ldg(q + 1);
        s.mode = 1;
        return;
      }
      s.raw = __ldg(reinterpret_cast<const uint4 *>(o.p + l * o.s_l + k * o.s_k + r));
      const int64_t kb = (k >> p.sf_shift);
      uint32_t w[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint32_t b0 = __ldg(o.sf + sf_off(o, p, r + 4 * q + 0, kb, l));
        uint32_t b1 = __ldg(o.sf + sf_off(o, p, r + 4 * q + 1, kb, l));
        uint32_t b2 = __ldg(o.sf + sf_off(o, p, r + 4 * q + 2, kb, l));
        uint32_t b3 = __ldg(o.sf + sf_off(o, p, r + 4 * q + 3, kb, l));
        w[q] = b0 | (b1 << 8) | (b2 << 16) | (b3 << 24);
      }
      s.sc = make_uint4(w[0], w[1], w[2], w[3]);
      s.mode = 1;
    }
  }
}

template <int FMT> __device__ __forceinline__ uint32_t code_at(const uint4 &raw, int i) {
  if (FMT == FMT_BF16) { /* values 0-7 of a chunk: (raw.x .. raw.w), two per word */
    const uint32_t w2 = (i & 7) < 4 ? ((i & 7) < 2 ? raw.x : raw.y) : ((i & 7) < 6 ? raw.z : raw.w);
    return (w2 >> ((i & 1) * 16)) & 0xFFFFu;
  }
  const uint32_t w = i < 8 ? (i < 4 ? raw.x : raw.y) : (i < 12 ? raw.z : raw.w);
  if (FMT == FMT_E2M1) {
    const uint32_t w4 = i < 8 ? raw.x : raw.y;
    return (w4 >> ((i & 7) * 4)) & 0xFu;
  }
  return (w >> ((i & 3) * 8)) & 0xFFu;
}

/* The chunks the vector loads do not cover (mn-major chunks, tails, odd layouts). With
 * 64 accumulators the kernel sits at its 128-register cap, and ptxas's allocation there
 * differs by target (ptxas -v, CUDA 13.0): sm_90a fits with the slow chunks decoded
 * inline (MXF_SLOW_INLINE, the code the H200 measurements were taken with), sm_80 and
 * sm_100a spill (48 / ~1200 bytes) unless they are decoded out of line, where their
 * index arithmetic is neither hoisted into nor interleaved with the main loop. The call
 * costs nothing on the k-major fast path, which never takes it. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
#define MXF_SLOW_INLINE 1
#else
#define MXF_SLOW_INLINE 0
#endif
/* fp4 on sm_8x still spills a few bytes at 2 CTAs/SM (out of line or not): one CTA per SM
 * there (no fp4 tensor cores before sm_100; this kernel is its only fp4 path) */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define MXF_FP4_MIN_CTAS 1
#else
#define MXF_FP4_MIN_CTAS 2
#endif

/* A mode-0 chunk (16 k-major codes under one scale) decoded to f32: NaN/inf codes exactly,
 * else by bit placement and one multiply (two where 2^SHIFT * scale leaves f32's range). */
/* Value i of a staged bf16 chunk (either vector mode). */
__device__ __forceinline__ float bf16_chunk_value(const stage_regs &s, int i) {
  return mxf_bf16_to_f32((uint16_t)code_at<FMT_BF16>(i < 8 ? s.raw : s.sc, i));
}

/* Value (r, k) of an operand, 0 outside the matrix: the element-by-element path. */
template <int FMT>
__device__ __forceinline__ float element_value(const operand &o, const params &p, int64_t r, int64_t k, int64_t l) {
  if (r >= o.mn || k >= p.k) return 0.0f;
  const int64_t idx = l * o.s_l + r * o.s_mn + k * o.s_k;
  if constexpr (FMT == FMT_BF16) {
    return mxf_bf16_to_f32(reinterpret_cast<const uint16_t *>(o.p)[idx]);
  } else {
    const uint32_t code = FMT == FMT_E2M1 ? mxf_e2m1_get(o.p, idx) : o.p[idx];
    const uint8_t sb = o.sf[sf_off(o, p, r, (k >> p.sf_shift), l)];
    return decode_exact<FMT>(code) * mxf_scale_to_f32(sb, o.sf_e4m3);
  }
}

/* A mode-1 chunk (16 mn-major values of one k, each row its own scale) decoded to f32. */
template <int FMT> __device__ __forceinline__ float mode1_value(const stage_regs &s, const operand &o, int i) {
  if constexpr (FMT == FMT_BF16) {
    return bf16_chunk_value(s, i);
  } else {
    const uint32_t sb = code_at<FMT_E4M3>(s.sc, i);
    return decode_exact<FMT>(code_at<FMT>(s.raw, i)) * mxf_scale_to_f32((uint8_t)sb, o.sf_e4m3);
  }
}

template <int FMT> __device__ __forceinline__ void mode0_values(const stage_regs &s, const operand &o, float (&v)[16]) {
  if constexpr (FMT == FMT_BF16) {
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = bf16_chunk_value(s, i);
    return;
  }
  typedef fast_fmt<FMT == FMT_BF16 ? FMT_E4M3 : FMT> F;
  const float sf = mxf_scale_to_f32((uint8_t)s.sc.x, o.sf_e4m3);
  bool special = F::special4(s.raw.x) || F::special4(s.raw.y);
  if (FMT != FMT_E2M1) special = special || F::special4(s.raw.z) || F::special4(s.raw.w);
  if (special) {
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = decode_exact<FMT>(code_at<FMT>(s.raw, i)) * sf;
  } else {
    const float f = sf * F::P; /* one multiply unless 2^SHIFT * scale leaves f32's range */
    if ((__float_as_uint(f) & 0x7FFFFFFFu) != 0x7F800000u) { /* ±inf: ue4m3 scales carry a sign */
#pragma unroll
      for (int i = 0; i < 16; ++i) v[i] = F::bits(code_at<FMT>(s.raw, i)) * f;
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) v[i] = (F::bits(code_at<FMT>(s.raw, i)) * F::P) * sf;
    }
  }
}
/* 16 consecutive k of tile row tid / 2 as bf16, two 16-byte stores. */
__device__ __forceinline__ void store_kmajor(const float (&v)[16], uint16_t (*t)[LDS], int tid) {
  uint32_t *dst = reinterpret_cast<uint32_t *>(&t[tid >> 1][(tid & 1) * 16]);
  uint4 w0 = make_uint4(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]), pack_bf16(v[4], v[5]),
                        pack_bf16(v[6], v[7]));
  uint4 w1 = make_uint4(pack_bf16(v[8], v[9]), pack_bf16(v[10], v[11]), pack_bf16(v[12], v[13]),
                        pack_bf16(v[14], v[15]));
  reinterpret_cast<uint4 *>(dst)[0] = w0;
  reinterpret_cast<uint4 *>(dst)[1] = w1;
}

#if !MXF_SLOW_INLINE
template <int FMT>
__device__ __noinline__ void stage_store_slow(const stage_regs &s, uint16_t (*t)[LDS], const operand &o,
                                              const params &p, int64_t mn0, int64_t kt0, int64_t l, int tid) {
  if (s.mode == 1) {
    /* mn-major chunk: 16 rows of one k; each value goes to its own row of the tile */
    const int rr = (tid & 7) * 16, kk = tid >> 3;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const float x = mode1_value<FMT>(s, o, i);
      t[rr + i][kk] = (uint16_t)(pack_bf16(x, 0.0f) & 0xFFFFu);
    }
  } else {
#pragma unroll 1
    for (int i = 0; i < 16; ++i) {
      int tr, tk; /* position in the shared tile */
      if (o.kmajor) {
        tr = tid >> 1;
        tk = (tid & 1) * 16 + i;
      } else {
        tr = (tid & 7) * 16 + i;
        tk = tid >> 3;
      }
      const float x = element_value<FMT>(o, p, mn0 + tr, kt0 + tk, l);
      t[tr][tk] = (uint16_t)(pack_bf16(x, 0.0f) & 0xFFFFu);
    }
  }
}
#endif

/* Dequantizes the staged chunk into shared memory tile `t` ([128][LDS] bf16). */
template <int FMT>
__device__ __forceinline__ void stage_store(const stage_regs &s, uint16_t (*t)[LDS], const operand &o,
                                            const params &p, int64_t mn0, int64_t kt0, int64_t l, int tid) {
#if MXF_SLOW_INLINE
  float v[16];
  if (s.mode == 0) {
    mode0_values<FMT>(s, o, v);
  } else if (s.mode == 1) {
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = mode1_value<FMT>(s, o, i);
  } else {
    /* element by element: tails and layouts the vector path does not cover */
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      int64_t r, k;
      if (o.kmajor) {
        r = mn0 + (tid >> 1);
        k = kt0 + (tid & 1) * 16 + i;
      } else {
        r = mn0 + (tid & 7) * 16 + i;
        k = kt0 + (tid >> 3);
      }
      v[i] = element_value<FMT>(o, p, r, k, l);
    }
  }
  if (o.kmajor) {
    store_kmajor(v, t, tid);
  } else {
    const int rr = (tid & 7) * 16, kk = tid >> 3;
#pragma unroll
    for (int i = 0; i < 16; i += 2) {
      const uint32_t w = pack_bf16(v[i], v[i + 1]);
      t[rr + i][kk] = (uint16_t)(w & 0xFFFFu);
      t[rr + i + 1][kk] = (uint16_t)(w >> 16);
    }
  }
#else
  if (s.mode != 0) {
    stage_store_slow<FMT>(s, t, o, p, mn0, kt0, l, tid);
    return;
  }
  float v[16];
  mode0_values<FMT>(s, o, v);
  store_kmajor(v, t, tid); /* mode 0 is k-major: the chunk is 16 consecutive k of one tile row */
#endif
}

/* ---------------------------------------------------------------- tensor-core helpers */
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void *smem) {
  const uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
               "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* ---------------------------------------------------------------- the kernel */
/* Two CTAs per SM (registers capped at 128) measured 1.6x faster on an H200 than one CTA
 * with 180 registers: the second CTA hides the global-load latency that the single
 * register stage leaves exposed. 128 registers hold the 64 accumulators, both register
 * stages and the fragments without spilling (ptxas -v, CUDA 13.0: sm_80, sm_90a, sm_100a;
 * fp4 on sm_80 at one CTA, MXF_FP4_MIN_CTAS) given stage_store's per-target choice above;
 * __grid_constant__ keeps the parameters in the constant bank when &p goes to the
 * out-of-line function (no local copy). */
/* The chunk of one operand, in its format: the instance's, or the operand's own. */
template <int FMT>
__device__ __forceinline__ void load_chunk(stage_regs &s, const operand &o, const params &p, int64_t mn0, int64_t kt0,
                                           int64_t l, int tid) {
  if constexpr (FMT == FMT_ANY) {
    switch (o.fmt) {
    case FMT_E4M3: stage_load<FMT_E4M3>(s, o, p, mn0, kt0, l, tid); break;
    case FMT_E5M2: stage_load<FMT_E5M2>(s, o, p, mn0, kt0, l, tid); break;
    case FMT_E2M1: stage_load<FMT_E2M1>(s, o, p, mn0, kt0, l, tid); break;
    default: stage_load<FMT_BF16>(s, o, p, mn0, kt0, l, tid); break;
    }
  } else {
    stage_load<FMT>(s, o, p, mn0, kt0, l, tid);
  }
}
/* FMT_ANY's dequantization, out of line: four inlined formats per operand made the
 * instance spill and compile slowly; the call costs little beside the decode itself. */
template <int FMT>
__device__ __noinline__ void stage_store_call(const stage_regs &s, uint16_t (*t)[LDS], const operand &o,
                                              const params &p, int64_t mn0, int64_t kt0, int64_t l, int tid) {
  stage_store<FMT>(s, t, o, p, mn0, kt0, l, tid);
}
template <int FMT>
__device__ __forceinline__ void store_chunk(const stage_regs &s, uint16_t (*t)[LDS], const operand &o, const params &p,
                                            int64_t mn0, int64_t kt0, int64_t l, int tid) {
  if constexpr (FMT == FMT_ANY) {
    switch (o.fmt) {
    case FMT_E4M3: stage_store_call<FMT_E4M3>(s, t, o, p, mn0, kt0, l, tid); break;
    case FMT_E5M2: stage_store_call<FMT_E5M2>(s, t, o, p, mn0, kt0, l, tid); break;
    case FMT_E2M1: stage_store_call<FMT_E2M1>(s, t, o, p, mn0, kt0, l, tid); break;
    default: stage_store_call<FMT_BF16>(s, t, o, p, mn0, kt0, l, tid); break;
    }
  } else {
    stage_store<FMT>(s, t, o, p, mn0, kt0, l, tid);
  }
}

template <int FMT>
__global__ void __launch_bounds__(THREADS, FMT == FMT_E2M1 || FMT == FMT_ANY ? MXF_FP4_MIN_CTAS : 2)
    gemm_amax_portable_kernel(const __grid_constant__ params p) {
  __shared__ __align__(16) uint16_t sa[2][BM][LDS];
  __shared__ __align__(16) uint16_t sb[2][BN][LDS];
  __shared__ uint32_t red[32];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3; /* 2 x 4 warps */
  const int g = lane >> 2, t4 = lane & 3;

  /* raster: GROUP_M M-tiles walk N together so their B slabs stay in L2 */
  const int id = blockIdx.x;
  const int per_group = GROUP_M * p.tiles_n;
  const int first_m = (id / per_group) * GROUP_M;
  const int gsize = min(p.tiles_m - first_m, GROUP_M);
  const int tm = first_m + (id % per_group) % gsize;
  const int tn = (id % per_group) / gsize;
  const int64_t m0 = (int64_t)tm * BM, n0 = (int64_t)tn * BN;
  const int nk = (int)((p.k + BK - 1) / BK);

  uint32_t amax_bits = 0;

  for (int64_t l = blockIdx.y; l < p.l; l += gridDim.y) {
    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    stage_regs ra, rb;
    if (nk > 0) {
      load_chunk<FMT>(ra, p.a, p, m0, 0, l, tid);
      load_chunk<FMT>(rb, p.b, p, n0, 0, l, tid);
      store_chunk<FMT>(ra, sa[0], p.a, p, m0, 0, l, tid);
      store_chunk<FMT>(rb, sb[0], p.b, p, n0, 0, l, tid);
    }
    __syncthreads();

    for (int kt = 0; kt < nk; ++kt) {
      const int cur = kt & 1;
      const bool more = kt + 1 < nk;
      const int64_t kn = (int64_t)(kt + 1) * BK;
      if (more) {
        load_chunk<FMT>(ra, p.a, p, m0, kn, l, tid);
        load_chunk<FMT>(rb, p.b, p, n0, kn, l, tid);
        asm volatile("" ::: "memory"); /* issue those loads before the tensor-core work */
      }
#pragma unroll
      for (int ks = 0; ks < BK / 16; ++ks) {
        uint32_t bf[4][2];
#pragma unroll
        for (int nj = 0; nj < 2; ++nj) {
          uint32_t r[4];
          ldmatrix_x4(r, &sb[cur][wn * 32 + nj * 16 + (lane & 7) + ((lane >> 4) << 3)]
                                [ks * 16 + ((lane >> 3) & 1) * 8]);
          bf[2 * nj][0] = r[0];
          bf[2 * nj][1] = r[1];
          bf[2 * nj + 1][0] = r[2];
          bf[2 * nj + 1][1] = r[3];
        }
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
          uint32_t af[4]; /* one A fragment at a time: fewer live registers */
          ldmatrix_x4(af, &sa[cur][wm * 64 + mi * 16 + (lane & 15)][ks * 16 + (lane >> 4) * 8]);
#pragma unroll
          for (int ni = 0; ni < 4; ++ni) mma_bf16(acc[mi][ni], af, bf[ni][0], bf[ni][1]);
        }
      }
      if (more) {
        store_chunk<FMT>(ra, sa[cur ^ 1], p.a, p, m0, kn, l, tid);
        store_chunk<FMT>(rb, sb[cur ^ 1], p.b, p, n0, kn, l, tid);
      }
      __syncthreads();
    }

    /* epilogue: alpha once, amax before the conversion, then encode and store */
    const int64_t cbase = l * p.c_ls;
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int64_t m = m0 + wm * 64 + mi * 16 + g + hr * 8;
        if (m >= p.m) continue;
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
          const int64_t n = n0 + wn * 32 + ni * 8 + 2 * t4;
          if (n >= p.n) continue;
          const float x0 = acc[mi][ni][hr * 2 + 0] * p.alpha;
          const float x1 = acc[mi][ni][hr * 2 + 1] * p.alpha;
          const bool two = n + 1 < p.n;
          amax_bits = mxf_amax_fold(amax_bits, x0);
          if (two) amax_bits = mxf_amax_fold(amax_bits, x1);
          const int64_t idx = cbase + m * p.c_ms + n * p.c_ns;
          if (two && p.c_pair_ok) {
            mxf_c_store_pair(p.c, p.c_dtype, idx, x0, x1);
          } else {
            mxf_c_store_one(p.c, p.c_dtype, idx, x0);
            if (two) mxf_c_store_one(p.c, p.c_dtype, idx + p.c_ns, x1);
          }
        }
      }
    }
  }
  mxf_amax_cta_commit(amax_bits, p.amax, red);
}

int64_t dtype_bytes_x2(mxf_dtype d) { /* bytes per value, times 2 (e2m1 = 1) */
  switch (d) {
  case MXF_F32: return 8;
  case MXF_F16:
  case MXF_BF16: return 4;
  case MXF_E2M1: return 1;
  default: return 2;
  }
}

/* Whether the vector chunk load of an operand is safe: the chunk is 16 B (fp8) or 8 B
 * (fp4) long and starts at a multiple of its length inside a row/column, so the base
 * and every stride (in bytes) must be multiples of it. */
int vec_ok(const void *ptr, int64_t s_mn, int64_t s_k, int64_t s_l, int kmajor, mxf_dtype ab) {
  const int64_t bx2 = dtype_bytes_x2(ab), align = ab == MXF_E2M1 ? 8 : 16;
  if (ab == MXF_E2M1 && !kmajor) return 0;
  if (!kmajor && s_mn != 1) return 0; /* degenerate 1-row/1-column views */
  const int64_t other = kmajor ? s_mn : s_k;
  if (((uintptr_t)ptr % (uintptr_t)align) != 0) return 0;
  if ((other * bx2) % (2 * align) != 0 || (s_l * bx2) % (2 * align) != 0) return 0;
  return 1;
}

int fmt_of(mxf_dtype d) {
  switch (d) {
  case MXF_E4M3: return FMT_E4M3;
  case MXF_E5M2: return FMT_E5M2;
  case MXF_E2M1: return FMT_E2M1;
  case MXF_BF16: return FMT_BF16;
  default: return -1;
  }
}

} /* namespace */

/* Launches the portable kernel on `stream` (amax prepared here too). */
extern "C" mxf_status mxf_portable_gemm_amax_launch(const mxf_gemm_problem *pr, const mxf_gemm_amax_args *args,
                                                    cudaStream_t stream) {
  params p;
  p.a.p = static_cast<const uint8_t *>(args->a);
  p.a.sf = static_cast<const uint8_t *>(args->sfa);
  p.a.s_mn = pr->a_ms;
  p.a.s_k = pr->a_ks;
  p.a.s_l = pr->a_ls;
  p.a.mn = pr->m;
  p.a.kmajor = pr->a_ks == 1;
  p.a.vec_ok = vec_ok(args->a, pr->a_ms, pr->a_ks, pr->a_ls, p.a.kmajor, pr->a_fmt);
  p.a.sf_swz = pr->sfa_layout == MXF_SF_SWIZZLED;
  p.a.sf_e4m3 = pr->sfa_fmt == MXF_E4M3;
  p.b.p = static_cast<const uint8_t *>(args->b);
  p.b.sf = static_cast<const uint8_t *>(args->sfb);
  p.b.s_mn = pr->b_ns;
  p.b.s_k = pr->b_ks;
  p.b.s_l = pr->b_ls;
  p.b.mn = pr->n;
  p.b.kmajor = pr->b_ks == 1;
  p.b.vec_ok = vec_ok(args->b, pr->b_ns, pr->b_ks, pr->b_ls, p.b.kmajor, pr->b_fmt);
  p.b.sf_swz = pr->sfb_layout == MXF_SF_SWIZZLED;
  p.b.sf_e4m3 = pr->sfb_fmt == MXF_E4M3;
  p.c = static_cast<uint8_t *>(args->c);
  p.amax = args->amax;
  p.m = pr->m;
  p.n = pr->n;
  p.k = pr->k;
  p.l = pr->l;
  p.kb = pr->kb;
  p.c_ms = pr->c_ms;
  p.c_ns = pr->c_ns;
  p.c_ls = pr->c_ls;
  p.c_dtype = (int)pr->c;
  {
    const int64_t bx2 = dtype_bytes_x2(pr->c), pair = 2 * bx2; /* bytes of a pair, times 2 */
    p.c_pair_ok = pr->c_ns == 1 && ((uintptr_t)args->c % (uintptr_t)(pair / 2)) == 0 &&
                  (pr->c_ms * bx2) % pair == 0 && (pr->c_ls * bx2) % pair == 0;
  }
  p.sf_shift = pr->sf_vec == 16 ? 4 : 5;
  p.alpha = args->alpha ? *args->alpha : 1.0f;
  const int64_t tiles_m = (pr->m + BM - 1) / BM, tiles_n = (pr->n + BN - 1) / BN;
  if (tiles_m * tiles_n > 0x7FFFFFFF)
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cuda backend: gemm_amax of %lld x %lld is too large for one grid",
                         (long long)pr->m, (long long)pr->n);
  p.tiles_m = (int)tiles_m;
  p.tiles_n = (int)tiles_n;

  MXF_CUDA_TRY(mxf_amax_begin(args->amax, (pr->flags & MXF_AMAX_ACCUMULATE) != 0, stream),
               "gemm_amax: amax preparation failed");
  if (tiles_m == 0 || tiles_n == 0 || pr->l == 0) return MXF_OK;

  dim3 grid((unsigned)(tiles_m * tiles_n), (unsigned)(pr->l < 65535 ? pr->l : 65535));
  const int fa = fmt_of(pr->a_fmt), fb = fmt_of(pr->b_fmt);
  if (fa < 0 || fb < 0 || fb == FMT_BF16)
    return mxf_set_error(MXF_ERR_INTERNAL, "cuda backend: gemm_amax: unexpected A/B formats %d, %d", (int)pr->a_fmt,
                         (int)pr->b_fmt);
  p.a.fmt = fa;
  p.b.fmt = fb;
  switch (fa == fb ? fa : FMT_ANY) {
  case FMT_E4M3: gemm_amax_portable_kernel<FMT_E4M3><<<grid, THREADS, 0, stream>>>(p); break;
  case FMT_E5M2: gemm_amax_portable_kernel<FMT_E5M2><<<grid, THREADS, 0, stream>>>(p); break;
  case FMT_E2M1: gemm_amax_portable_kernel<FMT_E2M1><<<grid, THREADS, 0, stream>>>(p); break;
  default: gemm_amax_portable_kernel<FMT_ANY><<<grid, THREADS, 0, stream>>>(p); break;
  }
  MXF_CUDA_CHECK_LAUNCH("gemm_amax: portable kernel launch failed");
  return MXF_OK;
}
