/*
 * sm90_ops.h — the Hopper (sm_90a) fast kernels, as seen by the op files in src/cuda/.
 * Compiled only for sm_90a; the op files call *_supports first and fall back to the
 * portable kernels when it answers 0 (other layouts, other GPUs).
 */
#ifndef MXF_SM90_OPS_H
#define MXF_SM90_OPS_H

#include <cuda_runtime.h>

#include "core/internal.h"

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
mxf_status mxf_sm90_gemm_amax_launch(const mxf_sm90::gemm_config *cfg, const mxf_gemm_amax_args *args, void *ws,
                                     size_t ws_size, cudaStream_t stream, int num_sms);

/* ---- proj_rope (proj_rope_sm90.cu) ---- */
/* 1 if the sm_90a proj_rope kernel runs this problem (D = 192, K % 8 == 0); 0 otherwise. */
int mxf_sm90_proj_rope_supports(const mxf_proj_problem *p);
/* 1 if the in-mainloop MXFP8 path can run p (MXFP8 inputs, its scale index fits). */
int mxf_sm90_proj_rope_mainloop_fits(const mxf_proj_problem *p);
/* mainloop: the plan's choice of MXFP8 path (1: convert in the mainloop, only where
 * mxf_sm90_proj_rope_mainloop_fits; 0: the dequantize pre-pass); every call of one plan
 * passes the same. */
/* Workspace bytes it needs (bf16 copies of x and w on the MXFP8 pre-pass path, the
 * regrouped scales on the mainloop path; else 0). */
size_t mxf_sm90_proj_rope_workspace(const mxf_proj_problem *p, int mainloop);
/* 1 if a run with these pointers can use it (TMA needs 16-byte aligned x, w, workspace). */
int mxf_sm90_proj_rope_args_ok(const mxf_proj_problem *p, const mxf_proj_rope_args *args, const void *ws,
                               int mainloop);
/* Launches on `stream`; num_sms sizes the persistent grid. */
mxf_status mxf_sm90_proj_rope_launch(const mxf_proj_problem *p, const mxf_proj_rope_args *args, void *ws,
                                     size_t ws_size, cudaStream_t stream, int num_sms, int mainloop);

#ifdef __cplusplus
}
#endif
#endif
