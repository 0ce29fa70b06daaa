/*
 * quantize_portable.cu — standalone MXFP8 quantize and dequantize kernels (SPEC §3), any
 * sm_80+ GPU. Bandwidth-bound; also the unfused baseline of proj_rope's epilogue.
 *
 * Quantize: one CTA of 256 threads (8 warps x 32 lanes) per tile of 32 rows x 128 cols.
 * Lane l owns the 4 consecutive columns 4l..4l+3 of the tile, warp w the rows w, w+8,
 * w+16, w+24, so every global access of a warp is one contiguous row segment (16-byte
 * loads of f32, 8-byte loads of bf16, 4-byte code stores when aligned).
 *   row direction:    a block = 32 columns = 8 lanes; amax over the lanes by xor shuffles
 *   column direction: a block = the tile's 32 rows; per-thread amax over its 4 rows, then
 *                     across the 8 warps through shared memory
 * Values outside the matrix (partial tiles) are read as 0: the block amax starts from 0,
 * so they never change a scale, and they are never stored. The rule itself is formats.h's
 * (mxf_amax_step, mxf_e8m0_from_amax, mxf_e8m0_inv, mxf_mx_encode4): bit-identical to the
 * CPU backend.
 *
 * Dequantize: elementwise, 4 consecutive values per thread (one 4-byte code load, one
 * 16-byte f32 / 8-byte bf16 store when aligned); y = e4m3(q) * 2^(s-127), exact in f32
 * (NaN for code 0x7F/0xFF or scale 0xFF), rounded to nearest even for bf16 output.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "core/internal.h"
#include "cuda/cuda_util.h"

namespace {

constexpr int QT_ROWS = 32, QT_COLS = 128, QT_THREADS = 256;

struct quant_args {
  const void *x;
  uint8_t *q_row, *s_row, *q_col, *s_col;
  int64_t rows, cols, sb_row; /* sb_row = ceil(cols / 32) */
  int tiles_c;
};

template <typename T> __device__ __forceinline__ float to_f32(T v);
template <> __device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f32<uint16_t>(uint16_t v) { return mxf_bf16_to_f32(v); }

/* 4 consecutive values starting at column c of row r (0 outside the matrix). */
template <typename T, bool VEC>
__device__ __forceinline__ void load4(const quant_args &a, int64_t r, int64_t c, float (&v)[4]) {
  const T *x = static_cast<const T *>(a.x) + r * a.cols;
  if (r >= a.rows) {
    v[0] = v[1] = v[2] = v[3] = 0.f;
    return;
  }
  if (VEC && c + 4 <= a.cols) {
    if constexpr (sizeof(T) == 4) {
      const float4 f = __ldg(reinterpret_cast<const float4 *>(x + c));
      v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
    } else {
      const uint2 u = __ldg(reinterpret_cast<const uint2 *>(x + c));
      v[0] = mxf_bf16_to_f32((uint16_t)(u.x & 0xFFFFu));
      v[1] = mxf_bf16_to_f32((uint16_t)(u.x >> 16));
      v[2] = mxf_bf16_to_f32((uint16_t)(u.y & 0xFFFFu));
      v[3] = mxf_bf16_to_f32((uint16_t)(u.y >> 16));
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = c + i < a.cols ? to_f32<T>(x[c + i]) : 0.f;
}

/* 4 codes of row r from column c (only those inside the matrix). */
template <bool VEC>
__device__ __forceinline__ void store4(uint8_t *q, const quant_args &a, int64_t r, int64_t c, uint32_t codes) {
  if (r >= a.rows || c >= a.cols) return;
  uint8_t *p = q + r * a.cols + c;
  if (VEC && c + 4 <= a.cols) {
    *reinterpret_cast<uint32_t *>(p) = codes;
    return;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
    if (c + i < a.cols) p[i] = (uint8_t)(codes >> (8 * i));
}

template <typename T, bool VEC, bool ROWS, bool COLS>
__global__ void __launch_bounds__(QT_THREADS) quantize_kernel(const quant_args a) {
  __shared__ float red[8][QT_COLS];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t tr = blockIdx.x / a.tiles_c, tc = blockIdx.x % a.tiles_c;
  const int64_t r0 = tr * QT_ROWS, c = tc * QT_COLS + 4 * lane;

  float v[4][4]; /* [row i: r0 + warp + 8i][column c + j] */
#pragma unroll
  for (int i = 0; i < 4; ++i) load4<T, VEC>(a, r0 + warp + 8 * i, c, v[i]);

  if (ROWS) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float m = 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) m = mxf_amax_step(m, v[i][j]);
      /* the 8 lanes of one 32-column block: m is never NaN, so amax_step is a plain max */
#pragma unroll
      for (int off = 1; off < 8; off <<= 1) m = mxf_amax_step(m, __shfl_xor_sync(0xFFFFFFFFu, m, off));
      const uint8_t b = mxf_e8m0_from_amax(m);
      const float inv = mxf_e8m0_inv(b);
      const uint32_t codes = mxf_mx_encode4(v[i][0], v[i][1], v[i][2], v[i][3], inv, inv, inv, inv);
      const int64_t r = r0 + warp + 8 * i;
      store4<VEC>(a.q_row, a, r, c, codes);
      if ((lane & 7) == 0 && r < a.rows && c < a.cols) a.s_row[r * a.sb_row + (c >> 5)] = b;
    }
  }
  if (COLS) {
    float m[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      m[j] = 0.f;
#pragma unroll
      for (int i = 0; i < 4; ++i) m[j] = mxf_amax_step(m[j], v[i][j]);
    }
    *reinterpret_cast<float4 *>(&red[warp][4 * lane]) = make_float4(m[0], m[1], m[2], m[3]);
    __syncthreads();
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      const float4 o = *reinterpret_cast<const float4 *>(&red[w][4 * lane]);
      m[0] = mxf_amax_step(m[0], o.x);
      m[1] = mxf_amax_step(m[1], o.y);
      m[2] = mxf_amax_step(m[2], o.z);
      m[3] = mxf_amax_step(m[3], o.w);
    }
    uint8_t b[4];
    float inv[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      b[j] = mxf_e8m0_from_amax(m[j]);
      inv[j] = mxf_e8m0_inv(b[j]);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t codes = mxf_mx_encode4(v[i][0], v[i][1], v[i][2], v[i][3], inv[0], inv[1], inv[2], inv[3]);
      store4<VEC>(a.q_col, a, r0 + warp + 8 * i, c, codes);
    }
    if (warp == 0) {
      const uint32_t sb = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
      /* s_col is (ceil(rows/32), cols): row tr of it, same column indexing as the codes */
      quant_args s = a;
      s.rows = (a.rows + QT_ROWS - 1) / QT_ROWS;
      store4<VEC>(a.s_col, s, tr, c, sb);
    }
  }
}

