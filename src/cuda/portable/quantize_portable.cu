/*
 * quantize_portable.cu — standalone MXFP8 quantize and dequantize kernels (SPEC §3), any
 * sm_80+ GPU. Bandwidth-bound; also the unfused baseline of proj_rope's epilogue.
 *
 * Quantize: 256 threads (8 warps x 32 lanes) per CTA, a grid-stride loop over tiles of
 * 32 rows x 256 cols, as many CTAs as fit on the GPU at once (2 per SM; 3 for bf16
 * input measured slower on the H200). Lane l owns the 8
 * consecutive columns 8l..8l+7 of a tile, warp w the rows w, w+8, w+16, w+24: every
 * global access of a warp is one contiguous 256-value row segment (16-byte loads: two
 * per row for f32, one for bf16; one 8-byte code store per row). While a CTA works on
 * one tile, the loads of its next tile are already in flight (register prefetch), so
 * the load latency is not paid once per tile.
 *   row direction:    a block = 32 columns = 4 lanes: amax over the thread's 8 values,
 *                     two xor shuffles
 *   column direction: a block = the tile's 32 rows: per-thread amax over its 4 rows, then
 *                     across the 8 warps through shared memory, each thread finishing one
 *                     column (scale byte, multiplier) for the whole CTA
 * Values outside the matrix (partial tiles) are read as 0: the block amax starts from 0,
 * so they never change a scale, and they are never stored. The rule itself is formats.h's
 * (mxf_amax_step, mxf_e8m0_from_amax, mxf_e8m0_inv, mxf_mx_encode4): bit-identical to the
 * CPU backend. Misaligned pointers or cols % 8 != 0 take the same kernel with
 * element-by-element accesses and no prefetch (VEC = false).
 *
 * Dequantize: y = e4m3(q) * 2^(s-127), exact in f32 (NaN for code 0x7F/0xFF or scale
 * 0xFF), rounded to nearest even for bf16 output. Aligned case (cols % 16 == 0, 16-byte
 * aligned pointers): a grid-stride loop over chunks of 8 codes (bf16 out) or 4 (f32 out),
 * so that each lane stores 16 bytes and a warp's stores are contiguous; four chunks per
 * thread in flight; one scale byte (rows) or the chunk's scale bytes (cols) per chunk;
 * decode by formats.h's mxf_e4m3_bits_f32 (a shift and a mask per value). Anything else:
 * the elementwise 4-value kernel.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "core/internal.h"
#include "cuda/cuda_util.h"
#include "cuda/portable/portable_ops.h"

namespace {

constexpr int Q_THREADS = 256;
constexpr int Q_WARPS = Q_THREADS / 32;
constexpr int Q_VALS = 8;                 /* consecutive columns per thread: 16 bytes of bf16 */
constexpr int Q_RPT = 4;                  /* rows per thread */
constexpr int Q_ROWS = Q_WARPS * Q_RPT;   /* 32: one column-direction block */
constexpr int Q_COLS = 32 * Q_VALS;       /* 256: one warp-wide row segment */
constexpr int Q_LANES_BLK = MXF_MX_BLOCK / Q_VALS; /* lanes per row-direction block */
static_assert(Q_ROWS == MXF_MX_BLOCK && Q_VALS == 8 && Q_COLS == Q_THREADS, "tile shape vs MX block");

struct quant_args {
  const void *x;
  uint8_t *q_row, *s_row, *q_col, *s_col;
  int64_t rows, cols, sb_row; /* sb_row = ceil(cols / 32) */
  int tiles_c, tiles;
};

template <typename T> __device__ __forceinline__ float to_f32(T v);
template <> __device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f32<uint16_t>(uint16_t v) { return mxf_bf16_to_f32(v); }

/* Q_VALS consecutive values of row r from column c, element by element (0 outside the
 * matrix): the path for misaligned pointers and cols % Q_VALS != 0. */
