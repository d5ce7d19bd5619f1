/*
 * fz_bench: the controller-only bound of fuzzing throughput (bench/bench_fuzz.py speed).
 *
 *   fz_bench SECONDS FILE...
 *
 * Built plainly (no coverage instrumentation, no fuzzer), linked with a stack's
 * ordinary adapter.  It loads the inputs once, then for SECONDS each, prints
 *   harness INPUTS_PER_S EVENTS_PER_S     fz_one_input per input: decode, ledger,
 *                                          ccd_open, steps, checks, ccd_close
 *   controller INPUTS_PER_S EVENTS_PER_S  ccd_open, ccd_step over events resolved
 *                                          beforehand, ccd_close: the bare loop
 * An input is one execution, as under a fuzzer, so INPUTS_PER_S is the most
 * execs/s an engine could reach on these inputs; the gap to it is the engine's
 * own cost (its fork server, signals, pipes, coverage maps) plus instrumentation.
 * Runs with every invariant reported and none aborting (CCDIFF_FUZZ_NO_ABORT=1):
 * a crashing input must not end the bound.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ccdiff_adapter.h"
#include "fz_decode.h"
#include "fz_harness.h"
#include "fz_ledger.h"

typedef struct input {
  unsigned char *data;
  size_t len;
  ccd_event *ev; /* resolved once; packets copied out of the ledger's scratch arrays */
  size_t n_ev;
} input;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static ccd_packet *copy_packets(const ccd_packet *p, uint32_t n) {
  ccd_packet *out = malloc((n ? n : 1) * sizeof(*out));
  if (!out) abort();
  memcpy(out, p, n * sizeof(*out));
  return out;
}

static void resolve_all(input *in, fz_trace *tr, fz_ledger *lg) {
  fz_decode(tr, in->data, in->len);
  fz_ledger_reset(lg, FZ_INITIAL_RTT_US);
  in->ev = malloc((tr->n_ev ? tr->n_ev : 1) * sizeof(ccd_event));
  if (!in->ev) abort();
  in->n_ev = tr->n_ev;
  for (size_t i = 0; i < tr->n_ev; i++) {
    if (fz_ledger_resolve(lg, tr, i, &in->ev[i]) < 0) abort();
    in->ev[i].packets = copy_packets(in->ev[i].packets, in->ev[i].n_packets);
    in->ev[i].spurious = copy_packets(in->ev[i].spurious, in->ev[i].n_spurious);
  }
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: fz_bench SECONDS FILE...\n");
    return 2;
  }
  double seconds = atof(argv[1]);
  size_t n = (size_t)(argc - 2), events = 0;
  input *in = calloc(n, sizeof(*in));
  fz_trace tr;
  fz_ledger lg;
  fz_trace_init(&tr);
  fz_ledger_init(&lg);
  for (size_t i = 0; i < n; i++) {
    FILE *f = fopen(argv[i + 2], "rb");
    if (!f) {
      perror(argv[i + 2]);
      return 2;
    }
    in[i].data = malloc(1 << 20);
    in[i].len = fread(in[i].data, 1, 1 << 20, f);
    fclose(f);
    resolve_all(&in[i], &tr, &lg);
    events += in[i].n_ev;
  }
  /* Violations are reported, not aborted on, and their stderr lines would cost
   * what no fuzzer pays (it stops at them): quiet stderr. */
  setenv("CCDIFF_FUZZ_NO_ABORT", "1", 1);
  if (!freopen("/dev/null", "w", stderr)) return 2;

  size_t rounds = 0;
  double start = now_s();
  do {
    for (size_t i = 0; i < n; i++) fz_one_input(in[i].data, in[i].len);
    rounds++;
  } while (now_s() - start < seconds);
  double took = now_s() - start;
  printf("harness %.0f %.0f\n", rounds * n / took, rounds * events / took);

  const char *opts = getenv("CCDIFF_FUZZ_OPTIONS");
  ccd_config cfg = {FZ_MAX_DATAGRAM_SIZE, FZ_MAX_ACK_DELAY_US, FZ_INITIAL_RTT_US, opts ? opts : "", CCD_DEFAULT_CLOCK_BASE_US};
  char err[256];
  ccd_snapshot snap;
  rounds = 0;
  start = now_s();
  do {
    for (size_t i = 0; i < n; i++) {
      void *ctl = ccd_open(&cfg, err, sizeof(err));
      if (!ctl) return 2;
      for (size_t k = 0; k < in[i].n_ev; k++)
        if (ccd_step(ctl, &in[i].ev[k], &snap) < 0) break;
      ccd_close(ctl);
    }
    rounds++;
  } while (now_s() - start < seconds);
  took = now_s() - start;
  printf("controller %.0f %.0f\n", rounds * n / took, rounds * events / took);
  return 0;
}
