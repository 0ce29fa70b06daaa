/*
 * gemm_amax_cpu.c — block-scaled GEMM + amax on the CPU (SPEC §1), on the f32 GEMM core
 * shared by the CPU ops (mxf_cpu_sgemm_nt in sgemm_cpu.c: OpenBLAS or plain C).
 *
 * A run works on an "oriented" view of the problem: X (rows x K) times Y (cols x K)^T
 * into an output whose column stride is 1 where possible. That is A, B, C as given when
 * C is n-major, and B, A, C^T when C is m-major (so the epilogue always streams along
 * contiguous memory). Per batch:
 *   1. Y is dequantized once into an f32 (cols, ldk) panel: code value times block scale;
 *   2. X is dequantized chunk by chunk (xchunk rows) into an f32 (xchunk, ldk) panel;
 *   3. acc = Xpanel Ypanel^T through mxf_cpu_sgemm_nt into an f32 (xchunk, ldn) panel;
 *   4. epilogue: v = alpha * acc (alpha applied once, after the sum), amax over |v|,
 *      v converted to C's dtype with formats.h and stored with C's strides.
 * Steps 1, 2 and 4 run on mxf_parallel_for; step 3 is threaded by the GEMM core.
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
 * Workspace (each piece 64-byte aligned): Y panel (cols, ldk), X panel (xchunk, ldk),
 * acc panel (xchunk, ldn), all f32; ldk, ldn rounded up to 16 floats. xchunk bounds
 * the X and acc panels to about MXF_GEMM_CHUNK_BYTES.
 *
 * Never read: scale bytes of rows >= MN or k-blocks >= Kb (offsets are only formed for
 * valid (row, block) pairs) and operand bytes outside the logical (MN, K) extent.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/parallel.h"

#define MXF_GEMM_CHUNK_BYTES ((size_t)32 << 20) /* X panel + acc panel of one chunk */
#define MXF_GEMM_ROW_BLOCK 64                   /* rows per dequantization task */
#define MXF_GEMM_EPI_GRAIN 16                   /* rows per epilogue task, at least */

/* ------------------------------------------------------------ the oriented problem */
typedef struct gemm_operand {
  const uint8_t *data; /* codes; e2m1 packed, value i in byte i/2, nibble i%2 */
  const uint8_t *sf;
  mxf_sf_layout layout;
  int64_t rows;       /* M or N: the MN of the scale tensor */
  int64_t rs, ks, ls; /* value strides: row, k, batch */
} gemm_operand;

typedef struct gemm_view {
  int64_t rows, cols, k, l, kb;
  int sf_vec;
  mxf_dtype ab, sf, c;
  gemm_operand x, y;        /* x: rows of acc, y: columns of acc */
  int64_t c_rs, c_cs, c_ls; /* C strides in values, for (row of acc, col of acc, batch) */
  int64_t ldk, ldn, xchunk;
  int swapped; /* x is B, y is A */
} gemm_view;

static int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }
static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static void gemm_view_init(gemm_view *v, const mxf_gemm_problem *p) {
  gemm_operand a = {NULL, NULL, p->sfa_layout, p->m, p->a_ms, p->a_ks, p->a_ls};
  gemm_operand b = {NULL, NULL, p->sfb_layout, p->n, p->b_ns, p->b_ks, p->b_ls};
  /* m-major C: compute C^T = B A^T so that the epilogue writes contiguous runs. e2m1 C
   * is n-major by contract (two values share a byte along n). */
  int swap = p->c != MXF_E2M1 && p->c_ms == 1 && p->c_ns != 1;
  v->swapped = swap;
  v->k = p->k;
  v->l = p->l;
  v->kb = p->kb;
  v->sf_vec = p->sf_vec;
  v->ab = p->ab;
  v->sf = p->sf;
  v->c = p->c;
  v->c_ls = p->c_ls;
  if (!swap) {
    v->rows = p->m, v->cols = p->n, v->x = a, v->y = b, v->c_rs = p->c_ms, v->c_cs = p->c_ns;
  } else {
    v->rows = p->n, v->cols = p->m, v->x = b, v->y = a, v->c_rs = p->c_ns, v->c_cs = p->c_ms;
  }
  v->ldk = round_up(p->k > 0 ? p->k : 1, 16);
  v->ldn = round_up(v->cols > 0 ? v->cols : 1, 16);
  int64_t per_row = (v->ldk + v->ldn) * (int64_t)sizeof(float);
  int64_t chunk = (int64_t)MXF_GEMM_CHUNK_BYTES / per_row;
  chunk = chunk / MXF_GEMM_ROW_BLOCK * MXF_GEMM_ROW_BLOCK;
  if (chunk < MXF_GEMM_ROW_BLOCK) chunk = MXF_GEMM_ROW_BLOCK;
  if (chunk > v->rows) chunk = v->rows > 0 ? v->rows : 1;
  v->xchunk = chunk;
}

