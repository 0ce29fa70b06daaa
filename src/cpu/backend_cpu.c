/* The CPU backend's table: dispatch by op to the per-op files, and the choice of the GEMM
 * core (cpu.h) that gemm_amax and proj_rope plans keep. */
#include <stdio.h>
#include <stdlib.h>

#include "cpu/cpu.h"

/* oneDNN by default from this many rows and columns of the oriented GEMM (both): at
 * 256 x 7168 x 2048 it took 0.29x the f32 core's time (16 threads, AMX); at 64 rows,
 * where the weights' bytes bind, runs were erratic (docs/kernels/cpu.md), so decode
 * sizes keep the f32 core until measured better. */
#define MXF_ONEDNN_MIN_ROWS 128

#if defined(MXF_HAVE_CBLAS)
#define MXF_CPU_F32_DEFAULT MXF_CPU_CORE_BLAS
#else
#define MXF_CPU_F32_DEFAULT MXF_CPU_CORE_C
#endif

mxf_status mxf_cpu_core_plan(mxf_plan *plan, mxf_cpu_panels *pp) {
  mxf_cpu_override ov;
  mxf_status ost = mxf_override_parse(plan->ov.text, &mxf_cpu_config_keys, &ov, sizeof ov);
  if (ost != MXF_OK) return ost;
  const int want = ov.cpu;
  if (want == MXF_CPU_CORE_BLAS && MXF_CPU_F32_DEFAULT != MXF_CPU_CORE_BLAS)
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED, MXF_CONFIG_ENV " cpu=blas: this build has no OpenBLAS");
  mxf_cpu_core *c = (mxf_cpu_core *)calloc(1, sizeof *c);
  if (!c) return mxf_set_error(MXF_ERR_NO_MEMORY, "cpu backend: out of memory");
  c->f32 = want == MXF_CPU_CORE_C ? MXF_CPU_CORE_C : MXF_CPU_F32_DEFAULT;
  c->kind = c->f32;
  snprintf(c->name, sizeof c->name, "%s", c->f32 == MXF_CPU_CORE_BLAS ? "blas" : "c");
  /* an empty GEMM has no work for oneDNN, asked for or not */
  const int empty = pp->rows <= 0 || pp->cols <= 0 || pp->k <= 0;
  const int large = pp->rows >= MXF_ONEDNN_MIN_ROWS && pp->cols >= MXF_ONEDNN_MIN_ROWS;
  if (!empty && (want == MXF_CPU_CORE_ONEDNN || (want == MXF_CHOOSE && large))) {
    char name[sizeof c->name], before[1024];
    snprintf(before, sizeof before, "%s", mxf_last_error());
    mxf_status st = mxf_cpu_bf16_create(pp, want == MXF_CPU_CORE_ONEDNN, &c->bf16, name, sizeof name);
    if (st == MXF_OK) {
      c->kind = MXF_CPU_CORE_ONEDNN;
      snprintf(c->name, sizeof c->name, "%s", name);
    } else if (want == MXF_CPU_CORE_ONEDNN) {
      free(c);
      return st;
    } else {
      mxf_set_error(MXF_OK, "%s", before); /* chosen, not asked for: the f32 core takes it, and
                                              a successful plan leaves the last error as it was */
    }
  }
  plan->impl = c;
  pp->core = c;
  snprintf(plan->kernel, sizeof plan->kernel, "cpu/%s", c->name);
  return MXF_OK;
}

void mxf_cpu_core_free(mxf_plan *plan) {
  mxf_cpu_core *c = (mxf_cpu_core *)plan->impl;
  if (!c) return;
  mxf_cpu_bf16_destroy(c->bf16);
  free(c);
  plan->impl = NULL;
}

static mxf_status cpu_plan(mxf_plan *plan) {
  switch (plan->op) {
  case MXF_OP_GEMM_AMAX: return mxf_cpu_gemm_amax_plan(plan);
  case MXF_OP_PROJ_ROPE: return mxf_cpu_proj_rope_plan(plan);
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

static mxf_status cpu_run(const mxf_plan *plan, const void *args, void *ws, size_t ws_size, void *stream) {
  (void)stream;
  switch (plan->op) {
  case MXF_OP_GEMM_AMAX: return mxf_cpu_gemm_amax_run(plan, (const mxf_gemm_amax_args *)args, ws, ws_size);
  case MXF_OP_PROJ_ROPE: return mxf_cpu_proj_rope_run(plan, (const mxf_proj_rope_args *)args, ws, ws_size);
  case MXF_OP_QUANTIZE: return mxf_cpu_quantize_run(plan, (const mxf_quantize_args *)args, ws, ws_size);
  case MXF_OP_DEQUANTIZE: return mxf_cpu_dequantize_run(plan, (const mxf_dequantize_args *)args);
  }
  return mxf_set_error(MXF_ERR_INTERNAL, "cpu backend: unknown op %d", (int)plan->op);
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
