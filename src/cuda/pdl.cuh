/*
 * pdl.cuh — programmatic dependent launch, shared by the portable and the sm_90a kernels.
 *
 * A kernel launched with mxf_launch(..., dependent = true, ...) may be scheduled before
 * the kernel ahead of it on the stream ends, once every CTA of that one has called
 * mxf_pdl_allow_dependents() (or exited); it must call mxf_pdl_wait() before it reads
 * anything the kernel ahead writes (that one's completion and memory). Below sm_90, and
 * for a launch without the attribute, both device calls are no-ops.
 */
#ifndef MXF_PDL_CUH
#define MXF_PDL_CUH

#include <cuda_runtime.h>

__device__ __forceinline__ void mxf_pdl_allow_dependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void mxf_pdl_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Launches k(args...) on the stream; `dependent`: as a programmatic dependent of the
 * kernel before it (the attribute needs sm_90; callers pass false below). */
template <typename... P, typename... A>
static inline cudaError_t mxf_launch(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                     bool dependent, A &&...args) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = dependent ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, k, static_cast<A &&>(args)...);
}

#endif
