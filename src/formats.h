/*
 * formats.h — every number format of SPEC §0, for host C and CUDA device code alike.
 *
 * The one place that knows how e4m3 / e5m2 / e2m1 / e8m0 / bf16 / f16 codes map to f32
 * and back, the MXFP8 quantization rule (SPEC §2.3 step 4), the swizzled scale-factor
 * offset (SPEC §1.1) and e2m1 nibble packing. Everything is integer bit manipulation
 * (no library calls, no rounding-mode dependence), so host and device agree bit for bit.
 */
#ifndef MXF_FORMATS_H
#define MXF_FORMATS_H

#include <stdint.h>

#if defined(__CUDACC__)
#define MXF_HD __host__ __device__ __forceinline__
#else
#include <string.h>
#define MXF_HD static inline
#endif

/* ------------------------------------------------------------ f32 bit access */
MXF_HD uint32_t mxf_f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
#endif
}

MXF_HD float mxf_f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, 4);
  return f;
#endif
}

MXF_HD int mxf_f32_isnan(float f) { return (mxf_f32_bits(f) & 0x7FFFFFFFu) > 0x7F800000u; }

/* ------------------------------------------------------------ generic minifloats */
/*
 * A small float format: `ebits` exponent bits, `mbits` mantissa bits, exponent bias
 * `bias`, sign bit above them. `maxcode` is the largest finite magnitude code.
 */
typedef struct mxf_minifloat {
  int ebits, mbits, bias;
  uint32_t maxcode;
} mxf_minifloat;

/* Decode a finite magnitude code (no sign, not NaN/inf) to f32, exactly. */
MXF_HD float mxf_minifloat_decode_mag(uint32_t mag, int mbits, int bias) {
  uint32_t e = mag >> mbits, m = mag & ((1u << mbits) - 1u);
  if (e == 0) {
    /* subnormal: m * 2^(1 - bias - mbits); the scaling is a power of two, so exact */
    float unit = mxf_f32_from_bits((uint32_t)(127 + 1 - bias - mbits) << 23);
    return (float)m * unit;
  }
  return mxf_f32_from_bits(((e - (uint32_t)bias + 127u) << 23) | (m << (23 - mbits)));
}

/*
 * Round |x| (f32 bits without sign, finite) to the nearest magnitude code of a format
 * with `mbits` mantissa bits and bias `bias`, ties to even, without an upper bound:
 * the result may exceed the format's largest code, the caller saturates or overflows.
 */
MXF_HD uint32_t mxf_round_mag(uint32_t f, int mbits, int bias) {
  int e32 = (int)(f >> 23);            /* biased f32 exponent */
  int emin = 1 - bias;                 /* smallest normal exponent of the target */
  int unbiased = e32 - 127;
  uint32_t mant = (e32 == 0) ? (f & 0x7FFFFFu) : ((f & 0x7FFFFFu) | 0x800000u);
  int shift;
  uint32_t base;
  if (e32 != 0 && unbiased >= emin) {
    /* normal in the target: keep the exponent, drop 23 - mbits mantissa bits */
    shift = 23 - mbits;
    base = ((uint32_t)(unbiased + bias) << mbits);
    mant &= 0x7FFFFFu;
  } else {
    /* subnormal in the target (or zero / f32 subnormal input) */
    int eff = (e32 == 0) ? -126 : unbiased; /* f32 subnormals have exponent -126 */
    shift = 23 - mbits + (emin - eff);
    base = 0;
  }
  if (shift > 31) return base; /* far below half the smallest unit: rounds to zero */
  uint32_t q = mant >> shift;
  uint32_t rem = mant & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) q += 1u;
  return base + q; /* a carry out of the mantissa correctly bumps the exponent */
}

/* ------------------------------------------------------------ e4m3 (float8_e4m3fn) */
/* c ? a : b as masks: GCC vectorizes a loop through these where it leaves the ?: chains
 * of the decoders below as branches. */
