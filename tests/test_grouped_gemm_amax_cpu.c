/*
 * test_grouped_gemm_amax_cpu.c — grouped_gemm_amax on the CPU backend (SPEC §6) against
 * the f64 reference of the judge (SPEC §5), per element of every group's rows.
 *
 * Random cases over every format pair of SPEC §1.1 (bf16 A without scales included),
 * both sf_vec, every C dtype, both layouts (offs, counts), compact and swizzled scales,
 * per-group alpha and amax, and routings with empty groups, one group holding every row,
 * and a tail of rows past offs[G-1] (contiguous) or counts[g] (masked) whose poisoned C
 * must stay untouched. One plan serves several routings. Then: G = 1 equals gemm_amax bit
 * for bit; routings that break the rules and malformed descriptors are refused with
 * nothing written.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "judge.h"
#include "oracle.h"
#include "testutil.h"

#define POISON 0xA5

static int64_t rup(int64_t v, int64_t to) { return (v + to - 1) / to * to; }
static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static void *xalloc(size_t n) {
  void *p = aligned_alloc(64, (size_t)rup((int64_t)(n ? n : 1), 64));
  if (!p) {
    fprintf(stderr, "test: out of memory\n");
    exit(2);
  }
  return p;
}

/* ------------------------------------------------------------ a case */
typedef struct gcase {
  mxf_dtype a, b, sfa, sfb, c;
  int sf_vec, masked, swz_a, swz_b, group_alpha, group_amax, accumulate;
  int64_t g, m, n, k; /* m: M (contiguous) or Mmax (masked) */
} gcase;

typedef struct bufs {
  int64_t lda, ldb, ldc, kb;      /* row strides in values (32-value multiples: 16-byte rows) */
  uint8_t *a, *b, *sfa, *sfb, *c; /* c poisoned before each run */
  size_t a_bytes, b_bytes, sfa_bytes, sfb_bytes, c_bytes;
  float *alphas, *gamax, amax;
  int32_t *route;
} bufs;

static int64_t rows_a(const gcase *g) { return g->masked ? g->g * g->m : g->m; }
static int bits(mxf_dtype d) { return mxf_dtype_bits(d); }
static size_t vbytes(mxf_dtype d, int64_t n) { return (size_t)(n * bits(d) / 8); }

static uint16_t get_code(mxf_dtype d, const uint8_t *p, int64_t i) {
  if (d == MXF_E2M1) return mxf_e2m1_get(p, i);
  if (d == MXF_BF16) return ((const uint16_t *)p)[i];
  return p[i];
}
static double decode(mxf_dtype d, uint16_t c) {
  return d == MXF_BF16   ? mxf_bf16_to_f32(c)
         : d == MXF_E4M3 ? mxf_e4m3_to_f32((uint8_t)c)
         : d == MXF_E5M2 ? mxf_e5m2_to_f32((uint8_t)c)
                         : mxf_e2m1_to_f32((uint8_t)c);
}
static double decode_sf(mxf_dtype sf, uint8_t c) {
  return sf == MXF_E4M3 ? mxf_e4m3_to_f32(c) : mxf_e8m0_to_f32(c);
}

static void fill_codes(tu_rng *r, mxf_dtype d, uint8_t *p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (d == MXF_BF16) {
      ((uint16_t *)p)[i] = tu_bf16_activation(r);
    } else if (d == MXF_E2M1) {
      mxf_e2m1_set(p, i, (uint8_t)tu_range(r, 0, 15));
    } else {
      uint8_t c = (uint8_t)tu_range(r, 0, 255);
      if (d == MXF_E4M3 && (c & 0x7F) == 0x7F) c ^= 1;    /* no NaN codes here */
      if (d == MXF_E5M2 && (c & 0x7C) == 0x7C) c &= 0xBB; /* nor inf/NaN */
      p[i] = c;
    }
  }
}

static uint8_t rand_scale(tu_rng *r, mxf_dtype sf) {
  if (sf == MXF_E4M3) return (uint8_t)tu_range(r, 0x20, 0x58); /* positive ue4m3, 2^-5 .. 2^4 */
  return (uint8_t)tu_range(r, 118, 136);
}

