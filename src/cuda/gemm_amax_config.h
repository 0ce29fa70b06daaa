/*
 * gemm_amax_config.h — what gemm_amax's heuristics decide (gemm_amax_heuristics.cu) and
 * its kernels read: the config a plan holds (docs/kernels/README.md). Host code; the sm_90a
 * kernel's tile constants live here too, since its geometry is computed on the host.
 */
#ifndef MXF_GEMM_AMAX_CONFIG_H
#define MXF_GEMM_AMAX_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"
#include "cuda/cuda_config.h"
#include "cuda/cuda_util.h"
#include "cuda/portable/gemv_shape.h"
#include "cuda/sm90/gemm_sm90_shape.h"

namespace mxf_sm90 {

/* Bytes of n values of format d. */
inline int64_t row_bytes(mxf_dtype d, int64_t n) { return n * mxf_dtype_bits(d) / 8; }

/* Byte offsets in the workspace of a geometry (wa, A's prepared scales, at 0):
 *   wa | wb | [f16 path: wa16 | wb16 | fac_a | fac_b | tile_ok_a | tile_ok_b] | partial sums | flags
 *   | [B pre-pass: B in bf16]
 * (wa16 - wa = wb16 - wb: the producer picks a side's multipliers by one offset; with the
 * pre-pass wb is empty). The f16 path's pointers are formed whether or not it runs. */
struct ws_layout {
  size_t wb, w16, wb16, fac_a, fac_b, tile_ok_a, tile_ok_b, part, flags, bp;
  int64_t f16_offset; /* wa16 - wa in 16-bit elements (kernel_args::f16_offset) */
};

/* The geometry of a problem the kernel runs: tiles, the persistent grid, the workspace. */
struct geometry {
  int fmt, nkb, rb; /* fmt, rb: A's (the register operand's) */
  int64_t kbytes;   /* bytes of one row's k values of A */
  mxf_dtype bdt;    /* B's format; with another than A's (or other scales) B takes the pre-pass */
  int bany;         /* B's format differs from A's: the pre-pass is b_convert_any */
  int64_t kbytes_b; /* bytes of one row's k values of B */
  int64_t tiles_m, tiles_n, nks;
  size_t ws_a, ws_b;                /* workspace bytes of the prepared scales */
  int64_t grid, whole, split, tail; /* the work units of unit_work */
  size_t ws_part, ws_flags;         /* workspace bytes of the split tiles' partial sums and flags */
  int f16;                          /* fp8 codes: tiles take the f16 path */
  size_t ws_f16;                    /* then: its multipliers, row factors, tile flags */
  int bp;                           /* B converted by the pre-pass (prep_bp_kernel) */
  size_t ws_bp;                     /* then: B in bf16, nks * 64 values per row */
  int bc_group;                     /* then (same formats): stages per warp item, 2 or BC_STAGES */
  int swapped;                      /* the problem is the caller's with A and B swapped: C transposed */
  int nb;                           /* tile columns: BN, or BN_NARROW (swapped, N <= 128) */
  int wg;                           /* consumer warpgroups: 2 (128-row tiles) or 3 (192-row narrow tiles) */
  int sfraw;    /* A's scale bytes read as they are (kernel_args::sfa_raw) if 16-byte aligned */
  int c_ring;   /* 16-bit C through the ring's slots (epilogue_slots) if C suits TMA */
  ws_layout ws; /* where each part of the workspace lies */
  int tm() const { return 64 * wg; } /* tile rows (smem_map_t::tm) */
  size_t sum() const { return ws_a + ws_b + ws_part + ws_flags + ws_f16 + ws_bp; }
};

/* The sm_90a kernel's config of a caller's problem. */
struct gemm_config {
  mxf_gemm_problem run; /* the problem the kernel runs: the caller's, or swapped (geometry::swapped) */
  geometry g;
  geometry g2;      /* g.wg == 3: the same problem on two warpgroups, for A's scales unaligned */
  size_t workspace; /* covers g and g2 */
};

/* The config of p on num_sms SMs (0: a default count, for the workspace bound) under
 * the override ov; false when the kernel does not run p. */
bool plan_gemm(const mxf_gemm_problem *p, int num_sms, const mxf_cuda_override *ov, gemm_config *cfg);

} /* namespace mxf_sm90 */

/* A gemm_amax plan's config (plan->impl on the CUDA backend). */
struct mxf_cuda_gemm_config {
  mxf_kernel_id kernel;
  int sms; /* of the plan's device */
  int cc;  /* its compute capability, 10 * major + minor */
  size_t workspace;
  mxf_sm90::gemm_config sm90; /* kernel == MXF_KERNEL_SM90 */
  mxf_gemv::geometry gemv;    /* kernel == MXF_KERNEL_GEMV */
};

/* Chooses the kernel of p on the device (info) under ov, fills *cfg and writes the
 * kernel's name with its config into name[name_len] ("cuda/sm90 128x256 prepass"). */
mxf_status mxf_cuda_gemm_amax_choose(const mxf_gemm_problem *p, const mxf_cuda_device_info_t *info,
                                     const mxf_cuda_override *ov, mxf_cuda_gemm_config *cfg, char *name,
                                     size_t name_len);

#endif