MXF_HD uint32_t mxf_select_u32(int c, uint32_t a, uint32_t b) {
  const uint32_t m = 0u - (uint32_t)(c != 0);
  return (a & m) | (b & ~m);
}

/* The decoders, two ways with the same values (test_formats checks the host's against
 * the formula for every code). On the host without branches, so that the CPU's
 * dequantization loops vectorize: a normal code's exponent and mantissa bits, moved into
 * f32's fields and rebiased by adding the exponent difference, are its value exactly; a
 * subnormal one is its mantissa times the format's subnormal step (exact); the sign bit
 * goes on last (NaN codes keep theirs). On the device through the generic decode: the
 * kernels' registers were fitted with it, and the selects spilled 24 bytes in the
 * portable kernel's fp8 instances on sm_80. */
MXF_HD float mxf_e4m3_to_f32(uint8_t c) {
#if defined(__CUDA_ARCH__)
  const uint32_t mag = c & 0x7Fu;
  const float v = (mag == 0x7Fu) ? mxf_f32_from_bits(0x7FC00000u) : mxf_minifloat_decode_mag(mag, 3, 7);
  return (c & 0x80u) ? -v : v;
#else
  const uint32_t mag = c & 0x7Fu;
  const uint32_t sub = mxf_f32_bits((float)(mag & 7u) * 0.001953125f); /* 2^-9 */
  const uint32_t v =
      mxf_select_u32(mag == 0x7Fu, 0x7FC00000u, mxf_select_u32(mag > 7u, (mag << 20) + (120u << 23), sub));
  return mxf_f32_from_bits(v | (uint32_t)(c & 0x80u) << 24);
#endif
}

/* RNE, saturating to ±448; NaN -> 0x7F. The same codes as mxf_round_mag(f, 3, 7) with
 * those bounds (checked over every f32), written without branches: normal codes
 * (|x| >= 2^-6) drop 20 mantissa bits with ties to even and rebias the exponent from 127
 * to 7; subnormal ones are |x| / 2^-9 rounded to an integer, ties to even, by the f32
 * addition of 2^23 (exact scaling, one rounding; 8 is the code of 2^-6, the carry into
 * the normals). On the host the choices are mask selects and the subnormal path only
 * ever converts values in [0, 8] (to a signed integer), so that the CPU's quantization
 * loops vectorize (GCC left the ?: form as branches); the device keeps the ?: form, which
 * its C stores' registers were fitted with. */
MXF_HD uint8_t mxf_f32_to_e4m3(float x) {
  const uint32_t b = mxf_f32_bits(x), s = (b >> 24) & 0x80u, f = b & 0x7FFFFFFFu;
  const uint32_t nrm = ((f + 0x7FFFFu + ((f >> 20) & 1u)) >> 20) - (120u << 3);
#if defined(__CUDA_ARCH__)
  const float t = mxf_f32_from_bits(f) * 512.0f;
  const uint32_t sub = (uint32_t)((t + 8388608.0f) - 8388608.0f);
  uint32_t mag = f < 0x3C800000u ? sub : nrm;
  mag = mag > 0x7Eu ? 0x7Eu : mag;
  return (uint8_t)(f > 0x7F800000u ? 0x7Fu : s | mag);
#else
  const int small = f < 0x3C800000u;
  const float t = mxf_f32_from_bits(mxf_select_u32(small, f, 0u)) * 512.0f;
  const uint32_t sub = (uint32_t)(int32_t)((t + 8388608.0f) - 8388608.0f);
  uint32_t mag = mxf_select_u32(small, sub, nrm);
  mag = mxf_select_u32(mag > 0x7Eu, 0x7Eu, mag);
  return (uint8_t)mxf_select_u32(f > 0x7F800000u, 0x7Fu, s | mag);
#endif
}

