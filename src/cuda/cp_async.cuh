/*
 * cp_async.cuh — sm_80 asynchronous copies global -> shared (cp.async), shared by the
 * portable and the sm_90a kernels. Each wrapper is one instruction.
 *
 * A thread's copies form commit groups in issue order; mxf_cp_async_wait<N>() returns once
 * at most N of this thread's groups are still in flight. The copies are then visible to
 * the issuing thread only: a barrier (__syncwarp among the lanes of a warp, __syncthreads
 * across the CTA) makes them visible to the others.
 */
#ifndef MXF_CP_ASYNC_CUH
#define MXF_CP_ASYNC_CUH

#include <stdint.h>

__device__ __forceinline__ uint32_t mxf_smem_addr(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* 4 bytes, through L1. */
__device__ __forceinline__ void mxf_cp_async_4(uint32_t dst, const void *src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}

/* 16 bytes past L1; the first src_bytes (0 or 16) come from src, the rest are zeros (src
 * is not read when src_bytes is 0, but must still be a valid address expression). */
__device__ __forceinline__ void mxf_cp_async_16_zfill(uint32_t dst, const void *src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void mxf_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N> __device__ __forceinline__ void mxf_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

#endif /* MXF_CP_ASYNC_CUH */
