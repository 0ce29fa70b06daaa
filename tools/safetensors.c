/*
 * safetensors.c — safetensors reader and writer.
 *
 * Layout: an 8-byte little-endian header length N, N bytes of JSON (an object: tensor
 * name -> {"dtype", "shape", "data_offsets": [begin, end]}, plus an optional
 * "__metadata__" map of strings), then the data; offsets count from the end of the
 * header. F4 (e2m1) shapes count values while storage packs two per byte.
 *
 * The JSON goes through Debian's cJSON. Every number that becomes a size must be an
 * exact non-negative integer; every tensor's byte range must lie inside the data and
 * match its shape; ranges must not overlap.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_io.h"

/* Dtype spellings: ours and the ones seen in the wild. bits = 0: not a safetensors dtype. */
static const struct {
  const char *name;
  mxf_dtype dt;
  int bits, raw;
} st_dtypes[] = {
    {"F32", MXF_F32, 32, 0},
    {"F16", MXF_F16, 16, 0},
    {"BF16", MXF_BF16, 16, 0},
    {"U8", MXF_U8, 8, 1},
    {"I8", MXF_I8, 8, 1},
    {"F8_E4M3", MXF_E4M3, 8, 0},
    {"F8_E4M3FN", MXF_E4M3, 8, 0},
    {"F8_E5M2", MXF_E5M2, 8, 0},
    {"F8_E8M0", MXF_E8M0, 8, 0},
    {"F8_E8M0FNU", MXF_E8M0, 8, 0},
    {"F4", MXF_E2M1, 4, 0},
    {"F4_E2M1", MXF_E2M1, 4, 0},
    {"F4_E2M1FN", MXF_E2M1, 4, 0},
    /* real safetensors dtypes mxfuse does not compute with: listed, not usable */
    {"F64", MXF_DTYPE_INVALID, 64, 0},
    {"I64", MXF_DTYPE_INVALID, 64, 0},
    {"U64", MXF_DTYPE_INVALID, 64, 0},
    {"I32", MXF_I32, 32, 0}, /* group offsets and counts */
    {"U32", MXF_DTYPE_INVALID, 32, 0},
    {"I16", MXF_DTYPE_INVALID, 16, 0},
    {"U16", MXF_DTYPE_INVALID, 16, 1},
    {"BOOL", MXF_DTYPE_INVALID, 8, 0},
    {"F8_E4M3FNUZ", MXF_DTYPE_INVALID, 8, 0},
    {"F8_E5M2FNUZ", MXF_DTYPE_INVALID, 8, 0},
    {"F6_E2M3", MXF_DTYPE_INVALID, 6, 0},
    {"F6_E3M2", MXF_DTYPE_INVALID, 6, 0},
    {"C64", MXF_DTYPE_INVALID, 64, 0},
};

#define ST_MAX_EXACT 9007199254740992.0 /* 2^53: beyond it JSON numbers are not exact */

static int exact_uint(const cJSON *v, int64_t *out) {
  if (!cJSON_IsNumber(v)) return 0;
  double d = v->valuedouble;
  if (!(d >= 0.0) || d > ST_MAX_EXACT || floor(d) != d) return 0;
  *out = (int64_t)d;
  return 1;
}

typedef struct st_range {
  int64_t begin, end;
  int idx;
} st_range;

static int cmp_range(const void *a, const void *b) {
  const st_range *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return (x->end > y->end) - (x->end < y->end);
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(((const tio_tensor *)a)->name, ((const tio_tensor *)b)->name);
}

