/*
 * gemm_sm90_mainloop.cuh — the Hopper gemm_amax kernel's mainloop: its shared-memory map,
 * the dequantization of A's fragments in registers (and of B into the bf16 ring without
 * the pre-pass), the raw-scale path, the f16 path, and the consumer loops.
 */
#ifndef MXF_GEMM_SM90_MAINLOOP_CUH
#define MXF_GEMM_SM90_MAINLOOP_CUH

#include "cuda/sm90/gemm_sm90_common.cuh"

namespace mxf_sm90 {

/* ------------------------------------------------------------ shared memory map */
/* BP = 0: stages of raw A, raw B and both scales, then the bf16 B ring; BP = 1 (B from the
 * pre-pass): stages of raw A, B's bf16 tile (raw_b) and A's scales. */
template <int BP, int NB = BN, int WG = 2> struct smem_map_t {
  static_assert(NB == BN || BP, "the narrow tile runs with the B pre-pass only");
  static_assert(WG == 2 || (BP && NB == BN_NARROW), "three consumer warpgroups: narrow tile only");
  static constexpr int tm = 64 * WG;          /* tile rows */
  static constexpr int raw_a_bytes = tm * 64; /* a stage's raw A (fp8; e2m1 uses half) */
  static constexpr int ns = BP ? bp_ns(NB, WG) : NS, stage = BP ? bp_stage(NB, WG) : STAGE;
  static constexpr int bp_tile = NB * BK * 2; /* bytes of a stage's bf16 B tile (pre-pass) */
  static constexpr int ring = ns * stage + (BP ? 0 : NBB * BBUF); /* bytes before the barriers */
  uint32_t base; /* shared-window address, 1024-aligned */
  __device__ __forceinline__ uint32_t raw_a(int s) const { return base + s * stage; }
  __device__ __forceinline__ uint32_t raw_b(int s) const { return base + s * stage + raw_a_bytes; }
  __device__ __forceinline__ uint32_t sf_a(int s) const {
    return base + s * stage + raw_a_bytes + (BP ? bp_tile : RAW_B);
  }
  __device__ __forceinline__ uint32_t sf_b(int s) const { return sf_a(s) + SF_A; }
  __device__ __forceinline__ uint32_t bbuf(int i) const { return base + NS * STAGE + i * BBUF; }
  __device__ __forceinline__ uint32_t full(int i) const { return base + ring + 8 * i; }
  __device__ __forceinline__ uint32_t empty(int i) const { return full(ns) + 8 * i; }
  __device__ __forceinline__ uint32_t amax() const { return full(2 * ns); }
  /* slot i's C to store (kernel_args::c_ring): 3 words, see epilogue_slots */
  __device__ __forceinline__ uint32_t cst(int i) const { return amax() + 8 + 12 * i; }
  __device__ __forceinline__ uint32_t epi(int w) const { return base + ring + 256 + w * EPI; }
  __device__ __forceinline__ uint32_t factors(int i) const { return epi(4 * WG) + i * FAC; }
};
using smem_map = smem_map_t<0>;

/* Raw codes and scales of one stage as one consumer thread sees them. */
struct stage_regs {
  uint32_t a0[4], a1[4];  /* A rows ar0, ar0 + 8: raw words s = 0..3 (e2m1: 2 per register) */
  uint32_t b[4][4];       /* B row: raw word s of thread-q's k range, [q][s] */
};
struct stage_scales {
  uint32_t a0, a1;        /* A scales (bf16x2, or f16x2 on the f16 path) */
  uint32_t b[4];          /* B scales per q */
};

/* Converts a stage's A fragment into fr. */
template <int FMT, int MODE>
__device__ __forceinline__ void convert_a(const stage_regs &r, const stage_scales &sc, uint32_t (&fr)[16]) {
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const int reg = FMT == FMT_E2M1 ? (s >> 1) : s;
    const int hi = FMT == FMT_E2M1 ? (s & 1) : 0;
    dequant_word<FMT, MODE>(r.a0[reg], r.a0[reg] << 4, hi, sc.a0, sc.a0, fr[4 * s + 0], fr[4 * s + 2]);
    dequant_word<FMT, MODE>(r.a1[reg], r.a1[reg] << 4, hi, sc.a1, sc.a1, fr[4 * s + 1], fr[4 * s + 3]);
  }
}

