/*
 * gemm_amax_cpu.c — block-scaled GEMM + amax on the CPU (SPEC §1), on the panel driver
 * and f32 GEMM core shared by the CPU ops (mxf_cpu_gemm_panels, mxf_cpu_sgemm_nt in
 * sgemm_cpu.c: the library's own core, SPEC §5.1's order, or a vendor one asked for).
 *
 * A run works on an "oriented" view of the problem: X (rows x K) times Y (cols x K)^T
 * into an output whose column stride is 1 where possible. That is A, B, C as given when
 * C is n-major, and B, A, C^T when C is m-major (so the epilogue always streams along
 * contiguous memory). Per batch, the panel driver walks the tiles of acc and asks for:
 *   1. blocks of X and Y (rows x one K panel) dequantized into f32: code value times
 *      block scale, each operand in its own format (SPEC §1.1: the pair may be mixed; a
 *      bf16 A is read as it is); K panels start on scale blocks;
 *   2. acc += Xblock Yblock^T through mxf_cpu_sgemm_nt into the tile's f32 acc, K panel
 *      by K panel, each element's fused multiply-adds continuing in k order (SPEC §5.1;
 *      with few rows, the driver's streaming path, same order);
 *   3. per finished tile, the epilogue: v = alpha * acc (alpha applied once, after the
 *      sum), amax over |v|, v converted to C's dtype with formats.h and stored with C's
 *      strides.
 * Steps 1 and 3 run on mxf_parallel_for; step 2 is threaded by the GEMM core.
 *
 * Exactness of step 1: a code has at most 4 significant bits and an e8m0 scale is a
 * power of two, a ue4m3 scale 4 bits; the product therefore needs at most 8 significant
 * bits and its smallest possible magnitude, 2^-9 * 2^-127 = 2^-136 (e4m3 subnormal code
 * times scale byte 0) or 2^-16 * 2^-127 = 2^-143 (e5m2), is above the smallest f32
 * subnormal 2^-149, so every finite product is an exact f32, except magnitudes >= 2^128,
 * which overflow to infinity. That needs an e8m0 scale byte >= 247 with e4m3 codes
 * (448 * 2^120 = 1.75 * 2^128), >= 240 with e5m2 codes (57344 * 2^113) and >= 253 with
 * e2m1 (6 * 2^126); quantizing finite f32 data never produces such a block, and the
 * f32 accumulator would overflow on it anyway.
 *
 * Workspace: the panel driver's (an X block, a Y block and an acc tile; sgemm_cpu.c says
 * their bounds), bounded whatever N, and whatever M beyond one row chunk, plus 64
 * bytes to align the caller's pointer: 4.6 MB for M = 64 against a 7168 x 2048 weight,
 * 25 MB at 2048^3, at most 36 MiB up to K = 16384.
 *
 * Never read: scale bytes of rows >= MN or k-blocks >= Kb (offsets are only formed for
 * valid (row, block) pairs) and operand bytes outside the logical (MN, K) extent.
 * The backend's story and measurements: docs/kernels/cpu.md.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core/packed.h"
#include "cpu/cpu.h"
#include "cpu/parallel.h"

#define MXF_GEMM_EPI_GRAIN 16    /* rows per epilogue task */
#define MXF_GEMM_PREFETCH_ROWS 4 /* rows ahead that a fill asks the codes of */

/* ------------------------------------------------------------ the oriented problem */
typedef struct gemm_operand {
  const uint8_t *data; /* codes; e2m1 packed, value i in byte i/2, nibble i%2; bf16 values */
  const uint8_t *sf;   /* null for a bf16 operand */
  mxf_dtype fmt;       /* MXF_BF16 (A only), MXF_E4M3, MXF_E5M2 or MXF_E2M1 */
  mxf_dtype sf_fmt;    /* MXF_E8M0 or MXF_E4M3 (ue4m3) */
  mxf_sf_layout layout;
  int64_t rows;              /* M or N: the MN of the scale tensor */
  int64_t rs, ks, ls;        /* value strides: row, k, batch */
  const mxf_packed_geom *pk; /* packed weights (SPEC §7; B only): data is the buffer, sf unused */
} gemm_operand;