/* Byte of scale (row, kb) of batch l in an SF tensor of mn rows. */
static int64_t sf_at(int swz, int64_t row, int64_t kb, int64_t l, int64_t mn, int64_t kbs) {
  if (!swz) return (l * mn + row) * kbs + kb;
  int64_t R = cdiv(mn, 128), Kq = cdiv(kbs, 4);
  return l * R * Kq * 512 + ((row / 128) * Kq + kb / 4) * 512 + (row % 32) * 16 + ((row / 32) % 4) * 4 +
         kb % 4;
}

static mxf_tensor sf_tensor(int swz, void *data, mxf_dtype dt, int64_t mn, int64_t kbs, int64_t l,
                            int dims3) {
  mxf_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data, t.dtype = dt;
  if (swz) {
    const int64_t s[6] = {l, cdiv(mn, 128), cdiv(kbs, 4), 32, 4, 4};
    t.ndim = 6;
    memcpy(t.shape, s, sizeof s);
  } else if (dims3) {
    t.ndim = 3, t.shape[0] = l, t.shape[1] = mn, t.shape[2] = kbs;
  } else {
    t.ndim = 2, t.shape[0] = mn, t.shape[1] = kbs;
  }
  return t;
}

static mxf_tensor mat(void *data, mxf_dtype dt, int dims, int64_t g, int64_t rows, int64_t cols, int64_t ld) {
  mxf_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data, t.dtype = dt, t.ndim = dims;
  if (dims == 3) {
    t.shape[0] = g, t.shape[1] = rows, t.shape[2] = cols;
    t.stride[0] = rows * ld, t.stride[1] = ld, t.stride[2] = 1;
  } else {
    t.shape[0] = rows, t.shape[1] = cols;
    t.stride[0] = ld, t.stride[1] = 1;
  }
  return t;
}

static mxf_tensor vec(void *data, mxf_dtype dt, int64_t n) {
  mxf_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data, t.dtype = dt, t.ndim = 1, t.shape[0] = n;
  return t;
}

static void make_bufs(tu_rng *r, const gcase *g, bufs *B) {
  memset(B, 0, sizeof *B);
  B->lda = B->ldb = rup(g->k, 32);
  B->ldc = rup(g->n, 32);
  B->kb = cdiv(g->k, g->sf_vec);
  const int64_t ra = rows_a(g);
  B->a_bytes = vbytes(g->a, ra * B->lda);
  B->b_bytes = vbytes(g->b, g->g * g->n * B->ldb);
  B->c_bytes = (size_t)(ra * B->ldc * bits(g->c) / 8);
  B->a = xalloc(B->a_bytes), B->b = xalloc(B->b_bytes), B->c = xalloc(B->c_bytes);
  memset(B->a, 0, B->a_bytes), memset(B->b, 0, B->b_bytes);
  for (int64_t i = 0; i < ra; ++i)
    fill_codes(r, g->a, B->a + vbytes(g->a, i * B->lda), g->k);
  for (int64_t i = 0; i < g->g * g->n; ++i)
    fill_codes(r, g->b, B->b + vbytes(g->b, i * B->ldb), g->k);
  const int64_t la = g->masked ? g->g : 1, ma = g->m;
  if (g->a != MXF_BF16) {
    B->sfa_bytes = g->swz_a ? (size_t)(la * cdiv(ma, 128) * cdiv(B->kb, 4) * 512) : (size_t)(la * ma * B->kb);
    B->sfa = xalloc(B->sfa_bytes);
    memset(B->sfa, 0xFF, B->sfa_bytes); /* padding never read */
    for (int64_t l = 0; l < la; ++l)
      for (int64_t i = 0; i < ma; ++i)
        for (int64_t j = 0; j < B->kb; ++j)
          B->sfa[sf_at(g->swz_a, i, j, l, ma, B->kb)] = rand_scale(r, g->sfa);
  }
  B->sfb_bytes =
      g->swz_b ? (size_t)(g->g * cdiv(g->n, 128) * cdiv(B->kb, 4) * 512) : (size_t)(g->g * g->n * B->kb);
  B->sfb = xalloc(B->sfb_bytes);
  memset(B->sfb, 0xFF, B->sfb_bytes);
  for (int64_t l = 0; l < g->g; ++l)
    for (int64_t i = 0; i < g->n; ++i)
      for (int64_t j = 0; j < B->kb; ++j)
        B->sfb[sf_at(g->swz_b, i, j, l, g->n, B->kb)] = rand_scale(r, g->sfb);
  B->alphas = xalloc((size_t)g->g * sizeof(float));
  B->gamax = xalloc((size_t)g->g * sizeof(float));
  B->route = xalloc((size_t)g->g * sizeof(int32_t));
  for (int64_t i = 0; i < g->g; ++i)
    B->alphas[i] = (float)ldexp(1.0 + tu_range(r, 0, 7) / 8.0, (int)tu_range(r, -2, 2));
}

