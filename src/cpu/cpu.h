/*
 * cpu.h — the CPU backend: the readable reference of every op, threaded, with the GEMM
 * core from oneDNN's bf16 matmul (AMX, AVX512-BF16) or OpenBLAS's sgemm when built with
 * them, on operands dequantized exactly panel by panel.
 * Story: docs/kernels/cpu.md.
 */
#ifndef MXF_CPU_H
#define MXF_CPU_H

#include "core/internal.h"
#include "core/packed.h"

/* Hot loops written for the vectorizer are compiled for AVX-512, AVX2 and baseline
 * x86-64 and picked at load time, where the toolchain supports function multi-versioning.
 * flatten: the formats.h helpers they call are inlined into each version (left to the
 * inliner, mxf_mx_quantize_cols stayed one baseline copy, called from the AVX-512 code). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define MXF_CPU_MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default"), flatten))
#else
#define MXF_CPU_MULTIVERSION
#endif

/* ------------------------------------------------------------ the GEMM core */
/* The core a plan's GEMM runs on, chosen when the plan is made (core_choice.c) and kept
 * in plan->impl:
 *   c       the library's own f32 core (mxf_cpu_sgemm_nt_c), the default: SPEC §5.1's
 *           order, the same bits whatever the shape, the cut and the threads;
 *   blas    OpenBLAS sgemm on f32 panels (asked for only);
 *   onednn  oneDNN's bf16 matmul (AMX or AVX512-BF16) on operands dequantized exactly to
 *           bf16, f32 accumulation; a K panel whose values would reach the bf16 units'
 *           flushing (below 2^-126) or overflow takes the f32 core (asked for only).
 * MXF_CONFIG's cpu key (cpu_config.c) asks for one. */
typedef enum mxf_cpu_core_kind {
  MXF_CPU_CORE_C = 0,
  MXF_CPU_CORE_BLAS = 1,
  MXF_CPU_CORE_ONEDNN = 2
} mxf_cpu_core_kind;
/* The instruction set of the library's kernels (the GEMM core's micro-kernel, the
 * streaming kernel): the processor's best at plan time, or a lesser one asked for; all
 * give the same bits. */
typedef enum mxf_cpu_isa_kind {
  MXF_CPU_ISA_BASELINE = 0, /* x86-64 without AVX, or another processor: fmaf */
  MXF_CPU_ISA_AVX2 = 1,     /* AVX2 + FMA */
  MXF_CPU_ISA_AVX512 = 2    /* AVX-512F */
} mxf_cpu_isa_kind;
typedef struct mxf_cpu_override {
  int8_t cpu;    /* cpu=onednn|blas|c (mxf_cpu_core_kind), or MXF_CHOOSE */
  int8_t isa;    /* cpu_isa=avx512|avx2|baseline (mxf_cpu_isa_kind), or MXF_CHOOSE */
  int8_t stream; /* cpu_stream=on|off (1, 0), or MXF_CHOOSE */
} mxf_cpu_override;
typedef struct mxf_cpu_bf16 mxf_cpu_bf16; /* oneDNN primitives of one panel geometry */
typedef struct mxf_cpu_core {
  mxf_cpu_core_kind kind;
  mxf_cpu_core_kind f32; /* the f32 core: the plan's (blas or c), or onednn's fallback */
  mxf_cpu_bf16 *bf16;    /* kind == MXF_CPU_CORE_ONEDNN */
  mxf_cpu_isa_kind isa;  /* of the library's kernels */
  int stream;            /* few rows take the streaming path (sgemm_cpu.c); cpu_stream=off: 0 */
  char name[48];         /* "onednn amx", "blas", "c" */
} mxf_cpu_core;

/* ------------------------------------------------------------ per-op entry points */
/* Called by the backend table in backend_cpu.c. *_plan: chooses the GEMM core
 * (mxf_cpu_core_plan with MXF_CONFIG's cpu and cpu_isa keys, ov), sets plan->impl, kernel
 * and workspace_size; *_run: the op. */
