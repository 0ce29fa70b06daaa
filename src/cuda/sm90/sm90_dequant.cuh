/*
 * sm90_dequant.cuh — exact dequantization of block-scaled codes to bf16 inside a Hopper
 * mainloop, shared by the gemm_amax and proj_rope kernels (device code only).
 *
 * code * scale to bf16: the code's bits are placed into a bf16 (value code * 2^-c, c = 120
 * e4m3 / 112 e5m2 / 126 e2m1) and multiplied by scale * 2^c (one bf16x2 product per pair,
 * exact while the result is a normal bf16). A caller picks, uniformly per thread and stage
 * (or chunk), one of three modes (see below) from two tests: fp8_special (a NaN/inf code
 * among its words) and fold_check (a scale * 2^c beyond bf16).
 */
#ifndef MXF_SM90_DEQUANT_CUH
#define MXF_SM90_DEQUANT_CUH

#include <stdint.h>

#include "cuda/sm90/sm90_fmt.h"
#include "cuda/sm90/sm90_ptx.cuh"
#include "formats.h"

namespace mxf_sm90 {

/* A scale byte as the bf16 multiplier: e8m0 2^(b-127) (0xFF: NaN), or a ue4m3 value. */
__device__ __forceinline__ uint16_t scale_bf16(uint8_t b, int ue4m3) {
  if (ue4m3) return mxf_f32_to_bf16(mxf_e4m3_to_f32(b)); /* exact: e4m3 fits bf16 */
  if (b == 0xFFu) return 0x7FC0u;                          /* NaN */
  if (b == 0) return 0x0040u;                              /* 2^-127, a bf16 subnormal */
  return (uint16_t)(b << 7);                               /* 2^(b-127) */
}

/* A quad of scale bytes as bf16 multipliers, pairs (k-blocks 0, 1) and (2, 3) of the quad;
 * `on` bit j: k-block j exists (else 1.0, the codes there being TMA zero fill). */
__device__ __forceinline__ void scale_quad(uint32_t w, uint32_t on, int ue4m3, uint32_t &p01, uint32_t &p23) {
  if (!ue4m3 && on == 0xFu && (__vcmpeq4(w, 0u) | __vcmpeq4(w, 0xFFFFFFFFu)) == 0u) {
    p01 = prmt(w, 0u, 0x4140u) << 7; /* e8m0 byte b in bf16's exponent field: 2^(b - 127) */
    p23 = prmt(w, 0u, 0x4342u) << 7;
    return;
  }
  uint32_t v[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) v[j] = (on >> j) & 1u ? scale_bf16((uint8_t)(w >> (8 * j)), ue4m3) : 0x3F80u;
  p01 = v[0] | v[1] << 16;
  p23 = v[2] | v[3] << 16;
}

/* A 16-bit value (bf16 or f16 multiplier) in both halves. */
__device__ __forceinline__ uint32_t dup16(uint32_t s) { return s | (s << 16); }

/* Placement constants: 2^c as bf16x2 for c = 120 (e4m3), 112 (e5m2), 126 (e2m1). */
template <int FMT> struct fmt_consts;
template <> struct fmt_consts<FMT_E4M3> { static constexpr uint32_t K = 0x7B807B80u; };
template <> struct fmt_consts<FMT_E5M2> { static constexpr uint32_t K = 0x77807780u; };
template <> struct fmt_consts<FMT_E2M1> { static constexpr uint32_t K = 0x7E807E80u; };

/* How a stage is dequantized (uniform per thread and stage):
 *   FOLD:  code_bits * (scale * 2^c)   one product; needs scale * 2^c to fit bf16
 *   TWO:   (code_bits * 2^c) * scale   two products; any scale
 *   EXACT: per-value decode, then * scale; for NaN/inf codes (fp8 only)
 *   F16:   fp8 only, f16 out (see "The f16 path" below): code -> f16 exactly, then one
 *          f16 product by the scale relative to its row, 2^(b - R) */
enum { MODE_FOLD = 0, MODE_TWO = 1, MODE_EXACT = 2, MODE_F16 = 3 };

/*
 * The f16 path (fp8 codes, e8m0 scales). A row of an operand (all its k) gets a reference
 * exponent R from its scale bytes, and its values are dequantized to f16 as
 * code * 2^(b - R): exact, NaN and inf included, while b - R stays inside the format's
 * window [UP - SPAN, UP] (e4m3: [-14, 7]: 448 * 2^7 < 65504 and 2^-9 * 2^-14 is still on
 * f16's grid; e5m2: [-8, 0], its codes being f16's top byte). The f16 products are exact
 * and every one of them is a multiple of 2^-48, so the f32 sums of the f16 wgmma are the
 * bf16 path's sums times 2^-(eA + eB), e = R - 127; the epilogue multiplies by 2^eB and
 * then 2^eA, both exact while |e| <= 64 (the sums lie in [2^-48, 2^63]), so C is rounded
 * once, as on the bf16 path. A row qualifies when its bytes span at most SPAN, it has no
 * NaN byte (0xFF) and |R - 127| <= 64; a tile takes the f16 path when all its rows of A and
 * of B qualify.
 */
template <int FMT> struct f16_window;
template <> struct f16_window<FMT_E4M3> { static constexpr int UP = 7, SPAN = 21; };
template <> struct f16_window<FMT_E5M2> { static constexpr int UP = 0, SPAN = 8; };

/* A row's factor 2^(R - 127) as f32 bits from the largest and smallest of its scale bytes
 * (and whether one was 0xFF), or 0 when the row does not qualify. */
template <int FMT> __device__ __forceinline__ uint32_t f16_row_factor(uint32_t bmax, uint32_t bmin, bool nan) {
  const int r = (int)bmax - f16_window<FMT>::UP;
  if (nan || (int)(bmax - bmin) > f16_window<FMT>::SPAN || r < 127 - 64 || r > 127 + 64) return 0u;
  return (uint32_t)r << 23;
}
/* The f16 multipliers 2^(b - R) of a quad of scale bytes b (as scale_quad's) in a row
 * with factor bits fbits: b - R in [-14, 7] in a qualifying row, a normal f16 with the
 * bits (b - R + 15) << 10, two at a time; 1.0 for absent k-blocks and when fbits is 0
 * (the row does not qualify). */
__device__ __forceinline__ void f16_quad(uint32_t w, uint32_t on, uint32_t fbits, uint32_t &h01, uint32_t &h23) {
  if (!fbits) {
    h01 = h23 = 0x3C003C00u;
    return;
  }
  const uint32_t d = ((fbits >> 23) - 15u) * 0x10001u; /* b - R + 15 per half, in [1, 22] */
  /* halves of absent k-blocks: 1.0 */
  const uint32_t m01 = (on & 1u ? 0u : 0xFFFFu) | (on & 2u ? 0u : 0xFFFF0000u);
  const uint32_t m23 = (on & 4u ? 0u : 0xFFFFu) | (on & 8u ? 0u : 0xFFFF0000u);
  h01 = ((__vsub2(prmt(w, 0u, 0x4140u), d) << 10) & ~m01) | (0x3C003C00u & m01);
  h23 = ((__vsub2(prmt(w, 0u, 0x4342u), d) << 10) & ~m23) | (0x3C003C00u & m23);
}

/*
 * A pair of codes placed into a bf16x2 (value code * 2^-c each; NaN/inf codes not
 * handled): pair `which` (0: h0's, 1: h1's) of a word, as dequant_word below describes.
 */
template <int FMT>
__device__ __forceinline__ uint32_t place_pair(uint32_t w, uint32_t y, int hi, int which) {
  if constexpr (FMT == FMT_E2M1) {
    /* the high nibble of each selected byte is the code: magnitude -> bits 6..8, the
     * sign (byte bit 7, replicated) -> bit 15; y brings the low nibbles up */
    const uint32_t src = which ? w : y;
    return (prmt(src, src, hi ? 0xB3A2u : 0x9180u) << 2) & 0x81C081C0u;
  } else {
    const uint32_t x = prmt(w, w, which ? 0xB3A2u : 0x9180u); /* lanes: byte, its sign replicated */
    if constexpr (FMT == FMT_E4M3) return (x << 4) & 0x87F087F0u;
    else return (x << 5) & 0x8FE08FE0u;
  }
}

/*
 * One "word" = 4 consecutive raw k of one row, all in one scale block. Out: h0, h1, the
 * bf16x2 pairs (f16x2 in MODE_F16) for logical columns (2q, 2q+1) and (2q+8, 2q+9) of a k16 step, h0 times
 * the scale pair s0 and h1 times s1 (folded with 2^c in MODE_FOLD; the same pair twice
 * when the 4 values share a scale). fp8: w holds the 4 codes; pairs (k0,k1), (k2,k3).
 * e2m1: the word is the 16-bit half `hi` of w (codes k0..k3 in nibbles), y = w << 4;
 * pairs (k0,k2), (k1,k3).
 */
template <int FMT, int MODE>
__device__ __forceinline__ void dequant_word(uint32_t w, uint32_t y, int hi, uint32_t s0, uint32_t s1,
                                             uint32_t &h0, uint32_t &h1) {
  constexpr uint32_t K = fmt_consts<FMT>::K;
  if constexpr (MODE == MODE_F16) {
    static_assert(FMT != FMT_E2M1, "the f16 path is for fp8 codes");
    if constexpr (FMT == FMT_E4M3) {
      h0 = f16x2_mul(e4m3x2_to_f16x2<0>(w), s0);
      h1 = f16x2_mul(e4m3x2_to_f16x2<1>(w), s1);
    } else { /* e5m2 code c is the f16 with bits c << 8 */
      h0 = f16x2_mul(prmt(w, 0u, 0x1404u), s0);
      h1 = f16x2_mul(prmt(w, 0u, 0x3424u), s1);
    }
    return;
  }
  if constexpr (FMT != FMT_E2M1 && MODE == MODE_EXACT) {
    /* the two-product path, then NaN/inf codes patched in before the scale */
    uint32_t v[2] = {bf16x2_mul(place_pair<FMT>(w, y, 0, 0), K), bf16x2_mul(place_pair<FMT>(w, y, 0, 1), K)};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t b = (w >> (8 * i)) & 0xFFu, mag = b & 0x7Fu;
      uint32_t code = 0xFFFFFFFFu; /* none */
      if (FMT == FMT_E4M3 && mag == 0x7Fu) code = 0x7FC0u;
      if (FMT == FMT_E5M2 && mag > 0x7Cu) code = 0x7FC0u;
      if (FMT == FMT_E5M2 && mag == 0x7Cu) code = ((b & 0x80u) << 8) | 0x7F80u;
      const int sh = 16 * (i & 1);
      if (code != 0xFFFFFFFFu) v[i >> 1] = (v[i >> 1] & ~(0xFFFFu << sh)) | (code << sh);
    }
    h0 = bf16x2_mul(v[0], s0);
    h1 = bf16x2_mul(v[1], s1);
    return;
  }
  const uint32_t p0 = place_pair<FMT>(w, y, hi, 0), p1 = place_pair<FMT>(w, y, hi, 1);
  if constexpr (MODE == MODE_FOLD) {
    h0 = bf16x2_mul(p0, s0);
    h1 = bf16x2_mul(p1, s1);
  } else {
    h0 = bf16x2_mul(bf16x2_mul(p0, K), s0);
    h1 = bf16x2_mul(bf16x2_mul(p1, K), s1);
  }
}

