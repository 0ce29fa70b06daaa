/*
 * test_quantize_gpu.c — MXFP8 quantize / dequantize on the CUDA backend against the CPU
 * backend (SPEC §3): codes and scale bytes must be IDENTICAL (both backends apply the one
 * rule of formats.h to the same f32 values), dequantized values bit-identical (NaN where
 * the CPU has NaN). Skips (exit 77) without CUDA or without a device.
 *
 * Coverage: f32 and bf16 inputs; rows, cols and both directions; shapes that are
 * multiples of nothing (partial 32-blocks on the right and bottom edges, 1 x 1, one row,
 * one column) and aligned ones (the vector path); inputs shifted by one element so that
 * the kernels take their unaligned path; data with zeros blocks, NaN, +-inf, subnormals,
 * huge and tiny magnitudes; dequantize of random codes with every scale byte (0, 1, 253,
 * 254, 0xFF included) to f32 and bf16, both directions; and (not in small mode) every f32
 * value in [2^-12, 448] of both signs through the e4m3 conversion (sweep_case). Outputs poisoned with 0xA5.
 * MXF_GPU_TEST_SMALL=1 keeps only small cases (for compute-sanitizer).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "mxfuse.h"
#include "testutil.h"

#if defined(MXF_WITH_CUDA)

static float f32_of_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* A value for element e: mostly normal data of a per-row magnitude, sometimes special. */
static float gen_value(tu_rng *r, int special, float mag) {
  if (special) {
    const uint32_t k = tu_u32(r) % 1000u;
    if (k == 0) return NAN;
    if (k == 1) return INFINITY;
    if (k == 2) return -INFINITY;
    if (k == 3) return f32_of_bits(tu_u32(r) & 0x807FFFFFu); /* subnormal */
    if (k < 8) return 0.f;
    if (k == 8) return 3.0e38f;
    if (k == 9) return f32_of_bits(0xFFC00000u); /* NaN with the sign set */
    if (k == 10) return f32_of_bits(0xFFFFFFFFu); /* and with a full payload */
  }
  return (float)tu_normal(r) * mag;
}

typedef struct qout {
  uint8_t *q_row, *s_row, *q_col, *s_col;
} qout;

static mxf_status run_quant(int32_t dev, mxf_dtype dt, const void *x, int64_t rows, int64_t cols, unsigned dirs,
                            const qout *o) {
  int64_t sx[2] = {rows, cols}, ssr[2] = {rows, (cols + 31) / 32}, ssc[2] = {(rows + 31) / 32, cols};
  mxf_quantize_desc d;
  memset(&d, 0, sizeof d);
  d.x = tu_tensor((void *)x, dt, 2, sx);
  d.x.device = dev;
  if (dirs & MXF_QUANT_ROWS) {
    d.q_row = tu_tensor(o->q_row, MXF_E4M3, 2, sx);
    d.s_row = tu_tensor(o->s_row, MXF_E8M0, 2, ssr);
    d.q_row.device = d.s_row.device = dev;
  }
  if (dirs & MXF_QUANT_COLS) {
    d.q_col = tu_tensor(o->q_col, MXF_E4M3, 2, sx);
    d.s_col = tu_tensor(o->s_col, MXF_E8M0, 2, ssc);
    d.q_col.device = d.s_col.device = dev;
  }
  d.directions = dirs;
  mxf_plan *plan = NULL;
  mxf_status st = mxf_quantize_plan(&plan, &d);
  if (st != MXF_OK) return st;
  mxf_quantize_args a = {x, o->q_row, o->s_row, o->q_col, o->s_col};
  st = mxf_quantize_run(plan, &a, NULL, 0, NULL);
  mxf_plan_destroy(plan);
  if (dev != MXF_DEVICE_CPU) GU_CUDA(cudaDeviceSynchronize());
  return st;
}

static void cmp_bytes(const char *what, const char *tag, const uint8_t *got, const uint8_t *want, int64_t n) {
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < n; ++i)
    if (got[i] != want[i]) {
      if (first < 0) first = i;
      ++bad;
    }
  TU_CHECK(bad == 0, "%s %s: %lld of %lld bytes differ; first at %lld: gpu 0x%02x cpu 0x%02x", tag, what,
           (long long)bad, (long long)n, (long long)first, first >= 0 ? got[first] : 0, first >= 0 ? want[first] : 0);
}

