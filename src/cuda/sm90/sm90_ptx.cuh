/*
 * sm90_ptx.cuh — thin PTX wrappers for the Hopper (sm_90a) kernels: mbarriers, bulk and
 * tensor copies (TMA), async-proxy fences, named barriers, setmaxnreg, wgmma (register-A
 * m64n256k16 and m64n128k16 for gemm_amax, shared-A m64n192k16 for proj_rope).
 *
 * Only what the sm90 kernels use; each wrapper is one instruction (or a try_wait loop).
 * Compiled for sm_90a only (wgmma and setmaxnreg need the "a" target).
 */
#ifndef MXF_SM90_PTX_CUH
#define MXF_SM90_PTX_CUH

#include <cuda.h>
#include <stdint.h>

#include "cuda/cp_async.cuh" /* mxf_cp_async_4 and its commit / wait */
#include "cuda/pdl.cuh"      /* mxf_pdl_allow_dependents / mxf_pdl_wait */

namespace mxf_sm90 {

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return mxf_smem_addr(p); }

/* ------------------------------------------------------------ mbarrier */
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

/* Makes initialized barriers visible to the other threads and to the async proxy. */
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

/* Spins until the phase of parity `parity` has completed. */
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

/* ------------------------------------------------------------ TMA */
__device__ __forceinline__ void tma_prefetch_desc(const CUtensorMap *map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

/* 3-D tiled load of the box at (c0, c1, c2) into shared memory, completing on `bar`. */
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

/* 3-D tiled store of the box at (c0, c1, c2) from shared memory (the async proxy: the
 * writes before it need fence_proxy_async), in this thread's bulk group; elements outside
 * the tensor are not written. */
__device__ __forceinline__ void tma_store_3d(const CUtensorMap *map, uint32_t src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(c0), "r"(c1), "r"(c2), "r"(src)
               : "memory");
}
/* Closes this thread's bulk group; waits until its groups have read their shared memory
 * (READ) or are complete. */
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

/* Contiguous bulk copy global -> shared (16-byte aligned, size a multiple of 16). */
__device__ __forceinline__ void bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(bar)
      : "memory");
}

/* Orders this thread's generic-proxy shared-memory writes before later async-proxy
 * (wgmma, TMA) accesses. */
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void named_bar_sync(uint32_t id, uint32_t count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
/* Named barrier id over count threads that also tells each of them whether c holds in any. */
__device__ __forceinline__ bool named_bar_any(uint32_t id, uint32_t count, bool c) {
  uint32_t r;
  asm volatile("{\n\t.reg .pred q, p;\n\tsetp.ne.u32 q, %1, 0;\n\tbar.red.or.pred p, %2, %3, q;\n\t"
               "selp.u32 %0, 1, 0, p;\n\t}"
               : "=r"(r)
               : "r"((uint32_t)c), "r"(id), "r"(count)
               : "memory");
  return r != 0;
}
/* Signals arrival at named barrier id without waiting (the producer side of a hand-off). */
__device__ __forceinline__ void named_bar_arrive(uint32_t id, uint32_t count) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

/* ------------------------------------------------------------ registers */
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

/* ------------------------------------------------------------ wgmma */
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/* 128B-swizzled shared-memory descriptor with explicit leading / stride byte offsets. */
__device__ __forceinline__ uint64_t desc_sw128(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((saddr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (1ull << 62);
}

/* Shared-memory matrix descriptor of a K-major bf16 tile with 128-byte swizzle: rows of
 * 64 bf16 (128 B), 8-row atoms 1024 B apart. Bits: start>>4 [0,14), LBO>>4 [16,30)
 * (unused by swizzled K-major, set to 1), SBO>>4 [32,46), layout [62,64) = 1 (128B). */
__device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t saddr) { return desc_sw128(saddr, 16, 1024); }

/* The f32 accumulator registers of an m64nN wgmma, N / 2 per thread: operand text and
 * constraints, in pieces of 64 and 32 registers (N = 128, 192, 256). */
#define MXF_WGMMA_T0_63 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define MXF_WGMMA_T64_95 \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define MXF_WGMMA_T96_127 \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define MXF_WGMMA_O0_63 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define MXF_WGMMA_O64_95 \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define MXF_WGMMA_O96_127 \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define MXF_WGMMA_D96_TEXT MXF_WGMMA_T0_63 ", " MXF_WGMMA_T64_95
#define MXF_WGMMA_D128_TEXT MXF_WGMMA_D96_TEXT ", " MXF_WGMMA_T96_127
#define MXF_WGMMA_D96_OUT MXF_WGMMA_O0_63, MXF_WGMMA_O64_95
#define MXF_WGMMA_D128_OUT MXF_WGMMA_D96_OUT, MXF_WGMMA_O96_127

/* D(64x256, f32) += A(64x16, registers) * B(16x256, shared, K-major), both bf16 (F16 = 0)
 * or both f16 (F16 = 1). scale_d = 0 overwrites D instead of accumulating. */
template <int F16>
__device__ __forceinline__ void wgmma_m64n256k16_rs(float (&d)[128], uint32_t a0, uint32_t a1, uint32_t a2,
                                                    uint32_t a3, uint64_t desc, uint32_t scale_d) {
  if constexpr (F16 == 0)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" MXF_WGMMA_D128_TEXT
                 "}, {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}\n"
                 : MXF_WGMMA_D128_OUT
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(scale_d));
  else
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {" MXF_WGMMA_D128_TEXT
                 "}, {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}\n"
                 : MXF_WGMMA_D128_OUT
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(scale_d));
}

/* D(64x128, f32) += A(64x16, registers) * B(16x128, shared, K-major), both bf16: the
 * narrow tile of gemm_amax (64 accumulator registers, the first 64 of m64n256's layout). */
__device__ __forceinline__ void wgmma_m64n128k16_rs(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2,
                                                    uint32_t a3, uint64_t desc, uint32_t scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" MXF_WGMMA_T0_63
               "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
               : MXF_WGMMA_O0_63
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(scale_d));
}

