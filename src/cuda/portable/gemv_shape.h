/*
 * gemv_shape.h — the compile-time shape of the weight-streaming gemm_amax kernel
 * (gemm_amax_gemv.cu, docs/kernels/gemm_amax_gemv.md): what the kernel is built with and
 * what its geometry (gemm_amax_heuristics.cu) is computed from. Plain constants, no
 * includes: read by the kernel and by the host chooser alike.
 */
#ifndef MXF_GEMV_SHAPE_H
#define MXF_GEMV_SHAPE_H

#include <stddef.h>

namespace mxf_gemv {

constexpr int MAX_WARPS = 8;     /* warps of a CTA, splitting its tile's K among them */
constexpr int CHUNK = 64;        /* k per chunk */
constexpr int RING = 8192;       /* bytes of a warp's ring of chunks in shared memory */
constexpr int MAX_SF = 16384;    /* bytes of the CTA's scales in shared memory (caps a split's K) */
constexpr int WARPS_PER_SM = 16; /* the geometry's aim: warps in flight per SM ... */
constexpr int SPLIT_BELOW = 8;   /* ... and the count below which a tile's K is split over CTAs */

/* 16-row MMA tiles of B per warp: two where the accumulators leave room (MT <= 2), so one
 * chunk's activations serve 32 rows */
constexpr int rows_of(int mt) { return mt <= 2 ? 2 : 1; }

/* Bytes of the scales (load_scales) a chunk takes in shared memory: 2 blocks x 16 TR rows
 * x 16 bits; and the most chunks a split may have for them to fit in MAX_SF. */
constexpr int sf_chunk_bytes(int tr) { return 2 * 16 * tr * 2; }
constexpr int max_split_chunks(int tr) { return MAX_SF / sf_chunk_bytes(tr); }

/* A run's geometry, chosen once with the plan (gemm_amax_heuristics.cu) and read by the
 * launch. Workspace: [MX A in bf16: ws_a] [split counters: ws_counters] [partials: ws_part]. */
struct geometry {
  int mt, tr, warps, tiles, splits, chunks_per_split, chunks_per_warp, nchunks;
  size_t ws_a, ws_counters, ws_part;
  size_t off_counters, off_part; /* byte offsets in the workspace (the bf16 A at 0) */
  int pdl;                       /* the kernel starts early after the preparation launch */
  size_t total() const { return ws_a + ws_counters + ws_part; }
};

} /* namespace mxf_gemv */

#endif
