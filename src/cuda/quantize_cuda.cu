/*
 * quantize_cuda.cu — MXFP8 quantize on the CUDA backend (SPEC §3): plan and launch.
 * One kernel serves every device from cc 8.0 on: portable/quantize_portable.cu (it is
 * bandwidth-bound, so no architecture-specific variant is needed). No workspace.
 */
#include <cuda_runtime.h>
#include <string.h>

#include "cuda/cuda_ops.h"
#include "cuda/cuda_util.h"
#include "cuda/portable/portable_ops.h"

extern "C" mxf_status mxf_cuda_quantize_plan(mxf_plan *plan) {
  mxf_cuda_device_info_t info;
  mxf_status st = mxf_cuda_plan_device(plan, "quantize", &info);
  if (st != MXF_OK) return st;
  const mxf_quant_problem *p = &plan->p.quant;
  if (p->x != MXF_F32 && p->x != MXF_BF16)
    return mxf_set_error(MXF_ERR_INTERNAL, "cuda backend: quantize input dtype %s", mxf_dtype_name(p->x));
  strcpy(plan->kernel, "cuda/portable");
  plan->workspace_size = 0;
  return MXF_OK;
}

extern "C" mxf_status mxf_cuda_quantize_run(const mxf_plan *plan, const mxf_quantize_args *args, void *ws,
                                            size_t ws_size, void *stream) {
  (void)ws;
  (void)ws_size;
  mxf_cuda_device_info_t info;
  mxf_status st = mxf_cuda_device_info(plan->device - 1, &info); /* cached: no driver call */
  if (st != MXF_OK) return st;
  return mxf_portable_quantize_launch(&plan->p.quant, args, static_cast<cudaStream_t>(stream), info.sm_count);
}
