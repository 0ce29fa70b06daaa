/*
 * proj_rope_cpu.c — projection GEMM + RoPE + dual MXFP8 on the CPU (SPEC §2).
 *
 * The GEMM y = x̂ ŵ^T runs on the panel driver of the CPU ops (mxf_cpu_gemm_panels in
 * sgemm_cpu.c), tokens as its rows and the H*D outputs as its columns, or, with the
 * onednn core at T <= 256 (proj_swapped), the other way round (y^T = ŵ x̂^T: w is then
 * the operand filled as dense rows, the few tokens the one written into oneDNN's layout):
 *   1. it asks for blocks of x (tokens x the whole K, or one K panel) and of w (outputs
 *      x one K panel) as f32: bf16 widened, e4m3 codes times their e8m0 scale (both
 *      exact); the in-out (K, H*D) weight is transposed on the way; with few tokens
 *      (MXFP8: up to 8, bf16: 16) an out-in w goes through the streaming kernel instead
 *      (proj_stream);
 *   2. the tile's y accumulates in f32 over the K panels; tiles hold whole heads
 *      (output panels are multiples of D) and whole 32-token blocks (token panels are
 *      multiples of 32; the last may be partial);
 *   3. once a tile's K sum is complete, its epilogue, one task per (32-token block,
 *      head): bf16 staging, RoPE, then both quantization directions from the same f32
 *      values with mxf_mx_quantize_block; a swapped tile's block is first transposed
 *      into the task's buffer.
 *
 * Workspace layout (each piece 64-byte aligned), bounded whatever T and H*D:
 *   panels  the panel driver's (sgemm_cpu.c): an X chunk (its rows x the whole K, or one
 *           K panel when Y fits one panel), a Y block and the y tile (f32), the tile
 *           rewritten in place by the epilogue; a tile holds at least one head, so D
 *           enters, and K through the X chunk (at most 16 MiB below K = 16384)
 *   rope    (tasks of a tile, rope) f32, one row per epilogue task (RoPE reads the
 *           interleaved pairs while it writes the halves, so it needs a copy)
 *   blocks  swapped only: (tasks of a tile, 32 x D) f32, at most 2 MiB (T <= 256)
 * e.g. 8.3 MB at T = 128, 10.6 MB at T = 256 and 32 MB at T >= 2048 for DeepSeek-V3's
 * K = 1536, H*D = 24576 (the onednn core).
 * The backend's story and measurements: docs/kernels/cpu.md.
 */
#include <stdint.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/parallel.h"

