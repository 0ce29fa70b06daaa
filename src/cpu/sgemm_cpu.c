/*
 * sgemm_cpu.c — the f32 GEMM core of the CPU ops, C = A B^T on row-major panels
 * (mxf_cpu_sgemm_nt): OpenBLAS's sgemm when the library is built with it, else the plain
 * C core below (mxf_cpu_sgemm_nt_c), which also takes what OpenBLAS cannot (extents
 * beyond its int range, and the empty cases).
 *
 * Classic three-level blocking: C is cut into MXF_SG_MC x MXF_SG_NC tiles, one task
 * each on mxf_parallel_for; inside a task, K goes by MXF_SG_KC slices, each slice of A
 * and B is packed into micro-panels (MR rows of A, NR rows of B, k-interleaved, zero
 * padded at the edges) that stay in L1/L2, and an MR x NR register-blocked micro-kernel
 * sweeps them. The micro-kernel is plain C written so that the compiler vectorizes the
 * NR loop; it is compiled for AVX-512, AVX2 and baseline x86-64 and picked at load time
 * where the toolchain supports function multi-versioning.
 *
 * Summation order: per element, K slices in order, each slice summed in k order in f32
 * (no fused multiply-add: the build disables contraction). Zero padding of partial
 * micro-panels only touches accumulators that are never stored, so NaN/inf in the
 * inputs propagate exactly as in a naive loop.
 *
 * Pack buffers live on the stack of the task (about 200 KiB): the CPU ops allocate
 * nothing at run time.
 */
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/parallel.h"

#if defined(MXF_HAVE_CBLAS)
#include <cblas.h>
#include <limits.h>
#endif

#define MXF_SG_MR 6
#define MXF_SG_NR 16
#define MXF_SG_MC 72  /* multiple of MR */
#define MXF_SG_NC 128 /* multiple of NR */
#define MXF_SG_KC 256

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define MXF_SG_MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MXF_SG_MULTIVERSION
#endif

typedef struct sgemm_ctx {
  int64_t m, n, k, lda, ldb, ldc;
  const float *a, *b;
  float *c;
  int64_t tiles_n;
} sgemm_ctx;

/* rows [0, rows) of x (ld floats apart), k in [k0, k0 + kc), into micro-panels of r rows:
 * panel p holds rows p*r.., element (row i, k) at p*r*kc + k*r + i; rows beyond `rows`
 * are zero. */
static void sgemm_pack(const float *x, int64_t ld, int64_t rows, int64_t k0, int64_t kc, int r, float *dst) {
  for (int64_t p0 = 0; p0 < rows; p0 += r) {
    int64_t live = rows - p0 < r ? rows - p0 : r;
    for (int64_t i = 0; i < live; ++i) {
      const float *src = x + (p0 + i) * ld + k0;
      for (int64_t kk = 0; kk < kc; ++kk)
        dst[kk * r + i] = src[kk];
    }
    for (int64_t i = live; i < r; ++i)
      for (int64_t kk = 0; kk < kc; ++kk)
        dst[kk * r + i] = 0.0f;
    dst += (int64_t)r * kc;
  }
}

/* acc = sum over kc of pa (MR x kc) times pb (NR x kc); then C (mr x nr live part) is
 * set (first slice) or incremented. One accumulator vector per row of the micro-tile;
 * the generic vector type maps to one zmm, two ymm or four xmm registers. */
typedef float sgemm_vec __attribute__((vector_size(MXF_SG_NR * sizeof(float))));

