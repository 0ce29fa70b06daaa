/*
 * backend_cuda.cu — the CUDA backend's table: device discovery (the count and each
 * device's facts, cached), workspace memory, and dispatch of each op to its kernels. Host
 * code only; kernels live in portable/ and sm90/.
 *
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda/cuda_ops.h"
#include "cuda/cuda_util.h"

extern "C" {

/* ------------------------------------------------------------ devices
 * Every plan asks for the device count (core's backend lookup) and for its device's
 * facts; each runtime query costs microseconds (cudaGetDeviceProperties, which fills every
 * property, hundreds). So the count is read once per process (it is fixed when the runtime
 * starts) and the facts once per device, into a table with one slot per device: any
 * ordinal is cached. A failed query is not cached; the next plan asks again. */
typedef struct device_slot {
  mxf_cuda_device_info_t info;
  int ready; /* info is filled (read and written atomically) */
} device_slot;

static pthread_once_t g_devices_once = PTHREAD_ONCE_INIT;
static int g_device_count;
static device_slot *g_slots; /* g_device_count slots; NULL when that many could not be allocated */
static pthread_mutex_t g_slots_lock = PTHREAD_MUTEX_INITIALIZER;

static void devices_init(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError(); /* no driver / no device: not an error for the caller */
    n = 0;
  }
  g_slots = n > 0 ? (device_slot *)calloc((size_t)n, sizeof *g_slots) : NULL;
  g_device_count = n;
}

int mxf_cuda_devices(void) {
  pthread_once(&g_devices_once, devices_init);
  return g_device_count;
}

static mxf_status query_device(int ordinal, mxf_cuda_device_info_t *out) {
  int major = 0, minor = 0, sms = 0, smem = 0;
  MXF_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal),
               "cannot query the compute capability");
  MXF_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ordinal),
               "cannot query the compute capability");
  MXF_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ordinal),
               "cannot query the SM count");
  MXF_CUDA_TRY(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, ordinal),
               "cannot query the shared memory per block");
  out->cc_major = major;
  out->cc_minor = minor;
  out->cc = major * 10 + minor;
  out->sm_count = sms;
  out->max_smem_optin = smem;
  return MXF_OK;
}

mxf_status mxf_cuda_device_info(int ordinal, mxf_cuda_device_info_t *out) {
  const int n = mxf_cuda_devices();
  if (ordinal < 0 || ordinal >= n)
    return mxf_set_error(MXF_ERR_INVALID_VALUE, "cuda backend: no CUDA device %d (%d present)", ordinal, n);
  if (!g_slots) return query_device(ordinal, out);
  device_slot *slot = &g_slots[ordinal];
  if (!__atomic_load_n(&slot->ready, __ATOMIC_ACQUIRE)) {
    pthread_mutex_lock(&g_slots_lock);
    mxf_status st = MXF_OK;
    if (!slot->ready) {
      st = query_device(ordinal, &slot->info);
      if (st == MXF_OK) __atomic_store_n(&slot->ready, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g_slots_lock);
    if (st != MXF_OK) return st;
  }
  *out = slot->info;
  return MXF_OK;
}

static mxf_status cuda_plan(mxf_plan *plan) {
  switch (plan->op) {
  case MXF_OP_GEMM_AMAX: return mxf_cuda_gemm_amax_plan(plan);
  case MXF_OP_PROJ_ROPE: return mxf_cuda_proj_rope_plan(plan);
  case MXF_OP_QUANTIZE: return mxf_cuda_quantize_plan(plan);
  case MXF_OP_DEQUANTIZE: return mxf_cuda_dequantize_plan(plan);
  case MXF_OP_GROUPED_GEMM_AMAX:
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED,
                         "cuda backend: grouped_gemm_amax: the grouped kernels are not built yet; "
                         "CPU tensors run it (cpu backend)");
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
  case MXF_OP_GEMM_AMAX:
    st = mxf_cuda_gemm_amax_run(plan, (const mxf_gemm_amax_args *)args, ws, ws_size, stream);
    break;
  case MXF_OP_PROJ_ROPE:
    st = mxf_cuda_proj_rope_run(plan, (const mxf_proj_rope_args *)args, ws, ws_size, stream);
    break;
  case MXF_OP_QUANTIZE:
    st = mxf_cuda_quantize_run(plan, (const mxf_quantize_args *)args, ws, ws_size, stream);
    break;
  case MXF_OP_DEQUANTIZE:
    st = mxf_cuda_dequantize_run(plan, (const mxf_dequantize_args *)args, ws, ws_size, stream);
    break;
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

const mxf_backend mxf_cuda_backend = {.name = "cuda",
                                      .plan = cuda_plan,
                                      .run = cuda_run,
                                      .plan_free = cuda_plan_free,
                                      .alloc = cuda_alloc,
                                      .free = cuda_free};

} /* extern "C" */
