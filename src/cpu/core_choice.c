/* The CPU backend's choice of a plan's GEMM core (cpu.h: mxf_cpu_core_plan), taken by the
 * gemm_amax and proj_rope plans. Story and measurements: docs/kernels/cpu.md. */
#include <stdio.h>
#include <stdlib.h>

#include "cpu/cpu.h"
#include "cpu/parallel.h"

/* The default is the library's own core (sgemm_cpu.c): its sums follow the order SPEC
 * §5 fixes, whatever the shape, the cut and the threads. OpenBLAS (cpu=blas) and oneDNN's
 * bf16 matmul (cpu=onednn) are taken only when asked for, and give that up. */
#if defined(MXF_HAVE_CBLAS)
#define MXF_CPU_HAVE_BLAS 1
#else
#define MXF_CPU_HAVE_BLAS 0
#endif

mxf_status mxf_cpu_core_plan(mxf_plan *plan, mxf_cpu_panels *pp, const mxf_cpu_override *ov) {
  const int asked = ov->cpu;
  if (asked == MXF_CPU_CORE_BLAS && !MXF_CPU_HAVE_BLAS)
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED, MXF_CONFIG_ENV " cpu=blas: this build has no OpenBLAS");
  const mxf_cpu_isa_kind best = mxf_cpu_isa_best();
  if (ov->isa >= 0 && ov->isa > (int)best)
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED, MXF_CONFIG_ENV " cpu_isa=%s: this processor's best is %s",
                         mxf_cpu_isa_name((mxf_cpu_isa_kind)ov->isa), mxf_cpu_isa_name(best));
  mxf_cpu_core *c = (mxf_cpu_core *)calloc(1, sizeof *c);
  if (!c) return mxf_set_error(MXF_ERR_NO_MEMORY, "cpu backend: out of memory");
  c->isa = ov->isa >= 0 ? (mxf_cpu_isa_kind)ov->isa : best;
  c->stream = ov->stream != 0;
  c->f32 = asked == MXF_CPU_CORE_BLAS ? MXF_CPU_CORE_BLAS : MXF_CPU_CORE_C;
  c->kind = c->f32;
  snprintf(c->name, sizeof c->name, "%s", c->f32 == MXF_CPU_CORE_BLAS ? "blas" : "c");
  /* an empty GEMM has no work for oneDNN, asked for or not */
  const int empty = pp->rows <= 0 || pp->cols <= 0 || pp->k <= 0;
  if (!empty && asked == MXF_CPU_CORE_ONEDNN) {
    char name[sizeof c->name];
    mxf_status st = mxf_cpu_bf16_create(pp, 1, &c->bf16, name, sizeof name);
    if (st != MXF_OK) {
      free(c);
      return st;
    }
    c->kind = MXF_CPU_CORE_ONEDNN;
    snprintf(c->name, sizeof c->name, "%s", name);
  }
  plan->impl = c;
  mxf_cpu_panels_core(pp, c);
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
