/*
 * test_tensor_io.c — the CLI's .npy / safetensors readers and writers (tools/tensor_io.h).
 *
 * Round trips of every dtype with random shapes and data; hand-made headers of npy 1.0,
 * 2.0 and 3.0; and every hostile case the readers must refuse with a message (truncated
 * files at every length, header lengths past the end or above the caps, overflowing
 * shapes, overlapping or outside offsets, unknown dtypes, Fortran order, ...). Tensors
 * read borrow the file's bytes, copied only to align or convert them. Saving is checked
 * to be all-or-nothing: a failure leaves no file and no temporary behind, with unnamed
 * files and with the hidden temporaries of filesystems without O_TMPFILE, which a
 * signal (SIGINT, SIGTERM, SIGHUP, SIGXFSZ) removes too.
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tensor_io.h"
#include "testutil.h"

static tu_rng rng;
static char err[TIO_ERR_LEN];

/* ------------------------------------------------------------ helpers */
typedef struct buf {
  uint8_t *p;
  size_t n;
} buf;

static buf npy_raw(int major, const char *header, const void *data, size_t nd) {
  size_t hl = strlen(header), pre = major == 1 ? 10 : 12;
  buf b = {tu_malloc(pre + hl + nd + 1), pre + hl + nd};
  memcpy(b.p, "\x93NUMPY", 6);
  b.p[6] = (uint8_t)major;
  b.p[7] = 0;
  for (size_t i = 0; i < pre - 8; ++i)
    b.p[8 + i] = (uint8_t)(hl >> (8 * i));
  memcpy(b.p + pre, header, hl);
  if (nd) memcpy(b.p + pre + hl, data, nd);
  return b;
}

static buf st_raw(const char *json, const void *data, size_t nd) {
  size_t jl = strlen(json);
  buf b = {tu_malloc(8 + jl + nd + 1), 8 + jl + nd};
  for (int i = 0; i < 8; ++i)
    b.p[i] = (uint8_t)((uint64_t)jl >> (8 * i));
  memcpy(b.p + 8, json, jl);
  if (nd) memcpy(b.p + 8 + jl, data, nd);
  return b;
}

/* Expects the npy parser to refuse b with a message containing `needle`. */
static void npy_refuses(buf b, const char *needle, const char *what) {
  tio_tensor t;
  err[0] = 0;
  int rc = tio_npy_parse(b.p, b.n, "x", &t, err, sizeof err);
  TU_CHECK(rc == -1, "npy %s: accepted", what);
  if (rc == 0) tio_tensor_free(&t);
  TU_CHECK(strstr(err, needle) != NULL, "npy %s: message '%s' lacks '%s'", what, err, needle);
  free(b.p);
}

static void st_refuses(buf b, const char *needle, const char *what) {
  tio_file f;
  err[0] = 0;
  int rc = tio_st_parse(b.p, b.n, &f, err, sizeof err);
  TU_CHECK(rc == -1, "safetensors %s: accepted", what);
  if (rc == 0) tio_file_free(&f);
  TU_CHECK(strstr(err, needle) != NULL, "safetensors %s: message '%s' lacks '%s'", what, err, needle);
  TU_CHECK(f.n == 0 && f.t == NULL && f.metadata_json == NULL, "safetensors %s: left allocations", what);
  free(b.p);
}

static void random_shape(int *ndim, int64_t *shape, int even_last) {
  *ndim = (int)tu_range(&rng, 0, 4);
  for (int i = 0; i < *ndim; ++i)
    shape[i] = tu_range(&rng, 1, 13);
  if (even_last && *ndim) shape[*ndim - 1] = 2 * tu_range(&rng, 1, 7);
  if (even_last && !*ndim) {
    *ndim = 1;
    shape[0] = 2;
  }
}

