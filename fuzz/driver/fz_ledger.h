/*
 * The packet ledger and RTT estimator in C: ccdiff/ledger.py's semantics, so
 * the in-process harness hands a stack exactly the ccd_event the Python
 * replay hands it (bytes in flight *before* the event; the RFC 9002 section 5
 * estimator in integer microseconds with floor division).
 */
#ifndef FZ_LEDGER_H
#define FZ_LEDGER_H

#include "ccdiff_adapter.h"
#include "fz_decode.h"

typedef struct fz_ledger {
  /* Packet numbers are dense (the decoder numbers them 0, 1, ...): per-pn arrays. */
  uint8_t *state; /* 0 unknown, 1 in flight, 2 declared lost, 3 done */
  int64_t *sent_us;
  uint8_t *app_limited;
  size_t cap;
  uint64_t bytes_in_flight;
  int has_sample;
  ccd_rtt rtt;
  ccd_packet *packets, *spurious; /* the current event's arrays */
  size_t cap_packets, cap_spurious;
} fz_ledger;

void fz_ledger_init(fz_ledger *lg);
void fz_ledger_free(fz_ledger *lg);
void fz_ledger_reset(fz_ledger *lg, int64_t initial_rtt_us);
/* Resolves tr->ev[i] into *out (valid until the next call); returns 0, or -1
 * if the trace names a packet the ledger does not hold. */
int fz_ledger_resolve(fz_ledger *lg, const fz_trace *tr, size_t i, ccd_event *out);

#endif
