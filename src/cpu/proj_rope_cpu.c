/*
 * proj_rope_cpu.c — projection GEMM + RoPE + dual MXFP8 on the CPU (SPEC §2).
 *
 * Pipeline of one run (all scratch in the caller's workspace):
 *   1. the weight becomes an f32 (H*D, K) panel once: bf16 widened, e4m3 codes times
 *      their e8m0 scale (both exact); the in-out (K, H*D) layout is transposed on the way;
 *   2. per chunk of tokens (a multiple of 32, so column blocks complete inside a chunk;
 *      the last chunk may be partial): x becomes an f32 (chunk, K) panel the same way,
 *      y = x̂ ŵ^T through mxf_cpu_sgemm_nt;
 *   3. epilogue, one task per (32-token block, head): bf16 staging, RoPE, then both
 *      quantization directions from the same f32 values with mxf_mx_quantize_block.
 *
 * Workspace layout (each piece 64-byte aligned):
 *   wpanel  (H*D, K)          f32
 *   xpanel  (chunk, K)        f32
 *   y       (chunk, H*D)      f32, rewritten in place by the epilogue
 *   rope    (chunk/32 * H, rope) f32, one row per epilogue task (RoPE reads the
 *           interleaved pairs while it writes the halves, so it needs a copy)
 */
#include <stdint.h>

#include "cpu/cpu.h"
#include "cpu/parallel.h"

#define MXF_PROJ_CHUNK 256 /* tokens per GEMM; a multiple of MXF_MX_BLOCK */
#define MXF_WTILE 64       /* weight rows (outputs) per conversion task */

static int64_t proj_chunk(const mxf_proj_problem *p) { return p->t < MXF_PROJ_CHUNK ? p->t : MXF_PROJ_CHUNK; }

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

typedef struct proj_layout {
  size_t wpanel, xpanel, y, rope, total; /* byte offsets from the aligned base */
} proj_layout;

static proj_layout proj_layout_of(const mxf_proj_problem *p) {
  const int64_t n = p->h * p->d, tc = proj_chunk(p);
  proj_layout l;
  l.wpanel = 0;
  l.xpanel = l.wpanel + align64((size_t)n * (size_t)p->k * sizeof(float));
  l.y = l.xpanel + align64((size_t)tc * (size_t)p->k * sizeof(float));
  l.rope = l.y + align64((size_t)tc * (size_t)n * sizeof(float));
  l.total =
      l.rope + align64((size_t)mxf_cdiv(tc, MXF_MX_BLOCK) * (size_t)p->h * (size_t)p->rope * sizeof(float));
  return l;
}

size_t mxf_cpu_proj_rope_workspace(const mxf_plan *plan) {
  return proj_layout_of(&plan->p.proj).total + 64; /* + room to align the caller's pointer */
}

typedef struct proj_ctx {
  const mxf_proj_problem *p;
  const mxf_proj_rope_args *a;
  float *wpanel, *xpanel, *y, *rope;
  int64_t t0, tc; /* the current chunk: tokens [t0, t0 + tc) */
  float lut[256]; /* e4m3 code -> f32 */
} proj_ctx;

/* ---------------------------------------------------------------- panels */
/* Rows [begin, end) of an out-in operand (rows, K) into an f32 panel with row stride K. */
static void panel_rows(const proj_ctx *c, const void *src, const uint8_t *scale, int64_t begin, int64_t end,
                       float *dst) {
  const int64_t k = c->p->k, kb = k / MXF_MX_BLOCK;
  for (int64_t r = begin; r < end; ++r) {
    float *o = dst + r * k;
    if (!c->p->mxfp8) {
      const uint16_t *s = (const uint16_t *)src + r * k;
      for (int64_t i = 0; i < k; ++i)
        o[i] = mxf_bf16_to_f32(s[i]);
      continue;
    }
    const uint8_t *s = (const uint8_t *)src + r * k;
    for (int64_t b = 0; b < kb; ++b) {
      /* e4m3 times a power of two: exact in f32 (or inf on overflow, NaN for 0xFF) */
      const float sc = mxf_e8m0_to_f32(scale[r * kb + b]);
      for (int64_t i = b * MXF_MX_BLOCK; i < (b + 1) * MXF_MX_BLOCK; ++i)
        o[i] = c->lut[s[i]] * sc;
    }
  }
}

