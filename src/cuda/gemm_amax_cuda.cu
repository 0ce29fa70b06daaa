/*
 * gemm_amax_cuda.cu — gemm_amax on the CUDA backend: kernel choice (plan) and launch (run).
 *
 *   mixed pair (A bf16 or another MX format than B), M <= GEMV_M_MAX, MX weights that
 *   the weight-streaming kernel takes               -> "cuda/gemv"     (portable/gemm_amax_gemv.cu)
 *   cc 9.0 and the sm_90a kernel takes the problem  -> "cuda/sm90"     (sm90/)
 *   any other problem on cc >= 8.0                  -> "cuda/portable" (portable/)
 *   cc < 8.0                                        -> not supported (no bf16 mma.sync)
 * MXF_GEMM_KERNEL=portable | gemv | sm90 in the environment (read at plan time) puts that
 * kernel first wherever it takes the problem (portable takes every one), so that tests
 * and benchmarks can exercise each on a Hopper GPU.
 *
 * run launches on the caller's stream, allocates nothing, never synchronizes (so it can
 * be captured in a CUDA graph) and returns CUDA errors as MXF_ERR_CUDA.
 */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_ops.h"
#include "cuda/cuda_util.h"
#include "cuda/portable/portable_ops.h"
#if defined(MXF_HAVE_SM90)
#include "cuda/sm90/sm90_ops.h"
#endif


static const char k_sm90[] = "cuda/sm90";
static const char k_portable[] = "cuda/portable";
static const char k_gemv[] = "cuda/gemv";

/* Rows of A up to which a mixed pair streams its weights through cuda/gemv rather than
 * the sm_90a kernel (docs/performance.md, mixed formats). */
#define GEMV_M_MAX 8

static int gemv_takes(const mxf_gemm_problem *p, int sms, size_t *ws) {
  return p->a_fmt != p->b_fmt && mxf_gemv_gemm_amax_plan(p, sms, ws);
}

static int sm90_takes(const mxf_gemm_problem *p, const mxf_cuda_device_info_t *info, size_t *ws) {
#if defined(MXF_HAVE_SM90)
  return info->cc == 90 && mxf_sm90_gemm_amax_plan(p, info->sm_count, ws);
#else
  (void)p, (void)info, (void)ws;
  return 0;
#endif
}

static mxf_status chosen(mxf_plan *plan, const char *kernel, size_t ws) {
  strcpy(plan->kernel, kernel);
  plan->workspace_size = ws;
  return MXF_OK;
}

extern "C" mxf_status mxf_cuda_gemm_amax_plan(mxf_plan *plan) {
  mxf_cuda_device_info_t info;
  mxf_status st = mxf_cuda_plan_device(plan, "gemm_amax", &info);
  if (st != MXF_OK) return st;
  const mxf_gemm_problem *p = &plan->p.gemm;
  const char *force = getenv("MXF_GEMM_KERNEL");
  size_t ws = 0;
  if (force && strcmp(force, "portable") == 0) return chosen(plan, k_portable, 0);
  if (force && strcmp(force, "gemv") == 0 && gemv_takes(p, info.sm_count, &ws)) return chosen(plan, k_gemv, ws);
  if (force && strcmp(force, "sm90") == 0 && sm90_takes(p, &info, &ws)) return chosen(plan, k_sm90, ws);
  if (p->m <= GEMV_M_MAX && gemv_takes(p, info.sm_count, &ws)) return chosen(plan, k_gemv, ws);
  if (sm90_takes(p, &info, &ws)) return chosen(plan, k_sm90, ws);
  if (gemv_takes(p, info.sm_count, &ws)) return chosen(plan, k_gemv, ws);
  return chosen(plan, k_portable, 0);
}

extern "C" mxf_status mxf_cuda_gemm_amax_run(const mxf_plan *plan, const mxf_gemm_amax_args *args, void *ws,
                                             size_t ws_size, void *stream) {
  const mxf_gemm_problem *p = &plan->p.gemm;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (strcmp(plan->kernel, k_gemv) == 0) {
    mxf_cuda_device_info_t info;
    mxf_status st = mxf_cuda_device_info(plan->device - 1, &info); /* cached: no driver call */
    if (st != MXF_OK) return st;
    return mxf_gemv_gemm_amax_launch(p, args, ws, s, info.sm_count);
  }
#if defined(MXF_HAVE_SM90)
  if (strcmp(plan->kernel, k_sm90) == 0) { /* the workspace: checked by core against the plan's */
    mxf_cuda_device_info_t info;
    mxf_status st = mxf_cuda_device_info(plan->device - 1, &info); /* cached: no driver call */
    if (st != MXF_OK) return st;
    return mxf_sm90_gemm_amax_launch(p, args, ws, ws_size, s, info.sm_count);
  }
#endif
  (void)ws;
  (void)ws_size;
  return mxf_portable_gemm_amax_launch(p, args, s);
}
