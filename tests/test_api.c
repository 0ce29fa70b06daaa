/*
 * test_api.c — the library's small public surface: version, status strings, dtype
 * traits, scale-factor layout helpers (checked against the SPEC §1.1 formula written
 * here), plan lifecycle, last-error semantics, devices, and the one-call plan cache
 * (results equal to the plan form, eviction, clearing and use from several threads).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static uint64_t g_seed;

/* ------------------------------------------------------------ version, status, dtypes */
static void test_version(void) {
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", MXF_VERSION_MAJOR, MXF_VERSION_MINOR, MXF_VERSION_PATCH);
  TU_CHECK(mxf_version() == MXF_VERSION_NUMBER, "mxf_version %d", mxf_version());
  TU_CHECK(mxf_version() == 100, "version 0.1.0 is 100, got %d", mxf_version());
  TU_CHECK(strcmp(mxf_version_string(), want) == 0, "version string %s, expected %s", mxf_version_string(),
           want);
}

static void test_status(void) {
  static const struct {
    mxf_status s;
    const char *name;
  } t[] = {{MXF_OK, "MXF_OK"},
           {MXF_ERR_INVALID_VALUE, "MXF_ERR_INVALID_VALUE"},
           {MXF_ERR_NOT_SUPPORTED, "MXF_ERR_NOT_SUPPORTED"},
           {MXF_ERR_CUDA, "MXF_ERR_CUDA"},
           {MXF_ERR_NO_MEMORY, "MXF_ERR_NO_MEMORY"},
           {MXF_ERR_INTERNAL, "MXF_ERR_INTERNAL"}};
  for (size_t i = 0; i < sizeof t / sizeof *t; ++i)
    TU_CHECK(strcmp(mxf_status_string(t[i].s), t[i].name) == 0, "status %d: %s", (int)t[i].s,
             mxf_status_string(t[i].s));
  const char *u = mxf_status_string((mxf_status)77);
  TU_CHECK(u != NULL && *u, "unknown status has a name");
}

static void test_dtypes(void) {
  static const struct {
    mxf_dtype d;
    const char *name;
    int bits;
  } t[] = {{MXF_F32, "f32", 32},  {MXF_F16, "f16", 16},  {MXF_BF16, "bf16", 16},    {MXF_E4M3, "e4m3", 8},
           {MXF_E5M2, "e5m2", 8}, {MXF_E2M1, "e2m1", 4}, {MXF_E2M1X2, "e2m1x2", 8}, {MXF_E8M0, "e8m0", 8},
           {MXF_U8, "u8", 8},     {MXF_I8, "i8", 8},     {MXF_I32, "i32", 32}};
  TU_CHECK(sizeof t / sizeof *t == MXF_DTYPE_COUNT - 1, "every dtype listed");
  for (size_t i = 0; i < sizeof t / sizeof *t; ++i) {
    TU_CHECK(strcmp(mxf_dtype_name(t[i].d), t[i].name) == 0, "dtype %d name %s", (int)t[i].d,
             mxf_dtype_name(t[i].d));
    TU_CHECK(mxf_dtype_bits(t[i].d) == t[i].bits, "dtype %s bits %d", t[i].name, mxf_dtype_bits(t[i].d));
  }
  mxf_dtype bad[] = {MXF_DTYPE_INVALID, MXF_DTYPE_COUNT, (mxf_dtype)-3, (mxf_dtype)1000};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; ++i) {
    TU_CHECK(strcmp(mxf_dtype_name(bad[i]), "invalid") == 0, "dtype %d is invalid", (int)bad[i]);
    TU_CHECK(mxf_dtype_bits(bad[i]) == 0, "invalid dtype %d has 0 bits", (int)bad[i]);
  }
}

/* ------------------------------------------------------------ scale-factor layouts */
static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* SPEC §1.1, written out term by term. */
static int64_t spec_offset(int64_t r, int64_t kb, int64_t l, int64_t mn, int64_t k, int sf_vec) {
  int64_t R = cdiv(mn, 128), Kb = cdiv(k, sf_vec), Kp = cdiv(Kb, 4);
  return l * R * Kp * 512 + ((r / 128) * Kp + kb / 4) * 512 + (r % 32) * 16 + ((r / 32) % 4) * 4 + (kb % 4);
}

