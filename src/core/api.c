/*
 * api.c — the public entry points below the one-call form: version, devices and
 * backends, the plan form (validate -> backend -> plan; checked runs) and the
 * scale-factor layout helpers. The one-call form is oneshot.c, above this file.
 * Layers and how a call flows: docs/design.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/validate.h"

#define MXF_STR_(x) #x
#define MXF_STR(x) MXF_STR_(x)

int mxf_version(void) { return MXF_VERSION_NUMBER; }

const char *mxf_version_string(void) {
  return MXF_STR(MXF_VERSION_MAJOR) "." MXF_STR(MXF_VERSION_MINOR) "." MXF_STR(MXF_VERSION_PATCH);
}

/* ------------------------------------------------------------ devices and backends */
int mxf_has_cuda(void) {
#if defined(MXF_WITH_CUDA)
  return 1;
#else
  return 0;
#endif
}

int mxf_cuda_device_count(void) {
#if defined(MXF_WITH_CUDA)
  int n = mxf_cuda_devices();
  return n > 0 ? n : 0;
#else
  return 0;
#endif
}

mxf_status mxf_backend_lookup(int32_t device, const mxf_backend **backend) {
  *backend = NULL;
  if (device < 0)
    return mxf_set_error(MXF_ERR_INVALID_VALUE,
                         "device %d is invalid; expected MXF_DEVICE_CPU (0) or MXF_DEVICE_CUDA(i) (1 + i)",
                         (int)device);
  if (device == MXF_DEVICE_CPU) {
    *backend = &mxf_cpu_backend;
    return MXF_OK;
  }
#if defined(MXF_WITH_CUDA)
  int n = mxf_cuda_device_count();
  if (MXF_DEVICE_ORDINAL(device) >= n)
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "CUDA device %d not present (%d device%s)",
                         (int)MXF_DEVICE_ORDINAL(device), n, n == 1 ? "" : "s");
  *backend = &mxf_cuda_backend;
  return MXF_OK;
#else
  return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "CUDA device %d requested, but mxfuse was built without CUDA",
                       (int)MXF_DEVICE_ORDINAL(device));
#endif
}

/* ------------------------------------------------------------ plans */
mxf_status mxf_plan_create(mxf_op op, const void *problem, size_t problem_size, int32_t device,
                           mxf_plan **out) {
  const mxf_backend *backend;
  mxf_status st = mxf_backend_lookup(device, &backend);
  if (st != MXF_OK) return st;
  if (problem_size > sizeof(((mxf_plan *)0)->p))
    return mxf_set_error(MXF_ERR_INTERNAL, "plan: problem of %zu bytes does not fit", problem_size);
  mxf_override ov;
  st = mxf_override_read(&ov);
  if (st != MXF_OK) return st;
  mxf_plan *plan = calloc(1, sizeof *plan);
  if (!plan) return mxf_set_error(MXF_ERR_NO_MEMORY, "plan: cannot allocate %zu bytes", sizeof *plan);
  plan->ov = ov;
  plan->op = op;
  plan->device = device;
  memcpy(&plan->p, problem, problem_size);
  plan->backend = backend;
  strncpy(plan->kernel, backend->name, sizeof plan->kernel - 1);
  if (mxf_plan_is_empty(plan)) { /* no backend work (SPEC §4): core runs it */
    snprintf(plan->kernel, sizeof plan->kernel, "%s/empty", backend->name);
    *out = plan;
    return MXF_OK;
  }
  st = backend->plan(plan);
  if (st != MXF_OK) {
    backend->plan_free(plan);
    free(plan);
    return st;
  }
  *out = plan;
  return MXF_OK;
}

/* An empty problem (SPEC §4): gemm_amax sets amax to 0 (unless it accumulates), nothing
 * else is touched. */
static mxf_status run_empty(const mxf_plan *plan, const void *args) {
  if (plan->op != MXF_OP_GEMM_AMAX || (plan->p.gemm.flags & MXF_AMAX_ACCUMULATE)) return MXF_OK;
  if (plan->device != MXF_DEVICE_CPU)
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED,
                         "gemm_amax_run: an empty problem (M, N or L of 0) on a CUDA "
                         "device without MXF_AMAX_ACCUMULATE; accumulate, or skip the call "
                         "and zero amax yourself");
  *((const mxf_gemm_amax_args *)args)->amax = 0.0f;
  return MXF_OK;
}

