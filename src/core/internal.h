/*
 * internal.h — what core hands to the backends: the normalized problems, the plan, and
 * the table a backend fills (layers: docs/design.md).
 *
 * A request is validated once (validate.c) and becomes a plan holding a normalized
 * problem: plain numbers, strides in logical values, every dtype resolved. Backends read
 * only these structs; they never see the user's descriptors and never re-validate.
 */
#ifndef MXF_INTERNAL_H
#define MXF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "mxfuse.h"
#include "../formats.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MXF_INTERNAL __attribute__((visibility("hidden")))

/* ------------------------------------------------------------ errors */
/* Records `status` and a printf-style message as this thread's last error; returns
 * `status` so that callers can write `return mxf_set_error(...)`. */
MXF_INTERNAL mxf_status mxf_set_error(mxf_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
MXF_INTERNAL void mxf_clear_error(void);

/* ------------------------------------------------------------ normalized problems */
typedef enum mxf_op {
  MXF_OP_GEMM_AMAX = 1,
  MXF_OP_PROJ_ROPE = 2,
  MXF_OP_QUANTIZE = 3,
  MXF_OP_DEQUANTIZE = 4,
  MXF_OP_GROUPED_GEMM_AMAX = 5,
} mxf_op;

/* gemm_amax (SPEC §1). Value (m, k, l) of A is at a[m*a_ms + k*a_ks + l*a_ls] counted in
 * values (for e2m1: value index i lives in byte i/2, nibble i%2). Exactly one of a_ms,
 * a_ks is 1 (likewise for B and C). */
typedef struct mxf_gemm_problem {
  int64_t m, n, k, l;
  mxf_dtype a_fmt;   /* MXF_BF16 (no scales), MXF_E4M3, MXF_E5M2 or MXF_E2M1 */
  mxf_dtype b_fmt;   /* MXF_E4M3, MXF_E5M2 or MXF_E2M1 */
  mxf_dtype sfa_fmt; /* MXF_E8M0 or MXF_E4M3 (ue4m3); MXF_DTYPE_INVALID when a is bf16 */
  mxf_dtype sfb_fmt; /* MXF_E8M0 or MXF_E4M3 (ue4m3) */
  mxf_dtype c;       /* MXF_F32, MXF_F16, MXF_BF16, MXF_E4M3, MXF_E5M2 or MXF_E2M1 */
  int sf_vec;        /* 16 or 32 */
  int64_t kb;        /* ceil(k / sf_vec): scale blocks per row */
  mxf_sf_layout sfa_layout, sfb_layout;
  int64_t a_ms, a_ks, a_ls;
  int64_t b_ns, b_ks, b_ls;
  int64_t c_ms, c_ns, c_ls;
  unsigned flags; /* MXF_AMAX_ACCUMULATE */
} mxf_gemm_problem;

/* Byte offset of the scale of (row, k-block, batch) in an SF tensor of the problem. */
MXF_HD int64_t mxf_gemm_sf_offset(mxf_sf_layout layout, int64_t mn, int64_t kb_count, int64_t row, int64_t kb,
                                  int64_t batch) {
  if (layout == MXF_SF_COMPACT) return (batch * mn + row) * kb_count + kb;
  return mxf_sf_swz_offset(row, kb, batch, mxf_cdiv(mn, 128), mxf_cdiv(kb_count, 4));
}

/* grouped_gemm_amax (SPEC §6): `gemm` is one group's GEMM with m = rows (M in the
 * contiguous layout, Mmax in the masked one) and l = 1; group g's B is at b + g*b_gs
 * values, its SFB at batch g of the SF tensor (L = groups); in the masked layout group
 * g's A and C start g*a_gs, g*c_gs values in and its SFA is batch g. Which rows a group
 * holds is data (offs, counts), read when the plan runs. */
typedef struct mxf_grouped_problem {
  mxf_gemm_problem gemm;
  int64_t groups;
  int masked; /* counts (masked layout), else offs (contiguous layout) */
  int64_t a_gs, b_gs, c_gs;
  int group_alpha, group_amax; /* the optional tensors are given */
} mxf_grouped_problem;

/* The routing of a grouped run, in host memory, against the rules of SPEC §6: offs
 * nondecreasing in [0, rows], or counts in [0, rows]. Refuses with a message naming the
 * group (MXF_ERR_INVALID_VALUE). */
MXF_INTERNAL mxf_status mxf_validate_routing(const mxf_grouped_problem *p, const int32_t *offs_or_counts);

/* proj_rope (SPEC §2). All tensors C-contiguous. */
typedef struct mxf_proj_problem {
  int64_t t, k, h, d, rope, nope;
  int mxfp8;         /* x, w are e4m3 codes with e8m0 scales; else bf16 */
  int w_out_in;      /* w (H*D, K) when set, else (K, H*D) */
  int fp32_epilogue; /* skip the bf16 staging */
  /* The low four bits of each tensor's data pointer as the descriptor gave it when the
   * plan was made (0 where it gave none, as a plan form without data does): a backend may
   * choose a kernel that needs aligned tensors only where they are, and the one-call
   * cache keeps misaligned requests apart. Indexed by mxf_proj_tensor. */
  uint8_t addr_low[8];
} mxf_proj_problem;
typedef enum mxf_proj_tensor {
  MXF_PROJ_T_X,
  MXF_PROJ_T_W,
  MXF_PROJ_T_X_SCALE,
  MXF_PROJ_T_W_SCALE,
  MXF_PROJ_T_OUT_ROW,
  MXF_PROJ_T_OUT_COL,
  MXF_PROJ_T_OUT_SCALES_ROW,
  MXF_PROJ_T_OUT_SCALES_COL
} mxf_proj_tensor;

/* quantize / dequantize (SPEC §3). All tensors C-contiguous. */
typedef struct mxf_quant_problem {
  int64_t rows, cols;
  mxf_dtype x;         /* quantize: input dtype (f32, bf16); dequantize: output dtype */
  unsigned directions; /* MXF_QUANT_ROWS | MXF_QUANT_COLS; exactly one for dequantize */
} mxf_quant_problem;

/* ------------------------------------------------------------ the kernel override */
/* MXF_CONFIG, the one override of the backends' kernel choice, for tests and benchmarks
 * (docs/kernels/README.md): a comma-separated list of key=value, read when a plan is made.
 * Core keeps its text (the one-call cache keys plans by it) and checks every item against
 * the keys the backends declare; each backend parses its own keys into its own plan data
 * (mxf_override_parse), a field it is not asked for left at MXF_CHOOSE. */
#define MXF_CONFIG_ENV "MXF_CONFIG"
#define MXF_CONFIG_MAX 96 /* bytes of its text, the terminating NUL included */
enum { MXF_CHOOSE = -1 };

/* A backend's key: its name, its values and what each sets the key's int8_t field (at
 * `offset` in the backend's override struct) to. */
typedef struct mxf_config_value {
  const char *text; /* NULL ends a key's list */
  int8_t value;
} mxf_config_value;
typedef struct mxf_config_key {
  const char *name;
  size_t offset;
  mxf_config_value values[4];
} mxf_config_key;
typedef struct mxf_config_keys {
  const mxf_config_key *keys;
  size_t count;
  const char *help; /* the keys and values in words, for messages */
} mxf_config_keys;
/* The backends' keys (src/cuda/cuda_config.c, src/cpu/cpu_config.c), every build: a key of
 * a backend not built is accepted and ignored. */
MXF_INTERNAL extern const mxf_config_keys mxf_cuda_config_keys;
MXF_INTERNAL extern const mxf_config_keys mxf_cpu_config_keys;

typedef struct mxf_override {
  char text[MXF_CONFIG_MAX]; /* MXF_CONFIG's text at plan time ("" when unset) */
} mxf_override;

/* MXF_CONFIG's text into text[MXF_CONFIG_MAX] ("" when unset; the plan-cache key holds
 * it); a too long one is MXF_ERR_INVALID_VALUE. */
MXF_INTERNAL mxf_status mxf_override_text(char text[MXF_CONFIG_MAX]);
/* MXF_CONFIG's text into *out (when a plan is made), every item checked: a malformed or
 * too long one, an unknown key or value is MXF_ERR_INVALID_VALUE with a message naming the
 * item and the keys. */
MXF_INTERNAL mxf_status mxf_override_read(mxf_override *out);
/* The items of `text` that are keys of `keys` into out (size bytes, every byte set to
 * MXF_CHOOSE first); every item is checked as mxf_override_read does. */
MXF_INTERNAL mxf_status mxf_override_parse(const char *text, const mxf_config_keys *keys, void *out,
                                           size_t size);

/* ------------------------------------------------------------ plans and backends */
struct mxf_backend;

struct mxf_plan {
  mxf_op op;
  int32_t device; /* MXF_DEVICE_CPU or MXF_DEVICE_CUDA(i) */
  union {
    mxf_gemm_problem gemm;
    mxf_proj_problem proj;
    mxf_quant_problem quant; /* quantize and dequantize */
    mxf_grouped_problem grouped;
  } p;
  const struct mxf_backend *backend;
  mxf_override ov;       /* MXF_CONFIG at plan time (core checks it before the backend plans) */
  char kernel[96];       /* "<backend>/<what runs>", set by the backend's plan(): mxf_plan_backend() */
  size_t workspace_size; /* set by the backend's plan() */
  void *impl;            /* backend-private, freed by its plan_free() */
};

/* A backend: the functions core calls, for every op (plan->op says which). */
typedef struct mxf_backend {
  const char *name;
  /* Plans a validated problem: chooses what runs and sets kernel, workspace_size, impl.
   * Refuses with MXF_ERR_NOT_SUPPORTED (and a reason) what it cannot run. */
  mxf_status (*plan)(mxf_plan *plan);
  /* Runs; args points to the op's public args struct (mxf_<op>_args). Pointers were
   * checked by core. */
  mxf_status (*run)(const mxf_plan *plan, const void *args, void *workspace, size_t workspace_size,
                    void *stream);
  void (*plan_free)(mxf_plan *plan);
  /* Memory of the backend's devices, for the one-call form's workspace arenas; refuses
   * (with a message saying why) while `stream` is being captured into a CUDA graph. */
  mxf_status (*alloc)(int32_t device, size_t bytes, void *stream, void **ptr);
  void (*free)(int32_t device, void *ptr);
} mxf_backend;

MXF_INTERNAL extern const mxf_backend mxf_cpu_backend;
#if defined(MXF_WITH_CUDA)
MXF_INTERNAL extern const mxf_backend mxf_cuda_backend;
MXF_INTERNAL int mxf_cuda_devices(void);
#endif

#ifdef __cplusplus
}
#endif
#endif /* MXF_INTERNAL_H */
