/*
 * c_store.cuh — one or two consecutive elements of C, encoded in C's dtype with
 * formats.h (SPEC §0 rounding), for the kernels that store C element-wise.
 */
#ifndef MXF_C_STORE_CUH
#define MXF_C_STORE_CUH

#include <stdint.h>

#include "core/internal.h"

/* Element idx (in values) of C; e2m1: other threads may own the other nibble of the byte. */
__device__ __forceinline__ void mxf_c_store_one(uint8_t *c, int dtype, int64_t idx, float x) {
  switch (dtype) {
  case MXF_F32: reinterpret_cast<float *>(c)[idx] = x; break;
  case MXF_F16: reinterpret_cast<uint16_t *>(c)[idx] = mxf_f32_to_f16(x); break;
  case MXF_BF16: reinterpret_cast<uint16_t *>(c)[idx] = mxf_f32_to_bf16(x); break;
  case MXF_E4M3: c[idx] = mxf_f32_to_e4m3(x); break;
  case MXF_E5M2: c[idx] = mxf_f32_to_e5m2(x); break;
  default: { /* e2m1: other threads may own the other nibble of this byte */
    const uint32_t code = mxf_f32_to_e2m1(x);
    uintptr_t addr = reinterpret_cast<uintptr_t>(c) + (uintptr_t)(idx >> 1);
    unsigned int *word = reinterpret_cast<unsigned int *>(addr & ~(uintptr_t)3);
    const int sh = (int)(addr & 3u) * 8 + (int)(idx & 1) * 4;
    atomicAnd(word, ~(0xFu << sh));
    atomicOr(word, code << sh);
  }
  }
}


/* (n, n+1) of one row, both inside C; idx even, paired stores allowed. */
__device__ __forceinline__ void mxf_c_store_pair(uint8_t *c, int dtype, int64_t idx, float x0, float x1) {
  switch (dtype) {
  case MXF_F32: *reinterpret_cast<float2 *>(reinterpret_cast<float *>(c) + idx) = make_float2(x0, x1); break;
  case MXF_F16:
    *reinterpret_cast<uint32_t *>(reinterpret_cast<uint16_t *>(c) + idx) =
        (uint32_t)mxf_f32_to_f16(x0) | ((uint32_t)mxf_f32_to_f16(x1) << 16);
    break;
  case MXF_BF16:
    *reinterpret_cast<uint32_t *>(reinterpret_cast<uint16_t *>(c) + idx) =
        (uint32_t)mxf_f32_to_bf16(x0) | ((uint32_t)mxf_f32_to_bf16(x1) << 16);
    break;
  case MXF_E4M3:
    *reinterpret_cast<uint16_t *>(c + idx) = (uint16_t)(mxf_f32_to_e4m3(x0) | (mxf_f32_to_e4m3(x1) << 8));
    break;
  case MXF_E5M2:
    *reinterpret_cast<uint16_t *>(c + idx) = (uint16_t)(mxf_f32_to_e5m2(x0) | (mxf_f32_to_e5m2(x1) << 8));
    break;
  default: c[idx >> 1] = mxf_e2m1_pack(mxf_f32_to_e2m1(x0), mxf_f32_to_e2m1(x1)); break;
  }
}

#endif /* MXF_C_STORE_CUH */