mxf_status mxf_plan_run(const mxf_plan *plan, mxf_op op, const void *args, void *workspace,
                        size_t workspace_size, void *stream) {
  mxf_status st = mxf_validate_run(plan, op, args, workspace, workspace_size);
  if (st != MXF_OK) return st;
  if (mxf_plan_is_empty(plan)) return run_empty(plan, args);
  return plan->backend->run(plan, args, workspace, workspace_size, stream);
}

size_t mxf_plan_workspace_size(const mxf_plan *plan) { return plan ? plan->workspace_size : 0; }

const char *mxf_plan_backend(const mxf_plan *plan) { return plan ? plan->kernel : "none"; }

void mxf_plan_destroy(mxf_plan *plan) {
  if (!plan) return;
  if (plan->backend && !mxf_plan_is_empty(plan)) plan->backend->plan_free(plan);
  free(plan);
}

/* One op's plan form: plan (validate, then a backend plans the normalized problem) and
 * run. The one-call forms sit above these, in oneshot.c. */
#define MXF_DEFINE_OP(name, OP, desc_t, args_t, problem_t, validate)                                         \
  mxf_status mxf_##name##_plan(mxf_plan **plan, const desc_t *desc) {                                        \
    if (!plan)                                                                                               \
      return mxf_set_error(MXF_ERR_INVALID_VALUE, #name "_plan: plan (the output pointer) is NULL");         \
    *plan = NULL;                                                                                            \
    problem_t p;                                                                                             \
    int32_t device;                                                                                          \
    memset(&p, 0, sizeof p);                                                                                 \
    mxf_status st = validate(desc, 0, &p, &device);                                                          \
    if (st != MXF_OK) return st;                                                                             \
    return mxf_plan_create(OP, &p, sizeof p, device, plan);                                                  \
  }                                                                                                          \
  mxf_status mxf_##name##_run(const mxf_plan *plan, const args_t *args, void *workspace,                     \
                              size_t workspace_size, void *stream) {                                         \
    return mxf_plan_run(plan, OP, args, workspace, workspace_size, stream);                                  \
  }

MXF_DEFINE_OP(gemm_amax, MXF_OP_GEMM_AMAX, mxf_gemm_amax_desc, mxf_gemm_amax_args, mxf_gemm_problem,
              mxf_validate_gemm_amax)
MXF_DEFINE_OP(proj_rope, MXF_OP_PROJ_ROPE, mxf_proj_rope_desc, mxf_proj_rope_args, mxf_proj_problem,
              mxf_validate_proj_rope)
MXF_DEFINE_OP(quantize, MXF_OP_QUANTIZE, mxf_quantize_desc, mxf_quantize_args, mxf_quant_problem,
              mxf_validate_quantize)
MXF_DEFINE_OP(dequantize, MXF_OP_DEQUANTIZE, mxf_dequantize_desc, mxf_dequantize_args, mxf_quant_problem,
              mxf_validate_dequantize)
MXF_DEFINE_OP(grouped_gemm_amax, MXF_OP_GROUPED_GEMM_AMAX, mxf_grouped_gemm_amax_desc,
              mxf_grouped_gemm_amax_args, mxf_grouped_problem, mxf_validate_grouped_gemm_amax)

/* ------------------------------------------------------------ scale-factor layouts */
/* Blocks per row and swizzled tile counts of an (mn, k, l) operand; 0 when out of range. */
static int sf_geometry(int64_t mn, int64_t k, int64_t l, int sf_vec, int64_t *kb, int64_t *compact_bytes,
                       int64_t *swizzled_bytes) {
  const int64_t lim = INT64_C(1) << 40;
  if (mn <= 0 || k <= 0 || l <= 0 || mn > lim || k > lim || l > lim || (sf_vec != 16 && sf_vec != 32))
    return 0;
  int64_t b = mxf_cdiv(k, sf_vec), r = mxf_cdiv(mn, 128), kq = mxf_cdiv(b, 4), c, s;
  if (__builtin_mul_overflow(l, mn, &c) || __builtin_mul_overflow(c, b, &c)) return 0;
  if (__builtin_mul_overflow(l, r, &s) || __builtin_mul_overflow(s, kq, &s) ||
      __builtin_mul_overflow(s, 512, &s))
    return 0;
  *kb = b;
  *compact_bytes = c;
  *swizzled_bytes = s;
  return 1;
}