template <typename T>
__device__ __forceinline__ void load_vals(const quant_args &a, int64_t r, int64_t c, float (&v)[Q_VALS]) {
  const T *x = static_cast<const T *>(a.x) + r * a.cols + c;
#pragma unroll
  for (int j = 0; j < Q_VALS; ++j) v[j] = r < a.rows && c + j < a.cols ? to_f32<T>(x[j]) : 0.f;
}

/* The raw 16-byte words of one thread's Q_RPT x Q_VALS values (VEC only): what the loop
 * keeps in flight for the next tile while it works on the current one. */
template <typename T> struct raw_rows {
  uint4 u[Q_RPT][Q_VALS * sizeof(T) / 16];
};

template <typename T>
__device__ __forceinline__ void load_raw(const quant_args &a, int64_t r0, int64_t c, raw_rows<T> &R) {
  constexpr int NW = Q_VALS * sizeof(T) / 16;
#pragma unroll
  for (int i = 0; i < Q_RPT; ++i) {
    const int64_t r = r0 + Q_WARPS * i;
    const uint4 *x = reinterpret_cast<const uint4 *>(static_cast<const T *>(a.x) + r * a.cols + c);
#pragma unroll
    for (int k = 0; k < NW; ++k) /* zero bits: 0.0 in f32 and bf16 alike */
      R.u[i][k] = r < a.rows && c < a.cols ? __ldg(x + k) : make_uint4(0u, 0u, 0u, 0u);
  }
}

template <typename T>
__device__ __forceinline__ void widen(const raw_rows<T> &R, float (&v)[Q_RPT][Q_VALS]) {
#pragma unroll
  for (int i = 0; i < Q_RPT; ++i) {
#pragma unroll
    for (int k = 0; k < (int)(Q_VALS * sizeof(T) / 16); ++k) {
      const uint32_t w[4] = {R.u[i][k].x, R.u[i][k].y, R.u[i][k].z, R.u[i][k].w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if constexpr (sizeof(T) == 4) {
          v[i][4 * k + e] = __uint_as_float(w[e]);
        } else {
          v[i][8 * k + 2 * e] = mxf_bf16_to_f32((uint16_t)(w[e] & 0xFFFFu));
          v[i][8 * k + 2 * e + 1] = mxf_bf16_to_f32((uint16_t)(w[e] >> 16));
        }
      }
    }
  }
}

/* Q_VALS codes of row r from column c (only those inside the matrix). */
template <bool VEC>
__device__ __forceinline__ void store_codes(uint8_t *q, const quant_args &a, int64_t r, int64_t c,
                                            const uint32_t (&w)[Q_VALS / 4]) {
  if (r >= a.rows || c >= a.cols) return;
  uint8_t *p = q + r * a.cols + c;
  if constexpr (VEC) {
    *reinterpret_cast<uint2 *>(p) = make_uint2(w[0], w[1]);
  } else {
#pragma unroll
    for (int j = 0; j < Q_VALS; ++j)
      if (c + j < a.cols) p[j] = (uint8_t)(w[j >> 2] >> (8 * (j & 3)));
  }
}

/* Shared-memory slot of tile column Q_VALS * lane + 4 * q + e: [q][lane][e], so that a
 * warp's 16-byte accesses for one q are contiguous (no bank conflicts). */
__device__ __forceinline__ int red_slot(int lane, int q) { return 128 * q + 4 * lane; }

