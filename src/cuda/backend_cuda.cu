/*
 * backend_cuda.cu — the CUDA backend's table: device discovery, workspace memory, and
 * dispatch of each op to its kernels. Host code only; kernels live in portable/ and sm90/.
 *
 * Skeleton: the backend registers itself and answers "not supported yet" for every op.
 */
#include <cuda_runtime.h>
#include <stdio.h>

#include "core/internal.h"

extern "C" {

int mxf_cuda_devices(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError(); /* no driver / no device: not an error for the caller */
    return 0;
  }
  return n;
}

static const char *op_name(mxf_op op) {
  switch (op) {
  case MXF_OP_GEMM_AMAX: return "gemm_amax";
  case MXF_OP_PROJ_ROPE: return "proj_rope";
  case MXF_OP_QUANTIZE: return "quantize";
  case MXF_OP_DEQUANTIZE: return "dequantize";
  }
  return "?";
}

static mxf_status cuda_plan(mxf_plan *plan) {
  return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cuda backend: %s is not supported yet", op_name(plan->op));
}

static mxf_status cuda_run(const mxf_plan *plan, const void *args, void *ws, size_t ws_size, void *stream) {
  return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cuda backend: %s is not supported yet", op_name(plan->op));
}

static void cuda_plan_free(mxf_plan *plan) { (void)plan; }

static mxf_status cuda_alloc(int32_t device, size_t bytes, void **ptr) {
  *ptr = NULL;
  if (bytes == 0) return MXF_OK;
  int prev = 0;
  cudaGetDevice(&prev);
  cudaError_t e = cudaSetDevice(device - 1);
  if (e == cudaSuccess) e = cudaMalloc(ptr, bytes);
  cudaSetDevice(prev);
  if (e != cudaSuccess) {
    *ptr = NULL;
    return mxf_set_error(e == cudaErrorMemoryAllocation ? MXF_ERR_NO_MEMORY : MXF_ERR_CUDA,
                         "cuda backend: cannot allocate %zu bytes on device %d: %s", bytes, device - 1,
                         cudaGetErrorString(e));
  }
  return MXF_OK;
}

static void cuda_free(int32_t device, void *ptr) {
  if (ptr) cudaFree(ptr);
}

const mxf_backend mxf_cuda_backend = {"cuda", cuda_plan, cuda_run, cuda_plan_free, cuda_alloc, cuda_free};

} /* extern "C" */