typedef struct gemm_view {
  int64_t rows, cols, k, l, kb;
  int sf_vec;
  mxf_dtype c;
  gemm_operand x, y;        /* x: rows of acc, y: columns of acc */
  int64_t c_rs, c_cs, c_ls; /* C strides in values, for (row of acc, col of acc, batch) */
  mxf_cpu_panels pp;
  int swapped;              /* x is B, y is A */
  mxf_packed_geom b_packed; /* B's packed layout, with MXF_AMAX_B_PACKED */
} gemm_view;

static void gemm_view_init(gemm_view *v, const mxf_gemm_problem *p, const mxf_cpu_core *core) {
  gemm_operand a = {NULL, NULL, p->a_fmt, p->sfa_fmt, p->sfa_layout, p->m, p->a_ms, p->a_ks, p->a_ls, NULL};
  gemm_operand b = {NULL, NULL, p->b_fmt, p->sfb_fmt, p->sfb_layout, p->n, p->b_ns, p->b_ks, p->b_ls, NULL};
  if (p->flags & MXF_AMAX_B_PACKED) {
    v->b_packed = mxf_packed_geom_of(p);
    b.pk = &v->b_packed;
  }
  /* m-major C: compute C^T = B A^T so that the epilogue writes contiguous runs. e2m1 C
   * is n-major by contract (two values share a byte along n). */
  int swap = p->c != MXF_E2M1 && p->c_ms == 1 && p->c_ns != 1;
  v->swapped = swap;
  v->k = p->k;
  v->l = p->l;
  v->kb = p->kb;
  v->sf_vec = p->sf_vec;
  v->c = p->c;
  v->c_ls = p->c_ls;
  if (!swap) {
    v->rows = p->m, v->cols = p->n, v->x = a, v->y = b, v->c_rs = p->c_ms, v->c_cs = p->c_ns;
  } else {
    v->rows = p->n, v->cols = p->m, v->x = b, v->y = a, v->c_rs = p->c_ns, v->c_cs = p->c_ms;
  }
  /* K panels of whole scale blocks (32 is a multiple of both sf_vec); N panels of an
   * even number of columns, so that an e2m1 C row splits between panels on a byte */
  mxf_cpu_panels_init(&v->pp, v->rows, v->cols, v->k, 16, 16, 32, core);
  v->pp.stream_fmt[0] = v->y.fmt; /* gemm_stream: Y's weights against few rows of X */
}

mxf_status mxf_cpu_gemm_amax_plan(mxf_plan *plan, const mxf_cpu_override *ov) {
  gemm_view v;
  gemm_view_init(&v, &plan->p.gemm, NULL);
  mxf_status st = mxf_cpu_core_plan(plan, &v.pp, ov);
  if (st != MXF_OK) return st;
  /* + 64: the run aligns the start of the caller's buffer itself */
  plan->workspace_size = mxf_cpu_panels_workspace(&v.pp) + 64;
  return MXF_OK;
}

/* ------------------------------------------------------------ dequantization */
typedef struct operand_luts {
  float code[256]; /* code byte -> value (fp8), or low nibble (e2m1) */
  float sf[256];   /* scale byte -> value */
} operand_luts;

typedef struct gemm_ctx {
  const gemm_view *v;
  int64_t batch;
  operand_luts lut[2]; /* of x and of y */
  /* epilogue */
  float alpha;
  uint8_t *c;
  int64_t epi_grain;
  pthread_mutex_t lock;
  float amax; /* max |v| over non-NaN values seen so far */
  int has_nan;
} gemm_ctx;

static uint8_t operand_code(const gemm_operand *op, int64_t i) {
  return op->fmt == MXF_E2M1 ? mxf_e2m1_get(op->data, i) : op->data[i];
}

