/*
 * override.c — MXF_CONFIG, the one override of the kernel choice (docs/kernels/README.md).
 *
 *   MXF_CONFIG="gemm=sm90,swap=on,bpre=off"
 *
 * Core keeps the text and parses "key=value,..." against the keys the backends declare
 * (mxf_config_keys: src/cuda/cuda_config.c, src/cpu/cpu_config.c); each backend reads its
 * own keys into its own plan data. It is read when a plan is made: a plan keeps the choice
 * it was made with, and the one-call form's cache keys its plans by the text too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

static const mxf_config_keys *const k_tables[] = {&mxf_cuda_config_keys, &mxf_cpu_config_keys};
#define NTABLES (sizeof k_tables / sizeof *k_tables)

/* "keys: <each backend's help>, ... (docs/kernels/README.md)" */
static const char *help(char *buf, size_t n) {
  size_t len = (size_t)snprintf(buf, n, "keys: ");
  for (size_t t = 0; t < NTABLES && len < n; ++t)
    len += (size_t)snprintf(buf + len, n - len, "%s%s", t ? ", " : "", k_tables[t]->help);
  if (len < n) snprintf(buf + len, n - len, " (docs/kernels/README.md)");
  return buf;
}

/* The key named [s, s + n) among the backends' keys, or NULL; *table: its table. */
static const mxf_config_key *find_key(const char *s, size_t n, const mxf_config_keys **table) {
  for (size_t t = 0; t < NTABLES; ++t)
    for (size_t i = 0; i < k_tables[t]->count; ++i) {
      const mxf_config_key *k = &k_tables[t]->keys[i];
      if (strlen(k->name) == n && memcmp(k->name, s, n) == 0) return *table = k_tables[t], k;
    }
  return NULL;
}

/* Checks item [s, s + n) ("key=value") and, when its key is one of `mine`, sets the field
 * in out; or says what is wrong with it. */
static mxf_status parse_item(const char *s, size_t n, const mxf_config_keys *mine, void *out) {
  char h[512];
  const char *eq = memchr(s, '=', n);
  if (!eq)
    return mxf_set_error(MXF_ERR_INVALID_VALUE, MXF_CONFIG_ENV ": item '%.*s' is not key=value; %s", (int)n,
                         s, help(h, sizeof h));
  const size_t kn = (size_t)(eq - s), vn = n - kn - 1;
  const mxf_config_keys *table = NULL;
  const mxf_config_key *k = find_key(s, kn, &table);
  if (!k)
    return mxf_set_error(MXF_ERR_INVALID_VALUE, MXF_CONFIG_ENV ": unknown key '%.*s'; %s", (int)kn, s,
                         help(h, sizeof h));
  for (const mxf_config_value *v = k->values; v->text; ++v) {
    if (strlen(v->text) != vn || memcmp(v->text, eq + 1, vn) != 0) continue;
    if (table == mine && out) *((int8_t *)out + k->offset) = v->value;
    return MXF_OK;
  }
  return mxf_set_error(MXF_ERR_INVALID_VALUE, MXF_CONFIG_ENV ": '%.*s' is no value of %s; %s", (int)vn,
                       eq + 1, k->name, help(h, sizeof h));
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

mxf_status mxf_override_parse(const char *text, const mxf_config_keys *keys, void *out, size_t size) {
  if (out) memset(out, MXF_CHOOSE, size);
  for (const char *s = text; *s;) {
    const char *end = strchr(s, ',');
    const size_t n = end ? (size_t)(end - s) : strlen(s);
    mxf_status st;
    if (n && (st = parse_item(s, n, keys, out)) != MXF_OK) return st;
    s += n + (end != NULL);
  }
  return MXF_OK;
}

mxf_status mxf_override_read(mxf_override *out) {
  mxf_status st = mxf_override_text(out->text);
  if (st != MXF_OK) return st;
  return mxf_override_parse(out->text, NULL, NULL, 0);
}
