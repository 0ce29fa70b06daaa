/*
 * fuzz_npy.c — libFuzzer target for the .npy reader (tools/npy.c).
 *
 * Any input must either parse or fail with a message; an accepted array points into the
 * input (the parser borrows its buffer, which outlives the tensor) and must survive a
 * write + re-read unchanged (name, dtype, shape, bytes). Built with
 * -fsanitize=fuzzer,address by tests/fuzz/fuzz.cmake; replay_main.c runs the same
 * function over the saved corpus in a plain build.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tio_tensor t;
  char err[TIO_ERR_LEN];
  if (tio_npy_parse(data, size, "x", &t, err, sizeof err)) {
    if (!err[0]) abort(); /* every failure says why */
    return 0;
  }
  if (t.nbytes && !t.data) abort();
  if (t.own || (const uint8_t *)t.data < data || t.nbytes > size ||
      (size_t)((const uint8_t *)t.data - data) > size - t.nbytes)
    abort(); /* borrowed, and inside the input */
  /* round trip through the writer for the dtypes mxfuse writes */
  if (t.dtype != MXF_DTYPE_INVALID) {
    uint8_t *buf;
    size_t len;
    if (tio_npy_serialize(&t, &buf, &len, err, sizeof err) == 0) {
      tio_tensor u;
      if (tio_npy_parse(buf, len, "x", &u, err, sizeof err)) abort();
      if (u.ndim != t.ndim || memcmp(u.shape, t.shape, sizeof(int64_t) * (size_t)t.ndim) ||
          u.nbytes != t.nbytes || (t.nbytes && memcmp(u.data, t.data, t.nbytes)))
        abort();
      tio_tensor_free(&u);
      free(buf);
    }
  }
  tio_tensor_free(&t);
  return 0;
}
