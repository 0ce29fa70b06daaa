/* The CPU backend's choice of a plan's GEMM core (cpu.h: mxf_cpu_core_plan), taken by the
 * gemm_amax and proj_rope plans. Story and measurements: docs/kernels/cpu.md. */
#include <stdio.h>
#include <stdlib.h>

#include "cpu/cpu.h"
#include "cpu/parallel.h"

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

mxf_status mxf_cpu_core_plan(mxf_plan *plan, mxf_cpu_panels *pp, int asked) {
  if (asked == MXF_CPU_CORE_BLAS && MXF_CPU_F32_DEFAULT != MXF_CPU_CORE_BLAS)
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED, MXF_CONFIG_ENV " cpu=blas: this build has no OpenBLAS");
  mxf_cpu_core *c = (mxf_cpu_core *)calloc(1, sizeof *c);
  if (!c) return mxf_set_error(MXF_ERR_NO_MEMORY, "cpu backend: out of memory");
  c->f32 = asked == MXF_CPU_CORE_C ? MXF_CPU_CORE_C : MXF_CPU_F32_DEFAULT;
  c->kind = c->f32;
  snprintf(c->name, sizeof c->name, "%s", c->f32 == MXF_CPU_CORE_BLAS ? "blas" : "c");
  /* an empty GEMM has no work for oneDNN, asked for or not */
  const int empty = pp->rows <= 0 || pp->cols <= 0 || pp->k <= 0;
  const int large = pp->rows >= MXF_ONEDNN_MIN_ROWS && pp->cols >= MXF_ONEDNN_MIN_ROWS;
  if (!empty && (asked == MXF_CPU_CORE_ONEDNN || (asked < 0 && large && !mxf_cpu_forked_child()))) {
    char name[sizeof c->name], before[1024];
    snprintf(before, sizeof before, "%s", mxf_last_error());
    mxf_status st = mxf_cpu_bf16_create(pp, asked == MXF_CPU_CORE_ONEDNN, &c->bf16, name, sizeof name);
    if (st == MXF_OK) {
      c->kind = MXF_CPU_CORE_ONEDNN;
      snprintf(c->name, sizeof c->name, "%s", name);
    } else if (asked == MXF_CPU_CORE_ONEDNN) {
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