/* shift: the input starts one element past an aligned address (unaligned kernel path) */
static void quant_case(tu_rng *r, int64_t rows, int64_t cols, mxf_dtype dt, unsigned dirs, int special, int shift) {
  char tag[160];
  snprintf(tag, sizeof tag, "quantize %lldx%lld %s dirs=%u special=%d shift=%d", (long long)rows, (long long)cols,
           dt == MXF_F32 ? "f32" : "bf16", dirs, special, shift);
  const int64_t n = rows * cols, nsr = rows * ((cols + 31) / 32), nsc = ((rows + 31) / 32) * cols;
  const size_t es = dt == MXF_F32 ? 4 : 2;
  uint8_t *xh = (uint8_t *)tu_malloc((size_t)(n + 1) * es);
  for (int64_t i = 0; i < rows; ++i) {
    const float mag = ldexpf(1.f, (int)tu_range(r, -20, 20));
    for (int64_t j = 0; j < cols; ++j) {
      float v = gen_value(r, special, mag);
      /* a zero 32-block now and then: scale byte 0 */
      if (special && (j / 32) % 7 == 3 && i % 5 == 1) v = 0.f;
      const int64_t e = i * cols + j + shift;
      if (dt == MXF_F32) {
        memcpy(xh + e * 4, &v, 4);
      } else {
        uint32_t u;
        memcpy(&u, &v, 4);
        /* bf16 by truncation is fine for inputs: any bf16 bit pattern is valid data */
        uint16_t b = (uint16_t)(u >> 16);
        memcpy(xh + e * 2, &b, 2);
      }
    }
  }
  qout c, g, gd;
  c.q_row = tu_malloc((size_t)n), c.q_col = tu_malloc((size_t)n);
  c.s_row = tu_malloc((size_t)nsr), c.s_col = tu_malloc((size_t)nsc);
  g.q_row = tu_malloc((size_t)n), g.q_col = tu_malloc((size_t)n);
  g.s_row = tu_malloc((size_t)nsr), g.s_col = tu_malloc((size_t)nsc);
  tu_poison(c.q_row, (size_t)n, 0xA5), tu_poison(c.q_col, (size_t)n, 0xA5);
  tu_poison(c.s_row, (size_t)nsr, 0xA5), tu_poison(c.s_col, (size_t)nsc, 0xA5);
  uint8_t *xd = (uint8_t *)gu_to_device(xh, (size_t)(n + 1) * es);
  gd.q_row = gu_dmalloc((size_t)n + 1), gd.q_col = gu_dmalloc((size_t)n + 1);
  gd.s_row = gu_dmalloc((size_t)nsr + 1), gd.s_col = gu_dmalloc((size_t)nsc + 1);
  gu_dpoison(gd.q_row, (size_t)n + 1, 0xA5), gu_dpoison(gd.q_col, (size_t)n + 1, 0xA5);
  gu_dpoison(gd.s_row, (size_t)nsr + 1, 0xA5), gu_dpoison(gd.s_col, (size_t)nsc + 1, 0xA5);
  qout gdo = gd;
  if (shift) { /* shift the outputs too: byte-aligned code and scale stores */
    gdo.q_row += 1, gdo.q_col += 1, gdo.s_row += 1, gdo.s_col += 1;
  }
  mxf_status st = run_quant(MXF_DEVICE_CPU, dt, xh + shift * es, rows, cols, dirs, &c);
  TU_CHECK(st == MXF_OK, "%s: cpu status %s (%s)", tag, mxf_status_string(st), mxf_last_error());
  st = run_quant(MXF_DEVICE_CUDA(0), dt, xd + shift * es, rows, cols, dirs, &gdo);
  if (TU_CHECK(st == MXF_OK, "%s: cuda status %s (%s)", tag, mxf_status_string(st), mxf_last_error())) {
    if (dirs & MXF_QUANT_ROWS) {
      gu_to_host(g.q_row, gdo.q_row, (size_t)n);
      gu_to_host(g.s_row, gdo.s_row, (size_t)nsr);
      cmp_bytes("row codes", tag, g.q_row, c.q_row, n);
      cmp_bytes("row scales", tag, g.s_row, c.s_row, nsr);
    }
    if (dirs & MXF_QUANT_COLS) {
      gu_to_host(g.q_col, gdo.q_col, (size_t)n);
      gu_to_host(g.s_col, gdo.s_col, (size_t)nsc);
      cmp_bytes("col codes", tag, g.q_col, c.q_col, n);
      cmp_bytes("col scales", tag, g.s_col, c.s_col, nsc);
    }
    /* nothing written outside the matrix: before it when shifted, else past its end */
    if (dirs & MXF_QUANT_ROWS) {
      uint8_t edge = 0;
      gu_to_host(&edge, gd.q_row + (shift ? 0 : n), 1);
      TU_CHECK(edge == 0xA5, "%s: a q_row byte outside the matrix was written", tag);
    }
  }
  free(xh);
  free(c.q_row), free(c.q_col), free(c.s_row), free(c.s_col);
  free(g.q_row), free(g.q_col), free(g.s_row), free(g.s_col);
  cudaFree(xd);
  cudaFree(gd.q_row), cudaFree(gd.q_col), cudaFree(gd.s_row), cudaFree(gd.s_col);
}

