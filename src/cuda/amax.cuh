/*
 * amax.cuh — device helpers for the amax of a gemm_amax run (SPEC §1.2), shared by the
 * portable and the sm_90a kernels.
 *
 * The amax lives in device memory as one f32. Every kernel folds its values into it with
 * atomicMax on the f32 BITS read as unsigned: for non-negative floats the unsigned order
 * of the bits is the numeric order, and a NaN, mapped to 0x7FFFFFFF, sorts above +inf
 * (0x7F800000), so one atomicMax both takes the maximum and propagates NaN exactly.
 * That needs the stored value to be canonical before the first atomic:
 *   overwrite  (default):            *amax = +0           (cudaMemsetAsync)
 *   accumulate (MXF_AMAX_ACCUMULATE): -0 / negatives -> +0, any NaN -> 0x7FFFFFFF
 *                                     (a one-thread pre-kernel)
 * Both are stream-ordered and CUDA-graph capturable: call mxf_amax_begin() on the run's
 * stream before the GEMM kernel.
 *
 * Usage in a kernel (every thread of the CTA must reach the commit):
 *   uint32_t m = 0;
 *   for (each acc value v this thread owns) m = mxf_amax_fold(m, v);
 *   __shared__ uint32_t red[32];
 *   mxf_amax_cta_commit(m, amax, red);
 */
#ifndef MXF_AMAX_CUH
#define MXF_AMAX_CUH

#include <cuda_runtime.h>
#include <stdint.h>

/* |x| as ordered bits: NaN (either sign, any payload) -> 0x7FFFFFFF. */
__device__ __forceinline__ uint32_t mxf_amax_bits(float x) {
  uint32_t u = __float_as_uint(x) & 0x7FFFFFFFu;
  return u > 0x7F800000u ? 0x7FFFFFFFu : u;
}

/* max(m, |x|) in the ordered-bits domain. */
__device__ __forceinline__ uint32_t mxf_amax_fold(uint32_t m, float x) {
  uint32_t u = mxf_amax_bits(x);
  return u > m ? u : m;
}

/* The same maximum kept as an f32 (m >= +0 or NaN): one max.NaN instruction per value,
 * |x| being an operand modifier; NaN propagates. mxf_amax_f32_bits gives the ordered bits
 * that mxf_amax_fold keeps (any NaN -> 0x7FFFFFFF). */
__device__ __forceinline__ float mxf_amax_fold_f32(float m, float x) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(m), "f"(fabsf(x)));
  return r;
}
__device__ __forceinline__ uint32_t mxf_amax_f32_bits(float m) { return m != m ? 0x7FFFFFFFu : __float_as_uint(m); }

/* Max over the 32 lanes of a full warp; every lane gets the result. */
__device__ __forceinline__ uint32_t mxf_amax_warp_reduce(uint32_t v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    uint32_t o = __shfl_xor_sync(0xFFFFFFFFu, v, off);
    v = o > v ? o : v;
  }
  return v;
}

/* Max over the whole CTA (1-D or multi-D, any size up to 1024 threads); the result is
 * valid in thread 0 only. `red` is shared scratch of 32 words. Contains __syncthreads:
 * every thread of the CTA must call it. */
__device__ __forceinline__ uint32_t mxf_amax_cta_reduce(uint32_t v, uint32_t *red) {
  const int tid = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  const int nthreads = (int)(blockDim.x * blockDim.y * blockDim.z);
  const int nwarps = (nthreads + 31) >> 5;
  /* a partial last warp: its missing lanes simply never contribute (shfl needs all 32
   * lanes of the mask present, so reduce through shared memory instead) */
  if ((nthreads & 31) == 0) {
    v = mxf_amax_warp_reduce(v);
    if ((tid & 31) == 0) red[tid >> 5] = v;
  } else {
    if (tid < 32) red[tid] = 0;
    __syncthreads();
    atomicMax(&red[tid >> 5], v);
  }
  __syncthreads();
  uint32_t r = 0;
  if (tid < 32) {
    r = tid < nwarps ? red[tid] : 0u;
    r = mxf_amax_warp_reduce(r);
  }
  __syncthreads(); /* `red` may be reused right after */
  return r;
}

/* CTA reduce, then one atomicMax per CTA into *amax (skipped when the CTA's max is +0:
 * the canonical stored value is already >= +0). */
__device__ __forceinline__ void mxf_amax_cta_commit(uint32_t v, float *amax, uint32_t *red) {
  const int tid = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  uint32_t r = mxf_amax_cta_reduce(v, red);
  if (tid == 0 && r != 0u) atomicMax(reinterpret_cast<unsigned int *>(amax), r);
}

/* Previous contents made canonical for accumulation (see top). */
__device__ __forceinline__ uint32_t mxf_amax_canonical(uint32_t u) {
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFFFFFFu; /* NaN, either sign */
  if (u & 0x80000000u) return 0u; /* -0 and negatives: max(prev, |acc|) >= +0 anyway */
  return u;
}

/* *amax made ready for the atomics (one thread, before the kernel that folds into it):
 * +0 (overwrite) or its canonical previous value (accumulate). */
__device__ __forceinline__ void mxf_amax_prepare(float *amax, int accumulate) {
  unsigned int *p = reinterpret_cast<unsigned int *>(amax);
  *p = accumulate ? mxf_amax_canonical(*p) : 0u;
}

/* The accumulate pre-kernel. */
static __global__ void __launch_bounds__(1) mxf_amax_canonicalize_kernel(float *amax) { mxf_amax_prepare(amax, 1); }

/* Prepares *amax on `stream` before the kernel's atomics: overwrite -> +0, accumulate ->
 * canonical previous value. Returns the launch/memset error, if any. */
static inline cudaError_t mxf_amax_begin(float *amax, int accumulate, cudaStream_t stream) {
  if (!accumulate) return cudaMemsetAsync(amax, 0, sizeof(float), stream);
  mxf_amax_canonicalize_kernel<<<1, 1, 0, stream>>>(amax);
  return cudaGetLastError();
}

#endif /* MXF_AMAX_CUH */
