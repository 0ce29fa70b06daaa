/* proj_rope on the CPU — placeholder until it lands. */
#include "cpu/cpu.h"

size_t mxf_cpu_proj_rope_workspace(const mxf_plan *plan) { (void)plan; return 0; }
mxf_status mxf_cpu_proj_rope_run(const mxf_plan *plan, const mxf_proj_rope_args *args, void *ws,
                                 size_t ws_size) {
  return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cpu backend: proj_rope not implemented yet");
}
