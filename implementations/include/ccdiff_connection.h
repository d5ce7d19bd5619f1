/*
 * ccdiff connection contract, ABI version 1.  See docs/connection-mode.md.
 *
 * Connection mode (issue #31) runs one stack's own client and server in one
 * process: real handshake, real packet protection, the stack's own loss
 * detection, PTO, pacing, app-limited logic and congestion controller.  ccdiff
 * only carries the UDP datagrams between the two endpoints through its network
 * simulator (ccdiff/connection/) and advances the clock.  Nothing of ccdiff's
 * recovery logic sits between the stack and the network.
 *
 * A stack's connection shim is a shared library (libccdiff_connection.so)
 * exporting exactly the functions below; a pure-Python stack gives a module
 * with the same calls (docs/connection-mode.md, "Python stacks").
 *
 * Time is virtual, in integer microseconds since the run started.  A shim
 * maps it onto its stack's clock as stack time = CCD_CONN_CLOCK_BASE_US + now
 * (an Instant plus a Duration, nanoseconds, ...), the same rule as the
 * adapter contract, so no stack time is near 0.  A stack that reads its clock
 * itself gets a build-time clock facade that returns the virtual time the
 * shim last set (quiche: implementations/quiche/connection/).
 *
 * The application: the client is the data sender.  It opens one
 * bidirectional stream and writes the scenario's bytes on it; the server
 * reads everything it is given.  The congestion controller judged is the
 * client's.  Flow-control limits are set large enough never to limit the
 * sender (at least 1 GiB per stream and per connection) and the idle timeout
 * long enough never to close a run (at least 600 s).
 */
#ifndef CCDIFF_CONNECTION_H
#define CCDIFF_CONNECTION_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CCD_CONN_ABI_VERSION 1
#define CCD_CONN_CLOCK_BASE_US 259201234567LL
#define CCD_CONN_UNKNOWN UINT64_MAX   /* a stats field the stack does not expose */
#define CCD_CONN_NO_TIMER UINT64_MAX  /* ccd_conn_timeout: no timer armed */

/* The stack's own view of its path, read through its API after every call.
 * Every field is CCD_CONN_UNKNOWN where the stack does not expose it. */
typedef struct {
  uint64_t cwnd;              /* bytes */
  uint64_t bytes_in_flight;   /* bytes */
  uint64_t ssthresh;          /* bytes; CCD_CONN_UNKNOWN when "infinite" or absent */
  uint64_t smoothed_rtt_us;
  uint64_t min_rtt_us;
  uint64_t latest_rtt_us;
  uint64_t packets_sent;      /* cumulative, every packet this endpoint sent */
  uint64_t packets_lost;      /* cumulative, declared lost by this endpoint */
  uint64_t bytes_sent;        /* cumulative UDP payload bytes */
  uint64_t congestion_events; /* cumulative, where the stack counts them */
  uint64_t in_recovery;       /* 1 while the stack is in a recovery period, else 0 */
  uint64_t stream_bytes_read; /* cumulative application bytes read (the server) */
  uint64_t stream_fin_read;   /* 1 once the server read the stream's end */
  uint64_t established;       /* 1 once the handshake is confirmed/complete */
  uint64_t closed;            /* 1 once the connection is closed or draining */
} ccd_conn_stats_t;

/* The ABI version the shim was built for: CCD_CONN_ABI_VERSION. */
uint32_t ccd_conn_abi_version(void);

/* One endpoint.  is_server: 0 client, 1 server.  seed: the run's seed, for
 * everything the stack lets a caller seed (connection IDs, its RNG).
 * options: "key=value;key=value" — every shim accepts
 *   mds=N     the maximum UDP payload (scenario max_datagram_size); path MTU
 *             discovery off, so every full datagram is this size
 *   cert=PATH, key=PATH   the server's certificate and key (PEM)
 *   cc=NAME   cubic (default) or reno, where the stack has both
 * and the stack's own options (listed in its stack.toml [connection]).  An
 * unknown option is refused by name.  On failure returns NULL and writes a
 * one-line reason to err (NUL-terminated, at most err_len bytes). */
void *ccd_conn_new(int is_server, uint64_t now_us, uint64_t seed, const char *options,
                   char *err, size_t err_len);
void ccd_conn_free(void *conn);

/* A datagram from the peer, at now_us.  0, or -1 on a fatal error
 * (ccd_conn_last_error).  A datagram the stack drops is not an error. */
int ccd_conn_recv(void *conn, const uint8_t *data, size_t len, uint64_t now_us);

/* The next datagram the stack would send at now_us: written to buf, its
 * length returned; 0 when it has nothing to send now; -1 on a fatal error.
 * *send_at_us: when the stack wants it on the wire (its pacer); now_us when
 * it does not pace.  The harness keeps datagrams in order and releases each
 * at max(now, send_at). */
int64_t ccd_conn_send(void *conn, uint8_t *buf, size_t cap, uint64_t now_us, uint64_t *send_at_us);

/* The stack's next timer, in absolute virtual microseconds, or CCD_CONN_NO_TIMER. */
uint64_t ccd_conn_timeout(void *conn, uint64_t now_us);
/* The timer fired (the harness calls it at or after ccd_conn_timeout). 0 or -1. */
int ccd_conn_on_timeout(void *conn, uint64_t now_us);

/* The client's application offers `len` more bytes (and the stream's end when
 * fin = 1 and every offered byte was accepted).  Returns the bytes the stack
 * accepted (it may take fewer: flow control, its send buffer), -1 on error.
 * The harness offers the rest again after the next event. */
int64_t ccd_conn_write(void *conn, uint64_t len, int fin, uint64_t now_us);
/* The server's application reads everything readable; returns the bytes read. */
int64_t ccd_conn_read(void *conn, uint64_t now_us);

int ccd_conn_stats(void *conn, ccd_conn_stats_t *out);
/* The last fatal error, one line, or "" (owned by the shim). */
const char *ccd_conn_last_error(void *conn);

#ifdef __cplusplus
}
#endif
#endif