static size_t gemm_ws_y(const gemm_view *v) {
  return align64((size_t)v->cols * (size_t)v->ldk * sizeof(float));
}
static size_t gemm_ws_x(const gemm_view *v) {
  return align64((size_t)v->xchunk * (size_t)v->ldk * sizeof(float));
}
static size_t gemm_ws_acc(const gemm_view *v) {
  return align64((size_t)v->xchunk * (size_t)v->ldn * sizeof(float));
}

size_t mxf_cpu_gemm_amax_workspace(const mxf_plan *plan) {
  gemm_view v;
  gemm_view_init(&v, &plan->p.gemm);
  /* + 64: the run aligns the start of the caller's buffer itself */
  return gemm_ws_y(&v) + gemm_ws_x(&v) + gemm_ws_acc(&v) + 64;
}

/* ------------------------------------------------------------ dequantization */
typedef struct dequant_ctx {
  const gemm_view *v;
  const gemm_operand *op;
  int64_t batch, row0; /* rows [row0, row0 + count) of op land in out rows 0.. */
  int64_t count;
  float *out;                 /* (count, ldk) */
  const float *code_lut;      /* 256 entries: code byte -> value (fp8), or low nibble (e2m1) */
  const float *sf_lut;        /* 256 entries: scale byte -> value */
  const float (*pair_lut)[2]; /* e2m1: byte -> (low nibble value, high nibble value) */
} dequant_ctx;

static uint8_t operand_code(const gemm_view *v, const uint8_t *data, int64_t i) {
  return v->ab == MXF_E2M1 ? mxf_e2m1_get(data, i) : data[i];
}

/* One row with unit k stride: codes of a block are contiguous. */
static void dequant_row_kmajor(const dequant_ctx *d, int64_t r, float *dst) {
  const gemm_view *v = d->v;
  const gemm_operand *op = d->op;
  int64_t base = r * op->rs + d->batch * op->ls;
  for (int64_t kb = 0; kb < v->kb; ++kb) {
    float s = d->sf_lut[op->sf[mxf_gemm_sf_offset(op->layout, op->rows, v->kb, r, kb, d->batch)]];
    int64_t k0 = kb * v->sf_vec, k1 = k0 + v->sf_vec < v->k ? k0 + v->sf_vec : v->k;
    if (v->ab != MXF_E2M1) {
      const uint8_t *src = op->data + base;
      for (int64_t k = k0; k < k1; ++k)
        dst[k] = d->code_lut[src[k]] * s;
    } else if (((base + k0) & 1) == 0) {
      const uint8_t *src = op->data + ((base + k0) >> 1);
      int64_t k = k0;
      for (; k + 1 < k1; k += 2, ++src) {
        dst[k] = d->pair_lut[*src][0] * s;
        dst[k + 1] = d->pair_lut[*src][1] * s;
      }
      if (k < k1) dst[k] = d->pair_lut[*src][0] * s;
    } else {
      for (int64_t k = k0; k < k1; ++k)
        dst[k] = d->code_lut[mxf_e2m1_get(op->data, base + k)] * s;
    }
  }
}

