/*
 * test_cli_util.c — the shared option helpers of the mxfuse tool (tools/cli_util.c):
 * integers, seeds, shapes, devices, `--opt value` / `--opt=value`, JSON strings, the
 * RNG, the median and host "device" memory. The tool is an executable, so the helpers
 * are compiled into this test directly.
 */
#include <math.h>
#include <string.h>

#include "../tools/cli_util.c"
#include "testutil.h"

static void test_integers(void) {
  int64_t v = 0;
  TU_CHECK(mxf_cli_parse_i64("t", "--n", "4096", 1, 1 << 20, &v) == 0 && v == 4096, "4096");
  TU_CHECK(mxf_cli_parse_i64("t", "--n", "-3", -5, 5, &v) == 0 && v == -3, "-3");
  TU_CHECK(mxf_cli_parse_i64("t", "--n", "2k", 0, 1 << 20, &v) == 0 && v == 2048, "2k");
  TU_CHECK(mxf_cli_parse_i64("t", "--n", "3M", 0, INT64_MAX, &v) == 0 && v == 3 << 20, "3M");
  v = 77;
  TU_CHECK(mxf_cli_parse_i64("t", "--n", "12x", 0, 100, &v) != 0 && v == 77, "12x refused, out untouched");
  TU_CHECK(mxf_cli_parse_i64("t", "--n", "", 0, 100, &v) != 0, "empty refused");
  TU_CHECK(mxf_cli_parse_i64("t", "--n", "101", 0, 100, &v) != 0, "above range refused");
  TU_CHECK(mxf_cli_parse_i64("t", "--n", "99999999999999999999", 0, INT64_MAX, &v) != 0, "overflow refused");
  TU_CHECK(mxf_cli_parse_i64("t", "--n", "9000000000000000G", 0, INT64_MAX, &v) != 0,
           "suffix overflow refused");

  uint64_t s = 0;
  TU_CHECK(mxf_cli_parse_seed("t", "--seed", "18446744073709551615", &s) == 0 && s == UINT64_MAX, "max seed");
  TU_CHECK(mxf_cli_parse_seed("t", "--seed", "0x10", &s) == 0 && s == 16, "hex seed");
  TU_CHECK(mxf_cli_parse_seed("t", "--seed", "-1", &s) != 0, "negative seed refused");
  TU_CHECK(mxf_cli_parse_seed("t", "--seed", "1.5", &s) != 0, "1.5 refused");
}

