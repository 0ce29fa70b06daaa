/*
 * proj_rope_portable_shape.h — the compile-time shape of the portable proj_rope kernel
 * (proj_rope_portable.cu, docs/kernels/portable.md) and the plain geometry its
 * launch reads, chosen with the plan (proj_rope_heuristics.cu). Read by the kernel and by
 * the host chooser alike.
 */
#ifndef MXF_PROJ_ROPE_PORTABLE_SHAPE_H
#define MXF_PROJ_ROPE_PORTABLE_SHAPE_H

#include <stddef.h>
#include <stdint.h>

namespace mxf_projp {

constexpr int BM = 64, BK = 32, LDS = BK + 8;

/* Shared memory of the mainloop's two stages with NC columns a CTA pass, and of the Y
 * tile staged in shared memory (D + 8 floats a row). */
constexpr int mainloop_smem(int nc) { return 2 * (BM + nc) * LDS * 2; }
constexpr int stage_bytes(int64_t d) { return (int)(BM * (d + 8) * 4); }

struct geometry {
  int nc64;         /* 64 columns a pass (D % 64 == 0), else 32 */
  int smem;         /* dynamic shared memory of a CTA */
  size_t workspace; /* 0, or the global Y tiles when one does not fit in shared memory (at 0) */
};

} /* namespace mxf_projp */

#endif
