/*
 * proj_rope_sm90.cu — projection GEMM + RoPE + dual MXFP8 (SPEC §2) for Hopper (sm_90a):
 * TMA + mbarrier pipeline, wgmma m64n192k16 (bf16 -> f32), persistent grid, the whole
 * epilogue inside the CTA.
 *
 * Scope (mxf_sm90_proj_rope_supports): D = 192 (one head = one wgmma N), any rope split,
 * any T >= 1, K % 8 == 0 (TMA row strides are multiples of 16 bytes), any H, both w
 * orientations, bf16 or MXFP8 inputs, the fp32-epilogue flag. Tensors read by TMA must be
 * 16-byte aligned (mxf_sm90_proj_rope_args_ok); otherwise the op file runs the portable
 * kernel.
 *
 * MXFP8 inputs: a first launch dequantizes x and w exactly into bf16 copies in the
 * workspace (code * 2^(s-127), exact for scale bytes in SPEC §1.2's window [16, 232];
 * below it values under 2^-126 round to bf16's subnormal grid), then the bf16 kernel runs
 * on them. (An in-mainloop conversion would save that pass; see bench/NOTES.md.)
 *
 * The kernel: one CTA per SM, 384 threads, tiles of 128 tokens x one head.
 *   warpgroup 0   producer: one thread issues the TMA loads of x (128 x 64 k) and w
 *                 (192 x 64 k, or 64 k x 192 in three 64-column boxes) into a 3-stage ring
 *                 (full/empty mbarriers); setmaxnreg 40.
 *   warpgroups 1,2 consumers, 64 tokens each, setmaxnreg 232:
 *     mainloop: per stage 4 wgmma m64n192k16, A and B from 128B-swizzled shared memory;
 *       the out-in weight (H*D, K) is a K-major B, the in-out (K, H*D) an MN-major B
 *       (descriptor LBO = 8 KB between 64-column boxes, SBO = 1 KB between 8-k groups,
 *       transpose bit set). One wgmma group in flight; a stage is released once the
 *       group after it was issued and the one reading it completed.
 *     epilogue: thread (warp w, lane l) holds rows 16w + l/4 (+8) and the column pairs
 *       (8j + 2(l%4), +1), so each interleaved RoPE pair sits in one thread. Staging
 *       (bf16 rounding unless fp32 epilogue) and RoPE (__fmul_rn/__fsub_rn/__fadd_rn) are
 *       applied in registers and the f32 results written to a 128 x 200 shared tile Y;
 *       then all 256 consumer threads quantize Y in both directions with formats.h's rule
 *       (rows: 8 threads per 32-column block, xor-shuffle amax; columns: one thread per
 *       32-token block and 4 columns) and store codes and scales with 4-byte coalesced
 *       stores. The producer keeps prefetching the next tile meanwhile.
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/proj_epilogue.cuh"
#include "cuda/sm90/sm90_host.h"
#include "cuda/sm90/sm90_ops.h"
#include "cuda/sm90/sm90_ptx.cuh"

namespace mxf_sm90_proj {

using namespace mxf_sm90;

constexpr int BM = 128;   /* tokens per tile */
constexpr int BN = 192;   /* one head */
constexpr int BK = 64;    /* k per stage (128 bytes of bf16: one swizzle row) */
constexpr int NS = 3;     /* stages */
constexpr int THREADS = 384;
constexpr int A_BYTES = BM * BK * 2;
constexpr int B_BYTES = BN * BK * 2;
constexpr int STAGE = A_BYTES + B_BYTES;
constexpr int SD = BN + 8; /* Y row stride in floats: conflict-free float2 staging writes */
constexpr int Y_BYTES = BM * SD * 4;
constexpr int SMEM_BYTES = NS * STAGE + Y_BYTES + 2 * NS * 8 + 1024;
static_assert(A_BYTES % 1024 == 0 && STAGE % 1024 == 0, "1024-byte aligned swizzled tiles");
static_assert(SMEM_BYTES <= 227 * 1024, "fits one SM");

