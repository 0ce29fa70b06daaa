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
#include <stdio.h>
#include <stdlib.h>

#include "cuda/cuda_ops.h"
#include "cuda/cuda_util.h"
#include "cuda/portable/portable_ops.h"
#if defined(MXF_HAVE_SM90)
#include "cuda/sm90/sm90_ops.h"
#endif



typedef struct proj_impl {
  mxf_kernel_id kernel; /* MXF_KERNEL_SM90 or MXF_KERNEL_PORTABLE */
  int mainloop;         /* sm90, MXFP8 inputs: the in-mainloop conversion (else the pre-pass) */
  int max_smem;         /* opt-in shared memory per block of the plan's device */
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
  impl->kernel = MXF_KERNEL_PORTABLE;
  impl->mainloop = 0;
  impl->max_smem = max_smem;
  impl->sm_count = info.sm_count;
  plan->impl = impl;
  size_t ws = mxf_portable_proj_rope_workspace(p, max_smem);
  snprintf(plan->kernel, sizeof plan->kernel, "cuda/portable");
#if defined(MXF_HAVE_SM90)
  if (info.cc == 90 && plan->ov.proj != MXF_KERNEL_PORTABLE && mxf_sm90_proj_rope_supports(p)) {
    impl->kernel = MXF_KERNEL_SM90;
    impl->mainloop = plan->ov.mxfp8 == 1 && mxf_sm90_proj_rope_mainloop_fits(p);
    snprintf(plan->kernel, sizeof plan->kernel, "cuda/sm90%s",
             !p->mxfp8 ? "" : impl->mainloop ? " mainloop" : " prepass");
    const size_t w90 = mxf_sm90_proj_rope_workspace(p, impl->mainloop);
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
  if (impl->kernel == MXF_KERNEL_SM90 && mxf_sm90_proj_rope_args_ok(p, args, ws, impl->mainloop))
    return mxf_sm90_proj_rope_launch(p, args, ws, ws_size, s, impl->sm_count, impl->mainloop);
#endif
  return mxf_portable_proj_rope_launch(p, args, ws, ws_size, impl->max_smem, s);
}
