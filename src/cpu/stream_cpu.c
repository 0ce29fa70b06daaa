/*
 * stream_cpu.c — the streaming path's kernel: a few rows of f32 X against 16-row panels
 * of MX weight codes (e2m1, e4m3, e5m2) or bf16 values that are decoded in registers
 * and never stored (mxf_cpu_stream_rows; cpu.h). What a decode-size GEMM spends its time
 * on is reading the codes once; this kernel keeps the rest beside that read.
 *
 * Per 32 values of K of a panel: each of the 16 rows' code bytes (16 bytes of e2m1,
 * 2 x 16 of fp8, 4 x 16 of bf16) are transposed as 4-byte words, so that one vector
 * holds word q of the 16 rows, lane i = row i (AVX-512: where the rows are short, 64
 * bytes of each row at a time, stored transposed into an L1 buffer, panel_words; else
 * per block in place, rows16. AVX2: from an L1 copy of short rows' 64-byte pieces,
 * panel_codes, 8 rows at a time, rows8); a shift brings byte b of every lane to its low
 * bits (AVX2 with 1 or 2 rows of X: e2m1 a load at the byte's offset, e2m1_pair8_at;
 * fp8 of packed weights one at its offset - 3, fp8_value8), where
 *   e2m1: the low and the high nibble (values 2j, 2j + 1) index a 16-entry table by a
 *         permute (the code table of the op, formats.h's values; AVX2, whose permute
 *         takes 3 index bits: the 8 magnitudes and the sign, e2m1_value8);
 *   fp8:  the code's sign, exponent and mantissa go to f32's fields by a shift, an
 *         arithmetic shift and a mask, times 2^120 (e4m3) or 2^112 (e5m2): the code's
 *         value, subnormals included (formats.h, mxf_e4m3_bits_f32); a 16-row word
 *         group holding a NaN or infinity code takes its values from the table by a
 *         gather instead;
 *   bf16: a word holds two values, the low one moved up by a shift, the high one kept
 *         by a mask (no scale);
 * times the row's block scale (exact: SPEC §1.2; the same product the fill computes),
 * and added into the accumulators of every row of X by one fused multiply-add per k, in
 * increasing k, from +0: SPEC §5.1's order, the same bits as the GEMM core's. (e2m1
 * with e8m0 scales, 1 or 2 rows of X: the accumulators are divided by the scale before
 * the block and multiplied by it after, the same bits within bounds checked; the block
 * rescaling below.)
 *
 * Written for AVX-512 and AVX2 + FMA (the plan's instruction set, cpu.h; the
 * baseline has no streaming kernel, its fills do the work). Registers, AVX-512: one row
 * of X takes four panels at a time, 2 to 4 rows two (so that each accumulator's
 * multiply-adds are far enough apart), 5 to 8 rows one; more rows go by groups of 8,
 * each decoding the codes again. AVX2: a panel as two halves of 8 lanes, two panels at a
 * time for one row of X (four chains of multiply-adds), one for more, groups of 4 rows
 * of X. The same decoding, stored, feeds the GEMM core's packed layout where there
 * are more rows of X (mxf_cpu_stream_unpack).
 * Packed weights (SPEC §7, mxf_pack_weights) hold each panel's code words and scales as
 * these readers make them: the kernels load them as they are (no transposes, no copies,
 * no gathering of scales), each panel one stream in address order.
 * The backend's story and measurements: docs/kernels/cpu.md.
 */
#include "cpu/cpu.h"

/* Block rescaling (the kernels of e2m1 codes with power-of-two scales of whole
 * 32-value blocks, 1 or 2 rows of X; SPEC §5.1 unchanged). A block's steps
 * acc = fma(x, w s, acc) over its 32 values, s = 2^e the row's scale, give the same
 * bits as d = acc / s, then d = fma(x, w, d) over them, then acc = d s, wherever every
 * partial sum at both scales is a multiple of 2^-149 below 2^128: such a sum is an
 * exact f32 below 2^-126, and rounding to f32 commutes with a power of two above. So
 * the kernel spends no multiply on the scale per value, only two per block and row,
 * while every block so far has had
 *   s in [2^-32, 2^32] on every lane: w s exact (0.5 <= |w| <= 6), 1/s an exact f32
 *     (its exponent negated by an integer subtraction), and
 *   x = 0 or 2^-61 <= |x| <= 2^32 for its values of every row of X,
 * and K has at most 2^16 blocks. Then every product x w s is a multiple of 2^-117 (x of
 * 2^(E_x - 23), w of 2^-1) below 2^67 in magnitude, and every accumulator a multiple of
 * 2^-117 (rounding keeps that, the values below 2^-94 being exact) below 2^89 (2^21
 * products, their roundings' growth, (1 + 2^-24)^(2^21) < 1.2, included). Hence acc / s
 * is exact (a multiple of 2^-149 below 2^121), and the block's partial sums stay
 * multiples of 2^-149 below 2^122 at both scales. A block outside these bounds
 * multiplies each value by its scale, as the fills do, and so does every block after it
 * (the accumulators may then be finer or larger). The rows of X are checked once, by
 * the driver (mxf_cpu_stream_x_in_range), the scales per block. Measured
 * (bench/NOTES.md): 1 and 2 rows of X gain; 3 and 4 (two panels) lose; on AVX2 it frees
 * the scales' registers for the second panel's accumulators. */
#define S_RESCALE_SF_LO 0x1p-32f
#define S_RESCALE_SF_HI 0x1p32f
#define S_RESCALE_X_LO 0x21000000u /* 2^-61 */
#define S_RESCALE_X_HI 0x4F800000u /* 2^32 */
#define S_RESCALE_BLOCKS (1 << 16)
#define S_RESCALE_INV 0x7F000000u /* bits(1/s) = this - bits(s) for a normal power of two */
#define S_RESCALE_XN 2            /* rows of X up to which the kernels rescale */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define S_INLINE __attribute__((target("avx512f"), always_inline)) static inline

/* 16 rows (at p + i * rs) x 16 bytes as 4 vectors: z[q] lane i = row i's bytes 4q..4q+3. */
S_INLINE void rows16(const uint8_t *p, int64_t rs, __m512i z[4]) {
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  __m512i t[4];
  for (int r = 0; r < 4; ++r) { /* rows 4r..4r+3, one per 128-bit lane, then (lane, word) transposed */
    const uint8_t *b = p + 4 * r * rs;
    __m512i y = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)b));
    y = _mm512_inserti32x4(y, _mm_loadu_si128((const __m128i *)(b + rs)), 1);
    y = _mm512_inserti32x4(y, _mm_loadu_si128((const __m128i *)(b + 2 * rs)), 2);
    y = _mm512_inserti32x4(y, _mm_loadu_si128((const __m128i *)(b + 3 * rs)), 3);
    t[r] = _mm512_permutexvar_epi32(idx, y); /* lane q: word q of the 4 rows */
  }
  const __m512i u0 = _mm512_shuffle_i32x4(t[0], t[1], 0x44), u1 = _mm512_shuffle_i32x4(t[0], t[1], 0xEE);
  const __m512i u2 = _mm512_shuffle_i32x4(t[2], t[3], 0x44), u3 = _mm512_shuffle_i32x4(t[2], t[3], 0xEE);
  z[0] = _mm512_shuffle_i32x4(u0, u2, 0x88), z[1] = _mm512_shuffle_i32x4(u0, u2, 0xDD);
  z[2] = _mm512_shuffle_i32x4(u1, u3, 0x88), z[3] = _mm512_shuffle_i32x4(u1, u3, 0xDD);
}

/* How a kernel reads its panels' codes (the AVX2 kernels by panel_codes, the AVX-512
 * ones by panel_words, which also transposes them). Short rows (a group of panels within
 * S_GROUP_AHEAD_MAX bytes): the next group's codes are asked into L2 while this group
 * runs, `per` cache lines of them at each block in address order (prefetch_next), and
 * each row's 64-byte pieces are copied whole into an L1 buffer as the blocks enter them
 * (16 rows a multiple of 1 KiB apart, as the model shapes' are, share a few L1 sets:
 * read in place over several blocks, their lines were evicted between blocks). Long
 * rows (the next group would not fit in L2 beside this one) are read in place, each
 * row's codes asked for S_ROW_AHEAD bytes ahead. The call's one other setting travels
 * with it: whether the e2m1 kernels may rescale their blocks. */
typedef struct mxf_cpu_stream_ahead {
  const uint8_t *next;
  int64_t per;
  int copy;           /* short rows */
  int rescale;        /* the call's rows of X and scales allow the block rescaling (e2m1_rows) */
  int packed;         /* packed weights (SPEC §7.2), their layout copied from w->packed */
  mxf_packed_geom pk; /* (read at every block: a load fewer than through the pointer) */
} mxf_cpu_stream_ahead;
#define S_ROW_AHEAD 512
#define S_GROUP_AHEAD_MAX (128 << 10)

/* Packed weights: where a panel's 16 rows have their code bytes [o, o + 16) (o a multiple
 * of 16): 4 x 64 bytes, word q of the 16 rows at + 64 q (SPEC §7.2). No prefetching: each
 * panel is one stream, which the processor's prefetchers follow (asking for it 1-8 KiB
 * ahead was no faster, bench/NOTES.md). */
static inline __attribute__((always_inline)) const uint8_t *packed_words(const mxf_packed_geom *g,
                                                                         const uint8_t *panel, int64_t o) {
  return panel + mxf_packed_word_at(g, o);
}

static inline __attribute__((always_inline)) void prefetch_next(const mxf_cpu_stream_ahead *a, int64_t kb) {
  const uint8_t *p = a->next + kb * a->per * 64;
  for (int64_t i = 0; i < a->per; ++i)
    __builtin_prefetch(p + 64 * i, 0, 2);
}

/* Long rows: each of the panel's 16 rows asked for S_ROW_AHEAD bytes beyond byte o. */
static inline __attribute__((always_inline)) void ahead_in_place(const uint8_t *codes, int64_t row_bytes,
                                                                 int64_t o) {
  for (int i = 0; i < 16; ++i)
    __builtin_prefetch(codes + i * row_bytes + o + S_ROW_AHEAD);
}

/* AVX2: where a panel's 16 rows have their bytes [o, o + 16) (o: a multiple of 16 within
 * the kernel's end bytes of each row): *rs apart from the returned pointer, in buf
 * (64 x 16 bytes) for short rows, in place for long ones. `ahead` asks for long rows'
 * codes ahead at this o (the kernels spread the requests over the blocks). */
