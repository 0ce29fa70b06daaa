/* Public entry points — placeholder until core lands. */
#include "core/internal.h"

int mxf_version(void) { return MXF_VERSION_NUMBER; }
const char *mxf_version_string(void) { return "0.1.0"; }
