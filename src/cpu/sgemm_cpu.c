/*
 * sgemm_cpu.c — the f32 GEMM core of the CPU ops, C = A B^T on row-major panels
 * (mxf_cpu_sgemm_nt): the library's own core (mxf_cpu_sgemm_nt_c), or OpenBLAS's sgemm
 * when the plan asked for it (cpu=blas), which also leaves to ours what it cannot take
 * (extents beyond its int range, the empty cases).
 *
 * Summation order (SPEC §5.1): every element of C is one chain of f32 fused
 * multiply-adds over k in increasing order, from +0 (or from C's value, accumulate). The
 * work is cut over M and N only: tasks of tm rows (MXF_SG_MC .. MXF_SG_TM_MAX blocks) x
 * MXF_SG_NC columns on mxf_parallel_for; inside a task, K goes by MXF_SG_KC slices, B's
 * rows are packed once per slice and A's in blocks of MXF_SG_MC rows (micro-panels of MR
 * rows of A, NR rows of B, k-interleaved, zero padded at the edges; whole micro-panels
 * by 8 x 8 transposes where the instruction set has AVX2) that stay in L1/L2,
 * and an MR x NR register-blocked micro-kernel loads the micro-tile's sums from C, adds
 * the slice's products in k order and stores them back: the sums continue across slices,
 * never restart from zero. Hence the bits do not depend on the slices, the tiles, the
 * threads or the panels the driver below cuts. The micro-kernel is written for AVX-512,
 * AVX2 + FMA and baseline x86-64 (fmaf), the same bits each, the best picked at load
 * time. Zero padding of partial micro-panels only touches sums that are never stored,
 * so NaN/inf in the inputs propagate exactly as in a naive loop.
 *
 * Pack buffers live on the stack of the task (264 KiB): the CPU ops allocate nothing at
 * run time.
 *
 * Below the core, the panel driver of the CPU ops (mxf_cpu_gemm_panels): an op whose
 * operands exist only as codes and scales hands it a fill callback, which dequantizes
 * rows x a K range into f32, and an epilogue callback. The driver walks acc = X Y^T tile
 * by tile, row chunks (rc rows of X) outside, N panels (nc rows of Y) inside, and per
 * tile the K panels (kc) in order: it fills the Y block of the K panel, the core adds
 * Xblock Yblock^T into the tile's f32 acc (the first K panel sets it), and once the last
 * K panel is in, the epilogue takes the tile (with few rows, the streaming path below
 * instead). With one N panel, X is filled K panel by
 * K panel beside Y; with several, X holds the row chunk's whole K, filled once and read
 * by every N panel (rc shrinks to keep it within MXF_PANEL_X_BYTES, down to
 * MXF_PANEL_ROWS_MIN rows).
 *
 * With the onednn core (cpu.h) the X and Y blocks are bf16: the op's fill writes f32
 * MXF_PANEL_STEP values of K at a time into a buffer on the task's stack, which is
 * truncated into the block (exact for MX and bf16 values) while each K panel's exponent
 * range is recorded; a K panel whose ranges the bf16 units could not sum exactly
 * (ranges_exact) is filled again in f32 into blocks of its own and summed by the f32
 * core, and so are the tile's later K panels (acc may then hold f32 subnormals, which
 * the units would flush).
 *
 * Workspace, whatever the rows and columns: X (rc, ldx), Y (nc, ldy), acc (rc, ldn), f32,
 * each 64-byte aligned, row strides rounded up to 16 values: at most 4 MiB of X (16 MiB
 * when it holds the whole K, more only for K above 16384), 4 MiB of Y, 16 MiB of acc;
 * with the onednn core X and Y take half that, and the f32 blocks of one K panel
 * (at most 4 + 4 MiB) come on top. What the tiles cost beyond one large GEMM: Y is
 * dequantized once per row chunk and the core repacks X once per N panel; the targets
 * (MXF_PANEL_*) make both happen once up to 2048 x 2048 outputs. The streaming path's
 * workspace (X or Y of at most MXF_STREAM_ROWS rows) grows with K instead: the few rows'
 * whole K (as rows where the streaming kernel may take them, else packed for the core),
 * then acc (rc x ldn), whose tile spans up to MXF_STREAM_ACC_BYTES of sums along the many
 * rows (mxf_cpu_panels_core).
 * The backend's story and measurements: docs/kernels/cpu.md.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/parallel.h"

#if defined(MXF_HAVE_CBLAS)
#include <cblas.h>
#include <limits.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define MXF_SG_X86 1
#include <immintrin.h>
#else
#define MXF_SG_X86 0
#endif

#define MXF_SG_MR 6
#define MXF_SG_NR 16
#define MXF_SG_MC 72    /* rows of A packed at a time: multiple of MR */
#define MXF_SG_NC 192   /* columns of a task, B packed once per K slice: multiple of NR */
#define MXF_SG_TM_MAX 8 /* MC blocks of a task, at most */
#define MXF_SG_TASKS 4  /* tasks per thread, at least, where the blocks allow */
#define MXF_SG_KC 256

#define MXF_PANEL_COLS 2048                    /* nc: rows of Y per tile, at most */
#define MXF_PANEL_K 512                        /* kc: K panel, at most */
#define MXF_PANEL_ROWS 2048                    /* rc: rows of X per tile, at most */
#define MXF_PANEL_ROWS_MIN 256                 /* ... and at least, with a full-K X */
#define MXF_PANEL_X_BYTES ((size_t)16 << 20)   /* full-K X chunk, at most (above the minimum) */
#define MXF_STREAM_ACC_BYTES ((size_t)1 << 20) /* the streaming path's acc, at most (above PANEL_*) */

typedef void (*sgemm_micro_fn)(int64_t kc, const float *pa, const float *pb, float *c, int64_t ldc, int load);

typedef struct sgemm_ctx {
  int64_t m, n, k, lda, ldb, ldc;
  const float *a, *b;
  float *c;
  int64_t tiles_n;
  int64_t tm; /* rows of a task: a multiple of MXF_SG_MC */
  int accumulate;
  int a_packed, b_packed; /* a / b already in the packed layout (k <= MXF_SG_KC) */
  mxf_cpu_isa_kind isa;   /* the plan's: its micro-kernel (k_micro) and packing */
} sgemm_ctx;

#if MXF_SG_X86
/* o[q] lane i = rows[i][kk + q]: 8 rows of 8 values transposed. */
__attribute__((target("avx2"), always_inline)) static inline void tr8x8(const float *const *rows, int64_t kk,
                                                                        __m256 o[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    const __m256 a = _mm256_loadu_ps(rows[2 * i] + kk), b = _mm256_loadu_ps(rows[2 * i + 1] + kk);
    t[2 * i] = _mm256_unpacklo_ps(a, b);     /* a0 b0 a1 b1 | a4 b4 a5 b5 */
    t[2 * i + 1] = _mm256_unpackhi_ps(a, b); /* a2 b2 a3 b3 | a6 b6 a7 b7 */
  }
  /* rows 4h .. 4h + 3 */
  for (int h = 0; h < 2; ++h) {
    u[4 * h] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);     /* k 0 | 4 */
    u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE); /* k 1 | 5 */
    u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
  }
  for (int q = 0; q < 4; ++q) {
    o[q] = _mm256_permute2f128_ps(u[q], u[4 + q], 0x20);
    o[q + 4] = _mm256_permute2f128_ps(u[q], u[4 + q], 0x31);
  }
}

