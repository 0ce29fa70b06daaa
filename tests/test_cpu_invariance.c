/*
 * test_cpu_invariance.c — the CPU backend's summation order (SPEC §5): each output of
 * gemm_amax and proj_rope is a function of its own row of A, its own row of B, the scales
 * and the op's settings only, bit for bit.
 *
 * gemm_amax, every weight format (MXFP4, NVFP4-style e2m1 with ue4m3 scales, MXFP8 e4m3
 * and e5m2) with every activation format (bf16 without scales, the same MX format), both
 * scale layouts (compact, swizzled), k- and m/n-major operands and n- and m-major C: one
 * problem (M = 260, N = 100, K = 1120: K across several slices and panels; bf16 x MXFP4
 * and x MXFP8 e4m3 also at K = 8224, rows the streaming kernel reads in place where it
 * copies K = 1120's) computed whole on the blocked GEMM path (MXF_CONFIG cpu_stream=off),
 * the reference, and against it: whole (the streaming path with Y's 100 rows the few),
 * by rows of 1 (the streaming path), by blocks of 1 to 24 rows and of 190 in column
 * halves (each kernel of the streaming path, and its core on many rows of X), by column
 * halves, with 1 and 3 threads and with each lesser micro-kernel (MXF_CONFIG
 * cpu_isa=avx2, baseline); NaN and inf codes, and e8m0 scales 0 and 255, in a few rows;
 * f32 C and amax compared byte for byte; whole, by rows of 1 and by row blocks (each
 * instruction set) again with B packed (SPEC §7). The streaming kernel's block
 * rescaling at and beyond its bounds (rescale_bounds: tiny and huge activations and
 * scales; B as it is and packed).
 * proj_rope (bf16 and MXFP8, both w layouts): T = 72 tokens whole on the blocked path
 * (the reference), whole (the streaming path), by single tokens and by 32-token blocks,
 * by head shards, with 1 and 3 threads, by single tokens with each lesser instruction
 * set: every output byte compared (out_col only where its 32-token blocks are whole).
 * Skipped where MXF_CONFIG asks for a vendor core (cpu=blas, cpu=onednn: not invariant).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "mxfuse.h"
#include "testutil.h"

/* ------------------------------------------------------------ gemm_amax */
typedef struct combo {
  mxf_dtype fa, fb, sfa, sfb;
  int sf_vec;
} combo;

static const combo g_combos[] = {
    {MXF_BF16, MXF_E2M1, MXF_E8M0, MXF_E8M0, 32}, /* bf16 x MXFP4 */
    {MXF_BF16, MXF_E2M1, MXF_E8M0, MXF_E4M3, 16}, /* bf16 x NVFP4-style */
    {MXF_BF16, MXF_E2M1, MXF_E8M0, MXF_E8M0, 16}, /* ... with e8m0 scales */
    {MXF_BF16, MXF_E4M3, MXF_E8M0, MXF_E8M0, 32}, /* bf16 x MXFP8 e4m3 */
    {MXF_BF16, MXF_E5M2, MXF_E8M0, MXF_E8M0, 32}, /* bf16 x MXFP8 e5m2 */
    {MXF_E4M3, MXF_E4M3, MXF_E8M0, MXF_E8M0, 32}, {MXF_E5M2, MXF_E5M2, MXF_E8M0, MXF_E8M0, 32},
    {MXF_E2M1, MXF_E2M1, MXF_E8M0, MXF_E8M0, 32}, {MXF_E2M1, MXF_E2M1, MXF_E4M3, MXF_E4M3, 16},
    {MXF_E4M3, MXF_E2M1, MXF_E8M0, MXF_E8M0, 32},
};

#define GM 260 /* above MXF_STREAM_ROWS (cpu.h), as GN is not: whole, the streaming path's side 2 */
#define GN 100
#define GK 1120      /* the problem's K */
#define GK_LONG 8224 /* a second problem's, for the streaming kernel's long rows (cpu.md) */

typedef struct problem {
  const combo *c;
  int swz, a_mm, b_nm, c_mm;
  uint16_t a[GM * GK_LONG], b[GN * GK_LONG]; /* codes (bf16 bits), logical (row, k) */
  uint8_t sa[GM * (GK_LONG / 16 + 1)], sb[GN * (GK_LONG / 16 + 1)];
  int64_t k, kb;
} problem;