/* Converts a stage's A fragment into fr and (WB) its B row into the bf16 tile row at bt. */
template <int FMT, int MODE, bool WB = true>
__device__ __forceinline__ void convert_stage(const stage_regs &r, const stage_scales &sc, uint32_t (&fr)[16],
                                              uint32_t bt, int n) {
  convert_a<FMT, MODE>(r, sc, fr);
  if constexpr (WB) {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      uint32_t h0[4], h1[4];
#pragma unroll
      for (int qq = 0; qq < 4; ++qq) {
        const uint32_t w = r.b[qq][FMT == FMT_E2M1 ? (s >> 1) : s];
        dequant_word<FMT, MODE>(w, w << 4, FMT == FMT_E2M1 ? (s & 1) : 0, sc.b[qq], sc.b[qq], h0[qq], h1[qq]);
      }
      sts_v4(bt + (((2 * s) ^ (n & 7)) << 4), h0[0], h0[1], h0[2], h0[3]);
      sts_v4(bt + (((2 * s + 1) ^ (n & 7)) << 4), h1[0], h1[1], h1[2], h1[3]);
    }
  }
}

/* fp8_special over the A words of a stage (0 for e2m1), before the mask */
template <int FMT> __device__ __forceinline__ uint32_t a_special(const stage_regs &r) {
  uint32_t special = 0;
  if constexpr (FMT != FMT_E2M1) {
#pragma unroll
    for (int s = 0; s < 4; ++s) special |= fp8_special<FMT>(r.a0[s]) | fp8_special<FMT>(r.a1[s]);
  }
  return special;
}

/* The bf16 path of a stage (WB: A and B; else A alone): NaN/inf codes anywhere in this
 * thread's words -> exact; a scale too large to fold 2^c into -> two products; else one
 * product per pair. */
template <int FMT, bool WB = true>
__device__ __forceinline__ void convert_stage_bf16(const stage_regs &r, const stage_scales &sc, uint32_t (&fr)[16],
                                                   uint32_t bt, int n) {
  uint32_t special = a_special<FMT>(r);
  if constexpr (FMT != FMT_E2M1) {
    if constexpr (WB) {
#pragma unroll
      for (int c = 0; c < 4; ++c)
#pragma unroll
        for (int s = 0; s < 4; ++s) special |= fp8_special<FMT>(r.b[c][s]);
    }
    special &= 0x80808080u;
  }
  uint32_t over = fold_check<FMT>(sc.a0) | fold_check<FMT>(sc.a1);
  if constexpr (WB) {
#pragma unroll
    for (int c = 0; c < 4; ++c) over |= fold_check<FMT>(sc.b[c]);
  }

  /* one mode per warp: lanes in different modes would run both paths one after the other
   * (with MXFP4 activations, scales above 2^1 are common and need MODE_TWO) */
  const bool w_special = FMT != FMT_E2M1 && __any_sync(0xFFFFFFFFu, special != 0);
  const bool w_over = __any_sync(0xFFFFFFFFu, MXF_FOLD_OVER(over));
  if (!w_special && !w_over) {
    stage_scales fs; /* folded scales: scale * 2^c */
    fs.a0 = fold_scale<FMT>(sc.a0);
    fs.a1 = fold_scale<FMT>(sc.a1);
    if constexpr (WB) {
#pragma unroll
      for (int c = 0; c < 4; ++c) fs.b[c] = fold_scale<FMT>(sc.b[c]);
    }
    convert_stage<FMT, MODE_FOLD, WB>(r, fs, fr, bt, n);
  } else if (!w_special) {
    convert_stage<FMT, MODE_TWO, WB>(r, sc, fr, bt, n);
  } else {
    convert_stage<FMT, FMT == FMT_E2M1 ? MODE_TWO : MODE_EXACT, WB>(r, sc, fr, bt, n);
  }
}