static void test_sf(tu_rng *rng) {
  /* sizes */
  for (int it = 0; it < 200; ++it) {
    int64_t mn = tu_range(rng, 1, 1000), k = tu_range(rng, 1, 3000), l = tu_range(rng, 1, 4);
    int sfv = tu_range(rng, 0, 1) ? 32 : 16;
    int64_t kb = cdiv(k, sfv);
    TU_CHECK(mxf_sf_size(mn, k, l, sfv, MXF_SF_COMPACT) == (size_t)(l * mn * kb),
             "compact size mn=%lld k=%lld", (long long)mn, (long long)k);
    TU_CHECK(mxf_sf_size(mn, k, l, sfv, MXF_SF_SWIZZLED) == (size_t)(l * cdiv(mn, 128) * cdiv(kb, 4) * 512),
             "swizzled size mn=%lld k=%lld", (long long)mn, (long long)k);
  }
  TU_CHECK(mxf_sf_size(300, 512, 1, 32, MXF_SF_SWIZZLED) == 3 * 4 * 512, "M=300 K=512 swizzled size");
  TU_CHECK(mxf_sf_size(0, 512, 1, 32, MXF_SF_COMPACT) == 0, "mn=0 -> 0");
  TU_CHECK(mxf_sf_size(10, -1, 1, 32, MXF_SF_COMPACT) == 0, "k<0 -> 0");
  TU_CHECK(mxf_sf_size(10, 64, 0, 32, MXF_SF_COMPACT) == 0, "l=0 -> 0");
  TU_CHECK(mxf_sf_size(10, 64, 1, 8, MXF_SF_COMPACT) == 0, "sf_vec 8 -> 0");
  TU_CHECK(mxf_sf_size(10, 64, 1, 32, (mxf_sf_layout)5) == 0, "bad layout -> 0");

  /* offsets */
  for (int it = 0; it < 2000; ++it) {
    int64_t mn = tu_range(rng, 1, 700), k = tu_range(rng, 1, 2000), l = tu_range(rng, 1, 5);
    int sfv = tu_range(rng, 0, 1) ? 32 : 16;
    int64_t r = tu_range(rng, 0, mn - 1), kb = tu_range(rng, 0, cdiv(k, sfv) - 1),
            b = tu_range(rng, 0, l - 1);
    int64_t got = mxf_sf_swizzled_offset(r, kb, b, mn, k, sfv), want = spec_offset(r, kb, b, mn, k, sfv);
    if (!TU_CHECK(got == want, "offset r=%lld kb=%lld l=%lld mn=%lld k=%lld: %lld, expected %lld",
                  (long long)r, (long long)kb, (long long)b, (long long)mn, (long long)k, (long long)got,
                  (long long)want))
      break;
  }
  TU_CHECK(mxf_sf_swizzled_offset(130, 5, 1, 300, 512, 32) ==
               1 * 3 * 4 * 512 + (1 * 4 + 1) * 512 + 2 * 16 + 0 * 4 + 1,
           "hand-computed offset");
  TU_CHECK(mxf_sf_swizzled_offset(300, 0, 0, 300, 512, 32) == -1, "row out of range -> -1");
  TU_CHECK(mxf_sf_swizzled_offset(0, 16, 0, 300, 512, 32) == -1, "k-block out of range -> -1");
  TU_CHECK(mxf_sf_swizzled_offset(0, 0, -1, 300, 512, 32) == -1, "negative batch -> -1");
  TU_CHECK(mxf_sf_swizzled_offset(0, 0, 0, 300, 512, 24) == -1, "sf_vec 24 -> -1");

  /* swizzle / unswizzle round trips, padding, no write past the end */
  for (int it = 0; it < 40; ++it) {
    int64_t mn = tu_range(rng, 1, 400), k = tu_range(rng, 1, 700), l = tu_range(rng, 1, 3);
    int sfv = tu_range(rng, 0, 1) ? 32 : 16;
    uint8_t pad = (uint8_t)tu_u32(rng);
    int64_t kb = cdiv(k, sfv);
    size_t cn = mxf_sf_size(mn, k, l, sfv, MXF_SF_COMPACT), sn = mxf_sf_size(mn, k, l, sfv, MXF_SF_SWIZZLED);
    uint8_t *c = tu_malloc(cn), *s = tu_malloc(sn + 64), *c2 = tu_malloc(cn + 64), *hit = calloc(sn, 1);
    for (size_t i = 0; i < cn; ++i)
      c[i] = (uint8_t)tu_u32(rng);
    tu_poison(s, sn + 64, 0xA5);
    tu_poison(c2, cn + 64, 0xA5);
    TU_CHECK(mxf_sf_swizzle(c, s, mn, k, l, sfv, pad) == MXF_OK, "swizzle: %s", mxf_last_error());
    int bad = 0;
    for (int64_t b = 0; b < l; ++b)
      for (int64_t r = 0; r < mn; ++r)
        for (int64_t j = 0; j < kb; ++j) {
          int64_t off = spec_offset(r, j, b, mn, k, sfv);
          if (off < 0 || off >= (int64_t)sn || hit[off]) {
            ++bad;
            continue;
          }
          hit[off] = 1;
          bad += s[off] != c[(b * mn + r) * kb + j];
        }
    size_t pads = 0;
    for (size_t i = 0; i < sn; ++i)
      if (!hit[i]) {
        ++pads;
        bad += s[i] != pad;
      }
    TU_CHECK(bad == 0, "swizzle mn=%lld k=%lld l=%lld sf_vec=%d: %d wrong bytes", (long long)mn, (long long)k,
             (long long)l, sfv, bad);
    TU_CHECK(pads == sn - cn, "padding bytes %zu, expected %zu", pads, sn - cn);
    TU_CHECK(tu_all_bytes(s + sn, 64, 0xA5), "swizzle wrote past its size");
    TU_CHECK(mxf_sf_unswizzle(s, c2, mn, k, l, sfv) == MXF_OK, "unswizzle: %s", mxf_last_error());
    TU_CHECK(memcmp(c, c2, cn) == 0, "unswizzle(swizzle(x)) != x for mn=%lld k=%lld", (long long)mn,
             (long long)k);
    TU_CHECK(tu_all_bytes(c2 + cn, 64, 0xA5), "unswizzle wrote past its size");
    free(c), free(s), free(c2), free(hit);
  }
  uint8_t buf[4096];
  TU_CHECK(mxf_sf_swizzle(NULL, buf, 10, 64, 1, 32, 0) == MXF_ERR_INVALID_VALUE,
           "swizzle NULL source refused");
  TU_CHECK(strstr(mxf_last_error(), "sf_swizzle") != NULL, "message names sf_swizzle: %s", mxf_last_error());
  TU_CHECK(mxf_sf_swizzle(buf, buf + 1024, 10, 64, 1, 8, 0) == MXF_ERR_INVALID_VALUE,
           "swizzle sf_vec 8 refused");
  TU_CHECK(strstr(mxf_last_error(), "sf_vec=8") != NULL, "message names sf_vec: %s", mxf_last_error());
  TU_CHECK(mxf_sf_unswizzle(buf, NULL, 10, 64, 1, 32) == MXF_ERR_INVALID_VALUE,
           "unswizzle NULL dest refused");
  TU_CHECK(mxf_sf_unswizzle(buf, buf + 2048, 0, 64, 1, 32) == MXF_ERR_INVALID_VALUE,
           "unswizzle mn=0 refused");
}

