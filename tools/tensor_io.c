/*
 * tensor_io.c — the format-independent half of tensor_io.h: loading by file kind (the
 * file mapped, its tensors borrowing the mapping), dtype names and reinterpretation,
 * byte-count arithmetic without overflow, and the all-or-nothing save (temporary files
 * renamed into place).
 */
#include "tensor_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats.h"

int tio_errf(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

void *tio_copy_aligned(const void *src, size_t n) {
  size_t alloc = (n + 63) & ~(size_t)63;
  if (alloc < n) return NULL;
  void *p = aligned_alloc(64, alloc ? alloc : 64);
  if (p && n && src) memcpy(p, src, n);
  return p;
}

int64_t tio_shape_numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] < 0) return -1;
    if (__builtin_mul_overflow(n, shape[i], &n) || n > ((int64_t)1 << 62)) return -1;
  }
  return n;
}

int64_t tio_bits_to_bytes(int64_t numel, int bits) {
  int64_t b;
  if (numel < 0 || __builtin_mul_overflow(numel, (int64_t)bits, &b)) return -1;
  if (b % 8) return -1;
  return b / 8;
}

int64_t tio_numel(const tio_tensor *t) { return tio_shape_numel(t->ndim, t->shape); }

int64_t tio_dtype_bytes(mxf_dtype dt, int64_t numel) {
  switch (dt) {
  case MXF_F32:
  case MXF_I32: return numel > INT64_MAX / 4 ? -1 : numel * 4;
  case MXF_F16:
  case MXF_BF16: return numel > INT64_MAX / 2 ? -1 : numel * 2;
  case MXF_E4M3:
  case MXF_E5M2:
  case MXF_E8M0:
  case MXF_U8:
  case MXF_I8:
  case MXF_E2M1X2: return numel;
  case MXF_E2M1: return numel < 0 ? -1 : numel / 2 + (numel & 1);
  default: return -1;
  }
}

static const struct {
  const char *name;
  mxf_dtype dt;
} dtype_names[] = {
    {"f32", MXF_F32},     {"f16", MXF_F16},       {"bf16", MXF_BF16},     {"e4m3", MXF_E4M3},
    {"e5m2", MXF_E5M2},   {"e2m1", MXF_E2M1},     {"e2m1x2", MXF_E2M1X2}, {"e8m0", MXF_E8M0},
    {"u8", MXF_U8},       {"i8", MXF_I8},         {"ue4m3", MXF_E4M3},    {"float32", MXF_F32},
    {"float16", MXF_F16}, {"bfloat16", MXF_BF16}, {"uint8", MXF_U8},      {"int8", MXF_I8},
};

const char *tio_dtype_name(mxf_dtype dt) {
  for (size_t i = 0; i < sizeof dtype_names / sizeof *dtype_names; ++i)
    if (dtype_names[i].dt == dt) return dtype_names[i].name;
  return "raw";
}

mxf_dtype tio_dtype_parse(const char *s) {
  for (size_t i = 0; i < sizeof dtype_names / sizeof *dtype_names; ++i)
    if (!strcmp(dtype_names[i].name, s)) return dtype_names[i].dt;
  return MXF_DTYPE_INVALID;
}

void tio_tensor_free(tio_tensor *t) {
  if (!t) return;
  free(t->name);
  free(t->own);
  memset(t, 0, sizeof *t);
}

void tio_file_free(tio_file *f) {
  if (!f) return;
  for (int i = 0; i < f->n; ++i)
    tio_tensor_free(&f->t[i]);
  free(f->t);
  free(f->metadata_json);
  if (f->map) munmap(f->map, f->map_len);
  memset(f, 0, sizeof *f);
}

