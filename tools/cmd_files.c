/*
 * cmd_files.c — helpers of the file-based subcommands (cmd_files.h), and the three
 * subcommands that only move bytes: `inspect`, `swizzle-scales`, `unswizzle-scales`.
 */
#include "cmd_files.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats.h"
#include "judge.h"

/* ------------------------------------------------------------ context and operands */
void fc_init(fc_ctx *c, const char *cmd) {
  memset(c, 0, sizeof *c);
  c->cmd = cmd;
  c->progress = isatty(2);
  c->device = MXF_DEVICE_CPU;
  c->device_text = "auto";
}

int fc_common_opt(fc_ctx *c, int argc, char **argv, int *i) {
  const char *v;
  if ((v = mxf_cli_opt(c->cmd, argc, argv, i, "--in")))
    c->in = v;
  else if ((v = mxf_cli_opt(c->cmd, argc, argv, i, "--out")))
    c->out = v;
  else if ((v = mxf_cli_opt(c->cmd, argc, argv, i, "--device")))
    c->device_text = v;
  else if (!strcmp(argv[*i], "--check"))
    c->check = 1;
  else if (!strcmp(argv[*i], "--json"))
    c->json = 1;
  else
    return 0;
  return (v && !*v) ? -1 : 1;
}

int fc_parse_device(fc_ctx *c) {
  return mxf_cli_parse_device(c->cmd, "--device", c->device_text, &c->device);
}

void fc_free(fc_ctx *c) {
  for (int i = 0; i < c->nfiles; ++i) {
    tio_file_free(&c->files[i]);
    free(c->file_paths[i]);
  }
  c->nfiles = 0;
}

static tio_file *fc_open(fc_ctx *c, const char *path) {
  for (int i = 0; i < c->nfiles; ++i)
    if (!strcmp(c->file_paths[i], path)) return &c->files[i];
  if (c->nfiles == FC_MAX_FILES) {
    mxf_cli_err(c->cmd, "too many input files");
    return NULL;
  }
  char err[TIO_ERR_LEN];
  fc_stage(c, "reading %s", path);
  if (tio_load(path, &c->files[c->nfiles], err, sizeof err)) {
    fc_stage_done(c);
    mxf_cli_err(c->cmd, "%s", err);
    return NULL;
  }
  c->file_paths[c->nfiles] = strdup(path);
  return &c->files[c->nfiles++];
}

/* An operand's data is the file's mapping where that is aligned as the library asks; a
 * tensor at a less aligned offset (safetensors packs tensors back to back) is copied. */
static int operand_aligned(fc_ctx *c, fc_operand *op) {
  char err[TIO_ERR_LEN];
  if (tio_tensor_aligned(op->t, TIO_DATA_ALIGN, op->what, err, sizeof err)) {
    mxf_cli_err(c->cmd, "%s", err);
    return -1;
  }
  return 1;
}

static int has_suffix(const char *s, size_t n, const char *suf) {
  size_t m = strlen(suf);
  return n >= m && !memcmp(s + n - m, suf, m);
}

int fc_operand_get(fc_ctx *c, const char *spec, const char *name, int required, fc_operand *op) {
  memset(op, 0, sizeof *op);
  char path[4096];
  const char *tname = name;
  if (!spec) {
    if (!c->in) {
      if (!required) return 0;
      mxf_cli_err(c->cmd, "operand '%s' is missing: give --%s FILE or --in FILE.safetensors", name, name);
      return -1;
    }
    spec = c->in;
  }
  /* FILE.safetensors:NAME — the last ':' after a ".safetensors" */
  const char *colon = NULL;
  for (const char *p = strstr(spec, ".safetensors:"); p; p = strstr(p + 1, ".safetensors:"))
    colon = p + strlen(".safetensors");
  size_t plen = colon ? (size_t)(colon - spec) : strlen(spec);
  if (plen >= sizeof path) {
    mxf_cli_err(c->cmd, "path too long: %s", spec);
    return -1;
  }
  memcpy(path, spec, plen);
  path[plen] = 0;
  if (colon) tname = colon + 1;
  tio_file *f = fc_open(c, path);
  if (!f) return -1;
  int is_npy = has_suffix(path, plen, ".npy") ||
               (f->n == 1 && !f->metadata_json && !colon && !has_suffix(path, plen, ".safetensors"));
  if (is_npy && f->n == 1) {
    op->t = &f->t[0];
    snprintf(op->what, sizeof op->what, "%s", path);
    return operand_aligned(c, op);
  }
  op->t = tio_file_find(f, tname);
  if (!op->t && !colon && spec != c->in && f->n == 1) {
    op->t = &f->t[0]; /* a file named for this operand alone: its one tensor */
    tname = op->t->name;
  }
  snprintf(op->what, sizeof op->what, "%s:%s", path, tname);
  if (!op->t) {
    if (!required && spec == c->in) return 0;
    mxf_cli_err(c->cmd,
                "%s: no tensor named '%s' (the file has %d tensor%s; `mxfuse inspect %s` "
                "lists them)",
                path, tname, f->n, f->n == 1 ? "" : "s", path);
    return -1;
  }
  return operand_aligned(c, op);
}