static void dequant_task(void *ctx, int64_t begin, int64_t end) {
  const dequant_ctx *d = (const dequant_ctx *)ctx;
  const gemm_view *v = d->v;
  const gemm_operand *op = d->op;
  for (int64_t blk = begin; blk < end; ++blk) {
    int64_t i0 = blk * MXF_GEMM_ROW_BLOCK;
    int64_t i1 = i0 + MXF_GEMM_ROW_BLOCK < d->count ? i0 + MXF_GEMM_ROW_BLOCK : d->count;
    if (op->ks == 1) {
      for (int64_t i = i0; i < i1; ++i)
        dequant_row_kmajor(d, d->row0 + i, d->out + i * v->ldk);
      continue;
    }
    /* Unit row stride (or anything else): walk k outside, rows inside, so that each k
     * reads a contiguous run of codes; the block's scales are decoded once. */
    float s[MXF_GEMM_ROW_BLOCK];
    for (int64_t kb = 0; kb < v->kb; ++kb) {
      for (int64_t i = i0; i < i1; ++i)
        s[i - i0] =
            d->sf_lut[op->sf[mxf_gemm_sf_offset(op->layout, op->rows, v->kb, d->row0 + i, kb, d->batch)]];
      int64_t k0 = kb * v->sf_vec, k1 = k0 + v->sf_vec < v->k ? k0 + v->sf_vec : v->k;
      for (int64_t k = k0; k < k1; ++k) {
        int64_t base = k * op->ks + d->batch * op->ls + d->row0 * op->rs;
        if (v->ab != MXF_E2M1 && op->rs == 1) {
          const uint8_t *src = op->data + base;
          for (int64_t i = i0; i < i1; ++i)
            d->out[i * v->ldk + k] = d->code_lut[src[i]] * s[i - i0];
        } else {
          for (int64_t i = i0; i < i1; ++i)
            d->out[i * v->ldk + k] = d->code_lut[operand_code(v, op->data, base + i * op->rs)] * s[i - i0];
        }
      }
    }
  }
}

static void dequant_rows(dequant_ctx *d) {
  int64_t blocks = mxf_cdiv(d->count, MXF_GEMM_ROW_BLOCK);
  mxf_parallel_for(blocks, 1, dequant_task, d);
}

/* ------------------------------------------------------------ epilogue */
typedef struct epilogue_ctx {
  const gemm_view *v;
  const float *acc; /* (chunk rows, ldn) */
  int64_t row0, batch;
  float alpha;
  uint8_t *c;
  pthread_mutex_t lock;
  float amax; /* max |v| over non-NaN values seen so far */
  int has_nan;
} epilogue_ctx;

/* One row of acc: scale, track amax, convert, store with column stride cs. The dtype
 * switch sits outside the element loops so that each loop is a tight streaming pass. */
#define MXF_EPI_LOOP(STORE)                                                                                  \
  for (int64_t j = 0; j < n; ++j) {                                                                          \
    float x = acc[j] * alpha;                                                                                \
    float ax = mxf_f32_from_bits(mxf_f32_bits(x) & 0x7FFFFFFFu);                                             \
    amax = ax > amax ? ax : amax;                                                                            \
    nan |= ax != ax;                                                                                         \
    STORE;                                                                                                   \
  }
