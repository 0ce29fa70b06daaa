/*
 * replay_main.c — runs a fuzz target's LLVMFuzzerTestOneInput over every file of the
 * given directories (the saved corpus), in an ordinary build: the regression half of
 * fuzzing, which runs on every `make test` whether or not libFuzzer is available.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  struct stat st;
  if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
    fclose(f);
    return -1;
  }
  size_t n = (size_t)st.st_size;
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf || (n && fread(buf, 1, n, f) != n)) {
    free(buf);
    fclose(f);
    return -1;
  }
  fclose(f);
  LLVMFuzzerTestOneInput(buf, n);
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  int files = 0;
  for (int a = 1; a < argc; ++a) {
    DIR *d = opendir(argv[a]);
    if (!d) {
      fprintf(stderr, "replay: cannot open %s\n", argv[a]);
      return 1;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
      if (e->d_name[0] == '.') continue;
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[a], e->d_name);
      if (run_file(path) == 0) ++files;
    }
    closedir(d);
  }
  printf("replay: %d inputs, none crashed\n", files);
  return files ? 0 : 1;
}
