/*
 * cuda_util.h — host helpers shared by the CUDA op files (C++ / .cu only):
 *   MXF_CUDA_TRY(expr, what)  turns a failed CUDA runtime call into MXF_ERR_CUDA with the
 *                             CUDA error string, recorded via mxf_set_error, and returns it
 *   MXF_CUDA_CHECK_LAUNCH(what) the same for the last kernel launch (cudaGetLastError)
 *   mxf_cuda_device_info()    compute capability and SM count of a device, queried once
 *                             per device and cached (plans ask it on every creation; the
 *                             property calls are slow and must stay out of run paths)
 *   mxf_cuda_plan_device()    the plan preamble of every op: that info for the plan's
 *                             device, refusing compute capability below 8.0
 */
#ifndef MXF_CUDA_UTIL_H
#define MXF_CUDA_UTIL_H

#include <cuda_runtime.h>

#include "core/internal.h"

#define MXF_CUDA_TRY(expr, what)                                                                   \
  do {                                                                                             \
    cudaError_t mxf_cuda_err_ = (expr);                                                            \
    if (mxf_cuda_err_ != cudaSuccess)                                                              \
      return mxf_set_error(MXF_ERR_CUDA, "cuda backend: %s: %s", (what),                         \
                           cudaGetErrorString(mxf_cuda_err_));                                     \
  } while (0)

#define MXF_CUDA_CHECK_LAUNCH(what) MXF_CUDA_TRY(cudaGetLastError(), (what))

#define MXF_CUDA_MAX_DEVICES 64

typedef struct mxf_cuda_device_info_t {
  int cc_major, cc_minor; /* compute capability */
  int cc;                 /* 10 * major + minor, e.g. 90 */
  int sm_count;
} mxf_cuda_device_info_t;

/* Properties of CUDA device `ordinal` (0-based), cached after the first query. Racing
 * first queries from several threads store the same values, so plain atomics suffice. */
inline mxf_status mxf_cuda_device_info(int ordinal, mxf_cuda_device_info_t *out) {
  /* packed (valid << 31 | cc << 20 | sm_count); 0 = not yet queried */
  static unsigned int cache[MXF_CUDA_MAX_DEVICES];
  if (ordinal < 0)
    return mxf_set_error(MXF_ERR_INVALID_VALUE, "cuda backend: bad device ordinal %d", ordinal);
  unsigned int packed = ordinal < MXF_CUDA_MAX_DEVICES ? __atomic_load_n(&cache[ordinal], __ATOMIC_ACQUIRE) : 0u;
  if (packed == 0u) {
    int major = 0, minor = 0, sms = 0;
    MXF_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal),
                 "cannot query the compute capability");
    MXF_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ordinal),
                 "cannot query the compute capability");
    MXF_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ordinal),
                 "cannot query the SM count");
    packed = 0x80000000u | ((unsigned)(major * 10 + minor) & 0x7FFu) << 20 | ((unsigned)sms & 0xFFFFFu);
    if (ordinal < MXF_CUDA_MAX_DEVICES) __atomic_store_n(&cache[ordinal], packed, __ATOMIC_RELEASE);
  }
  int cc = (int)((packed >> 20) & 0x7FFu);
  out->cc = cc;
  out->cc_major = cc / 10;
  out->cc_minor = cc % 10;
  out->sm_count = (int)(packed & 0xFFFFFu);
  return MXF_OK;
}

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