MXF_SG_MULTIVERSION
static void sgemm_micro(int64_t kc, const float *restrict pa, const float *restrict pb, float *restrict c,
                        int64_t ldc, int mr, int nr, int first) {
  sgemm_vec acc[MXF_SG_MR];
  for (int i = 0; i < MXF_SG_MR; ++i)
    acc[i] = (sgemm_vec){0};
  for (int64_t kk = 0; kk < kc; ++kk) {
    sgemm_vec bv = *(const sgemm_vec *)(pb + kk * MXF_SG_NR); /* panels are 64-byte aligned */
    const float *ap = pa + kk * MXF_SG_MR;
    for (int i = 0; i < MXF_SG_MR; ++i)
      acc[i] += ap[i] * bv;
  }
  float tile[MXF_SG_MR][MXF_SG_NR];
  memcpy(tile, acc, sizeof tile);
  for (int i = 0; i < mr; ++i) {
    float *cr = c + i * ldc;
    if (first)
      for (int j = 0; j < nr; ++j)
        cr[j] = tile[i][j];
    else
      for (int j = 0; j < nr; ++j)
        cr[j] += tile[i][j];
  }
}

static void sgemm_task(void *ctx, int64_t begin, int64_t end) {
  const sgemm_ctx *s = (const sgemm_ctx *)ctx;
  _Alignas(64) float pa[MXF_SG_MC * MXF_SG_KC];
  _Alignas(64) float pb[MXF_SG_NC * MXF_SG_KC];
  for (int64_t t = begin; t < end; ++t) {
    int64_t i0 = (t / s->tiles_n) * MXF_SG_MC, j0 = (t % s->tiles_n) * MXF_SG_NC;
    int64_t mc = s->m - i0 < MXF_SG_MC ? s->m - i0 : MXF_SG_MC;
    int64_t nc = s->n - j0 < MXF_SG_NC ? s->n - j0 : MXF_SG_NC;
    for (int64_t k0 = 0; k0 < s->k; k0 += MXF_SG_KC) {
      int64_t kc = s->k - k0 < MXF_SG_KC ? s->k - k0 : MXF_SG_KC;
      sgemm_pack(s->a + i0 * s->lda, s->lda, mc, k0, kc, MXF_SG_MR, pa);
      sgemm_pack(s->b + j0 * s->ldb, s->ldb, nc, k0, kc, MXF_SG_NR, pb);
      for (int64_t jr = 0; jr < nc; jr += MXF_SG_NR) {
        int nr = (int)(nc - jr < MXF_SG_NR ? nc - jr : MXF_SG_NR);
        for (int64_t ir = 0; ir < mc; ir += MXF_SG_MR) {
          int mr = (int)(mc - ir < MXF_SG_MR ? mc - ir : MXF_SG_MR);
          sgemm_micro(kc, pa + ir * kc, pb + jr * kc, s->c + (i0 + ir) * s->ldc + j0 + jr, s->ldc, mr, nr,
                      k0 == 0);
        }
      }
    }
  }
}

void mxf_cpu_sgemm_nt_c(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                        int64_t ldb, float *c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i)
      memset(c + i * ldc, 0, (size_t)n * sizeof(float));
    return;
  }
  sgemm_ctx s = {m, n, k, lda, ldb, ldc, a, b, c, mxf_cdiv(n, MXF_SG_NC)};
  int64_t tiles = mxf_cdiv(m, MXF_SG_MC) * s.tiles_n;
  mxf_parallel_for(tiles, 1, sgemm_task, &s);
}

const char *mxf_cpu_gemm_core(void) {
#if defined(MXF_HAVE_CBLAS)
  return "blas";
#else
  return "c";
#endif
}

void mxf_cpu_sgemm_nt(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                      int64_t ldb, float *c, int64_t ldc) {
#if defined(MXF_HAVE_CBLAS)
  if (m > 0 && n > 0 && k > 0 && m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX &&
      ldb <= INT_MAX && ldc <= INT_MAX) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)m, (blasint)n, (blasint)k, 1.0f, a,
                (blasint)lda, b, (blasint)ldb, 0.0f, c, (blasint)ldc);
    return;
  }
#endif
  mxf_cpu_sgemm_nt_c(m, n, k, a, lda, b, ldb, c, ldc);
}