/* ------------------------------------------------------------ npy */
static void test_npy_roundtrip(void) {
  const mxf_dtype dts[] = {MXF_F32,  MXF_F16, MXF_BF16, MXF_E4M3, MXF_E5M2,
                           MXF_E8M0, MXF_U8,  MXF_I8,   MXF_E2M1};
  for (size_t k = 0; k < sizeof dts / sizeof *dts; ++k)
    for (int rep = 0; rep < 20; ++rep) {
      int ndim;
      int64_t shape[TIO_MAX_DIMS];
      random_shape(&ndim, shape, dts[k] == MXF_E2M1);
      int64_t n = tio_shape_numel(ndim, shape), nb = tio_dtype_bytes(dts[k], n);
      uint8_t *data = tu_malloc((size_t)nb + 1);
      for (int64_t i = 0; i < nb; ++i)
        data[i] = (uint8_t)tu_u32(&rng);
      tio_tensor src = tio_tensor_view("t", dts[k], ndim, shape, data), got;
      uint8_t *ser;
      size_t len;
      TU_CHECK(tio_npy_serialize(&src, &ser, &len, err, sizeof err) == 0, "serialize %s: %s",
               tio_dtype_name(dts[k]), err);
      TU_CHECK(len % 64 == (size_t)(dts[k] == MXF_E2M1 ? n : nb) % 64, "npy data starts 64-byte aligned");
      int rc = tio_npy_parse(ser, len, "t", &got, err, sizeof err);
      TU_CHECK(rc == 0, "parse back %s: %s", tio_dtype_name(dts[k]), err);
      if (rc == 0) {
        /* what the file can say: fp8 / e8m0 / bf16 come back raw, e2m1 one code a byte */
        TU_CHECK(tio_tensor_as(&got, dts[k], "t", err, sizeof err) == 0, "as %s: %s", tio_dtype_name(dts[k]),
                 err);
        TU_CHECK(got.dtype == dts[k] && got.ndim == ndim &&
                     !memcmp(got.shape, shape, sizeof(int64_t) * (size_t)ndim),
                 "%s: dtype/shape survive", tio_dtype_name(dts[k]));
        TU_CHECK(got.nbytes == (size_t)nb && (nb == 0 || !memcmp(got.data, data, (size_t)nb)),
                 "%s: bytes survive", tio_dtype_name(dts[k]));
        /* the data is read where it lies: 64 bytes into the buffer past the header, or packed
         * into 64-byte aligned memory of the tensor's own */
        TU_CHECK(got.own
                     ? got.data == got.own && ((uintptr_t)got.data & 63) == 0
                     : (const uint8_t *)got.data == ser + (len - (size_t)nb) && (len - (size_t)nb) % 64 == 0,
                 "%s: data borrowed at a 64-byte offset, or owned and aligned", tio_dtype_name(dts[k]));
        tio_tensor_free(&got);
      }
      free(ser);
      free(data);
    }
}

static void test_npy_headers(void) {
  float v[6] = {1, 2, 3, 4, 5, 6};
  const char *hdrs[] = {
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }          \n",
      "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2,3)}\n",
      "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}",
      "  {'descr':'<f4','fortran_order':False,'shape':(2L,3L)}  \n",
  };
  for (int major = 1; major <= 3; ++major)
    for (size_t h = 0; h < sizeof hdrs / sizeof *hdrs; ++h) {
      buf b = npy_raw(major, hdrs[h], v, sizeof v);
      tio_tensor t;
      int rc = tio_npy_parse(b.p, b.n, "v", &t, err, sizeof err);
      TU_CHECK(rc == 0, "npy %d.0 header %zu: %s", major, h, err);
      if (!rc) {
        TU_CHECK(t.dtype == MXF_F32 && t.ndim == 2 && t.shape[0] == 2 && t.shape[1] == 3 &&
                     !memcmp(t.data, v, sizeof v),
                 "npy %d.0 header %zu: content", major, h);
        tio_tensor_free(&t);
      }
      free(b.p);
    }
  /* the width-only dtypes numpy / ml_dtypes write */
  struct {
    const char *descr;
    mxf_dtype dt;
    int raw;
  } d[] = {{"|u1", MXF_U8, 8},
           {"<u1", MXF_U8, 8},
           {"|i1", MXF_I8, 8},
           {"<V1", MXF_DTYPE_INVALID, 8},
           {"|V1", MXF_DTYPE_INVALID, 8},
           {"<V2", MXF_DTYPE_INVALID, 16},
           {"<u2", MXF_DTYPE_INVALID, 16},
           {"<f1", MXF_E5M2, 0},
           {"<f2", MXF_F16, 0},
           {"<f8", MXF_DTYPE_INVALID, 0},
           {"<i8", MXF_DTYPE_INVALID, 0}};
  for (size_t i = 0; i < sizeof d / sizeof *d; ++i) {
    char h[128];
    snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': (3,), }", d[i].descr);
    int sz = d[i].descr[2] - '0';
    buf b = npy_raw(
        1, h,
        "\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18",
        (size_t)(3 * sz));
    tio_tensor t;
    int rc = tio_npy_parse(b.p, b.n, "x", &t, err, sizeof err);
    TU_CHECK(rc == 0 && t.dtype == d[i].dt && t.raw_bits == d[i].raw && !strcmp(t.file_dtype, d[i].descr),
             "descr %s: rc %d dtype %d raw %d (%s)", d[i].descr, rc, rc ? -1 : (int)t.dtype,
             rc ? -1 : t.raw_bits, err);
    if (!rc) tio_tensor_free(&t);
    free(b.p);
  }
  /* 0-d array and empty array */
  buf b = npy_raw(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", v, 4);
  tio_tensor t;
  TU_CHECK(tio_npy_parse(b.p, b.n, "s", &t, err, sizeof err) == 0 && t.ndim == 0 && t.nbytes == 4,
           "0-d array");
  tio_tensor_free(&t);
  free(b.p);
  b = npy_raw(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5), }", NULL, 0);
  TU_CHECK(tio_npy_parse(b.p, b.n, "e", &t, err, sizeof err) == 0 && t.nbytes == 0, "empty array");
  tio_tensor_free(&t);
  free(b.p);
  /* Fortran order: refused unless the array is effectively 1-D */
  b = npy_raw(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (6, 1), }", v, sizeof v);
  TU_CHECK(tio_npy_parse(b.p, b.n, "f", &t, err, sizeof err) == 0, "Fortran (6, 1) is also C order");
  tio_tensor_free(&t);
  free(b.p);
}