static uint16_t rand_code(tu_rng *r, mxf_dtype f) {
  const double x = tu_normal(r);
  switch (f) {
  case MXF_BF16: return tu_bf16_activation(r);
  case MXF_E4M3: return mxf_f32_to_e4m3((float)(x * 96.0));
  case MXF_E5M2: return mxf_f32_to_e5m2((float)(x * 8192.0));
  default: return mxf_f32_to_e2m1((float)(x * 2.0));
  }
}
static uint8_t rand_scale(tu_rng *r, mxf_dtype sf) {
  return sf == MXF_E4M3 ? (uint8_t)tu_range(r, 0x20, 0x58) : (uint8_t)tu_range(r, 118, 136);
}

static void put(mxf_dtype f, uint8_t *p, int64_t i, uint16_t code) {
  if (f == MXF_E2M1)
    mxf_e2m1_set(p, i, (uint8_t)code);
  else if (f == MXF_BF16)
    memcpy(p + 2 * i, &code, 2);
  else
    p[i] = (uint8_t)code;
}
static size_t bytes_of(mxf_dtype f, int64_t n) {
  return f == MXF_E2M1 ? (size_t)(n + 1) / 2 : f == MXF_BF16 ? (size_t)n * 2 : (size_t)n;
}

/* One operand's rows [r0, r1) as a tensor of its own (codes, then scales). */
static mxf_tensor operand(const problem *p, int which, int64_t r0, int64_t r1, uint8_t **codes, uint8_t **sf,
                          mxf_tensor *sft) {
  const mxf_dtype f = which ? p->c->fb : p->c->fa, sfd = which ? p->c->sfb : p->c->sfa;
  const uint16_t *src = which ? p->b : p->a;
  const uint8_t *ssrc = which ? p->sb : p->sa;
  const int mm = which ? p->b_nm : p->a_mm;
  const int64_t n = r1 - r0, ld = (n + 15) / 16 * 16; /* m/n-major: rows of 16-byte multiples */
  const int64_t K = p->k;
  const size_t nb = bytes_of(f, (mm ? ld : n) * K) + 64;
  *codes = tu_malloc(nb);
  tu_poison(*codes, nb, 0xFF);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < K; ++k)
      put(f, *codes, mm ? k * ld + i : i * K + k, src[(r0 + i) * K + k]);
  mxf_tensor t = {*codes, f, MXF_DEVICE_CPU, 3, {n, K, 1}, {0}};
  if (mm) t.stride[0] = 1, t.stride[1] = ld, t.stride[2] = ld * K;
  *sf = NULL;
  memset(sft, 0, sizeof *sft);
  if (f == MXF_BF16) return t;
  const mxf_sf_layout lay = p->swz ? MXF_SF_SWIZZLED : MXF_SF_COMPACT;
  const size_t sn = mxf_sf_size(n, K, 1, p->c->sf_vec, lay);
  *sf = tu_malloc(sn);
  tu_poison(*sf, sn, 0xFF);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t b = 0; b < p->kb; ++b)
      (*sf)[p->swz ? mxf_sf_swizzled_offset(i, b, 0, n, K, p->c->sf_vec) : i * p->kb + b] =
          ssrc[(r0 + i) * p->kb + b];
  *sft = (mxf_tensor){*sf, sfd, MXF_DEVICE_CPU, 2, {n, p->kb}, {0}};
  if (p->swz) {
    const int64_t s[6] = {1, (n + 127) / 128, (p->kb + 3) / 4, 32, 4, 4};
    sft->ndim = 6;
    for (int d = 0; d < 6; ++d)
      sft->shape[d] = s[d];
  }
  return t;
}

/* C rows [m0, m1) x columns [n0, n1) into the logical f32 c (GM x GN); amax returned.
 * With g_packed, B's columns packed (SPEC §7) and taken with MXF_AMAX_B_PACKED. */
