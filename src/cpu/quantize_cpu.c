/* quantize / dequantize on the CPU — placeholder until it lands. */
#include "cpu/cpu.h"

size_t mxf_cpu_quantize_workspace(const mxf_plan *plan) { (void)plan; return 0; }
mxf_status mxf_cpu_quantize_run(const mxf_plan *plan, const mxf_quantize_args *args, void *ws,
                                size_t ws_size) {
  return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cpu backend: quantize not implemented yet");
}
mxf_status mxf_cpu_dequantize_run(const mxf_plan *plan, const mxf_dequantize_args *args) {
  return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cpu backend: dequantize not implemented yet");
}
