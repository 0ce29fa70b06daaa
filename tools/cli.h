/*
 * cli.h — what the subcommands of the `mxfuse` tool share.
 *
 * - The command table: tools/main.c holds ONE table of {name, fn, summary}; a subcommand
 *   is a function `int fn(int argc, char **argv)` declared below, where argv[0] is the
 *   command's name and argv[1..] its arguments. It returns the process exit status:
 *   MXF_CLI_OK (0), MXF_CLI_FAIL (1: an operation or a check failed) or MXF_CLI_USAGE
 *   (2: bad command line). Every subcommand answers `--help` / `-h` with its usage on
 *   stdout and status 0.
 * - Option parsing: `--name value` and `--name=value` both work (mxf_cli_opt); helpers
 *   parse integers, shapes, seeds and devices and print a message naming the option
 *   when the text is bad.
 * - Device memory: host memory for MXF_DEVICE_CPU, CUDA memory otherwise (only when the
 *   tool is built with MXF_WITH_CUDA; without it every CUDA request fails cleanly).
 * - A seeded RNG (src/host_rng.h) and timing.
 *
 * Adding a subcommand: write `int mxf_cmd_<name>(int argc, char **argv)` in a source file
 * under tools/, declare it here, add one row to the table in tools/main.c.
 * The tool's manual: docs/cli.md.
 */
#ifndef MXF_CLI_H
#define MXF_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "host_rng.h"
#include "mxfuse.h"

/* ------------------------------------------------------------ exit statuses */
#define MXF_CLI_OK 0
#define MXF_CLI_FAIL 1
#define MXF_CLI_USAGE 2

/* ------------------------------------------------------------ the command table */
typedef int (*mxf_cli_fn)(int argc, char **argv);

typedef struct mxf_cli_command {
  const char *name; /* as typed: "demo", "gemm-amax", ... */
  mxf_cli_fn fn;
  const char *summary; /* one line for `mxfuse --help` */
} mxf_cli_command;

/* The table (tools/main.c), terminated by a row with name NULL. */
extern const mxf_cli_command mxf_cli_commands[];

/* Subcommands, one per table row. */
int mxf_cmd_demo(int argc, char **argv); /* tools/demo.c */
/* file-based subcommands: tools/cmd_files.c, cmd_gemm.c, cmd_proj.c, cmd_quant.c */
int mxf_cmd_gemm_amax(int argc, char **argv);
int mxf_cmd_grouped_gemm_amax(int argc, char **argv); /* tools/cmd_grouped.c */
int mxf_cmd_proj_rope(int argc, char **argv);
int mxf_cmd_quantize(int argc, char **argv);
int mxf_cmd_dequantize(int argc, char **argv);
int mxf_cmd_swizzle_scales(int argc, char **argv);
int mxf_cmd_unswizzle_scales(int argc, char **argv);
int mxf_cmd_inspect(int argc, char **argv);