static void test_shapes(void) {
  int64_t d[6] = {0};
  int n = 0;
  char buf[64];
  TU_CHECK(mxf_cli_parse_shape("t", "--shape", "4096x1536", 6, d, &n) == 0 && n == 2 && d[0] == 4096 &&
               d[1] == 1536,
           "4096x1536");
  TU_CHECK(mxf_cli_parse_shape("t", "--shape", "3,5,7", 6, d, &n) == 0 && n == 3 && d[2] == 7, "3,5,7");
  TU_CHECK(mxf_cli_parse_shape("t", "--shape", "17", 6, d, &n) == 0 && n == 1 && d[0] == 17, "17");
  TU_CHECK(!strcmp(mxf_cli_shape_str(buf, sizeof buf, d, n), "(17)"), "shape_str (17): %s", buf);
  int64_t e[3] = {2, 30, 4};
  TU_CHECK(!strcmp(mxf_cli_shape_str(buf, sizeof buf, e, 3), "(2, 30, 4)"), "shape_str: %s", buf);
  TU_CHECK(!strcmp(mxf_cli_shape_str(buf, 5, e, 3), "(2, "), "truncated shape_str: %s", buf);
  const char *bad[] = {"", "x", "4x", "x4", "4xx5", "0x5", "4x-5", "4 5", "4x5x", "1x2x3x4x5x6x7", "a"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    TU_CHECK(mxf_cli_parse_shape("t", "--shape", bad[i], 6, d, &n) != 0, "'%s' refused", bad[i]);
}

static void test_devices(void) {
  int32_t dev = -1;
  char buf[32];
  TU_CHECK(mxf_cli_parse_device("t", "--device", "cpu", &dev) == 0 && dev == MXF_DEVICE_CPU, "cpu");
  TU_CHECK(mxf_cli_parse_device("t", "--device", "auto", &dev) == 0, "auto");
  TU_CHECK(dev == ((mxf_cuda_device_count() > 0 && mxf_cli_has_cuda()) ? MXF_DEVICE_CUDA(0) : MXF_DEVICE_CPU),
           "auto picks cuda:0 exactly when a GPU is usable");
  TU_CHECK(mxf_cli_parse_device("t", "--device", "gpu", &dev) != 0, "gpu refused");
  TU_CHECK(mxf_cli_parse_device("t", "--device", "cuda:x", &dev) != 0, "cuda:x refused");
  TU_CHECK(mxf_cli_parse_device("t", "--device", "cuda:1000", &dev) != 0, "absent cuda:1000 refused");
  int n = mxf_cuda_device_count();
  if (n == 0 || !mxf_cli_has_cuda())
    TU_CHECK(mxf_cli_parse_device("t", "--device", "cuda", &dev) != 0, "no GPU: cuda refused");
  else
    TU_CHECK(mxf_cli_parse_device("t", "--device", "cuda", &dev) == 0 && dev == MXF_DEVICE_CUDA(0), "cuda");
  TU_CHECK(!strcmp(mxf_cli_device_str(buf, sizeof buf, MXF_DEVICE_CUDA(3)), "cuda:3"), "cuda:3 str");
  TU_CHECK(!strcmp(mxf_cli_device_str(buf, sizeof buf, MXF_DEVICE_CPU), "cpu"), "cpu str");
}

static void test_options(void) {
  char *argv[] = {"cmd", "--seed", "5", "--seedx", "--seed=7", "--tokens", "--seed", NULL};
  int argc = 7, i = 1;
  const char *v = mxf_cli_opt("t", argc, argv, &i, "--seed");
  TU_CHECK(v && !strcmp(v, "5") && i == 2, "--seed 5 (i=%d)", i);
  i = 3;
  TU_CHECK(mxf_cli_opt("t", argc, argv, &i, "--seed") == NULL && i == 3, "--seedx is another option");
  i = 4;
  v = mxf_cli_opt("t", argc, argv, &i, "--seed");
  TU_CHECK(v && !strcmp(v, "7") && i == 4, "--seed=7");
  i = 5;
  TU_CHECK(mxf_cli_opt("t", argc, argv, &i, "--seed") == NULL, "--tokens is not --seed");
  i = 6;
  v = mxf_cli_opt("t", argc, argv, &i, "--seed");
  TU_CHECK(v && !*v, "--seed at the end has no value");
  TU_CHECK(mxf_cli_is_help("--help") && mxf_cli_is_help("-h") && !mxf_cli_is_help("--helpme"), "is_help");
  char *h[] = {"cmd", "--x", "-h"};
  TU_CHECK(mxf_cli_wants_help(3, h) && !mxf_cli_wants_help(2, h), "wants_help");
}

static void test_json(void) {
  char buf[128] = {0};
  FILE *f = fmemopen(buf, sizeof buf - 1, "w");
  mxf_cli_json_str(f, "a\"b\\c\nd\x01");
  fclose(f);
  TU_CHECK(!strcmp(buf, "\"a\\\"b\\\\c\\nd\\u0001\""), "json escaping: %s", buf);
}

static void test_rng_and_median(void) {
  mxf_cli_rng a, b;
  mxf_cli_rng_init(&a, 42);
  mxf_cli_rng_init(&b, 42);
  int same = 1;
  for (int i = 0; i < 100; i++)
    same &= mxf_cli_rng_u64(&a) == mxf_cli_rng_u64(&b);
  TU_CHECK(same, "same seed, same stream");
  mxf_cli_rng_init(&a, tu_seed());
  enum { N = 200001 };
  static float x[N];
  mxf_cli_rng_normal(&a, x, N);
  double mean = 0, var = 0;
  for (int i = 0; i < N; i++)
    mean += x[i];
  mean /= N;
  for (int i = 0; i < N; i++)
    var += (x[i] - mean) * (x[i] - mean);
  var /= N;
  TU_CHECK(fabs(mean) < 0.02 && fabs(var - 1.0) < 0.02, "normal: mean %g var %g", mean, var);
  int hist[7] = {0};
  for (int i = 0; i < 70000; i++)
    hist[mxf_cli_rng_below(&a, 7)]++;
  int ok = 1;
  for (int i = 0; i < 7; i++)
    ok &= hist[i] > 9500 && hist[i] < 10500;
  TU_CHECK(ok, "below(7) uniform");
  double u = mxf_cli_rng_uniform(&a);
  TU_CHECK(u >= 0.0 && u < 1.0, "uniform in [0,1)");
  double m1[] = {5, 1, 3}, m2[] = {4, 1, 3, 2};
  TU_CHECK(mxf_cli_median(m1, 3) == 3.0 && mxf_cli_median(m2, 4) == 2.5, "median");
}

static mxf_status count_calls(void *ctx) {
  int *n = ctx;
  return ++*n == 4 ? MXF_ERR_NOT_SUPPORTED : MXF_OK;
}

static void test_host_memory_and_timing(void) {
  uint8_t src[100], dst[100];
  for (int i = 0; i < 100; i++)
    src[i] = (uint8_t)i;
  uint8_t *d = mxf_cli_dev_alloc("t", MXF_DEVICE_CPU, 100);
  TU_CHECK(d && ((uintptr_t)d & 63) == 0, "host alloc 64-byte aligned");
  if (!d) return;
  TU_CHECK(mxf_cli_dev_memset("t", MXF_DEVICE_CPU, d, 0xA5, 100) == 0 && tu_all_bytes(d, 100, 0xA5),
           "memset");
  TU_CHECK(mxf_cli_dev_upload("t", MXF_DEVICE_CPU, d, src, 100) == 0, "upload");
  TU_CHECK(mxf_cli_dev_download("t", MXF_DEVICE_CPU, dst, d, 100) == 0 && !memcmp(dst, src, 100),
           "round trip");
  TU_CHECK(mxf_cli_dev_sync("t", MXF_DEVICE_CPU) == 0, "sync");
  mxf_cli_dev_free(MXF_DEVICE_CPU, d);
  int calls = 0;
  double ms = -1;
  TU_CHECK(mxf_cli_time_median("t", MXF_DEVICE_CPU, 1, 2, count_calls, &calls, &ms) == MXF_OK && calls == 3 &&
               ms >= 0,
           "1 warm-up + 2 runs (calls %d)", calls);
  TU_CHECK(mxf_cli_time_median("t", MXF_DEVICE_CPU, 0, 5, count_calls, &calls, &ms) == MXF_ERR_NOT_SUPPORTED,
           "a failing run's status comes back");
  if (!mxf_cli_has_cuda())
    TU_CHECK(mxf_cli_dev_alloc("t", MXF_DEVICE_CUDA(0), 16) == NULL,
             "no CUDA in the tool: device alloc fails");
}

int main(void) {
  tu_seed();
  test_integers();
  test_shapes();
  test_devices();
  test_options();
  test_json();
  test_rng_and_median();
  test_host_memory_and_timing();
  return tu_finish("test_cli_util");
}
