/*
 * judge.h — the acceptance rule of SPEC §5 (docs/spec.md), written once: the f64
 * reference of a GEMM output with its f32-accumulation bound δ, the verdict on one
 * gemm_amax output, the amax rule, and proj_rope's reference pushed through SPEC §2.3
 * steps 2-4 with the verdict on its blocks. The CLI's --check, the demo and the C tests
 * judge through it. Built as the static library mxf_judge (formats from src/formats.h,
 * no floating-point contraction, like every reference of SPEC §2.3).
 */
#ifndef MXF_JUDGE_H
#define MXF_JUDGE_H

#include <stdint.h>

#include "mxfuse.h"

/* ------------------------------------------------------------ counts */
/* What a judge saw: outputs (gemm_amax elements, or proj_rope blocks) that are determined
 * and equal to the reference bit for bit, accepted within the bound without that
 * (undetermined ones; f32 C off its determined rounding but within δ + ulp), and wrong. */
typedef struct mxj_counts {
  int64_t exact, within, wrong;
  int64_t equal;       /* equal to the plain reference (encode(ref)), determined or not */
  int64_t max_step;    /* the largest distance in codes from the reference among `within` */
  int64_t first_wrong; /* the caller's index of the first wrong output (-1 when none) */
} mxj_counts;

void mxj_counts_init(mxj_counts *n);
/* Outputs counted. */
int64_t mxj_counts_total(const mxj_counts *n);

/* ------------------------------------------------------------ codes */
/* f32 x encoded to C dtype c by SPEC §0 (f32: its bits; e2m1: the 4-bit code). */
uint32_t mxj_encode(mxf_dtype c, float x);
/* The value of a code of C dtype c (the inverse of mxj_encode; every code is exact in f32). */
float mxj_decode(mxf_dtype c, uint32_t code);
/* Code i of an array of C dtype c (f32 bits, 16-bit words, bytes, packed e2m1). */
uint32_t mxj_code_at(mxf_dtype c, const void *p, int64_t i);
/* Position of a code on the number line (sign-magnitude -> integer, ±0 both 0, neighbours
 * one apart); *nan (may be NULL) set for NaN codes. */
int64_t mxj_code_ordinal(mxf_dtype c, uint32_t code, int *nan);

/* ------------------------------------------------------------ gemm_amax */
typedef struct mxj_ref {
  double ref;   /* alpha·Σ_k a[k]·b[k], accumulated in f64 in k order */
  double delta; /* δ (see the top of this file) */
  int wide;     /* f32 intermediates may overflow: any output is accepted */
} mxj_ref;

/* The reference of one output from its decoded operands a[0..k), b[0..k). */
mxj_ref mxj_gemm_ref(const double *a, const double *b, int64_t k, double alpha);

typedef enum mxj_verdict { MXJ_EXACT, MXJ_WITHIN, MXJ_WRONG } mxj_verdict;

/* The verdict on one output `code` of C dtype c (mxj_code_at's form), counted into n
 * (may be NULL) under the caller's index. */
mxj_verdict mxj_gemm_judge(mxf_dtype c, const mxj_ref *r, uint32_t code, mxj_counts *n, int64_t index);

/* amax: within a relative 1e-6·√K of want (the largest |ref|, or under accumulate the
 * larger previous contents), +inf exactly when want is, NaN exactly when want_nan. */
double mxj_amax_tolerance(int64_t k);
int mxj_amax_ok(float got, double want, int want_nan, int64_t k);

/* ------------------------------------------------------------ proj_rope */
/* One request as SPEC §2.2 gives it (all C-contiguous). D = nope + rope. */
typedef struct mxj_proj_inputs {
  int64_t t, k, h, d, rope;
  int mxfp8, w_out_in, fp32_epilogue;
  const void *x, *w;                /* bf16 bits, or e4m3 codes on the MXFP8 path */
  const uint8_t *x_scale, *w_scale; /* e8m0 (MXFP8 only): (T, K/32), and w's orientation */
  const uint16_t *cos, *sin;        /* (T, rope) bf16 */
} mxj_proj_inputs;

/* The four outputs of SPEC §2.4. */
typedef struct mxj_proj_outputs {
  uint8_t *q_row, *s_row, *q_col, *s_col;
} mxj_proj_outputs;

/* The reference: the outputs, per block (the layout of the scale tensors) 1 when it is
 * determined, and optionally the f32 values both directions quantize, (T, H, D). */
typedef struct mxj_proj_ref {
  mxj_proj_outputs q;
  uint8_t *det_row, *det_col;
  float *val;
} mxj_proj_ref;

/* Allocates r for T, H, D (val only when with_values); -1 when out of memory (r freed). */
int mxj_proj_ref_alloc(mxj_proj_ref *r, int64_t t, int64_t h, int64_t d, int with_values);
void mxj_proj_ref_free(mxj_proj_ref *r);

/*
 * Fills r for the 32-token blocks tb with tb_sel[tb] set and the heads h with h_sel[h]
 * set (NULL: all): y from the decoded inputs in f64 with its bound δ (alpha 1), staged
 * through bf16 (unless the fp32 epilogue), RoPE in f32, then both directions by the MXFP8
 * rule of formats.h. A staged y is determined when bf16(ref - δ) = bf16(ref + δ) (fp32
 * epilogue: the f32 roundings), a feature when its y is (a RoPE feature: both values of
 * its pair), a block when all its features are. progress (may be NULL) is called once
 * per head with (ctx, heads done, heads). Returns -1 when out of memory.
 */
int mxj_proj_reference(const mxj_proj_inputs *in, const uint8_t *tb_sel, const uint8_t *h_sel,
                       mxj_proj_ref *r, void (*progress)(void *ctx, double done, double total), void *ctx);

/* One direction's verdict: blocks exact / within (= undetermined, not judged) / wrong,
 * `equal` the blocks equal to the reference, max_step the largest code distance inside
 * undetermined blocks, first_wrong the index of a wrong block's scale byte; scale bytes
 * and codes equal to the reference; and cuDNN's criterion, dequantized values within
 * 0.1 + 0.1·|ref| (only when r->val is kept). */
typedef struct mxj_proj_counts {
  mxj_counts blocks;
  int64_t scales, scales_equal, codes, codes_equal;
  int64_t close, close_n;
} mxj_proj_counts;

/* Judges got against r over the selected blocks: out[0] rows, out[1] columns. */
void mxj_proj_judge(const mxj_proj_inputs *in, const uint8_t *tb_sel, const uint8_t *h_sel,
                    const mxj_proj_ref *r, const mxj_proj_outputs *got, mxj_proj_counts out[2]);
/* cuDNN's acceptance: at least 95 % of the dequantized values close (1 when none counted). */
int mxj_cudnn_ok(const mxj_proj_counts *c);
double mxj_share(int64_t part, int64_t whole); /* part / whole, 1 when whole is 0 */

#endif /* MXF_JUDGE_H */
