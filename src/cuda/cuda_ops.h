/*
 * cuda_ops.h — the CUDA backend's per-op entry points (host code, extern "C").
 * backend_cuda.cu dispatches to these; each op file chooses among its kernels
 * (sm90 fast path, portable fallback) in *_plan and launches them in *_run.
 */
#ifndef MXF_CUDA_OPS_H
#define MXF_CUDA_OPS_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Each *_plan sets plan->kernel and plan->workspace_size (and may set plan->impl, freed
 * with free()), or refuses with MXF_ERR_NOT_SUPPORTED and a reason. Each *_run launches
 * on `stream` (a cudaStream_t), allocates nothing, never synchronizes, and turns CUDA
 * errors into MXF_ERR_CUDA with the CUDA error string. */
mxf_status mxf_cuda_gemm_amax_plan(mxf_plan *plan);
mxf_status mxf_cuda_gemm_amax_run(const mxf_plan *plan, const mxf_gemm_amax_args *args, void *ws,
                                  size_t ws_size, void *stream);
mxf_status mxf_cuda_proj_rope_plan(mxf_plan *plan);
mxf_status mxf_cuda_proj_rope_run(const mxf_plan *plan, const mxf_proj_rope_args *args, void *ws,
                                  size_t ws_size, void *stream);
mxf_status mxf_cuda_quantize_plan(mxf_plan *plan);
mxf_status mxf_cuda_quantize_run(const mxf_plan *plan, const mxf_quantize_args *args, void *ws,
                                 size_t ws_size, void *stream);
mxf_status mxf_cuda_dequantize_plan(mxf_plan *plan);
mxf_status mxf_cuda_dequantize_run(const mxf_plan *plan, const mxf_dequantize_args *args, void *ws,
                                   size_t ws_size, void *stream);

#ifdef __cplusplus
}
#endif
#endif
