/* mxfuse CLI — placeholder until the CLI lands. */
#include <stdio.h>

#include "mxfuse.h"

int main(void) {
  printf("mxfuse %s\n", mxf_version_string());
  return 0;
}