/* ------------------------------------------------------------ e5m2 */
MXF_HD float mxf_e5m2_to_f32(uint8_t c) {
#if defined(__CUDA_ARCH__)
  const uint32_t mag = c & 0x7Fu;
  float v;
  if (mag >= 0x7Cu)
    v = mxf_f32_from_bits(mag == 0x7Cu ? 0x7F800000u : 0x7FC00000u);
  else
    v = mxf_minifloat_decode_mag(mag, 2, 15);
  return (c & 0x80u) ? -v : v;
#else
  const uint32_t mag = c & 0x7Fu;
  const uint32_t sub = mxf_f32_bits((float)(mag & 3u) * 1.52587890625e-05f); /* 2^-16 */
  const uint32_t fin = mxf_select_u32(mag > 3u, (mag << 21) + (112u << 23), sub);
  const uint32_t v = mxf_select_u32(mag > 0x7Cu, 0x7FC00000u, mxf_select_u32(mag == 0x7Cu, 0x7F800000u, fin));
  return mxf_f32_from_bits(v | (uint32_t)(c & 0x80u) << 24);
#endif
}

/* RNE, saturating to ±57344 (inf included); NaN -> 0x7F. */
MXF_HD uint8_t mxf_f32_to_e5m2(float x) {
  uint32_t b = mxf_f32_bits(x), s = (b >> 24) & 0x80u, f = b & 0x7FFFFFFFu;
  if (f > 0x7F800000u) return 0x7F;
  uint32_t mag = (f == 0x7F800000u) ? 0x7Bu : mxf_round_mag(f, 2, 15);
  if (mag > 0x7Bu) mag = 0x7Bu;
  return (uint8_t)(s | mag);
}

/* ------------------------------------------------------------ e2m1 (4 bits) */
/* The low nibble of c. */
MXF_HD float mxf_e2m1_to_f32(uint8_t c) {
#if defined(__CUDA_ARCH__)
  float v = mxf_minifloat_decode_mag(c & 0x7u, 1, 1);
  return (c & 0x8u) ? -v : v;
#else
  const uint32_t mag = c & 0x7u;
  const uint32_t v =
      mxf_select_u32(mag > 1u, (mag << 22) + (126u << 23), mxf_select_u32(mag, 0x3F000000u, 0u));
  return mxf_f32_from_bits(v | (uint32_t)(c & 0x8u) << 28);
#endif
}

/* RNE, saturating to ±6; NaN -> 0x7 (+6): e2m1 has no NaN. */
MXF_HD uint8_t mxf_f32_to_e2m1(float x) {
  uint32_t b = mxf_f32_bits(x), s = (b >> 28) & 0x8u, f = b & 0x7FFFFFFFu;
  if (f > 0x7F800000u) return 0x7;
  uint32_t mag = (f == 0x7F800000u) ? 0x7u : mxf_round_mag(f, 1, 1);
  if (mag > 0x7u) mag = 0x7u;
  return (uint8_t)(s | mag);
}

/* Value i of a packed e2m1 array: even i in the low nibble. */
MXF_HD uint8_t mxf_e2m1_get(const uint8_t *p, int64_t i) {
  return (uint8_t)((p[i >> 1] >> ((i & 1) * 4)) & 0xFu);
}

MXF_HD void mxf_e2m1_set(uint8_t *p, int64_t i, uint8_t code) {
  int sh = (int)(i & 1) * 4;
  p[i >> 1] = (uint8_t)((p[i >> 1] & ~(0xFu << sh)) | ((code & 0xFu) << sh));
}

MXF_HD uint8_t mxf_e2m1_pack(uint8_t lo, uint8_t hi) {
  return (uint8_t)((lo & 0xFu) | ((hi & 0xFu) << 4));
}

/* ------------------------------------------------------------ e8m0 scales */
/* 2^(b-127); b = 0 is 2^-127 (an f32 subnormal); 0xFF is NaN. */
MXF_HD float mxf_e8m0_to_f32(uint8_t b) {
  if (b == 0xFFu) return mxf_f32_from_bits(0x7FC00000u);
  if (b == 0) return mxf_f32_from_bits(0x00400000u);
  return mxf_f32_from_bits((uint32_t)b << 23);
}

