/*
 * proj_rope_portable.cu — projection GEMM + RoPE + dual MXFP8 (SPEC §2) for any sm_80+ GPU
 * and every geometry SPEC §2.1 allows (any T >= 1, D % 32 == 0, even rope <= D, both w
 * orientations, bf16 or MXFP8 inputs, the fp32-epilogue flag).
 *
 * One CTA of 128 threads owns 64 tokens x one head (all D columns), so both quantization
 * directions finish inside it: grid (ceil(T/64), H).
 *
 *   mainloop, per chunk of NC columns of the head (NC = 64 when D % 64 == 0, else 32):
 *     slabs of 32 k: x (64 x 32) and w (NC x 32) become bf16 in shared memory, k-major,
 *     rows padded to 40 values (conflict-free 32-bit fragment loads). MXFP8 codes are
 *     dequantized on the way, code * 2^(s-127) -> bf16, exact for scale bytes in [16, 232]
 *     (SPEC §1.2's window); the in-out weight (K, H*D) is transposed on the way.
 *     Register-staged double buffer: slab k+1 is read from global memory while the tensor
 *     cores (mma.sync m16n8k16 bf16 -> f32) work on slab k; one __syncthreads per slab.
 *     4 warps as 2 (tokens) x 2 (columns); a warp owns 32 tokens x NC/2 columns.
 *   staging, per chunk: the accumulators go to an f32 tile Y (64 x D, row stride D + 8) in
 *     shared memory — rounded to bf16 first unless fp32 epilogue (SPEC §2.3 step 2). The
 *     interleaved RoPE pair (nope + 2j, nope + 2j + 1) is two adjacent columns of one
 *     thread's accumulator, so RoPE (step 3) is applied right there and its two results
 *     land at nope + j and nope + rope/2 + j. Tokens beyond T are written as 0 (they
 *     never raise a block amax, which starts from 0, and are never stored).
 *   epilogue, after the last chunk (step 4, formats.h's rule):
 *     rows: 8 threads x 4 columns per 32-column block; amax by xor shuffles; 4-byte code
 *           stores, consecutive threads on consecutive bytes of a (t, h) row;
 *     cols: one thread per (32-token block, 4 columns); amax over the 32 rows of Y, then
 *           32 4-byte code stores and one 4-byte scale store.
 * When 64 x (D + 8) f32 does not fit in shared memory (very large D), Y lives in the
 * caller's workspace instead (one tile per CTA); the code is the same.
 *
 * RoPE uses __fmul_rn / __fsub_rn / __fadd_rn: one rounding per product and sum, no FMA
 * (the build also passes --fmad=false).
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>

#include "core/internal.h"
#include "cuda/cuda_util.h"
#include "cuda/portable/portable_ops.h"
#include "cuda/portable/proj_rope_portable_shape.h"
#include "cuda/proj_epilogue.cuh"

namespace {

using mxf_projp::BK;
using mxf_projp::BM;
using mxf_projp::LDS;
constexpr int THREADS = 128;

struct proj_args {
  const uint8_t *x, *w, *xs, *ws;
  const uint16_t *cosv, *sinv;
  uint8_t *q_row, *s_row, *q_col, *s_col;
  float *stage; /* global staging (workspace) or nullptr: shared memory */
  int t, k, h, d, rope, nope, hd, nk;
  int fp32_epi;
  int vec;  /* 16-byte global loads of the inputs */
  int ovec; /* 4-byte stores of codes and column scales */
};

