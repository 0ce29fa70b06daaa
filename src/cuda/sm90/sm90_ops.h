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
extern "C" {
#endif

/* 1 if the sm_90a gemm_amax kernel runs this problem (the caller checked the device is
 * compute capability 9.0); 0 otherwise. */
int mxf_sm90_gemm_amax_supports(const mxf_gemm_problem *p);
/* Workspace bytes the sm_90a kernel needs for this problem. */
size_t mxf_sm90_gemm_amax_workspace(const mxf_gemm_problem *p);
/* Launches on `stream`; amax handling (overwrite/accumulate) included. num_sms sizes the
 * persistent grid. Returns MXF_ERR_CUDA with the CUDA error string on a launch error. */
mxf_status mxf_sm90_gemm_amax_launch(const mxf_gemm_problem *p, const mxf_gemm_amax_args *args, void *ws,
                                     size_t ws_size, cudaStream_t stream, int num_sms);

#ifdef __cplusplus
}
#endif
#endif
