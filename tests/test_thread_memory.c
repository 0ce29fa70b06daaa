/*
 * test_thread_memory.c — memory and threads follow the live threads: the one-call
 * workspace of a thread that exited is released, and concurrent callers start no
 * threads per call (the pool's workers are started once). Threads started by the
 * library are counted by wrapping pthread_create.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static int g_created; /* threads started by anyone but this test */
static __thread int g_mine;

int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
  static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
  if (!real)
    real = (int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *))dlsym(RTLD_NEXT,
                                                                                          "pthread_create");
  if (!g_mine) __atomic_fetch_add(&g_created, 1, __ATOMIC_RELAXED);
  return real(t, attr, fn, arg);
}

enum { M = 128, N = 128, K = 128 };

static void *one_call(void *arg) {
  const int calls = (int)(intptr_t)arg;
  uint8_t *a = malloc(M * K), *b = malloc(N * K), *sfa = malloc(M * K / 32), *sfb = malloc(N * K / 32);
  float *c = malloc(sizeof(float) * M * N), amax = 0;
  tu_ones_e4m3(M, N, K, a, b, sfa, sfb);
  mxf_gemm_amax_desc d = tu_gemm_e4m3_desc(M, N, K, a, b, sfa, sfb, c, &amax);
  int bad = 0;
  for (int i = 0; i < calls; ++i)
    bad |= mxf_gemm_amax(&d, NULL) != MXF_OK || amax != K;
  free(a), free(b), free(sfa), free(sfb), free(c);
  return (void *)(intptr_t)bad;
}

static int run_threads(int n, int calls) {
  pthread_t th[64];
  int bad = 0;
  g_mine = 1;
  for (int i = 0; i < n; ++i)
    pthread_create(&th[i], NULL, one_call, (void *)(intptr_t)calls);
  g_mine = 0;
  for (int i = 0; i < n; ++i) {
    void *r;
    pthread_join(th[i], &r);
    bad |= r != NULL;
  }
  return bad;
}

int main(void) {
  setenv("MXF_NUM_THREADS", "4", 1);
  setenv("MXF_CONFIG", "cpu=c", 1); /* the library's own pool, no vendor's */
  /* 40 threads, one call each: their workspaces go with them */
  TU_CHECK(!run_threads(40, 1), "a call failed: %s", mxf_last_error());
  TU_CHECK(mxf_plan_cache_workspace_bytes() == 0, "%zu workspace bytes held after every caller exited",
           mxf_plan_cache_workspace_bytes());
  /* 8 concurrent callers, 25 calls each: at most the pool's 3 workers are started */
  const int before = g_created;
  TU_CHECK(!run_threads(8, 25), "a call failed: %s", mxf_last_error());
  TU_CHECK(g_created - before <= 3, "%d threads started by 200 concurrent calls; expected at most 3 workers",
           g_created - before);
  return tu_finish("test_thread_memory");
}
