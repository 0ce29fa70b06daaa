/*
 * cli_util.c — shared helpers of the mxfuse subcommands (see cli.h): messages, option
 * parsing, JSON strings, the RNG, memory on a device, running a plan and timing.
 *
 * CUDA calls live only here and in the demo, behind MXF_WITH_CUDA (defined for the
 * tool when CMake finds CUDA), so the tool also builds and runs without a CUDA toolkit.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "formats.h"

#if defined(MXF_WITH_CUDA)
#include <cuda_runtime.h>
#endif

/* ------------------------------------------------------------ messages */
void mxf_cli_err(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "mxfuse %s: ", cmd ? cmd : "");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

void mxf_cli_err_status(const char *cmd, const char *what, mxf_status st) {
  mxf_cli_err(cmd, "%s: %s: %s", what, mxf_status_string(st), mxf_last_error());
}

/* ------------------------------------------------------------ option parsing */
int mxf_cli_is_help(const char *arg) { return arg && (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0); }

int mxf_cli_wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (mxf_cli_is_help(argv[i])) return 1;
  return 0;
}

const char *mxf_cli_opt(const char *cmd, int argc, char **argv, int *i, const char *name) {
  const char *a = argv[*i];
  size_t n = strlen(name);
  if (strncmp(a, name, n) != 0) return NULL;
  if (a[n] == '=') return a + n + 1;
  if (a[n] != '\0') return NULL; /* "--seedx" is another option */
  if (*i + 1 >= argc) {
    mxf_cli_err(cmd, "%s needs a value", name);
    return "";
  }
  *i += 1;
  return argv[*i];
}

int mxf_cli_parse_i64(const char *cmd, const char *opt, const char *text, int64_t lo, int64_t hi,
                      int64_t *out) {
  if (!text || !*text) {
    mxf_cli_err(cmd, "%s: empty value", opt);
    return -1;
  }
  char *end = NULL;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (end == text || errno == ERANGE) {
    mxf_cli_err(cmd, "%s: '%s' is not an integer", opt, text);
    return -1;
  }
  int shift = 0;
  if (*end == 'k' || *end == 'K')
    shift = 10, end++;
  else if (*end == 'M')
    shift = 20, end++;
  else if (*end == 'G')
    shift = 30, end++;
  if (*end != '\0') {
    mxf_cli_err(cmd, "%s: '%s' is not an integer", opt, text);
    return -1;
  }
  if (shift && (v > (INT64_MAX >> shift) || v < (INT64_MIN >> shift))) {
    mxf_cli_err(cmd, "%s: '%s' is out of range", opt, text);
    return -1;
  }
  v = (long long)((int64_t)v * ((int64_t)1 << shift));
  if (v < lo || v > hi) {
    mxf_cli_err(cmd, "%s: %lld is outside [%" PRId64 ", %" PRId64 "]", opt, v, lo, hi);
    return -1;
  }
  *out = (int64_t)v;
  return 0;
}

int mxf_cli_parse_seed(const char *cmd, const char *opt, const char *text, uint64_t *out) {
  char *end = NULL;
  errno = 0;
  if (!text || !*text || *text == '-') {
    mxf_cli_err(cmd, "%s: '%s' is not an unsigned integer", opt, text ? text : "");
    return -1;
  }
  unsigned long long v = strtoull(text, &end, 0);
  if (end == text || *end != '\0' || errno == ERANGE) {
    mxf_cli_err(cmd, "%s: '%s' is not an unsigned integer", opt, text);
    return -1;
  }
  *out = (uint64_t)v;
  return 0;
}

int mxf_cli_parse_shape(const char *cmd, const char *opt, const char *text, int max_dims, int64_t *dims,
                        int *ndim) {
  int n = 0;
  const char *p = text ? text : "";
  for (;;) {
    char *end = NULL;
    if (!isdigit((unsigned char)*p)) goto bad;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (errno == ERANGE || v <= 0) {
      mxf_cli_err(cmd, "%s: '%s': every extent must be a positive integer", opt, text);
      return -1;
    }
    if (n == max_dims) {
      mxf_cli_err(cmd, "%s: '%s' has more than %d dimension%s", opt, text, max_dims,
                  max_dims == 1 ? "" : "s");
      return -1;
    }
    dims[n++] = v;
    p = end;
    if (*p == '\0') break;
    if (*p != 'x' && *p != 'X' && *p != ',') goto bad;
    p++; /* a digit must follow: a trailing separator is an error */
  }
  *ndim = n;
  return 0;
bad:
  mxf_cli_err(cmd, "%s: '%s' is not a shape (write e.g. 4096x1536)", opt, text ? text : "");
  return -1;
}

