/*
 * cpu.h — the CPU backend: the readable reference of every op, threaded, with the GEMM
 * core from OpenBLAS (CBLAS) on dequantized f32 panels when built with it.
 */
#ifndef MXF_CPU_H
#define MXF_CPU_H

#include "core/internal.h"

/* Hot loops written for the vectorizer are compiled for AVX-512, AVX2 and baseline
 * x86-64 and picked at load time, where the toolchain supports function multi-versioning. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define MXF_CPU_MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MXF_CPU_MULTIVERSION
#endif

/* Per-op entry points, called by the backend table in backend_cpu.c.
 * *_workspace: host bytes a run needs; *_run: the op. */
size_t mxf_cpu_gemm_amax_workspace(const mxf_plan *plan);
mxf_status mxf_cpu_gemm_amax_run(const mxf_plan *plan, const mxf_gemm_amax_args *args, void *ws,
                                 size_t ws_size);
size_t mxf_cpu_proj_rope_workspace(const mxf_plan *plan);
mxf_status mxf_cpu_proj_rope_run(const mxf_plan *plan, const mxf_proj_rope_args *args, void *ws,
                                 size_t ws_size);
size_t mxf_cpu_quantize_workspace(const mxf_plan *plan);
mxf_status mxf_cpu_quantize_run(const mxf_plan *plan, const mxf_quantize_args *args, void *ws,
                                size_t ws_size);
mxf_status mxf_cpu_dequantize_run(const mxf_plan *plan, const mxf_dequantize_args *args);

/* Name of the GEMM core: "blas" (OpenBLAS) or "c" (plain C fallback). */
const char *mxf_cpu_gemm_core(void);

/* C[m][n] = sum_k A[m][k] * B[n][k] over row-major f32 panels (lda, ldb, ldc in floats),
 * plus the previous C[m][n] when `accumulate` is set (C is not read otherwise): OpenBLAS
 * sgemm when built with it, else the threaded plain C fallback. */
void mxf_cpu_sgemm_nt(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                      int64_t ldb, float *c, int64_t ldc, int accumulate);
/* The plain C core behind mxf_cpu_sgemm_nt (cache-blocked, threaded), always built. */
void mxf_cpu_sgemm_nt_c(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                        int64_t ldb, float *c, int64_t ldc, int accumulate);

/* The panel driver (sgemm_cpu.c): acc = X (rows x k) Y (cols x k)^T with X and Y produced
 * block by block by the op, in a workspace independent of rows, cols and k. */
#define MXF_CPU_FILL_ROWS 64 /* rows per fill call, at most */

typedef struct mxf_cpu_panels {
  int64_t rows, cols, k;
  int64_t rc, nc, kc;    /* tile: rc rows of X x nc rows of Y, K panels of kc */
  int x_full_k;          /* the X block holds the row chunk's whole K (several N panels) */
  int64_t ldx, ldy, ldn; /* row strides in floats: of the X block, the Y block, acc */
} mxf_cpu_panels;

/* Picks the block extents: rc a multiple of row_unit, nc of col_unit, kc of k_unit (each
 * unless it covers the whole extent), so that tiles start on those multiples. */
void mxf_cpu_panels_init(mxf_cpu_panels *pp, int64_t rows, int64_t cols, int64_t k, int64_t row_unit,
                         int64_t col_unit, int64_t k_unit);
/* Bytes of workspace of mxf_cpu_gemm_panels, which must get it 64-byte aligned. */
size_t mxf_cpu_panels_workspace(const mxf_cpu_panels *pp);

typedef struct mxf_cpu_panel_ops {
  /* Rows [r0, r0 + n) (n <= MXF_CPU_FILL_ROWS) of X (which = 0) or Y (which = 1), values
   * k in [k0, k0 + kn), as f32 into dst (ld floats a row). Called from several threads at
   * once for disjoint rows. */
  void (*fill)(void *ctx, int which, int64_t r0, int64_t n, int64_t k0, int64_t kn, float *dst, int64_t ld);
  /* Task count of the epilogue of a tile of rn x cn, and tasks [t0, t1) of the tile at
   * rows [r0, r0 + rn) of X, rows [c0, c0 + cn) of Y: acc holds the full K sums, ld floats
   * a row, and the epilogue may overwrite it. Tasks run concurrently. */
  int64_t (*epilogue_tasks)(void *ctx, int64_t rn, int64_t cn);
  void (*epilogue)(void *ctx, int64_t r0, int64_t rn, int64_t c0, int64_t cn, float *acc, int64_t ld,
                   int64_t t0, int64_t t1);
} mxf_cpu_panel_ops;

/* Runs the tiles in order (row chunks outside, N panels inside), each tile's epilogue
 * before the next tile starts. */
void mxf_cpu_gemm_panels(const mxf_cpu_panels *pp, const mxf_cpu_panel_ops *ops, void *ctx, void *ws);

#endif