static void wpanel_out_in(void *vctx, int64_t begin, int64_t end) {
  const proj_ctx *c = (const proj_ctx *)vctx;
  panel_rows(c, c->a->w, (const uint8_t *)c->a->w_scale, begin, end, c->wpanel);
}

/* In-out weight (K, N): tiles of MXF_WTILE outputs x 32 k, transposed into the panel. */
static void wpanel_in_out(void *vctx, int64_t begin, int64_t end) {
  const proj_ctx *c = (const proj_ctx *)vctx;
  const int64_t k = c->p->k, n = c->p->h * c->p->d;
  for (int64_t tile = begin; tile < end; ++tile) {
    const int64_t n0 = tile * MXF_WTILE, n1 = n0 + MXF_WTILE < n ? n0 + MXF_WTILE : n;
    for (int64_t k0 = 0; k0 < k; k0 += MXF_MX_BLOCK) {
      const int64_t k1 = k0 + MXF_MX_BLOCK < k ? k0 + MXF_MX_BLOCK : k;
      if (!c->p->mxfp8) {
        const uint16_t *w = (const uint16_t *)c->a->w;
        for (int64_t kk = k0; kk < k1; ++kk)
          for (int64_t j = n0; j < n1; ++j)
            c->wpanel[j * k + kk] = mxf_bf16_to_f32(w[kk * n + j]);
        continue;
      }
      const uint8_t *w = (const uint8_t *)c->a->w;
      const uint8_t *ws = (const uint8_t *)c->a->w_scale + (k0 / MXF_MX_BLOCK) * n;
      float sc[MXF_WTILE];
      for (int64_t j = n0; j < n1; ++j)
        sc[j - n0] = mxf_e8m0_to_f32(ws[j]);
      for (int64_t kk = k0; kk < k1; ++kk)
        for (int64_t j = n0; j < n1; ++j)
          c->wpanel[j * k + kk] = c->lut[w[kk * n + j]] * sc[j - n0];
    }
  }
}

static void xpanel_rows(void *vctx, int64_t begin, int64_t end) {
  const proj_ctx *c = (const proj_ctx *)vctx;
  const int64_t k = c->p->k, kb = k / MXF_MX_BLOCK, t0 = c->t0;
  /* shift the sources to the chunk so that panel row r is token t0 + r */
  const void *x = c->p->mxfp8 ? (const void *)((const uint8_t *)c->a->x + t0 * k)
                              : (const void *)((const uint16_t *)c->a->x + t0 * k);
  const uint8_t *xs = c->p->mxfp8 ? (const uint8_t *)c->a->x_scale + t0 * kb : NULL;
  panel_rows(c, x, xs, begin, end, c->xpanel);
}

