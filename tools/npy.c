/*
 * npy.c — NumPy .npy reader and writer (format versions 1.0, 2.0 and 3.0).
 *
 * Layout: "\x93NUMPY", major, minor, header length (2 bytes LE in 1.0, 4 bytes in 2.0 /
 * 3.0), then the header — a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 5), }
 * padded with spaces and a newline — then the C-ordered data. The header grammar is
 * small (strings, True/False, tuples of non-negative ints), so it is parsed here by
 * hand; nothing else of Python is accepted. Fortran order is refused (the tools want C
 * order and silently transposing would surprise).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "tensor_io.h"

/* ------------------------------------------------------------ header grammar */
typedef struct hdr_cursor {
  const char *p, *end;
} hdr_cursor;

static void skip_ws(hdr_cursor *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
    ++c->p;
}

static int peek(hdr_cursor *c) { return c->p < c->end ? (unsigned char)*c->p : -1; }

/* A quoted string without escapes; copies at most outlen-1 bytes. */
static int parse_string(hdr_cursor *c, char *out, size_t outlen, char *err, size_t errlen) {
  int q = peek(c);
  if (q != '\'' && q != '"') return tio_errf(err, errlen, "npy header: expected a quoted string");
  ++c->p;
  size_t n = 0;
  while (c->p < c->end && *c->p != q) {
    if (*c->p == '\\') return tio_errf(err, errlen, "npy header: escapes in strings are not supported");
    if (*c->p == '\n') return tio_errf(err, errlen, "npy header: unterminated string");
    if (n + 1 >= outlen) return tio_errf(err, errlen, "npy header: string too long");
    out[n++] = *c->p++;
  }
  if (c->p >= c->end) return tio_errf(err, errlen, "npy header: unterminated string");
  ++c->p;
  out[n] = 0;
  return 0;
}

static int parse_bool(hdr_cursor *c, int *v, char *err, size_t errlen) {
  size_t left = (size_t)(c->end - c->p);
  if (left >= 4 && !memcmp(c->p, "True", 4)) {
    c->p += 4;
    *v = 1;
    return 0;
  }
  if (left >= 5 && !memcmp(c->p, "False", 5)) {
    c->p += 5;
    *v = 0;
    return 0;
  }
  return tio_errf(err, errlen, "npy header: 'fortran_order' must be True or False");
}

static int parse_shape(hdr_cursor *c, int *ndim, int64_t *shape, char *err, size_t errlen) {
  if (peek(c) != '(') return tio_errf(err, errlen, "npy header: 'shape' must be a tuple");
  ++c->p;
  int n = 0, trailing_comma = 0;
  skip_ws(c);
  while (peek(c) != ')') {
    if (peek(c) == '-') return tio_errf(err, errlen, "npy header: negative dimension in 'shape'");
    if (peek(c) < '0' || peek(c) > '9')
      return tio_errf(err, errlen, "npy header: 'shape' must hold non-negative integers");
    int64_t v = 0;
    while (peek(c) >= '0' && peek(c) <= '9') {
      int d = *c->p++ - '0';
      if (v > (INT64_MAX - d) / 10)
        return tio_errf(err, errlen, "npy header: dimension in 'shape' overflows 64 bits");
      v = v * 10 + d;
    }
    if (peek(c) == 'L') ++c->p; /* Python 2 long suffix */
    if (n >= TIO_MAX_DIMS) return tio_errf(err, errlen, "npy header: more than %d dimensions", TIO_MAX_DIMS);
    shape[n++] = v;
    skip_ws(c);
    trailing_comma = 0;
    if (peek(c) == ',') {
      ++c->p;
      trailing_comma = 1;
      skip_ws(c);
    } else if (peek(c) != ')') {
      return tio_errf(err, errlen, "npy header: expected ',' or ')' in 'shape'");
    }
  }
  ++c->p;
  /* Python: (5) is an int, not a tuple */
  if (n == 1 && !trailing_comma) return tio_errf(err, errlen, "npy header: 'shape' must be a tuple");
  *ndim = n;
  return 0;
}

/* descr -> dtype. Widths-only descrs ('|u1', '<V2', ...) come back raw. Other real numpy
 * dtypes are accepted with dtype INVALID (so `inspect` can list them) — `bits` is set. */