/* sgemm_pack's whole micro-panels (r = MR or NR), 8 values of K at a time; returns how
 * many values it did (a multiple of 8). An MR panel's stores run 2 values past each
 * group of K, into the next group's place (written after) or, after the last group, into
 * the next panel's or the buffer's slack. */
__attribute__((target("avx2"))) static int64_t pack_avx2(const float *const *src, int64_t kc, int r,
                                                         float *dst) {
  int64_t kk = 0;
  __m256 o[8], o2[8];
  if (r == MXF_SG_NR)
    for (; kk + 8 <= kc; kk += 8) {
      tr8x8(src, kk, o);
      tr8x8(src + 8, kk, o2);
      for (int q = 0; q < 8; ++q) {
        _mm256_store_ps(dst + (kk + q) * 16, o[q]);
        _mm256_store_ps(dst + (kk + q) * 16 + 8, o2[q]);
      }
    }
  else if (r == MXF_SG_MR) {
    const float *rows[8] = {src[0], src[1], src[2], src[3], src[4], src[5], src[0], src[0]};
    for (; kk + 8 <= kc; kk += 8) {
      tr8x8(rows, kk, o);
      for (int q = 0; q < 8; ++q)
        _mm256_storeu_ps(dst + (kk + q) * MXF_SG_MR, o[q]);
    }
  }
  return kk;
}
#endif

/* rows [0, rows) of x (ld floats apart), k in [k0, k0 + kc), into micro-panels of r rows:
 * panel p holds rows p*r.., element (row i, k) at p*r*kc + k*r + i; rows beyond `rows`
 * are zero. With vec (AVX2 or better), whole panels go by 8 x 8 transposes. dst has
 * MXF_SG_PACK_SLACK floats beyond the panels. */
#define MXF_SG_PACK_SLACK 8
static void sgemm_pack(const float *x, int64_t ld, int64_t rows, int64_t k0, int64_t kc, int r, int vec,
                       float *dst) {
  for (int64_t p0 = 0; p0 < rows; p0 += r) {
    int64_t live = rows - p0 < r ? rows - p0 : r;
    const float *src[MXF_SG_NR];
    for (int i = 0; i < r; ++i)
      src[i] = x + (p0 + (i < live ? i : 0)) * ld + k0;
    if (live == r) {
      int64_t kk = 0;
#if MXF_SG_X86
      if (vec) kk = pack_avx2(src, kc, r, dst);
#else
      (void)vec;
#endif
      for (; kk + 8 <= kc; kk += 8) /* 8 values of each row at a time: whole lines read and written */
        for (int i = 0; i < r; ++i)
          for (int q = 0; q < 8; ++q)
            dst[(kk + q) * r + i] = src[i][kk + q];
      for (; kk < kc; ++kk)
        for (int i = 0; i < r; ++i)
          dst[kk * r + i] = src[i][kk];
    } else {
      for (int64_t kk = 0; kk < kc; ++kk)
        for (int i = 0; i < r; ++i)
          dst[kk * r + i] = i < live ? src[i][kk] : 0.0f;
    }
    dst += (int64_t)r * kc;
  }
}

/* ---------------------------------------------------------------- micro-kernels
 * c (MR x NR, ldc floats a row) = fma(pa[k][i], pb[k][j], c) for k = 0 .. kc-1 in order,
 * starting from c's values when `load`, else from +0. One accumulator per (i, j), each a
 * single chain of fused multiply-adds in k order: the order SPEC §5 fixes. The three
 * versions give the same bits; the plan's instruction set picks one (cpu.h). */

static void micro_base(int64_t kc, const float *restrict pa, const float *restrict pb, float *restrict c,
                       int64_t ldc, int load) {
  float acc[MXF_SG_MR][MXF_SG_NR];
  for (int i = 0; i < MXF_SG_MR; ++i)
    for (int j = 0; j < MXF_SG_NR; ++j)
      acc[i][j] = load ? c[i * ldc + j] : 0.0f;
  for (int64_t kk = 0; kk < kc; ++kk)
    for (int i = 0; i < MXF_SG_MR; ++i)
      for (int j = 0; j < MXF_SG_NR; ++j)
        acc[i][j] = fmaf(pa[kk * MXF_SG_MR + i], pb[kk * MXF_SG_NR + j], acc[i][j]);
  for (int i = 0; i < MXF_SG_MR; ++i)
    for (int j = 0; j < MXF_SG_NR; ++j)
      c[i * ldc + j] = acc[i][j];
}

#if MXF_SG_X86
__attribute__((target("avx2,fma"))) static void micro_avx2(int64_t kc, const float *restrict pa,
                                                           const float *restrict pb, float *restrict c,
                                                           int64_t ldc, int load) {
  __m256 a0, a1, a2, a3, a4, a5, b0, b1;
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
  if (load) {
    c00 = _mm256_loadu_ps(c), c01 = _mm256_loadu_ps(c + 8);
    c10 = _mm256_loadu_ps(c + ldc), c11 = _mm256_loadu_ps(c + ldc + 8);
    c20 = _mm256_loadu_ps(c + 2 * ldc), c21 = _mm256_loadu_ps(c + 2 * ldc + 8);
    c30 = _mm256_loadu_ps(c + 3 * ldc), c31 = _mm256_loadu_ps(c + 3 * ldc + 8);
    c40 = _mm256_loadu_ps(c + 4 * ldc), c41 = _mm256_loadu_ps(c + 4 * ldc + 8);
    c50 = _mm256_loadu_ps(c + 5 * ldc), c51 = _mm256_loadu_ps(c + 5 * ldc + 8);
  } else {
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
  }
  for (int64_t kk = 0; kk < kc; ++kk, pa += MXF_SG_MR, pb += MXF_SG_NR) {
    b0 = _mm256_load_ps(pb), b1 = _mm256_load_ps(pb + 8);
    a0 = _mm256_broadcast_ss(pa), a1 = _mm256_broadcast_ss(pa + 1);
    c00 = _mm256_fmadd_ps(a0, b0, c00), c01 = _mm256_fmadd_ps(a0, b1, c01);
    c10 = _mm256_fmadd_ps(a1, b0, c10), c11 = _mm256_fmadd_ps(a1, b1, c11);
    a2 = _mm256_broadcast_ss(pa + 2), a3 = _mm256_broadcast_ss(pa + 3);
    c20 = _mm256_fmadd_ps(a2, b0, c20), c21 = _mm256_fmadd_ps(a2, b1, c21);
    c30 = _mm256_fmadd_ps(a3, b0, c30), c31 = _mm256_fmadd_ps(a3, b1, c31);
    a4 = _mm256_broadcast_ss(pa + 4), a5 = _mm256_broadcast_ss(pa + 5);
    c40 = _mm256_fmadd_ps(a4, b0, c40), c41 = _mm256_fmadd_ps(a4, b1, c41);
    c50 = _mm256_fmadd_ps(a5, b0, c50), c51 = _mm256_fmadd_ps(a5, b1, c51);
  }
  _mm256_storeu_ps(c, c00), _mm256_storeu_ps(c + 8, c01);
  _mm256_storeu_ps(c + ldc, c10), _mm256_storeu_ps(c + ldc + 8, c11);
  _mm256_storeu_ps(c + 2 * ldc, c20), _mm256_storeu_ps(c + 2 * ldc + 8, c21);
  _mm256_storeu_ps(c + 3 * ldc, c30), _mm256_storeu_ps(c + 3 * ldc + 8, c31);
  _mm256_storeu_ps(c + 4 * ldc, c40), _mm256_storeu_ps(c + 4 * ldc + 8, c41);
  _mm256_storeu_ps(c + 5 * ldc, c50), _mm256_storeu_ps(c + 5 * ldc + 8, c51);
}

