/*
 * test_quantize_cpu.c — MXFP8 quantize / dequantize on the CPU backend (SPEC §3) against
 * the tests' oracle (tests/common/oracle.c), written from the words of SPEC §2.3 step 4
 * in a different formulation from src/formats.h: the scale byte by searching the smallest
 * b with 2^(b-127) >= s in f64, the code by a nearest search over the ordered e4m3 values
 * (ties to the even code, saturation at ±448). Codes and scale bytes must match exactly.
 *
 * Covers f32 and bf16 inputs, rows / cols / both directions, sizes that are not
 * multiples of 32 (partial blocks on both edges), all-zero blocks, NaN (ignored by the
 * amax, coded 0x7F), ±inf (byte 254), f32-subnormal and near-FLT_MAX blocks, every output
 * byte written (two runs over different poison), dequantize of every code with every
 * scale byte to f32 and bf16, and the round trip quantize -> dequantize -> quantize.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "oracle.h"
#include "testutil.h"

/* ------------------------------------------------------------ data */
enum { DATA_NORMAL, DATA_SPECIAL, DATA_TINY, DATA_HUGE };

static float gen_value(tu_rng *r, int mode, int e) {
  double g = tu_normal(r);
  switch (mode) {
  case DATA_NORMAL: return (float)ldexp(g, e);
  case DATA_TINY: return (float)ldexp(g, -128 - (int)tu_range(r, 0, 20)); /* f32 subnormals */
  case DATA_HUGE: {
    float v = (float)ldexp(g, 120 + (int)tu_range(r, 0, 6));
    return isinf(v) ? copysignf(3.4e38f, v) : v;
  }
  default: {
    int64_t k = tu_range(r, 0, 99);
    if (k < 3) return NAN;
    if (k < 5) return INFINITY;
    if (k < 7) return -INFINITY;
    if (k < 15) return 0.0f;
    if (k < 17) return -0.0f;
    if (k < 22) return (float)ldexp(g, -140);
    return (float)ldexp(g, e);
  }
  }
}

/* x as f32 values (what the library sees) and in the input dtype. */
static void gen_matrix(tu_rng *r, int mode, int64_t rows, int64_t cols, float *xf, uint16_t *xb) {
  int *er = (int *)tu_malloc(sizeof(int) * (size_t)rows), *ec = (int *)tu_malloc(sizeof(int) * (size_t)cols);
  for (int64_t i = 0; i < rows; ++i)
    er[i] = (int)tu_range(r, -8, 8);
  for (int64_t j = 0; j < cols; ++j)
    ec[j] = (int)tu_range(r, -8, 8);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      xf[i * cols + j] = gen_value(r, mode, er[i] + ec[j]);
  if (mode == DATA_SPECIAL) {
    /* an all-zero 32-wide row block and an all-zero column block where they fit */
    if (cols >= 32)
      for (int64_t j = 0; j < 32; ++j)
        xf[(rows - 1) * cols + j] = 0.0f;
    if (rows >= 32)
      for (int64_t i = 0; i < 32; ++i)
        xf[i * cols + cols - 1] = 0.0f;
  }
  if (xb)
    for (int64_t i = 0; i < rows * cols; ++i) {
      xb[i] = (uint16_t)(tu_f32_bits(xf[i]) >> 16); /* any bf16 will do as input */
      if (isnan(xf[i])) xb[i] = 0x7FC0;
      xf[i] = tu_bf16_value(xb[i]);
    }
  free(er);
  free(ec);
}

/* ------------------------------------------------------------ quantize checks */
typedef struct qbufs {
  uint8_t *q_row, *s_row, *q_col, *s_col;
} qbufs;