static int parse_entry(const cJSON *e, tio_tensor *t, st_range *r, int64_t datalen, char *err,
                       size_t errlen) {
  const char *nm = e->string;
  if (!cJSON_IsObject(e)) return tio_errf(err, errlen, "tensor '%s': entry is not an object", nm);
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
  const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
  if (!cJSON_IsString(dt)) return tio_errf(err, errlen, "tensor '%s': missing string \"dtype\"", nm);
  if (!cJSON_IsArray(sh)) return tio_errf(err, errlen, "tensor '%s': missing array \"shape\"", nm);
  if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
    return tio_errf(err, errlen, "tensor '%s': \"data_offsets\" must be [begin, end]", nm);
  int k = -1;
  for (size_t i = 0; i < sizeof st_dtypes / sizeof *st_dtypes; ++i)
    if (!strcmp(st_dtypes[i].name, dt->valuestring)) k = (int)i;
  if (k < 0)
    return tio_errf(err, errlen,
                    "tensor '%s': unknown dtype \"%.40s\" (mxfuse reads F32 F16 BF16 U8 I8 "
                    "F8_E4M3 F8_E5M2 F8_E8M0 F4)",
                    nm, dt->valuestring);
  int ndim = cJSON_GetArraySize(sh);
  if (ndim > TIO_MAX_DIMS)
    return tio_errf(err, errlen, "tensor '%s': %d dimensions; at most %d are read", nm, ndim, TIO_MAX_DIMS);
  int i = 0;
  const cJSON *d;
  cJSON_ArrayForEach(d, sh) {
    if (!exact_uint(d, &t->shape[i]))
      return tio_errf(err, errlen, "tensor '%s': shape[%d] is not a non-negative integer", nm, i);
    ++i;
  }
  t->ndim = ndim;
  int64_t numel = tio_shape_numel(ndim, t->shape);
  if (numel < 0) return tio_errf(err, errlen, "tensor '%s': element count of the shape overflows", nm);
  int64_t nbytes = tio_bits_to_bytes(numel, st_dtypes[k].bits);
  if (nbytes < 0)
    return tio_errf(err, errlen, "tensor '%s': %s shape does not fill whole bytes or overflows", nm,
                    st_dtypes[k].name);
  if (!exact_uint(cJSON_GetArrayItem(off, 0), &r->begin) || !exact_uint(cJSON_GetArrayItem(off, 1), &r->end))
    return tio_errf(err, errlen, "tensor '%s': data_offsets must be non-negative integers", nm);
  if (r->end < r->begin)
    return tio_errf(err, errlen, "tensor '%s': data_offsets [%lld, %lld] end before they begin", nm,
                    (long long)r->begin, (long long)r->end);
  if (r->end > datalen)
    return tio_errf(err, errlen, "tensor '%s': data_offsets [%lld, %lld] point past the data (%lld bytes)",
                    nm, (long long)r->begin, (long long)r->end, (long long)datalen);
  if (r->end - r->begin != nbytes)
    return tio_errf(err, errlen, "tensor '%s': data_offsets span %lld bytes; %s shape needs %lld", nm,
                    (long long)(r->end - r->begin), st_dtypes[k].name, (long long)nbytes);
  t->dtype = st_dtypes[k].dt;
  t->raw_bits = st_dtypes[k].raw ? st_dtypes[k].bits : 0;
  snprintf(t->file_dtype, sizeof t->file_dtype, "%s", st_dtypes[k].name);
  t->nbytes = (size_t)nbytes;
  return 0;
}

