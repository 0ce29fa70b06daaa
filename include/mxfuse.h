/*
 * mxfuse — block-scaled ("MX") GEMMs with fused epilogues.
 *
 * The one public header. Two fused operations (see docs/spec.md, cited as "SPEC §n"):
 *   gemm_amax  — C = alpha * (A·SFA) (B·SFB)^T, converted to C's dtype, plus amax = max|C|
 *   proj_rope  — DeepSeek-V3 MLA Q up-projection: GEMM, per-head RoPE, MXFP8 quantization
 *                of the result along features (rows) and along tokens (columns)
 * and two building blocks: MXFP8 quantize / dequantize.
 *
 * Every operation comes in two forms:
 *   - plan form:  mxf_<op>_plan(&plan, &desc)  (validates, picks a backend)
 *                 mxf_plan_workspace_size(plan)
 *                 mxf_<op>_run(plan, &args, workspace, workspace_size, stream)
 *                 mxf_plan_destroy(plan)
 *     run allocates nothing and never synchronizes (CUDA-graph capturable).
 *   - one-call form: mxf_<op>(&desc, stream) — the desc's tensors carry their data
 *     pointers; plans are kept in a small internal cache, and runs share one workspace
 *     arena per device and stream (per thread on the CPU and the NULL stream), grown to
 *     the largest workspace asked for: memory does not grow with the number of shapes.
 *     mxf_<op>_workspace_size(&desc, &bytes) + mxf_<op>_with_workspace(&desc, ws, bytes,
 *     stream) is the same with the caller's workspace (a framework's allocator, a graph
 *     capture that must allocate nothing).
 *
 * Where the tensors live picks the backend: host tensors run on the CPU backend,
 * CUDA tensors on the CUDA backend of their device.
 *
 * Errors: every function returns an mxf_status; on failure mxf_last_error() gives a
 * message (thread-local) naming the tensor and the rule it breaks. On any error nothing
 * is written to an output. The library never prints, exits or aborts.
 */
#ifndef MXFUSE_H
#define MXFUSE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define MXF_API
#else
#define MXF_API __attribute__((visibility("default")))
#endif

/* ---------------------------------------------------------------- version */
#define MXF_VERSION_MAJOR 0
#define MXF_VERSION_MINOR 1
#define MXF_VERSION_PATCH 0
#define MXF_VERSION_NUMBER (MXF_VERSION_MAJOR * 10000 + MXF_VERSION_MINOR * 100 + MXF_VERSION_PATCH)

/** The library's version as MXF_VERSION_NUMBER of the build that is linked. */
MXF_API int mxf_version(void);
/** The library's version as a string, e.g. "0.1.0". */
MXF_API const char *mxf_version_string(void);

/* ---------------------------------------------------------------- status */
typedef enum mxf_status {
  MXF_OK = 0,
  MXF_ERR_INVALID_VALUE = 1, /* the request breaks a rule of the contract        */
  MXF_ERR_NOT_SUPPORTED = 2, /* valid, but this backend/device cannot run it      */
  MXF_ERR_CUDA = 3,          /* a CUDA call failed; the message has its string    */
  MXF_ERR_NO_MEMORY = 4,     /* a host or device allocation failed                */
  MXF_ERR_INTERNAL = 5,      /* a bug in mxfuse; please report the message        */
} mxf_status;

/** Short name of a status ("MXF_ERR_INVALID_VALUE"); never NULL. */
MXF_API const char *mxf_status_string(mxf_status status);
/** Message of the last failed call on this thread ("" if none yet). Successful calls
 *  leave it unchanged; other threads never see it. The text stays valid until the next
 *  failing mxfuse call on the same thread. */
MXF_API const char *mxf_last_error(void);