static mxf_status run_quantize(int one_call, mxf_dtype dt, const void *x, int64_t rows, int64_t cols,
                               unsigned dirs, qbufs *o) {
  int64_t sx[2] = {rows, cols}, ssr[2] = {rows, (cols + 31) / 32}, ssc[2] = {(rows + 31) / 32, cols};
  mxf_quantize_desc d;
  memset(&d, 0, sizeof d);
  d.x = tu_tensor((void *)x, dt, 2, sx);
  if (dirs & MXF_QUANT_ROWS) {
    d.q_row = tu_tensor(o->q_row, MXF_E4M3, 2, sx);
    d.s_row = tu_tensor(o->s_row, MXF_E8M0, 2, ssr);
  }
  if (dirs & MXF_QUANT_COLS) {
    d.q_col = tu_tensor(o->q_col, MXF_E4M3, 2, sx);
    d.s_col = tu_tensor(o->s_col, MXF_E8M0, 2, ssc);
  }
  d.directions = dirs;
  if (one_call) return mxf_quantize(&d, NULL);
  mxf_plan *plan = NULL;
  mxf_status st = mxf_quantize_plan(&plan, &d);
  if (st != MXF_OK) return st;
  size_t wsz = mxf_plan_workspace_size(plan);
  void *ws = wsz ? tu_malloc(wsz) : NULL;
  mxf_quantize_args a = {x, o->q_row, o->s_row, o->q_col, o->s_col};
  st = mxf_quantize_run(plan, &a, ws, wsz, NULL);
  free(ws);
  mxf_plan_destroy(plan);
  return st;
}

static void oracle_quantize(const float *xf, int64_t rows, int64_t cols, qbufs *o) {
  int64_t sbr = (cols + 31) / 32;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t b = 0; b < sbr; ++b) {
      int n = (int)(cols - 32 * b < 32 ? cols - 32 * b : 32);
      o->s_row[i * sbr + b] = tu_mx_block(xf + i * cols + 32 * b, n, 1, o->q_row + i * cols + 32 * b, 1);
    }
  for (int64_t b = 0; b < (rows + 31) / 32; ++b)
    for (int64_t j = 0; j < cols; ++j) {
      int n = (int)(rows - 32 * b < 32 ? rows - 32 * b : 32);
      o->s_col[b * cols + j] =
          tu_mx_block(xf + 32 * b * cols + j, n, cols, o->q_col + 32 * b * cols + j, cols);
    }
}

static int64_t first_diff(const uint8_t *a, const uint8_t *b, int64_t n, int64_t *count) {
  int64_t first = -1;
  *count = 0;
  for (int64_t i = 0; i < n; ++i)
    if (a[i] != b[i]) {
      if (first < 0) first = i;
      ++*count;
    }
  return first;
}

static qbufs qbufs_alloc(int64_t rows, int64_t cols) {
  qbufs o;
  o.q_row = (uint8_t *)tu_malloc((size_t)(rows * cols));
  o.q_col = (uint8_t *)tu_malloc((size_t)(rows * cols));
  o.s_row = (uint8_t *)tu_malloc((size_t)(rows * ((cols + 31) / 32)));
  o.s_col = (uint8_t *)tu_malloc((size_t)(((rows + 31) / 32) * cols));
  return o;
}

static void qbufs_free(qbufs *o) {
  free(o->q_row);
  free(o->q_col);
  free(o->s_row);
  free(o->s_col);
}

static const char *mode_name(int m) {
  return m == DATA_NORMAL ? "normal" : m == DATA_SPECIAL ? "special" : m == DATA_TINY ? "tiny" : "huge";
}

static void compare_out(const char *what, const char *tag, const uint8_t *got, const uint8_t *want, int64_t n,
                        int64_t cols) {
  int64_t cnt, f = first_diff(got, want, n, &cnt);
  TU_CHECK(cnt == 0, "%s %s: %lld mismatches; first at (%lld, %lld): got 0x%02x want 0x%02x", tag, what,
           (long long)cnt, (long long)(f < 0 ? 0 : f / cols), (long long)(f < 0 ? 0 : f % cols),
           f < 0 ? 0 : got[f], f < 0 ? 0 : want[f]);
}