char *mxf_cli_shape_str(char *buf, size_t size, const int64_t *dims, int ndim) {
  size_t o = 0;
  o += (size_t)snprintf(buf + o, o < size ? size - o : 0, "(");
  for (int i = 0; i < ndim; i++)
    o += (size_t)snprintf(buf + o, o < size ? size - o : 0, "%s%" PRId64, i ? ", " : "", dims[i]);
  snprintf(buf + o, o < size ? size - o : 0, ")");
  return buf;
}

int mxf_cli_parse_device(const char *cmd, const char *opt, const char *text, int32_t *device) {
  if (!text) text = "";
  if (strcmp(text, "cpu") == 0) {
    *device = MXF_DEVICE_CPU;
    return 0;
  }
  int ndev = mxf_cuda_device_count();
  if (strcmp(text, "auto") == 0) {
    *device = (ndev > 0 && mxf_cli_has_cuda()) ? MXF_DEVICE_CUDA(0) : MXF_DEVICE_CPU;
    return 0;
  }
  int64_t ord = 0;
  if (strcmp(text, "cuda") == 0) {
    ord = 0;
  } else if (strncmp(text, "cuda:", 5) == 0) {
    if (mxf_cli_parse_i64(cmd, opt, text + 5, 0, 1023, &ord) != 0) return -1;
  } else {
    mxf_cli_err(cmd, "%s: '%s' is not a device (cpu, cuda, cuda:N or auto)", opt, text);
    return -1;
  }
  if (!mxf_has_cuda() || !mxf_cli_has_cuda()) {
    mxf_cli_err(cmd, "%s %s: this build of mxfuse has no CUDA support", opt, text);
    return -1;
  }
  if (ord >= ndev) {
    mxf_cli_err(cmd, "%s %s: CUDA device %" PRId64 " not present (%d device%s)", opt, text, ord, ndev,
                ndev == 1 ? "" : "s");
    return -1;
  }
  *device = MXF_DEVICE_CUDA((int32_t)ord);
  return 0;
}

char *mxf_cli_device_str(char *buf, size_t size, int32_t device) {
  if (device == MXF_DEVICE_CPU)
    snprintf(buf, size, "cpu");
  else
    snprintf(buf, size, "cuda:%d", (int)MXF_DEVICE_ORDINAL(device));
  return buf;
}

uint64_t mxf_cli_default_seed(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t s = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
  /* keep seeds short enough to retype */
  return s % 1000000000ull;
}

/* ------------------------------------------------------------ JSON */
void mxf_cli_json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p == '\n')
      fputs("\\n", f);
    else if (*p == '\t')
      fputs("\\t", f);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

/* ------------------------------------------------------------ RNG */
void mxf_cli_rng_init(mxf_cli_rng *r, uint64_t seed) { mxf_rng_init(r, seed); }

uint64_t mxf_cli_rng_u64(mxf_cli_rng *r) { return mxf_rng_u64(r); }

uint64_t mxf_cli_rng_below(mxf_cli_rng *r, uint64_t n) {
  /* rejection keeps it unbiased; the loop almost never repeats */
  uint64_t lim = UINT64_MAX - UINT64_MAX % n;
  uint64_t v;
  do
    v = mxf_cli_rng_u64(r);
  while (v >= lim);
  return v % n;
}

double mxf_cli_rng_uniform(mxf_cli_rng *r) { return mxf_rng_uniform(r); }

