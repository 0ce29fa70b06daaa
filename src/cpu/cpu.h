/*
 * cpu.h — the CPU backend: the readable reference of every op, threaded, with the GEMM
 * core from OpenBLAS (CBLAS) on dequantized f32 panels when built with it.
 */
#ifndef MXF_CPU_H
#define MXF_CPU_H

#include "core/internal.h"

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

/* C[m][n] = sum_k A[m][k] * B[n][k] over row-major f32 panels (lda, ldb, ldc in floats):
 * OpenBLAS sgemm when built with it, else the threaded plain C fallback. */
void mxf_cpu_sgemm_nt(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                      int64_t ldb, float *c, int64_t ldc);
/* The plain C core behind mxf_cpu_sgemm_nt (cache-blocked, threaded), always built. */
void mxf_cpu_sgemm_nt_c(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                        int64_t ldb, float *c, int64_t ldc);

#endif
