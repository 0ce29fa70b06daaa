/*
 * parallel.c — the parallel-for of the CPU ops, on a pool of worker threads.
 *
 * The panel driver (sgemm_cpu.c) runs a parallel-for per block it dequantizes and per
 * tile it finishes: tens to hundreds a run, each short. Starting and joining a thread
 * costs tens of microseconds (more on virtual machines), and the caller starts them one
 * after the other, so the workers are started once, on first use, and park on a
 * condition variable between calls, after watching for the next call a little while. A
 * call waits only for the workers that joined it: once its own thread has taken the last
 * chunk, the call is closed to the others, so that a worker that wakes late (a parked
 * thread of a virtual machine idle for milliseconds: up to a millisecond) neither runs
 * any of it nor holds it up. The pool grows to the largest worker count asked for
 * (MXF_NUM_THREADS may change between calls) and never shrinks.
 *
 * One call owns the pool at a time. A call that finds it owned (another thread of the
 * process runs an op, or a task calls back into the parallel-for) runs its range on its
 * own thread: concurrent callers neither wait for each other nor deadlock, and no thread
 * is started per call (the cores are busy with the owner's workers anyway). A call's range is cut into
 * several chunks a thread (at least `grain` long) that the threads take as they become free: on a machine
 * shared with other work (the GEMM core's own threads spin for a while after each call) a thread that gets
 * less of its core leaves its chunks to the others. Which thread runs which chunk varies; the chunks do not.
 * mxf_parallel_for_runs cuts its range into chunks of `grain` and gives each thread a contiguous run of them,
 * taken in order before it helps with the others' runs: the streaming path's tasks ask for the next task's
 * codes ahead, which is then their own thread's next task (with chunks handed out in turn, each chunk's first
 * task read its codes unasked).
 *
 * fork(): the CPU ops run inside a gate (mxf_cpu_op_enter/leave) that the fork handlers
 * close: a fork waits until no CPU op is in flight, so neither this pool nor a vendor's
 * (OpenBLAS shuts its own down in its fork handler, which hangs while a GEMM runs on it)
 * is caught mid-call; ours run before the vendors' (handlers registered later prepare
 * first). The child has no workers: a handler forgets them, and the child may call
 * mxfuse. A destructor stops and joins the workers when the library is unloaded.
 * The backend's story: docs/kernels/cpu.md.
 */
#if !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#endif
#include "cpu/parallel.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define MXF_MAX_THREADS 256

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Below this much work (multiply-adds) an op runs on the calling thread: waking the pool,
 * handing out chunks and joining costs more than it saves. gemm_amax, MXFP8 -> bf16, on 2
 * cores shared with other work (bench/bench_python.py, best of alternating rounds): 64^3
 * (2^18) took 77 us a call with the team, 13 us on the calling thread; at 128x256x256
 * (2^23) the team wins, 109 us against 157 us. */
#define MXF_SERIAL_WORK ((int64_t)1 << 21)
static _Thread_local int serial; /* this thread runs an op below the threshold */

int mxf_parallel_small(int64_t work) {
  const int before = serial;
  serial = before || work < MXF_SERIAL_WORK;
  return before;
}

void mxf_parallel_restore(int before) { serial = before; }

int mxf_cpu_threads(void) {
  if (serial) return 1;
  const char *env = getenv("MXF_NUM_THREADS");
  if (env) {
    int v = atoi(env);
    if (v >= 1) return v > MXF_MAX_THREADS ? MXF_MAX_THREADS : v;
  }
  /* the CPUs this process may run on (taskset, a container's cpuset), else those online */
  long n = 0;
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
#endif
  if (n < 1) n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  return n > MXF_MAX_THREADS ? MXF_MAX_THREADS : (int)n;
}

/* ------------------------------------------------------------ one call's chunks */
#define MXF_CHUNKS_PER_THREAD 8

typedef struct mxf_job {
  mxf_range_fn fn;
  void *ctx;
  int64_t n, size, chunks; /* chunk i is [i*size, (i+1)*size) clipped to n */
  int64_t next;            /* the next chunk to hand out (atomic) */
  /* mxf_parallel_for_runs: the chunks cut into `runs` contiguous runs, run r from chunk
   * r * chunks / runs on; cursor[r] its next chunk (atomic) */
  int64_t runs;
  int64_t *cursor;
} mxf_job;