void mxf_cli_rng_normal(mxf_cli_rng *r, float *out, size_t n) {
  const double two_pi = 6.283185307179586;
  for (size_t i = 0; i < n; i += 2) {
    double u1 = 1.0 - mxf_cli_rng_uniform(r); /* (0, 1]: log never sees 0 */
    double u2 = mxf_cli_rng_uniform(r);
    double rad = sqrt(-2.0 * log(u1));
    out[i] = (float)(rad * cos(two_pi * u2));
    if (i + 1 < n) out[i + 1] = (float)(rad * sin(two_pi * u2));
  }
}

/* ------------------------------------------------------------ memory on a device */
int mxf_cli_has_cuda(void) {
#if defined(MXF_WITH_CUDA)
  return 1;
#else
  return 0;
#endif
}

#if defined(MXF_WITH_CUDA)
static int cuda_ok(const char *cmd, cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 1;
  mxf_cli_err(cmd, "%s: %s", what, cudaGetErrorString(e));
  return 0;
}
#else
static int no_cuda(const char *cmd) {
  mxf_cli_err(cmd, "this build of the mxfuse tool has no CUDA support");
  return -1;
}
#endif

void *mxf_cli_dev_alloc(const char *cmd, int32_t device, size_t bytes) {
  if (bytes == 0) bytes = 1; /* a valid, distinct pointer even for empty tensors */
  if (device == MXF_DEVICE_CPU) {
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) mxf_cli_err(cmd, "cannot allocate %zu bytes of host memory", bytes);
    return p;
  }
#if defined(MXF_WITH_CUDA)
  void *p = NULL;
  if (!cuda_ok(cmd, cudaSetDevice(MXF_DEVICE_ORDINAL(device)), "cudaSetDevice")) return NULL;
  if (!cuda_ok(cmd, cudaMalloc(&p, bytes), "cudaMalloc")) return NULL;
  return p;
#else
  no_cuda(cmd);
  return NULL;
#endif
}

void mxf_cli_dev_free(int32_t device, void *p) {
  if (!p) return;
  if (device == MXF_DEVICE_CPU) {
    free(p);
    return;
  }
#if defined(MXF_WITH_CUDA)
  cudaSetDevice(MXF_DEVICE_ORDINAL(device));
  cudaFree(p);
#endif
}

/* A copy between host memory and memory of device, in the direction to_device says. */
static int dev_copy(const char *cmd, int32_t device, void *dst, const void *src, size_t bytes,
                    int to_device) {
  if (device == MXF_DEVICE_CPU) {
    if (dst != src && bytes) memcpy(dst, src, bytes);
    return 0;
  }
#if defined(MXF_WITH_CUDA)
  if (!cuda_ok(cmd, cudaSetDevice(MXF_DEVICE_ORDINAL(device)), "cudaSetDevice")) return -1;
  return cuda_ok(cmd,
                 cudaMemcpy(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost),
                 to_device ? "cudaMemcpy to device" : "cudaMemcpy to host")
             ? 0
             : -1;
#else
  (void)to_device;
  return no_cuda(cmd);
#endif
}

int mxf_cli_dev_upload(const char *cmd, int32_t device, void *dst, const void *src, size_t bytes) {
  return dev_copy(cmd, device, dst, src, bytes, 1);
}

int mxf_cli_dev_download(const char *cmd, int32_t device, void *dst, const void *src, size_t bytes) {
  return dev_copy(cmd, device, dst, src, bytes, 0);
}

int mxf_cli_dev_memset(const char *cmd, int32_t device, void *p, int byte, size_t bytes) {
  if (device == MXF_DEVICE_CPU) {
    memset(p, byte, bytes);
    return 0;
  }
#if defined(MXF_WITH_CUDA)
  if (!cuda_ok(cmd, cudaSetDevice(MXF_DEVICE_ORDINAL(device)), "cudaSetDevice")) return -1;
  return cuda_ok(cmd, cudaMemset(p, byte, bytes), "cudaMemset") ? 0 : -1;
#else
  return no_cuda(cmd);
#endif
}

int mxf_cli_dev_sync(const char *cmd, int32_t device) {
  if (device == MXF_DEVICE_CPU) return 0;
#if defined(MXF_WITH_CUDA)
  if (!cuda_ok(cmd, cudaSetDevice(MXF_DEVICE_ORDINAL(device)), "cudaSetDevice")) return -1;
  return cuda_ok(cmd, cudaDeviceSynchronize(), "cudaDeviceSynchronize") ? 0 : -1;
#else
  return no_cuda(cmd);
#endif
}

