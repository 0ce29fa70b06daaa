/*
 * tensor_io.h — tensors in files, for the mxfuse CLI (not part of libmxfuse).
 *
 * One API over two formats:
 *   - NumPy .npy (versions 1.0, 2.0, 3.0; C order only): one array per file. Its dtype
 *     string often says only the storage width (ml_dtypes saves fp8 as '<V1', bf16 as
 *     '<V2'; plain numpy users save '|u1' / '<u2'), so such tensors come back "raw" and
 *     the caller names the dtype with tio_tensor_as().
 *   - safetensors: 8-byte little-endian header length, a JSON header (tensor name ->
 *     dtype, shape, data_offsets; optional "__metadata__" string map), then the data.
 *
 * Files are hostile input: every size, offset and shape is checked against the bytes
 * actually present, header sizes are capped, byte counts are computed without overflow.
 * A failing call returns -1 and writes a one-line message naming the file and the
 * problem into `err`; nothing is allocated for the caller then.
 *
 * Reading maps the file read-only and the tensors point into the mapping: memory does not
 * grow with the file. A tensor holds memory of its own only after a conversion
 * (tio_tensor_as, tio_tensor_aligned, tio_tensor_take).
 *
 * Writing goes to an unnamed file in the destination directory (O_TMPFILE) that is linked
 * into place at the end, so neither an error nor a killed run leaves anything behind;
 * where the filesystem has no O_TMPFILE, to a hidden temporary name that every error path
 * and SIGINT / SIGTERM / SIGHUP / SIGXFSZ remove (SIGKILL cannot be caught: such a run may
 * leave one there).
 */
#ifndef MXF_TENSOR_IO_H
#define MXF_TENSOR_IO_H

#include <stddef.h>
#include <stdint.h>

#include "mxfuse.h"

#define TIO_MAX_DIMS 8
/* Caps on header sizes: larger headers are refused before anything is allocated. */
#define TIO_NPY_HEADER_MAX (64u * 1024u)
#define TIO_ST_HEADER_MAX (100u * 1024u * 1024u)
#define TIO_ERR_LEN 512

typedef struct tio_tensor {
  char *name;          /* safetensors key; for .npy the file's base name without ".npy" */
  mxf_dtype dtype;     /* MXF_DTYPE_INVALID while raw with no default meaning            */
  int raw_bits;        /* 8 or 16 when the file states only the storage width (the dtype
                          may then be re-read with tio_tensor_as), else 0                  */
  char file_dtype[24]; /* the dtype as the file spells it ("F8_E4M3", "<V1")            */
  int ndim;
  int64_t shape[TIO_MAX_DIMS]; /* counts values (e2m1: values, storage packs two a byte) */
  const void *data;            /* the bytes: in the file's read-only mapping (or the parser's
                                  buffer), or in `own`                                      */
  void *own;                   /* memory the tensor owns (64-byte aligned; freed with it), or NULL */
  size_t nbytes;
} tio_tensor;

typedef struct tio_file {
  int n;
  tio_tensor *t;
  char *metadata_json; /* safetensors "__metadata__" as compact JSON, or NULL          */
  void *map;           /* the file mapped read-only, which the tensors borrow; unmapped by
                          tio_file_free                                                    */
  size_t map_len;
} tio_file;

/* The alignment the library asks of operand data (SPEC §1.1: 16-byte row starts). */
#define TIO_DATA_ALIGN 16

/* ------------------------------------------------------------ reading */
/* Reads a .npy or .safetensors file (told apart by its first bytes). */
int tio_load(const char *path, tio_file *f, char *err, size_t errlen);
/* Parsers over a buffer in memory (what tio_load and the fuzz targets call). `name`
 * becomes the tensor's name. Messages do not name a file. The tensors point into `buf`,
 * which must outlive them. */
int tio_npy_parse(const uint8_t *buf, size_t len, const char *name, tio_tensor *t, char *err, size_t errlen);
int tio_st_parse(const uint8_t *buf, size_t len, tio_file *f, char *err, size_t errlen);
void tio_tensor_free(tio_tensor *t);
void tio_file_free(tio_file *f);
/* The tensor called `name`, or NULL. */
tio_tensor *tio_file_find(const tio_file *f, const char *name);
/* Hands the memory of [p, p + n) of f's mapping back to the system (the pages wholly
 * inside it): for a caller that has read them and goes on, so that memory stays bounded
 * however large the file. The bytes stay readable (from the file again). */
void tio_file_release(const tio_file *f, const void *p, size_t n);
/* Gives the tensor the `nbytes` bytes at `own` (from tio_copy_aligned), which it then owns;
 * memory it owned before is freed. */
void tio_tensor_take(tio_tensor *t, void *own, size_t nbytes);
/* Copies the tensor's data to memory of its own when it is not `align`-aligned (a file's
 * tensor at an odd offset). -1 (message naming `what`) when out of memory. */
int tio_tensor_aligned(tio_tensor *t, size_t align, const char *what, char *err, size_t errlen);