/* ---------------------------------------------------------------- dtypes */
typedef enum mxf_dtype {
  MXF_DTYPE_INVALID = 0,
  MXF_F32 = 1,
  MXF_F16 = 2,
  MXF_BF16 = 3,
  MXF_E4M3 = 4,   /* float8_e4m3fn; also the "ue4m3" scale dtype                   */
  MXF_E5M2 = 5,   /* float8_e5m2                                                   */
  MXF_E2M1 = 6,   /* float4_e2m1, described by logical values (shape/strides count
                     values; storage packs two per byte, even value in the low nibble) */
  MXF_E2M1X2 = 7, /* float4_e2m1 packed pairs, described by bytes (innermost extent
                     and strides count bytes = pairs of values)                      */
  MXF_E8M0 = 8,   /* float8_e8m0fnu scale: 2^(b-127), 0xFF = NaN                    */
  MXF_U8 = 9,     /* raw bytes; read as e8m0 for scales, as e2m1x2 for e2m1 operands */
  MXF_I8 = 10,    /* as MXF_U8                                                      */
  MXF_I32 = 11,   /* int32: the group offsets and counts of grouped_gemm_amax      */
  MXF_DTYPE_COUNT
} mxf_dtype;

/** "f32", "bf16", "e4m3", ...; "invalid" for anything else. */
MXF_API const char *mxf_dtype_name(mxf_dtype dtype);
/** Bits of storage per element as described (4 for MXF_E2M1, 8 for MXF_E2M1X2). */
MXF_API int mxf_dtype_bits(mxf_dtype dtype);

/* ---------------------------------------------------------------- tensors */
/** Where a tensor lives: MXF_DEVICE_CPU (0, the default of a zeroed struct) or
 *  MXF_DEVICE_CUDA(i) for CUDA device ordinal i (encoded as 1 + i). Decode a device
 *  with MXF_DEVICE_IS_CUDA(d) and MXF_DEVICE_ORDINAL(d) (the CUDA ordinal; meaningful
 *  only where MXF_DEVICE_IS_CUDA(d)). */
#define MXF_DEVICE_CPU 0
#define MXF_DEVICE_CUDA(i) (1 + (i))
#define MXF_DEVICE_IS_CUDA(d) ((d) >= 1)
#define MXF_DEVICE_ORDINAL(d) ((d)-1)

#define MXF_MAX_DIMS 6

/**
 * A strided view of memory. Shapes and strides count elements as the dtype describes
 * them (values for MXF_E2M1, bytes for MXF_E2M1X2). If every stride is 0 the tensor is
 * C-contiguous. `data` may be NULL when the descriptor only describes geometry (plan
 * form); the one-call form needs it.
 */
typedef struct mxf_tensor {
  void *data;
  mxf_dtype dtype;
  int32_t device;
  int32_t ndim;
  int64_t shape[MXF_MAX_DIMS];
  int64_t stride[MXF_MAX_DIMS];
} mxf_tensor;

/* ---------------------------------------------------------------- plans */
typedef struct mxf_plan mxf_plan;

/** Bytes of caller-provided scratch memory a run of this plan needs (may be 0), in the
 *  memory of the plan's device (host memory for the CPU backend). */
MXF_API size_t mxf_plan_workspace_size(const mxf_plan *plan);
/** Name of the backend and kernel the plan runs, e.g. "cpu/blas" or "cuda/sm90". */
MXF_API const char *mxf_plan_backend(const mxf_plan *plan);
/** Frees a plan; NULL is accepted. */
MXF_API void mxf_plan_destroy(mxf_plan *plan);
/** Empties the one-call plan cache and frees its workspace arenas (those in use when
 *  their run ends). */
MXF_API void mxf_plan_cache_clear(void);
/** Bytes of workspace the one-call form's arenas hold now, over all devices. */
MXF_API size_t mxf_plan_cache_workspace_bytes(void);

/* Every op also has the one-call form with the caller's workspace:
 *   mxf_<op>_workspace_size(&desc, &bytes)  the bytes it needs for this desc (validated
 *                                           and planned into the cache; data may be NULL)
 *   mxf_<op>_with_workspace(&desc, ws, bytes, stream)  the one call; allocates nothing. */

