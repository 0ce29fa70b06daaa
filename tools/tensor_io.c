/*
 * tensor_io.c — the format-independent half of tensor_io.h: loading by file kind (the
 * file mapped, its tensors borrowing the mapping), dtype names and reinterpretation,
 * byte-count arithmetic without overflow, and the all-or-nothing save (unnamed files
 * linked into place, or hidden temporaries renamed where the filesystem has no
 * O_TMPFILE).
 */
#define _GNU_SOURCE /* O_TMPFILE, AT_EMPTY_PATH, mkostemp */
#include "tensor_io.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
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
/*
 * Hidden temporary names, for a signal handler to unlink: fixed storage (the handler
 * reads it at any moment, so it is never freed), a slot live from the moment its name
 * is complete until the file is renamed or unlinked.
 */
#define TEMP_SLOTS 64
#define TEMP_NAME_MAX 4096
static char temp_names[TEMP_SLOTS][TEMP_NAME_MAX];
static volatile sig_atomic_t temp_live[TEMP_SLOTS];
static const int temp_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGXFSZ};
static int temp_handler_installed;

static void temp_signal(int sig) {
  const int saved = errno;
  for (int i = 0; i < TEMP_SLOTS; ++i)
    if (temp_live[i]) unlink(temp_names[i]);
  /* then the signal's default action, as if no handler had run */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigaction(sig, &dfl, NULL);
  raise(sig);
  errno = saved;
}

/* Installs the handler for the signals whose action is the default (an ignored one stays
 * ignored: a run under nohup, or the tool's SIGXFSZ, which turns ulimit -f into EFBIG). */
static void temp_handler_install(void) {
  if (temp_handler_installed) return;
  temp_handler_installed = 1;
  for (size_t i = 0; i < sizeof temp_signals / sizeof *temp_signals; ++i) {
    struct sigaction old, sa;
    if (sigaction(temp_signals[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL ||
        (old.sa_flags & SA_SIGINFO))
      continue;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = temp_signal;
    sigfillset(&sa.sa_mask); /* one handler at a time */
    sigaction(temp_signals[i], &sa, NULL);
  }
}

/* Claims a slot for `name` (made live once it is written); -1 when none is free. */
static int temp_register(const char *name) {
  if (strlen(name) >= TEMP_NAME_MAX) return -1;
  temp_handler_install();
  for (int i = 0; i < TEMP_SLOTS; ++i)
    if (!temp_live[i]) {
      strcpy(temp_names[i], name);
      atomic_signal_fence(memory_order_seq_cst);
      temp_live[i] = 1;
      return i;
    }
  return -1;
}

static void temp_unregister(int slot) {
  if (slot >= 0) temp_live[slot] = 0;
}

/* ".BASE.XXXXXX" beside `final` into out (TEMP_NAME_MAX bytes), the X random when asked
 * (else left for mkostemp). */
static void temp_name(char *out, const char *final, int fill) {
  const char *slash = strrchr(final, '/');
  const int dirlen = slash ? (int)(slash - final + 1) : 0;
  unsigned r = 0;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
    r = (unsigned)getpid() * 2654435761u ^ (unsigned)clock();
  static const char digits[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  char x[7];
  for (int i = 0; i < 6; ++i, r /= 62)
    x[i] = digits[r % 62];
  x[6] = 0;
  if (!fill) memcpy(x, "XXXXXX", 6);
  snprintf(out, TEMP_NAME_MAX, "%.*s.%s.%s", dirlen, final, slash ? slash + 1 : final, x);
}

static int out_fail(tio_out *o, char *err, size_t errlen, const char *what) {
  return tio_errf(err, errlen, "%s: %s: %s", o->final, what, strerror(errno));
}

int tio_out_open(tio_out *o, const char *final_path, int named, char *err, size_t errlen) {
  o->fd = -1;
  o->slot = -1;
  if (strlen(final_path) + 16 >= TEMP_NAME_MAX) return tio_errf(err, errlen, "%s: path too long", final_path);
  if (!(o->final = strdup(final_path))) return tio_errf(err, errlen, "%s: out of memory", final_path);
  if (!named) {
    char dir[TEMP_NAME_MAX];
    const char *slash = strrchr(final_path, '/');
    if (slash == final_path)
      snprintf(dir, sizeof dir, "/");
    else
      snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - final_path) : 1, slash ? final_path : ".");
    o->fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    if (o->fd >= 0) return 0;
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
      out_fail(o, err, errlen, "cannot create a file there");
      tio_out_discard(o);
      return -1;
    }
  }
  /* no O_TMPFILE here: a hidden name, unlinked on every way out but SIGKILL */
  char tmp[TEMP_NAME_MAX];
  temp_name(tmp, o->final, 0);
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &old); /* created and registered as one step */
  o->fd = mkostemp(tmp, O_CLOEXEC);
  const int saved = errno;
  if (o->fd >= 0 && (o->slot = temp_register(tmp)) < 0) {
    unlink(tmp);
    close(o->fd);
    o->fd = -1;
    sigprocmask(SIG_SETMASK, &old, NULL);
    tio_errf(err, errlen, "%s: too many temporary files at once", o->final);
    tio_out_discard(o);
    return -1;
  }
  sigprocmask(SIG_SETMASK, &old, NULL);
  if (o->fd < 0) {
    errno = saved;
    out_fail(o, err, errlen, "cannot create a temporary file");
    tio_out_discard(o);
    return -1;
  }
  return 0;
}

