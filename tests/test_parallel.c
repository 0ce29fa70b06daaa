/*
 * test_parallel.c — the CPU backend's parallel-for (src/cpu/parallel.c, built into this
 * test): mxf_parallel_for and mxf_parallel_for_runs cover [0, n) exactly once, in chunks
 * of at least `grain` (runs: exactly `grain`, the last excepted), whatever the thread
 * count and extent, also when called from inside a task (the pool is then the outer
 * call's, and the inner range runs on the task's thread); with runs, a thread takes
 * each run's chunks in increasing order. Calls made after the workers have parked are
 * checked the same way: their workers often wake after the call has taken its last chunk,
 * and must then find the call closed and run none of it.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/parallel.h"
#include "testutil.h"

enum { MAX_N = 1000, MAX_CALLS = 1200 };

typedef struct rec {
  pthread_t who;
  int64_t begin, end;
} rec;

typedef struct visit {
  int64_t n, grain;
  int runs, nested;
  int hits[MAX_N];
  rec calls[MAX_CALLS];
  int ncalls;
  int bad_nested;
} visit;

static void inner(void *ctx, int64_t b, int64_t e) {
  int *hits = (int *)ctx;
  for (int64_t i = b; i < e; ++i)
    __atomic_add_fetch(&hits[i], 1, __ATOMIC_RELAXED);
}

static void task(void *ctx, int64_t b, int64_t e) {
  visit *v = (visit *)ctx;
  const int c = __atomic_fetch_add(&v->ncalls, 1, __ATOMIC_RELAXED);
  if (c < MAX_CALLS) v->calls[c] = (rec){pthread_self(), b, e};
  for (int64_t i = b; i < e; ++i)
    __atomic_add_fetch(&v->hits[i], 1, __ATOMIC_RELAXED);
  if (v->nested) { /* a parallel-for inside a task: all of its range, once */
    int h[40] = {0};
    (v->runs ? mxf_parallel_for_runs : mxf_parallel_for)(40, 3, inner, h);
    for (int i = 0; i < 40; ++i)
      if (h[i] != 1) __atomic_add_fetch(&v->bad_nested, 1, __ATOMIC_RELAXED);
  }
}

static void check(int threads, int64_t n, int64_t grain, int runs, int nested) {
  char env[16];
  snprintf(env, sizeof env, "%d", threads);
  setenv("MXF_NUM_THREADS", env, 1);
  static visit v;
  memset(&v, 0, sizeof v);
  v.n = n, v.grain = grain, v.runs = runs, v.nested = nested;
  (runs ? mxf_parallel_for_runs : mxf_parallel_for)(n, grain, task, &v);
  char what[96];
  snprintf(what, sizeof what, "%s n=%lld grain=%lld threads=%d%s", runs ? "runs" : "for", (long long)n,
           (long long)grain, threads, nested ? " nested" : "");
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i)
    wrong += v.hits[i] != 1;
  TU_CHECK(wrong == 0, "%s: %lld indices not visited exactly once", what, (long long)wrong);
  TU_CHECK(v.ncalls <= MAX_CALLS, "%s: %d calls", what, v.ncalls);
  TU_CHECK(v.bad_nested == 0, "%s: %d indices of the inner ranges not visited exactly once", what,
           v.bad_nested);
  /* chunk sizes: at least grain (runs: grain) but for the one ending at n; one thread
   * (or one chunk) takes the whole range in one call */
  if (threads == 1 || n <= grain) {
    TU_CHECK(v.ncalls == 1 && v.calls[0].begin == 0 && v.calls[0].end == n,
             "%s: %d calls where one thread takes the whole range", what, v.ncalls);
    return;
  }
  int bad = 0;
  for (int c = 0; c < v.ncalls && c < MAX_CALLS; ++c) {
    const int64_t len = v.calls[c].end - v.calls[c].begin;
    bad += !(len > 0 && (v.calls[c].end == n ? len <= (runs ? grain : n)
                         : runs              ? len == grain
                                             : len >= grain));
  }
  TU_CHECK(bad == 0, "%s: %d chunks of the wrong length", what, bad);
  if (!runs) return;
  /* each thread's chunks of one run come in increasing order (the run's cursor only
   * moves forward); the runs: the threads' shares of the chunks, cut as the library does
   * (run r from chunk r * chunks / nt on) */
  const int64_t chunks = (n + grain - 1) / grain, nt = threads < chunks ? threads : chunks;
  bad = 0;
  for (int c = 0; c < v.ncalls; ++c)
    for (int d = c + 1; d < v.ncalls; ++d) {
      if (!pthread_equal(v.calls[c].who, v.calls[d].who)) continue;
      const int64_t ic = v.calls[c].begin / grain, id = v.calls[d].begin / grain;
      int64_t rc = 0, rd = 0;
      while ((rc + 1) * chunks / nt <= ic)
        ++rc;
      while ((rd + 1) * chunks / nt <= id)
        ++rd;
      bad += rc == rd && ic > id;
    }
  TU_CHECK(bad == 0, "%s: %d pairs of a run's chunks taken by one thread out of order", what, bad);
}

int main(void) {
  const int threads[] = {1, 2, 3, 5};
  const int64_t ns[] = {1, 7, 64, 1000}, grains[] = {1, 3, 64};
  for (size_t t = 0; t < sizeof threads / sizeof threads[0]; ++t)
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; ++i)
      for (size_t g = 0; g < sizeof grains / sizeof grains[0]; ++g)
        for (int runs = 0; runs < 2; ++runs)
          for (int rep = 0; rep < 20; ++rep)
            check(threads[t], ns[i], grains[g], runs, 0);
  for (int runs = 0; runs < 2; ++runs)
    for (int rep = 0; rep < 20; ++rep) {
      check(2, 64, 1, runs, 1);
      check(3, 100, 7, runs, 1);
    }
  /* 2 ms apart, longer than the workers watch before they park: each call wakes them,
     and one that wakes late meets the call over or the next one */
  const struct timespec gap = {0, 2000000};
  for (int rep = 0; rep < 40; ++rep) {
    check(rep % 2 ? 3 : 2, 64, 1, rep % 4 < 2, 0);
    nanosleep(&gap, NULL);
    check(2, 7, 1, 1, 0);
  }
  return tu_finish("test_parallel");
}