/* Rows [r0, r0 + n) of a bf16 operand (no scales: the values as they are), values
 * [k0, k0 + kn), as f32. */
static void fill_bf16(const gemm_ctx *d, const gemm_operand *op, int64_t r0, int64_t n, int64_t k0,
                      int64_t kn, float *dst, int64_t ld) {
  const uint16_t *src = (const uint16_t *)op->data + d->batch * op->ls;
  if (op->ks == 1) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t *restrict row = src + (r0 + i) * op->rs + k0;
      float *restrict o = dst + i * ld;
      for (int64_t k = 0; k < kn; ++k)
        o[k] = mxf_bf16_to_f32(row[k]);
    }
    return;
  }
  for (int64_t k = 0; k < kn; ++k) {
    const uint16_t *restrict col = src + (k0 + k) * op->ks + r0 * op->rs;
    for (int64_t i = 0; i < n; ++i)
      dst[i * ld + k] = mxf_bf16_to_f32(col[i * op->rs]);
  }
}

/* Row r of op with unit k stride, scale blocks [kb0, kb1): codes of a block are
 * contiguous. dst[0] is value k = kb0 * sf_vec. The codes go through formats.h's
 * decoders, which have no branches, so that the loops vectorize (a table lookup per
 * value did not). The restrict-qualified pointers tell the compiler that the stores
 * reach neither the codes nor the tables (the codes are bytes, which alias anything):
 * without them every store reloads, and the loop ran at half the speed
 * (docs/decisions.md, CPU backend). */
MXF_CPU_MULTIVERSION
static void dequant_row_kmajor(const gemm_ctx *d, const gemm_operand *op, const operand_luts *lut, int64_t r,
                               int64_t kb0, int64_t kb1, float *restrict dst) {
  const gemm_view *v = d->v;
  const int64_t base = r * op->rs + d->batch * op->ls;
  for (int64_t kb = kb0; kb < kb1; ++kb, dst += v->sf_vec) {
    const float s = lut->sf[op->sf[mxf_gemm_sf_offset(op->layout, op->rows, v->kb, r, kb, d->batch)]];
    const int64_t k0 = kb * v->sf_vec, n = k0 + v->sf_vec < v->k ? v->sf_vec : v->k - k0;
    if (op->fmt == MXF_E4M3) {
      const uint8_t *restrict src = op->data + base + k0;
      for (int64_t i = 0; i < n; ++i)
        dst[i] = mxf_e4m3_to_f32(src[i]) * s;
    } else if (op->fmt == MXF_E5M2) {
      const uint8_t *restrict src = op->data + base + k0;
      for (int64_t i = 0; i < n; ++i)
        dst[i] = mxf_e5m2_to_f32(src[i]) * s;
    } else if (((base + k0) & 1) == 0) {
      const uint8_t *restrict src = op->data + ((base + k0) >> 1);
      for (int64_t j = 0; j < n / 2; ++j) {
        dst[2 * j] = mxf_e2m1_to_f32(src[j]) * s;
        dst[2 * j + 1] = mxf_e2m1_to_f32((uint8_t)(src[j] >> 4)) * s;
      }
      if (n & 1) dst[n - 1] = mxf_e2m1_to_f32(src[n >> 1]) * s;
    } else {
      for (int64_t i = 0; i < n; ++i)
        dst[i] = mxf_e2m1_to_f32(mxf_e2m1_get(op->data, base + k0 + i)) * s;
    }
  }
}

/* Row r of packed weights (SPEC §7.2), scale blocks [kb0, kb1), as dequant_row_kmajor:
 * a block's code bytes are 4-byte words 64 bytes apart, the row's at 4 (r mod 16). */