static void free_bufs(bufs *B) {
  free(B->a), free(B->b), free(B->sfa), free(B->sfb), free(B->c), free(B->alphas), free(B->gamax),
      free(B->route);
}

static mxf_grouped_gemm_amax_desc make_desc(const gcase *g, bufs *B) {
  mxf_grouped_gemm_amax_desc d;
  memset(&d, 0, sizeof d);
  const int dims = g->masked ? 3 : 2;
  d.a = mat(B->a, g->a, dims, g->g, g->m, g->k, B->lda);
  d.b = mat(B->b, g->b, 3, g->g, g->n, g->k, B->ldb);
  d.c = mat(B->c, g->c, dims, g->g, g->m, g->n, B->ldc);
  if (g->a != MXF_BF16)
    d.sfa = sf_tensor(g->swz_a, B->sfa, g->sfa, g->m, B->kb, g->masked ? g->g : 1, g->masked);
  d.sfb = sf_tensor(g->swz_b, B->sfb, g->sfb, g->n, B->kb, g->g, 1);
  d.amax = vec(&B->amax, MXF_F32, 1);
  if (g->masked)
    d.counts = vec(B->route, MXF_I32, g->g);
  else
    d.offs = vec(B->route, MXF_I32, g->g);
  if (g->group_alpha) d.group_alpha = vec(B->alphas, MXF_F32, g->g);
  if (g->group_amax) d.group_amax = vec(B->gamax, MXF_F32, g->g);
  d.sf_vec = g->sf_vec;
  d.flags = g->accumulate ? MXF_AMAX_ACCUMULATE : 0;
  return d;
}

static mxf_grouped_gemm_amax_args make_args(const mxf_grouped_gemm_amax_desc *d, const float *alpha) {
  mxf_grouped_gemm_amax_args a = {d->a.data,           d->b.data,          d->sfa.data,  d->sfb.data,
                                  d->c.data,           d->amax.data,       d->offs.data, d->counts.data,
                                  d->group_alpha.data, d->group_amax.data, alpha};
  return a;
}

/* A routing: group sizes with empty groups, sometimes one group holding every row, and
 * (contiguous) sometimes a tail of rows in no group. */
static void make_routing(tu_rng *r, const gcase *g, int32_t *route) {
  const int64_t kind = tu_range(r, 0, 3);
  if (g->masked) {
    for (int64_t i = 0; i < g->g; ++i)
      route[i] = (int32_t)(kind == 0                ? (i == 0 ? g->m : 0)
                           : tu_range(r, 0, 3) == 0 ? 0
                                                    : tu_range(r, 0, g->m));
    return;
  }
  if (kind == 0) { /* one group holds every row */
    const int64_t who = tu_range(r, 0, g->g - 1);
    for (int64_t i = 0; i < g->g; ++i)
      route[i] = (int32_t)(i < who ? 0 : g->m);
    return;
  }
  const int64_t used = kind == 1 ? tu_range(r, 0, g->m) : g->m; /* kind 1: a tail past offs[G-1] */
  int64_t cuts[64];
  for (int64_t i = 0; i < g->g - 1; ++i)
    cuts[i] = tu_range(r, 0, used);
  for (int64_t i = 0; i < g->g - 1; ++i) /* sort */
    for (int64_t j = i + 1; j < g->g - 1; ++j)
      if (cuts[j] < cuts[i]) {
        int64_t t = cuts[i];
        cuts[i] = cuts[j], cuts[j] = t;
      }
  for (int64_t i = 0; i < g->g - 1; ++i)
    route[i] = (int32_t)cuts[i];
  route[g->g - 1] = (int32_t)used;
}