static inline __attribute__((always_inline)) const uint8_t *
panel_codes(const mxf_cpu_stream_ahead *a, const uint8_t *codes, int64_t row_bytes, int64_t o, int64_t end,
            int ahead, uint8_t *buf, int64_t *rs) {
  if (!a->copy) {
    if (ahead) ahead_in_place(codes, row_bytes, o);
    *rs = row_bytes;
    return codes + o;
  }
  const int64_t at = o & ~(int64_t)63;
  if (o == at) {
    for (int i = 0; i < 16; ++i) {
      if (end - at >= 64)
        __builtin_memcpy(buf + 64 * i, codes + i * row_bytes + at, 64);
      else
        for (int64_t b = 0; b < end - at; b += 16)
          __builtin_memcpy(buf + 64 * i + b, codes + i * row_bytes + at + b, 16);
    }
  }
  *rs = 64;
  return buf + (o - at);
}

/* 16 rows of 16 words (r[i]: row i) transposed: t[q] lane i = word q of row i. */
S_INLINE void words16(const __m512i r[16], __m512i t[16]) {
  __m512i a[16], b[16];
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int j = 0; j < 4; ++j) { /* b[4j + d], 128-bit lane c: word 4c + d of rows 4j..4j+3 */
    b[4 * j] = _mm512_unpacklo_epi64(a[4 * j], a[4 * j + 2]);
    b[4 * j + 1] = _mm512_unpackhi_epi64(a[4 * j], a[4 * j + 2]);
    b[4 * j + 2] = _mm512_unpacklo_epi64(a[4 * j + 1], a[4 * j + 3]);
    b[4 * j + 3] = _mm512_unpackhi_epi64(a[4 * j + 1], a[4 * j + 3]);
  }
  for (int d = 0; d < 4; ++d) { /* the 128-bit lanes of b[d], b[4 + d], ... transposed */
    const __m512i e0 = _mm512_shuffle_i32x4(b[d], b[4 + d], 0x44),
                  e1 = _mm512_shuffle_i32x4(b[d], b[4 + d], 0xEE);
    const __m512i e2 = _mm512_shuffle_i32x4(b[8 + d], b[12 + d], 0x44);
    const __m512i e3 = _mm512_shuffle_i32x4(b[8 + d], b[12 + d], 0xEE);
    t[d] = _mm512_shuffle_i32x4(e0, e2, 0x88), t[4 + d] = _mm512_shuffle_i32x4(e0, e2, 0xDD);
    t[8 + d] = _mm512_shuffle_i32x4(e1, e3, 0x88), t[12 + d] = _mm512_shuffle_i32x4(e1, e3, 0xDD);
  }
}

/* 16 rows' bytes [o, o + 64) (`bytes` of them, a multiple of 4, where fewer remain) as
 * words: t[q] lane i = row i's bytes o + 4q .. o + 4q + 3. */
S_INLINE void piece16(const uint8_t *codes, int64_t row_bytes, int64_t o, int64_t bytes, __m512i t[16]) {
  const __mmask16 m = bytes >= 64 ? 0xFFFF : (__mmask16)((1u << (bytes >> 2)) - 1);
  __m512i r[16];
  for (int i = 0; i < 16; ++i)
    r[i] = _mm512_maskz_loadu_epi32(m, codes + i * row_bytes + o);
  words16(r, t);
}

/* The AVX-512 kernels' panel_codes, transposed: z[q] lane i = row i's bytes o + 4q ..
 * o + 4q + 3. Short rows: as each 64-byte piece is entered, the 16 rows' pieces are
 * loaded whole and stored transposed into buf (16 x 64 bytes: word q of the piece at
 * buf + 64 q), which the blocks then load as they are; long rows: rows16 in place. */
S_INLINE void panel_words(const mxf_cpu_stream_ahead *a, const uint8_t *codes, int64_t row_bytes, int64_t o,
                          int64_t end, int ahead, uint8_t *buf, __m512i z[4]) {
  if (a->packed) { /* packed: the words as they are */
    const uint8_t *q = packed_words(&a->pk, codes, o);
    for (int i = 0; i < 4; ++i)
      z[i] = _mm512_loadu_si512(q + 64 * i);
    return;
  }
  if (!a->copy) {
    if (ahead) ahead_in_place(codes, row_bytes, o);
    rows16(codes + o, row_bytes, z);
    return;
  }
  const int64_t at = o & ~(int64_t)63;
  if (o == at) {
    __m512i t[16];
    piece16(codes, row_bytes, at, end - at, t);
    for (int q = 0; q < 16; ++q)
      _mm512_store_si512(buf + 64 * q, t[q]);
  }
  for (int q = 0; q < 4; ++q)
    z[q] = _mm512_load_si512(buf + (o - at) * 16 + 64 * q);
}

/* Offset of scale block kb from block 0 of the same row. */
static inline int64_t sf_block(const mxf_cpu_stream_w *w, int64_t kb) {
  return w->sf_swizzled ? (kb >> 2) * 512 + (kb & 3) : kb;
}

#define S_CHUNK 16 /* blocks of 32 values whose scales are read at a time */
/* the vector scale readers take a packed chunk's scales whole (chunk_as_words) */
_Static_assert(S_CHUNK == MXF_PACKED_CHUNK_BLOCKS, "a packed chunk is the readers' chunk of blocks");

/* The scales of a panel's 16 rows for the next chunk of blocks of 32 values: [kb0, kb0 +
 * nb), nb = S_CHUNK or the `left` blocks that remain, as f32 through the table:
 * o[(b * 2 + h) * 16 + i] of row i, values 32 (kb0 + b) + 16 h on (h = 1 only with
 * sf_vec 16). Done a chunk of blocks ahead of their use, one value at a time (the empty
 * asm keeps the compiler from assembling the vector lane by lane). */
static inline __attribute__((always_inline)) void panel_scales(const mxf_cpu_stream_w *w, const uint8_t *sf,
                                                               int64_t kb0, int64_t left, float *o) {
  const int halves = w->sf_vec == 16 ? 2 : 1, nb = left < S_CHUNK ? (int)left : S_CHUNK;
  const int64_t rs = w->packed ? 4 : w->sf_row;
  for (int b = 0; b < nb; ++b)
    for (int h = 0; h < halves; ++h) {
      const int64_t j = halves * (kb0 + b) + h; /* the row's scale j */
      const uint8_t *p = sf + (w->packed ? mxf_packed_sf_at(w->packed, 0, j) : sf_block(w, j));
      float *d = o + (b * 2 + h) * 16;
      for (int i = 0; i < 16; ++i) {
        float f = w->sf_lut[p[i * rs]];
        __asm__("" : "+x"(f));
        d[i] = f;
      }
    }
}

/* Whether the vector scale readers (scales512, scales8) take the chunk at kb0: a whole
 * chunk, and swizzled scales only with a panel's rows 16 bytes apart and the chunk
 * starting on a word of 4 scales. */
static inline int chunk_as_words(const mxf_cpu_stream_w *w, int64_t kb0, int64_t left) {
  const int halves = w->sf_vec == 16 ? 2 : 1;
  if (w->packed) return kb0 % S_CHUNK == 0; /* a chunk's slots, padded (SPEC §7.2) */
  return left >= S_CHUNK && (!w->sf_swizzled || (w->sf_row == 16 && !((halves * kb0) & 3)));
}

/* The 16 rows' scale bytes of 4 swizzled blocks 4g..4g+3 (p: the first's; SPEC §1.1: a
 * row's 4 bytes together, rows 16 bytes apart) as one vector, lane i = row i's 4: the
 * words at 0, 16, ... of 256 bytes, loaded alone (no byte beyond them is read). */
S_INLINE __m512i swizzled_words(const uint8_t *p) {
  const __m512i lo = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0);
  __m512i h[2];
  for (int j = 0; j < 2; ++j)
    h[j] = _mm512_permutex2var_epi32(_mm512_maskz_loadu_epi32(0x1111, p + 128 * j), lo,
                                     _mm512_maskz_loadu_epi32(0x1111, p + 128 * j + 64));
  return _mm512_shuffle_i32x4(h[0], h[1], 0x44);
}

/* acc + a * b with a, one f32, broadcast from memory by the multiply-add itself: written
 * as the instruction, since the compiler otherwise hoists the broadcasts into registers
 * (and then spills them, and the accumulators with them). */