int fc_check_output_opt(fc_ctx *c, const char *src) {
  if (!src) return fc_parse_device(c);
  if (c->out) {
    mxf_cli_err(c->cmd, "--check-output judges outputs saved earlier: --out has nothing to write");
    return -1;
  }
  c->check = 1;
  c->device = MXF_DEVICE_CPU;
  return 0;
}

int fc_c_dtype_opt(fc_ctx *c, const char *text, mxf_dtype *dt) {
  const mxf_dtype t = tio_dtype_parse(text);
  if (t != MXF_F32 && t != MXF_F16 && t != MXF_BF16 && t != MXF_E4M3 && t != MXF_E5M2 && t != MXF_E2M1) {
    mxf_cli_err(c->cmd, "--c-dtype: '%s' is not one of f32, f16, bf16, e4m3, e5m2, e2m1", text);
    return -1;
  }
  *dt = t;
  return 0;
}

int fc_alpha_opt(fc_ctx *c, const char *text, float *alpha) {
  char *end;
  const float a = strtof(text, &end);
  if (*end) {
    mxf_cli_err(c->cmd, "--alpha: '%s' is not a number", text);
    return -1;
  }
  *alpha = a;
  return 0;
}

int fc_output_get(fc_ctx *c, const char *src, const char *name, mxf_dtype dt, int ndim, const int64_t *shape,
                  fc_operand *op) {
  size_t n = strlen(src);
  char *spec = malloc(n + strlen(name) + 16);
  if (!spec) {
    mxf_cli_err(c->cmd, "out of memory");
    return -1;
  }
  sprintf(spec, has_suffix(src, n, ".safetensors") ? "%s:%s" : "%s/%s.npy", src, name);
  int rc = fc_operand_get(c, spec, name, 1, op) < 0 || fc_as(c, op, dt) ? -1 : 0;
  free(spec);
  if (!rc && (op->t->ndim != ndim || memcmp(op->t->shape, shape, sizeof(int64_t) * (size_t)ndim))) {
    char a[256], b[256];
    mxf_cli_err(c->cmd, "%s has shape %s; the request's %s is %s", op->what,
                mxf_cli_shape_str(a, sizeof a, op->t->shape, op->t->ndim), name,
                mxf_cli_shape_str(b, sizeof b, shape, ndim));
    rc = -1;
  }
  return rc;
}

int fc_as(fc_ctx *c, fc_operand *op, mxf_dtype want) {
  char err[TIO_ERR_LEN];
  if (tio_tensor_as(op->t, want, op->what, err, sizeof err)) {
    mxf_cli_err(c->cmd, "%s", err);
    return -1;
  }
  return 0;
}

int fc_f32_to_bf16(fc_ctx *c, fc_operand *op) {
  tio_tensor *t = op->t;
  if (t->dtype != MXF_F32) return 0;
  int64_t n = tio_numel(t);
  uint16_t *h = tio_copy_aligned(NULL, (size_t)n * 2);
  if (!h) {
    mxf_cli_err(c->cmd, "%s: out of memory", op->what);
    return -1;
  }
  const float *f = t->data;
  for (int64_t i = 0; i < n; ++i)
    h[i] = mxf_f32_to_bf16(f[i]);
  tio_tensor_take(t, h, (size_t)n * 2);
  t->dtype = MXF_BF16;
  t->raw_bits = 0;
  return 0;
}

/* ------------------------------------------------------------ progress */
static double last_progress_ms;

void fc_stage(fc_ctx *c, const char *fmt, ...) {
  if (!c->progress || c->json) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "\r\033[Kmxfuse %s: ", c->cmd);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fflush(stderr);
}

void fc_progress(fc_ctx *c, const char *what, double done, double total) {
  if (!c->progress || c->json) return;
  double now = mxf_cli_now_ms();
  if (now - last_progress_ms < 100 && done < total) return;
  last_progress_ms = now;
  fc_stage(c, "%s %3.0f%%", what, total > 0 ? 100.0 * done / total : 100.0);
}

void fc_stage_done(fc_ctx *c) {
  if (!c->progress || c->json) return;
  fprintf(stderr, "\r\033[K");
  fflush(stderr);
}

/* ------------------------------------------------------------ device memory */
void *fc_upload(fc_ctx *c, const void *host, size_t bytes) {
  return mxf_cli_dev_mirror(c->cmd, c->device, host, bytes);
}

void *fc_dev_output(fc_ctx *c, size_t bytes) {
  void *d = mxf_cli_dev_alloc(c->cmd, c->device, bytes);
  if (d && mxf_cli_dev_memset(c->cmd, c->device, d, 0xA5, bytes ? bytes : 1)) {
    mxf_cli_dev_free(c->device, d);
    return NULL;
  }
  return d;
}