static void describe(const gcase *g, char *s, size_t n) {
  snprintf(s, n, "%s a %s x b %s (sfa %s%s, sfb %s%s, sf_vec %d) -> c %s, G=%lld %s=%lld N=%lld K=%lld%s%s%s",
           g->masked ? "masked" : "contiguous", mxf_dtype_name(g->a), mxf_dtype_name(g->b),
           g->a == MXF_BF16 ? "-" : mxf_dtype_name(g->sfa), g->swz_a ? " swz" : "", mxf_dtype_name(g->sfb),
           g->swz_b ? " swz" : "", g->sf_vec, mxf_dtype_name(g->c), (long long)g->g, g->masked ? "Mmax" : "M",
           (long long)g->m, (long long)g->n, (long long)g->k, g->group_alpha ? " group_alpha" : "",
           g->group_amax ? " group_amax" : "", g->accumulate ? " accumulate" : "");
}

/* Judges C, the untouched tail, group_amax and amax after a run with this routing. */
static void judge_run(const gcase *g, const bufs *B, float alpha, float prev_amax, const char *what) {
  const int64_t K = g->k;
  double *x = xalloc((size_t)K * sizeof(double)), *y = xalloc((size_t)K * sizeof(double));
  mxj_counts jc;
  mxj_counts_init(&jc);
  double amax_all = 0;
  int nan_all = 0;
  long untouched_bad = 0;
  int64_t end = 0;
  const int cb = bits(g->c);
  for (int64_t gi = 0; gi < g->g; ++gi) {
    const int64_t r0 = g->masked ? 0 : end, r1 = g->masked ? B->route[gi] : B->route[gi];
    if (!g->masked) end = B->route[gi];
    const float ae = g->group_alpha ? alpha * B->alphas[gi] : alpha;
    double gmax = 0;
    int gnan = 0;
    for (int64_t m = r0; m < r1; ++m) {
      const int64_t arow = g->masked ? gi * g->m + m : m;
      for (int64_t k = 0; k < K; ++k) {
        double s = 1;
        if (g->a != MXF_BF16)
          s = decode_sf(g->sfa, B->sfa[sf_at(g->swz_a, m, k / g->sf_vec, g->masked ? gi : 0, g->m, B->kb)]);
        x[k] = decode(g->a, get_code(g->a, B->a, arow * B->lda + k)) * s;
      }
      for (int64_t n = 0; n < g->n; ++n) {
        for (int64_t k = 0; k < K; ++k)
          y[k] = decode(g->b, get_code(g->b, B->b, (gi * g->n + n) * B->ldb + k)) *
                 decode_sf(g->sfb, B->sfb[sf_at(g->swz_b, n, k / g->sf_vec, gi, g->n, B->kb)]);
        mxj_ref ref = mxj_gemm_ref(x, y, K, ae);
        const int64_t o = arow * B->ldc + n;
        mxj_gemm_judge(g->c, &ref, mxj_code_at(g->c, B->c, o), &jc, o);
        if (isnan(ref.ref))
          gnan = 1;
        else if (fabs(ref.ref) > gmax)
          gmax = fabs(ref.ref);
      }
    }
    if (g->group_amax)
      TU_CHECK(mxj_amax_ok(B->gamax[gi], gmax, gnan, K), "%s: group_amax[%lld] %.9g, expected %.9g", what,
               (long long)gi, (double)B->gamax[gi], gmax);
    if (gnan) nan_all = 1;
    if (gmax > amax_all) amax_all = gmax;
    /* rows of this group's C not in the group stay poisoned (masked: rows >= counts[g]) */
    if (g->masked)
      for (int64_t m = r1; m < g->m; ++m)
        untouched_bad +=
            !tu_all_bytes(B->c + (gi * g->m + m) * B->ldc * cb / 8, (size_t)(g->n * cb / 8), POISON);
  }
  if (!g->masked)
    for (int64_t m = end; m < g->m; ++m)
      untouched_bad += !tu_all_bytes(B->c + m * B->ldc * cb / 8, (size_t)(g->n * cb / 8), POISON);
  char s[320];
  describe(g, s, sizeof s);
  TU_CHECK(jc.wrong == 0, "%s: %lld of %lld elements wrong (first at %lld) [%s]", what, (long long)jc.wrong,
           (long long)mxj_counts_total(&jc), (long long)jc.first_wrong, s);
  TU_CHECK(untouched_bad == 0, "%s: %ld rows outside every group were written [%s]", what, untouched_bad, s);
  double want = amax_all;
  if (g->accumulate && prev_amax > want) want = prev_amax;
  TU_CHECK(mxj_amax_ok(B->amax, want, nan_all, K), "%s: amax %.9g, expected %.9g [%s]", what, (double)B->amax,
           want, s);
  free(x), free(y);
}

