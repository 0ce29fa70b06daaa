/* The portable kernel set's first member: reports the architecture a kernel image was
 * built for, so that a run can tell which image the driver picked (SASS or PTX). */
#include "core/internal.h"

__global__ void mxf_arch_probe_kernel(int *out) {
#if defined(__CUDA_ARCH__)
  if (threadIdx.x == 0 && blockIdx.x == 0) *out = __CUDA_ARCH__;
#endif
}
