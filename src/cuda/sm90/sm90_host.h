/*
 * sm90_host.h — host-side helpers shared by the Hopper (sm_90a) launch code:
 *   encode_tiled_fn / get_encode_tiled()  the driver's cuTensorMapEncodeTiled, looked up
 *                                         once per translation unit through the runtime's
 *                                         entry-point query (no -lcuda needed); nullptr
 *                                         when the driver does not offer it.
 *   make_map_codes(...)                   a TMA map of raw 8-bit / packed 4-bit codes.
 *   make_map_bf16(...)                    a TMA map of a bf16 matrix (batches of rows).
 */
#ifndef MXF_SM90_HOST_H
#define MXF_SM90_HOST_H

#include <cuda.h>
#include <cuda_runtime.h>

namespace mxf_sm90 {

typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                     const cuuint64_t *, const cuuint32_t *, const cuuint32_t *,
                                     CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                     CUtensorMapFloatOOBfill);

static inline encode_tiled_fn get_encode_tiled(void) {
  /* a function-local static: initialized once, thread-safely (C++11) */
  static const encode_tiled_fn fn = [] {
    void *ptr = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &q) ==
            cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      return reinterpret_cast<encode_tiled_fn>(ptr);
    (void)cudaGetLastError();
    return static_cast<encode_tiled_fn>(nullptr);
  }();
  return fn;
}

/* 3-D map (k bytes, rows, batch) of raw codes read as bytes, boxes of (rb, box_rows, 1)
 * with the swizzle that matches rb (64: 64B, 32: 32B); rows/batches beyond the tensor and
 * k beyond kbytes are zero-filled. Unused strides (rows == 1, l == 1) are made valid. */
static inline CUresult make_map_codes(encode_tiled_fn enc, CUtensorMap *map, const void *base, int64_t kbytes,
                                      int64_t rows, int64_t l, int64_t row_stride, int64_t batch_stride, int rb,
                                      int box_rows) {
  if (rows == 1) row_stride = (kbytes + 15) / 16 * 16;
  if (l == 1) batch_stride = (row_stride * rows + 15) / 16 * 16;
  cuuint64_t dims[3] = {(cuuint64_t)kbytes, (cuuint64_t)rows, (cuuint64_t)l};
  cuuint64_t strides[2] = {(cuuint64_t)row_stride, (cuuint64_t)batch_stride};
  cuuint32_t box[3] = {(cuuint32_t)rb, (cuuint32_t)box_rows, 1};
  cuuint32_t estr[3] = {1, 1, 1};
  return enc(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<void *>(base), dims, strides, box, estr,
             CU_TENSOR_MAP_INTERLEAVE_NONE, rb == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_32B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

/* l batches of a (rows, inner) bf16 matrix, packed, as a 3-D map with boxes of
 * (64, box_rows, 1) and the 128-byte swizzle; out-of-range elements read as zero. */
static inline CUresult make_map_bf16(encode_tiled_fn enc, CUtensorMap *map, const void *ptr, int64_t inner,
                                     int64_t rows, int64_t l, int box_rows) {
  const int64_t row_bytes = inner * 2;
  cuuint64_t dims[3] = {(cuuint64_t)inner, (cuuint64_t)rows, (cuuint64_t)l};
  cuuint64_t strides[2] = {(cuuint64_t)row_bytes, (cuuint64_t)(row_bytes * rows)};
  cuuint32_t box[3] = {64, (cuuint32_t)box_rows, 1};
  cuuint32_t estr[3] = {1, 1, 1};
  return enc(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void *>(ptr), dims, strides, box, estr,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

/* l batches of a (rows, cols) matrix of 16-bit elements (bf16 or f16), row and batch
 * strides in elements (multiples of 8, the base 16-byte aligned), as a 3-D map with boxes
 * of (64, 64, 1) and the 128-byte swizzle; a store writes no element outside the matrix.
 * Unused strides (rows == 1, l == 1) are made valid. */
static inline CUresult make_map_c16(encode_tiled_fn enc, CUtensorMap *map, void *ptr, int64_t cols, int64_t rows,
                                    int64_t l, int64_t row_stride, int64_t batch_stride, bool bf16) {
  if (rows == 1) row_stride = (cols + 7) / 8 * 8;
  if (l == 1) batch_stride = row_stride * rows;
  cuuint64_t dims[3] = {(cuuint64_t)cols, (cuuint64_t)rows, (cuuint64_t)l};
  cuuint64_t strides[2] = {(cuuint64_t)row_stride * 2, (cuuint64_t)batch_stride * 2};
  cuuint32_t box[3] = {64, 64, 1};
  cuuint32_t estr[3] = {1, 1, 1};
  return enc(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3, ptr, dims, strides, box,
             estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

} /* namespace mxf_sm90 */
#endif