size_t mxf_sf_size(int64_t mn, int64_t k, int64_t l, int sf_vec, mxf_sf_layout layout) {
  int64_t kb, c, s;
  if (!sf_geometry(mn, k, l, sf_vec, &kb, &c, &s)) return 0;
  if (layout == MXF_SF_COMPACT) return (size_t)c;
  if (layout == MXF_SF_SWIZZLED) return (size_t)s;
  return 0;
}

int64_t mxf_sf_swizzled_offset(int64_t row, int64_t kblock, int64_t batch, int64_t mn, int64_t k,
                               int sf_vec) {
  int64_t kb, c, s;
  if (batch < 0 || batch >= (INT64_C(1) << 40)) return -1;
  /* geometry of batches 0..batch, so that the offset cannot overflow */
  if (!sf_geometry(mn, k, batch + 1, sf_vec, &kb, &c, &s)) return -1;
  if (row < 0 || row >= mn || kblock < 0 || kblock >= kb) return -1;
  return mxf_sf_swz_offset(row, kblock, batch, mxf_cdiv(mn, 128), mxf_cdiv(kb, 4));
}

static mxf_status sf_check(const char *fn, const void *src, const void *dst, int64_t mn, int64_t k, int64_t l,
                           int sf_vec, int64_t *kb, int64_t *swz_bytes) {
  int64_t c;
  if (!src || !dst)
    return mxf_set_error(MXF_ERR_INVALID_VALUE, "%s: %s is NULL", fn, !src ? "source" : "destination");
  if (!sf_geometry(mn, k, l, sf_vec, kb, &c, swz_bytes))
    return mxf_set_error(
        MXF_ERR_INVALID_VALUE,
        "%s: mn=%lld, k=%lld, l=%lld, sf_vec=%d; expected mn, k, l in [1, 2^40] and sf_vec 16 or 32", fn,
        (long long)mn, (long long)k, (long long)l, sf_vec);
  return MXF_OK;
}

mxf_status mxf_sf_swizzle(const uint8_t *compact, uint8_t *swizzled, int64_t mn, int64_t k, int64_t l,
                          int sf_vec, uint8_t pad_byte) {
  int64_t kb, bytes;
  mxf_status st = sf_check("sf_swizzle", compact, swizzled, mn, k, l, sf_vec, &kb, &bytes);
  if (st != MXF_OK) return st;
  int64_t R = mxf_cdiv(mn, 128), kq = mxf_cdiv(kb, 4);
  memset(swizzled, pad_byte, (size_t)bytes);
  for (int64_t b = 0; b < l; ++b)
    for (int64_t r = 0; r < mn; ++r) {
      const uint8_t *row = compact + (b * mn + r) * kb;
      for (int64_t j = 0; j < kb; ++j)
        swizzled[mxf_sf_swz_offset(r, j, b, R, kq)] = row[j];
    }
  return MXF_OK;
}

mxf_status mxf_sf_unswizzle(const uint8_t *swizzled, uint8_t *compact, int64_t mn, int64_t k, int64_t l,
                            int sf_vec) {
  int64_t kb, bytes;
  mxf_status st = sf_check("sf_unswizzle", swizzled, compact, mn, k, l, sf_vec, &kb, &bytes);
  if (st != MXF_OK) return st;
  int64_t R = mxf_cdiv(mn, 128), kq = mxf_cdiv(kb, 4);
  for (int64_t b = 0; b < l; ++b)
    for (int64_t r = 0; r < mn; ++r) {
      uint8_t *row = compact + (b * mn + r) * kb;
      for (int64_t j = 0; j < kb; ++j)
        row[j] = swizzled[mxf_sf_swz_offset(r, j, b, R, kq)];
    }
  return MXF_OK;
}