/* A stage's raw A rows ar0 and ar0 + 8: raw k 16q .. 16q + 15. */
template <int FMT>
__device__ __forceinline__ void load_a_codes(stage_regs &r, uint32_t raw_a, int ar0, int q) {
  if constexpr (FMT == FMT_E2M1) {
    /* 32-byte rows, 32B swizzle: 16-byte chunk c of row r sits at chunk c ^ ((r >> 2) & 1) */
    const uint32_t off = ((((q >> 1) ^ ((ar0 >> 2) & 1))) << 4) + 8 * (q & 1);
    const uint2 w0 = lds_v2(raw_a + ar0 * 32 + off);
    const uint2 w1 = lds_v2(raw_a + (ar0 + 8) * 32 + off);
    r.a0[0] = w0.x; r.a0[1] = w0.y; r.a1[0] = w1.x; r.a1[1] = w1.y;
    r.a0[2] = r.a0[3] = r.a1[2] = r.a1[3] = 0;
  } else {
    /* 64-byte rows, 64B swizzle: chunk c of row r sits at chunk c ^ ((r >> 1) & 3) */
    const uint32_t off = (q ^ ((ar0 >> 1) & 3)) << 4;
    const uint4 w0 = lds_v4(raw_a + ar0 * 64 + off);
    const uint4 w1 = lds_v4(raw_a + (ar0 + 8) * 64 + off);
    r.a0[0] = w0.x; r.a0[1] = w0.y; r.a0[2] = w0.z; r.a0[3] = w0.w;
    r.a1[0] = w1.x; r.a1[1] = w1.y; r.a1[2] = w1.z; r.a1[3] = w1.w;
  }
}

/* load_a_codes and the rows' scales from the stage's prepared A-scale area. */
template <int FMT>
__device__ __forceinline__ void load_a(stage_regs &r, stage_scales &sc, uint32_t raw_a, uint32_t sf_a, int nkb,
                                       int ar0, int q) {
  const int kq = nkb == 2 ? (q >> 1) : q;
  sc.a0 = dup16(lds_u16(sf_a + 2 * (ar0 * nkb + kq)));
  sc.a1 = dup16(lds_u16(sf_a + 2 * ((ar0 + 8) * nkb + kq)));
  load_a_codes<FMT>(r, raw_a, ar0, q);
}

/* A's scale bytes read as they are (kernel_args::sfa_raw): a stage's area holds the 512-byte
 * blocks of the swizzled layout (SPEC §1.1: 128 rows x 4 k-blocks) that hold the tile's
 * rows, one for 128-row tiles, two (blocks r0 / 128 and the next) for 192-row tiles,
 * which start at row r0 % 128 = 0 or 64 of the first; row ar0 + 8's byte lies 128 bytes
 * after row ar0's. A k-block beyond the scales' K (padding, maybe 0xFF) reads as byte
 * 127, 1.0. */
struct raw_scales {
  bool on;     /* kernel_args::sfa_raw is set */
  int off;     /* the byte of row ar0 and this thread's k-block of a stage, less the stage's */
  int ks_live; /* stages ks < ks_live hold this thread's k-block */
};
/* Whether the kernel of NB columns reads A's scale bytes as they are (only the narrow
 * tiles get sfa_raw, see geometry::sfraw). */
template <int NB> __device__ __forceinline__ bool raw_scales_on(const kernel_args &p) {
  return NB == BN_NARROW && p.sfa_raw != nullptr;
}
/* r0: the tile's first row, modulo 128. The offsets below are formats.h's
 * mxf_sf_swz_offset in 32-bit arithmetic (calling it cost the 128-row shape ~1 %:
 * docs/decisions.md, gemm_amax: scale preparation, raw scale bytes). */
template <int NB> __device__ __forceinline__ raw_scales make_raw_scales(const kernel_args &p, int ar0, int q, int r0) {
  const int kq = p.nkb == 2 ? (q >> 1) : q, rr = r0 + ar0;
  raw_scales rs;
  rs.on = raw_scales_on<NB>(p);
  rs.off = (rr >> 7) * 512 + (rr & 31) * 16 + ((rr >> 5) & 3) * 4 + kq;
  rs.ks_live = (p.kb - kq + p.nkb - 1) / p.nkb;
  return rs;
}
/* The producer's bulk copies of a stage's scale blocks (raw_scales) for tile mt, k-stage ks,
 * batch l: `blocks` of 512 bytes from the tile's first row's block (the second clamped to
 * the last block: its rows are then beyond M). */
__device__ __forceinline__ void load_raw_scales(const kernel_args &p, uint32_t dst, int tm, int blocks, int l, int mt,
                                                int ks, uint32_t bar) {
  const int b0 = (mt * tm) >> 7, kt = (ks * p.nkb) >> 2;
  const uint8_t *src = p.sfa_raw + l * p.sfa_raw_ls + ((int64_t)b0 * p.sfa_raw_kq + kt) * 512;
  bulk_load(dst, src, 512u, bar);
  if (blocks == 2) bulk_load(dst + 512, b0 + 1 < p.sfa_raw_rows ? src + (int64_t)p.sfa_raw_kq * 512 : src, 512u, bar);
}

/* convert_stage_bf16 without B, from the rows' scale bytes b0, b1: MODE_FOLD's multipliers
 * come from the bytes (e8m0_fold_pair), the other modes' from scale_bf16. */
