/*
 * gemm_sm90_shape.h — the compile-time shape of the sm_90a gemm_amax kernel
 * (docs/kernels/gemm_amax_sm90.md): its tiles and stage groups, read by the kernel and by
 * its chooser (gemm_amax_heuristics.cu) alike.
 */
#ifndef MXF_GEMM_SM90_SHAPE_H
#define MXF_GEMM_SM90_SHAPE_H

#include <stdint.h>

#include "cuda/sm90/sm90_fmt.h"

namespace mxf_sm90 {

constexpr int BM = 128;           /* tile rows (A side), two consumer warpgroups x 64 */
constexpr int BN = 256;           /* tile columns (B side), one wgmma N */
constexpr int BN_NARROW = 128;    /* the swapped runs' narrow tile columns (N <= 128) */
constexpr int BK = 64;            /* k values per stage */
constexpr int SP_STAGES = 8;      /* k-stages of one scale-preparation item */
constexpr int BC_STAGES = 8;      /* the B pre-pass's wide stage group */
constexpr int64_t BP_TILES_M = 6; /* rows of tiles from which B goes through the pre-pass */

} /* namespace mxf_sm90 */

#endif