mxf_status mxf_cpu_gemm_amax_plan(mxf_plan *plan, const mxf_cpu_override *ov);
mxf_status mxf_cpu_gemm_amax_run(const mxf_plan *plan, const mxf_gemm_amax_args *args, void *ws,
                                 size_t ws_size);
mxf_status mxf_cpu_proj_rope_plan(mxf_plan *plan, const mxf_cpu_override *ov);
mxf_status mxf_cpu_proj_rope_run(const mxf_plan *plan, const mxf_proj_rope_args *args, void *ws,
                                 size_t ws_size);
mxf_status mxf_cpu_grouped_gemm_amax_plan(mxf_plan *plan, const mxf_cpu_override *ov);
mxf_status mxf_cpu_grouped_gemm_amax_run(const mxf_plan *plan, const mxf_grouped_gemm_amax_args *args,
                                         void *ws, size_t ws_size);
size_t mxf_cpu_quantize_workspace(const mxf_plan *plan);
mxf_status mxf_cpu_quantize_run(const mxf_plan *plan, const mxf_quantize_args *args, void *ws,
                                size_t ws_size);
mxf_status mxf_cpu_dequantize_run(const mxf_plan *plan, const mxf_dequantize_args *args);

/* C[m][n] = sum_k A[m][k] * B[n][k] over row-major f32 panels (lda, ldb, ldc in floats),
 * continuing from the previous C[m][n] when `accumulate` is set (C is not read
 * otherwise): OpenBLAS sgemm when core->f32 is MXF_CPU_CORE_BLAS (and the library is
 * built with it), else the library's own core in core->isa. */
void mxf_cpu_sgemm_nt(const mxf_cpu_core *core, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                      const float *b, int64_t ldb, float *c, int64_t ldc, int accumulate);
/* The library's own core (cache-blocked, threaded over M and N): per element, fused
 * multiply-adds in k order continuing from C (accumulate) or +0 (SPEC §5.1). */
void mxf_cpu_sgemm_nt_c(mxf_cpu_isa_kind isa, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                        const float *b, int64_t ldb, float *c, int64_t ldc, int accumulate);

/* The processor's best instruction set for the library's kernels, and the names that
 * MXF_CONFIG's cpu_isa key gives them ("avx512", "avx2", "baseline"). */
mxf_cpu_isa_kind mxf_cpu_isa_best(void);
const char *mxf_cpu_isa_name(mxf_cpu_isa_kind isa);

/* ------------------------------------------------------------ the panel driver */
/* sgemm_cpu.c: acc = X (rows x k) Y (cols x k)^T with X and Y produced block by block by
 * the op, in a workspace independent of rows, cols and k. */
#define MXF_CPU_FILL_ROWS 64 /* rows per fill call, at most */
#define MXF_STREAM_ROWS 256  /* the streaming path (sgemm_cpu.c): X or Y of at most this many rows */

typedef struct mxf_cpu_panels {
  int64_t rows, cols, k;
  int64_t rc, nc, kc;         /* tile: rc rows of X x nc rows of Y, K panels of kc */
  int x_full_k;               /* the X block holds the row chunk's whole K (several N panels) */
  int64_t ldx, ldy, ldn;      /* row strides in values: of the f32 X and Y blocks, of acc
                                 (with the onednn core, a tile's acc rows are dense: cn) */
  int64_t row_unit, col_unit; /* what rc and nc are multiples of (mxf_cpu_panels_init) */
  const mxf_cpu_core *core;   /* the plan's (mxf_cpu_core_plan); its kind sets the layout */
  /* the weights the op's streaming kernel decodes where the few rows are X's (Y's on
   * side 2: [1]), MXF_DTYPE_INVALID where it has none (mxf_cpu_panels_init; the op sets
   * them after): how many few rows it takes (MXF_CPU_STREAM_X), the rest packed once */
  mxf_dtype stream_fmt[2];
} mxf_cpu_panels;

/* Picks the block extents: rc a multiple of row_unit, nc of col_unit, kc of k_unit (each
 * unless it covers the whole extent), so that tiles start on those multiples. core is
 * NULL until mxf_cpu_core_plan chose it. */
