/*
 * internal.h — what core hands to the backends.
 *
 * A request is validated once, in src/core/validate.c, and becomes a plan holding a
 * normalized problem (below): plain numbers, strides in logical values, every dtype
 * resolved (u8 scales -> e8m0, e2m1x2/u8 operands -> e2m1, ...). Backends read only
 * these structs; they never see the user's descriptors and never re-validate.
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

/* proj_rope (SPEC §2). All tensors C-contiguous. */
typedef struct mxf_proj_problem {
  int64_t t, k, h, d, rope, nope;
  int mxfp8;         /* x, w are e4m3 codes with e8m0 scales; else bf16 */
  int w_out_in;      /* w (H*D, K) when set, else (K, H*D) */
  int fp32_epilogue; /* skip the bf16 staging */
} mxf_proj_problem;

/* quantize / dequantize (SPEC §3). All tensors C-contiguous. */
typedef struct mxf_quant_problem {
  int64_t rows, cols;
  mxf_dtype x;         /* quantize: input dtype (f32, bf16); dequantize: output dtype */
  unsigned directions; /* MXF_QUANT_ROWS | MXF_QUANT_COLS; exactly one for dequantize */
} mxf_quant_problem;

/* ------------------------------------------------------------ the kernel override */
/* MXF_CONFIG, the one override of the backends' kernel choice, for tests and benchmarks
 * (docs/kernels/README.md): a comma-separated list of key=value, read when a plan is made. Each
 * field is MXF_CHOOSE (the heuristics decide) or the value asked for. */
#define MXF_CONFIG_ENV "MXF_CONFIG"
#define MXF_CONFIG_MAX 96 /* bytes of its text, the terminating NUL included */
enum { MXF_CHOOSE = -1 };
typedef enum mxf_kernel_id {
  MXF_KERNEL_PORTABLE = 0,
  MXF_KERNEL_GEMV = 1,
  MXF_KERNEL_SM90 = 2
} mxf_kernel_id;
/* the CPU backend's GEMM cores (src/cpu/cpu.h) */
typedef enum mxf_cpu_core_kind {
  MXF_CPU_CORE_C = 0,
  MXF_CPU_CORE_BLAS = 1,
  MXF_CPU_CORE_ONEDNN = 2
} mxf_cpu_core_kind;
typedef struct mxf_override {
  int8_t gemm; /* gemm=portable|gemv|sm90: that kernel first wherever it takes the problem */
  int8_t proj; /* proj=portable|sm90 */
  /* the sm_90a gemm_amax kernel's choices, each on|off (1 | 0) */
  int8_t swap, bpre, bcwide, f16, wg3, sfraw, cring;
  int8_t mxfp8; /* the sm_90a proj_rope kernel's MXFP8 path: mxfp8=prepass|mainloop (0 | 1) */
  int8_t cpu;   /* the CPU backend's GEMM core: cpu=onednn|blas|c (mxf_cpu_core_kind) */
} mxf_override;

/* MXF_CONFIG's text into text[MXF_CONFIG_MAX] ("" when unset; the plan-cache key holds
 * it); a too long one is MXF_ERR_INVALID_VALUE. */
MXF_INTERNAL mxf_status mxf_override_text(char text[MXF_CONFIG_MAX]);
/* MXF_CONFIG parsed into *out (when a plan is made). A malformed or too long one is
 * MXF_ERR_INVALID_VALUE with a message naming the item and the keys. */
MXF_INTERNAL mxf_status mxf_override_read(mxf_override *out);

/* ------------------------------------------------------------ plans and backends */
struct mxf_backend;

struct mxf_plan {
  mxf_op op;
  int32_t device; /* MXF_DEVICE_CPU or MXF_DEVICE_CUDA(i) */
  union {
    mxf_gemm_problem gemm;
    mxf_proj_problem proj;
    mxf_quant_problem quant; /* quantize and dequantize */
  } p;
  const struct mxf_backend *backend;
  mxf_override ov;       /* MXF_CONFIG at plan time (core parses it before the backend plans) */
  char kernel[96];       /* "cpu/blas", "cuda/sm90 128x256 prepass", ...: mxf_plan_backend() */
  size_t workspace_size; /* set by the backend's plan() */
  void *impl;            /* backend-private, freed by its plan_free() */
};

/* Arguments of a run, by op: the public args structs. */
typedef struct mxf_backend {
  const char *name;
  /* Chooses a kernel for a validated plan: sets kernel, workspace_size, impl.
   * Refuses with MXF_ERR_NOT_SUPPORTED (and a reason) what it cannot run. */
  mxf_status (*plan)(mxf_plan *plan);
  /* Runs; args points to the op's public args struct. Pointers were checked by core. */
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