static void job_chunk(const mxf_job *j, int64_t i) {
  const int64_t b = i * j->size, e = j->n - b < j->size ? j->n : b + j->size;
  j->fn(j->ctx, b, e);
}

/* Runs chunks of the job until none is left: the next one of all (runs: those of run
 * `who`, in order, then what is left of the others'). */
static void job_take(mxf_job *j, int64_t who) {
  if (j->runs) {
    for (int64_t q = 0; q < j->runs; ++q) {
      const int64_t r = (who + q) % j->runs, end = (r + 1) * j->chunks / j->runs;
      for (int64_t i; (i = __atomic_fetch_add(&j->cursor[r], 1, __ATOMIC_RELAXED)) < end;)
        job_chunk(j, i);
    }
    return;
  }
  for (int64_t i; (i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < j->chunks;)
    job_chunk(j, i);
}

/* ------------------------------------------------------------ the pool */
static struct {
  pthread_mutex_t lock; /* guards everything below */
  pthread_cond_t wake;  /* a new generation, or stop */
  pthread_cond_t done;  /* active reached 0 */
  pthread_t th[MXF_MAX_THREADS];
  uint64_t born[MXF_MAX_THREADS]; /* the generation when worker w was started */
  int64_t workers;                /* started: worker w (1..workers) is th[w] */
  int busy;                       /* a call owns the pool */
  int stop;
  uint64_t generation;
  mxf_job *job;    /* the call's, on its caller's stack; NULL once its caller has taken its last chunk */
  int64_t helpers; /* workers 1..helpers may take part in this generation */
  int64_t active;  /* of them, those in the job (joined while it was open), not yet done */
} g_pool = {
    .lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

static void pool_forget_after_fork(void) {
  /* the child runs only the forking thread: no workers, nothing in flight */
  pthread_mutex_init(&g_pool.lock, NULL);
  pthread_cond_init(&g_pool.wake, NULL);
  pthread_cond_init(&g_pool.done, NULL);
  g_pool.workers = 0;
  g_pool.busy = 0;
  g_pool.stop = 0;
  g_pool.active = 0;
}

/* ------------------------------------------------------------ the fork gate */
static struct {
  pthread_mutex_t lock;
  pthread_cond_t cv;
  int64_t active; /* CPU ops in flight */
  int forking;    /* a fork waits for active == 0; no op enters meanwhile */
} g_gate = {.lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void fork_prepare(void) {
  pthread_mutex_lock(&g_gate.lock);
  g_gate.forking = 1;
  while (g_gate.active > 0)
    pthread_cond_wait(&g_gate.cv, &g_gate.lock);
  pthread_mutex_lock(&g_pool.lock); /* held across fork: the child's copy is consistent */
}

static void fork_parent(void) {
  pthread_mutex_unlock(&g_pool.lock);
  g_gate.forking = 0;
  pthread_cond_broadcast(&g_gate.cv);
  pthread_mutex_unlock(&g_gate.lock);
}

static int g_forked_child; /* this process was forked from one that ran CPU ops */

int mxf_cpu_forked_child(void) { return g_forked_child; }

static void fork_child(void) {
  g_forked_child = 1;
  pthread_mutex_init(&g_gate.lock, NULL);
  pthread_cond_init(&g_gate.cv, NULL);
  g_gate.active = 0;
  g_gate.forking = 0;
  pool_forget_after_fork();
}

static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;
static void fork_register(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

/* Registered at load too: after the vendors' libraries (loaded first), so that ours
 * prepare before theirs. */
__attribute__((constructor)) static void fork_register_at_load(void) {
  pthread_once(&g_fork_once, fork_register);
}

void mxf_cpu_op_enter(void) {
  pthread_once(&g_fork_once, fork_register);
  pthread_mutex_lock(&g_gate.lock);
  while (g_gate.forking)
    pthread_cond_wait(&g_gate.cv, &g_gate.lock);
  ++g_gate.active;
  pthread_mutex_unlock(&g_gate.lock);
}

void mxf_cpu_op_leave(void) {
  pthread_mutex_lock(&g_gate.lock);
  if (--g_gate.active == 0 && g_gate.forking) pthread_cond_broadcast(&g_gate.cv);
  pthread_mutex_unlock(&g_gate.lock);
}

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define MXF_MXCSR_FTZ_DAZ 0x8040u /* flush-to-zero (bit 15), denormals-are-zero (bit 6) */
unsigned mxf_cpu_fp_enter(void) {
  const unsigned saved = _mm_getcsr();
  if (saved & MXF_MXCSR_FTZ_DAZ) _mm_setcsr(saved & ~MXF_MXCSR_FTZ_DAZ);
  return saved;
}
void mxf_cpu_fp_leave(unsigned saved) {
  if (_mm_getcsr() != saved) _mm_setcsr(saved);
}
#else
unsigned mxf_cpu_fp_enter(void) { return 0; }
void mxf_cpu_fp_leave(unsigned saved) { (void)saved; }
#endif

/* Before a worker parks on the condition variable, and before a call waits on its
 * workers, it watches for the event a while (about 50 to 200 us): a parked thread takes
 * tens to hundreds of microseconds to wake (a virtual machine's idle core the most), and
 * an op runs several parallel-fors back to back (a decode-size gemm_amax: 1 x 7168 x 2048
 * MXFP4 on 2 cores took 1.74 ms when its threads had been idle, 1.01 ms right after
 * another call). The variables watched are written under the lock, atomically. */
#define MXF_POOL_SPIN 4096 /* pause instructions */
static inline void pool_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static void *pool_worker(void *arg) {
  const int64_t w = (int64_t)(intptr_t)arg;
  (void)mxf_cpu_fp_enter(); /* for the thread's life */
  pthread_mutex_lock(&g_pool.lock);
  uint64_t seen = g_pool.born[w]; /* a generation begun before this thread ran is its own */
  for (;;) {
    if (g_pool.generation == seen && !g_pool.stop) {
      pthread_mutex_unlock(&g_pool.lock);
      for (int i = 0; i < MXF_POOL_SPIN && __atomic_load_n(&g_pool.generation, __ATOMIC_ACQUIRE) == seen &&
                      !__atomic_load_n(&g_pool.stop, __ATOMIC_ACQUIRE);
           ++i)
        pool_pause();
      pthread_mutex_lock(&g_pool.lock);
    }
    while (g_pool.generation == seen && !g_pool.stop)
      pthread_cond_wait(&g_pool.wake, &g_pool.lock);
    if (g_pool.stop) break;
    seen = g_pool.generation;
    if (w > g_pool.helpers || !g_pool.job) continue; /* not part of this call, or woken after it */
    mxf_job *job = g_pool.job;
    __atomic_add_fetch(&g_pool.active, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&g_pool.lock);
    job_take(job, w);
    pthread_mutex_lock(&g_pool.lock);
    if (__atomic_sub_fetch(&g_pool.active, 1, __ATOMIC_RELEASE) == 0) pthread_cond_signal(&g_pool.done);
  }
  pthread_mutex_unlock(&g_pool.lock);
  return NULL;
}

__attribute__((destructor)) static void pool_stop(void) {
  pthread_mutex_lock(&g_pool.lock);
  if (g_pool.busy) { /* unloaded in the middle of a call: leave the workers be */
    pthread_mutex_unlock(&g_pool.lock);
    return;
  }
  __atomic_store_n(&g_pool.stop, 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&g_pool.wake);
  const int64_t workers = g_pool.workers;
  g_pool.workers = 0;
  pthread_mutex_unlock(&g_pool.lock);
  for (int64_t w = 1; w <= workers; ++w)
    pthread_join(g_pool.th[w], NULL);
}

/* Runs the job on the caller and nt - 1 workers of the pool (fewer if some cannot be
 * started); 0 if the pool is owned by another call. */
static int pool_run(mxf_job *job, int64_t nt) {
  pthread_mutex_lock(&g_pool.lock);
  if (g_pool.busy || g_pool.stop) {
    pthread_mutex_unlock(&g_pool.lock);
    return 0;
  }
  g_pool.busy = 1;
  while (g_pool.workers < nt - 1) {
    const int64_t w = g_pool.workers + 1;
    g_pool.born[w] = g_pool.generation;
    if (pthread_create(&g_pool.th[w], NULL, pool_worker, (void *)(intptr_t)w) != 0) break;
    g_pool.workers = w;
  }
  g_pool.job = job;
  g_pool.helpers = g_pool.workers < nt - 1 ? g_pool.workers : nt - 1;
  __atomic_store_n(&g_pool.active, 0, __ATOMIC_RELAXED);
  __atomic_add_fetch(&g_pool.generation, 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&g_pool.wake);
  pthread_mutex_unlock(&g_pool.lock);

  job_take(job, 0);

  /* every chunk taken: the job closes to workers not yet in it (one that wakes late finds
     nothing to do and is not waited for), and the call waits for those in it */
  pthread_mutex_lock(&g_pool.lock);
  g_pool.job = NULL;
  if (g_pool.active > 0) {
    pthread_mutex_unlock(&g_pool.lock);
    for (int i = 0; i < MXF_POOL_SPIN && __atomic_load_n(&g_pool.active, __ATOMIC_ACQUIRE) > 0; ++i)
      pool_pause();
    pthread_mutex_lock(&g_pool.lock);
  }
  while (g_pool.active > 0)
    pthread_cond_wait(&g_pool.done, &g_pool.lock);
  g_pool.busy = 0;
  pthread_mutex_unlock(&g_pool.lock);
  return 1;
}

static void parallel_for(int64_t n, int64_t grain, mxf_range_fn fn, void *ctx, int runs) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t nt = mxf_cpu_threads();
  if (nt > cdiv(n, grain)) nt = cdiv(n, grain);
  if (nt <= 1) {
    fn(ctx, 0, n);
    return;
  }
  /* several chunks a thread, so that one slowed down (by another process on its core)
   * leaves its share to the others; runs: chunks of `grain`, a thread's next chunk
   * being the one after its last until its run is done */
  int64_t size = runs ? grain : cdiv(n, nt * MXF_CHUNKS_PER_THREAD);
  if (size < grain) size = grain;
  int64_t cursor[MXF_MAX_THREADS];
  mxf_job job = {fn, ctx, n, size, cdiv(n, size), 0, runs ? nt : 0, cursor};
  for (int64_t r = 0; r < job.runs; ++r)
    cursor[r] = r * job.chunks / job.runs;
  if (!pool_run(&job, nt)) job_take(&job, 0); /* the pool is another call's: this thread alone */
}

void mxf_parallel_for(int64_t n, int64_t grain, mxf_range_fn fn, void *ctx) {
  parallel_for(n, grain, fn, ctx, 0);
}

void mxf_parallel_for_runs(int64_t n, int64_t grain, mxf_range_fn fn, void *ctx) {
  parallel_for(n, grain, fn, ctx, 1);
}

/* ------------------------------------------------------------ on OpenMP's threads */
#if defined(MXF_HAVE_OPENMP)
#include <omp.h>
#endif

void mxf_parallel_for_omp(int64_t n, int64_t grain, mxf_range_fn fn, void *ctx) {
#if defined(MXF_HAVE_OPENMP)
  if (g_forked_child) { /* GNU OpenMP's threads do not survive a fork: our pool instead */
    mxf_parallel_for(n, grain, fn, ctx);
    return;
  }
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t nt = mxf_cpu_threads();
  if (nt > cdiv(n, grain)) nt = cdiv(n, grain);
  if (nt <= 1 || omp_in_parallel()) {
    fn(ctx, 0, n);
    return;
  }
  int64_t size = cdiv(n, nt * MXF_CHUNKS_PER_THREAD);
  if (size < grain) size = grain;
  const int64_t chunks = cdiv(n, size);
#pragma omp parallel for schedule(dynamic, 1) num_threads((int)nt)
  for (int64_t i = 0; i < chunks; ++i)
    fn(ctx, i * size, n - i * size < size ? n : (i + 1) * size);
#else
  mxf_parallel_for(n, grain, fn, ctx);
#endif
}
