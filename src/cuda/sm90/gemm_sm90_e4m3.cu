/* gemm_sm90_e4m3.cu — the Hopper gemm_amax kernel's instances with e4m3 A (the register operand). */
#define MXF_SM90_FMT FMT_E4M3
#include "cuda/sm90/gemm_sm90_instances.cuh"
