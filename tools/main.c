/*
 * main.c — the `mxfuse` command-line tool: global options and subcommand dispatch.
 *
 * Every subcommand is one row of mxf_cli_commands below (declared in cli.h); its function
 * receives argv starting at the command name and handles its own --help.
 * The tool's manual: docs/cli.md.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* The version of mxfuse.h the tool was compiled against (the library may be newer). */
#define MXF_STR2(x) #x
#define MXF_STR(x) MXF_STR2(x)
#define MXF_VERSION_STRING_CLI                                                                               \
  MXF_STR(MXF_VERSION_MAJOR) "." MXF_STR(MXF_VERSION_MINOR) "." MXF_STR(MXF_VERSION_PATCH)

const mxf_cli_command mxf_cli_commands[] = {
    {"demo", mxf_cmd_demo, "run the fused operations on DeepSeek-V3-shaped random data, check and time them"},
    {"gemm-amax", mxf_cmd_gemm_amax, "block-scaled GEMM + amax on tensors from .npy / .safetensors files"},
    {"grouped-gemm-amax", mxf_cmd_grouped_gemm_amax,
     "grouped GEMM + amax (MoE experts) on tensors from files"},
    {"proj-rope", mxf_cmd_proj_rope, "projection GEMM + RoPE + dual MXFP8 on tensors from files"},
    {"quantize", mxf_cmd_quantize, "MXFP8-quantize a bf16/f32 matrix from a file (rows, cols or both)"},
    {"dequantize", mxf_cmd_dequantize, "MXFP8 codes + e8m0 scales from files -> f32/bf16"},
    {"swizzle-scales", mxf_cmd_swizzle_scales, "compact scale factors -> the 128x4 swizzled layout"},
    {"unswizzle-scales", mxf_cmd_unswizzle_scales, "swizzled scale factors -> compact (MN, Kb)"},
    {"inspect", mxf_cmd_inspect, "list the tensors of a .npy / .safetensors file, with scale statistics"},
    {NULL, NULL, NULL},
};

static void print_version(FILE *f) {
  int ndev = mxf_cuda_device_count();
  fprintf(f, "mxfuse %s (library %s; CUDA backend: %s", MXF_VERSION_STRING_CLI, mxf_version_string(),
          mxf_has_cuda() ? "built" : "not built");
  if (mxf_has_cuda()) fprintf(f, ", %d device%s", ndev, ndev == 1 ? "" : "s");
  fprintf(f, ")\n");
}

static void print_help(FILE *f) {
  fprintf(f,
          "mxfuse %s - block-scaled (MX) GEMMs with fused epilogues, on CUDA GPUs and the CPU\n"
          "\n"
          "usage: mxfuse <command> [options]\n"
          "       mxfuse <command> --help     options of one command\n"
          "       mxfuse --version            versions and CUDA devices\n"
          "       mxfuse --help               this text\n"
          "\n"
          "commands:\n",
          mxf_version_string());
  size_t w = 0;
  for (const mxf_cli_command *c = mxf_cli_commands; c->name; c++)
    if (strlen(c->name) > w) w = strlen(c->name);
  for (const mxf_cli_command *c = mxf_cli_commands; c->name; c++)
    fprintf(f, "  %-*s  %s\n", (int)w, c->name, c->summary);
  fprintf(f, "\n"
             "Exit status: 0 success, 1 an operation or a check failed, 2 bad command line.\n");
}

int main(int argc, char **argv) {
  /* past `ulimit -f` a write fails with EFBIG, reported with the file's name, instead of
   * the signal killing the tool silently */
  signal(SIGXFSZ, SIG_IGN);
  if (argc < 2) {
    print_help(stderr);
    return MXF_CLI_USAGE;
  }
  const char *cmd = argv[1];
  if (mxf_cli_is_help(cmd) || strcmp(cmd, "help") == 0) {
    /* `mxfuse help <cmd>` is `mxfuse <cmd> --help` */
    if (strcmp(cmd, "help") == 0 && argc >= 3) {
      for (const mxf_cli_command *c = mxf_cli_commands; c->name; c++)
        if (strcmp(c->name, argv[2]) == 0) {
          char help[] = "--help";
          char *sub[] = {argv[2], help, NULL};
          return c->fn(2, sub);
        }
      fprintf(stderr, "mxfuse: unknown command '%s' (mxfuse --help lists them)\n", argv[2]);
      return MXF_CLI_USAGE;
    }
    print_help(stdout);
    return MXF_CLI_OK;
  }
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) {
    print_version(stdout);
    return MXF_CLI_OK;
  }
  for (const mxf_cli_command *c = mxf_cli_commands; c->name; c++)
    if (strcmp(c->name, cmd) == 0) return c->fn(argc - 1, argv + 1);
  fprintf(stderr, "mxfuse: unknown %s '%s' (mxfuse --help lists the commands)\n",
          cmd[0] == '-' ? "option" : "command", cmd);
  return MXF_CLI_USAGE;
}
