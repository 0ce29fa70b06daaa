/*
 * fuzz_file.c — libFuzzer target for the whole file path of the CLI (tools/tensor_io.c):
 * bytes written to a file on disk, then tio_load (stat, open, map, tell .npy from
 * safetensors, parse) into tensors. The first input byte picks the file name's suffix
 * (odd: .npy, even: .safetensors); the rest is the file. Any input must load or fail
 * with a message; a loaded file's tensors lie inside its mapping, which every byte of
 * them is read from.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tensor_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  static char path[64];
  snprintf(path, sizeof path, "/tmp/mxf_fuzz_file_%d.%s", (int)getpid(),
           (data[0] & 1) ? "npy" : "safetensors");
  FILE *fp = fopen(path, "wb");
  if (!fp) abort();
  if (size > 1 && fwrite(data + 1, 1, size - 1, fp) != size - 1) abort();
  if (fclose(fp) != 0) abort();
  tio_file f;
  char err[TIO_ERR_LEN];
  err[0] = '\0';
  const int rc = tio_load(path, &f, err, sizeof err);
  unlink(path);
  if (rc) {
    if (!err[0]) abort(); /* every failure says why */
    return 0;
  }
  const uint8_t *map = f.map;
  unsigned sum = 0;
  for (int i = 0; i < f.n; ++i) {
    const tio_tensor *t = &f.t[i];
    if (t->nbytes && !t->data) abort();
    if (!t->nbytes) continue;
    if (t->own || (const uint8_t *)t->data < map || t->nbytes > f.map_len ||
        (size_t)((const uint8_t *)t->data - map) > f.map_len - t->nbytes)
      abort();
    for (size_t j = 0; j < t->nbytes; ++j)
      sum += ((const uint8_t *)t->data)[j];
    tio_file_release(&f, t->data, t->nbytes);
  }
  if (sum == 0xFFFFFFFFu) fputc(0, stderr); /* keeps the reads */
  tio_file_free(&f);
  return 0;
}
