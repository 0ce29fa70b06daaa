/*
 * test_fork.c — fork() while other threads run CPU ops: neither parent nor child hangs,
 * and the child can call mxfuse (as DataLoader workers and multiprocessing do). Four
 * threads run gemm_amax in a loop; the main thread forks repeatedly, each child runs one
 * gemm_amax and checks its amax. Bounded in time: a child that does not finish within
 * 20 s, or a parent stuck for 120 s (alarm), fails the test.
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

enum { M = 256, N = 256, K = 256, THREADS = 4, FORKS = 12 };

static int g_stop;

/* One e4m3 gemm of ones (unit scales): amax = K. */
static float one_gemm(void) {
  static _Thread_local uint8_t a[M * K], b[N * K], sfa[M * K / 32], sfb[N * K / 32];
  static _Thread_local float c[M * N];
  tu_ones_e4m3(M, N, K, a, b, sfa, sfb);
  float amax = -1;
  mxf_gemm_amax_desc d = tu_gemm_e4m3_desc(M, N, K, a, b, sfa, sfb, c, &amax);
  return mxf_gemm_amax(&d, NULL) == MXF_OK ? amax : -1;
}

static void *runner(void *arg) {
  (void)arg;
  while (!__atomic_load_n(&g_stop, __ATOMIC_RELAXED))
    if (one_gemm() != K) return (void *)1;
  return NULL;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "FAIL test_fork: the parent hung (alarm after 120 s)\n";
  if (write(2, msg, sizeof msg - 1) < 0) _exit(3);
  _exit(1);
}

int main(void) {
  signal(SIGALRM, on_alarm);
  alarm(120);
  TU_CHECK(one_gemm() == K, "warm-up gemm: %s", mxf_last_error());
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; ++i)
    pthread_create(&th[i], NULL, runner, NULL);
  int ok = 0;
  for (int f = 0; f < FORKS; ++f) {
    usleep(20000);
    pid_t pid = fork();
    if (pid == 0) {
      alarm(0);
      _exit(one_gemm() == K ? 0 : 2);
    }
    TU_CHECK(pid > 0, "fork failed");
    if (pid < 0) break;
    int status = 0, done = 0;
    for (int t = 0; t < 2000 && !done; ++t) { /* 20 s */
      done = waitpid(pid, &status, WNOHANG) == pid;
      if (!done) usleep(10000);
    }
    if (!done) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
    TU_CHECK(done && WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork %d: child %s (status 0x%x)", f,
             done ? "failed" : "hung for 20 s", status);
    ok += done && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  __atomic_store_n(&g_stop, 1, __ATOMIC_RELAXED);
  for (int i = 0; i < THREADS; ++i) {
    void *r;
    pthread_join(th[i], &r);
    TU_CHECK(r == NULL, "runner %d: wrong amax or error: %s", i, mxf_last_error());
  }
  TU_CHECK(ok == FORKS, "%d of %d children ran", ok, FORKS);
  return tu_finish("test_fork");
}