/* ---------------------------------------------------------------- epilogue */
static void epilogue_tasks(void *vctx, int64_t begin, int64_t end) {
  const proj_ctx *c = (const proj_ctx *)vctx;
  const mxf_proj_problem *p = c->p;
  const int64_t h_count = p->h, d = p->d, n = h_count * d, rope = p->rope, nope = p->nope;
  const int64_t half = rope / 2, sb = d / MXF_MX_BLOCK;
  const uint16_t *cosv = (const uint16_t *)c->a->cos, *sinv = (const uint16_t *)c->a->sin;
  uint8_t *q_row = (uint8_t *)c->a->out_row, *s_row = (uint8_t *)c->a->out_scales_row;
  uint8_t *q_col = (uint8_t *)c->a->out_col, *s_col = (uint8_t *)c->a->out_scales_col;
  for (int64_t task = begin; task < end; ++task) {
    const int64_t tb = task / h_count, h = task % h_count;
    const int64_t l0 = tb * MXF_MX_BLOCK; /* first token of the block, chunk-local */
    const int nt = (int)(c->tc - l0 < MXF_MX_BLOCK ? c->tc - l0 : MXF_MX_BLOCK);
    float *pairs = c->rope + task * rope;
    for (int64_t l = l0; l < l0 + nt; ++l) {
      const int64_t t = c->t0 + l;
      float *y = c->y + l * n + h * d;
      if (!p->fp32_epilogue)
        for (int64_t i = 0; i < d; ++i)
          y[i] = mxf_round_bf16(y[i]);
      for (int64_t i = 0; i < rope; ++i)
        pairs[i] = y[nope + i];
      const uint16_t *ct = cosv + t * rope, *st = sinv + t * rope;
      for (int64_t j = 0; j < half; ++j) {
        const float pv = pairs[2 * j], qv = pairs[2 * j + 1];
        /* one f32 rounding per product and per sum (SPEC §2.3 step 3): each product is
         * its own statement and the build forbids contraction into an FMA */
        const float pc = pv * mxf_bf16_to_f32(ct[j]);
        const float qs = qv * mxf_bf16_to_f32(st[j]);
        y[nope + j] = pc - qs;
        const float ps = pv * mxf_bf16_to_f32(st[half + j]);
        const float qc = qv * mxf_bf16_to_f32(ct[half + j]);
        y[nope + half + j] = ps + qc;
      }
      uint8_t *qr = q_row + (t * h_count + h) * d;
      uint8_t *sr = s_row + (t * h_count + h) * sb;
      for (int64_t b = 0; b < sb; ++b)
        sr[b] = mxf_mx_quantize_block(y + b * MXF_MX_BLOCK, MXF_MX_BLOCK, 1, qr + b * MXF_MX_BLOCK, 1);
    }
    const int64_t tg = c->t0 + l0; /* a multiple of 32: chunks are */
    const float *yb = c->y + l0 * n + h * d;
    uint8_t *qcb = q_col + (tg * h_count + h) * d;
    uint8_t *scb = s_col + ((tg / MXF_MX_BLOCK) * h_count + h) * d;
    for (int64_t i = 0; i < d; ++i)
      scb[i] = mxf_mx_quantize_block(yb + i, nt, n, qcb + i, n);
  }
}

/* ---------------------------------------------------------------- run */
mxf_status mxf_cpu_proj_rope_run(const mxf_plan *plan, const mxf_proj_rope_args *args, void *ws,
                                 size_t ws_size) {
  const mxf_proj_problem *p = &plan->p.proj;
  const proj_layout lay = proj_layout_of(p);
  (void)ws_size; /* core checked it against mxf_cpu_proj_rope_workspace */
  if (p->t <= 0) return MXF_OK;
  uint8_t *base = (uint8_t *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
  proj_ctx c;
  c.p = p;
  c.a = args;
  c.wpanel = (float *)(base + lay.wpanel);
  c.xpanel = (float *)(base + lay.xpanel);
  c.y = (float *)(base + lay.y);
  c.rope = (float *)(base + lay.rope);
  for (int i = 0; i < 256; ++i)
    c.lut[i] = mxf_e4m3_to_f32((uint8_t)i);

  const int64_t n = p->h * p->d, k = p->k;
  const int64_t row_grain = mxf_cdiv(65536, k > 0 ? k : 1);
  if (p->w_out_in)
    mxf_parallel_for(n, row_grain, wpanel_out_in, &c);
  else
    mxf_parallel_for(mxf_cdiv(n, MXF_WTILE), mxf_cdiv(row_grain, MXF_WTILE), wpanel_in_out, &c);

  const int64_t chunk = proj_chunk(p);
  for (c.t0 = 0; c.t0 < p->t; c.t0 += chunk) {
    c.tc = p->t - c.t0 < chunk ? p->t - c.t0 : chunk;
    mxf_parallel_for(c.tc, row_grain, xpanel_rows, &c);
    mxf_cpu_sgemm_nt(c.tc, n, k, c.xpanel, k, c.wpanel, k, c.y, n);
    mxf_parallel_for(mxf_cdiv(c.tc, MXF_MX_BLOCK) * p->h, 1, epilogue_tasks, &c);
  }
  return MXF_OK;
}