/* A block scale byte of an MX operand: e8m0, or ue4m3 (read as an e4m3 code) when
 * ue4m3 is nonzero (SPEC §1.1). */
MXF_HD float mxf_scale_to_f32(uint8_t b, int ue4m3) { return ue4m3 ? mxf_e4m3_to_f32(b) : mxf_e8m0_to_f32(b); }

/* ------------------------------------------------------------ bf16 / f16 */
MXF_HD float mxf_bf16_to_f32(uint16_t h) { return mxf_f32_from_bits((uint32_t)h << 16); }

/* RNE; overflow -> ±inf; NaN stays NaN (quieted, sign kept). A select rather than an
 * early return, so that loops over it vectorize. */
MXF_HD uint16_t mxf_f32_to_bf16(float x) {
  uint32_t b = mxf_f32_bits(x);
  uint32_t rne = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
  return (uint16_t)((b & 0x7FFFFFFFu) > 0x7F800000u ? (b >> 16) | 0x40u : rne);
}

/* The f32 value of bf16_rne(x): SPEC §2.3 step 2. */
MXF_HD float mxf_round_bf16(float x) { return mxf_bf16_to_f32(mxf_f32_to_bf16(x)); }

/* Two f32 -> bf16 (round to nearest even), packed with lo in bits 0..15 (the lower
 * address). Device code (sm_80+) uses cvt.rn.bf16x2.f32: the bits of mxf_f32_to_bf16 for
 * every non-NaN input (overflow to inf, subnormals kept); a NaN becomes the hardware's
 * canonical NaN instead of the quieted payload, so callers whose NaN bits matter go
 * elsewhere. */
MXF_HD uint32_t mxf_f32x2_to_bf16x2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
#else
  return (uint32_t)mxf_f32_to_bf16(lo) | (uint32_t)mxf_f32_to_bf16(hi) << 16;
#endif
}

MXF_HD float mxf_f16_to_f32(uint16_t h) {
  uint32_t mag = h & 0x7FFFu;
  float v;
  if (mag >= 0x7C00u)
    v = mxf_f32_from_bits(mag == 0x7C00u ? 0x7F800000u : (0x7F800000u | ((mag & 0x3FFu) << 13) | 0x400000u));
  else
    v = mxf_minifloat_decode_mag(mag, 10, 15);
  return (h & 0x8000u) ? -v : v;
}

/* RNE; overflow -> ±inf; NaN stays NaN (quieted, sign kept). */
MXF_HD uint16_t mxf_f32_to_f16(float x) {
  uint32_t b = mxf_f32_bits(x), s = (b >> 16) & 0x8000u, f = b & 0x7FFFFFFFu;
  if (f > 0x7F800000u) return (uint16_t)(s | 0x7E00u | ((f >> 13) & 0x3FFu));
  uint32_t mag = (f == 0x7F800000u) ? 0x7C00u : mxf_round_mag(f, 10, 15);
  if (mag > 0x7C00u) mag = 0x7C00u;
  return (uint16_t)(s | mag);
}

/* ------------------------------------------------------------ MXFP8 rule (SPEC §2.3) */
#define MXF_MX_BLOCK 32
#define MXF_INV_448_BITS 0x3B124925u /* the f32 nearest 1/448 */

/* max(|v|, amax) ignoring NaN: the block amax accumulates from 0. */
MXF_HD float mxf_amax_step(float amax, float v) {
#ifdef __CUDA_ARCH__
  /* max.f32 returns the other operand when one is NaN, and amax is never NaN: the same
   * result as the comparison below, in one instruction (|v| is an operand modifier) */
  return fmaxf(amax, fabsf(v));
#else
  float a = mxf_f32_from_bits(mxf_f32_bits(v) & 0x7FFFFFFFu);
  return (a > amax) ? a : amax; /* a NaN compares false and is ignored */
#endif
}

