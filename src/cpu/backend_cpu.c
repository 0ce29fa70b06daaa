/* The CPU backend's table: dispatch by op to the per-op files (cpu.h), which choose their
 * GEMM core through core_choice.c. Story: docs/kernels/cpu.md. */
#include <stdio.h>
#include <stdlib.h>

#include "cpu/cpu.h"
#include "cpu/parallel.h"

static mxf_status cpu_plan(mxf_plan *plan) {
  mxf_cpu_override ov; /* MXF_CONFIG's cpu, cpu_isa and cpu_stream keys, or MXF_CHOOSE */
  mxf_status st = mxf_override_parse(plan->ov.text, &mxf_cpu_config_keys, &ov, sizeof ov);
  if (st != MXF_OK) return st;
  switch (plan->op) {
  case MXF_OP_GEMM_AMAX: return mxf_cpu_gemm_amax_plan(plan, &ov);
  case MXF_OP_PROJ_ROPE: return mxf_cpu_proj_rope_plan(plan, &ov);
  case MXF_OP_GROUPED_GEMM_AMAX: return mxf_cpu_grouped_gemm_amax_plan(plan, &ov);
  case MXF_OP_QUANTIZE:
    plan->workspace_size = mxf_cpu_quantize_workspace(plan);
    snprintf(plan->kernel, sizeof plan->kernel, "cpu/ref");
    return MXF_OK;
  case MXF_OP_DEQUANTIZE:
    plan->workspace_size = 0;
    snprintf(plan->kernel, sizeof plan->kernel, "cpu/ref");
    return MXF_OK;
  }
  return mxf_set_error(MXF_ERR_INTERNAL, "cpu backend: unknown op %d", (int)plan->op);
}

static mxf_status cpu_run_op(const mxf_plan *plan, const void *args, void *ws, size_t ws_size) {
  switch (plan->op) {
  case MXF_OP_GEMM_AMAX: return mxf_cpu_gemm_amax_run(plan, (const mxf_gemm_amax_args *)args, ws, ws_size);
  case MXF_OP_PROJ_ROPE: return mxf_cpu_proj_rope_run(plan, (const mxf_proj_rope_args *)args, ws, ws_size);
  case MXF_OP_QUANTIZE: return mxf_cpu_quantize_run(plan, (const mxf_quantize_args *)args, ws, ws_size);
  case MXF_OP_DEQUANTIZE: return mxf_cpu_dequantize_run(plan, (const mxf_dequantize_args *)args);
  case MXF_OP_GROUPED_GEMM_AMAX:
    return mxf_cpu_grouped_gemm_amax_run(plan, (const mxf_grouped_gemm_amax_args *)args, ws, ws_size);
  }
  return mxf_set_error(MXF_ERR_INTERNAL, "cpu backend: unknown op %d", (int)plan->op);
}

/* Inside the fork gate (parallel.h): no fork() while a CPU op runs; in the backend's
 * floating-point environment. */
static mxf_status cpu_run(const mxf_plan *plan, const void *args, void *ws, size_t ws_size, void *stream) {
  (void)stream;
  mxf_cpu_op_enter();
  const unsigned fp = mxf_cpu_fp_enter();
  const mxf_status st = cpu_run_op(plan, args, ws, ws_size);
  mxf_cpu_fp_leave(fp);
  mxf_cpu_op_leave();
  return st;
}

static void cpu_plan_free(mxf_plan *plan) { mxf_cpu_core_free(plan); }

static mxf_status cpu_alloc(int32_t device, size_t bytes, void *stream, void **ptr) {
  (void)device;
  (void)stream;
  *ptr = NULL;
  if (bytes == 0) return MXF_OK;
  *ptr = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!*ptr)
    return mxf_set_error(MXF_ERR_NO_MEMORY, "cpu backend: cannot allocate %zu bytes of workspace", bytes);
  return MXF_OK;
}

static void cpu_free(int32_t device, void *ptr) {
  (void)device;
  free(ptr);
}

const mxf_backend mxf_cpu_backend = {.name = "cpu",
                                     .plan = cpu_plan,
                                     .run = cpu_run,
                                     .plan_free = cpu_plan_free,
                                     .alloc = cpu_alloc,
                                     .free = cpu_free};