__device__ __forceinline__ uint16_t dq_bf16(uint8_t code, uint8_t sb) {
  return mxf_f32_to_bf16(mxf_e4m3_to_f32(code) * mxf_e8m0_to_f32(sb));
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Raw global data of one slab for this thread (before conversion to bf16). */
template <int NC> struct slab_regs {
  uint4 xa[2];
  uint4 wa[2];
  uint32_t xsc;  /* x scale byte (MXFP8) */
  uint4 wsc;     /* w scale bytes: 1 (out-in) or 16 (in-out) */
};

/* 8 bf16 at element (row, k) of a (rows, K) bf16 matrix; zeros past K or past rows. */
__device__ __forceinline__ uint4 ld_bf16x8(const uint8_t *base, int64_t row, int64_t rows, int k, int kdim, int vec) {
  if (row >= rows || k >= kdim) return make_uint4(0, 0, 0, 0);
  const uint16_t *p = reinterpret_cast<const uint16_t *>(base) + row * kdim + k;
  if (vec) return __ldg(reinterpret_cast<const uint4 *>(p));
  uint32_t u[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t lo = k + 2 * i < kdim ? p[2 * i] : 0u, hi = k + 2 * i + 1 < kdim ? p[2 * i + 1] : 0u;
    u[i] = lo | (hi << 16);
  }
  return make_uint4(u[0], u[1], u[2], u[3]);
}

/* 16 bytes at (row, col) of a (rows, cols) byte matrix (cols % 16 == 0 on this path). */
__device__ __forceinline__ uint4 ld_u8x16(const uint8_t *base, int64_t row, int64_t cols, int64_t col, int vec) {
  const uint8_t *p = base + row * cols + col;
  if (vec) return __ldg(reinterpret_cast<const uint4 *>(p));
  uint32_t u[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    u[i] = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24;
  return make_uint4(u[0], u[1], u[2], u[3]);
}

template <int NC, bool MX, bool OUT_IN>
__device__ __forceinline__ void fetch(slab_regs<NC> &r, const proj_args &a, int m0, int n0, int kt, int tid) {
  const int k0 = kt * BK;
  if constexpr (!MX) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int e = tid + THREADS * i, row = e >> 2, seg = e & 3;
      r.xa[i] = ld_bf16x8(a.x, (int64_t)m0 + row, a.t, k0 + seg * 8, a.k, a.vec);
    }
#pragma unroll
    for (int i = 0; i < NC * 4 / THREADS; ++i) {
      const int e = tid + THREADS * i;
      if constexpr (OUT_IN) {
        const int row = e >> 2, seg = e & 3;
        r.wa[i] = ld_bf16x8(a.w, (int64_t)n0 + row, a.hd, k0 + seg * 8, a.k, a.vec);
      } else {
        /* (K, H*D): row k0 + kr, 8 consecutive outputs; a k past K reads as zeros */
        const int kr = e / (NC / 8), seg = e % (NC / 8);
        r.wa[i] = ld_bf16x8(a.w, (int64_t)k0 + kr, a.k, n0 + seg * 8, a.hd, a.vec);
      }
    }
  } else {
    const int kb = kt; /* one scale block per slab */
    {
      const int row = tid >> 1, seg = tid & 1;
      const int64_t t = (int64_t)m0 + row;
      if (t < a.t) {
        r.xa[0] = ld_u8x16(a.x, t, a.k, k0 + seg * 16, a.vec);
        r.xsc = a.xs[t * a.nk + kb];
      } else {
        r.xa[0] = make_uint4(0, 0, 0, 0);
        r.xsc = 127; /* 1.0: zero codes stay zero */
      }
    }
    if (tid < NC * 2) {
      if constexpr (OUT_IN) {
        const int row = tid >> 1, seg = tid & 1;
        r.wa[0] = ld_u8x16(a.w, (int64_t)n0 + row, a.k, k0 + seg * 16, a.vec);
        r.wsc.x = a.ws[((int64_t)n0 + row) * a.nk + kb];
      } else {
        const int kr = tid / (NC / 16), seg = tid % (NC / 16);
        r.wa[0] = ld_u8x16(a.w, (int64_t)k0 + kr, a.hd, n0 + seg * 16, a.vec);
        r.wsc = ld_u8x16(a.ws, kb, a.hd, n0 + seg * 16, a.vec);
      }
    }
  }
}

__device__ __forceinline__ uint8_t byte_of(const uint4 &v, int i) {
  const uint32_t w = i < 4 ? v.x : i < 8 ? v.y : i < 12 ? v.z : v.w;
  return (uint8_t)(w >> (8 * (i & 3)));
}

template <int NC, bool MX, bool OUT_IN>
__device__ __forceinline__ void stash(const slab_regs<NC> &r, uint16_t *sa, uint16_t *sb, int tid) {
  if constexpr (!MX) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int e = tid + THREADS * i, row = e >> 2, seg = e & 3;
      *reinterpret_cast<uint4 *>(sa + row * LDS + seg * 8) = r.xa[i];
    }