/*
 * Gives the tensor the dtype `want` if its file allows it: the same dtype, or a raw /
 * uint8 / int8 tensor of the right width (8 bits: e4m3, e5m2, e8m0, u8, i8, e2m1x2;
 * 16 bits: bf16, f16). `want` = MXF_E2M1 from 8-bit storage means one code per byte
 * (ml_dtypes' float4_e2m1fn): the codes are checked (< 16) and packed two a byte.
 * `what` names the tensor in messages ("a.npy" or "in.safetensors:w").
 */
int tio_tensor_as(tio_tensor *t, mxf_dtype want, const char *what, char *err, size_t errlen);

/* ------------------------------------------------------------ element counts */
/* Number of values (product of the shape); -1 on overflow past 2^62. */
int64_t tio_numel(const tio_tensor *t);
/* Storage bytes of `numel` values of a dtype (e2m1: ceil(numel/2)); -1 if unknown. */
int64_t tio_dtype_bytes(mxf_dtype dt, int64_t numel);
/* Our dtype names: "f32", "bf16", "e4m3", ..., and the parse of them (INVALID if none). */
const char *tio_dtype_name(mxf_dtype dt);
mxf_dtype tio_dtype_parse(const char *s);

/* ------------------------------------------------------------ writing */
/* Fills a tensor that borrows `data` (tio_tensor_free must not be called on it). */
tio_tensor tio_tensor_view(const char *name, mxf_dtype dt, int ndim, const int64_t *shape, void *data);
/* Serializes to a malloc'd buffer (the caller frees *out). npy writes fp8 / e8m0 codes
 * as '|u1', bf16 as '<u2', e2m1 as one code per byte '|u1' (as ml_dtypes holds it). */
int tio_npy_serialize(const tio_tensor *t, uint8_t **out, size_t *len, char *err, size_t errlen);
int tio_st_serialize(const tio_tensor *ts, int n, const char *metadata_json, uint8_t **out, size_t *len,
                     char *err, size_t errlen);
/*
 * Saves tensors to `dest`: a path ending in ".safetensors" gets one file holding all of
 * them; anything else is a directory (created if missing) that gets NAME.npy per
 * tensor. Every file is first written (and fsync'd) unnamed in its final directory;
 * only when all are complete, and every final path is free or a regular file, are they
 * linked into place (an existing file is replaced atomically). New files take mode
 * 0666 & ~umask, an overwritten one too.
 */
int tio_save(const char *dest, const tio_tensor *ts, int n, const char *metadata_json, char *err,
             size_t errlen);
/* tio_save with the kind of file asked: named = 1 writes through hidden temporaries as
 * where the filesystem has no O_TMPFILE (what tests of that path call). */
int tio_save_files(const char *dest, const tio_tensor *ts, int n, const char *metadata_json, int named,
                   char *err, size_t errlen);

/* ------------------------------------------------------------ shared by npy.c / safetensors.c */
/* printf into err; returns -1 so that callers can write `return tio_errf(...)`. */
int tio_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* 64-byte aligned copy of n bytes (n may be 0); NULL when out of memory. */
void *tio_copy_aligned(const void *src, size_t n);
/* Bytes of a tensor of `numel` values with `bits` bits each; -1 on overflow or when
 * the values do not fill whole bytes. */
int64_t tio_bits_to_bytes(int64_t numel, int bits);
/* Product of dims; -1 if a dim is negative or the product overflows. */
int64_t tio_shape_numel(int ndim, const int64_t *shape);

/*
 * One output file on its way into place (what tio_save does per file). tio_out_open
 * opens an unnamed file in final_path's directory (O_TMPFILE), or, where the filesystem
 * has none or `named` asks for it, a hidden temporary ".BASE.XXXXXX" next to it, which
 * is registered with a handler of SIGINT, SIGTERM, SIGHUP and SIGXFSZ (installed where
 * the signal's action is the default) that unlinks it. tio_out_write writes (EINTR and
 * short writes retried); tio_out_finish sets the mode and fsyncs; tio_out_commit links
 * or renames the file to final_path, replacing a file there atomically, and closes it;
 * tio_out_discard closes it and removes the temporary. Each returns -1 with a message
 * naming final_path on an error (the file is then still to be discarded).
 */
typedef struct tio_out {
  int fd;
  char *final; /* malloc'd copy of final_path */
  int slot;    /* the registered temporary name (named files), or -1 */
} tio_out;
int tio_out_open(tio_out *o, const char *final_path, int named, char *err, size_t errlen);
int tio_out_write(tio_out *o, const void *buf, size_t len, char *err, size_t errlen);
int tio_out_finish(tio_out *o, char *err, size_t errlen);
int tio_out_commit(tio_out *o, char *err, size_t errlen);
void tio_out_discard(tio_out *o);
/* The temporary's name while a named file is open, else NULL (for tests). */
const char *tio_out_temp_name(const tio_out *o);

#endif /* MXF_TENSOR_IO_H */
