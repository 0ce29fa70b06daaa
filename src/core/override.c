/*
 * override.c — MXF_CONFIG, the one override of the kernel choice (docs/kernels/README.md).
 *
 *   MXF_CONFIG="gemm=sm90,swap=on,bpre=off"
 *
 * Keys: gemm=portable|gemv|sm90, proj=portable|sm90 (that kernel first wherever it takes
 * the problem); the sm_90a gemm_amax kernel's swap, bpre, bcwide, f16, wg3, sfraw, cring
 * (each on|off); the sm_90a proj_rope kernel's mxfp8=prepass|mainloop; the CPU backend's
 * GEMM core cpu=onednn|blas|c. It is read when a
 * plan is made: a plan keeps the choice it was made with, and the one-call form's cache
 * keys its plans by the text too.
 */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

typedef struct key_value {
  const char *text; /* NULL ends a key's list */
  int8_t value;     /* what it sets the field to */
} key_value;
typedef struct key_def {
  const char *name;
  size_t offset; /* of its int8_t in mxf_override */
  key_value vals[4];
} key_def;

#define OV(f) offsetof(mxf_override, f)
#define ON_OFF                                                                                               \
  {                                                                                                          \
    {"off", 0}, {"on", 1}, { NULL, 0 }                                                                       \
  }
static const key_def k_keys[] = {
    {"gemm",
     OV(gemm),
     {{"portable", MXF_KERNEL_PORTABLE}, {"gemv", MXF_KERNEL_GEMV}, {"sm90", MXF_KERNEL_SM90}, {NULL, 0}}},
    {"proj", OV(proj), {{"portable", MXF_KERNEL_PORTABLE}, {"sm90", MXF_KERNEL_SM90}, {NULL, 0}}},
    {"swap", OV(swap), ON_OFF},
    {"bpre", OV(bpre), ON_OFF},
    {"bcwide", OV(bcwide), ON_OFF},
    {"f16", OV(f16), ON_OFF},
    {"wg3", OV(wg3), ON_OFF},
    {"sfraw", OV(sfraw), ON_OFF},
    {"cring", OV(cring), ON_OFF},
    {"mxfp8", OV(mxfp8), {{"prepass", 0}, {"mainloop", 1}, {NULL, 0}}},
    {"cpu",
     OV(cpu),
     {{"onednn", MXF_CPU_CORE_ONEDNN}, {"blas", MXF_CPU_CORE_BLAS}, {"c", MXF_CPU_CORE_C}, {NULL, 0}}},
};
#undef ON_OFF
#undef OV
#define NKEYS (sizeof k_keys / sizeof *k_keys)

static const char k_help[] =
    "keys: gemm=portable|gemv|sm90, proj=portable|sm90, swap|bpre|bcwide|f16|wg3|sfraw|cring=on|off, "
    "mxfp8=prepass|mainloop, cpu=onednn|blas|c (docs/kernels/README.md)";

/* Sets the field of item [s, s + n) ("key=value"), or says what is wrong with it. */
static mxf_status parse_item(const char *s, size_t n, mxf_override *o) {
  const char *eq = memchr(s, '=', n);
  if (!eq)
    return mxf_set_error(MXF_ERR_INVALID_VALUE, MXF_CONFIG_ENV ": item '%.*s' is not key=value; %s", (int)n,
                         s, k_help);
  const size_t kn = (size_t)(eq - s), vn = n - kn - 1;
  for (size_t i = 0; i < NKEYS; ++i) {
    const key_def *k = &k_keys[i];
    if (strlen(k->name) != kn || memcmp(k->name, s, kn) != 0) continue;
    for (const key_value *v = k->vals; v->text; ++v) {
      if (strlen(v->text) != vn || memcmp(v->text, eq + 1, vn) != 0) continue;
      *((int8_t *)o + k->offset) = v->value;
      return MXF_OK;
    }
    return mxf_set_error(MXF_ERR_INVALID_VALUE, MXF_CONFIG_ENV ": '%.*s' is no value of %s; %s", (int)vn,
                         eq + 1, k->name, k_help);
  }
  return mxf_set_error(MXF_ERR_INVALID_VALUE, MXF_CONFIG_ENV ": unknown key '%.*s'; %s", (int)kn, s, k_help);
}

mxf_status mxf_override_text(char text[MXF_CONFIG_MAX]) {
  memset(text, 0, MXF_CONFIG_MAX);
  const char *env = getenv(MXF_CONFIG_ENV);
  if (!env) return MXF_OK;
  const size_t len = strlen(env);
  if (len >= MXF_CONFIG_MAX)
    return mxf_set_error(MXF_ERR_INVALID_VALUE, MXF_CONFIG_ENV ": %zu characters; at most %d", len,
                         MXF_CONFIG_MAX - 1);
  memcpy(text, env, len);
  return MXF_OK;
}

mxf_status mxf_override_read(mxf_override *out) {
  memset(out, MXF_CHOOSE, sizeof *out);
  char text[MXF_CONFIG_MAX];
  mxf_status st = mxf_override_text(text);
  if (st != MXF_OK) return st;
  for (const char *s = text; *s;) {
    const char *end = strchr(s, ',');
    const size_t n = end ? (size_t)(end - s) : strlen(s);
    if (n && (st = parse_item(s, n, out)) != MXF_OK) return st;
    s += n + (end != NULL);
  }
  return MXF_OK;
}