template <int FMT>
__device__ __forceinline__ void convert_a_raw(const stage_regs &r, uint32_t b0, uint32_t b1, uint32_t (&fr)[16]) {
  const bool w_special = FMT != FMT_E2M1 && __any_sync(0xFFFFFFFFu, (a_special<FMT>(r) & 0x80808080u) != 0);
  const bool w_over = __any_sync(0xFFFFFFFFu, max(b0, b1) > e8m0_fold_max<FMT>());
  stage_scales sc;
  if (!w_special && !w_over) {
    sc.a0 = e8m0_fold_pair<FMT>(b0);
    sc.a1 = e8m0_fold_pair<FMT>(b1);
    convert_a<FMT, MODE_FOLD>(r, sc, fr);
    return;
  }
  sc.a0 = dup16(scale_bf16((uint8_t)b0, 0));
  sc.a1 = dup16(scale_bf16((uint8_t)b1, 0));
  if (!w_special) convert_a<FMT, MODE_TWO>(r, sc, fr);
  else convert_a<FMT, FMT == FMT_E2M1 ? MODE_TWO : MODE_EXACT>(r, sc, fr);
}

/*
 * One k-stage of one consumer thread: A fragment into `fr`, raw B row ct into the bf16
 * ring buffer, barrier, 4 wgmmas, then wait until the previous stage's wgmmas are done
 * (so the other fragment array and the bf16 buffer two stages back are free again).
 *
 * Why three bf16 buffers: stage g writes buffer g%3, last read by stage g-3's wgmmas. This
 * thread's warpgroup finished those at the end of stage g-2; the other warpgroup finished
 * them before it reached the named barrier of stage g-1, which this thread has passed.
 */
template <int FMT, int H>
__device__ __forceinline__ void consume_stage(float (&acc)[128], uint32_t (&fr)[16], const smem_map &sm,
                                              uint32_t g, int ks, int nkb, int ct, int ar0, int q,
                                              int lane) {
  const int slot = (int)(g % NS);
  mbar_wait(sm.full(slot), (g / NS) & 1u);

  stage_regs r;
  stage_scales sc;
  load_a<FMT>(r, sc, sm.raw_a(slot), sm.sf_a(slot), nkb, ar0, q);
  /* ---- B: raw row n = ct */
  const int n = ct;
  if (nkb == 2) {
    const uint32_t t = lds_u32(sm.sf_b(slot) + 4 * n);
    sc.b[0] = sc.b[1] = dup16(t & 0xFFFFu);
    sc.b[2] = sc.b[3] = dup16(t >> 16);
  } else {
    const uint2 t = lds_v2(sm.sf_b(slot) + 8 * n);
    sc.b[0] = dup16(t.x & 0xFFFFu);
    sc.b[1] = dup16(t.x >> 16);
    sc.b[2] = dup16(t.y & 0xFFFFu);
    sc.b[3] = dup16(t.y >> 16);
  }
  if constexpr (FMT == FMT_E2M1) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const uint4 v = lds_v4(sm.raw_b(slot) + n * 32 + ((c ^ ((n >> 2) & 1)) << 4));
      r.b[2 * c][0] = v.x; r.b[2 * c][1] = v.y; r.b[2 * c][2] = r.b[2 * c][3] = 0;
      r.b[2 * c + 1][0] = v.z; r.b[2 * c + 1][1] = v.w; r.b[2 * c + 1][2] = r.b[2 * c + 1][3] = 0;
    }
  } else {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const uint4 v = lds_v4(sm.raw_b(slot) + n * 64 + ((c ^ ((n >> 1) & 3)) << 4));
      r.b[c][0] = v.x; r.b[c][1] = v.y; r.b[c][2] = v.z; r.b[c][3] = v.w;
    }
  }

  const int bi = (int)(g % NBB);
  const uint32_t bt = sm.bbuf(bi) + n * 128;
  if constexpr (H) {
    convert_stage<FMT, MODE_F16>(r, sc, fr, bt, n); /* f16 multipliers, NaN/inf codes exact */
  } else {
    convert_stage_bf16<FMT>(r, sc, fr, bt, n);
  }

  fence_proxy_async();
  __syncwarp();
  if (lane == 0) mbar_arrive(sm.empty(slot)); /* raw stage consumed */
  named_bar_sync(1, 256);

  wgmma_fence();
  const uint64_t desc = wgmma_desc_sw128(sm.bbuf(bi));
