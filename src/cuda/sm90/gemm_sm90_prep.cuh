/*
 * gemm_sm90_prep.cuh — the launches before the Hopper gemm_amax kernel: the f16 path's row
 * factors (sf_rows_kernel), the scale preparation (sf_prepare_kernel) and the B pre-pass
 * (prep_bp_kernel, prep_bp_any_kernel for mixed pairs). Included by gemm_amax_sm90.cu only
 * (it defines kernels).
 */
#ifndef MXF_GEMM_SM90_PREP_CUH
#define MXF_GEMM_SM90_PREP_CUH

#include "cuda/sm90/gemm_sm90_common.cuh"

namespace mxf_sm90 {

/* ------------------------------------------------------------ scale preparation */
struct rows_args {
  const uint8_t *sfa, *sfb;
  float *fac_a, *fac_b;
  int *tile_ok_a, *tile_ok_b;
  int64_t m, n, kb;
  int tiles_m, tiles_n, l;
  mxf_sf_layout la, lb;
};

/* A row's scale bytes are read as quads, k-blocks 4G .. 4G + 3: consecutive bytes in both
 * layouts, quad G + 1 lying sf_quad_step bytes after quad G. `on` bit j: k-block 4G + j
 * exists (the others read as 0). */
__device__ __forceinline__ int64_t sf_quad_step(mxf_sf_layout lay) { return lay == MXF_SF_COMPACT ? 4 : 512; }
__device__ __forceinline__ uint32_t sf_quad_on(int64_t kb_left) {
  return kb_left >= 4 ? 0xFu : kb_left > 0 ? (1u << kb_left) - 1u : 0u;
}
__device__ __forceinline__ uint32_t sf_quad(const uint8_t *src, uint32_t on, mxf_sf_layout lay) {
  if (on == 0xFu && lay != MXF_SF_COMPACT) return __ldg(reinterpret_cast<const uint32_t *>(src)); /* 4-byte aligned */
  uint32_t w = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j)
    if ((on >> j) & 1u) w |= (uint32_t)__ldg(src + j) << (8 * j);
  return w;
}

/* The f16 path's row factors (sm90_dequant.cuh): 8 lanes per (batch, side, tile, row),
 * lane c taking the row's quads c, c + 8, ...; rows beyond M / N get 1.0. The lane 0 of a
 * tile's row 0 marks the tile as qualifying; sf_prepare_kernel, launched after, clears the
 * mark when a row of the tile does not. */