MXF_CPU_MULTIVERSION
static void dequant_row_packed(const gemm_ctx *d, const gemm_operand *op, const operand_luts *lut, int64_t r,
                               int64_t kb0, int64_t kb1, float *restrict dst) {
  const gemm_view *v = d->v;
  const mxf_packed_geom *g = op->pk;
  const uint8_t *panel = op->data + mxf_packed_panel_at(g, d->batch, r / 16);
  const int64_t i = r % 16, vb = g->fmt == MXF_E2M1 ? 2 : 1; /* values a byte */
  for (int64_t kb = kb0; kb < kb1; ++kb, dst += v->sf_vec) {
    const float s = lut->sf[panel[mxf_packed_sf_at(g, i, kb)]];
    const int64_t k0 = kb * v->sf_vec, n = k0 + v->sf_vec < v->k ? v->sf_vec : v->k - k0;
    for (int64_t w = 0; w < n; w += 4 * vb) { /* a word: 4 bytes of the row, consecutive */
      const uint8_t *restrict src = panel + mxf_packed_code_at(g, i, (k0 + w) / vb);
      const int64_t m = n - w < 4 * vb ? n - w : 4 * vb;
      if (vb == 2)
        for (int64_t j = 0; j < m; ++j)
          dst[w + j] = mxf_e2m1_to_f32((uint8_t)(src[j >> 1] >> (4 * (j & 1)))) * s;
      else if (g->fmt == MXF_E4M3)
        for (int64_t j = 0; j < m; ++j)
          dst[w + j] = mxf_e4m3_to_f32(src[j]) * s;
      else
        for (int64_t j = 0; j < m; ++j)
          dst[w + j] = mxf_e5m2_to_f32(src[j]) * s;
    }
  }
}

/* The panel driver's fill: rows [r0, r0 + n) of X or Y, values [k0, k0 + kn) (k0 on a
 * scale block). */
static void gemm_fill(void *ctx, int which, int64_t r0, int64_t n, int64_t k0, int64_t kn, float *dst,
                      int64_t ld) {
  const gemm_ctx *d = (const gemm_ctx *)ctx;
  const gemm_view *v = d->v;
  const gemm_operand *op = which ? &v->y : &v->x;
  const operand_luts *lut = &d->lut[which];
  if (op->fmt == MXF_BF16) {
    fill_bf16(d, op, r0, n, k0, kn, dst, ld);
    return;
  }
  const int64_t kb0 = k0 / v->sf_vec, kb1 = mxf_cdiv(k0 + kn, v->sf_vec);
  if (op->pk) {
    for (int64_t i = 0; i < n; ++i)
      dequant_row_packed(d, op, lut, r0 + i, kb0, kb1, dst + i * ld);
    return;
  }
  if (op->ks == 1) {
    /* A row's K panel is a short run of codes, the next row's a row stride away: ask for
     * the run MXF_GEMM_PREFETCH_ROWS rows ahead (the fills waited on the codes:
     * docs/decisions.md, CPU backend). */
    const int e2 = op->fmt == MXF_E2M1;
    const int64_t run = e2 ? (kn + 1) / 2 : kn;
    for (int64_t i = 0; i < n; ++i) {
      if (i + MXF_GEMM_PREFETCH_ROWS < n) {
        const int64_t at = (r0 + i + MXF_GEMM_PREFETCH_ROWS) * op->rs + d->batch * op->ls + k0;
        const uint8_t *p = op->data + (e2 ? at / 2 : at);
        for (int64_t b = 0; b < run; b += 64)
          __builtin_prefetch(p + b);
      }
      dequant_row_kmajor(d, op, lut, r0 + i, kb0, kb1, dst + i * ld);
    }
    return;
  }
  /* Unit row stride (or anything else): walk k outside, rows inside, so that each k
   * reads a contiguous run of codes; the block's scales are decoded once. */
  float s[MXF_CPU_FILL_ROWS];
  for (int64_t kb = kb0; kb < kb1; ++kb) {
    for (int64_t i = 0; i < n; ++i)
      s[i] = lut->sf[op->sf[mxf_gemm_sf_offset(op->layout, op->rows, v->kb, r0 + i, kb, d->batch)]];
    int64_t kk0 = kb * v->sf_vec, kk1 = kk0 + v->sf_vec < v->k ? kk0 + v->sf_vec : v->k;
    for (int64_t k = kk0; k < kk1; ++k) {
      int64_t base = k * op->ks + d->batch * op->ls + r0 * op->rs;
      float *restrict o = dst + (k - k0);
      if (op->fmt != MXF_E2M1 && op->rs == 1) {
        const uint8_t *restrict src = op->data + base;
        for (int64_t i = 0; i < n; ++i)
          o[i * ld] = lut->code[src[i]] * s[i];
      } else {
        for (int64_t i = 0; i < n; ++i)
          o[i * ld] = lut->code[operand_code(op, base + i * op->rs)] * s[i];
      }
    }
  }
}