/* ---------------------------------------------------------------- gemm_amax */
/** Flags of mxf_gemm_amax_desc. */
#define MXF_AMAX_ACCUMULATE 1u /* amax = max(previous *amax, new amax) instead of overwrite */
#define MXF_AMAX_B_PACKED                                                                                    \
  2u /* b's data is the packed weights of mxf_pack_weights (SPEC §7):                                       \
        b and sfb described as they were packed, sfb's data NULL;                                            \
        host tensors only */

/**
 * Block-scaled GEMM + amax (SPEC §1).
 *   a   (M, K, L)  e4m3 | e5m2 | e2m1 (or e2m1x2/u8: (M, K/2, L) bytes); k- or m-major
 *   b   (N, K, L)  same dtype as a; k- or n-major
 *   sfa, sfb       e8m0 (u8/i8 read as e8m0) or e4m3 ("ue4m3", only sf_vec 16 with e2m1);
 *                  swizzled: (32, 4, R, 4, K', L) logical or (L, R, K', 32, 4, 4) physical,
 *                  or compact (L, MN, Kb); R = ceil(MN/128), Kb = ceil(K/sf_vec),
 *                  K' = ceil(Kb/4). The shape tells the layout.
 *   c   (M, N, L)  f32 | f16 | bf16 | e4m3 | e5m2 | e2m1 (n-major only); n- or m-major
 *   amax           one f32 (shape (1) or (1,1,1)), same device as c
 * A 2-D a/b/c (no L) means L = 1.
 */
typedef struct mxf_gemm_amax_desc {
  mxf_tensor a, b, sfa, sfb, c, amax;
  int sf_vec;         /* 16 or 32                                                   */
  unsigned flags;     /* MXF_AMAX_ACCUMULATE, MXF_AMAX_B_PACKED                     */
  const float *alpha; /* host pointer, read at run; NULL means 1 (one-call form only;
                         the plan form takes alpha in the args)                     */
} mxf_gemm_amax_desc;

typedef struct mxf_gemm_amax_args {
  const void *a, *b, *sfa, *sfb; /* MXF_AMAX_B_PACKED: b the packed weights, sfb NULL */
  void *c;
  float *amax;
  const float *alpha; /* host pointer; NULL means 1 */
} mxf_gemm_amax_args;

MXF_API mxf_status mxf_gemm_amax_plan(mxf_plan **plan, const mxf_gemm_amax_desc *desc);
MXF_API mxf_status mxf_gemm_amax_run(const mxf_plan *plan, const mxf_gemm_amax_args *args, void *workspace,
                                     size_t workspace_size, void *stream);
/** One call: plan from the cache, run with the desc's data pointers. */
MXF_API mxf_status mxf_gemm_amax(const mxf_gemm_amax_desc *desc, void *stream);
MXF_API mxf_status mxf_gemm_amax_workspace_size(const mxf_gemm_amax_desc *desc, size_t *workspace_size);
MXF_API mxf_status mxf_gemm_amax_with_workspace(const mxf_gemm_amax_desc *desc, void *workspace,
                                                size_t workspace_size, void *stream);

/* ---------------------------------------------------------------- packed weights */
/**
 * Weights laid out once for the CPU's streaming kernels (SPEC §7): b (N, K, L) and its
 * scales sfb, described as gemm_amax takes them (any strides, either scale layout, with
 * sf_vec), as one buffer of 16-row panels, codes and scales interleaved as the kernels
 * read them, behind a 64-byte header that names the geometry. gemm_amax takes it with
 * MXF_AMAX_B_PACKED and gives the same bits as on b and sfb; decode-size GEMMs (few
 * rows of A) read it at close to the memory's speed.
 *   mxf_pack_weights_size  the buffer's bytes for this b, sfb, sf_vec (data may be NULL)
 *   mxf_pack_weights       writes the buffer (host memory; b, sfb on the CPU); packed
 *                          must not overlap b or sfb, packed_size at least the size
 */
MXF_API mxf_status mxf_pack_weights_size(const mxf_tensor *b, const mxf_tensor *sfb, int sf_vec,
                                         size_t *bytes);