static int g_packed;
static float run_piece(const problem *p, int64_t m0, int64_t m1, int64_t n0, int64_t n1, float *c) {
  uint8_t *ac, *as, *bc, *bs, *pk = NULL;
  size_t pn = 0;
  mxf_gemm_amax_desc d;
  memset(&d, 0, sizeof d);
  d.a = operand(p, 0, m0, m1, &ac, &as, &d.sfa);
  d.b = operand(p, 1, n0, n1, &bc, &bs, &d.sfb);
  if (g_packed) {
    mxf_status ps = mxf_pack_weights_size(&d.b, &d.sfb, p->c->sf_vec, &pn);
    TU_CHECK(ps == MXF_OK, "pack_weights_size: %s", mxf_last_error());
    pk = tu_malloc_guarded(pn); /* a read past its end faults */
    tu_poison(pk, pn, 0xFF);
    ps = mxf_pack_weights(&d.b, &d.sfb, p->c->sf_vec, pk, pn);
    TU_CHECK(ps == MXF_OK, "pack_weights: %s", mxf_last_error());
    free(bc), free(bs);
    bc = NULL, bs = NULL;
    d.b.data = pk, d.sfb.data = NULL;
    d.flags |= MXF_AMAX_B_PACKED;
  }
  const int64_t mp = m1 - m0, np = n1 - n0, ldm = (mp + 3) / 4 * 4, ldn = (np + 3) / 4 * 4;
  float *cb = tu_malloc((size_t)(ldm * ldn) * sizeof(float)), amax = -1.0f;
  tu_poison(cb, (size_t)(ldm * ldn) * sizeof(float), 0xA5);
  d.c = (mxf_tensor){cb, MXF_F32, MXF_DEVICE_CPU, 3, {mp, np, 1}, {ldn, 1, mp * ldn}};
  if (p->c_mm) d.c.stride[0] = 1, d.c.stride[1] = ldm, d.c.stride[2] = ldm * np;
  d.amax = (mxf_tensor){&amax, MXF_F32, MXF_DEVICE_CPU, 1, {1}, {0}};
  d.sf_vec = p->c->sf_vec;
  const float alpha = 0.3f;
  mxf_plan *plan = NULL;
  mxf_status st = mxf_gemm_amax_plan(&plan, &d);
  TU_CHECK(st == MXF_OK, "plan: %s", mxf_last_error());
  if (st == MXF_OK) {
    const size_t wsn = mxf_plan_workspace_size(plan);
    void *ws = tu_malloc(wsn + 1);
    tu_poison(ws, wsn + 1, 0xFF);
    mxf_gemm_amax_args args = {ac, pk ? pk : bc, as, bs, cb, &amax, &alpha};
    st = mxf_gemm_amax_run(plan, &args, ws, wsn, NULL);
    TU_CHECK(st == MXF_OK, "run: %s", mxf_last_error());
    free(ws);
    mxf_plan_destroy(plan);
  }
  for (int64_t i = 0; i < mp; ++i)
    for (int64_t j = 0; j < np; ++j)
      c[(m0 + i) * GN + n0 + j] = cb[p->c_mm ? j * ldm + i : i * ldn + j];
  free(ac), free(as), free(bc), free(bs), free(cb);
  tu_free_guarded(pk, pn);
  return amax;
}

/* the op's own rule across pieces: the larger, NaN from either side */
static float amax_max(float a, float b) { return a != a ? a : b != b || b > a ? b : a; }

static void check_same(const float *want, float want_amax, const float *got, float got_amax, const char *how,
                       const problem *p) {
  /* byte for byte, except that a NaN matches any NaN (SPEC §5.1 leaves which one open) */
  size_t diff = 0;
  for (size_t i = 0; i < (size_t)GM * GN; ++i) {
    if (want[i] != want[i] && got[i] != got[i]) continue;
    const uint8_t *x = (const uint8_t *)(want + i), *y = (const uint8_t *)(got + i);
    for (int b = 0; b < 4; ++b)
      diff += x[b] != y[b];
  }
  TU_CHECK(
      diff == 0 && memcmp(&want_amax, &got_amax, sizeof want_amax) == 0,
      "gemm %s x %s sf_vec %d (%s scales, a %s-major, b %s-major, c %s-major): %s: %zu bytes of C differ, "
      "amax %a vs %a",
      mxf_dtype_name(p->c->fa), mxf_dtype_name(p->c->fb), p->c->sf_vec, p->swz ? "swizzled" : "compact",
      p->a_mm ? "m" : "k", p->b_nm ? "n" : "k", p->c_mm ? "m" : "n", how, diff, (double)want_amax,
      (double)got_amax);
}

/* MXF_CONFIG as the test found it, plus `item` (NULL: as found). */
static const char *g_config; /* MXF_CONFIG when the test started, or NULL */
static void config_with(const char *item) {
  if (!item) {
    if (g_config)
      setenv("MXF_CONFIG", g_config, 1);
    else
      unsetenv("MXF_CONFIG");
    return;
  }
  char text[128];
  snprintf(text, sizeof text, "%s%s%s", g_config ? g_config : "", g_config ? "," : "", item);
  setenv("MXF_CONFIG", text, 1);
}

/* config_with cpu_isa=isa (NULL: as found). 0, having left MXF_CONFIG as found, when this
 * processor lacks that instruction set (the plan refuses it). */
