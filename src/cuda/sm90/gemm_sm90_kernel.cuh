/*
 * gemm_sm90_kernel.cuh — the Hopper gemm_amax kernel (gemm_kernel<FMT, BP, NB, WG>: the
 * persistent producer / consumer loop over work units) and its launch with its shared
 * memory. Instantiated per FMT by gemm_sm90_instances.cuh.
 */
#ifndef MXF_GEMM_SM90_KERNEL_CUH
#define MXF_GEMM_SM90_KERNEL_CUH

#include "cuda/sm90/gemm_sm90_epilogue.cuh"

namespace mxf_sm90 {

/* ------------------------------------------------------------ the kernel */
template <int FMT, int BP, int NB, int WG>
__global__ void __launch_bounds__(128 * (WG + 1), 1)
    gemm_kernel(const __grid_constant__ CUtensorMap tma_a, const __grid_constant__ CUtensorMap tma_b,
                const kernel_args p, const __grid_constant__ c_map<BP && NB == BN> tma_c) {
  extern __shared__ uint8_t smem_raw[];
  using SM = smem_map_t<BP, NB, WG>;
  constexpr int NV = NB / 2;   /* accumulators per consumer thread */
  constexpr int ns = SM::ns;
  constexpr int TM = SM::tm;   /* tile rows */
  constexpr int CT = 128 * WG; /* consumer threads */
  SM sm;
  sm.base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  uint32_t *s_amax = reinterpret_cast<uint32_t *>(smem_raw + (sm.amax() - smem_addr(smem_raw)));
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int i = 0; i < ns; ++i) {
      mbar_init(sm.full(i), 1);
      mbar_init(sm.empty(i), 4 * WG); /* one arrival per consumer warp */
    }
    *s_amax = 0;
    if constexpr (BP && NB == BN) {
      for (int i = 0; i < 3 * ns; ++i) sts_u32(sm.cst(0) + 4 * i, 0u); /* the slots' C words */
    }
    mbar_init_fence();
  }
  __syncthreads();
  /* the preparation's results (see sf_prepare_kernel): the producer waits below */
  if (tid >= 128) mxf_pdl_wait();

  if (tid < 128) {
    /* ---------------- producer */
    setmaxnreg_dec<24>();
    if (tid == 0) {
      tma_prefetch_desc(&tma_a);
      tma_prefetch_desc(&tma_b);
      const bool raw = raw_scales_on<NB>(p); /* A's scales as they are (raw_scales) */
      constexpr int blocks = WG == 2 ? 1 : 2;
      const uint32_t sfa_bytes = raw ? 512u * blocks : BM * p.nkb * 2, sfb_bytes = BP ? 0 : BN * p.nkb * 2;
      const uint32_t tx = (uint32_t)TM * p.rb + (BP ? SM::bp_tile : BN * p.rb) + sfa_bytes + sfb_bytes;
      /* a stage's A codes and scales into slot s (sfa: the unit's prepared scales) */
      const auto load_a_stage = [&](int s, int ks, int l, int mt, const uint16_t *sfa) {
        const uint32_t fb = sm.full(s);
        mbar_arrive_expect_tx(fb, tx);
        tma_load_3d(sm.raw_a(s), &tma_a, ks * p.rb, mt * TM, l, fb);
        if (raw)
          load_raw_scales(p, sm.sf_a(s), TM, blocks, l, mt, ks, fb);
        else
          bulk_load(sm.sf_a(s), sfa + (int64_t)ks * BM * p.nkb, sfa_bytes, fb);
      };
      /* With raw scales, A's codes and scales do not come from the preparation: the first
       * unit's first stage loads them while the preparation still runs, B after it. One
       * stage: loading the whole ring so (12.6 MB from all CTAs at 128 x 24576 x 1536,
       * while the preparation reads its own input) was 1-4 % slower on the narrow shapes
       * (docs/decisions.md, gemm_amax: scale preparation, raw scale bytes). */
      int early = 0;
      if (raw && (int)blockIdx.x < p.units) {
        const work_unit w = unit_work(blockIdx.x, p.whole, p.split, p.nks);
        int l, mt, nt;
        tile_coords(w.tile, p.tiles_m, p.tiles_n, l, mt, nt);
        early = min(EARLY_STAGES, w.ks1 - w.ks0);
        for (int i = 0; i < early; ++i) load_a_stage(i, w.ks0 + i, l, mt, nullptr);
      }
      mxf_pdl_wait();
      int slot = 0;
      uint32_t phase = 0;
      for (int u = blockIdx.x; u < p.units; u += gridDim.x) {
        const work_unit w = unit_work(u, p.whole, p.split, p.nks);
        int l, mt, nt;
        tile_coords(w.tile, p.tiles_m, p.tiles_n, l, mt, nt);
        const bool h = !BP && f16_tile<FMT>(p, l, mt, nt);
        const int64_t d = h ? p.f16_offset : 0;
        const uint16_t *sfa = p.sfa + d + ((int64_t)(l * p.tiles_m + mt) * p.nks) * (BM * p.nkb);
        const uint16_t *sfb = p.sfb + d + ((int64_t)(l * p.tiles_n + nt) * p.nks) * (BN * p.nkb);
        for (int ks = w.ks0; ks < w.ks1; ++ks) {
          const uint32_t fb = sm.full(slot);
          if (early > 0) {
            --early; /* A is on its way (slot = the stage, first pass) */
          } else {
            mbar_wait(sm.empty(slot), phase ^ 1u);
            if constexpr (BP && NB == BN) {
              if (p.c_ring) store_slot(sm, slot, &tma_c.map);
            }
            load_a_stage(slot, ks, l, mt, sfa);
          }
          tma_load_3d(sm.raw_b(slot), &tma_b, ks * (BP ? BK : p.rb), nt * NB, l, fb); /* BP: bf16 elements */
          if (!BP) bulk_load(sm.sf_b(slot), sfb + (int64_t)ks * BN * p.nkb, sfb_bytes, fb);
          if (++slot == ns) {
            slot = 0;
            phase ^= 1u;
          }
        }
      }
      if constexpr (BP && NB == BN) {
        if (p.c_ring) { /* the last units' C (epilogue_slots) */
          for (int i = 0; i < ns; ++i) {
            mbar_wait(sm.empty(slot), phase ^ 1u);
            store_slot(sm, slot, &tma_c.map);
            if (++slot == ns) {
              slot = 0;
              phase ^= 1u;
            }
          }
          bulk_wait_all();
        }
      }
    }
    return;
  }

  /* ---------------- consumers */
  /* 128 x 24 + CT x this <= 64 K registers. ptxas compiles the code after this for these
   * registers (the wide kernels' stage loop uses up to 237 of the 240; the launch's share,
   * 65536 / threads, still bounds what a single instruction may need: docs/decisions.md,
   * Compiler and register limits). */
  setmaxnreg_inc<WG == 2 ? 240 : 160>();
  const int ct = tid - 128;                 /* 0 .. CT - 1 */
  const int lane = tid & 31;
  const int q = lane & 3;
  const int ar0 = (ct >> 7) * 64 + ((ct >> 5) & 3) * 16 + (lane >> 2); /* A row in the tile */
  float acc[NV];