void tio_file_release(const tio_file *f, const void *p, size_t n) {
  const uintptr_t base = (uintptr_t)f->map, at = (uintptr_t)p;
  if (!f->map || at < base || n > f->map_len || at - base > f->map_len - n) return;
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  const uintptr_t lo = (at + page - 1) / page * page, hi = (at + n) / page * page;
  /* a private read-only mapping: the pages are clean, dropping them loses nothing */
  if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

void tio_tensor_take(tio_tensor *t, void *own, size_t nbytes) {
  free(t->own);
  t->own = own;
  t->data = own;
  t->nbytes = nbytes;
}

int tio_tensor_aligned(tio_tensor *t, size_t align, const char *what, char *err, size_t errlen) {
  if (!t->data || (uintptr_t)t->data % align == 0) return 0;
  void *p = tio_copy_aligned(t->data, t->nbytes);
  if (!p) return tio_errf(err, errlen, "%s: out of memory for %zu bytes", what, t->nbytes);
  tio_tensor_take(t, p, t->nbytes);
  return 0;
}

tio_tensor *tio_file_find(const tio_file *f, const char *name) {
  for (int i = 0; i < f->n; ++i)
    if (f->t[i].name && !strcmp(f->t[i].name, name)) return &f->t[i];
  return NULL;
}

static int dtype_bits(mxf_dtype dt) {
  switch (dt) {
  case MXF_F32: return 32;
  case MXF_F16:
  case MXF_BF16: return 16;
  case MXF_E2M1: return 4;
  case MXF_DTYPE_INVALID: return 0;
  default: return 8;
  }
}

static const char *describe(const tio_tensor *t) {
  return t->dtype != MXF_DTYPE_INVALID ? tio_dtype_name(t->dtype) : t->file_dtype;
}

int tio_tensor_as(tio_tensor *t, mxf_dtype want, const char *what, char *err, size_t errlen) {
  if (t->dtype == want) return 0;
  int width = t->raw_bits;
  if (want == MXF_E2M1 && width == 8) {
    /* one code per byte (ml_dtypes float4_e2m1fn) -> packed pairs */
    int64_t n = tio_numel(t);
    if (t->ndim < 1 || t->shape[t->ndim - 1] % 2)
      return tio_errf(err, errlen,
                      "%s: e2m1 data with one code per byte needs an even innermost extent "
                      "(shape ends in %lld)",
                      what, t->ndim ? (long long)t->shape[t->ndim - 1] : 0LL);
    const uint8_t *src = t->data;
    for (int64_t i = 0; i < n; ++i)
      if (src[i] > 0xF)
        return tio_errf(err, errlen,
                        "%s: byte %lld is 0x%02X, not an e2m1 code (0..15); for packed pairs "
                        "say e2m1x2",
                        what, (long long)i, src[i]);
    uint8_t *packed = tio_copy_aligned(NULL, (size_t)(n / 2));
    if (!packed) return tio_errf(err, errlen, "%s: out of memory", what);
    for (int64_t i = 0; i < n / 2; ++i)
      packed[i] = mxf_e2m1_pack(src[2 * i], src[2 * i + 1]);
    tio_tensor_take(t, packed, (size_t)(n / 2));
    t->dtype = MXF_E2M1;
    t->raw_bits = 0;
    return 0;
  }
  if (want == MXF_E2M1X2 && t->dtype == MXF_E2M1) {
    /* logical values -> bytes: halve the innermost extent */
    if (t->ndim < 1 || t->shape[t->ndim - 1] % 2)
      return tio_errf(err, errlen, "%s: e2m1 tensor needs an even innermost extent", what);
    t->shape[t->ndim - 1] /= 2;
    t->dtype = MXF_E2M1X2;
    return 0;
  }
  if (width && want != MXF_E2M1 && dtype_bits(want) == width && want != MXF_F32) {
    t->dtype = want;
    return 0;
  }
  return tio_errf(err, errlen, "%s has dtype %s (file: %s); expected %s", what, describe(t), t->file_dtype,
                  tio_dtype_name(want));
}

/* ------------------------------------------------------------ loading */
/* The file mapped read-only (*len bytes at *buf), which the tensors then borrow.
 * Special files (FIFOs, devices) are refused before they are opened for reading: stat
 * first, then open without blocking and check the opened file again. */
static int read_whole(const char *path, uint8_t **buf, size_t *len, char *err, size_t errlen) {
  struct stat st;
  if (stat(path, &st) != 0) return tio_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode)) return tio_errf(err, errlen, "%s: not a regular file", path);
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return tio_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return tio_errf(err, errlen, "%s: not a regular file", path);
  }
  size_t n = (size_t)st.st_size;
  void *p = n ? mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
  close(fd);
  if (n && p == MAP_FAILED)
    return tio_errf(err, errlen, "%s: cannot map %zu bytes: %s", path, n, strerror(errno));
  *buf = p;
  *len = n;
  return 0;
}