void mxf_cpu_panels_init(mxf_cpu_panels *pp, int64_t rows, int64_t cols, int64_t k, int64_t row_unit,
                         int64_t col_unit, int64_t k_unit, const mxf_cpu_core *core);
/* Sets the core, and with it the tile of the streaming path (sgemm_cpu.c), which spans
 * more of the many rows than the other paths' tiles; mxf_cpu_panels_init calls it. */
void mxf_cpu_panels_core(mxf_cpu_panels *pp, const mxf_cpu_core *core);
/* Bytes of workspace of mxf_cpu_gemm_panels (for pp->core), which must get it 64-byte
 * aligned. */
size_t mxf_cpu_panels_workspace(const mxf_cpu_panels *pp);

typedef struct mxf_cpu_panel_ops {
  /* Rows [r0, r0 + n) (n <= MXF_CPU_FILL_ROWS) of X (which = 0) or Y (which = 1), values
   * k in [k0, k0 + kn) (k0 a multiple of the k_unit given to mxf_cpu_panels_init), as
   * f32 into dst (ld floats a row). Called from several threads at once for disjoint
   * rows. */
  void (*fill)(void *ctx, int which, int64_t r0, int64_t n, int64_t k0, int64_t kn, float *dst, int64_t ld);
  /* Optional (may be NULL), for the onednn core: the same rows as bf16 bits when the
   * operand's values are bf16 themselves, saving the f32 round trip; returns 0, having
   * written nothing, when they are not (the driver then calls fill). */
  int (*fill16)(void *ctx, int which, int64_t r0, int64_t n, int64_t k0, int64_t kn, uint16_t *dst,
                int64_t ld);
  /* Optional (may be NULL), for the streaming path: rows [r0, r0 + n) of X or Y, values
   * [k0, k0 + kn) (kn at most 256), straight into the core's packed layout: panels of 16
   * rows, value (row p*16 + i, k0 + kk) at dst[p*16*kn + kk*16 + i], the values fill
   * would give. Returns 0, having written nothing, where it cannot (the driver then calls
   * fill and packs). */
  int (*fill_packed)(void *ctx, int which, int64_t r0, int64_t n, int64_t k0, int64_t kn, float *dst);
  /* Optional (may be NULL), for the streaming path: rows [r0, r0 + n) (n a multiple of
   * 16) of the many, Y (which = 1: few rows of X) or X (which = 0: few rows of Y),
   * against the xn few rows (x: their f32 values, ldx apart): acc[i][j] (ld floats a row)
   * for i < xn, j < n, the sums over k in [0, kdone) of x[i][k] * many[r0 + j][k] in SPEC
   * §5.1's order from +0; returns kdone, a multiple of 32 (0: nothing written; the
   * driver's fills do the rest, continuing the sums). x_in_range: the few rows' verdict
   * of mxf_cpu_stream_x_in_range, for mxf_cpu_stream_rows. */
  int64_t (*stream)(void *ctx, int which, const float *x, int64_t ldx, int64_t xn, int x_in_range, int64_t r0,
                    int64_t n, float *acc, int64_t ld);
  /* Task count of the epilogue of a tile of rn x cn, and tasks [t0, t1) of the tile at
   * rows [r0, r0 + rn) of X, rows [c0, c0 + cn) of Y: acc holds the full K sums, ld floats
   * a row, and the epilogue may overwrite it. Tasks run concurrently. */
  int64_t (*epilogue_tasks)(void *ctx, int64_t rn, int64_t cn);
  void (*epilogue)(void *ctx, int64_t r0, int64_t rn, int64_t c0, int64_t cn, float *acc, int64_t ld,
                   int64_t t0, int64_t t1);
} mxf_cpu_panel_ops;

/* Runs the tiles in order (row chunks outside, N panels inside), each tile's epilogue
 * before the next tile starts. Fails only when the onednn core does (an internal error). */
mxf_status mxf_cpu_gemm_panels(const mxf_cpu_panels *pp, const mxf_cpu_panel_ops *ops, void *ctx, void *ws);