struct dequant_args {
  const uint8_t *q, *s;
  void *y;
  int64_t rows, cols, sb_row;
  int64_t groups_per_row; /* ceil(cols / 4) */
  int64_t groups;         /* rows * groups_per_row */
};

template <bool ROWDIR, bool BF16, bool VEC>
__global__ void __launch_bounds__(256) dequantize_kernel(const dequant_args a) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < a.groups; g += stride) {
    const int64_t r = g / a.groups_per_row, c = (g - r * a.groups_per_row) * 4;
    const int64_t base = r * a.cols + c;
    const int n = a.cols - c < 4 ? (int)(a.cols - c) : 4;
    uint32_t codes = 0;
    if (VEC && n == 4) {
      codes = __ldg(reinterpret_cast<const uint32_t *>(a.q + base));
    } else {
      for (int i = 0; i < n; ++i) codes |= (uint32_t)a.q[base + i] << (8 * i);
    }
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t ci = c + i < a.cols ? c + i : c; /* a column inside the matrix */
      const uint8_t sb = ROWDIR ? a.s[r * a.sb_row + (ci >> 5)] : a.s[(r >> 5) * a.cols + ci];
      /* e4m3 (4 significant bits) times a power of two: exact, or inf on overflow */
      v[i] = mxf_e4m3_to_f32((uint8_t)(codes >> (8 * i))) * mxf_e8m0_to_f32(sb);
    }
    if (BF16) {
      uint16_t *y = static_cast<uint16_t *>(a.y) + base;
      if (VEC && n == 4) {
        *reinterpret_cast<uint2 *>(y) =
            make_uint2((uint32_t)mxf_f32_to_bf16(v[0]) | (uint32_t)mxf_f32_to_bf16(v[1]) << 16,
                       (uint32_t)mxf_f32_to_bf16(v[2]) | (uint32_t)mxf_f32_to_bf16(v[3]) << 16);
      } else {
        #pragma unroll
        for (int i = 0; i < 4; ++i)
          if (i < n) y[i] = mxf_f32_to_bf16(v[i]);
      }
    } else {
      float *y = static_cast<float *>(a.y) + base;
      if (VEC && n == 4) {
        *reinterpret_cast<float4 *>(y) = make_float4(v[0], v[1], v[2], v[3]);
      } else {
        #pragma unroll
        for (int i = 0; i < 4; ++i)
          if (i < n) y[i] = v[i];
      }
    }
  }
}

