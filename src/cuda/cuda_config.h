/*
 * cuda_config.h — the CUDA backend's MXF_CONFIG keys and the plan data they set
 * (docs/kernels/README.md): which kernel first, and the sm_90a kernels' switches. C and C++.
 */
#ifndef MXF_CUDA_CONFIG_H
#define MXF_CUDA_CONFIG_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA kernels a plan may name. */
typedef enum mxf_kernel_id {
  MXF_KERNEL_PORTABLE = 0,
  MXF_KERNEL_GEMV = 1,
  MXF_KERNEL_SM90 = 2
} mxf_kernel_id;

/* Each field MXF_CHOOSE (the heuristics decide) or the value asked for. */
typedef struct mxf_cuda_override {
  int8_t gemm; /* gemm=portable|gemv|sm90: that kernel first wherever it takes the problem */
  int8_t proj; /* proj=portable|sm90 */
  /* the sm_90a gemm_amax kernel's choices, each on|off (1 | 0) */
  int8_t swap, bpre, bcwide, f16, wg3, sfraw, cring;
  int8_t mxfp8; /* the sm_90a proj_rope kernel's MXFP8 path: mxfp8=prepass|mainloop (0 | 1) */
} mxf_cuda_override;

/* The plan's MXF_CONFIG (plan->ov) read into *out. */
static inline mxf_status mxf_cuda_override_of(const mxf_plan *plan, mxf_cuda_override *out) {
  return mxf_override_parse(plan->ov.text, &mxf_cuda_config_keys, out, sizeof *out);
}

#ifdef __cplusplus
}
#endif
#endif