static void random_case(tu_rng *r, gcase *g) {
  static const mxf_dtype as[] = {MXF_BF16, MXF_E4M3, MXF_E5M2, MXF_E2M1};
  static const mxf_dtype bs[] = {MXF_E4M3, MXF_E5M2, MXF_E2M1};
  static const mxf_dtype cs[] = {MXF_F32, MXF_F16, MXF_BF16, MXF_E4M3, MXF_E5M2, MXF_E2M1};
  memset(g, 0, sizeof *g);
  g->a = as[tu_range(r, 0, 3)];
  g->b = bs[tu_range(r, 0, 2)];
  g->c = cs[tu_range(r, 0, 5)];
  g->sf_vec = 32;
  g->sfa = g->sfb = MXF_E8M0;
  if (g->b == MXF_E2M1 && (g->a == MXF_E2M1 || g->a == MXF_BF16) && tu_range(r, 0, 1)) {
    g->sf_vec = 16;
    g->sfa = tu_range(r, 0, 1) ? MXF_E4M3 : MXF_E8M0;
    g->sfb = tu_range(r, 0, 1) ? MXF_E4M3 : MXF_E8M0;
  }
  if (g->a == MXF_BF16) g->sfa = MXF_DTYPE_INVALID;
  g->masked = (int)tu_range(r, 0, 1);
  g->swz_a = (int)tu_range(r, 0, 1);
  g->swz_b = (int)tu_range(r, 0, 1);
  g->group_alpha = (int)tu_range(r, 0, 1);
  g->group_amax = (int)tu_range(r, 0, 1);
  g->accumulate = tu_range(r, 0, 3) == 0;
  g->g = tu_range(r, 1, 6);
  g->m = tu_range(r, 1, g->masked ? 40 : 150); /* contiguous: past 128 rows, so that groups start mid-atom */
  g->n = tu_range(r, 1, 40) * 2;               /* even: e2m1 C */
  g->k = tu_range(r, 1, 5) * 16 + 2 * tu_range(r, 0, 8);
}

static void run_case(tu_rng *r, const gcase *g) {
  bufs B;
  make_bufs(r, g, &B);
  mxf_grouped_gemm_amax_desc d = make_desc(g, &B);
  char s[320];
  describe(g, s, sizeof s);
  mxf_plan *plan = NULL;
  mxf_status st = mxf_grouped_gemm_amax_plan(&plan, &d);
  TU_CHECK(st == MXF_OK, "plan: %s: %s [%s]", mxf_status_string(st), mxf_last_error(), s);
  if (st != MXF_OK) {
    free_bufs(&B);
    return;
  }
  const size_t wsz = mxf_plan_workspace_size(plan);
  void *ws = xalloc(wsz);
  /* one plan, three routings; then the one-call form */
  for (int rep = 0; rep < 4; ++rep) {
    make_routing(r, g, B.route);
    memset(B.c, POISON, B.c_bytes);
    for (int64_t i = 0; i < g->g; ++i)
      B.gamax[i] = -1.0f;
    const float prev = 0.5f;
    B.amax = prev;
    const float alpha = rep == 1 ? 0.75f : 1.0f;
    if (rep < 3) {
      mxf_grouped_gemm_amax_args a = make_args(&d, rep == 1 ? &alpha : NULL);
      st = mxf_grouped_gemm_amax_run(plan, &a, ws, wsz, NULL);
    } else {
      d.alpha = &alpha;
      st = mxf_grouped_gemm_amax(&d, NULL);
    }
    TU_CHECK(st == MXF_OK, "run %d: %s: %s [%s]", rep, mxf_status_string(st), mxf_last_error(), s);
    if (st == MXF_OK) judge_run(g, &B, alpha, prev, rep < 3 ? "plan form" : "one call");
  }
  free(ws);
  mxf_plan_destroy(plan);
  free_bufs(&B);
}

