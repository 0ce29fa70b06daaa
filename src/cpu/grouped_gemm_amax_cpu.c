/*
 * grouped_gemm_amax_cpu.c — grouped GEMM + amax on the CPU (SPEC §6): one plan for the
 * shapes, its run walking the groups of the routing it is given through gemm_amax_cpu.c's
 * GEMM (mxf_cpu_gemm_amax_group), each group a gemm_amax of its rows against its B.
 *
 * A group runs on the tiles gemm_amax lays out for its rows where they fit the plan's
 * workspace (sized at plan time for M rows' tiles and the streaming path's few rows:
 * group_panels_ws), else on the plan's tiles over its rows; one workspace serves every
 * routing, and either way each element's bits are gemm_amax's (SPEC §5.1). A routing is read and checked
 * whole (mxf_validate_routing) before anything is written.
 *
 * The GEMM core is gemm_amax's default, the library's own (SPEC §5.1: each element's bits
 * do not depend on the group it is computed in), or OpenBLAS when asked (cpu=blas).
 * oneDNN's primitives are made per tile shape when a plan is made, and a group's rows are
 * known only when it runs: MXF_CONFIG's cpu=onednn is refused as not supported.
 *
 * Per group, the operands are the group's slices: its rows of A and C (contiguous layout:
 * from the previous group's end; masked: group g's matrix), B[g], SFB's batch g, and SFA's
 * rows: compact rows and swizzled batches are slices too, and so are swizzled rows from a
 * multiple of 128 (the swizzle of a row depends on the row alone, below the batch). A
 * group of the contiguous layout starting elsewhere has its SFA rows gathered into a
 * compact block of the workspace (M x Kb bytes at most).
 *
 * Alpha of group g: fl(alpha * group_alpha[g]), or alpha. amax: each group's max |v| is
 * its group_amax; the global one is their max (NaN from any group), overwritten or
 * accumulated as gemm_amax's. A group of no rows writes nothing and has amax 0.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cpu/cpu.h"

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Bytes of SFA gathered per run: the contiguous layout with a swizzled SFA. */
static size_t sfa_gather_bytes(const mxf_grouped_problem *gp) {
  const mxf_gemm_problem *p = &gp->gemm;
  if (gp->masked || p->a_fmt == MXF_BF16 || p->sfa_layout != MXF_SF_SWIZZLED) return 0;
  return (size_t)(p->m * p->kb);
}

/* The panels of this problem's M rows (what a plan lays out) on the plan's core. */
static mxf_cpu_panels plan_panels(const mxf_gemm_problem *p, int64_t m, const mxf_cpu_core *core) {
  mxf_gemm_problem q = *p;
  q.m = m;
  mxf_cpu_panels pp;
  mxf_cpu_gemm_amax_panels(&q, &pp);
  mxf_cpu_panels_core(&pp, core);
  return pp;
}

/* The plan's panel workspace: that of M rows' tiles, or of min(M, MXF_STREAM_ROWS) rows'
 * on the streaming path (sgemm_cpu.c), whose layout for a few rows grows with them and
 * differs from the tiles' (a group of those rows runs on its own tiles, which fit). */
static size_t group_panels_ws(const mxf_grouped_problem *gp, const mxf_cpu_core *core) {
  const int64_t m = gp->gemm.m, few = m < MXF_STREAM_ROWS ? m : MXF_STREAM_ROWS;
  const mxf_cpu_panels a = plan_panels(&gp->gemm, m, core), b = plan_panels(&gp->gemm, few, core);
  const size_t wa = mxf_cpu_panels_workspace(&a), wb = mxf_cpu_panels_workspace(&b);
  return wa > wb ? wa : wb;
}

mxf_status mxf_cpu_grouped_gemm_amax_plan(mxf_plan *plan, const mxf_cpu_override *ov) {
  const mxf_grouped_problem *gp = &plan->p.grouped;
  if (ov->cpu == MXF_CPU_CORE_ONEDNN)
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED, MXF_CONFIG_ENV
                         " cpu=onednn: grouped_gemm_amax runs on the f32 core (cpu=blas or cpu=c); "
                         "oneDNN's primitives are made per tile shape and a group's rows are "
                         "known only at run time");
  mxf_cpu_panels pp;
  mxf_cpu_gemm_amax_panels(&gp->gemm, &pp);
  mxf_status st = mxf_cpu_core_plan(plan, &pp, ov);
  if (st != MXF_OK) return st;
  const mxf_cpu_core *core = (const mxf_cpu_core *)plan->impl;
  snprintf(plan->kernel, sizeof plan->kernel, "cpu/grouped %s", core->name);
  /* + 64: the run aligns the start of the caller's buffer itself */
  plan->workspace_size = align64(group_panels_ws(gp, core)) + sfa_gather_bytes(gp) + 64;
  return MXF_OK;
}