static void test_quantize_case(tu_rng *r, int64_t rows, int64_t cols, mxf_dtype dt, int mode, unsigned dirs,
                               int one_call) {
  float *xf = (float *)tu_malloc(sizeof(float) * (size_t)(rows * cols));
  uint16_t *xb = dt == MXF_BF16 ? (uint16_t *)tu_malloc(2 * (size_t)(rows * cols)) : NULL;
  gen_matrix(r, mode, rows, cols, xf, xb);
  const void *x = dt == MXF_BF16 ? (const void *)xb : (const void *)xf;
  qbufs want = qbufs_alloc(rows, cols), got = qbufs_alloc(rows, cols);
  oracle_quantize(xf, rows, cols, &want);
  char tag[160];
  snprintf(tag, sizeof tag, "quantize %lldx%lld %s %s dirs=%u %s", (long long)rows, (long long)cols,
           mxf_dtype_name(dt), mode_name(mode), dirs, one_call ? "one-call" : "plan");
  int64_t srn = rows * ((cols + 31) / 32), scn = ((rows + 31) / 32) * cols;
  /* two runs over different poison: a byte left unwritten cannot match both times */
  const uint8_t poison[2] = {0xA5, 0x5A};
  for (int pass = 0; pass < 2; ++pass) {
    tu_poison(got.q_row, (size_t)(rows * cols), poison[pass]);
    tu_poison(got.q_col, (size_t)(rows * cols), poison[pass]);
    tu_poison(got.s_row, (size_t)srn, poison[pass]);
    tu_poison(got.s_col, (size_t)scn, poison[pass]);
    mxf_status st = run_quantize(one_call, dt, x, rows, cols, dirs, &got);
    if (!TU_CHECK(st == MXF_OK, "%s: status %s (%s)", tag, mxf_status_string(st), mxf_last_error())) break;
    if (dirs & MXF_QUANT_ROWS) {
      compare_out("row codes", tag, got.q_row, want.q_row, rows * cols, cols);
      compare_out("row scales", tag, got.s_row, want.s_row, srn, (cols + 31) / 32);
    } else {
      TU_CHECK(tu_all_bytes(got.q_row, (size_t)(rows * cols), poison[pass]) &&
                   tu_all_bytes(got.s_row, (size_t)srn, poison[pass]),
               "%s: row outputs written though not asked for", tag);
    }
    if (dirs & MXF_QUANT_COLS) {
      compare_out("col codes", tag, got.q_col, want.q_col, rows * cols, cols);
      compare_out("col scales", tag, got.s_col, want.s_col, scn, cols);
    } else {
      TU_CHECK(tu_all_bytes(got.q_col, (size_t)(rows * cols), poison[pass]) &&
                   tu_all_bytes(got.s_col, (size_t)scn, poison[pass]),
               "%s: col outputs written though not asked for", tag);
    }
  }
  qbufs_free(&want);
  qbufs_free(&got);
  free(xf);
  free(xb);
}

/* ------------------------------------------------------------ hand-checked blocks */
static void test_special_blocks(void) {
  /* one row of 5 blocks (the last partial, 13 values): what each must give is known */
  enum { COLS = 32 * 4 + 13 };
  float x[COLS];
  for (int i = 0; i < COLS; ++i)
    x[i] = 0.0f; /* block 0: all zero */
  for (int i = 32; i < 64; ++i)
    x[i] = (float)(i - 40); /* block 1: -8..23, one NaN */
  x[33] = NAN;
  for (int i = 64; i < 96; ++i)
    x[i] = 1.0f; /* block 2: +inf and ones */
  x[70] = -INFINITY;
  for (int i = 96; i < 128; ++i)
    x[i] = (float)ldexp(1.0, -140); /* block 3: f32 subnormals */
  for (int i = 128; i < COLS; ++i)
    x[i] = 448.0f * (float)(i - 127); /* block 4: 448..5824 */
  qbufs o = qbufs_alloc(1, COLS);
  tu_poison(o.q_row, COLS, 0xA5);
  tu_poison(o.s_row, 5, 0xA5);
  mxf_status st = run_quantize(0, MXF_F32, x, 1, COLS, MXF_QUANT_ROWS, &o);
  if (TU_CHECK(st == MXF_OK, "special blocks: %s (%s)", mxf_status_string(st), mxf_last_error())) {
    TU_CHECK(o.s_row[0] == 0, "all-zero block: scale byte %u, want 0", o.s_row[0]);
    int zeros = 1;
    for (int i = 0; i < 32; ++i)
      zeros &= o.q_row[i] == 0;
    TU_CHECK(zeros, "all-zero block: codes not all 0");
    /* amax 23 -> s = 23/448 = 0.0513.. -> 2^-4 -> byte 123, inv 16; 23*16 = 368 -> 384 */
    TU_CHECK(o.s_row[1] == 123, "NaN block: scale byte %u, want 123", o.s_row[1]);
    TU_CHECK(o.q_row[33] == 0x7F, "NaN value: code 0x%02x, want 0x7F", o.q_row[33]);
    TU_CHECK(o.q_row[32] == 0xF0, "-8*16 = -128: code 0x%02x, want 0xF0", o.q_row[32]);
    TU_CHECK(o.q_row[63] == 0x7C, "23*16 = 368 -> 384: code 0x%02x, want 0x7C", o.q_row[63]);
    TU_CHECK(o.s_row[2] == 254, "inf block: scale byte %u, want 254", o.s_row[2]);
    TU_CHECK(o.q_row[70] == 0x7F && o.q_row[64] == 0x00, "inf block: codes 0x%02x 0x%02x, want 0x7F 0x00",
             o.q_row[70], o.q_row[64]);
    /* s = 2^-140 * c rounds into f32 subnormals, <= 2^-127 -> byte 0, inv 2^127:
     * 2^-140 * 2^127 = 2^-13 -> below half of e4m3's 2^-9 -> code 0 */
    TU_CHECK(o.s_row[3] == 0, "subnormal block: scale byte %u, want 0", o.s_row[3]);
    TU_CHECK(o.q_row[96] == 0x00, "subnormal block: code 0x%02x, want 0", o.q_row[96]);
    /* amax 13*448 = 5824 -> s = 13 (+) -> 16 = 2^4 -> byte 131; 448/16 = 28 -> 0x5E;
     * 5824/16 = 364 -> 352 = 0x7B */
    TU_CHECK(o.s_row[4] == 131, "partial block: scale byte %u, want 131", o.s_row[4]);
    TU_CHECK(o.q_row[128] == 0x5E && o.q_row[COLS - 1] == 0x7B, "partial block: codes 0x%02x 0x%02x",
             o.q_row[128], o.q_row[COLS - 1]);
  }
  qbufs_free(&o);
}