/* ------------------------------------------------------------ the streaming kernel */
/* Rows [r0, r0 + n) of Y (n a multiple of 16) as the streaming kernel's weights
 * (stream_cpu.c): MX codes or bf16 values of unit k stride, e2m1 rows on whole bytes,
 * the scale offsets of each panel's rows a fixed step apart. 0 where they are not. */
static int stream_weights(const gemm_ctx *d, int64_t r0, int64_t n, mxf_cpu_stream_w *w) {
  const gemm_view *v = d->v;
  const gemm_operand *op = &v->y;
  if ((r0 & 15) || (n & 15) || n > MXF_CPU_FILL_ROWS) return 0;
  w->fmt = op->fmt;
  w->sf_vec = v->sf_vec;
  w->isa = v->pp.core->isa;
  w->code_lut = d->lut[1].code; /* (unused with bf16 values) */
  w->sf_lut = d->lut[1].sf;
  w->sf_pow2 = op->sf_fmt == MXF_E8M0;
  w->packed = op->pk;
  if (op->pk) { /* packed weights: each panel's start (cpu.h) */
    w->codes = op->data + mxf_packed_panel_at(op->pk, d->batch, r0 / 16);
    w->row_bytes = op->pk->panel / 16;
    w->rows_after = 0;
    for (int64_t p = 0; p < n / 16; ++p)
      w->panel_sf[p] = w->codes + p * op->pk->panel;
    w->sf_row = 0;
    w->sf_swizzled = 0;
    return 1;
  }
  if (op->ks != 1) return 0;
  const int e2 = op->fmt == MXF_E2M1;
  if (e2 && ((op->rs & 1) || (op->ls & 1))) return 0;
  const int64_t at = r0 * op->rs + d->batch * op->ls, es = op->fmt == MXF_BF16 ? 2 : 1;
  w->codes = op->data + (e2 ? at / 2 : at * es);
  w->row_bytes = e2 ? op->rs / 2 : op->rs * es;
  w->rows_after = op->rows - r0 - n;
  if (op->fmt == MXF_BF16) return 1; /* values: no scales */
  const int64_t s0 = mxf_gemm_sf_offset(op->layout, op->rows, v->kb, r0, 0, d->batch);
  w->sf_row = mxf_gemm_sf_offset(op->layout, op->rows, v->kb, r0 + 1, 0, d->batch) - s0;
  w->sf_swizzled = op->layout != MXF_SF_COMPACT;
  const int64_t last = v->kb - 1;
  for (int64_t p = 0; p < n / 16; ++p) {
    const int64_t r = r0 + 16 * p, o = mxf_gemm_sf_offset(op->layout, op->rows, v->kb, r, 0, d->batch);
    /* the kernel steps sf_row a row within a panel, and the block offset of sf_swizzled */
    if (mxf_gemm_sf_offset(op->layout, op->rows, v->kb, r + 15, 0, d->batch) != o + 15 * w->sf_row ||
        mxf_gemm_sf_offset(op->layout, op->rows, v->kb, r, last, d->batch) !=
            o + (w->sf_swizzled ? (last >> 2) * 512 + (last & 3) : last))
      return 0;
    w->panel_sf[p] = op->sf + o;
  }
  return 1;
}

