/*
 * gemm_amax_cuda.cu — gemm_amax on the CUDA backend: plan (the heuristics' config, kept
 * in the plan: gemm_amax_heuristics.cu) and run (the config's kernel).
 *
 * run launches on the caller's stream, allocates nothing, never synchronizes (so it can
 * be captured in a CUDA graph) and returns CUDA errors as MXF_ERR_CUDA.
 */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_ops.h"
#include "cuda/cuda_util.h"
#include "cuda/gemm_amax_config.h"
#include "cuda/portable/portable_ops.h"
#if defined(MXF_HAVE_SM90)
#include "cuda/sm90/sm90_ops.h"
#endif

extern "C" mxf_status mxf_cuda_gemm_amax_plan(mxf_plan *plan) {
  mxf_cuda_device_info_t info;
  mxf_status st = mxf_cuda_plan_device(plan, "gemm_amax", &info);
  if (st != MXF_OK) return st;
  mxf_cuda_override ov;
  if ((st = mxf_cuda_override_of(plan, &ov)) != MXF_OK) return st;
  mxf_cuda_gemm_config *cfg = static_cast<mxf_cuda_gemm_config *>(malloc(sizeof *cfg));
  if (!cfg) return mxf_set_error(MXF_ERR_NO_MEMORY, "cuda backend: out of host memory for a gemm_amax plan");
  st = mxf_cuda_gemm_amax_choose(&plan->p.gemm, &info, &ov, cfg, plan->kernel, sizeof plan->kernel);
  if (st != MXF_OK) {
    free(cfg);
    return st;
  }
  plan->impl = cfg;
  plan->workspace_size = cfg->workspace;
  return MXF_OK;
}

extern "C" mxf_status mxf_cuda_gemm_amax_run(const mxf_plan *plan, const mxf_gemm_amax_args *args, void *ws,
                                             size_t ws_size, void *stream) {
  const mxf_cuda_gemm_config *cfg = static_cast<const mxf_cuda_gemm_config *>(plan->impl);
  if (!cfg) return mxf_set_error(MXF_ERR_INTERNAL, "cuda backend: gemm_amax plan without its config");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (cfg->kernel) {
  case MXF_KERNEL_GEMV: return mxf_gemv_gemm_amax_launch(&plan->p.gemm, &cfg->gemv, args, ws, s);
  case MXF_KERNEL_SM90:
#if defined(MXF_HAVE_SM90)
    return mxf_sm90_gemm_amax_launch(&cfg->sm90, args, ws, ws_size, s, cfg->sms);
#else
    break;
#endif
  case MXF_KERNEL_PORTABLE: return mxf_portable_gemm_amax_launch(&plan->p.gemm, args, s);
  }
  (void)ws_size;
  return mxf_set_error(MXF_ERR_INTERNAL, "cuda backend: gemm_amax plan of kernel %d, which this build lacks",
                       (int)cfg->kernel);
}