S_INLINE __m512 fma_x(const float *a, __m512 b, __m512 acc) {
  __asm__("vfmadd231ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(b), "m"(*a));
  return acc;
}

/* The decoding, per lane (a row of the panel). e2m1: the low nibble of v through the
 * code table, times the scale. */
S_INLINE __m512 e2m1_value(__m512i v, __m512 tab, __m512 sc) {
  return _mm512_mul_ps(_mm512_permutexvar_ps(v, tab), sc);
}
/* fp8, byte b of z: moved to bits 24..31, then sign | magnitude << (E5 ? 21 : 20): for a
 * finite code its value times 2^-112 (e5m2) or 2^-120 (e4m3), subnormals included (an
 * arithmetic shift by S_FP8_SHIFT, then S_FP8_MASK keeps the sign and the magnitude). */
#define S_FP8_SHIFT(E5) ((E5) ? 3 : 4)
#define S_FP8_MASK(E5) ((E5) ? (int)0x8FE00000u : (int)0x87F00000u)
S_INLINE __m512 fp8_fields(__m512i z, int b, int E5) {
  const __m512i top = _mm512_slli_epi32(z, 24 - 8 * b);
  return _mm512_castsi512_ps(
      _mm512_and_si512(_mm512_srai_epi32(top, S_FP8_SHIFT(E5)), _mm512_set1_epi32(S_FP8_MASK(E5))));
}
/* fp8, byte b of z: its value from the code table (any code). */
S_INLINE __m512 fp8_table(__m512i z, int b, const float *lut) {
  return _mm512_i32gather_ps(_mm512_and_si512(_mm512_srli_epi32(z, 8 * b), _mm512_set1_epi32(0xFF)), lut, 4);
}
/* Nonzero when a byte of z[0..3] is a special code (e4m3 NaN; e5m2 inf, NaN): (b & m1) +
 * m2 carries into bit 7 for those only. */
S_INLINE int fp8_special(const __m512i z[4], int E5) {
  const __m512i m1 = _mm512_set1_epi32(E5 ? 0x7C7C7C7C : 0x7F7F7F7F);
  const __m512i m2 = _mm512_set1_epi32(E5 ? 0x04040404 : 0x01010101);
  __m512i any = _mm512_setzero_si512();
  for (int q = 0; q < 4; ++q)
    any = _mm512_or_si512(any, _mm512_add_epi32(_mm512_and_si512(z[q], m1), m2));
  return _mm512_test_epi32_mask(any, _mm512_set1_epi32((int)0x80808080u)) != 0;
}

/* panel_scales for the AVX-512 kernels: a whole chunk of scales as vectors — the 16 rows'
 * 16 (sf_vec 32) or 32 (sf_vec 16) scale bytes as words (compact: transposed by rows16;
 * swizzled: a row's 4 scales a word already), each byte decoded in its lane: e8m0 moved
 * to f32's exponent (2^(u - 127) = u << 23 for u in 1..254), e4m3 by fp8_fields times
 * 2^120 (its value, sign and subnormals included) — where the chunk holds no byte whose
 * value those do not give (e8m0 0 and 255: 2^-127 and NaN; e4m3 NaN), which then comes
 * from the table through panel_scales. The scalar gathering's loads and stores held the
 * kernels up. */
S_INLINE int scales512(const int POW2, const int HALVES, const mxf_cpu_stream_w *w, const uint8_t *sf,
                       int64_t kb0, float *o) {
  __m512i z[8]; /* z[4 g + q]: bytes 16 g + 4 q .. + 3 of the chunk's scales, lane i = row i */
  for (int g = 0; g < HALVES; ++g) {
    const int64_t at = HALVES * kb0 + 16 * g;
    if (w->packed)
      for (int q = 0; q < 4; ++q)
        z[4 * g + q] = _mm512_loadu_si512(sf + mxf_packed_sf_at(w->packed, 0, at + 4 * q));
    else if (w->sf_swizzled)
      for (int q = 0; q < 4; ++q)
        z[4 * g + q] = swizzled_words(sf + sf_block(w, at + 4 * q));
    else
      rows16(sf + at, w->sf_row, z + 4 * g);
  }
  if (POW2) {
    const __m512i ones = _mm512_set1_epi32(0x01010101), tops = _mm512_set1_epi32((int)0x80808080u);
    __m512i any = _mm512_setzero_si512(); /* a byte 0 (of z or of ~z: 255) sets its top bit */
    for (int q = 0; q < 4 * HALVES; ++q) {
      const __m512i n = _mm512_xor_si512(z[q], _mm512_set1_epi32(-1));
      any = _mm512_or_si512(any, _mm512_andnot_si512(z[q], _mm512_sub_epi32(z[q], ones)));
      any = _mm512_or_si512(any, _mm512_andnot_si512(n, _mm512_sub_epi32(n, ones)));
    }
    if (_mm512_test_epi32_mask(any, tops)) return 0;
  } else {
    for (int g = 0; g < HALVES; ++g)
      if (fp8_special(z + 4 * g, 0)) return 0;
  }
  const __m512i exp = _mm512_set1_epi32(0x7F800000);
  const __m512 bias = _mm512_set1_ps(0x1p120f);
#pragma GCC unroll 32
  for (int j = 0; j < S_CHUNK * HALVES; ++j) { /* byte j: block j / HALVES, half j % HALVES */
    const __m512i v = z[j >> 2];
    const int sh = 8 * (j & 3);
    const __m512 f = POW2
                         ? _mm512_castsi512_ps(_mm512_and_si512(
                               sh <= 23 ? _mm512_slli_epi32(v, 23 - sh) : _mm512_srli_epi32(v, sh - 23), exp))
                         : _mm512_mul_ps(fp8_fields(v, j & 3, 0), bias);
    _mm512_store_ps(o + ((j / HALVES) * 2 + j % HALVES) * 16, f);
  }
  return 1;
}
/* The other scales (e8m0 of 16 values, e4m3) as vectors: 1 where done. */
__attribute__((target("avx512f"), noinline)) static int
scales512_other(const mxf_cpu_stream_w *w, const uint8_t *sf, int64_t kb0, float *o) {
  return w->sf_pow2        ? scales512(1, 2, w, sf, kb0, o)
         : w->sf_vec == 16 ? scales512(0, 2, w, sf, kb0, o)
                           : scales512(0, 1, w, sf, kb0, o);
}
/* e8m0 scales of 32 values, the most common, inline in the kernels. */
S_INLINE void panel_scales512(const mxf_cpu_stream_w *w, const uint8_t *sf, int64_t kb0, int64_t left,
                              float *o) {
  if (chunk_as_words(w, kb0, left)) {
    const int done =
        w->sf_pow2 && w->sf_vec != 16 ? scales512(1, 1, w, sf, kb0, o) : scales512_other(w, sf, kb0, o);
    if (done) return;
  }
  panel_scales(w, sf, kb0, left, o);
}

/* The accumulators: XN rows of X x NP panels, from +0; stored to acc at the end. */
#define S_UNROLL _Pragma("GCC unroll 8")
#define S_ACC_INIT                                                                                           \
  __m512 c[8][4];                                                                                            \
  S_UNROLL for (int m = 0; m < XN; ++m) S_UNROLL for (int p = 0; p < NP; ++p) c[m][p] = _mm512_setzero_ps();
#define S_ACC_STORE                                                                                          \
  S_UNROLL for (int m = 0; m < XN; ++m) S_UNROLL for (int p = 0; p < NP; ++p)                                \
      _mm512_storeu_ps(acc + m * ld + p * 16, c[m][p]);
/* The rows of X at the block's first value: each multiply-add broadcasts its value of X
 * straight from memory (a load, leaving the shuffle unit to the decoding). */
#define S_X_BLOCK(K0)                                                                                        \
  const float *xb[8];                                                                                        \
  S_UNROLL for (int m = 0; m < XN; ++m) xb[m] = x + m * ldx + (K0);

/* e2m1 codes: XN rows of X, NP panels, kblocks blocks of 32 values; the block rescaling
 * (top of the file) where the call allows it (ahead->rescale) and this instance may (RS). */
S_INLINE void e2m1_rows(const int XN, const int NP, const int RS, const mxf_cpu_stream_w *w,
                        const uint8_t *const *codes, const uint8_t *const *sf, int64_t kblocks,
                        const float *x, int64_t ldx, float *acc, int64_t ld,
                        const mxf_cpu_stream_ahead *ahead) {
  const __m512 tab = _mm512_loadu_ps(w->code_lut);
  int rescale = RS && ahead->rescale;
  S_ACC_INIT
  _Alignas(64) float sbuf[4][S_CHUNK * 2 * 16];
  _Alignas(64) uint8_t lb[4][16 * 64];
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    const int64_t kc = kb % S_CHUNK;
    if (kc == 0) S_UNROLL for (int p = 0; p < NP; ++p) panel_scales512(w, sf[p], kb, kblocks - kb, sbuf[p]);
    __m512i z[4][4];
    __m512 s[4][2];
    S_UNROLL for (int p = 0; p < NP; ++p) {
      panel_words(ahead, codes[p], w->row_bytes, kb * 16, kblocks * 16, (kb & 3) == (p & 3), lb[p], z[p]);
      s[p][0] = _mm512_load_ps(sbuf[p] + kc * 32);
      s[p][1] = w->sf_vec == 16 ? _mm512_load_ps(sbuf[p] + kc * 32 + 16) : s[p][0];
    }
    S_X_BLOCK(kb * 32)
    prefetch_next(ahead, kb);
    if (rescale) {
      __mmask16 ok = 0xFFFF;
      S_UNROLL for (int p = 0; p < NP; ++p) {
        ok &= _mm512_cmp_ps_mask(s[p][0], _mm512_set1_ps(S_RESCALE_SF_LO), _CMP_GE_OQ) &
              _mm512_cmp_ps_mask(s[p][0], _mm512_set1_ps(S_RESCALE_SF_HI), _CMP_LE_OQ);
      }
      rescale = ok == 0xFFFF;
    }
#define S_E2M1_LOOP(SCALED)                                                                                  \
  _Pragma("GCC unroll 4") for (int q = 0; q < 4; ++q) _Pragma("GCC unroll 4") for (int b = 0; b < 4; ++b) {  \
    const int k = q * 8 + b * 2; /* byte 4q + b: values k (low nibble) and k + 1 */                          \
    S_UNROLL for (int p = 0; p < NP; ++p) {                                                                  \
      const __m512i v = _mm512_srli_epi32(z[p][q], 8 * b);                                                   \
      const __m512i u = _mm512_srli_epi32(v, 4);                                                             \
      const __m512 lo = (SCALED) ? e2m1_value(v, tab, s[p][q >> 1]) : _mm512_permutexvar_ps(v, tab);         \
      const __m512 hi = (SCALED) ? e2m1_value(u, tab, s[p][q >> 1]) : _mm512_permutexvar_ps(u, tab);         \
      S_UNROLL for (int m = 0; m < XN; ++m) c[m][p] = fma_x(xb[m] + k, lo, c[m][p]);                         \
      S_UNROLL for (int m = 0; m < XN; ++m) c[m][p] = fma_x(xb[m] + k + 1, hi, c[m][p]);                     \
    }                                                                                                        \
  }
    if (rescale) {
      S_UNROLL for (int p = 0; p < NP; ++p) {
        const __m512 inv = _mm512_castsi512_ps(
            _mm512_sub_epi32(_mm512_set1_epi32((int)S_RESCALE_INV), _mm512_castps_si512(s[p][0])));
        S_UNROLL for (int m = 0; m < XN; ++m) c[m][p] = _mm512_mul_ps(c[m][p], inv);
        for (int q = 0; q < 4; ++q) /* codes of their own here: the two loops' decodings stay apart */
          __asm__("" : "+v"(z[p][q]));
      }
      S_E2M1_LOOP(0)
      S_UNROLL for (int p = 0; p < NP; ++p) S_UNROLL for (int m = 0; m < XN; ++m) c[m][p] =
          _mm512_mul_ps(c[m][p], s[p][0]);
    } else {
      S_E2M1_LOOP(1)
    }
#undef S_E2M1_LOOP
  }
  S_ACC_STORE
}

