/*
 * The decoder and ledger alone under a fuzzer (hostile input, issue 9): no
 * stack, so any crash or sanitizer report is in fuzz/driver/ itself.
 *
 * Each input is decoded (fz_decode), every event resolved by the ledger, and
 * the trace written as JSONL (fz_dump_jsonl), so all three see every input.
 * A ledger that cannot resolve an event the decoder produced is a bug: abort.
 *
 * Built by afl-clang-fast (with ASan + UBSan): AFL++ persistent mode, the
 * JSONL goes to /dev/null.  Built by a plain compiler: for each FILE argument,
 * prints its JSONL (trace name "fuzz") to stdout, one trace after another, so
 * a test can compare each with ccdiff/encoding.py's.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fz_decode.h"
#include "fz_ledger.h"

static fz_trace trace;
static fz_ledger ledger;

static void one_input(const unsigned char *data, size_t len, FILE *out) {
  fz_decode(&trace, data, len);
  fz_ledger_reset(&ledger, FZ_INITIAL_RTT_US);
  for (size_t i = 0; i < trace.n_ev; i++) {
    ccd_event ev;
    if (fz_ledger_resolve(&ledger, &trace, i, &ev) < 0) {
      fprintf(stderr, "fz_decode_fuzz: event %zu names a packet the ledger does not hold\n", i);
      abort();
    }
  }
  fz_dump_jsonl(&trace, "fuzz", out);
}

#ifdef __AFL_FUZZ_TESTCASE_LEN
__AFL_FUZZ_INIT();

int main(void) {
  fz_trace_init(&trace);
  fz_ledger_init(&ledger);
  FILE *sink = fopen("/dev/null", "w");
  if (!sink) return 2;
  __AFL_INIT();
  unsigned char *buf = __AFL_FUZZ_TESTCASE_BUF;
  while (__AFL_LOOP(10000)) one_input(buf, (size_t)__AFL_FUZZ_TESTCASE_LEN, sink);
  return 0;
}
#else
static unsigned char input[1 << 20];

int main(int argc, char **argv) {
  fz_trace_init(&trace);
  fz_ledger_init(&ledger);
  for (int i = 1; i < argc; i++) {
    FILE *f = fopen(argv[i], "rb");
    if (!f) {
      perror(argv[i]);
      return 2;
    }
    size_t len = fread(input, 1, sizeof(input), f);
    fclose(f);
    one_input(input, len, stdout);
  }
  fz_ledger_free(&ledger);
  fz_trace_free(&trace);
  return 0;
}
#endif
