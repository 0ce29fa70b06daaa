/*
 * gpu_util.h — helpers shared by the GPU tests (tests/gpu/test_*.c): whether to skip,
 * device buffers with fail-fast CUDA calls, poisoning, the "small" mode for sanitizer
 * runs. Header-only (static inline) because CMake builds each tests/gpu/test_*.c as its
 * own executable and globs nothing else in this folder.
 *
 * Every GPU test opens with
 *     int rc = gu_skip_if_unavailable("test_name");  if (rc) return rc;
 * which prints the reason and returns 77 (ctest's skip) when the library was built
 * without CUDA or no device is visible. The CUDA-only parts are under MXF_WITH_CUDA
 * (CMake defines it, and links cudart, for GPU tests of a CUDA build).
 */
#ifndef MXF_GPU_UTIL_H
#define MXF_GPU_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxfuse.h"
#include "testutil.h"

#if defined(MXF_WITH_CUDA)
#include <cuda_runtime.h>
#endif

/* The device the GPU tests put their tensors on (a harness may point it elsewhere). */
#ifndef GU_TEST_DEVICE
#define GU_TEST_DEVICE MXF_DEVICE_CUDA(0)
#endif

/* 77 (after printing why) when the GPU tests cannot run here, else 0. */
static inline int gu_skip_if_unavailable(const char *name) {
#if !defined(MXF_WITH_CUDA)
  return tu_skip(name, "built without the CUDA backend");
#else
  if (!mxf_has_cuda()) return tu_skip(name, "the library was built without the CUDA backend");
  if (mxf_cuda_device_count() == 0) return tu_skip(name, "no CUDA device visible");
  return 0;
#endif
}

/* MXF_GPU_TEST_SMALL=1: only small cases (for compute-sanitizer runs). */
static inline int gu_small(void) {
  const char *e = getenv("MXF_GPU_TEST_SMALL");
  return e && *e && strcmp(e, "0") != 0;
}

/* MXF_GPU_TEST_MODES=a,b: run only the named kernel modes of a test that has several
 * (each prints its name as it ends), so that a long run can be split; unset: every mode. */
static inline int gu_mode_on(const char *mode) { return tu_env_lists("MXF_GPU_TEST_MODES", mode); }

#if defined(MXF_WITH_CUDA)
/* A failing CUDA call in a test is a broken environment, not a finding: stop at once. */
#define GU_CUDA(call)                                                                               \
  do {                                                                                              \
    cudaError_t gu_err_ = (call);                                                                   \
    if (gu_err_ != cudaSuccess) {                                                                   \
      fprintf(stdout, "FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(gu_err_)); \
      exit(1);                                                                                      \
    }                                                                                               \
  } while (0)

static inline void *gu_dmalloc(size_t n) {
  void *p = NULL;
  GU_CUDA(cudaMalloc(&p, n ? n : 16));
  return p;
}

/* A device copy of n host bytes. */
static inline void *gu_to_device(const void *h, size_t n) {
  void *d = gu_dmalloc(n);
  if (n) GU_CUDA(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
  return d;
}

static inline void gu_to_host(void *h, const void *d, size_t n) {
  if (n) GU_CUDA(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
}

/* Fills n device bytes with `byte` (0xA5: catches unwritten outputs). */
static inline void gu_dpoison(void *d, size_t n, uint8_t byte) { GU_CUDA(cudaMemset(d, byte, n)); }

/* Compute capability of device 0 as 10*major+minor. */
static inline int gu_device_cc(void) {
  int major = 0, minor = 0;
  GU_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  GU_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
  return major * 10 + minor;
}

/* The status of an mxfuse call, with the message when it failed. */
#define GU_MXF_OK(call, ...)                                                                        \
  do {                                                                                              \
    mxf_status gu_st_ = (call);                                                                     \
    if (!TU_CHECK(gu_st_ == MXF_OK, "%s -> %s: %s", #call, mxf_status_string(gu_st_), mxf_last_error())) { \
      __VA_ARGS__;                                                                                  \
    }                                                                                               \
  } while (0)
#endif

#endif /* MXF_GPU_UTIL_H */