/* ------------------------------------------------------------ kernel arguments */
struct kargs {
  int t, k, h, hd, rope, nope;
  int tiles_m, tiles, nks;
  int fp32_epi, ovec;
  const uint16_t *cosv, *sinv;
  uint8_t *q_row, *s_row, *q_col, *s_col;
};

/* Both quantization directions of the staged tile Y (256 consumer threads, ct = 0..255). */
__device__ __forceinline__ void quantize_tile(const kargs &a, const float *sy, int m0, int h, int ct) {
  const int lane = ct & 31;
  constexpr int D4 = BN / 4;
  /* rows: 8 threads x 4 columns per 32-column block; BM * D4 = 24 * 256 */
#pragma unroll 4
  for (int e = ct; e < BM * D4; e += 256) {
    const int row = e / D4, c4 = e - row * D4;
    mxf_proj_quant_row4(a, sy, SD, BN, m0, h, row, c4, lane);
  }
  /* columns: one thread per (32-token block, 4 columns): 4 x 48 = 192 items */
  if (ct < (BM / 32) * D4) {
    const int rb = ct / D4, c4 = ct - rb * D4;
    const int64_t tb0 = (int64_t)m0 + rb * 32;
    if (tb0 < a.t) {
      const int nrows = a.t - tb0 < 32 ? (int)(a.t - tb0) : 32;
      const float *col = sy + (rb * 32) * SD + 4 * c4;
      mxf_proj_col4 cs = {}; /* amaxes start at 0 */
#pragma unroll 8
      for (int i = 0; i < 32; ++i) { /* rows past T hold 0 */
        const float4 v = *reinterpret_cast<const float4 *>(col + i * SD);
        cs.add(v);
      }
      cs.scales();
      uint8_t *qc = a.q_col + (tb0 * a.h + h) * BN + 4 * c4;
      const int64_t rstride = (int64_t)a.h * BN;
#pragma unroll 4
      for (int i = 0; i < nrows; ++i) {
        const float4 v = *reinterpret_cast<const float4 *>(col + i * SD);
        const uint32_t codes = cs.encode(v);
        mxf_proj_st_u32(qc + i * rstride, codes, a.ovec);
      }
      mxf_proj_st_u32(a.s_col + ((tb0 >> 5) * a.h + h) * BN + 4 * c4, cs.scale_word(), a.ovec);
    }
  }
}

