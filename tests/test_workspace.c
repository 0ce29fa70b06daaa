/*
 * test_workspace.c — the one-call form's memory on the CPU backend: its runs share one
 * workspace arena per thread, grown to the largest workspace asked for, so memory does
 * not grow with the number of shapes; and the one-call form with the caller's workspace
 * (mxf_<op>_workspace_size + mxf_<op>_with_workspace) allocates nothing and refuses a
 * workspace too small without writing anything. Every result equals the plan form's.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "testutil.h"

enum { N = 1024, K = 512, KB = K / 32, MAXM = 200 };

typedef struct weights {
  uint8_t *b, *sfb, *a, *sfa; /* b (N, K), a (MAXM, K) e4m3, compact scales */
} weights;

static void weights_init(weights *w, tu_rng *rng) {
  w->b = tu_malloc(N * K), w->sfb = tu_malloc(N * KB), w->a = tu_malloc(MAXM * K),
  w->sfa = tu_malloc(MAXM * KB);
  for (int i = 0; i < N * K; ++i)
    w->b[i] = (uint8_t)(tu_u32(rng) & 0xF7); /* finite e4m3, either sign */
  for (int i = 0; i < MAXM * K; ++i)
    w->a[i] = (uint8_t)(tu_u32(rng) & 0xF7);
  for (int i = 0; i < N * KB; ++i)
    w->sfb[i] = (uint8_t)tu_range(rng, 118, 126);
  for (int i = 0; i < MAXM * KB; ++i)
    w->sfa[i] = (uint8_t)tu_range(rng, 118, 126);
}

static void weights_free(weights *w) { free(w->b), free(w->sfb), free(w->a), free(w->sfa); }

/* gemm_amax of the first m rows of a against b, bf16 C (m, N). */
static mxf_gemm_amax_desc desc_of(const weights *w, int64_t m, uint16_t *c, float *amax) {
  int64_t as[2] = {m, K}, bs[2] = {N, K}, sas[2] = {m, KB}, sbs[2] = {N, KB}, cs[2] = {m, N}, one[1] = {1};
  mxf_gemm_amax_desc d;
  memset(&d, 0, sizeof d);
  d.a = tu_tensor(w->a, MXF_E4M3, 2, as);
  d.b = tu_tensor(w->b, MXF_E4M3, 2, bs);
  d.sfa = tu_tensor(w->sfa, MXF_E8M0, 2, sas);
  d.sfb = tu_tensor(w->sfb, MXF_E8M0, 2, sbs);
  d.c = tu_tensor(c, MXF_BF16, 2, cs);
  d.amax = tu_tensor(amax, MXF_F32, 1, one);
  d.sf_vec = 32;
  return d;
}

/* The plan form's C and amax, and its workspace size. */
static size_t plan_form(const weights *w, int64_t m, uint16_t *c, float *amax) {
  mxf_gemm_amax_desc d = desc_of(w, m, NULL, NULL);
  mxf_plan *plan = NULL;
  if (mxf_gemm_amax_plan(&plan, &d) != MXF_OK) return (size_t)-1;
  size_t n = mxf_plan_workspace_size(plan);
  void *ws = n ? tu_malloc(n) : NULL;
  mxf_gemm_amax_args args = {w->a, w->b, w->sfa, w->sfb, c, amax, NULL};
  mxf_status st = mxf_gemm_amax_run(plan, &args, ws, n, NULL);
  free(ws);
  mxf_plan_destroy(plan);
  return st == MXF_OK ? n : (size_t)-1;
}