/* Every f32 value in [2^-12, 448] of either sign, 31 to a row block whose first value is
 * 448 (so the block's multiplier is a fixed power of two and each value's code is its own
 * f32 -> e4m3 rounding): the GPU's e4m3 conversion against the CPU backend's integer one,
 * bit for bit, over every rounding case that quantization can reach (ties included). */
static void sweep_case(void) {
  const uint32_t lo = 0x39800000u, hi = 0x43E00000u;
  const int64_t per_sign = (int64_t)(hi - lo) + 1, count = 2 * per_sign;
  const int64_t cols = 2048, blocks = (count + 30) / 31, rows = (blocks + cols / 32 - 1) / (cols / 32);
  const int64_t n = rows * cols, nsr = rows * (cols / 32), nsc = ((rows + 31) / 32) * cols;
  float *x = tu_malloc(sizeof(float) * (size_t)n);
  int64_t e = 0;
  for (int64_t b = 0; b < rows * (cols / 32); ++b) {
    x[32 * b] = 448.f;
    for (int j = 1; j < 32; ++j, ++e) {
      float v = 0.f;
      if (e < count) {
        const uint32_t u = (lo + (uint32_t)(e % per_sign)) | (e >= per_sign ? 0x80000000u : 0u);
        memcpy(&v, &u, 4);
      }
      x[32 * b + j] = v;
    }
  }
  qout c, g, gd;
  c.q_row = tu_malloc((size_t)n), c.q_col = tu_malloc((size_t)n);
  c.s_row = tu_malloc((size_t)nsr), c.s_col = tu_malloc((size_t)nsc);
  g.q_row = tu_malloc((size_t)n), g.q_col = tu_malloc((size_t)n);
  g.s_row = tu_malloc((size_t)nsr), g.s_col = tu_malloc((size_t)nsc);
  float *xd = gu_to_device(x, sizeof(float) * (size_t)n);
  gd.q_row = gu_dmalloc((size_t)n), gd.q_col = gu_dmalloc((size_t)n);
  gd.s_row = gu_dmalloc((size_t)nsr), gd.s_col = gu_dmalloc((size_t)nsc);
  gu_dpoison(gd.q_row, (size_t)n, 0xA5), gu_dpoison(gd.q_col, (size_t)n, 0xA5);
  const unsigned dirs = MXF_QUANT_ROWS | MXF_QUANT_COLS;
  mxf_status st = run_quant(MXF_DEVICE_CPU, MXF_F32, x, rows, cols, dirs, &c);
  TU_CHECK(st == MXF_OK, "sweep: cpu status %s (%s)", mxf_status_string(st), mxf_last_error());
  st = run_quant(MXF_DEVICE_CUDA(0), MXF_F32, xd, rows, cols, dirs, &gd);
  if (TU_CHECK(st == MXF_OK, "sweep: cuda status %s (%s)", mxf_status_string(st), mxf_last_error())) {
    gu_to_host(g.q_row, gd.q_row, (size_t)n), gu_to_host(g.s_row, gd.s_row, (size_t)nsr);
    gu_to_host(g.q_col, gd.q_col, (size_t)n), gu_to_host(g.s_col, gd.s_col, (size_t)nsc);
    const char *tag = "sweep of every f32 in [2^-12, 448]";
    cmp_bytes("row codes", tag, g.q_row, c.q_row, n);
    cmp_bytes("row scales", tag, g.s_row, c.s_row, nsr);
    cmp_bytes("col codes", tag, g.q_col, c.q_col, n);
    cmp_bytes("col scales", tag, g.s_col, c.s_col, nsc);
  }
  free(x);
  free(c.q_row), free(c.q_col), free(c.s_row), free(c.s_col);
  free(g.q_row), free(g.q_col), free(g.s_row), free(g.s_col);
  cudaFree(xd), cudaFree(gd.q_row), cudaFree(gd.q_col), cudaFree(gd.s_row), cudaFree(gd.s_col);
}