static int ask_isa(const char *isa) {
  if (!isa) {
    config_with(NULL);
    return 1;
  }
  char item[32];
  snprintf(item, sizeof item, "cpu_isa=%s", isa);
  config_with(item);
  /* a probe: does a plan take it? */
  static uint16_t a[32], b[32];
  float c[1], amax;
  mxf_gemm_amax_desc d;
  memset(&d, 0, sizeof d);
  d.a = (mxf_tensor){a, MXF_BF16, MXF_DEVICE_CPU, 2, {1, 32}, {0}};
  d.b = (mxf_tensor){b, MXF_BF16, MXF_DEVICE_CPU, 2, {1, 32}, {0}};
  d.c = (mxf_tensor){c, MXF_F32, MXF_DEVICE_CPU, 2, {1, 1}, {0}};
  d.amax = (mxf_tensor){&amax, MXF_F32, MXF_DEVICE_CPU, 1, {1}, {0}};
  mxf_plan *plan = NULL;
  const mxf_status st = mxf_gemm_amax_plan(&plan, &d);
  mxf_plan_destroy(plan);
  if (st == MXF_ERR_NOT_SUPPORTED) {
    printf("note: cpu_isa=%s not checked: %s\n", isa, mxf_last_error());
    ask_isa(NULL);
    return 0;
  }
  return 1;
}

/* The streaming path's kernels: blocks of 1 to 16 rows (the streaming kernel's
 * instances, groups of 8 or 4 and the rest; above the rows it takes, 8 with fp8 codes
 * and with e2m1 on AVX2, its decoding into the core's packed layout), of 24 (that
 * decoding) and the remaining 190 (the core on many rows of X), each in column halves (50
 * columns: 3 panels of 16 and 2 rows of fills). */
static float row_blocks(const problem *p, float *got) {
  static const int blocks[] = {1, 2, 3, 4, 7, 13, 16, 24, GM - 70};
  float a = 0.0f;
  for (int i = 0, m0 = 0; i < (int)(sizeof blocks / sizeof *blocks); m0 += blocks[i++])
    for (int h = 0; h < 2; ++h)
      a = amax_max(a, run_piece(p, m0, m0 + blocks[i], h * (GN / 2), (h + 1) * (GN / 2), got));
  return a;
}