/* ------------------------------------------------------------ dequantize */
static mxf_status run_dequantize(int one_call, const uint8_t *q, const uint8_t *s, void *y, mxf_dtype ydt,
                                 int64_t rows, int64_t cols, unsigned dir) {
  int64_t sq[2] = {rows, cols};
  int64_t ss[2] = {dir == MXF_QUANT_ROWS ? rows : (rows + 31) / 32,
                   dir == MXF_QUANT_ROWS ? (cols + 31) / 32 : cols};
  mxf_dequantize_desc d;
  memset(&d, 0, sizeof d);
  d.q = tu_tensor((void *)q, MXF_E4M3, 2, sq);
  d.s = tu_tensor((void *)s, MXF_E8M0, 2, ss);
  d.y = tu_tensor(y, ydt, 2, sq);
  d.direction = dir;
  if (one_call) return mxf_dequantize(&d, NULL);
  mxf_plan *plan = NULL;
  mxf_status st = mxf_dequantize_plan(&plan, &d);
  if (st != MXF_OK) return st;
  size_t wsz = mxf_plan_workspace_size(plan);
  void *ws = wsz ? tu_malloc(wsz) : NULL;
  mxf_dequantize_args a = {q, s, y};
  st = mxf_dequantize_run(plan, &a, ws, wsz, NULL);
  free(ws);
  mxf_plan_destroy(plan);
  return st;
}

static uint8_t block_scale(const uint8_t *s, int64_t i, int64_t j, int64_t cols, unsigned dir) {
  return dir == MXF_QUANT_ROWS ? s[i * ((cols + 31) / 32) + j / 32] : s[(i / 32) * cols + j];
}

