/*
 * cpu_config.c — the CPU backend's MXF_CONFIG key (cpu.h): cpu=onednn|blas|c, its GEMM core.
 */
#include <stddef.h>

#include "cpu/cpu.h"

static const mxf_config_key k_keys[] = {
    {"cpu",
     offsetof(mxf_cpu_override, cpu),
     {{"onednn", MXF_CPU_CORE_ONEDNN}, {"blas", MXF_CPU_CORE_BLAS}, {"c", MXF_CPU_CORE_C}, {NULL, 0}}},
};

const mxf_config_keys mxf_cpu_config_keys = {k_keys, sizeof k_keys / sizeof *k_keys, "cpu=onednn|blas|c"};