template <int FMT>
__global__ void __launch_bounds__(256) sf_rows_kernel(const rows_args a) {
  const int rows_l = a.tiles_m * BM + a.tiles_n * BN; /* rows per batch */
  const int total = a.l * rows_l, c = threadIdx.x & 7;
  const int nq = (int)((a.kb + 3) / 4);
  for (int w0 = ((blockIdx.x * blockDim.x + threadIdx.x) >> 5) * 4; w0 < total; w0 += ((gridDim.x * blockDim.x) >> 5) * 4) {
    const int wi = w0 + ((threadIdx.x & 31) >> 3); /* every lane of the warp runs the shuffles */
    const int l = wi / rows_l, i = wi - l * rows_l;
    const bool is_a = i < a.tiles_m * BM;
    const int j = is_a ? i : i - a.tiles_m * BM, lg = is_a ? 7 : 8;
    const int tile = j >> lg, r = j & ((1 << lg) - 1), tiles = is_a ? a.tiles_m : a.tiles_n;
    const int64_t mn = is_a ? a.m : a.n, row = (int64_t)j;
    const bool live = wi < total && row < mn;
    uint32_t hi = 0u, lo = 0xFFFFFFFFu, nan = 0u; /* per byte lane */
    if (live) {
      const mxf_sf_layout lay = is_a ? a.la : a.lb;
      const uint8_t *base = (is_a ? a.sfa : a.sfb) + mxf_gemm_sf_offset(lay, mn, a.kb, row, 0, l);
      const int64_t step = sf_quad_step(lay);
#pragma unroll 2
      for (int q = c; q < nq; q += 8) {
        const uint32_t on = sf_quad_on(a.kb - 4 * (int64_t)q);
        const uint32_t w = sf_quad(base + q * step, on, lay);
        const uint32_t mask = (on & 1u ? 0xFFu : 0u) | (on & 2u ? 0xFF00u : 0u) | (on & 4u ? 0xFF0000u : 0u) |
                              (on & 8u ? 0xFF000000u : 0u);
        nan |= __vcmpeq4(w, 0xFFFFFFFFu) & mask;
        hi = __vmaxu4(hi, w & mask);
        lo = __vminu4(lo, w | ~mask);
      }
    }
#pragma unroll
    for (int off = 4; off > 0; off >>= 1) {
      nan |= __shfl_xor_sync(0xFFFFFFFFu, nan, off);
      hi = __vmaxu4(hi, __shfl_xor_sync(0xFFFFFFFFu, hi, off));
      lo = __vminu4(lo, __shfl_xor_sync(0xFFFFFFFFu, lo, off));
    }
    if (wi < total && c == 0) {
      uint32_t bits = 0x3F800000u;
      if (live) {
        const uint32_t h2 = __vmaxu4(hi, hi >> 16), l2 = __vminu4(lo, lo >> 16 | 0xFFFF0000u);
        bits = f16_row_factor<FMT>(max(h2 & 0xFFu, (h2 >> 8) & 0xFFu), min(l2 & 0xFFu, (l2 >> 8) & 0xFFu), nan != 0u);
      }
      (is_a ? a.fac_a : a.fac_b)[(((int64_t)l * tiles + tile) << lg) + r] = __uint_as_float(bits);
      if (r == 0) (is_a ? a.tile_ok_a : a.tile_ok_b)[l * tiles + tile] = 1;
    }
  }
}

/*
 * Scale preparation: one thread per (side, batch, tile, group of SP_STAGES k-stages, row).
 * It loads the group's scale bytes as quads (sf_quad) before converting any, then stores
 * each stage's nkb multipliers in one store (two with the f16 path's); a warp's stores of
 * a stage are 32 consecutive rows.
 */

template <int NKB> __device__ __forceinline__ void sf_prepare_item(const prep_args &a, int e) {
  constexpr int NQ = SP_STAGES * NKB / 4; /* quads per item */
  const int ngr = (a.nks + SP_STAGES - 1) / SP_STAGES;
  const bool is_a = e < a.items_a;
  const int i = is_a ? e : e - a.items_a;
  const int lg = is_a ? 7 : 8; /* log2 of BM, BN */
  const int r = i & ((1 << lg) - 1), rest = i >> lg;
  const int gr = rest % ngr, tl = rest / ngr;
  const int tiles = is_a ? a.tiles_m : a.tiles_n;
  const int tile = tl % tiles, l = tl / tiles;
  const int64_t mn = is_a ? a.m : a.n, row = ((int64_t)tile << lg) + r;
  const mxf_sf_layout lay = is_a ? a.la : a.lb;
  /* the f16 path: factor bits of the row (0: it does not qualify, its tile never takes
   * the path, the values are left at 1.0) */
  const uint32_t fbits = a.wa16 ? __float_as_uint((is_a ? a.fac_a : a.fac_b)[((int64_t)tl << lg) + r]) : 0u;
  if (a.wa16 && gr == 0 && fbits == 0) (is_a ? a.tile_ok_a : a.tile_ok_b)[tl] = 0; /* a row that does not qualify */
  const int64_t q0 = (int64_t)gr * NQ; /* the item's first quad */
  const uint8_t *base = (is_a ? a.sfa : a.sfb) + (row < mn ? mxf_gemm_sf_offset(lay, mn, a.kb, row, 0, l) : 0);
  const int64_t step = sf_quad_step(lay);
  uint32_t w[NQ], on[NQ];
#pragma unroll
  for (int q = 0; q < NQ; ++q) {
    on[q] = row < mn ? sf_quad_on(a.kb - 4 * (q0 + q)) : 0u;
    w[q] = sf_quad(base + (q0 + q) * step, on[q], lay);
  }
#pragma unroll
  for (int q = 0; q < NQ; ++q) {
    uint32_t p01, p23, h01 = 0, h23 = 0;
    scale_quad(w[q], on[q], a.ue4m3, p01, p23);
    if (a.wa16) f16_quad(w[q], on[q], fbits, h01, h23);
    /* the quad's stages: two (NKB 2: k-blocks 0, 1 and 2, 3) or one */
#pragma unroll
    for (int h = 0; h < 4 / NKB; ++h) {
      const int ks = gr * SP_STAGES + q * (4 / NKB) + h;
      if (ks >= a.nks) break;
      const int64_t off = ((((int64_t)tl * a.nks + ks) << lg) + r) * NKB;
      uint16_t *dst = (is_a ? a.wa : a.wb) + off, *dst16 = a.wa16 ? (is_a ? a.wa16 : a.wb16) + off : nullptr;
      if (NKB == 2) {
        *reinterpret_cast<uint32_t *>(dst) = h ? p23 : p01;
        if (dst16) *reinterpret_cast<uint32_t *>(dst16) = h ? h23 : h01;
      } else {
        *reinterpret_cast<uint2 *>(dst) = make_uint2(p01, p23);
        if (dst16) *reinterpret_cast<uint2 *>(dst16) = make_uint2(h01, h23);
      }
    }
  }
}