MXF_API mxf_status mxf_pack_weights(const mxf_tensor *b, const mxf_tensor *sfb, int sf_vec, void *packed,
                                    size_t packed_size);

/* ---------------------------------------------------------------- grouped_gemm_amax */
/**
 * gemm_amax over G groups in one call (SPEC §6), for mixture-of-experts layers: group g
 * multiplies its rows of A by its weight B[g]. Two layouts, told by which of offs and
 * counts is given:
 *   contiguous  a (M, K), offs (G) i32 nondecreasing ends (group g: rows [offs[g-1],
 *               offs[g]), offs[-1] = 0; offs[G-1] <= M), c (M, N); rows at or past
 *               offs[G-1] are not written. sfa compact (M, Kb) or swizzled over A's rows
 *               (L = 1).
 *   masked      a (G, Mmax, K), counts (G) i32 in [0, Mmax], c (G, Mmax, N); rows at or
 *               past counts[g] are not written. sfa compact (G, Mmax, Kb) or swizzled
 *               with L = G.
 *   b (G, N, K) (k- or n-major per group); sfb compact (G, N, Kb) or swizzled with L = G.
 * Formats, sf_vec, c dtypes and strides as gemm_amax (SPEC §1.1), a bf16 a without sfa
 * included. amax: the max over every group's rows (flags: MXF_AMAX_ACCUMULATE).
 * Optional, on the tensors' device (absent: data NULL, ndim 0):
 *   group_alpha (G) f32: group g's results are multiplied by fl(alpha * group_alpha[g])
 *   group_amax  (G) f32: max |C| over group g's rows (0 for an empty group); overwritten
 * offs / counts are read at run time (a plan serves every routing); a routing that breaks
 * the rules is refused with a message naming the group, nothing written.
 */
typedef struct mxf_grouped_gemm_amax_desc {
  mxf_tensor a, b, sfa, sfb, c, amax;
  mxf_tensor offs;                    /* contiguous layout: (G) i32; absent in the masked layout */
  mxf_tensor counts;                  /* masked layout: (G) i32; absent in the contiguous layout */
  mxf_tensor group_alpha, group_amax; /* optional, (G) f32 each */
  int sf_vec;                         /* 16 or 32 */
  unsigned flags;                     /* MXF_AMAX_ACCUMULATE (the global amax)  */
  const float *alpha;                 /* host pointer, one-call form only; NULL means 1 */
} mxf_grouped_gemm_amax_desc;

typedef struct mxf_grouped_gemm_amax_args {
  const void *a, *b, *sfa, *sfb;
  void *c;
  float *amax;
  const int32_t *offs;      /* contiguous layout, else NULL */
  const int32_t *counts;    /* masked layout, else NULL */
  const float *group_alpha; /* when the plan's desc had it, else NULL */
  float *group_amax;        /* when the plan's desc had it, else NULL */
  const float *alpha;       /* host pointer; NULL means 1 */
} mxf_grouped_gemm_amax_args;

MXF_API mxf_status mxf_grouped_gemm_amax_plan(mxf_plan **plan, const mxf_grouped_gemm_amax_desc *desc);
MXF_API mxf_status mxf_grouped_gemm_amax_run(const mxf_plan *plan, const mxf_grouped_gemm_amax_args *args,
                                             void *workspace, size_t workspace_size, void *stream);
MXF_API mxf_status mxf_grouped_gemm_amax(const mxf_grouped_gemm_amax_desc *desc, void *stream);
MXF_API mxf_status mxf_grouped_gemm_amax_workspace_size(const mxf_grouped_gemm_amax_desc *desc,
                                                        size_t *workspace_size);
MXF_API mxf_status mxf_grouped_gemm_amax_with_workspace(const mxf_grouped_gemm_amax_desc *desc,
                                                        void *workspace, size_t workspace_size, void *stream);