static void test_npy_hostile(void) {
  float v[6] = {0};
  const char *ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  npy_refuses(npy_raw(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", v, sizeof v),
              "Fortran", "fortran order");
  npy_refuses(npy_raw(1, ok, v, sizeof v - 1), "truncated", "short data");
  {
    buf b = npy_raw(1, ok, v, sizeof v);
    b.p = realloc(b.p, b.n + 3);
    b.n += 3;
    npy_refuses(b, "after the data", "trailing bytes");
  }
  {
    buf b = npy_raw(1, ok, v, sizeof v);
    b.p[8] = 0xFF, b.p[9] = 0x7F; /* header length far past the end */
    npy_refuses(b, "past the end", "header length beyond file");
  }
  {
    buf b = npy_raw(2, ok, v, sizeof v);
    b.p[8] = 0, b.p[9] = 0, b.p[10] = 0, b.p[11] = 0x40; /* 1 GiB header */
    npy_refuses(b, "limit", "absurd header length");
  }
  {
    char *big = tu_malloc(70000);
    memset(big, ' ', 69999);
    big[0] = '{';
    big[69998] = '}';
    big[69999] = 0;
    npy_refuses(npy_raw(2, big, NULL, 0), "limit", "64 KiB header");
    free(big);
  }
  npy_refuses(
      npy_raw(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", v, 4),
      "overflow", "element count overflow");
  npy_refuses(
      npy_raw(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", v, 4),
      "overflow", "dimension overflow");
  npy_refuses(npy_raw(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2305843009213693952,), }", v, 4),
              "overflow", "byte size overflow");
  npy_refuses(npy_raw(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }", v, 4), "negative",
              "negative dim");
  npy_refuses(npy_raw(1, "{'descr': '<x4', 'fortran_order': False, 'shape': (2,), }", v, 8), "dtype",
              "unknown dtype");
  npy_refuses(npy_raw(1, "{'descr': '<f3', 'fortran_order': False, 'shape': (2,), }", v, 6), "dtype",
              "odd float");
  npy_refuses(npy_raw(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", v, 8), "big-endian",
              "big endian");
  npy_refuses(npy_raw(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", v, 8),
              "structured", "structured dtype");
  npy_refuses(npy_raw(1, "{'descr': '<f4', 'shape': (2,), }", v, 8), "missing", "missing key");
  npy_refuses(npy_raw(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", v, 8),
              "unexpected key", "extra key");
  npy_refuses(npy_raw(1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", v, 8),
              "twice", "duplicate key");
  npy_refuses(npy_raw(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2), }", v, 8), "tuple",
              "int not tuple");
  npy_refuses(npy_raw(1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }", v, 8), "True or False",
              "bad bool");
  npy_refuses(npy_raw(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } junk", v, 8),
              "after the dict", "trailing text");
  npy_refuses(npy_raw(1, "{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}", v, 8), "",
              "unterminated quote");
  npy_refuses(npy_raw(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,2,3,4,5,6,7,8,9), }", v, 8),
              "dimensions", "too many dims");
  {
    buf b = npy_raw(1, ok, v, sizeof v);
    b.p[6] = 4;
    npy_refuses(b, "version", "version 4.0");
  }
  {
    buf b = npy_raw(1, ok, v, sizeof v);
    b.p[1] = 'M';
    npy_refuses(b, "magic", "bad magic");
  }
  /* every truncation of a valid file is refused, never read past the end */
  buf whole = npy_raw(1, ok, v, sizeof v);
  for (size_t n = 0; n < whole.n; ++n) {
    uint8_t *cut = tu_malloc(n + 1); /* an exact-size copy: a read past it is a heap overflow */
    memcpy(cut, whole.p, n);
    tio_tensor t;
    int rc = tio_npy_parse(cut, n, "x", &t, err, sizeof err);
    TU_CHECK(rc == -1 && err[0], "npy truncated to %zu of %zu bytes: accepted", n, whole.n);
    if (!rc) tio_tensor_free(&t);
    free(cut);
  }
  free(whole.p);
  /* random byte flips: parse or refuse, never crash (ASan / valgrind catch the rest) */
  for (int rep = 0; rep < 3000; ++rep) {
    buf b = npy_raw(1, ok, v, sizeof v);
    int flips = (int)tu_range(&rng, 1, 4);
    for (int f = 0; f < flips; ++f)
      b.p[tu_range(&rng, 0, (int64_t)b.n - 1)] = (uint8_t)tu_u32(&rng);
    tio_tensor t;
    if (tio_npy_parse(b.p, b.n, "x", &t, err, sizeof err) == 0) {
      TU_CHECK(t.nbytes <= b.n, "flipped npy: data within the file");
      tio_tensor_free(&t);
    } else {
      TU_CHECK(err[0] != 0, "flipped npy: a refusal has a message");
    }
    free(b.p);
  }
}

static void test_tensor_as(void) {
  uint8_t codes[8] = {0, 1, 2, 3, 15, 14, 8, 7};
  int64_t shape[2] = {2, 4};
  tio_tensor t = tio_tensor_view("c", MXF_U8, 2, shape, codes); /* borrowed, as from a file */
  t.raw_bits = 8;
  t.name = strdup("c");
  TU_CHECK(tio_tensor_as(&t, MXF_E2M1, "c", err, sizeof err) == 0, "u8 codes -> e2m1: %s", err);
  const uint8_t *p = t.data;
  TU_CHECK(t.nbytes == 4 && p[0] == 0x10 && p[1] == 0x32 && p[2] == 0xEF && p[3] == 0x78 && t.shape[1] == 4,
           "e2m1 packed low nibble first");
  TU_CHECK(t.own == t.data && codes[3] == 3 && codes[4] == 15,
           "packed into memory of its own, the file's bytes kept");
  TU_CHECK(tio_tensor_as(&t, MXF_E2M1X2, "c", err, sizeof err) == 0 && t.shape[1] == 2, "e2m1 -> bytes view");
  TU_CHECK(tio_tensor_as(&t, MXF_E4M3, "c", err, sizeof err) == -1 && strstr(err, "expected e4m3"),
           "packed e2m1 is not e4m3: %s", err);
  tio_tensor_free(&t);
  codes[3] = 0x10;
  t = tio_tensor_view("c", MXF_DTYPE_INVALID, 2, shape, codes);
  t.raw_bits = 8;
  t.name = strdup("c");
  TU_CHECK(tio_tensor_as(&t, MXF_E2M1, "c.npy", err, sizeof err) == -1 && strstr(err, "c.npy") &&
               strstr(err, "not an e2m1 code"),
           "byte 0x10 is no e2m1 code: %s", err);
  TU_CHECK(tio_tensor_as(&t, MXF_BF16, "c", err, sizeof err) == -1, "8-bit raw is not bf16");
  TU_CHECK(tio_tensor_as(&t, MXF_E8M0, "c", err, sizeof err) == 0 && t.dtype == MXF_E8M0, "raw -> e8m0");
  tio_tensor_free(&t);
  float f[2] = {1, 2};
  int64_t s1 = 2;
  tio_tensor g = tio_tensor_view("f", MXF_F32, 1, &s1, f);
  strcpy(g.file_dtype, "<f4");
  TU_CHECK(tio_tensor_as(&g, MXF_E4M3, "f.npy", err, sizeof err) == -1 && strstr(err, "f32"),
           "f32 is not e4m3: %s", err);
}

/* ------------------------------------------------------------ safetensors */
static void test_st_roundtrip(void) {
  const mxf_dtype dts[] = {MXF_F32,  MXF_F16, MXF_BF16, MXF_E4M3, MXF_E5M2,
                           MXF_E8M0, MXF_U8,  MXF_I8,   MXF_E2M1};
  for (int rep = 0; rep < 30; ++rep) {
    int n = (int)tu_range(&rng, 1, 9);
    tio_tensor ts[9];
    char names[9][16];
    uint8_t *datas[9];
    for (int i = 0; i < n; ++i) {
      mxf_dtype dt = dts[tu_range(&rng, 0, 8)];
      int ndim;
      int64_t shape[TIO_MAX_DIMS];
      random_shape(&ndim, shape, dt == MXF_E2M1);
      int64_t nb = tio_dtype_bytes(dt, tio_shape_numel(ndim, shape));
      datas[i] = tu_malloc((size_t)nb + 1);
      for (int64_t j = 0; j < nb; ++j)
        datas[i][j] = (uint8_t)tu_u32(&rng);
      snprintf(names[i], sizeof names[i], "t%d.w", i);
      ts[i] = tio_tensor_view(names[i], dt, ndim, shape, datas[i]);
    }
    uint8_t *ser;
    size_t len;
    const char *meta = rep & 1 ? "{\"format\":\"pt\",\"seed\":\"42\"}" : NULL;
    TU_CHECK(tio_st_serialize(ts, n, meta, &ser, &len, err, sizeof err) == 0, "st serialize: %s", err);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; --i)
      hl = hl << 8 | ser[i];
    TU_CHECK((8 + hl) % 8 == 0, "st data 8-byte aligned");
    tio_file f;
    int rc = tio_st_parse(ser, len, &f, err, sizeof err);
    TU_CHECK(rc == 0 && f.n == n, "st parse back: %s", err);
    if (!rc) {
      for (int i = 0; i < n; ++i) {
        tio_tensor *g = tio_file_find(&f, names[i]);
        TU_CHECK(g && g->dtype == ts[i].dtype && g->ndim == ts[i].ndim &&
                     !memcmp(g->shape, ts[i].shape, sizeof(int64_t) * (size_t)ts[i].ndim) &&
                     g->nbytes == ts[i].nbytes && (!g->nbytes || !memcmp(g->data, ts[i].data, g->nbytes)),
                 "st tensor %s (%s) survives", names[i], tio_dtype_name(ts[i].dtype));
        TU_CHECK(g && !g->own && (const uint8_t *)g->data >= ser + 8 + hl &&
                     (const uint8_t *)g->data + g->nbytes <= ser + len,
                 "st tensor %s borrows the buffer", names[i]);
      }
      TU_CHECK(meta ? (f.metadata_json && strstr(f.metadata_json, "\"seed\":\"42\"")) : !f.metadata_json,
               "metadata survives");
      tio_file_free(&f);
    }
    free(ser);
    for (int i = 0; i < n; ++i)
      free(datas[i]);
  }
  /* spellings seen in the wild */
  const char *sp[][2] = {{"F8_E4M3FN", "e4m3"}, {"F8_E8M0FNU", "e8m0"}, {"F8_E5M2", "e5m2"}, {"F4", "e2m1"}};
  for (int i = 0; i < 4; ++i) {
    char js[160];
    snprintf(js, sizeof js, "{\"x\":{\"dtype\":\"%s\",\"shape\":[2,4],\"data_offsets\":[0,%d]}}", sp[i][0],
             i == 3 ? 4 : 8);
    buf b = st_raw(js, "abcdefgh", i == 3 ? 4 : 8);
    tio_file f;
    TU_CHECK(tio_st_parse(b.p, b.n, &f, err, sizeof err) == 0 &&
                 !strcmp(tio_dtype_name(f.t[0].dtype), sp[i][1]),
             "dtype %s reads as %s (%s)", sp[i][0], sp[i][1], err);
    tio_file_free(&f);
    free(b.p);
  }
  /* known but unused dtypes are listed, not refused */
  buf b = st_raw("{\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", "12345678", 8);
  tio_file f;
  TU_CHECK(tio_st_parse(b.p, b.n, &f, err, sizeof err) == 0 && f.t[0].dtype == MXF_DTYPE_INVALID,
           "I64 listed");
  tio_file_free(&f);
  free(b.p);
}

static void test_st_hostile(void) {
  char d[64] = {0};
  st_refuses(st_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                    d, 12),
             "overlap", "overlapping offsets");
  st_refuses(st_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", d, 12),
             "past the data", "offsets outside");
  st_refuses(st_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", d, 12), "end before",
             "end before begin");
  st_refuses(st_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", d, 12), "needs 12",
             "span mismatch");
  st_refuses(
      st_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", d, 8),
      "overflow", "shape overflow");
  st_refuses(st_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,8]}}", d, 8),
             "not a non-negative integer", "huge dim");
  st_refuses(st_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,8]}}", d, 8),
             "not a non-negative integer", "negative dim");
  st_refuses(st_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8.5]}}", d, 8), "integers",
             "fractional offset");
  st_refuses(st_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", d, 8), "[begin, end]",
             "one offset");
  st_refuses(st_raw("{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", d, 8), "unknown dtype",
             "unknown dtype");
  st_refuses(st_raw("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", d, 8), "dtype", "missing dtype");
  st_refuses(st_raw("{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", d, 2), "whole bytes",
             "odd F4 count");
  st_refuses(st_raw("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", d, 1),
             "dimensions", "too many dims");
  st_refuses(st_raw("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                    "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                    d, 2),
             "twice", "duplicate name");
  st_refuses(st_raw("{\"__metadata__\":{\"k\":1}}", d, 0), "not a string", "metadata value not a string");
  st_refuses(st_raw("{\"__metadata__\":[]}", d, 0), "not an object", "metadata not an object");
  st_refuses(st_raw("{\"a\":7}", d, 0), "not an object", "entry not an object");
  st_refuses(st_raw("[1,2]", d, 0), "JSON object", "array header");
  st_refuses(st_raw("{\"a\":", d, 0), "not valid JSON", "broken JSON");
  st_refuses(st_raw("{} x", d, 0), "after the JSON", "text after JSON");
  {
    buf b = st_raw("{}", d, 0);
    b.p[0] = 0xFF, b.p[1] = 0xFF, b.p[2] = 0xFF; /* 16 MiB header in a 10-byte file */
    st_refuses(b, "past the end", "header length beyond file");
  }
  {
    buf b = st_raw("{}", d, 0);
    b.p[3] = 0x10; /* 256 MiB: above the cap */
    st_refuses(b, "limit", "absurd header length");
  }
  {
    buf b = st_raw("{}", d, 0);
    b.p[7] = 0x80; /* 2^63 */
    st_refuses(b, "limit", "2^63 header length");
  }
  /* empty header object: a file with no tensors is fine */
  buf e = st_raw("{}      ", d, 0);
  tio_file f;
  TU_CHECK(tio_st_parse(e.p, e.n, &f, err, sizeof err) == 0 && f.n == 0, "empty safetensors: %s", err);
  tio_file_free(&f);
  free(e.p);
  /* every truncation of a valid file */
  buf whole = st_raw(
      "{\"__metadata__\":{\"a\":\"b\"},\"x\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]}}",
      "0123456789ab", 12);
  for (size_t n = 0; n < whole.n; ++n) {
    uint8_t *cut = tu_malloc(n + 1);
    memcpy(cut, whole.p, n);
    int rc = tio_st_parse(cut, n, &f, err, sizeof err);
    TU_CHECK(rc == -1 && err[0], "safetensors truncated to %zu of %zu bytes: accepted", n, whole.n);
    if (!rc) tio_file_free(&f);
    free(cut);
  }
  for (int rep = 0; rep < 3000; ++rep) {
    uint8_t *b = tu_malloc(whole.n);
    memcpy(b, whole.p, whole.n);
    int flips = (int)tu_range(&rng, 1, 4);
    for (int k = 0; k < flips; ++k)
      b[tu_range(&rng, 0, (int64_t)whole.n - 1)] = (uint8_t)tu_u32(&rng);
    if (tio_st_parse(b, whole.n, &f, err, sizeof err) == 0) {
      for (int i = 0; i < f.n; ++i)
        TU_CHECK(f.t[i].nbytes <= whole.n, "flipped safetensors: data within file");
      tio_file_free(&f);
    } else {
      TU_CHECK(err[0] != 0, "flipped safetensors: a refusal has a message");
    }
    free(b);
  }
  free(whole.p);
}