__device__ __forceinline__ void sf_prepare_blocks(const prep_args &a, int bx, int nbx) {
  for (int e = bx * blockDim.x + threadIdx.x; e < a.items_a + a.items_b; e += nbx * blockDim.x) {
    if (a.nkb == 2) sf_prepare_item<2>(a, e);
    else sf_prepare_item<4>(a, e);
  }
  if (bx == 0)
    for (int i = threadIdx.x; i < a.nflags; i += blockDim.x) a.flags[i] = 0;
  if (bx == 0 && threadIdx.x == 0) {
    /* the amax contract of amax.cuh: overwrite -> +0; accumulate -> -0/negatives -> +0,
     * NaN -> 0x7FFFFFFF, so one unsigned atomicMax per CTA is exact */
    unsigned int *p = reinterpret_cast<unsigned int *>(a.amax);
    *p = a.accumulate ? mxf_amax_canonical(*p) : 0u;
  }
}

/* The gemm kernel is launched as a programmatic dependent of the preparation kernel: the
 * preparation lets it be scheduled at once, and it waits (mxf_pdl_wait) for the
 * preparation's results before reading any. */
__global__ void __launch_bounds__(256) sf_prepare_kernel(const prep_args a) {
  mxf_pdl_allow_dependents();
  sf_prepare_blocks(a, blockIdx.x, gridDim.x);
}

/*
 * The B pre-pass. With many rows of tiles, every B tile is converted once per row of
 * tiles in the mainloop, and the conversion's shared-memory traffic (raw reads, the bf16
 * tile's stores, the barrier between the warpgroups) is what bounds the kernel
 * (docs/decisions.md, gemm_amax: the B pre-pass).
 * Then B is converted once, here, to bf16 in the workspace: row n of batch l is
 * nks * 64 values, stage by stage, each stage's 64 in the order the consumers' A fragments
 * use (k16 step s, position 2 qq + e of its first and second half: raw k 16 qq + 4 s + j,
 * j = 2 half + e for fp8, half + 2 e for e2m1 — dequant_word's pairs), so a TMA box of it
 * is the tile the wgmmas read. Values: code * scale rounded once to bf16 with the
 * mainloop's modes (one product when scale * 2^c fits bf16, two otherwise, NaN/inf codes
 * exact); k beyond K reads 0; k-blocks beyond the scales' K get scale 1.0.
 *
 * A warp takes 4 rows (8 lanes each) and G consecutive stages of them: lane c of a row
 * writes the 16-byte chunk c of every stage (k16 step c / 2, its first or second half),
 * so each store covers 4 whole 128-byte lines. The group's code words are all loaded
 * before the first is converted; lane c < G reads and converts the scales of the group's
 * stage c, which the row's lanes then take by shuffle. G is 8 (BC_STAGES), or 2 when that
 * leaves fewer than 8 warps a SM (geometry::bc_group): a warp's chain of loads and conversions is
 * what the pass waits for then, and at 128 x 24576 x 1536 groups of 2 made the whole call
 * 10 % faster (groups of 2 on the large shapes: +1 %; docs/decisions.md, gemm_amax: the B pre-pass).
 */
