/* Thread-local last-error message and status names. */
#include <stdarg.h>
#include <stdio.h>

#include "core/internal.h"

static _Thread_local char g_msg[1024];

mxf_status mxf_set_error(mxf_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_msg, sizeof g_msg, fmt, ap);
  va_end(ap);
  return status;
}

void mxf_clear_error(void) { g_msg[0] = '\0'; }

const char *mxf_last_error(void) { return g_msg; }

const char *mxf_status_string(mxf_status status) {
  switch (status) {
  case MXF_OK: return "MXF_OK";
  case MXF_ERR_INVALID_VALUE: return "MXF_ERR_INVALID_VALUE";
  case MXF_ERR_NOT_SUPPORTED: return "MXF_ERR_NOT_SUPPORTED";
  case MXF_ERR_CUDA: return "MXF_ERR_CUDA";
  case MXF_ERR_NO_MEMORY: return "MXF_ERR_NO_MEMORY";
  case MXF_ERR_INTERNAL: return "MXF_ERR_INTERNAL";
  }
  return "MXF_ERR_UNKNOWN";
}