/* A group whose own tiles would need more workspace than the plan's (2048 rows of a plan
 * for 2049: the plan cuts its rows in two chunks, the group alone would take one): it
 * runs on the plan's tiles. */
static void test_large_group(tu_rng *r) {
  gcase g;
  random_case(r, &g);
  g.a = MXF_E4M3, g.b = MXF_E2M1, g.sfa = g.sfb = MXF_E8M0, g.sf_vec = 32, g.c = MXF_BF16;
  g.masked = 0, g.g = 2, g.m = 2049, g.n = 16, g.k = 64, g.group_alpha = 0, g.group_amax = 1,
  g.accumulate = 0;
  g.swz_a = 1;
  bufs B;
  make_bufs(r, &g, &B);
  mxf_grouped_gemm_amax_desc d = make_desc(&g, &B);
  const int32_t routes[3][2] = {{2048, 2049}, {1, 2049}, {0, 2048}};
  for (int i = 0; i < 3; ++i) {
    memcpy(B.route, routes[i], sizeof routes[i]);
    memset(B.c, POISON, B.c_bytes);
    B.amax = 0.5f;
    mxf_status st = mxf_grouped_gemm_amax(&d, NULL);
    TU_CHECK(st == MXF_OK, "large group: %s", mxf_last_error());
    if (st == MXF_OK) judge_run(&g, &B, 1.0f, 0.5f, "large group");
  }
  free_bufs(&B);
}

/* ------------------------------------------------------------ G = 1 is gemm_amax */
static void test_g1(tu_rng *r) {
  for (int rep = 0; rep < 12; ++rep) {
    gcase g;
    random_case(r, &g);
    g.g = 1, g.masked = rep % 2, g.group_alpha = g.group_amax = 0, g.accumulate = 0;
    g.m = tu_range(r, 1, 100); /* below 128 rows: gemm_amax takes the f32 core too */
    bufs B;
    make_bufs(r, &g, &B);
    mxf_grouped_gemm_amax_desc d = make_desc(&g, &B);
    B.route[0] = (int32_t)g.m;
    memset(B.c, POISON, B.c_bytes);
    const float alpha = 1.25f;
    d.alpha = &alpha;
    mxf_status st = mxf_grouped_gemm_amax(&d, NULL);
    char s[320];
    describe(&g, s, sizeof s);
    TU_CHECK(st == MXF_OK, "G=1 grouped: %s [%s]", mxf_last_error(), s);
    uint8_t *c1 = xalloc(B.c_bytes);
    memcpy(c1, B.c, B.c_bytes);
    const float amax1 = B.amax;
    memset(B.c, POISON, B.c_bytes);
    mxf_gemm_amax_desc e;
    memset(&e, 0, sizeof e);
    e.a = mat(B.a, g.a, 2, 1, g.m, g.k, B.lda);
    e.b = mat(B.b, g.b, 2, 1, g.n, g.k, B.ldb);
    e.c = mat(B.c, g.c, 2, 1, g.m, g.n, B.ldc);
    if (g.a != MXF_BF16) e.sfa = sf_tensor(g.swz_a, B.sfa, g.sfa, g.m, B.kb, 1, 0);
    e.sfb = sf_tensor(g.swz_b, B.sfb, g.sfb, g.n, B.kb, 1, 0);
    e.amax = vec(&B.amax, MXF_F32, 1);
    e.sf_vec = g.sf_vec;
    e.alpha = &alpha;
    st = mxf_gemm_amax(&e, NULL);
    TU_CHECK(st == MXF_OK, "G=1 gemm_amax: %s [%s]", mxf_last_error(), s);
    TU_CHECK(!memcmp(c1, B.c, B.c_bytes), "G=1: C differs from gemm_amax's [%s]", s);
    TU_CHECK(tu_f32_bits(amax1) == tu_f32_bits(B.amax), "G=1: amax %.9g, gemm_amax's %.9g [%s]",
             (double)amax1, (double)B.amax, s);
    free(c1);
    free_bufs(&B);
  }
}