struct bconv_args {
  const uint8_t *b, *sfb;
  uint4 *out;
  int64_t b_row, b_bat, kbytes, n, kb;
  int64_t units;                  /* (4-row group, stage group) pairs */
  int64_t rows;                   /* l * n */
  int nks, ngr, nkb, rb, ue4m3;   /* ngr: stage groups per row */
  mxf_sf_layout lb;
};

template <int FMT, int G> __device__ __forceinline__ void b_convert_blocks(const bconv_args &a, int bx, int nbx) {
  constexpr uint32_t K = fmt_consts<FMT>::K;
  const int lane = threadIdx.x & 31, c = lane & 7, half = c & 1, st = c >> 1;
  const int src0 = lane & ~7; /* the row's first lane */
  /* the byte offset of word qq in a stage: fp8 16 qq + 4 st; e2m1 8 qq + 4 (st / 2), of
   * which the 16-bit half st % 2 */
  const int woff = FMT == FMT_E2M1 ? 4 * (st >> 1) : 4 * st, wstep = FMT == FMT_E2M1 ? 8 : 16;
  const int e2hi = FMT == FMT_E2M1 ? (st & 1) : 0;
  for (int64_t u = ((int64_t)bx * blockDim.x + threadIdx.x) >> 5; u < a.units; u += ((int64_t)nbx * blockDim.x) >> 5) {
    const int64_t rq = u / a.ngr;
    const int ks0 = (int)(u - rq * a.ngr) * G;
    const int nst = min(G, a.nks - ks0);
    const int64_t rr = 4 * rq + (lane >> 3);
    const bool valid = rr < a.rows;
    const int64_t l = valid ? rr / a.n : 0, n = valid ? rr - l * a.n : 0;
    const uint8_t *src = a.b + l * a.b_bat + n * a.b_row + (int64_t)ks0 * a.rb + woff;
    /* the group's code words; zero beyond K */
    uint32_t w[G][4];
    const int64_t left = a.kbytes - (int64_t)ks0 * a.rb - woff; /* code bytes from src on */
    const bool whole = (int64_t)(ks0 + nst) * a.rb <= a.kbytes; /* a word ends at most 4 bytes before its stage */
    if (valid && whole && nst == G) { /* all but a row's last group when K % (64 G) != 0 */
#pragma unroll
      for (int s = 0; s < G; ++s)
#pragma unroll
        for (int qq = 0; qq < 4; ++qq) w[s][qq] = __ldg(reinterpret_cast<const uint32_t *>(src + s * a.rb + qq * wstep));
    } else {
#pragma unroll
      for (int s = 0; s < G; ++s)
#pragma unroll
        for (int qq = 0; qq < 4; ++qq) {
          const int64_t off = (int64_t)s * a.rb + qq * wstep;
          uint32_t v = 0;
          if (valid && s < nst) {
            if (whole) {
              v = __ldg(reinterpret_cast<const uint32_t *>(src + off));
            } else {
              for (int b = 0; b < 4; ++b)
                if (off + b < left) v |= (uint32_t)src[off + b] << (8 * b);
            }
          }
          w[s][qq] = v;
        }
    }
    /* lane c: the scales of stage ks0 + c as bf16 pairs (k-blocks 0,1 and 2,3) */
    uint32_t s01 = 0x3F803F80u, s23 = 0x3F803F80u;
    if (valid && c < nst) {
      const int64_t kb0 = (int64_t)(ks0 + c) * a.nkb;
      const uint8_t *sf = a.sfb + mxf_gemm_sf_offset(a.lb, a.n, a.kb, n, kb0, l);
      const uint32_t on = sf_quad_on(a.kb - kb0) & ((1u << a.nkb) - 1u); /* the stage's k-blocks */
      const uint32_t sw = sf_quad(sf, on, a.lb) | (a.nkb == 2 ? 0x7F7F0000u : 0u); /* past nkb: unused, 1.0 */
      scale_quad(sw, a.nkb == 2 ? on | 0xCu : on, a.ue4m3, s01, s23);
    }
    uint4 *dst = a.out + ((rr * a.nks + ks0) << 3) + c;
#pragma unroll
    for (int s = 0; s < G; ++s) {
      const uint32_t p01 = __shfl_sync(0xFFFFFFFFu, s01, src0 + s), p23 = __shfl_sync(0xFFFFFFFFu, s23, src0 + s);
      if (!valid || s >= nst) continue;
      /* word qq's scale pair: k-block qq / 2 of the stage (nkb 2) or qq (nkb 4) */
      const auto pick = [&](uint32_t x01, uint32_t x23, int qq) {
        const uint32_t pr = a.nkb == 2 || qq < 2 ? x01 : x23;
        return prmt(pr, 0u, (a.nkb == 2 ? (qq >> 1) : (qq & 1)) ? 0x3232u : 0x1010u);
      };
      uint32_t special = 0;
      if constexpr (FMT != FMT_E2M1) {
#pragma unroll
        for (int qq = 0; qq < 4; ++qq) special |= fp8_special<FMT>(w[s][qq]);
        special &= 0x80808080u;
      }
      const uint32_t over = fold_check<FMT>(p01) | (a.nkb == 2 ? 0u : fold_check<FMT>(p23));
      uint32_t o[4];
      if (special) {
#pragma unroll
        for (int qq = 0; qq < 4; ++qq) {
          uint32_t h0, h1;
          const uint32_t s2 = pick(p01, p23, qq);
          dequant_word<FMT, FMT == FMT_E2M1 ? MODE_TWO : MODE_EXACT>(w[s][qq], w[s][qq] << 4, e2hi, s2, s2, h0, h1);
          o[qq] = half ? h1 : h0;
        }
      } else if (MXF_FOLD_OVER(over)) {
#pragma unroll
        for (int qq = 0; qq < 4; ++qq)
          o[qq] = bf16x2_mul(bf16x2_mul(place_pair<FMT>(w[s][qq], w[s][qq] << 4, e2hi, half), K), pick(p01, p23, qq));
      } else {
        const uint32_t f01 = fold_scale<FMT>(p01), f23 = a.nkb == 2 ? f01 : fold_scale<FMT>(p23);
#pragma unroll
        for (int qq = 0; qq < 4; ++qq)
          o[qq] = bf16x2_mul(place_pair<FMT>(w[s][qq], w[s][qq] << 4, e2hi, half), pick(f01, f23, qq));
      }
      dst[8 * s] = make_uint4(o[0], o[1], o[2], o[3]);
    }
  }
}