#pragma unroll
  for (int i = 0; i < NV; ++i) acc[i] = 0.f;
  uint32_t fa[16], fb[16];
  float fm = 0.0f; /* amax of this thread's values: >= +0 or NaN */
  uint32_t g = 0;
  bool h_next = BP ? false : prefetch_unit_f16<FMT>(p, blockIdx.x, ct, sm.factors(0));
  int area = 0;
  for (int u = blockIdx.x; u < p.units; u += gridDim.x, area = area == 2 ? 0 : area + 1) {
    const work_unit w = unit_work(u, p.whole, p.split, p.nks);
    int l, mt, nt;
    tile_coords(w.tile, p.tiles_m, p.tiles_n, l, mt, nt);
    const bool h = h_next;
    const uint32_t fac = sm.factors(area);
    if (FMT != FMT_E2M1 && !BP) mxf_cp_async_wait<0>(); /* this unit's factors */
    h_next = BP ? false : prefetch_unit_f16<FMT>(p, u + gridDim.x, ct, sm.factors(area == 2 ? 0 : area + 1));
    const int nk = w.ks1 - w.ks0;
    /* 16-bit C through the ring: whole and finishing units of two stages or more */
    const bool hold = BP && NB == BN && p.c_ring && nk >= 2 && w.role != ROLE_WRITER;
    if constexpr (BP) {
      const raw_scales rs = make_raw_scales<NB>(p, ar0, q, (mt * TM) & 127);
      mainloop_bp<FMT, NB, SM>(acc, fa, fb, sm, g, w.ks0, nk, p.nkb, ar0, q, lane, rs, hold);
    } else if (FMT != FMT_E2M1 && h) {
      mainloop<FMT, FMT != FMT_E2M1>(acc, fa, fb, sm, g, nk, p.nkb, ct, ar0, q, lane); /* e2m1: never here */
    } else {
      mainloop<FMT, 0>(acc, fa, fb, sm, g, nk, p.nkb, ct, ar0, q, lane);
    }
    wgmma_wait<0>();
    if (w.role != ROLE_WHOLE) {
      /* thread ct's NV sums sit at float4 index CT i + ct (coalesced) of a TM x NB slot */
      constexpr int SLOT = TM * NB;
      if (w.role == ROLE_WRITER) {
        float4 *dst = reinterpret_cast<float4 *>(p.partial + (int64_t)(w.idx * (p.split - 1) + w.part) * SLOT) + ct;
#pragma unroll
        for (int i = 0; i < NV / 4; ++i)
          __stcg(dst + CT * i, make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
        named_bar_sync(1, CT);
        if (ct == 0) red_release_add(p.flags + w.idx, 1u);
        continue;
      }
      if (ct == 0)
        while (ld_acquire(p.flags + w.idx) < (unsigned)(p.split - 1)) __nanosleep(64);
      named_bar_sync(1, CT);
      for (int part = 0; part + 1 < p.split; ++part) {
        const float4 *src = reinterpret_cast<const float4 *>(p.partial + (int64_t)(w.idx * (p.split - 1) + part) * SLOT) + ct;
#pragma unroll
        for (int i = 0; i < NV / 4; ++i) {
          const float4 v = __ldcg(src + CT * i);
          acc[4 * i] += v.x, acc[4 * i + 1] += v.y, acc[4 * i + 2] += v.z, acc[4 * i + 3] += v.w;
        }
      }
    }
    if constexpr (!BP) {
      if (FMT != FMT_E2M1 && h) apply_factors(acc, fac, ar0, q);
    }
    if constexpr (BP && NB == BN) {
      if (hold) {
        if (p.cdt == MXF_BF16) epilogue_slots<MXF_BF16>(acc, p, sm, g, l, mt, nt, ct, ar0, q, fm);
        else epilogue_slots<MXF_F16>(acc, p, sm, g, l, mt, nt, ct, ar0, q, fm);
        continue;
      }
    }
    switch (p.cdt) {
    case MXF_F32: epilogue<MXF_F32, NB, BP>(acc, p, sm, l, mt, nt, ct, ar0, q, fm); break;
    case MXF_BF16: epilogue<MXF_BF16, NB, BP>(acc, p, sm, l, mt, nt, ct, ar0, q, fm); break;
    case MXF_F16: epilogue<MXF_F16, NB, BP>(acc, p, sm, l, mt, nt, ct, ar0, q, fm); break;
    case MXF_E4M3: epilogue<MXF_E4M3, NB, BP>(acc, p, sm, l, mt, nt, ct, ar0, q, fm); break;
    case MXF_E5M2: epilogue<MXF_E5M2, NB, BP>(acc, p, sm, l, mt, nt, ct, ar0, q, fm); break;
    default: epilogue<MXF_E2M1, NB, BP>(acc, p, sm, l, mt, nt, ct, ar0, q, fm); break;
    }
  }
  /* amax: warp -> CTA (shared atomic) -> one global atomicMax */
  const uint32_t amax = mxf_amax_warp_reduce(mxf_amax_f32_bits(fm));
  if (lane == 0 && amax != 0) atomicMax(s_amax, amax);
  named_bar_sync(1, CT);
  if (ct == 0 && *s_amax != 0) atomicMax(reinterpret_cast<unsigned int *>(p.amax), *s_amax);
}

/* gemm_kernel<FMT, BP, NB, WG> on the stream with its shared memory. */
template <int FMT, int BP, int NB = BN, int WG = 2>
inline cudaError_t launch_gemm(unsigned grid, const CUtensorMap &ma, const CUtensorMap &mb, const CUtensorMap &mc,
                               const kernel_args &ka, cudaStream_t stream) {
  const int smem = BP ? bp_smem_bytes(NB, WG) : SMEM_BYTES;
  const cudaError_t e = mxf_set_smem_attr<gemm_kernel<FMT, BP, NB, WG>>(smem);
  if (e != cudaSuccess) return e;
  c_map<BP && NB == BN> cm;
  if constexpr (BP && NB == BN) cm.map = mc;
  return mxf_launch(gemm_kernel<FMT, BP, NB, WG>, dim3(grid), dim3(128 * (WG + 1)), (size_t)smem, stream, true, ma, mb,
                    ka, cm);
}

} /* namespace mxf_sm90 */

#endif
