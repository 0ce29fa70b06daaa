/*
 * sm90_host.h — host-side helpers shared by the Hopper (sm_90a) launch code:
 *   encode_tiled_fn / get_encode_tiled()  the driver's cuTensorMapEncodeTiled, looked up
 *                                         once per translation unit through the runtime's
 *                                         entry-point query (no -lcuda needed); nullptr
 *                                         when the driver does not offer it.
 *   set_smem_attr<K>(bytes)               allows kernel K `bytes` of dynamic shared memory,
 *                                         once per kernel (later calls return at once).
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
  static encode_tiled_fn fn = nullptr;
  if (!fn) {
    void *ptr = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &q) ==
            cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<encode_tiled_fn>(ptr);
    else
      (void)cudaGetLastError();
  }
  return fn;
}

template <auto K> static cudaError_t set_smem_attr(int bytes) {
  static int done = 0;
  if (done) return cudaSuccess;
  cudaError_t e = cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess) done = 1;
  return e;
}

} /* namespace mxf_sm90 */
#endif
