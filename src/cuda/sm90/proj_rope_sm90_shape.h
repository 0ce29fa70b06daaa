/*
 * proj_rope_sm90_shape.h — the compile-time shape of the sm_90a proj_rope kernel
 * (proj_rope_sm90.cu, docs/kernels/proj_rope_sm90.md) and the plain geometry its launch
 * reads, chosen with the plan (proj_rope_heuristics.cu). No includes beyond the C headers:
 * read by the kernel and by the host chooser alike.
 */
#ifndef MXF_PROJ_ROPE_SM90_SHAPE_H
#define MXF_PROJ_ROPE_SM90_SHAPE_H

#include <stddef.h>
#include <stdint.h>

namespace mxf_proj90 {

constexpr int BM = 128; /* tokens per tile */
constexpr int BN = 192; /* one head */
constexpr int BK = 64;  /* k per stage (128 bytes of bf16: one swizzle row) */
/* prepared scales of a stage (in-mainloop MXFP8 path), 16 bits each: x's, w's */
constexpr int SCX_BYTES = BM * 2 * 2, SCW_BYTES = BN * 2 * 2;
constexpr int FAST_ROPE = 64; /* the Y_SPLIT epilogue's rope columns */

/* Which kernel instance: the Y tile in f32, split into bf16 nope and f32 rope columns
 * (DeepSeek's split with bf16 staging), or the in-mainloop MXFP8 kernel. */
enum { Y_F32 = 0, Y_SPLIT = 1, Y_MX = 2 };

struct geometry {
  int mainloop; /* MXFP8 inputs converted in the mainloop (else, with MXFP8, the dequantize pre-pass) */
  int variant;  /* Y_F32, Y_SPLIT or Y_MX */
  int64_t tiles_m, nks;
  unsigned grid;      /* persistent CTAs: min(tiles, SMs) */
  unsigned sf_blocks; /* in-mainloop path: the scale preparation's blocks */
  size_t workspace;
  /* byte offsets in the workspace: the pre-pass's bf16 x at 0 and w at off_w, or the
   * in-mainloop path's prepared scales of x at 0 and of w at off_w */
  size_t off_w;
};

} /* namespace mxf_proj90 */

#endif
