/*
 * test_affinity.c — without MXF_NUM_THREADS the CPU backend takes as many threads as the
 * CPUs the process may run on (its affinity: taskset, a container's cpuset), not as many
 * as the machine has online: a process held to one CPU starts no worker, one held to two
 * starts one (the pool's workers, counted in /proc/self/task, stay after the call).
 * Skipped on a machine (or under an affinity) of fewer than two CPUs, or without /proc.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* The threads of this process: the entries of /proc/self/task (-1 without /proc). */
static int thread_count(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

enum { M = 256, N = 256, K = 256 }; /* 2^24 multiply-adds: beyond the calling thread's share */

/* One gemm_amax (e4m3, every value 1): the threads it started, or -1 when it failed. */
static int threads_started(void) {
  uint8_t *a = malloc(M * K), *b = malloc(N * K), *sfa = malloc(M * K / 32), *sfb = malloc(N * K / 32);
  float *c = malloc(sizeof(float) * M * N), amax = 0;
  tu_ones_e4m3(M, N, K, a, b, sfa, sfb);
  mxf_gemm_amax_desc d = tu_gemm_e4m3_desc(M, N, K, a, b, sfa, sfb, c, &amax);
  const int before = thread_count();
  const int ok = mxf_gemm_amax(&d, NULL) == MXF_OK && amax == K && c[M * N - 1] == K;
  const int started = thread_count() - before; /* the pool's workers stay, parked */
  free(a), free(b), free(sfa), free(sfb), free(c);
  return ok ? started : -1;
}

int main(void) {
  unsetenv("MXF_NUM_THREADS");
  cpu_set_t all, one, two;
  if (sched_getaffinity(0, sizeof all, &all) != 0 || CPU_COUNT(&all) < 2)
    return tu_skip("test_affinity", "fewer than two CPUs to run on");
  if (thread_count() < 1) return tu_skip("test_affinity", "no /proc/self/task to count threads in");
  CPU_ZERO(&one);
  CPU_ZERO(&two);
  for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE && seen < 2; ++cpu)
    if (CPU_ISSET(cpu, &all)) {
      if (!seen) CPU_SET(cpu, &one);
      CPU_SET(cpu, &two);
      ++seen;
    }
  const char *asked = tu_cpu_core_asked();
  if (asked && strcmp(asked, "c") != 0)
    return tu_skip("test_affinity", "a vendor core is asked for (MXF_CONFIG); its threads are its own");

  TU_CHECK(sched_setaffinity(0, sizeof one, &one) == 0, "sched_setaffinity to one CPU failed");
  int n = threads_started();
  TU_CHECK(n == 0, "held to 1 of %d CPUs: %d threads started (want 0)", CPU_COUNT(&all), n);
  TU_CHECK(sched_setaffinity(0, sizeof two, &two) == 0, "sched_setaffinity to two CPUs failed");
  n = threads_started();
  TU_CHECK(n == 1, "held to 2 of %d CPUs: %d threads started (want 1 worker)", CPU_COUNT(&all), n);
  TU_CHECK(sched_setaffinity(0, sizeof all, &all) == 0, "sched_setaffinity back failed");
  return tu_finish("test_affinity");
}
