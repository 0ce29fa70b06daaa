/*
 * oracle.h — reference formats and the MXFP8 rule for the C tests, written from the words
 * of SPEC §0 and §2.3 and deliberately not from src/formats.h (the library's code), so
 * that a test comparing the two checks something: values from the format definitions in
 * f64, nearest codes by search over the ordered values, the scale byte by searching the
 * smallest b with 2^(b-127) >= s.
 */
#ifndef MXF_TEST_ORACLE_H
#define MXF_TEST_ORACLE_H

#include <stdint.h>

float tu_f32_from_bits(uint32_t u);
uint32_t tu_f32_bits(float f);

/* bf16 value of a bit pattern, and the nearest bf16 to x (ties to even, overflow to inf,
 * NaN stays NaN) as bits, or as its f32 value (NaN and inf returned as they are). */
float tu_bf16_value(uint16_t h);
uint16_t tu_bf16_nearest(float x);
float tu_bf16_round(float x);

/* e4m3fn value of a code (NaN for s.1111.111), and the nearest code to v: ties to the even
 * code, saturating at ±448, NaN -> 0x7F. */
double tu_e4m3_value(uint8_t code);
uint8_t tu_e4m3_nearest(float v);

/* MXFP8 (SPEC §2.3 step 4): the scale byte of a block with this amax; one block of n values
 * at `stride` into codes at `code_stride`, returning its scale byte; and the dequantized
 * value e4m3(code) * 2^(s-127) in f64 (NaN for s = 0xFF). */
uint8_t tu_mx_scale_byte(float amax);
uint8_t tu_mx_block(const float *v, int n, int64_t stride, uint8_t *codes, int64_t code_stride);
double tu_mx_value(uint8_t code, uint8_t s);

/* The position of an e4m3 code on the number line: sign times (code & 0x7F), so that
 * neighbouring values differ by one and ±0 both sit at 0 (NaN codes land at ±127). */
int tu_e4m3_ordinal(uint8_t code);

/* The f32 multiplier 2^(127-b) of scale byte b (0 for b = 254), as SPEC §2.3 step 4. */
float tu_mx_inv(uint8_t b);

/* A bound on |f32 sum - exact sum| for n terms added in f32 in ANY order (SPEC §1.2, §2.3
 * allow any), each term an f32 product rounded at most once, given sum_abs = the exact
 * Σ|term|: γ_(n+1)·sum_abs with γ_m = m·2^-24 / (1 - m·2^-24), plus 2^-149 per rounding
 * for subnormal results. It also covers an oracle's own f64 accumulation of the same
 * terms. Returns +inf where the bound is meaningless (n too large, sum_abs not finite). */
double tu_f32_sum_bound(int64_t n, double sum_abs);

#endif