/* Every code with every scale byte (0, 1, 253, 254, 0xFF included), to f32 and bf16. */
static void test_dequantize_all(tu_rng *r, int64_t rows, int64_t cols, unsigned dir, int one_call) {
  int64_t n = rows * cols, ns = dir == MXF_QUANT_ROWS ? rows * ((cols + 31) / 32) : ((rows + 31) / 32) * cols;
  uint8_t *q = (uint8_t *)tu_malloc((size_t)n), *s = (uint8_t *)tu_malloc((size_t)ns);
  for (int64_t i = 0; i < n; ++i)
    q[i] = (uint8_t)(i < 256 ? i : tu_range(r, 0, 255));
  for (int64_t i = 0; i < ns; ++i) {
    static const uint8_t edge[] = {0, 1, 253, 254, 0xFF, 127};
    s[i] = i < 6 ? edge[i] : (uint8_t)tu_range(r, 0, 255);
  }
  float *yf = (float *)tu_malloc(4 * (size_t)n);
  uint16_t *yb = (uint16_t *)tu_malloc(2 * (size_t)n);
  tu_poison(yf, 4 * (size_t)n, 0xA5);
  tu_poison(yb, 2 * (size_t)n, 0xA5);
  mxf_status st1 = run_dequantize(one_call, q, s, yf, MXF_F32, rows, cols, dir);
  mxf_status st2 = run_dequantize(one_call, q, s, yb, MXF_BF16, rows, cols, dir);
  char tag[96];
  snprintf(tag, sizeof tag, "dequantize %lldx%lld dir=%u %s", (long long)rows, (long long)cols, dir,
           one_call ? "one-call" : "plan");
  if (TU_CHECK(st1 == MXF_OK && st2 == MXF_OK, "%s: status %s / %s (%s)", tag, mxf_status_string(st1),
               mxf_status_string(st2), mxf_last_error())) {
    int64_t bad_f = 0, bad_b = 0, first = -1;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        int64_t e = i * cols + j;
        float want = (float)tu_mx_value(q[e], block_scale(s, i, j, cols, dir));
        int okf = isnan(want) ? isnan(yf[e]) : tu_f32_bits(yf[e]) == tu_f32_bits(want);
        uint16_t wb = tu_bf16_nearest(want);
        int okb = isnan(want) ? isnan(tu_bf16_value(yb[e])) : yb[e] == wb;
        if (!okf) ++bad_f;
        if (!okb) ++bad_b;
        if ((!okf || !okb) && first < 0) first = e;
      }
    TU_CHECK(bad_f == 0 && bad_b == 0, "%s: %lld f32 and %lld bf16 mismatches; first at %lld (code 0x%02x)",
             tag, (long long)bad_f, (long long)bad_b, (long long)first, first < 0 ? 0 : q[first]);
  }
  free(q);
  free(s);
  free(yf);
  free(yb);
}

/* quantize -> dequantize within the MXFP8 bound, and quantizing the dequantized values
 * again reproduces them exactly. */
static void test_round_trip(tu_rng *r, int64_t rows, int64_t cols, mxf_dtype dt) {
  float *xf = (float *)tu_malloc(sizeof(float) * (size_t)(rows * cols));
  uint16_t *xb = dt == MXF_BF16 ? (uint16_t *)tu_malloc(2 * (size_t)(rows * cols)) : NULL;
  gen_matrix(r, DATA_NORMAL, rows, cols, xf, xb);
  qbufs q1 = qbufs_alloc(rows, cols), q2 = qbufs_alloc(rows, cols);
  float *y1 = (float *)tu_malloc(4 * (size_t)(rows * cols)),
        *y2 = (float *)tu_malloc(4 * (size_t)(rows * cols));
  mxf_status st = run_quantize(1, dt, dt == MXF_BF16 ? (const void *)xb : (const void *)xf, rows, cols,
                               MXF_QUANT_ROWS | MXF_QUANT_COLS, &q1);
  TU_CHECK(st == MXF_OK, "round trip quantize: %s (%s)", mxf_status_string(st), mxf_last_error());
  for (int dir = 1; dir <= 2 && st == MXF_OK; ++dir) {
    const uint8_t *qq = dir == MXF_QUANT_ROWS ? q1.q_row : q1.q_col;
    const uint8_t *ss = dir == MXF_QUANT_ROWS ? q1.s_row : q1.s_col;
    st = run_dequantize(0, qq, ss, y1, MXF_F32, rows, cols, (unsigned)dir);
    if (!TU_CHECK(st == MXF_OK, "round trip dequantize: %s (%s)", mxf_status_string(st), mxf_last_error()))
      break;
    int64_t bad = 0, worst = -1;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        int64_t e = i * cols + j;
        /* half an e4m3 step relative (2^-4), or half the subnormal step 2^-10 of the block scale */
        double unit = ldexp(1.0, block_scale(ss, i, j, cols, (unsigned)dir) - 127);
        double bound = ldexp(fabs((double)xf[e]), -4) + unit * ldexp(1.0, -10);
        if (!(fabs((double)y1[e] - (double)xf[e]) <= bound)) {
          if (worst < 0) worst = e;
          ++bad;
        }
      }
    TU_CHECK(bad == 0,
             "round trip %lldx%lld %s dir=%d: %lld values beyond the MXFP8 bound; first %lld: x=%g y=%g",
             (long long)rows, (long long)cols, mxf_dtype_name(dt), dir, (long long)bad, (long long)worst,
             worst < 0 ? 0.0 : (double)xf[worst], worst < 0 ? 0.0 : (double)y1[worst]);
    /* re-quantize the dequantized values (f32 input) and dequantize once more */
    st = run_quantize(0, MXF_F32, y1, rows, cols, (unsigned)dir, &q2);
    const uint8_t *qq2 = dir == MXF_QUANT_ROWS ? q2.q_row : q2.q_col;
    const uint8_t *ss2 = dir == MXF_QUANT_ROWS ? q2.s_row : q2.s_col;
    if (st == MXF_OK) st = run_dequantize(1, qq2, ss2, y2, MXF_F32, rows, cols, (unsigned)dir);
    if (!TU_CHECK(st == MXF_OK, "re-quantize: %s (%s)", mxf_status_string(st), mxf_last_error())) break;
    TU_CHECK(memcmp(y1, y2, 4 * (size_t)(rows * cols)) == 0,
             "re-quantize %s dir=%d: dequantized values changed", mxf_dtype_name(dt), dir);
    /* codes are identical too, except in a block whose largest code is 224·2^(b-127):
     * fl(224 · c) is exactly 1/2, so that block re-quantizes one scale byte lower with
     * every code doubled — the same values */
    int64_t ns = dir == MXF_QUANT_ROWS ? rows * ((cols + 31) / 32) : ((rows + 31) / 32) * cols;
    int64_t same = 0, shifted = 0, other = 0;
    for (int64_t b = 0; b < ns; ++b) {
      if (ss2[b] == ss[b])
        ++same;
      else if (ss2[b] + 1 == ss[b])
        ++shifted;
      else
        ++other;
    }
    int64_t code_bad = 0;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        int64_t e = i * cols + j;
        if (block_scale(ss2, i, j, cols, (unsigned)dir) == block_scale(ss, i, j, cols, (unsigned)dir) &&
            qq2[e] != qq[e])
          ++code_bad;
      }
    TU_CHECK(other == 0 && code_bad == 0,
             "re-quantize %s dir=%d: %lld scale bytes moved by other than -1, %lld codes changed (same %lld, "
             "one lower %lld)",
             mxf_dtype_name(dt), dir, (long long)other, (long long)code_bad, (long long)same,
             (long long)shifted);
  }
  qbufs_free(&q1);
  qbufs_free(&q2);
  free(y1);
  free(y2);
  free(xf);
  free(xb);
}