__attribute__((target("avx512f,fma"))) static void micro_avx512(int64_t kc, const float *restrict pa,
                                                                const float *restrict pb, float *restrict c,
                                                                int64_t ldc, int load) {
  __m512 c0, c1, c2, c3, c4, c5, b;
  if (load) {
    c0 = _mm512_loadu_ps(c), c1 = _mm512_loadu_ps(c + ldc), c2 = _mm512_loadu_ps(c + 2 * ldc);
    c3 = _mm512_loadu_ps(c + 3 * ldc), c4 = _mm512_loadu_ps(c + 4 * ldc), c5 = _mm512_loadu_ps(c + 5 * ldc);
  } else {
    c0 = c1 = c2 = c3 = c4 = c5 = _mm512_setzero_ps();
  }
  for (int64_t kk = 0; kk < kc; ++kk, pa += MXF_SG_MR, pb += MXF_SG_NR) {
    b = _mm512_load_ps(pb);
    c0 = _mm512_fmadd_ps(_mm512_set1_ps(pa[0]), b, c0);
    c1 = _mm512_fmadd_ps(_mm512_set1_ps(pa[1]), b, c1);
    c2 = _mm512_fmadd_ps(_mm512_set1_ps(pa[2]), b, c2);
    c3 = _mm512_fmadd_ps(_mm512_set1_ps(pa[3]), b, c3);
    c4 = _mm512_fmadd_ps(_mm512_set1_ps(pa[4]), b, c4);
    c5 = _mm512_fmadd_ps(_mm512_set1_ps(pa[5]), b, c5);
  }
  _mm512_storeu_ps(c, c0), _mm512_storeu_ps(c + ldc, c1), _mm512_storeu_ps(c + 2 * ldc, c2);
  _mm512_storeu_ps(c + 3 * ldc, c3), _mm512_storeu_ps(c + 4 * ldc, c4), _mm512_storeu_ps(c + 5 * ldc, c5);
}
#endif

/* The micro-kernel of each instruction set (mxf_cpu_isa_kind); the processor's best is
 * found once, at load time. */
static const sgemm_micro_fn k_micro[3] = {micro_base,
#if MXF_SG_X86
                                          micro_avx2, micro_avx512
#else
                                          micro_base, micro_base
#endif
};
static mxf_cpu_isa_kind g_isa_best = MXF_CPU_ISA_BASELINE;

__attribute__((constructor)) static void isa_init(void) {
#if MXF_SG_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2"))
    g_isa_best = __builtin_cpu_supports("avx512f") ? MXF_CPU_ISA_AVX512 : MXF_CPU_ISA_AVX2;
#endif
}

mxf_cpu_isa_kind mxf_cpu_isa_best(void) { return g_isa_best; }

const char *mxf_cpu_isa_name(mxf_cpu_isa_kind isa) {
  return isa == MXF_CPU_ISA_AVX512 ? "avx512" : isa == MXF_CPU_ISA_AVX2 ? "avx2" : "baseline";
}

/* A micro-tile of mr x nr live values: the kernel on C itself when whole, else through a
 * zero-padded copy (the padding's sums are never stored). */
static void sgemm_micro(sgemm_micro_fn fn, int64_t kc, const float *pa, const float *pb, float *c,
                        int64_t ldc, int mr, int nr, int load) {
  if (mr == MXF_SG_MR && nr == MXF_SG_NR) {
    fn(kc, pa, pb, c, ldc, load);
    return;
  }
  float tile[MXF_SG_MR * MXF_SG_NR] = {0};
  if (load)
    for (int i = 0; i < mr; ++i)
      memcpy(tile + i * MXF_SG_NR, c + i * ldc, (size_t)nr * sizeof(float));
  fn(kc, pa, pb, tile, MXF_SG_NR, load);
  for (int i = 0; i < mr; ++i)
    memcpy(c + i * ldc, tile + i * MXF_SG_NR, (size_t)nr * sizeof(float));
}

/* One task's tile of C, mc x nc at (i0, j0), all of K: per K slice, B's nc rows are
 * packed once and A's in blocks of MXF_SG_MC rows, and every micro-tile continues its
 * sums from C (the first slice starts them unless accumulate). */
static void sgemm_tile(const sgemm_ctx *s, sgemm_micro_fn fn, int64_t i0, int64_t j0, int64_t mc, int64_t nc,
                       float *pa, float *pb) {
  for (int64_t k0 = 0; k0 < s->k; k0 += MXF_SG_KC) {
    const int64_t kc = s->k - k0 < MXF_SG_KC ? s->k - k0 : MXF_SG_KC;
    const int load = k0 > 0 || s->accumulate;
    if (s->b_packed)
      pb = (float *)s->b + j0 * kc; /* one slice, packed by the caller */
    else
      sgemm_pack(s->b + j0 * s->ldb, s->ldb, nc, k0, kc, MXF_SG_NR, s->isa != MXF_CPU_ISA_BASELINE, pb);
    for (int64_t ib = 0; ib < mc; ib += MXF_SG_MC) {
      const int64_t mb = mc - ib < MXF_SG_MC ? mc - ib : MXF_SG_MC;
      if (s->a_packed)
        pa = (float *)s->a + (i0 + ib) * kc; /* one slice, packed by the caller */
      else
        sgemm_pack(s->a + (i0 + ib) * s->lda, s->lda, mb, k0, kc, MXF_SG_MR, s->isa != MXF_CPU_ISA_BASELINE,
                   pa);
      for (int64_t jr = 0; jr < nc; jr += MXF_SG_NR) {
        const int nr = (int)(nc - jr < MXF_SG_NR ? nc - jr : MXF_SG_NR);
        for (int64_t ir = 0; ir < mb; ir += MXF_SG_MR) {
          const int mr = (int)(mb - ir < MXF_SG_MR ? mb - ir : MXF_SG_MR);
          sgemm_micro(fn, kc, pa + ir * kc, pb + jr * kc, s->c + (i0 + ib + ir) * s->ldc + j0 + jr, s->ldc,
                      mr, nr, load);
        }
      }
    }
  }
}

/* Pack buffers on the task's stack: 72 KiB of A, 192 KiB of B. */
static void sgemm_task(void *ctx, int64_t begin, int64_t end) {
  const sgemm_ctx *s = (const sgemm_ctx *)ctx;
  _Alignas(64) float pa[MXF_SG_MC * MXF_SG_KC + MXF_SG_PACK_SLACK];
  _Alignas(64) float pb[MXF_SG_NC * MXF_SG_KC + MXF_SG_PACK_SLACK];
  const sgemm_micro_fn fn = k_micro[s->isa];
  for (int64_t t = begin; t < end; ++t) {
    int64_t i0 = (t / s->tiles_n) * s->tm, j0 = (t % s->tiles_n) * MXF_SG_NC;
    int64_t mc = s->m - i0 < s->tm ? s->m - i0 : s->tm;
    int64_t nc = s->n - j0 < MXF_SG_NC ? s->n - j0 : MXF_SG_NC;
    sgemm_tile(s, fn, i0, j0, mc, nc, pa, pb);
  }
}

/* The problem's tasks: tiles of tm rows (MXF_SG_MC .. MXF_SG_TM_MAX blocks of it, fewer
 * where the threads would otherwise lack tasks) x MXF_SG_NC columns. The cut sets only
 * which thread computes an element, never its sum. */
