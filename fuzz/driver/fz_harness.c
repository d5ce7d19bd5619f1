/* The in-process harness: see fz_harness.h. */
#include "fz_harness.h"

#include <stdio.h>
#include <stdlib.h>

#include "ccdiff_adapter.h"
#include "fz_check.h"
#include "fz_decode.h"
#include "fz_ledger.h"
#include "fz_state.h"

static fz_trace trace;
static fz_ledger ledger;
static int ready, no_abort, warming, print_state;
static unsigned enabled = FZ_INV_ALL;
static ccd_config config;

static void setup(void) {
  fz_trace_init(&trace);
  fz_ledger_init(&ledger);
  const char *list = getenv("CCDIFF_FUZZ_INVARIANTS");
  if (list && fz_parse_invariants(list, &enabled) < 0) {
    fprintf(stderr, "ccdiff-fuzz: CCDIFF_FUZZ_INVARIANTS=%s names an unknown invariant\n", list);
    exit(2);
  }
  const char *opts = getenv("CCDIFF_FUZZ_OPTIONS");
  no_abort = getenv("CCDIFF_FUZZ_NO_ABORT") && *getenv("CCDIFF_FUZZ_NO_ABORT") == '1';
  print_state = getenv("CCDIFF_FUZZ_STATE") && *getenv("CCDIFF_FUZZ_STATE") == '1';
  /* The same clock rule and override as the Python harness (ccdiff/clock.py). */
  long long clock_base = CCD_DEFAULT_CLOCK_BASE_US;
  const char *base_text = getenv("CCDIFF_CLOCK_BASE_US");
  if (base_text && *base_text) {
    char *end = NULL;
    clock_base = strtoll(base_text, &end, 10);
    if (*end != '\0' || clock_base <= 0 || clock_base > CCD_MAX_CLOCK_BASE_US) {
      fprintf(stderr, "ccdiff-fuzz: CCDIFF_CLOCK_BASE_US=%s is not an integer in 1..%lld\n", base_text,
              (long long)CCD_MAX_CLOCK_BASE_US);
      exit(2);
    }
  }
  config = (ccd_config){FZ_MAX_DATAGRAM_SIZE, FZ_MAX_ACK_DELAY_US, FZ_INITIAL_RTT_US, opts ? opts : "", clock_base};
  /* Which adapter build this is (tests check quiche's builds keep overflow checks). */
  if (getenv("CCDIFF_FUZZ_DESCRIBE")) fprintf(stderr, "ccdiff-fuzz: adapter: %s\n", ccd_describe());
  if (ccd_abi_version() != CCD_ABI_VERSION) {
    fprintf(stderr, "ccdiff-fuzz: adapter speaks ABI %u, harness %d\n", ccd_abi_version(), CCD_ABI_VERSION);
    exit(2);
  }
  ready = 1;
}

/* One abort site per invariant: honggfuzz deduplicates crashes by stack hash,
 * so each invariant gets its own crash file. */
#define ABORT_SITE(name) \
  static __attribute__((noinline)) void name(void) { \
    abort(); \
  }
ABORT_SITE(abort_numeric_error)
ABORT_SITE(abort_cwnd_below_minimum)
ABORT_SITE(abort_future_recovery_start)
ABORT_SITE(abort_adapter_error)

static int violation(unsigned inv, size_t index, const ccd_event *ev, const char *detail) {
  if (warming) return 1; /* fz_warm_up: not an input of the run */
  /* One parseable line: triage reads the invariant from it. */
  fprintf(stderr, "ccdiff-fuzz: violation %s at event %zu (t=%lld us): %s\n", fz_invariant_name(inv),
          index, (long long)ev->now_us, detail);
  if (no_abort) return 1;
  switch (inv) {
  case FZ_INV_NUMERIC: abort_numeric_error(); break;
  case FZ_INV_CWND_MIN: abort_cwnd_below_minimum(); break;
  case FZ_INV_FUTURE: abort_future_recovery_start(); break;
  default: abort_adapter_error();
  }
  abort();
}

int fz_one_input(const uint8_t *data, size_t len) {
  if (!ready) setup();
  char err[256] = "";
  void *ctl = ccd_open(&config, err, sizeof(err));
  if (!ctl) { /* a bad option: a setup error, not a finding */
    fprintf(stderr, "ccdiff-fuzz: ccd_open: %s\n", err);
    exit(2);
  }
  fz_decode(&trace, data, len);
  fz_ledger_reset(&ledger, config.initial_rtt_us);
  fz_state_reset();
  int result = 0;
  for (size_t i = 0; i < trace.n_ev && !result; i++) {
    ccd_event ev;
    ccd_snapshot snap;
    if (fz_ledger_resolve(&ledger, &trace, i, &ev) < 0) abort(); /* a decoder bug */
    if (ccd_step(ctl, &ev, &snap) < 0) {
      if (enabled & FZ_INV_ADAPTER) result = violation(FZ_INV_ADAPTER, i, &ev, ccd_last_error(ctl));
      break;
    }
    fz_state_step(&ev, &snap);
    char detail[200];
    unsigned inv = fz_check(&ev, &snap, config.max_datagram_size, enabled, detail, sizeof(detail));
    if (inv) result = violation(inv, i, &ev, detail);
  }
  ccd_close(ctl);
  if (print_state && !warming) fz_state_print(stderr);
  return result;
}

int fz_warm_up(const uint8_t *data, size_t len) {
  warming = 1;
  int result = fz_one_input(data, len);
  warming = 0;
  return result;
}

/* honggfuzz (libhfuzz's main, persistent) and libFuzzer-style drivers. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len) {
  fz_one_input(data, len);
  return 0;
}
