/* parallel.h — a minimal parallel-for over the machine's cores (pthreads). */
#ifndef MXF_PARALLEL_H
#define MXF_PARALLEL_H

#include <stdint.h>

/* Calls fn(ctx, begin, end) on disjoint chunks covering [0, n), on up to
 * mxf_cpu_threads() threads (the caller's thread included); returns when all are done.
 * Chunks are contiguous and at least `grain` long (except the last); which thread runs
 * which chunk is not fixed. */
typedef void (*mxf_range_fn)(void *ctx, int64_t begin, int64_t end);
void mxf_parallel_for(int64_t n, int64_t grain, mxf_range_fn fn, void *ctx);

/* The same with chunks of `grain`, each thread taking those of its own contiguous run of
 * [0, n) in order and then what is left of the others': for tasks that ask for the next
 * chunk's data ahead (the streaming path's), which is then mostly their own thread's. */
void mxf_parallel_for_runs(int64_t n, int64_t grain, mxf_range_fn fn, void *ctx);

/* The same on OpenMP's threads (those a GEMM core on OpenMP runs on, so that the two do
 * not compete for the cores: onednn_cpu.c), the same chunks; mxf_parallel_for where the
 * library is built without OpenMP. Inside an OpenMP parallel region it runs serially. */
void mxf_parallel_for_omp(int64_t n, int64_t grain, mxf_range_fn fn, void *ctx);

/* An op of `work` multiply-adds below the library's threshold runs on the calling thread:
 * mxf_parallel_small(work) at its start (returns the state to restore), then
 * mxf_parallel_restore(state) at its end; meanwhile mxf_cpu_threads() is 1. */
int mxf_parallel_small(int64_t work);
void mxf_parallel_restore(int before);

/* Worker count: 1 inside a small op (above), else MXF_NUM_THREADS if set (>= 1), else the
 * number of online cores. */
int mxf_cpu_threads(void);

/* The floating-point environment the CPU backend computes in: on x86, MXCSR without
 * flush-to-zero and denormals-are-zero, whatever the calling thread had set (XLA's CPU
 * threads set both), so that subnormal inputs, products and sums are what SPEC §1.2 and
 * §5.1 say. mxf_cpu_fp_enter returns the caller's state for mxf_cpu_fp_leave; the
 * library's own threads enter it when they start. */
unsigned mxf_cpu_fp_enter(void);
void mxf_cpu_fp_leave(unsigned saved);
/* Around every CPU op's run: a fork() waits until no op is in flight (and ops wait while
 * a fork is under way), so that no thread pool, ours or a vendor's, forks mid-call. */
void mxf_cpu_op_enter(void);
void mxf_cpu_op_leave(void);
/* 1 in a child forked from a process that had loaded mxfuse: no OpenMP there (GNU
 * OpenMP's pool does not survive a fork), so no oneDNN unless asked for. */
int mxf_cpu_forked_child(void);

#endif