static sgemm_ctx sgemm_setup(mxf_cpu_isa_kind isa, int64_t m, int64_t n, int64_t k, const float *a,
                             int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc, int accumulate,
                             int threads) {
  sgemm_ctx s = {m, n, k, lda, ldb, ldc, a, b, c, mxf_cdiv(n, MXF_SG_NC), MXF_SG_MC, accumulate, 0, 0, isa};
  const int64_t blocks = mxf_cdiv(m, MXF_SG_MC);
  int64_t per = blocks * s.tiles_n / ((int64_t)threads * MXF_SG_TASKS);
  per = per < 1 ? 1 : per > MXF_SG_TM_MAX ? MXF_SG_TM_MAX : per;
  s.tm = per * MXF_SG_MC;
  return s;
}

/* The core on the calling thread alone: what a task of the streaming path runs. With
 * a_packed (b_packed), a (b) holds m (n) rows x k (<= MXF_SG_KC) values in the packed
 * layout (lda, ldb unused). */
static void sgemm_serial(mxf_cpu_isa_kind isa, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                         const float *b, int64_t ldb, float *c, int64_t ldc, int accumulate, int a_packed,
                         int b_packed) {
  sgemm_ctx s = sgemm_setup(isa, m, n, k, a, lda, b, ldb, c, ldc, accumulate, 1);
  s.a_packed = a_packed, s.b_packed = b_packed;
  sgemm_task(&s, 0, mxf_cdiv(m, s.tm) * s.tiles_n);
}

void mxf_cpu_sgemm_nt_c(mxf_cpu_isa_kind isa, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                        const float *b, int64_t ldb, float *c, int64_t ldc, int accumulate) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i)
        memset(c + i * ldc, 0, (size_t)n * sizeof(float));
    return;
  }
  sgemm_ctx s = sgemm_setup(isa, m, n, k, a, lda, b, ldb, c, ldc, accumulate, mxf_cpu_threads());
  mxf_parallel_for(mxf_cdiv(m, s.tm) * s.tiles_n, 1, sgemm_task, &s);
}

void mxf_cpu_sgemm_nt(const mxf_cpu_core *core, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                      const float *b, int64_t ldb, float *c, int64_t ldc, int accumulate) {
#if defined(MXF_HAVE_CBLAS)
  if (core->f32 == MXF_CPU_CORE_BLAS && m > 0 && n > 0 && k > 0 && m <= INT_MAX && n <= INT_MAX &&
      k <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)m, (blasint)n, (blasint)k, 1.0f, a,
                (blasint)lda, b, (blasint)ldb, accumulate ? 1.0f : 0.0f, c, (blasint)ldc);
    return;
  }
