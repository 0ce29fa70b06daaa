/*
 * gemm_sm90_instances.cuh — the kernel instances of one register-operand format
 * (MXF_SM90_FMT, set by the including gemm_sm90_<fmt>.cu): the four launch kinds of
 * launch_gemm_kind.
 */
#include "cuda/sm90/gemm_sm90_kernel.cuh"

namespace mxf_sm90 {

template <>
cudaError_t launch_gemm_kind<MXF_SM90_FMT>(int kind, unsigned grid, const CUtensorMap &ma, const CUtensorMap &mb,
                                           const CUtensorMap &mc, const kernel_args &ka, cudaStream_t stream) {
  switch (kind) {
  case 0: return launch_gemm<MXF_SM90_FMT, 0>(grid, ma, mb, mc, ka, stream);
  case 1: return launch_gemm<MXF_SM90_FMT, 1>(grid, ma, mb, mc, ka, stream);
  case 2: return launch_gemm<MXF_SM90_FMT, 1, BN_NARROW>(grid, ma, mb, mc, ka, stream);
  case 3: return launch_gemm<MXF_SM90_FMT, 1, BN_NARROW, 3>(grid, ma, mb, mc, ka, stream);
  default: return cudaErrorInvalidValue;
  }
}

} /* namespace mxf_sm90 */
