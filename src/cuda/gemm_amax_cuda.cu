/*
 * gemm_amax_cuda.cu — gemm_amax on the CUDA backend: kernel choice (plan) and launch (run).
 *
 *   mixed pair (A bf16 or another MX format than B), M <= 128, MX weights that the
 *   weight-streaming kernel takes                   -> "cuda/gemv"     (portable/gemm_amax_gemv.cu)
 *   cc 9.0 and the sm_90a kernel takes the problem  -> "cuda/sm90"     (sm90/)
 *   any other problem on cc >= 8.0                  -> "cuda/portable" (portable/)
 *   cc < 8.0                                        -> not supported (no bf16 mma.sync)
 * MXF_GEMM_KERNEL=portable in the environment (read at plan time) forces the portable
 * kernel, so that tests and benchmarks can exercise it on a Hopper GPU too.
 *
 * run launches on the caller's stream, allocates nothing, never synchronizes (so it can
 * be captured in a CUDA graph) and returns CUDA errors as MXF_ERR_CUDA.
 */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_ops.h"
#include "cuda/cuda_util.h"
#include "cuda/portable/portable_ops.h"
#if defined(MXF_HAVE_SM90)
#include "cuda/sm90/sm90_ops.h"
#endif


static const char k_sm90[] = "cuda/sm90";
static const char k_portable[] = "cuda/portable";
static const char k_gemv[] = "cuda/gemv";

extern "C" mxf_status mxf_cuda_gemm_amax_plan(mxf_plan *plan) {
  mxf_cuda_device_info_t info;
  mxf_status st = mxf_cuda_plan_device(plan, "gemm_amax", &info);
  if (st != MXF_OK) return st;
  const mxf_gemm_problem *p = &plan->p.gemm;
  const char *force = getenv("MXF_GEMM_KERNEL");
  const int force_portable = force && strcmp(force, "portable") == 0;
  size_t ws = 0;
  if (!force_portable && p->a_fmt != p->b_fmt && mxf_gemv_gemm_amax_plan(p, info.sm_count, &ws)) {
    strcpy(plan->kernel, k_gemv);
    plan->workspace_size = ws;
    return MXF_OK;
  }
#if defined(MXF_HAVE_SM90)
  if (info.cc == 90 && !force_portable && mxf_sm90_gemm_amax_plan(p, info.sm_count, &ws)) {
    strcpy(plan->kernel, k_sm90);
    plan->workspace_size = ws;
    return MXF_OK;
  }
#endif
  (void)p;
  strcpy(plan->kernel, k_portable);
  plan->workspace_size = 0;
  return MXF_OK;
}

extern "C" mxf_status mxf_cuda_gemm_amax_run(const mxf_plan *plan, const mxf_gemm_amax_args *args, void *ws,
                                             size_t ws_size, void *stream) {
  const mxf_gemm_problem *p = &plan->p.gemm;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (strcmp(plan->kernel, k_gemv) == 0) {
    mxf_cuda_device_info_t info;
    mxf_status st = mxf_cuda_device_info(plan->device - 1, &info); /* cached: no driver call */
    if (st != MXF_OK) return st;
    return mxf_gemv_gemm_amax_launch(p, args, ws, s, info.sm_count);
  }
#if defined(MXF_HAVE_SM90)
  if (strcmp(plan->kernel, k_sm90) == 0) { /* the workspace: checked by core against the plan's */
    mxf_cuda_device_info_t info;
    mxf_status st = mxf_cuda_device_info(plan->device - 1, &info); /* cached: no driver call */
    if (st != MXF_OK) return st;
    return mxf_sm90_gemm_amax_launch(p, args, ws, ws_size, s, info.sm_count);
  }
#endif
  (void)ws;
  (void)ws_size;
  return mxf_portable_gemm_amax_launch(p, args, s);
}