/* ---------------------------------------------------------------- proj_rope */
/** Flags of mxf_proj_rope_desc. */
#define MXF_PROJ_W_OUT_IN 1u      /* w is (H*D, K) ("out-in", TE-native); else (K, H*D) */
#define MXF_PROJ_FP32_EPILOGUE 2u /* skip the bf16 staging of the GEMM result          */

/**
 * Projection GEMM + RoPE + dual MXFP8 (SPEC §2). All tensors C-contiguous.
 *   x          (T, K)        bf16, or e4m3 codes with x_scale (T, K/32) e8m0
 *   w          (H*D, K) with MXF_PROJ_W_OUT_IN, else (K, H*D); bf16 or e4m3 like x,
 *              with w_scale (H*D, K/32) resp. (K/32, H*D) on the e4m3 path
 *   cos, sin   (T, rope)     bf16
 *   out_row    (T, H, D) e4m3,  out_scales_row (T, H, D/32) e8m0
 *   out_col    (T, H, D) e4m3,  out_scales_col (ceil(T/32), H, D) e8m0
 * D and H come from out_row's shape, rope from cos's; nope = D - rope.
 */
typedef struct mxf_proj_rope_desc {
  mxf_tensor x, w, x_scale, w_scale, cos, sin;
  mxf_tensor out_row, out_scales_row, out_col, out_scales_col;
  unsigned flags;
} mxf_proj_rope_desc;

typedef struct mxf_proj_rope_args {
  const void *x, *w, *x_scale, *w_scale, *cos, *sin;
  void *out_row, *out_scales_row, *out_col, *out_scales_col;
} mxf_proj_rope_args;

MXF_API mxf_status mxf_proj_rope_plan(mxf_plan **plan, const mxf_proj_rope_desc *desc);
MXF_API mxf_status mxf_proj_rope_run(const mxf_plan *plan, const mxf_proj_rope_args *args, void *workspace,
                                     size_t workspace_size, void *stream);
MXF_API mxf_status mxf_proj_rope(const mxf_proj_rope_desc *desc, void *stream);
MXF_API mxf_status mxf_proj_rope_workspace_size(const mxf_proj_rope_desc *desc, size_t *workspace_size);
MXF_API mxf_status mxf_proj_rope_with_workspace(const mxf_proj_rope_desc *desc, void *workspace,
                                                size_t workspace_size, void *stream);

/* ---------------------------------------------------------------- quantize */
/** Directions of MXFP8 quantization (blocks of 32 along a row, or along a column). */
#define MXF_QUANT_ROWS 1u
#define MXF_QUANT_COLS 2u

/**
 * MXFP8 quantize (SPEC §3): x (rows, cols) bf16 or f32, C-contiguous.
 *   MXF_QUANT_ROWS: q_row (rows, cols) e4m3, s_row (rows, ceil(cols/32)) e8m0
 *   MXF_QUANT_COLS: q_col (rows, cols) e4m3, s_col (ceil(rows/32), cols) e8m0
 * Tensors of a direction not asked for are ignored.
 */
typedef struct mxf_quantize_desc {
  mxf_tensor x, q_row, s_row, q_col, s_col;
  unsigned directions; /* MXF_QUANT_ROWS | MXF_QUANT_COLS */
} mxf_quantize_desc;

typedef struct mxf_quantize_args {
  const void *x;
  void *q_row, *s_row, *q_col, *s_col;
} mxf_quantize_args;

MXF_API mxf_status mxf_quantize_plan(mxf_plan **plan, const mxf_quantize_desc *desc);
MXF_API mxf_status mxf_quantize_run(const mxf_plan *plan, const mxf_quantize_args *args, void *workspace,
                                    size_t workspace_size, void *stream);
MXF_API mxf_status mxf_quantize(const mxf_quantize_desc *desc, void *stream);
MXF_API mxf_status mxf_quantize_workspace_size(const mxf_quantize_desc *desc, size_t *workspace_size);
MXF_API mxf_status mxf_quantize_with_workspace(const mxf_quantize_desc *desc, void *workspace,
                                               size_t workspace_size, void *stream);