/* With the B pre-pass, A's scale preparation (blocks [0, pblocks)) and B's conversion (the
 * rest, in groups of G stages) in one launch. */
template <int FMT, int G>
__global__ void __launch_bounds__(256) prep_bp_kernel(const prep_args pa, const bconv_args ba, int pblocks) {
  mxf_pdl_allow_dependents();
  if ((int)blockIdx.x < pblocks) sf_prepare_blocks(pa, blockIdx.x, pblocks);
  else b_convert_blocks<FMT, G>(ba, blockIdx.x - pblocks, gridDim.x - pblocks);
}

/*
 * The B pre-pass of a mixed pair (A and B in different formats, docs/spec.md §1.1): the
 * same bf16 tile layout as b_convert_blocks, in the k order of the register operand A's
 * fragments (E2: A is e2m1), from B codes of any MX format or from bf16 B (a copy). One
 * thread per 16-byte chunk of the layout (8 values; the 8 chunks of a row's stage on
 * consecutive threads, so the stores are whole lines), element by element with formats.h:
 * code * scale in f32 is exact for every pair of formats (at most 8 significant bits,
 * exponents inside f32's range down to its subnormals), rounded once to bf16 (exact
 * inside SPEC §1.2's window), NaN / inf kept; k beyond K is 0 (its scale never read).
 */
