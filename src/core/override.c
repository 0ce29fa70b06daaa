/*
 * override.c — MXF_CONFIG, the one override of the kernel choice (docs/kernels/README.md).
 *
 *   MXF_CONFIG="gemm=sm90,swap=on,bpre=off"
 *
 * Keys: gemm=portable|gemv|sm90, proj=portable|sm90 (that kernel first wherever it takes
 * the problem); the sm_90a gemm_amax kernel's swap, bpre, bcwide, f16, wg3, sfraw, cring
 * (each on|off); the sm_90a proj_rope kernel's mxfp8=prepass|mainloop. It is read when a
 * plan is made: a plan keeps the choice it was made with, and the one-call form's cache
 * keys its plans by the text too.
 */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

typedef struct key_def {
  const char *name;
  size_t offset;              /* of its int8_t in mxf_override */
  const char *const vals[4];  /* value i sets the field to i; NULL ends the list */
} key_def;

#define OV(f) offsetof(mxf_override, f)
static const key_def k_keys[] = {
    {"gemm", OV(gemm), {"portable", "gemv", "sm90", NULL}},
    {"proj", OV(proj), {"portable", "gemv", "sm90", NULL}}, /* gemv: refused below */
    {"swap", OV(swap), {"off", "on", NULL}},
    {"bpre", OV(bpre), {"off", "on", NULL}},
    {"bcwide", OV(bcwide), {"off", "on", NULL}},
    {"f16", OV(f16), {"off", "on", NULL}},
    {"wg3", OV(wg3), {"off", "on", NULL}},
    {"sfraw", OV(sfraw), {"off", "on", NULL}},
    {"cring", OV(cring), {"off", "on", NULL}},
    {"mxfp8", OV(mxfp8), {"prepass", "mainloop", NULL}},
};
#undef OV
#define NKEYS (sizeof k_keys / sizeof *k_keys)

static const char k_help[] =
    "keys: gemm=portable|gemv|sm90, proj=portable|sm90, swap|bpre|bcwide|f16|wg3|sfraw|cring=on|off, "
    "mxfp8=prepass|mainloop (docs/kernels/README.md)";

/* Sets the field of item [s, s + n) ("key=value"), or says what is wrong with it. */
static mxf_status parse_item(const char *s, size_t n, mxf_override *o) {
  const char *eq = memchr(s, '=', n);
  if (!eq)
    return mxf_set_error(MXF_ERR_INVALID_VALUE, MXF_CONFIG_ENV ": item '%.*s' is not key=value; %s", (int)n, s,
                         k_help);
  const size_t kn = (size_t)(eq - s), vn = n - kn - 1;
  for (size_t i = 0; i < NKEYS; ++i) {
    const key_def *k = &k_keys[i];
    if (strlen(k->name) != kn || memcmp(k->name, s, kn) != 0) continue;
    for (int v = 0; v < 4 && k->vals[v]; ++v) {
      if (strlen(k->vals[v]) != vn || memcmp(k->vals[v], eq + 1, vn) != 0) continue;
      if (k->offset == offsetof(mxf_override, proj) && v == MXF_KERNEL_GEMV) break;
      *((int8_t *)o + k->offset) = (int8_t)v;
      return MXF_OK;
    }
    return mxf_set_error(MXF_ERR_INVALID_VALUE, MXF_CONFIG_ENV ": '%.*s' is no value of %s; %s", (int)vn, eq + 1,
                         k->name, k_help);
  }
  return mxf_set_error(MXF_ERR_INVALID_VALUE, MXF_CONFIG_ENV ": unknown key '%.*s'; %s", (int)kn, s, k_help);
}

mxf_status mxf_override_read(mxf_override *out, char text[MXF_CONFIG_MAX]) {
  memset(out, MXF_CHOOSE, sizeof *out);
  memset(text, 0, MXF_CONFIG_MAX);
  const char *env = getenv(MXF_CONFIG_ENV);
  if (!env) return MXF_OK;
  const size_t len = strlen(env);
  if (len >= MXF_CONFIG_MAX)
    return mxf_set_error(MXF_ERR_INVALID_VALUE, MXF_CONFIG_ENV ": %zu characters; at most %d", len,
                         MXF_CONFIG_MAX - 1);
  memcpy(text, env, len);
  for (const char *s = env; *s;) {
    const char *end = strchr(s, ',');
    const size_t n = end ? (size_t)(end - s) : strlen(s);
    if (n) {
      mxf_status st = parse_item(s, n, out);
      if (st != MXF_OK) return st;
    }
    s += n + (end != NULL);
  }
  return MXF_OK;
}
