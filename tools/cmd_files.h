/*
 * cmd_files.h — what the file-based subcommands (gemm-amax, proj-rope, quantize,
 * dequantize, swizzle-scales, unswizzle-scales, inspect) share: finding operands in
 * input files, progress lines on a terminal, moving tensors to a device, comparing
 * codes for --check, and the JSON summary.
 *
 * An operand is named on the command line as
 *   FILE.npy                      the one array of that file
 *   FILE.safetensors              the tensor with the operand's default name (a, b, ...)
 *   FILE.safetensors:NAME         the tensor NAME of that file
 * or, when absent, found by its default name in the file given with --in.
 */
#ifndef MXF_CMD_FILES_H
#define MXF_CMD_FILES_H

#include <stdio.h>

#include "cli.h"
#include "tensor_io.h"

#define FC_MAX_FILES 16

typedef struct fc_ctx {
  const char *cmd;
  const char *in;          /* --in: default source of operands (a .safetensors file) */
  const char *out;         /* --out: where the outputs go (NULL: not saved) */
  const char *device_text; /* --device as typed ("auto" unless given) */
  tio_file files[FC_MAX_FILES];
  char *file_paths[FC_MAX_FILES];
  int nfiles;
  int json, check, progress;
  int32_t device;
} fc_ctx;

typedef struct fc_operand {
  tio_tensor *t;   /* owned by the ctx's files */
  char what[4200]; /* "a.npy" or "in.safetensors:w", for messages */
} fc_operand;

void fc_init(fc_ctx *c, const char *cmd);
void fc_free(fc_ctx *c);
/*
 * The options every operation command takes: --in, --out, --device, --check, --json.
 * Returns 1 when argv[*i] was one of them (consumed, *i advanced past a value), 0 when
 * it is another argument, -1 when its value is missing (reported: exit MXF_CLI_USAGE).
 */
int fc_common_opt(fc_ctx *c, int argc, char **argv, int *i);
/* Parses the --device text into c->device; -1 (reported) when it is not usable. */
int fc_parse_device(fc_ctx *c);
/*
 * Finds the operand named by `spec` (NULL: look up `name` in --in). Returns 1 when
 * found, 0 when absent and !required, -1 on an error (printed).
 */
int fc_operand_get(fc_ctx *c, const char *spec, const char *name, int required, fc_operand *op);
/*
 * --check-output SRC (NULL when absent): the outputs saved in SRC are judged instead of
 * computed, so --check is on, --out is refused and the request is planned on the CPU
 * without running. Without it, parses --device. -1 (reported) on a usage error.
 */
int fc_check_output_opt(fc_ctx *c, const char *src);
/* The gemm commands' --c-dtype (f32, f16, bf16, e4m3, e5m2 or e2m1) and --alpha (a
 * number): 0 with the value in *dt / *alpha, -1 (reported) when it is not one. */
int fc_c_dtype_opt(fc_ctx *c, const char *text, mxf_dtype *dt);
int fc_alpha_opt(fc_ctx *c, const char *text, float *alpha);
/* The output `name` as --out saved it in src (SRC.safetensors:name or SRC/name.npy),
 * read as dtype dt; -1 (reported) when missing or not of the given shape. */
int fc_output_get(fc_ctx *c, const char *src, const char *name, mxf_dtype dt, int ndim, const int64_t *shape,
                  fc_operand *op);
/* tio_tensor_as with the message printed. */
int fc_as(fc_ctx *c, fc_operand *op, mxf_dtype want);
/* Converts an f32 operand to bf16 in place (RNE); other dtypes are left alone. */
int fc_f32_to_bf16(fc_ctx *c, fc_operand *op);

/* A one-line status on stderr while working, only on a terminal and without --json. */
void fc_stage(fc_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Progress of a long loop: "what 37%" (rate-limited). */
void fc_progress(fc_ctx *c, const char *what, double done, double total);
void fc_stage_done(fc_ctx *c);

/* Host copy of a tensor on the device (the host pointer itself for the CPU); release
 * with fc_dev_free. */
void *fc_upload(fc_ctx *c, const void *host, size_t bytes);
void *fc_dev_output(fc_ctx *c, size_t bytes); /* poisoned with 0xA5; free with mxf_cli_dev_free */
int fc_download(fc_ctx *c, void *host, const void *dev, size_t bytes);
void fc_dev_free(fc_ctx *c, void *p); /* what fc_upload returned */

/*
 * Runs a plan made for `op` once on the command's device with a workspace of its own,
 * timed with the wall clock around the run and a device sync (*ms); a progress line
 * names `what` while it runs, and a failure is reported as "<what>: <status>: <message>".
 */
mxf_status fc_run(fc_ctx *c, mxf_cli_op op, const char *what, const mxf_plan *plan, const void *args,
                  double *ms);

/* Code-by-code comparison of two arrays of one dtype (8-bit codes, e2m1 packed, or
 * 16-bit bf16/f16): fraction equal and the largest distance in representable steps. */
typedef struct fc_cmp {
  int64_t n, equal, max_step_pos;
  int64_t max_step; /* INT64_MAX when a NaN meets a number */
} fc_cmp;
fc_cmp fc_compare_codes(mxf_dtype dt, const void *x, const void *y, int64_t n);
/* Adds the comparison r of a chunk starting at element `base` to the running total. */
void fc_cmp_add(fc_cmp *total, fc_cmp r, int64_t base);
/* Share of equal codes (1 when nothing was compared); the largest step, -1 for NaN vs a number. */
double fc_cmp_equal_share(const fc_cmp *r);
long long fc_cmp_max_step(const fc_cmp *r);
/* Decoded value of element i of a tensor of dtype dt (f32, f16, bf16, fp8, e2m1, e8m0). */
double fc_decode(mxf_dtype dt, const void *p, int64_t i);

/* --out handling: saves and prints/records where; prints the error on failure. */
int fc_save(fc_ctx *c, const char *dest, const tio_tensor *ts, int n);

/* JSON helpers for the summary on stdout. */
void fc_json_shape(FILE *f, int ndim, const int64_t *shape);
void fc_json_outputs(FILE *f, const char *dest, const tio_tensor *ts, int n);

/* Subcommand usage fragments shared by several --help texts. */
#define FC_USAGE_OPERANDS                                                                                    \
  "Operands: FILE.npy, FILE.safetensors (tensor of the operand's name) or\n"                                 \
  "FILE.safetensors:NAME; without one, the operand's name is looked up in --in.\n"                           \
  "fp8 / bf16 data saved by numpy or ml_dtypes as '|u1', '<V1', '<u2' or '<V2' is read\n"                    \
  "as the dtype the operation expects (or the one given by a --*-dtype option).\n"
#define FC_USAGE_COMMON                                                                                      \
  "  --out DEST          a .safetensors file, or a directory that gets NAME.npy per\n"                       \
  "                      output (created if missing); nothing is written on an error\n"                      \
  "  --device D          cpu | cuda | cuda:N | auto (default: auto)\n"                                       \
  "  --check             check the result against a host reference (SPEC section 5);\n"                      \
  "                      exit status 1 when it fails\n"                                                      \
  "  --json              print a machine-readable summary on stdout\n"

#define FC_USAGE_CHECK_OUTPUT                                                                                \
  "  --check-output SRC  judge the outputs saved in SRC (a .safetensors file or a\n"                         \
  "                      directory of NAME.npy, as --out writes them) instead of\n"                          \
  "                      computing them: the operation does not run; implies --check\n"

#endif /* MXF_CMD_FILES_H */