/* Combination ci in variant 0..3 (scale layout, operand majors, C's major) with K k. */
static void gemm_case(tu_rng *r, size_t ci, int variant, int64_t k) {
  static problem p;
  static float whole[GM * GN], got[GM * GN], row0[GM * GN];
  p.c = &g_combos[ci];
  p.swz = variant & 1;
  p.a_mm = variant == 2 && p.c->fa != MXF_E2M1;
  p.b_nm = variant == 2 && p.c->fb != MXF_E2M1;
  p.c_mm = variant == 3;
  p.k = k;
  p.kb = (k + p.c->sf_vec - 1) / p.c->sf_vec;
  for (int64_t i = 0; i < GM * k; ++i)
    p.a[i] = rand_code(r, p.c->fa);
  for (int64_t i = 0; i < GN * k; ++i)
    p.b[i] = rand_code(r, p.c->fb);
  /* NaN and inf codes in a few rows of B (and A): their outputs' bits must match too */
  static const uint16_t e4_special[] = {0x7F, 0xFF}, e5_special[] = {0x7C, 0xFC, 0x7E, 0xFF};
  for (int i = 0; i < 4; ++i) {
    const int64_t at = tu_range(r, 0, GN - 1) * k + tu_range(r, 0, k - 1);
    if (p.c->fb == MXF_E4M3) p.b[at] = e4_special[i & 1];
    if (p.c->fb == MXF_E5M2) p.b[at] = e5_special[i];
    if (p.c->fa == MXF_E4M3) p.a[at % (GM * k)] = e4_special[i & 1];
  }
  for (int64_t i = 0; i < GM * p.kb; ++i)
    p.sa[i] = rand_scale(r, p.c->sfa);
  for (int64_t i = 0; i < GN * p.kb; ++i)
    p.sb[i] = rand_scale(r, p.c->sfb);
  /* e8m0 scales 0 (2^-127, a subnormal) and 255 (NaN) in a few rows of B */
  if (p.c->sfb == MXF_E8M0)
    for (int i = 0; i < 4; ++i)
      p.sb[tu_range(r, 0, GN - 1) * p.kb + tu_range(r, 0, p.kb - 1)] = i & 1 ? 255 : 0;
  /* e4m3 scales of every kind: zeros, subnormals, negatives and the largest in a whole
   * row of each operand (rows 33 of B and of A: chunks the AVX-512 kernels decode as
   * vectors), NaN (0x7F, 0xFF: chunks decoded through the table) in a few rows from 64 on */
  static const uint8_t e4_scale[] = {0x00, 0x80, 0x01, 0x07, 0x85, 0xC0, 0x3F, 0xFE, 0x7E};
  for (int w = 0; w < 2; ++w) {
    if ((w ? p.c->sfb : p.c->sfa) != MXF_E4M3) continue;
    uint8_t *sc = w ? p.sb : p.sa;
    for (int64_t b = 0; b < p.kb; ++b)
      sc[33 * p.kb + b] = e4_scale[b % 9];
    for (int i = 0; i < 4; ++i)
      sc[tu_range(r, 64, GN - 1) * p.kb + tu_range(r, 0, p.kb - 1)] = i & 1 ? 0xFF : 0x7F;
  }

  config_with("cpu_stream=off"); /* the reference: the blocked GEMM path */
  const float am = run_piece(&p, 0, GM, 0, GN, whole);
  config_with(NULL);
  float a;
  for (g_packed = 0; g_packed < 2; ++g_packed) { /* then B packed (SPEC §7): the same bits */
    const char *pk = g_packed ? "packed b, " : "";
    char how[96];
    a = run_piece(&p, 0, GM, 0, GN, got);
    snprintf(how, sizeof how, "%swhole on the streaming path (N the few rows)", pk);
    check_same(whole, am, got, a, how, &p);
    a = 0.0f;
    for (int64_t m = 0; m < GM; ++m)
      a = amax_max(a, run_piece(&p, m, m + 1, 0, GN, got));
    snprintf(how, sizeof how, "%srows of 1", pk);
    check_same(whole, am, got, a, how, &p);
    a = row_blocks(&p, got);
    snprintf(how, sizeof how, "%srow blocks of 1 to 190 in column halves", pk);
    check_same(whole, am, got, a, how, &p);
  }
  g_packed = 0;
  a = amax_max(run_piece(&p, 0, GM, 0, GN / 2, got), run_piece(&p, 0, GM, GN / 2, GN, got));
  check_same(whole, am, got, a, "column halves", &p);
  static const char *const threads[] = {"1", "3"};
  for (int t = 0; t < 2; ++t) {
    setenv("MXF_NUM_THREADS", threads[t], 1);
    a = run_piece(&p, 0, GM, 0, GN, got);
    check_same(whole, am, got, a, t ? "3 threads" : "1 thread", &p);
  }
  unsetenv("MXF_NUM_THREADS");
  static const char *const isas[] = {"avx2", "baseline"};
  for (int t = 0; t < 2; ++t) {
    if (!ask_isa(isas[t])) continue;
    a = run_piece(&p, 0, GM, 0, GN, got);
    check_same(whole, am, got, a, isas[t], &p);
    memcpy(row0, got, sizeof row0);
    run_piece(&p, 0, 1, 0, GN, got); /* the streaming path, row 0 */
    memcpy(got + GN, row0 + GN, sizeof row0 - GN * sizeof(float));
    char how[32];
    snprintf(how, sizeof how, "row 0 alone, %s", isas[t]);
    check_same(whole, am, got, am, how, &p);
    a = row_blocks(&p, got);
    snprintf(how, sizeof how, "row blocks, %s", isas[t]);
    check_same(whole, am, got, a, how, &p);
    g_packed = 1;
    a = row_blocks(&p, got);
    snprintf(how, sizeof how, "packed b, row blocks, %s", isas[t]);
    check_same(whole, am, got, a, how, &p);
    g_packed = 0;
  }
  ask_isa(NULL);
}

/* Every combination and variant at K = GK; bf16 x MXFP4 and bf16 x MXFP8 e4m3 (both
 * scale layouts) also at K = GK_LONG, whose rows the streaming kernel reads in place
 * (AVX-512: e2m1 with up to 4 rows of X, e4m3 always; AVX2: e4m3) where GK's it copies. */
static void gemm_invariance(tu_rng *r) {
  for (size_t ci = 0; ci < sizeof g_combos / sizeof *g_combos; ++ci)
    for (int variant = 0; variant < 4; ++variant)
      gemm_case(r, ci, variant, GK);
  for (size_t ci = 0; ci < 3; ci += 2)
    for (int variant = 0; variant < 2; ++variant)
      gemm_case(r, ci, variant, GK_LONG);
}

/* The streaming kernel's block rescaling (stream_cpu.c: e2m1 codes with e8m0 scales, 1 or
 * 2 rows of X) at and beyond its bounds, where rescaling would round otherwise:
 * bf16 x MXFP4 whose products and their sums lie below 2^-126 with bits below 2^-149
 * (activations of 8 significant bits times small scales). Activations of exponents in
 * [-8, 0] (rows 0-7), [-30, -15] (8-15), [-118, -108] (16-23: below the bounds), [20,
 * 40] (24-31: partly above) and [-133, 100] (32-39, subnormal bf16 among them), a
 * sixteenth of them zeros; scales by columns (the kernel's groups of panels: 64
 * columns at 1 row of X, 32 at 2; AVX2: 32 and 16): 2^-32 .. 2^-30 (0-31) and 2^-32 .. 2^32 (32-63:
 * inside the bounds), 2^-126 .. 2^-115 (64-79), inside, then anywhere from the middle of
 * K on, 2^127 and NaN included (80-95), 2^63 .. 2^127 (96-99, the fills' columns);
 * columns 70 and 75 from the middle of K on all 2^-127 and all NaN (bytes 0 and 255,
 * which the kernels' vector decoding of the scales leaves to the table; before it, the
 * lower bound is what keeps columns 64-79 from rescaling). Rows 0-39 by rows of 1 and of 2
 * on the streaming path (the processor's best kernels and AVX2's) against the whole on
 * the blocked path, byte for byte; compact and swizzled scales. */
