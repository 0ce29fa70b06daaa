/*
 * portable_ops.h — the portable kernels (any sm_80+ GPU), as seen by the op files in
 * src/cuda/ and by the Hopper proj_rope's MXFP8 pre-pass: one declaration of each
 * launcher. Every launch runs on `stream`, allocates nothing and returns MXF_ERR_CUDA
 * with the CUDA error string on a launch error.
 */
#ifndef MXF_PORTABLE_OPS_H
#define MXF_PORTABLE_OPS_H

#include <cuda_runtime.h>

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- gemm_amax (gemm_amax_portable.cu): every problem; prepares amax too ---- */
mxf_status mxf_portable_gemm_amax_launch(const mxf_gemm_problem *p, const mxf_gemm_amax_args *args,
                                         cudaStream_t stream);

/* ---- gemm_amax, few rows of A (gemm_amax_gemv.cu): 1 if the weight-streaming kernel
 * takes p on a GPU of `sms` SMs, with *ws the workspace it needs (the launch must get the
 * same sms; cc, the device's compute capability, lets it overlap its start with the
 * launch before it from 9.0 on) ---- */
int mxf_gemv_gemm_amax_plan(const mxf_gemm_problem *p, int sms, size_t *ws);
mxf_status mxf_gemv_gemm_amax_launch(const mxf_gemm_problem *p, const mxf_gemm_amax_args *args, void *ws,
                                     cudaStream_t stream, int sms, int cc);

/* ---- proj_rope (proj_rope_portable.cu) ---- */
size_t mxf_portable_proj_rope_workspace(const mxf_proj_problem *p, int max_smem);
mxf_status mxf_portable_proj_rope_launch(const mxf_proj_problem *p, const mxf_proj_rope_args *args, void *ws,
                                         size_t ws_size, int max_smem, cudaStream_t stream);

/* ---- quantize / dequantize (quantize_portable.cu); num_sms sizes the grid ---- */
mxf_status mxf_portable_quantize_launch(const mxf_quant_problem *p, const mxf_quantize_args *args,
                                        cudaStream_t stream, int num_sms);
mxf_status mxf_portable_dequantize_launch(const mxf_quant_problem *p, const mxf_dequantize_args *args,
                                          cudaStream_t stream, int num_sms);

#ifdef __cplusplus
}
#endif
#endif
