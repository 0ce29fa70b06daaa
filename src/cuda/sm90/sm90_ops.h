/*
 * sm90_ops.h — the Hopper (sm_90a) fast kernels, as seen by the op files in src/cuda/.
 * Compiled only for sm_90a; the op files call *_supports first and fall back to the
 * portable kernels when it answers 0 (other layouts, other GPUs).
 */
#ifndef MXF_SM90_OPS_H
#define MXF_SM90_OPS_H

#include <cuda_runtime.h>

#include "core/internal.h"
#include "cuda/sm90/proj_rope_sm90_shape.h"

#ifdef __cplusplus
namespace mxf_sm90 {
struct gemm_config; /* cuda/gemm_amax_config.h */
}
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Launches the sm_90a gemm_amax kernel on `stream` as the plan's config says (its
 * problem, geometry and choices: gemm_amax_heuristics.cu, mxf_sm90::plan_gemm on num_sms
 * SMs); amax handling (overwrite/accumulate) included. Returns MXF_ERR_CUDA with the CUDA
 * error string on a launch error. */
mxf_status mxf_sm90_gemm_amax_launch(const mxf_sm90::gemm_config *cfg, const mxf_gemm_amax_args *args,
                                     void *ws, size_t ws_size, cudaStream_t stream, int num_sms);

/* ---- proj_rope (proj_rope_sm90.cu), on the geometry its chooser computed
 * (proj_rope_heuristics.cu) ---- */
/* The run's pointers are aligned as the kernel needs (proj_rope_cuda.cu checks them). */
/* Launches on `stream`; num_sms sizes the MXFP8 pre-pass's grids. */
mxf_status mxf_sm90_proj_rope_launch(const mxf_proj_problem *p, const mxf_proj90::geometry *g,
                                     const mxf_proj_rope_args *args, void *ws, size_t ws_size,
                                     cudaStream_t stream, int num_sms);

#ifdef __cplusplus
}
#endif
#endif