static void rescale_bounds(tu_rng *r, int swizzled) {
  static problem p;
  static float whole[GM * GN], got[GM * GN];
  p.c = &g_combos[0]; /* bf16 x MXFP4 */
  p.swz = swizzled;
  p.a_mm = p.b_nm = p.c_mm = 0;
  p.k = GK, p.kb = GK / 32;
  static const int e_lo[] = {-8, -30, -118, 20, -133}, e_hi[] = {0, -15, -108, 40, 100};
  for (int64_t m = 0; m < GM; ++m) {
    const int kind = m < 40 ? (int)(m / 8) : 0;
    for (int64_t k = 0; k < GK; ++k) {
      const uint16_t sign = (uint16_t)(tu_range(r, 0, 1) << 15), mant = (uint16_t)tu_range(r, 0, 127);
      const int e = (int)tu_range(r, e_lo[kind], e_hi[kind]);
      p.a[m * GK + k] = tu_range(r, 0, 15) == 0 ? sign
                        : e < -126              ? (uint16_t)(sign | (mant ? mant : 1)) /* subnormal */
                                                : (uint16_t)(sign | (e + 127) << 7 | mant);
    }
  }
  for (int64_t i = 0; i < GN * GK; ++i)
    p.b[i] = rand_code(r, MXF_E2M1);
  for (int64_t n = 0; n < GN; ++n)
    for (int64_t b = 0; b < p.kb; ++b)
      p.sb[n * p.kb + b] = (uint8_t)(n < 32         ? tu_range(r, 95, 97)
                                     : n < 64       ? tu_range(r, 95, 159)
                                     : n < 80       ? tu_range(r, 1, 12)
                                     : n >= 96      ? tu_range(r, 190, 254)
                                     : b < p.kb / 2 ? tu_range(r, 95, 159)
                                                    : tu_range(r, 0, 255));
  for (int64_t b = p.kb / 2; b < p.kb; ++b) /* columns of e8m0 0 (2^-127) and of 255 (NaN) */
    p.sb[70 * p.kb + b] = 0, p.sb[75 * p.kb + b] = 255;
  config_with("cpu_stream=off");
  const float am = run_piece(&p, 0, GM, 0, GN, whole);
  static const char *const isas[] = {NULL, "avx2"};
  for (int t = 0; t < 2; ++t) {
    if (!ask_isa(isas[t])) continue;
    for (int rows = 1; rows <= 4; ++rows) { /* 3, 4: rows of 1, 2 with B packed */
      g_packed = rows > 2;
      memcpy(got, whole, sizeof got);
      for (int64_t m = 0; m < 40; m += 2 - rows % 2)
        run_piece(&p, m, m + 2 - rows % 2, 0, GN, got);
      char how[80];
      snprintf(how, sizeof how, "block rescaling's bounds, rows of %d%s%s%s", 2 - rows % 2,
               g_packed ? ", packed b" : "", t ? ", " : "", t ? isas[t] : "");
      check_same(whole, am, got, am, how, &p);
    }
    g_packed = 0;
  }
  ask_isa(NULL);
}

/* ------------------------------------------------------------ proj_rope */
#define PT 72
#define PK 320
#define PH 4
#define PD 64
#define PR 32

typedef struct pprob {
  int mxfp8, out_in;
  uint16_t x[PT * PK], w[PH * PD * PK]; /* bf16 bits, or e4m3 codes; w logical (out, k) */
  uint8_t xs[PT * PK / 32], ws[PH * PD * PK / 32];
  uint16_t cs[PT * PR], sn[PT * PR];
} pprob;

typedef struct pouts {
  uint8_t row[PT * PH * PD], srow[PT * PH * PD / 32], col[PT * PH * PD], scol[(PT + 31) / 32 * PH * PD];
} pouts;