/* fp8 codes (e5m2 when E5, else e4m3), as e2m1_rows; each half block (16 values) is a
 * group of 4 words per row. */
S_INLINE void fp8_rows(const int XN, const int NP, const int E5, const mxf_cpu_stream_w *w,
                       const uint8_t *const *codes, const uint8_t *const *sf, int64_t kblocks, const float *x,
                       int64_t ldx, float *acc, int64_t ld, const mxf_cpu_stream_ahead *ahead) {
  const __m512 bias = _mm512_set1_ps(E5 ? 0x1p112f : 0x1p120f), inf = _mm512_set1_ps(__builtin_inff());
  S_ACC_INIT
  _Alignas(64) float sbuf[4][S_CHUNK * 2 * 16];
  _Alignas(64) uint8_t lb[4][16 * 64];
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    const int64_t kc = kb % S_CHUNK;
    if (kc == 0) S_UNROLL for (int p = 0; p < NP; ++p) panel_scales512(w, sf[p], kb, kblocks - kb, sbuf[p]);
    __m512 s[4][2], sb[4][2]; /* the scales, and times 2^bias where that is finite (fast) */
    int fast = 1;
    S_X_BLOCK(kb * 32)
    S_UNROLL for (int p = 0; p < NP; ++p) {
      s[p][0] = _mm512_load_ps(sbuf[p] + kc * 32);
      s[p][1] = w->sf_vec == 16 ? _mm512_load_ps(sbuf[p] + kc * 32 + 16) : s[p][0];
      for (int h = 0; h < 2; ++h) {
        sb[p][h] = _mm512_mul_ps(s[p][h], bias);
        fast &= _mm512_cmp_ps_mask(sb[p][h], inf, _CMP_LT_OQ) == 0xFFFF;
      }
    }
    prefetch_next(ahead, kb);
    for (int h = 0; h < 2; ++h) {
      __m512i z[4][4];
      int special_any = 0;
      S_UNROLL for (int p = 0; p < NP; ++p) {
        panel_words(ahead, codes[p], w->row_bytes, kb * 32 + h * 16, kblocks * 32,
                    h == 0 && (kb & 1) == (p & 1), lb[p], z[p]);
        special_any |= fp8_special(z[p], E5);
      }
      /* (f * 2^bias) * s, the first product exact; or f * (s * 2^bias), one rounding of
       * the same exact product, where s * 2^bias is finite (and then exact: s has at most
       * 4 significant bits); codes of a special group: their values from the table */
      const int mode = special_any ? 2 : fast ? 0 : 1;
#define S_FP8_LOOP(MODE)                                                                                     \
  _Pragma("GCC unroll 4") for (int q = 0; q < 4; ++q) _Pragma("GCC unroll 4") for (int b = 0; b < 4; ++b) {  \
    const int k = q * 4 + b; /* byte 4q + b */                                                               \
    S_UNROLL for (int p = 0; p < NP; ++p) {                                                                  \
      __m512 v;                                                                                              \
      if ((MODE) == 2) {                                                                                     \
        v = _mm512_mul_ps(fp8_table(z[p][q], b, w->code_lut), s[p][h]);                                      \
      } else {                                                                                               \
        const __m512 f = fp8_fields(z[p][q], b, E5);                                                         \
        v = (MODE) == 0 ? _mm512_mul_ps(f, sb[p][h]) : _mm512_mul_ps(_mm512_mul_ps(f, bias), s[p][h]);       \
      }                                                                                                      \
      S_UNROLL for (int m = 0; m < XN; ++m) c[m][p] = fma_x(xb[m] + h * 16 + k, v, c[m][p]);                 \
    }                                                                                                        \
  }
      if (mode == 0) {
        S_FP8_LOOP(0)
      } else if (mode == 1) {
        S_FP8_LOOP(1)
      } else {
        S_FP8_LOOP(2)
      }
#undef S_FP8_LOOP
    }
  }
  S_ACC_STORE
}
/* bf16 values (no scales), as e2m1_rows: per block each row's 64 bytes as 4 groups of
 * 16; a word holds values 2j (its low half) and 2j + 1, which a shift and a mask put
 * into f32's place. */
S_INLINE void bf16_rows(const int XN, const int NP, const mxf_cpu_stream_w *w, const uint8_t *const *codes,
                        int64_t kblocks, const float *x, int64_t ldx, float *acc, int64_t ld,
                        const mxf_cpu_stream_ahead *ahead) {
  const __m512i high = _mm512_set1_epi32((int)0xFFFF0000u);
  S_ACC_INIT
  _Alignas(64) uint8_t lb[4][16 * 64];
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    S_X_BLOCK(kb * 32)
    prefetch_next(ahead, kb);
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      __m512i z[4][4];
      S_UNROLL for (int p = 0; p < NP; ++p) {
        panel_words(ahead, codes[p], w->row_bytes, kb * 64 + g * 16, kblocks * 64, g == 0, lb[p], z[p]);
      }
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {
        const int k = g * 8 + q * 2;
        S_UNROLL for (int p = 0; p < NP; ++p) {
          const __m512 lo = _mm512_castsi512_ps(_mm512_slli_epi32(z[p][q], 16));
          const __m512 hi = _mm512_castsi512_ps(_mm512_and_si512(z[p][q], high));
          S_UNROLL for (int m = 0; m < XN; ++m) c[m][p] = fma_x(xb[m] + k, lo, c[m][p]);
          S_UNROLL for (int m = 0; m < XN; ++m) c[m][p] = fma_x(xb[m] + k + 1, hi, c[m][p]);
        }
      }
    }
  }
  S_ACC_STORE
}
#undef S_ACC_INIT
#undef S_ACC_STORE
#undef S_X_BLOCK
#undef S_UNROLL

/* The same decoding into the GEMM core's packed layout: blocks [kb0, kb0 + nb) of one
 * panel, value (row i, k) at dst[(k - 32 kb0) * 16 + i] (mxf_cpu_stream_unpack); the
 * codes 64 bytes of each row at a time (piece16). */
__attribute__((target("avx512f"))) static void unpack_avx512(const mxf_cpu_stream_w *w, const uint8_t *codes,
                                                             const uint8_t *sf, int64_t kb0, int64_t nb,
                                                             float *dst) {
  const int e2 = w->fmt == MXF_E2M1, E5 = w->fmt == MXF_E5M2;
  const int64_t bb = e2 ? 16 : 32; /* bytes of a block */
  const __m512 tab = _mm512_loadu_ps(w->code_lut);
  const __m512 bias = _mm512_set1_ps(E5 ? 0x1p112f : 0x1p120f);
  _Alignas(64) float sbuf[S_CHUNK * 2 * 16];
  __m512i t[16];
  for (int64_t j = 0; j < nb; ++j) {
    const int64_t kb = kb0 + j, kc = j % S_CHUNK, jp = j % (64 / bb); /* block jp of the piece */
    if (kc == 0) panel_scales512(w, sf, kb, nb - j, sbuf);
    if (w->packed) { /* this block's words as piece16 would give them */
      const uint8_t *q = packed_words(w->packed, codes, kb * bb);
      for (int i = 0; i < bb / 4; ++i)
        t[jp * bb / 4 + i] = _mm512_loadu_si512(q + 64 * i);
    } else if (jp == 0) {
      piece16(codes, w->row_bytes, kb * bb, (nb - j) * bb, t);
    }
    const __m512 s0 = _mm512_load_ps(sbuf + kc * 32),
                 s1 = w->sf_vec == 16 ? _mm512_load_ps(sbuf + kc * 32 + 16) : s0;
    float *o = dst + j * 32 * 16;
    if (e2) {
      const __m512i *z = t + 4 * jp;
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q)
#pragma GCC unroll 4
        for (int b = 0; b < 4; ++b) {
          const __m512i v = _mm512_srli_epi32(z[q], 8 * b);
          const __m512 sc = q < 2 ? s0 : s1;
          _mm512_store_ps(o + (q * 8 + b * 2) * 16, e2m1_value(v, tab, sc));
          _mm512_store_ps(o + (q * 8 + b * 2 + 1) * 16, e2m1_value(_mm512_srli_epi32(v, 4), tab, sc));
        }
      continue;
    }
    for (int h = 0; h < 2; ++h) {
      const __m512i *z = t + 8 * jp + 4 * h;
      const int special = fp8_special(z, E5);
      const __m512 sc = h ? s1 : s0;
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q)
#pragma GCC unroll 4
        for (int b = 0; b < 4; ++b) {
          const __m512 v =
              special ? fp8_table(z[q], b, w->code_lut) : _mm512_mul_ps(fp8_fields(z[q], b, E5), bias);
          _mm512_store_ps(o + (h * 16 + q * 4 + b) * 16, _mm512_mul_ps(v, sc));
        }
    }
  }
}

/* One instance per (format, rows of X, panels): the constants unroll the loops and keep
 * the accumulators in registers. */
#define S_KERNEL(NAME, BODY)                                                                                 \
  __attribute__((target("avx512f"))) static void NAME(                                                       \
      const mxf_cpu_stream_w *w, const uint8_t *const *codes, const uint8_t *const *sf, int64_t kblocks,     \
      const float *x, int64_t ldx, float *acc, int64_t ld, const mxf_cpu_stream_ahead *ahead) {              \
    BODY;                                                                                                    \
  }