#pragma unroll
    for (int i = 0; i < NC * 4 / THREADS; ++i) {
      const int e = tid + THREADS * i;
      if constexpr (OUT_IN) {
        const int row = e >> 2, seg = e & 3;
        *reinterpret_cast<uint4 *>(sb + row * LDS + seg * 8) = r.wa[i];
      } else {
        const int kr = e / (NC / 8), seg = e % (NC / 8);
        const uint32_t u[4] = {r.wa[i].x, r.wa[i].y, r.wa[i].z, r.wa[i].w};
#pragma unroll
        for (int j = 0; j < 8; ++j) sb[(seg * 8 + j) * LDS + kr] = (uint16_t)(u[j >> 1] >> (16 * (j & 1)));
      }
    }
  } else {
    {
      const int row = tid >> 1, seg = tid & 1;
      uint32_t o[8];
#pragma unroll
      for (int j = 0; j < 8; ++j)
        o[j] = (uint32_t)dq_bf16(byte_of(r.xa[0], 2 * j), (uint8_t)r.xsc) |
               (uint32_t)dq_bf16(byte_of(r.xa[0], 2 * j + 1), (uint8_t)r.xsc) << 16;
      uint4 *d = reinterpret_cast<uint4 *>(sa + row * LDS + seg * 16);
      d[0] = make_uint4(o[0], o[1], o[2], o[3]);
      d[1] = make_uint4(o[4], o[5], o[6], o[7]);
    }
    if (tid < NC * 2) {
      if constexpr (OUT_IN) {
        const int row = tid >> 1, seg = tid & 1;
        const uint8_t s = (uint8_t)r.wsc.x;
        uint32_t o[8];
#pragma unroll
        for (int j = 0; j < 8; ++j)
          o[j] = (uint32_t)dq_bf16(byte_of(r.wa[0], 2 * j), s) | (uint32_t)dq_bf16(byte_of(r.wa[0], 2 * j + 1), s) << 16;
        uint4 *d = reinterpret_cast<uint4 *>(sb + row * LDS + seg * 16);
        d[0] = make_uint4(o[0], o[1], o[2], o[3]);
        d[1] = make_uint4(o[4], o[5], o[6], o[7]);
      } else {
        const int kr = tid / (NC / 16), seg = tid % (NC / 16);
#pragma unroll
        for (int j = 0; j < 16; ++j) sb[(seg * 16 + j) * LDS + kr] = dq_bf16(byte_of(r.wa[0], j), byte_of(r.wsc, j));
      }
    }
  }
}

