/*
 * cpu_config.c — the CPU backend's MXF_CONFIG keys (cpu.h): cpu=onednn|blas|c, its GEMM
 * core; cpu_isa=avx512|avx2|baseline, the instruction set of the library's kernels;
 * cpu_stream=on|off, whether few rows take the streaming path (on, the default).
 */
#include <stddef.h>

#include "cpu/cpu.h"

static const mxf_config_key k_keys[] = {
    {"cpu",
     offsetof(mxf_cpu_override, cpu),
     {{"onednn", MXF_CPU_CORE_ONEDNN}, {"blas", MXF_CPU_CORE_BLAS}, {"c", MXF_CPU_CORE_C}, {NULL, 0}}},
    {"cpu_isa",
     offsetof(mxf_cpu_override, isa),
     {{"avx512", MXF_CPU_ISA_AVX512},
      {"avx2", MXF_CPU_ISA_AVX2},
      {"baseline", MXF_CPU_ISA_BASELINE},
      {NULL, 0}}},
    {"cpu_stream", offsetof(mxf_cpu_override, stream), {{"off", 0}, {"on", 1}, {NULL, 0}}},
};

const mxf_config_keys mxf_cpu_config_keys = {
    k_keys, sizeof k_keys / sizeof *k_keys,
    "cpu=onednn|blas|c, cpu_isa=avx512|avx2|baseline, cpu_stream=on|off"};