int fc_download(fc_ctx *c, void *host, const void *dev, size_t bytes) {
  return mxf_cli_dev_download(c->cmd, c->device, host, dev, bytes);
}

void fc_dev_free(fc_ctx *c, void *p) {
  if (c->device != MXF_DEVICE_CPU) mxf_cli_dev_free(c->device, p);
}

mxf_status fc_run(fc_ctx *c, mxf_cli_op op, const char *what, const mxf_plan *plan, const void *args,
                  double *ms) {
  size_t wsz = mxf_plan_workspace_size(plan);
  void *ws = NULL;
  *ms = 0.0;
  if (wsz && !(ws = mxf_cli_dev_alloc(c->cmd, c->device, wsz))) return MXF_ERR_NO_MEMORY;
  char dev[32];
  fc_stage(c, "running %s on %s (%s)", what, mxf_cli_device_str(dev, sizeof dev, c->device),
           mxf_plan_backend(plan));
  double t0 = mxf_cli_now_ms();
  mxf_status st = mxf_cli_run(op, plan, args, ws, wsz);
  if (st == MXF_OK && mxf_cli_dev_sync(c->cmd, c->device)) st = MXF_ERR_CUDA;
  *ms = mxf_cli_now_ms() - t0;
  fc_stage_done(c);
  mxf_cli_dev_free(c->device, ws);
  if (st != MXF_OK) mxf_cli_err_status(c->cmd, what, st);
  return st;
}

/* ------------------------------------------------------------ codes and values */
double fc_decode(mxf_dtype dt, const void *p, int64_t i) {
  const uint8_t *b = p;
  switch (dt) {
  case MXF_F32: return ((const float *)p)[i];
  case MXF_F16: return mxf_f16_to_f32(((const uint16_t *)p)[i]);
  case MXF_BF16: return mxf_bf16_to_f32(((const uint16_t *)p)[i]);
  case MXF_E4M3: return mxf_e4m3_to_f32(b[i]);
  case MXF_E5M2: return mxf_e5m2_to_f32(b[i]);
  case MXF_E2M1: return mxf_e2m1_to_f32(mxf_e2m1_get(b, i));
  case MXF_E8M0:
  case MXF_U8: return mxf_e8m0_to_f32(b[i]);
  case MXF_I8: return (double)((const int8_t *)p)[i];
  default: return NAN;
  }
}

fc_cmp fc_compare_codes(mxf_dtype dt, const void *x, const void *y, int64_t n) {
  fc_cmp r = {n, 0, -1, 0};
  for (int64_t i = 0; i < n; ++i) {
    int an, bn;
    int64_t oa = mxj_code_ordinal(dt, mxj_code_at(dt, x, i), &an),
            ob = mxj_code_ordinal(dt, mxj_code_at(dt, y, i), &bn);
    int64_t step = (an || bn) ? ((an && bn) ? 0 : INT64_MAX) : oa > ob ? oa - ob : ob - oa; /* ±0 both at 0 */
    if (step == 0) ++r.equal;
    if (step > r.max_step) {
      r.max_step = step;
      r.max_step_pos = i;
    }
  }
  return r;
}

void fc_cmp_add(fc_cmp *total, fc_cmp r, int64_t base) {
  total->n += r.n;
  total->equal += r.equal;
  if (r.max_step > total->max_step) {
    total->max_step = r.max_step;
    total->max_step_pos = base + r.max_step_pos;
  }
}

double fc_cmp_equal_share(const fc_cmp *r) { return r->n ? (double)r->equal / (double)r->n : 1.0; }

long long fc_cmp_max_step(const fc_cmp *r) {
  return r->max_step == INT64_MAX ? -1LL : (long long)r->max_step;
}

/* ------------------------------------------------------------ output */

void fc_json_shape(FILE *f, int ndim, const int64_t *shape) {
  fputc('[', f);
  for (int i = 0; i < ndim; ++i)
    fprintf(f, "%s%lld", i ? ", " : "", (long long)shape[i]);
  fputc(']', f);
}

void fc_json_outputs(FILE *f, const char *dest, const tio_tensor *ts, int n) {
  fprintf(f, "\"outputs\": [");
  for (int i = 0; i < n; ++i) {
    fprintf(f, "%s{\"name\": ", i ? ", " : "");
    mxf_cli_json_str(f, ts[i].name);
    fprintf(f, ", \"dtype\": \"%s\", \"shape\": ", tio_dtype_name(ts[i].dtype));
    fc_json_shape(f, ts[i].ndim, ts[i].shape);
    fprintf(f, "}");
  }
  fprintf(f, "], \"out\": ");
  if (dest)
    mxf_cli_json_str(f, dest);
  else
    fprintf(f, "null");
}