#define S_KERNELS(XN, NP)                                                                                    \
  S_KERNEL(e2m1_##XN##_##NP,                                                                                 \
           e2m1_rows(XN, NP, XN <= S_RESCALE_XN, w, codes, sf, kblocks, x, ldx, acc, ld, ahead))             \
  S_KERNEL(e4m3_##XN##_##NP, fp8_rows(XN, NP, 0, w, codes, sf, kblocks, x, ldx, acc, ld, ahead))             \
  S_KERNEL(e5m2_##XN##_##NP, fp8_rows(XN, NP, 1, w, codes, sf, kblocks, x, ldx, acc, ld, ahead))             \
  S_KERNEL(bf16_##XN##_##NP, ((void)sf, bf16_rows(XN, NP, w, codes, kblocks, x, ldx, acc, ld, ahead)))
S_KERNELS(1, 1)
S_KERNELS(1, 2)
S_KERNELS(1, 3)
S_KERNELS(1, 4)
S_KERNELS(2, 1)
S_KERNELS(2, 2)
S_KERNELS(3, 1)
S_KERNELS(3, 2)
S_KERNELS(4, 1)
S_KERNELS(4, 2)
S_KERNELS(5, 1)
S_KERNELS(6, 1)
S_KERNELS(7, 1)
S_KERNELS(8, 1)
#undef S_KERNELS
#undef S_KERNEL

typedef void (*stream_fn)(const mxf_cpu_stream_w *, const uint8_t *const *, const uint8_t *const *, int64_t,
                          const float *, int64_t, float *, int64_t, const mxf_cpu_stream_ahead *);
#define S_ONE(XN, NP)                                                                                        \
  { e2m1_##XN##_##NP, e4m3_##XN##_##NP, e5m2_##XN##_##NP, bf16_##XN##_##NP }
/* [rows of X - 1][panels - 1][format] */
static const stream_fn g_kernels[8][4][4] = {{S_ONE(1, 1), S_ONE(1, 2), S_ONE(1, 3), S_ONE(1, 4)},
                                             {S_ONE(2, 1), S_ONE(2, 2)},
                                             {S_ONE(3, 1), S_ONE(3, 2)},
                                             {S_ONE(4, 1), S_ONE(4, 2)},
                                             {S_ONE(5, 1)},
                                             {S_ONE(6, 1)},
                                             {S_ONE(7, 1)},
                                             {S_ONE(8, 1)}};
#undef S_ONE

/* ---------------------------------------------------------------- AVX2
 * The same kernel in 8 lanes: a panel's 16 rows as two halves of 8, both halves'
 * chains interleaved; in 16 registers, two panels at a time for one row of X (four
 * chains, so that each accumulator's multiply-adds are far enough apart), one panel for
 * 2 to 4 rows; e2m1's 16-entry table as the 8 magnitudes (the permute takes 3 index
 * bits) and the sign bit. */
#define S2_INLINE __attribute__((target("avx2,fma"), always_inline)) static inline

/* 8 rows (at p + i * rs) x 16 bytes as 4 vectors: z[q] lane i = row i's bytes 4q..4q+3. */
S2_INLINE void rows8(const uint8_t *p, int64_t rs, __m256i z[4]) {
  __m256i y[4];
  for (int r = 0; r < 4; ++r) /* rows r and r + 4 */
    y[r] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p + r * rs))),
                                   _mm_loadu_si128((const __m128i *)(p + (r + 4) * rs)), 1);
  const __m256i t0 = _mm256_unpacklo_epi32(y[0], y[1]), t1 = _mm256_unpackhi_epi32(y[0], y[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(y[2], y[3]), t3 = _mm256_unpackhi_epi32(y[2], y[3]);
  z[0] = _mm256_unpacklo_epi64(t0, t2), z[1] = _mm256_unpackhi_epi64(t0, t2);
  z[2] = _mm256_unpacklo_epi64(t1, t3), z[3] = _mm256_unpackhi_epi64(t1, t3);
}

/* acc + a * b, a broadcast from memory next to the multiply-add (see fma_x); or (SHARE)
 * a value of X broadcast once for the multiply-adds of all the panels (S2_BCAST, S2_FMA):
 * the fp8 kernels, which take one value of X at a time, and the others up to 2 rows of X
 * (with more, their two values' broadcasts would take the accumulators' registers). */
S2_INLINE __m256 fma_x8(const float *a, __m256 b, __m256 acc) {
  __m256 t;
  __asm__("vbroadcastss %3, %1\n\tvfmadd231ps %1, %2, %0" : "+x"(acc), "=&x"(t) : "x"(b), "m"(*a));
  return acc;
}
S2_INLINE __m256 bcast8(const float *a) { /* an instruction, kept where it is used (see fma_x) */
  __m256 t;
  __asm__("vbroadcastss %1, %0" : "=x"(t) : "m"(*a));
  return t;
}
#define S2_BCAST(XR, K, SHARE)                                                                               \
  __m256 XR[4];                                                                                              \
  if (SHARE) S2_UNROLL for (int m = 0; m < XN; ++m) XR[m] = bcast8(xb[m] + (K));
#define S2_FMA(XR, K, V, ACC, SHARE)                                                                         \
  ((SHARE) ? _mm256_fmadd_ps(XR[m], (V), (ACC)) : fma_x8(xb[m] + (K), (V), (ACC)))

/* The decoding, per lane, in 8 lanes (as e2m1_value, fp8_fields, fp8_table, fp8_special).
 * e2m1: the low nibble of v, moved to bits 28..31, holds the sign at bit 31 and the
 * permute's 3 index bits i at 28..30; the table (e2m1_table8) holds the magnitude of
 * code i with i << 28 xor-ed in, so that one xor with the moved nibble takes those bits
 * out and puts the sign in. */
S2_INLINE __m256 e2m1_table8(const float *lut) { /* codes 0..7; 8..15 are their negatives */
  return _mm256_xor_ps(_mm256_loadu_ps(lut),
                       _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), 28)));
}
S2_INLINE __m256 e2m1_value8(__m256i v, __m256 tab) {
  return _mm256_xor_ps(_mm256_permutevar8x32_ps(tab, v), _mm256_castsi256_ps(_mm256_slli_epi32(v, 28)));
}
/* The values of byte b of the word at z (both nibbles: lo, hi), as e2m1_value8, in one
 * statement that the compiler keeps where it is written, the word loaded by it: left to
 * itself, the compiler decoded a whole block first, or kept a block's words in
 * registers, and spilled the accumulators. */
S2_INLINE void e2m1_pair8(const __m256i *z, const int b, __m256 tab, __m256 *lo, __m256 *hi) {
  __m256i v, u;
  __asm__ volatile("vmovdqa %[z], %[v]\n\t"
                   ".if %c[sh]\n\tvpsrld %[sh], %[v], %[v]\n\t.endif\n\t"
                   "vpermps %[tab], %[v], %[lo]\n\t"
                   "vpsrld $4, %[v], %[u]\n\t"
                   "vpslld $28, %[v], %[v]\n\t"
                   "vxorps %[v], %[lo], %[lo]\n\t"
                   "vpermps %[tab], %[u], %[hi]\n\t"
                   "vpslld $28, %[u], %[u]\n\t"
                   "vxorps %[u], %[hi], %[hi]"
                   : [v] "=&x"(v), [u] "=&x"(u), [lo] "=&x"(*lo), [hi] "=&x"(*hi)
                   : [z] "m"(*z), [sh] "i"(8 * b), [tab] "x"(tab));
}
/* e2m1_pair8 from the 8 rows' words at g (32 bytes: packed weights in place, SPEC §7.2,
 * or zb). The load at g + b puts byte b of each row's word at the lane's low bits (the
 * low nibble's index, no shift), the one at g + b - 3 at its top, where a mask leaves
 * the high nibble at bits 28..31 (its sign and xor bits, no shift): two shifts and two
 * permutes a byte where e2m1_pair8 has up to four shifts, the shuffle unit's share of
 * the decoding. The loads reach 3 bytes either side of the 32: zb has a vector either
 * side, packed weights their header, scales and codes before every group and codes
 * after all but a panel's last (whose block the kernel takes through zb). */
S2_INLINE void e2m1_pair8_at(const uint8_t *g, const int b, __m256 tab, __m256i top, __m256 *lo, __m256 *hi) {
  __m256i v, u;
  __asm__ volatile("vmovdqu %[at], %[v]\n\t"
                   "vpermps %[tab], %[v], %[lo]\n\t"
                   "vpsrld $4, %[v], %[u]\n\t"
                   "vpslld $28, %[v], %[v]\n\t"
                   "vxorps %[v], %[lo], %[lo]\n\t"
                   "vpermps %[tab], %[u], %[hi]\n\t"
                   "vpand %[below], %[top], %[u]\n\t"
                   "vxorps %[u], %[hi], %[hi]"
                   : [v] "=&x"(v), [u] "=&x"(u), [lo] "=&x"(*lo), [hi] "=&x"(*hi)
                   : [at] "m"(*(const __m256i_u *)(g + b)), [below] "m"(*(const __m256i_u *)(g + b - 3)),
                     [tab] "x"(tab), [top] "x"(top));
}
/* fp8_fields8 of packed weights read in place, times the scale (TWO: times bias, then
 * times the scale), in one statement kept where it is written (left to themselves, the
 * compiler decoded a half block's groups first and spilled them): top, 8 rows' words at
 * their byte b's offset - 3 (e2m1_pair8_at), which the load puts at the top of each
 * lane (no shift; within the buffer: a group's 32 bytes from 3 before its first). */
S2_INLINE __m256 fp8_value8(const uint8_t *top, const int E5, const int TWO, __m256i mask, __m256 bias,
                            __m256 scale) {
#define S2_FP8_FIELDS "vmovdqu %[at], %[v]\n\tvpsrad %[sh], %[v], %[v]\n\tvpand %[mask], %[v], %[v]\n\t"
  __m256 v;
  if (TWO)
    __asm__ volatile(S2_FP8_FIELDS "vmulps %[bias], %[v], %[v]\n\tvmulps %[scale], %[v], %[v]"
                     : [v] "=&x"(v)
                     : [at] "m"(*(const __m256i_u *)top), [sh] "i"(S_FP8_SHIFT(E5)), [mask] "x"(mask),
                       [bias] "x"(bias), [scale] "x"(scale));
  else
    __asm__ volatile(
        S2_FP8_FIELDS "vmulps %[scale], %[v], %[v]"
        : [v] "=&x"(v)
        : [at] "m"(*(const __m256i_u *)top), [sh] "i"(S_FP8_SHIFT(E5)), [mask] "x"(mask), [scale] "x"(scale));
#undef S2_FP8_FIELDS
  return v;
}
S2_INLINE __m256 fp8_fields8(__m256i z, int b, int E5) {
  const __m256i top = _mm256_slli_epi32(z, 24 - 8 * b);
  return _mm256_castsi256_ps(
      _mm256_and_si256(_mm256_srai_epi32(top, S_FP8_SHIFT(E5)), _mm256_set1_epi32(S_FP8_MASK(E5))));
}
S2_INLINE __m256 fp8_table8(__m256i z, int b, const float *lut) {
  return _mm256_i32gather_ps(lut, _mm256_and_si256(_mm256_srli_epi32(z, 8 * b), _mm256_set1_epi32(0xFF)), 4);
}
/* a panel's two halves of 4 words */
S2_INLINE int fp8_special8(const __m256i z[2][4], int E5) {
  const __m256i m1 = _mm256_set1_epi32(E5 ? 0x7C7C7C7C : 0x7F7F7F7F);
  const __m256i m2 = _mm256_set1_epi32(E5 ? 0x04040404 : 0x01010101);
  __m256i any = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h)
    for (int q = 0; q < 4; ++q)
      any = _mm256_or_si256(any, _mm256_add_epi32(_mm256_and_si256(z[h][q], m1), m2));
  return !_mm256_testz_si256(any, _mm256_set1_epi32((int)0x80808080u));
}

