/*
 * cuda_util.h — host helpers shared by the CUDA op files (C++ / .cu only):
 *   MXF_CUDA_TRY(expr, what)  turns a failed CUDA runtime call into MXF_ERR_CUDA with the
 *                             CUDA error string, recorded via mxf_set_error, and returns it
 *   MXF_CUDA_CHECK_LAUNCH(what) the same for the last kernel launch (cudaGetLastError)
 *   mxf_cuda_device_info()    compute capability, SM count and shared memory limit of a
 *                             device, queried once per device and cached (plans ask it on
 *                             every creation; the property calls are slow and must stay
 *                             out of run paths)
 *   mxf_cuda_plan_device()    the plan preamble of every op: that info for the plan's
 *                             device, refusing compute capability below 8.0
 *   mxf_set_smem_attr<K>(bytes) allows kernel K `bytes` of dynamic shared memory on the
 *                             current device, once per kernel and device (later calls
 *                             return at once)
 */
#ifndef MXF_CUDA_UTIL_H
#define MXF_CUDA_UTIL_H

#include <cuda_runtime.h>

#include "core/internal.h"

#define MXF_CUDA_TRY(expr, what)                                                                             \
  do {                                                                                                       \
    cudaError_t mxf_cuda_err_ = (expr);                                                                      \
    if (mxf_cuda_err_ != cudaSuccess)                                                                        \
      return mxf_set_error(MXF_ERR_CUDA, "cuda backend: %s: %s", (what), cudaGetErrorString(mxf_cuda_err_)); \
  } while (0)

#define MXF_CUDA_CHECK_LAUNCH(what) MXF_CUDA_TRY(cudaGetLastError(), (what))

/* The attribute belongs to the kernel in the current device's context, so it is set once
 * per (kernel, device): devices 0..63 are remembered in a bit mask (each K always asks for
 * the same bytes, so racing first calls set the same value); others are set every time. */
template <auto K> static cudaError_t mxf_set_smem_attr(int bytes) {
  static unsigned long long done = 0; /* read and written atomically */
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  const unsigned long long bit = dev >= 0 && dev < 64 ? 1ull << dev : 0ull;
  if (bit && (__atomic_load_n(&done, __ATOMIC_ACQUIRE) & bit)) return cudaSuccess;
  e = cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess && bit) __atomic_fetch_or(&done, bit, __ATOMIC_RELEASE);
  return e;
}

typedef struct mxf_cuda_device_info_t {
  int cc_major, cc_minor; /* compute capability */
  int cc;                 /* 10 * major + minor, e.g. 90 */
  int sm_count;
  int max_smem_optin; /* opt-in shared memory per block, bytes */
} mxf_cuda_device_info_t;

/* Facts of CUDA device `ordinal` (0-based), from the runtime on the first request for that
 * device and from a table afterwards (backend_cuda.cu). */
extern "C" MXF_INTERNAL mxf_status mxf_cuda_device_info(int ordinal, mxf_cuda_device_info_t *out);

/* Info of the plan's device for op `op` (its name in messages); compute capability below
 * 8.0 is refused with MXF_ERR_NOT_SUPPORTED (every kernel needs bf16 mma.sync or newer). */
inline mxf_status mxf_cuda_plan_device(const mxf_plan *plan, const char *op, mxf_cuda_device_info_t *info) {
  mxf_status st = mxf_cuda_device_info(plan->device - 1, info);
  if (st != MXF_OK) return st;
  if (info->cc < 80)
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED,
                         "cuda backend: %s needs compute capability 8.0 or newer (device %d is %d.%d)", op,
                         plan->device - 1, info->cc_major, info->cc_minor);
  return MXF_OK;
}

#endif /* MXF_CUDA_UTIL_H */
