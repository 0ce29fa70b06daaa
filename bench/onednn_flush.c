/*
 * onednn_flush.c — what oneDNN's bf16 matmul (bf16 x bf16 -> f32 sums) does below 2^-126
 * on this processor, measured through its C API: the facts behind the onednn core's
 * panel rule (src/cpu/sgemm_cpu.c, ranges_exact; docs/decisions.md).
 *
 * Each probe is a 1 x K . K x 1 product whose every term is the same power of two (or a
 * cancelling pair), so the exact sum is known:
 *   products   K products of 2^e (bf16 normal inputs, product below 2^-126): flushed?
 *   inputs     K products of a bf16 subnormal 2^e times 1: inputs read as zero?
 *   results    2^-125 - (2^-125 - 2^e), both terms bf16 normals: a subnormal result: flushed?
 * and, as a control, the same sums at 2^-126 and above, which must be exact.
 *
 *   ./build/mxf_onednn_flush          (prints the implementation and a line per probe)
 */
#include <oneapi/dnnl/dnnl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define K 64

static uint16_t bf16_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16); /* the probes' values are exact bf16 */
}

static dnnl_engine_t g_eng;
static dnnl_stream_t g_stream;
static dnnl_primitive_t g_prim;
static dnnl_memory_desc_t g_a, g_b, g_c;

static int setup(void) {
  if (dnnl_engine_create(&g_eng, dnnl_cpu, 0) != dnnl_success) return -1;
  dnnl_dims_t da = {1, K}, sa = {K, 1}, db = {K, 1}, sb = {1, 1}, dc = {1, 1}, sc = {1, 1};
  dnnl_memory_desc_init_by_strides(&g_a, 2, da, dnnl_bf16, sa);
  dnnl_memory_desc_init_by_strides(&g_b, 2, db, dnnl_bf16, sb);
  dnnl_memory_desc_init_by_strides(&g_c, 2, dc, dnnl_f32, sc);
  dnnl_matmul_desc_t md;
  dnnl_matmul_desc_init(&md, &g_a, &g_b, NULL, &g_c);
  dnnl_primitive_desc_t pd;
  dnnl_status_t st = dnnl_primitive_desc_create(&pd, &md, NULL, g_eng, NULL);
  if (st != dnnl_success) {
    printf("no bf16 matmul here (dnnl status %d)\n", (int)st);
    return -1;
  }
  const char *impl = "";
  dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  printf("oneDNN %d.%d.%d, bf16 matmul implementation: %s\n", dnnl_version()->major, dnnl_version()->minor,
         dnnl_version()->patch, impl);
  dnnl_primitive_create(&g_prim, pd);
  dnnl_primitive_desc_destroy(pd);
  dnnl_stream_create(&g_stream, g_eng, dnnl_stream_default_flags);
  return 0;
}

static float dot(const float *x, const float *y) {
  uint16_t a[K], b[K];
  float c = -1.0f;
  for (int i = 0; i < K; ++i)
    a[i] = bf16_of(x[i]), b[i] = bf16_of(y[i]);
  dnnl_memory_t ma, mb, mc;
  dnnl_memory_create(&ma, &g_a, g_eng, a);
  dnnl_memory_create(&mb, &g_b, g_eng, b);
  dnnl_memory_create(&mc, &g_c, g_eng, &c);
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
  dnnl_primitive_execute(g_prim, g_stream, 3, args);
  dnnl_stream_wait(g_stream);
  dnnl_memory_destroy(ma), dnnl_memory_destroy(mb), dnnl_memory_destroy(mc);
  return c;
}

static void report(const char *what, int e, float got, float want) {
  printf("  %-9s 2^%-4d  got %-14a want %-14a %s\n", what, e, (double)got, (double)want,
         got == want   ? "exact"
         : got == 0.0f ? "FLUSHED to 0"
                       : "DIFFERENT");
}

int main(void) {
  if (setup()) return 0; /* nothing to measure on this processor */
  float x[K], y[K];
  /* products of normal inputs: 2^(e/2) * 2^(e - e/2) */
  for (int e = -131; e <= -124; ++e) {
    for (int i = 0; i < K; ++i)
      x[i] = ldexpf(1.0f, e / 2), y[i] = ldexpf(1.0f, e - e / 2);
    report("products", e, dot(x, y), ldexpf((float)K, e));
  }
  /* bf16 subnormal inputs (bf16 reaches 2^-133) times 1 */
  for (int e = -133; e <= -125; e += 2) {
    for (int i = 0; i < K; ++i)
      x[i] = ldexpf(1.0f, e), y[i] = 1.0f;
    report("inputs", e, dot(x, y), ldexpf((float)K, e));
  }
  /* a subnormal result: 2^-125 * 1 - (2^-125 - 2^e) * 1 (a bf16 normal down to e = -133),
   * the rest zero */
  for (int e = -133; e <= -126; ++e) {
    memset(x, 0, sizeof x), memset(y, 0, sizeof y);
    x[0] = ldexpf(1.0f, -125), y[0] = 1.0f;
    x[1] = -(ldexpf(1.0f, -125) - ldexpf(1.0f, e)), y[1] = 1.0f;
    report("results", e, dot(x, y), ldexpf(1.0f, e));
  }
  return 0;
}