/* Scale byte of a block with the given amax: the smallest b in [0, 254] with
 * 2^(b-127) >= fl(amax * c), 254 if none; 0xFF for NaN. */
MXF_HD uint8_t mxf_e8m0_from_amax(float amax) {
  float s = amax * mxf_f32_from_bits(MXF_INV_448_BITS);
  uint32_t b = mxf_f32_bits(s);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return 0xFF;
  if (b & 0x80000000u) return 0; /* not reached for amax >= 0; -0 lands here too */
  if (b <= 0x00400000u) return 0;     /* s <= 2^-127 */
  if (b < 0x00800000u) return 1;      /* 2^-127 < s < 2^-126 */
  uint32_t e = (b >> 23) + ((b & 0x7FFFFFu) != 0);
  return (uint8_t)(e > 254u ? 254u : e);
}

/* 2^(127-b) as f32 (0 when b = 254): the multiplier applied before encoding. */
MXF_HD float mxf_e8m0_inv(uint8_t b) { return mxf_f32_from_bits((uint32_t)(254u - b) << 23); }

/* The e4m3 code of one value of a block whose scale byte is b. */
MXF_HD uint8_t mxf_mx_encode(float v, float inv) { return mxf_f32_to_e4m3(v * inv); }

/* One MXFP8 block (SPEC §2.3 step 4): n values v[0], v[stride], ... (n <= 32; a partial
 * last block has n < 32) become e4m3 codes codes[0], codes[code_stride], ...; returns the
 * block's e8m0 scale byte. The one rule both quantization directions of every op use. */
MXF_HD uint8_t mxf_mx_quantize_block(const float *v, int n, int64_t stride, uint8_t *codes,
                                     int64_t code_stride) {
#if defined(__CUDA_ARCH__)
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = mxf_amax_step(amax, v[i * stride]);
#else
  /* the same maximum as mxf_amax_step's, over the bits of |v| (which order like the
   * values; NaN counts as 0): an integer max reduction, which the compiler vectorizes */
  uint32_t m = 0;
  for (int i = 0; i < n; ++i) {
    const uint32_t a = mxf_f32_bits(v[i * stride]) & 0x7FFFFFFFu;
    const uint32_t u = mxf_select_u32(a > 0x7F800000u, 0u, a);
    m = u > m ? u : m;
  }
  const float amax = mxf_f32_from_bits(m);
#endif
  uint8_t b = mxf_e8m0_from_amax(amax);
  float inv = mxf_e8m0_inv(b);
  for (int i = 0; i < n; ++i) codes[i * code_stride] = mxf_mx_encode(v[i * stride], inv);
  return b;
}

/* mxf_mx_quantize_block on `cols` adjacent column blocks at once: block c is the n values
 * v[c], v[ld + c], ... (codes[c], codes[code_ld + c], ...; scale byte into scales[c]).
 * The same steps in the same order per block, the loops running along the rows'
 * contiguous values (so that they vectorize where a block's own stride would not). */
#define MXF_MX_COLS_STEP 64
MXF_HD void mxf_mx_quantize_cols(const float *v, int n, int64_t ld, int cols, uint8_t *codes, int64_t code_ld,
                                 uint8_t *scales) {
  for (int c0 = 0; c0 < cols; c0 += MXF_MX_COLS_STEP) {
    const int w = cols - c0 < MXF_MX_COLS_STEP ? cols - c0 : MXF_MX_COLS_STEP;
    float amax[MXF_MX_COLS_STEP], inv[MXF_MX_COLS_STEP];
    for (int c = 0; c < w; ++c) amax[c] = 0.0f;
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < w; ++c) amax[c] = mxf_amax_step(amax[c], v[i * ld + c0 + c]);
    for (int c = 0; c < w; ++c) {
      scales[c0 + c] = mxf_e8m0_from_amax(amax[c]);
      inv[c] = mxf_e8m0_inv(scales[c0 + c]);
    }
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < w; ++c) codes[i * code_ld + c0 + c] = mxf_mx_encode(v[i * ld + c0 + c], inv[c]);
  }
}