/* ------------------------------------------------------------ plans */
static mxf_quantize_desc quant_desc(void *x, void *q_row, void *s_row, void *q_col, void *s_col, int64_t rows,
                                    int64_t cols) {
  mxf_quantize_desc d;
  memset(&d, 0, sizeof d);
  int64_t xs[2] = {rows, cols}, sr[2] = {rows, (cols + 31) / 32}, sc[2] = {(rows + 31) / 32, cols};
  d.x = tu_tensor(x, MXF_F32, 2, xs);
  d.q_row = tu_tensor(q_row, MXF_E4M3, 2, xs);
  d.s_row = tu_tensor(s_row, MXF_E8M0, 2, sr);
  d.q_col = tu_tensor(q_col, MXF_E4M3, 2, xs);
  d.s_col = tu_tensor(s_col, MXF_E8M0, 2, sc);
  d.directions = MXF_QUANT_ROWS | MXF_QUANT_COLS;
  return d;
}

static void test_plans(void) {
  mxf_plan_destroy(NULL); /* accepted */
  TU_CHECK(mxf_plan_workspace_size(NULL) == 0, "workspace of NULL plan is 0");
  TU_CHECK(mxf_plan_backend(NULL) != NULL, "backend of NULL plan is a string");

  mxf_quantize_desc d = quant_desc(NULL, NULL, NULL, NULL, NULL, 37, 45); /* geometry only */
  mxf_plan *plan = NULL;
  mxf_status st = mxf_quantize_plan(&plan, &d);
  TU_CHECK(st == MXF_OK && plan, "quantize plan from geometry: %s", mxf_last_error());
  if (plan) {
    TU_CHECK(strncmp(mxf_plan_backend(plan), "cpu/", 4) == 0, "host tensors plan on the cpu: %s",
             mxf_plan_backend(plan));
    size_t ws = mxf_plan_workspace_size(plan);
    TU_CHECK(ws < ((size_t)1 << 30), "sane workspace size %zu", ws);
    mxf_plan_destroy(plan);
  }

  int64_t as[3] = {33, 64, 1}, bs[3] = {20, 64, 1}, cs[3] = {33, 20, 1}, sa[3] = {1, 33, 2},
          sb[3] = {1, 20, 2}, one[1] = {1};
  mxf_gemm_amax_desc g;
  memset(&g, 0, sizeof g);
  g.a = tu_tensor(NULL, MXF_E4M3, 3, as);
  g.b = tu_tensor(NULL, MXF_E4M3, 3, bs);
  g.sfa = tu_tensor(NULL, MXF_E8M0, 3, sa);
  g.sfb = tu_tensor(NULL, MXF_E8M0, 3, sb);
  g.c = tu_tensor(NULL, MXF_F32, 3, cs);
  g.amax = tu_tensor(NULL, MXF_F32, 1, one);
  g.sf_vec = 32;
  st = mxf_gemm_amax_plan(&plan, &g);
  TU_CHECK(st == MXF_OK, "gemm plan (L=1, contiguous, 3-D): %s", mxf_last_error());
  if (st == MXF_OK) {
    TU_CHECK(strncmp(mxf_plan_backend(plan), "cpu/", 4) == 0, "gemm on the cpu: %s", mxf_plan_backend(plan));
    mxf_plan_destroy(plan);
  }
}