#pragma unroll
  for (int s = 0; s < 4; ++s)
    wgmma_m64n256k16_rs<H>(acc, fr[4 * s + 0], fr[4 * s + 1], fr[4 * s + 2], fr[4 * s + 3], desc + 2 * s,
                           (ks > 0 || s > 0) ? 1u : 0u); /* ks: stage index within the unit */
  wgmma_commit();
  wgmma_wait<1>();
}

/* ------------------------------------------------------------ the f16 path */
/* Whether a tile takes the f16 path: enabled, and every row of its A and B tiles qualifies. */
template <int FMT> __device__ __forceinline__ bool f16_tile(const kernel_args &p, int l, int mt, int nt) {
  if constexpr (FMT == FMT_E2M1) return false;
  else return p.f16 && __ldg(p.tile_ok_a + l * p.tiles_m + mt) != 0 && __ldg(p.tile_ok_b + l * p.tiles_n + nt) != 0;
}
/*
 * Per unit: whether its tile takes the f16 path (every row of its A and B tiles qualifies;
 * read one unit ahead) and the tile's factors, copied one unit ahead into one of three
 * shared areas by cp.async (thread ct: B row ct and A row ct % 128). The area of unit
 * i + 1 was last read by the epilogue of unit i - 2, which every consumer left before the
 * first stage barrier of unit i - 1; the copies of unit i are waited for at its start,
 * before its first stage barrier, which orders them before the epilogue's reads.
 */
template <int FMT> __device__ __forceinline__ bool prefetch_unit_f16(const kernel_args &p, int u, int ct, uint32_t fac) {
  if constexpr (FMT == FMT_E2M1) {
    return false;
  } else {
    if (u >= p.units || !p.f16) return false;
    int l, mt, nt;
    tile_coords(unit_work(u, p.whole, p.split, p.nks).tile, p.tiles_m, p.tiles_n, l, mt, nt);
    mxf_cp_async_4(fac + 4 * ct, p.fac_b + ((int64_t)l * p.tiles_n + nt) * BN + ct);
    if (ct < BM) mxf_cp_async_4(fac + 4 * (BN + ct), p.fac_a + ((int64_t)l * p.tiles_m + mt) * BM + ct);
    mxf_cp_async_commit();
    return f16_tile<FMT>(p, l, mt, nt);
  }
}

/* acc <- (acc * 2^eB) * 2^eA with the tile's factors at fac (B's 256, then A's 128): the
 * sums of the bf16 path (sm90_dequant.cuh, "The f16 path"). */
__device__ __forceinline__ void apply_factors(float (&acc)[128], uint32_t fac, int ar0, int q) {
  const float a0 = __uint_as_float(lds_u32(fac + 4 * (BN + ar0)));
  const float a1 = __uint_as_float(lds_u32(fac + 4 * (BN + ar0 + 8)));
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const float2 b = lds_f32x2(fac + 4 * (8 * j + 2 * q));
    acc[4 * j + 0] = acc[4 * j + 0] * b.x * a0;
    acc[4 * j + 1] = acc[4 * j + 1] * b.y * a0;
    acc[4 * j + 2] = acc[4 * j + 2] * b.x * a1;
    acc[4 * j + 3] = acc[4 * j + 3] * b.y * a1;
  }
}

/* The stages [0, nk) of a unit. */
template <int FMT, int H>
__device__ __forceinline__ void mainloop(float (&acc)[128], uint32_t (&fa)[16], uint32_t (&fb)[16], const smem_map &sm,
                                         uint32_t &g, int nk, int nkb, int ct, int ar0, int q, int lane) {
  int ks = 0;
  for (; ks + 1 < nk; ks += 2) {
    consume_stage<FMT, H>(acc, fa, sm, g++, ks, nkb, ct, ar0, q, lane);
    consume_stage<FMT, H>(acc, fb, sm, g++, ks + 1, nkb, ct, ar0, q, lane);
  }
  if (ks < nk) consume_stage<FMT, H>(acc, fa, sm, g++, ks, nkb, ct, ar0, q, lane);
}

/*
 * One k-stage with B from the pre-pass: the stage's B tile is already bf16 in the layout
 * the wgmmas read, so a consumer thread converts its A fragment only, issues the 4 wgmmas
 * and goes on; no barrier between the warpgroups. The slot is released once the wgmmas
 * that read it are done: stage g - 1's here, after the wait; a unit's last stage at its end.
 */