static long peak_rss_kib(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

/* 200 distinct shapes through the one-call form: results equal the plan form's, the
 * arena holds exactly the largest workspace so far, and the peak RSS grows by no more
 * than what one workspace (and this test's own buffers) explain. */
static void test_many_shapes(const weights *w, tu_rng *rng) {
  uint16_t *c = tu_malloc((size_t)MAXM * N * 2), *ref = tu_malloc((size_t)MAXM * N * 2);
  float amax = 0.0f, ref_amax = 0.0f;
  mxf_plan_cache_clear();
  TU_CHECK(mxf_plan_cache_workspace_bytes() == 0, "no arena after a clear: %zu bytes",
           mxf_plan_cache_workspace_bytes());
  /* the plan form's references first: their workspaces are this test's, freed at once */
  size_t largest = 0;
  int order[MAXM];
  for (int i = 0; i < MAXM; ++i)
    order[i] = i + 1;
  for (int i = MAXM - 1; i > 0; --i) { /* a random order of M = 1..200 */
    int j = (int)tu_range(rng, 0, i), t = order[i];
    order[i] = order[j], order[j] = t;
  }
  for (int i = 0; i < MAXM; ++i) {
    size_t n = plan_form(w, order[i], ref, &ref_amax);
    if (n != (size_t)-1 && n > largest) largest = n;
  }
  /* warm-up: the GEMM core's own buffers for the largest M, one small one-call run */
  plan_form(w, MAXM, ref, &ref_amax);
  mxf_gemm_amax_desc d0 = desc_of(w, 1, c, &amax);
  TU_CHECK(mxf_gemm_amax(&d0, NULL) == MXF_OK, "warm-up call: %s", mxf_last_error());
  long rss0 = peak_rss_kib();
  int bad = 0, arena_bad = 0;
  size_t so_far = 0;
  for (int i = 0; i < MAXM; ++i) {
    int64_t m = order[i];
    size_t need = plan_form(w, m, ref, &ref_amax);
    if (need > so_far && need != (size_t)-1) so_far = need;
    tu_poison(c, (size_t)m * N * 2, 0xA5);
    mxf_gemm_amax_desc d = desc_of(w, m, c, &amax);
    mxf_status st = mxf_gemm_amax(&d, NULL);
    bad += st != MXF_OK || memcmp(c, ref, (size_t)m * N * 2) || memcmp(&amax, &ref_amax, sizeof amax);
    arena_bad += mxf_plan_cache_workspace_bytes() < so_far || mxf_plan_cache_workspace_bytes() > largest;
  }
  long growth_kib = peak_rss_kib() - rss0;
  TU_CHECK(bad == 0, "200 one-call runs equal the plan form (%d differ)", bad);
  TU_CHECK(arena_bad == 0, "the arena holds the largest workspace so far, never more (%d times not)",
           arena_bad);
  TU_CHECK(mxf_plan_cache_workspace_bytes() == largest,
           "arena %zu bytes after 200 shapes; largest workspace %zu", mxf_plan_cache_workspace_bytes(),
           largest);
  /* the plan form's own workspaces (freed) and an arena grown in steps both fit twice the
   * largest workspace; 4 MiB for the allocator */
  long bound_kib = (long)(2 * largest / 1024) + 4 * 1024;
  printf("  peak RSS growth over 200 shapes: %ld KiB (bound %ld KiB; largest workspace %zu bytes)\n",
         growth_kib, bound_kib, largest);
  TU_CHECK(growth_kib <= bound_kib, "peak RSS grew by %ld KiB over 200 shapes; bound %ld KiB", growth_kib,
           bound_kib);
  mxf_plan_cache_clear();
  TU_CHECK(mxf_plan_cache_workspace_bytes() == 0, "clear frees the arenas: %zu bytes left",
           mxf_plan_cache_workspace_bytes());
  free(c), free(ref);
}

/* The caller's workspace: size query, exact size, too small (refused, nothing written). */
static void test_caller_workspace(const weights *w) {
  enum { M = 77 };
  uint16_t *c = tu_malloc(M * N * 2), *ref = tu_malloc(M * N * 2);
  float amax = -1.0f, ref_amax = 0.0f;
  size_t plan_ws = plan_form(w, M, ref, &ref_amax);
  mxf_plan_cache_clear();
  mxf_gemm_amax_desc d = desc_of(w, M, NULL, NULL);
  size_t ws_size = 12345;
  TU_CHECK(mxf_gemm_amax_workspace_size(&d, &ws_size) == MXF_OK, "workspace_size: %s", mxf_last_error());
  TU_CHECK(ws_size == plan_ws, "workspace_size %zu equals the plan's %zu", ws_size, plan_ws);
  TU_CHECK(mxf_gemm_amax_workspace_size(&d, NULL) == MXF_ERR_INVALID_VALUE, "NULL size pointer refused");
  d = desc_of(w, M, c, &amax);
  if (ws_size > 0) {
    void *small = tu_malloc(ws_size);
    tu_poison(c, M * N * 2, 0xA5);
    mxf_status st = mxf_gemm_amax_with_workspace(&d, small, ws_size - 1, NULL);
    TU_CHECK(st == MXF_ERR_INVALID_VALUE, "a workspace one byte short is refused: %s", mxf_status_string(st));
    TU_CHECK(strstr(mxf_last_error(), "workspace") != NULL, "the message names the workspace: %s",
             mxf_last_error());
    TU_CHECK(tu_all_bytes(c, M * N * 2, 0xA5) && amax == -1.0f, "nothing written on refusal");
    free(small);
  }
  void *ws = ws_size ? tu_malloc(ws_size) : NULL;
  tu_poison(c, M * N * 2, 0xA5);
  mxf_status st = mxf_gemm_amax_with_workspace(&d, ws, ws_size, NULL);
  TU_CHECK(st == MXF_OK, "with_workspace runs: %s", mxf_last_error());
  TU_CHECK(!memcmp(c, ref, M * N * 2) && amax == ref_amax, "with_workspace equals the plan form");
  TU_CHECK(mxf_plan_cache_workspace_bytes() == 0, "with_workspace takes no arena: %zu bytes",
           mxf_plan_cache_workspace_bytes());
  d.c.data = NULL;
  st = mxf_gemm_amax_with_workspace(&d, ws, ws_size, NULL);
  TU_CHECK(st == MXF_ERR_INVALID_VALUE, "with_workspace needs data pointers: %s", mxf_status_string(st));
  free(ws), free(c), free(ref);
  mxf_plan_cache_clear();
}

typedef struct worker {
  const weights *w;
  int64_t m;
  int ok;
} worker;

static void *worker_main(void *arg) {
  worker *k = arg;
  uint16_t *c = tu_malloc((size_t)k->m * N * 2), *ref = tu_malloc((size_t)k->m * N * 2);
  float amax, ref_amax;
  k->ok = plan_form(k->w, k->m, ref, &ref_amax) != (size_t)-1;
  for (int i = 0; i < 20 && k->ok; ++i) {
    mxf_gemm_amax_desc d = desc_of(k->w, k->m - (i % 3), c, &amax);
    if (i % 3 == 0)
      k->ok &= mxf_gemm_amax(&d, NULL) == MXF_OK && !memcmp(c, ref, (size_t)k->m * N * 2);
    else
      k->ok &= mxf_gemm_amax(&d, NULL) == MXF_OK;
  }
  free(c), free(ref);
  return NULL;
}

/* Threads: each has its own arena on the CPU (runs execute on the caller's thread). */
static void test_threads(const weights *w) {
  enum { NT = 3 };
  pthread_t th[NT];
  worker k[NT];
  mxf_plan_cache_clear();
  for (int i = 0; i < NT; ++i) {
    k[i].w = w, k[i].m = 60 + 40 * i, k[i].ok = 0;
    pthread_create(&th[i], NULL, worker_main, &k[i]);
  }
  for (int i = 0; i < NT; ++i) {
    pthread_join(th[i], NULL);
    TU_CHECK(k[i].ok, "thread %d: one-call results equal the plan form", i);
  }
  uint16_t dummy;
  float am;
  size_t sum = 0;
  for (int i = 0; i < NT; ++i) {
    mxf_gemm_amax_desc d = desc_of(w, k[i].m, &dummy, &am);
    size_t s = 0;
    mxf_gemm_amax_workspace_size(&d, &s);
    sum += s;
  }
  TU_CHECK(mxf_plan_cache_workspace_bytes() <= sum, "one arena per thread: %zu bytes, at most %zu",
           mxf_plan_cache_workspace_bytes(), sum);
  mxf_plan_cache_clear();
}

int main(void) {
  /* large blocks always from mmap, so that freed ones leave the RSS and the peak measures
   * what is held, not the allocator's heap */
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  tu_rng rng;
  tu_rng_init(&rng, tu_seed());
  weights w;
  weights_init(&w, &rng);
  test_caller_workspace(&w);
  test_many_shapes(&w, &rng);
  test_threads(&w);
  weights_free(&w);
  return tu_finish("test_workspace");
}