#endif
  mxf_cpu_sgemm_nt_c(core->isa, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

/* ---------------------------------------------------------------- panel driver */
static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Extent of the pieces that cut `total` into about equal parts of at most `target` (at
 * least `unit`), each a multiple of `unit` except a last, shorter one; at most `total`. */
static int64_t panel_extent(int64_t total, int64_t target, int64_t unit) {
  if (total <= 0) return 1;
  int64_t e = target / unit * unit;
  if (e < unit) e = unit;
  e = mxf_round_up(mxf_cdiv(total, mxf_cdiv(total, e)), unit);
  return e < total ? e : total;
}

static int panels_stream(const mxf_cpu_panels *pp);

void mxf_cpu_panels_init(mxf_cpu_panels *pp, int64_t rows, int64_t cols, int64_t k, int64_t row_unit,
                         int64_t col_unit, int64_t k_unit, const mxf_cpu_core *core) {
  pp->rows = rows, pp->cols = cols, pp->k = k;
  pp->row_unit = row_unit, pp->col_unit = col_unit;
  pp->core = NULL;
  pp->stream_fmt[0] = pp->stream_fmt[1] = MXF_DTYPE_INVALID;
  pp->nc = panel_extent(cols, MXF_PANEL_COLS, col_unit);
  pp->kc = panel_extent(k, MXF_PANEL_K, k_unit);
  pp->ldy = mxf_round_up(pp->kc, 16);
  pp->ldn = mxf_round_up(pp->nc, 16);
  /* One N panel: X is used once per K panel, so its block is a K panel too. Several: X
   * is dequantized once per row chunk over the whole K and read by every N panel, with
   * as many rows as MXF_PANEL_X_BYTES hold (within MXF_PANEL_ROWS_MIN..MXF_PANEL_ROWS). */
  pp->x_full_k = cols > pp->nc;
  pp->ldx = pp->x_full_k ? mxf_round_up(k > 0 ? k : 1, 16) : pp->ldy;
  int64_t rows_max = MXF_PANEL_ROWS;
  if (pp->x_full_k) {
    rows_max = (int64_t)(MXF_PANEL_X_BYTES / ((size_t)pp->ldx * sizeof(float)));
    if (rows_max > MXF_PANEL_ROWS) rows_max = MXF_PANEL_ROWS;
    if (rows_max < MXF_PANEL_ROWS_MIN) rows_max = MXF_PANEL_ROWS_MIN;
  }
  pp->rc = panel_extent(rows, rows_max, row_unit);
  mxf_cpu_panels_core(pp, core);
}

/* The streaming path's tile along the many rows: as many as MXF_STREAM_ACC_BYTES of
 * sums hold (at least the other paths' extent). Each tile is a parallel-for of the
 * many's chunks, whose end waits for the slowest, and a task reads its codes ahead only
 * within its tile (1 x 24576 x 1536 MXFP4 on 2 threads in 12 tiles of MXF_PANEL_COLS
 * took 1.16x the time of one; bench/NOTES.md). */
static int64_t stream_extent(int64_t many, int64_t few, int64_t at_least, int64_t unit) {
  const int64_t fit = (int64_t)(MXF_STREAM_ACC_BYTES / ((size_t)(few > 0 ? few : 1) * sizeof(float)));
  return panel_extent(many, fit > at_least ? fit : at_least, unit);
}
void mxf_cpu_panels_core(mxf_cpu_panels *pp, const mxf_cpu_core *core) {
  pp->core = core;
  const int side = core ? panels_stream(pp) : 0;
  if (side == 1) {
    pp->nc = stream_extent(pp->cols, pp->rows, MXF_PANEL_COLS, pp->col_unit);
    pp->ldn = mxf_round_up(pp->nc, 16);
  } else if (side == 2) {
    pp->rc = stream_extent(pp->rows, pp->ldn, MXF_PANEL_ROWS, pp->row_unit);
  }
}

/* The workspace's pieces, in this order, each 64-byte aligned:
 *   streaming path: the few rows, f32: as rows (few x ldk) where few_slice is 0, else
 *              packed (few_slice floats per K slice); acc (rc x ldn);
 *   f32 cores: X (rc x ldx), Y (nc x ldy), acc (rc x ldn), f32;
 *   onednn:    X and Y as bf16: X's K panels dense blocks (rows of exactly their K
 *              values: oneDNN's AMX matmul takes no padded rows), one after the other
 *              (rc x kc each); Y in oneDNN's weights layout (mxf_cpu_bf16_y_bytes, nc x
 *              kc and its padding); acc f32; then the f32 core's X and Y blocks of
 *              one K panel (for panels that take it: rc x ldy, nc x ldy), the bf16
 *              blocks' exponent ranges (one per fill group and K panel) and oneDNN's
 *              scratchpad. */
typedef struct panels_layout {
  size_t x, y, acc, xf, yf, stats, scratch, total; /* byte offsets */
  int64_t x_panels;                                /* K panels the X block holds */
} panels_layout;

static int panels_bf16(const mxf_cpu_panels *pp) { return pp->core && pp->core->kind == MXF_CPU_CORE_ONEDNN; }

/* The streaming path's side (sgemm_cpu.c's header): 1 when X has at most
 * MXF_STREAM_ROWS rows, 2 when Y does (and X more), 0 otherwise, on a vendor core or
 * where the plan turned the path off (cpu_stream=off). */
static int panels_stream(const mxf_cpu_panels *pp) {
  if (pp->core && (pp->core->kind != MXF_CPU_CORE_C || pp->core->f32 != MXF_CPU_CORE_C || !pp->core->stream))
    return 0;
  if (pp->k <= 0) return 0;
  return pp->rows <= MXF_STREAM_ROWS ? 1 : pp->cols <= MXF_STREAM_ROWS ? 2 : 0;
}

#define MXF_STREAM_K 256 /* the streaming path's K slice: MXF_SG_KC, a multiple of every k_unit (32) */

/* The streaming path's few rows: X's on side 1, Y's on side 2 (panels_stream). */
static int64_t few_rows(const mxf_cpu_panels *pp, int side) { return side == 1 ? pp->rows : pp->cols; }

/* The few rows the op's streaming kernel takes on this side, at most: MXF_CPU_STREAM_X
 * for its weights and the plan's instruction set; where it has none (no weights it
 * decodes, the baseline instruction set), MXF_CPU_STREAM_X_MAX. */
static int64_t few_stream_x(const mxf_cpu_panels *pp, int side) {
  const mxf_dtype fmt = pp->stream_fmt[side - 1];
  const mxf_cpu_isa_kind isa = pp->core ? pp->core->isa : MXF_CPU_ISA_BASELINE;
  if (fmt == MXF_DTYPE_INVALID || (isa != MXF_CPU_ISA_AVX512 && isa != MXF_CPU_ISA_AVX2))
    return MXF_CPU_STREAM_X_MAX;
  return MXF_CPU_STREAM_X(fmt, isa);
}

/* Floats of one K slice of the few rows in the core's packed layout (micro-panels of MR
 * rows of X on side 1, NR of Y on side 2), with room for sgemm_pack's stores past its
 * end (the slices are packed at once by several tasks), 64-byte aligned; 0 (not packed)
 * for as few rows as the op's streaming kernel takes (the core then runs only on what
 * the kernel leaves, and packs those rows itself). More are packed once, not per task
 * (fp8 weights, and e2m1 on AVX2, at 9-16 rows: bench/NOTES.md). */
static int64_t few_slice(const mxf_cpu_panels *pp, int side) {
  const int64_t few = few_rows(pp, side);
  if (few <= few_stream_x(pp, side)) return 0;
  return mxf_round_up(few, side == 1 ? MXF_SG_MR : MXF_SG_NR) * MXF_STREAM_K +
         mxf_round_up(MXF_SG_PACK_SLACK, 16);
}

static panels_layout panels_layout_of(const mxf_cpu_panels *pp) {
  panels_layout l;
  const int side = panels_stream(pp);
  if (side) { /* the few rows' whole K, then acc */
    const int64_t few = few_rows(pp, side), slice = few_slice(pp, side);
    l.x = l.y = 0;
    l.x_panels = 1;
    l.acc = align64((size_t)(slice ? mxf_cdiv(pp->k, MXF_STREAM_K) * slice : few * mxf_round_up(pp->k, 16)) *
                    sizeof(float));
    l.xf = l.yf = l.stats = l.scratch = l.total = l.acc + align64((size_t)(pp->rc * pp->ldn) * sizeof(float));
    return l;
  }
  const size_t vb = panels_bf16(pp) ? 2 : 4; /* bytes of an X or Y value */
  const int64_t k_panels = pp->k > 0 ? mxf_cdiv(pp->k, pp->kc) : 1;
  l.x_panels = pp->x_full_k ? k_panels : 1;
  const int bf16 = panels_bf16(pp);
  l.x = 0;
  l.y = l.x + align64((size_t)(pp->rc * (bf16 ? pp->kc * l.x_panels : pp->ldx)) * vb);
  l.acc = l.y + align64(bf16 ? mxf_cpu_bf16_y_bytes(pp->core->bf16) : (size_t)(pp->nc * pp->ldy) * vb);
  l.xf = l.acc + align64((size_t)(pp->rc * pp->ldn) * sizeof(float));
  l.yf = l.stats = l.scratch = l.total = l.xf;
  if (bf16) {
    l.yf = l.xf + align64((size_t)(pp->rc * pp->ldy) * sizeof(float));
    l.stats = l.yf + align64((size_t)(pp->nc * pp->ldy) * sizeof(float));
    const int64_t groups =
        mxf_cdiv(pp->rc, MXF_CPU_FILL_ROWS) * l.x_panels + mxf_cdiv(pp->nc, MXF_CPU_FILL_ROWS);
    l.scratch = l.stats + align64((size_t)groups * sizeof(uint16_t));
    l.total = l.scratch + align64(mxf_cpu_bf16_scratchpad(pp->core->bf16));
  }
  return l;
}

size_t mxf_cpu_panels_workspace(const mxf_cpu_panels *pp) { return panels_layout_of(pp).total; }

/* ---------------------------------------------------------------- bf16 blocks
 * A bf16 block is filled through the op's fill16 (bf16 operands, as they are) or its f32
 * fill, MXF_PANEL_STEP values of K at a time into a buffer on the task's stack, then
 * truncated to bf16 (exact: MX values have at most 8 significant bits, bf16 values are
 * themselves) into X's dense rows or Y's layout. The truncation records the
 * block's exponent range per K panel: the smallest biased exponent of its nonzero
 * values (0 when one is an f32 subnormal, or when a value is not a bf16 — then no bf16
 * core may take it) and the largest of its finite ones, packed lo | hi << 8. */
#define MXF_PANEL_STEP 128  /* a multiple of every k_unit (32); the buffer (32 KiB) within L1 */
#define RANGE_EMPTY 0x00FFu /* lo 255, hi 0: no nonzero value seen */

/* One value into the range being gathered (lo, hi, inexact) from its f32 bits (bf16
 * values: their bits << 16); its bf16 bits back. */
static inline uint16_t range_step(uint32_t u, uint32_t *lo, uint32_t *hi, uint32_t *inexact) {
  const uint32_t e = (u >> 23) & 0xFF;
  const uint32_t l = mxf_select_u32(u & 0x7FFFFFFFu, e, 255), h = mxf_select_u32(e == 255, 0, e);
  *lo = l < *lo ? l : *lo; /* min and max reductions vectorize; the selects as masks */
  *hi = h > *hi ? h : *hi;
  *inexact |= u & 0xFFFFu;
  return (uint16_t)(u >> 16);
}

/* n values of src (f32; or bf16 bits, src16) truncated into dst. */
MXF_CPU_MULTIVERSION
static uint32_t bf16_row(const float *restrict src, const uint16_t *restrict src16, int64_t n,
                         uint16_t *restrict dst, uint32_t range) {
  uint32_t lo = range & 0xFF, hi = range >> 8, inexact = 0;
  if (src16)
    for (int64_t i = 0; i < n; ++i)
      dst[i] = range_step((uint32_t)src16[i] << 16, &lo, &hi, &inexact);
  else
    for (int64_t i = 0; i < n; ++i)
      dst[i] = range_step(mxf_f32_bits(src[i]), &lo, &hi, &inexact);
  return (inexact ? 0 : lo) | hi << 8;
}

/* n bf16 values of a Y row (dense, src) into oneDNN's weights layout (dst: the row's
 * start), value kk at dst[k_off[kk]]: two at a time where the layout keeps pairs together,
 * since a pair is one 4-byte store. */
static void y_scatter(const uint16_t *restrict src, int64_t n, uint16_t *restrict dst,
                      const int32_t *restrict k_off, int pairs) {
  int64_t i = 0;
  if (pairs)
    for (; i + 1 < n; i += 2)
      memcpy(dst + k_off[i], src + i, 2 * sizeof(uint16_t));
  for (; i < n; ++i)
    dst[k_off[i]] = src[i];
}

static uint32_t range_merge(uint32_t a, uint32_t b) {
  const uint32_t lo = (a & 0xFF) < (b & 0xFF) ? a & 0xFF : b & 0xFF,
                 hi = (a >> 8) > (b >> 8) ? a >> 8 : b >> 8;
  return lo | hi << 8;
}

/* Whether the bf16 core may sum the products of two blocks with these ranges exactly
 * (docs/decisions.md, CPU core on oneDNN): no subnormal or inexact value on either side,
 * every product of nonzero values of exponents ea, eb is a multiple of 2^(ea + eb - 14),
 * and so is every f32 partial sum of them, so ea + eb >= -112 keeps each nonzero partial
 * sum >= 2^-126 (the units flush below); largest exponents summing to <= 126 keep every
 * product below 2^128. Blocks without nonzero values pass. */
static int ranges_exact(uint32_t x, uint32_t y) {
  const uint32_t xl = x & 0xFF, yl = y & 0xFF, xh = x >> 8, yh = y >> 8;
  return xl > 0 && yl > 0 && xl + yl >= 254 - 112 && xh + yh <= 254 + 126;
}

typedef struct panels_run {
  const mxf_cpu_panels *pp;
  const mxf_cpu_panel_ops *ops;
  void *ctx;
  panels_layout lay;
  uint8_t *base;
  float *acc;
  int64_t r0, rn, c0, cn;     /* the current tile */
  int64_t ldc;                /* its acc's row stride: pp->ldn, or cn on the onednn core */
  int64_t xk0, xkn, yk0, ykn; /* what the fill tasks dequantize: K ranges of X and Y */
  int64_t x_groups;           /* fill tasks of X this round (0: X not filled) */
  int64_t y_groups;
  int bf16;                        /* the fill tasks write the bf16 blocks (else f32 ones) */
  const mxf_cpu_bf16_layout *ylay; /* the bf16 Y block's layout (of this tile's shape) */
  void *xdst, *ydst;               /* where: bf16 X and Y, or f32 X and Y blocks */
  int64_t ldxd, ldyd;              /* and the f32 blocks' row strides */
  void (*pfor)(int64_t, int64_t, mxf_range_fn, void *); /* the core's threads */
} panels_run;

/* Rows [row0, row0 + n) of X or Y, K range [k0, k0 + kn) as bf16: X into the dense
 * panels of dst (panel p at p * rows_cap * kc values, rows of its length; these rows
 * from row i0 of the panel on), Y (one K panel) into dst in r->ylay's layout, from its
 * row i0 on; the exponent range of each K panel into ranges[p]. */
static void fill_bf16(const panels_run *r, int which, int64_t row0, int64_t i0, int64_t n, int64_t k0,
                      int64_t kn, uint16_t *dst, int64_t rows_cap, uint16_t *ranges) {
  _Alignas(64) union {
    float f[MXF_CPU_FILL_ROWS * MXF_PANEL_STEP];
    uint16_t h[MXF_CPU_FILL_ROWS * MXF_PANEL_STEP];
  } buf;
  const int64_t kc = r->pp->kc;
  for (int64_t p0 = 0, p = 0; p0 < kn; p0 += kc, ++p) {
    const int64_t pn = kn - p0 < kc ? kn - p0 : kc;
    uint16_t *panel = dst + p * rows_cap * kc + i0 * pn;
    uint32_t range = RANGE_EMPTY;
    for (int64_t s0 = p0; s0 < p0 + pn; s0 += MXF_PANEL_STEP) {
      const int64_t sn = p0 + pn - s0 < MXF_PANEL_STEP ? p0 + pn - s0 : MXF_PANEL_STEP;
      const int h =
          r->ops->fill16 && r->ops->fill16(r->ctx, which, row0, n, k0 + s0, sn, buf.h, MXF_PANEL_STEP);
      if (!h) r->ops->fill(r->ctx, which, row0, n, k0 + s0, sn, buf.f, MXF_PANEL_STEP);
      for (int64_t i = 0; i < n; ++i) {
        const float *sf = h ? NULL : buf.f + i * MXF_PANEL_STEP;
        const uint16_t *sh = h ? buf.h + i * MXF_PANEL_STEP : NULL;
        if (!which) {
          range = bf16_row(sf, sh, sn, panel + i * pn + (s0 - p0), range);
          continue;
        }
        /* Y: truncated along the row's contiguous values, then scattered (s0 - p0 is a
         * multiple of MXF_PANEL_STEP, so the pairs stay pairs) */
        _Alignas(64) uint16_t row[MXF_PANEL_STEP];
        range = bf16_row(sf, sh, sn, row, range);
        y_scatter(row, sn, dst + r->ylay->row_off[i0 + i], r->ylay->k_off + (s0 - p0), r->ylay->pairs);
      }
    }
    ranges[p] = (uint16_t)range;
  }
}

/* fill tasks: the X block's row groups first, then the Y block's */
static void panels_fill_task(void *vctx, int64_t begin, int64_t end) {
  const panels_run *r = (const panels_run *)vctx;
  for (int64_t t = begin; t < end; ++t) {
    const int y = t >= r->x_groups;
    const int64_t g = y ? t - r->x_groups : t;
    const int64_t n = y ? r->cn : r->rn, i0 = g * MXF_CPU_FILL_ROWS;
    const int64_t cnt = n - i0 < MXF_CPU_FILL_ROWS ? n - i0 : MXF_CPU_FILL_ROWS;
    const int64_t ld = y ? r->ldyd : r->ldxd, row0 = (y ? r->c0 : r->r0) + i0;
    const int64_t k0 = y ? r->yk0 : r->xk0, kn = y ? r->ykn : r->xkn;
    if (r->bf16) {
      uint16_t *ranges =
          (uint16_t *)(r->base + r->lay.stats) +
          (y ? mxf_cdiv(r->pp->rc, MXF_CPU_FILL_ROWS) * r->lay.x_panels + g : g * r->lay.x_panels);
      fill_bf16(r, y, row0, i0, cnt, k0, kn, (uint16_t *)(y ? r->ydst : r->xdst), y ? r->pp->nc : r->pp->rc,
                ranges);
    } else {
      r->ops->fill(r->ctx, y, row0, cnt, k0, kn, (float *)(y ? r->ydst : r->xdst) + i0 * ld, ld);
    }
  }
}

static void panels_epilogue_task(void *vctx, int64_t begin, int64_t end) {
  const panels_run *r = (const panels_run *)vctx;
  r->ops->epilogue(r->ctx, r->r0, r->rn, r->c0, r->cn, r->acc, r->ldc, begin, end);
}

/* The range of K panel p of the X chunk (over its row groups) and of the Y block. */
static uint32_t range_x(const panels_run *r, int64_t p) {
  const uint16_t *s = (const uint16_t *)(r->base + r->lay.stats);
  uint32_t v = RANGE_EMPTY;
  for (int64_t g = 0; g < mxf_cdiv(r->rn, MXF_CPU_FILL_ROWS); ++g)
    v = range_merge(v, s[g * r->lay.x_panels + p]);
  return v;
}
static uint32_t range_y(const panels_run *r) {
  const uint16_t *s =
      (const uint16_t *)(r->base + r->lay.stats) + mxf_cdiv(r->pp->rc, MXF_CPU_FILL_ROWS) * r->lay.x_panels;
  uint32_t v = RANGE_EMPTY;
  for (int64_t g = 0; g < mxf_cdiv(r->cn, MXF_CPU_FILL_ROWS); ++g)
    v = range_merge(v, s[g]);
  return v;
}

/* One round of fill tasks: X over [xk0, xk0 + xkn) when fill_x, Y over [k0, k0 + kn)
 * when fill_y, into the bf16 blocks or the f32 ones (xf, yf: one K panel). */
static void panels_fill(panels_run *r, int fill_x, int fill_y, int bf16, void *xdst, int64_t ldxd, void *ydst,
                        int64_t ldyd) {
  r->bf16 = bf16;
  r->xdst = xdst, r->ydst = ydst, r->ldxd = ldxd, r->ldyd = ldyd;
  r->x_groups = fill_x ? mxf_cdiv(r->rn, MXF_CPU_FILL_ROWS) : 0;
  r->y_groups = fill_y ? mxf_cdiv(r->cn, MXF_CPU_FILL_ROWS) : 0;
  if (bf16 && fill_y) {
    r->ylay = mxf_cpu_bf16_y_layout(r->pp->core->bf16, r->cn, r->ykn);
    if (r->ylay->padded) memset(ydst, 0, r->ylay->bytes); /* the layout's padding reads as zeros */
  }
  r->pfor(r->x_groups + r->y_groups, 1, panels_fill_task, r);
}

/* ---------------------------------------------------------------- streaming path
 * The few rows (X's, or Y's: side 2) are dequantized once over their whole K into the
 * workspace: as rows (ldk floats a row) where the op's streaming kernel may take them,
 * else into the core's packed layout, a slice of MXF_STREAM_K values of K a task; the
 * many are cut into chunks of MXF_CPU_FILL_ROWS, one task each, which dequantizes its
 * chunk MXF_STREAM_K values of K at a time into a buffer on its stack (or, through the
 * op's fill_packed, into the core's packed layout) and runs the core on it and the few
 * rows at once, continuing the tile's sums in acc. Each code and scale of the large
 * operand is read once; its f32 values never leave the core's caches, and the few rows
 * are packed once, not per task. */
typedef struct stream_run {
  const panels_run *r;
  int side;
  int64_t slice; /* few_slice */
  float *few;    /* the few rows, whole K: as rows, ldk floats apart, when slice is 0, else
                    in the core's packed layout, a K slice of MXF_STREAM_K every slice floats */
  int64_t ldk;
  int x_in_range; /* the few rows as rows: mxf_cpu_stream_x_in_range's verdict */
} stream_run;

/* The few rows' K slices into the core's packed layout (side 1: X's, micro-panels of MR
 * rows; side 2: Y's, of NR), a slice a task: groups of rows (whole micro-panels, at most
 * MXF_CPU_FILL_ROWS) through the op's fill into a buffer on the task's stack, then packed
 * in row order (a group's packing runs a few values into the next group's place, which
 * that group then writes). */
static void few_pack_task(void *vctx, int64_t begin, int64_t end) {
  const stream_run *s = (const stream_run *)vctx;
  const panels_run *r = s->r;
  const mxf_cpu_panels *pp = r->pp;
  const int pr = s->side == 1 ? MXF_SG_MR : MXF_SG_NR;
  const int64_t few = s->side == 1 ? r->rn : r->cn, group = MXF_CPU_FILL_ROWS / pr * pr;
  _Alignas(64) float buf[MXF_CPU_FILL_ROWS * MXF_STREAM_K];
  for (int64_t t = begin; t < end; ++t) {
    const int64_t k0 = t * MXF_STREAM_K, kn = pp->k - k0 < MXF_STREAM_K ? pp->k - k0 : MXF_STREAM_K;
    for (int64_t g0 = 0; g0 < few; g0 += group) {
      const int64_t cnt = few - g0 < group ? few - g0 : group;
      r->ops->fill(r->ctx, s->side == 2, (s->side == 1 ? r->r0 : r->c0) + g0, cnt, k0, kn, buf, MXF_STREAM_K);
      sgemm_pack(buf, MXF_STREAM_K, cnt, 0, kn, pr, pp->core->isa != MXF_CPU_ISA_BASELINE,
                 s->few + t * s->slice + g0 * kn);
    }
  }
}

/* Rows [i0, i0 + cnt) of the many, K from kfrom on, through the fills and the core
 * (the sums continue from acc when kfrom > 0). */
static void stream_fill(const stream_run *s, int64_t i0, int64_t cnt, int64_t kfrom, float *buf) {
  const panels_run *r = s->r;
  const mxf_cpu_panels *pp = r->pp;
  for (int64_t k0 = kfrom, kn; k0 < pp->k; k0 += kn) {
    /* up to the next slice of the packed few rows; a slice entered part way (after the
     * streaming kernel), or few rows not packed, go as they are */
    const int64_t t = k0 / MXF_STREAM_K,
                  end = (t + 1) * MXF_STREAM_K < pp->k ? (t + 1) * MXF_STREAM_K : pp->k;
    const int whole = s->slice && k0 == t * MXF_STREAM_K;
    const float *few = s->few + (whole ? t * s->slice : k0);
    kn = end - k0;
    if (s->side == 1) {
      const int packed = r->ops->fill_packed && r->ops->fill_packed(r->ctx, 1, r->c0 + i0, cnt, k0, kn, buf);
      if (!packed) r->ops->fill(r->ctx, 1, r->c0 + i0, cnt, k0, kn, buf, MXF_STREAM_K);
      sgemm_serial(pp->core->isa, r->rn, cnt, kn, few, s->ldk, buf, MXF_STREAM_K, r->acc + i0, r->ldc, k0 > 0,
                   whole, packed);
    } else {
      r->ops->fill(r->ctx, 0, r->r0 + i0, cnt, k0, kn, buf, MXF_STREAM_K);
      sgemm_serial(pp->core->isa, cnt, r->cn, kn, buf, MXF_STREAM_K, few, s->ldk, r->acc + i0 * r->ldc,
                   r->ldc, k0 > 0, 0, whole);
    }
  }
}

/* The op's streaming kernel on rows [i0, i0 + n) of the many (a multiple of 16): the K
 * it did (0: none). Side 2's tile has the many as its rows, so the kernel's sums (few
 * rows x n) go through a buffer and are transposed into it. */
static int64_t stream_kernel(const stream_run *s, int64_t i0, int64_t n) {
  const panels_run *r = s->r;
  if (!n || !r->ops->stream || s->slice) return 0; /* packed few rows: more than it takes */
  if (s->side == 1)
    return r->ops->stream(r->ctx, 1, s->few, s->ldk, r->rn, s->x_in_range, r->c0 + i0, n, r->acc + i0,
                          r->ldc);
  if (r->cn > MXF_CPU_STREAM_X_MAX) return 0;
  _Alignas(64) float t[MXF_CPU_STREAM_X_MAX * MXF_CPU_FILL_ROWS];
  const int64_t kdone = r->ops->stream(r->ctx, 0, s->few, s->ldk, r->cn, s->x_in_range, r->r0 + i0, n, t, n);
  if (kdone)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < r->cn; ++i)
        r->acc[(i0 + j) * r->ldc + i] = t[i * n + j];
  return kdone;
}

