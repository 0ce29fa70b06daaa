/*
 * proj_rope_config.h — what proj_rope's chooser (proj_rope_heuristics.cu) decides and its
 * launch (proj_rope_cuda.cu) reads: the config a plan holds. Host code.
 */
#ifndef MXF_PROJ_ROPE_CONFIG_H
#define MXF_PROJ_ROPE_CONFIG_H

#include <stddef.h>

#include "core/internal.h"
#include "cuda/cuda_config.h"
#include "cuda/cuda_util.h"
#include "cuda/portable/proj_rope_portable_shape.h"
#include "cuda/sm90/proj_rope_sm90_shape.h"

/* A proj_rope plan's config (plan->impl on the CUDA backend). */
struct mxf_cuda_proj_config {
  mxf_kernel_id kernel;         /* MXF_KERNEL_SM90 or MXF_KERNEL_PORTABLE */
  int sm_count;                 /* of the plan's device */
  size_t workspace;             /* the chosen kernel's */
  mxf_projp::geometry portable; /* kernel == MXF_KERNEL_PORTABLE */
  mxf_proj90::geometry sm90;    /* kernel == MXF_KERNEL_SM90 */
};

/* Chooses the kernel of p on the device (info) under ov, fills *cfg and writes the
 * kernel's name into name[name_len] ("cuda/sm90 prepass"). */
mxf_status mxf_cuda_proj_rope_choose(const mxf_proj_problem *p, const mxf_cuda_device_info_t *info,
                                     const mxf_cuda_override *ov, mxf_cuda_proj_config *cfg, char *name,
                                     size_t name_len);

#endif