template <int NC, bool MX, bool OUT_IN>
__global__ void __launch_bounds__(THREADS) proj_rope_kernel(const proj_args a) {
  extern __shared__ __align__(16) uint8_t smem[];
  uint16_t *s_a = reinterpret_cast<uint16_t *>(smem);             /* [2][BM][LDS] */
  uint16_t *s_b = s_a + 2 * BM * LDS;                              /* [2][NC][LDS] */
  const int sd = a.d + 8;                                          /* Y row stride */
  float *sy = a.stage ? a.stage + ((int64_t)blockIdx.y * gridDim.x + blockIdx.x) * BM * sd
                      : reinterpret_cast<float *>(smem + 2 * (BM + NC) * LDS * 2);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 1, wn = warp & 1, g = lane >> 2, tq = lane & 3;
  const int m0 = blockIdx.x * BM, h = blockIdx.y;
  constexpr int NT = NC / 16; /* n8 tiles per warp */

  for (int c0 = 0; c0 < a.d; c0 += NC) {
    const int n0 = h * a.d + c0;
    float acc[2][NT][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;
    slab_regs<NC> r;
    fetch<NC, MX, OUT_IN>(r, a, m0, n0, 0, tid);
    stash<NC, MX, OUT_IN>(r, s_a, s_b, tid);
    __syncthreads();
    for (int kt = 0; kt < a.nk; ++kt) {
      const int buf = kt & 1;
      if (kt + 1 < a.nk) fetch<NC, MX, OUT_IN>(r, a, m0, n0, kt + 1, tid);
      const uint16_t *sa = s_a + buf * BM * LDS, *sb = s_b + buf * NC * LDS;
#pragma unroll
      for (int ks = 0; ks < BK; ks += 16) {
        uint32_t af[2][4];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const uint16_t *p = sa + (wm * 32 + i * 16 + g) * LDS + ks + 2 * tq;
          af[i][0] = *reinterpret_cast<const uint32_t *>(p);
          af[i][1] = *reinterpret_cast<const uint32_t *>(p + 8 * LDS);
          af[i][2] = *reinterpret_cast<const uint32_t *>(p + 8);
          af[i][3] = *reinterpret_cast<const uint32_t *>(p + 8 * LDS + 8);
        }
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const uint16_t *p = sb + (wn * (NC / 2) + j * 8 + g) * LDS + ks + 2 * tq;
          const uint32_t b0 = *reinterpret_cast<const uint32_t *>(p), b1 = *reinterpret_cast<const uint32_t *>(p + 8);
#pragma unroll
          for (int i = 0; i < 2; ++i) mma_bf16(acc[i][j], af[i], b0, b1);
        }
      }
      if (kt + 1 < a.nk) stash<NC, MX, OUT_IN>(r, s_a + (buf ^ 1) * BM * LDS, s_b + (buf ^ 1) * NC * LDS, tid);
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int row = wm * 32 + i * 16 + g, dcol = c0 + wn * (NC / 2) + j * 8 + 2 * tq;
        mxf_proj_put_pair<false>(a, sy, sd, m0, row, dcol, acc[i][j][0], acc[i][j][1]);
        mxf_proj_put_pair<false>(a, sy, sd, m0, row + 8, dcol, acc[i][j][2], acc[i][j][3]);
      }
  }
  __syncthreads();

  /* ---- row direction: 8 threads per 32-column block, 4 columns each */
  const int d4 = a.d >> 2;
  for (int e = tid; e < BM * d4; e += THREADS) { /* BM * d4 is a multiple of THREADS */
    const int row = e / d4, c4 = e - row * d4;
    mxf_proj_quant_row4(a, sy, sd, a.d, m0, h, row, c4, lane);
  }

  /* ---- column direction: one thread per (32-token block, 4 columns) */
  for (int e = tid; e < (BM / 32) * d4; e += THREADS) {
    const int rb = e / d4, c4 = e - rb * d4;
    const int64_t tb0 = (int64_t)m0 + rb * 32;
    if (tb0 >= a.t) continue;
    const int nrows = a.t - tb0 < 32 ? (int)(a.t - tb0) : 32;
    const float *col = sy + (rb * 32) * sd + 4 * c4;
    mxf_proj_col4 cs = {}; /* amaxes start at 0 */
    for (int i = 0; i < 32; ++i) { /* rows past T hold 0 */
      const float4 v = *reinterpret_cast<const float4 *>(col + i * sd);
      cs.add(v);
    }
    cs.scales();
    for (int i = 0; i < nrows; ++i) {
      const float4 v = *reinterpret_cast<const float4 *>(col + i * sd);
      const uint32_t codes = cs.encode(v);
      mxf_proj_st_u32(a.q_col + ((tb0 + i) * a.h + h) * a.d + 4 * c4, codes, a.ovec);
    }
    mxf_proj_st_u32(a.s_col + ((tb0 >> 5) * a.h + h) * a.d + 4 * c4, cs.scale_word(), a.ovec);
  }
}

bool aligned(const void *p, uintptr_t al) { return (reinterpret_cast<uintptr_t>(p) & (al - 1)) == 0; }

/* Allows proj_rope_kernel<NC, MX, OUT_IN> `smem` bytes of dynamic shared memory on the
 * current device. The attribute belongs to the kernel in that device's context, and plans
 * of different D ask for different sizes: per device (0..63; others are set every time)
 * the largest size allowed so far is kept, and it only grows, under a lock, so that a
 * smaller request never takes back what a concurrent launch relies on. */
