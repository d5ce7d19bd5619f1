/*
 * ccdiff adapter contract, ABI version 4.  See docs/adapters.md.
 *
 * Every stack adapter is a shared library exporting exactly the functions
 * declared at the end of this file.  The harness (Python, the fuzz drivers)
 * owns everything that is not stack-specific: parsing and decoding the event
 * stream, the packet ledger (which packets are in flight, their sizes and
 * send times), bytes-in-flight accounting and the RFC 9002 section 5 RTT
 * estimator.  It hands the adapter "resolved" events that already carry
 * those facts, so an adapter only translates them into its stack's own
 * controller calls and reads the controller's state back.
 *
 * Time is virtual, in integer microseconds since the start of the trace.
 * Adapters map it onto their stack's monotonic clock as a real application
 * would pass it: a clock counted from boot, never near 0 once a connection
 * exists.  One rule for every stack: stack time = ccd_config.clock_base_us +
 * trace time (quiche: an Instant plus Durations; ngtcp2: nanoseconds;
 * picoquic: microseconds).  Snapshots report times back in trace time, so
 * the base never shows in results (docs/adapters.md, "Clock").
 */
#ifndef CCDIFF_ADAPTER_H
#define CCDIFF_ADAPTER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CCD_ABI_VERSION 4

/* The harness's default clock base: 3 days of uptime plus an odd number of
 * microseconds, so that no stack time is a round number by accident. */
#define CCD_DEFAULT_CLOCK_BASE_US 259201234567LL
/* Ten years of uptime: far below any stack clock's overflow (ngtcp2 counts
 * nanoseconds in a uint64_t: 584 years). */
#define CCD_MAX_CLOCK_BASE_US 315360000000000LL

/* Sentinels for snapshot fields a stack does not have. */
#define CCD_NONE UINT64_MAX      /* ssthresh "infinite" or absent */
#define CCD_NO_TIME INT64_MIN    /* recovery start / epoch start absent */

enum ccd_event_kind {
  CCD_SENT = 1,                  /* one packet sent: packets[0] */
  CCD_ACKED = 2,                 /* one ACK frame: newly acked packets */
  CCD_LOST = 3,                  /* loss detection declared packets lost */
  CCD_PERSISTENT_CONGESTION = 4, /* RFC 9002 7.6: follows a CCD_LOST at the same time */
  /* ABI 3, trace format 2: the application's own events.  No packets; bytes in
   * flight unchanged.  An adapter does what its stack's connection does when
   * a send call finds no application data (CCD_APP_IDLE) and when the
   * application has data again (CCD_APP_DATA), e.g. marking the connection
   * app-limited; a stack whose connection does nothing returns the snapshot.
   * Packets sent between the two carry app_limited = 1. */
  CCD_APP_IDLE = 5,
  CCD_APP_DATA = 6
};

enum ccd_event_flag {
  CCD_FLAG_APP_LIMITED = 1u << 0, /* CCD_SENT: the sender was not cwnd-limited */
  CCD_FLAG_ECN_CE = 1u << 1       /* CCD_ACKED: the ACK reports new ECN-CE marks */
};

enum ccd_phase {
  CCD_PHASE_UNKNOWN = 0,
  CCD_PHASE_SLOW_START = 1,
  CCD_PHASE_CONGESTION_AVOIDANCE = 2,
  CCD_PHASE_RECOVERY = 3,
  CCD_PHASE_APP_LIMITED = 4
};

typedef struct ccd_packet {
  uint64_t pn;          /* packet number */
  int64_t sent_us;      /* virtual time it was sent */
  uint32_t bytes;       /* size on the wire, counted in bytes in flight */
  uint32_t app_limited; /* 1 if it was sent while app-limited */
} ccd_packet;

/* RFC 9002 section 5 estimator state (after this event's sample, if any).
 * Before the first sample: latest = min = 0, smoothed = initial RTT,
 * rttvar = initial RTT / 2. */