/* The driver's streaming kernel on rows [r0, r0 + n) of Y: the whole blocks of 32
 * values of K, for up to MXF_CPU_STREAM_X rows of X (more: the packed fill, which
 * decodes once for all rows). */
static int64_t gemm_stream(void *ctx, int which, const float *x, int64_t ldx, int64_t xn, int x_in_range,
                           int64_t r0, int64_t n, float *acc, int64_t ld) {
  const gemm_ctx *d = (const gemm_ctx *)ctx;
  mxf_cpu_stream_w w;
  if (!which || xn > MXF_CPU_STREAM_X(d->v->y.fmt, d->v->pp.core->isa) || !stream_weights(d, r0, n, &w))
    return 0;
  const int64_t kblocks = d->v->k / 32;
  return mxf_cpu_stream_rows(&w, n, kblocks, x, ldx, xn, x_in_range, acc, ld) ? kblocks * 32 : 0;
}

/* The driver's packed fill (the streaming path with more rows of X): the same decoding
 * into the core's packed layout, for K ranges of whole 32-value blocks. */
static int gemm_fill_packed(void *ctx, int which, int64_t r0, int64_t n, int64_t k0, int64_t kn, float *dst) {
  const gemm_ctx *d = (const gemm_ctx *)ctx;
  mxf_cpu_stream_w w;
  if (!which || (k0 & 31) || (kn & 31) || !stream_weights(d, r0, n, &w)) return 0;
  return mxf_cpu_stream_unpack(&w, n, k0 / 32, kn / 32, dst);
}

/* The driver's bf16 fill: a bf16 operand with unit k stride, its rows copied as they are. */
static int gemm_fill16(void *ctx, int which, int64_t r0, int64_t n, int64_t k0, int64_t kn, uint16_t *dst,
                       int64_t ld) {
  const gemm_ctx *d = (const gemm_ctx *)ctx;
  const gemm_operand *op = which ? &d->v->y : &d->v->x;
  if (op->fmt != MXF_BF16 || op->ks != 1) return 0;
  const uint16_t *src = (const uint16_t *)op->data + d->batch * op->ls + k0;
  for (int64_t i = 0; i < n; ++i)
    memcpy(dst + i * ld, src + (r0 + i) * op->rs, (size_t)kn * sizeof(uint16_t));
  return 1;
}

/* ------------------------------------------------------------ epilogue */
/* One row of acc: scale, track amax, convert, store with column stride cs. The dtype
 * switch sits outside the element loops so that each loop is a tight streaming pass.
 * amax is kept as the bits of |v|, which order like the values for every non-NaN |v|
 * (as int32: they are below 2^31), so that the running max vectorizes; NaNs set a flag
 * instead. */
#define MXF_EPI_LOOP(STORE)                                                                                  \
  for (int64_t j = 0; j < n; ++j) {                                                                          \
    float x = acc[j] * alpha;                                                                                \
    uint32_t ab = mxf_f32_bits(x) & 0x7FFFFFFFu;                                                             \
    int isnan_ = ab > 0x7F800000u;                                                                           \
    int32_t m = isnan_ ? 0 : (int32_t)ab;                                                                    \
    amax = m > amax ? m : amax;                                                                              \
    nan |= isnan_;                                                                                           \
    STORE;                                                                                                   \
  }