static char *npy_base_name(const char *path) {
  const char *b = strrchr(path, '/');
  b = b ? b + 1 : path;
  size_t n = strlen(b);
  if (n > 4 && !strcmp(b + n - 4, ".npy")) n -= 4;
  char *s = malloc(n + 1);
  if (s) {
    memcpy(s, b, n);
    s[n] = 0;
  }
  return s;
}

int tio_load(const char *path, tio_file *f, char *err, size_t errlen) {
  memset(f, 0, sizeof *f);
  uint8_t *buf = NULL;
  size_t len = 0;
  if (read_whole(path, &buf, &len, err, errlen)) return -1;
  char msg[TIO_ERR_LEN];
  int rc;
  if (len >= 6 && !memcmp(buf, "\x93NUMPY", 6)) {
    char *name = npy_base_name(path);
    f->t = calloc(1, sizeof *f->t);
    if (!name || !f->t) {
      free(name);
      free(f->t);
      f->t = NULL;
      if (buf) munmap(buf, len);
      return tio_errf(err, errlen, "%s: out of memory", path);
    }
    rc = tio_npy_parse(buf, len, name, f->t, msg, sizeof msg);
    free(name);
    if (rc) {
      free(f->t);
      f->t = NULL;
    } else {
      f->n = 1;
    }
  } else {
    size_t n = strlen(path);
    int looks_npy = n > 4 && !strcmp(path + n - 4, ".npy");
    if (looks_npy) {
      rc = tio_errf(msg, sizeof msg, "not a .npy file (no \\x93NUMPY magic)");
    } else {
      rc = tio_st_parse(buf, len, f, msg, sizeof msg);
    }
  }
  if (rc) {
    if (buf) munmap(buf, len);
    return tio_errf(err, errlen, "%s: %s", path, msg);
  }
  f->map = buf;
  f->map_len = len;
  return 0;
}

tio_tensor tio_tensor_view(const char *name, mxf_dtype dt, int ndim, const int64_t *shape, void *data) {
  tio_tensor t;
  memset(&t, 0, sizeof t);
  t.name = (char *)name;
  t.dtype = dt;
  t.ndim = ndim;
  for (int i = 0; i < ndim && i < TIO_MAX_DIMS; ++i)
    t.shape[i] = shape[i];
  t.data = data;
  int64_t nb = tio_dtype_bytes(dt, tio_shape_numel(ndim, shape));
  t.nbytes = nb < 0 ? 0 : (size_t)nb;
  return t;
}

/* ------------------------------------------------------------ saving */
char *tio_write_temp(const char *final_path, const uint8_t *buf, size_t len, char *err, size_t errlen) {
  const char *slash = strrchr(final_path, '/');
  size_t dirlen = slash ? (size_t)(slash - final_path + 1) : 0;
  const char *base = slash ? slash + 1 : final_path;
  size_t n = dirlen + 1 + strlen(base) + 8 + 1;
  char *tmp = malloc(n);
  if (!tmp) {
    tio_errf(err, errlen, "%s: out of memory", final_path);
    return NULL;
  }
  snprintf(tmp, n, "%.*s.%s.XXXXXX", (int)dirlen, final_path, base);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    tio_errf(err, errlen, "%s: cannot create a temporary file: %s", final_path, strerror(errno));
    free(tmp);
    return NULL;
  }
  size_t off = 0;
  while (off < len) {
    ssize_t w = write(fd, buf + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      tio_errf(err, errlen, "%s: write failed: %s", final_path, w < 0 ? strerror(errno) : "no space");
      close(fd);
      unlink(tmp);
      free(tmp);
      return NULL;
    }
    off += (size_t)w;
  }
  const mode_t mask = umask(0); /* new files honour the umask (an overwritten file's mode is not kept) */
  umask(mask);
  if (fchmod(fd, 0666 & ~mask) != 0 || close(fd) != 0) {
    tio_errf(err, errlen, "%s: cannot finish the file: %s", final_path, strerror(errno));
    unlink(tmp);
    free(tmp);
    return NULL;
  }
  return tmp;
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcmp(s + n - m, suffix);
}