int main(void) {
  tu_rng r;
  tu_rng_init(&r, tu_seed());

  /* the oracle itself, on values whose codes are known */
  TU_CHECK(tu_e4m3_nearest(448.0f) == 0x7E && tu_e4m3_nearest(1e9f) == 0x7E &&
               tu_e4m3_nearest(-INFINITY) == 0xFE,
           "oracle: saturation");
  TU_CHECK(tu_e4m3_nearest(17.0f) == 0x58 && tu_e4m3_nearest(19.0f) == 0x5A, "oracle: ties to even");
  TU_CHECK(tu_mx_scale_byte(0.0f) == 0 && tu_mx_scale_byte(INFINITY) == 254 &&
               tu_mx_scale_byte(448.0f) == 127,
           "oracle: scale bytes of 0, inf, 448");

  test_special_blocks();

  static const int64_t shapes[][2] = {{45, 70}, {1, 1},   {1, 33},   {33, 1},
                                      {64, 96}, {31, 32}, {97, 161}, {130, 45}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; ++si)
    for (int mode = 0; mode < 4; ++mode)
      for (int dt = 0; dt < 2; ++dt)
        for (unsigned dirs = 1; dirs <= 3; ++dirs)
          test_quantize_case(&r, shapes[si][0], shapes[si][1], dt ? MXF_BF16 : MXF_F32, mode, dirs,
                             (int)((si + dirs + (unsigned)mode) & 1));
  /* a larger matrix so that the work is spread over threads */
  test_quantize_case(&r, 517, 1000, MXF_BF16, DATA_SPECIAL, 3, 0);
  test_quantize_case(&r, 300, 2049, MXF_F32, DATA_NORMAL, 3, 1);

  for (unsigned dir = 1; dir <= 2; ++dir) {
    test_dequantize_all(&r, 45, 70, dir, 0);
    test_dequantize_all(&r, 33, 257, dir, 1);
    test_dequantize_all(&r, 1, 5, dir, 0);
  }

  test_round_trip(&r, 45, 70, MXF_F32);
  test_round_trip(&r, 45, 70, MXF_BF16);
  test_round_trip(&r, 200, 333, MXF_F32);
  return tu_finish("test_quantize_cpu");
}
