/* gemm_amax on the CPU — placeholder until the CPU GEMM lands. */
#include "cpu/cpu.h"

const char *mxf_cpu_gemm_core(void) { return "c"; }
size_t mxf_cpu_gemm_amax_workspace(const mxf_plan *plan) { (void)plan; return 0; }
mxf_status mxf_cpu_gemm_amax_run(const mxf_plan *plan, const mxf_gemm_amax_args *args, void *ws,
                                 size_t ws_size) {
  return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cpu backend: gemm_amax not implemented yet");
}
void mxf_cpu_sgemm_nt(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                      int64_t ldb, float *c, int64_t ldc) {}
