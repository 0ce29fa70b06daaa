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
#include "cuda/portable/gemv_shape.h"
#include "cuda/portable/proj_rope_portable_shape.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- gemm_amax (gemm_amax_portable.cu): every problem; prepares amax too ---- */
mxf_status mxf_portable_gemm_amax_launch(const mxf_gemm_problem *p, const mxf_gemm_amax_args *args,
                                         cudaStream_t stream);

/* ---- gemm_amax, few rows of A (gemm_amax_gemv.cu): the weight-streaming kernel on the
 * geometry its chooser computed (gemm_amax_heuristics.cu) ---- */
mxf_status mxf_gemv_gemm_amax_launch(const mxf_gemm_problem *p, const mxf_gemv::geometry *g,
                                     const mxf_gemm_amax_args *args, void *ws, cudaStream_t stream);

/* ---- proj_rope (proj_rope_portable.cu) ---- */
mxf_status mxf_portable_proj_rope_launch(const mxf_proj_problem *p, const mxf_projp::geometry *g,
                                         const mxf_proj_rope_args *args, void *ws, size_t ws_size,
                                         cudaStream_t stream);

/* ---- quantize / dequantize (quantize_portable.cu); num_sms sizes the grid ---- */
mxf_status mxf_portable_quantize_launch(const mxf_quant_problem *p, const mxf_quantize_args *args,
                                        cudaStream_t stream, int num_sms);
mxf_status mxf_portable_dequantize_launch(const mxf_quant_problem *p, const mxf_dequantize_args *args,
                                          cudaStream_t stream, int num_sms);

#ifdef __cplusplus
}
#endif
#endif
