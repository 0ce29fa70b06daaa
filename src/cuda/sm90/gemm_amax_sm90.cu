/* gemm_amax for Hopper (sm_90a) — not yet: every problem routes to the portable kernel. */
#include "cuda/sm90/sm90_ops.h"

extern "C" int mxf_sm90_gemm_amax_supports(const mxf_gemm_problem *p) { return 0; }
extern "C" size_t mxf_sm90_gemm_amax_workspace(const mxf_gemm_problem *p) { return 0; }
extern "C" mxf_status mxf_sm90_gemm_amax_launch(const mxf_gemm_problem *p, const mxf_gemm_amax_args *args,
                                                void *ws, size_t ws_size, cudaStream_t stream, int num_sms) {
  return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cuda backend: the sm_90a gemm_amax kernel is not available");
}
