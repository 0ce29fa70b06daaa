/*
 * proj_epilogue.cuh — device pieces of the proj_rope epilogue (SPEC §2.3 steps 2-4). The
 * portable kernel stages accumulators into an f32 tile Y (row stride sd) and uses all of
 * them (the sm_90a kernel has its own staging, work split and stores, proj_rope_sm90.cu):
 *   mxf_proj_st_u32     4 code/scale bytes, one 32-bit store when the output allows it
 *   mxf_proj_put_pair   staging (bf16 rounding unless fp32 epilogue) + interleaved RoPE
 *                       (__fmul_rn/__fsub_rn/__fadd_rn: one rounding each, no FMA) of one
 *                       accumulator pair into Y; tokens past T become 0
 *   mxf_proj_quant_row4 one row-direction item: 4 columns of a 32-column block, 8 lanes
 *                       per block (xor-shuffle amax), codes and the block's scale
 *   mxf_proj_col4       column direction: running amax of 4 columns over rows of Y, then
 *                       their 4 scale bytes, inverses and packed scale word
 * The quantization rule itself is formats.h's. A is the kernel's argument struct (fields
 * t, h, rope, nope, fp32_epi, ovec, cosv, sinv, q_row, s_row).
 */
#ifndef MXF_PROJ_EPILOGUE_CUH
#define MXF_PROJ_EPILOGUE_CUH

#include <stdint.h>

#include "formats.h"

__device__ __forceinline__ void mxf_proj_st_u32(uint8_t *p, uint32_t v, int vec) {
  if (vec) {
    *reinterpret_cast<uint32_t *>(p) = v;
  } else {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
  }
}

/* Columns (dcol, dcol + 1) of tile row `row` (token m0 + row). PAIR_STORE writes the two
 * non-RoPE values as one float2 (Y in shared memory with an even row stride). */
template <bool PAIR_STORE, class A>
__device__ __forceinline__ void mxf_proj_put_pair(const A &a, float *sy, int sd, int m0, int row, int dcol, float y0,
                                                  float y1) {
  const int t = m0 + row;
  float *yr = sy + row * sd;
  if (!a.fp32_epi) {
    y0 = mxf_round_bf16(y0);
    y1 = mxf_round_bf16(y1);
  }
  if (dcol < a.nope) {
    const bool in = t < a.t;
    if constexpr (PAIR_STORE) {
      *reinterpret_cast<float2 *>(yr + dcol) = in ? make_float2(y0, y1) : make_float2(0.f, 0.f);
    } else {
      yr[dcol] = in ? y0 : 0.f;
      yr[dcol + 1] = in ? y1 : 0.f;
    }
    return;
  }
  const int j = (dcol - a.nope) >> 1, half = a.rope >> 1;
  float o0 = 0.f, o1 = 0.f;
  if (t < a.t) {
    const uint16_t *ct = a.cosv + (int64_t)t * a.rope, *st = a.sinv + (int64_t)t * a.rope;
    const float c0 = mxf_bf16_to_f32(ct[j]), s0 = mxf_bf16_to_f32(st[j]);
    const float s1 = mxf_bf16_to_f32(st[half + j]), c1 = mxf_bf16_to_f32(ct[half + j]);
    o0 = __fsub_rn(__fmul_rn(y0, c0), __fmul_rn(y1, s0));
    o1 = __fadd_rn(__fmul_rn(y0, s1), __fmul_rn(y1, c1));
  }
  yr[a.nope + j] = o0;
  yr[a.nope + half + j] = o1;
}

/* Row direction, item (row, c4) of Y for head h of width d: all 32 lanes of the warp take
 * part (the shuffle), each 8 consecutive lanes one 32-column block. */
template <class A>
__device__ __forceinline__ void mxf_proj_quant_row4(const A &a, const float *sy, int sd, int d, int m0, int h, int row,
                                                    int c4, int lane) {
  const float4 v = *reinterpret_cast<const float4 *>(sy + row * sd + 4 * c4);
  float m = mxf_amax_step(mxf_amax_step(mxf_amax_step(mxf_amax_step(0.f, v.x), v.y), v.z), v.w);
#pragma unroll
  for (int off = 1; off < 8; off <<= 1) m = mxf_amax_step(m, __shfl_xor_sync(0xFFFFFFFFu, m, off));
  const uint8_t b = mxf_e8m0_from_amax(m);
  const float inv = mxf_e8m0_inv(b);
  const int64_t t = (int64_t)m0 + row;
  if (t < a.t) {
    const uint32_t codes = mxf_mx_encode4(v.x, v.y, v.z, v.w, inv, inv, inv, inv);
    mxf_proj_st_u32(a.q_row + (t * a.h + h) * d + 4 * c4, codes, a.ovec);
    if ((lane & 7) == 0) a.s_row[(t * a.h + h) * (d >> 5) + (c4 >> 3)] = b;
  }
}

/* The kernels keep their own row loops (unrolling and addressing differ per kernel). */
struct mxf_proj_col4 {
  float m0, m1, m2, m3;
  uint8_t b0, b1, b2, b3;
  float i0, i1, i2, i3;

  __device__ __forceinline__ void add(const float4 v) {
    m0 = mxf_amax_step(m0, v.x);
    m1 = mxf_amax_step(m1, v.y);
    m2 = mxf_amax_step(m2, v.z);
    m3 = mxf_amax_step(m3, v.w);
  }
  __device__ __forceinline__ void scales() {
    b0 = mxf_e8m0_from_amax(m0), b1 = mxf_e8m0_from_amax(m1);
    b2 = mxf_e8m0_from_amax(m2), b3 = mxf_e8m0_from_amax(m3);
    i0 = mxf_e8m0_inv(b0), i1 = mxf_e8m0_inv(b1), i2 = mxf_e8m0_inv(b2), i3 = mxf_e8m0_inv(b3);
  }
  __device__ __forceinline__ uint32_t encode(const float4 v) const {
    return mxf_mx_encode4(v.x, v.y, v.z, v.w, i0, i1, i2, i3);
  }
  __device__ __forceinline__ uint32_t scale_word() const {
    return (uint32_t)b0 | (uint32_t)b1 << 8 | (uint32_t)b2 << 16 | (uint32_t)b3 << 24;
  }
};

#endif /* MXF_PROJ_EPILOGUE_CUH */