template <typename T, bool VEC>
void launch_quant(unsigned dirs, unsigned grid, const quant_args &a, cudaStream_t s) {
  if (dirs == (MXF_QUANT_ROWS | MXF_QUANT_COLS))
    quantize_kernel<T, VEC, true, true><<<grid, QT_THREADS, 0, s>>>(a);
  else if (dirs == MXF_QUANT_ROWS)
    quantize_kernel<T, VEC, true, false><<<grid, QT_THREADS, 0, s>>>(a);
  else
    quantize_kernel<T, VEC, false, true><<<grid, QT_THREADS, 0, s>>>(a);
}

bool aligned(const void *p, uintptr_t a) { return p == nullptr || (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

} /* namespace */

extern "C" mxf_status mxf_portable_quantize_launch(const mxf_quant_problem *p, const mxf_quantize_args *args,
                                                   cudaStream_t stream) {
  if (p->rows <= 0 || p->cols <= 0) return MXF_OK;
  quant_args a;
  a.x = args->x;
  a.q_row = static_cast<uint8_t *>(args->q_row);
  a.s_row = static_cast<uint8_t *>(args->s_row);
  a.q_col = static_cast<uint8_t *>(args->q_col);
  a.s_col = static_cast<uint8_t *>(args->s_col);
  a.rows = p->rows;
  a.cols = p->cols;
  a.sb_row = (p->cols + 31) / 32;
  const int64_t tiles_c = (p->cols + QT_COLS - 1) / QT_COLS, tiles_r = (p->rows + QT_ROWS - 1) / QT_ROWS;
  if (tiles_c * tiles_r >= (1ll << 31) || tiles_c >= (1ll << 30))
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cuda backend: quantize of %lld x %lld values is too large",
                         (long long)p->rows, (long long)p->cols);
  a.tiles_c = (int)tiles_c;
  const unsigned grid = (unsigned)(tiles_c * tiles_r);
  const bool rows = (p->directions & MXF_QUANT_ROWS) != 0, cols = (p->directions & MXF_QUANT_COLS) != 0;
  /* vector accesses need every row start aligned: cols % 4 == 0 and aligned bases */
  const bool vec = p->cols % 4 == 0 && aligned(args->x, p->x == MXF_F32 ? 16 : 8) &&
                   (!rows || aligned(args->q_row, 4)) && (!cols || (aligned(args->q_col, 4) && aligned(args->s_col, 4)));
  const unsigned dirs = p->directions & (MXF_QUANT_ROWS | MXF_QUANT_COLS);
  if (p->x == MXF_F32) {
    if (vec) launch_quant<float, true>(dirs, grid, a, stream);
    else launch_quant<float, false>(dirs, grid, a, stream);
  } else {
    if (vec) launch_quant<uint16_t, true>(dirs, grid, a, stream);
    else launch_quant<uint16_t, false>(dirs, grid, a, stream);
  }
  MXF_CUDA_CHECK_LAUNCH("quantize kernel launch");
  return MXF_OK;
}

extern "C" mxf_status mxf_portable_dequantize_launch(const mxf_quant_problem *p, const mxf_dequantize_args *args,
                                                     cudaStream_t stream, int num_sms) {
  if (p->rows <= 0 || p->cols <= 0) return MXF_OK;
  dequant_args a;
  a.q = static_cast<const uint8_t *>(args->q);
  a.s = static_cast<const uint8_t *>(args->s);
  a.y = args->y;
  a.rows = p->rows;
  a.cols = p->cols;
  a.sb_row = (p->cols + 31) / 32;
  a.groups_per_row = (p->cols + 3) / 4;
  a.groups = a.rows * a.groups_per_row;
  const bool bf16 = p->x == MXF_BF16, rowdir = (p->directions & MXF_QUANT_ROWS) != 0;
  const bool vec = p->cols % 4 == 0 && aligned(args->q, 4) && aligned(args->y, bf16 ? 8 : 16);
  int64_t blocks = (a.groups + 255) / 256;
  const int64_t cap = (int64_t)(num_sms > 0 ? num_sms : 132) * 16;
  if (blocks > cap) blocks = cap;
  const unsigned grid = (unsigned)blocks;
#define MXF_DQ(R, B, V) dequantize_kernel<R, B, V><<<grid, 256, 0, stream>>>(a)
  if (rowdir) {
    if (bf16) { if (vec) MXF_DQ(true, true, true); else MXF_DQ(true, true, false); }
    else { if (vec) MXF_DQ(true, false, true); else MXF_DQ(true, false, false); }
  } else {
    if (bf16) { if (vec) MXF_DQ(false, true, true); else MXF_DQ(false, true, false); }
    else { if (vec) MXF_DQ(false, false, true); else MXF_DQ(false, false, false); }
  }
#undef MXF_DQ
  MXF_CUDA_CHECK_LAUNCH("dequantize kernel launch");
  return MXF_OK;
}
