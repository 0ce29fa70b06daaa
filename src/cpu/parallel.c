/* A parallel-for on short-lived pthreads: simple, and the CPU ops are long enough that
 * thread start-up (tens of microseconds) is noise. */
#include "cpu/parallel.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#define MXF_MAX_THREADS 256

int mxf_cpu_threads(void) {
  const char *env = getenv("MXF_NUM_THREADS");
  if (env) {
    int v = atoi(env);
    if (v >= 1) return v > MXF_MAX_THREADS ? MXF_MAX_THREADS : v;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  return n > MXF_MAX_THREADS ? MXF_MAX_THREADS : (int)n;
}

typedef struct {
  mxf_range_fn fn;
  void *ctx;
  int64_t begin, end;
} mxf_chunk;

static void *mxf_chunk_main(void *p) {
  mxf_chunk *c = (mxf_chunk *)p;
  c->fn(c->ctx, c->begin, c->end);
  return NULL;
}

void mxf_parallel_for(int64_t n, int64_t grain, mxf_range_fn fn, void *ctx) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t chunks = (n + grain - 1) / grain;
  int64_t nt = mxf_cpu_threads();
  if (nt > chunks) nt = chunks;
  if (nt <= 1) {
    fn(ctx, 0, n);
    return;
  }
  mxf_chunk c[MXF_MAX_THREADS];
  pthread_t th[MXF_MAX_THREADS];
  int started[MXF_MAX_THREADS] = {0};
  int64_t per = (n + nt - 1) / nt;
  for (int64_t i = 0; i < nt; ++i) {
    c[i].fn = fn;
    c[i].ctx = ctx;
    c[i].begin = i * per < n ? i * per : n;
    c[i].end = (i + 1) * per < n ? (i + 1) * per : n;
  }
  for (int64_t i = 1; i < nt; ++i)
    started[i] = pthread_create(&th[i], NULL, mxf_chunk_main, &c[i]) == 0;
  fn(ctx, c[0].begin, c[0].end);
  for (int64_t i = 1; i < nt; ++i) {
    if (started[i])
      pthread_join(th[i], NULL);
    else
      fn(ctx, c[i].begin, c[i].end); /* could not start a thread: do its share here */
  }
}