template <int FMT, int NB, class SM>
__device__ __forceinline__ void consume_stage_bp(float (&acc)[NB / 2], uint32_t (&fr)[16], const SM &sm, uint32_t g,
                                                 int ks, int ks0, int nkb, int ar0, int q, int lane,
                                                 const raw_scales &rs, int keep) {
  constexpr int ns = SM::ns;
  const int slot = (int)(g % ns);
  mbar_wait(sm.full(slot), (g / ns) & 1u);
  stage_regs r;
  if (rs.on) {
    load_a_codes<FMT>(r, sm.raw_a(slot), ar0, q);
    const uint32_t a = sm.sf_a(slot) + rs.off + (nkb == 2 ? ((ks0 + ks) & 1) << 1 : 0);
    const bool live = ks0 + ks < rs.ks_live;
    const uint32_t b0 = lds_u8(a), b1 = lds_u8(a + 128);
    convert_a_raw<FMT>(r, live ? b0 : 127u, live ? b1 : 127u, fr);
  } else {
    stage_scales sc;
    load_a<FMT>(r, sc, sm.raw_a(slot), sm.sf_a(slot), nkb, ar0, q);
    convert_stage_bf16<FMT, false>(r, sc, fr, 0u, 0);
  }
  wgmma_fence();
  const uint64_t desc = wgmma_desc_sw128(sm.raw_b(slot));
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const uint32_t acc_on = (ks > 0 || s > 0) ? 1u : 0u;
    if constexpr (NB == BN)
      wgmma_m64n256k16_rs<0>(acc, fr[4 * s + 0], fr[4 * s + 1], fr[4 * s + 2], fr[4 * s + 3], desc + 2 * s, acc_on);
    else
      wgmma_m64n128k16_rs(acc, fr[4 * s + 0], fr[4 * s + 1], fr[4 * s + 2], fr[4 * s + 3], desc + 2 * s, acc_on);
  }
  wgmma_commit();
  wgmma_wait<1>();
  if (ks > 0 && (NB != BN || ks != keep) && lane == 0) mbar_arrive(sm.empty((int)((g - 1) % ns)));
}

/* The stages [0, nk) of a unit, nk >= 1 (unit_work), two per trip (fragments fa, fb).
 * Two loop shapes, each what ptxas compiles well: with a last odd stage after the loop it
 * serialized the narrow tile's wgmmas (C7514 / C7515: copies of the accumulators while
 * in flight), so the narrow loop leaves from either stage; that shape took ptxas minutes
 * on the wide e5m2 kernel, which keeps the stage after the loop. */
template <int FMT, int NB, class SM>
__device__ __forceinline__ void mainloop_bp(float (&acc)[NB / 2], uint32_t (&fa)[16], uint32_t (&fb)[16], const SM &sm,
                                            uint32_t &g, int ks0, int nk, int nkb, int ar0, int q, int lane,
                                            const raw_scales &rs, bool hold) {
  const int keep = hold ? nk - 1 : -1; /* held: the last two stages' slots (epilogue_slots) */
  if constexpr (NB != BN) {
    for (int ks = 0;; ks += 2) {
      consume_stage_bp<FMT, NB, SM>(acc, fa, sm, g++, ks, ks0, nkb, ar0, q, lane, rs, keep);
      if (ks + 1 >= nk) break;
      consume_stage_bp<FMT, NB, SM>(acc, fb, sm, g++, ks + 1, ks0, nkb, ar0, q, lane, rs, keep);
      if (ks + 2 >= nk) break;
    }
  } else {
    int ks = 0;
    for (; ks + 1 < nk; ks += 2) {
      consume_stage_bp<FMT, NB, SM>(acc, fa, sm, g++, ks, ks0, nkb, ar0, q, lane, rs, keep);
      consume_stage_bp<FMT, NB, SM>(acc, fb, sm, g++, ks + 1, ks0, nkb, ar0, q, lane, rs, keep);
    }
    if (ks < nk) consume_stage_bp<FMT, NB, SM>(acc, fa, sm, g++, ks, ks0, nkb, ar0, q, lane, rs, keep);
  }
  wgmma_wait<0>();
  if (!hold && lane == 0) mbar_arrive(sm.empty((int)((g - 1) % SM::ns)));
}

/* The kernel's last parameter: C's tensor map where epilogue_slots may run (the wide
 * pre-pass kernels), else nothing (the other kernels' parameters stay as they were). */
template <bool ON> struct c_map {
  CUtensorMap map;
};
template <> struct c_map<false> {};

} /* namespace mxf_sm90 */

#endif
