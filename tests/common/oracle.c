/* oracle.c — see oracle.h: the tests' independent formats and MXFP8 rule. */
#include "oracle.h"

#include <math.h>
#include <string.h>

float tu_f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint32_t tu_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

float tu_bf16_value(uint16_t h) { return tu_f32_from_bits((uint32_t)h << 16); }

/* The two bf16 neighbours of x compared in f64 (inf sits at 2^128). */
uint16_t tu_bf16_nearest(float x) {
  if (isnan(x)) return (uint16_t)((tu_f32_bits(x) >> 16) | 0x40u);
  uint32_t u = tu_f32_bits(x);
  uint16_t lo = (uint16_t)(u >> 16);
  if ((u & 0xFFFFu) == 0) return lo;
  uint16_t hi = (uint16_t)(lo + 1); /* next magnitude away from zero (may become inf) */
  double dl = fabs((double)tu_bf16_value(lo) - (double)x), dh = fabs((double)tu_bf16_value(hi) - (double)x);
  if (isinf(tu_bf16_value(hi))) dh = fabs(ldexp(1.0, 128) - fabs((double)x));
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1u) ? hi : lo;
}

float tu_bf16_round(float x) {
  if (isnan(x) || isinf(x)) return x;
  return tu_bf16_value(tu_bf16_nearest(x));
}

double tu_e4m3_value(uint8_t c) {
  int e = (c >> 3) & 15, m = c & 7;
  if (e == 15 && m == 7) return NAN;
  double v = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
  return (c & 0x80) ? -v : v;
}

/* Bisects the magnitudes of codes 0..126 (ascending in the code), then takes the nearer
 * neighbour. */
uint8_t tu_e4m3_nearest(float v) {
  static double mag[127];
  static int ready;
  if (!ready) {
    for (int m = 0; m < 127; ++m)
      mag[m] = tu_e4m3_value((uint8_t)m);
    ready = 1;
  }
  if (isnan(v)) return 0x7F;
  uint8_t sign = signbit(v) ? 0x80 : 0;
  double a = fabs((double)v);
  if (a >= 448.0) return (uint8_t)(sign | 0x7E);
  int lo = 0, hi = 126; /* mag[lo] <= a < mag[hi] */
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    if (mag[mid] <= a)
      lo = mid;
    else
      hi = mid;
  }
  double dl = a - mag[lo], dh = mag[hi] - a;
  int m = dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
  return (uint8_t)(sign | m);
}

uint8_t tu_mx_scale_byte(float amax) {
  const float c448 = 0x1.24924Ap-9f; /* bits 0x3B124925, the f32 nearest 1/448 */
  float s = amax * c448;
  if (isnan(s)) return 0xFF;
  for (int b = 0; b <= 254; ++b)
    if (ldexp(1.0, b - 127) >= (double)s) return (uint8_t)b;
  return 254;
}

uint8_t tu_mx_block(const float *v, int n, int64_t stride, uint8_t *codes, int64_t code_stride) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    float a = fabsf(v[i * stride]);
    if (!isnan(a) && a > amax) amax = a;
  }
  uint8_t b = tu_mx_scale_byte(amax);
  float inv = b == 254 ? 0.0f : (float)ldexp(1.0, 127 - b);
  for (int i = 0; i < n; ++i) {
    float x = v[i * stride] * inv;
    codes[i * code_stride] = tu_e4m3_nearest(x);
  }
  return b;
}

double tu_mx_value(uint8_t code, uint8_t s) {
  return s == 0xFF ? NAN : tu_e4m3_value(code) * ldexp(1.0, s - 127);
}
