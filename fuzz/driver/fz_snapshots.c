/*
 * fz_snapshots FILE...: every snapshot of every input, one line per step, for
 * tests that pin what an adapter reports (tests/test_fuzz_snapshots.py).  Built
 * plain with a stack's ordinary library.  Each input: "# NAME EVENTS", then per
 * step "INDEX cwnd ssthresh bytes_in_flight phase recovery_start epoch_start
 * w_max k" (floats in %a: exact), or "INDEX error MESSAGE" where the adapter
 * refused the step (the input ends there, as in fz_one_input).
 * Options: CCDIFF_FUZZ_OPTIONS, as for the harness.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ccdiff_adapter.h"
#include "fz_decode.h"
#include "fz_ledger.h"

static fz_trace trace;
static fz_ledger ledger;
static unsigned char input[1 << 20];

int main(int argc, char **argv) {
  fz_trace_init(&trace);
  fz_ledger_init(&ledger);
  const char *opts = getenv("CCDIFF_FUZZ_OPTIONS");
  ccd_config cfg = {FZ_MAX_DATAGRAM_SIZE, FZ_MAX_ACK_DELAY_US, FZ_INITIAL_RTT_US, opts ? opts : "", CCD_DEFAULT_CLOCK_BASE_US};
  for (int a = 1; a < argc; a++) {
    FILE *f = fopen(argv[a], "rb");
    if (!f) {
      perror(argv[a]);
      return 2;
    }
    size_t len = fread(input, 1, sizeof(input), f);
    fclose(f);
    char err[256] = "";
    void *ctl = ccd_open(&cfg, err, sizeof(err));
    if (!ctl) {
      fprintf(stderr, "fz_snapshots: ccd_open: %s\n", err);
      return 2;
    }
    fz_decode(&trace, input, len);
    fz_ledger_reset(&ledger, cfg.initial_rtt_us);
    const char *name = strrchr(argv[a], '/');
    printf("# %s %zu\n", name ? name + 1 : argv[a], trace.n_ev);
    for (size_t i = 0; i < trace.n_ev; i++) {
      ccd_event ev;
      ccd_snapshot s;
      if (fz_ledger_resolve(&ledger, &trace, i, &ev) < 0) abort(); /* a decoder bug */
      if (ccd_step(ctl, &ev, &s) < 0) {
        printf("%zu error %s\n", i, ccd_last_error(ctl));
        break;
      }
      printf("%zu %llu %llu %llu %u %lld %lld %a %a\n", i, (unsigned long long)s.cwnd,
             (unsigned long long)s.ssthresh, (unsigned long long)s.bytes_in_flight, s.phase,
             (long long)s.recovery_start_us, (long long)s.epoch_start_us, s.w_max_bytes, s.k_us);
    }
    ccd_close(ctl);
  }
  return 0;
}
