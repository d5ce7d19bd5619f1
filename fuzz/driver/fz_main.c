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
#include "fz_counters.h"

__AFL_FUZZ_INIT();

/* fuzz/vectors/all-ops.bin (every operation) and death-spiral.bin (losses,
 * recovery, CUBIC's cube root): run once before the fork server starts. */
static const unsigned char warm_up[][82] = {
    {0x00, 0x87, 0x01, 0x00, 0x01, 0x80, 0x01, 0xe0, 0x02, 0xfa, 0x03, 0x89,
     0x04, 0x01, 0x05, 0x07, 0x06, 0x35, 0x07, 0x81, 0x08, 0x02, 0x0f, 0x00},
    {0x00, 0x03, 0x03, 0x00, 0x02, 0x01, 0x00, 0x03, 0x02, 0x00, 0x03, 0x00,
     0x02, 0x01, 0x00, 0x03, 0x02, 0x00, 0x03, 0x00, 0x02, 0x01, 0x00, 0x03,
     0x02, 0x00, 0x03, 0x00, 0x02, 0x01, 0x00, 0x03, 0x02, 0x00, 0x03, 0x00,
     0x02, 0x01, 0x00, 0x03, 0x02, 0x00, 0x07, 0x01, 0x07, 0x01, 0x07, 0x01,
     0x07, 0x01, 0x07, 0x01, 0x07, 0x01, 0x07, 0x01, 0x07, 0x01, 0x07, 0x01,
     0x07, 0x01, 0x07, 0x01, 0x07, 0x01, 0x07, 0x01, 0x07, 0x01, 0x07, 0x01,
     0x07, 0x01, 0x07, 0x01, 0x07, 0x01, 0x07, 0x01, 0x07, 0x01}};
static const size_t warm_up_len[] = {24, 82};

int main(void) {
  /* Deferred fork server: what every input's first run in a fresh process did
   * once (reading the environment, the stack's lazy one-time set-up) is done here,
   * in the fork server, and inherited by each child; a crash, which ends the
   * child, no longer costs it again (quiche 0.26.0 crashes on about one input in
   * ten).  Each input still gets its own controller (fz_one_input). */
  for (size_t i = 0; i < sizeof(warm_up_len) / sizeof(warm_up_len[0]); i++)
    fz_warm_up(warm_up[i], warm_up_len[i]);
  fz_counters_arm(); /* clears the warm-up's counts */
  __AFL_INIT();
  unsigned char *buf = __AFL_FUZZ_TESTCASE_BUF;
  while (__AFL_LOOP(10000)) {
    fz_one_input(buf, (size_t)__AFL_FUZZ_TESTCASE_LEN);
    fz_counters_fold();
  }
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