/* ------------------------------------------------------------ files */
/* Entries of dir ("." and ".." aside), or only those whose names start with '.'. */
static int count_names(const char *dir, int hidden_only) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && (!hidden_only || e->d_name[0] == '.')) ++n;
  closedir(d);
  return n;
}

static int count_entries(const char *dir) { return count_names(dir, 0); }

static void test_files(void) {
  char root[] = "/tmp/mxf_tio_XXXXXX";
  if (!mkdtemp(root)) {
    TU_CHECK(0, "mkdtemp failed");
    return;
  }
  char path[1024], out[512];
  float v[35];
  for (int i = 0; i < 35; ++i)
    v[i] = (float)tu_normal(&rng);
  int64_t sh[2] = {5, 7};
  uint16_t bf[35];
  for (int i = 0; i < 35; ++i)
    bf[i] = (uint16_t)tu_u32(&rng);
  tio_tensor ts[2] = {tio_tensor_view("x", MXF_F32, 2, sh, v), tio_tensor_view("y", MXF_BF16, 2, sh, bf)};

  /* directory of .npy files, created on demand */
  snprintf(out, sizeof out, "%s/outdir", root);
  TU_CHECK(tio_save(out, ts, 2, NULL, err, sizeof err) == 0, "save dir: %s", err);
  TU_CHECK(count_entries(out) == 2, "two files and no temporaries (%d)", count_entries(out));
  tio_file f;
  snprintf(path, sizeof path, "%s/x.npy", out);
  TU_CHECK(tio_load(path, &f, err, sizeof err) == 0 && f.n == 1 && !strcmp(f.t[0].name, "x") &&
               !memcmp(f.t[0].data, v, sizeof v),
           "load x.npy: %s", err);
  tio_file_free(&f);

  /* safetensors file */
  snprintf(out, sizeof out, "%s/all.safetensors", root);
  TU_CHECK(tio_save(out, ts, 2, "{\"k\":\"v\"}", err, sizeof err) == 0, "save safetensors: %s", err);
  TU_CHECK(tio_load(out, &f, err, sizeof err) == 0 && f.n == 2 && tio_file_find(&f, "y") &&
               !memcmp(tio_file_find(&f, "y")->data, bf, sizeof bf),
           "load safetensors: %s", err);
  tio_file_free(&f);

  /* all or nothing: the second tensor cannot be written, so neither is */
  snprintf(out, sizeof out, "%s/partial", root);
  tio_tensor bad[2] = {ts[0], tio_tensor_view("z", MXF_DTYPE_INVALID, 2, sh, v)};
  TU_CHECK(tio_save(out, bad, 2, NULL, err, sizeof err) == -1 && strstr(err, "z.npy"), "bad save refused: %s",
           err);
  TU_CHECK(count_entries(out) == 0, "nothing written after a failed save (%d entries)", count_entries(out));
  snprintf(out, sizeof out, "%s/bad.safetensors", root);
  TU_CHECK(tio_save(out, bad, 2, NULL, err, sizeof err) == -1, "bad safetensors save refused");
  TU_CHECK(access(out, F_OK) != 0, "no safetensors file after a failed save");
  tio_tensor evil = tio_tensor_view("../evil", MXF_F32, 2, sh, v);
  snprintf(out, sizeof out, "%s/evil", root);
  TU_CHECK(tio_save(out, &evil, 1, NULL, err, sizeof err) == -1 && strstr(err, "file name"),
           "'../evil' refused");

  /* an existing file in place of a directory */
  snprintf(out, sizeof out, "%s/x_is_a_file", root);
  FILE *fp = fopen(out, "wb");
  fputs("hi", fp);
  fclose(fp);
  TU_CHECK(tio_save(out, ts, 1, NULL, err, sizeof err) == -1 && strstr(err, "not a directory"),
           "file in the way: %s", err);

  /* messages name the file */
  snprintf(path, sizeof path, "%s/trunc.safetensors", root);
  fp = fopen(path, "wb");
  fwrite("\x40\x00\x00\x00\x00\x00\x00\x00{}", 1, 10, fp);
  fclose(fp);
  TU_CHECK(tio_load(path, &f, err, sizeof err) == -1 && strstr(err, path) && strstr(err, "past the end"),
           "load names the file: %s", err);
  snprintf(path, sizeof path, "%s/fake.npy", root);
  fp = fopen(path, "wb");
  fputs("not numpy", fp);
  fclose(fp);
  TU_CHECK(tio_load(path, &f, err, sizeof err) == -1 && strstr(err, path) && strstr(err, "not a .npy"),
           "fake npy: %s", err);
  snprintf(path, sizeof path, "%s/missing.npy", root);
  TU_CHECK(tio_load(path, &f, err, sizeof err) == -1 && strstr(err, "cannot open"), "missing file: %s", err);
  TU_CHECK(tio_load(root, &f, err, sizeof err) == -1 && strstr(err, "not a regular file"), "directory: %s",
           err);

  /* clean up */
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  TU_CHECK(system(cmd) == 0, "cleanup");
}