/* A chunk of MXF_CPU_FILL_ROWS rows of the many a task: the op's streaming kernel where
 * it takes them (whole panels of 16, whole blocks of 32 values), the fills for the rest
 * (whole panels apart from the last rows, so that the packed fill may take them). */
static void stream_task(void *vctx, int64_t begin, int64_t end) {
  const stream_run *s = (const stream_run *)vctx;
  const panels_run *r = s->r;
  _Alignas(64) float buf[MXF_CPU_FILL_ROWS * MXF_STREAM_K];
  for (int64_t t = begin; t < end; ++t) {
    const int64_t i0 = t * MXF_CPU_FILL_ROWS, many = s->side == 1 ? r->cn : r->rn;
    const int64_t cnt = many - i0 < MXF_CPU_FILL_ROWS ? many - i0 : MXF_CPU_FILL_ROWS;
    const int64_t whole = cnt & ~(int64_t)15;
    const int64_t kdone = stream_kernel(s, i0, whole);
    /* the whole panels (the kernel's part, then the rest of K), then the last rows */
    if (whole) stream_fill(s, i0, whole, kdone, buf);
    if (whole < cnt) stream_fill(s, i0 + whole, cnt - whole, 0, buf);
  }
}

mxf_status mxf_cpu_gemm_panels(const mxf_cpu_panels *pp, const mxf_cpu_panel_ops *ops, void *ctx, void *ws) {
  if (pp->rows <= 0 || pp->cols <= 0) return MXF_OK;
  panels_run r;
  r.pp = pp, r.ops = ops, r.ctx = ctx;
  r.lay = panels_layout_of(pp);
  r.base = (uint8_t *)ws;
  r.acc = (float *)(r.base + r.lay.acc);
  const mxf_cpu_core *core = pp->core; /* the plan's: mxf_cpu_core_plan set it */
  const int bf16 = panels_bf16(pp) && pp->k > 0;
  r.pfor = bf16 ? mxf_parallel_for_omp : mxf_parallel_for;
  void *scratch = r.base + r.lay.scratch;
  void *xblk = r.base + r.lay.x, *yblk = r.base + r.lay.y;
  float *xf = (float *)(r.base + r.lay.xf), *yf = (float *)(r.base + r.lay.yf);
  const int64_t k_panels = pp->k > 0 ? mxf_cdiv(pp->k, pp->kc) : 1;
  const int side = panels_stream(pp);
  if (side) {
    stream_run s = {&r, side, few_slice(pp, side), (float *)r.base, mxf_round_up(pp->k, 16), 0};
    for (r.r0 = 0; r.r0 < pp->rows; r.r0 += pp->rc) {
      r.rn = pp->rows - r.r0 < pp->rc ? pp->rows - r.r0 : pp->rc;
      for (r.c0 = 0; r.c0 < pp->cols; r.c0 += pp->nc) {
        r.cn = pp->cols - r.c0 < pp->nc ? pp->cols - r.c0 : pp->nc;
        r.ldc = pp->ldn;
        if (side == 1 ? r.c0 == 0 : r.r0 == 0) { /* the few rows, once */
          r.xk0 = r.yk0 = 0, r.xkn = r.ykn = pp->k;
          if (s.slice)
            r.pfor(mxf_cdiv(pp->k, MXF_STREAM_K), 1, few_pack_task, (void *)&s);
          else {
            panels_fill(&r, side == 1, side == 2, 0, r.base, s.ldk, r.base, s.ldk);
            s.x_in_range = mxf_cpu_stream_x_in_range(s.few, s.ldk, side == 1 ? r.rn : r.cn, pp->k);
          }
        }
        mxf_parallel_for_runs(mxf_cdiv(side == 1 ? r.cn : r.rn, MXF_CPU_FILL_ROWS), 1, stream_task,
                              (void *)&s);
        r.pfor(ops->epilogue_tasks(ctx, r.rn, r.cn), 1, panels_epilogue_task, &r);
      }
    }
    return MXF_OK;
  }
  /* With one K panel and one N panel, the Y block stays valid across row chunks. */
  const int keep_y = k_panels == 1 && pp->cols <= pp->nc;
  for (r.r0 = 0; r.r0 < pp->rows; r.r0 += pp->rc) {
    r.rn = pp->rows - r.r0 < pp->rc ? pp->rows - r.r0 : pp->rc;
    for (r.c0 = 0; r.c0 < pp->cols; r.c0 += pp->nc) {
      r.cn = pp->cols - r.c0 < pp->nc ? pp->cols - r.c0 : pp->nc;
      int tile_f32 = !bf16;          /* bf16 sums so far (acc holds no f32 subnormal) */
      r.ldc = bf16 ? r.cn : pp->ldn; /* oneDNN's matmul writes dense rows (onednn_cpu.c) */
      for (int64_t kp = 0; kp < k_panels; ++kp) {
        const int64_t k0 = kp * pp->kc, kn = pp->k - k0 < pp->kc ? pp->k - k0 : pp->kc;
        /* X: its K panel, or (full K) the whole chunk along with the chunk's first block */
        const int fill_x = kn > 0 && (pp->x_full_k ? r.c0 == 0 && kp == 0 : 1);
        const int fill_y = kn > 0 && !(keep_y && r.r0 > 0);
        r.xk0 = pp->x_full_k ? 0 : k0, r.xkn = pp->x_full_k ? pp->k : kn;
        r.yk0 = k0, r.ykn = kn;
        if (!tile_f32) {
          panels_fill(&r, fill_x, fill_y, 1, xblk, 0, yblk, 0);
          if (ranges_exact(range_x(&r, pp->x_full_k ? kp : 0), range_y(&r))) {
            const uint16_t *xa = (const uint16_t *)xblk + (pp->x_full_k ? kp * pp->rc * pp->kc : 0);
            mxf_status st = mxf_cpu_bf16_gemm(pp->core->bf16, r.rn, r.cn, kn, xa, (const uint16_t *)yblk,
                                              r.acc, kp > 0, scratch);
            if (st != MXF_OK) return st;
            continue;
          }
          tile_f32 = 1; /* this panel and the tile's later ones on the f32 core */
        }
        if (bf16) { /* the f32 core's blocks of this K panel, beside the bf16 ones */
          r.xk0 = k0, r.xkn = kn;
          panels_fill(&r, kn > 0, kn > 0, 0, xf, pp->ldy, yf, pp->ldy);
          mxf_cpu_sgemm_nt(core, r.rn, r.cn, kn, xf, pp->ldy, yf, pp->ldy, r.acc, r.ldc, kp > 0);
          continue;
        }
        panels_fill(&r, fill_x, fill_y, 0, xblk, pp->ldx, yblk, pp->ldy);
        const float *xa = (const float *)xblk + (pp->x_full_k ? k0 : 0);
        mxf_cpu_sgemm_nt(core, r.rn, r.cn, kn, xa, pp->ldx, (const float *)yblk, pp->ldy, r.acc, r.ldc,
                         kp > 0);
      }
      r.pfor(ops->epilogue_tasks(ctx, r.rn, r.cn), 1, panels_epilogue_task, &r);
    }
  }
  return MXF_OK;
}