static int parse_descr(const char *d, tio_tensor *t, int *bits, char *err, size_t errlen) {
  char order = d[0];
  if (order != '<' && order != '>' && order != '|' && order != '=')
    return tio_errf(err, errlen, "npy header: dtype '%s' is not a simple dtype", d);
  char kind = d[1];
  char *endp;
  if (d[2] < '0' || d[2] > '9') return tio_errf(err, errlen, "npy header: unknown dtype '%s'", d);
  long size = strtol(d + 2, &endp, 10);
  if (*endp || size <= 0 || size > 64) return tio_errf(err, errlen, "npy header: unknown dtype '%s'", d);
  if (order == '>' && size > 1)
    return tio_errf(err, errlen, "npy header: big-endian dtype '%s' is not supported", d);
  t->dtype = MXF_DTYPE_INVALID;
  t->raw_bits = 0;
  *bits = (int)size * 8;
  switch (kind) {
  case 'f':
    if (size == 4)
      t->dtype = MXF_F32;
    else if (size == 2)
      t->dtype = MXF_F16;
    else if (size == 1)
      t->dtype = MXF_E5M2; /* ml_dtypes saves float8_e5m2 as '<f1' */
    else if (size != 8 && size != 16)
      return tio_errf(err, errlen, "npy header: unknown dtype '%s'", d);
    break;
  case 'u':
    if (size == 1) t->dtype = MXF_U8;
    if (size <= 2) t->raw_bits = (int)size * 8;
    if (size != 1 && size != 2 && size != 4 && size != 8)
      return tio_errf(err, errlen, "npy header: unknown dtype '%s'", d);
    break;
  case 'i':
    if (size == 1) t->dtype = MXF_I8;
    if (size == 4) t->dtype = MXF_I32; /* group offsets and counts */
    if (size == 1) t->raw_bits = 8;
    if (size != 1 && size != 2 && size != 4 && size != 8)
      return tio_errf(err, errlen, "npy header: unknown dtype '%s'", d);
    break;
  case 'V':
    if (size > 2)
      return tio_errf(err, errlen, "npy header: void dtype '%s' wider than 2 bytes is not supported", d);
    t->raw_bits = (int)size * 8;
    break;
  case 'b':
    if (size != 1) return tio_errf(err, errlen, "npy header: unknown dtype '%s'", d);
    break;
  case 'c':
    if (size != 8 && size != 16) return tio_errf(err, errlen, "npy header: unknown dtype '%s'", d);
    break;
  default: return tio_errf(err, errlen, "npy header: unsupported dtype '%s'", d);
  }
  return 0;
}

int tio_npy_parse(const uint8_t *buf, size_t len, const char *name, tio_tensor *t, char *err, size_t errlen) {
  memset(t, 0, sizeof *t);
  if (len < 10 || memcmp(buf, "\x93NUMPY", 6))
    return tio_errf(err, errlen,
                    len < 10 ? "truncated: %zu bytes, too short for a .npy header"
                             : "not a .npy file (%zu bytes, no magic)",
                    len);
  int major = buf[6], minor = buf[7];
  size_t prefix, hlen;
  if (major == 1) {
    prefix = 10;
    hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
  } else if (major == 2 || major == 3) {
    if (len < 12) return tio_errf(err, errlen, "truncated: %zu bytes, too short for a .npy header", len);
    prefix = 12;
    hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
  } else {
    return tio_errf(err, errlen, "unsupported .npy version %d.%d (1.0, 2.0 and 3.0 are read)", major, minor);
  }
  if (minor != 0)
    return tio_errf(err, errlen, "unsupported .npy version %d.%d (1.0, 2.0 and 3.0 are read)", major, minor);
  if (hlen > TIO_NPY_HEADER_MAX)
    return tio_errf(err, errlen, "npy header length %zu exceeds the limit of %u bytes", hlen,
                    TIO_NPY_HEADER_MAX);
  if (hlen > len - prefix)
    return tio_errf(err, errlen, "truncated: header length %zu runs past the end of the file (%zu bytes)",
                    hlen, len);

  hdr_cursor c = {(const char *)buf + prefix, (const char *)buf + prefix + hlen};
  char key[32], descr[24] = "";
  int have_descr = 0, have_fortran = 0, have_shape = 0, fortran = 0, ndim = 0;
  int64_t shape[TIO_MAX_DIMS];
  skip_ws(&c);
  if (peek(&c) != '{') return tio_errf(err, errlen, "npy header: expected a dict ('{')");
  ++c.p;
  for (;;) {
    skip_ws(&c);
    if (peek(&c) == '}') break;
    if (parse_string(&c, key, sizeof key, err, errlen)) return -1;
    skip_ws(&c);
    if (peek(&c) != ':') return tio_errf(err, errlen, "npy header: expected ':' after '%s'", key);
    ++c.p;
    skip_ws(&c);
    if (!strcmp(key, "descr")) {
      if (have_descr++) return tio_errf(err, errlen, "npy header: 'descr' given twice");
      if (peek(&c) == '[') return tio_errf(err, errlen, "npy header: structured dtypes are not supported");
      if (parse_string(&c, descr, sizeof descr, err, errlen)) return -1;
    } else if (!strcmp(key, "fortran_order")) {
      if (have_fortran++) return tio_errf(err, errlen, "npy header: 'fortran_order' given twice");
      if (parse_bool(&c, &fortran, err, errlen)) return -1;
    } else if (!strcmp(key, "shape")) {
      if (have_shape++) return tio_errf(err, errlen, "npy header: 'shape' given twice");
      if (parse_shape(&c, &ndim, shape, err, errlen)) return -1;
    } else {
      return tio_errf(err, errlen, "npy header: unexpected key '%s'", key);
    }
    skip_ws(&c);
    if (peek(&c) == ',') {
      ++c.p;
      continue;
    }
    skip_ws(&c);
    if (peek(&c) != '}') return tio_errf(err, errlen, "npy header: expected ',' or '}'");
  }
  ++c.p;
  skip_ws(&c);
  while (c.p < c.end && *c.p == 0)
    ++c.p; /* some writers pad with NULs */
  if (c.p != c.end) return tio_errf(err, errlen, "npy header: unexpected text after the dict");
  if (!have_descr || !have_fortran || !have_shape)
    return tio_errf(err, errlen, "npy header: missing key '%s'",
                    !have_descr     ? "descr"
                    : !have_fortran ? "fortran_order"
                                    : "shape");

  int bits = 0;
  if (parse_descr(descr, t, &bits, err, errlen)) return -1;
  int64_t numel = tio_shape_numel(ndim, shape);
  if (numel < 0) return tio_errf(err, errlen, "shape's element count overflows");
  if (fortran && ndim > 1) {
    int trivial = 0; /* at most one dim > 1: Fortran and C order coincide */
    for (int i = 0; i < ndim; ++i)
      trivial += shape[i] > 1;
    if (trivial > 1)
      return tio_errf(err, errlen,
                      "Fortran-ordered array; save it in C order "
                      "(numpy.ascontiguousarray) and try again");
  }
  int64_t nbytes = tio_bits_to_bytes(numel, bits);
  if (nbytes < 0) return tio_errf(err, errlen, "shape's byte size overflows");
  size_t data_off = prefix + hlen;
  if ((uint64_t)nbytes > len - data_off)
    return tio_errf(err, errlen, "truncated: shape needs %lld data bytes, file has %zu", (long long)nbytes,
                    len - data_off);
  if ((uint64_t)nbytes < len - data_off)
    return tio_errf(err, errlen, "%zu bytes after the data (shape needs %lld)",
                    len - data_off - (size_t)nbytes, (long long)nbytes);
  snprintf(t->file_dtype, sizeof t->file_dtype, "%s", descr);
  t->ndim = ndim;
  memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
  t->nbytes = (size_t)nbytes;
  t->data = buf + data_off; /* borrowed: buf outlives the tensor */
  t->name = strdup(name ? name : "");
  if (!t->name) {
    tio_tensor_free(t);
    return tio_errf(err, errlen, "out of memory");
  }
  return 0;
}