/* ------------------------------------------------------------ the kernel */
template <int W_OUT_IN>
__global__ void __launch_bounds__(THREADS, 1)
    proj_kernel(const __grid_constant__ CUtensorMap tma_x, const __grid_constant__ CUtensorMap tma_w, const kargs a) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t *base = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  float *sy = reinterpret_cast<float *>(base + NS * STAGE);
  uint64_t *full = reinterpret_cast<uint64_t *>(base + NS * STAGE + Y_BYTES);
  uint64_t *empty = full + NS;
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int i = 0; i < NS; ++i) {
      mbar_init(smem_addr(full + i), 1);
      mbar_init(smem_addr(empty + i), 8); /* one arrival per consumer warp */
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (tid < 128) {
    /* ---------------- producer */
    setmaxnreg_dec<40>();
    if (tid == 0) {
      tma_prefetch_desc(&tma_x);
      tma_prefetch_desc(&tma_w);
      int slot = 0;
      uint32_t phase = 0;
      for (int tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
        const int mt = tile % a.tiles_m, h = tile / a.tiles_m;
        for (int ks = 0; ks < a.nks; ++ks) {
          mbar_wait(smem_addr(empty + slot), phase ^ 1u);
          const uint32_t fb = smem_addr(full + slot);
          mbar_arrive_expect_tx(fb, STAGE);
          uint8_t *sa = base + slot * STAGE, *sb = sa + A_BYTES;
          tma_load_3d(smem_addr(sa), &tma_x, ks * BK, mt * BM, 0, fb);
          if (W_OUT_IN) {
            tma_load_3d(smem_addr(sb), &tma_w, ks * BK, h * BN, 0, fb);
          } else {
#pragma unroll
            for (int i = 0; i < 3; ++i) tma_load_3d(smem_addr(sb + i * 8192), &tma_w, h * BN + 64 * i, ks * BK, 0, fb);
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

  /* ---------------- consumers */
  setmaxnreg_inc<232>();
  const int ct = tid - 128, wg = ct >> 7, lane = ct & 31, wq = (ct >> 5) & 3;
  float acc[96];
  int slot = 0;
  uint32_t phase = 0;
  for (int tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
    const int mt = tile % a.tiles_m, h = tile / a.tiles_m;
    int prev = -1;
    for (int ks = 0; ks < a.nks; ++ks) {
      mbar_wait(smem_addr(full + slot), phase);
      const uint32_t sa = smem_addr(base + slot * STAGE) + wg * 64 * 128, sb = smem_addr(base + slot * STAGE + A_BYTES);
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
      if (prev >= 0 && lane == 0) mbar_arrive(smem_addr(empty + prev));
      prev = slot;
      if (++slot == NS) {
        slot = 0;
        phase ^= 1u;
      }
    }
    wgmma_wait<0>();
    if (prev >= 0 && lane == 0) mbar_arrive(smem_addr(empty + prev));

    /* ---- epilogue */
    const int m0 = mt * BM;
    named_bar_sync(1, 256); /* the previous tile's Y is fully read */
    const int r0 = wg * 64 + wq * 16 + (lane >> 2), c0 = 2 * (lane & 3);
#pragma unroll
    for (int j = 0; j < 24; ++j) {
      mxf_proj_put_pair<true>(a, sy, SD, m0, r0, 8 * j + c0, acc[4 * j], acc[4 * j + 1]);
      mxf_proj_put_pair<true>(a, sy, SD, m0, r0 + 8, 8 * j + c0, acc[4 * j + 2], acc[4 * j + 3]);
    }
    named_bar_sync(1, 256);
    quantize_tile(a, sy, m0, h, ct);
  }
}

/* ------------------------------------------------------------ MXFP8 -> bf16 (exact) */
/* (rows, cols) e4m3 codes -> bf16, 16 consecutive codes per step. ROWBLK: the scale of
 * (r, c) is s[r * s_rs + c / 32] (x, out-in w: one scale per 16 codes); else it is
 * s[(r / 32) * s_rs + c] (in-out w: 16 consecutive scales). code * 2^(s-127) is exact in
 * f32; its bf16 rounding is exact inside SPEC §1.2's window. */
template <bool ROWBLK>
__global__ void __launch_bounds__(256) dequant_bf16_kernel(const uint8_t *q, const uint8_t *s, uint16_t *y, int64_t rows,
                                                           int64_t cols, int64_t s_rs) {
  __shared__ float lut[256];
  lut[threadIdx.x] = mxf_e4m3_to_f32((uint8_t)threadIdx.x);
  __syncthreads();
  const int64_t per_row = cols / 16, groups = rows * per_row;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += stride) {
    const int64_t r = g / per_row, c = (g - r * per_row) * 16;
    const uint4 v = __ldg(reinterpret_cast<const uint4 *>(q + r * cols + c));
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    float sc[16];
    if (ROWBLK) {
      const float f = mxf_e8m0_to_f32(s[r * s_rs + (c >> 5)]);
#pragma unroll
      for (int e = 0; e < 16; ++e) sc[e] = f;
    } else {
      const uint4 sv = __ldg(reinterpret_cast<const uint4 *>(s + (r >> 5) * s_rs + c));
      const uint32_t sw[4] = {sv.x, sv.y, sv.z, sv.w};
#pragma unroll
      for (int e = 0; e < 16; ++e) sc[e] = mxf_e8m0_to_f32((uint8_t)(sw[e >> 2] >> (8 * (e & 3))));
    }
    uint32_t o[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int e0 = 2 * i, e1 = 2 * i + 1;
      const float f0 = lut[(w[e0 >> 2] >> (8 * (e0 & 3))) & 0xFFu] * sc[e0];
      const float f1 = lut[(w[e1 >> 2] >> (8 * (e1 & 3))) & 0xFFu] * sc[e1];
      o[i] = (uint32_t)mxf_f32_to_bf16(f0) | (uint32_t)mxf_f32_to_bf16(f1) << 16;
    }
    uint4 *d = reinterpret_cast<uint4 *>(y + r * cols + c);
    d[0] = make_uint4(o[0], o[1], o[2], o[3]);
    d[1] = make_uint4(o[4], o[5], o[6], o[7]);
  }
}

/* ------------------------------------------------------------ host side */
/* A 2-D bf16 matrix (rows, inner) as a 3-D map with a unit batch, boxes of (64, box_rows),
 * 128-byte swizzle; out-of-range elements read as zero. */
static CUresult make_map(encode_tiled_fn enc, CUtensorMap *map, const void *ptr, int64_t inner, int64_t rows,
                         int box_rows) {
  const int64_t row_bytes = inner * 2;
  cuuint64_t dims[3] = {(cuuint64_t)inner, (cuuint64_t)rows, 1};
  cuuint64_t strides[2] = {(cuuint64_t)row_bytes, (cuuint64_t)(row_bytes * rows)};
  cuuint32_t box[3] = {64, (cuuint32_t)box_rows, 1};
  cuuint32_t estr[3] = {1, 1, 1};
  return enc(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void *>(ptr), dims, strides, box, estr,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

static size_t round256(size_t n) { return (n + 255) & ~(size_t)255; }

static bool aligned16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

} /* namespace mxf_sm90_proj */

using namespace mxf_sm90_proj;

extern "C" int mxf_sm90_proj_rope_supports(const mxf_proj_problem *p) {
  if (p->d != BN || p->t < 1 || p->h < 1 || p->k < 1) return 0;
  if (p->k % 8 != 0) return 0;
  if (p->t >= (1ll << 31) || p->k >= (1ll << 31) || p->h * p->d >= (1ll << 31)) return 0;
  if ((p->t + BM - 1) / BM * p->h >= (1ll << 31)) return 0;
  return 1;
}

extern "C" size_t mxf_sm90_proj_rope_workspace(const mxf_proj_problem *p) {
  if (!p->mxfp8) return 0;
  return round256((size_t)p->t * (size_t)p->k * 2) + round256((size_t)p->h * (size_t)p->d * (size_t)p->k * 2);
}

extern "C" int mxf_sm90_proj_rope_args_ok(const mxf_proj_problem *p, const mxf_proj_rope_args *args, const void *ws) {
  if (p->mxfp8)
    return aligned16(args->x) && aligned16(args->w) && (p->w_out_in || aligned16(args->w_scale)) && ws != nullptr &&
           aligned16(ws);
  return aligned16(args->x) && aligned16(args->w);
}

extern "C" mxf_status mxf_sm90_proj_rope_launch(const mxf_proj_problem *p, const mxf_proj_rope_args *args, void *ws,
                                                size_t ws_size, cudaStream_t stream, int num_sms) {
  if (!mxf_sm90_proj_rope_supports(p))
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cuda backend: the sm_90a proj_rope kernel does not run this problem");
  const size_t need = mxf_sm90_proj_rope_workspace(p);
  if (need && (!ws || ws_size < need))
    return mxf_set_error(MXF_ERR_INVALID_VALUE, "proj_rope: workspace of %zu bytes; the sm90 kernel needs %zu",
                         ws ? ws_size : (size_t)0, need);
  encode_tiled_fn enc = get_encode_tiled();
  if (!enc) return mxf_set_error(MXF_ERR_CUDA, "cuda backend: cuTensorMapEncodeTiled is not available from the driver");
  const int64_t hd = p->h * p->d;
  const void *x = args->x, *w = args->w;
  cudaError_t e;
  if (p->mxfp8) {
    uint16_t *xb = static_cast<uint16_t *>(ws);
    uint16_t *wb = reinterpret_cast<uint16_t *>(static_cast<uint8_t *>(ws) + round256((size_t)p->t * (size_t)p->k * 2));
    const int64_t sms = num_sms > 0 ? num_sms : 132;
    const int64_t gx = (p->t * (p->k / 16) + 255) / 256, gw = (hd * (p->k / 16) + 255) / 256;
    const uint8_t *xq = static_cast<const uint8_t *>(args->x), *xsc = static_cast<const uint8_t *>(args->x_scale);
    const uint8_t *wq = static_cast<const uint8_t *>(args->w), *wsc = static_cast<const uint8_t *>(args->w_scale);
    dequant_bf16_kernel<true><<<(unsigned)(gx < sms * 8 ? gx : sms * 8), 256, 0, stream>>>(xq, xsc, xb, p->t, p->k,
                                                                                           p->k / 32);
    if (p->w_out_in)
      dequant_bf16_kernel<true><<<(unsigned)(gw < sms * 8 ? gw : sms * 8), 256, 0, stream>>>(wq, wsc, wb, hd, p->k,
                                                                                             p->k / 32);
    else /* (K, H*D) codes, (K/32, H*D) scales */
      dequant_bf16_kernel<false><<<(unsigned)(gw < sms * 8 ? gw : sms * 8), 256, 0, stream>>>(wq, wsc, wb, p->k, hd, hd);
    e = cudaGetLastError();
    if (e != cudaSuccess)
      return mxf_set_error(MXF_ERR_CUDA, "cuda backend: sm90 proj_rope dequantization: %s", cudaGetErrorString(e));
    x = xb;
    w = wb;
  }
  CUtensorMap map_x, map_w;
  CUresult r = make_map(enc, &map_x, x, p->k, p->t, BM);
  if (r == CUDA_SUCCESS)
    r = p->w_out_in ? make_map(enc, &map_w, w, p->k, hd, BN) : make_map(enc, &map_w, w, hd, p->k, BK);
  if (r != CUDA_SUCCESS)
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cuda backend: cannot describe x/w to the TMA unit (CUresult %d)", (int)r);

  kargs a;
  a.t = (int)p->t;
  a.k = (int)p->k;
  a.h = (int)p->h;
  a.hd = (int)hd;
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
  a.ovec = ((reinterpret_cast<uintptr_t>(a.q_row) | reinterpret_cast<uintptr_t>(a.q_col) |
             reinterpret_cast<uintptr_t>(a.s_col)) & 3u) == 0;
  const int sms = num_sms > 0 ? num_sms : 132;
  const unsigned grid = (unsigned)(a.tiles < sms ? a.tiles : sms);
  if (p->w_out_in) {
    e = set_smem_attr<proj_kernel<1>>(SMEM_BYTES);
    if (e == cudaSuccess) proj_kernel<1><<<grid, THREADS, SMEM_BYTES, stream>>>(map_x, map_w, a);
  } else {
    e = set_smem_attr<proj_kernel<0>>(SMEM_BYTES);
    if (e == cudaSuccess) proj_kernel<0><<<grid, THREADS, SMEM_BYTES, stream>>>(map_x, map_w, a);
  }
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) return mxf_set_error(MXF_ERR_CUDA, "cuda backend: sm90 proj_rope launch: %s", cudaGetErrorString(e));
  return MXF_OK;
}