const char *tio_out_temp_name(const tio_out *o) { return o->slot >= 0 ? temp_names[o->slot] : NULL; }

int tio_out_write(tio_out *o, const void *buf, size_t len, char *err, size_t errlen) {
  const uint8_t *p = buf;
  size_t off = 0;
  while (off < len) {
    /* bounded writes: a signal waits at most one of them */
    const size_t n = len - off < ((size_t)8 << 20) ? len - off : ((size_t)8 << 20);
    ssize_t w = write(o->fd, p + off, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return tio_errf(err, errlen, "%s: write failed: %s", o->final, w < 0 ? strerror(errno) : "no space");
    off += (size_t)w;
  }
  return 0;
}

int tio_out_finish(tio_out *o, char *err, size_t errlen) {
  const mode_t mask = umask(0); /* new files honour the umask (an overwritten file's mode is not kept) */
  umask(mask);
  if (fchmod(o->fd, 0666 & ~mask) != 0 || fsync(o->fd) != 0)
    return out_fail(o, err, errlen, "cannot finish the file");
  return 0;
}

/* Gives the unnamed file open at fd the name `path`: through /proc/self/fd, or, without
 * /proc, with AT_EMPTY_PATH (which needs CAP_DAC_READ_SEARCH). */
static int link_unnamed(int fd, const char *path) {
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  if (linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW) == 0) return 0;
  if (errno != ENOENT || access("/proc/self/fd", F_OK) == 0) return -1;
  return linkat(fd, "", AT_FDCWD, path, AT_EMPTY_PATH);
}

/* Replaces the file at o->final with the unnamed file: linked to a fresh hidden name that
 * is at once renamed over it, signals held off in between (the name is registered too,
 * for a handler that runs on another thread). */
static int replace_with_unnamed(tio_out *o) {
  char tmp[TEMP_NAME_MAX];
  for (int tries = 0; tries < 100; ++tries) {
    temp_name(tmp, o->final, 1);
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    const int slot = temp_register(tmp);
    int rc = slot < 0 ? -1 : link_unnamed(o->fd, tmp);
    if (rc == 0 && (rc = rename(tmp, o->final)) != 0) unlink(tmp);
    const int saved = slot < 0 ? EMFILE : errno;
    temp_unregister(slot);
    sigprocmask(SIG_SETMASK, &old, NULL);
    errno = saved;
    if (rc == 0 || errno != EEXIST) return rc;
  }
  return -1;
}

int tio_out_commit(tio_out *o, char *err, size_t errlen) {
  if (o->slot >= 0) {
    if (rename(temp_names[o->slot], o->final) != 0)
      return out_fail(o, err, errlen, "cannot rename into place");
    temp_unregister(o->slot);
    o->slot = -1;
  } else if (link_unnamed(o->fd, o->final) != 0 && (errno != EEXIST || replace_with_unnamed(o) != 0)) {
    return out_fail(o, err, errlen, "cannot link into place");
  }
  close(o->fd);
  o->fd = -1;
  free(o->final);
  o->final = NULL;
  return 0;
}