MXF_CPU_MULTIVERSION
static void epilogue_row(mxf_dtype dt, const float *acc, int64_t n, float alpha, uint8_t *c, int64_t o,
                         int64_t cs, float *amax_io, int *nan_io) {
  int32_t amax = (int32_t)mxf_f32_bits(*amax_io);
  int nan = *nan_io;
  switch (dt) {
  case MXF_F32: {
    float *p = (float *)c + o;
    if (cs == 1)
      MXF_EPI_LOOP(p[j] = x)
    else
      MXF_EPI_LOOP(p[j * cs] = x)
    break;
  }
  case MXF_F16: {
    uint16_t *p = (uint16_t *)c + o;
    MXF_EPI_LOOP(p[j * cs] = mxf_f32_to_f16(x))
    break;
  }
  case MXF_BF16: {
    uint16_t *p = (uint16_t *)c + o;
    if (cs == 1)
      MXF_EPI_LOOP(p[j] = mxf_f32_to_bf16(x))
    else
      MXF_EPI_LOOP(p[j * cs] = mxf_f32_to_bf16(x))
    break;
  }
  case MXF_E4M3: {
    uint8_t *p = c + o;
    MXF_EPI_LOOP(p[j * cs] = mxf_f32_to_e4m3(x))
    break;
  }
  case MXF_E5M2: {
    uint8_t *p = c + o;
    MXF_EPI_LOOP(p[j * cs] = mxf_f32_to_e5m2(x))
    break;
  }
  default: /* MXF_E2M1: value index o + j*cs, two per byte */
    MXF_EPI_LOOP(mxf_e2m1_set(c, o + j * cs, mxf_f32_to_e2m1(x)))
    break;
  }
  *amax_io = mxf_f32_from_bits((uint32_t)amax);
  *nan_io = nan;
}
#undef MXF_EPI_LOOP

/* The panel driver's epilogue: tasks of MXF_GEMM_EPI_GRAIN rows (or one task for the
 * whole tile, see epi_grain). */
static int64_t gemm_epilogue_tasks(void *ctx, int64_t rn, int64_t cn) {
  const gemm_ctx *g = (const gemm_ctx *)ctx;
  (void)cn;
  return mxf_cdiv(rn, g->epi_grain);
}

static void gemm_epilogue(void *ctx, int64_t r0, int64_t rn, int64_t c0, int64_t cn, float *acc, int64_t ld,
                          int64_t t0, int64_t t1) {
  gemm_ctx *g = (gemm_ctx *)ctx;
  const gemm_view *v = g->v;
  float amax = 0.0f;
  int has_nan = 0;
  const int64_t i1 = t1 * g->epi_grain < rn ? t1 * g->epi_grain : rn;
  for (int64_t i = t0 * g->epi_grain; i < i1; ++i)
    epilogue_row(v->c, acc + i * ld, cn, g->alpha, g->c,
                 (r0 + i) * v->c_rs + c0 * v->c_cs + g->batch * v->c_ls, v->c_cs, &amax, &has_nan);
  pthread_mutex_lock(&g->lock);
  if (amax > g->amax) g->amax = amax;
  g->has_nan |= has_nan;
  pthread_mutex_unlock(&g->lock);
}

/* ------------------------------------------------------------ run */
/* Code and scale tables of each MX operand (a bf16 operand has none); formats.h decodes. */
static void build_luts(gemm_ctx *g) {
  const gemm_view *v = g->v;
  const gemm_operand *ops[2] = {&v->x, &v->y};
  for (int b = 0; b < 256; ++b) {
    const uint8_t u = (uint8_t)b;
    for (int w = 0; w < 2; ++w) {
      if (ops[w]->fmt == MXF_BF16) continue;
      g->lut[w].code[b] = ops[w]->fmt == MXF_E4M3   ? mxf_e4m3_to_f32(u)
                          : ops[w]->fmt == MXF_E5M2 ? mxf_e5m2_to_f32(u)
                                                    : mxf_e2m1_to_f32(u & 0xFu);
      g->lut[w].sf[b] = mxf_scale_to_f32(u, ops[w]->sf_fmt == MXF_E4M3);
    }
  }
}

/* The GEMM of view v (its operands' data set) into c: the amax of |alpha * acc| over
 * every element into *amax_out (NaN when one is NaN). */