static void epilogue_row(mxf_dtype dt, const float *acc, int64_t n, float alpha, uint8_t *c, int64_t o,
                         int64_t cs, float *amax_io, int *nan_io) {
  float amax = *amax_io;
  int nan = *nan_io;
  switch (dt) {
  case MXF_F32: {
    float *p = (float *)c + o;
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
  *amax_io = amax;
  *nan_io = nan;
}
#undef MXF_EPI_LOOP

static void epilogue_task(void *ctx, int64_t begin, int64_t end) {
  epilogue_ctx *e = (epilogue_ctx *)ctx;
  const gemm_view *v = e->v;
  float amax = 0.0f;
  int has_nan = 0;
  for (int64_t i = begin; i < end; ++i)
    epilogue_row(v->c, e->acc + i * v->ldn, v->cols, e->alpha, e->c,
                 (e->row0 + i) * v->c_rs + e->batch * v->c_ls, v->c_cs, &amax, &has_nan);
  pthread_mutex_lock(&e->lock);
  if (amax > e->amax) e->amax = amax;
  e->has_nan |= has_nan;
  pthread_mutex_unlock(&e->lock);
}

/* ------------------------------------------------------------ run */
static void build_luts(const gemm_view *v, float code_lut[256], float sf_lut[256], float pair_lut[256][2]) {
  for (int b = 0; b < 256; ++b) {
    uint8_t u = (uint8_t)b;
    switch (v->ab) {
    case MXF_E4M3: code_lut[b] = mxf_e4m3_to_f32(u); break;
    case MXF_E5M2: code_lut[b] = mxf_e5m2_to_f32(u); break;
    default: code_lut[b] = mxf_e2m1_to_f32(u & 0xFu); break;
    }
    pair_lut[b][0] = mxf_e2m1_to_f32(u & 0xFu);
    pair_lut[b][1] = mxf_e2m1_to_f32(u >> 4);
    sf_lut[b] = v->sf == MXF_E4M3 ? mxf_e4m3_to_f32(u) : mxf_e8m0_to_f32(u);
  }
}

mxf_status mxf_cpu_gemm_amax_run(const mxf_plan *plan, const mxf_gemm_amax_args *args, void *ws,
                                 size_t ws_size) {
  const mxf_gemm_problem *p = &plan->p.gemm;
  gemm_view v;
  gemm_view_init(&v, p);
  (void)ws_size; /* core checked it against mxf_cpu_gemm_amax_workspace */

  const uint8_t *a = (const uint8_t *)args->a, *b = (const uint8_t *)args->b;
  const uint8_t *sfa = (const uint8_t *)args->sfa, *sfb = (const uint8_t *)args->sfb;
  v.x.data = v.swapped ? b : a, v.x.sf = v.swapped ? sfb : sfa;
  v.y.data = v.swapped ? a : b, v.y.sf = v.swapped ? sfa : sfb;

  uint8_t *base = (uint8_t *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
  float *ypanel = (float *)base;
  float *xpanel = (float *)(base + gemm_ws_y(&v));
  float *accpanel = (float *)(base + gemm_ws_y(&v) + gemm_ws_x(&v));

  float code_lut[256], sf_lut[256], pair_lut[256][2];
  build_luts(&v, code_lut, sf_lut, pair_lut);

  epilogue_ctx e;
  e.v = &v;
  e.acc = accpanel;
  e.alpha = args->alpha ? *args->alpha : 1.0f;
  e.c = (uint8_t *)args->c;
  e.amax = 0.0f;
  e.has_nan = 0;
  pthread_mutex_init(&e.lock, NULL);

  /* e2m1 C packs two values per byte: rows handled by different threads must not share
   * a byte, which holds when every row starts on an even value index. */
  int64_t epi_grain = MXF_GEMM_EPI_GRAIN;
  if (v.c == MXF_E2M1 && ((v.c_rs & 1) || (v.c_ls & 1) || (v.c_cs != 1))) epi_grain = INT64_MAX / 2;

  for (int64_t l = 0; l < v.l && v.rows > 0 && v.cols > 0; ++l) {
    dequant_ctx dy = {&v, &v.y, l, 0, v.cols, ypanel, code_lut, sf_lut, (const float(*)[2])pair_lut};
    dequant_rows(&dy);
    for (int64_t r0 = 0; r0 < v.rows; r0 += v.xchunk) {
      int64_t cnt = v.rows - r0 < v.xchunk ? v.rows - r0 : v.xchunk;
      dequant_ctx dx = {&v, &v.x, l, r0, cnt, xpanel, code_lut, sf_lut, (const float(*)[2])pair_lut};
      dequant_rows(&dx);
      mxf_cpu_sgemm_nt(cnt, v.cols, v.k, xpanel, v.ldk, ypanel, v.ldk, accpanel, v.ldn);
      e.row0 = r0;
      e.batch = l;
      mxf_parallel_for(cnt, epi_grain, epilogue_task, &e);
    }
  }
  pthread_mutex_destroy(&e.lock);

  float amax = e.has_nan ? mxf_f32_from_bits(0x7FC00000u) : e.amax;
  if (p->flags & MXF_AMAX_ACCUMULATE) {
    /* max(previous, new) with NaN propagating from either side */
    float old = *args->amax;
    if (mxf_f32_isnan(old) || old > amax) amax = mxf_f32_isnan(amax) ? amax : old;
  }
  *args->amax = amax;
  return MXF_OK;
}