/* ------------------------------------------------------------ refusals */
static void expect_refused_run(const gcase *g, bufs *B, const int32_t *route, const char *needle) {
  mxf_grouped_gemm_amax_desc d = make_desc(g, B);
  memcpy(B->route, route, (size_t)g->g * sizeof(int32_t));
  memset(B->c, POISON, B->c_bytes);
  for (int64_t i = 0; i < g->g; ++i)
    B->gamax[i] = -1.0f;
  B->amax = -2.0f;
  mxf_status st = mxf_grouped_gemm_amax(&d, NULL);
  TU_CHECK(st == MXF_ERR_INVALID_VALUE, "routing with %s: status %s", needle, mxf_status_string(st));
  TU_CHECK(strstr(mxf_last_error(), needle) != NULL, "routing: message \"%s\" names %s", mxf_last_error(),
           needle);
  TU_CHECK(tu_all_bytes(B->c, B->c_bytes, POISON), "routing with %s: C written", needle);
  TU_CHECK(B->amax == -2.0f, "routing with %s: amax written", needle);
  int ok = 1;
  for (int64_t i = 0; i < g->g; ++i)
    ok &= B->gamax[i] == -1.0f;
  TU_CHECK(ok, "routing with %s: group_amax written", needle);
}

static void test_bad_routings(tu_rng *r) {
  gcase g;
  random_case(r, &g);
  g.a = MXF_E4M3, g.b = MXF_E4M3, g.sfa = g.sfb = MXF_E8M0, g.sf_vec = 32, g.c = MXF_BF16;
  g.g = 4, g.m = 20, g.n = 16, g.k = 64, g.group_amax = 1;
  bufs B;
  g.masked = 0;
  make_bufs(r, &g, &B);
  const int32_t dec[4] = {5, 9, 7, 20}, over[4] = {5, 9, 12, 21}, neg[4] = {-1, 3, 4, 5};
  expect_refused_run(&g, &B, dec, "offs[2]");
  expect_refused_run(&g, &B, over, "offs[3]");
  expect_refused_run(&g, &B, neg, "offs[0]");
  free_bufs(&B);
  g.masked = 1;
  make_bufs(r, &g, &B);
  const int32_t cneg[4] = {5, -1, 7, 20}, cover[4] = {5, 9, 7, 21};
  expect_refused_run(&g, &B, cneg, "counts[1]");
  expect_refused_run(&g, &B, cover, "counts[3]");
  free_bufs(&B);
}

typedef void (*breaker)(mxf_grouped_gemm_amax_desc *d, bufs *B);
static void b_both(mxf_grouped_gemm_amax_desc *d, bufs *B) { d->counts = vec(B->route, MXF_I32, 4); }
static void b_neither(mxf_grouped_gemm_amax_desc *d, bufs *B) { memset(&d->offs, 0, sizeof d->offs); }
static void b_offs_f32(mxf_grouped_gemm_amax_desc *d, bufs *B) { d->offs.dtype = MXF_F32; }
static void b_offs_len(mxf_grouped_gemm_amax_desc *d, bufs *B) { d->offs.shape[0] = 3; }
static void b_b_2d(mxf_grouped_gemm_amax_desc *d, bufs *B) {
  d->b = mat(B->b, MXF_E4M3, 2, 1, 16, 64, B->ldb);
}
static void b_sfb_g(mxf_grouped_gemm_amax_desc *d, bufs *B) { d->sfb.shape[0] = 3; }
static void b_gamax(mxf_grouped_gemm_amax_desc *d, bufs *B) { d->group_amax.shape[0] = 5; }
static void b_galpha(mxf_grouped_gemm_amax_desc *d, bufs *B) { d->group_alpha = vec(B->alphas, MXF_F16, 4); }
static void b_a_3d(mxf_grouped_gemm_amax_desc *d, bufs *B) {
  d->a = mat(B->a, MXF_E4M3, 3, 4, 5, 64, B->lda);
}
static void b_c_n(mxf_grouped_gemm_amax_desc *d, bufs *B) { d->c.shape[1] = 15; }
static void b_k(mxf_grouped_gemm_amax_desc *d, bufs *B) { d->b.shape[2] = 32; }
static void b_sfvec(mxf_grouped_gemm_amax_desc *d, bufs *B) { d->sf_vec = 8; }

