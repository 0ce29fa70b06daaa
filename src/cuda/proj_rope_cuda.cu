/*
 * proj_rope_cuda.cu — proj_rope on the CUDA backend: kernel choice (plan, made once and
 * kept in the plan) and launch (run).
 *
 *   cc 9.0 and the sm_90a kernel takes the problem  -> "cuda/sm90"     (sm90/proj_rope_sm90.cu)
 *   any other problem on cc >= 8.0                  -> "cuda/portable" (portable/proj_rope_portable.cu)
 *   cc < 8.0                                        -> not supported (no bf16 mma.sync)
 * MXFP8 inputs on the sm_90a kernel take the dequantize pre-pass
 * (docs/kernels/proj_rope_sm90.md). MXF_CONFIG (core/override.c) may ask for
 * proj=portable|sm90 and for mxfp8=mainloop|prepass.
 *
 * The sm90 kernel also needs 16-byte aligned tensors (TMA); a plan form's pointers are
 * only known at run time, so a run whose pointers it cannot take falls back to the
 * portable kernel. The plan's workspace covers both kernels.
 *
 * run launches on the caller's stream, allocates nothing, never synchronizes (so it can
 * be captured in a CUDA graph) and returns CUDA errors as MXF_ERR_CUDA.
 */
#include <cuda_runtime.h>
#include <stdlib.h>

#include "cuda/cuda_ops.h"
#include "cuda/cuda_util.h"
#include "cuda/portable/portable_ops.h"
#include "cuda/proj_rope_config.h"
#if defined(MXF_HAVE_SM90)
#include "cuda/sm90/sm90_ops.h"
#endif

extern "C" mxf_status mxf_cuda_proj_rope_plan(mxf_plan *plan) {
  mxf_cuda_device_info_t info;
  mxf_status st = mxf_cuda_plan_device(plan, "proj_rope", &info);
  if (st != MXF_OK) return st;
  mxf_cuda_proj_config *cfg = static_cast<mxf_cuda_proj_config *>(malloc(sizeof *cfg));
  if (!cfg) return mxf_set_error(MXF_ERR_NO_MEMORY, "cuda backend: out of host memory for a proj_rope plan");
  st = mxf_cuda_proj_rope_choose(&plan->p.proj, &info, &plan->ov, cfg, plan->kernel, sizeof plan->kernel);
  if (st != MXF_OK) {
    free(cfg);
    return st;
  }
  plan->impl = cfg;
  plan->workspace_size = cfg->workspace;
  return MXF_OK;
}

extern "C" mxf_status mxf_cuda_proj_rope_run(const mxf_plan *plan, const mxf_proj_rope_args *args, void *ws,
                                             size_t ws_size, void *stream) {
  const mxf_proj_problem *p = &plan->p.proj;
  const mxf_cuda_proj_config *cfg = static_cast<const mxf_cuda_proj_config *>(plan->impl);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (!cfg) return mxf_set_error(MXF_ERR_INTERNAL, "cuda backend: proj_rope plan without its config");
#if defined(MXF_HAVE_SM90)
  if (cfg->kernel == MXF_KERNEL_SM90 && mxf_sm90_proj_rope_args_ok(p, args, ws, cfg->sm90.mainloop))
    return mxf_sm90_proj_rope_launch(p, &cfg->sm90, args, ws, ws_size, s, cfg->sm_count);
#endif
  return mxf_portable_proj_rope_launch(p, &cfg->portable, args, ws, ws_size, s);
}