/* ------------------------------------------------------------ writer */
static const char *npy_descr(mxf_dtype dt) {
  switch (dt) {
  case MXF_F32: return "<f4";
  case MXF_F16: return "<f2";
  case MXF_BF16: return "<u2";
  case MXF_I8: return "|i1";
  case MXF_E4M3:
  case MXF_E5M2:
  case MXF_E8M0:
  case MXF_U8:
  case MXF_E2M1:
  case MXF_E2M1X2: return "|u1";
  default: return NULL;
  }
}

int tio_npy_serialize(const tio_tensor *t, uint8_t **out, size_t *len, char *err, size_t errlen) {
  const char *descr = npy_descr(t->dtype);
  if (!descr) return tio_errf(err, errlen, "cannot write dtype %s to .npy", tio_dtype_name(t->dtype));
  if (t->ndim < 0 || t->ndim > TIO_MAX_DIMS) return tio_errf(err, errlen, "bad rank %d", t->ndim);
  int64_t numel = tio_numel(t);
  int64_t src_bytes = tio_dtype_bytes(t->dtype, numel);
  if (numel < 0 || src_bytes < 0) return tio_errf(err, errlen, "shape's byte size overflows");
  int unpack = t->dtype == MXF_E2M1; /* written one code per byte */
  int64_t nbytes = unpack ? numel : src_bytes;

  char hdr[512];
  int n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (int i = 0; i < t->ndim; ++i)
    n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%lld,%s", (long long)t->shape[i],
                  i + 1 < t->ndim ? " " : "");
  n += snprintf(hdr + n, sizeof hdr - (size_t)n, "), }");
  /* pad so that the data starts on a 64-byte boundary; the header ends in '\n' */
  size_t total_hdr = 10 + (size_t)n + 1;
  size_t padded = (total_hdr + 63) & ~(size_t)63;
  size_t hlen = padded - 10;
  size_t total = padded + (size_t)nbytes;
  uint8_t *b = malloc(total ? total : 1);
  if (!b) return tio_errf(err, errlen, "out of memory");
  memcpy(b, "\x93NUMPY\x01\x00", 8);
  b[8] = (uint8_t)(hlen & 0xFF);
  b[9] = (uint8_t)(hlen >> 8);
  memcpy(b + 10, hdr, (size_t)n);
  memset(b + 10 + n, ' ', hlen - (size_t)n - 1);
  b[padded - 1] = '\n';
  if (unpack) {
    for (int64_t i = 0; i < numel; ++i)
      b[padded + (size_t)i] = mxf_e2m1_get(t->data, i);
  } else if (nbytes) {
    memcpy(b + padded, t->data, (size_t)nbytes);
  }
  *out = b;
  *len = total;
  return 0;
}