/* The AVX2 kernels' scale reader, as scales512 (e8m0 scales or e4m3 ones, of 32 or 16
 * values, a whole chunk): the chunk's 16 x 4 HALVES bytes as words, lane i = row i, by
 * rows8 of compact rows or a gather of swizzled ones; a chunk holding an e8m0 byte 0 or
 * 255 or an e4m3 NaN: 0, left to the table. */
S2_INLINE int scales8(const int POW2, const int HALVES, const mxf_cpu_stream_w *w, const uint8_t *sf,
                      int64_t kb0, float *o) {
  __m256i z[2][2][4]; /* [g][h][q]: bytes 16 g + 4 q .. + 3 of the chunk's scales, rows 8h..8h+7 */
  for (int g = 0; g < HALVES; ++g) {
    const int64_t at = HALVES * kb0 + 16 * g;
    for (int h = 0; h < 2; ++h) {
      if (w->packed)
        for (int q = 0; q < 4; ++q)
          z[g][h][q] =
              _mm256_loadu_si256((const __m256i *)(sf + mxf_packed_sf_at(w->packed, 0, at + 4 * q) + 32 * h));
      else if (w->sf_swizzled)
        for (int q = 0; q < 4; ++q)
          z[g][h][q] = _mm256_i32gather_epi32((const int *)(sf + sf_block(w, at + 4 * q) + 128 * h),
                                              _mm256_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112), 1);
      else
        rows8(sf + at + 8 * h * w->sf_row, w->sf_row, z[g][h]);
    }
  }
  if (POW2) {
    const __m256i ones = _mm256_set1_epi32(0x01010101), tops = _mm256_set1_epi32((int)0x80808080u);
    __m256i any = _mm256_setzero_si256(); /* a byte 0 (of z or of ~z: 255) sets its top bit */
    for (int g = 0; g < HALVES; ++g)
      for (int h = 0; h < 2; ++h)
        for (int q = 0; q < 4; ++q) {
          const __m256i v = z[g][h][q], n = _mm256_xor_si256(v, _mm256_set1_epi32(-1));
          any = _mm256_or_si256(any, _mm256_andnot_si256(v, _mm256_sub_epi32(v, ones)));
          any = _mm256_or_si256(any, _mm256_andnot_si256(n, _mm256_sub_epi32(n, ones)));
        }
    if (!_mm256_testz_si256(any, tops)) return 0;
  } else {
    for (int g = 0; g < HALVES; ++g)
      if (fp8_special8(z[g], 0)) return 0;
  }
  const __m256i exp = _mm256_set1_epi32(0x7F800000);
  const __m256 bias = _mm256_set1_ps(0x1p120f);
#pragma GCC unroll 32
  for (int j = 0; j < S_CHUNK * HALVES; ++j) /* byte j: block j / HALVES, half j % HALVES */
    for (int h = 0; h < 2; ++h) {
      const __m256i v = z[j >> 4][h][(j >> 2) & 3];
      const int sh = 8 * (j & 3);
      const __m256 f =
          POW2 ? _mm256_castsi256_ps(_mm256_and_si256(
                     sh <= 23 ? _mm256_slli_epi32(v, 23 - sh) : _mm256_srli_epi32(v, sh - 23), exp))
               : _mm256_mul_ps(fp8_fields8(v, j & 3, 0), bias);
      _mm256_store_ps(o + ((j / HALVES) * 2 + j % HALVES) * 16 + 8 * h, f);
    }
  return 1;
}
/* The other scales (e8m0 of 16 values, e4m3) as vectors: 1 where done. */
__attribute__((target("avx2,fma"), noinline)) static int
scales8_other(const mxf_cpu_stream_w *w, const uint8_t *sf, int64_t kb0, float *o) {
  return w->sf_pow2        ? scales8(1, 2, w, sf, kb0, o)
         : w->sf_vec == 16 ? scales8(0, 2, w, sf, kb0, o)
                           : scales8(0, 1, w, sf, kb0, o);
}
/* e8m0 scales of 32 values inline in the kernels, the others through scales8_other (the
 * call marked unlikely: otherwise the fp8 kernels spilled twice the multiply-adds around
 * it, 3 % of their time), a chunk the vectors do not take through panel_scales. */
S2_INLINE void panel_scales8(const mxf_cpu_stream_w *w, const uint8_t *sf, int64_t kb0, int64_t left,
                             float *o) {
  if (chunk_as_words(w, kb0, left)) {
    const int done = __builtin_expect(w->sf_pow2 && w->sf_vec != 16, 1) ? scales8(1, 1, w, sf, kb0, o)
                                                                        : scales8_other(w, sf, kb0, o);
    if (done) return;
  }
  panel_scales(w, sf, kb0, left, o);
}

/* Packed weights: a panel's words at q (packed_words) as rows 8h..8h+7's z[h][q]. */
S2_INLINE void packed_words8(const uint8_t *q, __m256i z[2][4]) {
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 4; ++k)
      z[h][k] = _mm256_loadu_si256((const __m256i *)(q + 64 * k + 32 * h));
}

#define S2_UNROLL _Pragma("GCC unroll 8")
/* The accumulators (XN rows of X x NP panels, each panel's two halves), from +0; the
 * panels' code words of a group, transposed by rows8 (zb[p][h][q]: rows 8h..8h+7 of
 * panel p), which the loops load as they go (8 accumulators and a panel's 8 words would
 * not fit in the 16 registers beside each other); the rows of X at the block's first
 * value; the panels' scales, a chunk ahead (into sbuf). */
#define S2_PREP                                                                                              \
  __m256 c[4][4][2];                                                                                         \
  S2_UNROLL for (int m = 0; m < XN; ++m) S2_UNROLL for (int p = 0; p < NP; ++p) c[m][p][0] = c[m][p][1] =    \
      _mm256_setzero_ps();                                                                                   \
  _Alignas(64) uint8_t lb[4][16 * 64];                                                                       \
  _Alignas(32) __m256i zpad[1 + 4 * 2 * 4 + 1]; /* zb, a vector either side (e2m1_pair8_at) */               \
  for (int i = 0; i < 1 + 4 * 2 * 4 + 1; ++i)                                                                \
    zpad[i] = _mm256_setzero_si256();                                                                        \
  __m256i(*const zb)[2][4] = (__m256i(*)[2][4])(zpad + 1);
#define S2_X_BLOCK(K0)                                                                                       \
  const float *xb[4];                                                                                        \
  S2_UNROLL for (int m = 0; m < XN; ++m) xb[m] = x + m * ldx + (K0);
#define S2_CHUNK_SCALES                                                                                      \
  const int64_t kc = kb % S_CHUNK;                                                                           \
  if (kc == 0) S2_UNROLL for (int p = 0; p < NP; ++p) panel_scales8(w, sf[p], kb, kblocks - kb, sbuf[p]);    \
  S2_X_BLOCK(kb * 32)
/* Each panel's 16 rows' bytes [o, o + 16) as words into zb (AHEAD: the panel's turn to
 * ask for long rows ahead). */
#define S2_WORDS(O, END, AHEAD)                                                                              \
  S2_UNROLL for (int p = 0; p < NP; ++p) {                                                                   \
    if (ahead->packed) {                                                                                     \
      packed_words8(packed_words(&ahead->pk, codes[p], (O)), zb[p]);                                         \
      continue;                                                                                              \
    }                                                                                                        \
    int64_t rs;                                                                                              \
    const uint8_t *cb = panel_codes(ahead, codes[p], w->row_bytes, (O), (END), (AHEAD), lb[p], &rs);         \
    rows8(cb, rs, zb[p][0]);                                                                                 \
    rows8(cb + 8 * rs, rs, zb[p][1]);                                                                        \
  }
#define S2_STORE                                                                                             \
  S2_UNROLL for (int m = 0; m < XN; ++m) S2_UNROLL for (int p = 0; p < NP; ++p) {                            \
    _mm256_storeu_ps(acc + m * ld + 16 * p, c[m][p][0]);                                                     \
    _mm256_storeu_ps(acc + m * ld + 16 * p + 8, c[m][p][1]);                                                 \
  }