/* Tokens [t0, t1), heads [h0, h1) into the logical outputs o. */
static void proj_piece(const pprob *p, int64_t t0, int64_t t1, int64_t h0, int64_t h1, pouts *o) {
  const int64_t T = t1 - t0, H = h1 - h0, N = H * PD, es = p->mxfp8 ? 1 : 2;
  uint8_t *x = tu_malloc((size_t)(T * PK * es)), *w = tu_malloc((size_t)(N * PK * es));
  uint8_t *xs = tu_malloc((size_t)(T * PK / 32)), *wsc = tu_malloc((size_t)(N * PK / 32));
  uint16_t *cs = tu_malloc((size_t)(T * PR * 2)), *sn = tu_malloc((size_t)(T * PR * 2));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < PK; ++k)
      put(p->mxfp8 ? MXF_E4M3 : MXF_BF16, x, t * PK + k, p->x[(t0 + t) * PK + k]);
    memcpy(xs + t * (PK / 32), p->xs + (t0 + t) * (PK / 32), PK / 32);
    memcpy(cs + t * PR, p->cs + (t0 + t) * PR, PR * 2);
    memcpy(sn + t * PR, p->sn + (t0 + t) * PR, PR * 2);
  }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < PK; ++k) {
      const int64_t at = p->out_in ? n * PK + k : k * N + n;
      put(p->mxfp8 ? MXF_E4M3 : MXF_BF16, w, at, p->w[(h0 * PD + n) * PK + k]);
      if (k % 32 == 0)
        wsc[p->out_in ? n * (PK / 32) + k / 32 : (k / 32) * N + n] =
            p->ws[(h0 * PD + n) * (PK / 32) + k / 32];
    }
  const int64_t tb = (T + 31) / 32;
  uint8_t *row = tu_malloc((size_t)(T * N)), *srow = tu_malloc((size_t)(T * N / 32)),
          *col = tu_malloc((size_t)(T * N)), *scol = tu_malloc((size_t)(tb * N));
  const mxf_dtype dt = p->mxfp8 ? MXF_E4M3 : MXF_BF16;
  mxf_proj_rope_desc d;
  memset(&d, 0, sizeof d);
  d.x = (mxf_tensor){x, dt, MXF_DEVICE_CPU, 2, {T, PK}, {0}};
  d.w = p->out_in ? (mxf_tensor){w, dt, MXF_DEVICE_CPU, 2, {N, PK}, {0}}
                  : (mxf_tensor){w, dt, MXF_DEVICE_CPU, 2, {PK, N}, {0}};
  if (p->mxfp8) {
    d.x_scale = (mxf_tensor){xs, MXF_E8M0, MXF_DEVICE_CPU, 2, {T, PK / 32}, {0}};
    d.w_scale = p->out_in ? (mxf_tensor){wsc, MXF_E8M0, MXF_DEVICE_CPU, 2, {N, PK / 32}, {0}}
                          : (mxf_tensor){wsc, MXF_E8M0, MXF_DEVICE_CPU, 2, {PK / 32, N}, {0}};
  }
  d.cos = (mxf_tensor){cs, MXF_BF16, MXF_DEVICE_CPU, 2, {T, PR}, {0}};
  d.sin = (mxf_tensor){sn, MXF_BF16, MXF_DEVICE_CPU, 2, {T, PR}, {0}};
  d.out_row = (mxf_tensor){row, MXF_E4M3, MXF_DEVICE_CPU, 3, {T, H, PD}, {0}};
  d.out_scales_row = (mxf_tensor){srow, MXF_E8M0, MXF_DEVICE_CPU, 3, {T, H, PD / 32}, {0}};
  d.out_col = (mxf_tensor){col, MXF_E4M3, MXF_DEVICE_CPU, 3, {T, H, PD}, {0}};
  d.out_scales_col = (mxf_tensor){scol, MXF_E8M0, MXF_DEVICE_CPU, 3, {tb, H, PD}, {0}};
  d.flags = p->out_in ? MXF_PROJ_W_OUT_IN : 0;
  mxf_status st = mxf_proj_rope(&d, NULL);
  TU_CHECK(st == MXF_OK, "proj_rope: %s", mxf_last_error());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t at = (t0 + t) * PH * PD + h0 * PD + n;
      o->row[at] = row[t * N + n];
      o->col[at] = col[t * N + n];
      if (n % 32 == 0) o->srow[at / 32] = srow[(t * N + n) / 32];
      if (t % 32 == 0) o->scol[((t0 + t) / 32) * PH * PD + h0 * PD + n] = scol[(t / 32) * N + n];
    }
  free(x), free(w), free(xs), free(wsc), free(cs), free(sn), free(row), free(srow), free(col), free(scol);
}

