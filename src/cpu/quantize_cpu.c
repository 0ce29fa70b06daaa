/*
 * quantize_cpu.c — MXFP8 quantize and dequantize on the CPU (SPEC §3).
 *
 * Quantize walks the matrix in tiles of 32 rows x 64 columns: a tile is converted to f32
 * once and both directions are quantized from it (a row block is 32 consecutive columns,
 * a column block 32 consecutive rows, so every block of either direction lies inside one
 * tile; partial blocks sit on the right / bottom edge). Tiles are independent and spread
 * over the cores. The rule itself is mxf_mx_quantize_block in formats.h.
 *
 * Dequantize is elementwise: y = e4m3(q) * 2^(s - 127), exact in f32 (NaN for 0xFF),
 * rounded to nearest even when the output is bf16.
 */
#include "cpu/cpu.h"
#include "cpu/parallel.h"

#define MXF_QTILE_COLS 64 /* a multiple of 32 so row blocks never straddle tiles */

typedef struct quant_ctx {
  const mxf_quant_problem *p;
  const mxf_quantize_args *a;
  int64_t tiles_c; /* column tiles per row of tiles */
} quant_ctx;

static void quant_tiles(void *vctx, int64_t begin, int64_t end) {
  const quant_ctx *ctx = (const quant_ctx *)vctx;
  const mxf_quant_problem *p = ctx->p;
  const int64_t rows = p->rows, cols = p->cols, sb_row = mxf_cdiv(cols, MXF_MX_BLOCK);
  float tile[MXF_MX_BLOCK * MXF_QTILE_COLS];
  for (int64_t t = begin; t < end; ++t) {
    const int64_t r0 = (t / ctx->tiles_c) * MXF_MX_BLOCK, c0 = (t % ctx->tiles_c) * MXF_QTILE_COLS;
    const int nr = (int)(rows - r0 < MXF_MX_BLOCK ? rows - r0 : MXF_MX_BLOCK);
    const int nc = (int)(cols - c0 < MXF_QTILE_COLS ? cols - c0 : MXF_QTILE_COLS);
    for (int r = 0; r < nr; ++r) {
      float *dst = tile + r * MXF_QTILE_COLS;
      if (p->x == MXF_F32) {
        const float *src = (const float *)ctx->a->x + (r0 + r) * cols + c0;
        for (int c = 0; c < nc; ++c)
          dst[c] = src[c];
      } else {
        const uint16_t *src = (const uint16_t *)ctx->a->x + (r0 + r) * cols + c0;
        for (int c = 0; c < nc; ++c)
          dst[c] = mxf_bf16_to_f32(src[c]);
      }
    }
    if (p->directions & MXF_QUANT_ROWS) {
      uint8_t *q = (uint8_t *)ctx->a->q_row, *s = (uint8_t *)ctx->a->s_row;
      for (int r = 0; r < nr; ++r)
        for (int c = 0; c < nc; c += MXF_MX_BLOCK) {
          const int n = nc - c < MXF_MX_BLOCK ? nc - c : MXF_MX_BLOCK;
          s[(r0 + r) * sb_row + (c0 + c) / MXF_MX_BLOCK] =
              mxf_mx_quantize_block(tile + r * MXF_QTILE_COLS + c, n, 1, q + (r0 + r) * cols + c0 + c, 1);
        }
    }
    if (p->directions & MXF_QUANT_COLS) {
      uint8_t *q = (uint8_t *)ctx->a->q_col + r0 * cols + c0;
      uint8_t *s = (uint8_t *)ctx->a->s_col + (r0 / MXF_MX_BLOCK) * cols + c0;
      mxf_mx_quantize_cols(tile, nr, MXF_QTILE_COLS, nc, q, cols, s);
    }
  }
}

size_t mxf_cpu_quantize_workspace(const mxf_plan *plan) {
  (void)plan;
  return 0;
}

mxf_status mxf_cpu_quantize_run(const mxf_plan *plan, const mxf_quantize_args *args, void *ws,
                                size_t ws_size) {
  (void)ws;
  (void)ws_size;
  const mxf_quant_problem *p = &plan->p.quant;
  if (p->x != MXF_F32 && p->x != MXF_BF16)
    return mxf_set_error(MXF_ERR_INTERNAL, "cpu backend: quantize input dtype %s", mxf_dtype_name(p->x));
  if (p->rows <= 0 || p->cols <= 0) return MXF_OK;
  quant_ctx ctx = {p, args, mxf_cdiv(p->cols, MXF_QTILE_COLS)};
  const int64_t tiles = mxf_cdiv(p->rows, MXF_MX_BLOCK) * ctx.tiles_c;
  /* a tile is 2048 values; ask for a few per thread so tiny matrices stay on one core */
  mxf_parallel_for(tiles, 8, quant_tiles, &ctx);
  return MXF_OK;
}

typedef struct dequant_ctx {
  const mxf_quant_problem *p;
  const mxf_dequantize_args *a;
  float lut[256]; /* e4m3 code -> f32 */
} dequant_ctx;

static void dequant_rows(void *vctx, int64_t begin, int64_t end) {
  const dequant_ctx *ctx = (const dequant_ctx *)vctx;
  const mxf_quant_problem *p = ctx->p;
  const int64_t cols = p->cols, sb_row = mxf_cdiv(cols, MXF_MX_BLOCK);
  const uint8_t *q = (const uint8_t *)ctx->a->q, *s = (const uint8_t *)ctx->a->s;
  for (int64_t r = begin; r < end; ++r) {
    const uint8_t *qr = q + r * cols;
    const uint8_t *sr = (p->directions & MXF_QUANT_ROWS) ? s + r * sb_row : s + (r / MXF_MX_BLOCK) * cols;
    const int row_dir = (p->directions & MXF_QUANT_ROWS) != 0;
    for (int64_t c = 0; c < cols; ++c) {
      /* e4m3 has 4 significant bits and e8m0 is a power of two: the product is exact
       * (down to 2^-136, above f32's smallest subnormal) or overflows to inf */
      const float v = ctx->lut[qr[c]] * mxf_e8m0_to_f32(row_dir ? sr[c / MXF_MX_BLOCK] : sr[c]);
      if (p->x == MXF_F32)
        ((float *)ctx->a->y)[r * cols + c] = v;
      else
        ((uint16_t *)ctx->a->y)[r * cols + c] = mxf_f32_to_bf16(v);
    }
  }
}

mxf_status mxf_cpu_dequantize_run(const mxf_plan *plan, const mxf_dequantize_args *args) {
  const mxf_quant_problem *p = &plan->p.quant;
  if (p->x != MXF_F32 && p->x != MXF_BF16)
    return mxf_set_error(MXF_ERR_INTERNAL, "cpu backend: dequantize output dtype %s", mxf_dtype_name(p->x));
  if (p->directions != MXF_QUANT_ROWS && p->directions != MXF_QUANT_COLS)
    return mxf_set_error(MXF_ERR_INTERNAL, "cpu backend: dequantize direction %u", p->directions);
  if (p->rows <= 0 || p->cols <= 0) return MXF_OK;
  dequant_ctx ctx;
  ctx.p = p;
  ctx.a = args;
  for (int i = 0; i < 256; ++i)
    ctx.lut[i] = mxf_e4m3_to_f32((uint8_t)i);
  mxf_parallel_for(p->rows, mxf_cdiv(16384, p->cols), dequant_rows, &ctx);
  return MXF_OK;
}