S2_INLINE void e2m1_rows_avx2(const int XN, const int NP, const int RS, const mxf_cpu_stream_w *w,
                              const uint8_t *const *codes, const uint8_t *const *sf, int64_t kblocks,
                              const float *x, int64_t ldx, float *acc, int64_t ld,
                              const mxf_cpu_stream_ahead *ahead) {
  const __m256 tab = e2m1_table8(w->code_lut);
  const __m256i top = _mm256_set1_epi32((int)0xF0000000u);
  int rescale = RS && ahead->rescale;
  S2_PREP
  _Alignas(64) float sbuf[4][S_CHUNK * 2 * 16];
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    S2_CHUNK_SCALES
    prefetch_next(ahead, kb);
    /* 1 or 2 rows of X: e2m1_pair8_at, on packed weights in place but for a panel's last
       block; with more, e2m1_pair8 (the multiply-adds bound the time, and the mask's
       register would push the accumulators out) */
    const int in_place = XN <= 2 && ahead->packed && kb + 1 < kblocks;
    const uint8_t *pw[4] = {NULL};
    if (in_place)
      S2_UNROLL for (int p = 0; p < NP; ++p) pw[p] = packed_words(&ahead->pk, codes[p], kb * 16);
    else
      S2_WORDS(kb * 16, kblocks * 16, (kb & 3) == (p & 3))
    if (rescale) {
      int ok = 1;
      S2_UNROLL for (int p = 0; p < NP; ++p) for (int h = 0; h < 2; ++h) {
        const __m256 sc = _mm256_load_ps(sbuf[p] + kc * 32 + 8 * h);
        ok &= _mm256_movemask_ps(
                  _mm256_and_ps(_mm256_cmp_ps(sc, _mm256_set1_ps(S_RESCALE_SF_LO), _CMP_GE_OQ),
                                _mm256_cmp_ps(sc, _mm256_set1_ps(S_RESCALE_SF_HI), _CMP_LE_OQ))) == 0xFF;
      }
      rescale = ok;
    }
    /* the block's values: decoded by e2m1_pair8(_at), times the scale (SCALED) or unscaled
       between the rescaling's two multiplies (top of the file) */
#define S2_E2M1_LOOP(SCALED, IN_PLACE)                                                                       \
  _Pragma("GCC unroll 4") for (int q = 0; q < 4; ++q) _Pragma("GCC unroll 4") for (int b = 0; b < 4; ++b) {  \
    const int k = q * 8 + b * 2;                                                                             \
    S2_BCAST(xl, k, XN <= 2)                                                                                 \
    S2_BCAST(xh, k + 1, XN <= 2)                                                                             \
    S2_UNROLL for (int p = 0; p < NP; ++p) for (int h = 0; h < 2; ++h) { /* rows 8h..8h+7 */                 \
      __m256 lo, hi;                                                                                         \
      if (XN > 2)                                                                                            \
        e2m1_pair8(&zb[p][h][q], b, tab, &lo, &hi);                                                          \
      else                                                                                                   \
        e2m1_pair8_at((IN_PLACE) ? pw[p] + 64 * q + 32 * h : (const uint8_t *)&zb[p][h][q], b, tab, top,     \
                      &lo, &hi);                                                                             \
      if (SCALED) {                                                                                          \
        const __m256 sc = _mm256_load_ps(sbuf[p] + kc * 32 + (w->sf_vec == 16 && q >= 2 ? 16 : 0) + 8 * h);  \
        lo = _mm256_mul_ps(lo, sc), hi = _mm256_mul_ps(hi, sc);                                              \
      }                                                                                                      \
      S2_UNROLL for (int m = 0; m < XN; ++m) c[m][p][h] = S2_FMA(xl, k, lo, c[m][p][h], XN <= 2);            \
      S2_UNROLL for (int m = 0; m < XN; ++m) c[m][p][h] = S2_FMA(xh, k + 1, hi, c[m][p][h], XN <= 2);        \
    }                                                                                                        \
  }
    if (rescale) {
      S2_UNROLL for (int p = 0; p < NP; ++p) for (int h = 0; h < 2; ++h) {
        const __m256 sc = _mm256_load_ps(sbuf[p] + kc * 32 + 8 * h);
        const __m256 inv = _mm256_castsi256_ps(
            _mm256_sub_epi32(_mm256_set1_epi32((int)S_RESCALE_INV), _mm256_castps_si256(sc)));
        S2_UNROLL for (int m = 0; m < XN; ++m) c[m][p][h] = _mm256_mul_ps(c[m][p][h], inv);
      }
      if (in_place) {
        S2_E2M1_LOOP(0, 1)
      } else {
        S2_E2M1_LOOP(0, 0)
      }
      S2_UNROLL for (int p = 0; p < NP; ++p) for (int h = 0; h < 2; ++h) {
        const __m256 sc = _mm256_load_ps(sbuf[p] + kc * 32 + 8 * h);
        S2_UNROLL for (int m = 0; m < XN; ++m) c[m][p][h] = _mm256_mul_ps(c[m][p][h], sc);
      }
    } else if (in_place) {
      S2_E2M1_LOOP(1, 1)
    } else {
      S2_E2M1_LOOP(1, 0)
    }
#undef S2_E2M1_LOOP
  }
  S2_STORE
}

S2_INLINE void fp8_rows_avx2(const int XN, const int NP, const int E5, const mxf_cpu_stream_w *w,
                             const uint8_t *const *codes, const uint8_t *const *sf, int64_t kblocks,
                             const float *x, int64_t ldx, float *acc, int64_t ld,
                             const mxf_cpu_stream_ahead *ahead) {
  const __m256 bias = _mm256_set1_ps(E5 ? 0x1p112f : 0x1p120f), inf = _mm256_set1_ps(__builtin_inff());
  const __m256i fmask = _mm256_set1_epi32(S_FP8_MASK(E5));
  S2_PREP
  _Alignas(64) float sbuf[4][S_CHUNK * 2 * 16];
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    S2_CHUNK_SCALES
    prefetch_next(ahead, kb);
    for (int hk = 0; hk < 2; ++hk) { /* values 16 hk .. 16 hk + 15 */
      /* packed weights, 1 or 2 rows of X: read where they are (with more, the mask's
         register would push the accumulators out, as in e2m1_rows_avx2) */
      const int in_place = XN <= 2 && ahead->packed;
      const uint8_t *pw[4] = {NULL};
      if (in_place)
        S2_UNROLL for (int p = 0; p < NP; ++p) pw[p] = packed_words(&ahead->pk, codes[p], kb * 32 + hk * 16);
      else
        S2_WORDS(kb * 32 + hk * 16, kblocks * 32, hk == 0 && (kb & 1) == (p & 1))
      int special = 0, fast = 1;
      __m256 s[4][2], sb[4][2];
      S2_UNROLL for (int p = 0; p < NP; ++p) {
        if (in_place) {
          __m256i z[2][4];
          packed_words8(pw[p], z);
          special |= fp8_special8(z, E5);
        } else {
          special |= fp8_special8(zb[p], E5);
        }
        for (int h = 0; h < 2; ++h) {
          s[p][h] = _mm256_load_ps(sbuf[p] + kc * 32 + (w->sf_vec == 16 ? 16 * hk : 0) + 8 * h);
          sb[p][h] = _mm256_mul_ps(s[p][h], bias);
          fast &= _mm256_movemask_ps(_mm256_cmp_ps(sb[p][h], inf, _CMP_LT_OQ)) == 0xFF;
        }
      }
      const int mode = special ? 2 : fast ? 0 : 1; /* as fp8_rows */
#define S2_FP8_LOOP(MODE, IN_PLACE)                                                                          \
  _Pragma("GCC unroll 4") for (int q = 0; q < 4; ++q) _Pragma("GCC unroll 4") for (int b = 0; b < 4; ++b) {  \
    const int k = hk * 16 + q * 4 + b;                                                                       \
    S2_BCAST(xk, k, 1)                                                                                       \
    S2_UNROLL for (int p = 0; p < NP; ++p) for (int h = 0; h < 2; ++h) {                                     \
      __m256 v;                                                                                              \
      if ((MODE) == 2) {                                                                                     \
        const __m256i zw = (IN_PLACE) ? _mm256_loadu_si256((const __m256i *)(pw[p] + 64 * q + 32 * h))       \
                                      : _mm256_load_si256(&zb[p][h][q]);                                     \
        v = _mm256_mul_ps(fp8_table8(zw, b, w->code_lut), s[p][h]);                                          \
      } else if (IN_PLACE) {                                                                                 \
        v = fp8_value8(pw[p] + 64 * q + 32 * h + b - 3, E5, (MODE) == 1, fmask, bias,                        \
                       (MODE) == 0 ? sb[p][h] : s[p][h]);                                                    \
      } else {                                                                                               \
        const __m256 f = fp8_fields8(_mm256_load_si256(&zb[p][h][q]), b, E5);                                \
        v = (MODE) == 0 ? _mm256_mul_ps(f, sb[p][h]) : _mm256_mul_ps(_mm256_mul_ps(f, bias), s[p][h]);       \
      }                                                                                                      \
      S2_UNROLL for (int m = 0; m < XN; ++m) c[m][p][h] = S2_FMA(xk, k, v, c[m][p][h], 1);                   \
    }                                                                                                        \
  }
      if (mode == 0 && in_place) {
        S2_FP8_LOOP(0, 1)
      } else if (mode == 0) {
        S2_FP8_LOOP(0, 0)
      } else if (mode == 1 && in_place) {
        S2_FP8_LOOP(1, 1)
      } else if (mode == 1) {
        S2_FP8_LOOP(1, 0)
      } else if (in_place) {
        S2_FP8_LOOP(2, 1)
      } else {
        S2_FP8_LOOP(2, 0)
      }
#undef S2_FP8_LOOP
    }
  }
  S2_STORE
}
S2_INLINE void bf16_rows_avx2(const int XN, const int NP, const mxf_cpu_stream_w *w,
                              const uint8_t *const *codes, int64_t kblocks, const float *x, int64_t ldx,
                              float *acc, int64_t ld, const mxf_cpu_stream_ahead *ahead) {
  const __m256i high = _mm256_set1_epi32((int)0xFFFF0000u);
  S2_PREP
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    S2_X_BLOCK(kb * 32)
    prefetch_next(ahead, kb);
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) { /* values 8g .. 8g + 7 */
      S2_WORDS(kb * 64 + g * 16, kblocks * 64, g == (p & 3))
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {
        const int k = g * 8 + q * 2;
        S2_BCAST(xl, k, XN <= 2)
        S2_BCAST(xh, k + 1, XN <= 2)
        S2_UNROLL for (int p = 0; p < NP; ++p) for (int h = 0; h < 2; ++h) {
          const __m256i z = _mm256_load_si256(&zb[p][h][q]);
          const __m256 lo = _mm256_castsi256_ps(_mm256_slli_epi32(z, 16));
          const __m256 hi = _mm256_castsi256_ps(_mm256_and_si256(z, high));
          S2_UNROLL for (int m = 0; m < XN; ++m) c[m][p][h] = S2_FMA(xl, k, lo, c[m][p][h], XN <= 2);
          S2_UNROLL for (int m = 0; m < XN; ++m) c[m][p][h] = S2_FMA(xh, k + 1, hi, c[m][p][h], XN <= 2);
        }
      }
    }
  }
  S2_STORE
}
/* unpack_avx512's decoding in 8 lanes (mxf_cpu_stream_unpack): a panel's 16 rows as two
 * halves of 8. */
