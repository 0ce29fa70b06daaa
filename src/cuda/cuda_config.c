/*
 * cuda_config.c — the CUDA backend's MXF_CONFIG keys (cuda_config.h). Compiled in every
 * build, so that a configuration naming them is accepted where the backend is not built.
 */
#include <stddef.h>

#include "cuda/cuda_config.h"

#define OV(f) offsetof(mxf_cuda_override, f)
#define ON_OFF                                                                                               \
  {                                                                                                          \
    {"off", 0}, {"on", 1}, { NULL, 0 }                                                                       \
  }
static const mxf_config_key k_keys[] = {
    {"gemm",
     OV(gemm),
     {{"portable", MXF_KERNEL_PORTABLE}, {"gemv", MXF_KERNEL_GEMV}, {"sm90", MXF_KERNEL_SM90}, {NULL, 0}}},
    {"proj", OV(proj), {{"portable", MXF_KERNEL_PORTABLE}, {"sm90", MXF_KERNEL_SM90}, {NULL, 0}}},
    {"swap", OV(swap), ON_OFF},
    {"bpre", OV(bpre), ON_OFF},
    {"bcwide", OV(bcwide), ON_OFF},
    {"f16", OV(f16), ON_OFF},
    {"wg3", OV(wg3), ON_OFF},
    {"sfraw", OV(sfraw), ON_OFF},
    {"cring", OV(cring), ON_OFF},
    {"mxfp8", OV(mxfp8), {{"prepass", 0}, {"mainloop", 1}, {NULL, 0}}},
};

const mxf_config_keys mxf_cuda_config_keys = {
    k_keys, sizeof k_keys / sizeof *k_keys,
    "gemm=portable|gemv|sm90, proj=portable|sm90, swap|bpre|bcwide|f16|wg3|sfraw|cring=on|off, "
    "mxfp8=prepass|mainloop"};