struct bany_args {
  const uint8_t *b, *sfb;
  uint4 *out;
  int64_t b_row, b_bat;           /* bytes */
  int64_t n, k, kb, chunks;       /* chunks: l * n * nks * 8 */
  int nks, sf_shift, ue4m3;       /* sf_shift: log2 sf_vec */
  int idx32;                      /* chunks < 2^32: 32-bit index arithmetic */
  mxf_sf_layout lb;
};

template <int BDT> __device__ __forceinline__ float b_any_code(const uint8_t *row, int64_t k) {
  if constexpr (BDT == MXF_E2M1) return mxf_e2m1_to_f32(mxf_e2m1_get(row, k));
  else if constexpr (BDT == MXF_E4M3) return mxf_e4m3_to_f32(row[k]);
  else return mxf_e5m2_to_f32(row[k]);
}

template <bool E2, int BDT> __device__ __forceinline__ void b_convert_any(const bany_args &a, int bx, int nbx) {
  for (int64_t i = (int64_t)bx * blockDim.x + threadIdx.x; i < a.chunks; i += (int64_t)nbx * blockDim.x) {
    const int c = (int)(i & 7), st = c >> 1, half = c & 1;
    int64_t l, n;
    int ks;
    if (a.idx32) {
      const uint32_t u = (uint32_t)(i >> 3), rr = u / (uint32_t)a.nks, l32 = rr / (uint32_t)a.n;
      ks = (int)(u - rr * (uint32_t)a.nks), l = l32, n = rr - l32 * (uint32_t)a.n;
    } else {
      const int64_t u = i >> 3, rr = u / a.nks;
      ks = (int)(u - rr * a.nks), l = rr / a.n, n = rr - l * a.n;
    }
    const uint8_t *row = a.b + l * a.b_bat + n * a.b_row;
    uint32_t o[4];
#pragma unroll
    for (int qq = 0; qq < 4; ++qq) {
      /* the pair (k0, k0 + dk): fp8 fragments k 16 qq + 4 st + 2 half + e, e2m1 ones + half + 2 e */
      const int64_t k0 = (int64_t)ks * BK + 16 * qq + 4 * st + (E2 ? half : 2 * half), dk = E2 ? 2 : 1;
      if constexpr (BDT == MXF_BF16) {
        const uint16_t *r16 = reinterpret_cast<const uint16_t *>(row);
        const uint32_t lo = k0 < a.k ? r16[k0] : 0u, hi = k0 + dk < a.k ? r16[k0 + dk] : 0u;
        o[qq] = lo | hi << 16;
      } else {
        /* k0 and k0 + dk lie in one block of 16 */
        const float sc =
            k0 < a.k ? mxf_scale_to_f32(a.sfb[mxf_gemm_sf_offset(a.lb, a.n, a.kb, n, k0 >> a.sf_shift, l)], a.ue4m3)
                     : 0.0f;
        const float v0 = k0 < a.k ? b_any_code<BDT>(row, k0) * sc : 0.0f;
        const float v1 = k0 + dk < a.k ? b_any_code<BDT>(row, k0 + dk) * sc : 0.0f;
        o[qq] = (uint32_t)mxf_f32_to_bf16(v0) | (uint32_t)mxf_f32_to_bf16(v1) << 16;
      }
    }
    a.out[i] = make_uint4(o[0], o[1], o[2], o[3]);
  }
}

template <bool E2, int BDT>
__global__ void __launch_bounds__(256) prep_bp_any_kernel(const prep_args pa, const bany_args ba, int pblocks) {
  mxf_pdl_allow_dependents();
  if ((int)blockIdx.x < pblocks) sf_prepare_blocks(pa, blockIdx.x, pblocks);
  else b_convert_any<E2, BDT>(ba, blockIdx.x - pblocks, gridDim.x - pblocks);
}

} /* namespace mxf_sm90 */

#endif