__attribute__((target("avx2,fma"))) static void unpack_avx2(const mxf_cpu_stream_w *w, const uint8_t *codes,
                                                            const uint8_t *sf, int64_t kb0, int64_t nb,
                                                            float *dst) {
  const int e2 = w->fmt == MXF_E2M1, E5 = w->fmt == MXF_E5M2;
  const int64_t rs = w->row_bytes;
  const __m256 tab = e2m1_table8(w->code_lut);
  const __m256 bias = _mm256_set1_ps(E5 ? 0x1p112f : 0x1p120f);
  _Alignas(64) float sbuf[S_CHUNK * 2 * 16];
  for (int64_t j = 0; j < nb; ++j) {
    const int64_t kb = kb0 + j, kc = j % S_CHUNK;
    if (kc == 0) panel_scales(w, sf, kb, nb - j, sbuf);
    const float *sc = sbuf + kc * 32; /* rows 8h.. of values 16 hh.. at sc[hh * 16 + 8 h] */
    const int sv = w->sf_vec == 16 ? 16 : 0;
    float *o = dst + j * 32 * 16;
    __m256i z[2][4];
    if (e2) {
      if (w->packed) {
        packed_words8(packed_words(w->packed, codes, kb * 16), z);
      } else {
        rows8(codes + kb * 16, rs, z[0]);
        rows8(codes + 8 * rs + kb * 16, rs, z[1]);
      }
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q)
#pragma GCC unroll 4
        for (int b = 0; b < 4; ++b) {
          const int k = q * 8 + b * 2;
          for (int h = 0; h < 2; ++h) {
            const __m256 s = _mm256_load_ps(sc + (q >= 2 ? sv : 0) + 8 * h);
            const __m256i v = _mm256_srli_epi32(z[h][q], 8 * b);
            _mm256_store_ps(o + k * 16 + 8 * h, _mm256_mul_ps(e2m1_value8(v, tab), s));
            _mm256_store_ps(o + (k + 1) * 16 + 8 * h,
                            _mm256_mul_ps(e2m1_value8(_mm256_srli_epi32(v, 4), tab), s));
          }
        }
      continue;
    }
    for (int hk = 0; hk < 2; ++hk) {
      if (w->packed) {
        packed_words8(packed_words(w->packed, codes, kb * 32 + hk * 16), z);
      } else {
        rows8(codes + kb * 32 + hk * 16, rs, z[0]);
        rows8(codes + 8 * rs + kb * 32 + hk * 16, rs, z[1]);
      }
      const int special = fp8_special8(z, E5);
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q)
#pragma GCC unroll 4
        for (int b = 0; b < 4; ++b)
          for (int h = 0; h < 2; ++h) {
            const __m256 s = _mm256_load_ps(sc + hk * sv + 8 * h);
            const __m256 v = special ? fp8_table8(z[h][q], b, w->code_lut)
                                     : _mm256_mul_ps(fp8_fields8(z[h][q], b, E5), bias);
            _mm256_store_ps(o + (hk * 16 + q * 4 + b) * 16 + 8 * h, _mm256_mul_ps(v, s));
          }
    }
  }
}

#undef S2_ACC_INIT
#undef S2_X_BLOCK
#undef S2_WORDS
#undef S2_BCAST
#undef S2_FMA
#undef S2_PREP
#undef S2_CHUNK_SCALES
#undef S2_STORE
#undef S2_UNROLL

/* One instance per (format, rows of X, panels), as the AVX-512 kernels'. */
#define S2_KERNEL(NAME, BODY)                                                                                \
  __attribute__((target("avx2,fma"))) static void NAME(                                                      \
      const mxf_cpu_stream_w *w, const uint8_t *const *codes, const uint8_t *const *sf, int64_t kblocks,     \
      const float *x, int64_t ldx, float *acc, int64_t ld, const mxf_cpu_stream_ahead *ahead) {              \
    BODY;                                                                                                    \
  }
#define S2_KERNELS(XN, NP)                                                                                   \
  S2_KERNEL(e2m1_avx2_##XN##_##NP,                                                                           \
            e2m1_rows_avx2(XN, NP, XN <= S_RESCALE_XN, w, codes, sf, kblocks, x, ldx, acc, ld, ahead))       \
  S2_KERNEL(e4m3_avx2_##XN##_##NP, fp8_rows_avx2(XN, NP, 0, w, codes, sf, kblocks, x, ldx, acc, ld, ahead))  \
  S2_KERNEL(e5m2_avx2_##XN##_##NP, fp8_rows_avx2(XN, NP, 1, w, codes, sf, kblocks, x, ldx, acc, ld, ahead))  \
  S2_KERNEL(bf16_avx2_##XN##_##NP,                                                                           \
            ((void)sf, bf16_rows_avx2(XN, NP, w, codes, kblocks, x, ldx, acc, ld, ahead)))
S2_KERNELS(1, 1)
S2_KERNELS(1, 2)
S2_KERNELS(1, 3)
S2_KERNELS(1, 4)
S2_KERNELS(2, 1)
S2_KERNELS(2, 2)
S2_KERNELS(3, 1)
S2_KERNELS(4, 1)
#undef S2_KERNELS
#undef S2_KERNEL
#define S2_ONE(XN, NP)                                                                                       \
  { e2m1_avx2_##XN##_##NP, e4m3_avx2_##XN##_##NP, e5m2_avx2_##XN##_##NP, bf16_avx2_##XN##_##NP }
/* [rows of X - 1][panels - 1][format] */
static const stream_fn g_kernels2[4][4][4] = {{S2_ONE(1, 1), S2_ONE(1, 2), S2_ONE(1, 3), S2_ONE(1, 4)},
                                              {S2_ONE(2, 1), S2_ONE(2, 2)},
                                              {S2_ONE(3, 1)},
                                              {S2_ONE(4, 1)}};
#undef S2_ONE

int mxf_cpu_stream_rows(const mxf_cpu_stream_w *w, int64_t n, int64_t kblocks, const float *x, int64_t ldx,
                        int64_t xn, int x_in_range, float *acc, int64_t ld) {
  const int rescale = x_in_range && w->sf_pow2 && w->sf_vec == 32 && kblocks <= S_RESCALE_BLOCKS;
  const int avx512 = w->isa == MXF_CPU_ISA_AVX512, avx2 = w->isa == MXF_CPU_ISA_AVX2;
  if (!avx512 && !avx2) return 0;
  const int f = w->fmt == MXF_E2M1   ? 0
                : w->fmt == MXF_E4M3 ? 1
                : w->fmt == MXF_E5M2 ? 2
                : w->fmt == MXF_BF16 ? 3
                                     : -1;
  if (f < 0 || (n & 15) || n > MXF_CPU_FILL_ROWS || xn <= 0 || kblocks <= 0 ||
      (f < 3 && w->sf_vec != 16 && w->sf_vec != 32))
    return 0;
  const int group = avx512 ? 8 : 4; /* rows of X a kernel takes */
  for (int64_t i0 = 0; i0 < xn; i0 += group) {
    const int xg = (int)(xn - i0 < group ? xn - i0 : group);
    const int np_max = avx512 ? (xg == 1 ? 4 : xg <= 4 ? 2 : 1) : (xg == 1 ? 2 : 1);
    for (int64_t j0 = 0; j0 < n; j0 += 16 * np_max) {
      const int np = (int)((n - j0) / 16 < np_max ? (n - j0) / 16 : np_max);
      const uint8_t *codes[4], *sf[4];
      for (int p = 0; p < np; ++p) {
        codes[p] = w->codes + (j0 + 16 * p) * w->row_bytes;
        sf[p] = w->panel_sf[(j0 >> 4) + p];
      }
      /* short rows: the next group of panels is that of this call's rows, then of the
         rows after them (or the call's first again, for more rows of X) */
      mxf_cpu_stream_ahead a = {w->codes,
                                0,
                                !w->packed && 16 * np_max * w->row_bytes <= S_GROUP_AHEAD_MAX,
                                rescale,
                                w->packed != NULL,
                                w->packed ? *w->packed : (mxf_packed_geom){0}};
      if (a.copy) {
        int64_t next = j0 + 16 * np, avail = n + w->rows_after - next;
        if (next >= n && i0 + group < xn) next = 0, avail = n;
        const int64_t rows = avail < 16 * np_max ? avail : 16 * np_max;
        a.next = w->codes + next * w->row_bytes;
        a.per = rows > 0 ? mxf_cdiv(rows * w->row_bytes, 64 * kblocks) : 0;
      }
      (avx512 ? g_kernels : g_kernels2)[xg - 1][np - 1][f](w, codes, sf, kblocks, x + i0 * ldx, ldx,
                                                           acc + i0 * ld + j0, ld, &a);
    }
  }
  return 1;
}
int mxf_cpu_stream_unpack(const mxf_cpu_stream_w *w, int64_t n, int64_t kb0, int64_t kblocks, float *dst) {
  const int avx512 = w->isa == MXF_CPU_ISA_AVX512;
  if (!avx512 && w->isa != MXF_CPU_ISA_AVX2) return 0;
  if ((n & 15) || n > MXF_CPU_FILL_ROWS || kblocks <= 0 || (w->sf_vec != 16 && w->sf_vec != 32)) return 0;
  if (w->fmt != MXF_E2M1 && w->fmt != MXF_E4M3 && w->fmt != MXF_E5M2) return 0;
  for (int64_t p = 0; p < n / 16; ++p)
    (avx512 ? unpack_avx512 : unpack_avx2)(w, w->codes + 16 * p * w->row_bytes, w->panel_sf[p], kb0, kblocks,
                                           dst + p * 16 * 32 * kblocks);
  return 1;
}
#else
int mxf_cpu_stream_rows(const mxf_cpu_stream_w *w, int64_t n, int64_t kblocks, const float *x, int64_t ldx,
                        int64_t xn, int x_in_range, float *acc, int64_t ld) {
  (void)w, (void)n, (void)kblocks, (void)x, (void)ldx, (void)xn, (void)x_in_range, (void)acc, (void)ld;
  return 0;
}
int mxf_cpu_stream_unpack(const mxf_cpu_stream_w *w, int64_t n, int64_t kb0, int64_t kblocks, float *dst) {
  (void)w, (void)n, (void)kb0, (void)kblocks, (void)dst;
  return 0;
}
#endif

int mxf_cpu_stream_x_in_range(const float *x, int64_t ldx, int64_t xn, int64_t k) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < xn; ++i)
    for (int64_t j = 0; j < k; ++j) { /* |x| = 0 passes (bits - 1 wraps), as does [lo, hi] */
      uint32_t b;
      __builtin_memcpy(&b, x + i * ldx + j, 4);
      b &= 0x7FFFFFFFu;
      bad |= (uint32_t)(b - 1 < S_RESCALE_X_LO - 1) | (uint32_t)(b > S_RESCALE_X_HI);
    }
  return !bad;
}