/* ------------------------------------------------------------ messages */
/* Prints "mxfuse <cmd>: <message>\n" to stderr. */
void mxf_cli_err(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* For a failed library call: prints "mxfuse <cmd>: <what>: <STATUS>: <mxf_last_error()>". */
void mxf_cli_err_status(const char *cmd, const char *what, mxf_status st);

/* ------------------------------------------------------------ option parsing */
/* 1 if arg is "--help" or "-h". */
int mxf_cli_is_help(const char *arg);
/* 1 if any of argv[1..argc-1] asks for help: a command prints its usage and returns 0. */
int mxf_cli_wants_help(int argc, char **argv);

/*
 * Matches argv[*i] against the option `name` (e.g. "--seed") taking a value, given
 * either as "--seed=5" or as "--seed 5" (then *i advances past the value). Returns the
 * value text, or NULL if argv[*i] is a different option. A matching option without a
 * value prints an error and returns "" (callers then fail with MXF_CLI_USAGE: check
 * with `if (v && !*v)`).
 */
const char *mxf_cli_opt(const char *cmd, int argc, char **argv, int *i, const char *name);

/* Parse a whole decimal integer (optionally with k/M/G = 2^10/2^20/2^30 suffix) into *out,
 * within [lo, hi]. On bad text prints "mxfuse <cmd>: <opt>: ..." and returns -1; 0 on success. */
int mxf_cli_parse_i64(const char *cmd, const char *opt, const char *text, int64_t lo, int64_t hi,
                      int64_t *out);
/* A seed: any unsigned 64-bit decimal or 0x-hex number. */
int mxf_cli_parse_seed(const char *cmd, const char *opt, const char *text, uint64_t *out);
/* A shape "4096x1536", "4096,1536" or "4096" (1 to max_dims positive extents). */
int mxf_cli_parse_shape(const char *cmd, const char *opt, const char *text, int max_dims, int64_t *dims,
                        int *ndim);
/* Writes "(4096, 1536)" style text of a shape into buf; returns buf. */
char *mxf_cli_shape_str(char *buf, size_t size, const int64_t *dims, int ndim);

/*
 * --device: "cpu", "cuda" (= cuda:0), "cuda:N" or "auto" (cuda:0 when
 * mxf_cuda_device_count() > 0, else cpu). Result: MXF_DEVICE_CPU or MXF_DEVICE_CUDA(N).
 * A CUDA device that is not present (or a tool built without CUDA) is an error here, so
 * that a subcommand fails before doing work.
 */
int mxf_cli_parse_device(const char *cmd, const char *opt, const char *text, int32_t *device);
/* Writes "cpu" or "cuda:N" for a device into buf; returns buf. */
char *mxf_cli_device_str(char *buf, size_t size, int32_t device);

/* The default seed of a run when --seed is absent: from the clock and the process id. */
uint64_t mxf_cli_default_seed(void);

/* ------------------------------------------------------------ JSON output */
/* Writes s as a JSON string literal (quotes and escapes included). */
void mxf_cli_json_str(FILE *f, const char *s);

/* ------------------------------------------------------------ RNG */
typedef mxf_rng mxf_cli_rng; /* src/host_rng.h, shared with the tests */

void mxf_cli_rng_init(mxf_cli_rng *r, uint64_t seed);
uint64_t mxf_cli_rng_u64(mxf_cli_rng *r);
/* Uniform integer in [0, n) (n > 0). */
uint64_t mxf_cli_rng_below(mxf_cli_rng *r, uint64_t n);
/* Uniform double in [0, 1). */
double mxf_cli_rng_uniform(mxf_cli_rng *r);
/* n standard normal f32 values (Box-Muller, pairs). */
void mxf_cli_rng_normal(mxf_cli_rng *r, float *out, size_t n);

/* ------------------------------------------------------------ memory on a device */
/* 1 if the tool was built with CUDA support (can move data to CUDA devices). */
int mxf_cli_has_cuda(void);
/* Allocates bytes on device (64-byte aligned host memory for the CPU). NULL on failure,
 * with a message printed. Free with mxf_cli_dev_free. */
void *mxf_cli_dev_alloc(const char *cmd, int32_t device, size_t bytes);
void mxf_cli_dev_free(int32_t device, void *p);
/* Copies between host memory and memory of device; 0 on success, -1 (message printed). */
int mxf_cli_dev_upload(const char *cmd, int32_t device, void *dst, const void *src, size_t bytes);
int mxf_cli_dev_download(const char *cmd, int32_t device, void *dst, const void *src, size_t bytes);
/* Sets bytes of device memory to `byte` (poisoning outputs before a run). */
int mxf_cli_dev_memset(const char *cmd, int32_t device, void *p, int byte, size_t bytes);
/* Waits for all work queued on device (nothing for the CPU). */
int mxf_cli_dev_sync(const char *cmd, int32_t device);
/* The `bytes` host bytes as an input on device: the host pointer itself for the CPU,
 * else a fresh copy (NULL on failure, message printed). Release with mxf_cli_dev_release. */
void *mxf_cli_dev_mirror(const char *cmd, int32_t device, const void *host, size_t bytes);
/* Frees dev unless it is the host memory it mirrors. */
void mxf_cli_dev_release(int32_t device, void *dev, const void *host);

/* ------------------------------------------------------------ running a plan */
typedef enum mxf_cli_op {
  MXF_CLI_GEMM_AMAX,
  MXF_CLI_PROJ_ROPE,
  MXF_CLI_QUANTIZE,
  MXF_CLI_DEQUANTIZE,
  MXF_CLI_GROUPED_GEMM_AMAX
} mxf_cli_op;
/* mxf_<op>_run on the default stream; args points to the op's args struct. */
mxf_status mxf_cli_run(mxf_cli_op op, const mxf_plan *plan, const void *args, void *ws, size_t ws_size);

/* ------------------------------------------------------------ timing */
/* Monotonic wall clock in milliseconds. */
double mxf_cli_now_ms(void);
/*
 * Runs fn(ctx) `warmup` times, then `runs` times each timed on its own (CUDA events on
 * the default stream for a CUDA device, the wall clock for the CPU), and stores the
 * median time in *median_ms. Stops at the first run whose fn returns non-MXF_OK and
 * returns that status (so MXF_ERR_NOT_SUPPORTED reaches the caller untouched); a CUDA
 * timing failure returns MXF_ERR_CUDA with a message printed.
 */
mxf_status mxf_cli_time_median(const char *cmd, int32_t device, int warmup, int runs,
                               mxf_status (*fn)(void *ctx), void *ctx, double *median_ms);

/* Median of n doubles (sorts v in place). */
double mxf_cli_median(double *v, int n);

#endif /* MXF_CLI_H */