/* A tensor borrowed at an odd offset is copied to aligned memory when asked; an aligned
 * one stays where it is; released pages of a loaded file still read the same. */
static void test_borrow(const char *root) {
  uint8_t *b = tu_malloc(4 * 64 + 1);
  for (int i = 0; i < 4 * 64 + 1; ++i)
    b[i] = (uint8_t)i;
  int64_t shape[1] = {64};
  tio_tensor t = tio_tensor_view("odd", MXF_F32, 1, shape, b + 1);
  TU_CHECK(tio_tensor_aligned(&t, TIO_DATA_ALIGN, "odd", err, sizeof err) == 0 && t.own == t.data &&
               ((uintptr_t)t.data & 63) == 0 && !memcmp(t.data, b + 1, 4 * 64),
           "a misaligned tensor is copied to aligned memory");
  free(t.own);
  t = tio_tensor_view("even", MXF_F32, 1, shape, b);
  TU_CHECK(tio_tensor_aligned(&t, TIO_DATA_ALIGN, "even", err, sizeof err) == 0 && !t.own && t.data == b,
           "an aligned tensor stays borrowed");
  free(b);

  char path[1024];
  snprintf(path, sizeof path, "%s/big", root);
  enum { N = 3 << 18 }; /* 3 MiB of f32: pages wholly inside the data */
  float *v = tu_malloc(N * sizeof(float));
  for (int i = 0; i < N; ++i)
    v[i] = (float)i;
  tio_tensor x = tio_tensor_view("big", MXF_F32, 1, (int64_t[]){N}, v);
  TU_CHECK(tio_save(path, &x, 1, NULL, err, sizeof err) == 0, "save big: %s", err);
  snprintf(path, sizeof path, "%s/big/big.npy", root);
  tio_file f;
  TU_CHECK(tio_load(path, &f, err, sizeof err) == 0 && f.map && !f.t[0].own &&
               (const uint8_t *)f.t[0].data > (const uint8_t *)f.map,
           "loaded tensor borrows the mapping: %s", err);
  if (f.map) {
    tio_file_release(&f, f.t[0].data, f.t[0].nbytes);
    TU_CHECK(!memcmp(f.t[0].data, v, N * sizeof(float)), "released pages read the file's bytes again");
    tio_file_free(&f);
  }
  free(v);
}

