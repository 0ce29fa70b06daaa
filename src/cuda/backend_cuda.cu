/*
 * backend_cuda.cu — the CUDA backend's table: device discovery, workspace memory, and
 * dispatch of each op to its kernels. Host code only; kernels live in portable/ and sm90/.
 *
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda/cuda_ops.h"

extern "C" {

int mxf_cuda_devices(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError(); /* no driver / no device: not an error for the caller */
    return 0;
  }
  return n;
}

static mxf_status cuda_plan(mxf_plan *plan) {
  switch (plan->op) {
  case MXF_OP_GEMM_AMAX: return mxf_cuda_gemm_amax_plan(plan);
  case MXF_OP_PROJ_ROPE: return mxf_cuda_proj_rope_plan(plan);
  case MXF_OP_QUANTIZE: return mxf_cuda_quantize_plan(plan);
  case MXF_OP_DEQUANTIZE: return mxf_cuda_dequantize_plan(plan);
  }
  return mxf_set_error(MXF_ERR_INTERNAL, "cuda backend: unknown op %d", (int)plan->op);
}

static mxf_status cuda_run(const mxf_plan *plan, const void *args, void *ws, size_t ws_size, void *stream) {
  int prev = 0;
  cudaError_t e = cudaGetDevice(&prev);
  if (e == cudaSuccess && prev != plan->device - 1) e = cudaSetDevice(plan->device - 1);
  if (e != cudaSuccess)
    return mxf_set_error(MXF_ERR_CUDA, "cuda backend: cannot select device %d: %s", plan->device - 1,
                         cudaGetErrorString(e));
  mxf_status st;
  switch (plan->op) {
  case MXF_OP_GEMM_AMAX: st = mxf_cuda_gemm_amax_run(plan, (const mxf_gemm_amax_args *)args, ws, ws_size, stream); break;
  case MXF_OP_PROJ_ROPE: st = mxf_cuda_proj_rope_run(plan, (const mxf_proj_rope_args *)args, ws, ws_size, stream); break;
  case MXF_OP_QUANTIZE: st = mxf_cuda_quantize_run(plan, (const mxf_quantize_args *)args, ws, ws_size, stream); break;
  case MXF_OP_DEQUANTIZE: st = mxf_cuda_dequantize_run(plan, (const mxf_dequantize_args *)args, ws, ws_size, stream); break;
  default: st = mxf_set_error(MXF_ERR_INTERNAL, "cuda backend: unknown op %d", (int)plan->op);
  }
  if (prev != plan->device - 1) cudaSetDevice(prev);
  return st;
}

static void cuda_plan_free(mxf_plan *plan) {
  free(plan->impl);
  plan->impl = NULL;
}

static mxf_status cuda_alloc(int32_t device, size_t bytes, void *stream, void **ptr) {
  *ptr = NULL;
  if (bytes == 0) return MXF_OK;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing((cudaStream_t)stream, &capture) != cudaSuccess) (void)cudaGetLastError();
  if (capture != cudaStreamCaptureStatusNone)
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED,
                         "one-call form: this run needs %zu bytes of workspace on device %d, more than the "
                         "stream's workspace holds, and the stream is being captured into a CUDA graph, "
                         "where nothing may be allocated; run the same call once before the capture, or "
                         "use the form with the caller's workspace",
                         bytes, device - 1);
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
