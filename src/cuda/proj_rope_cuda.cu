/*
 * proj_rope_cuda.cu — proj_rope on the CUDA backend: kernel choice (plan) and launch (run).
 *
 *   cc 9.0 and the sm_90a kernel takes the problem  -> "cuda/sm90"     (sm90/proj_rope_sm90.cu)
 *   any other problem on cc >= 8.0                  -> "cuda/portable" (portable/proj_rope_portable.cu)
 *   cc < 8.0                                        -> not supported (no bf16 mma.sync)
 * MXF_PROJ_KERNEL=portable in the environment (read at plan time) forces the portable
 * kernel, so that tests and benchmarks can exercise it on a Hopper GPU too.
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
#include <string.h>

#include "cuda/cuda_ops.h"
#include "cuda/cuda_util.h"
#include "cuda/portable/portable_ops.h"
#if defined(MXF_HAVE_SM90)
#include "cuda/sm90/sm90_ops.h"
#endif


static const char k_sm90[] = "cuda/sm90";
static const char k_portable[] = "cuda/portable";

typedef struct proj_impl {
  int max_smem; /* opt-in shared memory per block of the plan's device */
  int sm_count;
} proj_impl;

extern "C" mxf_status mxf_cuda_proj_rope_plan(mxf_plan *plan) {
  mxf_cuda_device_info_t info;
  mxf_status st = mxf_cuda_plan_device(plan, "proj_rope", &info);
  if (st != MXF_OK) return st;
  const int max_smem = info.max_smem_optin;
  const mxf_proj_problem *p = &plan->p.proj;
  proj_impl *impl = (proj_impl *)malloc(sizeof *impl);
  if (!impl) return mxf_set_error(MXF_ERR_NO_MEMORY, "cuda backend: out of host memory for a proj_rope plan");
  impl->max_smem = max_smem;
  impl->sm_count = info.sm_count;
  plan->impl = impl;
  size_t ws = mxf_portable_proj_rope_workspace(p, max_smem);
  strcpy(plan->kernel, k_portable);
#if defined(MXF_HAVE_SM90)
  const char *force = getenv("MXF_PROJ_KERNEL");
  const int force_portable = force && strcmp(force, "portable") == 0;
  if (info.cc == 90 && !force_portable && mxf_sm90_proj_rope_supports(p)) {
    strcpy(plan->kernel, k_sm90);
    const size_t w90 = mxf_sm90_proj_rope_workspace(p);
    if (w90 > ws) ws = w90;
  }
#endif
  plan->workspace_size = ws;
  return MXF_OK;
}

extern "C" mxf_status mxf_cuda_proj_rope_run(const mxf_plan *plan, const mxf_proj_rope_args *args, void *ws,
                                             size_t ws_size, void *stream) {
  const mxf_proj_problem *p = &plan->p.proj;
  const proj_impl *impl = (const proj_impl *)plan->impl;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (!impl) return mxf_set_error(MXF_ERR_INTERNAL, "cuda backend: proj_rope plan without its kernel data");
#if defined(MXF_HAVE_SM90)
  if (strcmp(plan->kernel, k_sm90) == 0 && mxf_sm90_proj_rope_args_ok(p, args, ws))
    return mxf_sm90_proj_rope_launch(p, args, ws, ws_size, s, impl->sm_count);
#endif
  return mxf_portable_proj_rope_launch(p, args, ws, ws_size, impl->max_smem, s);
}
