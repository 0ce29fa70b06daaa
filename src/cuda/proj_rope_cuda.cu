/*
 * proj_rope_cuda.cu — proj_rope on the CUDA backend: plan (the chooser's config, kept in
 * the plan: proj_rope_heuristics.cu) and run (the config's kernel, docs/kernels/).
 *
 * A plan names the kernel that runs. The sm90 kernel needs aligned tensors (16 bytes for
 * TMA), and a plan's pointers are only known at run time: a run whose pointers the plan's
 * kernel cannot take is refused, with the tensor and the alignment named.
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
  mxf_cuda_override ov;
  if ((st = mxf_cuda_override_of(plan, &ov)) != MXF_OK) return st;
  mxf_cuda_proj_config *cfg = static_cast<mxf_cuda_proj_config *>(malloc(sizeof *cfg));
  if (!cfg) return mxf_set_error(MXF_ERR_NO_MEMORY, "cuda backend: out of host memory for a proj_rope plan");
  st = mxf_cuda_proj_rope_choose(&plan->p.proj, &info, &ov, cfg, plan->kernel, sizeof plan->kernel);
  if (st != MXF_OK) {
    free(cfg);
    return st;
  }
  plan->impl = cfg;
  plan->workspace_size = cfg->workspace;
  return MXF_OK;
}

#if defined(MXF_HAVE_SM90)
/* A run of an sm_90a plan with pointers the kernel cannot take (mxf_cuda_proj_sm90_align)
 * is refused: a plan names the kernel that runs. A plan made with those pointers in its
 * descriptor (the one-call form's are) is made for the portable kernel instead. */
static mxf_status sm90_pointers(const mxf_proj_problem *p, const mxf_cuda_proj_config *cfg,
                                const mxf_proj_rope_args *a, const void *ws) {
  static const char *const names[8] = {"x",       "w",       "x_scale",        "w_scale",
                                       "out_row", "out_col", "out_scales_row", "out_scales_col"};
  const void *const ptrs[8] = {a->x,       a->w,       a->x_scale,        a->w_scale,
                               a->out_row, a->out_col, a->out_scales_row, a->out_scales_col};
  for (int i = 0; i <= 8; ++i) {
    const char *name = i < 8 ? names[i] : "workspace";
    const void *ptr = i < 8 ? ptrs[i] : ws;
    const unsigned need = i < 8 ? mxf_cuda_proj_sm90_align(p, cfg->sm90.mainloop, i) : p->mxfp8 ? 16u : 0u;
    if (need && (ptr == nullptr || (reinterpret_cast<uintptr_t>(ptr) & (need - 1)) != 0))
      return mxf_set_error(MXF_ERR_INVALID_VALUE,
                           "proj_rope: %s at %p is not %u-byte aligned, as this plan's kernel (cuda/sm90) "
                           "needs; align it, or make the plan with the tensors' pointers in its descriptor "
                           "(a plan for them runs cuda/portable)",
                           name, ptr, need);
  }
  return MXF_OK;
}
#endif

extern "C" mxf_status mxf_cuda_proj_rope_run(const mxf_plan *plan, const mxf_proj_rope_args *args, void *ws,
                                             size_t ws_size, void *stream) {
  const mxf_proj_problem *p = &plan->p.proj;
  const mxf_cuda_proj_config *cfg = static_cast<const mxf_cuda_proj_config *>(plan->impl);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (!cfg) return mxf_set_error(MXF_ERR_INTERNAL, "cuda backend: proj_rope plan without its config");
#if defined(MXF_HAVE_SM90)
  if (cfg->kernel == MXF_KERNEL_SM90) {
    const mxf_status st = sm90_pointers(p, cfg, args, ws);
    if (st != MXF_OK) return st;
    return mxf_sm90_proj_rope_launch(p, &cfg->sm90, args, ws, ws_size, s, cfg->sm_count);
  }
#endif
  return mxf_portable_proj_rope_launch(p, &cfg->portable, args, ws, ws_size, s);
}
