#include "testutil.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

long tu_passed, tu_failed;

uint64_t tu_seed(void) {
  static int printed;
  static uint64_t seed;
  if (!printed) {
    /* line-buffered even into a file, so that a test cut off by a timeout leaves what it
     * had printed (the FAIL lines first of all) */
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *env = getenv("MXF_SEED");
    if (env && *env)
      seed = strtoull(env, NULL, 0);
    else {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      seed = (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec;
    }
    printf("seed=%llu (replay with MXF_SEED=%llu)\n", (unsigned long long)seed, (unsigned long long)seed);
    fflush(stdout);
    printed = 1;
  }
  return seed;
}

void tu_rng_init(tu_rng *r, uint64_t seed) { mxf_rng_init(r, seed); }

uint64_t tu_u64(tu_rng *r) { return mxf_rng_u64(r); }

uint32_t tu_u32(tu_rng *r) { return (uint32_t)(tu_u64(r) >> 32); }

int64_t tu_range(tu_rng *r, int64_t lo, int64_t hi) {
  return lo + (int64_t)(tu_u64(r) % (uint64_t)(hi - lo + 1));
}

double tu_uniform(tu_rng *r) { return mxf_rng_uniform(r); }

double tu_normal(tu_rng *r) {
  double u1 = tu_uniform(r), u2 = tu_uniform(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int tu_check(int ok, const char *file, int line, const char *fmt, ...) {
  if (ok) {
    ++tu_passed;
    return 1;
  }
  if (++tu_failed <= 50) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stdout, "FAIL %s:%d: ", file, line);
    vfprintf(stdout, fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
  }
  return 0;
}

int tu_finish(const char *name) {
  printf("%s: %ld passed, %ld failed\n", name, tu_passed, tu_failed);
  return tu_failed ? 1 : 0;
}

int tu_skip(const char *name, const char *why) {
  printf("%s: SKIPPED: %s\n", name, why);
  return 77;
}

void tu_poison(void *p, size_t n, uint8_t byte) { memset(p, byte, n); }

int tu_all_bytes(const void *p, size_t n, uint8_t byte) {
  const uint8_t *b = (const uint8_t *)p;
  for (size_t i = 0; i < n; ++i)
    if (b[i] != byte) return 0;
  return 1;
}

void *tu_malloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "test: out of memory (%zu bytes)\n", n);
    exit(2);
  }
  return p;
}

static size_t guarded_body(size_t n, size_t page) { return (n + page - 1) / page * page; }

void *tu_malloc_guarded(size_t n) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE), body = guarded_body(n, page);
  uint8_t *map = mmap(NULL, body + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED || mprotect(map + body, page, PROT_NONE) != 0) {
    fprintf(stderr, "test: no guarded buffer of %zu bytes\n", n);
    exit(2);
  }
  return map + body - n;
}

void tu_free_guarded(void *p, size_t n) {
  if (!p) return;
  const size_t page = (size_t)sysconf(_SC_PAGESIZE), body = guarded_body(n, page);
  munmap((uint8_t *)p + n - body, body + page);
}

mxf_tensor tu_tensor(void *data, mxf_dtype dtype, int ndim, const int64_t *shape) {
  mxf_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.ndim = ndim;
  for (int i = 0; i < ndim; ++i)
    t.shape[i] = shape[i];
  return t;
}

int tu_kernel_is(const char *name, const char *kernel) {
  const size_t n = strlen(kernel);
  return strncmp(name, kernel, n) == 0 && (name[n] == '\0' || name[n] == ' ');
}

int tu_env_lists(const char *var, const char *name) {
  const char *list = getenv(var);
  if (!list || !*list) return 1;
  const size_t n = strlen(name);
  for (const char *s = list;;) {
    const char *end = strchr(s, ',');
    const size_t len = end ? (size_t)(end - s) : strlen(s);
    if (len == n && strncmp(s, name, n) == 0) return 1;
    if (!end) return 0;
    s = end + 1;
  }
}

/* ------------------------------------------------------------ the CPU backend's GEMM core */
const char *tu_cpu_core_asked(void) {
  static const char *const cores[] = {"onednn", "blas", "c"};
  const char *cfg = getenv("MXF_CONFIG");
  if (!cfg) return NULL;
  for (const char *s = cfg; (s = strstr(s, "cpu=")) != NULL; s += 4) {
    if (s != cfg && s[-1] != ',') continue;
    for (size_t i = 0; i < sizeof cores / sizeof *cores; ++i) {
      const size_t n = strlen(cores[i]);
      if (strncmp(s + 4, cores[i], n) == 0 && (s[4 + n] == '\0' || s[4 + n] == ',')) return cores[i];
    }
  }
  return NULL;
}