/* Bit 7 of a byte lane set where that fp8 code is NaN/inf (e4m3: 0x7F/0xFF; e5m2: exponent
 * all ones), once the results of all words are OR-ed and masked with 0x80808080. */
template <int FMT> __device__ __forceinline__ uint32_t fp8_special(uint32_t w) {
  constexpr uint32_t MASK = FMT == FMT_E4M3 ? 0x7F7F7F7Fu : 0x7C7C7C7Cu;
  constexpr uint32_t ADD = FMT == FMT_E4M3 ? 0x01010101u : 0x04040404u;
  return (w & MASK) + ADD;
}

/* e8m0 bytes straight to MODE_FOLD's multiplier (kernels that read scale bytes as they
 * are): 2^(b - 127) * 2^c is the bf16 of exponent field b + c, a normal number for every
 * byte that folds, b <= e8m0_fold_max = 254 - c (fold_check's bound; byte 0 gives
 * 2^(c - 127)). The pair in both halves; b + c < 256 keeps the halves apart. */
template <int FMT> __device__ __forceinline__ constexpr uint32_t fmt_c() {
  return ((fmt_consts<FMT>::K >> 7) & 0xFFu) - 127u; /* c, from 2^c's exponent field */
}
template <int FMT> __device__ __forceinline__ constexpr uint32_t e8m0_fold_max() { return 254u - fmt_c<FMT>(); }
template <int FMT> __device__ __forceinline__ uint32_t e8m0_fold_pair(uint32_t b) {
  return (b + fmt_c<FMT>()) * 0x00800080u;
}
static_assert(e8m0_fold_max<FMT_E4M3>() == 134u && e8m0_fold_max<FMT_E5M2>() == 142u &&
                  e8m0_fold_max<FMT_E2M1>() == 128u,
              "fold_check's bounds");

/* MODE_FOLD's multiplier: the scale pair s2 times 2^c. */
template <int FMT> __device__ __forceinline__ uint32_t fold_scale(uint32_t s2) {
  return bf16x2_mul(s2, fmt_consts<FMT>::K);
}
/* Whether a scale pair can be folded: bit 15 / 31 of the result is set when scale * 2^c
 * would overflow bf16 (2^c * |s| >= 2^128: |s| >= 2^8 e4m3, 2^16 e5m2, 2^2 e2m1; e8m0
 * bytes > 134 / > 142 / > 128, ue4m3 scales of magnitude >= 4) or the scale is NaN; OR the
 * results of a stage and test with MXF_FOLD_OVER. */
template <int FMT> __device__ __forceinline__ uint32_t fold_check(uint32_t s2) {
  constexpr uint32_t C = FMT == FMT_E4M3 ? 0x3C803C80u : FMT == FMT_E5M2 ? 0x38803880u : 0x3F803F80u;
  return (s2 & 0x7FFF7FFFu) + C;
}
#define MXF_FOLD_OVER(over) (((over) & 0x80008000u) != 0)

} /* namespace mxf_sm90 */
#endif
