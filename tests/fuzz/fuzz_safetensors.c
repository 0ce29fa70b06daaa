/*
 * fuzz_safetensors.c — libFuzzer target for the safetensors reader (tools/safetensors.c).
 *
 * Any input must either parse or fail with a message; an accepted file's tensors point
 * into the input (the parser borrows its buffer, which outlives them) and must survive a
 * write + re-read with the same tensors (names, dtypes, shapes, bytes) and metadata.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tio_file f;
  char err[TIO_ERR_LEN];
  if (tio_st_parse(data, size, &f, err, sizeof err)) {
    if (!err[0]) abort();
    return 0;
  }
  int writable = 1;
  for (int i = 0; i < f.n; ++i) {
    const tio_tensor *t = &f.t[i];
    if (t->nbytes && !t->data) abort();
    if (t->own || (const uint8_t *)t->data < data || t->nbytes > size ||
        (size_t)((const uint8_t *)t->data - data) > size - t->nbytes)
      abort(); /* borrowed, and inside the input */
    if (f.t[i].dtype == MXF_DTYPE_INVALID || !f.t[i].name[0]) writable = 0;
  }
  if (writable) {
    uint8_t *buf;
    size_t len;
    if (tio_st_serialize(f.t, f.n, f.metadata_json, &buf, &len, err, sizeof err) == 0) {
      tio_file g;
      if (tio_st_parse(buf, len, &g, err, sizeof err)) abort();
      if (g.n != f.n) abort();
      for (int i = 0; i < f.n; ++i) {
        const tio_tensor *a = &f.t[i], *b = tio_file_find(&g, a->name);
        if (!b || b->dtype != a->dtype || b->ndim != a->ndim || b->nbytes != a->nbytes ||
            memcmp(b->shape, a->shape, sizeof(int64_t) * (size_t)a->ndim) ||
            (a->nbytes && memcmp(a->data, b->data, a->nbytes)))
          abort();
      }
      if (!f.metadata_json != !g.metadata_json) abort();
      tio_file_free(&g);
      free(buf);
    }
  }
  tio_file_free(&f);
  return 0;
}