template <int NC, bool MX, bool OUT_IN> cudaError_t allow_smem(int smem) {
  static int allowed[64]; /* read atomically; written under lock */
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  if (smem <= 48 * 1024) return cudaSuccess;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  const bool kept = dev >= 0 && dev < 64;
  if (kept && __atomic_load_n(&allowed[dev], __ATOMIC_ACQUIRE) >= smem) return cudaSuccess;
  pthread_mutex_lock(&lock);
  if (!kept || allowed[dev] < smem) {
    e = cudaFuncSetAttribute(proj_rope_kernel<NC, MX, OUT_IN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             smem);
    if (e == cudaSuccess && kept) __atomic_store_n(&allowed[dev], smem, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&lock);
  return e;
}

template <int NC, bool MX, bool OUT_IN>
cudaError_t launch(const proj_args &a, dim3 grid, int smem, cudaStream_t s) {
  const cudaError_t e = allow_smem<NC, MX, OUT_IN>(smem);
  if (e != cudaSuccess) return e;
  proj_rope_kernel<NC, MX, OUT_IN><<<grid, THREADS, smem, s>>>(a);
  return cudaGetLastError();
}

template <int NC>
cudaError_t launch_nc(const mxf_proj_problem *p, const proj_args &a, dim3 grid, int smem, cudaStream_t s) {
  if (p->mxfp8) return p->w_out_in ? launch<NC, true, true>(a, grid, smem, s) : launch<NC, true, false>(a, grid, smem, s);
  return p->w_out_in ? launch<NC, false, true>(a, grid, smem, s) : launch<NC, false, false>(a, grid, smem, s);
}

} /* namespace */

extern "C" mxf_status mxf_portable_proj_rope_launch(const mxf_proj_problem *p, const mxf_projp::geometry *g,
                                                    const mxf_proj_rope_args *args, void *ws, size_t ws_size,
                                                    cudaStream_t stream) {
  if (p->t <= 0) return MXF_OK;
  if (p->h > 65535 || p->t > (1ll << 30) || p->k > (1ll << 30) || p->d > (1 << 20))
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED,
                         "cuda backend: proj_rope with H=%lld, T=%lld, K=%lld, D=%lld exceeds the portable kernel's grid",
                         (long long)p->h, (long long)p->t, (long long)p->k, (long long)p->d);
  const size_t need = g->workspace;
  if (need && (!ws || ws_size < need))
    return mxf_set_error(MXF_ERR_INVALID_VALUE, "proj_rope: workspace of %zu bytes; the portable kernel needs %zu",
                         ws ? ws_size : (size_t)0, need);
  proj_args a;
  a.x = static_cast<const uint8_t *>(args->x);
  a.w = static_cast<const uint8_t *>(args->w);
  a.xs = static_cast<const uint8_t *>(args->x_scale);
  a.ws = static_cast<const uint8_t *>(args->w_scale);
  a.cosv = static_cast<const uint16_t *>(args->cos);
  a.sinv = static_cast<const uint16_t *>(args->sin);
  a.q_row = static_cast<uint8_t *>(args->out_row);
  a.s_row = static_cast<uint8_t *>(args->out_scales_row);
  a.q_col = static_cast<uint8_t *>(args->out_col);
  a.s_col = static_cast<uint8_t *>(args->out_scales_col);
  a.stage = need ? static_cast<float *>(ws) : nullptr;
  a.t = (int)p->t;
  a.k = (int)p->k;
  a.h = (int)p->h;
  a.d = (int)p->d;
  a.rope = (int)p->rope;
  a.nope = (int)p->nope;
  a.hd = (int)(p->h * p->d);
  a.nk = (int)((p->k + BK - 1) / BK);
  a.fp32_epi = p->fp32_epilogue;
  a.vec = aligned(a.x, 16) && aligned(a.w, 16) &&
          (p->mxfp8 ? (p->w_out_in || aligned(a.ws, 16)) : p->k % 8 == 0);
  a.ovec = aligned(a.q_row, 4) && aligned(a.q_col, 4) && aligned(a.s_col, 4);
  if (p->h * p->d >= (1ll << 31))
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cuda backend: proj_rope with H*D=%lld exceeds the portable kernel",
                         (long long)(p->h * p->d));
  const dim3 grid((unsigned)((p->t + BM - 1) / BM), (unsigned)p->h);
  const bool nc64 = g->nc64;
  const int smem = g->smem;
  const cudaError_t e = nc64 ? launch_nc<64>(p, a, grid, smem, stream) : launch_nc<32>(p, a, grid, smem, stream);
  if (e != cudaSuccess)
    return mxf_set_error(MXF_ERR_CUDA, "cuda backend: portable proj_rope launch: %s", cudaGetErrorString(e));
  return MXF_OK;
}