/* Entries of dir whose names start with '.' (temporaries), "." and ".." aside. */
static int count_hidden(const char *dir) { return count_names(dir, 1); }

/* An output file's life with either kind of temporary: invisible (unnamed) or hidden
 * (named) while written, gone after a discard, linked or renamed over an existing file
 * with mode 0666 & ~umask. */
static void test_out_files(const char *root) {
  for (int named = 0; named < 2; ++named) {
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/out%d", root, named);
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/f.npy", dir);
    tio_out o;
    TU_CHECK(tio_out_open(&o, path, named, err, sizeof err) == 0, "open (named %d): %s", named, err);
    TU_CHECK(tio_out_write(&o, "hello", 5, err, sizeof err) == 0, "write: %s", err);
    TU_CHECK(count_entries(dir) == named && count_hidden(dir) == named && !tio_out_temp_name(&o) == !named,
             "while written: %d entries (named %d)", count_entries(dir), named);
    tio_out_discard(&o);
    TU_CHECK(count_entries(dir) == 0, "discarded: %d entries left (named %d)", count_entries(dir), named);

    FILE *fp = fopen(path, "wb");
    fputs("old contents", fp);
    fclose(fp);
    chmod(path, 0600);
    const mode_t mask = umask(022);
    TU_CHECK(tio_out_open(&o, path, named, err, sizeof err) == 0 &&
                 tio_out_write(&o, "new", 3, err, sizeof err) == 0 &&
                 tio_out_finish(&o, err, sizeof err) == 0 && tio_out_commit(&o, err, sizeof err) == 0,
             "replace (named %d): %s", named, err);
    tio_out_discard(&o);
    umask(mask);
    struct stat st;
    char got[16] = {0};
    fp = fopen(path, "rb");
    size_t n = fp ? fread(got, 1, sizeof got, fp) : 0;
    if (fp) fclose(fp);
    TU_CHECK(n == 3 && !memcmp(got, "new", 3) && stat(path, &st) == 0 && (st.st_mode & 0777) == 0644 &&
                 count_entries(dir) == 1,
             "replaced with mode 0644 and nothing else left (named %d, mode %o, %d entries)", named,
             (unsigned)(st.st_mode & 0777), count_entries(dir));
  }

  /* a whole save through hidden temporaries: the files, and on an error nothing */
  float v[6] = {1, 2, 3, 4, 5, 6};
  int64_t sh[2] = {2, 3};
  tio_tensor ts[2] = {tio_tensor_view("x", MXF_F32, 2, sh, v),
                      tio_tensor_view("z", MXF_DTYPE_INVALID, 2, sh, v)};
  char out[600];
  snprintf(out, sizeof out, "%s/named", root);
  TU_CHECK(tio_save_files(out, ts, 1, NULL, 1, err, sizeof err) == 0 && count_entries(out) == 1,
           "save through a named temporary: %s", err);
  snprintf(out, sizeof out, "%s/named_bad", root);
  TU_CHECK(tio_save_files(out, ts, 2, NULL, 1, err, sizeof err) == -1 && count_entries(out) == 0,
           "a failed save through named temporaries leaves nothing (%d entries)", count_entries(out));
}

