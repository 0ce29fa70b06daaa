/* gemm_sm90_e5m2.cu — the Hopper gemm_amax kernel's instances with e5m2 A (the register operand). */
#define MXF_SM90_FMT FMT_E5M2
#include "cuda/sm90/gemm_sm90_instances.cuh"