static void proj_check(const pprob *p, const pouts *want, const pouts *got, int cols, const char *how) {
  const int row_ok =
      !memcmp(want->row, got->row, sizeof want->row) && !memcmp(want->srow, got->srow, sizeof want->srow);
  const int col_ok = !cols || (!memcmp(want->col, got->col, sizeof want->col) &&
                               !memcmp(want->scol, got->scol, sizeof want->scol));
  TU_CHECK(row_ok && col_ok, "proj_rope %s, w %s: %s: out_row %s, out_col %s", p->mxfp8 ? "mxfp8" : "bf16",
           p->out_in ? "out-in" : "in-out", how, row_ok ? "same" : "DIFFERS", col_ok ? "same" : "DIFFERS");
}

static void proj_invariance(tu_rng *r) {
  static pprob p;
  static pouts whole, got;
  for (int v = 0; v < 4; ++v) {
    p.mxfp8 = v & 1, p.out_in = v >> 1;
    for (int64_t i = 0; i < PT * PK; ++i)
      p.x[i] = p.mxfp8 ? mxf_f32_to_e4m3((float)(tu_normal(r) * 96.0)) : tu_bf16_activation(r);
    for (int64_t i = 0; i < PH * PD * PK; ++i)
      p.w[i] = p.mxfp8 ? mxf_f32_to_e4m3((float)(tu_normal(r) * 96.0)) : mxf_f32_to_bf16((float)tu_normal(r));
    for (int64_t i = 0; i < PT * PK / 32; ++i)
      p.xs[i] = (uint8_t)tu_range(r, 110, 120);
    for (int64_t i = 0; i < PH * PD * PK / 32; ++i)
      p.ws[i] = (uint8_t)tu_range(r, 110, 120);
    for (int64_t i = 0; i < PT * PR; ++i) {
      const double a = tu_uniform(r) * 6.283185307179586;
      p.cs[i] = mxf_f32_to_bf16((float)cos(a)), p.sn[i] = mxf_f32_to_bf16((float)sin(a));
    }
    memset(&whole, 0, sizeof whole);
    config_with("cpu_stream=off"); /* the reference: the blocked GEMM path */
    proj_piece(&p, 0, PT, 0, PH, &whole);
    config_with(NULL);
    memset(&got, 0, sizeof got);
    proj_piece(&p, 0, PT, 0, PH, &got);
    proj_check(&p, &whole, &got, 1, "whole on the streaming path");
    memset(&got, 0, sizeof got);
    for (int64_t t = 0; t < PT; ++t)
      proj_piece(&p, t, t + 1, 0, PH, &got);
    proj_check(&p, &whole, &got, 0, "single tokens");
    memset(&got, 0, sizeof got);
    for (int64_t t = 0; t < PT; t += 32)
      proj_piece(&p, t, t + 32 < PT ? t + 32 : PT, 0, PH, &got);
    proj_check(&p, &whole, &got, 1, "32-token blocks");
    memset(&got, 0, sizeof got);
    for (int64_t h = 0; h < PH; ++h)
      proj_piece(&p, 0, PT, h, h + 1, &got);
    proj_check(&p, &whole, &got, 1, "one head at a time");
    static const char *const threads[] = {"1", "3"};
    for (int t = 0; t < 2; ++t) {
      setenv("MXF_NUM_THREADS", threads[t], 1);
      memset(&got, 0, sizeof got);
      proj_piece(&p, 0, PT, 0, PH, &got);
      proj_check(&p, &whole, &got, 1, t ? "3 threads" : "1 thread");
    }
    unsetenv("MXF_NUM_THREADS");
    static const char *const isas[] = {"avx2", "baseline"};
    for (int t = 0; t < 2; ++t) { /* single tokens (the streaming path) on the lesser kernels */
      if (!ask_isa(isas[t])) continue;
      memset(&got, 0, sizeof got);
      for (int64_t i = 0; i < PT; ++i)
        proj_piece(&p, i, i + 1, 0, PH, &got);
      char how[40];
      snprintf(how, sizeof how, "single tokens, %s", isas[t]);
      proj_check(&p, &whole, &got, 0, how);
    }
    ask_isa(NULL);
  }
}

int main(void) {
  const char *asked = tu_cpu_core_asked();
  if (asked && strcmp(asked, "c") != 0)
    return tu_skip("test_cpu_invariance",
                   "a vendor core is asked for (MXF_CONFIG); it gives up the invariance");
  static char config[128];
  if (getenv("MXF_CONFIG")) { /* a copy: setenv may free the string */
    snprintf(config, sizeof config, "%s", getenv("MXF_CONFIG"));
    g_config = config;
  }
  tu_rng r;
  tu_rng_init(&r, tu_seed());
  gemm_invariance(&r);
  rescale_bounds(&r, 0);
  rescale_bounds(&r, 1);
  proj_invariance(&r);
  return tu_finish("test_cpu_invariance");
}