static mxf_status run_dequant(int32_t dev, const uint8_t *q, const uint8_t *s, void *y, mxf_dtype ydt, int64_t rows,
                              int64_t cols, unsigned dir) {
  int64_t sq[2] = {rows, cols};
  int64_t ss[2] = {dir == MXF_QUANT_ROWS ? rows : (rows + 31) / 32, dir == MXF_QUANT_ROWS ? (cols + 31) / 32 : cols};
  mxf_dequantize_desc d;
  memset(&d, 0, sizeof d);
  d.q = tu_tensor((void *)q, MXF_E4M3, 2, sq);
  d.s = tu_tensor((void *)s, MXF_E8M0, 2, ss);
  d.y = tu_tensor(y, ydt, 2, sq);
  d.q.device = d.s.device = d.y.device = dev;
  d.direction = dir;
  mxf_plan *plan = NULL;
  mxf_status st = mxf_dequantize_plan(&plan, &d);
  if (st != MXF_OK) return st;
  mxf_dequantize_args a = {q, s, y};
  st = mxf_dequantize_run(plan, &a, NULL, 0, NULL);
  mxf_plan_destroy(plan);
  if (dev != MXF_DEVICE_CPU) GU_CUDA(cudaDeviceSynchronize());
  return st;
}

static void dequant_case(tu_rng *r, int64_t rows, int64_t cols, mxf_dtype ydt, unsigned dir, int shift) {
  char tag[160];
  snprintf(tag, sizeof tag, "dequantize %lldx%lld to %s dir=%u shift=%d", (long long)rows, (long long)cols,
           ydt == MXF_F32 ? "f32" : "bf16", dir, shift);
  const int64_t n = rows * cols;
  const int64_t ns = dir == MXF_QUANT_ROWS ? rows * ((cols + 31) / 32) : ((rows + 31) / 32) * cols;
  const size_t es = ydt == MXF_F32 ? 4 : 2;
  uint8_t *q = tu_malloc((size_t)n + 1), *s = tu_malloc((size_t)ns + 1);
  for (int64_t i = 0; i < n + 1; ++i) q[i] = (uint8_t)tu_u32(r);
  static const uint8_t extreme[] = {0, 1, 253, 254, 0xFF};
  for (int64_t i = 0; i < ns + 1; ++i)
    s[i] = tu_u32(r) % 8u == 0 ? extreme[tu_u32(r) % 5u] : (uint8_t)tu_range(r, 100, 150);
  uint8_t *yc = tu_malloc((size_t)n * es), *yg = tu_malloc((size_t)n * es);
  tu_poison(yc, (size_t)n * es, 0xA5);
  uint8_t *qd = gu_to_device(q, (size_t)n + 1), *sd = gu_to_device(s, (size_t)ns + 1);
  uint8_t *yd = gu_dmalloc((size_t)(n + 1) * es);
  gu_dpoison(yd, (size_t)(n + 1) * es, 0xA5);
  mxf_status st = run_dequant(MXF_DEVICE_CPU, q + shift, s + shift, yc, ydt, rows, cols, dir);
  TU_CHECK(st == MXF_OK, "%s: cpu status %s (%s)", tag, mxf_status_string(st), mxf_last_error());
  st = run_dequant(MXF_DEVICE_CUDA(0), qd + shift, sd + shift, yd + shift * es, ydt, rows, cols, dir);
  if (TU_CHECK(st == MXF_OK, "%s: cuda status %s (%s)", tag, mxf_status_string(st), mxf_last_error())) {
    gu_to_host(yg, yd + shift * es, (size_t)n * es);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; ++i) {
      int same;
      if (ydt == MXF_F32) {
        float a, b;
        memcpy(&a, yg + 4 * i, 4);
        memcpy(&b, yc + 4 * i, 4);
        same = (isnan(a) && isnan(b)) || memcmp(&a, &b, 4) == 0;
      } else {
        uint16_t a, b;
        memcpy(&a, yg + 2 * i, 2);
        memcpy(&b, yc + 2 * i, 2);
        const int na = (a & 0x7FFF) > 0x7F80, nb = (b & 0x7FFF) > 0x7F80;
        same = (na && nb) || a == b;
      }
      if (!same) {
        if (first < 0) first = i;
        ++bad;
      }
    }
    TU_CHECK(bad == 0, "%s: %lld of %lld values differ from the cpu backend; first at %lld (code 0x%02x)", tag,
             (long long)bad, (long long)n, (long long)first, first >= 0 ? q[first + shift] : 0);
  }
  free(q), free(s), free(yc), free(yg);
  cudaFree(qd), cudaFree(sd), cudaFree(yd);
}