int tio_st_parse(const uint8_t *buf, size_t len, tio_file *f, char *err, size_t errlen) {
  memset(f, 0, sizeof *f);
  if (len < 8) return tio_errf(err, errlen, "truncated: %zu bytes, too short for a safetensors header", len);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i)
    hlen = hlen << 8 | buf[i];
  if (hlen > TIO_ST_HEADER_MAX)
    return tio_errf(err, errlen,
                    "header length %llu exceeds the limit of %u bytes (not a safetensors "
                    "file?)",
                    (unsigned long long)hlen, TIO_ST_HEADER_MAX);
  if (hlen > len - 8)
    return tio_errf(err, errlen, "truncated: header length %llu runs past the end of the file (%zu bytes)",
                    (unsigned long long)hlen, len);
  if (hlen < 2 || buf[8] != '{') return tio_errf(err, errlen, "header does not start with a JSON object");
  const char *json = (const char *)buf + 8, *jend = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(json, (size_t)hlen, &jend, 0);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    long pos = (at && at >= json && at <= json + hlen) ? (long)(at - json) : -1;
    return tio_errf(err, errlen, "header is not valid JSON (near byte %ld of %llu)", pos,
                    (unsigned long long)hlen);
  }
  int rc = 0;
  for (const char *p = jend; p && p < json + hlen; ++p)
    if (*p != ' ' && *p != '\n' && *p != '\t' && *p != '\r' && *p != 0) {
      rc = tio_errf(err, errlen, "header has text after the JSON object (byte %ld)", (long)(p - json));
      break;
    }
  if (!rc && !cJSON_IsObject(root)) rc = tio_errf(err, errlen, "header is not a JSON object");
  int64_t datalen = (int64_t)(len - 8 - hlen);
  int count = 0;
  const cJSON *e;
  if (!rc) cJSON_ArrayForEach(e, root) count += !(e->string && !strcmp(e->string, "__metadata__"));
  st_range *ranges = NULL;
  if (!rc) {
    f->t = calloc((size_t)(count ? count : 1), sizeof *f->t);
    ranges = calloc((size_t)(count ? count : 1), sizeof *ranges);
    if (!f->t || !ranges) rc = tio_errf(err, errlen, "out of memory");
  }
  int have_meta = 0;
  if (!rc) cJSON_ArrayForEach(e, root) {
      if (!e->string) {
        rc = tio_errf(err, errlen, "header entry without a name");
        break;
      }
      if (!strcmp(e->string, "__metadata__")) {
        if (have_meta++) {
          rc = tio_errf(err, errlen, "\"__metadata__\" given twice");
          break;
        }
        if (!cJSON_IsObject(e)) {
          rc = tio_errf(err, errlen, "\"__metadata__\" is not an object");
          break;
        }
        const cJSON *m;
        cJSON_ArrayForEach(m, e) if (!cJSON_IsString(m)) {
          rc = tio_errf(err, errlen, "\"__metadata__\" value '%s' is not a string",
                        m->string ? m->string : "");
          break;
        }
        if (rc) break;
        f->metadata_json = cJSON_PrintUnformatted(e);
        if (!f->metadata_json) {
          rc = tio_errf(err, errlen, "out of memory");
          break;
        }
        continue;
      }
      tio_tensor *t = &f->t[f->n];
      if (parse_entry(e, t, &ranges[f->n], datalen, err, errlen)) {
        rc = -1;
        break;
      }
      ranges[f->n].idx = f->n;
      t->name = strdup(e->string);
      ++f->n;
      if (!t->name) {
        rc = tio_errf(err, errlen, "out of memory");
        break;
      }
    }
  if (!rc && f->n > 1) {
    qsort(ranges, (size_t)f->n, sizeof *ranges, cmp_range);
    int64_t reach = 0, reach_begin = 0;
    int reach_idx = -1;
    for (int i = 0; i < f->n; ++i) {
      if (ranges[i].begin < reach && ranges[i].end > ranges[i].begin) {
        rc = tio_errf(err, errlen,
                      "tensors '%s' and '%s' overlap in the data (bytes %lld..%lld and %lld..%lld)",
                      f->t[reach_idx].name, f->t[ranges[i].idx].name, (long long)reach_begin,
                      (long long)reach, (long long)ranges[i].begin, (long long)ranges[i].end);
        break;
      }
      if (ranges[i].end > reach) {
        reach = ranges[i].end;
        reach_begin = ranges[i].begin;
        reach_idx = ranges[i].idx;
      }
    }
  }
  if (!rc && f->n > 1) {
    /* duplicate names: cJSON keeps both; sort a copy of the pointers */
    tio_tensor *sorted = malloc(sizeof *sorted * (size_t)f->n);
    if (!sorted) {
      rc = tio_errf(err, errlen, "out of memory");
    } else {
      memcpy(sorted, f->t, sizeof *sorted * (size_t)f->n);
      qsort(sorted, (size_t)f->n, sizeof *sorted, cmp_name);
      for (int i = 1; i < f->n; ++i)
        if (!strcmp(sorted[i - 1].name, sorted[i].name)) {
          rc = tio_errf(err, errlen, "tensor '%s' appears twice in the header", sorted[i].name);
          break;
        }
      free(sorted);
    }
  }
  /* the tensors borrow buf (which outlives them) once the whole header checked out */
  const uint8_t *data = buf + 8 + hlen;
  for (int i = 0; !rc && i < f->n; ++i)
    f->t[ranges[i].idx].data = data + ranges[i].begin;
  free(ranges);
  cJSON_Delete(root);
  if (rc) tio_file_free(f);
  return rc;
}