/**
 * MXFP8 dequantize: y = e4m3(q) * 2^(s - 127) (NaN for scale byte 0xFF).
 *   q (rows, cols) e4m3; direction MXF_QUANT_ROWS: s (rows, ceil(cols/32)),
 *   MXF_QUANT_COLS: s (ceil(rows/32), cols); y (rows, cols) f32 or bf16.
 */
typedef struct mxf_dequantize_desc {
  mxf_tensor q, s, y;
  unsigned direction; /* exactly one of MXF_QUANT_ROWS, MXF_QUANT_COLS */
} mxf_dequantize_desc;

typedef struct mxf_dequantize_args {
  const void *q, *s;
  void *y;
} mxf_dequantize_args;

MXF_API mxf_status mxf_dequantize_plan(mxf_plan **plan, const mxf_dequantize_desc *desc);
MXF_API mxf_status mxf_dequantize_run(const mxf_plan *plan, const mxf_dequantize_args *args, void *workspace,
                                      size_t workspace_size, void *stream);
MXF_API mxf_status mxf_dequantize(const mxf_dequantize_desc *desc, void *stream);
MXF_API mxf_status mxf_dequantize_workspace_size(const mxf_dequantize_desc *desc, size_t *workspace_size);
MXF_API mxf_status mxf_dequantize_with_workspace(const mxf_dequantize_desc *desc, void *workspace,
                                                 size_t workspace_size, void *stream);

/* ---------------------------------------------------------------- scale factors */
typedef enum mxf_sf_layout {
  MXF_SF_COMPACT = 0,  /* row-major (L, MN, Kb)                                     */
  MXF_SF_SWIZZLED = 1, /* (L, R, K', 32, 4, 4): 128-row x 4-block atoms (cuBLASLt/TE) */
} mxf_sf_layout;

/** Bytes of a scale-factor tensor for an (MN, K, L) operand with blocks of sf_vec
 *  along K, in the given layout; 0 if an argument is out of range. */
MXF_API size_t mxf_sf_size(int64_t mn, int64_t k, int64_t l, int sf_vec, mxf_sf_layout layout);
/** Byte offset of (row, k-block, batch) in the swizzled layout (SPEC §1.1); -1 if an
 *  argument is out of range. */
MXF_API int64_t mxf_sf_swizzled_offset(int64_t row, int64_t kblock, int64_t batch, int64_t mn, int64_t k,
                                       int sf_vec);
/** Host memory: compact (L, MN, Kb) -> swizzled; padding bytes are set to pad_byte. */
MXF_API mxf_status mxf_sf_swizzle(const uint8_t *compact, uint8_t *swizzled, int64_t mn, int64_t k, int64_t l,
                                  int sf_vec, uint8_t pad_byte);
/** Host memory: swizzled -> compact (L, MN, Kb); padding bytes are dropped. */
MXF_API mxf_status mxf_sf_unswizzle(const uint8_t *swizzled, uint8_t *compact, int64_t mn, int64_t k,
                                    int64_t l, int sf_vec);

/* ---------------------------------------------------------------- conversions */
/** Host memory: converts n values from src_dtype to dst_dtype with the rules of SPEC §0
 *  (round to nearest even; fp8/fp4 saturate; bf16/f16 overflow to inf). One side must be
 *  MXF_F32, or both the same dtype. e2m1 (MXF_E2M1 or MXF_E2M1X2) is packed two values
 *  per byte, even value in the low nibble; n counts values either way. */
MXF_API mxf_status mxf_convert(const void *src, mxf_dtype src_dtype, void *dst, mxf_dtype dst_dtype,
                               int64_t n);

/* ---------------------------------------------------------------- devices */
/** Number of CUDA devices the library can use (0 without CUDA support or a GPU). */
MXF_API int mxf_cuda_device_count(void);
/** Whether the library was built with its CUDA backend. */
MXF_API int mxf_has_cuda(void);

#ifdef __cplusplus
}
#endif
#endif /* MXFUSE_H */