#define MXF_PROJ_PREFETCH_ROWS 4 /* rows ahead that a fill asks the inputs of */

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* The GEMM's orientation: tokens as the driver's rows, or, with the onednn core and few
 * tokens, the outputs (X = w, Y = x). The onednn core writes Y into oneDNN's weights
 * layout (a scatter) once per row chunk of X, and X into dense rows: at small T the
 * outputs (H*D of them, DeepSeek-V3's 24576) are the operand worth the dense fill, and
 * the few tokens are refilled per chunk of outputs at little cost. Beyond
 * MXF_PROJ_SWAP_T tokens both orientations scatter about as much. The swapped epilogue
 * transposes each (32 tokens, head) block through a buffer of its own (the bound keeps
 * them within 2 MiB), which the f32 cores have no reason to pay: their streaming path
 * takes the few tokens on either side. */
#define MXF_PROJ_SWAP_T 256

static int proj_swapped(const mxf_proj_problem *p, int onednn) {
  return onednn && p->t <= MXF_PROJ_SWAP_T && p->t < p->h * p->d;
}

/* The format of w's values as the streaming kernel decodes them. */
static mxf_dtype proj_w_fmt(const mxf_proj_problem *p) { return p->mxfp8 ? MXF_E4M3 : MXF_BF16; }

/* tiles of whole 32-token blocks, whole heads and whole scale blocks of K; swapped:
 * proj_swapped's orientation */
static void proj_panels(const mxf_proj_problem *p, int swapped, mxf_cpu_panels *pp,
                        const mxf_cpu_core *core) {
  if (swapped)
    mxf_cpu_panels_init(pp, p->h * p->d, p->t, p->k, p->d, MXF_MX_BLOCK, MXF_MX_BLOCK, core);
  else
    mxf_cpu_panels_init(pp, p->t, p->h * p->d, p->k, MXF_MX_BLOCK, p->d, MXF_MX_BLOCK, core);
  /* proj_stream: an out-in w against few tokens, on the side opposite the tokens */
  if (p->w_out_in) pp->stream_fmt[swapped] = proj_w_fmt(p);
}

/* Epilogue tasks of a tile of rn x cn: (32-token block, head) pairs; the tile is tokens
 * x outputs, or outputs x tokens when swapped. */
static int64_t proj_tile_tasks(const mxf_proj_problem *p, int swapped, int64_t rn, int64_t cn) {
  const int64_t d = p->d > 0 ? p->d : 1;
  return swapped ? mxf_cdiv(cn, MXF_MX_BLOCK) * (rn / d) : mxf_cdiv(rn, MXF_MX_BLOCK) * (cn / d);
}

/* ... of a full tile: what the workspace holds one RoPE row (and block) for. */
static size_t proj_tasks(const mxf_proj_problem *p, int swapped, const mxf_cpu_panels *pp) {
  return (size_t)proj_tile_tasks(p, swapped, pp->rc, pp->nc);
}

/* Workspace offsets past the panel driver's: the RoPE rows, then (swapped) the blocks. */
static size_t proj_rope_offset(const mxf_cpu_panels *pp) { return align64(mxf_cpu_panels_workspace(pp)); }
static size_t proj_block_offset(const mxf_proj_problem *p, int swapped, const mxf_cpu_panels *pp) {
  return proj_rope_offset(pp) + align64(proj_tasks(p, swapped, pp) * (size_t)p->rope * sizeof(float));
}

mxf_status mxf_cpu_proj_rope_plan(mxf_plan *plan, const mxf_cpu_override *ov) {
  const mxf_proj_problem *p = &plan->p.proj;
  mxf_cpu_panels pp;
  /* the orientation of the core asked for (oneDNN's primitives are made for it), again
   * for the core chosen where that is another (an empty GEMM takes no oneDNN) */
  const int asked = proj_swapped(p, ov->cpu == MXF_CPU_CORE_ONEDNN);
  proj_panels(p, asked, &pp, NULL);
  mxf_status st = mxf_cpu_core_plan(plan, &pp, ov);
  if (st != MXF_OK) return st;
  const mxf_cpu_core *core = (const mxf_cpu_core *)plan->impl;
  const int swapped = proj_swapped(p, core->kind == MXF_CPU_CORE_ONEDNN);
  if (swapped != asked) proj_panels(p, swapped, &pp, core);
  const size_t blocks =
      swapped ? align64(proj_tasks(p, swapped, &pp) * MXF_MX_BLOCK * (size_t)p->d * sizeof(float)) : 0;
  /* + room to align the caller's pointer */
  plan->workspace_size = proj_block_offset(p, swapped, &pp) + blocks + 64;
  return MXF_OK;
}

typedef struct proj_ctx {
  const mxf_proj_problem *p;
  const mxf_proj_rope_args *a;
  int swapped;          /* proj_swapped: the driver's X is w, its Y is x */
  float *rope;          /* per epilogue task: a copy of a token's RoPE features */
  float *block;         /* swapped, per epilogue task: its (tokens, features) block, transposed */
  float scale_lut[256]; /* e8m0 byte -> f32 */
  float code_lut[256];  /* e4m3 byte -> f32 (MXFP8 inputs) */
  mxf_cpu_isa_kind isa; /* the plan's instruction set */
} proj_ctx;

/* ---------------------------------------------------------------- blocks */
/* Rows [r0, r0 + n) of an out-in operand (rows, K), values [k0, k0 + kn), into dst. The
 * restrict-qualified pointers tell the compiler that the stores reach neither the inputs
 * nor the tables (e4m3 codes are bytes, which alias anything): without them every store
 * reloads, and the loop ran at half the speed (docs/decisions.md, CPU backend); the
 * codes go through formats.h's decoder, which has no branches, so the loop vectorizes. */
MXF_CPU_MULTIVERSION
static void block_rows(const proj_ctx *c, const void *src, const uint8_t *scale, int64_t r0, int64_t n,
                       int64_t k0, int64_t kn, float *dst, int64_t ld) {
  const int64_t k = c->p->k, kb = k / MXF_MX_BLOCK, es = c->p->mxfp8 ? 1 : 2;
  for (int64_t r = r0; r < r0 + n; ++r) {
    /* a K panel of a row is a short run, the next row's a row away: ask for the run
     * MXF_PROJ_PREFETCH_ROWS rows ahead (the fills waited on the codes: docs/decisions.md,
     * CPU backend) */
    if (r + MXF_PROJ_PREFETCH_ROWS < r0 + n) {
      const uint8_t *ahead = (const uint8_t *)src + ((r + MXF_PROJ_PREFETCH_ROWS) * k + k0) * es;
      for (int64_t b = 0; b < kn * es; b += 64)
        __builtin_prefetch(ahead + b);
    }
    float *restrict o = dst + (r - r0) * ld;
    if (!c->p->mxfp8) {
      const uint16_t *restrict s = (const uint16_t *)src + r * k + k0;
      for (int64_t i = 0; i < kn; ++i)
        o[i] = mxf_bf16_to_f32(s[i]);
      continue;
    }
    const uint8_t *restrict s = (const uint8_t *)src + r * k + k0;
    const uint8_t *restrict sr = scale + r * kb + k0 / MXF_MX_BLOCK;
    for (int64_t b = 0; b < kn / MXF_MX_BLOCK; ++b) {
      /* e4m3 times a power of two: exact in f32 (or inf on overflow, NaN for 0xFF) */
      const float sc = c->scale_lut[sr[b]];
      for (int i = 0; i < MXF_MX_BLOCK; ++i)
        o[b * MXF_MX_BLOCK + i] = mxf_e4m3_to_f32(s[b * MXF_MX_BLOCK + i]) * sc;
    }
  }
}

/* Outputs [j0, j0 + n) of an in-out weight (K, N), values [k0, k0 + kn): 32 k at a time,
 * transposed into dst. */
MXF_CPU_MULTIVERSION
static void block_in_out(const proj_ctx *c, int64_t j0, int64_t n, int64_t k0, int64_t kn,
                         float *restrict dst, int64_t ld) {
  const int64_t nn = c->p->h * c->p->d;
  for (int64_t b0 = k0; b0 < k0 + kn; b0 += MXF_MX_BLOCK) {
    const int64_t b1 = b0 + MXF_MX_BLOCK < k0 + kn ? b0 + MXF_MX_BLOCK : k0 + kn;
    if (!c->p->mxfp8) {
      const uint16_t *restrict w = (const uint16_t *)c->a->w;
      for (int64_t kk = b0; kk < b1; ++kk)
        for (int64_t j = 0; j < n; ++j)
          dst[j * ld + (kk - k0)] = mxf_bf16_to_f32(w[kk * nn + j0 + j]);
      continue;
    }
    const uint8_t *restrict w = (const uint8_t *)c->a->w;
    const uint8_t *restrict ws = (const uint8_t *)c->a->w_scale + (b0 / MXF_MX_BLOCK) * nn + j0;
    float sc[MXF_CPU_FILL_ROWS];
    for (int64_t j = 0; j < n; ++j)
      sc[j] = c->scale_lut[ws[j]];
    for (int64_t kk = b0; kk < b1; ++kk)
      for (int64_t j = 0; j < n; ++j)
        dst[j * ld + (kk - k0)] = mxf_e4m3_to_f32(w[kk * nn + j0 + j]) * sc[j];
  }
}

/* The panel driver's fill: x or w (which = 0 and 1, the other way round when swapped). */
static void proj_fill(void *vctx, int which, int64_t r0, int64_t n, int64_t k0, int64_t kn, float *dst,
                      int64_t ld) {
  const proj_ctx *c = (const proj_ctx *)vctx;
  if (!(which ^ c->swapped))
    block_rows(c, c->a->x, (const uint8_t *)c->a->x_scale, r0, n, k0, kn, dst, ld);
  else if (c->p->w_out_in)
    block_rows(c, c->a->w, (const uint8_t *)c->a->w_scale, r0, n, k0, kn, dst, ld);
  else
    block_in_out(c, r0, n, k0, kn, dst, ld);
}

/* The streaming kernel's view (stream_cpu.c) of rows [r0, r0 + n) of an out-in w
 * (MXFP8 or bf16): 0 where it takes no such rows (whole 16-row panels, at most
 * MXF_CPU_FILL_ROWS, and at least one 32-value block of K). */
static int proj_stream_w(const proj_ctx *c, int64_t r0, int64_t n, mxf_cpu_stream_w *w) {
  const mxf_proj_problem *p = c->p;
  const int64_t es = p->mxfp8 ? 1 : 2, kb = p->k / MXF_MX_BLOCK;
  if (!p->w_out_in || (r0 & 15) || (n & 15) || n > MXF_CPU_FILL_ROWS || kb == 0) return 0;
  *w = (mxf_cpu_stream_w){.isa = c->isa,
                          .fmt = proj_w_fmt(p),
                          .sf_vec = MXF_MX_BLOCK,
                          .codes = (const uint8_t *)c->a->w + r0 * p->k * es,
                          .row_bytes = p->k * es,
                          .rows_after = p->h * p->d - r0 - n,
                          .sf_row = kb,
                          .sf_swizzled = 0,
                          .code_lut = c->code_lut,
                          .sf_lut = c->scale_lut,
                          .sf_pow2 = p->mxfp8};
  for (int64_t q = 0; q < n / 16 && p->mxfp8; ++q)
    w->panel_sf[q] = (const uint8_t *)c->a->w_scale + (r0 + 16 * q) * kb;
  return 1;
}

/* The driver's streaming kernel on rows [r0, r0 + n) of an out-in w against xn <=
 * MXF_CPU_STREAM_X tokens (x: their f32 values): the decode-size projection reads w
 * once, decoded in registers, with the sums of the fills' order (SPEC §5.1); the whole
 * 32-value blocks of K (bf16: the fills do the rest). */
static int64_t proj_stream(void *vctx, int which, const float *x, int64_t ldx, int64_t xn, int x_in_range,
                           int64_t r0, int64_t n, float *acc, int64_t ld) {
  const proj_ctx *c = (const proj_ctx *)vctx;
  mxf_cpu_stream_w w;
  if (!(which ^ c->swapped) || xn > MXF_CPU_STREAM_X(proj_w_fmt(c->p), c->isa) ||
      !proj_stream_w(c, r0, n, &w))
    return 0;
  const int64_t kb = c->p->k / MXF_MX_BLOCK;
  return mxf_cpu_stream_rows(&w, n, kb, x, ldx, xn, x_in_range, acc, ld) ? kb * MXF_MX_BLOCK : 0;
}

/* The driver's packed fill (the streaming path with more tokens): an out-in MXFP8 w's
 * rows decoded by the same kernel into the core's packed layout, for K ranges of whole
 * 32-value blocks. */
static int proj_fill_packed(void *vctx, int which, int64_t r0, int64_t n, int64_t k0, int64_t kn,
                            float *dst) {
  const proj_ctx *c = (const proj_ctx *)vctx;
  mxf_cpu_stream_w w;
  if (!(which ^ c->swapped) || !c->p->mxfp8 || (k0 & 31) || (kn & 31) || !proj_stream_w(c, r0, n, &w))
    return 0;
  return mxf_cpu_stream_unpack(&w, n, k0 / 32, kn / 32, dst);
}

/* The driver's bf16 fill: bf16 x, and bf16 w out-in, rows copied as they are. */
static int proj_fill16(void *vctx, int which, int64_t r0, int64_t n, int64_t k0, int64_t kn, uint16_t *dst,
                       int64_t ld) {
  const proj_ctx *c = (const proj_ctx *)vctx;
  const int w = which ^ c->swapped;
  if (c->p->mxfp8 || (w && !c->p->w_out_in)) return 0;
  const uint16_t *src = (const uint16_t *)(w ? c->a->w : c->a->x) + k0;
  for (int64_t i = 0; i < n; ++i)
    memcpy(dst + i * ld, src + (r0 + i) * c->p->k, (size_t)kn * sizeof(uint16_t));
  return 1;
}

/* ---------------------------------------------------------------- epilogue */
static int64_t proj_epilogue_tasks(void *vctx, int64_t rn, int64_t cn) {
  const proj_ctx *c = (const proj_ctx *)vctx;
  return proj_tile_tasks(c->p, c->swapped, rn, cn);
}

/* One task: nt tokens from tok0 (a multiple of 32) of head h, their D sums in the rows of
 * y (ld floats apart), which it overwrites; pairs: its RoPE copy (rope floats). Steps 2-4
 * of SPEC §2.3. */
static inline void proj_block(const proj_ctx *c, float *y0, int64_t ld, int64_t tok0, int nt, int64_t h,
                              float *pairs) {
  const mxf_proj_problem *p = c->p;
  const int64_t h_count = p->h, d = p->d, n = h_count * d, rope = p->rope, nope = p->nope;
  const int64_t half = rope / 2, sb = d / MXF_MX_BLOCK;
  const uint16_t *cosv = (const uint16_t *)c->a->cos, *sinv = (const uint16_t *)c->a->sin;
  uint8_t *q_row = (uint8_t *)c->a->out_row, *s_row = (uint8_t *)c->a->out_scales_row;
  uint8_t *q_col = (uint8_t *)c->a->out_col, *s_col = (uint8_t *)c->a->out_scales_col;
  for (int64_t l = 0; l < nt; ++l) {
    const int64_t t = tok0 + l;
    float *y = y0 + l * ld;
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
  uint8_t *qcb = q_col + (tok0 * h_count + h) * d;
  uint8_t *scb = s_col + ((tok0 / MXF_MX_BLOCK) * h_count + h) * d;
  mxf_mx_quantize_cols(y0, nt, ld, (int)d, qcb, n, scb);
}

/* Tasks [t0, t1) of the tile at rows [r0, r0 + rn), columns [c0, c0 + cn) of the
 * driver's acc (y0, ld floats a row): tokens x outputs, or outputs x tokens when
 * swapped, whose blocks are first transposed into the task's buffer. */
MXF_CPU_MULTIVERSION
static void proj_epilogue(void *vctx, int64_t r0, int64_t rn, int64_t c0, int64_t cn, float *y0, int64_t ld,
                          int64_t t0, int64_t t1) {
  const proj_ctx *c = (const proj_ctx *)vctx;
  const int64_t d = c->p->d, tile_heads = (c->swapped ? rn : cn) / d;
  for (int64_t task = t0; task < t1; ++task) {
    const int64_t tb = task / tile_heads, hl = task % tile_heads, l0 = tb * MXF_MX_BLOCK;
    float *pairs = c->rope + task * c->p->rope;
    if (!c->swapped) {
      const int nt = (int)(rn - l0 < MXF_MX_BLOCK ? rn - l0 : MXF_MX_BLOCK);
      proj_block(c, y0 + l0 * ld + hl * d, ld, r0 + l0, nt, c0 / d + hl, pairs);
      continue;
    }
    const int nt = (int)(cn - l0 < MXF_MX_BLOCK ? cn - l0 : MXF_MX_BLOCK);
    float *restrict b = c->block + task * MXF_MX_BLOCK * d;
    const float *restrict src = y0 + hl * d * ld + l0;
    for (int64_t i = 0; i < d; ++i)
      for (int l = 0; l < nt; ++l)
        b[l * d + i] = src[i * ld + l];
    proj_block(c, b, d, c0 + l0, nt, r0 / d + hl, pairs);
  }
}

/* ---------------------------------------------------------------- run */
mxf_status mxf_cpu_proj_rope_run(const mxf_plan *plan, const mxf_proj_rope_args *args, void *ws,
                                 size_t ws_size) {
  const mxf_proj_problem *p = &plan->p.proj;
  (void)ws_size; /* core checked it against plan->workspace_size */
  if (p->t <= 0) return MXF_OK;
  mxf_cpu_panels pp;
  const mxf_cpu_core *core = (const mxf_cpu_core *)plan->impl;
  const int swapped = proj_swapped(p, core->kind == MXF_CPU_CORE_ONEDNN);
  proj_panels(p, swapped, &pp, core);
  uint8_t *base = (uint8_t *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
  proj_ctx c;
  c.p = p;
  c.a = args;
  c.swapped = swapped;
  c.rope = (float *)(base + proj_rope_offset(&pp));
  c.block = c.swapped ? (float *)(base + proj_block_offset(p, swapped, &pp)) : NULL;
  c.isa = pp.core->isa;
  for (int i = 0; i < 256; ++i) {
    c.scale_lut[i] = mxf_e8m0_to_f32((uint8_t)i);
    c.code_lut[i] = mxf_e4m3_to_f32((uint8_t)i);
  }
  static const mxf_cpu_panel_ops ops = {.fill = proj_fill,
                                        .fill16 = proj_fill16,
                                        .stream = proj_stream,
                                        .fill_packed = proj_fill_packed,
                                        .epilogue_tasks = proj_epilogue_tasks,
                                        .epilogue = proj_epilogue};
  return mxf_cpu_gemm_panels(&pp, &ops, &c, base);
}