/* ------------------------------------------------------------ writer */
static const char *st_dtype_name(mxf_dtype dt) {
  switch (dt) {
  case MXF_F32: return "F32";
  case MXF_F16: return "F16";
  case MXF_BF16: return "BF16";
  case MXF_U8: return "U8";
  case MXF_I8: return "I8";
  case MXF_E4M3: return "F8_E4M3";
  case MXF_E5M2: return "F8_E5M2";
  case MXF_E8M0: return "F8_E8M0";
  case MXF_E2M1:
  case MXF_E2M1X2: return "F4";
  default: return NULL;
  }
}

int tio_st_serialize(const tio_tensor *ts, int n, const char *metadata_json, uint8_t **out, size_t *len,
                     char *err, size_t errlen) {
  cJSON *root = cJSON_CreateObject();
  if (!root) return tio_errf(err, errlen, "out of memory");
  int rc = 0;
  if (metadata_json) {
    cJSON *m = cJSON_Parse(metadata_json);
    if (!cJSON_IsObject(m)) {
      cJSON_Delete(m);
      cJSON_Delete(root);
      return tio_errf(err, errlen, "metadata is not a JSON object");
    }
    cJSON_AddItemToObject(root, "__metadata__", m);
  }
  int64_t offset = 0;
  for (int i = 0; i < n && !rc; ++i) {
    const tio_tensor *t = &ts[i];
    const char *dn = st_dtype_name(t->dtype);
    if (!dn) {
      rc = tio_errf(err, errlen, "tensor '%s': cannot write dtype %s", t->name, tio_dtype_name(t->dtype));
      break;
    }
    if (!t->name || !*t->name || !strcmp(t->name, "__metadata__") ||
        cJSON_GetObjectItemCaseSensitive(root, t->name)) {
      rc = tio_errf(err, errlen, "tensor name '%s' is empty, reserved or repeated", t->name ? t->name : "");
      break;
    }
    int64_t shape[TIO_MAX_DIMS];
    for (int d = 0; d < t->ndim; ++d)
      shape[d] = t->shape[d];
    if (t->dtype == MXF_E2M1X2 && t->ndim > 0) shape[t->ndim - 1] *= 2; /* F4 shapes count values */
    int64_t numel = tio_shape_numel(t->ndim, shape);
    int64_t nbytes = tio_dtype_bytes(t->dtype == MXF_E2M1X2 ? MXF_E2M1 : t->dtype, numel);
    if (numel < 0 || nbytes < 0 || (t->dtype == MXF_E2M1 && numel % 2)) {
      rc = tio_errf(err, errlen, "tensor '%s': bad shape for %s", t->name, dn);
      break;
    }
    cJSON *o = cJSON_CreateObject(), *sh = cJSON_CreateArray(), *off = cJSON_CreateArray();
    cJSON_AddItemToObject(root, t->name, o);
    if (!o || !sh || !off || !cJSON_AddStringToObject(o, "dtype", dn)) rc = -1;
    cJSON_AddItemToObject(o, "shape", sh);
    for (int d = 0; d < t->ndim; ++d)
      cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)shape[d]));
    cJSON_AddItemToArray(off, cJSON_CreateNumber((double)offset));
    cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(offset + nbytes)));
    cJSON_AddItemToObject(o, "data_offsets", off);
    if (rc) tio_errf(err, errlen, "out of memory");
    offset += nbytes;
  }
  char *js = rc ? NULL : cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  if (rc) return -1;
  if (!js) return tio_errf(err, errlen, "out of memory");
  size_t jl = strlen(js);
  size_t hlen = (8 + jl + 7) / 8 * 8 - 8; /* data starts 8-byte aligned, padded with spaces */
  size_t total = 8 + hlen + (size_t)offset;
  uint8_t *b = malloc(total);
  if (!b) {
    free(js);
    return tio_errf(err, errlen, "out of memory");
  }
  for (int i = 0; i < 8; ++i)
    b[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
  memcpy(b + 8, js, jl);
  memset(b + 8 + jl, ' ', hlen - jl);
  free(js);
  size_t pos = 8 + hlen;
  for (int i = 0; i < n; ++i) {
    int64_t nb = tio_dtype_bytes(ts[i].dtype == MXF_E2M1X2 ? MXF_E2M1X2 : ts[i].dtype, tio_numel(&ts[i]));
    if (nb) memcpy(b + pos, ts[i].data, (size_t)nb);
    pos += (size_t)nb;
  }
  *out = b;
  *len = total;
  return 0;
}
