/* gemm_sm90_e2m1.cu — the Hopper gemm_amax kernel's instances with e2m1 A (the register operand). */
#define MXF_SM90_FMT FMT_E2M1
#include "cuda/sm90/gemm_sm90_instances.cuh"