/* A process killed by `sig` while its hidden temporary is open leaves nothing behind. */
static void test_named_signal(const char *root, int sig) {
  char dir[600], path[700];
  snprintf(dir, sizeof dir, "%s/sig%d", root, sig);
  mkdir(dir, 0777);
  snprintf(path, sizeof path, "%s/f.npy", dir);
  int ready[2], go[2]; /* the child says it wrote; the parent, that it looked */
  if (pipe(ready)) return;
  if (pipe(go)) {
    close(ready[0]), close(ready[1]);
    return;
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]), close(go[1]);
    tio_out o;
    static uint8_t block[1 << 16];
    if (sig == SIGXFSZ) { /* the signal comes from the write past ulimit -f */
      struct rlimit rl = {1 << 16, 1 << 16};
      setrlimit(RLIMIT_FSIZE, &rl);
    }
    if (tio_out_open(&o, path, 1, err, sizeof err) || tio_out_write(&o, block, sizeof block, err, sizeof err))
      _exit(3);
    if (write(ready[1], "r", 1) != 1) _exit(4);
    char g;
    if (read(go[0], &g, 1) != 1) _exit(5);
    if (sig == SIGXFSZ) tio_out_write(&o, block, sizeof block, err, sizeof err);
    for (;;)
      pause();
  }
  close(ready[1]), close(go[0]);
  char c;
  const int got_ready = read(ready[0], &c, 1) == 1;
  close(ready[0]);
  TU_CHECK(got_ready && count_hidden(dir) == 1, "signal %d: the temporary exists while written", sig);
  if (write(go[1], "g", 1) != 1) kill(pid, SIGKILL); /* then the write past the limit */
  close(go[1]);
  if (sig != SIGXFSZ) kill(pid, sig);
  int status = 0;
  waitpid(pid, &status, 0);
  TU_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == sig, "signal %d: the process died of it (status %#x)",
           sig, status);
  TU_CHECK(count_entries(dir) == 0, "signal %d: %d entries left", sig, count_entries(dir));
}

int main(void) {
  tu_rng_init(&rng, tu_seed());
  test_npy_roundtrip();
  test_npy_headers();
  test_npy_hostile();
  test_tensor_as();
  test_st_roundtrip();
  test_st_hostile();
  test_files();
  char root[] = "/tmp/mxf_tio_out_XXXXXX";
  if (mkdtemp(root)) {
    test_borrow(root);
    test_out_files(root);
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGXFSZ};
    for (int i = 0; i < 4; ++i)
      test_named_signal(root, sigs[i]);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    TU_CHECK(system(cmd) == 0, "cleanup");
  } else {
    TU_CHECK(0, "mkdtemp failed");
  }
  return tu_finish("test_tensor_io");
}