typedef struct ccd_rtt {
  int64_t latest_us;
  int64_t smoothed_us;
  int64_t rttvar_us;
  int64_t min_us;
} ccd_rtt;

typedef struct ccd_event {
  uint32_t kind;             /* enum ccd_event_kind */
  uint32_t flags;            /* enum ccd_event_flag */
  int64_t now_us;
  /* Bytes in flight before this event changes it: quiche's convention for
   * the send hook and the ACK hook (recovery.rs), ngtcp2's prior_inflight. */
  uint64_t bytes_in_flight;
  /* CCD_SENT: the one packet sent.  CCD_ACKED: packets newly acknowledged,
   * ascending packet numbers.  CCD_LOST: packets declared lost, ascending.
   * Packets acknowledged after being declared lost are NOT here (see
   * spurious); they left bytes in flight when they were declared lost. */
  const ccd_packet *packets;
  uint32_t n_packets;
  /* CCD_ACKED: packets this ACK acknowledges that were earlier declared
   * lost (a spurious loss, RFC 9438 4.9).  Ascending. */
  uint32_t n_spurious;
  const ccd_packet *spurious;
  int64_t ack_delay_us;      /* CCD_ACKED: the peer's reported ACK delay */
  ccd_rtt rtt;
} ccd_event;

typedef struct ccd_snapshot {
  uint64_t cwnd;             /* bytes */
  uint64_t ssthresh;         /* bytes, CCD_NONE if infinite or absent */
  uint64_t bytes_in_flight;  /* the stack's own count if it keeps one,
                                else the harness's (event value + change) */
  uint32_t phase;            /* enum ccd_phase, as the stack sees itself */
  uint32_t reserved;
  int64_t recovery_start_us; /* start of the current recovery period */
  int64_t epoch_start_us;    /* start of the CUBIC epoch (t = now - epoch) */
  double w_max_bytes;        /* NaN if absent */
  double k_us;               /* NaN if absent */
} ccd_snapshot;

typedef struct ccd_config {
  uint32_t max_datagram_size; /* bytes, from the trace header */
  /* ABI 4: the peer's max_ack_delay transport parameter, microseconds, from
   * the trace header (RFC 9000 18.2: 25 ms when the peer sends none).  A stack
   * whose connection reads it (a PTO, how long lost packets are kept, an
   * ack_delay clamp) takes it from here, never from its own default. */
  uint32_t max_ack_delay_us;
  int64_t initial_rtt_us;     /* from the trace header (RFC 9002: 333 ms) */
  /* Stack options from the SPEC, "key=value,key=value" or "".  An adapter
   * rejects a key or value it does not know, with a message naming it. */
  const char *options;
  /* Stack time of trace time 0, in microseconds of the stack's monotonic
   * clock; 0 < clock_base_us <= CCD_MAX_CLOCK_BASE_US, else ccd_open
   * fails (CCD_DEFAULT_CLOCK_BASE_US unless a run overrides it). */
  int64_t clock_base_us;
} ccd_config;

/* Returns CCD_ABI_VERSION. */
uint32_t ccd_abi_version(void);

/* One line: stack, version and controller, e.g. "quiche 0.26.0 cubic". Also
 * lists the accepted options after a ';'. Static storage. */
const char *ccd_describe(void);

/* A new controller at trace time 0 (stack time clock_base_us).  On error
 * returns NULL and writes a one-line
 * message (NUL-terminated, truncated to err_len) into err. */
void *ccd_open(const ccd_config *cfg, char *err, size_t err_len);

/* Apply one event, then fill *out with the state after it.  Returns 0, or
 * a negative value if the adapter cannot apply the event (message through
 * ccd_last_error). */
int ccd_step(void *ctl, const ccd_event *ev, ccd_snapshot *out);

/* The message of the last failed ccd_step on this controller. */
const char *ccd_last_error(void *ctl);

void ccd_close(void *ctl);

#ifdef __cplusplus
}
#endif
#endif /* CCDIFF_ADAPTER_H */
