/* dequantize on CUDA — not supported yet: the backend answers so, with the reason. */
#include "cuda/cuda_ops.h"

extern "C" mxf_status mxf_cuda_dequantize_plan(mxf_plan *plan) {
  return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cuda backend: dequantize is not supported yet");
}

extern "C" mxf_status mxf_cuda_dequantize_run(const mxf_plan *plan, const mxf_dequantize_args *args, void *ws, size_t ws_size,
                                  void *stream) {
  return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cuda backend: dequantize is not supported yet");
}