/* ------------------------------------------------------------ MXF_CONFIG */
/* The kernel override (docs/kernels/README.md): read when a plan is made, on every backend; a
 * malformed one refuses the plan with a message naming the item; nothing is planned. */
static void test_config_override(void) {
  mxf_quantize_desc d = quant_desc(NULL, NULL, NULL, NULL, NULL, 37, 45);
  static const struct {
    const char *text, *msg;
  } bad[] = {
      {"swap=maybe", "'maybe' is no value of swap"},
      {"gemm=sm90,colour=red", "unknown key 'colour'"},
      {"f16", "item 'f16' is not key=value"},
      {"proj=gemv", "'gemv' is no value of proj"},
      {"mxfp8=on", "'on' is no value of mxfp8"},
      {"cpu=mkl", "'mkl' is no value of cpu"},
      {"swap=on,swap=on,swap=on,swap=on,swap=on,swap=on,swap=on,swap=on,swap=on,swap=on,swap=on,swap=on,swap="
       "on",
       "at most 95"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; ++i) {
    setenv("MXF_CONFIG", bad[i].text, 1);
    mxf_plan *plan = NULL;
    mxf_status st = mxf_quantize_plan(&plan, &d);
    TU_CHECK(st == MXF_ERR_INVALID_VALUE && plan == NULL, "MXF_CONFIG=%s refused: %s", bad[i].text,
             mxf_status_string(st));
    TU_CHECK(strstr(mxf_last_error(), bad[i].msg) && strstr(mxf_last_error(), "MXF_CONFIG"),
             "MXF_CONFIG=%s: message names it: %s", bad[i].text, mxf_last_error());
    mxf_plan_destroy(plan);
  }
  static const char *good[] = {"",
                               ",",
                               "gemm=portable",
                               "gemm=sm90,swap=on,bpre=off,bcwide=on,f16=off,wg3=on",
                               "sfraw=off,cring=on,proj=sm90,mxfp8=mainloop,",
                               "cpu=c",
                               "gemm=sm90,cpu=onednn"};
  for (size_t i = 0; i < sizeof good / sizeof *good; ++i) {
    setenv("MXF_CONFIG", good[i], 1);
    mxf_plan *plan = NULL;
    mxf_status st = mxf_quantize_plan(&plan, &d);
    TU_CHECK(st == MXF_OK, "MXF_CONFIG=%s accepted: %s", good[i], mxf_last_error());
    mxf_plan_destroy(plan);
  }
  unsetenv("MXF_CONFIG");
}

/* ------------------------------------------------------------ last error */
/* Semantics (mxfuse.h): the message of the last failed call on this thread; successful
 * calls leave it as it was; other threads never see it. */
static void *last_error_thread(void *arg) {
  int *ok = arg;
  ok[0] = strcmp(mxf_last_error(), "") == 0; /* fresh thread: empty */
  mxf_quantize_desc d = quant_desc(NULL, NULL, NULL, NULL, NULL, 10, 10);
  d.directions = 0;
  mxf_plan *plan = NULL;
  ok[1] = mxf_quantize_plan(&plan, &d) == MXF_ERR_INVALID_VALUE && strstr(mxf_last_error(), "directions 0x0");
  return NULL;
}

static void test_last_error(void) {
  int ok[2] = {0, 0};
  pthread_t th;
  pthread_create(&th, NULL, last_error_thread, ok);
  pthread_join(th, NULL);
  TU_CHECK(ok[0], "a fresh thread's last error is empty");
  TU_CHECK(ok[1], "a failure sets the message");
  TU_CHECK(strstr(mxf_last_error(), "directions 0x0") == NULL, "another thread's error is not seen here");

  mxf_quantize_desc d = quant_desc(NULL, NULL, NULL, NULL, NULL, 10, 10);
  d.x.dtype = MXF_F16;
  mxf_plan *plan = NULL;
  TU_CHECK(mxf_quantize_plan(&plan, &d) == MXF_ERR_INVALID_VALUE, "f16 x refused");
  char first[1024];
  snprintf(first, sizeof first, "%s", mxf_last_error());
  TU_CHECK(strstr(first, "x has dtype f16") != NULL, "message: %s", first);
  d.x.dtype = MXF_F32;
  TU_CHECK(mxf_quantize_plan(&plan, &d) == MXF_OK, "valid plan: %s", mxf_last_error());
  mxf_plan_destroy(plan);
  TU_CHECK(strcmp(mxf_last_error(), first) == 0, "a successful call keeps the last failure's message: %s",
           mxf_last_error());
  d.s_col.shape[0] = 5;
  TU_CHECK(mxf_quantize_plan(&plan, &d) == MXF_ERR_INVALID_VALUE, "bad s_col refused");
  TU_CHECK(strstr(mxf_last_error(), "s_col has shape (5, 10)") != NULL, "a new failure replaces it: %s",
           mxf_last_error());
}

/* ------------------------------------------------------------ devices */
static void test_devices(void) {
  int n = mxf_cuda_device_count();
  TU_CHECK(n >= 0, "cuda device count %d >= 0", n);
  TU_CHECK(mxf_has_cuda() == 0 || mxf_has_cuda() == 1, "has_cuda is 0 or 1");
  if (!mxf_has_cuda()) TU_CHECK(n == 0, "no CUDA build -> 0 devices");
  mxf_quantize_desc d = quant_desc(NULL, NULL, NULL, NULL, NULL, 10, 10);
  mxf_tensor *all[5] = {&d.x, &d.q_row, &d.s_row, &d.q_col, &d.s_col};
  for (int i = 0; i < 5; ++i)
    all[i]->device = MXF_DEVICE_CUDA(n + 2);
  mxf_plan *plan = NULL;
  mxf_status st = mxf_quantize_plan(&plan, &d);
  TU_CHECK(st == MXF_ERR_NOT_SUPPORTED && plan == NULL, "absent CUDA device refused as not supported: %s",
           mxf_status_string(st));
  TU_CHECK(strstr(mxf_last_error(), mxf_has_cuda() ? "not present" : "built without CUDA") != NULL,
           "reason: %s", mxf_last_error());
}

/* ------------------------------------------------------------ one-call form and cache */
typedef struct quant_bufs {
  int64_t rows, cols;
  float *x;
  uint8_t *q[2], *s[2];   /* plan form */
  uint8_t *oq[2], *os[2]; /* one-call form */
} quant_bufs;

static void bufs_init(quant_bufs *b, int64_t rows, int64_t cols, tu_rng *rng) {
  b->rows = rows, b->cols = cols;
  size_t n = (size_t)(rows * cols), sn = (size_t)(rows * ((cols + 31) / 32) + ((rows + 31) / 32) * cols);
  b->x = tu_malloc(n * sizeof(float));
  for (size_t i = 0; i < n; ++i)
    b->x[i] = (float)(tu_normal(rng) * 3.0);
  for (int d = 0; d < 2; ++d) {
    b->q[d] = tu_malloc(n), b->oq[d] = tu_malloc(n);
    b->s[d] = tu_malloc(sn), b->os[d] = tu_malloc(sn);
    tu_poison(b->q[d], n, 0xA5), tu_poison(b->oq[d], n, 0x5A);
    tu_poison(b->s[d], sn, 0xA5), tu_poison(b->os[d], sn, 0x5A);
  }
}

static void bufs_free(quant_bufs *b) {
  free(b->x);
  for (int d = 0; d < 2; ++d)
    free(b->q[d]), free(b->oq[d]), free(b->s[d]), free(b->os[d]);
}

/* Runs the quantize in both forms; returns 1 when they agree (or the backend refuses
 * both the same way), 0 otherwise. */
static int quant_both_forms(quant_bufs *b) {
  mxf_quantize_desc d = quant_desc(b->x, b->q[0], b->s[0], b->q[1], b->s[1], b->rows, b->cols);
  mxf_plan *plan = NULL;
  mxf_status ps = mxf_quantize_plan(&plan, &d);
  if (ps != MXF_OK) return 0;
  size_t n = mxf_plan_workspace_size(plan);
  void *ws = n ? tu_malloc(n) : NULL;
  mxf_quantize_args a = {b->x, b->q[0], b->s[0], b->q[1], b->s[1]};
  mxf_status rs = mxf_quantize_run(plan, &a, ws, n, NULL);
  free(ws);
  mxf_plan_destroy(plan);
  mxf_quantize_desc o = quant_desc(b->x, b->oq[0], b->os[0], b->oq[1], b->os[1], b->rows, b->cols);
  mxf_status os = mxf_quantize(&o, NULL);
  if (rs != os) return 0;
  if (rs != MXF_OK) return rs == MXF_ERR_NOT_SUPPORTED;
  size_t qn = (size_t)(b->rows * b->cols);
  size_t srn = (size_t)(b->rows * ((b->cols + 31) / 32)), scn = (size_t)(((b->rows + 31) / 32) * b->cols);
  return !memcmp(b->q[0], b->oq[0], qn) && !memcmp(b->q[1], b->oq[1], qn) &&
         !memcmp(b->s[0], b->os[0], srn) && !memcmp(b->s[1], b->os[1], scn);
}

typedef struct worker {
  uint64_t seed;
  int id, iters, ok;
} worker;

static void *cache_worker(void *arg) {
  worker *w = arg;
  tu_rng rng;
  tu_rng_init(&rng, w->seed + (uint64_t)w->id * 7919u);
  w->ok = 1;
  for (int i = 0; i < w->iters; ++i) {
    quant_bufs b;
    /* a few shapes shared by every thread (cache hits across threads' keys) and many
     * distinct ones (eviction) */
    int64_t rows = (i % 3 == 0) ? 33 : tu_range(&rng, 1, 90),
            cols = (i % 3 == 0) ? 47 : tu_range(&rng, 1, 90);
    bufs_init(&b, rows, cols, &rng);
    if (!quant_both_forms(&b)) w->ok = 0;
    if (w->id == 0 && i % 17 == 5) mxf_plan_cache_clear(); /* clear while others run */
    bufs_free(&b);
  }
  return NULL;
}

static void test_one_call(tu_rng *rng) {
  /* same results as the plan form, repeated (cache hits), over > 64 distinct shapes (eviction) */
  int agree = 1;
  for (int i = 0; i < 150; ++i) {
    quant_bufs b;
    bufs_init(&b, i < 50 ? 40 : tu_range(rng, 1, 120), i < 50 ? 70 : tu_range(rng, 1, 120), rng);
    agree &= quant_both_forms(&b);
    bufs_free(&b);
  }
  TU_CHECK(agree, "one-call quantize equals the plan form over 150 calls");
  { /* the one-call form reads MXF_CONFIG too (its cache keys plans by the text): a
     * malformed one is refused with nothing written */
    quant_bufs b;
    bufs_init(&b, 40, 70, rng);
    memset(b.oq[0], 0xA5, 40 * 70);
    mxf_quantize_desc o = quant_desc(b.x, b.oq[0], b.os[0], b.oq[1], b.os[1], b.rows, b.cols);
    setenv("MXF_CONFIG", "bpre=sometimes", 1);
    const mxf_status st = mxf_quantize(&o, NULL);
    unsetenv("MXF_CONFIG");
    TU_CHECK(st == MXF_ERR_INVALID_VALUE && strstr(mxf_last_error(), "bpre"),
             "one call under a bad MXF_CONFIG: %s", mxf_last_error());
    TU_CHECK(tu_all_bytes(b.oq[0], 40 * 70, 0xA5), "nothing written under a bad MXF_CONFIG");
    setenv("MXF_CONFIG", "gemm=portable", 1); /* another key: another plan, same results */
    agree = quant_both_forms(&b);
    unsetenv("MXF_CONFIG");
    TU_CHECK(agree, "one-call quantize under MXF_CONFIG equals the plan form");
    bufs_free(&b);
  }
  mxf_plan_cache_clear();
  mxf_plan_cache_clear(); /* twice is fine */

  /* threads: CPU entries are per thread, so concurrent one-call runs never share a workspace */
  enum { NT = 4 };
  pthread_t th[NT];
  worker w[NT];
  for (int i = 0; i < NT; ++i) {
    w[i].seed = g_seed, w[i].id = i, w[i].iters = 60, w[i].ok = 0;
    pthread_create(&th[i], NULL, cache_worker, &w[i]);
  }
  for (int i = 0; i < NT; ++i) {
    pthread_join(th[i], NULL);
    TU_CHECK(w[i].ok, "thread %d: one-call results equal the plan form", i);
  }
  mxf_plan_cache_clear();

  /* gemm one call: alpha comes from desc.alpha */
  enum { M = 37, N = 29, K = 100, LD = 112, NC = 32 };
  uint8_t *a = tu_malloc(M * LD), *bm = tu_malloc(N * LD), *sa = tu_malloc(M * 4), *sb = tu_malloc(N * 4);
  for (int i = 0; i < M * LD; ++i)
    a[i] = (uint8_t)(tu_u32(rng) & 0x77); /* finite e4m3 */
  for (int i = 0; i < N * LD; ++i)
    bm[i] = (uint8_t)(tu_u32(rng) & 0x77);
  for (int i = 0; i < M * 4; ++i)
    sa[i] = (uint8_t)tu_range(rng, 120, 130);
  for (int i = 0; i < N * 4; ++i)
    sb[i] = (uint8_t)tu_range(rng, 120, 130);
  float *c[3], amax[3];
  for (int i = 0; i < 3; ++i)
    c[i] = tu_malloc(M * NC * sizeof(float)), tu_poison(c[i], M * NC * sizeof(float), 0xA5);
  int64_t as[2] = {M, K}, bs[2] = {N, K}, cs[2] = {M, N}, sas[2] = {M, 4}, sbs[2] = {N, 4}, one[1] = {1};
  mxf_gemm_amax_desc g;
  memset(&g, 0, sizeof g);
  g.a = tu_tensor(a, MXF_E4M3, 2, as), g.a.stride[0] = LD, g.a.stride[1] = 1;
  g.b = tu_tensor(bm, MXF_E4M3, 2, bs), g.b.stride[0] = LD, g.b.stride[1] = 1;
  g.sfa = tu_tensor(sa, MXF_E8M0, 2, sas);
  g.sfb = tu_tensor(sb, MXF_E8M0, 2, sbs);
  g.c = tu_tensor(NULL, MXF_F32, 2, cs), g.c.stride[0] = NC, g.c.stride[1] = 1;
  g.amax = tu_tensor(NULL, MXF_F32, 1, one);
  g.sf_vec = 32;
  float two = 2.0f;
  mxf_status st[3];
  g.c.data = c[0], g.amax.data = &amax[0], g.alpha = NULL;
  st[0] = mxf_gemm_amax(&g, NULL);
  g.c.data = c[1], g.amax.data = &amax[1], g.alpha = &two;
  st[1] = mxf_gemm_amax(&g, NULL);
  mxf_plan *plan = NULL;
  g.c.data = NULL, g.amax.data = NULL, g.alpha = NULL;
  st[2] = mxf_gemm_amax_plan(&plan, &g);
  if (st[2] == MXF_OK) {
    size_t n = mxf_plan_workspace_size(plan);
    void *ws = n ? tu_malloc(n) : NULL;
    mxf_gemm_amax_args args = {a, bm, sa, sb, c[2], &amax[2], &two};
    st[2] = mxf_gemm_amax_run(plan, &args, ws, n, NULL);
    free(ws);
    mxf_plan_destroy(plan);
  }
  TU_CHECK(st[0] == st[1] && st[1] == st[2], "gemm statuses agree: %s %s %s", mxf_status_string(st[0]),
           mxf_status_string(st[1]), mxf_status_string(st[2]));
  if (st[0] == MXF_OK && st[1] == MXF_OK && st[2] == MXF_OK) {
    int bad = 0;
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        float v1 = c[0][m * NC + n], v2 = c[1][m * NC + n], vp = c[2][m * NC + n];
        bad += !(v2 == 2.0f * v1) || memcmp(&v2, &vp, sizeof v2) != 0;
      }
    TU_CHECK(bad == 0, "one-call alpha=2 is twice alpha=NULL and equals the plan form (%d differ)", bad);
    TU_CHECK(amax[1] == 2.0f * amax[0] && amax[1] == amax[2], "amax %g %g %g", amax[0], amax[1], amax[2]);
    TU_CHECK(amax[0] > 0.0f, "amax is positive: %g", amax[0]);
  }
  for (int i = 0; i < 3; ++i)
    free(c[i]);
  free(a), free(bm), free(sa), free(sb);
  mxf_plan_cache_clear();
}

int main(void) {
  g_seed = tu_seed();
  tu_rng rng;
  tu_rng_init(&rng, g_seed);
  test_version();
  test_status();
  test_dtypes();
  test_sf(&rng);
  test_plans();
  test_config_override();
  test_last_error();
  test_devices();
  test_one_call(&rng);
  return tu_finish("test_api");
}
