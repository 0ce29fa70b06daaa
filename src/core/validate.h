/*
 * validate.h — core-internal: the dtype traits table, the validators that turn public
 * descriptors into the normalized problems of internal.h, the run-time argument checks,
 * and the plan API of api.c that the one-call form (oneshot.c) builds on.
 *
 * validate.c is the only file that knows the rules of SPEC §1–§4; everything after it
 * (plans, backends) trusts the normalized problem.
 */
#ifndef MXF_CORE_VALIDATE_H
#define MXF_CORE_VALIDATE_H

#include "core/internal.h"

/* ------------------------------------------------------------ dtype traits */
/* Roles a dtype may play (bit set). u8/i8 are raw bytes: e8m0 scales or e2m1 pairs. */
enum {
  MXF_DK_FLOAT = 1u << 0,       /* f32, f16, bf16 */
  MXF_DK_FP8 = 1u << 1,         /* e4m3, e5m2 */
  MXF_DK_E2M1_VALUES = 1u << 2, /* e2m1 counted in values */
  MXF_DK_E2M1_BYTES = 1u << 3,  /* e2m1 counted in bytes (pairs): e2m1x2, u8, i8 */
  MXF_DK_SCALE_E8M0 = 1u << 4,  /* read as an e8m0 scale: e8m0, u8, i8 */
  MXF_DK_SCALE_UE4M3 = 1u << 5, /* read as a ue4m3 scale: e4m3 */
  MXF_DK_RAW = 1u << 6,         /* u8, i8 */
  MXF_DK_INDEX = 1u << 7,       /* i32: group offsets and counts */
};

typedef struct mxf_dtype_traits {
  const char *name;
  int bits;       /* storage bits per element as described */
  unsigned kinds; /* MXF_DK_* */
  /* mxf_convert: value i read as f32 / written from f32 (formats.h), NULL where the dtype
   * is not read resp. written as numbers; `values` names the dtype whose values these
   * bytes hold when that is another one (e2m1x2: e2m1 values, two per byte) */
  float (*load)(const void *p, int64_t i);
  void (*store)(void *p, int64_t i, float v);
  mxf_dtype values;
} mxf_dtype_traits;

/* The traits of a valid dtype, NULL otherwise. */
MXF_INTERNAL const mxf_dtype_traits *mxf_dtype_traits_of(mxf_dtype dtype);
/* Whether a valid dtype has any of the given MXF_DK_* roles. */
MXF_INTERNAL int mxf_dtype_is(mxf_dtype dtype, unsigned kinds);

/* ------------------------------------------------------------ validation */
/* Each validator checks a whole descriptor and fills the zeroed normalized problem and
 * the common device of its tensors. need_data: the one-call form, whose tensors must
 * carry data pointers. On failure the error is set and nothing is filled reliably. */
MXF_INTERNAL mxf_status mxf_validate_gemm_amax(const mxf_gemm_amax_desc *desc, int need_data,
                                               mxf_gemm_problem *p, int32_t *device);
MXF_INTERNAL mxf_status mxf_validate_grouped_gemm_amax(const mxf_grouped_gemm_amax_desc *desc, int need_data,
                                                       mxf_grouped_problem *p, int32_t *device);
/* mxf_pack_weights' b and sfb (SPEC §7.1, by §1.1's rules for B): fills the B fields of p
 * (n, k, l, b_fmt, sfb_fmt, sf_vec, kb, sfb_layout, b strides) and *device. */
MXF_INTERNAL mxf_status mxf_validate_pack_weights(const mxf_tensor *b, const mxf_tensor *sfb, int sf_vec,
                                                  int need_data, mxf_gemm_problem *p, int32_t *device);
/* mxf_pack_weights' output against the problem of mxf_validate_pack_weights: present, of
 * the packed size (SPEC §7.2), overlapping neither input (SPEC §4). */
MXF_INTERNAL mxf_status mxf_validate_pack_output(const mxf_gemm_problem *p, const void *b, const void *sfb,
                                                 const void *packed, size_t packed_size);
MXF_INTERNAL mxf_status mxf_validate_proj_rope(const mxf_proj_rope_desc *desc, int need_data,
                                               mxf_proj_problem *p, int32_t *device);
MXF_INTERNAL mxf_status mxf_validate_quantize(const mxf_quantize_desc *desc, int need_data,
                                              mxf_quant_problem *p, int32_t *device);
MXF_INTERNAL mxf_status mxf_validate_dequantize(const mxf_dequantize_desc *desc, int need_data,
                                                mxf_quant_problem *p, int32_t *device);

/* Run-time checks of a plan's run: op matches, args present, pointers present and
 * aligned, workspace large enough. `args` is the op's public args struct. */
MXF_INTERNAL mxf_status mxf_validate_run(const mxf_plan *plan, mxf_op op, const void *args,
                                         const void *workspace, size_t workspace_size);

/* Whether a plan's problem has no element to compute (M, N, L or T of 0, ...): core runs
 * it without its backend (SPEC §4). */
MXF_INTERNAL int mxf_plan_is_empty(const mxf_plan *plan);

/* ------------------------------------------------------------ plans (api.c) */
/* The backend serving `device`, with the status of the refusal when there is none. */
MXF_INTERNAL mxf_status mxf_backend_lookup(int32_t device, const mxf_backend **backend);
/* A new plan for a validated problem (problem_size bytes copied into plan->p). */
MXF_INTERNAL mxf_status mxf_plan_create(mxf_op op, const void *problem, size_t problem_size, int32_t device,
                                        mxf_plan **plan);
/* Checks a run (mxf_validate_run), then runs it on the plan's backend. */
MXF_INTERNAL mxf_status mxf_plan_run(const mxf_plan *plan, mxf_op op, const void *args, void *workspace,
                                     size_t workspace_size, void *stream);

#endif