template <typename T, bool VEC, bool ROWS, bool COLS>
__global__ void __launch_bounds__(Q_THREADS, 2) quantize_kernel(const quant_args a) {
  __shared__ __align__(16) float red[Q_WARPS][Q_COLS]; /* per-warp column amax */
  __shared__ __align__(16) float col_inv[Q_COLS];      /* column multipliers */
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  raw_rows<T> next; /* VEC: the loads of the CTA's next tile, issued one tile ahead */
  if (VEC && (int)blockIdx.x < a.tiles) {
    const int tr = blockIdx.x / a.tiles_c, tc = blockIdx.x - tr * a.tiles_c;
    load_raw<T>(a, (int64_t)tr * Q_ROWS + warp, (int64_t)tc * Q_COLS + Q_VALS * lane, next);
  }
  for (int t = blockIdx.x; t < a.tiles; t += gridDim.x) {
    const int tr = t / a.tiles_c, tc = t - tr * a.tiles_c;
    const int64_t r0 = (int64_t)tr * Q_ROWS + warp, c = (int64_t)tc * Q_COLS + Q_VALS * lane;

    float v[Q_RPT][Q_VALS]; /* [row r0 + 8i][column c + j] */
    if constexpr (VEC) {
      widen<T>(next, v);
      const int tn = t + (int)gridDim.x;
      if (tn < a.tiles) {
        const int trn = tn / a.tiles_c, tcn = tn - trn * a.tiles_c;
        load_raw<T>(a, (int64_t)trn * Q_ROWS + warp, (int64_t)tcn * Q_COLS + Q_VALS * lane, next);
      }
    } else {
#pragma unroll
      for (int i = 0; i < Q_RPT; ++i) load_vals<T>(a, r0 + Q_WARPS * i, c, v[i]);
    }

    if (ROWS) {
#pragma unroll
      for (int i = 0; i < Q_RPT; ++i) {
        float m = 0.f;
#pragma unroll
        for (int j = 0; j < Q_VALS; ++j) m = mxf_amax_step(m, v[i][j]);
        /* the rest of the 32-column block: the neighbouring lanes */
#pragma unroll
        for (int off = 1; off < Q_LANES_BLK; off <<= 1) m = mxf_amax_step(m, __shfl_xor_sync(0xFFFFFFFFu, m, off));
        const uint8_t b = mxf_e8m0_from_amax(m);
        const float inv = mxf_e8m0_inv(b);
        uint32_t w[Q_VALS / 4];
#pragma unroll
        for (int q = 0; q < Q_VALS / 4; ++q)
          w[q] = mxf_mx_encode4(v[i][4 * q], v[i][4 * q + 1], v[i][4 * q + 2], v[i][4 * q + 3], inv, inv, inv, inv);
        const int64_t r = r0 + Q_WARPS * i;
        store_codes<VEC>(a.q_row, a, r, c, w);
        if ((lane & (Q_LANES_BLK - 1)) == 0 && r < a.rows && c < a.cols) a.s_row[r * a.sb_row + (c >> 5)] = b;
      }
    }
    if (COLS) {
#pragma unroll
      for (int q = 0; q < Q_VALS / 4; ++q) {
        float m[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          m[e] = 0.f;
#pragma unroll
          for (int i = 0; i < Q_RPT; ++i) m[e] = mxf_amax_step(m[e], v[i][4 * q + e]);
        }
        *reinterpret_cast<float4 *>(&red[warp][red_slot(lane, q)]) = make_float4(m[0], m[1], m[2], m[3]);
      }
      __syncthreads();
      {
        /* thread k finishes slot k: tile column Q_VALS * lane' + 4 * q' + e */
        const int s = threadIdx.x;
        float m = 0.f;
#pragma unroll
        for (int w = 0; w < Q_WARPS; ++w) m = mxf_amax_step(m, red[w][s]);
        const uint8_t b = mxf_e8m0_from_amax(m);
        col_inv[s] = mxf_e8m0_inv(b);
        const int q = s >> 7, ln = (s & 127) >> 2, e = s & 3;
        const int64_t gc = (int64_t)tc * Q_COLS + Q_VALS * ln + 4 * q + e;
        /* s_col is (ceil(rows/32), cols): row tr of it, same column indexing as the codes */
        if (gc < a.cols) a.s_col[(int64_t)tr * a.cols + gc] = b;
      }
      __syncthreads();
#pragma unroll
      for (int i = 0; i < Q_RPT; ++i) {
        uint32_t w[Q_VALS / 4];
#pragma unroll
        for (int q = 0; q < Q_VALS / 4; ++q) {
          /* re-read per row rather than held: fewer live registers */
          const float4 f = *reinterpret_cast<const float4 *>(&col_inv[red_slot(lane, q)]);
          w[q] = mxf_mx_encode4(v[i][4 * q], v[i][4 * q + 1], v[i][4 * q + 2], v[i][4 * q + 3], f.x, f.y, f.z, f.w);
        }
        store_codes<VEC>(a.q_col, a, r0 + Q_WARPS * i, c, w);
      }
      /* no barrier needed before the next tile: its writes to red come after this tile's
       * second barrier (every read of red is before it), its writes to col_inv after its
       * own first barrier (every read of col_inv above is before that) */
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

/* ---------------------------------------------------------------- dequantize, aligned */
struct dequant_vec_args {
  const uint8_t *q, *s;
  void *y;
  int64_t rows, cols, sb_row;
  int64_t cpr;            /* chunks of dq_shape::V codes per row */
  int64_t step_r, step_c; /* the grid stride (threads in the grid) in rows and chunks */
};

/* 4 * NW codes (words w) times their scales: (bits * 2^120) * s is mxf_e4m3_to_f32(code) * s
 * bit for bit for finite codes (formats.h); one multiply when s * 2^120 stays finite (then
 * the same single rounding of the same exact product). NaN codes: the exact decode. Row
 * direction: one scale s_row for all; columns: scale bytes sb, one per code. */
template <bool ROWDIR, int NW>
__device__ __forceinline__ void dq_words(const uint32_t (&w)[NW], const uint32_t (&sb)[NW], float s_row,
                                         float (&v)[4 * NW]) {
  uint32_t nan = 0;
#pragma unroll
  for (int k = 0; k < NW; ++k) nan |= mxf_e4m3x4_any_nan(w[k]);
  float s[4 * NW];
#pragma unroll
  for (int j = 0; j < 4 * NW; ++j) s[j] = ROWDIR ? s_row : mxf_e8m0_to_f32((uint8_t)(sb[j >> 2] >> (8 * (j & 3))));
  if (nan != 0u) {
#pragma unroll
    for (int j = 0; j < 4 * NW; ++j) v[j] = mxf_e4m3_to_f32((uint8_t)(w[j >> 2] >> (8 * (j & 3)))) * s[j];
    return;
  }
  if (ROWDIR) {
    const float f = s_row * MXF_E4M3_BITS_UNSCALE; /* NaN scale: NaN, as it should */
    if ((__float_as_uint(f) & 0x7FFFFFFFu) != 0x7F800000u) {
#pragma unroll
      for (int j = 0; j < 4 * NW; ++j) v[j] = mxf_e4m3_bits_f32(w[j >> 2] >> (8 * (j & 3))) * f;
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < 4 * NW; ++j)
    v[j] = (mxf_e4m3_bits_f32(w[j >> 2] >> (8 * (j & 3))) * MXF_E4M3_BITS_UNSCALE) * s[j];
}

/* Lane = DQ_V consecutive codes (8 for bf16 out, 4 for f32 out): every load and every
 * 16-byte store of a warp covers one contiguous segment, whole sectors. Each thread takes
 * DQ_U chunks a grid stride apart per step, all loaded before any is converted. */
template <bool BF16> struct dq_shape {
  static constexpr int V = BF16 ? 8 : 4, NW = V / 4;
};
constexpr int DQ_U = 4;

template <bool ROWDIR, bool BF16>
__global__ void __launch_bounds__(256) dequantize_vec_kernel(const dequant_vec_args a) {
  constexpr int V = dq_shape<BF16>::V, NW = dq_shape<BF16>::NW;
  const int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  int64_t r = g / a.cpr, cc = g - r * a.cpr; /* one division; the loop steps incrementally */
  while (r < a.rows) {
    uint32_t w[DQ_U][NW], sb[DQ_U][NW];
    float s_row[DQ_U];
    int64_t base[DQ_U];
#pragma unroll
    for (int u = 0; u < DQ_U; ++u) {
      base[u] = -1;
      s_row[u] = 0.f;
#pragma unroll
      for (int k = 0; k < NW; ++k) w[u][k] = sb[u][k] = 0u;
      if (r < a.rows) {
        const int64_t c = cc * V;
        base[u] = r * a.cols + c;
        if (NW == 2) {
          const uint2 q2 = __ldg(reinterpret_cast<const uint2 *>(a.q + base[u]));
          w[u][0] = q2.x, w[u][NW - 1] = q2.y;
        } else {
          w[u][0] = __ldg(reinterpret_cast<const uint32_t *>(a.q + base[u]));
        }
        if (ROWDIR) {
          s_row[u] = mxf_e8m0_to_f32(__ldg(a.s + r * a.sb_row + (c >> 5))); /* V codes, one 32-block */
        } else if (NW == 2) {
          const uint2 s2 = __ldg(reinterpret_cast<const uint2 *>(a.s + (r >> 5) * a.cols + c));
          sb[u][0] = s2.x, sb[u][NW - 1] = s2.y;
        } else {
          sb[u][0] = __ldg(reinterpret_cast<const uint32_t *>(a.s + (r >> 5) * a.cols + c));
        }
      }
      cc += a.step_c;
      r += a.step_r;
      if (cc >= a.cpr) {
        cc -= a.cpr;
        ++r;
      }
    }
#pragma unroll
    for (int u = 0; u < DQ_U; ++u) {
      if (base[u] < 0) continue;
      float v[V];
      dq_words<ROWDIR, NW>(w[u], sb[u], s_row[u], v);
      if (BF16) {
        uint32_t h[4];
#pragma unroll
        for (int k = 0; k < 4; ++k)
          h[k] = mxf_f32x2_to_bf16x2(v[2 * k], v[2 * k + 1]); /* NaN bits may differ: SPEC §0 */
        *reinterpret_cast<uint4 *>(static_cast<uint16_t *>(a.y) + base[u]) = make_uint4(h[0], h[1], h[2], h[3]);
      } else {
        *reinterpret_cast<float4 *>(static_cast<float *>(a.y) + base[u]) = make_float4(v[0], v[1], v[2], v[3]);
      }
    }
  }
}

/* CTAs that fill every SM once (grid-stride kernels), at most `work` of them. */
template <typename K> unsigned full_grid(K kernel, int threads, int num_sms, int64_t work) {
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0) != cudaSuccess || per_sm < 1) {
    (void)cudaGetLastError(); /* not sticky: fall back to a plain guess */
    per_sm = 2;
  }
  int64_t grid = (int64_t)(num_sms > 0 ? num_sms : 132) * per_sm;
  if (grid > work) grid = work;
  return (unsigned)(grid > 0 ? grid : 1);
}

template <typename T, bool VEC>
void launch_quant(unsigned dirs, int num_sms, const quant_args &a, cudaStream_t s) {
  void (*k)(quant_args);
  if (dirs == (MXF_QUANT_ROWS | MXF_QUANT_COLS)) k = quantize_kernel<T, VEC, true, true>;
  else if (dirs == MXF_QUANT_ROWS) k = quantize_kernel<T, VEC, true, false>;
  else k = quantize_kernel<T, VEC, false, true>;
  k<<<full_grid(k, Q_THREADS, num_sms, a.tiles), Q_THREADS, 0, s>>>(a);
}

bool aligned(const void *p, uintptr_t a) { return p == nullptr || (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

} /* namespace */

extern "C" mxf_status mxf_portable_quantize_launch(const mxf_quant_problem *p, const mxf_quantize_args *args,
                                                   cudaStream_t stream, int num_sms) {
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
  const int64_t tiles_c = (p->cols + Q_COLS - 1) / Q_COLS, tiles_r = (p->rows + Q_ROWS - 1) / Q_ROWS;
  if (tiles_c * tiles_r >= (1ll << 31))
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cuda backend: quantize of %lld x %lld values is too large",
                         (long long)p->rows, (long long)p->cols);
  a.tiles_c = (int)tiles_c;
  a.tiles = (int)(tiles_c * tiles_r);
  const bool rows = (p->directions & MXF_QUANT_ROWS) != 0, cols = (p->directions & MXF_QUANT_COLS) != 0;
  /* vector accesses: every Q_VALS-column chunk starts 16-byte aligned in x and 8-byte
   * aligned in the codes (cols % Q_VALS == 0 and aligned bases); scale bytes are stored
   * one by one */
  const bool vec = p->cols % Q_VALS == 0 && aligned(args->x, 16) && (!rows || aligned(args->q_row, 8)) &&
                   (!cols || aligned(args->q_col, 8));
  const unsigned dirs = p->directions & (MXF_QUANT_ROWS | MXF_QUANT_COLS);
  if (p->x == MXF_F32) {
    if (vec) launch_quant<float, true>(dirs, num_sms, a, stream);
    else launch_quant<float, false>(dirs, num_sms, a, stream);
  } else {
    if (vec) launch_quant<uint16_t, true>(dirs, num_sms, a, stream);
    else launch_quant<uint16_t, false>(dirs, num_sms, a, stream);
  }
  MXF_CUDA_CHECK_LAUNCH("quantize kernel launch");
  return MXF_OK;
}

extern "C" mxf_status mxf_portable_dequantize_launch(const mxf_quant_problem *p, const mxf_dequantize_args *args,
                                                     cudaStream_t stream, int num_sms) {
  if (p->rows <= 0 || p->cols <= 0) return MXF_OK;
  const bool bf16 = p->x == MXF_BF16, rowdir = (p->directions & MXF_QUANT_ROWS) != 0;
  const int64_t sms = num_sms > 0 ? num_sms : 132;
  if (p->cols % 16 == 0 && aligned(args->q, 16) && aligned(args->y, 16) && (rowdir || aligned(args->s, 16))) {
    dequant_vec_args a;
    a.q = static_cast<const uint8_t *>(args->q);
    a.s = static_cast<const uint8_t *>(args->s);
    a.y = args->y;
    a.rows = p->rows;
    a.cols = p->cols;
    a.sb_row = (p->cols + 31) / 32;
    a.cpr = p->cols / (bf16 ? dq_shape<true>::V : dq_shape<false>::V);
    void (*k)(dequant_vec_args);
    if (rowdir) k = bf16 ? dequantize_vec_kernel<true, true> : dequantize_vec_kernel<true, false>;
    else k = bf16 ? dequantize_vec_kernel<false, true> : dequantize_vec_kernel<false, false>;
    const unsigned blocks = full_grid(k, 256, num_sms, (a.rows * a.cpr / DQ_U + 255) / 256);
    const int64_t stride = (int64_t)blocks * 256;
    a.step_r = stride / a.cpr;
    a.step_c = stride % a.cpr;
    k<<<blocks, 256, 0, stream>>>(a);
    MXF_CUDA_CHECK_LAUNCH("dequantize kernel launch");
    return MXF_OK;
  }
  /* misaligned pointers or cols % 16 != 0: the elementwise kernel */
  dequant_args a;
  a.q = static_cast<const uint8_t *>(args->q);
  a.s = static_cast<const uint8_t *>(args->s);
  a.y = args->y;
  a.rows = p->rows;
  a.cols = p->cols;
  a.sb_row = (p->cols + 31) / 32;
  a.groups_per_row = (p->cols + 3) / 4;
  a.groups = a.rows * a.groups_per_row;
  const bool vec = p->cols % 4 == 0 && aligned(args->q, 4) && aligned(args->y, bf16 ? 8 : 16);
  int64_t blocks = (a.groups + 255) / 256;
  const int64_t cap = sms * 16;
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