/* Bytes of `values` values of a format (e2m1: two per byte; offsets of row starts are even). */
static int64_t value_bytes(mxf_dtype fmt, int64_t values) { return values * mxf_dtype_bits(fmt) / 8; }

mxf_status mxf_cpu_grouped_gemm_amax_run(const mxf_plan *plan, const mxf_grouped_gemm_amax_args *args,
                                         void *ws, size_t ws_size) {
  (void)ws_size; /* core checked it against plan->workspace_size */
  const mxf_grouped_problem *gp = &plan->p.grouped;
  const mxf_gemm_problem *p = &gp->gemm;
  const int32_t *route = gp->masked ? args->counts : args->offs;
  mxf_status st = mxf_validate_routing(gp, route);
  if (st != MXF_OK) return st;

  const mxf_cpu_core *core = (const mxf_cpu_core *)plan->impl;
  const mxf_cpu_panels pp = plan_panels(p, p->m, core);
  uint8_t *base = (uint8_t *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
  const size_t panels_ws = group_panels_ws(gp, core);
  uint8_t *gather = base + align64(panels_ws);

  const uint8_t *a = (const uint8_t *)args->a, *b = (const uint8_t *)args->b;
  const uint8_t *sfa = (const uint8_t *)args->sfa, *sfb = (const uint8_t *)args->sfb;
  uint8_t *c = (uint8_t *)args->c;
  const float alpha = args->alpha ? *args->alpha : 1.0f;
  const int64_t kq = mxf_cdiv(p->kb, 4);
  float amax = 0.0f;
  int has_nan = 0;
  int64_t end = 0;
  for (int64_t g = 0; g < gp->groups; ++g) {
    const int64_t r0 = gp->masked ? 0 : end, rows = gp->masked ? route[g] : route[g] - end;
    if (!gp->masked) end = route[g];
    float group_amax = 0.0f;
    if (rows > 0) {
      mxf_gemm_problem q = *p;
      q.m = rows;
      const int64_t a_at = gp->masked ? g * gp->a_gs : r0 * p->a_ms;
      const int64_t c_at = gp->masked ? g * gp->c_gs : r0 * p->c_ms;
      mxf_gemm_amax_args ga = {
          .a = a + value_bytes(p->a_fmt, a_at),
          .b = b + value_bytes(p->b_fmt, g * gp->b_gs),
          .sfb = sfb + mxf_gemm_sf_offset(p->sfb_layout, p->n, p->kb, 0, 0, g),
          .c = c + value_bytes(p->c, c_at),
      };
      if (p->a_fmt == MXF_BF16) {
        ga.sfa = NULL;
      } else if (gp->masked) {
        ga.sfa = sfa + mxf_gemm_sf_offset(p->sfa_layout, p->m, p->kb, 0, 0, g);
      } else if (p->sfa_layout == MXF_SF_COMPACT) {
        ga.sfa = sfa + r0 * p->kb;
      } else if (r0 % 128 == 0) {
        ga.sfa = sfa + (r0 / 128) * kq * 512;
      } else { /* rows of the swizzled SFA from r0, gathered compact */
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t kb = 0; kb < p->kb; ++kb)
            gather[r * p->kb + kb] = sfa[mxf_gemm_sf_offset(MXF_SF_SWIZZLED, p->m, p->kb, r0 + r, kb, 0)];
        ga.sfa = gather;
        q.sfa_layout = MXF_SF_COMPACT;
      }
      const float group_alpha = gp->group_alpha ? alpha * args->group_alpha[g] : alpha;
      ga.alpha = &group_alpha;
      /* the tiles gemm_amax takes for this group's rows where they fit the plan's
       * workspace, else (a group of more than MXF_STREAM_ROWS rows whose balanced tiles
       * are larger) the plan's tiles over its rows: the bits are the same (SPEC §5.1) */
      const mxf_cpu_panels gpp = plan_panels(&q, rows, core);
      const mxf_cpu_panels *use = mxf_cpu_panels_workspace(&gpp) <= panels_ws ? &gpp : &pp;
      st = mxf_cpu_gemm_amax_group(&q, use, &ga, base, &group_amax);
      if (st != MXF_OK) return st;
      if (mxf_f32_isnan(group_amax))
        has_nan = 1;
      else if (group_amax > amax)
        amax = group_amax;
    }
    if (gp->group_amax) args->group_amax[g] = group_amax;
  }
  if (has_nan) amax = mxf_f32_from_bits(0x7FC00000u);
  if (p->flags & MXF_AMAX_ACCUMULATE) {
    /* max(previous, new) with NaN propagating from either side, as gemm_amax */
    float old = *args->amax;
    if (mxf_f32_isnan(old) || old > amax) amax = mxf_f32_isnan(amax) ? amax : old;
  }
  *args->amax = amax;
  return MXF_OK;
}