/* Four codes of mxf_mx_encode at once, packed little-endian (v0 in the low byte), each
 * value with its own multiplier. Same bits as four mxf_mx_encode calls. On sm_89+ device
 * code the f32 -> e4m3 step is the hardware conversion cvt.rn.satfinite.e4m3x2.f32 (round
 * to nearest even, saturating to +-448, +-inf to +-448: the rule of mxf_f32_to_e4m3). A NaN
 * needs no fix-up: the GPU's f32 multiply returns the canonical NaN 0x7FFFFFFF whatever
 * the NaN operand's sign and payload (CUDA C Programming Guide, floating-point standard),
 * which the conversion turns into 0x7F, SPEC §0's NaN code. tests/gpu/test_quantize_gpu.c
 * compares it with the CPU backend (this file's integer path) on a dense sweep of f32
 * values and on data with NaNs of both signs. */
MXF_HD uint32_t mxf_mx_encode4(float v0, float v1, float v2, float v3, float inv0, float inv1, float inv2,
                               float inv3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  const float x0 = __fmul_rn(v0, inv0), x1 = __fmul_rn(v1, inv1), x2 = __fmul_rn(v2, inv2), x3 = __fmul_rn(v3, inv3);
  unsigned short lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(x1), "f"(x0)); /* first operand: high byte */
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(x3), "f"(x2));
  return (uint32_t)lo | ((uint32_t)hi << 16);
#else
  return (uint32_t)mxf_mx_encode(v0, inv0) | ((uint32_t)mxf_mx_encode(v1, inv1) << 8) |
         ((uint32_t)mxf_mx_encode(v2, inv2) << 16) | ((uint32_t)mxf_mx_encode(v3, inv3) << 24);
#endif
}

/* ------------------------------------------------------------ scale-factor layouts */
MXF_HD int64_t mxf_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
/* x rounded up to a multiple of a (a > 0). */
MXF_HD int64_t mxf_round_up(int64_t x, int64_t a) { return mxf_cdiv(x, a) * a; }

/* Byte offset of (row r, k-block kb, batch l) in the swizzled layout, for an operand
 * with R = ceil(MN/128) row tiles and Kq = ceil(Kb/4) k-block groups. */
MXF_HD int64_t mxf_sf_swz_offset(int64_t r, int64_t kb, int64_t l, int64_t R, int64_t Kq) {
  return l * R * Kq * 512 + ((r >> 7) * Kq + (kb >> 2)) * 512 + (r & 31) * 16 + ((r >> 5) & 3) * 4 +
         (kb & 3);
}

/* ------------------------------------------------------------ fast e4m3 decode */
/* The fields of a FINITE e4m3 code (c & 0x7F != 0x7F; bits of c above 7 are ignored)
 * placed into f32's: sign to bit 31, exponent and mantissa to bits 26..20. That f32 is
 * exactly mxf_e4m3_to_f32(c) * 2^-120 (e4m3 normals and subnormals land on f32 values
 * without rounding), so (mxf_e4m3_bits_f32(c) * MXF_E4M3_BITS_UNSCALE) * s is bit for bit
 * mxf_e4m3_to_f32(c) * s for any f32 s: a shift and a mask instead of the full decode. */
#define MXF_E4M3_BITS_UNSCALE 1329227995784915872903807060280344576.0f /* 2^120 */
MXF_HD float mxf_e4m3_bits_f32(uint32_t c) {
  return mxf_f32_from_bits(((c & 0x80u) << 24) | ((c & 0x7Fu) << 20));
}

/* Nonzero when any of the 4 e4m3 codes packed in w is NaN (0x7F or 0xFF): adding 1 to a
 * byte's low 7 bits carries into its bit 7 only for 0x7F, and never into the next byte. */
MXF_HD uint32_t mxf_e4m3x4_any_nan(uint32_t w) { return ((w & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u; }

#endif /* MXF_FORMATS_H */