int tu_cpu_core_fits(const char *backend, int empty_gemm) {
  if (!backend || strncmp(backend, "cpu/", 4) != 0) return 0;
  const char *core = tu_cpu_core_asked();
  return !core || empty_gemm || tu_kernel_is(backend + 4, core);
}

int tu_cpu_core_missing(char *why, size_t n) {
  why[0] = '\0';
  if (!tu_cpu_core_asked()) return 0;
  static uint8_t a[128 * 128], b[128 * 128], sfa[128 * 4], sfb[128 * 4];
  static uint16_t c[128 * 128];
  static float amax;
  const int64_t op[2] = {128, 128}, sf[2] = {128, 4}, one[1] = {1};
  mxf_gemm_amax_desc d;
  memset(&d, 0, sizeof d);
  d.a = tu_tensor(a, MXF_E4M3, 2, op), d.b = tu_tensor(b, MXF_E4M3, 2, op);
  d.sfa = tu_tensor(sfa, MXF_E8M0, 2, sf), d.sfb = tu_tensor(sfb, MXF_E8M0, 2, sf);
  d.c = tu_tensor(c, MXF_BF16, 2, op), d.amax = tu_tensor(&amax, MXF_F32, 1, one);
  d.sf_vec = 32;
  mxf_plan *plan = NULL;
  const mxf_status st = mxf_gemm_amax_plan(&plan, &d);
  mxf_plan_destroy(plan);
  if (st != MXF_ERR_NOT_SUPPORTED) return 0;
  snprintf(why, n, "%s", mxf_last_error());
  return 1;
}

static long g_core_n[4]; /* onednn, blas, c, other */
void tu_cpu_core_count(const char *backend) {
  static const char *const cores[] = {"cpu/onednn", "cpu/blas", "cpu/c"};
  int i = 0;
  while (i < 3 && !(backend && tu_kernel_is(backend, cores[i])))
    ++i;
  __atomic_fetch_add(&g_core_n[i], 1, __ATOMIC_RELAXED);
}
void tu_cpu_core_print(void) {
  printf("GEMM cores used: onednn %ld, blas %ld, c %ld, other %ld (MXF_CONFIG cpu=%s)\n", g_core_n[0],
         g_core_n[1], g_core_n[2], g_core_n[3], tu_cpu_core_asked() ? tu_cpu_core_asked() : "(choose)");
}

uint16_t tu_bf16_activation(tu_rng *r) {
  const uint16_t h = (uint16_t)tu_u32(r);
  const int wide = tu_range(r, 0, 7) == 0;
  if (wide && tu_range(r, 0, 15) == 0) return h & 0x8000; /* ±0 */
  const int e = wide ? (int)tu_range(r, 87, 151) : (int)tu_range(r, 120, 134);
  return (uint16_t)((h & 0x807F) | (e << 7));
}

void tu_ones_e4m3(int64_t m, int64_t n, int64_t k, void *a, void *b, void *sfa, void *sfb) {
  memset(a, 0x38, (size_t)(m * k));
  memset(b, 0x38, (size_t)(n * k));
  memset(sfa, 127, (size_t)(m * (k / 32)));
  memset(sfb, 127, (size_t)(n * (k / 32)));
}

mxf_gemm_amax_desc tu_gemm_e4m3_desc(int64_t m, int64_t n, int64_t k, void *a, void *b, void *sfa, void *sfb,
                                     void *c, float *amax) {
  const int64_t sa[2] = {m, k}, sb[2] = {n, k}, ssa[2] = {m, (k + 31) / 32}, ssb[2] = {n, (k + 31) / 32},
                sc[2] = {m, n}, one[1] = {1};
  mxf_gemm_amax_desc d;
  memset(&d, 0, sizeof d);
  d.a = tu_tensor(a, MXF_E4M3, 2, sa);
  d.b = tu_tensor(b, MXF_E4M3, 2, sb);
  d.sfa = tu_tensor(sfa, MXF_E8M0, 2, ssa);
  d.sfb = tu_tensor(sfb, MXF_E8M0, 2, ssb);
  d.c = tu_tensor(c, MXF_F32, 2, sc);
  d.amax = tu_tensor(amax, MXF_F32, 1, one);
  d.sf_vec = 32;
  return d;
}