void *mxf_cli_dev_mirror(const char *cmd, int32_t device, const void *host, size_t bytes) {
  if (device == MXF_DEVICE_CPU) return (void *)host;
  void *d = mxf_cli_dev_alloc(cmd, device, bytes);
  if (d && mxf_cli_dev_upload(cmd, device, d, host, bytes)) {
    mxf_cli_dev_free(device, d);
    return NULL;
  }
  return d;
}

void mxf_cli_dev_release(int32_t device, void *dev, const void *host) {
  if (dev != host) mxf_cli_dev_free(device, dev);
}

/* ------------------------------------------------------------ running a plan */
mxf_status mxf_cli_run(mxf_cli_op op, const mxf_plan *plan, const void *args, void *ws, size_t ws_size) {
  switch (op) {
  case MXF_CLI_GEMM_AMAX: return mxf_gemm_amax_run(plan, args, ws, ws_size, NULL);
  case MXF_CLI_PROJ_ROPE: return mxf_proj_rope_run(plan, args, ws, ws_size, NULL);
  case MXF_CLI_QUANTIZE: return mxf_quantize_run(plan, args, ws, ws_size, NULL);
  case MXF_CLI_DEQUANTIZE: return mxf_dequantize_run(plan, args, ws, ws_size, NULL);
  case MXF_CLI_GROUPED_GEMM_AMAX: return mxf_grouped_gemm_amax_run(plan, args, ws, ws_size, NULL);
  }
  return MXF_ERR_INTERNAL;
}

/* ------------------------------------------------------------ timing */
double mxf_cli_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double mxf_cli_median(double *v, int n) {
  if (n <= 0) return 0.0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return (n & 1) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

mxf_status mxf_cli_time_median(const char *cmd, int32_t device, int warmup, int runs,
                               mxf_status (*fn)(void *ctx), void *ctx, double *median_ms) {
  mxf_status st;
  *median_ms = 0.0;
  for (int i = 0; i < warmup; i++)
    if ((st = fn(ctx)) != MXF_OK) return st;
  if (mxf_cli_dev_sync(cmd, device) != 0) return MXF_ERR_CUDA;
  if (runs < 1) runs = 1;
  double *t = malloc(sizeof(double) * (size_t)runs);
  if (!t) return MXF_ERR_NO_MEMORY;
  st = MXF_OK;
#if defined(MXF_WITH_CUDA)
  cudaEvent_t e0 = NULL, e1 = NULL;
  if (device != MXF_DEVICE_CPU && (!cuda_ok(cmd, cudaEventCreate(&e0), "cudaEventCreate") ||
                                   !cuda_ok(cmd, cudaEventCreate(&e1), "cudaEventCreate")))
    st = MXF_ERR_CUDA;
#endif
  for (int i = 0; i < runs && st == MXF_OK; i++) {
    if (device == MXF_DEVICE_CPU) {
      double t0 = mxf_cli_now_ms();
      st = fn(ctx);
      t[i] = mxf_cli_now_ms() - t0;
      continue;
    }
#if defined(MXF_WITH_CUDA)
    float ms = 0.0f;
    if (!cuda_ok(cmd, cudaEventRecord(e0, 0), "cudaEventRecord")) {
      st = MXF_ERR_CUDA;
      break;
    }
    if ((st = fn(ctx)) != MXF_OK) break;
    if (!cuda_ok(cmd, cudaEventRecord(e1, 0), "cudaEventRecord") ||
        !cuda_ok(cmd, cudaEventSynchronize(e1), "cudaEventSynchronize") ||
        !cuda_ok(cmd, cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime")) {
      st = MXF_ERR_CUDA;
      break;
    }
    t[i] = (double)ms;
#else
    st = MXF_ERR_CUDA;
    no_cuda(cmd);
#endif
  }
#if defined(MXF_WITH_CUDA)
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
#endif
  if (st == MXF_OK) *median_ms = mxf_cli_median(t, runs);
  free(t);
  return st;
}
