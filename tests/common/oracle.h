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

#endif