static mxf_status gemm_run_view(const gemm_view *v, float alpha, uint8_t *c, void *ws, float *amax_out) {
  void *base = (void *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);

  gemm_ctx g;
  g.v = v;
  build_luts(&g);
  g.alpha = alpha;
  g.c = c;
  g.amax = 0.0f;
  g.has_nan = 0;
  pthread_mutex_init(&g.lock, NULL);
  /* e2m1 C packs two values per byte: rows handled by different threads must not share
   * a byte, which holds when every row starts on an even value index. */
  g.epi_grain = MXF_GEMM_EPI_GRAIN;
  if (v->c == MXF_E2M1 && ((v->c_rs & 1) || (v->c_ls & 1) || (v->c_cs != 1))) g.epi_grain = INT64_MAX / 2;

  static const mxf_cpu_panel_ops ops = {.fill = gemm_fill,
                                        .fill16 = gemm_fill16,
                                        .fill_packed = gemm_fill_packed,
                                        .stream = gemm_stream,
                                        .epilogue_tasks = gemm_epilogue_tasks,
                                        .epilogue = gemm_epilogue};
  mxf_status st = MXF_OK;
  const int par = mxf_parallel_small(v->rows * v->cols * v->k * v->l);
  for (g.batch = 0; g.batch < v->l && st == MXF_OK; ++g.batch)
    st = mxf_cpu_gemm_panels(&v->pp, &ops, &g, base);
  mxf_parallel_restore(par);
  pthread_mutex_destroy(&g.lock);
  *amax_out = g.has_nan ? mxf_f32_from_bits(0x7FC00000u) : g.amax;
  return st;
}

/* The operands' data of view v from the args (x, y swapped with the view). */
static void gemm_view_data(gemm_view *v, const mxf_gemm_amax_args *args) {
  const uint8_t *a = (const uint8_t *)args->a, *b = (const uint8_t *)args->b;
  const uint8_t *sfa = (const uint8_t *)args->sfa, *sfb = (const uint8_t *)args->sfb;
  v->x.data = v->swapped ? b : a, v->x.sf = v->swapped ? sfb : sfa;
  v->y.data = v->swapped ? a : b, v->y.sf = v->swapped ? sfa : sfb;
}

mxf_status mxf_cpu_gemm_amax_run(const mxf_plan *plan, const mxf_gemm_amax_args *args, void *ws,
                                 size_t ws_size) {
  const mxf_gemm_problem *p = &plan->p.gemm;
  gemm_view v;
  gemm_view_init(&v, p, (const mxf_cpu_core *)plan->impl);
  (void)ws_size; /* core checked it against plan->workspace_size */
  gemm_view_data(&v, args);
  float amax;
  mxf_status st = gemm_run_view(&v, args->alpha ? *args->alpha : 1.0f, (uint8_t *)args->c, ws, &amax);
  if (st != MXF_OK) return st;

  if (p->flags & MXF_AMAX_ACCUMULATE) {
    /* max(previous, new) with NaN propagating from either side */
    float old = *args->amax;
    if (mxf_f32_isnan(old) || old > amax) amax = mxf_f32_isnan(amax) ? amax : old;
  }
  *args->amax = amax;
  return MXF_OK;
}

/* ------------------------------------------------------------ groups of grouped_gemm_amax */
void mxf_cpu_gemm_amax_panels(const mxf_gemm_problem *p, mxf_cpu_panels *pp) {
  gemm_view v;
  gemm_view_init(&v, p, NULL);
  *pp = v.pp;
}

mxf_status mxf_cpu_gemm_amax_group(const mxf_gemm_problem *p, const mxf_cpu_panels *pp,
                                   const mxf_gemm_amax_args *args, void *ws, float *amax) {
  gemm_view v;
  gemm_view_init(&v, p, pp->core);
  /* the plan's tiles, over this group's rows only (fewer rows than the plan's: the same
   * blocks, partly filled) */
  const int64_t rows = v.rows, cols = v.cols;
  v.pp = *pp;
  v.pp.rows = rows;
  v.pp.cols = cols;
  gemm_view_data(&v, args);
  return gemm_run_view(&v, args->alpha ? *args->alpha : 1.0f, (uint8_t *)args->c, ws, amax);
}
