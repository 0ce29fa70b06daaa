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

/* The alignment in bytes the sm_90a kernel needs of tensor i (mxf_proj_tensor) of p on the
 * chosen MXFP8 path (mainloop), or 0 where it needs none: 16 for x and w (TMA) and, on the
 * in-out MXFP8 pre-pass, w_scale; 4 for the epilogue's stores of 4 codes or column scale
 * bytes, 2 for its stores of 2 row scale bytes. (A workspace of MXFP8 inputs needs 16.) */
unsigned mxf_cuda_proj_sm90_align(const mxf_proj_problem *p, int mainloop, int i);

#endif