static int safe_file_name(const char *s) {
  if (!s || !*s || !strcmp(s, ".") || !strcmp(s, "..") || strlen(s) > 200) return 0;
  for (; *s; ++s)
    if (*s == '/' || (unsigned char)*s < 0x20) return 0;
  return 1;
}

int tio_save(const char *dest, const tio_tensor *ts, int n, const char *metadata_json, char *err,
             size_t errlen) {
  uint8_t *buf = NULL;
  size_t len = 0;
  char msg[TIO_ERR_LEN];
  if (ends_with(dest, ".safetensors")) {
    if (tio_st_serialize(ts, n, metadata_json, &buf, &len, msg, sizeof msg))
      return tio_errf(err, errlen, "%s: %s", dest, msg);
    char *tmp = tio_write_temp(dest, buf, len, err, errlen);
    free(buf);
    if (!tmp) return -1;
    if (rename(tmp, dest) != 0) {
      tio_errf(err, errlen, "%s: cannot rename into place: %s", dest, strerror(errno));
      unlink(tmp);
      free(tmp);
      return -1;
    }
    free(tmp);
    return 0;
  }
  /* a directory of .npy files */
  for (int i = 0; i < n; ++i)
    if (!safe_file_name(ts[i].name))
      return tio_errf(err, errlen, "%s: tensor name '%s' cannot be a file name", dest,
                      ts[i].name ? ts[i].name : "");
  struct stat st;
  if (stat(dest, &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      return tio_errf(err, errlen,
                      "%s: exists and is not a directory (name a .safetensors file "
                      "or a directory)",
                      dest);
  } else if (mkdir(dest, 0777) != 0) {
    return tio_errf(err, errlen, "%s: cannot create directory: %s", dest, strerror(errno));
  }
  char **tmps = calloc((size_t)(n ? n : 1), sizeof *tmps);
  char **finals = calloc((size_t)(n ? n : 1), sizeof *finals);
  int rc = 0;
  if (!tmps || !finals) rc = tio_errf(err, errlen, "%s: out of memory", dest);
  for (int i = 0; i < n && !rc; ++i) {
    size_t fl = strlen(dest) + strlen(ts[i].name) + 8;
    finals[i] = malloc(fl);
    if (!finals[i]) {
      rc = tio_errf(err, errlen, "%s: out of memory", dest);
      break;
    }
    snprintf(finals[i], fl, "%s/%s.npy", dest, ts[i].name);
    if (tio_npy_serialize(&ts[i], &buf, &len, msg, sizeof msg)) {
      rc = tio_errf(err, errlen, "%s: %s", finals[i], msg);
      break;
    }
    tmps[i] = tio_write_temp(finals[i], buf, len, err, errlen);
    free(buf);
    if (!tmps[i]) rc = -1;
  }
  /* all or nothing: every final path is checked before the first rename */
  for (int i = 0; i < n && !rc; ++i)
    if (lstat(finals[i], &st) == 0 && !S_ISREG(st.st_mode))
      rc = tio_errf(err, errlen, "%s: exists and is not a regular file; nothing written", finals[i]);
  for (int i = 0; i < n && !rc; ++i) {
    if (rename(tmps[i], finals[i]) != 0) {
      rc = tio_errf(err, errlen, "%s: cannot rename into place: %s", finals[i], strerror(errno));
      break;
    }
    free(tmps[i]);
    tmps[i] = NULL;
  }
  for (int i = 0; i < n; ++i) {
    if (tmps && tmps[i]) {
      unlink(tmps[i]);
      free(tmps[i]);
    }
    if (finals) free(finals[i]);
  }
  free(tmps);
  free(finals);
  return rc;
}