void tio_out_discard(tio_out *o) {
  if (o->slot >= 0) {
    unlink(temp_names[o->slot]);
    temp_unregister(o->slot);
    o->slot = -1;
  }
  if (o->fd >= 0) close(o->fd);
  o->fd = -1;
  free(o->final);
  o->final = NULL;
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

/* Serializes file i of the save (the .safetensors file, or tensor i's NAME.npy) and writes
 * it to `out`. */
static int save_one(const char *dest, const tio_tensor *ts, int n, const char *metadata_json, int i,
                    tio_out *out, int named, char *err, size_t errlen) {
  const int st = ends_with(dest, ".safetensors");
  char *final = NULL;
  if (!st) {
    size_t fl = strlen(dest) + strlen(ts[i].name) + 8;
    if (!(final = malloc(fl))) return tio_errf(err, errlen, "%s: out of memory", dest);
    snprintf(final, fl, "%s/%s.npy", dest, ts[i].name);
  }
  const char *path = st ? dest : final;
  uint8_t *buf = NULL;
  size_t len = 0;
  char msg[TIO_ERR_LEN];
  int rc = st ? tio_st_serialize(ts, n, metadata_json, &buf, &len, msg, sizeof msg)
              : tio_npy_serialize(&ts[i], &buf, &len, msg, sizeof msg);
  if (rc)
    tio_errf(err, errlen, "%s: %s", path, msg);
  else
    rc = tio_out_open(out, path, named, err, errlen);
  if (!rc && (tio_out_write(out, buf, len, err, errlen) || tio_out_finish(out, err, errlen))) rc = -1;
  free(buf);
  free(final);
  return rc;
}

int tio_save_files(const char *dest, const tio_tensor *ts, int n, const char *metadata_json, int named,
                   char *err, size_t errlen) {
  const int st = ends_with(dest, ".safetensors");
  if (!st) { /* a directory of .npy files */
    for (int i = 0; i < n; ++i)
      if (!safe_file_name(ts[i].name))
        return tio_errf(err, errlen, "%s: tensor name '%s' cannot be a file name", dest,
                        ts[i].name ? ts[i].name : "");
    struct stat sb;
    if (stat(dest, &sb) == 0) {
      if (!S_ISDIR(sb.st_mode))
        return tio_errf(err, errlen,
                        "%s: exists and is not a directory (name a .safetensors file "
                        "or a directory)",
                        dest);
    } else if (mkdir(dest, 0777) != 0) {
      return tio_errf(err, errlen, "%s: cannot create directory: %s", dest, strerror(errno));
    }
  }
  const int nf = st ? 1 : n;
  tio_out *outs = calloc((size_t)(nf ? nf : 1), sizeof *outs);
  if (!outs) return tio_errf(err, errlen, "%s: out of memory", dest);
  for (int i = 0; i < nf; ++i)
    outs[i].fd = outs[i].slot = -1;
  int rc = 0;
  for (int i = 0; i < nf && !rc; ++i)
    rc = save_one(dest, ts, n, metadata_json, i, &outs[i], named, err, errlen);
  /* all or nothing: every final path is checked before the first is linked */
  for (int i = 0; i < nf && !rc; ++i) {
    struct stat sb;
    if (lstat(outs[i].final, &sb) == 0 && !S_ISREG(sb.st_mode))
      rc = tio_errf(err, errlen, "%s: exists and is not a regular file; nothing written", outs[i].final);
  }
  for (int i = 0; i < nf && !rc; ++i)
    rc = tio_out_commit(&outs[i], err, errlen);
  for (int i = 0; i < nf; ++i)
    tio_out_discard(&outs[i]);
  free(outs);
  return rc;
}

int tio_save(const char *dest, const tio_tensor *ts, int n, const char *metadata_json, char *err,
             size_t errlen) {
  return tio_save_files(dest, ts, n, metadata_json, 0, err, errlen);
}