/* D(64x192, f32) += A(64x16, bf16, shared) * B(16x192, bf16, shared), both operands
 * through descriptors; TB = 1 reads B as MN-major (transposed). scale_d = 0 overwrites D. */
template <int TB>
__device__ __forceinline__ void wgmma_m64n192k16_ss(float (&d)[96], uint64_t da, uint64_t db, uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {" MXF_WGMMA_D96_TEXT
      "}, %96, %97, p, 1, 1, 0, %99;\n}\n"
      : MXF_WGMMA_D96_OUT
      : "l"(da), "l"(db), "r"(scale_d), "n"(TB));
}

/* ------------------------------------------------------------ shared memory by address */
/* Explicit ld/st.shared: the compiler keeps them LDS/STS whatever it can prove about a
 * pointer (a generic access to shared memory is slower). */
__device__ __forceinline__ uint32_t lds_u8(uint32_t a) {
  uint32_t v;
  asm volatile("ld.shared.u8 %0, [%1];" : "=r"(v) : "r"(a));
  return v;
}
__device__ __forceinline__ uint32_t lds_u16(uint32_t a) {
  uint16_t v;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(a));
  return v;
}
__device__ __forceinline__ uint32_t lds_u32(uint32_t a) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
  return v;
}
__device__ __forceinline__ uint2 lds_v2(uint32_t a) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(a));
  return v;
}
__device__ __forceinline__ uint4 lds_v4(uint32_t a) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
  return v;
}
__device__ __forceinline__ void sts_v4(uint32_t a, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(x), "r"(y), "r"(z), "r"(w) : "memory");
}

/* f32 accesses for epilogue tiles. Like the loads above, no "memory" clobber: they stay
 * ordered among themselves and with the barriers (all volatile), while the compiler may
 * still move global loads across them (prefetch); barriers carry the clobber. */
__device__ __forceinline__ float2 lds_f32x2(uint32_t a) {
  const uint2 v = lds_v2(a);
  return make_float2(__uint_as_float(v.x), __uint_as_float(v.y));
}
__device__ __forceinline__ float4 lds_f32x4(uint32_t a) {
  const uint4 v = lds_v4(a);
  return make_float4(__uint_as_float(v.x), __uint_as_float(v.y), __uint_as_float(v.z), __uint_as_float(v.w));
}
__device__ __forceinline__ void sts_f32(uint32_t a, float x) { asm volatile("st.shared.f32 [%0], %1;" ::"r"(a), "f"(x)); }
__device__ __forceinline__ void sts_f32x2(uint32_t a, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(a), "f"(x), "f"(y));
}
__device__ __forceinline__ void sts_u8(uint32_t a, uint32_t x) { asm volatile("st.shared.u8 [%0], %1;" ::"r"(a), "r"(x)); }
__device__ __forceinline__ void sts_u32(uint32_t a, uint32_t x) { asm volatile("st.shared.u32 [%0], %1;" ::"r"(a), "r"(x)); }
/* Warp-level ordering of the shared accesses above (no compiler memory clobber). */
__device__ __forceinline__ void warp_sync_shared() { asm volatile("bar.warp.sync -1;"); }

/* Four 8x8 b16 matrices into shared memory (sm_90): register i of every lane is its pair
 * of row lane / 4, columns 2 (lane % 4), +1 of matrix i (the mma fragment layout); lanes
 * 8i .. 8i + 7 give the addresses of matrix i's rows 0..7 (16 bytes each). */
__device__ __forceinline__ void stmatrix_x4(uint32_t a, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

/* stmatrix .trans: each lane's fragment of 8x8 matrix m lands transposed, row i of the
 * stored matrix (at the address of lane 8m + i) being column i of the fragment matrix. */
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t a, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

/* ------------------------------------------------------------ flags between CTAs */
__device__ __forceinline__ void red_release_add(unsigned int *p, unsigned int v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned int ld_acquire(const unsigned int *p) {
  unsigned int v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

/* ------------------------------------------------------------ small ALU helpers */
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

/* Two bf16 products, each rounded once (exact whenever the product fits bf16). */
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

/* Two f16 products, each rounded once (exact whenever the product fits f16, subnormals
 * included: f16 arithmetic keeps them). */
__device__ __forceinline__ uint32_t f16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

/* Two e4m3 codes (bytes 2h and 2h + 1 of w) as an f16 pair, exactly (every e4m3 value,
 * NaN included, is an f16 value): byte 2h -> bits 0..15, byte 2h + 1 -> bits 16..31. */
template <int H> __device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t w) {
  uint32_t d;
  if constexpr (H == 0)
    asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %1;\ncvt.rn.f16x2.e4m3x2 %0, l;\n}" : "=r"(d) : "r"(w));
  else
    asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %1;\ncvt.rn.f16x2.e4m3x2 %0, h;\n}" : "=r"(d) : "r"(w));
  return d;
}

/* Two f32 -> f16 (round to nearest even), packed like formats.h's mxf_f32x2_to_bf16x2. */
__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

} /* namespace mxf_sm90 */
#endif