/* gemm_amax_cpu.c's GEMM for the groups of grouped_gemm_amax_cpu.c: the panel geometry
 * of problem p (core not set), and one group's GEMM on the grouped plan's geometry pp
 * (made for at least as many rows), writing C and the group's amax into *amax (NaN when
 * one value is NaN) but not args->amax. */
void mxf_cpu_gemm_amax_panels(const mxf_gemm_problem *p, mxf_cpu_panels *pp);
mxf_status mxf_cpu_gemm_amax_group(const mxf_gemm_problem *p, const mxf_cpu_panels *pp,
                                   const mxf_gemm_amax_args *args, void *ws, float *amax);

/* ------------------------------------------------------------ the streaming kernel */
/* stream_cpu.c: n rows (a multiple of 16, at most MXF_CPU_FILL_ROWS) of MX weight codes
 * (or bf16 values),
 * decoded in registers, against xn rows of f32 X: acc[i * ld + j] = the sum over k in
 * [0, 32 * kblocks) of x[i * ldx + k] * w(j, k) in SPEC §5.1's order from +0, w(j, k) the
 * code's value times its block scale (the values the op's fill gives). Returns 0, having
 * written nothing, where it cannot run (the baseline instruction set picked, a format or
 * shape it does not take). */
typedef struct mxf_cpu_stream_w {
  mxf_cpu_isa_kind isa; /* the plan's (AVX-512 or AVX2; the baseline has no kernel) */
  mxf_dtype fmt;        /* MXF_E2M1, MXF_E4M3, MXF_E5M2, or MXF_BF16 (values, no scales:
                           the scale fields and tables unused) */
  int sf_vec;           /* 16 or 32 */
  const uint8_t *codes; /* row 0's value 0 (e2m1: the byte of an even value index) */
  int64_t row_bytes;    /* from one row's codes to the next's */
  int64_t rows_after;   /* rows of codes that follow the call's n (at row_bytes), which
                           the kernel may read ahead into the caches (never into C) */
  const uint8_t *panel_sf[MXF_CPU_FILL_ROWS / 16]; /* scale of block 0 of each panel's first row */
  int64_t sf_row;        /* from one row's scale to the next's within a panel of 16 */
  int sf_swizzled;       /* block kb at + (kb >> 2) * 512 + (kb & 3) (SPEC §1.1), else + kb */
  const float *code_lut; /* code byte -> value (e2m1: the low nibble's) */
  const float *sf_lut;   /* scale byte -> value */
  int sf_pow2;           /* the scales are powers of two or NaN (e8m0) */
  /* Packed weights (SPEC §7.2; MX codes only): their layout, codes and panel_sf[p] each
   * panel's start, row_bytes a sixteenth of a panel's bytes (so that row 16p's codes are
   * panel p's), sf_row and sf_swizzled unused, rows_after 0. NULL: rows of codes as
   * above. */
  const mxf_packed_geom *packed;
} mxf_cpu_stream_w;
int mxf_cpu_stream_rows(const mxf_cpu_stream_w *w, int64_t n, int64_t kblocks, const float *x, int64_t ldx,
                        int64_t xn, int x_in_range, float *acc, int64_t ld);
/* Whether every value of the xn rows of x (k values each, ldx apart) is 0 or of a
 * magnitude in [2^-61, 2^32]: the rows of X with which the kernel may rescale its
 * blocks (stream_cpu.c), handed to mxf_cpu_stream_rows as x_in_range (0 is always
 * right, and slower). */
int mxf_cpu_stream_x_in_range(const float *x, int64_t ldx, int64_t xn, int64_t k);
/* The rows of X an op hands the kernel of instruction set isa, at most (more: the packed
 * fill, which decodes once for all rows): 16 with bf16 values, and with e2m1 codes on
 * AVX-512, whose decoding is cheap enough to repeat for a second group of 8 rows (AVX2,
 * whose groups are 4 rows: a second group, 8 rows; a third and a fourth lost to the
 * fill, bench/NOTES.md); 8 with fp8 codes, whose decoding costs about twice as much. */
