/*
 * The binary fuzz encoding, version 1 (docs/fuzz-encoding.md), in C.
 *
 * fz_decode() turns any byte string into a causally consistent trace, the
 * same one ccdiff/encoding.py produces; fuzz/vectors/ is the contract both
 * must reproduce byte for byte (tests/test_fuzz_driver.py).
 */
#ifndef FZ_DECODE_H
#define FZ_DECODE_H

#include <stddef.h>
#include <stdint.h>

#define FZ_MAX_DATAGRAM_SIZE 1200
#define FZ_BASE_RTT_US 10000
#define FZ_MAX_EVENTS 100000
#define FZ_INITIAL_RTT_US 333000 /* RFC 9002 6.2.2 kInitialRtt, the trace default */
#define FZ_MAX_ACK_DELAY_US 25000 /* RFC 9000 18.2 max_ack_delay default, the trace default */
#define FZ_GRANULARITY_US 1000   /* RFC 9002 6.1.2 kGranularity */
#define FZ_PC_THRESHOLD 3        /* RFC 9002 7.6.1 kPersistentCongestionThreshold */

/* Same numbers as enum ccd_event_kind. */
enum { FZ_SENT = 1, FZ_ACK = 2, FZ_LOST = 3, FZ_PERSISTENT = 4 };

typedef struct fz_event {
  uint8_t kind;
  uint8_t app_limited; /* FZ_SENT */
  uint8_t ecn_ce;      /* FZ_ACK */
  int64_t t;
  uint64_t pn;         /* FZ_SENT */
  int64_t ack_delay;   /* FZ_ACK */
  size_t first_pn;     /* FZ_ACK, FZ_LOST: pns[first_pn .. first_pn + n_pns) */
  uint32_t n_pns;
} fz_event;

typedef struct fz_slot {
  uint64_t pn;
  int64_t sent;
} fz_slot;

/* Owns its buffers; reuse one across inputs (fuzzer persistent mode). */
typedef struct fz_trace {
  fz_event *ev;
  size_t n_ev, cap_ev;
  uint64_t *pns;
  size_t n_pns, cap_pns;
  /* decoder state (docs/fuzz-encoding.md) */
  int64_t now;
  uint64_t next_pn;
  fz_slot *outstanding, *lost; /* ascending pn */
  size_t n_out, cap_out, n_lost, cap_lost;
  /* RFC 9002 5 estimate of the ACKs emitted so far (ccdiff/ledger.py Rtt), for
   * the RFC 9002 7.6.2 check of persistent congestion (ccdiff/reach.py). */
  int has_sample;
  int64_t first_sample_t, smoothed_us, rttvar_us, min_us;
} fz_trace;

void fz_trace_init(fz_trace *tr);
void fz_trace_free(fz_trace *tr);
/* Decodes data into tr (previous contents discarded). */
void fz_decode(fz_trace *tr, const uint8_t *data, size_t len);
/* The canonical JSONL text of ccdiff/trace.py dump_trace(). */
void fz_dump_jsonl(const fz_trace *tr, const char *name, void *file);

#endif