int main(void) {
  int rc = gu_skip_if_unavailable("test_quantize_gpu");
  if (rc) return rc;
  const uint64_t seed = tu_seed();
  tu_rng r;
  tu_rng_init(&r, seed);
  const int small = gu_small();
  static const int64_t shapes_small[][2] = {{1, 1}, {1, 33}, {33, 1}, {31, 33}, {32, 32}, {37, 130}, {65, 96}};
  static const int64_t shapes_big[][2] = {{130, 257}, {1000, 999}, {300, 1024}, {2048, 1536}, {4097, 200}};
  static const unsigned dirs[] = {MXF_QUANT_ROWS, MXF_QUANT_COLS, MXF_QUANT_ROWS | MXF_QUANT_COLS};
  for (size_t i = 0; i < sizeof shapes_small / sizeof shapes_small[0]; ++i)
    for (int dt = 0; dt < 2; ++dt)
      for (int di = 0; di < 3; ++di)
        for (int shift = 0; shift < 2; ++shift)
          quant_case(&r, shapes_small[i][0], shapes_small[i][1], dt ? MXF_BF16 : MXF_F32, dirs[di], (int)(i & 1) | (di == 2),
                     shift);
  if (!small)
    for (size_t i = 0; i < sizeof shapes_big / sizeof shapes_big[0]; ++i)
      for (int dt = 0; dt < 2; ++dt)
        for (int di = 0; di < 3; ++di)
          quant_case(&r, shapes_big[i][0], shapes_big[i][1], dt ? MXF_BF16 : MXF_F32, dirs[di], 1, (int)(i == 1 && di == 2));
  if (!small) sweep_case();
  static const int64_t dq_shapes[][2] = {{1, 1}, {33, 31}, {64, 96}, {130, 257}, {1000, 1024}};
  const size_t ndq = small ? 3 : sizeof dq_shapes / sizeof dq_shapes[0];
  for (size_t i = 0; i < ndq; ++i)
    for (int yt = 0; yt < 2; ++yt)
      for (int dir = 1; dir <= 2; ++dir)
        for (int shift = 0; shift < 2; ++shift)
          dequant_case(&r, dq_shapes[i][0], dq_shapes[i][1], yt ? MXF_BF16 : MXF_F32, (unsigned)dir, shift);
  return tu_finish("test_quantize_gpu");
}

#else
int main(void) { return gu_skip_if_unavailable("test_quantize_gpu"); }
#endif
