/*
 * main() for the AFL++ harness and the plain replay harness.
 *
 * Built by afl-clang-fast / afl-gcc-fast: AFL++ persistent mode with shared
 * memory test cases (__AFL_LOOP), thousands of inputs per fork.  Run by
 * hand, the same binary reads one input from stdin.
 * Built by a plain compiler: replays each FILE argument (or stdin) and exits
 * 1 if any input broke an invariant (with CCDIFF_FUZZ_NO_ABORT=1; without it,
 * the first violation aborts, as under a fuzzer).
 */
#include <stdio.h>
#include <stdlib.h>

#include "fz_harness.h"

#ifdef __AFL_FUZZ_TESTCASE_LEN
__AFL_FUZZ_INIT();

int main(void) {
  __AFL_INIT();
  unsigned char *buf = __AFL_FUZZ_TESTCASE_BUF;
  while (__AFL_LOOP(10000)) fz_one_input(buf, (size_t)__AFL_FUZZ_TESTCASE_LEN);
  return 0;
}
#else
static unsigned char input[1 << 20]; /* 512 Ki operations: far past MAX_EVENTS */

static int run_file(FILE *f) {
  size_t len = fread(input, 1, sizeof(input), f);
  return fz_one_input(input, len);
}

int main(int argc, char **argv) {
  int bad = 0;
  if (argc < 2) return run_file(stdin);
  for (int i = 1; i < argc; i++) {
    FILE *f = fopen(argv[i], "rb");
    if (!f) {
      perror(argv[i]);
      return 2;
    }
    bad |= run_file(f);
    fclose(f);
  }
  return bad;
}
#endif