static void test_bad_descs(tu_rng *r) {
  static const struct {
    const char *name;
    breaker f;
  } cases[] = {{"offs and counts", b_both},
               {"no routing", b_neither},
               {"offs f32", b_offs_f32},
               {"offs length", b_offs_len},
               {"b 2-D", b_b_2d},
               {"sfb G", b_sfb_g},
               {"group_amax shape", b_gamax},
               {"group_alpha f16", b_galpha},
               {"a 3-D with offs", b_a_3d},
               {"c N", b_c_n},
               {"b K", b_k},
               {"sf_vec", b_sfvec}};
  gcase g;
  random_case(r, &g);
  g.a = MXF_E4M3, g.b = MXF_E4M3, g.sfa = g.sfb = MXF_E8M0, g.sf_vec = 32, g.c = MXF_BF16;
  g.g = 4, g.m = 20, g.n = 16, g.k = 64, g.masked = 0, g.group_amax = 1, g.group_alpha = 1;
  bufs B;
  make_bufs(r, &g, &B);
  const int32_t route[4] = {3, 3, 10, 20};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; ++i) {
    mxf_grouped_gemm_amax_desc d = make_desc(&g, &B);
    memcpy(B.route, route, sizeof route);
    cases[i].f(&d, &B);
    memset(B.c, POISON, B.c_bytes);
    B.amax = -2.0f;
    mxf_status st = mxf_grouped_gemm_amax(&d, NULL);
    TU_CHECK(st == MXF_ERR_INVALID_VALUE, "%s: status %s (%s)", cases[i].name, mxf_status_string(st),
             mxf_last_error());
    TU_CHECK(strncmp(mxf_last_error(), "grouped_gemm_amax", 17) == 0, "%s: message \"%s\"", cases[i].name,
             mxf_last_error());
    TU_CHECK(tu_all_bytes(B.c, B.c_bytes, POISON) && B.amax == -2.0f, "%s: output written", cases[i].name);
    mxf_plan *plan = NULL;
    st = mxf_grouped_gemm_amax_plan(&plan, &d);
    TU_CHECK(st == MXF_ERR_INVALID_VALUE && !plan, "%s: plan status %s", cases[i].name,
             mxf_status_string(st));
  }
  /* a run whose args disagree with the plan */
  mxf_grouped_gemm_amax_desc d = make_desc(&g, &B);
  mxf_plan *plan = NULL;
  TU_CHECK(mxf_grouped_gemm_amax_plan(&plan, &d) == MXF_OK, "plan: %s", mxf_last_error());
  mxf_grouped_gemm_amax_args a = make_args(&d, NULL);
  a.counts = B.route;
  void *ws = xalloc(mxf_plan_workspace_size(plan));
  TU_CHECK(mxf_grouped_gemm_amax_run(plan, &a, ws, mxf_plan_workspace_size(plan), NULL) ==
               MXF_ERR_INVALID_VALUE,
           "run with counts on an offs plan refused");
  a = make_args(&d, NULL);
  a.group_amax = NULL;
  TU_CHECK(mxf_grouped_gemm_amax_run(plan, &a, ws, mxf_plan_workspace_size(plan), NULL) ==
               MXF_ERR_INVALID_VALUE,
           "run without the plan's group_amax refused");
  free(ws);
  mxf_plan_destroy(plan);
  free_bufs(&B);
}

int main(void) {
  tu_rng r;
  tu_rng_init(&r, tu_seed());
  const char *asked = tu_cpu_core_asked();
  if (asked && !strcmp(asked, "onednn"))
    return tu_skip("test_grouped_gemm_amax_cpu", "grouped plans take the f32 core");
  const int cases = getenv("MXF_GROUPED_CASES") ? atoi(getenv("MXF_GROUPED_CASES")) : 120;
  for (int i = 0; i < cases; ++i) {
    gcase g;
    random_case(&r, &g);
    run_case(&r, &g);
  }
  test_large_group(&r);
  test_g1(&r);
  test_bad_routings(&r);
  test_bad_descs(&r);
  return tu_finish("test_grouped_gemm_amax_cpu");
}