int fc_save(fc_ctx *c, const char *dest, const tio_tensor *ts, int n) {
  if (!dest) return 0;
  char err[TIO_ERR_LEN];
  fc_stage(c, "writing %s", dest);
  int rc = tio_save(dest, ts, n, NULL, err, sizeof err);
  fc_stage_done(c);
  if (rc) {
    mxf_cli_err(c->cmd, "%s", err);
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------ inspect */
typedef struct scale_stats {
  int64_t n, nan, hist[256];
  int minb, maxb;
} scale_stats;

/*
 * inspect reads a tensor in pieces of INSPECT_CHUNK values, each copied into a buffer of
 * its own (aligned for the dtype wherever the file put the tensor), and hands the pages
 * it has read back to the system: memory stays bounded whatever the file's size.
 */
#define INSPECT_CHUNK ((int64_t)1 << 20)

typedef struct chunk_reader {
  const tio_file *f;
  const tio_tensor *t;
  void *buf; /* room for INSPECT_CHUNK values of the widest dtype (f32) */
} chunk_reader;

/* Values [i0, i0 + n) of the tensor (i0 a multiple of INSPECT_CHUNK, n at most that), in
 * the reader's buffer; the mapping's pages of them are released. */
static const void *chunk_at(chunk_reader *r, int64_t i0, int64_t n) {
  const mxf_dtype dt = r->t->dtype == MXF_DTYPE_INVALID ? MXF_U8 : r->t->dtype;
  const size_t off = (size_t)tio_dtype_bytes(dt, i0), len = (size_t)tio_dtype_bytes(dt, n);
  const uint8_t *src = (const uint8_t *)r->t->data + off;
  memcpy(r->buf, src, len);
  tio_file_release(r->f, src, len);
  return r->buf;
}

static void stats_bytes(chunk_reader *r, int64_t n, scale_stats *s) {
  memset(s, 0, sizeof *s);
  s->minb = 255;
  s->maxb = -1;
  s->n = n;
  for (int64_t i0 = 0; i0 < n; i0 += INSPECT_CHUNK) {
    const int64_t m = n - i0 < INSPECT_CHUNK ? n - i0 : INSPECT_CHUNK;
    const uint8_t *p = chunk_at(r, i0, m);
    for (int64_t i = 0; i < m; ++i)
      s->hist[p[i]]++;
  }
  s->nan = s->hist[0xFF];
  for (int b = 0; b < 255; ++b)
    if (s->hist[b]) {
      if (b < s->minb) s->minb = b;
      if (b > s->maxb) s->maxb = b;
    }
}

static int looks_like_scale(const tio_tensor *t, const char *list) {
  if (t->dtype == MXF_E8M0) return 1;
  if (list) {
    size_t n = strlen(t->name);
    for (const char *p = list; *p;) {
      const char *e = strchr(p, ',');
      size_t m = e ? (size_t)(e - p) : strlen(p);
      if (m == n && !memcmp(p, t->name, n)) return 1;
      p += m + (e != NULL);
    }
    return 0;
  }
  if (t->dtype != MXF_U8 && t->dtype != MXF_DTYPE_INVALID) return 0;
  if (t->raw_bits != 8) return 0;
  /* uint8 tensors whose names say "scale" (s_row, sfa, weight_scale_inv, ...) */
  const char *nm = t->name;
  return strstr(nm, "scale") || strstr(nm, "sf") == nm || !strncmp(nm, "s_", 2) || strstr(nm, "_sf") ||
         strstr(nm, ".sf");
}

static void print_scale_stats(FILE *f, const scale_stats *s, int json) {
  int64_t finite = s->n - s->nan;
  int64_t in_window = 0, below = 0;
  for (int b = 16; b <= 232; ++b)
    in_window += s->hist[b];
  for (int b = 0; b < 16; ++b)
    below += s->hist[b];
  int64_t half = finite / 2, acc = 0;
  int median = -1;
  for (int b = 0; b < 255 && finite; ++b) {
    acc += s->hist[b];
    if (acc > half) {
      median = b;
      break;
    }
  }
  if (json) {
    fprintf(f,
            ", \"scales\": {\"count\": %lld, \"nan\": %lld, \"min\": %d, \"max\": %d, \"median\": %d, "
            "\"in_exact_window\": %lld, \"histogram\": {",
            (long long)s->n, (long long)s->nan, finite ? s->minb : -1, finite ? s->maxb : -1, median,
            (long long)in_window);
    int first = 1;
    for (int b = 0; b < 256; ++b)
      if (s->hist[b]) {
        fprintf(f, "%s\"%d\": %lld", first ? "" : ", ", b, (long long)s->hist[b]);
        first = 0;
      }
    fprintf(f, "}}");
    return;
  }
  if (!finite) {
    fprintf(f, "    scale bytes: %lld, all NaN (0xFF)\n", (long long)s->n);
    return;
  }
  fprintf(f,
          "    scale bytes: %lld; min %d (2^%d), max %d (2^%d), median %d; NaN (0xFF): %lld; "
          "outside [16, 232]: %lld\n",
          (long long)s->n, s->minb, s->minb - 127, s->maxb, s->maxb - 127, median, (long long)s->nan,
          (long long)(finite - in_window));
  /* histogram over at most 12 bins spanning [min, max] */
  int span = s->maxb - s->minb + 1, nb = span < 12 ? span : 12;
  int64_t bins[12] = {0}, peak = 0;
  for (int b = s->minb; b <= s->maxb; ++b)
    bins[(int64_t)(b - s->minb) * nb / span] += s->hist[b];
  for (int i = 0; i < nb; ++i)
    if (bins[i] > peak) peak = bins[i];
  for (int i = 0; i < nb; ++i) {
    int lo = s->minb + (int)((int64_t)i * span / nb), hi = s->minb + (int)((int64_t)(i + 1) * span / nb) - 1;
    int bar = peak ? (int)(40 * bins[i] / peak) : 0;
    char range[32];
    if (lo == hi)
      snprintf(range, sizeof range, "%d", lo);
    else
      snprintf(range, sizeof range, "%d-%d", lo, hi);
    fprintf(f, "      %9s %10lld %.*s\n", range, (long long)bins[i], bar,
            "########################################");
  }
}

static void value_summary(FILE *f, chunk_reader *r, int json) {
  const tio_tensor *t = r->t;
  int64_t n = tio_numel(t), nan = 0, inf = 0;
  double mn = INFINITY, mx = -INFINITY, amax = 0, sum = 0;
  for (int64_t i0 = 0; i0 < n; i0 += INSPECT_CHUNK) {
    const int64_t m = n - i0 < INSPECT_CHUNK ? n - i0 : INSPECT_CHUNK;
    const void *p = chunk_at(r, i0, m);
    for (int64_t i = 0; i < m; ++i) {
      double v = fc_decode(t->dtype, p, i);
      if (isnan(v)) {
        ++nan;
        continue;
      }
      if (isinf(v)) ++inf;
      if (v < mn) mn = v;
      if (v > mx) mx = v;
      if (fabs(v) > amax) amax = fabs(v);
      sum += v;
    }
  }
  int64_t fin = n - nan;
  if (json) {
    fprintf(f, ", \"values\": {\"nan\": %lld, \"inf\": %lld", (long long)nan, (long long)inf);
    if (fin && isfinite(mn) && isfinite(mx))
      fprintf(f, ", \"min\": %.9g, \"max\": %.9g, \"amax\": %.9g, \"mean\": %.9g", mn, mx, amax,
              sum / (double)fin);
    fprintf(f, "}");
    return;
  }
  if (!fin) {
    fprintf(f, "    values: all %lld NaN\n", (long long)n);
    return;
  }
  fprintf(f, "    values: min %.6g, max %.6g, amax %.6g, mean %.6g; NaN %lld, inf %lld\n", mn, mx, amax,
          sum / (double)fin, (long long)nan, (long long)inf);
}

static void inspect_usage(FILE *f) {
  fprintf(f, "usage: mxfuse inspect FILE [--scales NAME,...] [--json]\n"
             "\n"
             "Lists the tensors of a .npy or .safetensors file: name, dtype (as the file spells it\n"
             "and as mxfuse reads it), shape and bytes. For values it prints min/max/amax and NaN\n"
             "counts; for MX scale tensors (F8_E8M0, or uint8 tensors named like scales, or those\n"
             "given with --scales) the statistics of the scale bytes: min, max, median, NaN, how\n"
             "many lie outside the GPU exactness window [16, 232], and a histogram.\n"
             "\n"
             "  --scales LIST   comma-separated tensor names to treat as e8m0 scale bytes\n"
             "  --json          one JSON object on stdout\n");
}

int mxf_cmd_inspect(int argc, char **argv) {
  const char *cmd = "inspect";
  if (mxf_cli_wants_help(argc, argv)) {
    inspect_usage(stdout);
    return MXF_CLI_OK;
  }
  const char *path = NULL, *scales = NULL, *v;
  int json = 0;
  for (int i = 1; i < argc; ++i) {
    if ((v = mxf_cli_opt(cmd, argc, argv, &i, "--scales"))) {
      if (!*v) return MXF_CLI_USAGE;
      scales = v;
    } else if (!strcmp(argv[i], "--json")) {
      json = 1;
    } else if (argv[i][0] == '-' && argv[i][1]) {
      mxf_cli_err(cmd, "unknown option %s (mxfuse inspect --help)", argv[i]);
      return MXF_CLI_USAGE;
    } else if (!path) {
      path = argv[i];
    } else {
      mxf_cli_err(cmd, "one file at a time (got %s and %s)", path, argv[i]);
      return MXF_CLI_USAGE;
    }
  }
  if (!path) {
    inspect_usage(stderr);
    return MXF_CLI_USAGE;
  }
  tio_file f;
  char err[TIO_ERR_LEN];
  if (tio_load(path, &f, err, sizeof err)) {
    mxf_cli_err(cmd, "%s", err);
    return MXF_CLI_FAIL;
  }
  chunk_reader reader = {&f, NULL, tio_copy_aligned(NULL, (size_t)INSPECT_CHUNK * 4)};
  if (!reader.buf) {
    tio_file_free(&f);
    mxf_cli_err(cmd, "out of memory");
    return MXF_CLI_FAIL;
  }
  size_t total = 0;
  for (int i = 0; i < f.n; ++i)
    total += f.t[i].nbytes;
  if (json) {
    printf("{\"file\": ");
    mxf_cli_json_str(stdout, path);
    printf(", \"metadata\": %s, \"tensors\": [", f.metadata_json ? f.metadata_json : "null");
  } else {
    printf("%s: %d tensor%s, %zu data bytes\n", path, f.n, f.n == 1 ? "" : "s", total);
    if (f.metadata_json) printf("  metadata: %s\n", f.metadata_json);
  }
  for (int i = 0; i < f.n; ++i) {
    tio_tensor *t = &f.t[i];
    int is_scale =
        looks_like_scale(t, scales) && t->raw_bits != 16 && (t->dtype == MXF_E8M0 || t->raw_bits == 8);
    const char *ours = t->dtype != MXF_DTYPE_INVALID ? tio_dtype_name(t->dtype)
                       : t->raw_bits                 ? (t->raw_bits == 8 ? "raw 8-bit" : "raw 16-bit")
                                                     : "not used by mxfuse";
    if (json) {
      printf("%s{\"name\": ", i ? ", " : "");
      mxf_cli_json_str(stdout, t->name);
      printf(", \"file_dtype\": ");
      mxf_cli_json_str(stdout, t->file_dtype);
      printf(", \"dtype\": ");
      mxf_cli_json_str(stdout, ours);
      printf(", \"shape\": ");
      fc_json_shape(stdout, t->ndim, t->shape);
      printf(", \"bytes\": %zu", t->nbytes);
    } else {
      char sh[256];
      printf("  %-28s %-10s %-14s %-20s %zu bytes\n", t->name, t->file_dtype, ours,
             mxf_cli_shape_str(sh, sizeof sh, t->shape, t->ndim), t->nbytes);
    }
    reader.t = t;
    if (is_scale) {
      scale_stats s;
      stats_bytes(&reader, (int64_t)t->nbytes, &s);
      print_scale_stats(stdout, &s, json);
    } else if (t->dtype != MXF_DTYPE_INVALID && t->dtype != MXF_U8 && t->dtype != MXF_I8 &&
               tio_numel(t) > 0) {
      value_summary(stdout, &reader, json);
    }
    if (json) printf("}");
  }
  if (json) printf("]}\n");
  free(reader.buf);
  tio_file_free(&f);
  return MXF_CLI_OK;
}

/* ------------------------------------------------------------ swizzle / unswizzle */
static void swizzle_usage(FILE *f, int un) {
  if (!un)
    fprintf(f, "usage: mxfuse swizzle-scales IN --out DEST [--k K] [--sf-vec 16|32] [--pad-byte B] [--json]\n"
               "\n"
               "Rearranges compact scale factors (MN, Kb) or (L, MN, Kb) — one byte per block of\n"
               "sf_vec values along K — into the swizzled 128x4 layout of cuBLASLt / cuDNN /\n"
               "TransformerEngine: (R, K', 32, 4, 4) or (L, R, K', 32, 4, 4) with R = ceil(MN/128),\n"
               "K' = ceil(Kb/4). Padding bytes get --pad-byte (default 0). The dtype is kept.\n"
               "\n"
               "  IN              FILE.npy, FILE.safetensors (tensor 'sf') or FILE.safetensors:NAME\n"
               "  --k K           the operand's K (default Kb * sf_vec; only ceil(K/sf_vec) matters)\n"
               "  --sf-vec N      values per scale (default 32)\n"
               "  --out DEST      .safetensors file or directory (the tensor keeps its name)\n"
               "  --json          machine-readable summary\n");
  else
    fprintf(f,
            "usage: mxfuse unswizzle-scales IN --mn MN (--k K | --kb KB) --out DEST [--sf-vec N] [--json]\n"
            "\n"
            "Inverse of swizzle-scales: swizzled (L, R, K', 32, 4, 4), (R, K', 32, 4, 4) or flat\n"
            "scale bytes -> compact (MN, Kb) or (L, MN, Kb). MN and K (or Kb) must be given because\n"
            "the padding hides them; padding bytes are dropped.\n"
            "\n"
            "  IN              FILE.npy, FILE.safetensors (tensor 'sf') or FILE.safetensors:NAME\n"
            "  --mn MN         rows (M of A, or N of B)\n"
            "  --k K | --kb KB the operand's K, or the number of scale blocks per row\n"
            "  --sf-vec N      values per scale (default 32)\n"
            "  --out DEST      .safetensors file or directory (the tensor keeps its name)\n"
            "  --json          machine-readable summary\n");
}

static int swizzle_cmd(int argc, char **argv, int un) {
  const char *cmd = un ? "unswizzle-scales" : "swizzle-scales";
  if (mxf_cli_wants_help(argc, argv)) {
    swizzle_usage(stdout, un);
    return MXF_CLI_OK;
  }
  fc_ctx c;
  fc_init(&c, cmd);
  const char *in = NULL, *out = NULL, *v;
  int64_t k = -1, kb = -1, mn = -1, sf_vec = 32, pad = 0;
  for (int i = 1; i < argc; ++i) {
    if ((v = mxf_cli_opt(cmd, argc, argv, &i, "--out"))) {
      if (!*v) return MXF_CLI_USAGE;
      out = v;
    } else if ((v = mxf_cli_opt(cmd, argc, argv, &i, "--k"))) {
      if (mxf_cli_parse_i64(cmd, "--k", v, 1, INT64_MAX / 64, &k)) return MXF_CLI_USAGE;
    } else if ((v = mxf_cli_opt(cmd, argc, argv, &i, "--kb"))) {
      if (mxf_cli_parse_i64(cmd, "--kb", v, 1, INT64_MAX / 64, &kb)) return MXF_CLI_USAGE;
    } else if ((v = mxf_cli_opt(cmd, argc, argv, &i, "--mn"))) {
      if (mxf_cli_parse_i64(cmd, "--mn", v, 1, INT64_MAX / 64, &mn)) return MXF_CLI_USAGE;
    } else if ((v = mxf_cli_opt(cmd, argc, argv, &i, "--sf-vec"))) {
      if (mxf_cli_parse_i64(cmd, "--sf-vec", v, 16, 32, &sf_vec) || (sf_vec != 16 && sf_vec != 32)) {
        if (sf_vec != 16 && sf_vec != 32) mxf_cli_err(cmd, "--sf-vec: 16 or 32");
        return MXF_CLI_USAGE;
      }
    } else if (!un && (v = mxf_cli_opt(cmd, argc, argv, &i, "--pad-byte"))) {
      if (mxf_cli_parse_i64(cmd, "--pad-byte", v, 0, 255, &pad)) return MXF_CLI_USAGE;
    } else if (!strcmp(argv[i], "--json")) {
      c.json = 1;
    } else if (argv[i][0] == '-' && argv[i][1]) {
      mxf_cli_err(cmd, "unknown option %s (mxfuse %s --help)", argv[i], cmd);
      return MXF_CLI_USAGE;
    } else if (!in) {
      in = argv[i];
    } else {
      mxf_cli_err(cmd, "one input at a time (got %s and %s)", in, argv[i]);
      return MXF_CLI_USAGE;
    }
  }
  if (!in || !out) {
    mxf_cli_err(cmd, "needs IN and --out (mxfuse %s --help)", cmd);
    return MXF_CLI_USAGE;
  }
  if (un && (mn < 0 || (k < 0 && kb < 0))) {
    mxf_cli_err(cmd, "needs --mn and --k or --kb (the swizzled padding hides them)");
    return MXF_CLI_USAGE;
  }
  fc_operand op;
  int rc = MXF_CLI_FAIL;
  uint8_t *res = NULL;
  if (fc_operand_get(&c, in, "sf", 1, &op) < 0) goto done;
  tio_tensor *t = op.t;
  if (t->dtype == MXF_DTYPE_INVALID && t->raw_bits == 8) t->dtype = MXF_U8;
  if (t->dtype != MXF_E8M0 && t->dtype != MXF_U8 && t->dtype != MXF_I8 && t->dtype != MXF_E4M3) {
    mxf_cli_err(cmd, "%s has dtype %s; scale factors are 8-bit (e8m0, ue4m3 or uint8)", op.what,
                t->file_dtype);
    goto done;
  }
  int64_t l = 1;
  char sh[256], sh2[256];
  tio_tensor o;
  int64_t oshape[6];
  if (!un) {
    if (t->ndim != 2 && t->ndim != 3) {
      mxf_cli_err(cmd, "%s has shape %s; compact scales are (MN, Kb) or (L, MN, Kb)", op.what,
                  mxf_cli_shape_str(sh, sizeof sh, t->shape, t->ndim));
      goto done;
    }
    if (t->ndim == 3) l = t->shape[0];
    mn = t->shape[t->ndim - 2];
    kb = t->shape[t->ndim - 1];
    if (k < 0) k = kb * sf_vec;
    if (mxf_cdiv(k, sf_vec) != kb) {
      mxf_cli_err(cmd, "%s has %lld blocks per row; K=%lld with sf_vec %lld needs %lld", op.what,
                  (long long)kb, (long long)k, (long long)sf_vec, (long long)mxf_cdiv(k, sf_vec));
      goto done;
    }
  } else {
    if (k < 0) k = kb * sf_vec;
    if (kb < 0) kb = mxf_cdiv(k, sf_vec);
    if (mxf_cdiv(k, sf_vec) != kb) {
      mxf_cli_err(cmd, "--k %lld and --kb %lld disagree for sf_vec %lld", (long long)k, (long long)kb,
                  (long long)sf_vec);
      goto done;
    }
    int64_t per = mxf_cdiv(mn, 128) * mxf_cdiv(kb, 4) * 512;
    int64_t n = tio_numel(t);
    int ok = per > 0 && n % per == 0 && n > 0;
    if (ok) l = n / per;
    if (ok && t->ndim == 6) ok = t->shape[1] == mxf_cdiv(mn, 128) && t->shape[2] == mxf_cdiv(kb, 4);
    if (ok && t->ndim == 5) ok = l == 1 && t->shape[0] == mxf_cdiv(mn, 128) && t->shape[1] == mxf_cdiv(kb, 4);
    if (ok && t->ndim != 1 && t->ndim != 5 && t->ndim != 6) ok = 0;
    if (!ok) {
      mxf_cli_err(cmd,
                  "%s has shape %s; swizzled scales of MN=%lld, Kb=%lld are (L, %lld, %lld, 32, 4, 4), "
                  "(%lld, %lld, 32, 4, 4) or flat with a multiple of %lld bytes",
                  op.what, mxf_cli_shape_str(sh, sizeof sh, t->shape, t->ndim), (long long)mn, (long long)kb,
                  (long long)mxf_cdiv(mn, 128), (long long)mxf_cdiv(kb, 4), (long long)mxf_cdiv(mn, 128),
                  (long long)mxf_cdiv(kb, 4), (long long)per);
      goto done;
    }
  }
  size_t swz = mxf_sf_size(mn, k, l, (int)sf_vec, MXF_SF_SWIZZLED);
  size_t cmp = mxf_sf_size(mn, k, l, (int)sf_vec, MXF_SF_COMPACT);
  if (!swz || !cmp) {
    mxf_cli_err(cmd, "mxf_sf_size refused MN=%lld K=%lld L=%lld: %s", (long long)mn, (long long)k,
                (long long)l, mxf_last_error());
    goto done;
  }
  res = tio_copy_aligned(NULL, un ? cmp : swz);
  if (!res) {
    mxf_cli_err(cmd, "out of memory");
    goto done;
  }
  mxf_status st = un ? mxf_sf_unswizzle(t->data, res, mn, k, l, (int)sf_vec)
                     : mxf_sf_swizzle(t->data, res, mn, k, l, (int)sf_vec, (uint8_t)pad);
  if (st != MXF_OK) {
    mxf_cli_err_status(cmd, un ? "mxf_sf_unswizzle" : "mxf_sf_swizzle", st);
    goto done;
  }
  int ond = 0;
  if (un) {
    if (l > 1 || t->ndim == 6) oshape[ond++] = l;
    oshape[ond++] = mn;
    oshape[ond++] = kb;
  } else {
    if (t->ndim == 3) oshape[ond++] = l;
    oshape[ond++] = mxf_cdiv(mn, 128);
    oshape[ond++] = mxf_cdiv(kb, 4);
    oshape[ond++] = 32;
    oshape[ond++] = 4;
    oshape[ond++] = 4;
  }
  o = tio_tensor_view(t->name, t->dtype, ond, oshape, res);
  if (fc_save(&c, out, &o, 1)) goto done;
  if (c.json) {
    printf("{\"command\": \"%s\", \"mn\": %lld, \"k\": %lld, \"kb\": %lld, \"l\": %lld, \"sf_vec\": %lld, ",
           cmd, (long long)mn, (long long)k, (long long)kb, (long long)l, (long long)sf_vec);
    fc_json_outputs(stdout, out, &o, 1);
    printf("}\n");
  } else {
    printf("%s: %s %s -> %s %s (MN=%lld, Kb=%lld, L=%lld)\n", cmd, op.what,
           mxf_cli_shape_str(sh, sizeof sh, t->shape, t->ndim), out,
           mxf_cli_shape_str(sh2, sizeof sh2, oshape, ond), (long long)mn, (long long)kb, (long long)l);
  }
  rc = MXF_CLI_OK;
done:
  free(res);
  fc_free(&c);
  return rc;
}

int mxf_cmd_swizzle_scales(int argc, char **argv) { return swizzle_cmd(argc, argv, 0); }
int mxf_cmd_unswizzle_scales(int argc, char **argv) { return swizzle_cmd(argc, argv, 1); }