#define MXF_CPU_STREAM_X_MAX 16
#define MXF_CPU_STREAM_X(fmt, isa)                                                                           \
  ((fmt) == MXF_BF16 || ((fmt) == MXF_E2M1 && (isa) == MXF_CPU_ISA_AVX512) ? MXF_CPU_STREAM_X_MAX : 8)
/* The same values into the GEMM core's packed layout (the streaming path's fill of
 * more rows of X): blocks of 32 values [kb0, kb0 + kblocks) of the n rows, value (row
 * p * 16 + i, 32 kb0 + kk) at dst[p * 16 * 32 kblocks + kk * 16 + i]. AVX-512 and AVX2
 * (MX codes); returns 0, having written nothing, where it cannot run. */
int mxf_cpu_stream_unpack(const mxf_cpu_stream_w *w, int64_t n, int64_t kb0, int64_t kblocks, float *dst);

/* ------------------------------------------------------------ choosing the core */
/* core_choice.c. Chooses the core of a plan whose GEMM has the geometry pp (core not set
 * yet): ov->cpu (an mxf_cpu_core_kind, from MXF_CONFIG's cpu=onednn|blas|c) when >= 0,
 * else the library's own core (c); the instruction set ov->isa (cpu_isa=...) when >= 0,
 * else the processor's best. What this build or processor lacks is refused with
 * MXF_ERR_NOT_SUPPORTED and the reason. Sets plan->impl (freed by mxf_cpu_core_free) and
 * plan->kernel; pp->core = the choice. */
mxf_status mxf_cpu_core_plan(mxf_plan *plan, mxf_cpu_panels *pp, const mxf_cpu_override *ov);
void mxf_cpu_core_free(mxf_plan *plan);

/* oneDNN's side (onednn_cpu.c). mxf_cpu_bf16_create: the matmul primitives of every
 * tile shape the panel driver runs on pp (acc = Xblock Yblock^T, first K panel, or
 * acc += for the later ones), bf16 X blocks of dense rows (a K panel's values each), Y
 * blocks in the layout oneDNN picks for their shape (mxf_cpu_bf16_y_layout), f32 acc
 * of dense rows (n values apart); `forced`: accept any implementation but the reference one
 * (otherwise only AMX and AVX512-BF16 ones). Refuses with MXF_ERR_NOT_SUPPORTED and
 * why. name gets "onednn <isa>". */
mxf_status mxf_cpu_bf16_create(const mxf_cpu_panels *pp, int forced, mxf_cpu_bf16 **out, char *name,
                               size_t name_size);
void mxf_cpu_bf16_destroy(mxf_cpu_bf16 *b);
/* Bytes of scratchpad the primitives need (the largest; part of the plan's workspace). */
size_t mxf_cpu_bf16_scratchpad(const mxf_cpu_bf16 *b);
/* The layout of a Y block of n rows x k values (a shape given at creation): oneDNN's
 * weights layout, its offsets separable by dimension, value kk of row j at element
 * row_off[j] + k_off[kk]; bytes: the block's size; padded: it has elements beyond the
 * n x k values, which must be zero; pairs: values 2i and 2i + 1 of a row are adjacent
 * (AMX's layouts). NULL for a shape not created. */
typedef struct mxf_cpu_bf16_layout {
  const int32_t *row_off, *k_off;
  size_t bytes;
  int padded, pairs;
} mxf_cpu_bf16_layout;
const mxf_cpu_bf16_layout *mxf_cpu_bf16_y_layout(const mxf_cpu_bf16 *b, int64_t n, int64_t k);
/* Bytes of the largest Y block. */
size_t mxf_cpu_bf16_y_bytes(const mxf_cpu_bf16 *b);
/* acc (m x n, dense rows) = (or += when accumulate) X (m x k) Y (n x k)^T, bf16 in (X rows of k
 * values, Y in its layout), f32 sums, on mxf_cpu_threads() OpenMP threads; scratch: its
 * scratchpad. m, n, k: a shape given at creation. */
mxf_status mxf_cpu_bf16_gemm(const mxf_cpu_bf16 *b, int64_t m, int64_t n, int64_t k, const uint16_t *x,
                             const uint16_t *y, float *acc, int accumulate, void *scratch);

#endif
